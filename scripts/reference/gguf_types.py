"""fixtures/gguf/types.gguf: one [2, 256]-element tensor per GGML type + metadata of every GGUF value type.

Golden: fixtures/goldens/gguf_types.json
  tensors: {name: {"type", "ne" (GGUF dim order: ne[0] = contiguous dim), "shape_rowmajor" (numpy order),
                   "values" (dequantised, memory order = row-major over shape_rowmajor)}}
  metadata: {key: {"type", "value"} (arrays: "type": "ARRAY", "item_type")}
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402

ROWS, COLS = 2, 256


def f16_bytes(rng, n, lo, hi):
    v = rng.uniform(lo, hi, size=n).astype(np.float16)
    return v.view(np.uint8)


def raw_kquant_blocks(rng, qtype):
    """Random bytes for K-quant blocks (no quantizer in gguf-py) with finite, small f16 scales."""
    import gguf
    from gguf.constants import GGML_QUANT_SIZES

    block, tsize = GGML_QUANT_SIZES[qtype]
    nblk = ROWS * COLS // block
    b = rng.integers(0, 256, size=(nblk, tsize), dtype=np.uint8)
    T = gguf.GGMLQuantizationType
    for i in range(nblk):
        if qtype in (T.Q4_K, T.Q5_K):      # d, dmin at the start
            b[i, 0:2] = f16_bytes(rng, 1, 0.001, 0.02)
            b[i, 2:4] = f16_bytes(rng, 1, 0.001, 0.02)
        elif qtype == T.Q6_K:              # ql[128] qh[64] scales[16] (int8) d
            b[i, 208:210] = f16_bytes(rng, 1, 0.0005, 0.005)
        elif qtype == T.Q2_K:              # scales[16] qs[64] d dmin
            b[i, 80:82] = f16_bytes(rng, 1, 0.001, 0.02)
            b[i, 82:84] = f16_bytes(rng, 1, 0.001, 0.02)
        elif qtype == T.Q3_K:              # hmask[32] qs[64] scales[12] d
            b[i, 108:110] = f16_bytes(rng, 1, 0.001, 0.02)
        else:
            raise ValueError(qtype)
    return b.reshape(ROWS, -1)


def main():
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf import GGUFReader, GGUFValueType as V

    rng = np.random.default_rng(4242)
    out = common.fix("gguf", "types.gguf")
    w = gguf.GGUFWriter(out, "kvad-test")  # GGUF version 3 (gguf-py writes v3)
    w.add_name("kvad-gguf-types")

    meta = [
        ("test.u8", V.UINT8, 200), ("test.i8", V.INT8, -100), ("test.u16", V.UINT16, 60000),
        ("test.i16", V.INT16, -30000), ("test.u32", V.UINT32, 4000000000), ("test.i32", V.INT32, -2000000000),
        ("test.u64", V.UINT64, 2**63 + 5), ("test.i64", V.INT64, -(2**62) - 3),
        ("test.f32", V.FLOAT32, 0.1), ("test.f64", V.FLOAT64, 1.0 / 3.0),
        ("test.bool_true", V.BOOL, True), ("test.bool_false", V.BOOL, False),
        ("test.string", V.STRING, "héllo wörld 🚀 \"quoted\"\n"), ("test.string_empty", V.STRING, ""),
    ]
    for k, t, v in meta:
        w.add_key_value(k, v, t)
    w.add_key_value("test.arr_i32", [1, -2, 3, 2147483647], V.ARRAY, sub_type=V.INT32)
    w.add_key_value("test.arr_str", ["a", "", "ü日本", "<|im_end|>"], V.ARRAY, sub_type=V.STRING)
    w.add_key_value("test.arr_f32", [0.5, -1.25, 3.0e-5], V.ARRAY, sub_type=V.FLOAT32)

    src = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    tensors = {}
    plan = [("t_f32", T.F32), ("t_f16", T.F16), ("t_bf16", T.BF16), ("t_q8_0", T.Q8_0), ("t_q4_0", T.Q4_0),
            ("t_q4_1", T.Q4_1), ("t_q5_0", T.Q5_0), ("t_q5_1", T.Q5_1),
            ("t_q4_k", T.Q4_K), ("t_q6_k", T.Q6_K), ("t_q5_k", T.Q5_K), ("t_q2_k", T.Q2_K), ("t_q3_k", T.Q3_K)]
    for name, qt in plan:
        if qt == T.F32:
            data = src.copy()
            w.add_tensor(name, data)
        elif qt == T.F16:
            data = src.astype(np.float16)
            w.add_tensor(name, data)
        elif qt in (T.Q4_K, T.Q6_K, T.Q5_K, T.Q2_K, T.Q3_K):
            data = raw_kquant_blocks(rng, qt)
            w.add_tensor(name, data, raw_dtype=qt)
        else:
            data = gguf.quants.quantize(src, qt)
            w.add_tensor(name, data, raw_dtype=qt)
        vals = gguf.quants.dequantize(data, qt).astype(np.float32).reshape(ROWS, COLS)
        assert np.all(np.isfinite(vals)), name
        tensors[name] = {"type": qt.name, "ne": [COLS, ROWS], "shape_rowmajor": [ROWS, COLS],
                         "values": common.f32list(vals)}
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # read back and cross-check with GGUFReader
    r = GGUFReader(out)
    for t in r.tensors:
        g = tensors[t.name]
        assert list(map(int, t.shape)) == g["ne"], (t.name, t.shape)
        assert t.tensor_type.name == g["type"]
        deq = gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1)
        assert np.array_equal(deq.astype(np.float32), np.array(g["values"], dtype=np.float32)), t.name
        g["data_offset"] = int(t.data_offset)
        g["n_bytes"] = int(t.n_bytes)

    # second, independent dequantiser: transformers' torch implementation must agree bit for bit
    try:
        import torch
        from transformers.integrations.gguf import dequant as tdq
        for t in r.tensors:
            if int(t.tensor_type) in tdq.GGML_BLOCK:
                raw = torch.from_numpy(np.ascontiguousarray(t.data).view(np.uint8).reshape(-1).copy())
                v = tdq.dequantize(raw, int(t.tensor_type)).numpy()
                assert np.array_equal(v, np.array(tensors[t.name]["values"], dtype=np.float32)), t.name
                tensors[t.name]["cross_checked_with_transformers_dequant"] = True
    except ImportError:
        pass

    md = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        t = f.types[0]
        if t == V.ARRAY:
            it = f.types[1]
            vals = [f.contents(i) for i in range(len(f.data))] if hasattr(f, "contents") else None
            vals = f.contents()
            if it == V.FLOAT32:
                vals = common.f32list(vals)
            md[k] = {"type": "ARRAY", "item_type": it.name, "value": vals}
        else:
            v = f.contents()
            if t == V.FLOAT32:
                v = common.f32list([v])[0]
            md[k] = {"type": t.name, "value": v}
    common.dump_json(common.fix("goldens", "gguf_types.json"), {
        "source": "fixtures/gguf/types.gguf",
        "gguf_version": 3, "alignment": 32, "architecture": "kvad-test",
        "how": "F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 via gguf.quants.quantize of seeded N(0,1) data; K-quants "
               "(Q4_K, Q6_K, Q5_K, Q2_K, Q3_K) are random raw block bytes with small finite f16 scales; values = "
               "gguf.quants.dequantize(raw). 'ne' is GGUF order (ne[0] contiguous); values in memory order.",
        "source_values_f32": common.f32list(src),
        "versions": common.versions("gguf", "numpy"),
        "metadata": md,
        "tensors": tensors,
    })
    print("types.gguf", os.path.getsize(out), "bytes;", len(tensors), "tensors;", len(md), "metadata keys")


if __name__ == "__main__":
    main()
