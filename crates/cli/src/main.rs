//! `kvad`: the command line. For now it runs models in-process; with the server it becomes its client.

mod args;
mod generate;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = args::Cli::parse();
    let result = match cli.command {
        args::Command::Run(a) => generate::run(a),
        args::Command::Chat(a) => generate::chat(a),
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
