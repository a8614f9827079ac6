//! `kvad`: the command line. For now it runs models in-process; with the server it becomes its client.

mod args;
mod bench;
mod generate;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = args::Cli::parse();
    let result = match cli.command {
        args::Command::Run(a) => generate::run(a),
        args::Command::Chat(a) => generate::chat(a),
        args::Command::Bench(a) => bench::run(a),
        args::Command::Cache { action } => bench::cache(action == Some(args::CacheAction::Clear)),
        args::Command::Arch => {
            generate::arch();
            Ok(())
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
