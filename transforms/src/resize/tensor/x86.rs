//! The float32 tensor resize's AVX2+FMA (8 lanes) and AVX-512 (16 lanes) kernels.
//!
//! Each output value is computed as the portable kernels compute it: `t0 w0`, then
//! `tk wk + acc` fused, in tap order. The vectors hold independent outputs, never parts of one
//! sum, so every sum is the same sequence of IEEE operations as the portable one's:
//!
//! - the vertical pass: the lanes are consecutive columns of one output row (they share the
//!   weights);
//! - the horizontal pass: the lanes are `L` consecutive input rows. A block of `L` rows is
//!   transposed into float32 columns (column `j` of the block: `L` contiguous floats), each
//!   output value of the block is one vector sum over the columns of its window, and `L`
//!   such vectors are transposed back into the `L` rows of the intermediate image. The
//!   windows are padded to a common tap count with zero weights: a zero tap adds `+-0` to the
//!   sum (no change), and a leading one makes the first real tap `fma(t0, w0, 0)`, which is
//!   `t0 w0` rounded once, the same value.
//!
//! Must not run on a CPU without the features each function names (the callers check
//! [`crate::cpu`]), nor read outside a slice: every load's range is checked (or asserted)
//! against the slice before the loop.

use std::arch::x86_64::*;

use super::{to_u8, Sample};
use crate::image::RgbView;

/// One round of a transpose, `y[i], y[i + n/2] = lo(x[2i], x[2i + 1]), hi(...)` (a macro:
/// see [`transpose16`] on closures).
macro_rules! unpack_round {
    ($x:expr, $lo:ident, $hi:ident) => {{
        let x = $x;
        let mut y = x;
        let half = x.len() / 2;
        for i in 0..half {
            y[i] = $lo(x[2 * i], x[2 * i + 1]);
            y[i + half] = $hi(x[2 * i], x[2 * i + 1]);
        }
        y
    }};
}

/// The horizontal pass's windows, padded: output `i` reads the `taps` input columns from
/// `start[i]` with the weights `weights[i * taps..(i + 1) * taps]`.
///
/// Invariant: `start[i] + taps <= in_size` (checked by [`Padded::check`]).
pub(super) struct Padded<'a> {
    pub(super) taps: usize,
    pub(super) start: &'a [u32],
    pub(super) weights: &'a [f32],
}

impl Padded<'_> {
    /// Panics unless the windows of `outputs` outputs fit `in_size` inputs.
    fn check(&self, in_size: usize, outputs: usize) {
        assert!(self.taps >= 1 && self.start.len() >= outputs);
        assert!(self.weights.len() >= outputs * self.taps);
        assert!(self.start[..outputs]
            .iter()
            .all(|&s| s as usize + self.taps <= in_size));
    }
}

/// Input rows `y0..y0 + L` of `rows` (the last one repeated past `n_rows`).
fn block_rows<'a, const L: usize>(
    rows: &impl Fn(usize) -> &'a [u8],
    y0: usize,
    n_rows: usize,
) -> [&'a [u8]; L] {
    std::array::from_fn(|r| rows((y0 + r).min(n_rows - 1)))
}

