"""PyTorch bf16 greedy goldens for the GPU backends: each fixture model loaded in bf16 (weights and arithmetic),
16 greedy steps from each golden prompt re-running the full sequence, and at every step the gap between the top
two logits, so a test can tell a near-tie (where bf16 arithmetic of two implementations may part) from a bug.

Writes fixtures/goldens/models-bf16/<name>.json. Run after models.py (names as arguments: only those fixtures).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402

torch.set_num_threads(1)

# llama-gguf holds llama-tied's weights (q/k permuted, `output` a copy of the tied head): the same bf16 model.
SOURCES = {"llama-gguf": "llama-tied"}


@torch.no_grad()
def main():
    from transformers import AutoModelForCausalLM

    gold_dir = common.fix("goldens", "models")
    out_dir = common.fix("goldens", "models-bf16")
    os.makedirs(out_dir, exist_ok=True)
    only = set(sys.argv[1:])
    for f in sorted(os.listdir(gold_dir)):
        name = f[:-5]
        if only and name not in only:
            continue
        with open(os.path.join(gold_dir, f)) as fh:
            gold = json.load(fh)
        d = os.path.join(common.FIX, "models", SOURCES.get(name, name))
        if not os.path.exists(os.path.join(d, "config.json")):
            continue  # a GGUF form of another fixture (moe_models.py): the same model as that one
        with open(os.path.join(d, "config.json")) as fh:
            if json.load(fh).get("moe_layer_freq", 1) != 1:
                continue  # transformers ignores moe_layer_freq; moe_models.py builds that reference by hand
        m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, attn_implementation="eager").eval()
        cases = []
        for c in gold["cases"]:
            seq = list(c["prompt"])
            greedy, gaps = [], []
            for _ in range(len(c["greedy"])):
                out = m(input_ids=torch.tensor([seq])).logits[0, -1].float()
                top = torch.topk(out, 2)
                nxt = int(top.indices[0])
                greedy.append(nxt)
                gaps.append(float(top.values[0] - top.values[1]))
                seq.append(nxt)
            cases.append({"prompt": c["prompt"], "greedy": greedy, "gaps": gaps})
        obj = {"model": name, "source": gold["source"], "versions": common.versions(),
               "how": "bf16 weights and arithmetic (transformers eager); greedy = argmax re-running the full "
                      "sequence each step; gaps[i] = top-1 minus top-2 logit at step i",
               "cases": cases}
        common.dump_json(os.path.join(out_dir, f"{name}.json"), obj)
        same = sum(a == b for c, g in zip(cases, gold["cases"]) for a, b in zip(c["greedy"], g["greedy"]))
        print(f"{name}: bf16 greedy equal to f32 at {same}/{sum(len(c['greedy']) for c in cases)} steps")


if __name__ == "__main__":
    main()
