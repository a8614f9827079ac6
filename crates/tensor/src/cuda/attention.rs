//! Attention launches: prompt rows on the tensor cores (`flash.cu`), decode rows by key streams (`attention.cu`,
//! passes of up to 8 rows) and by chunks of keys through shared memory (`attention_split.cu`, and
//! `attention_chunks.cu` at head width 256, passes of more rows). Which kernel a pass runs depends on its shape and
//! row count alone, so a row's bits never depend on the other rows of its pass.

use super::ops::{cfg, i, Meta, QkvPost, ACT8_MAX_K, GEMV_MAX_ROWS, KV_PAGE};
use super::{Gpu, GpuError};

/// Addresses and sizes for [`Gpu::attention`].
#[derive(Debug, Clone, Copy)]
pub struct Attn {
    /// `[rows][nh·hd]` f32 queries after RoPE.
    pub q: u64,
    /// This layer's K and V pages.
    pub k_pages: u64,
    /// See `k_pages`.
    pub v_pages: u64,
    /// `[rows][nh·hd]` out.
    pub out: u64,
    /// Out as bf16 (for cuBLAS) rather than f32.
    pub out_bf16: bool,
    /// Rows' positions and page tables.
    pub meta: Meta,
    /// Rows.
    pub rows: usize,
    /// Heads.
    pub nh: usize,
    /// KV heads.
    pub nkv: usize,
    /// Head width.
    pub hd: usize,
    /// Sliding window (0: none).
    pub window: usize,
    /// Score scale, 1/sqrt(hd).
    pub scale: f32,
    /// `[n][2]` i32 (first row, rows) tiles of up to 64 consecutive rows of one sequence, for the tensor-core
    /// kernel (0: run the key-stream kernels, as decode rows do).
    pub tiles: u64,
    /// Tiles at `tiles`.
    pub n_tiles: usize,
}

/// Rows a tile of the tensor-core attention kernel takes (the host cuts each sequence's rows into such tiles).
pub const FLASH_TILE: usize = 64;

/// Whether the tensor-core attention kernel takes this head width.
pub fn flash_takes(hd: usize) -> bool {
    matches!(hd, 16 | 32 | 64 | 128)
}

impl Gpu {
    /// Causal attention of the rows over their sequences' pages.
    ///
    /// # Safety
    /// Every address must hold what [`Attn`] says.
    pub unsafe fn attention(&self, a: &Attn) -> Result<(), GpuError> {
        let g = a.nh / a.nkv.max(1);
        if a.tiles != 0 && a.n_tiles > 0 && flash_takes(a.hd) && a.nkv > 0 && a.nh.is_multiple_of(a.nkv) {
            let (mp, nh, nkv, win, ob) = (i(a.meta.max_pages), i(a.nh), i(a.nkv), i(a.window), i32::from(a.out_bf16));
            let mut b = self.launch(&format!("flash_attention_{}", a.hd));
            b.arg(&a.q).arg(&a.k_pages).arg(&a.v_pages).arg(&a.out).arg(&a.meta.row_pos).arg(&a.meta.row_seq);
            b.arg(&a.meta.tables).arg(&mp).arg(&a.tiles).arg(&nh).arg(&nkv).arg(&win).arg(&a.scale).arg(&ob);
            b.launch(cfg((a.n_tiles as u32, a.nh as u32, 1), 128, 0))?;
            return Ok(());
        }
        let d = a.hd / 32;
        if a.nkv > 0 && a.nh.is_multiple_of(a.nkv) && g <= 8 && a.hd.is_multiple_of(32) && matches!(d, 1 | 2 | 4 | 8) {
            let (mp, nh, nkv, win, ob) = (i(a.meta.max_pages), i(a.nh), i(a.nkv), i(a.window), i32::from(a.out_bf16));
            if a.rows > GEMV_MAX_ROWS {
                return self.attention_in_chunks(a);
            }
            let w = attention_warps(d, g);
            let f = match w {
                8 => self.func(&format!("attention_keys_{d}")),
                _ => self.func(&format!("attention_keys_{d}_w{w}_g{}", g.next_power_of_two())),
            };
            let smem = (w * g * a.hd * 4) as u32;
            if smem > 48 * 1024 {
                use cudarc::driver::sys::CUfunction_attribute as A;
                f.set_attribute(A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)?;
            }
            let mut b = super::launch::Launch::new(self, f);
            b.arg(&a.q).arg(&a.k_pages).arg(&a.v_pages).arg(&a.out).arg(&a.meta.row_pos).arg(&a.meta.row_seq);
            b.arg(&a.meta.tables).arg(&mp).arg(&nh).arg(&nkv).arg(&win).arg(&a.scale).arg(&ob);
            b.launch(cfg((a.rows as u32, a.nkv as u32, 1), (w * 32) as u32, smem))?;
            return Ok(());
        }
        // Other shapes: the tiled kernel.
        if a.nkv == 0 || !a.nh.is_multiple_of(a.nkv) || g * a.hd > 16 * 128 {
            return Err(GpuError::Shape(format!("attention over {} heads, {} KV heads of {}", a.nh, a.nkv, a.hd)));
        }
        let floats = g * a.hd + 32 * (a.hd + 1) + 32 * a.hd + g * 32 + 3 * g;
        let smem = (floats * 4) as u32;
        let f = self.func("attention");
        if smem > 48 * 1024 {
            use cudarc::driver::sys::CUfunction_attribute as A;
            f.set_attribute(A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)?;
        }
        let (mp, nh, nkv, hd, win, ob) =
            (i(a.meta.max_pages), i(a.nh), i(a.nkv), i(a.hd), i(a.window), i32::from(a.out_bf16));
        let mut b = super::launch::Launch::new(self, f);
        b.arg(&a.q).arg(&a.k_pages).arg(&a.v_pages).arg(&a.out).arg(&a.meta.row_pos).arg(&a.meta.row_seq);
        b.arg(&a.meta.tables).arg(&mp).arg(&nh).arg(&nkv).arg(&hd).arg(&win).arg(&a.scale).arg(&ob);
        b.launch(cfg((a.rows as u32, a.nkv as u32, 1), 128, smem))?;
        Ok(())
    }

