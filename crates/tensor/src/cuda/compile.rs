//! NVRTC compilation of the kernel sources, cached on disk (the GPU's code, or PTX) keyed by source, options and
//! architecture.

use super::GpuError;
use cudarc::nvrtc::{CompileOptions, Ptx};
use std::hash::{Hash, Hasher};
use std::path::Path;

/// What NVRTC makes of a unit: PTX for the virtual architecture (`compute_XY`), which the driver compiles to the
/// GPU's code when a module is loaded — every kernel, one module after another, on one core, and again wherever the
/// driver's own cache does not hold it — or the GPU's code itself (`sm_XY`, a CUBIN), NVRTC running the same PTX
/// compiler inside each unit's thread, side by side, and kvad's cache keeping the final code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Target {
    Ptx,
    Cubin,
}

/// The code for the sources on a GPU of this compute capability (PTX text, or a CUBIN as [`Ptx::from_binary`]),
/// and whether it was compiled now: from the cache when an entry for exactly these sources, options and target
/// exists, else compiled (seconds to half a minute a unit) and written there. `defines` are the trace's, where the
/// GPU's settings ask for it ([`defines`]), and the unit's.
pub(crate) fn code(
    src: &str,
    cap: (i32, i32),
    cache: Option<&Path>,
    defines: &[&str],
    target: Target,
) -> Result<(Ptx, bool), GpuError> {
    let arch = match target {
        Target::Ptx => format!("compute_{}{}", cap.0, cap.1),
        Target::Cubin => format!("sm_{}{}", cap.0, cap.1),
    };
    let mut options = vec!["--std=c++17".to_string(), "-default-device".to_string()];
    options.extend(defines.iter().map(|d| format!("-D{d}")));
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (src, &arch, &options, env!("CARGO_PKG_VERSION")).hash(&mut h);
    let ext = if target == Target::Cubin { "cubin" } else { "ptx" };
    let file = cache.map(|d| d.join(format!("kvad-{arch}-{:016x}.{ext}", h.finish())));
    if let Some(bytes) = file.as_ref().and_then(|f| std::fs::read(f).ok()) {
        match target {
            Target::Cubin if bytes.starts_with(b"\x7fELF") => return Ok((Ptx::from_binary(bytes), false)),
            Target::Ptx if bytes.windows(6).any(|w| w == b".entry") => {
                return Ok((Ptx::from_src(String::from_utf8_lossy(&bytes).into_owned()), false));
            }
            _ => {}
        }
    }
    // SAFETY: only tries to dlopen the library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(GpuError::NoLibrary { lib: "libnvrtc (CUDA's runtime compiler)" });
    }
    let (ptx, bytes) = match target {
        Target::Ptx => {
            let arch: &'static str = Box::leak(arch.into_boxed_str());
            let opts = CompileOptions { arch: Some(arch), options, ..Default::default() };
            let ptx =
                cudarc::nvrtc::compile_ptx_with_opts(src, opts).map_err(|e| GpuError::Compile(format!("{e:?}")))?;
            let text = ptx.to_src().into_bytes();
            (ptx, text)
        }
        Target::Cubin => {
            options.push(format!("--gpu-architecture={arch}"));
            let cubin = cubin(src, &options)?;
            (Ptx::from_binary(cubin.clone()), cubin)
        }
    };
    if let Some(f) = &file {
        // A cache that cannot be written only costs a compile next time.
        let _ = std::fs::create_dir_all(f.parent().unwrap_or(Path::new(".")));
        let tmp = f.with_extension("tmp");
        if std::fs::write(&tmp, &bytes).is_ok() {
            let _ = std::fs::rename(&tmp, f);
        }
    }
    Ok((ptx, true))
}

/// One NVRTC compile of `src` to a CUBIN (`options` naming a real architecture), its log in the error if it fails.
fn cubin(src: &str, options: &[String]) -> Result<Vec<u8>, GpuError> {
    use cudarc::nvrtc::{result, sys};
    let code = std::ffi::CString::new(src).map_err(|e| GpuError::Compile(format!("kernel source: {e}")))?;
    let prog = result::create_program(&code, None).map_err(|e| GpuError::Compile(format!("{e:?}")))?;
    // SAFETY: `prog` was created above and is destroyed once, below; the buffers are sized as NVRTC says.
    unsafe {
        let out = (|| {
            if let Err(e) = result::compile_program(prog, options) {
                let log = result::get_program_log(prog).unwrap_or_default();
                let log: Vec<u8> = log.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
                return Err(GpuError::Compile(format!("{e:?}: {}", String::from_utf8_lossy(&log))));
            }
            let mut size = 0usize;
            sys::nvrtcGetCUBINSize(prog, &mut size).result().map_err(|e| GpuError::Compile(format!("{e:?}")))?;
            let mut bin = vec![0u8; size];
            sys::nvrtcGetCUBIN(prog, bin.as_mut_ptr().cast())
                .result()
                .map_err(|e| GpuError::Compile(format!("{e:?}")))?;
            Ok(bin)
        })();
        let _ = result::destroy_program(prog);
        out
    }
}

