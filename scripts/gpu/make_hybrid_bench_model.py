"""The hybrid GPU benchmark model (issue 35), made on the device: the Qwen3-Next-80B-A3B shape (hidden 2048; per 4
layers 3 gated delta-net layers, 16 key / 32 value heads of 128, 4 taps, and 1 gated attention layer, 16 query / 2 KV
heads of 256, a quarter of each head rotated; 512 experts of width 512, 10 a token, and a gated shared expert of
512) with 12 of its 48 layers by default, and SmolLM2's tokenizer (vocab 49152). Random weights (N(0, 0.02), norms 1,
decay rates -1) written as a BF16 GGUF in llama.cpp's `qwen3next` layout tensor by tensor: 20.2 B parameters, 40 GB
at 12 layers, so a Q4_0 form fits beside it on the device's disk.

    python3 scripts/gpu/make_hybrid_bench_model.py OUT.gguf TOKENIZER.gguf [LAYERS] [SHAPE]
SHAPE: next80b (the default, above) or q35-0.8b (a small dense Qwen3.5 for the CPU's side by side, llama.cpp's
qwen35 layout, 0.6 B parameters).
TOKENIZER.gguf is scripts/gpu/prepare.sh's tensor-less SmolLM2 tokenizer. Needs the gguf package and numpy; torch
and a GPU make it quick (random_weights.py).
"""
import sys

import gguf

import random_weights  # beside this script
from tokenizer_gguf import copy_fields  # beside this script

# The two shapes: Qwen3-Next-80B-A3B's (llama.cpp's qwen3next, routed, 12 of 48 layers by default), and a small
# dense Qwen3.5 for the CPU (llama.cpp's qwen35; the 0.8B model's widths as we take them to be: hidden 1024, 24
# layers, 8 query / 2 KV heads of 256, 16 key and 16 value heads of 128, feed-forward 3584).
SHAPES = {
    "next80b": dict(arch="qwen3next", hidden=2048, heads=16, kv_heads=2, head_dim=256, rope_dim=64, k_heads=16,
                    v_heads=32, k_dim=128, v_dim=128, taps=4, experts=512, active=10, expert_ff=512, shared_ff=512,
                    dense_ff=5120, theta=10000000.0, layers=12),
    "q35-0.8b": dict(arch="qwen35", hidden=1024, heads=8, kv_heads=2, head_dim=256, rope_dim=64, k_heads=16,
                     v_heads=16, k_dim=128, v_dim=128, taps=4, experts=0, active=0, expert_ff=0, shared_ff=0,
                     dense_ff=3584, theta=10000000.0, layers=24),
}
VOCAB, CONTEXT, EPS, INTERVAL = 49152, 262144, 1e-6, 4


def linear(i):
    """Whether layer i is a delta-net layer (every INTERVAL-th is attention)."""
    return (i + 1) % INTERVAL != 0


