"""Mixture-of-experts and latent-attention fixtures: tiny random Qwen3-MoE, DeepSeek-V2 and DeepSeek-V3 models made by
transformers, their logits/greedy goldens, their GGUF forms in llama.cpp's layout (`qwen3moe`, `deepseek2`), and
the routing functions alone on random scores with ties (fixtures/goldens/routing.json).

Every routing option of issue 34 is exercised by one fixture at least:
  qwen3-moe            softmax, top-k, norm_topk_prob, mlp_only_layers                (published config spelling)
  qwen3-moe-step       decoder_sparse_step 2, no norm_topk_prob, tied head           (transformers 5 spelling)
  deepseek-v2-lite     no q_lora_rank, greedy, 2 shared experts, a dense first layer, YaRN mscale = mscale_all_dim
  deepseek-v2          q_lora_rank, group_limited_greedy, routed_scaling_factor, moe_layer_freq 2, YaRN mscale != all
  deepseek-v3          sigmoid + e_score_correction_bias, groups by top-2 sum, normalised * scaling, interleaved
                       rope, a dense first layer, a multi-token-prediction layer in the checkpoint (skipped)
  deepseek-v3-half     rope_interleave false (rotate-half), one group, no normalisation, default rope
Run after models.py (it reuses its helpers).
"""
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402
import models  # noqa: E402

torch.set_num_threads(1)

BASE = dict(vocab_size=256, hidden_size=64, num_attention_heads=4, rms_norm_eps=1e-5, initializer_range=0.3,
            bos_token_id=1, eos_token_id=2, max_position_embeddings=256)
MLA = dict(kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, num_key_value_heads=4,
           intermediate_size=96, moe_intermediate_size=32, attention_bias=False)


def yarn(factor, mscale, mscale_all_dim, theta=10000.0):
    return {"rope_type": "yarn", "rope_theta": theta, "factor": factor, "original_max_position_embeddings": 32,
            "beta_fast": 32, "beta_slow": 1, "mscale": mscale, "mscale_all_dim": mscale_all_dim}


def specs():
    from transformers import (DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM,
                              Qwen3MoeConfig, Qwen3MoeForCausalLM)
    q = dict(BASE, num_key_value_heads=2, head_dim=32, intermediate_size=128, moe_intermediate_size=32,
             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, attention_bias=False,
             use_sliding_window=False)
    return {
        "qwen3-moe": (Qwen3MoeForCausalLM, Qwen3MoeConfig, dict(
            q, num_hidden_layers=3, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, mlp_only_layers=[1],
            decoder_sparse_step=1, tie_word_embeddings=False), 111, {}),
        "qwen3-moe-step": (Qwen3MoeForCausalLM, Qwen3MoeConfig, dict(
            q, num_hidden_layers=4, num_experts=6, num_experts_per_tok=3, norm_topk_prob=False, mlp_only_layers=[],
            decoder_sparse_step=2, tie_word_embeddings=True), 112, {}),
        "deepseek-v2-lite": (DeepseekV2ForCausalLM, DeepseekV2Config, dict(
            BASE, **MLA, num_hidden_layers=3, q_lora_rank=None, n_routed_experts=8, n_shared_experts=2,
            num_experts_per_tok=2, first_k_dense_replace=1, topk_method="greedy", routed_scaling_factor=1.0,
            rope_parameters=yarn(4.0, 0.707, 0.707), tie_word_embeddings=False), 121, {}),
        "deepseek-v2": (DeepseekV2ForCausalLM, DeepseekV2Config, dict(
            BASE, **MLA, num_hidden_layers=4, q_lora_rank=24, n_routed_experts=8, n_shared_experts=1,
            num_experts_per_tok=3, first_k_dense_replace=1, topk_method="group_limited_greedy", n_group=4,
            topk_group=2, routed_scaling_factor=2.0, rope_parameters=yarn(4.0, 1.0, 0.5),
            tie_word_embeddings=False), 122, {"moe_layer_freq": 2}),
        "deepseek-v3": (DeepseekV3ForCausalLM, DeepseekV3Config, dict(
            BASE, **MLA, num_hidden_layers=3, q_lora_rank=24, n_routed_experts=16, n_shared_experts=1,
            num_experts_per_tok=4, first_k_dense_replace=1, n_group=4, topk_group=2, norm_topk_prob=True,
            routed_scaling_factor=2.5, rope_interleave=True, rope_parameters=yarn(4.0, 1.0, 1.0),
            tie_word_embeddings=False), 131, {"mtp": True}),
        "deepseek-v3-half": (DeepseekV3ForCausalLM, DeepseekV3Config, dict(
            BASE, **MLA, num_hidden_layers=2, q_lora_rank=None, n_routed_experts=8, n_shared_experts=1,
            num_experts_per_tok=2, first_k_dense_replace=0, n_group=1, topk_group=1, norm_topk_prob=False,
            routed_scaling_factor=1.0, rope_interleave=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, tie_word_embeddings=False), 132, {}),
    }