/// Compile units of the split products (gemv_split.cu's `KVAD_GS_PART`: two input counts each).
const GS_PARTS: [&str; 4] = ["KVAD_GS_PART=0", "KVAD_GS_PART=1", "KVAD_GS_PART=2", "KVAD_GS_PART=3"];

/// The kernels as NVRTC compile units, each a source and the define that picks its share: the split products'
/// instances in four units (common.cuh and the gemv_split files alone), then every other kernel (all sources, no
/// split product). Side by side the units take about as long as the largest, where the whole source compiled as
/// one took several times that on one core; and a change to one file recompiles only the units that hold it.
pub(crate) fn units(all: &[&str], common: &str, gemv_split: &[&str]) -> Vec<(String, &'static str)> {
    let split = gemv_split.concat();
    let mut u: Vec<(String, &'static str)> = GS_PARTS.iter().map(|&d| (format!("{common}{split}"), d)).collect();
    u.push((all.concat(), "KVAD_GS_PART=-1"));
    u
}

/// The code of every unit ([`Target`]), compiled side by side (one thread each, each cached on its own), in the
/// units' order, and how many were compiled now (not found in the cache).
pub(crate) fn code_units(
    units: &[(String, &'static str)],
    cap: (i32, i32),
    cache: Option<&Path>,
    defines: &[&str],
    target: Target,
) -> Result<(Vec<Ptx>, usize), GpuError> {
    std::thread::scope(|s| {
        let jobs: Vec<_> = units
            .iter()
            .map(|(src, unit)| {
                s.spawn(move || {
                    let mut d = defines.to_vec();
                    d.push(unit);
                    code(src, cap, cache, &d, target)
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

/// The kernel variants the GPU's settings ask for, each a macro of common.cuh: a kernel trace
/// ([`super::Tuning::trace`]) compiles the trace records in (`KVAD_TRACE`; otherwise that code is not there at all).
pub(crate) fn defines(trace: bool) -> Vec<&'static str> {
    if trace {
        vec!["KVAD_TRACE"]
    } else {
        Vec::new()
    }
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
        let (first, n1) = code_units(&units, (9, 0), Some(&dir), &[], Target::Ptx).unwrap();
        let (again, n2) = code_units(&units, (9, 0), Some(&dir), &[], Target::Ptx).unwrap();
        let (other, n3) = code_units(&units, (9, 0), Some(&dir), &["KVAD_TRACE"], Target::Ptx).unwrap();
        // CUBINs: ELF images of the real architecture, cached beside the PTX as their own entries.
        let (_, n4) = code_units(&units, (9, 0), Some(&dir), &[], Target::Cubin).unwrap();
        let (_, n5) = code_units(&units, (9, 0), Some(&dir), &[], Target::Cubin).unwrap();
        let mut bins: Vec<Vec<u8>> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "cubin"))
            .map(|p| std::fs::read(p).unwrap())
            .collect();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!((n4, n5), (2, 0), "CUBINs compiled, then cached");
        bins.dedup();
        assert_eq!(bins.len(), 2, "a CUBIN a unit, each unit's define reaching its compile");
        assert!(bins.iter().all(|b| b.starts_with(b"\x7fELF")), "a CUBIN is an ELF image");
        assert_eq!((n1, n2, n3), (2, 0, 2), "compiled, then cached, then another variant compiled");
        let text = |p: &[Ptx]| p.iter().map(Ptx::to_src).collect::<Vec<_>>();
        assert_eq!(text(&first), text(&again), "the cached PTX is what was compiled");
        assert_eq!(text(&first), text(&other), "a define the source does not use changes no PTX");
        assert_ne!(first[0].to_src(), first[1].to_src(), "each unit's define reaches its compile");
    }
}
