//! Decode-shaped bandwidth: the matrices of SmolLM2-135M (30 layers of qkv, o, gate_up, down, and the head),
//! each multiplied by one row in turn, as a token does. `cargo run --release -p kvad-tensor --example gemv_model`.
#[path = "common/smollm2.rs"]
mod smollm2;
use kvad_tensor::cpu::{pool, QType};
use std::time::Instant;

fn main() {
    let threads = std::env::args().nth(1).and_then(|s| s.parse().ok());
    let n = pool::init(threads);
    for t in [QType::F32, QType::Q8_0, QType::Q4_0, QType::Q4_1] {
        let mats = smollm2::matrices(t, true);
        let bytes: usize = mats.iter().map(|m| m.bytes().len()).sum();
        let x: Vec<f32> = (0..1536).map(|i| (i % 17) as f32 / 17.0).collect();
        let mut out = vec![0f32; 49152];
        let mut times = Vec::new();
        for _ in 0..20 {
            let s = Instant::now();
            for m in &mats {
                m.matmul(&x[..m.cols()], 1, &mut out[..m.rows()]);
            }
            times.push(s.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let gb = bytes as f64 / 1e9;
        println!(
            "{:5} {n} threads: {:6.2} GB/s median, {:6.2} best; {:.0} MB/token -> {:.1} tok/s",
            t.name(),
            gb / times[10],
            gb / times[0],
            gb * 1e3,
            1.0 / times[10]
        );
    }
}
