//! `kvad`: the command line. For now it runs models in-process; with the server it becomes its client.

mod args;
mod bench;
mod generate;
mod hub_cmds;

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
        args::Command::Pull(a) => hub_cmds::pull(a),
        args::Command::Ls(a) => hub_cmds::ls(a),
        args::Command::Rm(a) => hub_cmds::rm(a),
        args::Command::Use(a) => hub_cmds::use_model(a),
        args::Command::Info(a) => hub_cmds::info(a),
        args::Command::Search(a) => hub_cmds::search(a),
        args::Command::Models(a) => hub_cmds::models(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kvad: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
