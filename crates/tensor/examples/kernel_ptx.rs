//! Writes the kernels' PTX for a compute capability as NVRTC makes it at run time (no GPU needed), for
//! `scripts/gpu/ptxas.sh` to report every kernel's registers and spills: a kernel's occupancy, and whether a change
//! made it spill, are then known before the device is asked.
//!     cargo run --release -p kvad-tensor --example kernel_ptx -- OUT.ptx [MAJOR MINOR]     (default 9 0)

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let out = args.next().ok_or("usage: kernel_ptx OUT.ptx [MAJOR MINOR]")?;
    let major: i32 = args.next().map_or(Ok(9), |v| v.parse())?;
    let minor: i32 = args.next().map_or(Ok(0), |v| v.parse())?;
    let ptx = kvad_tensor::cuda::compile_kernels((major, minor), &[])?;
    std::fs::write(&out, ptx)?;
    Ok(())
}
