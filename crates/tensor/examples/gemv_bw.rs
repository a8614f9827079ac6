//! Bandwidth of the decode kernels: `cargo run --release -p kvad-tensor --example gemv_bw [threads]`.
//! Streams a matrix much larger than the caches through `gemv` and prints GB/s of weights read, per format.
use kvad_tensor::cpu::{pool, QMatrix, QType};
use std::time::Instant;

fn main() {
    let threads = std::env::args().nth(1).and_then(|s| s.parse().ok());
    let n = pool::init(threads);
    let (rows, cols) = (16384, 4096);
    let w: Vec<f32> = (0..rows * cols).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
    let x: Vec<f32> = (0..cols).map(|i| (i % 17) as f32 / 17.0).collect();
    for t in [QType::F32, QType::Q8_0, QType::Q4_0, QType::Q4_1] {
        let m = QMatrix::quantize(t, rows, cols, &w).unwrap();
        let mut out = vec![0f32; rows];
        let mut best = f64::MAX;
        let mut times = Vec::new();
        for _ in 0..15 {
            let s = Instant::now();
            m.matmul(&x, 1, &mut out);
            let e = s.elapsed().as_secs_f64();
            times.push(e);
            best = best.min(e);
        }
        times.sort_by(f64::total_cmp);
        let gb = m.bytes().len() as f64 / 1e9;
        println!(
            "{:5} {n} threads: {:6.2} GB/s median, {:6.2} best ({:.0} MB)",
            t.name(),
            gb / times[7],
            gb / best,
            gb * 1e3
        );
    }
}
