//! Kernel benchmark of products of 9–32 bf16 rows (a decode step of many replies): the tensor-core kernel
//! (mma_few.cu) at each tile count against cuBLAS (block formats dequantised first, as before it), on the
//! Llama-3-8B and the 1.5B matrix shapes, as weight bytes (of the stored format) read per second.
//! Runs on the device (staged by scripts/gpu/stage.sh): `gpu_mma_few [out.json]`. Each sample queues 50
//! products cycling through copies larger than L2; 5 samples per variant, variants interleaved.

use kvad_tensor::cpu::{QMatrix, QType};
use kvad_tensor::cuda::{DevBuf, DevFormat, DevMatrix, Gpu, GpuError, MMA_FEW_TILES};
use std::time::Instant;

const REPEAT: usize = 50;
const SAMPLES: usize = 5;

fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 33) as f32 / (1u64 << 31) as f32 - 0.5) * 0.1
        })
        .collect()
}

fn main() -> Result<(), GpuError> {
    let out = std::env::args().nth(1);
    let g = Gpu::shared(None)?;
    let shapes = [
        ("8b.qkv", 6144usize, 4096usize),
        ("8b.o", 4096, 4096),
        ("8b.gate_up", 28672, 4096),
        ("8b.down", 4096, 14336),
        ("8b.head", 49152, 4096),
        ("1.5b.qkv", 2048, 1536),
        ("1.5b.o", 1536, 1536),
        ("1.5b.gate_up", 17920, 1536),
        ("1.5b.down", 1536, 8960),
        ("1.5b.head", 49152, 1536),
    ];
    let mut results = Vec::new();
    println!("{:<13} {:<5} {:>2} {:<6} {:>9} {:>9} {:>9}", "matrix", "fmt", "B", "kernel", "median", "min", "max");
    for &(name, n, k) in &shapes {
        let host = QMatrix::quantize(QType::BF16, n, k, &data(n * k, n as u64 ^ k as u64)).expect("bf16 matrix");
        let copies = (256 << 20) / (n * k) + 1;
        let bf16: Vec<DevMatrix> = (0..copies).map(|_| DevMatrix::upload(&g, &host, None)).collect::<Result<_, _>>()?;
        drop(host);
        let q8: Vec<DevMatrix> = bf16.iter().map(|m| g.quantize(m, DevFormat::Q8)).collect::<Result<_, _>>()?;
        let q4: Vec<DevMatrix> = bf16.iter().map(|m| g.quantize(m, DevFormat::Q4)).collect::<Result<_, _>>()?;
        let xs: Vec<u16> = data(32 * k, 7).iter().map(|v| half::bf16::from_f32(*v).to_bits()).collect();
        let x = DevBuf::from_slice(&g, &xs)?;
        let y = DevBuf::zeros(&g, 32 * n * 4)?;
        let wtmp = DevBuf::zeros(&g, n * k * 2)?;
        for (fmt, ms) in [("bf16", &bf16), ("q8", &q8), ("q4", &q4)] {
            for b in [9usize, 16, 32] {
                let mut kernels: Vec<(String, Option<usize>)> = vec![("cublas".into(), None)];
                kernels.extend(MMA_FEW_TILES.map(|mt| (format!("mt{mt}"), Some(mt))));
                let mut times = vec![Vec::new(); kernels.len()];
                for _ in 0..SAMPLES {
                    for (i, &(_, mt)) in kernels.iter().enumerate() {
                        g.synchronize()?;
                        let t = Instant::now();
                        for r in 0..REPEAT {
                            let m = &ms[r % ms.len()];
                            // SAFETY: x holds 32 rows of k bf16, y 32 rows of n f32, wtmp n·k bf16.
                            unsafe {
                                match mt {
                                    Some(mt) => g.mma_few_tiles(m, x.ptr(), b, y.ptr(), 0, false, mt)?,
                                    None => g.matmul_blas(m, x.ptr(), b, y.ptr(), 0, false, Some(&wtmp))?,
                                }
                            }
                        }
                        g.synchronize()?;
                        times[i].push(t.elapsed().as_secs_f64());
                    }
                }
                let bytes = (ms[0].bytes() * REPEAT) as f64;
                for (i, (kname, _)) in kernels.iter().enumerate() {
                    let mut tbs: Vec<f64> = times[i].iter().map(|t| bytes / t / 1e12).collect();
                    tbs.sort_by(f64::total_cmp);
                    let med = tbs[tbs.len() / 2];
                    println!(
                        "{name:<13} {fmt:<5} {b:>2} {kname:<6} {med:>6.2} TB/s {:>6.2} {:>6.2}",
                        tbs[0],
                        tbs[tbs.len() - 1]
                    );
                    results.push(format!(
                        "{{\"matrix\":\"{name}\",\"n\":{n},\"k\":{k},\"format\":\"{fmt}\",\"inputs\":{b},\"kernel\":\"{kname}\",\"tb_per_s\":[{}]}}",
                        tbs.iter().map(|v| format!("{v:.4}")).collect::<Vec<_>>().join(",")
                    ));
                }
            }
        }
    }
    if let Some(path) = out {
        let gpu = g.info();
        let json = format!(
            "{{\"device\":\"{}\",\"driver\":\"{}.{}\",\"samples\":[\n{}\n]}}\n",
            gpu.name,
            gpu.driver.0,
            gpu.driver.1,
            results.join(",\n")
        );
        std::fs::write(&path, json).expect("write results");
    }
    Ok(())
}
