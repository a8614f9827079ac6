//! What holding replies to a JSON Schema costs a decode step: the same replies (same prompt, seeds and sampler at
//! temperature 1) with and without the grammar, interleaved round by round, at each batch size. Only decode steps
//! while every reply is still inside its JSON are timed (a finished grammar allows only the end token, which would
//! flatter the constrained side). Prints each variant's tokens/s, median and range over the rounds, and the ratio.
//!   cargo run --release -p kvad-engine --example constrained_bench -- MODEL BACKEND [BATCHES] [STEPS] [ROUNDS]
//! e.g. `… -- smollm2-instruct cpu-q8 1,8 64 5`. MODEL is a path or a name the hub resolves on disk.

use kvad_engine::grammar::{Constraint, Grammar, Grammars};
use kvad_engine::pass::{run, Sequence, Stepping};
use kvad_engine::seam::{GenParams, Work};
use kvad_engine::{open_model, BackendKind, EngineError, GenerateOptions, OpenedModel, SamplingParams};
use std::time::Instant;

/// Many objects of several fields: a reply stays inside it for hundreds of tokens.
fn schema() -> serde_json::Value {
    serde_json::json!({
        "type": "array", "minItems": 40,
        "items": {"type": "object", "required": ["city", "forecast", "high", "low"], "properties": {
            "city": {"type": "string"}, "forecast": {"type": "string"},
            "high": {"type": "number"}, "low": {"type": "number"}}}
    })
}

/// One round of `batch` replies: the seconds of each decode step timed, and how many were timed.
fn round(m: &OpenedModel, g: Option<&Grammars>, batch: usize, steps: usize) -> Result<Vec<f64>, EngineError> {
    let prompt = m
        .tokenizer
        .encode("The weather in forty cities, as a JSON array of objects with city, forecast, high and low:", true)
        .map_err(|e| EngineError::internal(e.to_string()))?;
    let stop = m.stop_ids();
    let model = m.model.as_ref();
    let mut seqs: Vec<Sequence> = (0..batch)
        .map(|i| {
            let sampling = SamplingParams { temperature: 1.0, seed: Some(i as u64 + 1), ..Default::default() };
            let params = GenParams { sampling, max_tokens: steps + 1, options: GenerateOptions::default() };
            Sequence::new(prompt.clone(), model.new_state(), 0, params)
        })
        .collect();
    if let Some(g) = g {
        let c = Constraint { grammar: Grammar::JsonSchema(schema()), field: "response_format", after: None };
        for s in &mut seqs {
            s.params.options.constraint = Some(c.clone());
            s.guide = Some(g.guide(&c)?);
        }
    }
    let how = Stepping::default();
    for s in &mut seqs {
        run(model, how, &[Work::Chunk(prompt.len() - 1)], &mut [s])?;
    }
    let mut refs: Vec<&mut Sequence> = seqs.iter_mut().collect();
    run(model, how, &vec![Work::Last; batch], &mut refs)?;
    let mut times = Vec::with_capacity(steps);
    for _ in 0..steps {
        let t = Instant::now();
        let got = run(model, how, &vec![Work::Decode; batch], &mut refs)?;
        let dt = t.elapsed().as_secs_f64();
        if got.iter().flatten().any(|s| stop.contains(&s.id)) {
            break;
        }
        times.push(dt);
    }
    Ok(times)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args.first().ok_or("usage: constrained_bench MODEL BACKEND [BATCHES] [STEPS] [ROUNDS]")?;
    let backend: BackendKind = args.get(1).map_or("cpu-q8", String::as_str).parse()?;
    let batches: Vec<usize> =
        args.get(2).map_or("1,8", String::as_str).split(',').map(str::parse).collect::<Result<_, _>>()?;
    let steps: usize = args.get(3).map_or(Ok(64), |s| s.parse())?;
    let rounds: usize = args.get(4).map_or(Ok(5), |s| s.parse())?;
    let path = kvad_hub::resolve_on_disk(name).map(|r| r.path).unwrap_or_else(|_| name.into());
    let m = open_model(&path, backend)?;
    let end = *m.stop_ids().first().ok_or("the model names no end token")?;
    let t = Instant::now();
    let g = Grammars::new(&m.tokenizer, m.model.config().vocab_size, end)?;
    println!(
        "{name} on {backend}: vocabulary of {} compiled for grammars in {:.0} ms; {steps} decode steps a round, {rounds} rounds",
        m.model.config().vocab_size,
        t.elapsed().as_secs_f64() * 1e3
    );
    for line in kvad_engine::system::report().iter().take(2) {
        println!("{line}");
    }
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    println!("{}", cpu.lines().find(|l| l.starts_with("model name")).unwrap_or("model name: ?"));
    round(&m, Some(&g), 1, 4)?; // warm-up: kernels, caches
    for &batch in &batches {
        let (mut free, mut held) = (Vec::new(), Vec::new());
        let mut timed = (0, 0);
        for _ in 0..rounds {
            for constrained in [false, true] {
                let mut t = round(&m, constrained.then_some(&g), batch, steps)?;
                let n = t.len();
                if n == 0 {
                    continue;
                }
                let per_s = batch as f64 / median(&mut t);
                if constrained {
                    held.push(per_s);
                    timed.1 += n;
                } else {
                    free.push(per_s);
                    timed.0 += n;
                }
            }
        }
        let line = |v: &mut Vec<f64>| {
            let (lo, hi) = (v.iter().copied().fold(f64::MAX, f64::min), v.iter().copied().fold(0.0, f64::max));
            (median(v), lo, hi)
        };
        let ((f, flo, fhi), (h, hlo, hhi)) = (line(&mut free), line(&mut held));
        println!(
            "batch {batch}: free {f:.1} tok/s [{flo:.1}–{fhi:.1}] ({} steps), schema {h:.1} tok/s [{hlo:.1}–{hhi:.1}] \
             ({} steps): {:.3}×",
            timed.0,
            timed.1,
            h / f
        );
    }
    Ok(())
}
