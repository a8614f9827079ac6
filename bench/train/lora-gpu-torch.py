"""The GPU training goal's peer: PyTorch + peft LoRA fine-tuning of the Llama-3-8B shape on the device.

Llama-3-8B's shape (hidden 4096, 32 layers, GQA 32/8, intermediate 14336, vocab 128256), random bf16 weights made
on the GPU (nothing large travels), LoRA rank 16 / alpha 32 on q/k/v/o/gate/up/down (peft), SDPA attention, AdamW
on the adapter, sequence 2,048 and batch 8 as two recipes people run: (a) one micro-batch of 8 with transformers'
gradient checkpointing, (b) micro-batches of 2 accumulated 4 times without it. Each: 2 warm-up steps, then STEPS
timed steps; prints tokens/s (median and range of the steps) and the peak memory torch allocated.

    python3 bench/train/lora-gpu-torch.py [STEPS]          (on the device; peft/accelerate wheels from .whl/)
"""
import json
import statistics
import sys
import time

import torch


def build():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                      rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    return model


def run(model, micro, accum, checkpointing, steps):
    import peft
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    else:
        model.gradient_checkpointing_disable()
    lora = peft.get_peft_model(model, peft.LoraConfig(
        r=16, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    lora.train()
    opt = torch.optim.AdamW([p for p in lora.parameters() if p.requires_grad], lr=1e-4)
    torch.cuda.reset_peak_memory_stats()
    times = []
    for step in range(steps + 2):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(accum):
            ids = torch.randint(0, 128256, (micro, 2048), device="cuda")
            loss = lora(input_ids=ids, labels=ids).loss / accum
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= 2:
            times.append(time.perf_counter() - t0)
    toks = [micro * accum * 2048 / t for t in times]
    out = {"recipe": f"micro {micro} x accum {accum}, checkpointing {checkpointing}",
           "tokens_per_s": {"median": statistics.median(toks), "min": min(toks), "max": max(toks)},
           "peak_gib": torch.cuda.max_memory_allocated() / 2**30, "loss": loss.item() * accum}
    lora.unload()
    del opt
    torch.cuda.empty_cache()
    return out


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    import peft
    import transformers
    dev = torch.cuda.get_device_name()
    model = build()
    for micro, accum, ckpt in [(8, 1, True), (2, 4, False)]:
        try:
            r = run(model, micro, accum, ckpt, steps)
        except torch.OutOfMemoryError as e:
            r = {"recipe": f"micro {micro} x accum {accum}, checkpointing {ckpt}", "error": f"out of memory: {e}"[:200]}
            torch.cuda.empty_cache()
        r.update({"device": dev, "torch": torch.__version__, "transformers": transformers.__version__,
                  "peft": peft.__version__})
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
