//! `ByteLevelBpe` against `tokenizers`' `BPE` on small hand-made and random vocabularies: same
//! tokens (id, string, offsets) for every word, same refusals. The real SmolLM2 vocabulary is
//! compared in tests/byte_level_bpe.rs.

use super::*;
use tokenizers::models::bpe::Vocab as HfVocab;

/// `tokenizers`' BPE configured as kvad configured it for byte-level GGUFs before it had its own.
fn reference(tokens: &[&str], merges: &[(&str, &str)]) -> tokenizers::Result<BPE> {
    let mut vocab = HfVocab::with_capacity(tokens.len());
    vocab.extend(tokens.iter().enumerate().map(|(i, t)| (t.to_string(), i as u32)));
    let merges = merges.iter().map(|(l, r)| (l.to_string(), r.to_string())).collect();
    BPE::builder()
        .vocab_and_merges(vocab, merges)
        .continuing_subword_prefix(String::new())
        .end_of_word_suffix(String::new())
        .build()
}

fn ours(tokens: &[&str], merges: &[(&str, &str)]) -> Result<ByteLevelBpe, TextError> {
    ByteLevelBpe::new(tokens.iter().map(|t| t.to_string()).collect(), merges.iter().copied())
}

fn tokens(m: &impl Model, word: &str) -> Vec<(u32, String, (usize, usize))> {
    m.tokenize(word).expect("tokenize").into_iter().map(|t| (t.id, t.value, t.offsets)).collect()
}

/// Builds both models and checks every word gives the same tokens; returns ours for more checks.
fn check(vocab: &[&str], merges: &[(&str, &str)], words: &[&str]) -> ByteLevelBpe {
    let (want, got) = (reference(vocab, merges).expect("reference builds"), ours(vocab, merges).expect("ours builds"));
    for w in words {
        assert_eq!(tokens(&got, w), tokens(&want, w), "word {w:?}");
    }
    assert_eq!(got.get_vocab_size(), want.get_vocab_size());
    assert_eq!(got.get_vocab(), want.get_vocab());
    for id in 0..vocab.len() as u32 + 1 {
        assert_eq!(got.id_to_token(id), want.id_to_token(id), "id {id}");
    }
    got
}

#[test]
fn ties_go_to_the_leftmost_pair() {
    let m = check(&["a", "aa", "aaaa"], &[("a", "a"), ("aa", "aa")], &["aaa", "aaaa", "aaaaa", "a", ""]);
    assert_eq!(tokens(&m, "aaa"), vec![(1, "aa".into(), (0, 2)), (0, "a".into(), (2, 3))]);
}

#[test]
fn lower_rank_merges_first() {
    let vocab = ["a", "b", "c", "ab", "bc", "abc"];
    // "bc" outranks "ab": abc = a + bc; the other order makes ab + c.
    let m = check(&vocab, &[("b", "c"), ("a", "b"), ("a", "bc")], &["abc", "abcabc", "cab"]);
    assert_eq!(tokens(&m, "abc"), vec![(5, "abc".into(), (0, 3))]);
    let m = check(&vocab, &[("a", "b"), ("b", "c")], &["abc"]);
    assert_eq!(tokens(&m, "abc"), vec![(3, "ab".into(), (0, 2)), (2, "c".into(), (2, 3))]);
}

#[test]
fn two_pairs_making_one_token() {
    // "a bc" and "ab c" both make "abc" at different ranks: which one applies depends on the pair,
    // not on what it makes.
    let vocab = ["a", "b", "c", "d", "ab", "bc", "abc", "cd"];
    let merges = [("b", "c"), ("a", "b"), ("c", "d"), ("ab", "c"), ("a", "bc")];
    check(&vocab, &merges, &["abc", "abcd", "abcabc", "aabcc", "bcd", "dabcd"]);
}

