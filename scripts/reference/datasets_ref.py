"""Dataset repos as the Hub holds them, for the Hub-dataset tests: Parquet files written by pyarrow with snappy
compression (what `datasets.Dataset.to_parquet` and the Hub's parquet conversion write), laid out as `datasets`
names splits. Writes fixtures/datasets/{cat-text,cat-chat}/ and the rows each holds (rows.json).
"""
import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402

TEXT = {
    "train": ["the cat sat on the mat", "the dog sat on the log", "a bird sat on the wire"],
    "validation": ["the cat sat on the hat"],
}
CHAT = {
    "train": [
        [{"role": "user", "content": "the cat?"}, {"role": "assistant", "content": "on the mat."}],
        [{"role": "system", "content": "short answers"}, {"role": "user", "content": "the dog?"},
         {"role": "assistant", "content": "on the log."}],
    ],
}


def write(path, table):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(table, path, compression="snappy")


def main():
    base = common.fix("datasets", "x")[:-2]
    for split, rows in TEXT.items():
        write(os.path.join(base, "cat-text", "data", f"{split}-00000-of-00001.parquet"),
              pa.table({"text": rows, "source": ["fixture"] * len(rows)}))
    msg = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    write(os.path.join(base, "cat-chat", "data", "train-00000-of-00001.parquet"),
          pa.table({"messages": pa.array(CHAT["train"], type=msg)}))
    with open(os.path.join(base, "rows.json"), "w", encoding="utf-8") as f:
        json.dump({"cat-text": TEXT, "cat-chat": CHAT, "pyarrow": pa.__version__}, f, indent=1)
        f.write("\n")
    print("written", base)


if __name__ == "__main__":
    main()
