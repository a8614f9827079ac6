//! What a one-stream decode pass asks L2 for while its latency-bound kernels run (kvad_tensor's `L2Next`): the
//! next products' first weights, so HBM is busy while the attention and SwiGLU wait on their round trips.

use super::decoder::Layer;
use kvad_tensor::cuda::L2Next;

/// What a decode pass's latency-bound kernels ask L2 for ([`L2Next`]), while HBM would otherwise idle: during the
/// attention, the o product's weights whole (`o`) and the first `up` bytes of the gate/up product's; during SwiGLU,
/// the first `down` bytes of the down product's. `KVAD_GPU_L2_NEXT=o,up,down[,lines]` (o 0 or 1, up and down in MB,
/// lines 1: a line at a time by the load units); none until measured on the device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct L2Plan {
    o: bool,
    up: usize,
    down: usize,
    /// Asked a line at a time by the load units rather than by the bulk copy engine.
    lines: bool,
}

impl L2Plan {
    pub(crate) fn from_env() -> L2Plan {
        static P: std::sync::OnceLock<L2Plan> = std::sync::OnceLock::new();
        *P.get_or_init(|| std::env::var("KVAD_GPU_L2_NEXT").ok().map_or(L2Plan::default(), |v| L2Plan::parse(&v)))
    }

    /// "o,up,down"; anything else asks for nothing.
    fn parse(v: &str) -> L2Plan {
        let n: Vec<usize> = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
        match n[..] {
            [o, up, down] => L2Plan { o: o != 0, up: up << 20, down: down << 20, lines: false },
            [o, up, down, lines] => L2Plan { o: o != 0, up: up << 20, down: down << 20, lines: lines != 0 },
            _ => L2Plan::default(),
        }
    }

    /// What the decode attention before `l`'s o product asks for.
    pub(crate) fn attention(self, l: &Layer) -> L2Next {
        let n = if self.o { L2Next::none().with_rows_of(&l.o, usize::MAX) } else { L2Next::none() };
        self.how(n.with_rows_of(&l.up, self.up))
    }

    /// What SwiGLU before `l`'s down product asks for.
    pub(crate) fn swiglu(self, l: &Layer) -> L2Next {
        self.how(L2Next::none().with_rows_of(&l.down, self.down))
    }

    fn how(self, n: L2Next) -> L2Next {
        if self.lines {
            n.by_lines()
        } else {
            n
        }
    }
}

#[cfg(test)]
mod tests {
    use super::L2Plan;

    #[test]
    fn the_plan_reads_o_up_and_down_or_asks_for_nothing() {
        assert_eq!(L2Plan::parse("1,16,8"), L2Plan { o: true, up: 16 << 20, down: 8 << 20, lines: false });
        assert_eq!(L2Plan::parse("0, 32, 0"), L2Plan { o: false, up: 32 << 20, down: 0, lines: false });
        assert_eq!(L2Plan::parse("1,0,0,1"), L2Plan { o: true, up: 0, down: 0, lines: true });
        assert_eq!(L2Plan::parse("1,16"), L2Plan::default(), "two fields");
        assert_eq!(L2Plan::parse("yes"), L2Plan::default());
        assert_eq!(L2Plan::parse(""), L2Plan::default());
    }
}
