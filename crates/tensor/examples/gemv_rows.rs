//! A decode step of n replies over SmolLM2-135M's matrices (30 layers of qkv, o, gate_up, down, and the head): one
//! `matmul` of n rows per matrix (the few-row GEMV for 2–8, the panel GEMM above) against n one-row GEMVs, as the
//! scheduler would run them without a shared pass. Prints median milliseconds a step and the ratio.
//! `cargo run --release -p kvad-tensor --example gemv_rows -- [threads] [formats, e.g. Q8_0,Q4_1]`.
#[path = "common/smollm2.rs"]
mod smollm2;
use kvad_tensor::cpu::{gemv_rows, gemv_rows8, pool, QType};
use std::time::Instant;

fn median_ms(mut f: impl FnMut()) -> f64 {
    f();
    let mut times: Vec<f64> = (0..15)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() {
    let threads = std::env::args().nth(1).and_then(|s| s.parse().ok());
    let formats = std::env::args().nth(2).unwrap_or_else(|| "Q8_0,Q4_0,Q4_1,F32".into());
    let n_threads = pool::init(threads);
    for t in [QType::Q8_0, QType::Q4_0, QType::Q4_1, QType::F32] {
        if !formats.split(',').any(|f| f == t.name()) {
            continue;
        }
        let mats = smollm2::matrices(t, true);
        let x: Vec<f32> = (0..64 * 1536).map(|i| (i % 17) as f32 / 17.0 - 0.4).collect();
        let mut out = vec![0f32; 64 * 49152];
        let one = median_ms(|| {
            for m in &mats {
                m.matmul(&x[..m.cols()], 1, &mut out[..m.rows()]);
            }
        });
        println!("{:5} {n_threads} threads: one row {one:6.2} ms a step", t.name());
        for n in [2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64] {
            // As a decode step of n replies runs it (8-bit activations on AVX-VNNI).
            let shared = median_ms(|| {
                gemv_rows8::decode_step(true, || {
                    for m in &mats {
                        m.matmul(&x[..n * m.cols()], n, &mut out[..n * m.rows()]);
                    }
                })
            });
            // The i16 kernel (bit for bit the one-row GEMV) beside the pass `matmul` takes (8-bit on AVX-VNNI); past
            // its 8 rows, as passes of up to 8 rows each (what a prompt's rows would cost split that way).
            let i16_pass = (t != QType::F32).then(|| {
                median_ms(|| {
                    for m in &mats {
                        let (k, r) = (m.cols(), m.rows());
                        let mut i = 0;
                        while i < n {
                            let c = (n - i).min(gemv_rows::MAX_ROWS);
                            gemv_rows::gemv_rows16(m, &x[i * k..(i + c) * k], c, &mut out[i * r..(i + c) * r]);
                            i += c;
                        }
                    }
                })
            });
            println!(
                "      {n:2} rows: one pass {shared:6.2} ms ({:4.2}x one row){}, {n} one-row passes {:6.2} ms",
                shared / one,
                i16_pass.map_or(String::new(), |v| format!(", i16 kernel {v:6.2} ms")),
                one * n as f64
            );
        }
    }
}