/// The horizontal pass with 16 lanes: into `ring = (mid, row_len, cap)`, row `y` (`row_len =
/// 3 out_w` floats) in slot `y % cap` (`cap` a multiple of 16), from row `y` of `src`, for
/// every row, calling `done(mid, n)` when the first `n` rows are complete. `cols` is scratch.
///
/// # Safety
/// The CPU must have AVX-512 F and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn horizontal16(
    src: RgbView<'_>,
    pad: &Padded<'_>,
    cols: &mut Vec<f32>,
    (mid, row_len, cap): (&mut [f32], usize, usize),
    done: &mut dyn FnMut(&[f32], usize),
) {
    let (n_rows, in_vals) = (src.height() as usize, 3 * src.width() as usize);
    let rows = |y: usize| src.row(y as u32);
    const L: usize = 16;
    pad.check(in_vals / 3, row_len / 3);
    // Blocks start at multiples of L, which `cap` is: a block's rows never wrap.
    assert!(cap % 16 == 0 && cap > 0 && mid.len() >= cap * row_len);
    if cols.len() < in_vals * L {
        cols.resize(in_vals * L, 0.0);
    }
    let cols = &mut cols[..in_vals * L];
    for y0 in (0..n_rows).step_by(L) {
        let block = block_rows::<L>(&rows, y0, n_rows);
        assert!(block.iter().all(|r| r.len() >= in_vals));
        let mut j0 = 0;
        while j0 + 16 <= in_vals {
            // SAFETY: AVX2 (the caller's); every row holds `j0 + 16 <= in_vals` bytes and
            // `cols` `in_vals * L` floats.
            unsafe { transpose_bytes16(&block, j0, cols) };
            j0 += 16;
        }
        for j in j0..in_vals {
            for (r, row) in block.iter().enumerate() {
                cols[j * L + r] = f32::from(row[j]);
            }
        }
        let n = (n_rows - y0).min(L);
        let slot = y0 % cap;
        let out = &mut mid[slot * row_len..(slot + n) * row_len];
        // SAFETY: the features (the caller's); `pad` checked against `in_vals / 3` inputs
        // (`cols` holds `in_vals * L` floats) and `row_len / 3` outputs above.
        with_taps!(pad.taps, |T| unsafe {
            block16::<T>(cols, pad, n, out, row_len)
        });
        done(mid, y0 + n);
    }
}

/// The output rows `out` (`n` of them, `row_len` floats each) of the 16 input rows in `cols`:
/// 16 output pixels (48 values, three vectors of 16 rows per pixel) at a time, transposed
/// into the rows 16 values at a time.
///
/// # Safety
/// The CPU must have AVX-512 F and FMA; `TAPS` is 0 or `pad.taps`, and [`Padded::check`]
/// passed for `cols.len() / 48` inputs and `row_len / 3` outputs (the loads are unchecked).
#[inline(always)]
unsafe fn block16<const TAPS: usize>(
    cols: &[f32],
    pad: &Padded<'_>,
    n: usize,
    out: &mut [f32],
    row_len: usize,
) {
    const L: usize = 16;
    let taps = if TAPS == 0 { pad.taps } else { TAPS };
    debug_assert_eq!(taps, pad.taps);
    let out_w = row_len / 3;
    let (cols_p, starts, weights) = (cols.as_ptr(), pad.start.as_ptr(), pad.weights.as_ptr());
    // Every group of pixels writes the vectors it reads back (stale ones past a short
    // last group are never read).
    // SAFETY: register-only.
    let mut acc = [unsafe { _mm512_setzero_ps() }; 3 * L];
    let mut x0 = 0;
    while x0 < out_w {
        let np = (out_w - x0).min(L);
        for (i, a) in acc.chunks_exact_mut(3).take(np).enumerate() {
            let x = x0 + i;
            // SAFETY: AVX-512 F and FMA (the callers'); `x < out_w`, so (the contract) output `x`'s
            // `taps` weights exist and its window's columns `3 start..3 (start + taps)`, the
            // `48 taps` floats from `p`, lie in `cols`: tap k of channel c reads the 16
            // floats at 48 k + 16 c.
            unsafe {
                let p = cols_p.add(3 * *starts.add(x) as usize * L);
                let ws = weights.add(x * taps);
                let w = _mm512_set1_ps(*ws);
                let mut s = [w; 3];
                for (c, s) in s.iter_mut().enumerate() {
                    *s = _mm512_mul_ps(_mm512_loadu_ps(p.add(L * c)), w);
                }
                for k in 1..taps {
                    let w = _mm512_set1_ps(*ws.add(k));
                    for (c, s) in s.iter_mut().enumerate() {
                        *s = _mm512_fmadd_ps(_mm512_loadu_ps(p.add(3 * L * k + L * c)), w, *s);
                    }
                }
                for (a, s) in a.iter_mut().zip(s) {
                    *a = s;
                }
            }
        }
        // Values 3 x0 + 16 g.. in vectors 16 g..: the rows' 16 floats there, transposed.
        let nv = 3 * np;
        for g in 0..3 {
            let (v0, m) = (3 * x0 + L * g, nv.saturating_sub(L * g).min(L));
            if m == 0 {
                break;
            }
            let Ok(vecs) = <&mut [__m512; L]>::try_from(&mut acc[L * g..L * (g + 1)]) else {
                break;
            };
            if m == L {
                transpose16(vecs);
                for (r, v) in vecs[..n].iter().enumerate() {
                    let dst = &mut out[r * row_len + v0..][..L];
                    // SAFETY: `dst` holds 16 floats.
                    unsafe { _mm512_storeu_ps(dst.as_mut_ptr(), *v) };
                }
            } else {
                let mut tmp = [[0.0f32; L]; L];
                for (t, v) in tmp.iter_mut().zip(&vecs[..m]) {
                    // SAFETY: `t` holds 16 floats.
                    unsafe { _mm512_storeu_ps(t.as_mut_ptr(), *v) };
                }
                for r in 0..n {
                    for (i, t) in tmp[..m].iter().enumerate() {
                        out[r * row_len + v0 + i] = t[r];
                    }
                }
            }
        }
        x0 += L;
    }
}

