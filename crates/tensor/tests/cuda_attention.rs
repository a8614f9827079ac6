//! The attention kernels against attention computed here in f64 from the same f16 keys and values: prompt rows
//! through both prompt kernels, decode rows through every key-stream and chunk kernel. Run on the device by `bash
//! scripts/gpu/test.sh`; on a machine with no usable GPU each test says so and returns.

mod common;
use common::{data, gpu};
use half::f16;
use kvad_tensor::cuda::{DevBuf, KV_PAGE};

/// Two sequences' prompt rows (one starting mid-sequence, over scattered pages) through both attention kernels,
/// against attention computed here in f64 from the same f16 keys and values: the key-stream kernel (f32) within
/// 1e-4, the tensor-core kernel (f16 queries and probabilities, f32 sums) within 4e-3; with and without a window,
/// for every head width the tensor-core kernel takes.
#[test]
fn both_attention_kernels_equal_the_reference_over_pages() {
    use half::f16;
    use kvad_tensor::cuda::{Attn, Meta, FLASH_TILE, KV_PAGE};
    let Some(g) = gpu() else { return };
    let (nh, nkv) = (8usize, 2usize);
    // (first position, rows) per sequence: 100 rows after 20 cached keys (two tiles), 37 rows from the start.
    let seqs = [(20usize, 100usize), (0, 37)];
    let rows: usize = seqs.iter().map(|s| s.1).sum();
    let max_pages = 8;
    let n_pages = 16;
    for hd in [16usize, 64, 128] {
        for window in [0usize, 50] {
            let page_elems = nkv * KV_PAGE * hd;
            let k: Vec<f16> = data(n_pages * page_elems, 50 + hd as u64).into_iter().map(f16::from_f32).collect();
            let v: Vec<f16> = data(n_pages * page_elems, 60 + hd as u64).into_iter().map(f16::from_f32).collect();
            let q = data(rows * nh * hd, 70 + hd as u64);
            // Sequence 0 on pages 15, 13, 11, …; sequence 1 on 0, 2, 4, ….
            let tables: Vec<Vec<i32>> = vec![
                (0..max_pages).map(|i| 15 - 2 * i as i32).collect(),
                (0..max_pages).map(|i| 2 * i as i32).collect(),
            ];
            let (mut pos, mut seq, mut tiles) = (Vec::new(), Vec::new(), Vec::new());
            for (si, &(p0, n)) in seqs.iter().enumerate() {
                for t0 in (0..n).step_by(FLASH_TILE) {
                    tiles.extend([pos.len() as i32 + t0 as i32, (n - t0).min(FLASH_TILE) as i32]);
                }
                pos.extend((p0..p0 + n).map(|p| p as i32));
                seq.extend(std::iter::repeat_n(si as i32, n));
            }
            let at = |s: usize, key: usize, kvh: usize, d: usize| {
                ((tables[s][key / KV_PAGE] as usize * nkv + kvh) * KV_PAGE + key % KV_PAGE) * hd + d
            };
            let scale = 1.0 / (hd as f32).sqrt();
            let mut want = vec![0f64; rows * nh * hd];
            for r in 0..rows {
                let (s, p) = (seq[r] as usize, pos[r] as usize);
                let lo = if window > 0 { (p + 1).saturating_sub(window) } else { 0 };
                for h in 0..nh {
                    let kvh = h / (nh / nkv);
                    let qr = &q[(r * nh + h) * hd..(r * nh + h + 1) * hd];
                    let sc: Vec<f64> = (lo..=p)
                        .map(|j| (0..hd).map(|d| (qr[d] * scale) as f64 * k[at(s, j, kvh, d)].to_f64()).sum())
                        .collect();
                    let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for d in 0..hd {
                        let o: f64 = (lo..=p).zip(&e).map(|(j, w)| w * v[at(s, j, kvh, d)].to_f64()).sum();
                        want[(r * nh + h) * hd + d] = o / z;
                    }
                }
            }
            let bits = |x: &[f16]| x.iter().map(|h| h.to_bits()).collect::<Vec<u16>>();
            let (kb, vb) = (DevBuf::from_slice(&g, &bits(&k)).unwrap(), DevBuf::from_slice(&g, &bits(&v)).unwrap());
            let qb = DevBuf::from_slice(&g, &q).unwrap();
            let mut meta: Vec<i32> = pos.clone();
            meta.extend(&seq);
            meta.extend(tables.concat());
            meta.extend(&tiles);
            let mb = DevBuf::from_slice(&g, &meta).unwrap();
            let out = DevBuf::zeros(&g, rows * nh * hd * 4).unwrap();
            let m = Meta { row_pos: mb.ptr(), row_seq: mb.at(rows * 4), tables: mb.at(rows * 8), max_pages };
            let tiles_at = mb.at((2 * rows + 2 * max_pages) * 4);
            for (name, tiles_ptr, tol) in [("key-stream", 0, 1e-4), ("tensor-core", tiles_at, 4e-3)] {
                let a = Attn {
                    q: qb.ptr(),
                    k_pages: kb.ptr(),
                    v_pages: vb.ptr(),
                    out: out.ptr(),
                    out_bf16: false,
                    meta: m,
                    rows,
                    nh,
                    nkv,
                    hd,
                    window,
                    scale,
                    tiles: tiles_ptr,
                    n_tiles: tiles.len() / 2,
                };
                // SAFETY: every buffer holds the shapes above; the tables cover every position.
                unsafe { g.attention(&a) }.unwrap();
                let got: Vec<f32> = out.read(&g, rows * nh * hd).unwrap();
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (*a as f64 - b).abs() <= tol,
                        "{name} hd {hd} window {window} row {} head {}: {a} vs {b}",
                        i / (nh * hd),
                        i / hd % nh
                    );
                }
            }
        }
    }
}

