//! Writes the kernels' PTX for a compute capability as NVRTC makes it at run time (no GPU needed), for
//! `scripts/gpu/ptxas.sh` to report every kernel's registers and spills: a kernel's occupancy, and whether a change
//! made it spill, are then known before the device is asked.
//! One file a compile unit, `DIR/unit-N.ptx`; DEFINEs compile a measuring variant (`KVAD_TRACE`, say):
//!     cargo run --release -p kvad-tensor --example kernel_ptx -- DIR [MAJOR MINOR [DEFINE…]]     (default 9 0)

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().ok_or("usage: kernel_ptx DIR [MAJOR MINOR [DEFINE...]]")?;
    let major: i32 = args.next().map_or(Ok(9), |v| v.parse())?;
    let minor: i32 = args.next().map_or(Ok(0), |v| v.parse())?;
    let defines: Vec<String> = args.collect();
    let defines: Vec<&str> = defines.iter().map(String::as_str).collect();
    for (n, ptx) in kvad_tensor::cuda::compile_kernels((major, minor), &defines)?.iter().enumerate() {
        std::fs::write(std::path::Path::new(&dir).join(format!("unit-{n}.ptx")), ptx)?;
    }
    Ok(())
}
