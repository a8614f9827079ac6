use super::super::testdata::data;
use super::*;

const FORMATS: [QType; 3] = [QType::Q8_0, QType::Q4_0, QType::Q4_1];
/// Ragged shapes: one block, odd block counts (a lone last block), rows not a multiple of the task size, and the
/// model's own widths.
const SHAPES: [(usize, usize); 7] = [(1, 32), (3, 64), (33, 96), (70, 576), (5, 1536), (2, 288), (37, 224)];

/// Activation rows with different scales per row and per block, a zero block and an outlier, so every row's
/// rounding differs.
fn activations(n: usize, cols: usize) -> Vec<f32> {
    let mut x = data(n * cols, 11 + n as u64);
    for (i, v) in x.iter_mut().enumerate() {
        *v *= 1.0 + (i / 32 % 5) as f32 + (i / cols) as f32 * 3.0;
        if i / 32 % 7 == 3 {
            *v = 0.0;
        }
    }
    if let Some(v) = x.get_mut(5) {
        *v = 40.0;
    }
    x
}

#[test]
fn simd_quantisation_is_the_scalar_one_bit_for_bit() {
    for (_, cols) in SHAPES {
        let x = activations(1, cols);
        let nb = cols / BLOCK;
        let mut s = (vec![0i8; nb.div_ceil(2) * 64], vec![0f32; nb], vec![0f32; nb], vec![0i32; nb]);
        let mut v = s.clone();
        quantize8_scalar(&x, &mut s.0, &mut s.1, &mut s.2, &mut s.3);
        quantize8(&x, &mut v.0, &mut v.1, &mut v.2, &mut v.3);
        assert_eq!(s.0, v.0, "{cols}: values");
        assert_eq!(s.3, v.3, "{cols}: integer sums");
        let bits = |f: &[f32]| f.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&s.1), bits(&v.1), "{cols}: scales");
        assert_eq!(bits(&s.2), bits(&v.2), "{cols}: sums");
    }
}

#[test]
fn quantised_values_are_within_half_a_step_and_in_their_pair_slots() {
    let x = activations(1, 96);
    let a = ActQ8::new(&x, QType::Q8_0);
    for b in 0..3 {
        let amax = x[b * 32..(b + 1) * 32].iter().fold(0f32, |m, v| m.max(v.abs()));
        assert_eq!(a.dx[b], amax / 127.0);
        for j in 0..32 {
            let q = a.x8[slot(b, j)] as f32;
            assert!((q * a.dx[b] - x[b * 32 + j]).abs() <= a.dx[b] * 0.5001, "block {b} value {j}");
            assert!(q.abs() <= 127.0);
        }
    }
    // Block 2 is a pair's lone first half: the second half's slots stay zero, and so does its correction.
    assert!((0..32).all(|j| a.x8[64 + (j / 16) * 32 + 16 + j % 16] == 0));
    assert_eq!(a.corr[12], 0);
    let q0: i32 = (0..32).map(|j| a.x8[slot(0, j)] as i32).sum();
    assert_eq!(a.corr[0], -128 * q0);
}

#[test]
fn the_kernel_matches_the_scalar_reference() {
    if !active() {
        eprintln!("no VNNI here: the 8-bit few-row kernel cannot run; passes stay on the i16 kernel");
        return;
    }
    for t in FORMATS {
        for (rows, cols) in SHAPES {
            let w = QMatrix::quantize(t, rows, cols, &data(rows * cols, 5 + rows as u64)).unwrap();
            for n in 1..=8 {
                let x = activations(n, cols);
                let mut got = vec![f32::NAN; n * rows];
                gemv_rows8(&w, &x, n, &mut got);
                for i in 0..n {
                    let a = ActQ8::new(&x[i * cols..(i + 1) * cols], t);
                    for r in 0..rows {
                        let (g, e) = (got[i * rows + r], dot8_scalar(&w, r, &a));
                        assert!(
                            (g - e).abs() <= 2e-5 * (1.0 + e.abs()),
                            "{t:?} {rows}x{cols} n{n} [{i},{r}]: {g} vs {e}"
                        );
                    }
                }
            }
        }
    }
}

