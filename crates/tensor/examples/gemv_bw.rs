//! Bandwidth of the decode kernels: `cargo run --release -p kvad-tensor --example gemv_bw [threads]`.
//! First the machine's own read bandwidth with the same threads (a 1 GiB buffer summed, each thread streaming its
//! own contiguous parts, as the kernels do): the ceiling decode's rooflines divide by. Then a matrix much larger than
//! the caches streamed through `gemv`, GB/s of weights read per format.
use kvad_tensor::cpu::{pool, QMatrix, QType};
use std::time::Instant;

fn main() {
    let threads = std::env::args().nth(1).and_then(|s| s.parse().ok());
    let n = pool::init(threads);
    read_bandwidth(n);
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

/// Plain reads of 1 GiB split into 4 parts a thread (the kernels' task split): median and best of 15 passes.
fn read_bandwidth(n: usize) {
    let len = 1usize << 30;
    let buf: Vec<u64> = (0..len / 8).map(|i| i as u64).collect();
    let parts = n * 4;
    let per = buf.len() / parts;
    let sums: Vec<std::sync::atomic::AtomicU64> = (0..parts).map(|_| Default::default()).collect();
    let mut times = Vec::new();
    for _ in 0..15 {
        let s = Instant::now();
        pool::parallel_for(parts, |t| {
            // Four independent sums, so the adds never wait on each other and the loads stream.
            let mut acc = [0u64; 4];
            for c in buf[t * per..(t + 1) * per].chunks_exact(4) {
                for (a, v) in acc.iter_mut().zip(c) {
                    *a = a.wrapping_add(*v);
                }
            }
            sums[t].fetch_add(acc.iter().fold(0, |a, b| a.wrapping_add(*b)), std::sync::atomic::Ordering::Relaxed);
        });
        times.push(s.elapsed().as_secs_f64());
    }
    std::hint::black_box(&sums);
    times.sort_by(f64::total_cmp);
    let gb = len as f64 / 1e9;
    println!("read  {n} threads: {:6.2} GB/s median, {:6.2} best (1074 MB, plain loads)", gb / times[7], gb / times[0]);
}
