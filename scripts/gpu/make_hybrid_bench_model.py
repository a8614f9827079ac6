"""The hybrid GPU benchmark model (issue 35), made on the device: the Qwen3-Next-80B-A3B shape (hidden 2048; per 4
layers 3 gated delta-net layers, 16 key / 32 value heads of 128, 4 taps, and 1 gated attention layer, 16 query / 2 KV
heads of 256, a quarter of each head rotated; 512 experts of width 512, 10 a token, and a gated shared expert of
512) with 12 of its 48 layers by default, and SmolLM2's tokenizer (vocab 49152). Random weights (N(0, 0.02), norms 1,
decay rates -1) written as a BF16 GGUF in llama.cpp's `qwen3next` layout tensor by tensor: 20.2 B parameters, 40 GB
at 12 layers, so a Q4_0 form fits beside it on the device's disk.

    python3 scripts/gpu/make_hybrid_bench_model.py OUT.gguf TOKENIZER.gguf [LAYERS]
TOKENIZER.gguf is scripts/gpu/prepare.sh's tensor-less SmolLM2 tokenizer. Needs the gguf package and numpy; torch
and a GPU make it quick (random_weights.py).
"""
import sys

import gguf

import random_weights  # beside this script
from tokenizer_gguf import copy_fields  # beside this script

ARCH = "qwen3next"
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, ROPE_DIM = 2048, 16, 2, 256, 64
K_HEADS, V_HEADS, K_DIM, V_DIM, TAPS = 16, 32, 128, 128, 4
EXPERTS, ACTIVE, EXPERT_FF, SHARED_FF, DENSE_FF = 512, 10, 512, 512, 5120
VOCAB, CONTEXT, THETA, EPS, INTERVAL = 49152, 262144, 10000000.0, 1e-6, 4
CHANNELS = 2 * K_HEADS * K_DIM + V_HEADS * V_DIM


def linear(i):
    """Whether layer i is a delta-net layer (every INTERVAL-th is attention)."""
    return (i + 1) % INTERVAL != 0


def tensors(layers):
    """(name, row-major shape, kind) in file order (kinds: random_weights.write)."""
    yield "token_embd.weight", (VOCAB, HIDDEN), "w"
    for i in range(layers):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", (HIDDEN,), "norm"
        yield b + "post_attention_norm.weight", (HIDDEN,), "norm"
        if linear(i):
            yield b + "ssm_a", (V_HEADS,), "neg"
            yield b + "ssm_conv1d.weight", (CHANNELS, TAPS), "router"
            yield b + "ssm_dt.bias", (V_HEADS,), "router"
            yield b + "ssm_ba.weight", (2 * V_HEADS, HIDDEN), "w"
            yield b + "attn_qkv.weight", (CHANNELS, HIDDEN), "w"
            yield b + "attn_gate.weight", (V_HEADS * V_DIM, HIDDEN), "w"
            yield b + "ssm_norm.weight", (V_DIM,), "norm"
            yield b + "ssm_out.weight", (HIDDEN, V_HEADS * V_DIM), "w"
        else:
            yield b + "attn_q.weight", (2 * HEADS * HEAD_DIM, HIDDEN), "w"
            yield b + "attn_k.weight", (KV_HEADS * HEAD_DIM, HIDDEN), "w"
            yield b + "attn_v.weight", (KV_HEADS * HEAD_DIM, HIDDEN), "w"
            yield b + "attn_output.weight", (HIDDEN, HEADS * HEAD_DIM), "w"
            yield b + "attn_q_norm.weight", (HEAD_DIM,), "norm"
            yield b + "attn_k_norm.weight", (HEAD_DIM,), "norm"
        yield b + "ffn_gate_inp.weight", (EXPERTS, HIDDEN), "router"
        yield b + "ffn_gate_exps.weight", (EXPERTS, EXPERT_FF, HIDDEN), "w"
        yield b + "ffn_up_exps.weight", (EXPERTS, EXPERT_FF, HIDDEN), "w"
        yield b + "ffn_down_exps.weight", (EXPERTS, HIDDEN, EXPERT_FF), "w"
        yield b + "ffn_gate_inp_shexp.weight", (1, HIDDEN), "router"
        yield b + "ffn_gate_shexp.weight", (SHARED_FF, HIDDEN), "w"
        yield b + "ffn_up_shexp.weight", (SHARED_FF, HIDDEN), "w"
        yield b + "ffn_down_shexp.weight", (HIDDEN, SHARED_FF), "w"
    yield "output_norm.weight", (HIDDEN,), "norm"
    yield "output.weight", (VOCAB, HIDDEN), "w"


def main():
    out, tok = sys.argv[1], sys.argv[2]
    layers = int(sys.argv[3]) if len(sys.argv) > 3 else 12
    w = gguf.GGUFWriter(out, ARCH)
    w.add_name("kvad-bench-qwen3-next-80b-a3b-shape")
    u = lambda k, v: w.add_uint32(f"{ARCH}.{k}", v)  # noqa: E731
    u("context_length", CONTEXT)
    u("embedding_length", HIDDEN)
    u("block_count", layers)
    u("feed_forward_length", DENSE_FF)
    u("attention.head_count", HEADS)
    u("attention.head_count_kv", KV_HEADS)
    w.add_float32(f"{ARCH}.rope.freq_base", THETA)
    w.add_float32(f"{ARCH}.attention.layer_norm_rms_epsilon", EPS)
    u("expert_count", EXPERTS)
    u("expert_used_count", ACTIVE)
    u("attention.key_length", HEAD_DIM)
    u("attention.value_length", HEAD_DIM)
    u("expert_feed_forward_length", EXPERT_FF)
    u("expert_shared_feed_forward_length", SHARED_FF)
    u("ssm.conv_kernel", TAPS)
    u("ssm.state_size", K_DIM)
    u("ssm.group_count", K_HEADS)
    u("ssm.time_step_rank", V_HEADS)
    u("ssm.inner_size", V_HEADS * V_DIM)
    w.add_array(f"{ARCH}.attention.recurrent_layers", [linear(i) for i in range(layers)])
    u("full_attention_interval", INTERVAL)
    u("rope.dimension_count", ROPE_DIM)
    w.add_vocab_size(VOCAB)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    copy_fields(gguf.GGUFReader(tok), w, lambda n: n.startswith("tokenizer."))
    n, secs = random_weights.write(w, list(tensors(layers)))
    print(f"{out}: {layers} layers, {n / 1e9:.2f} B parameters in {secs:.0f}s", flush=True)


if __name__ == "__main__":
    main()
