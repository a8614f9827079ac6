//! Decode attention of one row over SmolLM2-135M's shapes (30 layers, 3 KV heads of 3 query heads, head width 64,
//! an f16 cache), as a decode step runs it: `ops::attend_group` per (layer, KV head), one thread. Prints the median
//! microseconds a step for a few context lengths.
//! `cargo run --release -p kvad-tensor --example attend_group`.
use kvad_tensor::cpu::ops::attend_group;
use std::time::Instant;

fn main() {
    let (layers, kv_heads, group, hd) = (30usize, 3usize, 3usize, 64usize);
    let stride = kv_heads * hd;
    for ctx in [64usize, 176, 512, 2048] {
        let make = |seed: u32| -> Vec<half::f16> {
            (0..ctx * stride)
                .map(|i| half::f16::from_f32(((i as u32).wrapping_mul(seed) % 97) as f32 / 97.0 - 0.5))
                .collect()
        };
        let caches: Vec<(Vec<half::f16>, Vec<half::f16>)> =
            (0..layers as u32).map(|l| (make(31 + l), make(57 + l))).collect();
        let q: Vec<f32> = (0..kv_heads * group * hd).map(|i| (i % 13) as f32 / 13.0 - 0.4).collect();
        let mut out = vec![0f32; kv_heads * group * hd];
        let mut step = || {
            for (k, v) in &caches {
                for h in 0..kv_heads {
                    let (qs, os) = (h * group * hd, (h + 1) * group * hd);
                    attend_group(&q[qs..os], k, v, stride, h * hd, 0..ctx, hd, 0.125, &mut out[qs..os]);
                }
            }
        };
        step();
        let mut times: Vec<f64> = (0..31)
            .map(|_| {
                let s = Instant::now();
                step();
                s.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        times.sort_by(f64::total_cmp);
        println!("context {ctx:5}: {:8.1} µs a step [{:.1}–{:.1}]", times[15], times[0], times[30]);
    }
}