/// `cols[(j0 + i) * 16 + r] = rows[r][j0 + i]` as floats, for `i, r < 16`: a 16x16 byte
/// transpose (four rounds of unpacks), then each column widened to 16 floats.
///
/// # Safety
/// The CPU must have AVX-512 F; every row holds `j0 + 16` bytes, `cols` `(j0 + 16) * 16`
/// floats.
#[target_feature(enable = "avx512f,avx2")]
unsafe fn transpose_bytes16(rows: &[&[u8]; 16], j0: usize, cols: &mut [f32]) {
    debug_assert!(cols.len() >= (j0 + 16) * 16);
    // SAFETY: the loads and stores stay in the ranges the contract states.
    unsafe {
        let mut x = [_mm_setzero_si128(); 16];
        for (v, row) in x.iter_mut().zip(rows) {
            *v = _mm_loadu_si128(row.as_ptr().add(j0).cast());
        }
        let x = unpack_round!(x, _mm_unpacklo_epi8, _mm_unpackhi_epi8);
        let x = unpack_round!(x, _mm_unpacklo_epi16, _mm_unpackhi_epi16);
        let x = unpack_round!(x, _mm_unpacklo_epi32, _mm_unpackhi_epi32);
        let x = unpack_round!(x, _mm_unpacklo_epi64, _mm_unpackhi_epi64);
        // After four rounds, vector i holds column bitreverse4(i) of the 16 rows.
        for (i, v) in x.iter().enumerate() {
            let j = j0 + BITREV4[i];
            let f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(*v));
            _mm512_storeu_ps(cols.as_mut_ptr().add(j * 16), f);
        }
    }
}

/// The 4-bit reversal of the index.
const BITREV4: [usize; 16] = [0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15];

/// Transposes the 16x16 floats of `r` (row `i` in `r[i]`) in place. (Plain loops, no
/// closures: a closure is not compiled with its caller's target features, and its intrinsics
/// would be calls.)
#[inline(always)]
fn transpose16(r: &mut [__m512; 16]) {
    // SAFETY: register-only AVX-512 F instructions; the callers run with AVX-512 F.
    unsafe {
        let mut t = *r;
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        let mut u = t;
        for g in [0, 4, 8, 12] {
            u[g] = _mm512_shuffle_ps::<0x44>(t[g], t[g + 2]);
            u[g + 1] = _mm512_shuffle_ps::<0xEE>(t[g], t[g + 2]);
            u[g + 2] = _mm512_shuffle_ps::<0x44>(t[g + 1], t[g + 3]);
            u[g + 3] = _mm512_shuffle_ps::<0xEE>(t[g + 1], t[g + 3]);
        }
        let mut v = u;
        for g in [0, 8] {
            for q in 0..4 {
                v[g + q] = _mm512_shuffle_f32x4::<0x88>(u[g + q], u[g + q + 4]);
                v[g + q + 4] = _mm512_shuffle_f32x4::<0xDD>(u[g + q], u[g + q + 4]);
            }
        }
        for q in 0..8 {
            r[q] = _mm512_shuffle_f32x4::<0x88>(v[q], v[q + 8]);
            r[q + 8] = _mm512_shuffle_f32x4::<0xDD>(v[q], v[q + 8]);
        }
    }
}