    /// Decode attention by chunks of keys through shared memory, the next ones' copy in flight, which
    /// [`Gpu::attention`] runs for passes of more than [`GEMV_MAX_ROWS`] rows (there the key-stream kernels leave
    /// each warp waiting on one key after another); public so that tests can run it on passes of any size. Head
    /// widths 32·D (D = 1, 2, 4, 8) and up to 8 query heads per KV head, as the key-stream kernels: up to 128 the
    /// keys split over a block's 4 warps on the tensor cores (`attention_split.cu`: no block-wide step per chunk),
    /// 256 in chunks of 32 by the whole block on the CUDA cores (`attention_chunks.cu`). A row's bits depend only on
    /// its own block, never on the pass's other rows.
    ///
    /// # Safety
    /// Every address must hold what [`Attn`] says.
    pub unsafe fn attention_in_chunks(&self, a: &Attn) -> Result<(), GpuError> {
        let g = a.nh / a.nkv.max(1);
        if a.nkv == 0 || !a.nh.is_multiple_of(a.nkv) || g > 8 || !matches!(a.hd, 32 | 64 | 128 | 256) {
            return Err(GpuError::Shape(format!(
                "chunked attention over {} heads, {} KV heads of {}",
                a.nh, a.nkv, a.hd
            )));
        }
        let gm = g.next_power_of_two();
        let (f, smem, threads) = if a.hd <= 128 {
            (self.func(&format!("attention_split_{}", a.hd)), attention_split_smem(a.hd), 128)
        } else {
            (self.func(&format!("attention_chunks_{}_g{gm}", a.hd)), attention_chunks_smem(a.hd, gm), 256)
        };
        let smem = smem as u32;
        if smem > 48 * 1024 {
            use cudarc::driver::sys::CUfunction_attribute as A;
            f.set_attribute(A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)?;
        }
        let (mp, nh, nkv, win, ob) = (i(a.meta.max_pages), i(a.nh), i(a.nkv), i(a.window), i32::from(a.out_bf16));
        let mut b = super::launch::Launch::new(self, f);
        b.arg(&a.q).arg(&a.k_pages).arg(&a.v_pages).arg(&a.out).arg(&a.meta.row_pos).arg(&a.meta.row_seq);
        b.arg(&a.meta.tables).arg(&mp).arg(&nh).arg(&nkv).arg(&win).arg(&a.scale).arg(&ob);
        b.launch(cfg((a.rows as u32, a.nkv as u32, 1), threads, smem))?;
        Ok(())
    }
}

