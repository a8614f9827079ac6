"""Tiny random-weight models + logits/greedy goldens, and a GGUF of the tiny llama (llama-gguf).

Writes fixtures/models/<name>/{config.json,model.safetensors}, fixtures/models/llama-gguf/model.gguf,
fixtures/goldens/models/<name>.json.  Run after tokenizers_ref.py (llama-gguf embeds the SPM vocab).
"""
import os
import shutil
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402

torch.set_num_threads(1)

COMMON = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=128, rms_norm_eps=1e-5, initializer_range=0.3, bos_token_id=1, eos_token_id=2)
PROMPT_LENS = (5, 11, 19)
NEW_TOKENS = 16


def specs():
    from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig,
                              MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)
    return {
        "llama": (LlamaForCausalLM, LlamaConfig, dict(
            COMMON, vocab_size=512, max_position_embeddings=512, rope_theta=10000.0, tie_word_embeddings=False,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 64}), 101),
        "mistral": (MistralForCausalLM, MistralConfig, dict(
            COMMON, vocab_size=256, max_position_embeddings=128, rope_theta=10000.0, sliding_window=6,
            tie_word_embeddings=False), 102),
        "qwen2": (Qwen2ForCausalLM, Qwen2Config, dict(
            COMMON, vocab_size=256, max_position_embeddings=128, rope_theta=1000000.0, tie_word_embeddings=True,
            use_sliding_window=False), 103),
        "qwen3": (Qwen3ForCausalLM, Qwen3Config, dict(
            COMMON, vocab_size=256, max_position_embeddings=128, rope_theta=1000000.0, head_dim=32,
            tie_word_embeddings=False, use_sliding_window=False, attention_bias=False), 104),
        "gpt2": (GPT2LMHeadModel, GPT2Config, dict(
            vocab_size=512, n_embd=64, n_head=4, n_layer=2, n_positions=128, n_inner=128, initializer_range=0.3,
            layer_norm_epsilon=1e-5, bos_token_id=1, eos_token_id=2, resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0), 105),
        "llama-tied": (LlamaForCausalLM, LlamaConfig, dict(
            COMMON, vocab_size=512, max_position_embeddings=128, rope_theta=10000.0, tie_word_embeddings=True), 106),
    }


def add_noise(model, seed):
    """Norm weights start at 1 and biases at 0: perturb them (seeded) so a port that skips them fails."""
    g = torch.Generator().manual_seed(seed + 7919)
    touched = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            lname = name.lower()
            is_norm = ("norm" in lname or ".ln_" in lname or lname.startswith("ln_") or ".ln_f" in lname)
            if name.endswith("bias"):
                p.add_(0.2 * torch.randn(p.shape, generator=g))
                touched.append(name)
            elif is_norm and name.endswith("weight"):
                p.add_(0.3 * torch.randn(p.shape, generator=g))
                touched.append(name)
    return touched


def build(name):
    cls, cfg_cls, kw, seed = specs()[name]
    torch.manual_seed(seed)
    cfg = cfg_cls(**kw)
    cfg._attn_implementation = "eager"
    model = cls(cfg).float().eval()
    touched = add_noise(model, seed)
    if cfg.tie_word_embeddings if hasattr(cfg, "tie_word_embeddings") else False:
        model.tie_weights()
    return model, seed, touched


def prompts_for(seed, vocab):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, vocab, size=n).tolist() for n in PROMPT_LENS]


@torch.no_grad()
def run_cases(model, prompts):
    cases = []
    for prompt in prompts:
        ids = torch.tensor([prompt])
        logits = model(input_ids=ids).logits[0].float().numpy()
        seq = list(prompt)
        greedy = []
        for _ in range(NEW_TOKENS):  # full re-run each step, no KV cache
            out = model(input_ids=torch.tensor([seq])).logits[0, -1]
            nxt = int(torch.argmax(out).item())
            greedy.append(nxt)
            seq.append(nxt)
        if len(set(greedy)) <= 1:
            print("WARNING: degenerate greedy continuation", greedy)
        cases.append({"prompt": prompt, "greedy": greedy,
                      "logits": [common.f32list(row) for row in logits]})
    return cases


