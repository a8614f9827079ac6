//! What a running job does to chat: jobs run beside the scheduler's replies (training on threads of its own, the
//! rest as work between their steps), so replies are slower while one runs, and the Chat page says by how much
//! (the seed's "slower" banner). The figure is measured, not guessed: the decode speed of the replies that ended
//! since the job started, against the same model and backend's replies that ended before it.

use crate::store::Store;
use rusqlite::params;
use serde_json::{json, Value};

/// Replies on each side that the medians are taken over (the latest).
const SAMPLES: usize = 50;

/// The endpoints whose replies are chat's.
const CHAT: &str = "('/v1/chat/completions', '/v1/completions', '/v1/messages', '/v1/responses')";

/// Every running job (id, kind, account, start) with `chat`: how the replies since its start compare with those
/// before it, or null while no reply has ended since.
pub fn running(store: &Store) -> rusqlite::Result<Vec<Value>> {
    let mut st = store.conn.prepare(
        "SELECT id, kind, account, started_at FROM jobs WHERE state = 'running' AND started_at IS NOT NULL \
         ORDER BY started_at",
    )?;
    let jobs: Vec<(String, String, String, String)> =
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?.collect::<Result<_, _>>()?;
    jobs.into_iter()
        .map(|(id, kind, account, since)| {
            let chat = chat_since(store, &since)?;
            Ok(json!({"id": id, "kind": kind, "account": account, "started_at": since, "chat": chat}))
        })
        .collect()
}

/// Decode tokens a second of each reply that ended (`after`: since `since`, else before it) on this model and
/// backend (None: any), newest first.
fn rates(
    store: &Store,
    since: &str,
    after: bool,
    on: Option<(&str, &str)>,
) -> rusqlite::Result<Vec<(f64, String, String)>> {
    let sql = format!(
        "SELECT (generated_tokens - 1) * 1000.0 / (duration_ms - ttft_ms), model, backend FROM requests \
         WHERE endpoint IN {CHAT} AND finish_reason IN ('stop', 'length', 'tool_calls') AND generated_tokens >= 2 \
         AND ttft_ms IS NOT NULL AND duration_ms > ttft_ms AND ended_at {} ?1 \
         AND (?2 IS NULL OR (model = ?2 AND backend = ?3)) ORDER BY ended_seq DESC LIMIT {SAMPLES}",
        if after { ">=" } else { "<" }
    );
    let mut st = store.conn.prepare(&sql)?;
    let rows =
        st.query_map(params![since, on.map(|o| o.0), on.map(|o| o.1)], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    rows.collect()
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    (n > 0).then(|| if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// The replies since `since` on the model of the latest of them, against the same model's before it.
fn chat_since(store: &Store, since: &str) -> rusqlite::Result<Value> {
    let during = rates(store, since, true, None)?;
    let Some((_, model, backend)) = during.first().cloned() else { return Ok(Value::Null) };
    let during: Vec<f64> = during.into_iter().filter(|r| r.1 == model && r.2 == backend).map(|r| r.0).collect();
    let replies = during.len();
    let before = rates(store, since, false, Some((&model, &backend)))?;
    let (now, then) = (median(during), median(before.iter().map(|r| r.0).collect()));
    Ok(json!({
        "model": model, "backend": backend, "replies": replies, "replies_before": before.len(),
        "decode_tps": now, "decode_tps_before": then,
        "ratio": now.zip(then).filter(|(_, b)| *b > 0.0).map(|(a, b)| a / b),
    }))
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn the_median_of_an_even_count_is_the_middle_pair_s_mean() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }
}