impl Gpu {
    /// The attention of a decode pass whose rows are each the next token of a different sequence, with
    /// [`Gpu::qkv_post`] folded in (`attention_decode.cu`): q/k norm and RoPE of the raw q/k/v rows at `p.qkv`, the
    /// new keys and values into the pages, attention into `a.out` (f32; `a.q`, `a.out_bf16` and the tiles are not
    /// used). With `act8` the output is also written as the dp4a products' 8-bit activations, for the o product to
    /// take as [`super::Act::F32Act8`]. Shapes the kernel does not take (more than 8 rows or query heads per KV head,
    /// head widths other than 32·D for D = 1, 2, 4, 8) run `qkv_post` and [`Gpu::attention`] instead. Returns
    /// whether the 8-bit activations were written.
    ///
    /// # Safety
    /// Every address must hold what [`QkvPost`] and [`Attn`] say; no two rows may share a sequence (a row would
    /// not see the key another block writes).
    pub unsafe fn attention_decode(&self, p: &QkvPost, a: &Attn, act8: bool) -> Result<bool, GpuError> {
        self.decode_launch(p, a, act8, None, SPLIT_KEYS)
    }

    /// Most blocks a row's keys may take so that a one-row pass of kernel `k` fits the GPU in one wave of blocks
    /// ([`one_wave_splits`]): from the kernel's occupancy at its block size and shared memory, and the model's
    /// shape only — not the pass's rows — so a row's bits stay the same alone and in a pass.
    fn wave_splits(&self, k: &DecodeKernel, nkv: usize) -> Result<usize, GpuError> {
        let resident = k.f.occupancy_max_active_blocks_per_multiprocessor(k.threads, k.smem as usize, None)?;
        Ok(one_wave_splits(self.info.sms.max(1) as usize, resident as usize, nkv * k.parts))
    }

    /// The decode attention kernel for `p`'s shape (None: a shape it does not take), with its dynamic shared
    /// memory allowed where it passes the default 48 KB.
    fn decode_kernel(&self, p: &QkvPost) -> Result<Option<DecodeKernel<'_>>, GpuError> {
        let g = p.nh / p.nkv.max(1);
        let d = p.hd / 32;
        let takes = p.rows <= GEMV_MAX_ROWS
            && p.nkv > 0
            && p.nh.is_multiple_of(p.nkv)
            && g <= 8
            && p.hd.is_multiple_of(32)
            && matches!(d, 1 | 2 | 4 | 8);
        if !takes {
            return Ok(None);
        }
        // Query heads a block: one (the group over that many blocks; DECODE_HEADS).
        let gm = DECODE_HEADS;
        let w = decode_warps(d, gm);
        let f = self.func(&format!("attention_decode_{d}_g{gm}"));
        let smem = (w * g.min(gm) * p.hd * 4) as u32;
        if smem > 48 * 1024 {
            use cudarc::driver::sys::CUfunction_attribute as A;
            f.set_attribute(A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)?;
        }
        Ok(Some(DecodeKernel { f, parts: g.div_ceil(gm), threads: (w * 32) as u32, smem }))
    }

    /// [`Gpu::attention_decode`] with a row of n keys split over min(`max_splits`, ⌈n / `keys`⌉) blocks of
    /// ⌈n / that⌉ keys (`max_splits` 1: one block a query head, the kernel before the split), so tests can run each;
    /// `decode_splits` says how many a pass launches.
    ///
    /// # Safety
    /// As [`Gpu::attention_decode`].
    pub unsafe fn attention_decode_split(
        &self,
        p: &QkvPost,
        a: &Attn,
        act8: bool,
        max_splits: usize,
        keys: usize,
    ) -> Result<bool, GpuError> {
        self.decode_launch(p, a, act8, Some(max_splits), keys)
    }

    /// [`Gpu::attention_decode_split`], or with `max_splits` None the default: as many as one wave holds
    /// ([`Gpu::wave_splits`]).
    unsafe fn decode_launch(
        &self,
        p: &QkvPost,
        a: &Attn,
        act8: bool,
        max_splits: Option<usize>,
        keys: usize,
    ) -> Result<bool, GpuError> {
        let Some(k) = self.decode_kernel(p)? else {
            self.qkv_post(p)?;
            self.attention(a)?;
            return Ok(false);
        };
        let max_splits = match max_splits {
            Some(m) => m,
            None => self.wave_splits(&k, p.nkv)?,
        };
        let DecodeKernel { f, parts, threads, smem } = k;
        let act8 = act8 && (p.nh * p.hd) <= ACT8_MAX_K;
        let (oq, oq2, ods) = if act8 { self.act8_planes() } else { (0, 0, 0) };
        let (mp, nh, nkv, win) = (i(p.meta.max_pages), i(p.nh), i(p.nkv), i(a.window));
        let keys = keys.clamp(1, 1 << 20);
        let splits = decode_splits(max_splits, keys, p.meta.max_pages, p.nh, p.hd);
        let (sp, kpb) = (i(splits), i(keys));
        let (part_acc, part_ml, counters) = self.att_split_planes();
        let mut b = super::launch::Launch::new(self, f);
        b.arg(&p.qkv).arg(&p.k_pages).arg(&p.v_pages).arg(&a.out).arg(&p.q_norm).arg(&p.k_norm).arg(&p.inv_freq);
        b.arg(&p.meta.row_pos).arg(&p.meta.row_seq).arg(&p.meta.tables).arg(&mp).arg(&nh).arg(&nkv).arg(&win);
        b.arg(&a.scale).arg(&p.eps).arg(&oq).arg(&oq2).arg(&ods);
        b.arg(&sp).arg(&kpb).arg(&part_acc).arg(&part_ml).arg(&counters);
        b.launch(cfg(((p.rows * splits) as u32, p.nkv as u32, parts as u32), threads, smem))?;
        Ok(act8)
    }

    /// The split decode attention's scratch: partial numerators, (maximum, denominator) pairs, counters.
    fn att_split_planes(&self) -> (u64, u64, u64) {
        let acc = GEMV_MAX_ROWS * ATT_SPLIT_MAX * ATT_SPLIT_MAX_Q * 4;
        let ml = GEMV_MAX_ROWS * ATT_SPLIT_MAX * ATT_SPLIT_MAX_HEADS * 8;
        (self.att_split.ptr(), self.att_split.at(acc), self.att_split.at(acc + ml))
    }
}

