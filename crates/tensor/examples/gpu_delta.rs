//! Kernel benchmark of a gated delta-net layer's kernels between its products (`Gpu::delta_net`) over one prompt
//! of 8 to 8,192 rows at Qwen3-Next's delta-net shape (16 key / 32 value heads of 128, 4 taps): the rule in chunks
//! on the tensor cores (`delta_chunk.cu`) against the recurrence token by token (`delta_rule`), as microseconds a
//! pass. Where they cross is what `DELTA_CHUNK_MIN_ROWS` is read from. Runs on the device (staged by
//! scripts/gpu/stage.sh): `gpu_delta`. 7 samples of 3 passes per variant, variants interleaved.

use kvad_tensor::cuda::{DeltaArgs, DevBuf, Gpu, GpuError, Meta, SlotTable};
use std::time::Instant;

const REPEAT: usize = 3;
const SAMPLES: usize = 7;

fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 33) as f32 / (1u64 << 31) as f32 - 0.5
        })
        .collect()
}

fn main() -> Result<(), GpuError> {
    let g = Gpu::shared(None)?;
    let (kh, nv, dk, dv, taps) = (16usize, 32usize, 128usize, 128usize, 4usize);
    let (kw, vw) = (kh * dk, nv * dv);
    let (ch, w) = (2 * kw + vw, 2 * kw + 2 * vw + 2 * nv);
    let slot = nv * dk * dv + (taps - 1) * ch;
    let max_rows = 8192;
    let proj = DevBuf::from_slice(&g, &data(max_rows * w, 1))?;
    let conv = DevBuf::from_slice(&g, &data(ch * taps, 2))?;
    let neg_a = DevBuf::from_slice(&g, &data(nv, 3).iter().map(|a| -(a * 2.0).exp()).collect::<Vec<_>>())?;
    let dt = DevBuf::from_slice(&g, &data(nv, 4))?;
    let nw = DevBuf::from_slice(&g, &vec![1.0f32; dv])?;
    let slots = DevBuf::from_slice(&g, &vec![0f32; slot])?;
    let ids = DevBuf::from_slice(&g, &[0i32])?;
    let zeros = |n: usize| DevBuf::zeros(&g, n * 4);
    let (mixed, qk, bg, o, out) = (
        zeros(max_rows * ch)?,
        zeros(max_rows * 2 * kw)?,
        zeros(max_rows * 2 * nv)?,
        zeros(max_rows * vw)?,
        zeros(max_rows * vw)?,
    );
    let (wb, pb) = (zeros(max_rows * nv * dk)?, zeros(max_rows * nv * 64)?);
    println!("{:>5} {:<10} {:>10} {:>10} {:>10}", "rows", "rule", "median_us", "min_us", "max_us");
    for rows in [8usize, 16, 32, 64, 256, 1024, 8192] {
        let row_seq = DevBuf::from_slice(&g, &vec![0i32; rows])?;
        let starts = DevBuf::from_slice(&g, &[0i32, rows as i32])?;
        let args = |min_rows: usize| DeltaArgs {
            proj: proj.ptr(),
            mixed: mixed.ptr(),
            qk: qk.ptr(),
            bg: bg.ptr(),
            o: o.ptr(),
            w: wb.ptr(),
            p: pb.ptr(),
            chunk_min_rows: min_rows,
            out: out.ptr(),
            out_bf16: true,
            conv_w: conv.ptr(),
            neg_a: neg_a.ptr(),
            dt_bias: dt.ptr(),
            norm_w: nw.ptr(),
            meta: Meta { row_pos: 0, row_seq: row_seq.ptr(), tables: 0, max_pages: 0 },
            slots: SlotTable {
                base: slots.ptr(),
                slot_floats: slot,
                slots: ids.ptr(),
                n_rec: 1,
                rec: 0,
                seq_start: starts.ptr(),
                seqs: 1,
            },
            rows,
            kh,
            nv,
            dk,
            dv,
            taps,
            eps: 1e-6,
            tiled: false,
        };
        let variants = [("chunked", args(1)), ("recurrence", args(usize::MAX))];
        let mut times = vec![Vec::new(); variants.len()];
        for _ in 0..SAMPLES {
            for (i, (_, a)) in variants.iter().enumerate() {
                g.synchronize()?;
                let t = Instant::now();
                for _ in 0..REPEAT {
                    // SAFETY: every buffer holds max_rows ≥ rows rows of its width; one slot of `slot` floats.
                    unsafe { g.delta_net(a)? };
                }
                g.synchronize()?;
                times[i].push(t.elapsed().as_secs_f64() * 1e6 / REPEAT as f64);
            }
        }
        for ((name, _), t) in variants.iter().zip(&mut times) {
            t.sort_by(f64::total_cmp);
            println!("{rows:>5} {name:<10} {:>10.1} {:>10.1} {:>10.1}", t[SAMPLES / 2], t[0], t[SAMPLES - 1]);
        }
    }
    Ok(())
}
