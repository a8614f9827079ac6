//! What a model's per-sequence state is made of, layer by layer, before any sequence exists: what memory admission
//! charges a context for (the model is asked, not a formula), and what [`super::SeqState::new`] builds.

/// What a cache stores keys, values or latents as. cpu-f32 keeps f32 (the reference's arithmetic); cpu-q8/q4 and
/// the GPU keep f16, which halves what decode attention reads a token and what a context is charged, at a rounding
/// far below their weights' own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvDtype {
    /// 4 bytes a value.
    #[default]
    F32,
    /// 2 bytes a value (IEEE half, rounded to nearest even).
    F16,
}

impl KvDtype {
    /// Bytes one element takes.
    pub fn bytes(self) -> usize {
        match self {
            KvDtype::F32 => 4,
            KvDtype::F16 => 2,
        }
    }
}

/// One layer's state, as a shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerSpec {
    /// Keys and values of every token (`kv_dim` each): grows with the sequence, cut back anywhere.
    Kv {
        /// Key (and value) width: KV heads × head width.
        kv_dim: usize,
        /// Element type.
        dtype: KvDtype,
    },
    /// Keys and values of the last `window` tokens only (sliding-window attention): grows to the window, then stays.
    Window {
        /// Key (and value) width.
        kv_dim: usize,
        /// Tokens a query sees, itself included.
        window: usize,
        /// Element type.
        dtype: KvDtype,
    },
    /// Latent attention (DeepSeek's MLA): per token a compressed vector and a shared RoPE key.
    Latent {
        /// Width of the compressed key/value latent (`kv_lora_rank`).
        latent_dim: usize,
        /// Width of the RoPE key (`qk_rope_head_dim`).
        rope_dim: usize,
        /// Element type.
        dtype: KvDtype,
    },
    /// A recurrent layer (gated delta net): a fixed-size state plus the short convolution's tail, the same size
    /// whatever the length; it cannot be cut back except to a snapshot.
    Recurrent {
        /// f32 elements of the recurrent state (heads × key width × value width).
        state: usize,
        /// f32 elements of the convolution's tail (channels × (kernel − 1)).
        conv: usize,
    },
}

impl LayerSpec {
    /// Bytes each token adds (while it grows: a window stops growing at its width).
    pub fn bytes_per_token(&self) -> usize {
        match *self {
            LayerSpec::Kv { kv_dim, dtype } | LayerSpec::Window { kv_dim, dtype, .. } => 2 * kv_dim * dtype.bytes(),
            LayerSpec::Latent { latent_dim, rope_dim, dtype } => (latent_dim + rope_dim) * dtype.bytes(),
            LayerSpec::Recurrent { .. } => 0,
        }
    }

    /// Bytes held whatever the length (snapshots not included: each costs this again).
    pub fn fixed_bytes(&self) -> usize {
        match *self {
            LayerSpec::Recurrent { state, conv } => (state + conv) * 4,
            _ => 0,
        }
    }

    /// Bytes a sequence of `tokens` holds in this layer between passes. A window lets go of old rows once it holds
    /// twice its width (so the rows move once every `window` tokens, not at every token): it is charged for that. A
    /// recurrent layer is charged its state and the snapshots a conversation keeps
    /// ([`crate::SeqState::snapshot_spaced`]: one a [`SNAPSHOT_SPACING`] tokens, and the latest prompt's end).
    pub fn bytes_for(&self, tokens: usize) -> usize {
        let held = match *self {
            LayerSpec::Window { window, .. } => tokens.min(2 * window),
            _ => tokens,
        };
        let copies = match self {
            LayerSpec::Recurrent { .. } => 2 + tokens / SNAPSHOT_SPACING,
            _ => 1,
        };
        copies * self.fixed_bytes() + held * self.bytes_per_token()
    }
}

/// Tokens between the snapshots a conversation keeps of a recurrent state: each costs the whole state again, so
/// they are spaced (2,048 tokens of a Qwen3-Next-80B prompt add about as much K/V to its attention layers as one
/// snapshot of its delta-net layers holds).
pub const SNAPSHOT_SPACING: usize = 2048;

/// Every layer's state, in layer order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateSpec {
    /// One entry per layer.
    pub layers: Vec<LayerSpec>,
}

impl StateSpec {
    /// `n` layers of keys and values `kv_dim` wide: every dense transformer of today.
    pub fn kv(n: usize, kv_dim: usize, dtype: KvDtype) -> Self {
        StateSpec { layers: vec![LayerSpec::Kv { kv_dim, dtype }; n] }
    }

    /// Bytes each token adds across the layers (below every window).
    pub fn bytes_per_token(&self) -> usize {
        self.layers.iter().map(LayerSpec::bytes_per_token).sum()
    }

    /// Bytes held whatever the length.
    pub fn fixed_bytes(&self) -> usize {
        self.layers.iter().map(LayerSpec::fixed_bytes).sum()
    }

    /// Bytes a sequence of `tokens` holds: what a context of that many tokens is charged.
    pub fn bytes_for(&self, tokens: usize) -> usize {
        self.layers.iter().map(|l| l.bytes_for(tokens)).sum()
    }

    /// Whether some layer can only be cut back to a snapshot (a recurrent layer).
    pub fn has_recurrent(&self) -> bool {
        self.layers.iter().any(|l| matches!(l, LayerSpec::Recurrent { .. }))
    }
}