/// The horizontal pass with 8 lanes; see [`horizontal8`].
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn horizontal8(
    src: RgbView<'_>,
    pad: &Padded<'_>,
    cols: &mut Vec<f32>,
    (mid, row_len, cap): (&mut [f32], usize, usize),
    done: &mut dyn FnMut(&[f32], usize),
) {
    let (n_rows, in_vals) = (src.height() as usize, 3 * src.width() as usize);
    let rows = |y: usize| src.row(y as u32);
    const L: usize = 8;
    pad.check(in_vals / 3, row_len / 3);
    // Blocks start at multiples of L, which `cap` is: a block's rows never wrap.
    assert!(cap % 16 == 0 && cap > 0 && mid.len() >= cap * row_len);
    if cols.len() < in_vals * L {
        cols.resize(in_vals * L, 0.0);
    }
    let cols = &mut cols[..in_vals * L];
    for y0 in (0..n_rows).step_by(L) {
        let block = block_rows::<L>(&rows, y0, n_rows);
        assert!(block.iter().all(|r| r.len() >= in_vals));
        let mut j0 = 0;
        while j0 + 16 <= in_vals {
            // SAFETY: AVX2 (the caller's); every row holds `j0 + 16 <= in_vals` bytes and
            // `cols` `in_vals * L` floats.
            unsafe { transpose_bytes8(&block, j0, cols) };
            j0 += 16;
        }
        for j in j0..in_vals {
            for (r, row) in block.iter().enumerate() {
                cols[j * L + r] = f32::from(row[j]);
            }
        }
        let n = (n_rows - y0).min(L);
        let slot = y0 % cap;
        let out = &mut mid[slot * row_len..(slot + n) * row_len];
        // SAFETY: the features (the caller's); `pad` checked against `in_vals / 3` inputs
        // (`cols` holds `in_vals * L` floats) and `row_len / 3` outputs above.
        with_taps!(pad.taps, |T| unsafe {
            block8::<T>(cols, pad, n, out, row_len)
        });
        done(mid, y0 + n);
    }
}

