"""LoRA fine-tuning speed on the CPU: kvad-train against PyTorch + peft on the same model, interleaved.

SmolLM2-135M's shape (hidden 576, 30 layers, GQA 9/3, intermediate 1536, vocab 49152, tied embeddings) with random
weights in f32 safetensors (made once into .models/smollm2-shape-f32 by this script, torch seed 0: the step time
does not depend on the values). Both: LoRA rank 16, alpha 32 on q/k/v/o/gate/up/down, AdamW, batch BATCH rows of SEQ
random tokens, f32, every core. A round runs each engine once for STEPS steps (after one warm-up step); the report is
the median and range of each engine's steps/s over the rounds, and the ratio of the medians.

    .venv-ref/bin/python bench/train/lora-cpu.py [BATCH SEQ STEPS ROUNDS]     (defaults 4 256 5 3)
Needs `cargo build --release -p kvad-train --example lora_bench` first.
"""
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(ROOT, ".models", "smollm2-shape-f32")
BIN = os.path.join(ROOT, "target", "release", "examples", "lora_bench")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_model():
    if os.path.exists(os.path.join(MODEL, "model.safetensors")):
        return
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192, rms_norm_eps=1e-5,
                      rope_theta=100000.0, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(MODEL, safe_serialization=True)


def torch_run(batch, seq, steps):
    import peft
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32, attn_implementation="sdpa")
    model = peft.get_peft_model(model, peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=TARGETS,
                                                       task_type="CAUSAL_LM"))
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    g = torch.Generator().manual_seed(0)
    times = []
    for i in range(steps + 1):
        ids = torch.randint(0, 49152, (batch, seq), generator=g)
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i > 0:
            times.append(time.perf_counter() - t0)
    return {"engine": "torch", "step_s": times, "loss": loss.item()}


def kvad_run(batch, seq, steps):
    out = subprocess.run([BIN, MODEL, str(batch), str(seq), str(steps)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    batch, seq, steps, rounds = (int(a) for a in (sys.argv[1:] + ["4", "256", "5", "3"][len(sys.argv) - 1:])[:4])
    make_model()
    rates = {"kvad": [], "torch": []}
    for r in range(rounds):
        for run in (kvad_run, lambda b, s, n: torch_run(b, s, n)):
            res = run(batch, seq, steps)
            rate = 1.0 / statistics.median(res["step_s"])
            rates[res["engine"]].append(rate)
            print(f"round {r + 1} {res['engine']}: {rate:.3f} steps/s ({batch * seq * rate:.0f} tok/s), loss {res['loss']:.3f}",
                  flush=True)
    cpu = platform.processor() or open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": \t")
    print(json.dumps({"cpu": cpu, "threads": torch.get_num_threads(), "torch": torch.__version__, "batch": batch,
                      "seq": seq, "steps": steps, "rounds": rounds,
                      **{e: {"median": statistics.median(v), "min": min(v), "max": max(v)} for e, v in rates.items()},
                      "ratio": statistics.median(rates["kvad"]) / statistics.median(rates["torch"])}))


if __name__ == "__main__":
    main()
