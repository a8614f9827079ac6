"""Loads what kvad-train saved in transformers (and the LoRA adapters in peft) and compares the logits with kvad's.

    cargo run --release -p kvad-train --example export_trained -- /tmp/kvad-trained
    .venv-ref/bin/python scripts/reference/train_check.py /tmp/kvad-trained

For each OUT/<name>/: the checkpoint (or `base/` + `adapter/`) loaded by transformers (peft), its logits for the
first golden batch's first row against `kvad_logits.safetensors`; prints the largest difference against the largest
logit, and fails above 1e-4 of it.
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402


def main(out):
    worst = 0.0
    for name in sorted(os.listdir(out)):
        d = os.path.join(out, name)
        want = load_file(os.path.join(d, "kvad_logits.safetensors"))["logits"]
        if os.path.isdir(os.path.join(d, "adapter")):
            import peft
            base = AutoModelForCausalLM.from_pretrained(os.path.join(d, "base"), dtype=torch.float32,
                                                        attn_implementation="eager")
            model = peft.PeftModel.from_pretrained(base, os.path.join(d, "adapter"))
        else:
            model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        with open(os.path.join(common.FIX, "goldens", "train", f"{name}.json")) as f:
            ids = torch.tensor(json.load(f)["ids"][:1])
        with torch.no_grad():
            got = model(input_ids=ids).logits[0]
        rel = ((got - want).abs().max() / want.abs().max()).item()
        worst = max(worst, rel)
        print(f"{name}: transformers{' + peft' if 'lora' in name else ''} on kvad's checkpoint: largest difference "
              f"{rel:.2e} of the largest logit")
    assert worst < 1e-4, worst


if __name__ == "__main__":
    main(sys.argv[1])