/// The output rows of the 8 input rows in `cols`; see [`block16`].
///
/// # Safety
/// The CPU must have AVX2 and FMA; `TAPS` is 0 or `pad.taps`, and [`Padded::check`] passed
/// for `cols.len() / 24` inputs and `row_len / 3` outputs (the loads are unchecked).
#[inline(always)]
unsafe fn block8<const TAPS: usize>(
    cols: &[f32],
    pad: &Padded<'_>,
    n: usize,
    out: &mut [f32],
    row_len: usize,
) {
    const L: usize = 8;
    let taps = if TAPS == 0 { pad.taps } else { TAPS };
    debug_assert_eq!(taps, pad.taps);
    let out_w = row_len / 3;
    let (cols_p, starts, weights) = (cols.as_ptr(), pad.start.as_ptr(), pad.weights.as_ptr());
    // Every group of pixels writes the vectors it reads back (stale ones past a short
    // last group are never read).
    // SAFETY: register-only.
    let mut acc = [unsafe { _mm256_setzero_ps() }; 3 * L];
    let mut x0 = 0;
    while x0 < out_w {
        let np = (out_w - x0).min(L);
        for (i, a) in acc.chunks_exact_mut(3).take(np).enumerate() {
            let x = x0 + i;
            // SAFETY: AVX2 and FMA (the callers'); `x < out_w`, so (the contract) output `x`'s
            // `taps` weights exist and its window's columns `3 start..3 (start + taps)`, the
            // `24 taps` floats from `p`, lie in `cols`: tap k of channel c reads the 8
            // floats at 24 k + 8 c.
            unsafe {
                let p = cols_p.add(3 * *starts.add(x) as usize * L);
                let ws = weights.add(x * taps);
                let w = _mm256_set1_ps(*ws);
                let mut s = [w; 3];
                for (c, s) in s.iter_mut().enumerate() {
                    *s = _mm256_mul_ps(_mm256_loadu_ps(p.add(L * c)), w);
                }
                for k in 1..taps {
                    let w = _mm256_set1_ps(*ws.add(k));
                    for (c, s) in s.iter_mut().enumerate() {
                        *s = _mm256_fmadd_ps(_mm256_loadu_ps(p.add(3 * L * k + L * c)), w, *s);
                    }
                }
                for (a, s) in a.iter_mut().zip(s) {
                    *a = s;
                }
            }
        }
        // Values 3 x0 + 8 g.. in vectors 8 g..: the rows' 8 floats there, transposed.
        let nv = 3 * np;
        for g in 0..3 {
            let (v0, m) = (3 * x0 + L * g, nv.saturating_sub(L * g).min(L));
            if m == 0 {
                break;
            }
            let Ok(vecs) = <&mut [__m256; L]>::try_from(&mut acc[L * g..L * (g + 1)]) else {
                break;
            };
            if m == L {
                transpose8(vecs);
                for (r, v) in vecs[..n].iter().enumerate() {
                    let dst = &mut out[r * row_len + v0..][..L];
                    // SAFETY: `dst` holds 8 floats.
                    unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), *v) };
                }
            } else {
                let mut tmp = [[0.0f32; L]; L];
                for (t, v) in tmp.iter_mut().zip(&vecs[..m]) {
                    // SAFETY: `t` holds 8 floats.
                    unsafe { _mm256_storeu_ps(t.as_mut_ptr(), *v) };
                }
                for r in 0..n {
                    for (i, t) in tmp[..m].iter().enumerate() {
                        out[r * row_len + v0 + i] = t[r];
                    }
                }
            }
        }
        x0 += L;
    }
}

/// `cols[(j0 + i) * 8 + r] = rows[r][j0 + i]` as floats, for `i < 16`, `r < 8`: an 8x16 byte
/// transpose (three rounds of unpacks), each column widened to 8 floats.
///
/// # Safety
/// The CPU must have AVX2; every row holds `j0 + 16` bytes, `cols` `(j0 + 16) * 8` floats.
#[target_feature(enable = "avx2")]
unsafe fn transpose_bytes8(rows: &[&[u8]; 8], j0: usize, cols: &mut [f32]) {
    debug_assert!(cols.len() >= (j0 + 16) * 8);
    // SAFETY: the loads and stores stay in the ranges the contract states.
    unsafe {
        let mut x = [_mm_setzero_si128(); 8];
        for (v, row) in x.iter_mut().zip(rows) {
            *v = _mm_loadu_si128(row.as_ptr().add(j0).cast());
        }
        let x = unpack_round!(x, _mm_unpacklo_epi8, _mm_unpackhi_epi8);
        let x = unpack_round!(x, _mm_unpacklo_epi16, _mm_unpackhi_epi16);
        let x = unpack_round!(x, _mm_unpacklo_epi32, _mm_unpackhi_epi32);
        // After three rounds, the low (high) 8 bytes of vector i hold column
        // 2 bitreverse3(i) (+ 1) of the 8 rows.
        for (i, v) in x.iter().enumerate() {
            let j = j0 + 2 * BITREV3[i];
            let lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(*v));
            let hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(*v, *v)));
            _mm256_storeu_ps(cols.as_mut_ptr().add(j * 8), lo);
            _mm256_storeu_ps(cols.as_mut_ptr().add((j + 1) * 8), hi);
        }
    }
}

/// The 3-bit reversal of the index.
const BITREV3: [usize; 8] = [0, 4, 2, 6, 1, 5, 3, 7];

