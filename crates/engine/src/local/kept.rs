//! Conversations set aside: the caches of conversations not speaking, kept whole (moved, never copied) and found
//! again by their tokens. Nothing names a conversation: the transcript a client sends is the key, and the one that
//! speaks is whichever kept cache shares the longest token prefix with its prompt. A prompt that continues a whole
//! conversation (its next turn) takes that cache; one that shares only part of it (the same system prompt, the same
//! question asked again) starts from a copy of the shared part, so the conversation it parted from is still kept.
//! They share the context the model was charged for; when it is short, the one that spoke longest ago goes first.

use crate::seam::Held;

/// What a kept cache must do: say how many tokens it holds, where it can be cut back to, and forget the ones after
/// such a point.
pub trait Cache {
    /// Tokens held.
    fn len(&self) -> usize;
    /// Nothing held.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The longest prefix of at most `n` tokens it can be cut back to (`n` for keys and values; a recurrent
    /// state's latest snapshot at or below `n`).
    fn cut_point(&self, n: usize) -> usize;
    /// Keeps the first `n` (a cut point); false, and nothing changed, where it cannot.
    fn truncate(&mut self, n: usize) -> bool;
    /// A copy of the first `n` tokens' cache, or None when there is no room for one (a GPU page pool that is full).
    fn copy_prefix(&self, n: usize) -> Option<Self>
    where
        Self: Sized;
}

impl Cache for kvad_models::SeqState {
    fn len(&self) -> usize {
        kvad_models::SeqState::len(self)
    }
    fn cut_point(&self, n: usize) -> usize {
        kvad_models::SeqState::cut_point(self, n)
    }
    fn truncate(&mut self, n: usize) -> bool {
        kvad_models::SeqState::truncate(self, n)
    }
    fn copy_prefix(&self, n: usize) -> Option<Self> {
        kvad_models::SeqState::copy_prefix(self, n)
    }
}

struct Conversation<C> {
    /// The tokens whose keys and values the cache holds (as many as it holds).
    tokens: Vec<u32>,
    cache: C,
    /// When it last spoke (a counter).
    spoke: u64,
}

/// The conversations one model keeps.
pub struct Kept<C> {
    all: Vec<Conversation<C>>,
    clock: u64,
}

impl<C: Cache> Default for Kept<C> {
    fn default() -> Self {
        Kept { all: Vec::new(), clock: 0 }
    }
}

/// How many leading tokens `a` and `b` share.
pub(super) fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// How much of `prompt` a cache holding `tokens` can give: the shared prefix, at most all but the prompt's last
/// token (that one is always read by itself), and only as far back as the cache can be cut ([`Cache::cut_point`]).
pub(super) fn usable<C: Cache>(cache: &C, tokens: &[u32], prompt: &[u32]) -> usize {
    cache.cut_point(common_prefix(tokens, prompt).min(prompt.len().saturating_sub(1)))
}

impl<C: Cache> Kept<C> {
    /// The conversation sharing the longest usable prefix with `prompt`, and that length.
    fn best(&self, prompt: &[u32]) -> Option<(usize, usize)> {
        self.all
            .iter()
            .enumerate()
            .map(|(i, c)| (i, usable(&c.cache, &c.tokens, prompt)))
            .max_by_key(|&(i, n)| (n, std::cmp::Reverse(i)))
    }

    /// How many of `prompt`'s tokens [`Kept::take`] would give (0: none).
    pub fn longest(&self, prompt: &[u32]) -> usize {
        self.best(prompt).map_or(0, |(_, n)| n)
    }

    /// The cache of the conversation sharing the longest usable prefix with `prompt` (`usable`), cut to that
    /// prefix: taken out when the prompt continues the whole conversation, copied when it parts from it. None when
    /// nothing usable is shared.
    pub fn take(&mut self, prompt: &[u32]) -> Option<(C, usize)> {
        let (i, n) = self.best(prompt)?;
        if n == 0 {
            return None;
        }
        let mut cache = if n == self.all[i].tokens.len() {
            self.all.swap_remove(i).cache
        } else {
            self.clock += 1;
            self.all[i].spoke = self.clock;
            self.all[i].cache.copy_prefix(n)?
        };
        cache.truncate(n).then_some((cache, n))
    }
}

