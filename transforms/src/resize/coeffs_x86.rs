//! [`Axis::output`] for four (AVX2) or eight (AVX-512) outputs at a time.
//!
//! Must not reorder or fuse any f64 operation of Pillow's (no FMA, no reciprocal in place of a
//! division): each lane must compute the same weights as the scalar [`Axis::output`], bit for
//! bit, or the resize stops being Pillow's.

use std::arch::x86_64::*;

use super::{Axis, RowSums, PRECISION_BITS};

/// [`super::min_max`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn min_max(w: &[i32]) -> (i32, i32) {
    super::min_max(w)
}

/// [`super::pairs`] compiled for AVX-512 (16 weights a step).
///
/// # Safety
/// The CPU must support AVX-512 F and BW.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn pairs512(w: &[i32], pair: &mut [i32]) {
    super::pairs(w, pair)
}

/// Window widths (`stride`) handled here; wider ones (downscales beyond 15x) go scalar.
const MAX_STRIDE: usize = 32;

/// Whether [`compute`] and [`compute512`] take `axis` into these tables: windows they have
/// lanes for, positions their i32 conversions hold, and one `stride` of weights per output.
fn takes(axis: &Axis, start: &[u32], count: &[u32], weights: &[i32]) -> bool {
    let n = start.len();
    axis.stride <= MAX_STRIDE
        && axis.in_size < 1 << 24
        && count.len() == n
        && weights.len() == n * axis.stride
}

/// [`compute`] with eight lanes: fills outputs `0..8 * floor(n / 8)` and returns how many,
/// and their sums.
///
/// # Safety
/// The CPU must support AVX-512 F and VL.
#[target_feature(enable = "avx512f,avx512vl")]
pub(super) unsafe fn compute512(
    axis: &Axis,
    start: &mut [u32],
    count: &mut [u32],
    weights: &mut [i32],
) -> (usize, RowSums) {
    if !takes(axis, start, count, weights) {
        return (0, RowSums::default());
    }
    let (stride, n) = (axis.stride, start.len());
    let groups = n / 8;
    // Per lane, the largest sums of |w| and of w of its outputs: at most `MAX_STRIDE` taps
    // of at most 2^22 (normalized, non-negative triangle weights), no overflow.
    let (mut abs_max, mut sum_max) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    let scale = _mm512_set1_pd(axis.scale);
    let support = _mm512_set1_pd(axis.support);
    let ss = _mm512_set1_pd(axis.ss);
    let half = _mm512_set1_pd(0.5);
    let one = _mm512_set1_pd(1.0);
    let zero = _mm512_setzero_pd();
    let prec = _mm512_set1_pd(f64::from(1u32 << PRECISION_BITS));
    let in_max = _mm256_set1_epi32(axis.in_size as i32);
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let mut w = [_mm512_setzero_pd(); MAX_STRIDE];
    let mut fixed = [[0i32; 8]; MAX_STRIDE];
    for g in 0..groups {
        let xx = _mm512_cvtepi32_pd(_mm256_add_epi32(lane, _mm256_set1_epi32(8 * g as i32)));
        let center = _mm512_mul_pd(_mm512_add_pd(xx, half), scale);
        let lo = _mm512_cvttpd_epi32(_mm512_add_pd(_mm512_sub_pd(center, support), half));
        let xmin = _mm256_max_epi32(lo, _mm256_setzero_si256());
        let hi = _mm512_cvttpd_epi32(_mm512_add_pd(_mm512_add_pd(center, support), half));
        let xmax = _mm256_min_epi32(hi, in_max);
        let cnt = _mm256_sub_epi32(xmax, xmin);
        let cnt = _mm256_min_epi32(
            _mm256_max_epi32(cnt, _mm256_set1_epi32(1)),
            _mm256_set1_epi32(stride as i32),
        );
        let xmin = _mm256_min_epi32(xmin, _mm256_sub_epi32(in_max, _mm256_set1_epi32(1)));
        let first = 8 * g;
        // SAFETY: outputs `first..first + 8` exist (`g < n / 8`); 32 bytes each.
        unsafe {
            _mm256_storeu_si256(start[first..first + 8].as_mut_ptr().cast(), xmin);
            _mm256_storeu_si256(count[first..first + 8].as_mut_ptr().cast(), cnt);
        }
        // Past every lane's window the weights are 0: skip those taps (adding `+0.0` to
        // the sum changes nothing) and their divisions (`0 / ww`).
        let live = count[first..first + 8].iter().copied().max().unwrap_or(1) as usize;
        let xminf = _mm512_cvtepi32_pd(xmin);
        let mut ww = zero;
        for (k, wk) in w.iter_mut().enumerate().take(live) {
            // ((xmin + k) - center + 0.5) * ss, then the triangle, zero past the window.
            let x = _mm512_add_pd(xminf, _mm512_set1_pd(k as f64));
            let arg = _mm512_mul_pd(_mm512_add_pd(_mm512_sub_pd(x, center), half), ss);
            let a = _mm512_abs_pd(arg);
            let inside = _mm512_cmp_pd_mask::<_CMP_LT_OQ>(a, one);
            let live = _mm256_cmpgt_epi32_mask(cnt, _mm256_set1_epi32(k as i32));
            *wk = _mm512_maskz_sub_pd(inside & live, one, a);
            ww = _mm512_add_pd(ww, *wk);
        }
        let nonzero = _mm512_cmp_pd_mask::<_CMP_NEQ_UQ>(ww, zero);
        let (mut abs_sum, mut sum) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for (wk, out) in w.iter().zip(fixed.iter_mut()).take(live) {
            let q = _mm512_mask_div_pd(*wk, nonzero, *wk, ww);
            let scaled = _mm512_mul_pd(q, prec);
            let neg = _mm512_cmp_pd_mask::<_CMP_LT_OQ>(q, zero);
            let offset = _mm512_mask_blend_pd(neg, half, _mm512_set1_pd(-0.5));
            let k = _mm512_cvttpd_epi32(_mm512_add_pd(offset, scaled));
            abs_sum = _mm256_add_epi32(abs_sum, _mm256_abs_epi32(k));
            sum = _mm256_add_epi32(sum, k);
            // SAFETY: `out` is 32 writable bytes.
            unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), k) };
        }
        abs_max = _mm256_max_epi32(abs_max, abs_sum);
        sum_max = _mm256_max_epi32(sum_max, sum);
        // Tap-major lanes to output-major rows with plain stores: a scatter is slower
        // (microcoded on Zen 4). `weights` was zeroed: only the live columns need writing.
        let group = &mut weights[first * stride..(first + 8) * stride];
        for (j, row) in group.chunks_exact_mut(stride).enumerate() {
            for (dst, f) in row.iter_mut().zip(&fixed[..live]) {
                *dst = f[j];
            }
        }
    }
    (8 * groups, lane_max(abs_max, sum_max))
}

