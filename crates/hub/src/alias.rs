//! Aliases: each names a model, pinned to the revision it was verified at (caldrix-models.md, "Aliases").

/// One alias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alias {
    /// The short name.
    pub name: &'static str,
    /// `owner/name` on the Hub.
    pub repo: &'static str,
    /// The pinned commit.
    pub revision: &'static str,
}

/// The alias table.
pub const ALIASES: &[Alias] = &[
    Alias { name: "smollm2", repo: "HuggingFaceTB/SmolLM2-135M", revision: "93efa2f097d58c2a74874c7e644dbc9b0cee75a2" },
    Alias {
        name: "smollm2-instruct",
        repo: "HuggingFaceTB/SmolLM2-135M-Instruct",
        revision: "12fd25f77366fa6b3b4b768ec3050bf629380bac",
    },
    Alias {
        name: "llama-8b",
        repo: "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
        revision: "6a6f4aa4197940add57724a7707d069478df56b1",
    },
    Alias { name: "qwen3-0.6b", repo: "Qwen/Qwen3-0.6B", revision: "c1899de289a04d12100db370d81485cdf75e47ca" },
    Alias { name: "qwen3-8b", repo: "Qwen/Qwen3-8B", revision: "b968826d9c46dd6066d109eabc6255188de91218" },
    Alias { name: "qwen3-30b-a3b", repo: "Qwen/Qwen3-30B-A3B", revision: "ad44e777bcd18fa416d9da3bd8f70d33ebb85d39" },
    Alias { name: "decider-0.8b", repo: "Mapika/decider-0.8b", revision: "a0a01d6f8135298f400a8c856b355793012ae971" },
    Alias {
        name: "smolvlm-256m",
        repo: "HuggingFaceTB/SmolVLM-256M-Instruct",
        revision: "7e3e67edbbed1bf9888184d9df282b700a323964",
    },
];

/// The alias of that name.
pub fn lookup(name: &str) -> Option<&'static Alias> {
    ALIASES.iter().find(|a| a.name == name)
}

/// What `pull`, `rm` and `info` mean by a name: an alias's repo at its pinned revision, else `owner/name[@rev]`
/// parsed. One rule for the CLI and the server, so a name pulls the same thing wherever it is typed.
pub fn repo_ref(name: &str) -> Result<crate::RepoRef, crate::HubError> {
    if let Some(a) = lookup(name) {
        return Ok(crate::RepoRef { repo: crate::RepoId::parse(a.repo)?, revision: a.revision.into() });
    }
    crate::RepoRef::parse(name)
}

/// The names, for messages.
pub fn names() -> Vec<&'static str> {
    ALIASES.iter().map(|a| a.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_alias_is_a_valid_repo_pinned_to_a_commit() {
        for a in ALIASES {
            crate::RepoId::parse(a.repo).unwrap();
            assert!(crate::repo::is_commit(a.revision), "{}", a.name);
        }
        assert_eq!(lookup(crate::DEFAULT_ALIAS).unwrap().repo, "HuggingFaceTB/SmolLM2-135M-Instruct");
    }
}
