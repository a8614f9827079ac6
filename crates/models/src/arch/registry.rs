//! Every architecture kvad runs, in one table: the names it is known by (HF classes, `model_type`s, GGUF
//! architectures), the backends that run it, and the functions that read its config and build it. The loader,
//! `kvad arch`, the default-backend choice, the Hub search's status and `kvad doctor` all read this table, so adding
//! an architecture is its folder under `arch/` and one line here (and its name in [`ArchKind`]).

pub use super::entry::ArchEntry;
use crate::config::{get, ArchKind, ModelConfig};
use crate::error::ModelError;
use crate::weights::GgufFile;
use serde_json::Value;

/// Every architecture, one line each.
pub static ARCHS: &[&ArchEntry] = &[
    &crate::arch::gpt2::ENTRY,
    &crate::arch::llama::ENTRY,
    &crate::arch::deepseek::ENTRY,
    &crate::arch::qwen3_next::ENTRY,
];

/// Architectures published models use that this build does not implement yet: refused by class name, saying so.
/// (Qwen3.5's image-and-text classes carry a vision tower; their text-only classes run.)
pub const NOT_YET: &[&str] =
    &["Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "Idefics3ForConditionalGeneration"];

/// The entry of a family.
pub fn entry(kind: ArchKind) -> &'static ArchEntry {
    ARCHS.iter().find(|e| e.kind == kind).expect("every ArchKind has a registry line")
}

/// The entry reading this HF class.
pub fn by_hf_class(class: &str) -> Option<&'static ArchEntry> {
    ARCHS.iter().copied().find(|e| e.hf_classes.contains(&class))
}

/// The entry of this HF `model_type`.
pub fn by_model_type(model_type: &str) -> Option<&'static ArchEntry> {
    ARCHS.iter().copied().find(|e| e.model_types.contains(&model_type))
}

/// The entry reading this GGUF architecture.
pub fn by_gguf_arch(arch: &str) -> Option<&'static ArchEntry> {
    ARCHS.iter().copied().find(|e| e.gguf_archs.contains(&arch))
}

/// Every name of a kind across the registry, joined for a refusal's message.
fn all_names(names: impl Fn(&ArchEntry) -> &'static [&'static str]) -> String {
    let v: Vec<&str> = ARCHS.iter().flat_map(|e| names(e).iter().copied()).collect();
    v.join(", ")
}

/// The family a `config.model_type` (what the Hub reports before anything is downloaded) belongs to, when this
/// build implements it.
pub fn arch_of_model_type(model_type: &str) -> Option<ArchKind> {
    by_model_type(model_type).map(|e| e.kind)
}

/// Reads and checks an HF `config.json` (already parsed): the checks every checkpoint takes (one architecture, a
/// dtype that is read, no quantised safetensors), then its family's own. The refusals follow caldrix-models.md.
pub fn config_from_hf(cfg: &Value) -> Result<ModelConfig, ModelError> {
    let archs = match get(cfg, "architectures") {
        Some(Value::Array(a)) => a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect::<Vec<_>>(),
        Some(v) => return Err(ModelError::refused("architectures", v, "expected a list of one class name")),
        None => Vec::new(),
    };
    if archs.len() != 1 {
        return Err(ModelError::refused(
            "architectures",
            format!("{archs:?}"),
            "config.json must declare exactly one architecture",
        ));
    }
    let name = archs[0].clone();
    if NOT_YET.contains(&name.as_str()) {
        return Err(ModelError::refused(
            "architectures",
            &name,
            "this architecture is not implemented in this build yet",
        ));
    }
    let dtype = get(cfg, "torch_dtype").or_else(|| get(cfg, "dtype"));
    if let Some(d) = dtype {
        let s = d.as_str().unwrap_or_default();
        if !matches!(s, "bfloat16" | "float32" | "float16") {
            return Err(ModelError::refused(
                "torch_dtype",
                d,
                "only bfloat16, float32 and float16 checkpoints are read",
            ));
        }
    }
    if get(cfg, "quantization_config").is_some() {
        return Err(ModelError::refused(
            "quantization_config",
            get(cfg, "quantization_config")
                .map(|q| q.get("quant_method").cloned().unwrap_or(Value::Null))
                .unwrap_or_default(),
            "quantised safetensors checkpoints are refused; look for a bf16 or f16 publication",
        ));
    }
    match by_hf_class(&name) {
        Some(entry) => (entry.from_hf)(cfg, &name),
        None => Err(ModelError::refused(
            "architectures",
            &name,
            format!("not a supported architecture ({})", all_names(|e| e.hf_classes)),
        )),
    }
}