/// Decode rows (one per sequence, contexts of 1 to 300 keys over scattered pages) through the key-stream kernel
/// each shape runs — 32, 16 and 8 warps a block by the shape's accumulators (the instances attention.cu has) —
/// against attention computed here in f64 from the same f16 keys and values, within 1e-4; with and without a window.
#[test]
fn key_stream_attention_in_every_warp_count_equals_the_reference() {
    use half::f16;
    use kvad_tensor::cuda::{Attn, Meta, KV_PAGE};
    let Some(g) = gpu() else { return };
    let ctx = [1usize, 17, 130, 300, 64];
    let rows = ctx.len();
    let max_pages = 300usize.div_ceil(KV_PAGE);
    let n_pages = rows * max_pages;
    // 32 warps (GM·D <= 16) for most; 16 at (128, 8) and (256, 4); 8 at (256, 8).
    let shapes =
        [(32usize, 1usize), (32, 8), (64, 2), (64, 8), (128, 4), (128, 8), (128, 3), (256, 2), (256, 4), (256, 8)];
    for (hd, group) in shapes {
        let (nkv, d) = (2usize, hd / 32);
        let nh = nkv * group;
        let gm = group.next_power_of_two();
        let page_elems = nkv * KV_PAGE * hd;
        let k: Vec<f16> = data(n_pages * page_elems, 80 + hd as u64).into_iter().map(f16::from_f32).collect();
        let v: Vec<f16> = data(n_pages * page_elems, 90 + hd as u64).into_iter().map(f16::from_f32).collect();
        let q = data(rows * nh * hd, 100 + (hd * group) as u64);
        // Sequence s on pages s, s + rows, s + 2·rows, … backwards.
        let tables: Vec<Vec<i32>> =
            (0..rows).map(|s| (0..max_pages).rev().map(|i| (s + i * rows) as i32).collect()).collect();
        let pos: Vec<i32> = ctx.iter().map(|&c| c as i32 - 1).collect();
        let seq: Vec<i32> = (0..rows as i32).collect();
        let scale = 1.0 / (hd as f32).sqrt();
        let bits = |x: &[f16]| x.iter().map(|h| h.to_bits()).collect::<Vec<u16>>();
        let (kb, vb) = (DevBuf::from_slice(&g, &bits(&k)).unwrap(), DevBuf::from_slice(&g, &bits(&v)).unwrap());
        let qb = DevBuf::from_slice(&g, &q).unwrap();
        let mut meta: Vec<i32> = pos.clone();
        meta.extend(&seq);
        meta.extend(tables.concat());
        let mb = DevBuf::from_slice(&g, &meta).unwrap();
        let out = DevBuf::zeros(&g, rows * nh * hd * 4).unwrap();
        let m = Meta { row_pos: mb.ptr(), row_seq: mb.at(rows * 4), tables: mb.at(rows * 8), max_pages };
        let pages = Pages { k: &k, v: &v, tables: &tables, nkv, hd };
        for window in [0usize, 50] {
            let want = decode_reference(&pages, &q, &pos, nh, window, scale);
            let w = if gm * d <= 16 {
                32
            } else if gm * d <= 32 {
                16
            } else {
                8
            };
            let a = Attn {
                q: qb.ptr(),
                k_pages: kb.ptr(),
                v_pages: vb.ptr(),
                out: out.ptr(),
                out_bf16: false,
                meta: m,
                rows,
                nh,
                nkv,
                hd,
                window,
                scale,
                tiles: 0,
                n_tiles: 0,
            };
            // SAFETY: every buffer holds the shapes above; the tables cover every position.
            unsafe { g.attention(&a) }.unwrap();
            let got: Vec<f32> = out.read(&g, rows * nh * hd).unwrap();
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (*a as f64 - b).abs() <= 1e-4,
                    "{w} warps, hd {hd}, group {group}, window {window}, row {} head {}: {a} vs {b}",
                    i / (nh * hd),
                    i / hd % nh
                );
            }
        }
    }
}

