//! NVRTC compilation of the kernel sources, cached on disk as PTX keyed by source, options and architecture.

use super::GpuError;
use cudarc::nvrtc::{CompileOptions, Ptx};
use std::hash::{Hash, Hasher};
use std::path::Path;

/// PTX for the sources on a GPU of this compute capability, and whether it was compiled now: from the cache when an
/// entry for exactly these sources and options exists, else compiled (seconds to half a minute a unit) and written
/// there. `defines` are the measuring variants asked for by environment ([`defines_from_env`]) and the unit's.
pub(crate) fn ptx(src: &str, cap: (i32, i32), cache: Option<&Path>, defines: &[&str]) -> Result<(Ptx, bool), GpuError> {
    let arch: &'static str = Box::leak(format!("compute_{}{}", cap.0, cap.1).into_boxed_str());
    let mut options = vec!["--std=c++17".to_string(), "-default-device".to_string()];
    options.extend(defines.iter().map(|d| format!("-D{d}")));
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (src, arch, &options, env!("CARGO_PKG_VERSION")).hash(&mut h);
    let file = cache.map(|d| d.join(format!("kvad-{arch}-{:016x}.ptx", h.finish())));
    if let Some(text) = file.as_ref().and_then(|f| std::fs::read_to_string(f).ok()) {
        if text.contains(".entry") {
            return Ok((Ptx::from_src(text), false));
        }
    }
    // SAFETY: only tries to dlopen the library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(GpuError::NoLibrary { lib: "libnvrtc (CUDA's runtime compiler)" });
    }
    let opts = CompileOptions { arch: Some(arch), options, ..Default::default() };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(src, opts).map_err(|e| GpuError::Compile(format!("{e:?}")))?;
    if let Some(f) = &file {
        // A cache that cannot be written only costs a compile next time.
        let _ = std::fs::create_dir_all(f.parent().unwrap_or(Path::new(".")));
        let tmp = f.with_extension("tmp");
        if std::fs::write(&tmp, ptx.to_src()).is_ok() {
            let _ = std::fs::rename(&tmp, f);
        }
    }
    Ok((ptx, true))
}

/// Compile units of the split products (gemv_split.cu's `KVAD_GS_PART`: two input counts each).
const GS_PARTS: [&str; 4] = ["KVAD_GS_PART=0", "KVAD_GS_PART=1", "KVAD_GS_PART=2", "KVAD_GS_PART=3"];

/// The kernels as NVRTC compile units, each a source and the define that picks its share: the split products' 240
/// instances in four units (common.cuh and gemv_split.cu alone), then every other kernel (all sources, no split
/// product). Compiled whole, the source took 90 s on one core (2026-12-01); as units side by side, about as long as
/// the largest (~27 s), and a change to one file recompiles only the units that hold it.
pub(crate) fn units(all: &[&str], common: &str, gemv_split: &str) -> Vec<(String, &'static str)> {
    let mut u: Vec<(String, &'static str)> = GS_PARTS.iter().map(|&d| (format!("{common}{gemv_split}"), d)).collect();
    u.push((all.concat(), "KVAD_GS_PART=-1"));
    u
}

/// PTX of every unit, compiled side by side (one thread each, each cached on its own), in the units' order, and
/// how many were compiled now (not found in the cache).
pub(crate) fn ptx_units(
    units: &[(String, &'static str)],
    cap: (i32, i32),
    cache: Option<&Path>,
    defines: &[&str],
) -> Result<(Vec<Ptx>, usize), GpuError> {
    std::thread::scope(|s| {
        let jobs: Vec<_> = units
            .iter()
            .map(|(src, unit)| {
                s.spawn(move || {
                    let mut d = defines.to_vec();
                    d.push(unit);
                    ptx(src, cap, cache, &d)
                })
            })
            .collect();
        let done = jobs
            .into_iter()
            .map(|j| j.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect::<Result<Vec<_>, _>>()?;
        let compiled = done.iter().filter(|(_, now)| *now).count();
        Ok((done.into_iter().map(|(p, _)| p).collect(), compiled))
    })
}

/// The kernel variants the environment asks for, each a macro of common.cuh: `KVAD_GPU_TRACE` set compiles the
/// trace records in (`KVAD_TRACE`; otherwise that code is not there at all).
pub(crate) fn defines_from_env() -> Vec<&'static str> {
    let mut d = Vec::new();
    if std::env::var_os("KVAD_GPU_TRACE").is_some() {
        d.push("KVAD_TRACE");
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A unit is compiled once and then found in the cache (what makes the first GPU load's note say "later runs
    /// skip this"); another define is another entry. Needs libnvrtc (scripts/test.sh installs it), not a GPU.
    #[test]
    fn a_compiled_unit_is_found_in_the_cache_the_second_time() {
        // SAFETY: only tries to dlopen the library.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            eprintln!("libnvrtc not found: scripts/test.sh installs it (nvidia-cuda-nvrtc) and sets LD_LIBRARY_PATH");
            return;
        }
        let dir = std::env::temp_dir().join(format!("kvad-kernel-cache-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let src = "extern \"C\" __global__ void k(float* y) { y[threadIdx.x] = (float)UNIT_N; }\n";
        let units = vec![(src.to_string(), "UNIT_N=1"), (src.to_string(), "UNIT_N=2")];
        let (first, n1) = ptx_units(&units, (9, 0), Some(&dir), &[]).unwrap();
        let (again, n2) = ptx_units(&units, (9, 0), Some(&dir), &[]).unwrap();
        let (other, n3) = ptx_units(&units, (9, 0), Some(&dir), &["KVAD_TRACE"]).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!((n1, n2, n3), (2, 0, 2), "compiled, then cached, then another variant compiled");
        let text = |p: &[Ptx]| p.iter().map(Ptx::to_src).collect::<Vec<_>>();
        assert_eq!(text(&first), text(&again), "the cached PTX is what was compiled");
        assert_eq!(text(&first), text(&other), "a define the source does not use changes no PTX");
        assert_ne!(first[0].to_src(), first[1].to_src(), "each unit's define reaches its compile");
    }
}
