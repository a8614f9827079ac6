//! `kvad man [VERB]`: manual pages made from the clap definitions, so they cannot drift from the flags: kvad(1)
//! with every verb listed, and a page of its own for each verb (kvad-run(1), ...), as `git` and `cargo` ship them.

use anyhow::{bail, Result};
use clap::CommandFactory;

/// The page as roff: kvad's, or `verb`'s.
pub fn page(verb: Option<&str>) -> Result<Vec<u8>> {
    let cmd = crate::args::Cli::command();
    let cmd = match verb {
        None => cmd,
        Some(v) => match cmd.find_subcommand(v) {
            Some(sub) => {
                sub.clone().name(format!("kvad-{v}")).bin_name(format!("kvad {v}")).version(crate::args::VERSION)
            }
            None => {
                let verbs: Vec<&str> = cmd.get_subcommands().map(|s| s.get_name()).collect();
                bail!("verb = {v:?}: kvad has no such verb; its verbs: {}", verbs.join(", "))
            }
        },
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut out)?;
    Ok(out)
}
