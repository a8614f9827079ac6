//! `kvad`: the command line. Commands go to a kvad server when one answers and run in this process when none does
//! (see `client`); the first line of output says which.
//!
//! The doc comments of the clap types (`args.rs`, `hub_cmds.rs`) are the `--help` text, where brackets are literal
//! (`owner/name[@revision]`, `[server]`), not rustdoc links.
#![allow(rustdoc::broken_intra_doc_links)]

mod args;
mod bench;
mod client;
mod config;
mod generate;
mod hub_cmds;
mod hub_models;
mod man;
mod serve;

use clap::Parser;
use client::Target;

/// Writes to stdout; a reader that closed early (`| head`) is not an error.
fn print_all(bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    match std::io::stdout().write_all(bytes) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

fn main() -> std::process::ExitCode {
    let cli = args::Cli::parse();
    let c = cli.client.clone();
    let chosen = || {
        let t = client::choose(c.remote.as_deref(), c.local)?;
        t.announce();
        anyhow::Ok(t)
    };
    let result = match cli.command {
        args::Command::Run(a) => chosen().and_then(|t| match t {
            Target::Remote { url, .. } => client::remote::run(&url, &a, c.json),
            Target::Local { .. } => generate::run(a),
        }),
        args::Command::Chat(a) => chosen().and_then(|t| match t {
            Target::Remote { url, .. } => client::remote::chat(&url, &a, c.json),
            Target::Local { .. } => generate::chat(a),
        }),
        args::Command::Bench(a) if a.request_rate.is_some() => {
            client::remote_only(&c, "bench --request-rate").and_then(|url| client::serving::run(&url, &a, c.json))
        }
        args::Command::Bench(a) if a.concurrency.is_some() => {
            client::remote_only(&c, "bench --concurrency").and_then(|url| client::loadgen::run(&url, &a, c.json))
        }
        args::Command::Bench(a) => bench::run(a, c.json),
        args::Command::Queue => client::remote_only(&c, "queue").and_then(|url| client::admin::queue(&url, c.json)),
        args::Command::Ps => client::ps(&c),
        args::Command::Embed { model, texts, dimensions } => client::remote_only(&c, "embed")
            .and_then(|url| client::admin::embed(&url, &model, &texts, dimensions, c.json)),
        args::Command::Load { model, backend } => client::remote_only(&c, "load")
            .and_then(|url| client::admin::load(&url, &model, backend.as_deref(), c.json)),
        args::Command::Unload { model } => {
            client::remote_only(&c, "unload").and_then(|url| client::admin::unload(&url, model.as_deref(), c.json))
        }
        args::Command::Metrics { command: args::MetricsCommand::Usage { days } } => {
            client::remote_only(&c, "metrics usage").and_then(|url| client::admin::usage(&url, days, c.json))
        }
        args::Command::Ppl(a) => bench::ppl(a),
        args::Command::Cache { action } => bench::cache(action == Some(args::CacheAction::Clear)),
        args::Command::Arch => {
            generate::arch();
            Ok(())
        }
        args::Command::Doctor => {
            for line in kvad_engine::system::report() {
                println!("{line}");
            }
            Ok(())
        }
        args::Command::Pull(a) => chosen().and_then(|t| match t {
            Target::Remote { url, .. } => client::pull::pull(&url, &a.model, c.json),
            Target::Local { .. } => hub_cmds::pull(a, c.json),
        }),
        args::Command::Ls(a) => chosen().and_then(|t| match t {
            Target::Remote { url, .. } => client::remote::ls(&url, c.json),
            Target::Local { .. } => hub_cmds::ls(a),
        }),
        args::Command::Rm(a) => hub_cmds::rm(a),
        // Here, and on the server when one answers (its default model: offered first, kept across its restarts).
        args::Command::Use(a) => {
            hub_cmds::use_model(a).and_then(|name| match client::choose(c.remote.as_deref(), c.local)? {
                Target::Remote { url, .. } => client::admin::use_model(&url, &name),
                Target::Local { .. } => Ok(()),
            })
        }
        args::Command::Info(a) => hub_cmds::info(a),
        args::Command::Search(a) => hub_cmds::search(a),
        args::Command::Models(a) => hub_models::models(a),
        args::Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut <args::Cli as clap::CommandFactory>::command(),
                "kvad",
                &mut std::io::stdout(),
            );
            Ok(())
        }
        args::Command::Man { verb } => man::page(verb.as_deref()).and_then(|p| print_all(&p)),
        args::Command::Serve { args } => serve::serve(args),
        args::Command::Api { path, method, data } => client::remote_only(&c, "api")
            .and_then(|url| client::remote::api(&url, path.as_deref(), method.as_deref(), data.as_deref(), c.json)),
        args::Command::Auth { command } => {
            let mut c = c.clone();
            c.remote = command.url().map(str::to_string).or(c.remote);
            client::remote_only(&c, "auth").and_then(|url| match command {
                args::AuthCommand::Login { username, password_stdin, api_key_stdin, .. } => {
                    client::auth::login(&url, &client::auth::LoginArgs { username, password_stdin, api_key_stdin })
                }
                args::AuthCommand::Logout { .. } => client::auth::logout(&url),
                args::AuthCommand::Status { .. } => client::auth::status(&url, c.json),
            })
        }
        args::Command::Users { command } => client::remote_only(&c, "users").and_then(|url| {
            use client::accounts as a;
            match command.unwrap_or(args::UsersCommand::List) {
                args::UsersCommand::List => a::users_list(&url, c.json),
                args::UsersCommand::Add { name, role, password_stdin } => {
                    a::users_add(&url, &name, &role, password_stdin, c.json)
                }
                args::UsersCommand::Set { name, role, password, password_stdin } => {
                    a::users_set(&url, &name, role.as_deref(), password, password_stdin)
                }
                args::UsersCommand::Rm { name } => a::users_rm(&url, &name),
            }
        }),
        args::Command::Sessions { command } => {
            client::remote_only(&c, "sessions").and_then(|url| match command.unwrap_or(args::SessionsCommand::List) {
                args::SessionsCommand::List => client::accounts::sessions_list(&url, c.json),
                args::SessionsCommand::Rm { id } => client::accounts::sessions_rm(&url, &id),
            })
        }
        args::Command::Keys { command } => {
            client::remote_only(&c, "keys").and_then(|url| match command.unwrap_or(args::KeysCommand::List) {
                args::KeysCommand::List => client::accounts::keys_list(&url, c.json),
                args::KeysCommand::Create { name } => client::accounts::keys_create(&url, &name, c.json),
                args::KeysCommand::Revoke { id } => client::accounts::keys_revoke(&url, &id),
            })
        }
        args::Command::Datasets { command } => client::remote_only(&c, "datasets").and_then(|url| {
            use client::training as t;
            match command.unwrap_or(args::DatasetsCommand::List) {
                args::DatasetsCommand::List => t::datasets_list(&url, c.json),
                args::DatasetsCommand::Add { file, hub, split, name, validation } => {
                    let source = match (&file, &hub) {
                        (Some(f), _) => t::Source::File(f),
                        (None, h) => t::Source::Hub(h.as_deref().unwrap_or_default(), split.as_deref()),
                    };
                    t::datasets_add(&url, source, name.as_deref(), validation, c.json)
                }
                args::DatasetsCommand::Show { id, rows, model } => t::datasets_show(&url, &id, rows, model.as_deref()),
                args::DatasetsCommand::Rm { id } => t::datasets_rm(&url, &id),
            }
        }),
        args::Command::Jobs { command } => client::remote_only(&c, "jobs").and_then(|url| {
            use client::training as t;
            match command.unwrap_or(args::JobsCommand::List) {
                args::JobsCommand::List => t::jobs_list(&url, c.json),
                args::JobsCommand::Show { id } => t::jobs_show(&url, &id),
                args::JobsCommand::Follow { id } => t::jobs_follow(&url, &id, c.json),
                args::JobsCommand::Cancel { id } => t::jobs_cancel(&url, &id),
                args::JobsCommand::Resume { id } => t::jobs_resume(&url, &id, c.json),
            }
        }),
        args::Command::Evals { command } => client::remote_only(&c, "evals").and_then(|url| match command {
            args::EvalsCommand::Run { data, dataset, models, scorer, max_tokens, system } => {
                let fields =
                    serde_json::json!({"models": models, "scorer": scorer, "max_tokens": max_tokens, "system": system});
                client::training::eval(&url, "eval", (data.as_deref(), dataset.as_deref()), fields, c.json)
            }
            args::EvalsCommand::Ppl { data, dataset, model, split, window } => {
                let fields = serde_json::json!({"model": model, "split": split, "window": window});
                client::training::eval(&url, "perplexity", (data.as_deref(), dataset.as_deref()), fields, c.json)
            }
            args::EvalsCommand::Items { job, against } => {
                client::training::eval_items(&url, &job, against.as_deref(), c.json)
            }
        }),
        args::Command::Train(t) => client::remote_only(&c, "train").and_then(|url| train(&url, &t, c.json)),
        args::Command::Service { command: args::ServiceCommand::Status } => {
            client::service_url().and_then(|url| client::service::status(c.remote.as_deref().unwrap_or(&url)))
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kvad: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `kvad train`: the flags as `POST /api/jobs` fields.
fn train(url: &str, t: &args::TrainCmd, json_out: bool) -> anyhow::Result<()> {
    let mut f = serde_json::json!({"output": t.output});
    let nums = [
        ("steps", t.steps.map(|v| v as f64)),
        ("lr", t.lr.map(f64::from)),
        ("warmup", t.warmup.map(|v| v as f64)),
        ("batch", t.batch.map(|v| v as f64)),
        ("accum", t.accum.map(|v| v as f64)),
        ("seq_len", t.seq_len.map(|v| v as f64)),
        ("save_every", t.save_every.map(|v| v as f64)),
        ("eval_every", t.eval_every.map(|v| v as f64)),
    ];
    for (k, v) in nums {
        if let Some(v) = v {
            f[k] = if v.fract() == 0.0 { serde_json::json!(v as u64) } else { serde_json::json!(v) };
        }
    }
    if let Some(tok) = &t.tokenizer {
        f["tokenizer"] = serde_json::json!(tok);
    }
    if let Some(e) = &t.eos {
        f["eos"] = serde_json::json!(e);
    }
    if let Some(p) = &t.chat_template {
        f["chat_template"] = serde_json::json!(std::fs::read_to_string(p)?);
    }
    if let Some(r) = t.lora_rank {
        f["lora"] = serde_json::json!({"rank": r, "alpha": t.lora_alpha, "targets": t.lora_targets});
    }
    let a = client::training::TrainArgs {
        model: t.model.as_deref(),
        config: t.config.as_deref(),
        data: t.data.as_deref(),
        dataset: t.dataset.as_deref(),
        fields: f,
    };
    client::training::train(url, a, json_out)
}