/// Transposes the 8x8 floats of `r` in place (plain loops: see [`transpose16`]).
#[inline(always)]
fn transpose8(r: &mut [__m256; 8]) {
    // SAFETY: register-only AVX instructions; the callers run with AVX2.
    unsafe {
        let mut t = *r;
        for i in 0..4 {
            t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        let mut u = t;
        for g in [0, 4] {
            u[g] = _mm256_shuffle_ps::<0x44>(t[g], t[g + 2]);
            u[g + 1] = _mm256_shuffle_ps::<0xEE>(t[g], t[g + 2]);
            u[g + 2] = _mm256_shuffle_ps::<0x44>(t[g + 1], t[g + 3]);
            u[g + 3] = _mm256_shuffle_ps::<0xEE>(t[g + 1], t[g + 3]);
        }
        for q in 0..4 {
            r[q] = _mm256_permute2f128_ps::<0x20>(u[q], u[q + 4]);
            r[q + 4] = _mm256_permute2f128_ps::<0x31>(u[q], u[q + 4]);
        }
    }
}

/// One output row of the vertical pass with 16 lanes: `dst[j] = to_u8(rows(0)[j] w0 +
/// ...)` for `j < dst.len()`, the sums in tap order.
///
/// # Safety
/// The CPU must have AVX-512 F and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn vertical16<'a, T: Sample + Lanes + 'a>(
    rows: impl Fn(usize) -> &'a [T],
    ws: &[f32],
    clamp: bool,
    dst: &mut [u8],
) {
    let len = dst.len();
    let taps = ws.len();
    let mut srcs: [&[T]; MAX_TAPS] = [&[]; MAX_TAPS];
    for (k, s) in srcs.iter_mut().enumerate().take(taps) {
        *s = rows(k);
    }
    assert!((1..=MAX_TAPS).contains(&taps) && srcs[..taps].iter().all(|r| r.len() >= len));
    let mut j = 0;
    // SAFETY: AVX-512 F and FMA (the caller's); every load and store is of `j..j + 16`
    // (`j + 64` in the unrolled loop) within `len`, which every row and `dst` hold.
    unsafe {
        while j + 64 <= len {
            let w0 = _mm512_set1_ps(ws[0]);
            let mut acc = [w0; 4];
            for (q, a) in acc.iter_mut().enumerate() {
                *a = _mm512_mul_ps(T::load16(srcs[0], j + 16 * q), w0);
            }
            for (k, &w) in ws.iter().enumerate().skip(1) {
                let w = _mm512_set1_ps(w);
                for (q, a) in acc.iter_mut().enumerate() {
                    *a = _mm512_fmadd_ps(T::load16(srcs[k], j + 16 * q), w, *a);
                }
            }
            for (q, a) in acc.iter().enumerate() {
                store_u8_16(*a, &mut dst[j + 16 * q..j + 16 * q + 16]);
            }
            j += 64;
        }
        while j + 16 <= len {
            let mut acc = _mm512_mul_ps(T::load16(srcs[0], j), _mm512_set1_ps(ws[0]));
            for (k, &w) in ws.iter().enumerate().skip(1) {
                acc = _mm512_fmadd_ps(T::load16(srcs[k], j), _mm512_set1_ps(w), acc);
            }
            store_u8_16(acc, &mut dst[j..j + 16]);
            j += 16;
        }
    }
    for (jj, o) in dst.iter_mut().enumerate().skip(j) {
        let mut acc = srcs[0][jj].value() * ws[0];
        for (k, &w) in ws.iter().enumerate().skip(1) {
            acc = srcs[k][jj].value().mul_add(w, acc);
        }
        *o = to_u8(acc, clamp);
    }
}

