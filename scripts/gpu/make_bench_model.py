"""The GPU benchmark model, made on the device (nothing large travels): the Llama-3-8B shape with SmolLM2's
tokenizer (hidden 4096, 32 layers, GQA 32/8, intermediate 14336, vocab 49152: 7.38 B params), random weights
(torch seed 0) saved in bf16 by transformers, the same weights as a BF16 GGUF (q/k rows permuted as llama.cpp's
converter does), and PyTorch bf16's teacher-forced top-1 over 128 steps for the agreement check.

    python3 scripts/gpu/make_bench_model.py OUT_DIR TOKENIZER_DIR [LAYERS [STEPS [DEVICE]]]
(fewer layers, steps and the CPU make a small model of the same widths, for checking the loader off the GPU).
Writes OUT_DIR/hf (config, safetensors, tokenizer), OUT_DIR/model-bf16.gguf and OUT_DIR/teacher.json.
"""
import json
import os
import shutil
import sys
import time

import numpy as np
import torch


def permute(w, n_head):
    """llama.cpp's convert_hf_to_gguf permutation of q/k rows (interleaved RoPE halves)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(model, cfg, path):
    import gguf

    w = gguf.GGUFWriter(path, "llama")
    w.add_name("kvad-bench-llama3-8b-shape")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_vocab_size(cfg.vocab_size)
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                 "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                 "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down"}
    for name, t in model.state_dict().items():
        if name in names:
            gname = names[name]
        else:
            _, _, i, rest = name.split(".", 3)
            key, suffix = rest.rsplit(".", 1)
            gname = f"blk.{i}.{per_layer[key]}.{suffix}"
        t = t.detach()
        if t.dim() == 1:  # norms as f32, as llama.cpp's converter writes them
            w.add_tensor(gname, t.float().cpu().numpy())
            continue
        if "q_proj" in name:
            t = permute(t, cfg.num_attention_heads)
        elif "k_proj" in name:
            t = permute(t, cfg.num_key_value_heads)
        raw = t.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)
        w.add_tensor(gname, raw, raw_shape=raw.shape, raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@torch.no_grad()
def main():
    from transformers import LlamaConfig, LlamaForCausalLM

    out, tok = sys.argv[1], sys.argv[2]
    layers = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 128
    dev = sys.argv[5] if len(sys.argv) > 5 else "cuda"
    hf = os.path.join(out, "hf")
    os.makedirs(hf, exist_ok=True)
    t0 = time.time()
    # KVAD_BENCH_SHAPE=1.5b: the 1.5B shape of the scheduler's GPU goal (Qwen2.5-1.5B's sizes as a Llama), saved
    # as safetensors only (no GGUF, no reference: it is for throughput).
    small = os.environ.get("KVAD_BENCH_SHAPE") == "1.5b"
    dims = dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                intermediate_size=8960) if small else dict(hidden_size=4096, num_hidden_layers=layers,
                                                           num_attention_heads=32, num_key_value_heads=8,
                                                           intermediate_size=14336)
    cfg = LlamaConfig(**dims, vocab_size=49152, max_position_embeddings=8192, rms_norm_eps=1e-5,
                      rope_theta=500000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                      torch_dtype="bfloat16")
    torch.manual_seed(0)
    with torch.device(dev):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    n = sum(p.numel() for p in model.parameters())
    print(f"built {n / 1e9:.2f} B params in {time.time() - t0:.1f}s", flush=True)
    model.save_pretrained(hf, safe_serialization=True)
    for f in os.listdir(tok):
        shutil.copy(os.path.join(tok, f), hf)
    print(f"saved safetensors at {time.time() - t0:.1f}s", flush=True)
    # KVAD_BENCH_REF=0: safetensors only, for throughput runs (the GGUF and the reference take minutes).
    if small or os.environ.get("KVAD_BENCH_REF") == "0":
        return
    write_gguf(model, cfg, os.path.join(out, "model-bf16.gguf"))
    print(f"saved GGUF at {time.time() - t0:.1f}s", flush=True)

    # The reference is the checkpoint as transformers loads it (`model.to(bf16)` above also rounded the RoPE
    # frequency buffer to bf16, which from_pretrained does not do).
    from transformers import AutoModelForCausalLM
    del model
    model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.bfloat16).to(dev).eval()
    print(f"reloaded; RoPE inv_freq kept in {model.model.rotary_emb.inv_freq.dtype}", flush=True)

    # Teacher-forced reference: a 128-token prompt (seeded ids), PyTorch's 128 greedy tokens after it, then one
    # pass over the whole sequence: top-1 and the top-2 gap at each of the 128 decode positions.
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(3, cfg.vocab_size, (1, 128), generator=g).to(dev)
    gen = model.generate(prompt, max_new_tokens=steps, do_sample=False, min_new_tokens=steps)
    seq = gen[0].tolist()
    logits = model(torch.tensor([seq[:-1]]).to(dev)).logits[0, 127:].float()
    top = torch.topk(logits, 2, dim=-1)
    ref = {"tokens": seq, "prompt_len": 128, "argmax": top.indices[:, 0].tolist(),
           "gaps": (top.values[:, 0] - top.values[:, 1]).tolist(),
           "how": "argmax[i] = PyTorch bf16 top-1 at position 127 + i of one pass over tokens[:-1]; "
                  "f32_* the same with the weights upcast to f32 and f32 arithmetic"}
    del model
    model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).to(dev).eval()
    logits32 = model(torch.tensor([seq[:-1]]).to(dev)).logits[0, 127:].float()
    top32 = torch.topk(logits32, 2, dim=-1)
    ref["f32_argmax"] = top32.indices[:, 0].tolist()
    ref["f32_gaps"] = (top32.values[:, 0] - top32.values[:, 1]).tolist()
    ref["f32_logits_first"] = logits32[0].tolist()
    same = sum(a == b for a, b in zip(ref["argmax"], ref["f32_argmax"]))
    print(f"PyTorch bf16 vs f32 top-1: equal at {same}/{steps}; bf16 logit spread "
          f"{float(logits.std()):.3f} (std), median top-2 gap bf16 {float(top.values[:, 0].sub(top.values[:, 1]).median()):.3f}, "
          f"f32 {float(top32.values[:, 0].sub(top32.values[:, 1]).median()):.4f}", flush=True)
    with open(os.path.join(out, "teacher.json"), "w") as f:
        json.dump(ref, f)
    print(f"teacher-forced reference at {time.time() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    main()
