//! Latent attention launches (`kernels/mla.cu`): DeepSeek's MLA with the up-projections absorbed, over a paged
//! cache of one f16 row a token (the normed latent and the rotated shared key). The model side (kvad-models'
//! `gpu/mla.rs`) runs the projections around them.

use super::ops::{cfg, i, Meta};
use super::{Gpu, GpuError};

/// Widest cached row the kernels take (`32 · MLA_QJ`): DeepSeek's 512 + 64.
pub const MLA_MAX_WIDTH: usize = 576;

/// Widest latent the kernels accumulate (`32 · MLA_OJ`).
pub const MLA_MAX_LATENT: usize = 512;

/// Splits of the keys a decode row's heads are spread over: the cache is one row a token for every head, so a
/// decode step's few (row, head) blocks would leave most of the GPU idle at long contexts; more blocks each fold a
/// range of keys, and `mla_attention_out` merges them. Prompt passes have blocks enough without.
pub fn mla_splits(heads: usize, decode: bool) -> usize {
    if decode {
        512usize.div_ceil(heads.max(1)).clamp(1, 64)
    } else {
        1
    }
}

/// One latent attention layer's shape and addresses for a pass.
#[derive(Debug, Clone, Copy)]
pub struct MlaArgs {
    /// `[rows][heads][nope + rope]` f32 queries (before RoPE).
    pub q: u64,
    /// `[rows][r + rope]` f32 latents and shared keys (before norm and RoPE).
    pub kv: u64,
    /// `[r]` f32 weight of the latent's RMSNorm.
    pub kv_norm: u64,
    /// `[heads][r][nope]` bf16: each head's key up-projection, transposed.
    pub k_b: u64,
    /// `[heads][v][r]` bf16: each head's value up-projection.
    pub v_b: u64,
    /// `[rope / 2]` f32 RoPE frequencies.
    pub inv_freq: u64,
    /// This layer's pages (`[pages][PAGE][r + rope]` f16).
    pub pages: u64,
    /// `[rows][heads][r + rope]` f32 queries in latent space (scratch).
    pub qf: u64,
    /// `[rows][heads][splits][r + 2]` f32 partial softmaxes (scratch).
    pub part: u64,
    /// `[rows][heads · v]` out.
    pub out: u64,
    /// Out as bf16 (for cuBLAS) rather than f32.
    pub out_bf16: bool,
    /// Rows' positions and page tables.
    pub meta: Meta,
    /// Rows.
    pub rows: usize,
    /// Query heads.
    pub heads: usize,
    /// `kv_lora_rank`.
    pub r: usize,
    /// `qk_nope_head_dim`.
    pub nope: usize,
    /// `qk_rope_head_dim`.
    pub rope: usize,
    /// `v_head_dim`.
    pub v: usize,
    /// Key splits ([`mla_splits`]).
    pub splits: usize,
    /// Softmax scale.
    pub scale: f32,
    /// YaRN's factor on cos and sin.
    pub mscale: f32,
    /// RoPE pairs adjacent values rather than the two halves.
    pub interleaved: bool,
    /// The latent's RMSNorm epsilon.
    pub eps: f32,
}

impl MlaArgs {
    /// Why the kernels cannot take this shape, if they cannot.
    pub fn unsupported(&self) -> Option<String> {
        if self.r + self.rope > MLA_MAX_WIDTH || self.r > MLA_MAX_LATENT {
            return Some(format!(
                "a latent of {} and a rope key of {}; the GPU's kernels take up to {MLA_MAX_LATENT} and {MLA_MAX_WIDTH} in all",
                self.r, self.rope
            ));
        }
        if !self.rope.is_multiple_of(2) || self.nope == 0 || self.r == 0 || self.splits == 0 {
            return Some(format!("latent attention of nope {}, rope {}, rank {}", self.nope, self.rope, self.r));
        }
        None
    }
}

impl Gpu {
    /// The pass's new latents into the pages, its queries into latent space, and attention: `a.out` then holds
    /// each row's heads' outputs, ready for `o_proj`.
    ///
    /// # Safety
    /// Every address must hold what [`MlaArgs`] says, and the page tables cover every new position.
    pub unsafe fn mla_attention(&self, a: &MlaArgs) -> Result<(), GpuError> {
        if let Some(why) = a.unsupported() {
            return Err(GpuError::Shape(why));
        }
        let rows = a.rows as u32;
        let (mp, nh, r, nope, rope, v, sp) =
            (i(a.meta.max_pages), i(a.heads), i(a.r), i(a.nope), i(a.rope), i(a.v), i(a.splits));
        let (il, ob) = (i32::from(a.interleaved), i32::from(a.out_bf16));
        let mut b = self.launch("mla_kv_post");
        b.arg(&a.kv).arg(&a.kv_norm).arg(&a.inv_freq).arg(&a.meta.row_pos).arg(&a.meta.row_seq).arg(&a.meta.tables);
        b.arg(&mp).arg(&a.pages).arg(&r).arg(&rope).arg(&a.eps).arg(&a.mscale).arg(&il);
        b.launch(cfg((rows, 1, 1), 128, 0))?;
        let mut b = self.launch("mla_q_absorb");
        b.arg(&a.q).arg(&a.k_b).arg(&a.inv_freq).arg(&a.meta.row_pos).arg(&a.qf).arg(&nh).arg(&r).arg(&nope);
        b.arg(&rope).arg(&a.mscale).arg(&il);
        b.launch(cfg((rows, nh as u32, a.r.div_ceil(64) as u32), 256, (a.nope * 4) as u32))?;
        let mut b = self.launch("mla_attention_part");
        b.arg(&a.qf).arg(&a.pages).arg(&a.meta.row_pos).arg(&a.meta.row_seq).arg(&a.meta.tables).arg(&mp);
        b.arg(&a.part).arg(&nh).arg(&r).arg(&rope).arg(&sp).arg(&a.scale);
        b.launch(cfg((rows, nh as u32, sp as u32), 128, 0))?;
        let mut b = self.launch("mla_attention_out");
        b.arg(&a.part).arg(&a.v_b).arg(&a.out).arg(&nh).arg(&r).arg(&v).arg(&sp).arg(&ob);
        b.launch(cfg((rows, nh as u32, 1), 256, (a.r * 4) as u32))?;
        Ok(())
    }
}
