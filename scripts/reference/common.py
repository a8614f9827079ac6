"""Shared helpers for the reference fixture scripts (run inside .venv-ref)."""
import json
import os
from importlib import metadata

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIX = os.path.join(ROOT, "fixtures")
MODELS_DIR = os.path.join(ROOT, ".models")
SMOLLM2_GGUF = os.path.join(MODELS_DIR, "SmolLM2-135M-Instruct.Q4_1.gguf")


def fix(*parts):
    p = os.path.join(FIX, *parts)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    return p


def rel(path):
    return os.path.relpath(path, ROOT)


def versions(*names):
    names = names or ("torch", "transformers", "tokenizers", "sentencepiece", "gguf", "jinja2", "numpy", "safetensors")
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            out[n] = None
    return out


def f32list(arr):
    """float32 values as Python floats printed with the shortest repr that round-trips the f32.

    str(np.float32(x)) is the shortest decimal that parses back (as f32) to exactly x."""
    a = np.asarray(arr, dtype=np.float32).ravel()
    return [float(str(v)) if np.isfinite(v) else str(v) for v in a]


def dump_json(path, obj, indent=None):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=indent, separators=(",", ":") if indent is None else None)
        f.write("\n")