/// Reads and checks the model config of a GGUF file, by its `general.architecture`.
pub fn config_from_gguf(g: &GgufFile) -> Result<ModelConfig, ModelError> {
    let arch = g
        .get("general.architecture")
        .and_then(|v| v.as_str())
        .ok_or_else(|| {
            ModelError::refused("general.architecture", "missing", "a GGUF model must name its architecture")
        })?
        .to_string();
    match by_gguf_arch(&arch) {
        Some(entry) => (entry.from_gguf)(g, &arch),
        None => Err(ModelError::refused(
            "general.architecture",
            &arch,
            format!("GGUF files of {} are read", all_names(|e| e.gguf_archs)),
        )),
    }
}

/// Parameters a config implies (for memory accounting and summaries).
pub fn param_count(c: &ModelConfig) -> usize {
    let h = c.hidden;
    let attn = |i: usize| match (&c.mla, &c.delta) {
        (Some(m), _) => {
            let qd = c.n_heads * (m.nope_dim + m.rope_dim);
            let q = m.q_lora_rank.map_or(h * qd, |r| h * r + r * qd);
            let kv = h * (m.kv_lora_rank + m.rope_dim) + m.kv_lora_rank * c.n_heads * (m.nope_dim + m.v_dim);
            q + kv + c.n_heads * m.v_dim * h
        }
        // A delta-net layer: its input projection (q, k, v, z, β, a), its convolution and its output.
        (None, Some(d)) if d.linear[i] => {
            let (kw, vw) = (d.key_width(), d.value_width());
            h * (2 * kw + 2 * vw + 2 * d.v_heads) + d.conv_channels() * d.conv + vw * h
        }
        // Qwen3-Next's full attention: each query head carries its output gate.
        (None, Some(_)) => h * (2 * c.q_dim() + 2 * c.kv_dim()) + c.q_dim() * h,
        (None, None) => h * (c.q_dim() + 2 * c.kv_dim()) + c.q_dim() * h,
    };
    let dense = entry(c.arch).mlp_matrices * h * c.intermediate;
    let mlp = |i: usize| match &c.moe {
        Some(m) if m.sparse[i] => {
            let e = m.routing.n_experts;
            e * h + e * 3 * h * m.expert_ff + 3 * h * m.shared_ff
        }
        _ => dense,
    };
    let head = if c.tie_embeddings { 0 } else { c.vocab_size * h };
    (0..c.n_layers).map(|i| attn(i) + mlp(i)).sum::<usize>() + c.vocab_size * h + head
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_one_line_and_no_name_is_claimed_twice() {
        for kind in [ArchKind::Llama, ArchKind::Gpt2, ArchKind::Deepseek, ArchKind::Qwen3Next] {
            assert_eq!(ARCHS.iter().filter(|e| e.kind == kind).count(), 1, "{kind:?}");
        }
        for names in [
            ARCHS.iter().flat_map(|e| e.hf_classes.iter()).collect::<Vec<_>>(),
            ARCHS.iter().flat_map(|e| e.model_types.iter()).collect(),
            ARCHS.iter().flat_map(|e| e.gguf_archs.iter()).collect(),
        ] {
            let mut sorted = names.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), names.len(), "a name in two lines: {names:?}");
        }
        for class in NOT_YET {
            assert!(by_hf_class(class).is_none(), "{class} is both implemented and not yet");
        }
        assert_eq!(by_model_type("qwen3").map(|e| e.kind), Some(ArchKind::Llama));
        assert_eq!(by_gguf_arch("qwen2").map(|e| e.kind), Some(ArchKind::Llama));
        assert_eq!(by_hf_class("GPT2LMHeadModel").map(|e| e.kind), Some(ArchKind::Gpt2));
        assert!(by_model_type("mamba").is_none());
    }
}