/// Most blocks the decode attention splits a row's keys over.
pub(crate) const ATT_SPLIT_MAX: usize = 16;
/// Largest query width (heads × head width) and head count the split's scratch holds; wider shapes run unsplit.
pub(crate) const ATT_SPLIT_MAX_Q: usize = 16384;
/// See [`ATT_SPLIT_MAX_Q`].
pub(crate) const ATT_SPLIT_MAX_HEADS: usize = 256;
/// Bytes of [`Gpu`]'s split scratch (zeroed at open: the counters start and end at zero).
pub(crate) const ATT_SPLIT_BYTES: usize =
    GEMV_MAX_ROWS * ATT_SPLIT_MAX * (ATT_SPLIT_MAX_Q * 4 + ATT_SPLIT_MAX_HEADS * 8)
        + GEMV_MAX_ROWS * ATT_SPLIT_MAX_HEADS * 4;

/// Blocks a decode pass launches per row for its keys: enough for a row of the page tables' full width at
/// `keys` a block, at most `max_splits` (and 1 for shapes past the scratch). The kernel takes
/// ⌈n / keys⌉ of them for a row of n keys (capped alike), a count of the row's own, so a row's bits do not depend on
/// the pass's width. A pass of one row of the 8B shape launches 32 blocks a layer unsplit, on 32 of the H200's 132
/// SMs, each walking every key of its head: more blocks a row spread the keys over more SMs.
fn decode_splits(max_splits: usize, keys: usize, max_pages: usize, nh: usize, hd: usize) -> usize {
    if nh * hd > ATT_SPLIT_MAX_Q || nh > ATT_SPLIT_MAX_HEADS {
        return 1;
    }
    (max_pages * KV_PAGE).div_ceil(keys).clamp(1, max_splits.clamp(1, ATT_SPLIT_MAX))
}

/// The decode attention kernel a shape runs, as [`Gpu::attention_decode_split`] launches it.
struct DecodeKernel<'a> {
    f: &'a cudarc::driver::CudaFunction,
    /// Blocks a KV head's group of query heads is split over.
    parts: usize,
    threads: u32,
    smem: u32,
}

/// Most blocks a row's keys may be split over so that a pass of one row fills the GPU in one wave: `sms` × the
/// kernel's `resident` blocks an SM, over the `row_blocks` one row launches unsplit (at least 1, at most
/// [`ATT_SPLIT_MAX`]). One block past a wave leaves the whole pass waiting on a second, which costs more than the
/// split gains (docs/performance-gpu.md).
fn one_wave_splits(sms: usize, resident: usize, row_blocks: usize) -> usize {
    (sms * resident / row_blocks.max(1)).clamp(1, ATT_SPLIT_MAX)
}