/// The [`RowSums`] of per-lane maxima.
#[target_feature(enable = "avx2")]
fn lane_max(abs_max: __m256i, sum_max: __m256i) -> RowSums {
    let (mut a, mut s) = ([0i32; 8], [0i32; 8]);
    // SAFETY: `a` and `s` are 32 writable bytes each.
    unsafe {
        _mm256_storeu_si256(a.as_mut_ptr().cast(), abs_max);
        _mm256_storeu_si256(s.as_mut_ptr().cast(), sum_max);
    }
    RowSums {
        abs_max: i64::from(a.into_iter().max().unwrap_or(0)),
        sum_max: i64::from(s.into_iter().max().unwrap_or(0)),
    }
}

/// Fills outputs `0..4 * floor(n / 4)` (n = `start.len()`) and returns how many, and their
/// sums; 0 when the axis is outside what the lanes handle. `count` is as long as `start`, `weights`
/// holds `stride` weights per output, all 0 on entry.
///
/// Each lane runs [`Axis::output`]'s f64 operations in its order (IEEE operations are
/// the same in every lane; the window's padding adds `+0.0` to the sum and divides
/// `0.0`), so the weights are identical.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn compute(
    axis: &Axis,
    start: &mut [u32],
    count: &mut [u32],
    weights: &mut [i32],
) -> (usize, RowSums) {
    if !takes(axis, start, count, weights) {
        return (0, RowSums::default());
    }
    let (stride, n) = (axis.stride, start.len());
    let groups = n / 4;
    // As in `compute512`.
    let (mut abs_max, mut sum_max) = (_mm_setzero_si128(), _mm_setzero_si128());
    let scale = _mm256_set1_pd(axis.scale);
    let support = _mm256_set1_pd(axis.support);
    let ss = _mm256_set1_pd(axis.ss);
    let half = _mm256_set1_pd(0.5);
    let one = _mm256_set1_pd(1.0);
    let sign = _mm256_set1_pd(-0.0);
    let prec = _mm256_set1_pd(f64::from(1u32 << PRECISION_BITS));
    let in_max = _mm_set1_epi32(axis.in_size as i32);
    let mut w = [_mm256_setzero_pd(); MAX_STRIDE];
    let mut fixed = [[0i32; 4]; MAX_STRIDE];
    for g in 0..groups {
        let x0 = 4 * g as i32;
        let xx = _mm256_cvtepi32_pd(_mm_setr_epi32(x0, x0 + 1, x0 + 2, x0 + 3));
        let center = _mm256_mul_pd(_mm256_add_pd(xx, half), scale);
        let lo = _mm256_cvttpd_epi32(_mm256_add_pd(_mm256_sub_pd(center, support), half));
        let xmin = _mm_max_epi32(lo, _mm_setzero_si128());
        let hi = _mm256_cvttpd_epi32(_mm256_add_pd(_mm256_add_pd(center, support), half));
        let xmax = _mm_min_epi32(hi, in_max);
        let cnt = _mm_sub_epi32(xmax, xmin);
        let cnt = _mm_min_epi32(
            _mm_max_epi32(cnt, _mm_set1_epi32(1)),
            _mm_set1_epi32(stride as i32),
        );
        let xmin = _mm_min_epi32(xmin, _mm_sub_epi32(in_max, _mm_set1_epi32(1)));
        let xminf = _mm256_cvtepi32_pd(xmin);
        let mut ww = _mm256_setzero_pd();
        for (k, wk) in w.iter_mut().enumerate().take(stride) {
            // ((xmin + k) - center + 0.5) * ss, then the triangle, zero past the window.
            let x = _mm256_add_pd(xminf, _mm256_set1_pd(k as f64));
            let arg = _mm256_mul_pd(_mm256_add_pd(_mm256_sub_pd(x, center), half), ss);
            let a = _mm256_andnot_pd(sign, arg);
            let inside = _mm256_cmp_pd::<_CMP_LT_OQ>(a, one);
            let f = _mm256_and_pd(inside, _mm256_sub_pd(one, a));
            let live = _mm_cmpgt_epi32(cnt, _mm_set1_epi32(k as i32));
            let live = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(live));
            *wk = _mm256_and_pd(f, live);
            ww = _mm256_add_pd(ww, *wk);
        }
        let nonzero = _mm256_cmp_pd::<_CMP_NEQ_UQ>(ww, _mm256_setzero_pd());
        let (mut s, mut c) = ([0i32; 4], [0i32; 4]);
        // SAFETY: `s` and `c` are 16 writable bytes each.
        unsafe {
            _mm_storeu_si128(s.as_mut_ptr().cast(), xmin);
            _mm_storeu_si128(c.as_mut_ptr().cast(), cnt);
        }
        // Past every lane's window the weights are 0 (`0 / ww`): skip those divisions.
        let live = c.iter().copied().max().unwrap_or(1) as usize;
        let (mut abs_sum, mut sum) = (_mm_setzero_si128(), _mm_setzero_si128());
        for (wk, out) in w.iter().zip(fixed.iter_mut()).take(live) {
            let q = _mm256_blendv_pd(*wk, _mm256_div_pd(*wk, ww), nonzero);
            let scaled = _mm256_mul_pd(q, prec);
            let neg = _mm256_cmp_pd::<_CMP_LT_OQ>(q, _mm256_setzero_pd());
            let offset = _mm256_blendv_pd(half, _mm256_set1_pd(-0.5), neg);
            let k = _mm256_cvttpd_epi32(_mm256_add_pd(offset, scaled));
            abs_sum = _mm_add_epi32(abs_sum, _mm_abs_epi32(k));
            sum = _mm_add_epi32(sum, k);
            // SAFETY: `out` is 16 writable bytes.
            unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), k) };
        }
        abs_max = _mm_max_epi32(abs_max, abs_sum);
        sum_max = _mm_max_epi32(sum_max, sum);
        // `weights` was zeroed: only the live columns need writing.
        for j in 0..4 {
            let xx = 4 * g + j;
            start[xx] = s[j] as u32;
            count[xx] = c[j] as u32;
            let row = &mut weights[xx * stride..xx * stride + live];
            for (dst, f) in row.iter_mut().zip(&fixed) {
                *dst = f[j];
            }
        }
    }
    let wide = |v| _mm256_zextsi128_si256(v);
    (4 * groups, lane_max(wide(abs_max), wide(sum_max)))
}
