//! `kvad bench`: interleaved rounds over (model, backend) variants, medians and ranges, every sample kept.

use crate::args::{BenchArgs, PplArgs};
use anyhow::{bail, Context, Result};
use kvad_engine::bench::{self, BenchConfig, Sample, Summary};
use kvad_engine::{open_model, OpenedModel};
use kvad_tensor::BackendKind;

/// Bytes of memory the kernel says are available (MemAvailable), if it says.
fn mem_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
}

fn fmt(s: Option<Summary>, digits: usize) -> String {
    match s {
        Some(s) => format!("{:.d$} [{:.d$}–{:.d$}]", s.median, s.min, s.max, d = digits),
        None => "-".into(),
    }
}

/// `kvad bench`.
pub fn run(a: BenchArgs, json: bool) -> Result<()> {
    let threads = kvad_tensor::cpu::pool::init(a.threads);
    let backends: Vec<BackendKind> = a.backend.split(',').map(|b| b.trim().parse()).collect::<Result<_, _>>()?;
    if a.rounds == 0 {
        bail!("--rounds 0: a benchmark needs at least one round");
    }
    let mut variants: Vec<(String, OpenedModel)> = Vec::new();
    for model in &a.models {
        let resolved = kvad_hub::resolve(model)?;
        for &b in &backends {
            let m = open_model(&resolved.path, b).with_context(|| format!("loading {model} on {b}"))?;
            eprintln!("kvad bench: loaded {model}@{b} ({:.0} MB of weights)", m.model.weight_bytes() as f64 / 1e6);
            variants.push((format!("{model}@{b}"), m));
        }
    }
    if a.batch == 0 {
        bail!("--batch 0: a benchmark needs at least one sequence");
    }
    // GPU variants hold their weights on the device; host memory is the CPU variants' concern.
    let total: u64 = variants
        .iter()
        .filter(|(_, m)| m.backend.device() == kvad_tensor::Device::Cpu)
        .map(|(_, m)| m.model.weight_bytes() as u64)
        .sum();
    if let Some(avail) = mem_available() {
        if total > avail {
            eprintln!(
                "kvad bench: warning: the variants together hold {:.1} GB but {:.1} GB is available; interleaved rounds \
                 would measure paging, not the variants: run them as separate runs",
                total as f64 / 1e9,
                avail as f64 / 1e9
            );
        }
    }
    let cfg = BenchConfig {
        prompt_tokens: a.prompt_tokens,
        gen_tokens: a.gen_tokens,
        rounds: a.rounds,
        warmup: a.warmup,
        batch: a.batch,
    };
    eprintln!(
        "kvad bench: {} variants × {} rounds, prompt {} tokens, {} generated, {} sequence(s) together, {threads} threads, greedy, empty cache each time",
        variants.len(),
        a.rounds,
        a.prompt_tokens,
        a.gen_tokens,
        a.batch
    );
    let refs: Vec<&OpenedModel> = variants.iter().map(|(_, m)| m).collect();
    let samples = bench::run(&refs, &cfg, |i, s: &Sample| {
        eprintln!(
            "  round {} {:<40} prefill {:>8.1} tok/s  decode {:>7.1} tok/s  ttft {:>7.1} ms",
            s.round, variants[i].0, s.prefill_tps, s.decode_tps, s.ttft_ms
        );
    })?;
    // The kernels' records of every GPU sample, when the GPU's settings name a trace file (KVAD_GPU_TRACE), for
    // scripts/gpu/trace.py.
    if variants.iter().any(|(_, m)| m.backend.device() != kvad_tensor::Device::Cpu) {
        let gpu = kvad_tensor::cuda::Gpu::shared(None)?;
        if gpu.tuning().trace.is_some() {
            let n = gpu.trace_dump()?;
            eprintln!("kvad bench: {n} kernel records written to the KVAD_GPU_TRACE file");
        }
    }
    let doc = serde_json::json!({
        "protocol": {"rounds": a.rounds, "warmup": a.warmup, "prompt_tokens": a.prompt_tokens,
                     "gen_tokens": a.gen_tokens, "batch": a.batch, "threads": threads, "interleaved": true, "empty_cache_each_sample": true},
        "variants": variants.iter().zip(&samples).map(|((name, m), s)| serde_json::json!({
            "variant": name, "weight_bytes": m.model.weight_bytes(), "samples": s,
        })).collect::<Vec<_>>(),
    });
    if let Some(path) = &a.out {
        std::fs::write(path, serde_json::to_string_pretty(&doc)?).with_context(|| format!("writing {path}"))?;
        eprintln!("kvad bench: every sample written to {path}");
    }
    if json {
        println!("{}", serde_json::to_string(&doc)?);
        return Ok(());
    }
    println!("{:<40} {:>26} {:>24} {:>24}", "VARIANT", "PREFILL tok/s", "DECODE tok/s", "TTFT ms");
    for ((name, _), s) in variants.iter().zip(&samples) {
        let col = |f: fn(&Sample) -> f64| Summary::of(&s.iter().map(f).collect::<Vec<_>>());
        println!(
            "{:<40} {:>26} {:>24} {:>24}",
            name,
            fmt(col(|x| x.prefill_tps), 1),
            fmt(col(|x| x.decode_tps), 1),
            fmt(col(|x| x.ttft_ms), 1)
        );
    }
    println!("median [min–max] over {} rounds", a.rounds);
    Ok(())
}

/// `kvad cache` and `kvad cache clear`.
pub fn cache(clear: bool) -> Result<()> {
    let dir = kvad_hub::kvad_cache_dir().join("quant");
    if clear {
        let (n, bytes) = kvad_models::qcache::clear(&dir)?;
        println!("removed {n} files, {:.1} MB, from {}", bytes as f64 / 1e6, dir.display());
        return Ok(());
    }
    let files = kvad_models::qcache::list(&dir);
    if files.is_empty() {
        println!("no quantised weights cached in {}", dir.display());
    }
    let mut total = 0;
    for (p, size) in &files {
        total += size;
        println!("{:>10.1} MB  {}", *size as f64 / 1e6, p.display());
    }
    if !files.is_empty() {
        println!("{:>10.1} MB  total in {}", total as f64 / 1e6, dir.display());
    }
    Ok(())
}

/// `kvad ppl`.
pub fn ppl(a: PplArgs) -> Result<()> {
    let text = std::fs::read_to_string(&a.file).with_context(|| format!("reading {}", a.file))?;
    let resolved = kvad_hub::resolve(&a.model)?;
    println!("{:<10} {:>12} {:>10} {:>8}", "BACKEND", "PERPLEXITY", "NLL", "TOKENS");
    let mut base = None;
    for b in a.backend.split(',') {
        let b: BackendKind = b.trim().parse()?;
        let m = open_model(&resolved.path, b).with_context(|| format!("loading {} on {b}", a.model))?;
        let ids = m.tokenizer.encode(&text, false)?;
        let p = kvad_engine::perplexity::perplexity(m.model.as_ref(), &ids, a.chunk)?;
        let rel =
            base.map(|f: f64| format!("  {:+.2}% vs {}", (p.ppl / f - 1.0) * 100.0, "the first")).unwrap_or_default();
        base.get_or_insert(p.ppl);
        println!("{:<10} {:>12.4} {:>10.4} {:>8}{rel}", b.name(), p.ppl, p.nll, p.tokens);
    }
    Ok(())
}
