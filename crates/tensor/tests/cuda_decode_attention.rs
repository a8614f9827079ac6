//! The decode attention with qkv_post folded in (`attention_decode.cu`) against the two kernels it replaces, run on
//! the device by `bash scripts/gpu/test.sh`. On a machine with no usable GPU the test says so and returns.

use half::f16;
use kvad_tensor::cpu::{QMatrix, QType};
use kvad_tensor::cuda::{Act, Attn, DevBuf, DevMatrix, GemvKernel, Meta, QkvPost, KV_PAGE};

mod common;
use common::{data, gpu};

/// Decode rows of five sequences (contexts of 1 to 300 keys over scattered pages) through `attention_decode` and
/// through `qkv_post` then the key-stream attention, for every head width and group size the kernel has a
/// shape for, with and without q/k norms, RoPE and a window: the same pages (bit for bit without the norms, whose
/// sums of squares add in another order; within one f16 step with them), outputs within 1e-5, and the 8-bit
/// activations it writes are those `quant_act8` makes of its output (a dp4a product over them gives the same bits).
/// Each with the keys in one block a query head and split over blocks (64, 16 and 1 keys a block — the last leaves
/// chunks empty — and the first two also under page tables padded to 64 pages, as a graph recorded for longer
/// sequences pads them: the same bits, since a row's split is its own; a row that takes one block gives the
/// unsplit kernel's bits).
#[test]
fn decode_attention_equals_qkv_post_then_attention() {
    let Some(g) = gpu() else { return };
    let ctx = [1usize, 17, 130, 300, 64];
    let rows = ctx.len();
    let max_pages = 300usize.div_ceil(KV_PAGE);
    let n_pages = rows * max_pages;
    let nkv = 2usize;
    for (hd, group) in [(32usize, 1usize), (32, 8), (64, 2), (64, 8), (128, 4), (128, 3), (128, 8), (256, 2)] {
        let nh = nkv * group;
        let width = (nh + 2 * nkv) * hd;
        let page_elems = nkv * KV_PAGE * hd;
        let bits16 = |x: Vec<f32>| x.into_iter().map(|v| f16::from_f32(v).to_bits()).collect::<Vec<u16>>();
        let k0 = bits16(data(n_pages * page_elems, 7 + hd as u64));
        let v0 = bits16(data(n_pages * page_elems, 9 + hd as u64));
        let qkv = DevBuf::from_slice(&g, &data(rows * width, 11 + (hd * group) as u64)).unwrap();
        let tables: Vec<Vec<i32>> =
            (0..rows).map(|s| (0..max_pages).rev().map(|i| (s + i * rows) as i32).collect()).collect();
        let mut meta: Vec<i32> = ctx.iter().map(|&c| c as i32 - 1).collect();
        meta.extend(0..rows as i32);
        meta.extend(tables.concat());
        let mb = DevBuf::from_slice(&g, &meta).unwrap();
        let m = Meta { row_pos: mb.ptr(), row_seq: mb.at(rows * 4), tables: mb.at(rows * 8), max_pages };
        let wide_pages = 64;
        let mut wide: Vec<i32> = meta[..2 * rows].to_vec();
        for t in &tables {
            wide.extend(t);
            wide.extend(std::iter::repeat_n(0, wide_pages - max_pages));
        }
        let wb = DevBuf::from_slice(&g, &wide).unwrap();
        let mw = Meta { row_pos: wb.ptr(), row_seq: wb.at(rows * 4), tables: wb.at(rows * 8), max_pages: wide_pages };
        let inv_freq: Vec<f32> = (0..hd / 2).map(|i| 10000f32.powf(-2.0 * i as f32 / hd as f32)).collect();
        let inv_freq = DevBuf::from_slice(&g, &inv_freq).unwrap();
        let (qn, kn) = (DevBuf::from_slice(&g, &data(hd, 13)).unwrap(), DevBuf::from_slice(&g, &data(hd, 17)).unwrap());
        let o =
            DevMatrix::upload(&g, &QMatrix::quantize(QType::Q8_0, 48, nh * hd, &data(48 * nh * hd, 19)).unwrap(), None)
                .unwrap();
        for (norms, rope, window) in [(false, true, 0usize), (true, true, 0), (false, false, 50), (true, true, 50)] {
            let what = format!("hd {hd}, group {group}, norms {norms}, rope {rope}, window {window}");
            let mut got = Vec::new();
            // (fused, most blocks a row, keys a block, padded tables): the reference first.
            let variants = [
                (false, 1, 64, false),
                (true, 1, 64, false),
                (true, 16, 64, false),
                (true, 16, 16, false),
                (true, 16, 16, true),
                (true, 16, 64, true),
                // One key a block: a row of 17 keys in 16 chunks of 2, the last seven empty.
                (true, 16, 1, false),
            ];
            for &(fused, splits, keys, padded) in &variants {
                let m = if padded { mw } else { m };
                let (kp, vp) = (DevBuf::from_slice(&g, &k0).unwrap(), DevBuf::from_slice(&g, &v0).unwrap());
                let q = DevBuf::zeros(&g, rows * nh * hd * 4).unwrap();
                let out = DevBuf::zeros(&g, rows * nh * hd * 4).unwrap();
                let post = QkvPost {
                    qkv: qkv.ptr(),
                    q_out: q.ptr(),
                    k_pages: kp.ptr(),
                    v_pages: vp.ptr(),
                    q_norm: if norms { qn.ptr() } else { 0 },
                    k_norm: if norms { kn.ptr() } else { 0 },
                    inv_freq: if rope { inv_freq.ptr() } else { 0 },
                    meta: m,
                    rows,
                    nh,
                    nkv,
                    hd,
                    eps: 1e-6,
                };
                let attn = Attn {
                    q: q.ptr(),
                    k_pages: kp.ptr(),
                    v_pages: vp.ptr(),
                    out: out.ptr(),
                    out_bf16: false,
                    meta: m,
                    rows,
                    nh,
                    nkv,
                    hd,
                    window,
                    scale: 1.0 / (hd as f32).sqrt(),
                    tiles: 0,
                    n_tiles: 0,
                };
                let y = DevBuf::zeros(&g, rows * 48 * 4).unwrap();
                // SAFETY: every buffer holds the shapes above; the tables cover every position; one row a sequence.
                let act8 = unsafe {
                    if fused {
                        g.attention_decode_split(&post, &attn, true, splits, keys).unwrap()
                    } else {
                        g.qkv_post(&post).unwrap();
                        g.attention(&attn).unwrap();
                        false
                    }
                };
                assert_eq!(act8, fused, "8-bit activations written, {what}");
                // The o product over the output: from the 8-bit form the kernel wrote, or quantised from f32 here.
                let x = if act8 { Act::F32Act8(out.ptr()) } else { Act::F32(out.ptr()) };
                // SAFETY: as above; o takes nh·hd inputs and gives 48 outputs a row.
                unsafe { g.gemv(GemvKernel::SplitDp4a, &o, x, rows, y.ptr(), 0, false, None) }.unwrap();
                got.push((
                    kp.read::<u16>(&g, k0.len()).unwrap(),
                    vp.read::<u16>(&g, v0.len()).unwrap(),
                    out.read::<f32>(&g, rows * nh * hd).unwrap(),
                    y.read::<f32>(&g, rows * 48).unwrap(),
                ));
            }
            // The splits under padded tables (at 64 keys a block, 5 blocks a row launched against 16): the bits
            // of the same splits under the pass's own.
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            for (narrow, padded) in [(&got[3], &got[4]), (&got[2], &got[5])] {
                assert_eq!(narrow.0, padded.0, "K pages under padded tables, {what}");
                assert_eq!(narrow.1, padded.1, "V pages under padded tables, {what}");
                assert_eq!(bits(&narrow.2), bits(&padded.2), "output under padded tables, {what}");
            }
            // Rows of at most 64 keys take one block at 64 keys a block: the unsplit kernel's bits.
            for (r, &c) in ctx.iter().enumerate() {
                let n = if window > 0 { c.min(window) } else { c };
                let span = r * nh * hd..(r + 1) * nh * hd;
                if n <= 64 {
                    assert_eq!(bits(&got[1].2[span.clone()]), bits(&got[2].2[span]), "row {r} of {n} keys, {what}");
                }
            }
            for (vi, b) in got.iter().enumerate().skip(1) {
                let (splits, keys) = (variants[vi].1, variants[vi].2);
                let what = format!("{what}, split over up to {splits} blocks of {keys} keys");
                let a = &got[0];
                assert_eq!(a.1, b.1, "V pages, {what}");
                for (i, (x, y)) in a.0.iter().zip(&b.0).enumerate() {
                    let step = (*x as i32 - *y as i32).abs();
                    assert!(step <= i32::from(norms), "K pages at {i}, {what}: {x:#06x} vs {y:#06x}");
                }
                let changed = a.0.iter().zip(&k0).filter(|(x, y)| x != y).count();
                assert!(changed > 0, "the new keys were written, {what}");
                for (i, (x, y)) in a.2.iter().zip(&b.2).enumerate() {
                    assert!(
                        (x - y).abs() <= 1e-5,
                        "output at row {} head {}, {what}: {x} vs {y}",
                        i / (nh * hd),
                        i / hd % nh
                    );
                }
                // Same output bits make the same 8-bit terms: compare the products where the outputs agree exactly.
                let y_ref = {
                    let out = DevBuf::from_slice(&g, &b.2).unwrap();
                    let y = DevBuf::zeros(&g, rows * 48 * 4).unwrap();
                    // SAFETY: as above.
                    unsafe { g.gemv(GemvKernel::SplitDp4a, &o, Act::F32(out.ptr()), rows, y.ptr(), 0, false, None) }
                        .unwrap();
                    y.read::<f32>(&g, rows * 48).unwrap()
                };
                assert_eq!(bits(&y_ref), bits(&b.3), "o product over the kernel's 8-bit activations, {what}");
            }
        }
    }
}