#[test]
fn characters_outside_the_vocabulary_are_dropped() {
    // Offsets then count only the characters kept, as in `tokenizers` without an unknown token.
    let m = check(&["a", "b", "ab"], &[("a", "b")], &["axb", "xab", "abx", "x", "éaé b"]);
    assert_eq!(tokens(&m, "xab"), vec![(2, "ab".into(), (0, 2))]);
    assert_eq!(tokens(&m, "axb"), vec![(2, "ab".into(), (0, 2))]);
}

#[test]
fn repeated_tokens_and_merges_keep_the_later_one() {
    let vocab = ["a", "b", "ab", "a", "ab", "c", "abc"];
    let merges = [("a", "b"), ("ab", "c"), ("a", "b")];
    check(&vocab, &merges, &["ab", "abc", "aab", "cab"]);
}

#[test]
fn merges_outside_the_vocabulary_are_refused() {
    // ("zz" makes the longest token as long as "ab": `BPE` panics, rather than refuses, on a merge
    // longer than every token; we refuse that too.)
    let vocab = ["a", "b", "zz"];
    for merges in [[("a", "b")], [("a", "z")], [("z", "a")]] {
        assert!(reference(&vocab, &merges).is_err());
        let err = ours(&vocab, &merges).unwrap_err().to_string();
        assert!(err.contains("tokenizer.ggml.merges") && err.contains("not in the vocabulary"), "{err}");
    }
}

#[test]
fn a_merge_longer_than_every_token_is_refused() {
    let err = ours(&["a", "b"], &[("a", "b")]).unwrap_err().to_string();
    assert!(err.contains("\"ab\" is not in the vocabulary"), "{err}");
}

#[test]
fn gguf_merges_split_at_the_first_space() {
    let tokens = || vec!["a".to_string(), "b".into(), "ab".into()];
    let m = ByteLevelBpe::from_gguf(tokens(), &["a b".into()]).unwrap();
    assert_eq!(m.tokenize("ab").unwrap()[0].id, 2);
    let err = ByteLevelBpe::from_gguf(tokens(), &["a b".into(), "ab".into()]).unwrap_err().to_string();
    assert!(err.contains("no space"), "{err}");
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
}

/// Random vocabularies built by merging random pairs (so many tokens have several ways to be made,
/// some merges repeat, and some make a token that already exists), each tried on random words.
#[test]
fn random_vocabularies_encode_alike() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..60 {
        let mut vocab: Vec<String> = ["a", "b", "c", "é", "日"].iter().map(|s| s.to_string()).collect();
        let mut merges: Vec<(String, String)> = Vec::new();
        for _ in 0..40 {
            let (l, r) = (vocab[rng.below(vocab.len())].clone(), vocab[rng.below(vocab.len())].clone());
            let joined = format!("{l}{r}");
            if !vocab.contains(&joined) {
                vocab.push(joined);
            }
            merges.push((l, r));
        }
        let v: Vec<&str> = vocab.iter().map(String::as_str).collect();
        let m: Vec<(&str, &str)> = merges.iter().map(|(l, r)| (l.as_str(), r.as_str())).collect();
        let alphabet = ['a', 'b', 'c', 'é', '日', 'x'];
        let words: Vec<String> = (0..50)
            .map(|_| {
                let longest = if rng.below(10) == 0 { 300 } else { 12 };
                let n = rng.below(longest);
                (0..n).map(|_| alphabet[rng.below(alphabet.len())]).collect()
            })
            .collect();
        let w: Vec<&str> = words.iter().map(String::as_str).collect();
        check(&v, &m, &w);
    }
}

#[test]
fn a_long_word_is_not_quadratic() {
    // 200k characters with a merge at every pair: a quadratic merge would take minutes.
    let word = "ab".repeat(100_000);
    let m = check(&["a", "b", "ab", "abab"], &[("a", "b"), ("ab", "ab")], &[&word]);
    assert_eq!(m.tokenize(&word).unwrap().len(), 50_000);
}
