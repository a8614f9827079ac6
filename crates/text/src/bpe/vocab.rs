//! The token list of a byte-level BPE, looked up both ways without a second copy of its strings.
//!
//! `tokenizers`' BPE keeps a `String → id` map and an `id → String` map, so every token string is
//! stored (and allocated) twice. Here the strings stay in the `Vec` they came in, indexed by id,
//! and the forward map is a hash table of ids that hashes and compares through that `Vec`.

use hashbrown::hash_table::Entry;
use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

/// Characters below this code point (the whole GPT-2 byte alphabet) have their id in a flat table.
const DIRECT_CHARS: usize = 0x144;
/// Marks a character with no token in the flat table.
const NONE: u32 = u32::MAX;

/// Token strings indexed by id, with a string-to-id index over them.
///
/// A string listed twice maps to its later id and its earlier id has no string, as when
/// `tokenizers` builds its maps from `(string, id)` pairs in id order: the later pair wins.
#[derive(Clone)]
pub(crate) struct Vocab {
    /// Token strings by id.
    tokens: Vec<String>,
    /// Ids, found by the hash of their string.
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
    /// Ids whose string is listed again later (sorted); almost always empty.
    shadowed: Vec<u32>,
    /// The id of each one-character token below [`DIRECT_CHARS`], or [`NONE`].
    char_ids: Box<[u32; DIRECT_CHARS]>,
}

impl Vocab {
    /// Indexes `tokens` (id = position), which move in.
    pub(crate) fn new(tokens: Vec<String>) -> Self {
        let hasher = DefaultHashBuilder::default();
        let mut index: HashTable<u32> = HashTable::with_capacity(tokens.len());
        let mut shadowed = Vec::new();
        for (id, t) in tokens.iter().enumerate() {
            let hash = hasher.hash_one(t.as_str());
            let same = |&j: &u32| tokens[j as usize] == *t;
            let rehash = |&j: &u32| hasher.hash_one(tokens[j as usize].as_str());
            match index.entry(hash, same, rehash) {
                Entry::Occupied(mut e) => {
                    shadowed.push(*e.get());
                    *e.get_mut() = id as u32;
                }
                Entry::Vacant(e) => {
                    e.insert(id as u32);
                }
            }
        }
        shadowed.sort_unstable();
        let mut v = Vocab { tokens, index, hasher, shadowed, char_ids: Box::new([NONE; DIRECT_CHARS]) };
        let mut buf = [0u8; 4];
        for code in 0..DIRECT_CHARS {
            if let Some(id) = char::from_u32(code as u32).and_then(|c| v.get(c.encode_utf8(&mut buf))) {
                v.char_ids[code] = id;
            }
        }
        v
    }

    /// The id of `token`, if it is in the vocabulary.
    pub(crate) fn get(&self, token: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(token);
        self.index.find(hash, |&j| self.tokens[j as usize] == token).copied()
    }

    /// The id of the one-character token `c` (the same answer as `get` of its spelling, faster for
    /// the byte alphabet).
    pub(crate) fn char_id(&self, c: char) -> Option<u32> {
        match self.char_ids.get(c as usize) {
            Some(&NONE) => None,
            Some(&id) => Some(id),
            None => self.get(c.encode_utf8(&mut [0u8; 4])),
        }
    }

    /// The string of `id`; `None` past the end and for an id whose string is listed again later.
    pub(crate) fn token(&self, id: u32) -> Option<&str> {
        let t = self.tokens.get(id as usize)?;
        if !self.shadowed.is_empty() && self.shadowed.binary_search(&id).is_ok() {
            return None;
        }
        Some(t)
    }

    /// Whether `id` is the id `get(token)` gives: its string is `token` and is not listed again later.
    pub(crate) fn spells(&self, id: u32, token: &str) -> bool {
        self.tokens.get(id as usize).is_some_and(|t| t == token) && self.token(id).is_some()
    }

    /// How many distinct strings the vocabulary holds (what `tokenizers` counts as its size).
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// Every `(string, id)` pair the forward map holds, in id order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&str, u32)> {
        (0..self.tokens.len() as u32).filter_map(|id| self.token(id).map(|t| (t, id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(tokens: &[&str]) -> Vocab {
        Vocab::new(tokens.iter().map(|t| t.to_string()).collect())
    }

    #[test]
    fn looks_up_both_ways() {
        let v = vocab(&["a", "é", "ab", "日本"]);
        assert_eq!(v.get("ab"), Some(2));
        assert_eq!(v.get("日本"), Some(3));
        assert_eq!(v.get("b"), None);
        assert_eq!(v.char_id('é'), Some(1));
        assert_eq!(v.char_id('b'), None);
        assert_eq!(v.token(2), Some("ab"));
        assert_eq!(v.token(4), None);
        assert!(v.spells(2, "ab") && !v.spells(2, "a") && !v.spells(9, "ab"));
        assert_eq!(v.len(), 4);
    }

    #[test]
    fn a_repeated_string_keeps_its_later_id() {
        let v = vocab(&["x", "y", "x", "z", "y"]);
        assert_eq!(v.get("x"), Some(2));
        assert_eq!(v.get("y"), Some(4));
        assert_eq!(v.char_id('x'), Some(2));
        assert_eq!(v.token(0), None);
        assert_eq!(v.token(1), None);
        assert_eq!(v.token(2), Some("x"));
        assert!(!v.spells(0, "x") && v.spells(2, "x"));
        assert_eq!(v.len(), 3);
        let entries: Vec<(&str, u32)> = v.entries().collect();
        assert_eq!(entries, vec![("x", 2), ("z", 3), ("y", 4)]);
    }

    #[test]
    fn chars_past_the_flat_table_are_hashed() {
        let v = vocab(&["🎉", "\u{143}", "\u{144}"]);
        assert_eq!(v.char_id('🎉'), Some(0));
        assert_eq!(v.char_id('\u{143}'), Some(1));
        assert_eq!(v.char_id('\u{144}'), Some(2));
    }
}