/// One output row of the vertical pass with 8 lanes; see [`vertical16`].
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn vertical8<'a, T: Sample + Lanes + 'a>(
    rows: impl Fn(usize) -> &'a [T],
    ws: &[f32],
    clamp: bool,
    dst: &mut [u8],
) {
    let len = dst.len();
    let taps = ws.len();
    let mut srcs: [&[T]; MAX_TAPS] = [&[]; MAX_TAPS];
    for (k, s) in srcs.iter_mut().enumerate().take(taps) {
        *s = rows(k);
    }
    assert!((1..=MAX_TAPS).contains(&taps) && srcs[..taps].iter().all(|r| r.len() >= len));
    let mut j = 0;
    // SAFETY: AVX2 and FMA (the caller's); every load and store is of `j..j + 8` (`j + 32`
    // in the unrolled loop) within `len`, which every row and `dst` hold.
    unsafe {
        while j + 32 <= len {
            let w0 = _mm256_set1_ps(ws[0]);
            let mut acc = [w0; 4];
            for (q, a) in acc.iter_mut().enumerate() {
                *a = _mm256_mul_ps(T::load8(srcs[0], j + 8 * q), w0);
            }
            for (k, &w) in ws.iter().enumerate().skip(1) {
                let w = _mm256_set1_ps(w);
                for (q, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(T::load8(srcs[k], j + 8 * q), w, *a);
                }
            }
            for (q, a) in acc.iter().enumerate() {
                store_u8_8(*a, &mut dst[j + 8 * q..j + 8 * q + 8]);
            }
            j += 32;
        }
        while j + 8 <= len {
            let mut acc = _mm256_mul_ps(T::load8(srcs[0], j), _mm256_set1_ps(ws[0]));
            for (k, &w) in ws.iter().enumerate().skip(1) {
                acc = _mm256_fmadd_ps(T::load8(srcs[k], j), _mm256_set1_ps(w), acc);
            }
            store_u8_8(acc, &mut dst[j..j + 8]);
            j += 8;
        }
    }
    for (jj, o) in dst.iter_mut().enumerate().skip(j) {
        let mut acc = srcs[0][jj].value() * ws[0];
        for (k, &w) in ws.iter().enumerate().skip(1) {
            acc = srcs[k][jj].value().mul_add(w, acc);
        }
        *o = to_u8(acc, clamp);
    }
}

/// The vertical pass's rows the SIMD kernels take; more run the portable kernel.
pub(super) const MAX_TAPS: usize = 64;

/// [`to_u8`] of 16 sums into `dst` (16 bytes): rounded half to even, clamped to `[0, 255]`
/// (the clamp before the rounding, where torch has it, gives the same bytes: the bounds are
/// integers and rounding is monotonic).
#[inline(always)]
fn store_u8_16(v: __m512, dst: &mut [u8]) {
    assert!(dst.len() >= 16);
    // SAFETY: AVX-512 F (the callers'); `dst` holds 16 bytes.
    unsafe {
        let i = _mm512_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
        let i = _mm512_max_epi32(i, _mm512_setzero_si512());
        _mm_storeu_si128(dst.as_mut_ptr().cast(), _mm512_cvtusepi32_epi8(i));
    }
}

/// [`to_u8`] of 8 sums into `dst` (8 bytes); see [`store_u8_16`].
#[inline(always)]
fn store_u8_8(v: __m256, dst: &mut [u8]) {
    assert!(dst.len() >= 8);
    // SAFETY: AVX2 (the callers'); `dst` holds 8 bytes.
    unsafe {
        let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
        let r = _mm256_min_ps(_mm256_max_ps(r, _mm256_setzero_ps()), _mm256_set1_ps(255.0));
        let i = _mm256_cvtps_epi32(r);
        // Values in [0, 255]: the packs keep them; lane l's first 4 bytes are values 4l..4l+4.
        let p = _mm256_packus_epi16(_mm256_packus_epi32(i, i), _mm256_setzero_si256());
        let lo = _mm256_castsi256_si128(p);
        let hi = _mm256_extracti128_si256::<1>(p);
        _mm_storel_epi64(dst.as_mut_ptr().cast(), _mm_unpacklo_epi32(lo, hi));
    }
}

/// Loading 8 or 16 samples as floats.
pub(super) trait Lanes: Copy {
    /// `row[j..j + 16]` as floats.
    ///
    /// # Safety
    /// AVX-512 F; `j + 16 <= row.len()`.
    unsafe fn load16(row: &[Self], j: usize) -> __m512;
    /// `row[j..j + 8]` as floats.
    ///
    /// # Safety
    /// AVX2; `j + 8 <= row.len()`.
    unsafe fn load8(row: &[Self], j: usize) -> __m256;
}

