"""Tiny random-weight embedding models in sentence-transformers' layout, and their goldens.

qwen3-embed: Qwen3-Embedding's layout. A base checkpoint (tensors without `model.`, no lm_head, an untied config
naming Qwen3ForCausalLM as the real one does), a byte-level BPE tokenizer whose post-processor appends
<|endoftext|>, modules.json with last-token pooling and Normalize, and `is_matryoshka` (vLLM's flag for `dimensions`).
llama-embed-mean: a LlamaModel base checkpoint (config naming LlamaModel, as e5-style models do), mean pooling, no
Normalize module (its vectors are not unit length).

Writes fixtures/models/<name>/ and fixtures/goldens/embed/<name>.json: each text's token ids and the vectors
sentence-transformers' `encode` gives for the texts as one padded batch (and, for qwen3-embed, truncated to 16
dimensions and normalised again).
"""
import json
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402

torch.set_num_threads(1)

CORPUS = [
    "the quick brown fox jumps over the lazy dog while the cat sleeps in the warm afternoon sun",
    "embeddings map text to vectors so that similar meanings lie close together in the space",
    "Oslo is the capital of Norway; Bergen is known for rain and the fish market by the harbour",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
    "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery: weather",
]
TEXTS = [
    "What is the capital of Norway?",
    "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery: rain in Bergen",
    "a",
    # long enough to take more than one CPU prompt pass (256 rows)
    " ".join(CORPUS) + " " + " ".join(CORPUS[:2]),
]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def make_tokenizer(d, append_eos):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS * 4, trainer)
    eos = tok.token_to_id("<|endoftext|>")
    if append_eos:
        tok.post_processor = processors.TemplateProcessing(
            single="$A <|endoftext|>", pair="$A <|endoftext|> $B:1 <|endoftext|>:1",
            special_tokens=[("<|endoftext|>", eos)])
    tok.save(os.path.join(d, "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
           "padding_side": "left", "model_max_length": 512, "clean_up_tokenization_spaces": False}
    common.dump_json(os.path.join(d, "tokenizer_config.json"), cfg, indent=2)
    return tok.get_vocab_size()


def write_st_files(d, hidden, pooling, normalize):
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        # A folder with no files (git keeps none, nor does the Hub): Normalize reads nothing from it.
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    common.dump_json(os.path.join(d, "modules.json"), modules, indent=2)
    os.makedirs(os.path.join(d, "1_Pooling"), exist_ok=True)
    modes = {"cls_token": False, "mean_tokens": False, "max_tokens": False, "mean_sqrt_len_tokens": False,
             "weightedmean_tokens": False, "lasttoken": False}
    modes[pooling] = True
    pool = {"word_embedding_dimension": hidden, **{f"pooling_mode_{k}": v for k, v in modes.items()},
            "include_prompt": True}
    common.dump_json(os.path.join(d, "1_Pooling", "config.json"), pool, indent=2)
    common.dump_json(os.path.join(d, "sentence_bert_config.json"), {"max_seq_length": 512, "do_lower_case": False},
                     indent=2)
    common.dump_json(os.path.join(d, "config_sentence_transformers.json"),
                     {"prompts": {"query": "Instruct: Given a web search query, retrieve relevant passages that "
                                           "answer the query\nQuery:", "document": ""},
                      "default_prompt_name": None, "similarity_fn_name": "cosine"}, indent=2)


def add_noise(model, seed):
    g = torch.Generator().manual_seed(seed + 7919)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.add_(0.3 * torch.randn(p.shape, generator=g))


def build(name, base_cls, cfg_cls, kw, seed, pooling, normalize, architectures, append_eos, extra_config):
    d = os.path.join(common.FIX, "models", name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    vocab = make_tokenizer(d, append_eos)
    torch.manual_seed(seed)
    cfg = cfg_cls(vocab_size=vocab + 20, **kw)
    cfg._attn_implementation = "eager"
    model = base_cls(cfg).float().eval()
    add_noise(model, seed)
    model.save_pretrained(d, safe_serialization=True)
    for f in os.listdir(d):
        if f not in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
            os.remove(os.path.join(d, f))
    path = os.path.join(d, "config.json")
    with open(path) as f:
        c = json.load(f)
    c["architectures"] = architectures
    c.update(extra_config)
    common.dump_json(path, c, indent=2)
    write_st_files(d, kw["hidden_size"], pooling, normalize)
    return d


@torch.no_grad()
def goldens(name, d, dims):
    from sentence_transformers import SentenceTransformer
    st = SentenceTransformer(d, device="cpu")
    tokens = [st.tokenizer(t)["input_ids"] for t in TEXTS]
    vecs = st.encode(TEXTS, batch_size=len(TEXTS), convert_to_numpy=True)
    out = {"source": common.rel(d), "versions": common.versions("torch", "transformers", "tokenizers",
                                                                  "sentence-transformers"),
           "texts": TEXTS, "tokens": tokens, "embeddings": [common.f32list(v) for v in vecs]}
    if dims:
        short = st.encode(TEXTS, batch_size=len(TEXTS), convert_to_numpy=True, truncate_dim=dims,
                          normalize_embeddings=True)
        out["dimensions"] = dims
        out["truncated"] = [common.f32list(v) for v in short]
    os.makedirs(os.path.join(common.FIX, "goldens", "embed"), exist_ok=True)
    common.dump_json(os.path.join(common.FIX, "goldens", "embed", f"{name}.json"), out)
    print(name, [len(t) for t in tokens], "norms", [round(float(np.linalg.norm(v)), 4) for v in vecs])


def main():
    from transformers import LlamaConfig, LlamaModel, Qwen3Config, Qwen3Model
    common_kw = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     intermediate_size=128, rms_norm_eps=1e-6, initializer_range=0.3, max_position_embeddings=512)
    d = build("qwen3-embed", Qwen3Model, Qwen3Config,
              dict(common_kw, head_dim=32, rope_theta=1000000.0, tie_word_embeddings=False,
                   use_sliding_window=False, attention_bias=False, bos_token_id=0, eos_token_id=0),
              201, "lasttoken", True, ["Qwen3ForCausalLM"], True, {"is_matryoshka": True})
    goldens("qwen3-embed", d, 16)
    d = build("llama-embed-mean", LlamaModel, LlamaConfig,
              dict(common_kw, rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0),
              202, "mean_tokens", False, ["LlamaModel"], False, {})
    goldens("llama-embed-mean", d, None)


if __name__ == "__main__":
    main()
