//! Failed sign-ins slow down whoever makes them: per account and per client address, each failure past the first
//! few makes the next attempt wait twice as long (up to a minute), answered at once with a 429 saying how long, so
//! a guessing flood costs the server no password hash. A success clears its keys; keys idle for a quarter of an hour
//! are forgotten, and the table holds at most `MAX_KEYS` (the oldest go first), so a flood of made-up names cannot
//! grow it without bound.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failures allowed before attempts must wait.
const FREE_FAILURES: u32 = 5;
/// The first wait; each further failure doubles it.
const FIRST_WAIT: Duration = Duration::from_secs(1);
/// The longest wait.
const MAX_WAIT: Duration = Duration::from_secs(60);
/// How long a key with no new failure is remembered.
const FORGET: Duration = Duration::from_secs(15 * 60);
/// Most keys held.
const MAX_KEYS: usize = 10_000;

/// Failures by key (`account:NAME`, `address:IP`): how many, and when the last was.
#[derive(Default)]
pub struct Throttle {
    failures: Mutex<HashMap<String, (u32, Instant)>>,
}

fn wait_after(failures: u32) -> Duration {
    if failures < FREE_FAILURES {
        return Duration::ZERO;
    }
    FIRST_WAIT.saturating_mul(1 << (failures - FREE_FAILURES).min(16)).min(MAX_WAIT)
}

impl Throttle {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u32, Instant)>> {
        self.failures.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How long the caller must still wait before an attempt on these keys is checked (None: now).
    pub fn wait(&self, keys: &[String], now: Instant) -> Option<Duration> {
        let m = self.lock();
        keys.iter()
            .filter_map(|k| m.get(k))
            .map(|&(n, last)| (last + wait_after(n)).saturating_duration_since(now))
            .filter(|w| !w.is_zero())
            .max()
    }

    /// Records a failed attempt on these keys.
    pub fn failed(&self, keys: &[String], now: Instant) {
        let mut m = self.lock();
        m.retain(|_, (_, last)| now.saturating_duration_since(*last) < FORGET);
        for k in keys {
            let e = m.entry(k.clone()).or_insert((0, now));
            *e = (e.0.saturating_add(1), now);
        }
        while m.len() > MAX_KEYS {
            let Some(oldest) = m.iter().min_by_key(|(_, (_, last))| *last).map(|(k, _)| k.clone()) else { break };
            m.remove(&oldest);
        }
    }

    /// Clears these keys after a successful attempt.
    pub fn succeeded(&self, keys: &[String]) {
        let mut m = self.lock();
        for k in keys {
            m.remove(k);
        }
    }
}

/// The keys a sign-in attempt is counted under.
pub fn keys(account: &str, address: Option<std::net::IpAddr>) -> Vec<String> {
    let mut k = vec![format!("account:{}", account.to_lowercase())];
    k.extend(address.map(|a| format!("address:{a}")));
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_past_the_free_ones_wait_twice_as_long_each_and_a_success_clears_them() {
        let t = Throttle::default();
        let k = keys("Ann", None);
        let t0 = Instant::now();
        for _ in 0..FREE_FAILURES - 1 {
            t.failed(&k, t0);
        }
        assert_eq!(t.wait(&k, t0), None, "the first few are free");
        t.failed(&k, t0);
        assert_eq!(t.wait(&k, t0), Some(FIRST_WAIT));
        t.failed(&k, t0);
        assert_eq!(t.wait(&k, t0), Some(2 * FIRST_WAIT));
        assert_eq!(t.wait(&k, t0 + 3 * FIRST_WAIT), None, "waited long enough");
        assert_eq!(t.wait(&keys("ann", None), t0), Some(2 * FIRST_WAIT), "names are counted case-blind");
        assert_eq!(t.wait(&keys("bob", None), t0), None);
        for _ in 0..30 {
            t.failed(&k, t0);
        }
        assert_eq!(t.wait(&k, t0), Some(MAX_WAIT));
        t.succeeded(&k);
        assert_eq!(t.wait(&k, t0), None);
    }

    #[test]
    fn the_table_forgets_idle_keys_and_holds_at_most_its_bound() {
        let t = Throttle::default();
        let t0 = Instant::now();
        for i in 0..MAX_KEYS + 50 {
            t.failed(&keys(&format!("u{i}"), None), t0 + Duration::from_millis(i as u64));
        }
        assert_eq!(t.lock().len(), MAX_KEYS);
        assert!(!t.lock().contains_key("account:u0"), "the oldest went first");
        t.failed(&keys("late", None), t0 + FORGET + Duration::from_secs(20));
        assert_eq!(t.lock().len(), 1, "idle keys forgotten");
    }
}