impl Lanes for f32 {
    #[inline(always)]
    unsafe fn load16(row: &[f32], j: usize) -> __m512 {
        // SAFETY: the contract's.
        unsafe { _mm512_loadu_ps(row.as_ptr().add(j)) }
    }
    #[inline(always)]
    unsafe fn load8(row: &[f32], j: usize) -> __m256 {
        // SAFETY: the contract's.
        unsafe { _mm256_loadu_ps(row.as_ptr().add(j)) }
    }
}

impl Lanes for u8 {
    #[inline(always)]
    unsafe fn load16(row: &[u8], j: usize) -> __m512 {
        // SAFETY: the contract's.
        unsafe {
            let b = _mm_loadu_si128(row.as_ptr().add(j).cast());
            _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b))
        }
    }
    #[inline(always)]
    unsafe fn load8(row: &[u8], j: usize) -> __m256 {
        // SAFETY: the contract's.
        unsafe {
            let b = _mm_loadl_epi64(row.as_ptr().add(j).cast());
            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposes_are_transposes() {
        if !crate::cpu::avx2_fma() {
            return;
        }
        // SAFETY: register-only, of the features checked above.
        let mut r8: [__m256; 8] = [unsafe { _mm256_setzero_ps() }; 8];
        let mut m8 = [[0.0f32; 8]; 8];
        for (i, row) in m8.iter_mut().enumerate() {
            for (j, v) in row.iter_mut().enumerate() {
                *v = (i * 8 + j) as f32;
            }
            // SAFETY: AVX (checked above); `row` holds 8 floats.
            r8[i] = unsafe { _mm256_loadu_ps(row.as_ptr()) };
        }
        transpose8(&mut r8);
        for (i, v) in r8.iter().enumerate() {
            let mut out = [0.0f32; 8];
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), *v) };
            let want: Vec<f32> = (0..8).map(|j| (j * 8 + i) as f32).collect();
            assert_eq!(&out[..], &want[..], "row {i}");
        }
        let rows: Vec<Vec<u8>> = (0..16)
            .map(|r| (0..100).map(|j| (r * 100 + j * 7) as u8).collect())
            .collect();
        let block8: [&[u8]; 8] = std::array::from_fn(|r| &rows[r][..]);
        let mut cols = vec![0.0f32; 100 * 8];
        // SAFETY: AVX2 (checked above); rows of 100 bytes, 100 * 8 floats.
        unsafe { transpose_bytes8(&block8, 16, &mut cols) };
        for j in 16..32 {
            for r in 0..8 {
                assert_eq!(cols[j * 8 + r], f32::from(rows[r][j]), "column {j} row {r}");
            }
        }
        if !crate::cpu::avx512_bw_vl() {
            return;
        }
        // SAFETY: register-only, of the features checked above.
        let mut r16: [__m512; 16] = [unsafe { _mm512_setzero_ps() }; 16];
        let mut m16 = [[0.0f32; 16]; 16];
        for (i, row) in m16.iter_mut().enumerate() {
            for (j, v) in row.iter_mut().enumerate() {
                *v = (i * 16 + j) as f32;
            }
            // SAFETY: AVX-512 F (checked above); `row` holds 16 floats.
            r16[i] = unsafe { _mm512_loadu_ps(row.as_ptr()) };
        }
        transpose16(&mut r16);
        for (i, v) in r16.iter().enumerate() {
            let mut out = [0.0f32; 16];
            // SAFETY: as above.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr(), *v) };
            let want: Vec<f32> = (0..16).map(|j| (j * 16 + i) as f32).collect();
            assert_eq!(&out[..], &want[..], "row {i}");
        }
        let block16: [&[u8]; 16] = std::array::from_fn(|r| &rows[r][..]);
        let mut cols = vec![0.0f32; 100 * 16];
        // SAFETY: AVX-512 F (checked above); rows of 100 bytes, 100 * 16 floats.
        unsafe {
            transpose_bytes16(&block16, 16, &mut cols);
            transpose_bytes16(&block16, 80, &mut cols);
        }
        for j in (16..32).chain(80..96) {
            for r in 0..16 {
                assert_eq!(
                    cols[j * 16 + r],
                    f32::from(rows[r][j]),
                    "column {j} row {r}"
                );
            }
        }
    }
}