def load_saved(d, dtype=torch.float32):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(d, dtype=dtype, attn_implementation="eager")
    return m.float().eval()


def save_model(model, d, dtype=None):
    if os.path.isdir(d):
        shutil.rmtree(d)
    if dtype is not None:
        model = model.to(dtype)
    model.save_pretrained(d, safe_serialization=True)
    for f in os.listdir(d):
        if f not in ("config.json", "model.safetensors"):
            os.remove(os.path.join(d, f))  # generation_config.json is not needed


LEGACY_CONFIG = ("llama", "qwen2", "qwen2-bf16")


def legacy_config(d):
    """Rewrite config.json the way checkpoints on the Hub spell it (transformers < 5): top-level rope_theta,
    rope_scaling instead of rope_parameters, torch_dtype instead of dtype. transformers 5 reads both."""
    import json
    path = os.path.join(d, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    rp = cfg.pop("rope_parameters", None)
    if rp is not None:
        rp = dict(rp)
        cfg["rope_theta"] = rp.pop("rope_theta")
        cfg["rope_scaling"] = rp if rp.get("rope_type", "default") != "default" else None
    if "dtype" in cfg:
        cfg["torch_dtype"] = cfg.pop("dtype")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def write_golden(name, source_rel, cases, extra=None):
    obj = {"model": name, "source": source_rel, "versions": common.versions(),
           "how": "logits[t] = model(prompt).logits[0, t] for every prompt position (f32, eager attention); "
                  "greedy = 16 argmax steps re-running the full sequence without cache, no EOS stopping"}
    if extra:
        obj.update(extra)
    obj["cases"] = cases
    common.dump_json(common.fix("goldens", "models", f"{name}.json"), obj)


# ------------------------------------------------------------------ GGUF (llama.cpp convert_hf_to_gguf layout)
def permute(w, n_head, n_head_kv):
    """llama.cpp convert_hf_to_gguf LlamaModel.permute (q: n_head, k: n_head_kv)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def write_llama_gguf(model, path, spm_model_path):
    import gguf
    from tokenizers_ref import add_spm_tokenizer_to_writer

    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("kvad-tiny-llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_rope_dimension_count(head_dim)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]) if getattr(cfg, "rope_parameters", None) else float(cfg.rope_theta))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(cfg.vocab_size)
    n_vocab = add_spm_tokenizer_to_writer(w, spm_model_path)
    assert n_vocab == cfg.vocab_size

    sd = {k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()}
    nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"])
        w.add_tensor(f"blk.{i}.attn_q.weight", permute(sd[p + "self_attn.q_proj.weight"], nh, nh))
        w.add_tensor(f"blk.{i}.attn_k.weight", permute(sd[p + "self_attn.k_proj.weight"], nh, nkv))
        w.add_tensor(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        w.add_tensor(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        w.add_tensor(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    # llama-tied's head is tied; we still write `output` (a copy of token_embd) so the GGUF exercises the
    # separate-output path. The real SmolLM2 GGUF exercises the no-`output` (tied) path.
    w.add_tensor("output.weight", sd["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    from transformers import AutoModelForCausalLM

    only = set(sys.argv[1:])
    summary = {}
    for name in specs():
        if only and name not in only:
            continue
        model, seed, touched = build(name)
        d = os.path.join(common.FIX, "models", name)
        save_model(model, d)
        if name in LEGACY_CONFIG:
            legacy_config(d)
        reloaded = load_saved(d)
        prompts = prompts_for(seed, model.config.vocab_size)
        cases = run_cases(reloaded, prompts)
        with torch.no_grad():  # sanity: reload == in-memory
            a = model(input_ids=torch.tensor([prompts[2]])).logits
            b = reloaded(input_ids=torch.tensor([prompts[2]])).logits
            assert torch.allclose(a, b, atol=1e-6), (name, (a - b).abs().max())
        write_golden(name, common.rel(d) + "/model.safetensors", cases,
                     {"seed": seed, "noised_params": len(touched)})
        summary[name] = [c["greedy"] for c in cases]

        if name == "mistral":  # sanity: the window must matter
            cfg2 = reloaded.config.__class__.from_dict(reloaded.config.to_dict())
            cfg2.sliding_window = None
            cfg2._attn_implementation = "eager"
            m2 = type(reloaded)(cfg2).eval()
            m2.load_state_dict(reloaded.state_dict())
            with torch.no_grad():
                l1 = reloaded(input_ids=torch.tensor([prompts[2]])).logits[0]
                l2 = m2(input_ids=torch.tensor([prompts[2]])).logits[0]
            d_early = (l1[:6] - l2[:6]).abs().max().item()
            d_late = (l1[6:] - l2[6:]).abs().max().item()
            print(f"mistral window check: diff first 6 positions {d_early:.2e}, later {d_late:.2e}")
            assert d_early < 1e-5 and d_late > 1e-3

        if name == "llama":  # sanity: the llama3 scaling must matter
            cfg2 = reloaded.config.__class__.from_dict(reloaded.config.to_dict())
            cfg2.rope_scaling = None
            if hasattr(cfg2, "rope_parameters"):
                cfg2.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}
            cfg2._attn_implementation = "eager"
            m2 = type(reloaded)(cfg2).eval()
            m2.load_state_dict(reloaded.state_dict())
            with torch.no_grad():
                l1 = reloaded(input_ids=torch.tensor([prompts[2]])).logits[0]
                l2 = m2(input_ids=torch.tensor([prompts[2]])).logits[0]
            print(f"llama rope-scaling check: diff vs unscaled {(l1 - l2).abs().max().item():.2e}")
            assert (l1 - l2).abs().max().item() > 1e-3

        if name == "qwen2":  # bf16 copy; goldens from the bf16 checkpoint upcast to f32
            d16 = os.path.join(common.FIX, "models", "qwen2-bf16")
            save_model(model, d16, dtype=torch.bfloat16)
            legacy_config(d16)
            m16 = AutoModelForCausalLM.from_pretrained(d16, dtype=torch.bfloat16, attn_implementation="eager")
            m16 = m16.float().eval()
            cases16 = run_cases(m16, prompts)
            write_golden("qwen2-bf16", common.rel(d16) + "/model.safetensors", cases16,
                         {"seed": seed, "note": "weights stored bf16; goldens = bf16 weights upcast to f32, run in f32"})
            summary["qwen2-bf16"] = [c["greedy"] for c in cases16]

        if name == "llama-tied":
            dg = os.path.join(common.FIX, "models", "llama-gguf")
            if os.path.isdir(dg):
                shutil.rmtree(dg)
            os.makedirs(dg)
            gpath = os.path.join(dg, "model.gguf")
            write_llama_gguf(reloaded, gpath, os.path.join(common.FIX, "tokenizers", "spm", "spm.model"))
            mg = AutoModelForCausalLM.from_pretrained(dg, gguf_file="model.gguf", dtype=torch.float32,
                                                      attn_implementation="eager").eval()
            casesg = run_cases(mg, prompts)
            maxdiff = 0.0
            for cg, ct in zip(casesg, cases):
                assert cg["greedy"] == ct["greedy"], ("gguf greedy differs", cg["greedy"], ct["greedy"])
                maxdiff = max(maxdiff, float(np.abs(np.array(cg["logits"]) - np.array(ct["logits"])).max()))
            print(f"llama-gguf vs llama-tied safetensors: max logit diff {maxdiff:.2e}")
            assert maxdiff < 1e-4
            write_golden("llama-gguf", common.rel(gpath), casesg, {
                "seed": seed, "same_weights_as": "llama-tied",
                "max_abs_logit_diff_vs_llama_tied": maxdiff,
                "note": "GGUF written from llama-tied's weights (q/k permuted like convert_hf_to_gguf; `output` "
                        "written explicitly as a copy of token_embd); goldens from transformers loading the GGUF"})
            summary["llama-gguf"] = [c["greedy"] for c in casesg]

    for k, v in summary.items():
        print(k, v)


if __name__ == "__main__":
    main()