/// Decode rows (contexts of 1 to 300 keys, across the kernels' 16-, 32- and 64-key step boundaries, over scattered
/// pages) through the chunk kernels of passes over 8 rows (on the tensor cores by warp up to head width 128, on the
/// CUDA cores by block at 256), against attention computed here in f64 from the same f16 keys and values, within
/// 1e-4, with and without a window, for every head width and group they have (the 8B shape is 128 × 4); and each
/// row run alone through the same kernel gives the same bits as in the pass.
#[test]
fn chunked_decode_attention_equals_the_reference_and_each_row_alone() {
    use half::f16;
    use kvad_tensor::cuda::{Attn, Meta, KV_PAGE};
    let Some(g) = gpu() else { return };
    let ctx = [1usize, 17, 130, 300, 64, 65, 33, 129, 256, 2];
    let rows = ctx.len();
    let max_pages = 300usize.div_ceil(KV_PAGE);
    let n_pages = rows * max_pages;
    let shapes =
        [(32usize, 1usize), (32, 8), (64, 2), (64, 8), (128, 4), (128, 8), (128, 3), (128, 1), (256, 2), (256, 8)];
    for (hd, group) in shapes {
        let nkv = 2usize;
        let nh = nkv * group;
        let page_elems = nkv * KV_PAGE * hd;
        let k: Vec<f16> = data(n_pages * page_elems, 180 + hd as u64).into_iter().map(f16::from_f32).collect();
        let v: Vec<f16> = data(n_pages * page_elems, 190 + hd as u64).into_iter().map(f16::from_f32).collect();
        // Queries of a few times the unit scale, so the softmax is not flat.
        let q: Vec<f32> = data(rows * nh * hd, 200 + (hd * group) as u64).into_iter().map(|x| 4.0 * x).collect();
        // Sequence s on pages s, s + rows, s + 2·rows, … backwards.
        let tables: Vec<Vec<i32>> =
            (0..rows).map(|s| (0..max_pages).rev().map(|i| (s + i * rows) as i32).collect()).collect();
        let pos: Vec<i32> = ctx.iter().map(|&c| c as i32 - 1).collect();
        let seq: Vec<i32> = (0..rows as i32).collect();
        let scale = 1.0 / (hd as f32).sqrt();
        let bits = |x: &[f16]| x.iter().map(|h| h.to_bits()).collect::<Vec<u16>>();
        let (kb, vb) = (DevBuf::from_slice(&g, &bits(&k)).unwrap(), DevBuf::from_slice(&g, &bits(&v)).unwrap());
        let qb = DevBuf::from_slice(&g, &q).unwrap();
        let mut meta: Vec<i32> = pos.clone();
        meta.extend(&seq);
        meta.extend(tables.concat());
        let mb = DevBuf::from_slice(&g, &meta).unwrap();
        let out = DevBuf::zeros(&g, rows * nh * hd * 4).unwrap();
        let m = Meta { row_pos: mb.ptr(), row_seq: mb.at(rows * 4), tables: mb.at(rows * 8), max_pages };
        let attn = |q: u64, out: u64, meta: Meta, rows: usize, window: usize| Attn {
            q,
            k_pages: kb.ptr(),
            v_pages: vb.ptr(),
            out,
            out_bf16: false,
            meta,
            rows,
            nh,
            nkv,
            hd,
            window,
            scale,
            tiles: 0,
            n_tiles: 0,
        };
        let pages = Pages { k: &k, v: &v, tables: &tables, nkv, hd };
        for window in [0usize, 50] {
            let want = decode_reference(&pages, &q, &pos, nh, window, scale);
            // SAFETY: every buffer holds the shapes above; the tables cover every position.
            unsafe { g.attention_in_chunks(&attn(qb.ptr(), out.ptr(), m, rows, window)) }.unwrap();
            let got: Vec<f32> = out.read(&g, rows * nh * hd).unwrap();
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                let (row, head) = (i / (nh * hd), i / hd % nh);
                assert!(
                    (*a as f64 - b).abs() <= 1e-4,
                    "hd {hd}, group {group}, window {window}, row {row} head {head}: {a} vs {b}"
                );
            }
            // Each row alone: its position, sequence and queries, the same pages.
            let one = DevBuf::zeros(&g, nh * hd * 4).unwrap();
            for r in 0..rows {
                let mr =
                    Meta { row_pos: mb.at(r * 4), row_seq: mb.at((rows + r) * 4), tables: mb.at(rows * 8), max_pages };
                let a = attn(qb.at(r * nh * hd * 4), one.ptr(), mr, 1, window);
                // SAFETY: as above, one row.
                unsafe { g.attention_in_chunks(&a) }.unwrap();
                let alone: Vec<f32> = one.read(&g, nh * hd).unwrap();
                let together = &got[r * nh * hd..(r + 1) * nh * hd];
                assert!(
                    alone.iter().zip(together).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "hd {hd}, group {group}, window {window}, row {r}: alone differs"
                );
            }
        }
    }
}

