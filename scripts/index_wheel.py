"""Builds the model index's release: the wheel of the PyPI package `kvad-index`, which `kvad models update` fetches
by default (crates/hub/src/index.rs). It carries one file, `kvad_index/index.json`: the committed index
(crates/hub/index/models.json) unless another is named. A release publishes it beside the `kvad` wheel
(scripts/wheel.sh), with a version of its own, so the index can move between kvad releases.

    python3 scripts/index_wheel.py OUT_DIR VERSION [INDEX_JSON]

Standard library only; the wheel is a plain zip with the METADATA, WHEEL and RECORD files pip reads.
"""
import base64
import hashlib
import json
import os
import sys
import zipfile

NAME = "kvad-index"
DIST = "kvad_index"


def digest(data):
    """RECORD's hash of a file: sha256, urlsafe base64 without padding."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    out, version = sys.argv[1], sys.argv[2]
    here = os.path.dirname(os.path.abspath(__file__))
    src = sys.argv[3] if len(sys.argv) == 4 else os.path.join(here, "..", "crates", "hub", "index", "models.json")
    with open(src, "rb") as f:
        index = f.read()
    parsed = json.loads(index)
    if parsed.get("version") != 1 or not isinstance(parsed.get("models"), list):
        sys.exit(f"{src}: not a version-1 kvad model index (field 'version' is {parsed.get('version')!r})")
    info = f"{DIST}-{version}.dist-info"
    files = {
        f"{DIST}/__init__.py": b'"""kvad\'s model index: index.json beside this file."""\n',
        f"{DIST}/index.json": index,
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\n"
            "Summary: The model index kvad's `models update` fetches: supported models, draft candidates, relatives\n"
            "License: Apache-2.0\n"
        ).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: kvad scripts/index_wheel.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{n},{digest(d)},{len(d)}\n" for n, d in files.items()) + f"{info}/RECORD,,\n"
    files[f"{info}/RECORD"] = record.encode()
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"{DIST}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files.items():
            z.writestr(n, d)
    print(path)


if __name__ == "__main__":
    main()