impl<C: Cache> Kept<C> {
    /// Sets a conversation aside: `tokens` are the ones its cache holds.
    pub fn put(&mut self, mut tokens: Vec<u32>, cache: C) {
        tokens.truncate(cache.len());
        if cache.is_empty() {
            return;
        }
        self.clock += 1;
        self.all.push(Conversation { tokens, cache, spoke: self.clock });
    }

    /// Lets go of the conversations that spoke longest ago until what is kept fits in `room` tokens (each
    /// conversation holding whole pages of `page` tokens) and is at most `count` conversations (a GPU's recurrent
    /// slots, each held by one).
    pub fn fit(&mut self, room: usize, page: usize, count: usize) {
        let page = page.max(1);
        let paged = |all: &[Conversation<C>]| all.iter().map(|c| c.cache.len().div_ceil(page) * page).sum::<usize>();
        while paged(&self.all) > room || self.all.len() > count {
            let Some(i) = self.all.iter().enumerate().min_by_key(|(_, c)| c.spoke).map(|(i, _)| i) else { return };
            self.all.swap_remove(i);
        }
    }

    /// Conversations and tokens kept.
    pub fn held(&self) -> Held {
        Held { conversations: self.all.len(), tokens: self.all.iter().map(|c| c.cache.len()).sum() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache that is its tokens.
    #[derive(Debug, Clone, PartialEq)]
    struct Fake(Vec<u32>);

    impl Cache for Fake {
        fn len(&self) -> usize {
            self.0.len()
        }
        fn cut_point(&self, n: usize) -> usize {
            n.min(self.0.len())
        }
        fn truncate(&mut self, n: usize) -> bool {
            self.0.truncate(n);
            true
        }
        fn copy_prefix(&self, n: usize) -> Option<Self> {
            Some(Fake(self.0[..n.min(self.0.len())].to_vec()))
        }
    }

    fn keep(k: &mut Kept<Fake>, t: &[u32]) {
        k.put(t.to_vec(), Fake(t.to_vec()));
    }

    #[test]
    fn the_one_that_speaks_is_the_longest_prefix_and_its_cache_is_cut_there() {
        let mut k = Kept::default();
        keep(&mut k, &[1, 2, 3, 4, 5]);
        keep(&mut k, &[1, 2, 9, 9]);
        keep(&mut k, &[7, 7]);
        // Shares 4 with the first, 2 with the second: it parts from the first, which is still kept.
        let (c, n) = k.take(&[1, 2, 3, 4, 8, 8]).unwrap();
        assert_eq!((c, n), (Fake(vec![1, 2, 3, 4]), 4));
        assert_eq!(k.held(), Held { conversations: 3, tokens: 11 });
        // The next turn of the first conversation takes its cache whole.
        let (c, n) = k.take(&[1, 2, 3, 4, 5, 6, 7]).unwrap();
        assert_eq!((c.0.len(), n), (5, 5));
        assert_eq!(k.held(), Held { conversations: 2, tokens: 6 });
        // The same prompt again: only its last token is left to read.
        keep(&mut k, &[1, 2, 3, 4, 8, 8, 5]);
        let (c, n) = k.take(&[1, 2, 3, 4, 8, 8]).unwrap();
        assert_eq!((c.0.len(), n), (5, 5), "all but the last token");
        assert!(k.take(&[6, 6, 6]).is_none(), "nothing shared: a fresh cache");
        assert!(k.take(&[7]).is_none(), "a one-token prompt reads its only token itself");
    }

    #[test]
    fn when_the_context_is_short_the_one_that_spoke_longest_ago_goes() {
        let mut k = Kept::default();
        keep(&mut k, &[1; 10]);
        keep(&mut k, &[2; 10]);
        keep(&mut k, &[3; 10]);
        // 1 speaks again, so 2 is now the oldest.
        let (c, _) = k.take(&[1; 11]).unwrap();
        k.put(vec![1; 11], Fake(c.0.into_iter().chain([1]).collect()));
        k.fit(25, 1, usize::MAX);
        assert_eq!(k.held(), Held { conversations: 2, tokens: 21 });
        assert!(k.take(&[2, 2, 2]).is_none(), "2 went");
        assert!(k.take(&[3, 3, 3]).is_some() && k.take(&[1, 1, 1]).is_some());
        k.fit(0, 1, usize::MAX);
        assert_eq!(k.held(), Held::default());
    }

    /// On a GPU a conversation holds whole pages, and a recurrent model's conversations hold a slot each: both
    /// bound what is kept.
    #[test]
    fn kept_conversations_fit_in_whole_pages_and_in_the_slots_left() {
        let mut k = Kept::default();
        for t in 1..=3 {
            keep(&mut k, &[t; 10]);
        }
        // Three conversations of 10 tokens hold 3 pages of 16: 48 tokens of room keeps them, 47 does not.
        k.fit(48, 16, usize::MAX);
        assert_eq!(k.held().conversations, 3);
        k.fit(47, 16, usize::MAX);
        assert_eq!(k.held(), Held { conversations: 2, tokens: 20 });
        assert!(k.take(&[1, 1, 1]).is_none(), "the one that spoke longest ago went");
        k.fit(1000, 16, 1);
        assert_eq!(k.held().conversations, 1, "one slot left: one conversation");
        assert!(k.take(&[3, 3, 3]).is_some(), "the latest stayed");
    }

    /// A cache that can be cut back only at some lengths (a recurrent state's snapshots).
    #[derive(Debug, Clone, PartialEq)]
    struct Snapshots(Vec<u32>, Vec<usize>);

    impl Cache for Snapshots {
        fn len(&self) -> usize {
            self.0.len()
        }
        fn cut_point(&self, n: usize) -> usize {
            if n >= self.0.len() {
                return self.0.len();
            }
            self.1.iter().copied().filter(|&p| p <= n).max().unwrap_or(0)
        }
        fn truncate(&mut self, n: usize) -> bool {
            let ok = n >= self.0.len() || n == 0 || self.1.contains(&n);
            if ok {
                self.0.truncate(n);
                self.1.retain(|&p| p <= n);
            }
            ok
        }
        fn copy_prefix(&self, n: usize) -> Option<Self> {
            let mut c = self.clone();
            c.truncate(n).then_some(c)
        }
    }

    #[test]
    fn a_cache_cut_only_at_snapshots_is_taken_up_to_the_latest_one_shared() {
        let mut k = Kept::default();
        k.put(vec![1, 2, 3, 4, 5, 6], Snapshots(vec![1, 2, 3, 4, 5, 6], vec![3]));
        k.put(vec![1, 2, 9], Snapshots(vec![1, 2, 9], vec![]));
        // Shares 5 with the first, but it can only be cut back to 3 (its snapshot); the second offers nothing.
        let (c, n) = k.take(&[1, 2, 3, 4, 5, 7, 7]).unwrap();
        assert_eq!((c.0, n), (vec![1, 2, 3], 3));
        assert_eq!(k.held(), Held { conversations: 2, tokens: 9 }, "the first is still kept whole");
        // Its next turn takes it whole; a prompt sharing only 2 tokens finds no cut point and starts fresh.
        assert!(k.take(&[1, 2, 8, 8]).is_none());
        let (c, n) = k.take(&[1, 2, 3, 4, 5, 6, 0]).unwrap();
        assert_eq!((c.0.len(), n), (6, 6));
    }
}