/// Keys per block that earn a row another block (until [`ATT_SPLIT_MAX`]): 64, a warp's four keys for each of 16
/// warps, one step of its key loop.
const SPLIT_KEYS: usize = 64;

/// Query heads a block of the decode attention takes (the kernel instance's GM): one, a KV head's group of `g`
/// split over `g` blocks — more SMs busy (32 blocks rather than 8 for one row of the Llama-3-8B shape), each block's
/// key loop a shorter chain (one score to sum across the warp and one head to update per key), every block reading
/// its KV head's keys (the same bytes, from L2 after the first). Measured faster at every backend than a KV head's
/// whole group a block (docs/performance-gpu.md).
const DECODE_HEADS: usize = 1;

/// Warps a block of `attention_decode_{d}_g{gm}` has: as many as a thread's registers allow for the accumulators,
/// queries and two groups of 4 keys' K and V rows, 32 down to 8 (`AD_WARPS` in attention_decode.cu, which this
/// must equal).
fn decode_warps(d: usize, gm: usize) -> usize {
    let regs = 2 * gm * d + 2 * gm + 4 * 4 * (d / 2).max(1) + 2 * d + 30;
    if regs <= 64 {
        32
    } else if regs <= 128 {
        16
    } else {
        8
    }
}

/// Warps per block of the key-stream decode attention for head width `32·d` and `g` query heads per KV head, in
/// passes of up to [`GEMV_MAX_ROWS`] rows: 32 where the accumulators fit in 64 registers a thread, 16 where they
/// fit in 128, else 8 (the first kernel). A pass of few rows launches few blocks (rows × KV heads), each warp
/// walking its keys in turn, so more warps take fewer keys each. Passes of more rows run a chunk kernel
/// ([`Gpu::attention_in_chunks`]). It depends on the shape and on the rows being at most 8, so a row's result is
/// the same alone and in a batch of up to 8.
fn attention_warps(d: usize, g: usize) -> usize {
    let gm = g.next_power_of_two();
    if gm * d <= 16 {
        32
    } else if gm * d <= 32 {
        16
    } else {
        8
    }
}

/// Shared memory of `attention_chunks_{hd}_g{gm}`, as the kernel lays it out (`AcShape` there): two chunks of K
/// (rows padded where 4 lanes share a key) and V in f16, the group's queries and the chunk's scores in f32.
fn attention_chunks_smem(hd: usize, gm: usize) -> usize {
    let kc = if hd <= 128 { 64 } else { 32 };
    let ldk = if 256 / kc == 4 && (hd / 2).is_multiple_of(32) { hd + 32 } else { hd };
    2 * kc * ldk * 2 + 2 * kc * hd * 2 + gm * hd * 4 + gm * kc * 4 + 2 * gm * 4
}

/// Shared memory of `attention_split_{hd}`: each of its 4 warps' two stages of 16 keys' K and V rows (padded by 8
/// halves); the merge at the end reuses it.
fn attention_split_smem(hd: usize) -> usize {
    4 * 2 * 2 * 16 * (hd + 8) * 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_splits_to_fill_one_wave_and_no_more() {
        // The H200 and the 8B shape: 132 SMs, one block an SM, 32 blocks a row.
        assert_eq!(one_wave_splits(132, 1, 32), 4);
        assert_eq!(one_wave_splits(132, 2, 32), 8);
        // Rows that fill the GPU unsplit stay unsplit; a small shape stops at the scratch's most.
        assert_eq!(one_wave_splits(132, 1, 200), 1);
        assert_eq!(one_wave_splits(132, 0, 32), 1);
        assert_eq!(one_wave_splits(132, 4, 2), ATT_SPLIT_MAX);
        assert_eq!(one_wave_splits(132, 1, 0), ATT_SPLIT_MAX);
    }

    #[test]
    fn the_kernel_merges_as_many_chunks_as_the_host_launches() {
        let src = include_str!("kernels/attention_decode.cu");
        assert!(
            src.contains(&format!("#define AD_SPLIT_MAX {ATT_SPLIT_MAX}\n")),
            "AD_SPLIT_MAX is not {ATT_SPLIT_MAX}"
        );
    }
}
