//! The passes' inner loops in plain Rust, written so the compiler vectorizes them: the
//! reference the SIMD kernels are tested against, and the path for CPUs and shapes they do not
//! cover.
//!
//! Must not use target-specific code: [`super::kernels`] compiles these same loops for AVX2.

use super::{clip8, AxisCoeffs, HALF};

/// One row of the horizontal pass: `src` is a source row (`3 * in_w` bytes), `dst` the
/// output row (`3 * out_w` bytes).
#[inline(always)]
pub(super) fn horizontal(src: &[u8], dst: &mut [u8], c: &AxisCoeffs) {
    match c.taps {
        1 => fixed::<1>(src, dst, c),
        2 => fixed::<2>(src, dst, c),
        3 => fixed::<3>(src, dst, c),
        4 => fixed::<4>(src, dst, c),
        5 => fixed::<5>(src, dst, c),
        6 => fixed::<6>(src, dst, c),
        7 => fixed::<7>(src, dst, c),
        8 => fixed::<8>(src, dst, c),
        _ => any(src, dst, c),
    }
}

/// Every output reads a window of exactly `T` inputs (zero weights pad the shorter ones),
/// so the tap loop unrolls completely.
#[inline(always)]
fn fixed<const T: usize>(src: &[u8], dst: &mut [u8], c: &AxisCoeffs) {
    for ((px, &start), w) in dst
        .chunks_exact_mut(3)
        .zip(&c.pstart)
        .zip(c.pweights.chunks_exact(T))
    {
        let s = 3 * start as usize;
        let win = &src[s..s + 3 * T];
        let (mut r, mut g, mut b) = (HALF, HALF, HALF);
        for (k, &wk) in w.iter().enumerate() {
            r += i32::from(win[3 * k]) * wk;
            g += i32::from(win[3 * k + 1]) * wk;
            b += i32::from(win[3 * k + 2]) * wk;
        }
        px[0] = clip8(r);
        px[1] = clip8(g);
        px[2] = clip8(b);
    }
}

/// Any number of taps (large downscale factors).
fn any(src: &[u8], dst: &mut [u8], c: &AxisCoeffs) {
    for (xx, px) in dst.chunks_exact_mut(3).enumerate() {
        let (start, w) = c.taps_of(xx);
        let win = &src[3 * start..3 * (start + w.len())];
        let (mut r, mut g, mut b) = (HALF, HALF, HALF);
        for (p, &k) in win.chunks_exact(3).zip(w) {
            r += i32::from(p[0]) * k;
            g += i32::from(p[1]) * k;
            b += i32::from(p[2]) * k;
        }
        px[0] = clip8(r);
        px[1] = clip8(g);
        px[2] = clip8(b);
    }
}

/// One row of the vertical pass: `row(k)` is the `k`-th input row this output reads
/// (each at least `dst.len()` bytes), `w` the weights.
#[inline(always)]
pub(super) fn vertical<'a>(
    row: impl Fn(usize) -> &'a [u8],
    w: &[i32],
    dst: &mut [u8],
    acc: &mut Vec<i32>,
) {
    let n = dst.len();
    match *w {
        [w0] => {
            for (o, &a) in dst.iter_mut().zip(&row(0)[..n]) {
                *o = clip8(HALF + i32::from(a) * w0);
            }
        }
        [w0, w1] => {
            let (r0, r1) = (&row(0)[..n], &row(1)[..n]);
            for ((o, &a), &b) in dst.iter_mut().zip(r0).zip(r1) {
                *o = clip8(HALF + i32::from(a) * w0 + i32::from(b) * w1);
            }
        }
        [w0, w1, w2] => {
            let (r0, r1, r2) = (&row(0)[..n], &row(1)[..n], &row(2)[..n]);
            for (((o, &a), &b), &c) in dst.iter_mut().zip(r0).zip(r1).zip(r2) {
                *o = clip8(HALF + i32::from(a) * w0 + i32::from(b) * w1 + i32::from(c) * w2);
            }
        }
        [w0, w1, w2, w3] => {
            let (r0, r1, r2, r3) = (&row(0)[..n], &row(1)[..n], &row(2)[..n], &row(3)[..n]);
            for ((((o, &a), &b), &c), &d) in dst.iter_mut().zip(r0).zip(r1).zip(r2).zip(r3) {
                *o = clip8(
                    HALF + i32::from(a) * w0
                        + i32::from(b) * w1
                        + i32::from(c) * w2
                        + i32::from(d) * w3,
                );
            }
        }
        _ => {
            acc.clear();
            acc.resize(n, HALF);
            let mut k = 0;
            while k + 2 <= w.len() {
                let (r0, r1) = (&row(k)[..n], &row(k + 1)[..n]);
                let (w0, w1) = (w[k], w[k + 1]);
                for ((s, &a), &b) in acc.iter_mut().zip(r0).zip(r1) {
                    *s += i32::from(a) * w0 + i32::from(b) * w1;
                }
                k += 2;
            }
            if k < w.len() {
                let w0 = w[k];
                for (s, &a) in acc.iter_mut().zip(&row(k)[..n]) {
                    *s += i32::from(a) * w0;
                }
            }
            for (o, &s) in dst.iter_mut().zip(acc.iter()) {
                *o = clip8(s);
            }
        }
    }
}
