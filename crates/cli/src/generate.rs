//! `kvad run` and `kvad chat` in-process: resolve, load, template, generate, stream.

use crate::args::{ModelArgs, RunArgs};
use anyhow::{bail, Context, Result};
use kvad_engine::{generate_with, open_model, GenStats, GenerateOptions, GenerateRequest, OpenedModel, SamplingParams};
use kvad_tensor::BackendKind;
use kvad_text::{ChatContext, IncrementalDecoder};
use serde_json::{json, Value};
use std::io::{BufRead, Write};

fn load(args: &ModelArgs) -> Result<OpenedModel> {
    // Everything the user typed is checked before the (slow) load.
    params(args, None).validate()?;
    let backend: BackendKind = match args.named_backend()? {
        Some(b) => b.parse()?,
        None => {
            let (b, line) = kvad_engine::system::default_backend_for(&args.model);
            if let Some(line) = line {
                eprintln!("kvad: {line}");
            }
            b
        }
    };
    if args.dtype.as_deref() == Some("bf16") {
        if let Some(why) = kvad_engine::system::gpu_unavailable() {
            bail!("--dtype bf16 computes on the GPU (gpu-bf16), which cannot run here: {why}; --dtype f32 computes exactly on the CPU");
        }
    }
    let threads = kvad_tensor::cpu::pool::init(args.threads);
    let resolved = crate::hub_cmds::resolve_model(&args.model)?;
    if let Some(ctx) = args.ctx {
        // Checked against the config alone, before a load that may take minutes.
        let files = kvad_models::ModelFiles::detect(&resolved.path)?;
        check_ctx(ctx, &args.model, &kvad_models::read_config(&files)?)?;
    }
    let t = std::time::Instant::now();
    let m = open_model(&resolved.path, backend).with_context(|| format!("loading {}", resolved.path.display()))?;
    for n in &m.notes {
        eprintln!("kvad: {n}");
    }
    match &m.cache {
        kvad_models::CacheUse::None => {}
        kvad_models::CacheUse::Mapped(p) => eprintln!("kvad: weights mapped from the quantised cache {}", p.display()),
        kvad_models::CacheUse::Written(p) => eprintln!("kvad: quantised once, written to {}", p.display()),
        kvad_models::CacheUse::WriteFailed(why) => eprintln!("kvad: could not write the quantised cache ({why})"),
    }
    let c = m.model.config();
    eprintln!(
        "kvad: {} ({}, {} layers, {:.0} M params) on {backend}, {threads} threads, loaded in {:.3}s",
        args.model,
        c.arch_name,
        c.n_layers,
        kvad_models::param_count(c) as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    Ok(m)
}

/// `--ctx` against the model's context: at least one token, no wider than the model's context, which for a Qwen
/// model with an active sliding window is that window (the seed's rule, said with the window's size).
pub(crate) fn check_ctx(ctx: usize, model: &str, c: &kvad_models::ModelConfig) -> Result<()> {
    if ctx == 0 {
        bail!("--ctx 0: the context must hold at least one token");
    }
    if ctx > c.max_position {
        match c.window_cap {
            Some(w) if w == c.max_position => bail!(
                "--ctx {ctx}: wider than {model}'s sliding window of {w} tokens (use_sliding_window: kvad runs it at a context no wider than its window)"
            ),
            _ => bail!("--ctx {ctx}: wider than {model}'s context of {} tokens (max_position_embeddings)", c.max_position),
        }
    }
    Ok(())
}

fn params(a: &ModelArgs, logprobs: Option<usize>) -> SamplingParams {
    SamplingParams {
        temperature: a.temperature,
        top_k: a.top_k,
        top_p: a.top_p,
        min_p: a.min_p,
        repetition_penalty: a.repetition_penalty,
        presence_penalty: a.presence_penalty,
        frequency_penalty: a.frequency_penalty,
        seed: a.seed,
        top_logprobs: logprobs,
    }
}

/// Renders the conversation with the model's own template (chat models) or returns the plain prompt ids.
fn prompt_ids(m: &OpenedModel, messages: &[Value], plain: &str) -> Result<Vec<u32>> {
    match &m.template {
        Some(t) => {
            let ctx = ChatContext {
                messages: messages.to_vec(),
                tools: None,
                add_generation_prompt: true,
                bos_token: m.tokenizer.bos_token().unwrap_or_default().to_string(),
                eos_token: m.tokenizer.eos_token().unwrap_or_default().to_string(),
                extra: Default::default(),
            };
            let text = t.render(&ctx)?;
            Ok(m.tokenizer.encode(&text, false)?)
        }
        None => Ok(m.tokenizer.encode(plain, true)?),
    }
}

/// Generates and streams one reply; returns its text (without the stop token) and the stats.
fn stream(m: &OpenedModel, prompt: Vec<u32>, a: &ModelArgs, logprobs: Option<usize>) -> Result<(String, GenStats)> {
    let stop = m.stop_ids();
    let req = GenerateRequest { prompt, params: params(a, logprobs), max_tokens: a.max_tokens, stop_ids: stop.clone() };
    let mut dec = IncrementalDecoder::new(&m.tokenizer, true);
    let mut text = String::new();
    let mut out = std::io::stdout().lock();
    let mut err: Option<anyhow::Error> = None;
    let opts = GenerateOptions { context: a.ctx, ..GenerateOptions::default() };
    let stats = generate_with(m.model.as_ref(), &req, &opts, |s| {
        if logprobs.is_some() {
            let alts: Vec<String> = s
                .top
                .iter()
                .map(|(id, lp)| format!("{:?} {lp:.3}", m.tokenizer.id_to_token(*id).unwrap_or_default()))
                .collect();
            eprintln!("[{} {:.3}] {}", s.id, s.logprob, alts.join(" | "));
        }
        if stop.contains(&s.id) {
            return true;
        }
        match dec.push(s.id) {
            Ok(Some(delta)) => {
                text.push_str(&delta);
                let _ = out.write_all(delta.as_bytes());
                let _ = out.flush();
                true
            }
            Ok(None) => true,
            Err(e) => {
                err = Some(e.into());
                false
            }
        }
    })?;
    if let Some(e) = err {
        return Err(e);
    }
    let rest = dec.finish()?;
    text.push_str(&rest);
    let _ = writeln!(out, "{rest}");
    Ok((text, stats))
}

fn summary(s: &GenStats) {
    eprintln!(
        "kvad: prompt {} tokens at {:.1} tok/s · reply {} tokens at {:.1} tok/s · {:?}",
        s.prompt_tokens,
        s.prefill_tps(),
        s.generated,
        s.decode_tps(),
        s.finish
    );
}

/// The conversation's opening: the system message, when there is one.
pub(crate) fn with_system(system: &Option<String>) -> Vec<Value> {
    system.iter().map(|s| json!({"role": "system", "content": s})).collect()
}

/// `kvad run`.
pub fn run(a: RunArgs) -> Result<()> {
    let m = load(&a.model)?;
    let mut messages = with_system(&a.model.system);
    messages.push(json!({"role": "user", "content": a.prompt}));
    let ids = prompt_ids(&m, &messages, &a.prompt)?;
    let (_, stats) = stream(&m, ids, &a.model, a.logprobs)?;
    summary(&stats);
    Ok(())
}

/// `kvad chat`: a read-reply loop that keeps the conversation.
pub fn chat(a: ModelArgs) -> Result<()> {
    let m = load(&a)?;
    if m.template.is_none() {
        bail!("{} has no chat template: it is a completion model; use `kvad run` instead", a.model);
    }
    conversation(&a.model, &a.system, |messages, line| {
        let ids = prompt_ids(&m, messages, line)?;
        let (reply, stats) = stream(&m, ids, &a, None)?;
        summary(&stats);
        Ok(reply)
    })
}

/// The read-reply loop `kvad chat` runs in process and against a server: it keeps the conversation (system message
/// first), handles /exit and /reset, and asks `reply` for the answer to each user line.
pub(crate) fn conversation(
    model: &str,
    system: &Option<String>,
    mut reply: impl FnMut(&[Value], &str) -> Result<String>,
) -> Result<()> {
    let mut messages = with_system(system);
    eprintln!("kvad: chatting with {model} (type /exit to leave, /reset to start over)");
    let stdin = std::io::stdin();
    loop {
        eprint!("> ");
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            break;
        }
        let line = line.trim();
        match line {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                messages = with_system(system);
                continue;
            }
            _ => {}
        }
        messages.push(json!({"role": "user", "content": line}));
        let answer = reply(&messages, line)?;
        messages.push(json!({"role": "assistant", "content": answer}));
    }
    Ok(())
}

/// `kvad arch`.
pub fn arch() {
    println!("{:<11} {:<60} BACKENDS", "ARCH", "COVERS");
    for e in kvad_models::arch::registry::ARCHS {
        let names: Vec<&str> = e.backends.iter().map(|b| b.name()).collect();
        println!("{:<11} {:<60} {}", e.name, e.covers, names.join(" "));
    }
    if let Some(why) = kvad_engine::system::gpu_unavailable() {
        println!("gpu-* backends cannot run on this machine: {why}");
    }
}
