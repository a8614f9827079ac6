//! Memory admission: several models may be in memory, each charged for its weights and a full context of KV cache
//! (so a model that was admitted can always finish its conversation). A load that does not fit beside what is there
//! is refused with a message naming what holds the memory; nothing is ever unloaded to make room.

use crate::seam::Resident;

/// Bytes as people read them.
pub fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1e9 {
        format!("{:.1} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.0} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.0} kB", b / 1e3)
    } else {
        format!("{bytes} B")
    }
}

/// Parses `[server] memory`: a number of bytes with an optional unit (`24 GB`, `512MB`, `1.5G`).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("memory = {s:?}: not a size like \"24 GB\" or \"512 MB\""))?;
    let scale = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1e0,
        "K" | "KB" => 1e3,
        "M" | "MB" => 1e6,
        "G" | "GB" => 1e9,
        "T" | "TB" => 1e12,
        other => return Err(format!("memory = {s:?}: unknown unit {other:?} (B, KB, MB, GB, TB)")),
    };
    Ok((n * scale) as u64)
}

/// The memory available to this process now (`MemAvailable` of /proc/meminfo), when it can be read.
pub fn available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Whether `name`, charged `charged` bytes, fits beside `resident` in `total`; the refusal names the holders.
pub fn admit(total: u64, resident: &[Resident], name: &str, charged: u64, detail: &str) -> Result<(), String> {
    let held: u64 = resident.iter().map(|r| r.charged).sum();
    let left = total.saturating_sub(held);
    if charged <= left {
        return Ok(());
    }
    let holders = if resident.is_empty() {
        "nothing else is loaded".to_string()
    } else {
        let list: Vec<String> = resident.iter().map(|r| format!("{} ({})", r.name, human(r.charged))).collect();
        format!("held by {}", list.join(", "))
    };
    Err(format!(
        "{name} needs {} ({detail}) but {} of {} is left: {holders}; nothing is unloaded to make room \
         (kvad unload frees it)",
        human(charged),
        human(left),
        human(total)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seam::Held;

    #[test]
    fn sizes_parse_and_bad_ones_are_named() {
        assert_eq!(parse_bytes("24 GB"), Ok(24_000_000_000));
        assert_eq!(parse_bytes("1.5G"), Ok(1_500_000_000));
        assert_eq!(parse_bytes("512mb"), Ok(512_000_000));
        assert_eq!(parse_bytes("100"), Ok(100));
        assert!(parse_bytes("lots").unwrap_err().contains("\"lots\""));
        assert!(parse_bytes("3 parsecs").unwrap_err().contains("PARSECS"));
    }

    #[test]
    fn a_load_that_does_not_fit_names_what_holds_the_memory() {
        let a = Resident {
            name: "a@cpu-q8".into(),
            charged: 600_000_000,
            context: 8192,
            cache_bytes_per_token: 0,
            held: Held::default(),
        };
        assert!(admit(1_000_000_000, &[], "b@cpu-q8", 900_000_000, "x").is_ok());
        assert!(
            admit(1_000_000_000, std::slice::from_ref(&a), "b@cpu-q8", 400_000_000, "x").is_ok(),
            "exactly what is left"
        );
        let e = admit(1_000_000_000, &[a], "b@cpu-q8", 400_000_001, "weights").unwrap_err();
        assert!(e.contains("b@cpu-q8 needs 400 MB (weights)") && e.contains("400 MB of 1.0 GB is left"), "{e}");
        assert!(e.contains("held by a@cpu-q8 (600 MB)"), "{e}");
    }
}
