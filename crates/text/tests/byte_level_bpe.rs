//! kvad's `ByteLevelBpe` against `tokenizers`' `BPE` on the real SmolLM2 vocabulary (49,152 tokens,
//! ~48,900 merges): the same tokens (ids, strings, offsets) on the committed public-domain text, on
//! each of its lines and on thousands of random strings, both as the pre-tokenizer splits them and
//! whole. Then the whole GGUF pipeline against the model's own tokenizer.json, ids and offsets.

mod common;

use kvad_text::{ByteLevelBpe, GgufVocab, Tokenizer};
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{Model, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

use common::gguf_meta::vocab_from_gguf;
use common::{fixture, smollm2_gguf};

type Tokens = Vec<(u32, String, (usize, usize))>;

fn tokens(m: &impl Model, word: &str) -> Tokens {
    m.tokenize(word).expect("tokenize").into_iter().map(|t| (t.id, t.value, t.offsets)).collect()
}

/// Both models from the GGUF's vocabulary; `BPE` configured as kvad configured it before.
fn models() -> (GgufVocab, ByteLevelBpe, BPE) {
    let v = vocab_from_gguf(&smollm2_gguf()).expect("read GGUF metadata");
    let merges = v.merges.clone().expect("SmolLM2 has merges");
    let ours = ByteLevelBpe::from_gguf(v.tokens.clone(), &merges).expect("ours builds");
    let mut vocab = Vocab::with_capacity(v.tokens.len());
    vocab.extend(v.tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)));
    let pairs = merges
        .iter()
        .map(|m| m.split_once(' ').map(|(l, r)| (l.to_string(), r.to_string())).expect("a space"))
        .collect();
    let reference = BPE::builder()
        .vocab_and_merges(vocab, pairs)
        .continuing_subword_prefix(String::new())
        .end_of_word_suffix(String::new())
        .build()
        .expect("reference builds");
    (v, ours, reference)
}

/// The words the byte-level pre-tokenizer makes of `text` (GPT-2's split, byte alphabet).
fn words(text: &str) -> Vec<String> {
    let mut pts = PreTokenizedString::from(text);
    ByteLevel::new(false, true, true).pre_tokenize(&mut pts).expect("pre-tokenize");
    pts.get_splits(OffsetReferential::Original, OffsetType::Byte).into_iter().map(|(w, _, _)| w.to_string()).collect()
}

/// `text` spelled in the byte alphabet as one word (no split): long runs, spaces inside.
fn respelled(text: &str) -> String {
    let mut pts = PreTokenizedString::from(text);
    ByteLevel::new(false, false, false).pre_tokenize(&mut pts).expect("pre-tokenize");
    pts.get_splits(OffsetReferential::Original, OffsetType::Byte).into_iter().map(|(w, _, _)| w).collect()
}

/// Counts the words compared; panics naming the first that differs.
fn compare(ours: &ByteLevelBpe, reference: &BPE, text: &str) -> usize {
    // As the tokenizer sees it, and whole: respelled (one long word) and raw (characters outside the
    // byte alphabet, such as CJK, have no token and are dropped).
    let mut all = words(text);
    all.push(respelled(text));
    all.push(text.to_string());
    for w in &all {
        assert_eq!(tokens(ours, w), tokens(reference, w), "word {w:?} of text {text:?}");
    }
    all.len()
}

/// A small deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }
}

/// Random text: ASCII words and punctuation, Latin-1, CJK, emoji (with modifiers and joiners),
/// combining marks, runs of whitespace, digits, and now and then a run of thousands of characters
/// without a space.
fn random_text(rng: &mut Rng) -> String {
    const PIECES: &[&str] = &[
        "the",
        "The",
        " of",
        "ing",
        "tion",
        "qu",
        "x",
        "Zz",
        "don't",
        "I'm",
        "'s",
        "'ll",
        "42",
        "3.14159",
        "1,000",
        "é",
        "ß",
        "ñ",
        "ü",
        "©",
        "¿",
        "À",
        "ø",
        "æ",
        "日本語",
        "中文",
        "한국어",
        "Привет",
        "مرحبا",
        "🎉",
        "👍🏽",
        "👩\u{200d}💻",
        "e\u{301}",
        "\u{0}",
        "\u{7f}",
        "\u{ad}",
        "\u{fffd}",
        "->",
        "::",
        "{}",
        "()",
        "#",
        "$",
        "%",
        "--",
        ".",
        ",",
        "!",
        "?",
        "\"",
        "\\",
        "/",
        "_",
        "@",
    ];
    const SPACES: &[&str] = &[" ", " ", " ", "  ", "\t", "\n", "\n\n", " \n ", "\r\n", "   \t ", "\u{a0}", "\u{3000}"];
    let mut out = String::new();
    for _ in 0..1 + rng.below(40) {
        match rng.below(20) {
            0 => {
                let n = 500 + rng.below(3000);
                let alphabet = rng.pick(&["ab", "abcdefghij", "0123456789", "é日a", "🎉!"]);
                let chars: Vec<char> = alphabet.chars().collect();
                out.extend((0..n).map(|_| chars[rng.below(chars.len())]));
            }
            1..=6 => out.push_str(rng.pick(SPACES)),
            _ => out.push_str(rng.pick(PIECES)),
        }
    }
    out
}

#[test]
fn smollm2_vocabulary_encodes_as_tokenizers_bpe() {
    let (v, ours, reference) = models();
    assert_eq!(ours.get_vocab_size(), reference.get_vocab_size());
    for id in [0, 1, 2, 255, 256, 1000, 49_151, 49_152] {
        assert_eq!(ours.id_to_token(id), reference.id_to_token(id), "id {id}");
    }
    for t in v.tokens.iter().step_by(97) {
        assert_eq!(ours.token_to_id(t), reference.token_to_id(t), "token {t:?}");
    }

    let text = std::fs::read_to_string(fixture("fixtures/text/public-domain.txt")).expect("read text");
    let mut compared = compare(&ours, &reference, &text);
    for line in text.lines() {
        compared += compare(&ours, &reference, line);
    }
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for _ in 0..3000 {
        compared += compare(&ours, &reference, &random_text(&mut rng));
    }
    assert!(compared > 50_000, "only {compared} words compared");
}

/// The GGUF's tokenizer (kvad's model, HF's pre-tokenizer and added tokens) against the same model's
/// tokenizer.json (HF's BPE): the same ids and offsets for every line of the text and random strings.
#[test]
fn smollm2_gguf_pipeline_matches_tokenizer_json() {
    let gguf = Tokenizer::from_gguf_vocab(vocab_from_gguf(&smollm2_gguf()).expect("read GGUF")).expect("convert");
    let json = Tokenizer::from_file(&fixture("fixtures/tokenizers/smollm2/tokenizer.json")).expect("load json");
    let text = std::fs::read_to_string(fixture("fixtures/text/public-domain.txt")).expect("read text");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut cases: Vec<String> = text.lines().map(str::to_string).collect();
    cases.push(text.clone());
    cases.push("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n".into());
    cases.extend((0..500).map(|_| random_text(&mut rng)));
    for c in &cases {
        let (a, b) = (gguf.inner().encode(c.as_str(), false), json.inner().encode(c.as_str(), false));
        let (a, b) = (a.expect("encode gguf"), b.expect("encode json"));
        assert_eq!(a.get_ids(), b.get_ids(), "ids of {c:?}");
        assert_eq!(a.get_offsets(), b.get_offsets(), "offsets of {c:?}");
    }
}
