//! `strftime_now(format)`: the current local time, formatted like Python's `datetime.strftime`.
//!
//! Templates such as Llama 3.1's print today's date into the system prompt. The clock is a
//! plain function so that tests (and reproducible runs) can fix the date.

use std::sync::Arc;

use chrono::format::{Item, StrftimeItems};
use chrono::NaiveDateTime;

/// Where `strftime_now` reads the time: a function returning the local wall-clock time.
pub type Clock = Arc<dyn Fn() -> NaiveDateTime + Send + Sync>;

/// The system clock, in the machine's local time zone (as Python's `datetime.now()`).
pub fn system_clock() -> Clock {
    Arc::new(|| chrono::Local::now().naive_local())
}

/// Formats `time` with a strftime `format`; `None` when the format has a directive that chrono
/// does not know (Python would raise too, or print garbage).
pub(crate) fn strftime(time: &NaiveDateTime, format: &str) -> Option<String> {
    let items: Vec<Item> = StrftimeItems::new(format).collect();
    if items.iter().any(|i| matches!(i, Item::Error)) {
        return None;
    }
    let mut out = String::new();
    use std::fmt::Write as _;
    write!(out, "{}", time.format_with_items(items.into_iter())).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    #[test]
    fn formats_like_python() {
        let t = NaiveDate::from_ymd_opt(2024, 7, 5).and_then(|d| d.and_hms_opt(9, 3, 0)).unwrap();
        assert_eq!(strftime(&t, "%d %b %Y").as_deref(), Some("05 Jul 2024"));
        assert_eq!(strftime(&t, "%Y-%m-%d").as_deref(), Some("2024-07-05"));
        assert_eq!(strftime(&t, "%B %-d, %Y").as_deref(), Some("July 5, 2024"));
        assert_eq!(strftime(&t, "%A %H:%M").as_deref(), Some("Friday 09:03"));
        assert_eq!(strftime(&t, "%Q"), None);
    }

    #[test]
    fn system_clock_runs() {
        let now = system_clock()();
        assert!(strftime(&now, "%Y").is_some());
    }
}
