"""Hybrid linear-attention fixtures: tiny random Qwen3-Next and Qwen3.5 text models made by transformers (gated
delta-net layers beside gated full attention; Qwen3-Next and Qwen3.5-MoE route to experts with a gated shared
expert) and their logits/greedy goldens.

  qwen3-next         transformers 5 spelling: layer_types, rope_parameters with partial_rotary_factor; three
                     delta-net layers then one full-attention layer; 4 value heads over 2 key heads; a dense layer
                     by mlp_only_layers; norm_topk_prob
  qwen3-next-moe     experts in every layer (llama.cpp's qwen3next has no dense layer), smaller weights (a tiny
                     model routed in every layer at 0.3 flips experts at the quantised backends' rounding); its
                     GGUF form, qwen3-next-gguf, is llama.cpp's layout
  qwen3-next-legacy  the published spelling: full_attention_interval, top-level rope_theta and
                     partial_rotary_factor, torch_dtype; alternating layers; decoder_sparse_step 2; no
                     norm_topk_prob; equal key and value heads; a tied head
  qwen3-5            Qwen3_5ForCausalLM: the four plain input projections, a dense MLP in every layer; its GGUF
                     form, qwen3-5-gguf, is llama.cpp's qwen35 layout (value heads tiled)
  qwen3-5-moe        Qwen3_5MoeForCausalLM: experts in every layer, weights always normalised; its GGUF form
                     qwen3-5-moe-gguf (seed 145: with
                     144 a router sat within the kernels' rounding of a tie at one position, and cpu-q8 chose
                     another expert there, which the kernel test cannot tell from a kernel bug)
The prompts are read by transformers' chunked delta rule (no cache); kvad must match it. The goldens are computed
in float64 and written as f32: the chunked form (transformers) and the recurrent one (kvad) round differently in f32,
and at a few ill-conditioned positions each lands up to 1.1e-4 from the exact logits, so two f32 results can differ by
more than the 1e-4 the golden test allows while both are right; against float64 kvad's f32 stays within 6e-5.
Run after models.py (it reuses its helpers).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402
import models  # noqa: E402

torch.set_num_threads(1)

BASE = dict(vocab_size=256, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            rms_norm_eps=1e-5, initializer_range=0.3, bos_token_id=1, eos_token_id=2, max_position_embeddings=256,
            intermediate_size=96, moe_intermediate_size=32, shared_expert_intermediate_size=48,
            linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16, attention_bias=False)


def specs():
    from transformers import (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig, Qwen3_5TextConfig,
                              Qwen3NextConfig, Qwen3NextForCausalLM)
    dense = {k: v for k, v in BASE.items() if k not in ("moe_intermediate_size", "shared_expert_intermediate_size")}
    moe = {k: v for k, v in BASE.items() if k != "intermediate_size"}
    return {
        "qwen3-next": (Qwen3NextConfig, dict(
            BASE, num_hidden_layers=4,
            layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
            linear_num_key_heads=2, linear_num_value_heads=4, num_experts=8, num_experts_per_tok=2,
            norm_topk_prob=True, mlp_only_layers=[1], decoder_sparse_step=1, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}), 141,
            False, Qwen3NextForCausalLM),
        "qwen3-next-moe": (Qwen3NextConfig, dict(
            BASE, initializer_range=0.1, num_hidden_layers=4,
            layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
            linear_num_key_heads=2, linear_num_value_heads=4, num_experts=8, num_experts_per_tok=2,
            norm_topk_prob=True, mlp_only_layers=[], decoder_sparse_step=1, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}), 146,
            False, Qwen3NextForCausalLM),
        "qwen3-next-legacy": (Qwen3NextConfig, dict(
            BASE, num_hidden_layers=4, full_attention_interval=2, linear_num_key_heads=4, linear_num_value_heads=4,
            num_experts=6, num_experts_per_tok=3, norm_topk_prob=False, mlp_only_layers=[], decoder_sparse_step=2,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5}), 142,
            True, Qwen3NextForCausalLM),
        "qwen3-5": (Qwen3_5TextConfig, dict(
            dense, num_hidden_layers=4, layer_types=["linear_attention", "full_attention"] * 2,
            linear_num_key_heads=2, linear_num_value_heads=4, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                             "mrope_section": [2, 1, 1], "mrope_interleaved": True}), 143, False, Qwen3_5ForCausalLM),
        "qwen3-5-moe": (Qwen3_5MoeTextConfig, dict(
            moe, num_hidden_layers=3, layer_types=["linear_attention", "linear_attention", "full_attention"],
            linear_num_key_heads=2, linear_num_value_heads=2, num_experts=8, num_experts_per_tok=3,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}), 145,
            False, Qwen3_5MoeForCausalLM),
    }


def build(name):
    cfg_cls, kw, seed, _, cls = specs()[name]
    torch.manual_seed(seed)
    cfg = cfg_cls(**kw)
    cfg._attn_implementation = "eager"
    model = cls(cfg).float().eval()
    touched = models.add_noise(model, seed)
    g = torch.Generator().manual_seed(seed + 31)
    with torch.no_grad():
        for n, p in model.named_parameters():
            # The decay's rate: random so a port that mixes heads up fails.
            if n.endswith("A_log"):
                p.copy_(torch.log(torch.empty(p.shape).uniform_(0.5, 4.0, generator=g)))
                touched.append(n)
    if cfg.tie_word_embeddings:
        model.tie_weights()
    return model, seed, touched


def published_config(d):
    """The config as Qwen3-Next is published: full_attention_interval instead of layer_types, rope_theta and
    partial_rotary_factor at the top level, torch_dtype."""
    path = os.path.join(d, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    types = cfg.pop("layer_types")
    interval = types.index("full_attention") + 1
    assert all((t == "full_attention") == ((i + 1) % interval == 0) for i, t in enumerate(types)), types
    cfg["full_attention_interval"] = interval
    rp = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rp["rope_theta"]
    cfg["partial_rotary_factor"] = rp["partial_rotary_factor"]
    if "dtype" in cfg:
        cfg["torch_dtype"] = cfg.pop("dtype")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def add_delta_keys(w, arch, cfg):
    """The keys both converters write after the file type, in their order: the delta net's widths, the layer kinds,
    the rotated width, the BOS token. (gguf 0.19 has no writer for the ssm keys yet: written by name, as the
    converter's newer gguf-py names them.)"""
    w.add_uint32(f"{arch}.ssm.conv_kernel", cfg.linear_conv_kernel_dim)
    w.add_uint32(f"{arch}.ssm.state_size", cfg.linear_key_head_dim)
    w.add_uint32(f"{arch}.ssm.group_count", cfg.linear_num_key_heads)
    w.add_uint32(f"{arch}.ssm.time_step_rank", cfg.linear_num_value_heads)
    w.add_uint32(f"{arch}.ssm.inner_size", cfg.linear_value_head_dim * cfg.linear_num_value_heads)
    w.add_array(f"{arch}.attention.recurrent_layers", [t == "linear_attention" for t in cfg.layer_types])
    w.add_uint32(f"{arch}.full_attention_interval", 4)
    w.add_rope_dimension_count(int(cfg.head_dim * cfg.rope_parameters["partial_rotary_factor"]))
    w.add_bos_token_id(cfg.bos_token_id)


def write_qwen3next_gguf(model, path):
    """As llama.cpp's converter (conversion/qwen.py, Qwen3NextModel, with --no-mtp) writes it, checked tensor by
    tensor against that converter's own output for this model (2026-12-06): norms stored as 1 + w (the delta net's
    gated norm as is), A as -exp(A_log), dt_bias as ssm_dt.bias, the convolution squeezed to [channels, taps], the
    grouped in_proj_qkvz split into attn_qkv (all q, all k, all v) and attn_gate (z), in_proj_ba kept as ssm_ba,
    experts stacked, the shared expert and its gate as *_shexp."""
    import gguf
    import numpy as np
    cfg = model.config
    sd = {k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()}
    n, h = cfg.num_hidden_layers, cfg.hidden_size
    nk, nv, dk, dv = (cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                      cfg.linear_value_head_dim)
    w = gguf.GGUFWriter(path, "qwen3next")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(h)
    w.add_block_count(n)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_expert_count(cfg.num_experts)
    w.add_expert_used_count(cfg.num_experts_per_tok)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
    w.add_expert_shared_feed_forward_length(cfg.shared_expert_intermediate_size)
    add_delta_keys(w, "qwen3next", cfg)
    w.add_eos_token_id(cfg.eos_token_id)
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    per = 2 * dk + 2 * (nv // nk) * dv
    for i in range(n):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"] + 1)
        w.add_tensor(f"blk.{i}.post_attention_norm.weight", sd[p + "post_attention_layernorm.weight"] + 1)
        if cfg.layer_types[i] == "linear_attention":
            a = p + "linear_attn."
            w.add_tensor(f"blk.{i}.ssm_a", (-torch.exp(torch.from_numpy(sd[a + "A_log"]))).numpy())
            w.add_tensor(f"blk.{i}.ssm_conv1d.weight", sd[a + "conv1d.weight"].squeeze(1))
            w.add_tensor(f"blk.{i}.ssm_dt.bias", sd[a + "dt_bias"])
            w.add_tensor(f"blk.{i}.ssm_ba.weight", sd[a + "in_proj_ba.weight"])
            qkvz = sd[a + "in_proj_qkvz.weight"].reshape(nk, per, h)
            vg = (nv // nk) * dv
            q, k, v, z = (qkvz[:, :dk], qkvz[:, dk:2 * dk], qkvz[:, 2 * dk:2 * dk + vg], qkvz[:, 2 * dk + vg:])
            w.add_tensor(f"blk.{i}.attn_qkv.weight", np.concatenate([x.reshape(-1, h) for x in (q, k, v)]))
            w.add_tensor(f"blk.{i}.attn_gate.weight", z.reshape(-1, h).copy())
            w.add_tensor(f"blk.{i}.ssm_norm.weight", sd[a + "norm.weight"])
            w.add_tensor(f"blk.{i}.ssm_out.weight", sd[a + "out_proj.weight"])
        else:
            a = p + "self_attn."
            for hf, gg in [("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")]:
                w.add_tensor(f"blk.{i}.{gg}.weight", sd[a + hf + ".weight"])
            w.add_tensor(f"blk.{i}.attn_q_norm.weight", sd[a + "q_norm.weight"] + 1)
            w.add_tensor(f"blk.{i}.attn_k_norm.weight", sd[a + "k_norm.weight"] + 1)
        m = p + "mlp."
        w.add_tensor(f"blk.{i}.ffn_gate_inp.weight", sd[m + "gate.weight"])
        for proj, gg in [("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")]:
            if m + "experts.gate_up_proj" in sd:
                gu = sd[m + "experts.gate_up_proj"]
                ff = cfg.moe_intermediate_size
                stack = {"gate_proj": gu[:, :ff], "up_proj": gu[:, ff:], "down_proj": sd[m + "experts.down_proj"]}[proj]
            else:
                stack = np.stack([sd[f"{m}experts.{e}.{proj}.weight"] for e in range(cfg.num_experts)])
            w.add_tensor(f"blk.{i}.{gg}.weight", np.ascontiguousarray(stack))
        for proj, gg in [("gate_proj", "ffn_gate_shexp"), ("up_proj", "ffn_up_shexp"), ("down_proj", "ffn_down_shexp")]:
            w.add_tensor(f"blk.{i}.{gg}.weight", sd[f"{m}shared_expert.{proj}.weight"])
        w.add_tensor(f"blk.{i}.ffn_gate_inp_shexp.weight", sd[m + "shared_expert_gate.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"] + 1)
    if not cfg.tie_word_embeddings:
        w.add_tensor("output.weight", sd["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tiled(x, axis, nk, nv, hd):
    """llama.cpp's qwen35 order of value heads along `axis`: from grouped by key head ([g][v][hd]) to tiled
    ([v][g][hd]), as the converter's _reorder_v_heads does."""
    import numpy as np
    x = np.moveaxis(x, axis, 0)
    rest = x.shape[1:]
    x = x.reshape(nk, nv // nk, hd, *rest).swapaxes(0, 1).reshape(nv * hd, *rest)
    return np.ascontiguousarray(np.moveaxis(x, 0, axis))


def write_qwen35_gguf(model, path, moe):
    """As llama.cpp's converter (conversion/qwen.py, Qwen3_5TextModel / Qwen3_5MoeTextModel, --no-mtp) writes it,
    checked tensor by tensor against that converter's own output for these models (2026-12-06): Qwen3-Next's norms
    (1 + w), A as -exp(A_log) and the squeezed convolution, the four plain input projections as attn_qkv,
    attn_gate, ssm_beta and ssm_alpha, and where value heads outnumber key heads every value-head tensor (v's rows
    and channels, z, b, a, A, dt_bias, out_proj's columns) in tiled order."""
    import gguf
    import numpy as np
    cfg = model.config
    arch = "qwen35moe" if moe else "qwen35"
    sd = {k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()}
    n, h = cfg.num_hidden_layers, cfg.hidden_size
    nk, nv, dk, dv = (cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                      cfg.linear_value_head_dim)
    re = (lambda x, axis, hd: tiled(x, axis, nk, nv, hd)) if nk != nv else (lambda x, axis, hd: x)
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(n)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(h)
    if not moe:
        w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    rp = cfg.rope_parameters
    w.add_array(f"{arch}.rope.dimension_sections", list(rp.get("mrope_section", [11, 11, 10])) + [0])
    w.add_rope_freq_base(float(rp["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    if moe:
        w.add_expert_count(cfg.num_experts)
        w.add_expert_used_count(cfg.num_experts_per_tok)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if moe:
        w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
        w.add_expert_shared_feed_forward_length(cfg.shared_expert_intermediate_size)
    add_delta_keys(w, arch, cfg)
    w.add_eos_token_id(cfg.eos_token_id)
    w.add_tensor("output.weight", sd["lm_head.weight"])
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(n):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"] + 1)
        if cfg.layer_types[i] == "linear_attention":
            a = p + "linear_attn."
            w.add_tensor(f"blk.{i}.ssm_a", re((-torch.exp(torch.from_numpy(sd[a + "A_log"]))).numpy(), 0, 1))
            conv = sd[a + "conv1d.weight"].squeeze(1)
            w.add_tensor(f"blk.{i}.ssm_conv1d.weight", np.concatenate([conv[:2 * nk * dk], re(conv[2 * nk * dk:], 0, dv)]))
            w.add_tensor(f"blk.{i}.ssm_dt.bias", re(sd[a + "dt_bias"], 0, 1))
            w.add_tensor(f"blk.{i}.ssm_alpha.weight", re(sd[a + "in_proj_a.weight"], 0, 1))
            w.add_tensor(f"blk.{i}.ssm_beta.weight", re(sd[a + "in_proj_b.weight"], 0, 1))
            qkv = sd[a + "in_proj_qkv.weight"]
            w.add_tensor(f"blk.{i}.attn_qkv.weight", np.concatenate([qkv[:2 * nk * dk], re(qkv[2 * nk * dk:], 0, dv)]))
            w.add_tensor(f"blk.{i}.attn_gate.weight", re(sd[a + "in_proj_z.weight"], 0, dv))
            w.add_tensor(f"blk.{i}.ssm_norm.weight", sd[a + "norm.weight"])
            w.add_tensor(f"blk.{i}.ssm_out.weight", re(sd[a + "out_proj.weight"], 1, dv))
        m = p + "mlp."
        if moe:
            w.add_tensor(f"blk.{i}.ffn_gate_inp.weight", sd[m + "gate.weight"])
            gu, ff = sd[m + "experts.gate_up_proj"], cfg.moe_intermediate_size
            w.add_tensor(f"blk.{i}.ffn_gate_exps.weight", np.ascontiguousarray(gu[:, :ff]))
            w.add_tensor(f"blk.{i}.ffn_up_exps.weight", np.ascontiguousarray(gu[:, ff:]))
            w.add_tensor(f"blk.{i}.ffn_down_exps.weight", sd[m + "experts.down_proj"])
            for proj, gg in [("gate_proj", "ffn_gate_shexp"), ("up_proj", "ffn_up_shexp"),
                             ("down_proj", "ffn_down_shexp")]:
                w.add_tensor(f"blk.{i}.{gg}.weight", sd[f"{m}shared_expert.{proj}.weight"])
            w.add_tensor(f"blk.{i}.ffn_gate_inp_shexp.weight", sd[m + "shared_expert_gate.weight"])
        else:
            for proj, gg in [("down_proj", "ffn_down"), ("gate_proj", "ffn_gate"), ("up_proj", "ffn_up")]:
                w.add_tensor(f"blk.{i}.{gg}.weight", sd[m + proj + ".weight"])
        w.add_tensor(f"blk.{i}.post_attention_norm.weight", sd[p + "post_attention_layernorm.weight"] + 1)
        if cfg.layer_types[i] != "linear_attention":
            a = p + "self_attn."
            w.add_tensor(f"blk.{i}.attn_k_norm.weight", sd[a + "k_norm.weight"] + 1)
            for hf, gg in [("k_proj", "attn_k"), ("o_proj", "attn_output")]:
                w.add_tensor(f"blk.{i}.{gg}.weight", sd[a + hf + ".weight"])
            w.add_tensor(f"blk.{i}.attn_q_norm.weight", sd[a + "q_norm.weight"] + 1)
            for hf, gg in [("q_proj", "attn_q"), ("v_proj", "attn_v")]:
                w.add_tensor(f"blk.{i}.{gg}.weight", sd[a + hf + ".weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"] + 1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    from transformers import AutoModelForCausalLM
    only = set(sys.argv[1:])
    for name, (_, _, _, legacy, _) in specs().items():
        if only and name not in only:
            continue
        model, seed, touched = build(name)
        d = os.path.join(common.FIX, "models", name)
        models.save_model(model, d)
        if legacy:
            published_config(d)
        reloaded = models.load_saved(d)
        prompts = models.prompts_for(seed, model.config.vocab_size)
        with torch.no_grad():  # sanity: reload == in-memory
            a = model(input_ids=torch.tensor([prompts[2]])).logits
            b = reloaded(input_ids=torch.tensor([prompts[2]])).logits
            assert torch.allclose(a, b, atol=1e-6), (name, (a - b).abs().max())
        exact = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64, attn_implementation="eager",
                                                     experts_implementation="eager").double().eval()
        cases = models.run_cases(exact, prompts)
        models.write_golden(name, common.rel(d) + "/model.safetensors", cases,
                            {"seed": seed, "noised": len(touched),
                             "reference": "transformers in float64, logits written as f32 (see the script's header)"})
        if name == "qwen3-next-moe":
            dg = os.path.join(common.FIX, "models", "qwen3-next-gguf")
            os.makedirs(dg, exist_ok=True)
            write_qwen3next_gguf(reloaded, os.path.join(dg, "model.gguf"))
            models.write_golden("qwen3-next-gguf", common.rel(dg) + "/model.gguf", cases, {
                "seed": seed, "same_weights_as": name,
                "note": "GGUF in llama.cpp's qwen3next layout written from the safetensors fixture's weights; the "
                        "goldens are that fixture's (the GGUF form must give the same logits)"})
        if name in ("qwen3-5", "qwen3-5-moe"):
            dg = os.path.join(common.FIX, "models", name + "-gguf")
            os.makedirs(dg, exist_ok=True)
            write_qwen35_gguf(reloaded, os.path.join(dg, "model.gguf"), name.endswith("moe"))
            models.write_golden(name + "-gguf", common.rel(dg) + "/model.gguf", cases, {
                "seed": seed, "same_weights_as": name,
                "note": "GGUF in llama.cpp's qwen35 layout (value heads tiled where they outnumber key heads) written "
                        "from the safetensors fixture's weights; the goldens are that fixture's"})
        print(name, [c["greedy"] for c in cases])


if __name__ == "__main__":
    main()
