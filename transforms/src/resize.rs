//! Pillow's antialiased bilinear resize (`Image.resize(size, Image.BILINEAR)`), bit-exact with
//! Pillow 13.
//!
//! The algorithm is Pillow's `libImaging/Resample.c` for 8-bit images: per axis, a triangle
//! filter widened by the downscale factor, weights normalized in f64 and then quantized to
//! fixed point with 22 fractional bits; two separable passes, each rounding to u8; a pass is
//! skipped when its dimension does not change. Pillow 13 runs the vertical pass first when the
//! height shrinks by more than twice as much as the width (`dy > 0 && dy > 2 dx`), the
//! horizontal pass first otherwise, and then over only the source rows the vertical pass reads.
//!
//! Integer sums are exact, so the order of additions is free and the kernels use that (padding
//! windows with zero weights, splitting weights into 16-bit parts for `pmaddwd`/`vpdpwssd`
//! and bytes for `vpdpbusd`, offsetting the pixels by 128 and cancelling that in the start
//! value); every f64 operation in the coefficients and every rounding to u8 between the passes
//! must stay exactly Pillow's (the coefficients are computed 4 or 8 outputs at a time, with the
//! same IEEE operations in the same order per lane). Kernels: portable, AVX2, AVX-512 (chosen
//! at run time, [`SimdLevel`]); the SIMD ones are checked against the portable ones and all
//! against Pillow.
//!
//! Must not allocate per call in the steady state: [`Resizer`] owns the coefficient tables and
//! the intermediate buffers and only grows them. Must not touch anything but the pixels it is
//! given: crops are views, and what happens to an output row (copy, flip, to-tensor) is the
//! caller's [`RowSink`].

use crate::cpu;
use crate::error::{Error, Result};
use crate::image::{RgbImage, RgbView};

/// Fractional bits of the fixed-point weights: Pillow's `PRECISION_BITS` (32 - 8 - 2).
const PRECISION_BITS: u32 = 32 - 8 - 2;
/// Added to every sum so that the final shift rounds to nearest.
const HALF: i32 = 1 << (PRECISION_BITS - 1);

/// `$body` with the const `$t` set to `$taps` when that is 2 to 8 (the vertical windows of
/// upscales and of downscales up to about 3.5x), else to 0 (meaning: any count, read at run
/// time). A vertical kernel compiled for a constant count unrolls its tap loop and keeps the
/// weights and row pointers in registers. Alone, on one hot ring with a fixed count, the
/// run-time loop was 1.3x slower (its per-tap loads and branches). In the pipeline it cost
/// more: `train_ratio`, 4 runs, the fused kernel after a full decode at 0.117-0.133 of a decode
/// with constant counts against 0.141-0.147 with the loop, likely because the count changes
/// between output rows there and the loop's exit branch is then mispredicted every 32 values
/// (no PMU on the machine to count it). The horizontal windows' padding uses it too, so that
/// each output's weights copy without a call to `memcpy`.
macro_rules! with_taps {
    ($taps:expr, |$t:ident| $body:expr) => {
        with_taps!(@counts $taps, $t, $body, 2 3 4 5 6 7 8)
    };
    (@counts $taps:expr, $t:ident, $body:expr, $($n:literal)*) => {
        match $taps {
            $($n => {
                const $t: usize = $n;
                $body
            })*
            _ => {
                const $t: usize = 0;
                $body
            }
        }
    };
}

/// Pillow's `clip8`: the fixed-point sum back to a byte, clamped.
#[inline(always)]
fn clip8(acc: i32) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Pillow's bilinear (triangle) filter, support 1.
#[inline(always)]
fn bilinear_filter(x: f64) -> f64 {
    let x = x.abs();
    if x < 1.0 {
        1.0 - x
    } else {
        0.0
    }
}

/// The fixed-point resampling weights of one axis (`precompute_coeffs` followed by
/// `normalize_coeffs_8bpc` in Pillow), cached for the last `(in_size, out_size)`, plus the
/// same weights laid out for the kernels.
#[derive(Clone, Debug, Default)]
pub struct AxisCoeffs {
    in_size: u32,
    out_size: u32,
    /// Outputs in reverse order (a horizontally flipped resize).
    mirrored: bool,
    /// Weights stored per output (Pillow's `ksize`); unused trailing ones are 0.
    stride: usize,
    /// First input index each output reads.
    start: Vec<u32>,
    /// Number of inputs each output reads (at least 1).
    count: Vec<u32>,
    /// `out_size * stride` weights with `PRECISION_BITS` fractional bits.
    weights: Vec<i32>,
    /// f64 weights of one output before quantization.
    scratch: Vec<f64>,
    /// The largest `count`: every output as a window of exactly `taps` inputs.
    taps: usize,
    /// Start of each output's `taps`-wide window, moved left where it would pass the end.
    pstart: Vec<u32>,
    /// `out_size * taps` weights aligned to the padded windows (zeros where padded).
    pweights: Vec<i32>,
    /// `out_size * stride` weights as the i16 pair `(w - 128 h, h)`, `h = min(w >> 7, 32767)`,
    /// for `pmaddwd` against values stored as the pair `(v, v << 7)`.
    pair: Vec<i32>,
    /// Whether `pstart`/`pweights` and `pair` match the current weights (built on demand:
    /// only the horizontal axis needs the first, only the SIMD vertical pass the second).
    padded_ready: bool,
    pair_ready: bool,
    /// Every weight is in `[0, 2^22 + 127]`, the range the SIMD kernels' 16-bit splits and
    /// their no-clamp argument assume (always true for the bilinear filter).
    simd_friendly: bool,
}

impl AxisCoeffs {
    /// Computes the weights for resampling `in_size` samples to `out_size`, unless they are
    /// already the cached ones. Both sizes must be at least 1.
    pub fn prepare(&mut self, in_size: u32, out_size: u32) {
        self.prepare_mirrored(in_size, out_size, false);
    }

    /// [`AxisCoeffs::prepare`], with the outputs in reverse order when `mirrored`: output `i`
    /// gets the taps and weights of output `out_size - 1 - i`. Resampling with these is the
    /// mirror image of the plain resample, exactly: every output's sum is the same one.
    pub fn prepare_mirrored(&mut self, in_size: u32, out_size: u32, mirrored: bool) {
        self.prepare_with(in_size, out_size, mirrored, SimdLevel::Avx512);
    }

    /// [`AxisCoeffs::prepare_mirrored`], computing four or eight outputs at a time with AVX2
    /// or AVX-512 where `level` allows and the CPU has it (the same IEEE operations in the
    /// same order, lane by lane: identical weights).
    fn prepare_with(&mut self, in_size: u32, out_size: u32, mirrored: bool, level: SimdLevel) {
        if (self.in_size, self.out_size) == (in_size, out_size) && !self.start.is_empty() {
            if self.mirrored != mirrored {
                // The other order of the same outputs (a random flip): just reverse.
                self.mirror();
            }
            return;
        }
        self.in_size = in_size;
        self.out_size = out_size;
        self.mirrored = false;
        // Pillow passes the box as floats: `in1 - in0` is a float32 subtraction (exact below
        // 2^24), then the scale is computed in double.
        let scale = f64::from(in_size as f32) / f64::from(out_size);
        let filterscale = scale.max(1.0);
        // The bilinear filter's support is 1.0, widened by the downscale factor.
        let support = filterscale;
        let stride = support.ceil() as usize * 2 + 1;
        let ss = 1.0 / filterscale;
        let out = out_size as usize;
        self.stride = stride;
        self.start.clear();
        self.start.resize(out, 0);
        self.count.clear();
        self.count.resize(out, 0);
        self.weights.clear();
        self.weights.resize(out * stride, 0);
        let axis = Axis {
            in_size,
            scale,
            support,
            ss,
            stride,
        };
        let level = level.min(SimdLevel::detected());
        let (start, count, weights) = (&mut self.start, &mut self.count, &mut self.weights);
        let done = match level {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has the AVX-512 features (`detected`).
            SimdLevel::Avx512 => unsafe { coeffs_x86::compute512(&axis, start, count, weights) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX2 (`detected`).
            SimdLevel::Avx2 | SimdLevel::Avx512Ymm => unsafe {
                coeffs_x86::compute(&axis, start, count, weights)
            },
            _ => 0,
        };
        let rows = self.weights.chunks_exact_mut(stride).enumerate().skip(done);
        for ((xx, k_fixed), (start, count)) in
            rows.zip(self.start[done..].iter_mut().zip(&mut self.count[done..]))
        {
            (*start, *count) = axis.output(xx, k_fixed, &mut self.scratch);
        }
        self.taps = self.count.iter().copied().max().unwrap_or(1) as usize;
        let (min, max) = match level {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX2 (`detected`).
            SimdLevel::Avx2 | SimdLevel::Avx512Ymm | SimdLevel::Avx512 => unsafe {
                coeffs_x86::min_max(&self.weights)
            },
            _ => min_max(&self.weights),
        };
        self.simd_friendly = min >= 0 && max <= (1 << PRECISION_BITS) + 127;
        self.padded_ready = false;
        self.pair_ready = false;
        if mirrored {
            self.mirror();
        }
    }

    /// Reverses the order of the outputs (and toggles `mirrored`).
    fn mirror(&mut self) {
        let stride = self.stride;
        self.start.reverse();
        self.count.reverse();
        let rows = self.weights.len() / stride;
        for i in 0..rows / 2 {
            let (head, tail) = self.weights.split_at_mut((rows - 1 - i) * stride);
            head[i * stride..(i + 1) * stride].swap_with_slice(&mut tail[..stride]);
        }
        self.mirrored = !self.mirrored;
        self.padded_ready = false;
        self.pair_ready = false;
    }

    /// `(in_size, out_size, mirrored)` of the current weights.
    pub fn key(&self) -> (u32, u32, bool) {
        (self.in_size, self.out_size, self.mirrored)
    }

    /// Builds `pstart` and `pweights` (the portable and SIMD horizontal kernels read them).
    fn ensure_padded(&mut self) {
        if self.padded_ready {
            return;
        }
        let taps = self.taps;
        self.pstart.clear();
        self.pstart.resize(self.start.len(), 0);
        self.pweights.clear();
        self.pweights.resize(self.start.len() * taps, 0);
        with_taps!(taps, |T| pad_windows::<T>(
            taps,
            self.in_size as usize,
            &self.weights,
            self.stride,
            &self.start,
            &mut self.pstart,
            &mut self.pweights,
        ));
        self.padded_ready = true;
    }

    /// Builds `pair` (the SIMD vertical kernel reads it).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn ensure_pairs(&mut self) {
        if self.pair_ready {
            return;
        }
        self.pair.clear();
        self.pair.resize(self.weights.len(), 0);
        match SimdLevel::detected() {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX-512 F and BW (part of `detected`'s AVX-512 set).
            SimdLevel::Avx512 => unsafe { coeffs_x86::pairs512(&self.weights, &mut self.pair) },
            _ => pairs(&self.weights, &mut self.pair),
        }
        self.pair_ready = true;
    }

    /// Output `i`'s first input and its weights.
    #[inline(always)]
    fn taps_of(&self, i: usize) -> (usize, &[i32]) {
        let n = self.count[i] as usize;
        (
            self.start[i] as usize,
            &self.weights[i * self.stride..i * self.stride + n],
        )
    }

    /// Output `i`'s first input and its weights as `pmaddwd` pairs.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    #[inline(always)]
    fn pair_taps_of(&self, i: usize) -> (usize, &[i32]) {
        let n = self.count[i] as usize;
        (
            self.start[i] as usize,
            &self.pair[i * self.stride..i * self.stride + n],
        )
    }

    /// The input range `[first, end)` that outputs read.
    fn span(&self) -> (usize, usize) {
        let first = self.start.first().copied().unwrap_or(0) as usize;
        let last = self.start.len().saturating_sub(1);
        let end = match (self.start.get(last), self.count.get(last)) {
            (Some(&s), Some(&c)) => (s + c) as usize,
            _ => 0,
        };
        (first, end)
    }

    /// See the `simd_friendly` field.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn simd_friendly(&self) -> bool {
        self.simd_friendly
    }
}

/// One axis's resampling parameters, as Pillow's `precompute_coeffs` computes them.
#[derive(Clone, Copy, Debug)]
struct Axis {
    in_size: u32,
    scale: f64,
    support: f64,
    /// `1 / filterscale`.
    ss: f64,
    /// Weights stored per output.
    stride: usize,
}

impl Axis {
    /// Output `xx`'s fixed-point weights into `k_fixed` (`stride` long, zeros beyond the
    /// window), in Pillow's f64 operations and order; returns its first input and count.
    fn output(&self, xx: usize, k_fixed: &mut [i32], scratch: &mut Vec<f64>) -> (u32, u32) {
        let in_max = i64::from(self.in_size);
        let center = (xx as f64 + 0.5) * self.scale;
        // `(int)` truncates toward zero; negative starts clamp to 0 either way.
        let xmin = ((center - self.support + 0.5) as i64).max(0);
        let xmax = ((center + self.support + 0.5) as i64).min(in_max);
        // xmin <= center - 0.5 < in_size - 0.5 and xmax >= xmin + 1 (see Pillow): the
        // window is never empty, but stay defensive against degenerate floats.
        let count = (xmax - xmin).clamp(1, self.stride as i64) as usize;
        let xmin = xmin.min(in_max - 1);
        let mut stack = [0.0f64; 16];
        let ws = if count <= stack.len() {
            &mut stack[..count]
        } else {
            scratch.resize(count, 0.0);
            &mut scratch[..count]
        };
        let mut ww = 0.0;
        for (x, slot) in ws.iter_mut().enumerate() {
            let w = bilinear_filter(((x as i64 + xmin) as f64 - center + 0.5) * self.ss);
            *slot = w;
            ww += w;
        }
        if ww != 0.0 {
            for w in ws.iter_mut() {
                *w /= ww;
            }
        }
        for (k, &w) in k_fixed.iter_mut().zip(ws.iter()) {
            let scaled = w * f64::from(1u32 << PRECISION_BITS);
            // `(int)(±0.5 + x)`: round half away from zero, by truncation.
            *k = if w < 0.0 {
                (-0.5 + scaled) as i32
            } else {
                (0.5 + scaled) as i32
            };
        }
        (xmin as u32, count as u32)
    }
}

/// `pair[i]` = weight `w[i]` as the i16 pair `(w - 128 h, h)`, `h = min(w >> 7, 32767)` (see
/// [`AxisCoeffs`]'s `pair`). Branch-free, so that it vectorizes.
#[inline(always)]
fn pairs(w: &[i32], pair: &mut [i32]) {
    for (p, &w) in pair.iter_mut().zip(w) {
        let h = (w >> 7).clamp(0, 32767);
        let l = w - 128 * h;
        *p = (l & 0xffff) | (h << 16);
    }
}

/// [`AxisCoeffs::ensure_padded`]'s loop: every output's weights as a window of `taps` (`TAPS`
/// when not 0, so that the common counts copy without a loop or a call), moved left where
/// it would pass the end of the input. `weights` holds `stride >= taps` weights per output,
/// zeros past each count; `pweights` is zeroed on entry.
#[inline(always)]
fn pad_windows<const TAPS: usize>(
    taps: usize,
    in_size: usize,
    weights: &[i32],
    stride: usize,
    start: &[u32],
    pstart: &mut [u32],
    pweights: &mut [i32],
) {
    let taps = if TAPS == 0 { taps } else { TAPS };
    let rows = weights.chunks_exact(stride);
    for (((padded, w), &start), ps) in pweights
        .chunks_exact_mut(taps)
        .zip(rows)
        .zip(start)
        .zip(pstart.iter_mut())
    {
        let start = start as usize;
        // count <= in_size, so a window of `taps` fits; shift it left at the end, where
        // `start + count <= in_size` leaves room: count <= taps - shift.
        let shift = start - start.min(in_size - taps);
        if shift == 0 {
            // The common case, apart so that its length is the constant.
            padded.copy_from_slice(&w[..taps]);
        } else {
            padded[shift..].copy_from_slice(&w[..taps - shift]);
        }
        *ps = (start - shift) as u32;
    }
}

/// The smallest and largest of `w` (`(0, 0)` when empty). Min and max reductions vectorize;
/// an early-exit range check would not.
#[inline(always)]
fn min_max(w: &[i32]) -> (i32, i32) {
    let min = w.iter().copied().min().unwrap_or(0);
    let max = w.iter().copied().max().unwrap_or(0);
    (min, max)
}

/// [`Axis::output`] for four outputs at a time, with AVX2.
#[cfg(target_arch = "x86_64")]
mod coeffs_x86 {
    use std::arch::x86_64::*;

    use super::{Axis, PRECISION_BITS};

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

    /// [`compute`] with eight lanes: fills outputs `0..8 * floor(n / 8)` and returns how many.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F and VL.
    #[target_feature(enable = "avx512f,avx512vl")]
    pub(super) unsafe fn compute512(
        axis: &Axis,
        start: &mut [u32],
        count: &mut [u32],
        weights: &mut [i32],
    ) -> usize {
        let stride = axis.stride;
        let n = start.len();
        if stride > MAX_STRIDE
            || axis.in_size >= 1 << 24
            || count.len() != n
            || weights.len() != n * stride
        {
            return 0;
        }
        let groups = n / 8;
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
            for (wk, out) in w.iter().zip(fixed.iter_mut()).take(live) {
                let q = _mm512_mask_div_pd(*wk, nonzero, *wk, ww);
                let scaled = _mm512_mul_pd(q, prec);
                let neg = _mm512_cmp_pd_mask::<_CMP_LT_OQ>(q, zero);
                let offset = _mm512_mask_blend_pd(neg, half, _mm512_set1_pd(-0.5));
                let k = _mm512_cvttpd_epi32(_mm512_add_pd(offset, scaled));
                // SAFETY: `out` is 32 writable bytes.
                unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), k) };
            }
            // Tap-major lanes to output-major rows with plain stores: a scatter is slower
            // (microcoded on Zen 4). `weights` was zeroed: only the live columns need writing.
            let group = &mut weights[first * stride..(first + 8) * stride];
            for (j, row) in group.chunks_exact_mut(stride).enumerate() {
                for (dst, f) in row.iter_mut().zip(&fixed[..live]) {
                    *dst = f[j];
                }
            }
        }
        8 * groups
    }

    /// Fills outputs `0..4 * floor(n / 4)` (n = `start.len()`) and returns how many; 0 when
    /// the axis is outside what the lanes handle. `count` is as long as `start`, `weights`
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
    ) -> usize {
        let stride = axis.stride;
        let n = start.len();
        if stride > MAX_STRIDE
            || axis.in_size >= 1 << 24
            || count.len() != n
            || weights.len() != n * stride
        {
            return 0;
        }
        let groups = n / 4;
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
            for (wk, out) in w.iter().zip(fixed.iter_mut()).take(live) {
                let q = _mm256_blendv_pd(*wk, _mm256_div_pd(*wk, ww), nonzero);
                let scaled = _mm256_mul_pd(q, prec);
                let neg = _mm256_cmp_pd::<_CMP_LT_OQ>(q, _mm256_setzero_pd());
                let offset = _mm256_blendv_pd(half, _mm256_set1_pd(-0.5), neg);
                let k = _mm256_cvttpd_epi32(_mm256_add_pd(offset, scaled));
                // SAFETY: `out` is 16 writable bytes.
                unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), k) };
            }
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
        4 * groups
    }
}

/// Receives the output rows of a resize, in order, one at a time.
///
/// The resize writes row `y` into [`RowSink::row_mut`]`(y)` (exactly `3 * out_w` bytes, packed
/// RGB) and then calls [`RowSink::row_done`]`(y)`; a sink can hand out its final destination
/// (no copy) or a scratch row that `row_done` converts (flip, to-tensor, ...).
pub trait RowSink {
    /// The `3 * out_w` bytes to write output row `y` into.
    fn row_mut(&mut self, y: usize) -> &mut [u8];
    /// Output row `y` is complete.
    fn row_done(&mut self, y: usize);
}

/// A sink writing rows into a packed buffer.
struct PackedSink<'a> {
    data: &'a mut [u8],
    row_len: usize,
}

impl RowSink for PackedSink<'_> {
    fn row_mut(&mut self, y: usize) -> &mut [u8] {
        &mut self.data[y * self.row_len..(y + 1) * self.row_len]
    }

    fn row_done(&mut self, _y: usize) {}
}

/// The kernel sets of the resize, in increasing order: a [`Resizer`] runs the best one the CPU
/// supports up to its limit ([`Resizer::set_simd_limit`]). All give identical results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SimdLevel {
    /// The portable kernels (plain Rust).
    Portable,
    /// AVX2 kernels (x86-64 with AVX2).
    Avx2,
    /// The AVX2 kernels' layout with AVX-512 instructions on 256-bit registers (AVX-512 F, BW,
    /// VL, VBMI and VNNI): one byte permute per tap pair in place of two loads, an insert and
    /// a shuffle, and dot products that accumulate. Nothing runs on 512-bit registers, which
    /// on Intel's Xeons make the decode after them slower (see
    /// [`crate::fused::default_simd`]). Falls back to AVX2 for shapes it does not cover.
    Avx512Ymm,
    /// AVX-512 kernels (x86-64 with AVX-512 F, BW, VL, VBMI and VNNI; Ice Lake and later,
    /// Zen 4 and later), falling back to AVX2 for shapes they do not cover. The default limit.
    #[default]
    Avx512,
}

impl SimdLevel {
    /// The best level this CPU runs (detected at run time).
    pub fn detected() -> SimdLevel {
        if cpu::avx512_vnni() {
            SimdLevel::Avx512
        } else if cpu::avx2() {
            SimdLevel::Avx2
        } else {
            SimdLevel::Portable
        }
    }