/// A row's result does not depend on how many rows share the pass: each activation row alone gives the same bits
/// as that row among 2–8 (the horizontal sums add a row's lanes in one order whatever sits beside it).
#[test]
fn each_row_is_the_same_alone_and_among_others() {
    if !active() {
        eprintln!("no VNNI here: the 8-bit few-row kernel cannot run");
        return;
    }
    let bits = |f: &[f32]| f.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for t in FORMATS {
        for (rows, cols) in SHAPES {
            let w = QMatrix::quantize(t, rows, cols, &data(rows * cols, 7 + rows as u64)).unwrap();
            let x = activations(8, cols);
            let mut all = vec![f32::NAN; 8 * rows];
            gemv_rows8(&w, &x, 8, &mut all);
            for n in 1..8 {
                let mut some = vec![f32::NAN; n * rows];
                gemv_rows8(&w, &x[..n * cols], n, &mut some);
                assert_eq!(bits(&some), bits(&all[..n * rows]), "{t:?} {rows}x{cols}: {n} rows vs 8");
            }
        }
    }
}

/// The error of rounding activations to 8 bits is bounded by half a step a value: against the exact product of the
/// stored (dequantised) weights and the f32 activations, each result is within Σ_b dx_b/2 · Σ_j |w_bj|.
#[test]
fn the_error_is_the_rounding_of_the_activations_and_no_more() {
    for t in FORMATS {
        let (rows, cols) = (37, 576);
        let w = QMatrix::quantize(t, rows, cols, &data(rows * cols, 9)).unwrap();
        let x = activations(1, cols);
        let a = ActQ8::new(&x, t);
        for r in 0..rows {
            let mut wd = vec![0f32; cols];
            w.dequantize_row(r, &mut wd);
            let exact: f64 = wd.iter().zip(&x).map(|(&w, &x)| w as f64 * x as f64).sum();
            let bound: f64 = (0..cols / 32)
                .map(|b| a.dx[b] as f64 * 0.5 * wd[b * 32..(b + 1) * 32].iter().map(|v| v.abs() as f64).sum::<f64>())
                .sum();
            let got = dot8_scalar(&w, r, &a) as f64;
            assert!((got - exact).abs() <= bound * 1.01 + 1e-4, "{t:?} row {r}: {got} vs {exact} (bound {bound})");
        }
    }
}

/// The kernel compiled for AVX-VNNI and for AVX-512 VNNI gives the same bits (where the host has both; on a host
/// with one the test above checks it against the scalar reference).
#[cfg(target_arch = "x86_64")]
#[test]
fn every_vnni_form_gives_the_same_bits() {
    let forms = super::super::features::vnni_forms();
    if forms.len() < 2 || !super::super::features::has_avx2() {
        eprintln!("VNNI forms here: {forms:?}; one form is checked against the scalar reference above");
        return;
    }
    for t in FORMATS {
        let (rows, cols) = (37, 224);
        let w = QMatrix::quantize(t, rows, cols, &data(rows * cols, 13)).unwrap();
        let x = activations(5, cols);
        let acts: Vec<ActQ8> = (0..5).map(|i| ActQ8::new(&x[i * cols..(i + 1) * cols], t)).collect();
        let run = |form| {
            let mut buf = vec![vec![f32::NAN; rows]; 5];
            let mut outs: Vec<&mut [f32]> = buf.iter_mut().map(|v| v.as_mut_slice()).collect();
            // SAFETY: `form` was detected here; the outputs hold `rows` values each, the activations `cols`.
            unsafe { avx::rows8_with(form, 5, &w, 0..rows, &acts, &mut outs) };
            buf.concat().iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        assert_eq!(run(forms[0]), run(forms[1]), "{t:?}");
    }
}
