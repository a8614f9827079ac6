"""Perplexity golden of the real test model (SmolLM2-135M-Instruct Q4_1, dequantised to f32 by transformers) on the
committed public-domain text, for kvad's perplexity job and `kvad ppl`. Writes fixtures/goldens/smollm2_ppl.json.

Two readings, each the exponent of the mean negative log-likelihood of every token given those before it:
- "whole": the file as one text (tokens as `tok(text)` gives them), read in one forward pass;
- "documents": the file as a plain-text dataset (documents separated by blank lines, each trimmed), each document
  tokenized and read from an empty cache, its first token not scored; the NLL summed over all documents' tokens.
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402

torch.set_num_threads(1)


@torch.no_grad()
def nll(model, ids):
    logits = model(input_ids=torch.tensor([ids])).logits[0].double()
    lp = torch.log_softmax(logits[:-1], dim=-1)
    target = torch.tensor(ids[1:])
    return float(-lp[torch.arange(len(ids) - 1), target].sum()), len(ids) - 1


def main():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d, name = os.path.split(common.SMOLLM2_GGUF)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32).eval()
    path = common.fix("text", "public-domain.txt")
    text = open(path, encoding="utf-8").read()

    ids = tok(text)["input_ids"]
    s, n = nll(model, ids)
    whole = {"tokens": n, "nll": s / n, "ppl": float(np.exp(s / n)), "ids": len(ids)}

    docs = [x.strip() for x in text.split("\n\n") if x.strip()]
    total, count, per = 0.0, 0, []
    for doc in docs:
        ds, dn = nll(model, tok(doc)["input_ids"])
        total += ds
        count += dn
        per.append({"tokens": dn, "nll_sum": ds})
    documents = {"documents": len(docs), "tokens": count, "nll": total / count, "ppl": float(np.exp(total / count)),
                 "each": per}

    common.dump_json(common.fix("goldens", "smollm2_ppl.json"), {
        "model": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "text": common.rel(path),
        "how": "transformers AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., dtype=float32), one forward "
               "pass per text, log_softmax in float64; documents: split on blank lines and trimmed, as kvad's "
               "plain-text datasets are",
        "versions": common.versions(),
        "whole": whole,
        "documents": documents,
    }, indent=1)
    print("whole", whole)
    print("documents", {k: v for k, v in documents.items() if k != "each"})


if __name__ == "__main__":
    main()
