"""The latent-attention GPU benchmark model, made on the device (nothing large travels): the DeepSeek-V2-Lite shape
(27 layers, hidden 2048, 16 heads, kv_lora_rank 512, rope 64, nope 128, v 128, the query projected directly, 64
routed experts of width 1408 with 6 a token and 2 shared, the first layer dense of width 10944, YaRN as V2-Lite's
config has it) and SmolLM2's tokenizer (vocab 49152), random weights (N(0, 0.02), norms 1) written as a BF16 GGUF in
llama.cpp's `deepseek2` layout (stacked `ffn_*_exps`, kv_b split into `attn_k_b`/`attn_v_b` as its converter writes
them) tensor by tensor: 15.7 B parameters, 31 GB.

    python3 scripts/gpu/make_mla_bench_model.py OUT.gguf TOKENIZER.gguf [LAYERS]
TOKENIZER.gguf is scripts/gpu/prepare.sh's tensor-less SmolLM2 tokenizer. Needs the gguf package and numpy; torch
and a GPU make it quick (random_weights.py).
"""
import sys

import gguf

import random_weights  # beside this script
from tokenizer_gguf import copy_fields  # beside this script

HIDDEN, HEADS, RANK, ROPE, NOPE, V = 2048, 16, 512, 64, 128, 128
EXPERTS, ACTIVE, SHARED, EXPERT_FF, DENSE_FF, FIRST_DENSE = 64, 6, 2, 1408, 10944, 1
VOCAB, CONTEXT, THETA, EPS = 49152, 163840, 10000.0, 1e-6
YARN_FACTOR, YARN_ORIGINAL, MSCALE_ALL_DIM = 40.0, 4096, 0.707


def tensors(layers):
    """(name, row-major shape, kind) in file order: kind 'norm' (f32 ones), 'router' (f32) or 'w' (bf16)."""
    yield "token_embd.weight", (VOCAB, HIDDEN), "w"
    for i in range(layers):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", (HIDDEN,), "norm"
        yield b + "attn_q.weight", (HEADS * (NOPE + ROPE), HIDDEN), "w"
        yield b + "attn_kv_a_mqa.weight", (RANK + ROPE, HIDDEN), "w"
        yield b + "attn_kv_a_norm.weight", (RANK,), "norm"
        yield b + "attn_k_b.weight", (HEADS, RANK, NOPE), "w"
        yield b + "attn_v_b.weight", (HEADS, V, RANK), "w"
        yield b + "attn_output.weight", (HIDDEN, HEADS * V), "w"
        yield b + "ffn_norm.weight", (HIDDEN,), "norm"
        if i < FIRST_DENSE:
            yield b + "ffn_gate.weight", (DENSE_FF, HIDDEN), "w"
            yield b + "ffn_up.weight", (DENSE_FF, HIDDEN), "w"
            yield b + "ffn_down.weight", (HIDDEN, DENSE_FF), "w"
        else:
            yield b + "ffn_gate_inp.weight", (EXPERTS, HIDDEN), "router"
            yield b + "ffn_gate_exps.weight", (EXPERTS, EXPERT_FF, HIDDEN), "w"
            yield b + "ffn_up_exps.weight", (EXPERTS, EXPERT_FF, HIDDEN), "w"
            yield b + "ffn_down_exps.weight", (EXPERTS, HIDDEN, EXPERT_FF), "w"
            yield b + "ffn_gate_shexp.weight", (SHARED * EXPERT_FF, HIDDEN), "w"
            yield b + "ffn_up_shexp.weight", (SHARED * EXPERT_FF, HIDDEN), "w"
            yield b + "ffn_down_shexp.weight", (HIDDEN, SHARED * EXPERT_FF), "w"
    yield "output_norm.weight", (HIDDEN,), "norm"
    yield "output.weight", (VOCAB, HIDDEN), "w"


def main():
    out, tok = sys.argv[1], sys.argv[2]
    layers = int(sys.argv[3]) if len(sys.argv) > 3 else 27
    w = gguf.GGUFWriter(out, "deepseek2")
    w.add_name("kvad-bench-deepseek-v2-lite-shape")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(layers)
    w.add_head_count(HEADS)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(EPS)
    w.add_vocab_size(VOCAB)
    w.add_feed_forward_length(DENSE_FF)
    w.add_leading_dense_block_count(FIRST_DENSE)
    w.add_kv_lora_rank(RANK)
    w.add_key_length(RANK + ROPE)
    w.add_value_length(RANK)
    w.add_key_length_mla(NOPE + ROPE)
    w.add_value_length_mla(V)
    w.add_expert_feed_forward_length(EXPERT_FF)
    w.add_expert_count(EXPERTS)
    w.add_expert_used_count(ACTIVE)
    w.add_expert_shared_count(SHARED)
    w.add_expert_weights_scale(1.0)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX)
    w.add_rope_dimension_count(ROPE)
    w.add_rope_freq_base(THETA)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(YARN_FACTOR)
    w.add_rope_scaling_orig_ctx_len(YARN_ORIGINAL)
    w.add_rope_scaling_yarn_beta_fast(32.0)
    w.add_rope_scaling_yarn_beta_slow(1.0)
    w.add_rope_scaling_yarn_log_mul(0.1 * MSCALE_ALL_DIM)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    copy_fields(gguf.GGUFReader(tok), w, lambda n: n.startswith("tokenizer."))
    n, secs = random_weights.write(w, list(tensors(layers)))
    print(f"{out}: {layers} layers, {n / 1e9:.2f} B parameters in {secs:.0f}s", flush=True)


if __name__ == "__main__":
    main()