def tensors(c, layers):
    """(name, row-major shape, kind) in file order (kinds: random_weights.write)."""
    h, nv, vw = c["hidden"], c["v_heads"], c["v_heads"] * c["v_dim"]
    ch = 2 * c["k_heads"] * c["k_dim"] + vw
    yield "token_embd.weight", (VOCAB, h), "w"
    for i in range(layers):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", (h,), "norm"
        yield b + "post_attention_norm.weight", (h,), "norm"
        if linear(i):
            yield b + "ssm_a", (nv,), "neg"
            yield b + "ssm_conv1d.weight", (ch, c["taps"]), "router"
            yield b + "ssm_dt.bias", (nv,), "router"
            if c["arch"] == "qwen3next":
                yield b + "ssm_ba.weight", (2 * nv, h), "w"
            else:
                yield b + "ssm_alpha.weight", (nv, h), "w"
                yield b + "ssm_beta.weight", (nv, h), "w"
            yield b + "attn_qkv.weight", (ch, h), "w"
            yield b + "attn_gate.weight", (vw, h), "w"
            yield b + "ssm_norm.weight", (c["v_dim"],), "norm"
            yield b + "ssm_out.weight", (h, vw), "w"
        else:
            q, kv = c["heads"] * c["head_dim"], c["kv_heads"] * c["head_dim"]
            yield b + "attn_q.weight", (2 * q, h), "w"
            yield b + "attn_k.weight", (kv, h), "w"
            yield b + "attn_v.weight", (kv, h), "w"
            yield b + "attn_output.weight", (h, q), "w"
            yield b + "attn_q_norm.weight", (c["head_dim"],), "norm"
            yield b + "attn_k_norm.weight", (c["head_dim"],), "norm"
        if c["experts"]:
            e, ff, sff = c["experts"], c["expert_ff"], c["shared_ff"]
            yield b + "ffn_gate_inp.weight", (e, h), "router"
            yield b + "ffn_gate_exps.weight", (e, ff, h), "w"
            yield b + "ffn_up_exps.weight", (e, ff, h), "w"
            yield b + "ffn_down_exps.weight", (e, h, ff), "w"
            yield b + "ffn_gate_inp_shexp.weight", (1, h), "router"
            yield b + "ffn_gate_shexp.weight", (sff, h), "w"
            yield b + "ffn_up_shexp.weight", (sff, h), "w"
            yield b + "ffn_down_shexp.weight", (h, sff), "w"
        else:
            yield b + "ffn_gate.weight", (c["dense_ff"], h), "w"
            yield b + "ffn_up.weight", (c["dense_ff"], h), "w"
            yield b + "ffn_down.weight", (h, c["dense_ff"]), "w"
    yield "output_norm.weight", (h,), "norm"
    yield "output.weight", (VOCAB, h), "w"


def main():
    out, tok = sys.argv[1], sys.argv[2]
    c = SHAPES[sys.argv[4] if len(sys.argv) > 4 else "next80b"]
    layers = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3] else c["layers"]
    arch = c["arch"]
    w = gguf.GGUFWriter(out, arch)
    w.add_name(f"kvad-bench-{arch}")
    u = lambda k, v: w.add_uint32(f"{arch}.{k}", v)  # noqa: E731
    u("context_length", CONTEXT)
    u("embedding_length", c["hidden"])
    u("block_count", layers)
    u("feed_forward_length", c["dense_ff"])
    u("attention.head_count", c["heads"])
    u("attention.head_count_kv", c["kv_heads"])
    w.add_float32(f"{arch}.rope.freq_base", c["theta"])
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", EPS)
    if c["experts"]:
        u("expert_count", c["experts"])
        u("expert_used_count", c["active"])
        u("expert_feed_forward_length", c["expert_ff"])
        u("expert_shared_feed_forward_length", c["shared_ff"])
    u("attention.key_length", c["head_dim"])
    u("attention.value_length", c["head_dim"])
    u("ssm.conv_kernel", c["taps"])
    u("ssm.state_size", c["k_dim"])
    u("ssm.group_count", c["k_heads"])
    u("ssm.time_step_rank", c["v_heads"])
    u("ssm.inner_size", c["v_heads"] * c["v_dim"])
    w.add_array(f"{arch}.attention.recurrent_layers", [linear(i) for i in range(layers)])
    u("full_attention_interval", INTERVAL)
    u("rope.dimension_count", c["rope_dim"])
    if arch == "qwen35":
        # llama.cpp's qwen35 loader requires the multimodal sections; text positions make them plain RoPE.
        w.add_array(f"{arch}.rope.dimension_sections", [11, 11, 10, 0])
    w.add_vocab_size(VOCAB)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    copy_fields(gguf.GGUFReader(tok), w, lambda n: n.startswith("tokenizer."))
    n, secs = random_weights.write(w, list(tensors(c, layers)))
    print(f"{out}: {layers} layers, {n / 1e9:.2f} B parameters in {secs:.0f}s", flush=True)


if __name__ == "__main__":
    main()