    /// One level per distinct kernel set this CPU runs, lowest first: every SIMD level up to
    /// [`SimdLevel::detected`], or only the portable one where there is none. (A limit above
    /// the CPU's runs the same kernels as [`SimdLevel::detected`].)
    pub fn kernel_sets() -> Vec<SimdLevel> {
        let detected = SimdLevel::detected();
        [SimdLevel::Avx2, SimdLevel::Avx512Ymm, SimdLevel::Avx512]
            .into_iter()
            .filter(|&level| level <= detected)
            .chain((detected == SimdLevel::Portable).then_some(SimdLevel::Portable))
            .collect()
    }
}

/// Reusable resize context: coefficient caches and the intermediate images of the two-pass
/// resize. One per worker thread; steady-state calls allocate nothing.
#[derive(Clone, Debug, Default)]
pub struct Resizer {
    horiz: AxisCoeffs,
    vert: AxisCoeffs,
    /// u8 intermediate rows (portable horizontal-first pass, vertical-first blocks).
    tmp: Vec<u8>,
    /// Accumulators for portable vertical passes with many taps.
    acc: Vec<i32>,
    /// The best kernels this context may use.
    limit: SimdLevel,
    #[cfg(target_arch = "x86_64")]
    simd: x86::Scratch,
    #[cfg(target_arch = "x86_64")]
    zmm: x512::Scratch,
}

impl Resizer {
    /// An empty context; the first calls size its buffers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses only the portable kernels, never the SIMD ones (for tests that compare the two,
    /// and for benchmarks). The results are identical either way.
    pub fn set_portable_only(&mut self, portable_only: bool) {
        self.limit = if portable_only {
            SimdLevel::Portable
        } else {
            SimdLevel::Avx512
        };
    }

    /// Uses kernels up to `limit` at most (tests compare the levels; benchmarks measure
    /// them). The results are identical at every level.
    pub fn set_simd_limit(&mut self, limit: SimdLevel) {
        self.limit = limit;
    }

    /// `dst = src.resize((out_w, out_h), Image.BILINEAR)` as Pillow computes it.
    ///
    /// `src` may be a crop view: Pillow's `img.crop(box).resize(...)` equals resizing the view
    /// of `box`. Errors if `src` is empty or an output side is 0.
    pub fn resize(
        &mut self,
        src: RgbView<'_>,
        out_h: u32,
        out_w: u32,
        dst: &mut RgbImage,
    ) -> Result<()> {
        check_sizes(&src, out_h, out_w)?;
        let row_len = 3 * out_w as usize;
        let data = dst.reset(out_w, out_h);
        let mut sink = PackedSink { data, row_len };
        self.resize_into(src, out_h, out_w, false, &mut sink)
    }

    /// The resize, mirrored left to right when `flip` (Pillow's resize followed by
    /// `FLIP_LEFT_RIGHT`, exactly), with each output row handed to `sink` as soon as it is
    /// computed: the entry the fused kernel uses to convert rows while they are in cache.
    ///
    /// The flip costs nothing when the width changes: the horizontal pass writes its outputs
    /// in mirrored order (see [`AxisCoeffs::prepare_mirrored`]).
    pub fn resize_into<S: RowSink + ?Sized>(
        &mut self,
        src: RgbView<'_>,
        out_h: u32,
        out_w: u32,
        flip: bool,
        sink: &mut S,
    ) -> Result<()> {
        check_sizes(&src, out_h, out_w)?;
        let (in_w, in_h) = (src.width(), src.height());
        let need_h = out_w != in_w;
        let need_v = out_h != in_h;
        let level = self.limit.min(SimdLevel::detected());
        let avx2 = level >= SimdLevel::Avx2;
        if !need_h {
            // Pillow copies (or runs only the vertical pass); a flip reverses the pixels.
            if need_v {
                self.vert.prepare_with(in_h, out_h, false, level);
            }
            let row_len = 3 * out_w as usize;
            if flip && self.tmp.len() < row_len {
                self.tmp.resize(row_len, 0);
            }
            for yy in 0..out_h as usize {
                let out = sink.row_mut(yy);
                let dst = if flip {
                    &mut self.tmp[..row_len]
                } else {
                    &mut *out
                };
                if need_v {
                    let (start, w) = self.vert.taps_of(yy);
                    kernels::vertical(avx2, |k| src.row((start + k) as u32), w, dst, &mut self.acc);
                } else {
                    dst.copy_from_slice(src.row(yy as u32));
                }
                if flip {
                    reverse_pixels(&self.tmp[..row_len], out);
                }
                sink.row_done(yy);
            }
            return Ok(());
        }
        self.horiz.prepare_with(in_w, out_w, flip, level);
        self.horiz.ensure_padded();
        if need_v {
            self.vert.prepare_with(in_h, out_h, false, level);
        }
        #[cfg(target_arch = "x86_64")]
        if level == SimdLevel::Avx512 && self.zmm.prepare(&self.horiz, need_v.then_some(&self.vert))
        {
            x512::resize(self, src, out_h, need_v, sink);
            return Ok(());
        }
        #[cfg(target_arch = "x86_64")]
        {
            // The ring-row vertical kernel runs only in the horizontal-first order.
            let h_first = need_v && !vertical_first(in_w, in_h, out_w, out_h);
            // The AVX-512 instructions at 256 bits where allowed and present.
            let ymm512 = level >= SimdLevel::Avx512Ymm;
            if avx2
                && self
                    .simd
                    .prepare(&self.horiz, h_first.then_some(&self.vert), ymm512)
            {
                x86::resize(self, src, out_h, need_v, sink);
                return Ok(());
            }
        }
        if !need_v {
            for y in 0..out_h as usize {
                kernels::horizontal(avx2, src.row(y as u32), sink.row_mut(y), &self.horiz);
                sink.row_done(y);
            }
        } else if vertical_first(in_w, in_h, out_w, out_h) {
            self.vertical_then_horizontal(avx2, src, sink);
        } else {
            self.horizontal_then_vertical(avx2, src, sink);
        }
        Ok(())
    }

    /// Pillow's usual order. Only the source rows the vertical pass reads go through the
    /// horizontal pass, into `tmp`.
    fn horizontal_then_vertical<S: RowSink + ?Sized>(
        &mut self,
        avx2: bool,
        src: RgbView<'_>,
        sink: &mut S,
    ) {
        let row_len = 3 * self.horiz.out_size as usize;
        let (first, end) = self.vert.span();
        let tmp_len = (end - first) * row_len;
        if self.tmp.len() < tmp_len {
            self.tmp.resize(tmp_len, 0);
        }
        let tmp = &mut self.tmp[..tmp_len];
        for (y, tmp_row) in (first..end).zip(tmp.chunks_exact_mut(row_len)) {
            kernels::horizontal(avx2, src.row(y as u32), tmp_row, &self.horiz);
        }
        let tmp = &self.tmp[..tmp_len];
        for yy in 0..self.vert.out_size as usize {
            let (start, w) = self.vert.taps_of(yy);
            let base = start - first;
            let out = sink.row_mut(yy);
            kernels::vertical(
                avx2,
                |k| &tmp[(base + k) * row_len..(base + k + 1) * row_len],
                w,
                out,
                &mut self.acc,
            );
            sink.row_done(yy);
        }
    }

    /// Pillow 13's order when the height shrinks by more than twice as much as the width:
    /// each output row is one vertical-pass row followed by its horizontal pass, so `tmp`
    /// holds a single row.
    fn vertical_then_horizontal<S: RowSink + ?Sized>(
        &mut self,
        avx2: bool,
        src: RgbView<'_>,
        sink: &mut S,
    ) {
        let tmp_len = 3 * src.width() as usize;
        if self.tmp.len() < tmp_len {
            self.tmp.resize(tmp_len, 0);
        }
        for yy in 0..self.vert.out_size as usize {
            let (start, w) = self.vert.taps_of(yy);
            let tmp = &mut self.tmp[..tmp_len];
            kernels::vertical(avx2, |k| src.row((start + k) as u32), w, tmp, &mut self.acc);
            kernels::horizontal(avx2, tmp, sink.row_mut(yy), &self.horiz);
            sink.row_done(yy);
        }
    }
}

/// `dst` = the pixels of `src` in reverse order (same length, packed RGB).
fn reverse_pixels(src: &[u8], dst: &mut [u8]) {
    for (d, s) in dst.chunks_exact_mut(3).zip(src.chunks_exact(3).rev()) {
        d.copy_from_slice(s);
    }
}

/// Pillow 13's pass order: vertical first when the height shrinks by more than twice as much as
/// the width (`dy > 0 && dy > 2 * dx`, in pixels of the box and the output). Each pass rounds
/// to u8, so the order shows in the results. Earlier Pillow always went horizontal first; the
/// rule was pinned against Pillow 13.0.0 on thousands of size combinations, boundaries included
/// (and `scripts/fixtures_resize.py` re-checks it on every run).
fn vertical_first(in_w: u32, in_h: u32, out_w: u32, out_h: u32) -> bool {
    let dy = i64::from(in_h) - i64::from(out_h);
    let dx = i64::from(in_w) - i64::from(out_w);
    dy > 0 && dy > 2 * dx
}

fn check_sizes(src: &RgbView<'_>, out_h: u32, out_w: u32) -> Result<()> {
    if src.width() == 0 || src.height() == 0 {
        return Err(Error::invalid(
            "image",
            format!(
                "cannot resize an empty {}x{} image",
                src.width(),
                src.height()
            ),
        ));
    }
    if out_h == 0 || out_w == 0 {
        return Err(Error::invalid(
            "size",
            format!("resize to {out_w}x{out_h}: both sides must be at least 1"),
        ));
    }
    Ok(())
}

/// The slot of row `y` in a ring of `cap` rows (row y lives in slot y mod cap), for rows that
/// only move forward: `base` (a multiple of `cap`, at most `y`) advances by subtraction
/// instead of a division per row.
#[cfg(target_arch = "x86_64")]
fn ring_slot(y: usize, cap: usize, base: &mut usize) -> usize {
    while y >= *base + cap {
        *base += cap;
    }
    y - *base
}

/// Source rows a SIMD horizontal pass prefetches while it computes others: `rows` rows from
/// `base`, `stride` bytes apart. Only ever prefetched, never read (a prefetch takes any
/// address and never faults).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug)]
struct Ahead {
    base: *const u8,
    stride: usize,
    rows: usize,
}

#[cfg(target_arch = "x86_64")]
impl Ahead {
    /// Nothing to prefetch.
    const NONE: Ahead = Ahead {
        base: std::ptr::null(),
        stride: 0,
        rows: 0,
    };

    /// Rows `y..y + rows` of `src` (none when `rows` is 0).
    fn rows(src: &RgbView<'_>, y: usize, rows: usize) -> Ahead {
        if rows == 0 {
            return Ahead::NONE;
        }
        Ahead {
            base: src.row(y as u32).as_ptr(),
            stride: src.stride(),
            rows,
        }
    }

    /// Prefetches (into L2) byte `offset` of every row.
    ///
    /// # Safety
    /// SSE (every x86-64 CPU). Nothing else: no memory is accessed.
    #[inline(always)]
    unsafe fn prefetch(&self, offset: usize) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
        let mut p = self.base.wrapping_add(offset);
        for _ in 0..self.rows {
            // SAFETY: a prefetch is a hint: it never faults and reads nothing.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(p.cast()) };
            p = p.wrapping_add(self.stride);
        }
    }
}

/// Kernel dispatch: the portable kernels, compiled for AVX2 too when the CPU has it.
mod kernels {
    use super::{portable, AxisCoeffs};

    /// One row of the horizontal pass; see [`portable::horizontal`].
    #[inline]
    pub(super) fn horizontal(avx2: bool, src: &[u8], dst: &mut [u8], c: &AxisCoeffs) {
        #[cfg(target_arch = "x86_64")]
        if avx2 {
            // SAFETY: the caller saw `is_x86_feature_detected!("avx2")`; the function has no
            // other requirement.
            unsafe { super::x86::horizontal_portable(src, dst, c) };
            return;
        }
        let _ = avx2;
        portable::horizontal(src, dst, c);
    }

    /// One row of the vertical pass; see [`portable::vertical`].
    #[inline]
    pub(super) fn vertical<'a>(
        avx2: bool,
        row: impl Fn(usize) -> &'a [u8],
        w: &[i32],
        dst: &mut [u8],
        acc: &mut Vec<i32>,
    ) {
        #[cfg(target_arch = "x86_64")]
        if avx2 {
            // SAFETY: the caller saw `is_x86_feature_detected!("avx2")`; the function has no
            // other requirement.
            unsafe { super::x86::vertical_portable(row, w, dst, acc) };
            return;
        }
        let _ = avx2;
        portable::vertical(row, w, dst, acc);
    }
}

/// The passes' inner loops in plain Rust, written so the compiler vectorizes them.
mod portable {
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
}

