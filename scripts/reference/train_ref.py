"""Training goldens from PyTorch autograd: gradients of every parameter and a 50-step AdamW loss curve.

For each tiny fixture model (random weights at init 0.3, f32, eager attention):
- `fixtures/goldens/train/<name>.grads.safetensors`: the gradient of every trainable parameter (tied weights once,
  under the embedding's name) for one batch of two sequences, labels shifted as transformers shifts them, with the
  last four labels of the second row ignored (-100) and the loss the mean over the labels kept.
- `fixtures/goldens/train/<name>.json`: that batch and its loss; then 50 optimiser steps from the same weights, each
  over two micro-batches (gradient accumulation: each micro-batch's loss halved before backward), the global gradient
  norm clipped to 1.0, AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices only, none on vectors as
  nanoGPT and transformers' Trainer do) at a peak rate of 3e-3 with 5 warmup steps and cosine decay to zero
  (transformers' get_cosine_schedule_with_warmup); each step's mean micro-batch loss, learning rate and gradient
  norm before clipping; and (`<name>.trained.safetensors`) the trained model's logits for the first batch's first row,
  what its saved checkpoint must give.

LoRA (peft): for gpt2, llama and qwen3, an adapter of rank 4, alpha 8 on every projection, its B factors drawn
(peft starts them at zero, which would leave A's gradients zero), saved by peft as `fixtures/models/<name>-lora/`;
`<name>-lora.grads.safetensors` holds the gradient of every adapter factor (under the adapter file's names) for the
batch above, and `<name>-lora.json` the loss and 20 AdamW steps (peak 1e-2, 2 warmup steps, same clipping and
accumulation) and `<name>-lora.trained.safetensors` the merged model's logits after them.

kvad-train's tests (crates/train/tests/reference.rs) compare against these; nothing here needs a GPU.
"""
import json
import math
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402

torch.set_num_threads(2)
torch.use_deterministic_algorithms(True)

MODELS = ["gpt2", "llama", "llama-tied", "qwen2", "qwen3"]
B, T = 2, 24
STEPS, ACCUM, WARMUP = 50, 2, 5
LR, BETAS, EPS, WD, CLIP = 3e-3, (0.9, 0.95), 1e-8, 0.1, 1.0


def batch(rng, vocab):
    ids = rng.integers(3, vocab, size=(B, T), dtype=np.int64)
    labels = ids.copy()
    labels[1, T - 4:] = -100
    return ids, labels


def load(name):
    model = AutoModelForCausalLM.from_pretrained(
        os.path.join(common.FIX, "models", name), dtype=torch.float32, attn_implementation="eager")
    model.train()
    return model


def params(model):
    # named_parameters() lists a tied head once, under the embedding's name.
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def lr_at(step):
    if step < WARMUP:
        return LR * step / WARMUP
    progress = (step - WARMUP) / (STEPS - WARMUP)
    return LR * 0.5 * (1.0 + math.cos(math.pi * progress))


def run(name):
    vocab = load(name).config.vocab_size
    rng = np.random.default_rng(1234)
    ids, labels = batch(rng, vocab)

    model = load(name)
    out = model(input_ids=torch.from_numpy(ids), labels=torch.from_numpy(labels))
    out.loss.backward()
    grads = {n: p.grad.detach().contiguous() for n, p in params(model)}
    save_file(grads, common.fix("goldens", "train", f"{name}.grads.safetensors"))

    model = load(name)
    named = params(model)
    groups = [
        {"params": [p for _, p in named if p.dim() >= 2], "weight_decay": WD},
        {"params": [p for _, p in named if p.dim() < 2], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS)
    steps = []
    micro = []
    for step in range(STEPS):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        losses = []
        for _ in range(ACCUM):
            mids, mlabels = batch(rng, vocab)
            micro.append({"ids": mids.tolist(), "labels": mlabels.tolist()})
            loss = model(input_ids=torch.from_numpy(mids), labels=torch.from_numpy(mlabels)).loss
            (loss / ACCUM).backward()
            losses.append(loss.item())
        norm = torch.nn.utils.clip_grad_norm_([p for _, p in named], CLIP)
        opt.step()
        opt.zero_grad(set_to_none=True)
        steps.append({"loss": float(np.mean(losses)), "lr": lr_at(step), "grad_norm": norm.item()})
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(ids)).logits[0]
    common.dump_json(common.fix("goldens", "train", f"{name}.json"), {
        "versions": common.versions("torch", "transformers", "numpy"),
        "ids": ids.tolist(), "labels": labels.tolist(), "loss": out.loss.item(),
        "hyper": {"steps": STEPS, "accum": ACCUM, "warmup": WARMUP, "lr": LR, "betas": list(BETAS), "eps": EPS,
                  "weight_decay": WD, "clip": CLIP},
        "micro": micro, "steps": steps,
    })
    save_file({"logits": logits.contiguous()}, common.fix("goldens", "train", f"{name}.trained.safetensors"))
    print(name, "loss", out.loss.item(), "after", steps[-1]["loss"])


