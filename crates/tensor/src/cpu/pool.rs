//! The worker pool: one persistent pool sized to the physical cores.
//!
//! Decode runs a few hundred parallel regions a token, so threads must already exist and be hot; rayon's global
//! pool gives that. Hyper-threads share one core's FMA units and its memory stream, so by default we use the
//! number of physical cores, which `KVAD_THREADS` overrides.

use std::sync::OnceLock;

static INIT: OnceLock<usize> = OnceLock::new();

/// Sets up the pool once (later calls return the first answer) and returns its thread count.
pub fn init(threads: Option<usize>) -> usize {
    *INIT.get_or_init(|| {
        let n = threads
            .or_else(|| std::env::var("KVAD_THREADS").ok().and_then(|v| v.parse().ok()))
            .filter(|&n| n > 0)
            .unwrap_or_else(physical_cores);
        // An error means a pool already exists (a test harness made one): use it as it is.
        let _ = rayon::ThreadPoolBuilder::new().num_threads(n).build_global();
        rayon::current_num_threads()
    })
}

/// Counts physical cores from /proc/cpuinfo (distinct (physical id, core id) pairs), else the logical count.
pub fn physical_cores() -> usize {
    let logical = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return logical;
    };
    let mut pairs = std::collections::HashSet::new();
    let (mut phys, mut core) = (None, None);
    for line in info.lines() {
        if let Some((k, v)) = line.split_once(':') {
            match k.trim() {
                "physical id" => phys = Some(v.trim().to_string()),
                "core id" => core = Some(v.trim().to_string()),
                _ => {}
            }
        }
        if line.trim().is_empty() {
            if let (Some(p), Some(c)) = (phys.take(), core.take()) {
                pairs.insert((p, c));
            }
        }
    }
    if let (Some(p), Some(c)) = (phys, core) {
        pairs.insert((p, c));
    }
    if pairs.is_empty() {
        logical
    } else {
        pairs.len().min(logical)
    }
}
