//! Prefill's products over SmolLM2-135M's matrices (30 layers of qkv, o, gate_up, down) for a chunk of n prompt
//! rows: the integer pair-product GEMM (`gemm_q`) against the f32 panel GEMM (`gemm`), alternated, median ms of a
//! whole chunk's products and the tok/s that alone would allow.
//! `cargo run --release -p kvad-tensor --example gemm_q -- [threads] [rows, e.g. 64,512] [formats, e.g. Q8_0,Q4_1]`.
#[path = "common/smollm2.rs"]
mod smollm2;
use kvad_tensor::cpu::{gemm, gemm_q, pool, QType};
use std::time::Instant;

fn main() {
    let arg = |i: usize| std::env::args().nth(i);
    let n_threads = pool::init(arg(1).and_then(|s| s.parse().ok()));
    let rows: Vec<usize> =
        arg(2).unwrap_or_else(|| "64,512".into()).split(',').filter_map(|s| s.parse().ok()).collect();
    let formats = arg(3).unwrap_or_else(|| "Q8_0,Q4_0,Q4_1".into());
    for t in [QType::Q8_0, QType::Q4_0, QType::Q4_1] {
        if !formats.split(',').any(|f| f == t.name()) {
            continue;
        }
        let mats = smollm2::matrices(t, false);
        for &n in &rows {
            let x: Vec<f32> = (0..n * 1536).map(|i| ((i * 31) % 17) as f32 / 17.0 - 0.4).collect();
            let mut out = vec![0f32; n * 3072];
            let (mut old, mut new) = (vec![], vec![]);
            for rep in 0..8 {
                for which in 0..2 {
                    let s = Instant::now();
                    for m in &mats {
                        let (xs, os) = (&x[..n * m.cols()], &mut out[..n * m.rows()]);
                        if which == 0 {
                            gemm::gemm(m, xs, n, os)
                        } else {
                            gemm_q::gemm_q(m, xs, n, os)
                        }
                    }
                    let ms = s.elapsed().as_secs_f64() * 1e3;
                    if rep > 0 {
                        if which == 0 {
                            old.push(ms)
                        } else {
                            new.push(ms)
                        }
                    }
                }
            }
            let med = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                (v[v.len() / 2], v[0], v[v.len() - 1])
            };
            let (o, oa, ob) = med(&mut old);
            let (w, wa, wb) = med(&mut new);
            println!(
                "{:5} {n_threads} threads, {n:4} rows: f32 gemm {o:7.1} ms [{oa:.1}-{ob:.1}] ({:6.0} tok/s), i16 gemm_q {w:7.1} ms [{wa:.1}-{wb:.1}] ({:6.0} tok/s), {:.2}x",
                t.name(),
                n as f64 / o * 1e3,
                n as f64 / w * 1e3,
                o / w
            );
        }
    }
}
