//! Kernel benchmark of the decode products: the default split kernels (`split-dp4a`) and every block height with
//! f32 and 8-bit activations on the Llama-3-8B matrix shapes, each format, 1 to 8 input rows, as weight bytes read
//! per second (the H200's copy bandwidth is 3.98 TB/s).
//! Runs on the device (staged by scripts/gpu/stage.sh): `gpu_gemv [out.json]`. Each sample is 50 products
//! recorded as one CUDA graph, so launch gaps are not measured; 7 samples per variant, variants interleaved.

use kvad_tensor::cpu::{QMatrix, QType};
use kvad_tensor::cuda::{Act, DevBuf, DevFormat, DevMatrix, GemvKernel, Gpu, GpuError, SPLIT_HEIGHTS};
use std::time::Instant;

const REPEAT: usize = 50;
const SAMPLES: usize = 7;

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
        ("qkv", 6144usize, 4096usize),
        ("o", 4096, 4096),
        ("gate_up", 28672, 4096),
        ("down", 4096, 14336),
        ("head", 49152, 4096),
    ];
    let mut results = Vec::new();
    println!("{:<8} {:<5} {:>2} {:<10} {:>9} {:>9} {:>9}", "matrix", "fmt", "B", "kernel", "median", "min", "max");
    for &(name, n, k) in &shapes {
        let host = QMatrix::quantize(QType::BF16, n, k, &data(n * k, n as u64 ^ k as u64)).expect("bf16 matrix");
        // Enough copies of a matrix that they do not fit in the 50 MB L2 together: the products cycle through
        // them, so every weight byte comes from HBM as in a real decode step.
        let copies = (256 << 20) / (n * k) + 1;
        let bf16: Vec<DevMatrix> = (0..copies).map(|_| DevMatrix::upload(&g, &host, None)).collect::<Result<_, _>>()?;
        drop(host);
        let q8: Vec<DevMatrix> = bf16.iter().map(|m| g.quantize(m, DevFormat::Q8)).collect::<Result<_, _>>()?;
        let q4: Vec<DevMatrix> = bf16.iter().map(|m| g.quantize(m, DevFormat::Q4)).collect::<Result<_, _>>()?;
        let x = DevBuf::from_slice(&g, &data(8 * k, 7))?;
        let y = DevBuf::zeros(&g, 8 * n * 4)?;
        for (fmt, ms) in [("bf16", &bf16), ("q8", &q8), ("q4", &q4)] {
            for b in [1usize, 2, 4, 8] {
                let mut kernels = vec![("split-dp4a".to_string(), GemvKernel::SplitDp4a)];
                kernels.extend(SPLIT_HEIGHTS.map(|r| (format!("split{r}"), GemvKernel::SplitRows(r))));
                if fmt != "bf16" {
                    kernels.extend(SPLIT_HEIGHTS.map(|r| (format!("dp4a{r}"), GemvKernel::Dp4aRows(r))));
                }
                let graphs = kernels
                    .iter()
                    .map(|&(_, kern)| {
                        g.capture(|| {
                            for i in 0..REPEAT {
                                let m = &ms[i % ms.len()];
                                // SAFETY: x holds 8 rows of k, y 8 rows of n.
                                unsafe { g.gemv(kern, m, Act::F32(x.ptr()), b, y.ptr(), 0, false, None) }?;
                            }
                            Ok::<(), GpuError>(())
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let mut times = vec![Vec::new(); kernels.len()];
                for _ in 0..SAMPLES {
                    for (i, gr) in graphs.iter().enumerate() {
                        g.synchronize()?;
                        let t = Instant::now();
                        gr.launch()?;
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
                        "{name:<8} {fmt:<5} {b:>2} {kname:<10} {med:>6.2} TB/s {:>6.2} {:>6.2}",
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
