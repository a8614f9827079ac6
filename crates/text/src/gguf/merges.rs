//! Recovering BPE merges from a vocabulary that ships none.
//!
//! SentencePiece GGUFs store tokens with scores but no merges. A BPE model then needs the merge
//! list back: every way to cut a token into two tokens that are both in the vocabulary is a merge,
//! and merges are ranked by the score of the token they make (best first), ties broken by the
//! lengths of the two halves and then by file order. This is the order transformers uses, which
//! is what makes our ids equal to its ids.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::hash::BuildHasher;

/// Returns the merges implied by `tokens` (in file order) and their `scores`.
///
/// `vocab` maps each token to its id (for a token listed twice, the later id). With `descending`
/// the highest score ranks first (SentencePiece scores); otherwise the lowest (ranks such as
/// token ids).
pub(crate) fn derive_merges<S: BuildHasher>(
    tokens: &[String],
    scores: &[f64],
    vocab: &HashMap<String, u32, S>,
    descending: bool,
) -> Vec<(String, String)> {
    // A token listed twice keeps its first position and its last score, as a Python dict does.
    let mut position: HashMap<&str, usize> = HashMap::with_capacity(tokens.len());
    let mut unique: Vec<(&str, f64)> = Vec::with_capacity(tokens.len());
    for (t, &s) in tokens.iter().zip(scores) {
        match position.get(t.as_str()) {
            Some(&p) => unique[p].1 = s,
            None => {
                position.insert(t, unique.len());
                unique.push((t, s));
            }
        }
    }

    struct Candidate<'a> {
        left: &'a str,
        right: &'a str,
        score: f64,
        left_chars: usize,
        right_chars: usize,
    }
    let mut all: Vec<Candidate> = Vec::new();
    for (token, score) in unique {
        let mut local: Vec<Candidate> = Vec::new();
        for (cut, _) in token.char_indices().skip(1) {
            let (left, right) = token.split_at(cut);
            if vocab.contains_key(left) && vocab.contains_key(right) {
                local.push(Candidate {
                    left,
                    right,
                    score,
                    left_chars: left.chars().count(),
                    right_chars: right.chars().count(),
                });
            }
        }
        local.sort_by_key(|c| (vocab[c.left], vocab[c.right]));
        all.extend(local);
    }
    let key = |a: &Candidate, b: &Candidate| {
        a.score
            .partial_cmp(&b.score)
            .unwrap_or(Ordering::Equal)
            .then(a.left_chars.cmp(&b.left_chars))
            .then(a.right_chars.cmp(&b.right_chars))
    };
    // Stable sorts: equal keys keep file order in both directions, like Python's sorted().
    if descending {
        all.sort_by(|a, b| key(b, a));
    } else {
        all.sort_by(key);
    }
    all.into_iter().map(|c| (c.left.to_string(), c.right.to_string())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab_of(tokens: &[&str]) -> (Vec<String>, HashMap<String, u32>) {
        let owned: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
        let map = owned.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        (owned, map)
    }

    #[test]
    fn ranks_by_score_then_half_lengths() {
        let (tokens, vocab) = vocab_of(&["a", "b", "c", "ab", "abc", "bc"]);
        let scores = [0.0, 0.0, 0.0, -1.0, -3.0, -2.0];
        let merges = derive_merges(&tokens, &scores, &vocab, true);
        let pairs: Vec<(&str, &str)> = merges.iter().map(|(l, r)| (l.as_str(), r.as_str())).collect();
        // "ab" (-1) first, then "bc" (-2), then both cuts of "abc" (-3): longer left half first.
        assert_eq!(pairs, vec![("a", "b"), ("b", "c"), ("ab", "c"), ("a", "bc")]);
    }

    #[test]
    fn ascending_ranks_use_ids() {
        let (tokens, vocab) = vocab_of(&["x", "y", "z", "yz", "xy"]);
        let ranks: Vec<f64> = (0..tokens.len()).map(|i| i as f64).collect();
        let merges = derive_merges(&tokens, &ranks, &vocab, false);
        assert_eq!(merges, vec![("y".to_string(), "z".to_string()), ("x".to_string(), "y".to_string())]);
    }

    #[test]
    fn multibyte_tokens_cut_on_char_boundaries() {
        let (tokens, vocab) = vocab_of(&["é", "▁", "▁é"]);
        let merges = derive_merges(&tokens, &[0.0, 0.0, -1.0], &vocab, true);
        assert_eq!(merges, vec![("▁".to_string(), "é".to_string())]);
    }
}
