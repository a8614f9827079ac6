//! Merging one word: `tokenizers`' `Word::merge_all` without dropout, step for step.
//!
//! The word starts as one symbol per character (characters with no token are dropped, as
//! `tokenizers` does without an unknown token). A heap holds every adjacent pair that has a
//! merge, lowest rank first and leftmost first among equals; popping applies a merge unless the
//! entry went stale. Symbols are a linked list over a `Vec`, so a word of thousands of
//! characters costs `n log n`, not `n²`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use hashbrown::HashMap;

use super::vocab::Vocab;

/// Marks "no neighbour" in a symbol's links.
const NONE: u32 = u32::MAX;

/// What a merge of two adjacent ids makes: its rank (its index in the merge list) and the new id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Merge {
    pub rank: u32,
    pub new_id: u32,
}

/// Merges by their two ids, packed into one key (left in the high half).
pub(crate) type MergeMap = HashMap<u64, Merge>;

/// The key of the pair `(left, right)` in a [`MergeMap`].
pub(crate) fn pair(left: u32, right: u32) -> u64 {
    (u64::from(left) << 32) | u64::from(right)
}

/// One piece of a word being merged. `len` is its length in bytes of the word's text; a merged-away
/// symbol has `len` 0.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Symbol {
    pub id: u32,
    prev: u32,
    next: u32,
    pub len: u32,
}

/// The symbols `word` ends as, in order (merged-away ones removed).
pub(crate) fn merge_word(vocab: &Vocab, merges: &MergeMap, word: &str) -> Vec<Symbol> {
    let mut symbols: Vec<Symbol> = Vec::with_capacity(word.len());
    for c in word.chars() {
        if let Some(id) = vocab.char_id(c) {
            let at = symbols.len() as u32;
            if let Some(last) = symbols.last_mut() {
                last.next = at;
            }
            let prev = if at == 0 { NONE } else { at - 1 };
            symbols.push(Symbol { id, prev, next: NONE, len: c.len_utf8() as u32 });
        }
    }
    if symbols.len() < 2 {
        return symbols;
    }

    // Min-heap on (rank, position); the new id rides along (a rank fixes it).
    let mut queue: BinaryHeap<Reverse<(u32, u32, u32)>> = symbols
        .windows(2)
        .enumerate()
        .filter_map(|(pos, w)| merges.get(&pair(w[0].id, w[1].id)).map(|m| Reverse((m.rank, pos as u32, m.new_id))))
        .collect();

    while let Some(Reverse((_, pos, new_id))) = queue.pop() {
        let p = pos as usize;
        let current = symbols[p];
        if current.len == 0 || current.next == NONE {
            continue;
        }
        let right = symbols[current.next as usize];
        // A stale entry: the pair at `pos` changed since it was queued. Comparing what the pair
        // makes is enough (as `tokenizers` does): the left symbol only grows, so the same spelling
        // means the same pair.
        if merges.get(&pair(current.id, right.id)).is_none_or(|m| m.new_id != new_id) {
            continue;
        }
        symbols[p] = Symbol { id: new_id, prev: current.prev, next: right.next, len: current.len + right.len };
        symbols[current.next as usize].len = 0;
        if right.next != NONE {
            symbols[right.next as usize].prev = pos;
        }
        let merged = symbols[p];
        if merged.prev != NONE {
            if let Some(m) = merges.get(&pair(symbols[merged.prev as usize].id, merged.id)) {
                queue.push(Reverse((m.rank, merged.prev, m.new_id)));
            }
        }
        if merged.next != NONE {
            if let Some(m) = merges.get(&pair(merged.id, symbols[merged.next as usize].id)) {
                queue.push(Reverse((m.rank, pos, m.new_id)));
            }
        }
    }
    symbols.retain(|s| s.len != 0);
    symbols
}
