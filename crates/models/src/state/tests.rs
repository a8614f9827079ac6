//! Each state kind under a toy layer: a few lines of arithmetic that read the state the way a real layer of that
//! kind does (attention over held rows, a window of them, a latent, a recurrence), so appending, cutting back,
//! copying a prefix and snapshots are checked by what the layer then computes, not only by lengths.

use super::*;

const DIM: usize = 3;

/// A token's input vector.
fn x(t: u32) -> Vec<f32> {
    (0..DIM).map(|i| ((t as usize * 7 + i * 3) % 11) as f32 * 0.25 - 1.0).collect()
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Attention of `q` over the rows of positions `lo..hi` (rows held from position `first`): each value row weighted
/// by its key's dot product with `q`.
fn attend(q: &[f32], k: &[f32], v: &[f32], first: usize, lo: usize, hi: usize) -> Vec<f32> {
    let mut out = vec![0.0; DIM];
    for p in lo..hi {
        let r = (p - first) * DIM..(p - first + 1) * DIM;
        let w = dot(q, &k[r.clone()]);
        for (o, x) in out.iter_mut().zip(&v[r]) {
            *o += w * x;
        }
    }
    out
}

/// Runs the toy layers over `tokens` (following what `s` holds); each token's output is every layer's, concatenated.
fn run(s: &mut SeqState, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut outs = Vec::new();
    for &t in tokens {
        let (pos, q) = (s.len, x(t));
        let mut out = Vec::new();
        for l in &mut s.layers {
            match l {
                LayerState::Kv(kv) => {
                    kv.k.extend(&q);
                    kv.v.extend(&q.iter().map(|v| 2.0 * v).collect::<Vec<_>>());
                    out.extend(attend(&q, &kv.k.to_f32(), &kv.v.to_f32(), 0, 0, pos + 1));
                }
                LayerState::Window(w) => {
                    w.append(pos, &q, &q);
                    let lo = (pos + 1).saturating_sub(w.window);
                    assert!(w.first <= lo, "position {pos} needs {lo}, held from {}", w.first);
                    out.extend(attend(&q, &w.k.to_f32(), &w.v.to_f32(), w.first, lo, pos + 1));
                }
                LayerState::Latent(la) => {
                    la.rows.extend(&[&q[..], &q[..1]].concat());
                    let rows = la.rows.to_f32();
                    let w = DIM + 1;
                    let mut acc = vec![0.0; DIM];
                    for p in 0..=pos {
                        let c = &rows[p * w..p * w + DIM];
                        let wt = dot(&q, c) + q[0] * rows[p * w + DIM];
                        for (a, v) in acc.iter_mut().zip(c) {
                            *a += wt * v;
                        }
                    }
                    out.extend(acc);
                }
                LayerState::Recurrent(rc) => {
                    let Recurrence::Host { state, conv } = &mut rc.now else {
                        unreachable!("toy state is on the host")
                    };
                    // conv holds the last two inputs; state decays and takes the convolved input.
                    let mixed: Vec<f32> = (0..DIM).map(|i| q[i] + 0.5 * conv[i] + 0.25 * conv[DIM + i]).collect();
                    conv.copy_within(0..DIM, DIM);
                    conv[..DIM].copy_from_slice(&q);
                    for (s, m) in state.iter_mut().zip(&mixed) {
                        *s = 0.9 * *s + m;
                    }
                    out.extend(state.iter().copied());
                }
            }
        }
        s.len += 1;
        outs.push(out);
    }
    outs
}

fn tokens() -> Vec<u32> {
    (0..20).map(|i| (i * 5 + 3) % 17).collect()
}

fn specs() -> Vec<(&'static str, StateSpec)> {
    let kv = LayerSpec::Kv { kv_dim: DIM, dtype: KvDtype::F32 };
    let kv16 = LayerSpec::Kv { kv_dim: DIM, dtype: KvDtype::F16 };
    let window = LayerSpec::Window { kv_dim: DIM, window: 4, dtype: KvDtype::F32 };
    let latent = LayerSpec::Latent { latent_dim: DIM, rope_dim: 1, dtype: KvDtype::F32 };
    let rec = LayerSpec::Recurrent { state: DIM, conv: 2 * DIM };
    vec![
        ("kv", StateSpec { layers: vec![kv, kv] }),
        ("kv f16", StateSpec { layers: vec![kv16] }),
        ("window", StateSpec { layers: vec![window, window] }),
        ("latent", StateSpec { layers: vec![latent] }),
        ("recurrent", StateSpec { layers: vec![rec, rec] }),
        ("hybrid", StateSpec { layers: vec![rec, kv, rec, window] }),
    ]
}

#[test]
fn each_kind_holds_the_bytes_its_spec_charges() {
    for (name, spec) in specs() {
        let mut s = SeqState::new(&spec);
        assert!(s.matches(&spec) && s.is_empty());
        for n in [1usize, 3, 9, 20] {
            let held = s.len;
            run(&mut s, &tokens()[held..n]);
            let (held, charged) = (s.bytes(), spec.bytes_for(n));
            // A window holds between its width and twice it (it lets go of old rows once twice the width is held).
            assert!(held <= charged, "{name} at {n}: holds {held}, charged {charged}");
            let floor = spec.fixed_bytes()
                + spec
                    .layers
                    .iter()
                    .map(|l| match l {
                        LayerSpec::Window { window, .. } => n.min(*window) * l.bytes_per_token(),
                        _ => n * l.bytes_per_token(),
                    })
                    .sum::<usize>();
            assert!(held >= floor, "{name} at {n}: holds {held}, needs at least {floor}");
        }
    }
    let rec = StateSpec { layers: vec![LayerSpec::Recurrent { state: 10, conv: 6 }] };
    // A recurrent layer: its state, the latest prompt's end, and one snapshot a spacing.
    assert_eq!((rec.bytes_per_token(), rec.fixed_bytes(), rec.bytes_for(1000)), (0, 64, 128));
    assert_eq!(rec.bytes_for(2 * SNAPSHOT_SPACING + 5), 4 * 64);
    let kv = StateSpec::kv(2, 8, KvDtype::F16);
    assert_eq!((kv.bytes_per_token(), kv.bytes_for(10)), (64, 640));
}

/// A state cut back (or copied) at a point it allows computes, from there on, what it computed the first time.
#[test]
fn cut_back_and_copied_prefixes_compute_what_they_did() {
    let t = tokens();
    for (name, spec) in specs() {
        let mut whole = SeqState::new(&spec);
        let first = run(&mut whole, &t[..12]);
        // Snapshots where a recurrent layer will be cut back to.
        assert!(whole.snapshot());
        let later = run(&mut whole, &t[12..]);
        let all: Vec<Vec<f32>> = first.iter().chain(&later).cloned().collect();
        for n in [0usize, 5, 12, 17, 20] {
            let m = whole.cut_point(n);
            assert!(m <= n && whole.can_cut(m), "{name}: cut point {m} for {n}");
            let mut copy = whole.copy_prefix(m).unwrap_or_else(|| panic!("{name}: copy at {m}"));
            assert_eq!(copy.len(), m);
            assert_eq!(run(&mut copy, &t[m..]), all[m..].to_vec(), "{name}: copy at {m} (asked {n})");
            let mut cut = whole.copy_prefix(20).unwrap();
            assert!(cut.truncate(m), "{name}: truncate to {m}");
            assert_eq!(run(&mut cut, &t[m..]), all[m..].to_vec(), "{name}: cut at {m} (asked {n})");
        }
    }
}

#[test]
fn a_recurrent_state_is_cut_back_only_to_its_snapshots() {
    let spec = StateSpec {
        layers: vec![
            LayerSpec::Kv { kv_dim: DIM, dtype: KvDtype::F32 },
            LayerSpec::Recurrent { state: DIM, conv: 2 * DIM },
        ],
    };
    let t = tokens();
    let mut s = SeqState::new(&spec);
    run(&mut s, &t[..5]);
    assert!(s.snapshot());
    run(&mut s, &t[5..9]);
    assert!(s.snapshot());
    run(&mut s, &t[9..14]);
    assert_eq!([s.cut_point(14), s.cut_point(13), s.cut_point(9), s.cut_point(8), s.cut_point(4)], [14, 9, 9, 5, 0]);
    assert!(s.copy_prefix(7).is_none(), "no snapshot at 7");
    let before = s.bytes();
    assert!(!s.truncate(7) && s.len() == 14 && s.bytes() == before, "a refused cut changes nothing");
    assert!(s.truncate(9));
    assert_eq!(s.cut_point(8), 5, "the snapshot at 9 is now the state itself");
    assert!(s.truncate(0) && s.is_empty());
    let mut fresh = SeqState::new(&spec);
    assert_eq!(run(&mut s, &t[..3]), run(&mut fresh, &t[..3]), "cut to 0 is a fresh start");
}

#[test]
fn a_window_lets_go_of_what_no_query_sees_and_says_where_it_can_be_cut() {
    let spec = StateSpec { layers: vec![LayerSpec::Window { kv_dim: DIM, window: 4, dtype: KvDtype::F32 }] };
    let mut s = SeqState::new(&spec);
    run(&mut s, &tokens()[..20]);
    let LayerState::Window(w) = &s.layers[0] else { unreachable!() };
    assert!(w.first > 0 && w.first <= 20 - 4, "held from {}", w.first);
    let first = w.first;
    assert!(!s.can_cut(first + 2), "position {} would need a row before {first}", first + 2);
    assert!(s.can_cut(first + 3) && s.can_cut(20) && s.can_cut(0));
    assert_eq!(s.cut_point(first + 2), 0);
}

#[test]
fn a_state_made_for_another_shape_is_told_apart() {
    let a = StateSpec::kv(2, DIM, KvDtype::F32);
    let b = StateSpec {
        layers: vec![LayerSpec::Kv { kv_dim: DIM, dtype: KvDtype::F32 }, LayerSpec::Recurrent { state: 1, conv: 1 }],
    };
    assert!(SeqState::new(&a).matches(&a) && !SeqState::new(&a).matches(&b) && !SeqState::new(&b).matches(&a));
    assert!(!SeqState::new(&StateSpec::kv(3, DIM, KvDtype::F32)).matches(&a));
}

/// A state whose rows live on the device (a GPU model's: the host rows stay empty) is cut and copied by its length,
/// not by rows it does not hold.
#[test]
fn a_state_with_no_host_rows_is_cut_and_copied_by_its_length() {
    let spec = StateSpec::kv(2, DIM, KvDtype::F16);
    let mut s = SeqState::new(&spec);
    s.len = 40;
    let c = s.copy_prefix(17).expect("a prefix of a K/V state");
    assert_eq!((c.len(), c.bytes()), (17, 0));
    assert!(s.truncate(5) && s.len() == 5);
}

/// A sliding-window model's state lets go of what no query sees, on request, and still computes what it did; a
/// state with a layer that keeps every token lets go of nothing.
#[test]
fn a_window_state_lets_go_of_what_no_query_sees() {
    let window = LayerSpec::Window { kv_dim: DIM, window: 4, dtype: KvDtype::F32 };
    let spec = StateSpec { layers: vec![window, LayerSpec::Recurrent { state: DIM, conv: 2 * DIM }] };
    let t = tokens();
    let mut whole = SeqState::new(&spec);
    let all = run(&mut whole, &t);
    let mut s = SeqState::new(&spec);
    run(&mut s, &t[..6]);
    let before = s.bytes();
    assert_eq!(s.release_before(100), 3, "at most to where the next query's window starts (7 - 4)");
    assert!(s.bytes() < before);
    assert_eq!(run(&mut s, &t[6..]), all[6..].to_vec());
    let mut full =
        SeqState::new(&StateSpec { layers: vec![window, LayerSpec::Kv { kv_dim: DIM, dtype: KvDtype::F32 }] });
    run(&mut full, &t[..6]);
    assert_eq!(full.release_before(100), 0);
}

#[test]
fn spaced_snapshots_keep_one_a_spacing_and_the_latest() {
    let spec = StateSpec { layers: vec![LayerSpec::Recurrent { state: 4, conv: 2 }] };
    let mut s = SeqState::new(&spec);
    let mut points = Vec::new();
    for len in [10, 20, SNAPSHOT_SPACING + 30, SNAPSHOT_SPACING + 40, 2 * SNAPSHOT_SPACING + 50] {
        s.len = len;
        assert!(s.snapshot_spaced());
        points.push(s.layers[0].snapshot_points().unwrap());
    }
    // Each new snapshot drops those less than a spacing before it; the bytes stay within what admission charges.
    assert_eq!(points[1], [20]);
    assert_eq!(points[2], [20, SNAPSHOT_SPACING + 30]);
    assert_eq!(points[3], [20, SNAPSHOT_SPACING + 40]);
    assert_eq!(points[4], [20, SNAPSHOT_SPACING + 40, 2 * SNAPSHOT_SPACING + 50]);
    assert!(s.bytes() <= spec.bytes_for(s.len), "{} > {}", s.bytes(), spec.bytes_for(s.len));
}
