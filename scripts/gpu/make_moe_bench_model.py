"""The routed GPU benchmark model, made on the device (nothing large travels): the Qwen3-30B-A3B shape (hidden 2048,
32 query / 4 KV heads of 128, per-head q/k RMSNorm, 128 experts of width 768, 8 a token, no shared expert) with 24 of
its 48 layers by default, and SmolLM2's tokenizer (vocab 49152), random weights (N(0, 0.02), norms 1) written as a
BF16 GGUF in llama.cpp's `qwen3moe` layout (stacked `ffn_*_exps`) tensor by tensor: 14.6 B parameters, 29 GB at
24 layers, which no one torch model of this size would fit beside on the device's disk and memory budget.

    python3 scripts/gpu/make_moe_bench_model.py OUT.gguf TOKENIZER.gguf [LAYERS]
TOKENIZER.gguf is scripts/gpu/prepare.sh's tensor-less SmolLM2 tokenizer. Needs the gguf package and numpy; torch
and a GPU make it quick (random_weights.py).
"""
import sys

import gguf

import random_weights  # beside this script
from tokenizer_gguf import copy_fields  # beside this script

HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 2048, 32, 4, 128
EXPERTS, ACTIVE, EXPERT_FF, DENSE_FF = 128, 8, 768, 6144
VOCAB, CONTEXT, THETA, EPS = 49152, 40960, 1000000.0, 1e-6


def tensors(layers):
    """(name, row-major shape, kind) in file order: kind 'norm' (f32 ones) or 'w' (bf16 random)."""
    yield "token_embd.weight", (VOCAB, HIDDEN), "w"
    for i in range(layers):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", (HIDDEN,), "norm"
        yield b + "attn_q.weight", (HEADS * HEAD_DIM, HIDDEN), "w"
        yield b + "attn_k.weight", (KV_HEADS * HEAD_DIM, HIDDEN), "w"
        yield b + "attn_v.weight", (KV_HEADS * HEAD_DIM, HIDDEN), "w"
        yield b + "attn_output.weight", (HIDDEN, HEADS * HEAD_DIM), "w"
        yield b + "attn_q_norm.weight", (HEAD_DIM,), "norm"
        yield b + "attn_k_norm.weight", (HEAD_DIM,), "norm"
        yield b + "ffn_norm.weight", (HIDDEN,), "norm"
        yield b + "ffn_gate_inp.weight", (EXPERTS, HIDDEN), "router"
        yield b + "ffn_gate_exps.weight", (EXPERTS, EXPERT_FF, HIDDEN), "w"
        yield b + "ffn_up_exps.weight", (EXPERTS, EXPERT_FF, HIDDEN), "w"
        yield b + "ffn_down_exps.weight", (EXPERTS, HIDDEN, EXPERT_FF), "w"
    yield "output_norm.weight", (HIDDEN,), "norm"
    yield "output.weight", (VOCAB, HIDDEN), "w"


def main():
    out, tok = sys.argv[1], sys.argv[2]
    layers = int(sys.argv[3]) if len(sys.argv) > 3 else 24
    w = gguf.GGUFWriter(out, "qwen3moe")
    w.add_name("kvad-bench-qwen3-30b-a3b-shape")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(layers)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_feed_forward_length(DENSE_FF)
    w.add_expert_feed_forward_length(EXPERT_FF)
    w.add_expert_count(EXPERTS)
    w.add_expert_used_count(ACTIVE)
    w.add_rope_freq_base(THETA)
    w.add_layer_norm_rms_eps(EPS)
    w.add_vocab_size(VOCAB)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    copy_fields(gguf.GGUFReader(tok), w, lambda n: n.startswith("tokenizer."))
    n, secs = random_weights.write(w, list(tensors(layers)))
    print(f"{out}: {layers} layers, {n / 1e9:.2f} B parameters in {secs:.0f}s", flush=True)


if __name__ == "__main__":
    main()