LEGACY = ("qwen3-moe", "deepseek-v2-lite", "deepseek-v3")


def build(name):
    cls, cfg_cls, kw, seed, extra = specs()[name]
    torch.manual_seed(seed)
    cfg = cfg_cls(**kw)
    cfg._attn_implementation = "eager"
    model = cls(cfg).float().eval()
    touched = models.add_noise(model, seed)
    g = torch.Generator().manual_seed(seed + 17)
    with torch.no_grad():
        for mod_name, buf in model.named_buffers():
            if mod_name.endswith("e_score_correction_bias"):
                # The bias only chooses experts; a zero bias would let a port that ignores it pass.
                buf.copy_(0.5 * torch.randn(buf.shape, generator=g))
                touched.append(mod_name)
    freq = extra.get("moe_layer_freq")
    if freq:
        # DeepSeek's own code makes layer i sparse when i >= first_k_dense_replace and i % moe_layer_freq == 0;
        # transformers ignores the key, so the reference swaps the other layers' MoE for the dense MLP it builds.
        mlp_cls = type(model.model.layers[0].mlp)
        for i, layer in enumerate(model.model.layers):
            if i >= cfg.first_k_dense_replace and i % freq != 0:
                torch.manual_seed(seed * 100 + i)
                layer.mlp = mlp_cls(cfg).float()
                models.add_noise(layer.mlp, seed + i)
    if getattr(cfg, "tie_word_embeddings", False):
        model.tie_weights()
    return model, seed, touched, extra