LORA_TARGETS = {
    "gpt2": ["c_attn", "c_proj", "c_fc"],
    "llama": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "qwen3": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}
LORA_STEPS, LORA_WARMUP, LORA_LR = 20, 2, 1e-2


def lora_model(name):
    import peft
    adapter = os.path.join(common.FIX, "models", f"{name}-lora")
    base = load(name)
    if not os.path.exists(os.path.join(adapter, "adapter_config.json")):
        cfg = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=LORA_TARGETS[name],
                              fan_in_fan_out=name == "gpt2", task_type="CAUSAL_LM")
        torch.manual_seed(7)
        model = peft.get_peft_model(base, cfg)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.normal_(0.0, 0.1)
        model.save_pretrained(adapter)
        # The base as a path beside the adapter, not this machine's absolute path.
        cfg_path = os.path.join(adapter, "adapter_config.json")
        with open(cfg_path, encoding="utf-8") as f:
            saved = json.load(f)
        saved["base_model_name_or_path"] = f"../{name}"
        common.dump_json(cfg_path, saved, indent=2)
        readme = os.path.join(adapter, "README.md")
        if os.path.exists(readme):
            os.remove(readme)
        base = load(name)
    return peft.PeftModel.from_pretrained(base, adapter, is_trainable=True)


def saved_name(n):
    return n.replace(".default", "")


def run_lora(name):
    vocab = load(name).config.vocab_size
    rng = np.random.default_rng(1234)
    ids, labels = batch(rng, vocab)
    model = lora_model(name)
    model.train()
    out = model(input_ids=torch.from_numpy(ids), labels=torch.from_numpy(labels))
    out.loss.backward()
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    save_file({saved_name(n): p.grad.detach().contiguous() for n, p in named},
              common.fix("goldens", "train", f"{name}-lora.grads.safetensors"))

    model = lora_model(name)
    model.train()
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    opt = torch.optim.AdamW([p for _, p in named], lr=LORA_LR, betas=BETAS, eps=EPS, weight_decay=WD)
    steps, micro = [], []
    for step in range(LORA_STEPS):
        lr = LORA_LR * step / LORA_WARMUP if step < LORA_WARMUP else LORA_LR * 0.5 * (
            1.0 + math.cos(math.pi * (step - LORA_WARMUP) / (LORA_STEPS - LORA_WARMUP)))
        for g in opt.param_groups:
            g["lr"] = lr
        losses = []
        for _ in range(ACCUM):
            mids, mlabels = batch(rng, vocab)
            micro.append({"ids": mids.tolist(), "labels": mlabels.tolist()})
            loss = model(input_ids=torch.from_numpy(mids), labels=torch.from_numpy(mlabels)).loss
            (loss / ACCUM).backward()
            losses.append(loss.item())
        norm = torch.nn.utils.clip_grad_norm_([p for _, p in named], CLIP)
        opt.step()
        opt.zero_grad(set_to_none=True)
        steps.append({"loss": float(np.mean(losses)), "lr": lr, "grad_norm": norm.item()})
    with torch.no_grad():
        logits = model.merge_and_unload()(input_ids=torch.from_numpy(ids)).logits[0]
    common.dump_json(common.fix("goldens", "train", f"{name}-lora.json"), {
        "versions": common.versions("torch", "transformers", "peft", "numpy"),
        "ids": ids.tolist(), "labels": labels.tolist(), "loss": out.loss.item(),
        "hyper": {"steps": LORA_STEPS, "accum": ACCUM, "warmup": LORA_WARMUP, "lr": LORA_LR, "betas": list(BETAS),
                  "eps": EPS, "weight_decay": WD, "clip": CLIP},
        "micro": micro, "steps": steps,
    })
    save_file({"logits": logits.contiguous()}, common.fix("goldens", "train", f"{name}-lora.trained.safetensors"))
    print(name, "lora loss", out.loss.item(), "after", steps[-1]["loss"])


if __name__ == "__main__":
    names = sys.argv[1:] or MODELS + [f"{m}-lora" for m in LORA_TARGETS]
    for name in names:
        if name.endswith("-lora"):
            run_lora(name[:-len("-lora")])
        else:
            run(name)