/// A function of one accumulating AVX-512 VNNI instruction, `acc = insn(acc, a, b)`, in any of
/// the 32 vector registers. Written with `asm!` because LLVM splits some of them into a
/// multiply and an add, a second uop on the ports the kernels saturate.
#[cfg(target_arch = "x86_64")]
macro_rules! dot_instruction {
    ($(#[$attr:meta])* fn $name:ident($ty:ty) = $insn:literal) => {
        $(#[$attr])*
        #[inline]
        fn $name(mut acc: $ty, a: $ty, b: $ty) -> $ty {
            // SAFETY: a register-only instruction of the enabled features; no memory, stack
            // or flags touched.
            unsafe {
                std::arch::asm!(
                    $insn,
                    acc = inout(zmm_reg) acc,
                    a = in(zmm_reg) a,
                    b = in(zmm_reg) b,
                    options(pure, nomem, nostack, preserves_flags),
                );
            }
            acc
        }
    };
}

/// AVX2 kernels.
///
/// The horizontal pass computes 8 output values (not pixels: RGB values in a row) per vector:
/// for each pair of taps a `pshufb` gathers, from a 16-byte source window per 128-bit lane,
/// the two input bytes of each value as an i16 pair, and two `pmaddwd`s multiply them by the
/// high and low 11-bit halves of the weights (exact: `w = 2048 hi + lo`, both < 2^15). The
/// gather masks, windows and weights depend only on the output column, so they are built once
/// per coefficient set ([`HPlan`]) and reused for every row. At [`SimdLevel::Avx512Ymm`] the
/// same plan gathers with one `vpermb` per pair from a 32-byte window per 8 values (64 bytes
/// with `vpermt2b`), and `vpdpwssd` accumulates in place of `pmaddwd` + `paddd` (here and in
/// the vertical pass), still on 256-bit registers. From 3 taps on, that level takes four taps
/// per step where the windows allow ([`Gather::Quad`]): one unmasked `vpermb` puts each value's
/// four bytes in its dword, and three `vpdpbusd` multiply them by the weights' signed base-256
/// digits (`w = 65536 a + 256 b + c`, each in `[-128, 127]`); `(A << 16) + (B << 8) + C` of the
/// three sums is `sum(v w)` (the shifts may wrap, the result, in `[0, 2^30)`, does not). That
/// is one permute and three dot products per four taps, against two permutes, two mask moves
/// and four dot products with pairs.
///
/// In the horizontal-first order the horizontal pass stores each value `v` as the i16 pair
/// `(v, v << 7)`, so that the vertical pass needs one `pmaddwd` per tap and 8 values against
/// the weight pair `(w - 128 h, h)`: `v (w - 128 h) + 128 v h = v w`.
///
/// No clamping: the weights are non-negative and sum to at most `2^22 + taps / 2`, so every
/// sum lies in `[0, 255 * 2^22 + 2^21 + 255 * taps / 2]` and shifts to `[0, 255]` (for
/// `taps < 16000`, far above what the plan accepts).
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::asm;
    use std::arch::x86_64::*;

    use super::{
        portable, ring_slot, vertical_first, Ahead, AxisCoeffs, Resizer, RowSink, HALF,
        PRECISION_BITS,
    };
    use crate::cpu;
    use crate::image::RgbView;

    /// Rows the horizontal kernel processes per block (keeps source and output in L1/L2).
    const BLOCK_ROWS: usize = 16;
    /// Tap pairs the horizontal kernel handles: up to 16 taps, downscales up to about 7.5x.
    const MAX_PAIRS: usize = 8;
    /// Tap quads the quad kernel handles (the same 16 taps).
    const MAX_QUADS: usize = 4;
    /// Taps the ring-row vertical kernel keeps in registers (downscales up to about 7x).
    const MAX_V_TAPS: usize = 16;
    /// The even bytes of a 256-bit vector: the low bytes of its i16 lanes.
    const EVEN_BYTES: u32 = 0x5555_5555;

    /// The portable horizontal row kernel compiled for AVX2.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn horizontal_portable(src: &[u8], dst: &mut [u8], c: &AxisCoeffs) {
        portable::horizontal(src, dst, c);
    }

    /// The portable vertical row kernel compiled for AVX2.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn vertical_portable<'a>(
        row: impl Fn(usize) -> &'a [u8],
        w: &[i32],
        dst: &mut [u8],
        acc: &mut Vec<i32>,
    ) {
        portable::vertical(row, w, dst, acc);
    }

    /// How the horizontal kernel gathers each step's tap bytes.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    enum Gather {
        /// AVX2: a 16-byte window per 128-bit lane (4 values), loaded twice and inserted,
        /// then one `pshufb`; where they fit, one window for both lanes, broadcast, or each
        /// lane's window once for all steps ([`narrow_windows`]); with `wide`, a second 16
        /// bytes per lane and a second `pshufb`.
        #[default]
        Shuffle,
        /// AVX-512 at 256 bits: one window per chunk (8 values), 32 bytes (`vpermb`) or,
        /// with `wide`, 64 bytes in two loads (`vpermt2b`).
        Permute,
        /// As `Permute`, four taps per step: each value's four bytes land in its dword
        /// unmasked, for `vpdpbusd` against the weights' signed base-256 digits.
        Quad,
        /// For 5 or 6 taps: a quad step (taps 0-3), then a pair step (taps 4-5) whose
        /// weights are split at 8 bits (as [`Gather::Permute`]'s), so that both steps' sums
        /// join one Horner chain. Two quads would spend three dot products on the last two
        /// taps (or one), this spends two.
        QuadPair,
    }

    impl Gather {
        /// Values that share a window: a lane's 4 or a chunk's 8.
        #[cfg(test)]
        fn group(self) -> usize {
            match self {
                Gather::Shuffle => 4,
                Gather::Permute | Gather::Quad | Gather::QuadPair => 8,
            }
        }

        /// Steps for `taps` taps.
        fn steps(self, taps: usize) -> usize {
            match self {
                Gather::Shuffle | Gather::Permute => taps.div_ceil(2),
                Gather::Quad => taps.div_ceil(4),
                Gather::QuadPair => 2,
            }
        }

        /// Step `step`'s first tap and how many taps it has room for.
        fn step_taps(self, step: usize) -> (usize, usize) {
            match self {
                Gather::Shuffle | Gather::Permute => (2 * step, 2),
                Gather::Quad => (4 * step, 4),
                Gather::QuadPair => [(0, 4), (4, 2)][step],
            }
        }

        /// Whether step `step` multiplies digits (a quad), not i16 halves (a pair).
        fn quad_step(self, step: usize) -> bool {
            match self {
                Gather::Shuffle | Gather::Permute => false,
                Gather::Quad => true,
                Gather::QuadPair => step == 0,
            }
        }

        /// Whether any step is a quad (the plan has digits of 256).
        fn has_quads(self) -> bool {
            self.quad_step(0)
        }

        /// Where a pair step splits each weight into i16 halves, `w = (hi << bits) + lo`:
        /// 8 bits where the sums can join a Horner chain (`hi` is at most `2^14`, still an
        /// i16), 11 for the AVX2 kernel's `pmaddwd`, whose two sums are always combined by
        /// a shift and an add.
        fn pair_split(self) -> u32 {
            if self == Gather::Shuffle {
                11
            } else {
                8
            }
        }

        /// Window bytes.
        fn window(self, wide: bool) -> usize {
            match (self, wide) {
                (Gather::Shuffle, false) => 16,
                (Gather::Shuffle, true)
                | (Gather::Permute | Gather::Quad | Gather::QuadPair, false) => 32,
                (Gather::Permute | Gather::Quad | Gather::QuadPair, true) => 64,
            }
        }
    }

    /// The horizontal pass as gather indices, windows and weights per 8-value chunk.
    #[derive(Clone, Debug, Default)]
    pub(super) struct HPlan {
        /// The coefficients' key and whether permutes were allowed when it was built, and
        /// whether the kernel can run it.
        key: Option<((u32, u32, bool), bool, bool)>,
        gather: Gather,
        /// Tap steps per chunk (pairs, or quads with [`Gather::Quad`]).
        steps: usize,
        /// Windows twice as long (see [`Gather`]): for downscales beyond about 3x, where a
        /// group's taps spread over more bytes than the narrow window.
        wide: bool,
        chunks: usize,
        /// Values per output row, `3 * out_w`.
        values: usize,
        /// Source row length the windows were checked against, `3 * in_w`.
        row_bytes: usize,
        /// Per chunk and step: the window offsets of the low and high lane (shuffles; the
        /// same where they share one), or the chunk's window offset twice (permutes).
        win: Vec<[u32; 2]>,
        /// Per chunk and step, per value the bytes of its taps: for pairs two (taps `2p` and
        /// `2p + 1`, the odd bytes zeroed), `pshufb` masks of the lanes' first 16 bytes (0x80
        /// writes 0) or the permute's indices into the whole window; for quads four (taps
        /// `4q` to `4q + 3`).
        masks: Vec<[u8; 32]>,
        /// Likewise for the lanes' second 16 bytes (wide shuffle plans only).
        masks_hi: Vec<[u8; 32]>,
        /// Per chunk and step: weight high halves as i16 pairs, one i32 per value (quads:
        /// the weights' digits of 65536 as bytes).
        whi: Vec<[i32; 8]>,
        /// Quads only: the digits of 256.
        wmid: Vec<[i32; 8]>,
        /// Per chunk and step: weight low halves (quads: the digits of 1).
        wlo: Vec<[i32; 8]>,
        /// Scratch for building the tables, per output pixel (`out_w + 8` entries, per pair
        /// for the weights; the three values of a pixel share them): its tap-0 byte
        /// `3 pstart`, and its pair's weights' high and low halves as i16 pairs.
        px_pos: Vec<i32>,
        px_hi: Vec<i32>,
        px_mid: Vec<i32>,
        px_lo: Vec<i32>,
    }

    impl HPlan {
        /// Builds the plan for `c` unless it is the cached one; returns whether a kernel can
        /// run it (each group's taps must fit its window). With `permute`, the permute
        /// layouts are tried first.
        fn prepare(&mut self, c: &AxisCoeffs, permute: bool) -> bool {
            if let Some((key, allowed, ok)) = self.key {
                if key == c.key() && allowed == permute {
                    return ok;
                }
            }
            let built = [
                (Gather::QuadPair, false),
                (Gather::QuadPair, true),
                (Gather::Quad, false),
                (Gather::Quad, true),
                (Gather::Permute, false),
                (Gather::Permute, true),
                (Gather::Shuffle, false),
                (Gather::Shuffle, true),
            ]
            .into_iter()
            .filter(|&(gather, _)| permute || gather == Gather::Shuffle)
            // SAFETY: plans are only prepared on the AVX2 path (the CPU has AVX2).
            .any(|(gather, wide)| unsafe { self.fill_vector(c, gather, wide) });
            self.key = Some((c.key(), permute, built));
            built
        }

        /// Sets the plan's shape for a layout; returns the number of (chunk, pair) entries.
        fn set_layout(&mut self, c: &AxisCoeffs, gather: Gather, wide: bool) -> usize {
            let values = 3 * c.out_size as usize;
            self.gather = gather;
            self.steps = gather.steps(c.taps);
            self.wide = wide;
            self.chunks = values.div_ceil(8);
            self.values = values;
            self.row_bytes = 3 * c.in_size as usize;
            self.chunks * self.steps
        }

        /// Fills the tables for a pair layout that [`fits`], one value at a time: the
        /// reference that [`HPlan::fill_vector`] is tested against.
        #[cfg(test)]
        fn fill(&mut self, c: &AxisCoeffs, gather: Gather, wide: bool) {
            let taps = c.taps;
            let window = gather.window(wide);
            let entries = self.set_layout(c, gather, wide);
            let (pairs, row_bytes) = (self.steps, self.row_bytes);
            let len = self.fill_pixels_scalar(c, gather);
            let HPlan {
                win,
                masks,
                masks_hi,
                whi,
                wlo,
                px_hi,
                px_lo,
                ..
            } = self;
            win.clear();
            win.resize(entries, [0; 2]);
            masks.clear();
            masks.resize(entries, [0x80; 32]);
            masks_hi.clear();
            let split_masks = wide && gather == Gather::Shuffle;
            if split_masks {
                masks_hi.resize(entries, [0x80; 32]);
            }
            whi.clear();
            whi.resize(entries, [0; 8]);
            wlo.clear();
            wlo.resize(entries, [0; 8]);
            // Value j of the row is channel j % 3 of output pixel j / 3; its tap k reads source
            // byte 3 * (pstart + k) + j % 3. Value j sits at bytes 4 (j mod 8) and
            // 4 (j mod 8) + 2 of its chunk's masks (taps 2p and 2p + 1), and its lane (shuffles)
            // is 0 or 1.
            // Per chunk, a narrow shuffle's cheaper windows where they fit (`narrow_windows`,
            // from each half's span of tap-0 bytes, `i32::MAX`/`MIN` where it has no values).
            let narrow: Vec<_> = groups(c, 8)
                .map(|(_, n, base)| {
                    let half = |h: usize| {
                        let values = &base[4 * h..n.max(4 * h).min(4 * h + 4)];
                        match (values.iter().min(), values.iter().max()) {
                            (Some(&lo), Some(&hi)) => (lo as i32, hi as i32),
                            _ => (i32::MAX, i32::MIN),
                        }
                    };
                    let (h0, h1) = (half(0), half(1));
                    (gather == Gather::Shuffle && !wide)
                        .then(|| narrow_windows([h0.0, h1.0], [h0.1, h1.1], taps, row_bytes))
                        .flatten()
                })
                .collect();
            for (group_start, n, base) in groups(c, gather.group()) {
                let (lo, _) = span(&base[..n]);
                let (m, lane) = (group_start / 8, (group_start / 4) % 2);
                for p in 0..pairs {
                    let ka = 2 * p;
                    // Without tap 2p + 1 its byte repeats tap 2p's, against a zero weight.
                    let second = if ka + 1 < taps { 3 } else { 0 };
                    let wo = match narrow[m] {
                        Some(narrow) => narrow[p][lane],
                        None => window_start(lo, ka, row_bytes, window),
                    };
                    let e = m * pairs + p;
                    match gather {
                        Gather::Shuffle => win[e][lane] = wo as u32,
                        Gather::Permute => win[e] = [wo as u32; 2],
                        Gather::Quad | Gather::QuadPair => {
                            unreachable!("the reference covers the pair layouts")
                        }
                    }
                    let (mask, whi, wlo) = (&mut masks[e], &mut whi[e], &mut wlo[e]);
                    for (q, &b) in base[..n].iter().enumerate() {
                        let (v, px) = ((group_start + q) % 8, (group_start + q) / 3);
                        let a = b + 3 * ka - wo;
                        mask[4 * v] = a as u8;
                        mask[4 * v + 2] = (a + second) as u8;
                        (whi[v], wlo[v]) = (px_hi[p * len + px], px_lo[p * len + px]);
                    }
                    if split_masks {
                        // A position past a lane's first 16 bytes goes into the mask of its
                        // second 16, so that OR-ing the two shuffles merges them.
                        for (at, high) in mask.iter_mut().zip(masks_hi[e].iter_mut()) {
                            if *at != 0x80 && *at >= 16 {
                                (*high, *at) = (*at - 16, 0x80);
                            }
                        }
                    }
                }
            }
        }

        /// Zeroes the per-pixel scratch at its size for `c` and the layout's steps (`px_mid`
        /// only for quads); returns its entries per step.
        fn reset_pixels(&mut self, c: &AxisCoeffs, quads: bool) -> usize {
            let (steps, len) = (self.steps, c.out_size as usize + 8);
            for (v, n) in [
                (&mut self.px_pos, len),
                (&mut self.px_hi, steps * len),
                (&mut self.px_mid, if quads { steps * len } else { 0 }),
                (&mut self.px_lo, steps * len),
            ] {
                v.clear();
                v.resize(n, 0);
            }
            len
        }

        /// Fills the per-pixel scratch (`px_pos`, and per step the weights as `gather`'s
        /// kernel multiplies them) one weight at a time; returns the entries per step,
        /// `out_w + 8` (a chunk loads 8 from its first pixel). The reference that
        /// [`HPlan::fill_pixels`] is tested against.
        #[cfg(test)]
        fn fill_pixels_scalar(&mut self, c: &AxisCoeffs, gather: Gather) -> usize {
            let (taps, steps) = (c.taps, self.steps);
            let len = self.reset_pixels(c, gather.has_quads());
            let bits = gather.pair_split();
            let low = (1 << bits) - 1;
            for (px, (w, &st)) in c.pweights.chunks_exact(taps).zip(&c.pstart).enumerate() {
                self.px_pos[px] = 3 * st as i32;
                let tap = |k: usize| w.get(k).copied().unwrap_or(0);
                for step in 0..steps {
                    let at = step * len + px;
                    let (k0, _) = gather.step_taps(step);
                    if gather.quad_step(step) {
                        // Byte j of each: the digit of tap k0 + j.
                        let mut d = [0u32; 3];
                        for j in 0..4 {
                            for (d, digit) in d.iter_mut().zip(signed_digits(tap(k0 + j))) {
                                *d |= u32::from(digit as u8) << (8 * j);
                            }
                        }
                        let [a, b, lo] = d.map(|v| v as i32);
                        (self.px_hi[at], self.px_mid[at], self.px_lo[at]) = (a, b, lo);
                    } else {
                        let (wa, wb) = (tap(k0), tap(k0 + 1));
                        self.px_hi[at] = ((wa >> bits) & 0xffff) | ((wb >> bits) << 16);
                        self.px_lo[at] = (wa & low) | ((wb & low) << 16);
                    }
                }
            }
            len
        }

        /// [`HPlan::fill_pixels_scalar`] with a pixel's step of taps split at once, bit for
        /// bit (tested): the scalar digit split was half of building a plan, which runs for
        /// every new crop width. (A pixel's taps are contiguous: no gathers, which cost more
        /// here than the split.)
        ///
        /// # Safety
        /// AVX2.
        #[target_feature(enable = "avx2")]
        unsafe fn fill_pixels(&mut self, c: &AxisCoeffs, gather: Gather) -> usize {
            let (taps, steps) = (c.taps, self.steps);
            let len = self.reset_pixels(c, gather.has_quads());
            // Every step has a tap (so the loads below start within the pixel's), and the
            // steps have room for all of them.
            let (k_last, per_last) = gather.step_taps(steps - 1);
            assert!(k_last < taps && k_last + per_last >= taps);
            let bits = gather.pair_split();
            let (split, low_bits) = (
                _mm_cvtsi32_si128(bits as i32),
                _mm_set1_epi32((1 << bits) - 1),
            );
            // Byte 0 of each dword (quads: the digits, in tap order), or bytes 0 and 1 of the
            // first two (pairs: the i16 halves); the other bytes 0.
            let quad_bytes =
                _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
            let pair_bytes =
                _mm_setr_epi8(0, 1, 4, 5, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
            let pick = |v: __m128i, bytes| _mm_cvtsi128_si32(_mm_shuffle_epi8(v, bytes));
            // Sign-extends each dword's low byte.
            let low_i8 = |v: __m128i| _mm_srai_epi32::<24>(_mm_slli_epi32::<24>(v));
            let lane = _mm_setr_epi32(0, 1, 2, 3);
            let pixels = c.pweights.chunks_exact(taps).zip(&c.pstart);
            for (px, (w, &st)) in pixels.enumerate() {
                self.px_pos[px] = 3 * st as i32;
                for step in 0..steps {
                    let (k0, per) = gather.step_taps(step);
                    // The step's taps; past the last one, zero weights (digits).
                    let n = per.min(taps.saturating_sub(k0));
                    let keep = _mm_cmpgt_epi32(_mm_set1_epi32(n as i32), lane);
                    // SAFETY: the kept lanes read `w[k0..k0 + n]`, within the pixel's taps.
                    let w = unsafe { _mm_maskload_epi32(w[k0..].as_ptr(), keep) };
                    let at = step * len + px;
                    if gather.quad_step(step) {
                        // w = 65536 a + 256 b + c, each digit in [-128, 127].
                        let c = low_i8(w);
                        let r = _mm_srai_epi32::<8>(_mm_sub_epi32(w, c));
                        let b = low_i8(r);
                        let a = _mm_srai_epi32::<8>(_mm_sub_epi32(r, b));
                        (self.px_hi[at], self.px_mid[at]) =
                            (pick(a, quad_bytes), pick(b, quad_bytes));
                        self.px_lo[at] = pick(c, quad_bytes);
                    } else {
                        self.px_hi[at] = pick(_mm_sra_epi32(w, split), pair_bytes);
                        self.px_lo[at] = pick(_mm_and_si128(w, low_bits), pair_bytes);
                    }
                }
            }
            len
        }

        /// Fills the tables for a layout a chunk (8 values) at a time, with the [`fits`]
        /// check folded in: false if the layout is not [`allowed`] or a group's taps do not
        /// fit its window (the tables are then half filled, and the caller fills another
        /// layout). The same tables as [`HPlan::fill`] for the pair layouts, bit for bit
        /// (tested), in under half the time: this runs for every new crop width.
        ///
        /// # Safety
        /// AVX2.
        #[target_feature(enable = "avx2")]
        unsafe fn fill_vector(&mut self, c: &AxisCoeffs, gather: Gather, wide: bool) -> bool {
            if !allowed(c, gather, wide) {
                return false;
            }
            let (taps, quads) = (c.taps, gather.has_quads());
            let (shuffle, split_masks) =
                (gather == Gather::Shuffle, gather == Gather::Shuffle && wide);
            let window = gather.window(wide);
            let entries = self.set_layout(c, gather, wide);
            let (steps, row_bytes, values) = (self.steps, self.row_bytes, self.values);
            // SAFETY: AVX2 (this function's features).
            let len = unsafe { self.fill_pixels(c, gather) };
            self.masks_hi.clear();
            if split_masks {
                self.masks_hi.resize(entries, [0; 32]);
            }
            self.win.resize(entries, [0; 2]);
            self.masks.resize(entries, [0; 32]);
            self.whi.resize(entries, [0; 8]);
            self.wmid.clear();
            if quads {
                self.wmid.resize(entries, [0; 8]);
            }
            self.wlo.resize(entries, [0; 8]);
            // Value 8m + q of the row is channel k of pixel 8m / 3 + rel: with r = 8m mod 3,
            // rel = (r + q) / 3 and k = (r + q) mod 3.
            let pattern = |f: fn(i32) -> i32| -> [__m256i; 3] {
                std::array::from_fn(|r| {
                    let r = r as i32;
                    _mm256_setr_epi32(
                        f(r),
                        f(r + 1),
                        f(r + 2),
                        f(r + 3),
                        f(r + 4),
                        f(r + 5),
                        f(r + 6),
                        f(r + 7),
                    )
                })
            };
            let rel = pattern(|x| x / 3);
            let chan = pattern(|x| x % 3);
            let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            // A padding lane's index bytes (the scalar builder's untouched 0x80s); a value's
            // odd bytes are 0x80 too (zeroed by the kernel's mask whatever they are).
            let unused = _mm256_set1_epi32(0x8080_8080_u32 as i32);
            let odd = _mm256_set1_epi32(0x8000_8000_u32 as i32);
            for m in 0..self.chunks {
                let (px0, r) = (8 * m / 3, 8 * m % 3);
                let valid = _mm256_cmpgt_epi32(_mm256_set1_epi32((values - 8 * m) as i32), lane);
                // SAFETY: `px0 < out`, so 8 entries from `px0` lie within `len` (per pair).
                let pick = |v: &[i32]| unsafe {
                    _mm256_permutevar8x32_epi32(
                        _mm256_loadu_si256(v[px0..].as_ptr().cast()),
                        rel[r],
                    )
                };
                let pos = _mm256_add_epi32(pick(&self.px_pos), chan[r]);
                // The span of each 128-bit half's values (a shuffle lane's group), or of the
                // chunk's; padding lanes are left out, and a half without values keeps
                // `i32::MAX` as its lowest.
                let (lo, hi) = {
                    let lo = half_min(_mm256_blendv_epi8(_mm256_set1_epi32(i32::MAX), pos, valid));
                    let hi = half_max(_mm256_blendv_epi8(_mm256_set1_epi32(i32::MIN), pos, valid));
                    if shuffle {
                        (lo, hi)
                    } else {
                        ([lo[0].min(lo[1]); 2], [hi[0].max(hi[1]); 2])
                    }
                };
                let narrow = (shuffle && !wide)
                    .then(|| narrow_windows(lo, hi, taps, row_bytes))
                    .flatten();
                for step in 0..steps {
                    let (k0, per) = gather.step_taps(step);
                    // The step's last tap; the taps past it repeat its byte, against zero
                    // weights.
                    let klast = (k0 + per - 1).min(taps - 1);
                    // Each half's window (a shuffle's half without values keeps 0), or a
                    // narrow shuffle's cheaper ones where they fit.
                    let mut wo = [0usize; 2];
                    if let Some(narrow) = narrow {
                        wo = narrow[step];
                    } else {
                        for ((wo, &lo), &hi) in wo.iter_mut().zip(&lo).zip(&hi) {
                            if lo == i32::MAX {
                                continue;
                            }
                            *wo = window_start(lo as usize, k0, row_bytes, window);
                            if hi as usize + 3 * klast >= *wo + window {
                                return false;
                            }
                        }
                    }
                    // Each value's tap-k0 byte in its half's window.
                    let shift = |h: usize| _mm_set1_epi32((3 * k0) as i32 - wo[h] as i32);
                    let a = _mm256_add_epi32(pos, _mm256_set_m128i(shift(1), shift(0)));
                    let idx = if gather.quad_step(step) {
                        // Bytes a, a + 3, a + 6, a + 9 (all below the window's 64).
                        let d = klast - k0;
                        let offs: usize = (0..4).map(|j| (3 * j.min(d)) << (8 * j)).sum();
                        _mm256_add_epi32(
                            _mm256_mullo_epi32(a, _mm256_set1_epi32(0x0101_0101)),
                            _mm256_set1_epi32(offs as i32),
                        )
                    } else {
                        let b = _mm256_add_epi32(a, _mm256_set1_epi32(3 * (klast - k0) as i32));
                        _mm256_or_si256(_mm256_or_si256(a, _mm256_slli_epi32::<16>(b)), odd)
                    };
                    let idx = _mm256_blendv_epi8(unused, idx, valid);
                    let e = m * steps + step;
                    self.win[e] = wo.map(|w| w as u32);
                    let weights = |px: &[i32]| _mm256_and_si256(pick(&px[step * len..]), valid);
                    // SAFETY: entry `e < chunks * steps`, the tables' length; 32 bytes each.
                    unsafe {
                        if split_masks {
                            // Bytes past a lane's first 16 go into the mask of its second 16
                            // (0x80 elsewhere), so that OR-ing the two shuffles merges them.
                            let past = _mm256_cmpgt_epi8(idx, _mm256_set1_epi8(15));
                            let second = _mm256_sub_epi8(idx, _mm256_set1_epi8(16));
                            _mm256_storeu_si256(
                                self.masks[e].as_mut_ptr().cast(),
                                _mm256_blendv_epi8(idx, unused, past),
                            );
                            _mm256_storeu_si256(
                                self.masks_hi[e].as_mut_ptr().cast(),
                                _mm256_blendv_epi8(unused, second, past),
                            );
                        } else {
                            _mm256_storeu_si256(self.masks[e].as_mut_ptr().cast(), idx);
                        }
                        _mm256_storeu_si256(self.whi[e].as_mut_ptr().cast(), weights(&self.px_hi));
                        _mm256_storeu_si256(self.wlo[e].as_mut_ptr().cast(), weights(&self.px_lo));
                        if quads {
                            _mm256_storeu_si256(
                                self.wmid[e].as_mut_ptr().cast(),
                                weights(&self.px_mid),
                            );
                        }
                    }
                }
            }
            true
        }
    }

    /// `w` as signed base-256 digits `[a, b, c]`, `w = 65536 a + 256 b + c`, each in
    /// `[-128, 127]` for `|w| <= 2^22` (Pillow's weights are in `[0, 2^22]`).
    #[cfg(test)]
    fn signed_digits(w: i32) -> [i8; 3] {
        let c = w as i8;
        let r = (w - i32::from(c)) >> 8;
        let b = r as i8;
        [((r - i32::from(b)) >> 8) as i8, b, c]
    }

    /// The smallest of each 128-bit half's 4 lanes.
    #[target_feature(enable = "avx2")]
    fn half_min(v: __m256i) -> [i32; 2] {
        let v = _mm256_min_epi32(v, _mm256_shuffle_epi32::<0b01_00_11_10>(v));
        let v = _mm256_min_epi32(v, _mm256_shuffle_epi32::<0b10_11_00_01>(v));
        [_mm256_extract_epi32::<0>(v), _mm256_extract_epi32::<4>(v)]
    }

    /// The largest of each 128-bit half's 4 lanes.
    #[target_feature(enable = "avx2")]
    fn half_max(v: __m256i) -> [i32; 2] {
        let v = _mm256_max_epi32(v, _mm256_shuffle_epi32::<0b01_00_11_10>(v));
        let v = _mm256_max_epi32(v, _mm256_shuffle_epi32::<0b10_11_00_01>(v));
        [_mm256_extract_epi32::<0>(v), _mm256_extract_epi32::<4>(v)]
    }

    /// Whether the kernels are instantiated for `c`'s taps in the layout and its rows are at
    /// least a window long (a layout can only fit if so).
    fn allowed(c: &AxisCoeffs, gather: Gather, wide: bool) -> bool {
        let rows_fit =
            3 * c.in_size as usize >= gather.window(wide) && c.simd_friendly() && c.padded_ready;
        match gather {
            // Two taps or fewer: a pair does less work than a quad's three dot products.
            Gather::Quad => return rows_fit && c.taps > 2 && c.taps.div_ceil(4) <= MAX_QUADS,
            Gather::QuadPair => return rows_fit && (5..=6).contains(&c.taps),
            Gather::Shuffle | Gather::Permute => {}
        }
        let pairs = c.taps.div_ceil(2);
        let max_pairs = if wide { MAX_PAIRS } else { MAX_PAIRS / 2 };
        // (The wide kernels are instantiated for 2 to 8 pairs; 1 pair always fits narrow.)
        pairs <= max_pairs
            && (!wide || pairs >= 2)
            && 3 * c.in_size as usize >= gather.window(wide)
            && c.simd_friendly()
            && c.padded_ready
    }

    /// Whether `c`'s horizontal pass fits the layout: [`allowed`], and every group's taps
    /// within its window.
    #[cfg(test)]
    fn fits(c: &AxisCoeffs, gather: Gather, wide: bool) -> bool {
        let pairs = c.taps.div_ceil(2);
        let row_bytes = 3 * c.in_size as usize;
        let window = gather.window(wide);
        if !allowed(c, gather, wide) {
            return false;
        }
        groups(c, gather.group()).all(|(_, n, base)| {
            let (lo, hi) = span(&base[..n]);
            (0..pairs).all(|p| {
                let (ka, kb) = (2 * p, 2 * p + 1);
                // The pair reads bytes [lo + 3ka, hi + 3kb] (hi + 3ka without tap kb).
                let last = hi + 3 * if kb < c.taps { kb } else { ka };
                last < window_start(lo, ka, row_bytes, window) + window
            })
        })
    }

    /// The groups of `group` values of a row: the first value, how many, and per value its
    /// byte for tap 0 (`3 * pstart + channel`).
    #[cfg(test)]
    fn groups(
        c: &AxisCoeffs,
        group: usize,
    ) -> impl Iterator<Item = (usize, usize, [usize; 8])> + '_ {
        let values = 3 * c.out_size as usize;
        let pstart = &c.pstart[..];
        (0..values).step_by(group).map(move |start| {
            let n = (values - start).min(group);
            let mut base = [0usize; 8];
            for (q, b) in base.iter_mut().take(n).enumerate() {
                let (px, channel) = ((start + q) / 3, (start + q) % 3);
                *b = 3 * pstart[px] as usize + channel;
            }
            (start, n, base)
        })
    }

    /// The lowest and highest of a group's tap-0 bytes.
    #[cfg(test)]
    fn span(base: &[usize]) -> (usize, usize) {
        let lo = base.iter().copied().min().unwrap_or(0);
        let hi = base.iter().copied().max().unwrap_or(0);
        (lo, hi)
    }

    /// Where the window of the pair whose first tap is `ka` starts, for a group whose lowest
    /// tap-0 byte is `lo`: at the pair's first byte, or as far right as the row allows.
    fn window_start(lo: usize, ka: usize, row_bytes: usize, window: usize) -> usize {
        (lo + 3 * ka).min(row_bytes - window)
    }

    /// A narrow shuffle chunk's lane windows per pair step, where one of two cheaper
    /// loads fits (the chunk's halves' tap-0 bytes in `lo[h]..=hi[h]`, `lo[h] == i32::MAX`
    /// for a half without values, which keeps 0): one window for both lanes, where every
    /// step's bytes fit one ([`shared_window`]), which the kernel loads per step with
    /// `vbroadcasti128`, a plain load; else one window per lane for all steps, where each
    /// lane's bytes of all `taps` taps fit one, which the kernel loads and inserts once per
    /// chunk. `None`: each step's own lane windows, a load and an insert per step. (On Zen 3
    /// `vinserti128` runs on the shuffle pipes and costs about as much as the `pshufb` after
    /// it.) The same choice for every step keeps the kernel on one path per chunk.
    fn narrow_windows(
        lo: [i32; 2],
        hi: [i32; 2],
        taps: usize,
        row_bytes: usize,
    ) -> Option<[[usize; 2]; MAX_PAIRS / 2]> {
        let mut windows = [[0; 2]; MAX_PAIRS / 2];
        let steps = taps.div_ceil(2);
        let all_shared = windows.iter_mut().take(steps).enumerate().all(|(s, w)| {
            let shared = shared_window(lo, hi, 2 * s, (2 * s + 1).min(taps - 1), row_bytes);
            *w = [shared.unwrap_or(0); 2];
            shared.is_some()
        });
        if all_shared {
            return Some(windows);
        }
        let window = Gather::Shuffle.window(false);
        let mut wo = [0usize; 2];
        for ((wo, &lo), &hi) in wo.iter_mut().zip(&lo).zip(&hi) {
            if lo == i32::MAX {
                continue;
            }
            *wo = window_start(lo as usize, 0, row_bytes, window);
            if hi as usize + 3 * (taps - 1) >= *wo + window {
                return None;
            }
        }
        Some([wo; MAX_PAIRS / 2])
    }

    /// For a narrow shuffle step whose taps `k0..=klast` of both halves' values lie in one
    /// 16-byte window (see [`narrow_windows`]): that window's start.
    fn shared_window(
        lo: [i32; 2],
        hi: [i32; 2],
        k0: usize,
        klast: usize,
        row_bytes: usize,
    ) -> Option<usize> {
        if lo.contains(&i32::MAX) {
            return None;
        }
        let window = Gather::Shuffle.window(false);
        let wo = window_start(lo[0].min(lo[1]) as usize, k0, row_bytes, window);
        (hi[0].max(hi[1]) as usize + 3 * klast < wo + window).then_some(wo)
    }

    /// The SIMD path's plan and buffers.
    #[derive(Clone, Debug, Default)]
    pub(super) struct Scratch {
        plan: HPlan,
        /// A ring of horizontal-pass rows, `chunks * 8` values each: in pair format where
        /// `vnni`, else as plain values (see [`vertical_ring`]).
        ring: Vec<i32>,
        /// u8 rows out of the horizontal kernel, `chunks * 8` bytes apart.
        block: Vec<u8>,
        /// u8 rows into the horizontal kernel in the vertical-first order.
        rows: Vec<u8>,
        /// The vertical kernel may use VNNI's `vpdpwssd` (the CPU has it; the level allows),
        /// over a ring in pair format.
        vnni: bool,
    }

    impl Scratch {
        /// Prepares the horizontal plan; returns whether the SIMD path can run this resize.
        /// `ring_vert` is the vertical pass when it runs second, over the ring rows;
        /// `ymm512` allows the AVX-512 instructions at 256 bits where the CPU has them.
        pub(super) fn prepare(
            &mut self,
            horiz: &AxisCoeffs,
            ring_vert: Option<&AxisCoeffs>,
            ymm512: bool,
        ) -> bool {
            self.vnni = ymm512 && cpu::avx512_vnni();
            if !self.plan.prepare(horiz, self.vnni) {
                return false;
            }
            match ring_vert {
                None => true,
                Some(v) => v.taps <= MAX_V_TAPS && v.simd_friendly(),
            }
        }
    }

    /// The whole resize with the AVX2 kernels (`horiz` needed; `vert` when `need_v`); the
    /// caller checked AVX2 and [`Scratch::prepare`].
    pub(super) fn resize<S: RowSink + ?Sized>(
        r: &mut Resizer,
        src: RgbView<'_>,
        out_h: u32,
        need_v: bool,
        sink: &mut S,
    ) {
        let Resizer {
            horiz,
            vert,
            acc,
            simd,
            ..
        } = r;
        let plan = &simd.plan;
        let stride = plan.chunks * 8;
        let values = plan.values;
        let (in_w, in_h) = (src.width(), src.height());
        let out_w = horiz.out_size;
        if !need_v || vertical_first(in_w, in_h, out_w, out_h) {
            // Blocks of output rows: (vertical pass into `rows`,) horizontal pass into
            // `block`, then out to the sink.
            let row_bytes = 3 * in_w as usize;
            if need_v && simd.rows.len() < BLOCK_ROWS * row_bytes {
                simd.rows.resize(BLOCK_ROWS * row_bytes, 0);
            }
            if simd.block.len() < BLOCK_ROWS * stride {
                simd.block.resize(BLOCK_ROWS * stride, 0);
            }
            let out_h = out_h as usize;
            for y0 in (0..out_h).step_by(BLOCK_ROWS) {
                let n = BLOCK_ROWS.min(out_h - y0);
                let mut rows: [&[u8]; BLOCK_ROWS] = [&[]; BLOCK_ROWS];
                if need_v {
                    // The portable kernel, compiled for AVX2. Source rows widened once into a
                    // ring of pairs for the pair kernel (as the 512-bit path does) were slower
                    // here even with the per-count kernels: whole resizes 1.0-1.45x (a probe,
                    // 5 crops to 224x224), the widening's store per 8 values costing about as
                    // much as the vertical pass itself.
                    for (i, dst) in simd.rows.chunks_exact_mut(row_bytes).take(n).enumerate() {
                        let (start, w) = vert.taps_of(y0 + i);
                        // SAFETY: `resize` runs only after the caller checked AVX2.
                        unsafe { vertical_portable(|k| src.row((start + k) as u32), w, dst, acc) };
                    }
                    for (slot, row) in rows.iter_mut().zip(simd.rows.chunks_exact(row_bytes)) {
                        *slot = row;
                    }
                } else {
                    for (i, slot) in rows.iter_mut().take(n).enumerate() {
                        *slot = src.row((y0 + i) as u32);
                    }
                }
                // Without a vertical pass the next block's source rows come next.
                let n_ahead = if need_v { 0 } else { n.min(out_h - y0 - n) };
                let ahead = Ahead::rows(&src, y0 + n, n_ahead);
                horizontal_u8(plan, &rows[..n], ahead, &mut simd.block, stride);
                for (i, row) in simd.block.chunks_exact(stride).take(n).enumerate() {
                    sink.row_mut(y0 + i).copy_from_slice(&row[..values]);
                    sink.row_done(y0 + i);
                }
            }
            return;
        }
        // Horizontal first: source rows go through the horizontal pass in blocks, into a ring
        // of rows (pairs or values, see `vertical_ring`), as the vertical pass comes to need
        // them; the ring stays in L1/L2 where the whole intermediate image (4 bytes per
        // value) would not.
        if simd.vnni {
            vert.ensure_pairs();
        }
        let (first, end) = vert.span();
        let cap = BLOCK_ROWS + vert.taps;
        // 32-byte aligned rows (`stride` values are a multiple of 32 bytes): no load of the
        // vertical pass straddles cache lines.
        if simd.ring.len() < cap * stride + 8 {
            simd.ring.resize(cap * stride + 8, 0);
        }
        let align = simd.ring.as_ptr().align_offset(32).min(8);
        let ring = &mut simd.ring[align..align + cap * stride];
        let (mut next_base, mut start_base) = (first - first % cap, first - first % cap);
        let mut next = first;
        let mut offs = [0usize; MAX_V_TAPS];
        for yy in 0..out_h as usize {
            let (start, w) = if simd.vnni {
                vert.pair_taps_of(yy)
            } else {
                vert.taps_of(yy)
            };
            while next < start + w.len() {
                // Rows [start, next + n) fit: next < start + taps, n <= BLOCK_ROWS.
                let n = BLOCK_ROWS.min(end - next);
                let ahead = Ahead::rows(&src, next + n, BLOCK_ROWS.min(end - next - n));
                let mut src_rows: [&[u8]; BLOCK_ROWS] = [&[]; BLOCK_ROWS];
                for (i, row) in src_rows.iter_mut().take(n).enumerate() {
                    *row = src.row((next + i) as u32);
                }
                let (head, tail) = ring.split_at_mut(ring_slot(next, cap, &mut next_base) * stride);
                let mut outs: [&mut [i32]; BLOCK_ROWS] = Default::default();
                let slots = tail
                    .chunks_exact_mut(stride)
                    .chain(head.chunks_exact_mut(stride));
                for (o, s) in outs.iter_mut().zip(slots).take(n) {
                    *o = s;
                }
                horizontal_ring(plan, &src_rows[..n], ahead, &mut outs[..n], simd.vnni);
                next += n;
            }
            let s0 = ring_slot(start, cap, &mut start_base);
            for (o, s) in offs.iter_mut().zip(s0..s0 + w.len()) {
                // `w.len() <= taps < cap`: at most one wrap.
                *o = if s >= cap { s - cap } else { s } * stride;
            }
            let out = sink.row_mut(yy);
            vertical_ring(ring, &offs[..w.len()], w, &mut out[..values], simd.vnni);
            sink.row_done(yy);
        }
    }

    /// Horizontal pass of `rows` into u8 rows of `out`, `stride` bytes apart.
    fn horizontal_u8(plan: &HPlan, rows: &[&[u8]], ahead: Ahead, out: &mut [u8], stride: usize) {
        let mut store = U8Store { out, stride };
        run_horizontal(plan, rows, ahead, &mut store);
    }

    /// Horizontal pass of `rows` into the ring rows `out`: in pair format where `pairs`, else
    /// as values.
    fn horizontal_ring(
        plan: &HPlan,
        rows: &[&[u8]],
        ahead: Ahead,
        out: &mut [&mut [i32]],
        pairs: bool,
    ) {
        // The AVX2 shuffle kernel cannot inline the VBMI store.
        let vbmi = cpu::avx512_vbmi() && plan.gather != Gather::Shuffle;
        match (pairs, vbmi) {
            (false, _) => run_horizontal(
                plan,
                rows,
                ahead,
                &mut RingStore::<false, false> { rows: out },
            ),
            (true, true) => run_horizontal(
                plan,
                rows,
                ahead,
                &mut RingStore::<true, true> { rows: out },
            ),
            (true, false) => run_horizontal(
                plan,
                rows,
                ahead,
                &mut RingStore::<true, false> { rows: out },
            ),
        }
    }

    /// The horizontal pass of `rows` into `store`, prefetching (into L2) the rows `ahead`,
    /// the next block's: the source image is often cold (just decoded, or one of many).
    fn run_horizontal<S: Store>(plan: &HPlan, rows: &[&[u8]], ahead: Ahead, store: &mut S) {
        // Every window lies in `[0, row_bytes)`: the kernel's loads need rows that long, and
        // the stores need `rows.len()` rows of `chunks * 8` values.
        assert!(rows.iter().all(|r| r.len() >= plan.row_bytes));
        assert!(store.fits(rows.len(), plan.chunks * 8));
        assert_eq!(plan.win.len(), plan.chunks * plan.steps);
        if plan.gather == Gather::QuadPair {
            assert!(cpu::avx512_vnni() && plan.steps == 2);
            assert_eq!(plan.wmid.len(), plan.win.len());
            // SAFETY: (both arms) as for the quad kernel below.
            unsafe {
                if plan.wide {
                    quad_pair_kernel::<true, S>(plan, rows, ahead, store);
                } else {
                    quad_pair_kernel::<false, S>(plan, rows, ahead, store);
                }
            }
            return;
        }
        if plan.gather == Gather::Quad {
            assert!(cpu::avx512_vnni() && (1..=MAX_QUADS).contains(&plan.steps));
            assert_eq!(plan.wmid.len(), plan.win.len());
            // SAFETY: (every arm) the CPU has the quad kernel's features (asserted), and the
            // row and store bounds it relies on were asserted above.
            unsafe {
                match (plan.wide, plan.steps) {
                    (false, 1) => quad_kernel::<1, false, S>(plan, rows, ahead, store),
                    (false, 2) => quad_kernel::<2, false, S>(plan, rows, ahead, store),
                    (false, 3) => quad_kernel::<3, false, S>(plan, rows, ahead, store),
                    (false, _) => quad_kernel::<4, false, S>(plan, rows, ahead, store),
                    (true, 1) => quad_kernel::<1, true, S>(plan, rows, ahead, store),
                    (true, 2) => quad_kernel::<2, true, S>(plan, rows, ahead, store),
                    (true, 3) => quad_kernel::<3, true, S>(plan, rows, ahead, store),
                    (true, _) => quad_kernel::<4, true, S>(plan, rows, ahead, store),
                }
            }
            return;
        }
        assert!(plan.steps <= MAX_PAIRS && (plan.steps <= MAX_PAIRS / 2 || plan.wide));
        assert!(!plan.wide || plan.steps >= 2);
        match plan.gather {
            // Plans are only built with permutes where `cpu::avx512_vnni()` said yes.
            Gather::Permute | Gather::Quad | Gather::QuadPair => assert!(cpu::avx512_vnni()),
            Gather::Shuffle => assert!(!plan.wide || plan.masks_hi.len() == plan.win.len()),
        }
        // SAFETY: (every arm) the resize runs this only on CPUs with AVX2, and the permute
        // plans' features were asserted; the row and store bounds the kernels rely on were
        // asserted above.
        unsafe {
            match (plan.wide, plan.steps) {
                (false, 1) => horizontal_kernel::<1, false, S>(plan, rows, ahead, store),
                (false, 2) => horizontal_kernel::<2, false, S>(plan, rows, ahead, store),
                (false, 3) => horizontal_kernel::<3, false, S>(plan, rows, ahead, store),
                (false, _) => horizontal_kernel::<4, false, S>(plan, rows, ahead, store),
                (true, 2) => horizontal_kernel::<2, true, S>(plan, rows, ahead, store),
                (true, 3) => horizontal_kernel::<3, true, S>(plan, rows, ahead, store),
                (true, 4) => horizontal_kernel::<4, true, S>(plan, rows, ahead, store),
                (true, 5) => horizontal_kernel::<5, true, S>(plan, rows, ahead, store),
                (true, 6) => horizontal_kernel::<6, true, S>(plan, rows, ahead, store),
                (true, 7) => horizontal_kernel::<7, true, S>(plan, rows, ahead, store),
                (true, 8) => horizontal_kernel::<8, true, S>(plan, rows, ahead, store),
                (true, _) => unreachable!("asserted above: wide plans have 2 to 8 pairs"),
            }
        }
    }

    /// The kernel of `plan`'s gather, for `P` pairs and `WIDE` windows.
    ///
    /// # Safety
    /// As [`shuffle_kernel`] or [`permute_kernel`] for `plan.gather`.
    unsafe fn horizontal_kernel<const P: usize, const WIDE: bool, S: Store>(
        plan: &HPlan,
        rows: &[&[u8]],
        ahead: Ahead,
        store: &mut S,
    ) {
        // SAFETY: the caller's guarantees are the chosen kernel's.
        unsafe {
            match plan.gather {
                Gather::Shuffle => shuffle_kernel::<P, WIDE, S>(plan, rows, ahead, store),
                Gather::Permute => permute_kernel::<P, WIDE, S>(plan, rows, ahead, store),
                Gather::Quad | Gather::QuadPair => {
                    unreachable!("quad plans run `quad_kernel` or `quad_pair_kernel`")
                }
            }
        }
    }

    /// Where the horizontal kernel puts 8 finished values of row `r`, chunk `m`.
    trait Store {
        /// Whether `rows` rows of `values` values fit.
        fn fits(&self, rows: usize, values: usize) -> bool;
        /// Stores the values of 8 fixed-point sums (`sum >> PRECISION_BITS`, each in
        /// `[0, 255]`; the sums are non-negative and below 2^30).
        ///
        /// # Safety
        /// AVX2, and `r`, `m` within what [`Store::fits`] accepted.
        unsafe fn store(&mut self, r: usize, m: usize, sum: __m256i);
    }

    struct U8Store<'a> {
        out: &'a mut [u8],
        stride: usize,
    }

    impl Store for U8Store<'_> {
        fn fits(&self, rows: usize, values: usize) -> bool {
            self.stride >= values && self.out.len() >= rows * self.stride
        }

        #[inline(always)]
        unsafe fn store(&mut self, r: usize, m: usize, sum: __m256i) {
            // SAFETY: `fits` guaranteed `r * stride + 8 * m + 8 <= out.len()`.
            unsafe {
                let p = self.out.as_mut_ptr().add(r * self.stride + 8 * m);
                let v = _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(sum);
                _mm_storel_epi64(p.cast(), pack8(v));
            }
        }
    }

    /// The ring's rows, one slice each: values (`v`, an i32 in `[0, 255]`), or with `PAIRS`
    /// the pair format (`v | v << 23`, the i16 pair `(v, 128 v)`), built by [`pair_bytes`]
    /// with `VBMI` (for the kernels that enable AVX-512 VBMI). Values take one shift per 8
    /// values where the pair format takes two more operations, and on Zen 3 both shifts
    /// queue for the two pipes that also run the shuffles (a probe that stored the sums
    /// unconverted: whole resizes 11% faster, 67.5 against 76 us); [`vertical_ring`] reads
    /// values with `vpmulld`.
    struct RingStore<'a, 'b, const PAIRS: bool, const VBMI: bool> {
        rows: &'b mut [&'a mut [i32]],
    }

    impl<const PAIRS: bool, const VBMI: bool> Store for RingStore<'_, '_, PAIRS, VBMI> {
        fn fits(&self, rows: usize, values: usize) -> bool {
            self.rows.len() >= rows && self.rows.iter().all(|r| r.len() >= values)
        }

        #[inline(always)]
        unsafe fn store(&mut self, r: usize, m: usize, sum: __m256i) {
            // SAFETY: `fits` guaranteed that row `r` exists and holds `8 m + 8` values.
            unsafe {
                let p = self.rows.get_unchecked_mut(r).as_mut_ptr().add(8 * m);
                let entry = if PAIRS && VBMI {
                    pair_bytes(sum)
                } else {
                    let v = _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(sum);
                    if PAIRS {
                        _mm256_or_si256(v, _mm256_slli_epi32::<23>(v))
                    } else {
                        v
                    }
                };
                _mm256_storeu_si256(p.cast(), entry);
            }
        }
    }

    /// The pair format of 8 sums' values in two instructions instead of three shifts and an
    /// OR: one `vpmultishiftqb` copies bits 22-29 (`v`) to byte 0, bits 15-22 to byte 2 and
    /// bits 23-30 to byte 3 of each dword, and an AND keeps byte 0, bit 7 of byte 2 (`v & 1`)
    /// and byte 3 (`v >> 1`; bit 30 of a sum is 0): `v + (v << 23)`. (The 512-bit kernels do
    /// the same.)
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi")]
    #[inline]
    fn pair_bytes(sum: __m256i) -> __m256i {
        let ctrl = _mm256_set1_epi64x(i64::from_le_bytes([22, 0, 15, 23, 54, 0, 47, 55]));
        let spread = _mm256_multishift_epi64_epi8(ctrl, sum);
        _mm256_and_si256(spread, _mm256_set1_epi32(0xFF80_00FF_u32 as i32))
    }

    /// The 8 i32 of `v` (each in `[0, 255]`) as the low 8 bytes.
    #[inline(always)]
    unsafe fn pack8(v: __m256i) -> __m128i {
        // SAFETY: AVX2 is enabled in every caller; these intrinsics only touch registers.
        unsafe {
            let w = _mm256_packus_epi32(v, v);
            let b = _mm256_packus_epi16(w, w);
            _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256::<1>(b))
        }
    }

    /// The loop every horizontal kernel shares: per 8-value chunk its `N` steps' windows
    /// (copied out of the plan, so that they stay in registers across the stores) and tables,
    /// loaded once by `tables(t)` (`t`: the chunk's first entry), then per row the chunk's
    /// fixed-point sums from `row_sum(tables, windows, row)`, shifted and stored. Every fourth
    /// chunk (32 values, about a cache line of the source or less) prefetches the line after
    /// the window's start in the next block's rows.
    ///
    /// # Safety
    /// `row_sum`'s loads are in bounds for every row of `rows` and the chunk's windows; `store`
    /// fits `rows.len()` rows of `plan.chunks * 8` values; the CPU has AVX2.
    #[inline(always)]
    unsafe fn chunk_rows<const N: usize, T: Copy, S: Store>(
        plan: &HPlan,
        rows: &[&[u8]],
        ahead: Ahead,
        store: &mut S,
        tables: impl Fn(usize) -> T,
        row_sum: impl Fn(T, &[[u32; 2]; N], *const u8) -> __m256i,
    ) {
        for m in 0..plan.chunks {
            let t = m * N;
            let win: [[u32; 2]; N] = std::array::from_fn(|q| plan.win[t + q]);
            let tab = tables(t);
            if m % 4 == 0 {
                // SAFETY: a prefetch accesses nothing.
                unsafe { ahead.prefetch(win[0][0] as usize + 64) };
            }
            for (r, row) in rows.iter().enumerate() {
                let sum = row_sum(tab, &win, row.as_ptr());
                // SAFETY: AVX2 and the store bounds are the caller's.
                unsafe { store.store(r, m, sum) };
            }
        }
    }

    /// Entry `i` of a table of 32-byte rows, as a vector.
    ///
    /// # Safety
    /// AVX (`T` is 32 bytes: checked at compile time).
    #[inline(always)]
    unsafe fn load256<T>(table: &[T], i: usize) -> __m256i {
        const { assert!(std::mem::size_of::<T>() == 32) };
        // SAFETY: `table[i]` is bounds-checked and 32 readable bytes.
        unsafe { _mm256_loadu_si256((&table[i] as *const T).cast()) }
    }

    /// The horizontal kernel of the shuffle plans (AVX2).
    ///
    /// # Safety
    /// AVX2; every row at least `plan.row_bytes` long; `store` fits `rows.len()` rows of
    /// `plan.chunks * 8` values; `plan.gather == Shuffle`, `plan.steps == P`,
    /// `plan.wide == WIDE` and the tables hold `chunks * P` entries.
    #[target_feature(enable = "avx2")]
    unsafe fn shuffle_kernel<const P: usize, const WIDE: bool, S: Store>(
        plan: &HPlan,
        rows: &[&[u8]],
        ahead: Ahead,
        store: &mut S,
    ) {
        // SAFETY: window offsets are at most `row_bytes - 16` (narrow) or `row_bytes - 32`
        // (wide; the second load is at +16) per `window_start`, and rows are at least
        // `row_bytes` long, so every 16-byte load is in bounds; the table reads are
        // bounds-checked; the stores are within what the caller checked with `fits`; the
        // prefetches access nothing.
        unsafe {
            let half = _mm256_set1_epi32(HALF);
            let tables = |t: usize| {
                let masks: [__m256i; P] = std::array::from_fn(|p| load256(&plan.masks, t + p));
                let masks_hi: [__m256i; P] = std::array::from_fn(|p| {
                    if WIDE {
                        load256(&plan.masks_hi, t + p)
                    } else {
                        _mm256_setzero_si256()
                    }
                });
                let whi: [__m256i; P] = std::array::from_fn(|p| load256(&plan.whi, t + p));
                let wlo: [__m256i; P] = std::array::from_fn(|p| load256(&plan.wlo, t + p));
                (masks, masks_hi, whi, wlo)
            };
            chunk_rows::<P, _, S>(plan, rows, ahead, store, tables, |tab, win, ptr| {
                let (masks, masks_hi, whi, wlo) = tab;
                // Where the plan gave the lanes one window per step, one broadcast load per
                // step; where it gave every step the same lane windows, one load and insert
                // per chunk (`narrow_windows`).
                let shared = !WIDE && win.iter().all(|&[w0, w1]| w0 == w1);
                let same = !WIDE && !shared && win.iter().all(|&w| w == win[0]);
                let lanes = |[w0, w1]: [u32; 2]| {
                    let a = _mm_loadu_si128(ptr.add(w0 as usize).cast());
                    let b = _mm_loadu_si128(ptr.add(w1 as usize).cast());
                    _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(a), b)
                };
                let common = if same {
                    lanes(win[0])
                } else {
                    _mm256_setzero_si256()
                };
                let mut hi = _mm256_setzero_si256();
                let mut lo = half;
                for p in 0..P {
                    let [w0, w1] = win[p];
                    let (p0, p1) = (ptr.add(w0 as usize), ptr.add(w1 as usize));
                    let window = if shared {
                        _mm256_broadcastsi128_si256(_mm_loadu_si128(p0.cast()))
                    } else if same {
                        common
                    } else {
                        lanes(win[p])
                    };
                    let mut g = _mm256_shuffle_epi8(window, masks[p]);
                    if WIDE {
                        let a = _mm_loadu_si128(p0.add(16).cast());
                        let b = _mm_loadu_si128(p1.add(16).cast());
                        let window = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(a), b);
                        g = _mm256_or_si256(g, _mm256_shuffle_epi8(window, masks_hi[p]));
                    }
                    hi = _mm256_add_epi32(hi, _mm256_madd_epi16(g, whi[p]));
                    lo = _mm256_add_epi32(lo, _mm256_madd_epi16(g, wlo[p]));
                }
                _mm256_add_epi32(_mm256_slli_epi32::<11>(hi), lo)
            });
        }
    }

    /// The tap pairs' bytes of 8 values as i16 pairs (odd bytes zeroed): `vpermb` of a
    /// 32-byte window with zero-masking, as one instruction (LLVM otherwise emits a permute
    /// and an AND).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi")]
    #[inline]
    fn permute_pairs(idx: __m256i, window: __m256i) -> __m256i {
        let out: __m256i;
        // SAFETY: a register-only instruction of the enabled features; no memory, stack or
        // flags touched.
        unsafe {
            asm!(
                "vpermb {out:y}{{{k}}}{{z}}, {idx:y}, {window:y}",
                k = in(kreg) EVEN_BYTES,
                out = out(zmm_reg) out,
                idx = in(zmm_reg) idx,
                window = in(zmm_reg) window,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        out
    }

    /// Byte `i` = byte `idx[i] & 63` of the 64-byte window `first ++ second` where bit `i` of
    /// `keep` is set, else 0 (`vpermt2b` with zero-masking): [`EVEN_BYTES`] for the pair
    /// kernel, all bytes for the quad kernel. (With the intrinsic, LLVM merges the two adjacent
    /// loads into one 512-bit `vpermb`, and on Intel's Xeons 512-bit instructions slow the next
    /// decode down: see [`crate::fused::default_simd`].)
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi")]
    #[inline]
    fn permute2(keep: u32, idx: __m256i, first: __m256i, second: __m256i) -> __m256i {
        let mut out = first;
        // SAFETY: as in `permute_pairs`.
        unsafe {
            asm!(
                "vpermt2b {out:y}{{{k}}}{{z}}, {idx:y}, {second:y}",
                k = in(kreg) keep,
                out = inout(zmm_reg) out,
                idx = in(zmm_reg) idx,
                second = in(zmm_reg) second,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        out
    }

    /// `acc + dot(a, b)` over i16 pairs in one `vpdpwssd` (`vpmaddwd` + `vpaddd`'s wrapping
    /// arithmetic; the kernels' sums never wrap).
    ///
    /// # Safety
    /// AVX2, AVX-512 VNNI and VL.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn dot_acc(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        let mut acc = acc;
        // SAFETY: a register-only instruction the CPU has (caller); no memory, stack or flags
        // touched.
        unsafe {
            asm!(
                "vpdpwssd {acc}, {a}, {b}",
                acc = inout(ymm_reg) acc,
                a = in(ymm_reg) a,
                b = in(ymm_reg) b,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        acc
    }

    /// One step's tap bytes of 8 values from the window at `at`: 32 bytes through `vpermb`, or
    /// with `WIDE` 64 bytes in two loads through `vpermt2b`; with `PAIRS` the odd bytes zeroed
    /// (i16 pairs for `vpdpwssd`), else all four bytes of each dword kept (a quad for
    /// `vpdpbusd`).
    ///
    /// # Safety
    /// `at` starts `32` (`WIDE`: `64`) readable bytes.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi")]
    #[inline]
    unsafe fn step_bytes<const WIDE: bool, const PAIRS: bool>(
        at: *const u8,
        idx: __m256i,
    ) -> __m256i {
        // SAFETY: the loads are in bounds (caller); the permutes touch registers only.
        unsafe {
            let first = _mm256_loadu_si256(at.cast());
            let keep = if PAIRS { EVEN_BYTES } else { u32::MAX };
            if WIDE {
                permute2(keep, idx, first, _mm256_loadu_si256(at.add(32).cast()))
            } else if PAIRS {
                permute_pairs(idx, first)
            } else {
                _mm256_permutexvar_epi8(idx, first)
            }
        }
    }

    /// The horizontal kernel of the permute plans: per tap pair one window load (two for wide
    /// plans), one permute and two accumulating dot products, against AVX2's two loads, an
    /// insert, a shuffle, two multiplies and two adds.
    ///
    /// # Safety
    /// AVX2 and AVX-512 F/BW/VL/VBMI/VNNI; every row at least `plan.row_bytes` long; `store`
    /// fits `rows.len()` rows of `plan.chunks * 8` values; `plan.gather == Permute`,
    /// `plan.steps == P`, `plan.wide == WIDE` and the tables hold `chunks * P` entries.
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
    unsafe fn permute_kernel<const P: usize, const WIDE: bool, S: Store>(
        plan: &HPlan,
        rows: &[&[u8]],
        ahead: Ahead,
        store: &mut S,
    ) {
        // SAFETY: window offsets are at most `row_bytes - 32` (or `- 64` for wide plans, whose
        // second load is at +32) per `window_start`, and rows are at least `row_bytes` long, so
        // every 32-byte load is in bounds; the table reads are bounds-checked; the stores are
        // within what the caller checked with `fits`; the prefetches access nothing.
        unsafe {
            let (bias, half) = (_mm256_set1_epi32(PAIR_HORNER_BIAS), _mm256_set1_epi32(HALF));
            let tables = |t: usize| {
                let idx: [__m256i; P] = std::array::from_fn(|p| load256(&plan.masks, t + p));
                let whi: [__m256i; P] = std::array::from_fn(|p| load256(&plan.whi, t + p));
                let wlo: [__m256i; P] = std::array::from_fn(|p| load256(&plan.wlo, t + p));
                (idx, whi, wlo)
            };
            chunk_rows::<P, _, S>(plan, rows, ahead, store, tables, |tab, win, ptr| {
                let (idx, whi, wlo) = tab;
                let g = |p: usize| step_bytes::<WIDE, true>(ptr.add(win[p][0] as usize), idx[p]);
                if P == 1 {
                    // Horner's rule, `(H << 8) + L`, from the rounding bias over 256: no
                    // zeroed accumulator and no add (1-2 taps, about a quarter of
                    // RandomResizedCrop's crops).
                    let g0 = g(0);
                    let acc = dot_acc(bias, g0, whi[0]);
                    dot_acc(_mm256_slli_epi32::<8>(acc), g0, wlo[0])
                } else {
                    let (mut hi, mut lo) = (_mm256_setzero_si256(), half);
                    for p in 0..P {
                        let gp = g(p);
                        hi = dot_acc(hi, gp, whi[p]);
                        lo = dot_acc(lo, gp, wlo[p]);
                    }
                    _mm256_add_epi32(_mm256_slli_epi32::<8>(hi), lo)
                }
            });
        }
    }

    dot_instruction! {
        /// `acc + dot(a, b)` over 4 unsigned bytes of `a` times 4 signed bytes of `b`
        /// (`vpdpbusd` on 256-bit registers, any of the 32).
        #[target_feature(enable = "avx512f,avx512vl,avx512vnni")]
        fn dpbusd(__m256i) = "vpdpbusd {acc:y}, {a:y}, {b:y}"
    }

    /// Where the pair kernel's Horner chain starts: the rounding bias over 256, which the
    /// chain's shift by 8 brings back to `HALF` exactly.
    const PAIR_HORNER_BIAS: i32 = {
        assert!(HALF % (1 << 8) == 0);
        HALF >> 8
    };

    /// Where the Horner chains of the quad kernels start: the rounding bias over 65536, which
    /// the chain's two shifts by 8 bring back to `HALF` exactly.
    const HORNER_BIAS: i32 = {
        assert!(HALF % (1 << 16) == 0);
        HALF >> 16
    };

    /// The horizontal kernel of the quad plans: per four taps one window load (two for wide
    /// plans), one unmasked permute that puts each value's four bytes in its dword, and three
    /// `vpdpbusd` against the weights' digits of 65536, 256 and 1, whose sums combine exactly
    /// into Pillow's (the digits are signed, so no offset is needed: the pixels are the
    /// unsigned operand).
    ///
    /// # Safety
    /// AVX2 and AVX-512 F/BW/VL/VBMI/VNNI; every row at least `plan.row_bytes` long; `store`
    /// fits `rows.len()` rows of `plan.chunks * 8` values; `plan.gather == Quad`,
    /// `plan.steps == Q`, `plan.wide == WIDE` and the tables hold `chunks * Q` entries.
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
    unsafe fn quad_kernel<const Q: usize, const WIDE: bool, S: Store>(
        plan: &HPlan,
        rows: &[&[u8]],
        ahead: Ahead,
        store: &mut S,
    ) {
        // SAFETY: as in `permute_kernel` (the same windows); the digit tables are
        // bounds-checked.
        unsafe {
            let (bias, half, zero) = (
                _mm256_set1_epi32(HORNER_BIAS),
                _mm256_set1_epi32(HALF),
                _mm256_setzero_si256(),
            );
            let tables = |t: usize| {
                let idx: [__m256i; Q] = std::array::from_fn(|q| load256(&plan.masks, t + q));
                let wa: [__m256i; Q] = std::array::from_fn(|q| load256(&plan.whi, t + q));
                let wb: [__m256i; Q] = std::array::from_fn(|q| load256(&plan.wmid, t + q));
                let wc: [__m256i; Q] = std::array::from_fn(|q| load256(&plan.wlo, t + q));
                (idx, wa, wb, wc)
            };
            chunk_rows::<Q, _, S>(plan, rows, ahead, store, tables, |tab, win, ptr| {
                let (idx, wa, wb, wc) = tab;
                let g: [__m256i; Q] = std::array::from_fn(|q| {
                    step_bytes::<WIDE, false>(ptr.add(win[q][0] as usize), idx[q])
                });
                if Q == 1 {
                    // Horner's rule, `(((A << 8) + B) << 8) + C`, in one accumulator that
                    // starts at the rounding bias over 65536: no zeroed accumulators and two
                    // adds fewer than the general form (typical crops, 3-4 taps: their
                    // resizes 4-5% faster in a probe). With more quads, one chain of 3 Q dot
                    // products, or two chains, were 1-3% slower than the general form.
                    let mut acc = bias;
                    acc = dpbusd(acc, g[0], wa[0]);
                    acc = _mm256_slli_epi32::<8>(acc);
                    acc = dpbusd(acc, g[0], wb[0]);
                    acc = _mm256_slli_epi32::<8>(acc);
                    dpbusd(acc, g[0], wc[0])
                } else {
                    let (mut a, mut b, mut c) = (zero, zero, half);
                    for q in 0..Q {
                        a = dpbusd(a, g[q], wa[q]);
                        b = dpbusd(b, g[q], wb[q]);
                        c = dpbusd(c, g[q], wc[q]);
                    }
                    let ab =
                        _mm256_add_epi32(_mm256_slli_epi32::<16>(a), _mm256_slli_epi32::<8>(b));
                    _mm256_add_epi32(ab, c)
                }
            });
        }
    }

    /// The horizontal kernel of the quad-pair plans (5 or 6 taps): per value the quad's three
    /// digit sums and the pair's two half sums in one Horner chain,
    /// `(((A << 8) + B + H) << 8) + C + L` from a start at the rounding bias over 65536, where
    /// `A`, `B`, `C` are the quad's dot products with the digits of 65536, 256 and 1 and `H`,
    /// `L` the pair's with its weights' `w >> 8` and `w & 255`: the same integer as Pillow's
    /// sum, so the same pixels. Every operation wraps modulo 2^32, and the final sum is in
    /// `[0, 2^30)`, so the intermediate values need no range of their own.
    ///
    /// # Safety
    /// As [`quad_kernel`], with `plan.gather == QuadPair` (`plan.steps == 2`).
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
    unsafe fn quad_pair_kernel<const WIDE: bool, S: Store>(
        plan: &HPlan,
        rows: &[&[u8]],
        ahead: Ahead,
        store: &mut S,
    ) {
        // SAFETY: as in `permute_kernel` (the same windows); the tables are bounds-checked.
        unsafe {
            let bias = _mm256_set1_epi32(HORNER_BIAS);
            let tables = |t: usize| {
                let idx: [__m256i; 2] = std::array::from_fn(|s| load256(&plan.masks, t + s));
                let quad = [&plan.whi, &plan.wmid, &plan.wlo].map(|w| load256(w, t));
                let pair = [&plan.whi, &plan.wlo].map(|w| load256(w, t + 1));
                (idx, quad, pair)
            };
            chunk_rows::<2, _, S>(plan, rows, ahead, store, tables, |tab, win, ptr| {
                let (idx, [wa, wb, wc], [wh, wl]) = tab;
                let quad = step_bytes::<WIDE, false>(ptr.add(win[0][0] as usize), idx[0]);
                let pair = step_bytes::<WIDE, true>(ptr.add(win[1][0] as usize), idx[1]);
                let mut acc = dpbusd(bias, quad, wa);
                acc = _mm256_slli_epi32::<8>(acc);
                acc = dpbusd(acc, quad, wb);
                acc = dot_acc(acc, pair, wh);
                acc = _mm256_slli_epi32::<8>(acc);
                acc = dpbusd(acc, quad, wc);
                dot_acc(acc, pair, wl)
            });
        }
    }

    /// One output row of the vertical pass: output row = the rows at `offs` (value offsets into
    /// `ring`) weighted by `w`. With `vnni`, rows and weights are in pair format and each tap
    /// is one `vpdpwssd`; else the rows are values and the weights whole, and each tap is a
    /// `vpmulld` and an add, as many operations as `vpmaddwd` and an add over pairs, with
    /// cheaper rows (see [`RingStore`]). (`vpmulld` runs at `vpmaddwd`'s rate on Zen 3, two a
    /// cycle; on Intel's cores it is two micro-ops.)
    fn vertical_ring(ring: &[i32], offs: &[usize], w: &[i32], out: &mut [u8], vnni: bool) {
        let chunks = out.len().div_ceil(8);
        assert!(w.len() <= MAX_V_TAPS && offs.len() == w.len());
        assert!(offs.iter().all(|&o| o + chunks * 8 <= ring.len()));
        if vnni {
            assert!(cpu::avx512_vnni());
            // SAFETY: the CPU has AVX-512 VNNI and VL (asserted) and AVX2; bounds asserted
            // above.
            unsafe { with_taps!(w.len(), |T| vertical_kernel::<true, T>(ring, offs, w, out)) }
        } else {
            // SAFETY: the resize runs this only on CPUs with AVX2; bounds asserted above.
            unsafe { with_taps!(w.len(), |T| vertical_kernel::<false, T>(ring, offs, w, out)) }
        }
    }

    /// `acc` plus a ring row's 8 entries `a` times a tap's weight `b`: pairs through
    /// [`dot_acc`] where `PAIRS`, else values by `vpmulld` (whose products stay below 2^30).
    ///
    /// # Safety
    /// AVX2, and AVX-512 VNNI and VL where `PAIRS`.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn tap_acc<const PAIRS: bool>(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        if PAIRS {
            // SAFETY: the caller's CPU has VNNI and VL where `PAIRS`.
            unsafe { dot_acc(acc, a, b) }
        } else {
            _mm256_add_epi32(acc, _mm256_mullo_epi32(a, b))
        }
    }

    /// # Safety
    /// AVX2 (and AVX-512 VNNI and VL where `PAIRS`); `w.len() <= MAX_V_TAPS`,
    /// `offs.len() == w.len()` and, unless 0, `TAPS == w.len()`; each row at `offs` holds
    /// `8 * ceil(out.len() / 8)` values of `ring`.
    #[target_feature(enable = "avx2")]
    unsafe fn vertical_kernel<const PAIRS: bool, const TAPS: usize>(
        ring: &[i32],
        offs: &[usize],
        w: &[i32],
        out: &mut [u8],
    ) {
        // SAFETY: each load reads 8 values at `offs[k] + v` with `v + 8 <= 8 * ceil(n / 8)`,
        // inside `ring`; stores cover `[8m, 8m + 32)` or `[8m, 8m + 8)` only when that lies
        // within `out`, and the tail goes through a copy.
        unsafe {
            let taps = if TAPS == 0 { w.len() } else { TAPS };
            let mut wv = [_mm256_setzero_si256(); MAX_V_TAPS];
            let mut rows = [ring.as_ptr(); MAX_V_TAPS];
            for k in 0..taps {
                wv[k] = _mm256_set1_epi32(w[k]);
                rows[k] = ring.as_ptr().add(offs[k]);
            }
            let half = _mm256_set1_epi32(HALF);
            let n = out.len();
            let mut m = 0;
            // 32 values per step: four accumulators share each weight broadcast, and one
            // 32-byte store replaces four 8-byte ones.
            let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
            while 8 * m + 32 <= n {
                let (mut a0, mut a1, mut a2, mut a3) = (half, half, half, half);
                for (&row, &wk) in rows.iter().zip(&wv).take(taps) {
                    let p = row.add(8 * m);
                    a0 = tap_acc::<PAIRS>(a0, _mm256_loadu_si256(p.cast()), wk);
                    a1 = tap_acc::<PAIRS>(a1, _mm256_loadu_si256(p.add(8).cast()), wk);
                    a2 = tap_acc::<PAIRS>(a2, _mm256_loadu_si256(p.add(16).cast()), wk);
                    a3 = tap_acc::<PAIRS>(a3, _mm256_loadu_si256(p.add(24).cast()), wk);
                }
                let s01 = _mm256_packus_epi32(
                    _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(a0),
                    _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(a1),
                );
                let s23 = _mm256_packus_epi32(
                    _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(a2),
                    _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(a3),
                );
                // Bytes are in lane order (a0[0..4] a1[0..4] a2[0..4] a3[0..4] | the
                // upper halves); gather the dwords back into value order.
                let bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(s01, s23), order);
                _mm256_storeu_si256(out.as_mut_ptr().add(8 * m).cast(), bytes);
                m += 4;
            }
            while 8 * m < n {
                let mut acc = half;
                for (&row, &wk) in rows.iter().zip(&wv).take(taps) {
                    acc = tap_acc::<PAIRS>(acc, _mm256_loadu_si256(row.add(8 * m).cast()), wk);
                }
                let bytes = pack8(_mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(acc));
                if 8 * m + 8 <= n {
                    _mm_storel_epi64(out.as_mut_ptr().add(8 * m).cast(), bytes);
                } else {
                    let mut tail = [0u8; 16];
                    _mm_storeu_si128(tail.as_mut_ptr().cast(), bytes);
                    out[8 * m..].copy_from_slice(&tail[..n - 8 * m]);
                }
                m += 1;
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn plans_take_the_layout_each_downscale_needs() {
            // The parity tests compare results; this pins which kernel they exercised. Input
            // widths to 224 outputs: upscales (2 taps) take the 256-bit pair permutes; 3 and 4
            // taps a quad, 5 and 6 (2x to 3x) a quad and a pair, in 32-byte windows and for a
            // few widths 64-byte ones; 7 taps and more two quads or more, in 64-byte windows up
            // to about 6x; then the pair permutes' 64-byte windows up to about 6.7x, the AVX2
            // shuffles' 32-byte lane windows up to 8x (8 pairs); rows shorter than a window
            // take a smaller one. (in, out, the layout: gather and wide, or none that fits)
            type Case = (u32, u32, Option<(Gather, bool)>);
            let cases: [Case; 13] = [
                (200, 224, Some((Gather::Permute, false))),
                (300, 224, Some((Gather::Quad, false))),
                (500, 224, Some((Gather::QuadPair, false))),
                (600, 224, Some((Gather::QuadPair, false))),
                (601, 224, Some((Gather::QuadPair, true))),
                (700, 224, Some((Gather::Quad, true))),
                (1300, 224, Some((Gather::Quad, true))),
                (1400, 224, Some((Gather::Permute, true))),
                (1680, 224, Some((Gather::Shuffle, true))),
                (1800, 224, None),
                (11, 5, Some((Gather::QuadPair, false))),
                (17, 5, Some((Gather::Quad, false))),
                (10, 7, Some((Gather::Shuffle, false))),
            ];
            for (in_size, out, expected) in cases {
                let mut c = AxisCoeffs::default();
                c.prepare(in_size, out);
                c.ensure_padded();
                let mut plan = HPlan::default();
                let built = plan
                    .prepare(&c, cpu::avx512_vnni())
                    .then_some((plan.gather, plan.wide));
                let expected = match expected {
                    // Without AVX-512 the permute layouts are never tried.
                    Some((Gather::Permute | Gather::Quad | Gather::QuadPair, _))
                        if !cpu::avx512_vnni() =>
                    {
                        built
                    }
                    e => e,
                };
                assert_eq!(built, expected, "{in_size} -> {out}");
            }
        }

        #[test]
        fn narrow_shuffles_take_the_cheapest_windows_that_fit() {
            if !cpu::avx2() {
                return;
            }
            // Every index of a narrow shuffle plan reads inside its lane's 16 bytes, whichever
            // windows it has. Per chunk (`narrow_windows`): downscales to about 1.5x give most
            // chunks one window for both lanes (the typical crop's 330 -> 224: 72 of 84), up
            // to about 2x most of the rest one window per lane for all steps; beyond, each
            // step its own.
            let mut kinds_at = Vec::new();
            for in_size in (2..=40).chain(100..=700) {
                for out in [1, 5, 224] {
                    let mut c = AxisCoeffs::default();
                    c.prepare(in_size, out);
                    c.ensure_padded();
                    let mut plan = HPlan::default();
                    // SAFETY: the CPU has AVX2 (checked above).
                    if !unsafe { plan.fill_vector(&c, Gather::Shuffle, false) } {
                        continue;
                    }
                    for mask in &plan.masks {
                        assert!(
                            mask.iter().all(|&i| i == 0x80 || i < 16),
                            "{in_size} -> {out}"
                        );
                    }
                    let chunks = plan.win.chunks_exact(plan.steps);
                    let shared = chunks
                        .clone()
                        .filter(|steps| steps.iter().all(|&[w0, w1]| w0 == w1))
                        .count();
                    let per_lane = chunks
                        .filter(|steps| steps.iter().all(|&w| w == steps[0] && w[0] != w[1]))
                        .count();
                    if out == 224 {
                        kinds_at.push((in_size, (shared, per_lane)));
                    }
                }
            }
            let kinds = |size: u32| kinds_at.iter().find(|&&(s, _)| s == size).map(|s| s.1);
            assert_eq!(
                kinds(224),
                Some((84, 0)),
                "an identity width's chunks all share"
            );
            assert_eq!(kinds(330), Some((72, 12)));
            assert_eq!(kinds(400), Some((25, 59)));
            assert_eq!(kinds(430), Some((10, 74)));
            assert_eq!(kinds(600), Some((1, 0)));
        }

        #[test]
        fn signed_digits_rebuild_every_weight() {
            for w in -(1 << 22)..=(1 << 22) {
                let [a, b, c] = signed_digits(w).map(i32::from);
                assert_eq!(65536 * a + 256 * b + c, w, "{w}");
            }
        }

        #[test]
        fn vector_pixel_tables_equal_the_scalar_ones() {
            if !cpu::avx2() {
                return;
            }
            let ins = (1..=40).chain((41..1500).step_by(11));
            let outs = [1, 2, 3, 7, 8, 9, 64, 223, 224, 301];
            let mut checked = 0;
            for (in_size, out) in ins.flat_map(|i| outs.map(|o| (i, o))) {
                for (gather, mirrored) in [Gather::Quad, Gather::QuadPair, Gather::Permute]
                    .into_iter()
                    .flat_map(|g| [(g, false), (g, true)])
                {
                    let mut c = AxisCoeffs::default();
                    c.prepare_mirrored(in_size, out, mirrored);
                    c.ensure_padded();
                    if gather == Gather::QuadPair && !(5..=6).contains(&c.taps) {
                        continue;
                    }
                    let case = format!("{in_size} -> {out}, {gather:?}, mirrored {mirrored}");
                    let (mut scalar, mut vector) = (HPlan::default(), HPlan::default());
                    scalar.set_layout(&c, gather, false);
                    vector.set_layout(&c, gather, false);
                    let len = scalar.fill_pixels_scalar(&c, gather);
                    // SAFETY: the CPU has AVX2 (checked above).
                    assert_eq!(unsafe { vector.fill_pixels(&c, gather) }, len, "{case}");
                    assert_eq!(vector.px_pos, scalar.px_pos, "{case}");
                    assert_eq!(vector.px_hi, scalar.px_hi, "{case}");
                    assert_eq!(vector.px_mid, scalar.px_mid, "{case}");
                    assert_eq!(vector.px_lo, scalar.px_lo, "{case}");
                    checked += 1;
                }
            }
            assert!(checked > 5000, "only {checked} tables compared");
        }

        #[test]
        fn vector_plans_equal_the_scalar_ones() {
            if !cpu::avx2() {
                return;
            }
            let ins = (1..=80).chain((81..2000).step_by(7));
            let outs = [1, 2, 3, 4, 5, 7, 9, 13, 64, 100, 223, 224, 301];
            let layouts = [Gather::Permute, Gather::Shuffle].map(|g| [(g, false), (g, true)]);
            let mut checked = 0;
            for (in_size, out) in ins.flat_map(|i| outs.map(|o| (i, o))) {
                for ((gather, wide), mirrored) in layouts
                    .into_iter()
                    .flatten()
                    .flat_map(|l| [(l, false), (l, true)])
                {
                    let mut c = AxisCoeffs::default();
                    c.prepare_mirrored(in_size, out, mirrored);
                    c.ensure_padded();
                    let case =
                        format!("{in_size} -> {out}, {gather:?}, wide {wide}, mirrored {mirrored}");
                    let mut scalar = HPlan::default();
                    let fits = fits(&c, gather, wide);
                    if fits {
                        scalar.fill(&c, gather, wide);
                    }
                    let mut vector = HPlan::default();
                    // SAFETY: the CPU has AVX2 (checked above).
                    let built = unsafe { vector.fill_vector(&c, gather, wide) };
                    assert_eq!(built, fits, "{case}");
                    if !fits {
                        continue;
                    }
                    checked += 1;
                    let shape =
                        |p: &HPlan| (p.gather, p.steps, p.wide, p.chunks, p.values, p.row_bytes);
                    assert_eq!(shape(&vector), shape(&scalar), "{case}");
                    assert_eq!(vector.win, scalar.win, "{case}");
                    assert_eq!(vector.masks, scalar.masks, "{case}");
                    assert_eq!(vector.masks_hi, scalar.masks_hi, "{case}");
                    assert_eq!(vector.whi, scalar.whi, "{case}");
                    assert_eq!(vector.wlo, scalar.wlo, "{case}");
                }
            }
            assert!(checked > 3000, "only {checked} plans compared");
        }
    }
}

/// AVX-512 kernels (F, BW, VL, VBMI, VNNI): 16 values per vector, byte permutes over 64-byte
/// windows and dot-product instructions, so that a tap costs about one permute and one `vpdp*`.
///
/// Weights are split as `w = 256 h + l` with `l` in `[-128, 127]` and `h <= 2^14`. The high
/// parts multiply `256 (v - 128)`: the tap's byte XOR 0x80 put into the high byte of an i16
/// lane (the low byte taken from a zeroed byte of the window), two taps per `vpdpwssd`; the
/// low parts multiply the plain bytes, four taps per `vpdpbusd` (unsigned bytes times signed
/// bytes). Both land in one i32 accumulator that starts at `HALF + 32768 * sum(h)`, which
/// cancels the `- 128`: the accumulator ends at exactly Pillow's `HALF + sum(v w)`. The sum's
/// range is the same as in the AVX2 kernels (non-negative, below `2^30`), so no clamping.
///
/// The horizontal pass runs chunk by chunk over blocks of rows (each chunk's plan loaded once a
/// block), prefetching the next block's source rows into L2. The horizontal-first order keeps
/// only the rows the vertical pass still needs, in a ring of 64-byte aligned pair-format rows
/// (see [`x86`]) that stays in L1/L2, instead of the whole intermediate image; the vertical
/// pass is then one `vpdpwssd` per tap and 16 values. The vertical-first order widens each
/// source row once into a ring of `(v, 256 (v - 128))` lane pairs, runs the same vertical
/// kernel over them against `(w mod 256, w / 256)` weights (the bias again cancels the
/// `- 128`) into u8 rows, and those through the horizontal pass.
///
/// `vpdpwssd`/`vpdpbusd` and zero-masked `vpermb` are issued with `asm!`: LLVM otherwise
/// splits some dot products into `vpmaddwd` + `vpaddd`, and turns the masked permute into a
/// two-table one or a permute and an AND, each a second uop on the ports these kernels
/// saturate.
#[cfg(target_arch = "x86_64")]
mod x512 {
    use std::arch::asm;
    use std::arch::x86_64::*;

    use super::{
        ring_slot, vertical_first, Ahead, AxisCoeffs, Resizer, RowSink, HALF, PRECISION_BITS,
    };
    use crate::image::RgbView;

    /// Rows the horizontal kernel runs per block (each chunk's plan is loaded once a block).
    const BLOCK: usize = 32;
    /// Tap pairs the horizontal plan handles: 16 taps, downscales up to about 7x (when the
    /// windows fit).
    const MAX_PAIRS: usize = 8;
    /// Taps the vertical kernels take (downscales up to about 30x); beyond, AVX2/portable.
    const MAX_V_TAPS: usize = 64;
    /// Bytes 0 and 3 of every dword: where [`widen`] puts each value.
    const LO_HI_BYTES: u64 = 0x9999_9999_9999_9999;

    /// 64 bytes, aligned for vector loads and stores.
    #[repr(C, align(64))]
    #[derive(Clone, Copy, Debug)]
    struct Z([u8; 64]);

    impl Default for Z {
        fn default() -> Self {
            Z([0; 64])
        }
    }

    dot_instruction! {
        /// `acc + dot(a, b)` over i16 pairs (`vpdpwssd`).
        #[target_feature(enable = "avx512f,avx512vnni")]
        fn dpwssd(__m512i) = "vpdpwssd {acc}, {a}, {b}"
    }

    /// `vpermb` with zero-masking: byte `i` = `table[idx[i] & 63]` where bit `i` of `keep` is
    /// set, else 0. (LLVM turns the intrinsic into a two-table permute against zero, two or
    /// three uops on Ice Lake, or a permute and an AND.)
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
    #[inline]
    fn permb_z(keep: u64, idx: __m512i, table: __m512i) -> __m512i {
        let out: __m512i;
        // SAFETY: a register-only instruction of the enabled features; no memory, stack or
        // flags touched.
        unsafe {
            asm!(
                "vpermb {out}{{{k}}}{{z}}, {idx}, {table}",
                k = in(kreg) keep,
                out = out(zmm_reg) out,
                idx = in(zmm_reg) idx,
                table = in(zmm_reg) table,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        out
    }

    dot_instruction! {
        /// `acc + dot(a, b)` over 4 unsigned bytes of `a` times 4 signed bytes of `b`
        /// (`vpdpbusd`).
        #[target_feature(enable = "avx512f,avx512vnni")]
        fn dpbusd(__m512i) = "vpdpbusd {acc}, {a}, {b}"
    }

    /// The horizontal pass per 16-value chunk: a window offset and, in `data`, the start value
    /// of the accumulators, the permute indices and weights of the high parts (two taps per
    /// vector) and of the low parts (four taps per vector).
    #[derive(Clone, Debug, Default)]
    pub(super) struct ZPlan {
        /// The coefficients' key it was built for, and whether the kernel can run it.
        key: Option<((u32, u32, bool), bool)>,
        /// High-part vectors per chunk (`taps / 2` rounded up); low-part ones are half that.
        pairs: usize,
        /// 128-byte windows (two-table permutes) instead of 64-byte ones.
        two: bool,
        chunks: usize,
        /// Values per output row, `3 * out_w`.
        values: usize,
        /// Source row length the windows were checked against, `3 * in_w`.
        row_bytes: usize,
        /// Per chunk: the window's first byte in the source row.
        win: Vec<u32>,
        /// Per chunk: the dwords of the (two) window(s) to keep in the flipped copy; the one
        /// left out is zeroed (the high parts' zero low bytes).
        zmask: Vec<u32>,
        /// Per chunk: the range of `fetch_blocks` its windows reach first (each 64-byte
        /// block of a row once), which the kernel prefetches in the next block's rows.
        fetch: Vec<(u16, u16)>,
        fetch_blocks: Vec<u16>,
        /// Which 64-byte blocks of a row the windows so far reach (while building).
        reached: Vec<bool>,
        /// Per chunk, `per_chunk()` vectors: bias, high indices, high weights, low indices,
        /// low weights.
        data: Vec<Z>,
        /// Per output pixel (`out_w + 16` entries, zero padded, per pair or quad): the
        /// accumulator start, the first byte it reads, the high-part weight pairs and the
        /// low-part weight quads; the chunks are expanded from these.
        px_bias: Vec<i32>,
        px_pos: Vec<i32>,
        px_hi: Vec<i32>,
        px_lo: Vec<i32>,
    }

    impl ZPlan {
        fn quads(&self) -> usize {
            self.pairs.div_ceil(2)
        }

        fn per_chunk(&self) -> usize {
            1 + 2 * self.pairs + 2 * self.quads()
        }

        /// Window bytes.
        fn window(two: bool) -> usize {
            if two {
                128
            } else {
                64
            }
        }

        /// Builds the plan for `c` unless it is the cached one; returns whether the kernel
        /// can run it. Only called where the CPU has the module's features.
        fn prepare(&mut self, c: &AxisCoeffs) -> bool {
            if let Some((key, ok)) = self.key {
                if key == c.key() {
                    return ok;
                }
            }
            let ok = self.build(c);
            self.key = Some((c.key(), ok));
            ok
        }

        fn build(&mut self, c: &AxisCoeffs) -> bool {
            let taps = c.taps;
            let pairs = taps.div_ceil(2);
            let row_bytes = 3 * c.in_size as usize;
            // (Row blocks are numbered in u16: rows up to 4 MiB.)
            if pairs > MAX_PAIRS
                || row_bytes < 64
                || row_bytes > 64 * usize::from(u16::MAX)
                || !c.simd_friendly()
                || !c.padded_ready
            {
                return false;
            }
            let out = c.out_size as usize;
            self.pairs = pairs;
            self.values = 3 * out;
            self.chunks = self.values.div_ceil(16);
            self.row_bytes = row_bytes;
            let quads = self.quads();
            // Per pixel, in blocks of 16 (and 16 more entries: the chunks load 16 from any
            // pixel); every entry a chunk uses is overwritten, so the arrays only grow.
            let len = out.next_multiple_of(16) + 16;
            for (v, n) in [
                (&mut self.px_bias, len),
                (&mut self.px_pos, len),
                (&mut self.px_hi, pairs * len),
                (&mut self.px_lo, quads * len),
            ] {
                if v.len() < n {
                    v.resize(n, 0);
                }
            }
            // SAFETY: plans are only prepared on the AVX-512 path (the CPU has the features);
            // the arrays were sized above; `pweights` holds `out * taps` weights and `pstart`
            // `out` starts (padded coefficients, checked ready above).
            unsafe { self.fill_pixels(&c.pweights[..out * taps], &c.pstart[..out], taps, len) };
            // Every vector is overwritten: growing only.
            self.data
                .resize(self.chunks * self.per_chunk(), Z::default());
            for two in [false, true] {
                if row_bytes < Self::window(two) {
                    break;
                }
                self.two = two;
                // SAFETY: plans are only prepared on the AVX-512 path (the CPU has the
                // features); the per-pixel arrays hold `len` entries per pair/quad and `data`
                // `chunks * per_chunk()` vectors, as `expand` needs.
                if unsafe { self.expand(taps, len) } {
                    return self.consistent();
                }
            }
            false
        }

        /// Whether the plan was built and the kernel can run it (see [`ZPlan::consistent`]).
        fn runnable(&self) -> bool {
            matches!(self.key, Some((_, true)))
        }

        /// The bounds `horizontal_kernel` relies on, checked once per plan rather than on
        /// every call: one plan serves a whole image, block after block. Nothing changes a
        /// plan but `build`.
        fn consistent(&self) -> bool {
            let window = Self::window(self.two);
            let chunks = self.chunks;
            let fetch_in_row = self.fetch.iter().all(|&(first, count)| {
                let blocks = self
                    .fetch_blocks
                    .get(first as usize..(first + count) as usize);
                blocks.is_some_and(|b| b.iter().all(|&k| 64 * (k as usize) < self.row_bytes))
            });
            self.win.len() == chunks
                && self.zmask.len() == chunks
                && self.fetch.len() == chunks
                && fetch_in_row
                && self.data.len() == chunks * self.per_chunk()
                && self
                    .win
                    .iter()
                    .all(|&w| w as usize + window <= self.row_bytes)
                && (1..=MAX_PAIRS).contains(&self.pairs)
        }

        /// The per-pixel arrays from the padded coefficients, 16 pixels at a time.
        ///
        /// # Safety
        /// The module's AVX-512 features; `pweights.len() == pstart.len() * taps`; the arrays
        /// hold `len >= pstart.len()` rounded up to 16 entries (per pair or quad).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
        unsafe fn fill_pixels(
            &mut self,
            pweights: &[i32],
            pstart: &[u32],
            taps: usize,
            len: usize,
        ) {
            let out = pstart.len();
            let lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
            for p0 in (0..out).step_by(16) {
                let valid = ((1u32 << (out - p0).min(16)) - 1) as __mmask16;
                let first = _mm512_mullo_epi32(
                    _mm512_add_epi32(_mm512_set1_epi32(p0 as i32), lane),
                    _mm512_set1_epi32(taps as i32),
                );
                let mut hsum = _mm512_setzero_si512();
                let mut hi = [_mm512_setzero_si512(); MAX_PAIRS];
                let mut lo = [_mm512_setzero_si512(); MAX_PAIRS / 2];
                for k in 0..taps {
                    let at = _mm512_add_epi32(first, _mm512_set1_epi32(k as i32));
                    // SAFETY: valid lanes read weight `(p0 + lane) * taps + k` of the
                    // `out * taps`; the others are masked off (not read).
                    let w = unsafe {
                        _mm512_mask_i32gather_epi32::<4>(
                            _mm512_setzero_si512(),
                            valid,
                            at,
                            pweights.as_ptr(),
                        )
                    };
                    // w = 256 h + l, l in [-128, 127].
                    let h = _mm512_srai_epi32::<8>(_mm512_add_epi32(w, _mm512_set1_epi32(128)));
                    let l = _mm512_sub_epi32(w, _mm512_slli_epi32::<8>(h));
                    hsum = _mm512_add_epi32(hsum, h);
                    let hs = _mm_cvtsi32_si128(16 * (k % 2) as i32);
                    hi[k / 2] = _mm512_or_si512(hi[k / 2], _mm512_sll_epi32(h, hs));
                    let l = _mm512_and_si512(l, _mm512_set1_epi32(0xff));
                    let ls = _mm_cvtsi32_si128(8 * (k % 4) as i32);
                    lo[k / 4] = _mm512_or_si512(lo[k / 4], _mm512_sll_epi32(l, ls));
                }
                let bias = _mm512_add_epi32(_mm512_set1_epi32(HALF), _mm512_slli_epi32::<15>(hsum));
                // SAFETY: 16 entries from `p0 < out` lie within `len` (a multiple of 16 at
                // least `out`); the start load is masked to the `out - p0` left.
                unsafe {
                    let st = _mm512_maskz_loadu_epi32(valid, pstart[p0..].as_ptr().cast());
                    let pos = _mm512_mullo_epi32(st, _mm512_set1_epi32(3));
                    _mm512_storeu_si512(self.px_pos[p0..p0 + 16].as_mut_ptr().cast(), pos);
                    _mm512_storeu_si512(self.px_bias[p0..p0 + 16].as_mut_ptr().cast(), bias);
                    for (p, v) in hi.iter().enumerate().take(taps.div_ceil(2)) {
                        let at = p * len + p0;
                        _mm512_storeu_si512(self.px_hi[at..at + 16].as_mut_ptr().cast(), *v);
                    }
                    for (q, v) in lo.iter().enumerate().take(taps.div_ceil(4)) {
                        let at = q * len + p0;
                        _mm512_storeu_si512(self.px_lo[at..at + 16].as_mut_ptr().cast(), *v);
                    }
                }
            }
        }

        /// Fills `win` and `data` from the per-pixel arrays; false if a chunk's taps do not
        /// fit its window.
        ///
        /// # Safety
        /// The module's AVX-512 features; `px_*` hold `len = out_w + 16` entries (per pair
        /// or quad), `data` `chunks * per_chunk()` vectors.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
        unsafe fn expand(&mut self, taps: usize, len: usize) -> bool {
            let (pairs, quads, per) = (self.pairs, self.quads(), self.per_chunk());
            self.win.clear();
            self.zmask.clear();
            self.fetch.clear();
            self.fetch_blocks.clear();
            self.reached.clear();
            self.reached.resize(self.row_bytes.div_ceil(64), false);
            let window = Self::window(self.two);
            let limit = (self.row_bytes - window) as i32;
            // Value 16 m + q of the row is channel c of pixel 16m / 3 + rel: with
            // r = m mod 3 (16 = 1 mod 3), rel = (r + q) / 3 and c = (r + q) mod 3.
            let pattern = |f: fn(usize) -> usize| -> [__m512i; 3] {
                std::array::from_fn(|r| {
                    let v: [i32; 16] = std::array::from_fn(|q| f(r + q) as i32);
                    // SAFETY: reads the 64 bytes of `v`.
                    unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
                })
            };
            let rel = pattern(|x| x / 3);
            let chan = pattern(|x| x % 3);
            let base = self.data.as_mut_ptr();
            for m in 0..self.chunks {
                let (px0, r) = (16 * m / 3, m % 3);
                let n = (self.values - 16 * m).min(16);
                let valid = ((1u32 << n) - 1) as __mmask16;
                debug_assert!(px0 + 16 <= len);
                // SAFETY: `px0 < out`, so the 16 entries from `px0` lie within `len`; the
                // 1 + 2 pairs + 2 quads vectors of chunk `m` lie within `data`.
                unsafe {
                    let gather = |v: &[i32]| {
                        _mm512_permutexvar_epi32(
                            rel[r],
                            _mm512_loadu_si512(v[px0..].as_ptr().cast()),
                        )
                    };
                    let pos = _mm512_add_epi32(gather(&self.px_pos), chan[r]);
                    let lo = _mm512_mask_reduce_min_epi32(valid, pos);
                    let hi = _mm512_mask_reduce_max_epi32(valid, pos);
                    let wo = lo.min(limit);
                    // The taps' bytes in the window, and a 4-byte block clear of them whose
                    // flipped copy the kernel zeroes (the high parts' zero low bytes).
                    let (first, last) = (lo - wo, hi + 3 * (taps as i32 - 1) - wo);
                    if last >= window as i32 {
                        return false;
                    }
                    let z = if first >= 4 {
                        0
                    } else if last < window as i32 - 4 {
                        window as i32 / 4 - 1
                    } else {
                        return false;
                    };
                    self.win.push(wo as u32);
                    self.zmask.push(!(1u32 << z));
                    let first_block = self.fetch_blocks.len() as u16;
                    let blocks = wo as usize / 64..(wo as usize + window).div_ceil(64);
                    for k in blocks {
                        if !self.reached[k] {
                            self.reached[k] = true;
                            self.fetch_blocks.push(k as u16);
                        }
                    }
                    let count = self.fetch_blocks.len() as u16 - first_block;
                    self.fetch.push((first_block, count));
                    // Tap 0's byte in the window (0 in the padding lanes).
                    let b = _mm512_maskz_sub_epi32(valid, pos, _mm512_set1_epi32(wo));
                    let d = base.add(m * per).cast::<__m512i>();
                    _mm512_store_si512(d, gather(&self.px_bias));
                    let zeros = _mm512_set1_epi32((4 * z) | ((4 * z) << 16));
                    for p in 0..pairs {
                        let t = _mm512_add_epi32(b, _mm512_set1_epi32(6 * p as i32));
                        let t3 = _mm512_add_epi32(t, _mm512_set1_epi32(3));
                        let idx = _mm512_or_si512(
                            zeros,
                            _mm512_or_si512(_mm512_slli_epi32::<8>(t), _mm512_slli_epi32::<24>(t3)),
                        );
                        _mm512_store_si512(d.add(1 + p), idx);
                        _mm512_store_si512(d.add(1 + pairs + p), gather(&self.px_hi[p * len..]));
                    }
                    for q in 0..quads {
                        let t = _mm512_add_epi32(b, _mm512_set1_epi32(12 * q as i32));
                        let idx = _mm512_add_epi32(
                            _mm512_mullo_epi32(t, _mm512_set1_epi32(0x0101_0101)),
                            _mm512_set1_epi32(0x0906_0300),
                        );
                        _mm512_store_si512(d.add(1 + 2 * pairs + q), idx);
                        let lw = gather(&self.px_lo[q * len..]);
                        _mm512_store_si512(d.add(1 + 2 * pairs + quads + q), lw);
                    }
                }
            }
            true
        }
    }

    /// The AVX-512 path's plan and buffers.
    #[derive(Clone, Debug, Default)]
    pub(super) struct Scratch {
        /// The plans of the last two horizontal coefficient sets (a random flip alternates
        /// between the two orders of the same outputs), `plans[cur]` the current one.
        plans: [ZPlan; 2],
        cur: usize,
        /// The ring: pair-format rows of the horizontal-first order (`BLOCK + taps` of them),
        /// or widened source rows of the vertical-first order (`taps`).
        ring: Vec<i32>,
        /// Per vertical tap, where its row starts in the ring.
        offs: Vec<usize>,
        /// u8 rows out of the horizontal kernel, `chunks * 16` bytes apart.
        block: Vec<u8>,
        /// u8 rows into the horizontal kernel in the vertical-first order.
        rows: Vec<u8>,
        /// Vertical weights for the vertical-first order as i16 pairs `(w mod 256, w / 256)`,
        /// and per output row the accumulator start `HALF + 32768 * sum(w / 256)`; for `vkey`.
        vweights: Vec<i32>,
        vbias: Vec<i32>,
        vkey: Option<(u32, u32, bool)>,
    }

    impl Scratch {
        /// Prepares the horizontal plan; returns whether this path can run the resize
        /// (`vert`: the vertical pass, when there is one). Only called where the CPU has the
        /// module's features.
        pub(super) fn prepare(&mut self, horiz: &AxisCoeffs, vert: Option<&AxisCoeffs>) -> bool {
            let key = Some(horiz.key());
            if self.plans[self.cur].key.map(|k| k.0) != key {
                // The other plan: the cached one if it matches, else the older one, rebuilt.
                self.cur = 1 - self.cur;
            }
            if !self.plans[self.cur].prepare(horiz) {
                return false;
            }
            match vert {
                None => true,
                Some(v) => v.taps <= MAX_V_TAPS && v.simd_friendly(),
            }
        }

        /// The vertical-first order's weights for `vert`.
        fn prepare_u8_vertical(&mut self, vert: &AxisCoeffs) {
            if self.vkey == Some(vert.key()) {
                return;
            }
            self.vweights.clear();
            self.vweights.extend(vert.weights.iter().map(|&w| {
                let (h, l) = (w >> 8, w & 255);
                l | (h << 16)
            }));
            self.vbias.clear();
            self.vbias.extend(
                vert.weights
                    .chunks_exact(vert.stride)
                    .map(|w| HALF + 32768 * w.iter().map(|&w| w >> 8).sum::<i32>()),
            );
            self.vkey = Some(vert.key());
        }
    }

    /// The whole resize with the AVX-512 kernels (`horiz` needed; `vert` when `need_v`); the
    /// caller checked the CPU and [`Scratch::prepare`].
    pub(super) fn resize<S: RowSink + ?Sized>(
        r: &mut Resizer,
        src: RgbView<'_>,
        out_h: u32,
        need_v: bool,
        sink: &mut S,
    ) {
        let Resizer {
            horiz, vert, zmm, ..
        } = r;
        let (in_w, in_h) = (src.width(), src.height());
        let out_w = horiz.out_size;
        let vfirst = need_v && vertical_first(in_w, in_h, out_w, out_h);
        if vfirst {
            zmm.prepare_u8_vertical(vert);
        }
        let plan = &zmm.plans[zmm.cur];
        let stride = plan.chunks * 16;
        let values = plan.values;
        let out_h = out_h as usize;
        if !need_v || vfirst {
            // Blocks of output rows: (vertical pass into `rows`,) horizontal pass into
            // `block`, then out to the sink. The vertical pass reads the source rows widened
            // once each into a ring of `(v, 256 (v - 128))` lane pairs.
            let row_bytes = 3 * in_w as usize;
            let wide = row_bytes.next_multiple_of(16);
            let cap = vert.taps;
            let mut ring: &mut [i32] = &mut [];
            if need_v {
                if zmm.rows.len() < BLOCK * row_bytes {
                    zmm.rows.resize(BLOCK * row_bytes, 0);
                }
                if zmm.ring.len() < cap * wide + 16 {
                    zmm.ring.resize(cap * wide + 16, 0);
                }
                let align = zmm.ring.as_ptr().align_offset(64).min(16);
                ring = &mut zmm.ring[align..align + cap * wide];
            }
            if zmm.block.len() < BLOCK * stride {
                zmm.block.resize(BLOCK * stride, 0);
            }
            let (mut next, mut next_base, mut start_base) = (0, 0, 0);
            for y0 in (0..out_h).step_by(BLOCK) {
                let n = BLOCK.min(out_h - y0);
                let mut rows: [&[u8]; BLOCK] = [&[]; BLOCK];
                if need_v {
                    for (i, dst) in zmm.rows.chunks_exact_mut(row_bytes).take(n).enumerate() {
                        let yy = y0 + i;
                        let (start, count) = (vert.start[yy] as usize, vert.count[yy] as usize);
                        // Rows [start, start + count) fit: count <= taps = cap.
                        while next < start + count {
                            let at = ring_slot(next, cap, &mut next_base) * wide;
                            // Prefetching a few rows ahead hides a cold source's latency.
                            let ahead =
                                (next + 4 < in_h as usize).then(|| src.row(next as u32 + 4));
                            widen(src.row(next as u32), ahead, &mut ring[at..at + wide]);
                            next += 1;
                        }
                        let s0 = ring_slot(start, cap, &mut start_base);
                        zmm.offs.clear();
                        zmm.offs.extend((s0..s0 + count).map(|s| {
                            // `count <= cap`: at most one wrap.
                            let slot = if s >= cap { s - cap } else { s };
                            slot * wide
                        }));
                        let w = &zmm.vweights[yy * vert.stride..yy * vert.stride + count];
                        vertical_pairs(ring, &zmm.offs, w, zmm.vbias[yy], dst);
                    }
                    for (slot, row) in rows.iter_mut().zip(zmm.rows.chunks_exact(row_bytes)) {
                        *slot = row;
                    }
                } else {
                    for (i, slot) in rows.iter_mut().take(n).enumerate() {
                        *slot = src.row((y0 + i) as u32);
                    }
                }
                let mut store = U8Rows {
                    out: &mut zmm.block,
                    stride,
                };
                // Without a vertical pass the next block's source rows come next.
                let n_ahead = if need_v { 0 } else { n.min(out_h - y0 - n) };
                run_horizontal(
                    plan,
                    &rows[..n],
                    Ahead::rows(&src, y0 + n, n_ahead),
                    &mut store,
                );
                for (i, row) in zmm.block.chunks_exact(stride).take(n).enumerate() {
                    sink.row_mut(y0 + i).copy_from_slice(&row[..values]);
                    sink.row_done(y0 + i);
                }
            }
            return;
        }
        // Horizontal first: source rows go through the horizontal pass in blocks, into a ring
        // of pair-format rows, as the vertical pass comes to need them.
        vert.ensure_pairs();
        let (first, end) = vert.span();
        let cap = BLOCK + vert.taps;
        // 64-byte aligned rows (`stride` values are a multiple of 64 bytes): no load of the
        // vertical pass straddles cache lines.
        if zmm.ring.len() < cap * stride + 16 {
            zmm.ring.resize(cap * stride + 16, 0);
        }
        let align = zmm.ring.as_ptr().align_offset(64).min(16);
        let ring = &mut zmm.ring[align..align + cap * stride];
        let (mut next_base, mut start_base) = (first - first % cap, first - first % cap);
        let mut next = first;
        for yy in 0..out_h {
            let (start, w) = vert.pair_taps_of(yy);
            while next < start + w.len() {
                // Rows [start, next + n) fit: next < start + taps, n <= BLOCK.
                let n = BLOCK.min(end - next);
                let ahead = Ahead::rows(&src, next + n, BLOCK.min(end - next - n));
                let mut src_rows: [&[u8]; BLOCK] = [&[]; BLOCK];
                for (i, slot) in src_rows.iter_mut().take(n).enumerate() {
                    *slot = src.row((next + i) as u32);
                }
                let (head, tail) = ring.split_at_mut(ring_slot(next, cap, &mut next_base) * stride);
                let mut outs: [&mut [i32]; BLOCK] = Default::default();
                let slots = tail
                    .chunks_exact_mut(stride)
                    .chain(head.chunks_exact_mut(stride));
                for (o, slot) in outs.iter_mut().zip(slots).take(n) {
                    *o = slot;
                }
                let mut store = PairRows {
                    rows: &mut outs[..n],
                };
                run_horizontal(plan, &src_rows[..n], ahead, &mut store);
                next += n;
            }
            let s0 = ring_slot(start, cap, &mut start_base);
            zmm.offs.clear();
            zmm.offs.extend((s0..s0 + w.len()).map(|s| {
                // `w.len() <= taps < cap`: at most one wrap.
                let slot = if s >= cap { s - cap } else { s };
                slot * stride
            }));
            let out = sink.row_mut(yy);
            vertical_pairs(ring, &zmm.offs, w, HALF, &mut out[..values]);
            sink.row_done(yy);
        }
    }

    /// Where the horizontal kernel puts the 16 accumulators of row `r`, chunk `m`.
    trait Store {
        /// Whether `rows` rows of `values` values fit.
        fn fits(&self, rows: usize, values: usize) -> bool;
        /// Stores `acc` (16 i32 sums, `HALF` included, each in `[0, 2^30)`).
        ///
        /// # Safety
        /// The AVX-512 features of the module, and `r`, `m` within what [`Store::fits`]
        /// accepted.
        unsafe fn store(&mut self, r: usize, m: usize, acc: __m512i);
    }

    /// u8 rows, `stride` bytes apart.
    struct U8Rows<'a> {
        out: &'a mut [u8],
        stride: usize,
    }

    impl Store for U8Rows<'_> {
        fn fits(&self, rows: usize, values: usize) -> bool {
            self.stride >= values && self.out.len() >= rows * self.stride
        }

        #[inline(always)]
        unsafe fn store(&mut self, r: usize, m: usize, acc: __m512i) {
            // SAFETY: `fits` guaranteed `r * stride + 16 m + 16 <= out.len()`.
            unsafe {
                let p = self.out.as_mut_ptr().add(r * self.stride + 16 * m);
                let v = _mm512_srai_epi32::<PRECISION_BITS>(acc);
                _mm_storeu_si128(p.cast(), _mm512_cvtepi32_epi8(v));
            }
        }
    }

    /// Pair-format rows (`v | v << 23`, the i16 pair `(v, 128 v)`), one slice each.
    struct PairRows<'a, 'b> {
        rows: &'b mut [&'a mut [i32]],
    }

    impl Store for PairRows<'_, '_> {
        fn fits(&self, rows: usize, values: usize) -> bool {
            self.rows.len() >= rows && self.rows.iter().all(|r| r.len() >= values)
        }

        #[inline(always)]
        unsafe fn store(&mut self, r: usize, m: usize, acc: __m512i) {
            // SAFETY: `fits` guaranteed row `r` holds `16 m + 16` values.
            unsafe {
                // v = acc >> 22 (bits 22..29; bits 30, 31 are 0). Per dword, byte 0 takes bits
                // 22..29 (v), byte 3 bits 23..30 (v >> 1), byte 2 bits 15..22 of which only
                // bit 22 (v & 1, at bit 7) is kept: v + (v << 23).
                let ctrl = _mm512_set1_epi64(i64::from_le_bytes([22, 0, 15, 23, 54, 0, 47, 55]));
                let spread = _mm512_multishift_epi64_epi8(ctrl, acc);
                let v = _mm512_and_si512(spread, _mm512_set1_epi32(0xFF80_00FF_u32 as i32));
                _mm512_storeu_si512(self.rows[r].as_mut_ptr().add(16 * m).cast(), v);
            }
        }
    }

    /// The horizontal pass of `rows` into `store`, prefetching (into L2) the windows of the
    /// rows `ahead`, the next block's: the source image is often cold (just decoded, or one of
    /// many), and one block of computing hides the next block's memory latency.
    fn run_horizontal<S: Store>(plan: &ZPlan, rows: &[&[u8]], ahead: Ahead, store: &mut S) {
        // The plan's own bounds were checked when it was built (`ZPlan::consistent`); every
        // window lies in `[0, row_bytes)`: the kernel's loads need rows that long, and the
        // stores need `rows.len()` rows of `chunks * 16` values.
        assert!(plan.runnable());
        assert!(rows.iter().all(|r| r.len() >= plan.row_bytes));
        assert!(store.fits(rows.len(), plan.chunks * 16));
        // SAFETY: (every arm) the resize runs this only on CPUs with the module's AVX-512
        // features; the row, window and store bounds the kernel relies on were asserted above
        // and, for the plan, when it was built.
        unsafe {
            match (plan.two, plan.pairs) {
                (false, 1) => horizontal_kernel::<1, false, S>(plan, rows, ahead, store),
                (false, 2) => horizontal_kernel::<2, false, S>(plan, rows, ahead, store),
                (false, 3) => horizontal_kernel::<3, false, S>(plan, rows, ahead, store),
                (false, 4) => horizontal_kernel::<4, false, S>(plan, rows, ahead, store),
                (false, 5) => horizontal_kernel::<5, false, S>(plan, rows, ahead, store),
                (false, 6) => horizontal_kernel::<6, false, S>(plan, rows, ahead, store),
                (false, 7) => horizontal_kernel::<7, false, S>(plan, rows, ahead, store),
                (false, _) => horizontal_kernel::<8, false, S>(plan, rows, ahead, store),
                (true, 1) => horizontal_kernel::<1, true, S>(plan, rows, ahead, store),
                (true, 2) => horizontal_kernel::<2, true, S>(plan, rows, ahead, store),
                (true, 3) => horizontal_kernel::<3, true, S>(plan, rows, ahead, store),
                (true, 4) => horizontal_kernel::<4, true, S>(plan, rows, ahead, store),
                (true, 5) => horizontal_kernel::<5, true, S>(plan, rows, ahead, store),
                (true, 6) => horizontal_kernel::<6, true, S>(plan, rows, ahead, store),
                (true, 7) => horizontal_kernel::<7, true, S>(plan, rows, ahead, store),
                (true, _) => horizontal_kernel::<8, true, S>(plan, rows, ahead, store),
            }
        }
    }

    /// # Safety
    /// AVX-512 F/BW/VL/VBMI/VNNI; `plan.pairs == P`, `plan.two == TWO`; every row at least
    /// `plan.row_bytes` long and every window inside it; `store` fits
    /// `rows.len()` rows of `plan.chunks * 16` values; `plan.data` holds
    /// `chunks * per_chunk()` vectors.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
    unsafe fn horizontal_kernel<const P: usize, const TWO: bool, S: Store>(
        plan: &ZPlan,
        rows: &[&[u8]],
        ahead: Ahead,
        store: &mut S,
    ) {
        let quads = P.div_ceil(2);
        let per = 1 + 2 * P + 2 * quads;
        let flip = _mm512_set1_epi8(0x80u8 as i8);
        for m in 0..plan.chunks {
            // SAFETY: chunk `m`'s `per` vectors lie within `data` (caller).
            let d = unsafe { plan.data.as_ptr().add(m * per).cast::<__m512i>() };
            // SAFETY: as above; `Z` is 64-aligned.
            let load = |i: usize| unsafe { _mm512_load_si512(d.add(i)) };
            let bias = load(0);
            let mut hidx = [_mm512_setzero_si512(); P];
            let mut hw = [_mm512_setzero_si512(); P];
            let mut lidx = [_mm512_setzero_si512(); 4];
            let mut lw = [_mm512_setzero_si512(); 4];
            for p in 0..P {
                hidx[p] = load(1 + p);
                hw[p] = load(1 + P + p);
            }
            for q in 0..quads {
                lidx[q] = load(1 + 2 * P + q);
                lw[q] = load(1 + 2 * P + quads + q);
            }
            let wo = plan.win[m] as usize;
            let keep = plan.zmask[m];
            let (keep_a, keep_b) = (keep as __mmask16, (keep >> 16) as __mmask16);
            // The row blocks this chunk's windows reach first: prefetch them in the next
            // block's rows (each block once a row, about every third chunk).
            let (first, count) = plan.fetch[m];
            for &k in &plan.fetch_blocks[first as usize..(first + count) as usize] {
                // SAFETY: prefetches only (the caller's features include SSE).
                unsafe { ahead.prefetch(64 * k as usize) };
            }
            for (r, row) in rows.iter().enumerate() {
                // SAFETY: the window `[wo, wo + 64)` (and `[wo + 64, wo + 128)` when TWO) lies
                // within the row (caller).
                let (a, b) = unsafe {
                    let ptr = row.as_ptr().add(wo);
                    let a = _mm512_loadu_si512(ptr.cast());
                    let b = if TWO {
                        _mm512_loadu_si512(ptr.add(64).cast())
                    } else {
                        a
                    };
                    (a, b)
                };
                // The flipped window with one dword zeroed: the high-part permutes fetch their
                // zero low bytes there.
                let xa = _mm512_maskz_xor_epi32(keep_a, a, flip);
                let xb = if TWO {
                    _mm512_maskz_xor_epi32(keep_b, b, flip)
                } else {
                    xa
                };
                let mut acc = bias;
                for p in 0..P {
                    let g = if TWO {
                        _mm512_permutex2var_epi8(xa, hidx[p], xb)
                    } else {
                        _mm512_permutexvar_epi8(hidx[p], xa)
                    };
                    acc = dpwssd(acc, g, hw[p]);
                }
                for q in 0..quads {
                    let g = if TWO {
                        _mm512_permutex2var_epi8(a, lidx[q], b)
                    } else {
                        _mm512_permutexvar_epi8(lidx[q], a)
                    };
                    acc = dpbusd(acc, g, lw[q]);
                }
                // SAFETY: `r < rows.len()` and `m < chunks`, within what the caller checked.
                unsafe { store.store(r, m, acc) };
            }
        }
    }

    /// 4 x 16 sums to 64 bytes in value order.
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    fn pack64(acc: [__m512i; 4]) -> __m512i {
        let s = acc.map(|a| _mm512_srai_epi32::<PRECISION_BITS>(a));
        let w01 = _mm512_packus_epi32(s[0], s[1]);
        let w23 = _mm512_packus_epi32(s[2], s[3]);
        // Per 128-bit lane l: 4 values of each of s[0..4] (dword j of lane l = s[j]'s values
        // 4l..4l + 4); gather them back: dword 4j + l <- dword 4l + j.
        let b = _mm512_packus_epi16(w01, w23);
        let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        _mm512_permutexvar_epi32(order, b)
    }

    /// Mask of the first `n` (at most 64) bytes.
    #[inline(always)]
    fn first_bytes(n: usize) -> u64 {
        if n >= 64 {
            u64::MAX
        } else {
            (1u64 << n) - 1
        }
    }

    /// One output row of the vertical pass over rows of i16 lane pairs:
    /// `out[i] = clip8(bias + sum_k dot(ring[offs[k] + i], w[k]))`. With pair-format rows and
    /// weights (the horizontal-first order), `bias = HALF`; with `(v, 256 (v - 128))` rows
    /// ([`widen`]) and `(w mod 256, w / 256)` weights, `bias = HALF + 32768 sum(w / 256)`.
    fn vertical_pairs(ring: &[i32], offs: &[usize], w: &[i32], bias: i32, out: &mut [u8]) {
        let n16 = out.len().div_ceil(16) * 16;
        assert!(offs.len() == w.len() && offs.iter().all(|&o| o + n16 <= ring.len()));
        // SAFETY: the resize runs this only on CPUs with the module's AVX-512 features;
        // bounds asserted above.
        unsafe {
            with_taps!(w.len(), |T| vertical_pairs_kernel::<T>(
                ring, offs, w, bias, out
            ))
        }
    }

    /// # Safety
    /// AVX-512 F/BW/VL/VNNI; `offs.len() == w.len()` and, unless 0, `TAPS == w.len()`; `ring`
    /// holds `ceil(out.len() / 16) * 16` values from every offset.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
    unsafe fn vertical_pairs_kernel<const TAPS: usize>(
        ring: &[i32],
        offs: &[usize],
        w: &[i32],
        bias: i32,
        out: &mut [u8],
    ) {
        let taps = if TAPS == 0 { w.len() } else { TAPS };
        let n = out.len();
        let n16 = n.div_ceil(16) * 16;
        let dst = out.as_mut_ptr();
        let base = ring.as_ptr();
        let half = _mm512_set1_epi32(bias);
        let mut m = 0;
        // SAFETY: loads read values `[off + m, off + m + 64)` or `[off + m, off + m + 16)`
        // with `m + 64`/`m + 16 <= n16`, inside `ring` (caller); stores cover `[m, m + 64)`
        // within `out`, or are masked to `[m, n)`.
        unsafe {
            while m + 64 <= n16 {
                let mut acc = [half; 4];
                for (&off, &wk) in offs.iter().zip(w).take(taps) {
                    let wk = _mm512_set1_epi32(wk);
                    let p = base.add(off + m);
                    for (i, a) in acc.iter_mut().enumerate() {
                        *a = dpwssd(*a, _mm512_loadu_si512(p.add(16 * i).cast()), wk);
                    }
                }
                let bytes = pack64(acc);
                if m + 64 <= n {
                    _mm512_storeu_si512(dst.add(m).cast(), bytes);
                } else {
                    _mm512_mask_storeu_epi8(dst.add(m).cast(), first_bytes(n - m), bytes);
                }
                m += 64;
            }
            while m < n16 {
                let mut acc = half;
                for (&off, &wk) in offs.iter().zip(w).take(taps) {
                    let v = _mm512_loadu_si512(base.add(off + m).cast());
                    acc = dpwssd(acc, v, _mm512_set1_epi32(wk));
                }
                let v = _mm512_srai_epi32::<PRECISION_BITS>(acc);
                let mask = first_bytes(n - m) as u16;
                _mm_mask_storeu_epi8(dst.add(m).cast(), mask, _mm512_cvtepi32_epi8(v));
                m += 16;
            }
        }
    }

    /// A u8 row as `(v, 256 (v - 128))` i16 lane pairs, one dword per value: `dst` holds
    /// `src.len()` rounded up to 16 values (the padding gets 0 bytes' pairs). Prefetches
    /// `ahead` (into L2) as it goes.
    fn widen(src: &[u8], ahead: Option<&[u8]>, dst: &mut [i32]) {
        assert!(dst.len() >= src.len().div_ceil(16) * 16);
        // SAFETY: the resize runs this only on CPUs with the module's AVX-512 features;
        // bounds asserted above.
        unsafe { widen_kernel(src, ahead.unwrap_or(&[]), dst) }
    }

    /// # Safety
    /// AVX-512 F/BW/VL/VBMI; `dst.len() >= ceil(src.len() / 16) * 16`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
    unsafe fn widen_kernel(src: &[u8], ahead: &[u8], dst: &mut [i32]) {
        let n = src.len();
        let n16 = n.div_ceil(16) * 16;
        let flip = _mm512_set1_epi32(0x8000_0000_u32 as i32);
        // Sub-vector s, dword q: bytes 0 and 3 take byte 16 s + q of the 64 loaded (the
        // mask zeroes bytes 1 and 2): lanes (v, 256 v), then 256 (v - 128) by the flip.
        let idx: [__m512i; 4] = std::array::from_fn(|s| {
            let mut z = Z::default();
            for q in 0..16 {
                z.0[4 * q] = (16 * s + q) as u8;
                z.0[4 * q + 3] = (16 * s + q) as u8;
            }
            // SAFETY: reads the 64 bytes of `z`.
            unsafe { _mm512_load_si512(z.0.as_ptr().cast()) }
        });
        let mut m = 0;
        while m < n {
            let len = (n - m).min(64);
            if m < ahead.len() {
                // SAFETY: a prefetch (no access) of a byte inside `ahead`.
                unsafe { _mm_prefetch::<_MM_HINT_T1>(ahead.as_ptr().add(m).cast()) };
            }
            // SAFETY: masked to the `len` bytes of `src` from `m`.
            let v =
                unsafe { _mm512_maskz_loadu_epi8(first_bytes(len), src.as_ptr().add(m).cast()) };
            for (s, &ix) in idx.iter().enumerate() {
                let at = m + 16 * s;
                if at >= n16 {
                    break;
                }
                let g = _mm512_xor_si512(permb_z(LO_HI_BYTES, ix, v), flip);
                // SAFETY: values `[at, at + 16)` with `at + 16 <= n16 <= dst.len()`.
                unsafe { _mm512_storeu_si512(dst.as_mut_ptr().add(at).cast(), g) };
            }
            m += 64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coefficients_match_pillow_by_hand() {
        // 4 -> 2: scale 2, support 2, center 1.0 for output 0: xmin = int(-0.5) = 0,
        // xmax = int(3.5) = 3; filter((x - 1 + 0.5) / 2) = 0.75, 0.75, 0.25 -> /1.75.
        let mut c = AxisCoeffs::default();
        c.prepare(4, 2);
        let (start, w) = c.taps_of(0);
        assert_eq!(start, 0);
        let expect = |v: f64| (0.5 + v / 1.75 * 4_194_304.0) as i32;
        assert_eq!(w, &[expect(0.75), expect(0.75), expect(0.25)]);
        // Output 1: center 3.0, xmin = int(1.5) = 1, xmax = min(int(5.5), 4) = 4:
        // filter((1-3+0.5)/2) = 0.25, 0.75, 0.75.
        let (start, w) = c.taps_of(1);
        assert_eq!(start, 1);
        assert_eq!(w, &[expect(0.25), expect(0.75), expect(0.75)]);
        assert_eq!(c.span(), (0, 4));
    }

    #[test]
    fn simd_coefficients_equal_scalar_ones() {
        // The vectorized f64 coefficient computation (where this CPU has it) must give
        // exactly the scalar one's windows and weights: every size up to 600 against the
        // usual outputs, both orders, and windows wider than the SIMD code takes.
        let mut sizes = Vec::new();
        for in_size in 1..=600 {
            for out in [1, 2, 3, 7, 100, 223, 224, 225, 333, 599] {
                sizes.push((in_size, out));
            }
        }
        sizes.extend([
            (4000, 224),
            (4000, 100),
            (20_000, 333),
            (16_777_215, 224),
            (7, 5000),
        ]);
        for (in_size, out) in sizes {
            for mirrored in [false, true] {
                let mut scalar = AxisCoeffs::default();
                scalar.prepare_with(in_size, out, mirrored, SimdLevel::Portable);
                for level in [SimdLevel::Avx2, SimdLevel::Avx512Ymm, SimdLevel::Avx512] {
                    let mut simd = AxisCoeffs::default();
                    simd.prepare_with(in_size, out, mirrored, level);
                    let what = format!("{in_size} -> {out}, mirrored {mirrored}, {level:?}");
                    assert_eq!(simd.start, scalar.start, "{what}");
                    assert_eq!(simd.count, scalar.count, "{what}");
                    assert!(simd.weights == scalar.weights, "{what}");
                    assert_eq!(simd.taps, scalar.taps, "{what}");
                    assert_eq!(simd.simd_friendly, scalar.simd_friendly, "{what}");
                }
            }
        }
    }

    #[test]
    fn identity_scale_is_identity_weights() {
        let mut c = AxisCoeffs::default();
        c.prepare(5, 5);
        for i in 0..5 {
            let (start, w) = c.taps_of(i);
            assert_eq!(start, i);
            assert_eq!(w[0], 1 << PRECISION_BITS);
            assert!(w[1..].iter().all(|&v| v == 0));
        }
    }

    #[test]
    fn flat_image_stays_flat_at_every_size() {
        let img = RgbImage::from_raw(7, 5, [10u8, 200, 255].repeat(35)).expect("sizes match");
        let mut r = Resizer::new();
        let mut out = RgbImage::new();
        for (h, w) in [
            (1, 1),
            (5, 3),
            (3, 7),
            (13, 11),
            (5, 7),
            (224, 224),
            (2, 100),
        ] {
            r.resize(img.view(), h, w, &mut out).expect("valid sizes");
            assert_eq!((out.width(), out.height()), (w, h));
            for px in out.as_raw().chunks_exact(3) {
                assert_eq!(px, &[10, 200, 255], "{h}x{w}");
            }
        }
    }

    /// Gradients, noise, saturated bands and hard edges, deterministic.
    fn test_image(w: u32, h: u32, seed: u64) -> RgbImage {
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut data = Vec::with_capacity(3 * (w * h) as usize);
        for y in 0..h {
            for x in 0..w {
                for c in 0..3u32 {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    let noise = (state >> 59) as u32;
                    let v = match (x / 7 + y / 5 + c) % 4 {
                        0 => 255,
                        1 => 0,
                        _ => (x * 3 + y * 5 + c * 40 + noise) % 256,
                    };
                    data.push(v as u8);
                }
            }
        }
        RgbImage::from_raw(w, h, data).expect("sizes match")
    }

    #[test]
    fn kernel_sets_are_distinct_and_end_at_the_detected_level() {
        let sets = SimdLevel::kernel_sets();
        assert_eq!(sets.last(), Some(&SimdLevel::detected()));
        assert!(sets.windows(2).all(|w| w[0] < w[1]), "{sets:?}");
        assert_eq!(
            sets.contains(&SimdLevel::Portable),
            SimdLevel::detected() == SimdLevel::Portable,
            "{sets:?}"
        );
    }

    #[test]
    fn simd_and_portable_kernels_agree() {
        // Whatever kernels this CPU runs (AVX-512, AVX-512 at 256 bits, AVX2) must equal the
        // portable ones, for every pass order, tap count (including the ones the SIMD plans
        // reject, and the plans' two-window cases), and the tiny widths whose rows are
        // shorter than a SIMD window.
        let levels: Vec<SimdLevel> = [SimdLevel::Avx2, SimdLevel::Avx512Ymm, SimdLevel::Avx512]
            .into_iter()
            .filter(|&l| l <= SimdLevel::detected())
            .collect();
        let mut fast: Vec<Resizer> = levels
            .iter()
            .map(|&l| {
                let mut r = Resizer::new();
                r.set_simd_limit(l);
                r
            })
            .collect();
        let mut portable = Resizer::new();
        portable.set_portable_only(true);
        let (mut a, mut b) = (RgbImage::new(), RgbImage::new());
        let mut sizes = vec![
            (1, 1, 1, 1),
            (1, 1, 7, 3),
            (5, 2, 3, 9),
            (6, 6, 5, 5),
            (300, 280, 224, 224),
            (274, 346, 224, 224),
            (500, 375, 224, 224),
            (500, 375, 61, 47),
            (1000, 40, 224, 224),
            (40, 1000, 224, 224),
            (120, 110, 224, 224),
            (300, 300, 250, 199),
            (300, 300, 250, 200),
            // Horizontal downscales: two 64-byte windows (3.5x, 4.5x), beyond them (9x).
            (791, 599, 224, 224),
            (1000, 300, 224, 224),
            (1200, 900, 300, 40),
            (2000, 100, 224, 50),
            // Vertical downscales: 13 taps (horizontal first; beyond the counts `with_taps!`
            // compiles for), 61 taps (vertical first), 77 taps (beyond the kernels).
            (900, 700, 224, 120),
            (300, 3000, 280, 100),
            (300, 5000, 280, 100),
            (2000, 1500, 100, 40),
            // Around the 256-bit permutes' window sizes (see `plans_take_the_layout_each_
            // downscale_needs`): 32 or 64 bytes, 64 bytes or the AVX2 kernels; a quad and a
            // pair in 32 and in 64 bytes.
            (600, 300, 224, 100),
            (601, 300, 224, 100),
            (750, 100, 224, 60),
            (751, 100, 224, 60),
            (1400, 200, 224, 50),
            (1680, 120, 224, 50),
            // Rows of 10, 11 and 12 pixels (30, 33 and 36 bytes: around the 32-byte window).
            (10, 20, 7, 9),
            (11, 20, 5, 9),
            (12, 20, 9, 9),
            // Rows of 21 and 22 pixels (63 and 66 bytes: around the 64-byte window).
            (21, 50, 30, 30),
            (22, 50, 13, 30),
            (43, 80, 17, 60),
        ];
        let mut state = 12345u64;
        let mut next = |n: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % n + 1
        };
        for _ in 0..150 {
            let (iw, ih) = (next(400) as u32, next(400) as u32);
            sizes.push((iw, ih, next(300) as u32, next(300) as u32));
        }
        for _ in 0..40 {
            let (iw, ih) = (next(1200) as u32, next(1200) as u32);
            sizes.push((iw, ih, next(300) as u32, next(300) as u32));
        }
        // RandomResizedCrop's shapes: near 224 on either side (both pass orders), one side
        // equal to 224 (a single pass).
        for _ in 0..60 {
            let (iw, ih) = (150 + next(300) as u32, 150 + next(300) as u32);
            sizes.push((iw, ih, 224, 224));
        }
        sizes.extend([(224, 300, 224, 224), (300, 224, 224, 224)]);
        for (i, &(iw, ih, ow, oh)) in sizes.iter().enumerate() {
            let img = test_image(iw, ih, i as u64);
            portable.resize(img.view(), oh, ow, &mut b).expect("valid");
            for (r, level) in fast.iter_mut().zip(&levels) {
                r.resize(img.view(), oh, ow, &mut a).expect("valid");
                assert!(a == b, "{iw}x{ih} -> {ow}x{oh}, {level:?}");
            }
        }
    }

    #[test]
    fn flipped_resize_is_the_mirror_image() {
        // Mirrored horizontal coefficients (or the reversed copy when the width does not
        // change) must equal resizing and then flipping, with either kernel set.
        let sizes = [
            (9, 7, 9, 7),
            (9, 7, 9, 3),
            (9, 7, 4, 7),
            (300, 280, 224, 224),
            (274, 346, 224, 224),
            (120, 110, 224, 224),
            (40, 1000, 33, 200),
            (5, 5, 17, 2),
            (229, 267, 224, 224),
            (500, 375, 224, 224),
            (601, 300, 224, 100),
            (791, 599, 224, 224),
        ];
        for level in [
            SimdLevel::Portable,
            SimdLevel::Avx2,
            SimdLevel::Avx512Ymm,
            SimdLevel::Avx512,
        ] {
            let mut r = Resizer::new();
            r.set_simd_limit(level);
            let (mut plain, mut flipped, mut again) =
                (RgbImage::new(), RgbImage::new(), RgbImage::new());
            for (i, &(iw, ih, ow, oh)) in sizes.iter().enumerate() {
                let img = test_image(iw, ih, 100 + i as u64);
                r.resize(img.view(), oh, ow, &mut plain).expect("valid");
                crate::tensor::hflip(&mut plain);
                let data = flipped.reset(ow, oh);
                let mut sink = PackedSink {
                    data,
                    row_len: 3 * ow as usize,
                };
                r.resize_into(img.view(), oh, ow, true, &mut sink)
                    .expect("valid");
                assert!(plain == flipped, "{iw}x{ih} -> {ow}x{oh}, {level:?}");
                // And back: the cached coefficients and plans turn around again.
                r.resize(img.view(), oh, ow, &mut again).expect("valid");
                crate::tensor::hflip(&mut again);
                assert!(again == plain, "{iw}x{ih} -> {ow}x{oh} again, {level:?}");
            }
        }
    }

    #[test]
    fn pass_order_follows_pillow_13() {
        assert!(vertical_first(300, 300, 250, 199));
        assert!(!vertical_first(300, 300, 250, 200));
        assert!(vertical_first(120, 120, 241, 119));
        assert!(!vertical_first(500, 375, 224, 224));
        assert!(!vertical_first(100, 100, 50, 300));
    }

    #[test]
    fn zero_sizes_are_errors() {
        let img = RgbImage::from_raw(2, 2, vec![0; 12]).expect("sizes match");
        let mut r = Resizer::new();
        let mut out = RgbImage::new();
        assert!(r.resize(img.view(), 0, 2, &mut out).is_err());
        assert!(r.resize(img.view(), 2, 0, &mut out).is_err());
        let empty = RgbImage::new();
        assert!(r.resize(empty.view(), 2, 2, &mut out).is_err());
    }
}