/// The f16 keys and values in pages of [`KV_PAGE`] keys × `nkv` heads × `hd`, and each sequence's page table.
struct Pages<'a> {
    k: &'a [f16],
    v: &'a [f16],
    tables: &'a [Vec<i32>],
    nkv: usize,
    hd: usize,
}

/// Decode rows' attention computed here in f64: row r (sequence r, at position `pos[r]`) over its keys lo..=pos
/// (lo from `window`, 0: none), query head h reading KV head h / (nh / nkv), the queries scaled in f32 first as
/// the kernels do.
fn decode_reference(p: &Pages, q: &[f32], pos: &[i32], nh: usize, window: usize, scale: f32) -> Vec<f64> {
    let (nkv, hd) = (p.nkv, p.hd);
    let group = nh / nkv;
    let at = |s: usize, key: usize, kvh: usize, dd: usize| {
        ((p.tables[s][key / KV_PAGE] as usize * nkv + kvh) * KV_PAGE + key % KV_PAGE) * hd + dd
    };
    let rows = pos.len();
    let mut want = vec![0f64; rows * nh * hd];
    for r in 0..rows {
        let end = pos[r] as usize;
        let lo = if window > 0 { (end + 1).saturating_sub(window) } else { 0 };
        for h in 0..nh {
            let kvh = h / group;
            let qr = &q[(r * nh + h) * hd..(r * nh + h + 1) * hd];
            let sc: Vec<f64> = (lo..=end)
                .map(|j| (0..hd).map(|dd| (qr[dd] * scale) as f64 * p.k[at(r, j, kvh, dd)].to_f64()).sum())
                .collect();
            let mx = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = sc.iter().map(|x| (x - mx).exp()).collect();
            let z: f64 = e.iter().sum();
            for dd in 0..hd {
                let o: f64 = (lo..=end).zip(&e).map(|(j, w)| w * p.v[at(r, j, kvh, dd)].to_f64()).sum();
                want[(r * nh + h) * hd + dd] = o / z;
            }
        }
    }
    want
}
