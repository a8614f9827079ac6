//! `kvad`: the command line. Commands go to a kvad server when one answers and run in this process when none does
//! (see `client`); the first line of output says which.

mod args;
mod client;
mod generate;
mod serve;

use clap::Parser;
use client::Target;

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
        args::Command::Arch => {
            generate::arch();
            Ok(())
        }
        args::Command::Serve { args } => serve::serve(args),
        args::Command::Ls => client::remote_only(&c, "ls").and_then(|url| client::remote::ls(&url, c.json)),
        args::Command::Api { path, method, data } => client::remote_only(&c, "api")
            .and_then(|url| client::remote::api(&url, path.as_deref(), method.as_deref(), data.as_deref(), c.json)),
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
