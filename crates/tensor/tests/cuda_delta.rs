//! The gated delta-net kernels (`delta.cu`, `delta_chunk.cu`) against the layer written out in f64 here, token by
//! token, as transformers' `Qwen3NextGatedDeltaNet` computes it from its projections: Qwen3-Next's real head widths
//! (128), a batch of prompts and decode rows whose sequences start from a kept state and kept convolution inputs
//! (a conversation resumed), and the state and kept inputs they leave. The prompts run the chunked rule (chunk
//! boundaries inside them), the recurrence, or each as its length picks. Run on the device by
//! `bash scripts/gpu/test.sh`.

use kvad_tensor::cuda::{DeltaArgs, DevBuf, Meta, SlotTable, DELTA_CHUNK_MIN_ROWS};
mod common;
use common::{data, gpu};

struct Shape {
    /// Value heads tiled over the key heads (llama.cpp's qwen35 order).
    tiled: bool,
    kh: usize,
    nv: usize,
    dk: usize,
    dv: usize,
    taps: usize,
}

impl Shape {
    fn kw(&self) -> usize {
        self.kh * self.dk
    }
    fn vw(&self) -> usize {
        self.nv * self.dv
    }
    fn ch(&self) -> usize {
        2 * self.kw() + self.vw()
    }
    fn w(&self) -> usize {
        self.ch() + self.vw() + 2 * self.nv
    }
    fn state(&self) -> usize {
        self.nv * self.dk * self.dv
    }
    fn slot(&self) -> usize {
        self.state() + (self.taps - 1) * self.ch()
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// One sequence's rows `proj` through the layer in f64 from `slot` (state, then kept inputs), which it moves on;
/// returns the gated norm's outputs `[n][vw]`.
#[allow(clippy::too_many_arguments)]
fn reference(
    s: &Shape,
    proj: &[f32],
    conv_w: &[f32],
    neg_a: &[f32],
    dt_bias: &[f32],
    norm_w: &[f32],
    eps: f64,
    slot: &mut [f64],
) -> Vec<f64> {
    let (kw, vw, ch, w, held) = (s.kw(), s.vw(), s.ch(), s.w(), s.taps - 1);
    let n = proj.len() / w;
    let (state, tail) = slot.split_at_mut(s.state());
    let mut out = vec![0f64; n * vw];
    for t in 0..n {
        let row = &proj[t * w..(t + 1) * w];
        // Convolution over the kept inputs and this row, SiLU; the kept inputs move on.
        let mut mixed = vec![0f64; ch];
        for (c, m) in mixed.iter_mut().enumerate() {
            let mut acc = conv_w[c * s.taps + held] as f64 * row[c] as f64;
            for j in 0..held {
                acc += conv_w[c * s.taps + j] as f64 * tail[j * ch + c];
            }
            *m = acc * sigmoid(acc);
        }
        if held > 0 {
            tail.copy_within(ch.., 0);
            for c in 0..ch {
                tail[(held - 1) * ch + c] = row[c] as f64;
            }
        }
        let l2 = |x: &[f64]| 1.0 / (x.iter().map(|v| v * v).sum::<f64>() + 1e-6).sqrt();
        for h in 0..s.nv {
            let key = if s.tiled { h % s.kh } else { h / (s.nv / s.kh) };
            let q = &mixed[key * s.dk..(key + 1) * s.dk];
            let k = &mixed[kw + key * s.dk..kw + (key + 1) * s.dk];
            let (iq, ik) = (l2(q) / (s.dk as f64).sqrt(), l2(k));
            let v = &mixed[2 * kw + h * s.dv..2 * kw + (h + 1) * s.dv];
            let beta = sigmoid(row[ch + vw + h] as f64);
            let a = row[ch + vw + s.nv + h] as f64 + dt_bias[h] as f64;
            let g = neg_a[h] as f64 * if a > 20.0 { a } else { a.exp().ln_1p() };
            let st = &mut state[h * s.dk * s.dv..(h + 1) * s.dk * s.dv];
            st.iter_mut().for_each(|x| *x *= g.exp());
            let mut delta = vec![0f64; s.dv];
            for (i, &ki) in k.iter().enumerate() {
                for (d, x) in delta.iter_mut().zip(&st[i * s.dv..(i + 1) * s.dv]) {
                    *d += ki * ik * x;
                }
            }
            for (d, &vv) in delta.iter_mut().zip(v) {
                *d = beta * (vv - *d);
            }
            let mut o = vec![0f64; s.dv];
            for i in 0..s.dk {
                for c in 0..s.dv {
                    st[i * s.dv + c] += k[i] * ik * delta[c];
                    o[c] += q[i] * iq * st[i * s.dv + c];
                }
            }
            let inv = 1.0 / (o.iter().map(|x| x * x).sum::<f64>() / s.dv as f64 + eps).sqrt();
            for c in 0..s.dv {
                let z = row[ch + h * s.dv + c] as f64;
                out[t * vw + h * s.dv + c] = norm_w[c] as f64 * o[c] * inv * z * sigmoid(z);
            }
        }
    }
    out
}

#[test]
fn delta_net_kernels_equal_the_layer_in_f64_from_kept_state() {
    let Some(g) = gpu() else { return };
    // A prompt of 200 rows (three chunk boundaries, a short last chunk), a decode row, a prompt of 3 rows (fewer
    // than the kept inputs), one of 70; then a decode pass (every sequence one row: the one-kernel step). The
    // prompts' rule three ways: every sequence chunked (a 1-row chunk is mostly padding), as the model runs it
    // (long ones chunked, short ones by the recurrence), every one by the recurrence.
    for counts in [&[200usize, 1, 3, 70][..], &[1, 1, 1, 1]] {
        for min_rows in [1, DELTA_CHUNK_MIN_ROWS, usize::MAX] {
            for tiled in [false, true] {
                check(&g, tiled, counts, min_rows);
            }
        }
    }
}

fn check(g: &std::sync::Arc<kvad_tensor::cuda::Gpu>, tiled: bool, counts: &[usize], min_rows: usize) {
    // Qwen3-Next's delta-net heads (16 key / 32 value heads of 128, cut to 2 / 4 here), 4 taps, four sequences.
    let s = Shape { tiled, kh: 2, nv: 4, dk: 128, dv: 128, taps: 4 };
    let rows: usize = counts.iter().sum();
    let (w, ch, vw) = (s.w(), s.ch(), s.vw());
    let mut proj = data(rows * w, 11);
    // The b/a inputs spread as a real model's: some decay fast, some hardly at all.
    for (r, row) in proj.chunks_mut(w).enumerate() {
        for h in 0..2 * s.nv {
            row[ch + vw + h] *= 4.0 + (r % 3) as f32;
        }
    }
    let conv_w = data(ch * s.taps, 12);
    let neg_a: Vec<f32> = data(s.nv, 13).iter().map(|a| -(a * 2.0).exp()).collect();
    let dt_bias = data(s.nv, 14);
    let norm_w: Vec<f32> = data(s.dv, 15).iter().map(|x| 1.0 + 0.5 * x).collect();
    let eps = 1e-6f32;
    // Each sequence starts from a kept state (slot ids 2, 0, 3, 1 of 4).
    let slot_ids = [2i32, 0, 3, 1];
    let slots_host: Vec<f32> = data(4 * s.slot(), 16).iter().map(|x| 0.3 * x).collect();
    let mut want = Vec::new();
    let mut want_slots = slots_host.iter().map(|&x| x as f64).collect::<Vec<f64>>();
    let mut r0 = 0;
    for (i, &n) in counts.iter().enumerate() {
        let at = slot_ids[i] as usize * s.slot();
        let slot = &mut want_slots[at..at + s.slot()];
        want.extend(reference(&s, &proj[r0 * w..(r0 + n) * w], &conv_w, &neg_a, &dt_bias, &norm_w, eps as f64, slot));
        r0 += n;
    }
    // The pass's metadata: rows' sequences, each sequence's first row, slot ids.
    let row_seq: Vec<i32> = counts.iter().enumerate().flat_map(|(i, &n)| std::iter::repeat_n(i as i32, n)).collect();
    let mut seq_start = vec![0i32];
    for &n in counts {
        seq_start.push(seq_start.last().unwrap() + n as i32);
    }
    let up = |v: &[f32]| DevBuf::from_slice(g, v).unwrap();
    let ints = |v: &[i32]| DevBuf::from_slice(g, v).unwrap();
    let (proj_d, conv_d, a_d, dt_d, nw_d) = (up(&proj), up(&conv_w), up(&neg_a), up(&dt_bias), up(&norm_w));
    let (seq_d, start_d, ids_d) = (ints(&row_seq), ints(&seq_start), ints(&slot_ids));
    let slots_d = up(&slots_host);
    let zeros = |n: usize| DevBuf::zeros(g, n * 4).unwrap();
    let (mixed, qk, bg, o, out) =
        (zeros(rows * ch), zeros(rows * 2 * s.kw()), zeros(rows * 2 * s.nv), zeros(rows * vw), zeros(rows * vw));
    let (wb, pb) = (zeros(rows * s.nv * s.dk), zeros(rows * s.nv * 64));
    let args = DeltaArgs {
        proj: proj_d.ptr(),
        mixed: mixed.ptr(),
        qk: qk.ptr(),
        bg: bg.ptr(),
        o: o.ptr(),
        w: wb.ptr(),
        p: pb.ptr(),
        chunk_min_rows: min_rows,
        out: out.ptr(),
        out_bf16: false,
        conv_w: conv_d.ptr(),
        neg_a: a_d.ptr(),
        dt_bias: dt_d.ptr(),
        norm_w: nw_d.ptr(),
        meta: Meta { row_pos: 0, row_seq: seq_d.ptr(), tables: 0, max_pages: 0 },
        slots: SlotTable {
            base: slots_d.ptr(),
            slot_floats: s.slot(),
            slots: ids_d.ptr(),
            n_rec: 1,
            rec: 0,
            seq_start: start_d.ptr(),
            seqs: counts.len(),
        },
        rows,
        kh: s.kh,
        nv: s.nv,
        dk: s.dk,
        dv: s.dv,
        taps: s.taps,
        eps,
        tiled,
    };
    // SAFETY: every buffer above holds what DeltaArgs says for these rows and slots.
    let (got, got_slots): (Vec<f32>, Vec<f32>) = unsafe {
        g.delta_net(&args).unwrap();
        (out.read(g, rows * vw).unwrap(), slots_d.read(g, 4 * s.slot()).unwrap())
    };
    let worst = |a: &[f32], b: &[f64]| a.iter().zip(b).map(|(x, y)| (*x as f64 - y).abs()).fold(0f64, f64::max);
    let scale = |b: &[f64]| b.iter().fold(0f64, |m, y| m.max(y.abs()));
    let (d_out, d_state) = (worst(&got, &want), worst(&got_slots, &want_slots));
    eprintln!(
        "delta net ({counts:?} rows, chunked from {min_rows} rows, tiled {tiled}): outputs within {d_out:.2e} (largest {:.2}), states and kept inputs within {d_state:.2e} (largest {:.2})",
        scale(&want),
        scale(&want_slots)
    );
    // f32 arithmetic over 128-wide sums and 200 steps (the chunked form's products split into two TF32 parts each,
    // f32's precision): a few units of f32's last place of the largest values.
    assert!(d_out <= 2e-4 * scale(&want), "outputs {d_out}");
    assert!(d_state <= 2e-5 * scale(&want_slots).max(1.0), "states {d_state}");
}
