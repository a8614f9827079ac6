"""The random weights of the benchmark models (N(0, 0.02), norms 1), written into a GGUF tensor by tensor so that a
15 B model never sits in memory whole. Drawn with torch on the GPU where there is one (seconds), else with numpy on
the CPU (minutes): the CPU side by sides make the same shapes on the 2-core machine, which has no torch. The two
draw different numbers from the same seed; a benchmark only needs the shapes and the spread.
"""
import time

import gguf
import numpy as np


class _Source:
    """Float32 normals from torch's generator on the GPU, or numpy's PCG64."""

    def __init__(self, seed):
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None and torch.cuda.is_available():
            self.torch = torch
            self.g = torch.Generator(device="cuda").manual_seed(seed)
        else:
            self.torch = None
            self.rng = np.random.default_rng(seed)

    def normal(self, shape):
        if self.torch is not None:
            t = self.torch.randn(shape, generator=self.g, device="cuda", dtype=self.torch.float32)
            return t.mul_(0.02).cpu().numpy()
        x = self.rng.standard_normal(shape, dtype=np.float32)
        x *= 0.02
        return x


def to_bf16(x):
    """Float32 to bf16 bits, rounded to nearest even (as torch rounds)."""
    u = x.view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write(w, plan, seed=0):
    """Writes `plan` ((name, row-major shape, kind) in file order; kind 'norm' is f32 ones, 'neg' f32 minus ones (a
    delta net's decay rates), 'router' f32 random, 'w' bf16 random) into the GGUFWriter `w` after its key/values, then
    closes it; returns the random parameters written.
    """
    for name, shape, kind in plan:
        if kind == "w":
            w.add_tensor_info(name, shape, np.dtype(np.uint16), int(np.prod(shape)) * 2, gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor_info(name, shape, np.dtype(np.float32), int(np.prod(shape)) * 4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    src, t0, n = _Source(seed), time.time(), 0
    for name, shape, kind in plan:
        if kind in ("norm", "neg"):
            w.write_tensor_data(np.full(shape, 1.0 if kind == "norm" else -1.0, dtype=np.float32))
            continue
        x = src.normal(shape)
        w.write_tensor_data(x if kind == "router" else to_bf16(x))
        n += x.size
    w.close()
    return n, time.time() - t0
