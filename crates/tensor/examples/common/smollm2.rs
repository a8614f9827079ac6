//! SmolLM2-135M's weight matrices with deterministic values, shared by the CPU kernel examples so they time the same
//! shapes: per layer the stacked qkv (960×576), o (576×576), stacked gate/up (3072×576) and down (576×1536), 30
//! layers, optionally followed by the tied head (49152×576).
use kvad_tensor::cpu::{QMatrix, QType};

/// Every matrix of a step in format `t`; `head` adds the output head.
pub fn matrices(t: QType, head: bool) -> Vec<QMatrix> {
    (0..30)
        .flat_map(|_| [(960, 576), (576, 576), (3072, 576), (576, 1536)])
        .chain(head.then_some((49152, 576)))
        .map(|(r, c)| {
            let w: Vec<f32> = (0..r * c).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
            QMatrix::quantize(t, r, c, &w).unwrap()
        })
        .collect()
}