def finish_config(d, name, extra):
    path = os.path.join(d, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    if "moe_layer_freq" in extra:
        cfg["moe_layer_freq"] = extra["moe_layer_freq"]
    if name.startswith("deepseek-v3"):
        cfg["topk_method"] = "noaux_tc"  # as published; transformers' DeepseekV3 implies it
        cfg["scoring_func"] = "sigmoid"
    if extra.get("mtp"):
        cfg["num_nextn_predict_layers"] = 1
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    if name in LEGACY:
        models.legacy_config(d)


def add_mtp_layer(d, model):
    """A multi-token-prediction layer as DeepSeek-V3 publishes it: `model.layers.<n>.*` past the last layer, with
    its own projections. Inference skips it; transformers ignores it on load."""
    path = os.path.join(d, "model.safetensors")
    sd = load_file(path)
    n = model.config.num_hidden_layers
    g = torch.Generator().manual_seed(4242)
    h = model.config.hidden_size
    for k in [k for k in sd if k.startswith(f"model.layers.{n - 1}.")]:
        sd[k.replace(f"model.layers.{n - 1}.", f"model.layers.{n}.")] = sd[k].clone()
    sd[f"model.layers.{n}.eh_proj.weight"] = torch.randn((h, 2 * h), generator=g)
    sd[f"model.layers.{n}.enorm.weight"] = torch.ones(h)
    sd[f"model.layers.{n}.hnorm.weight"] = torch.ones(h)
    sd[f"model.layers.{n}.shared_head.norm.weight"] = torch.ones(h)
    save_file(sd, path, metadata={"format": "pt"})


# ------------------------------------------------------------------ GGUF in llama.cpp's layout
def gguf_common(w, cfg, n_layers):
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(n_layers)
    w.add_head_count(cfg.num_attention_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_bos_token_id(cfg.bos_token_id)
    w.add_eos_token_id(cfg.eos_token_id)


def saved_tensors(gguf_path):
    """The safetensors fixture's tensors (as published: one tensor per expert), beside which the GGUF is written."""
    d = os.path.join(os.path.dirname(os.path.dirname(gguf_path)), os.path.basename(os.path.dirname(gguf_path))[:-5])
    return {k: v.float().numpy().copy() for k, v in load_file(os.path.join(d, "model.safetensors")).items()}


def expert_stack(sd, p, proj, n):
    return np.stack([sd[f"{p}mlp.experts.{e}.{proj}.weight"] for e in range(n)])


def write_qwen3moe_gguf(model, path):
    """As convert_hf_to_gguf's Qwen3MoeModel writes it: experts stacked into [E, out, in] tensors."""
    import gguf
    cfg = model.config
    sd = saved_tensors(path)
    w = gguf.GGUFWriter(path, "qwen3moe")
    gguf_common(w, cfg, cfg.num_hidden_layers)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
    w.add_expert_count(cfg.num_experts)
    w.add_expert_used_count(cfg.num_experts_per_tok)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        for hf, gg in [("input_layernorm", "attn_norm"), ("self_attn.q_proj", "attn_q"), ("self_attn.k_proj", "attn_k"),
                       ("self_attn.v_proj", "attn_v"), ("self_attn.o_proj", "attn_output"),
                       ("self_attn.q_norm", "attn_q_norm"), ("self_attn.k_norm", "attn_k_norm"),
                       ("post_attention_layernorm", "ffn_norm")]:
            w.add_tensor(f"blk.{i}.{gg}.weight", sd[p + hf + ".weight"])
        if p + "mlp.gate.weight" in sd:
            w.add_tensor(f"blk.{i}.ffn_gate_inp.weight", sd[p + "mlp.gate.weight"])
            for proj, gg in [("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")]:
                w.add_tensor(f"blk.{i}.{gg}.weight", expert_stack(sd, p, proj, cfg.num_experts))
        else:
            for proj, gg in [("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")]:
                w.add_tensor(f"blk.{i}.{gg}.weight", sd[f"{p}mlp.{proj}.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    if not cfg.tie_word_embeddings:
        w.add_tensor("output.weight", sd["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_deepseek2_gguf(model, path, v3):
    """As convert_hf_to_gguf's DeepseekV2Model writes it: MQA metadata (one KV head of kv_lora_rank + rope), experts
    stacked, kv_b_proj split into k_b (transposed, [heads, kv_lora, nope]) and v_b ([heads, v, kv_lora])."""
    import gguf
    cfg = model.config
    sd = saved_tensors(path)
    n, nope, rope, vd, r = (cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim,
                            cfg.kv_lora_rank)
    w = gguf.GGUFWriter(path, "deepseek2")
    gguf_common(w, cfg, cfg.num_hidden_layers)
    w.add_head_count_kv(1)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_leading_dense_block_count(cfg.first_k_dense_replace)
    if cfg.q_lora_rank is not None:
        w.add_q_lora_rank(cfg.q_lora_rank)
    w.add_kv_lora_rank(r)
    w.add_key_length(r + rope)
    w.add_value_length(r)
    w.add_key_length_mla(nope + rope)
    w.add_value_length_mla(vd)
    w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
    w.add_expert_count(cfg.n_routed_experts)
    w.add_expert_used_count(cfg.num_experts_per_tok)
    w.add_expert_shared_count(cfg.n_shared_experts)
    w.add_expert_weights_scale(cfg.routed_scaling_factor)
    if getattr(cfg, "norm_topk_prob", False):
        w.add_expert_weights_norm(True)
    if cfg.n_group is not None:
        w.add_expert_group_count(cfg.n_group)
        w.add_expert_group_used_count(cfg.topk_group)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID if v3 else gguf.ExpertGatingFuncType.SOFTMAX)
    w.add_rope_dimension_count(rope)
    rp = cfg.rope_parameters
    w.add_rope_freq_base(float(rp["rope_theta"]))
    if rp.get("rope_type") == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rp["factor"])
        w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
        w.add_rope_scaling_yarn_beta_fast(rp["beta_fast"])
        w.add_rope_scaling_yarn_beta_slow(rp["beta_slow"])
        w.add_rope_scaling_yarn_log_mul(0.1 * rp["mscale_all_dim"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        names = [("input_layernorm", "attn_norm"), ("self_attn.kv_a_proj_with_mqa", "attn_kv_a_mqa"),
                 ("self_attn.kv_a_layernorm", "attn_kv_a_norm"), ("self_attn.o_proj", "attn_output"),
                 ("post_attention_layernorm", "ffn_norm")]
        if cfg.q_lora_rank is None:
            names.append(("self_attn.q_proj", "attn_q"))
        else:
            names += [("self_attn.q_a_proj", "attn_q_a"), ("self_attn.q_a_layernorm", "attn_q_a_norm"),
                      ("self_attn.q_b_proj", "attn_q_b")]
        for hf, gg in names:
            w.add_tensor(f"blk.{i}.{gg}.weight", sd[p + hf + ".weight"])
        kv_b = sd[p + "self_attn.kv_b_proj.weight"].reshape(n, nope + vd, r)
        w.add_tensor(f"blk.{i}.attn_k_b.weight", np.ascontiguousarray(kv_b[:, :nope, :].transpose(0, 2, 1)))
        w.add_tensor(f"blk.{i}.attn_v_b.weight", np.ascontiguousarray(kv_b[:, nope:, :]))
        if p + "mlp.gate.weight" in sd:
            w.add_tensor(f"blk.{i}.ffn_gate_inp.weight", sd[p + "mlp.gate.weight"])
            if p + "mlp.gate.e_score_correction_bias" in sd:
                w.add_tensor(f"blk.{i}.exp_probs_b.bias", sd[p + "mlp.gate.e_score_correction_bias"])
            for proj, gg in [("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")]:
                w.add_tensor(f"blk.{i}.{gg}.weight", expert_stack(sd, p, proj, cfg.n_routed_experts))
            for proj, gg in [("gate_proj", "ffn_gate_shexp"), ("up_proj", "ffn_up_shexp"),
                             ("down_proj", "ffn_down_shexp")]:
                w.add_tensor(f"blk.{i}.{gg}.weight", sd[f"{p}mlp.shared_experts.{proj}.weight"])
        else:
            for proj, gg in [("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")]:
                w.add_tensor(f"blk.{i}.{gg}.weight", sd[f"{p}mlp.{proj}.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.add_tensor("output.weight", sd["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


GGUF_FORMS = {"qwen3-moe": "qwen3moe", "deepseek-v2-lite": "deepseek2", "deepseek-v3": "deepseek2"}


# ------------------------------------------------------------------ routing alone
@torch.no_grad()
def routing_golden():
    """Each router of transformers fed its logits directly (the hidden state is the logits, the weight the identity),
    on random scores of which half the rows are rounded to eighths, so ties are common, at and inside the top k."""
    from transformers import DeepseekV2Config, DeepseekV3Config, Qwen3MoeConfig
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2TopkRouter
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

    e = 16
    small = dict(hidden_size=e, num_attention_heads=1, vocab_size=8)
    options = {
        "softmax_top4_norm": (Qwen3MoeTopKRouter, Qwen3MoeConfig(**small, num_experts=e, num_experts_per_tok=4,
                                                                norm_topk_prob=True), None),
        "softmax_top4": (Qwen3MoeTopKRouter, Qwen3MoeConfig(**small, num_experts=e, num_experts_per_tok=4,
                                                           norm_topk_prob=False), None),
        "softmax_greedy_scaled": (DeepseekV2TopkRouter, DeepseekV2Config(
            **small, n_routed_experts=e, num_experts_per_tok=3, topk_method="greedy", routed_scaling_factor=1.5),
            None),
        "softmax_group_limited": (DeepseekV2TopkRouter, DeepseekV2Config(
            **small, n_routed_experts=e, num_experts_per_tok=3, topk_method="group_limited_greedy", n_group=4,
            topk_group=2, routed_scaling_factor=2.0), None),
        "sigmoid_noaux_groups": (DeepseekV3TopkRouter, DeepseekV3Config(
            **small, n_routed_experts=e, num_experts_per_tok=4, n_group=4, topk_group=2, norm_topk_prob=True,
            routed_scaling_factor=2.5), "bias"),
        "sigmoid_noaux_plain": (DeepseekV3TopkRouter, DeepseekV3Config(
            **small, n_routed_experts=e, num_experts_per_tok=2, n_group=1, topk_group=1, norm_topk_prob=False,
            routed_scaling_factor=1.0), "bias"),
    }
    rng = np.random.default_rng(34)
    out = {"versions": common.versions("torch", "transformers"),
           "how": "router(logits) with an identity weight; chosen experts sorted by index with their weights",
           "cases": []}
    for name, (router_cls, cfg, bias) in options.items():
        router = router_cls(cfg).float().eval()
        router.weight.copy_(torch.eye(e))
        b = np.zeros(e, dtype=np.float32)
        if bias:
            b = (rng.standard_normal(e) * 0.25).astype(np.float32)
            b[3] = b[5]  # a tie in the bias too
            router.e_score_correction_bias.copy_(torch.from_numpy(b))
        logits = rng.standard_normal((40, e)).astype(np.float32) * 2
        logits[::2] = np.round(logits[::2] * 4) / 4  # ties
        logits[1] = 0.0  # every score equal
        res = router(torch.from_numpy(logits))
        weights, idx = res[1].numpy(), res[2].numpy()
        rows = []
        for t in range(logits.shape[0]):
            order = np.argsort(idx[t], kind="stable")
            rows.append({"logits": common.f32list(logits[t]), "experts": idx[t][order].tolist(),
                         "weights": common.f32list(weights[t][order])})
        cfgd = {"experts": e, "top_k": cfg.num_experts_per_tok,
                "n_group": getattr(cfg, "n_group", None), "topk_group": getattr(cfg, "topk_group", None),
                "norm_topk_prob": getattr(cfg, "norm_topk_prob", None),
                "routed_scaling_factor": getattr(cfg, "routed_scaling_factor", 1.0),
                "topk_method": getattr(cfg, "topk_method", None), "bias": common.f32list(b) if bias else None}
        out["cases"].append({"option": name, "router": router_cls.__name__, "config": cfgd, "rows": rows})
    common.dump_json(common.fix("goldens", "routing.json"), out)


def main():
    only = set(sys.argv[1:])
    summary = {}
    for name in specs():
        if only and name not in only:
            continue
        model, seed, touched, extra = build(name)
        d = os.path.join(common.FIX, "models", name)
        models.save_model(model, d)
        if extra.get("mtp"):
            add_mtp_layer(d, model)
        finish_config(d, name, extra)
        prompts = models.prompts_for(seed, model.config.vocab_size)
        if "moe_layer_freq" in extra:
            reloaded = model  # transformers would rebuild every layer >= first_k_dense_replace as MoE
        else:
            reloaded = models.load_saved(d)
            with torch.no_grad():  # sanity: reload == in-memory
                a = model(input_ids=torch.tensor([prompts[2]])).logits
                b = reloaded(input_ids=torch.tensor([prompts[2]])).logits
                assert torch.allclose(a, b, atol=1e-6), (name, (a - b).abs().max())
        cases = models.run_cases(reloaded, prompts)
        models.write_golden(name, common.rel(d) + "/model.safetensors", cases,
                            {"seed": seed, "noised": len(touched)})
        summary[name] = [c["greedy"] for c in cases]
        if name in GGUF_FORMS:
            dg = os.path.join(common.FIX, "models", name + "-gguf")
            os.makedirs(dg, exist_ok=True)
            gpath = os.path.join(dg, "model.gguf")
            if GGUF_FORMS[name] == "qwen3moe":
                write_qwen3moe_gguf(reloaded, gpath)
            else:
                write_deepseek2_gguf(reloaded, gpath, v3=name.startswith("deepseek-v3"))
            models.write_golden(name + "-gguf", common.rel(gpath), cases, {
                "seed": seed, "same_weights_as": name,
                "note": "GGUF in llama.cpp's layout written from the safetensors fixture's weights; the goldens are "
                        "that fixture's (the GGUF form must give the same logits)"})
    routing_golden()
    for k, v in summary.items():
        print(k, v)


if __name__ == "__main__":
    main()
