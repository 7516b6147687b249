//! Pillow's resize of an RGB image (`Image.resize(size, resample)`) for every filter torchvision
//! passes for PIL images: the convolutions `BILINEAR`, `BICUBIC`, `BOX`, `HAMMING` and
//! `LANCZOS` (always antialiased), and `NEAREST`; bit-exact with Pillow 13.
//!
//! The convolution filters are Pillow's `libImaging/Resample.c` for 8-bit images: per axis, the
//! filter (box, support 0.5; triangle or Hamming, 1; Keys' cubic with `a = -0.5`, 2; Lanczos, 3)
//! widened by the downscale factor, weights normalized in f64 and then quantized to fixed point
//! with 22 fractional bits; two separable passes, each rounding to u8 with Pillow's `clip8` (the
//! negative lobes of the cubic and Lanczos push sums below 0 and above 255); a pass is skipped when its dimension does
//! not change. Pillow 13 runs the vertical pass first when the height shrinks by more than
//! twice as much as the width (`dy > 0 && dy > 2 dx`), the horizontal pass first otherwise, and
//! then over only the source rows the vertical pass reads.
//!
//! `NEAREST` is no convolution in Pillow: `Image.resize` sends it to the affine transform
//! (`ImagingScaleAffine`), which steps a source coordinate by `in / out` from `in / out / 2`,
//! adding in f64 (not multiplying: the accumulated rounding picks the pixels) and truncating.
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

use crate::augment::policy::Api;
use crate::cpu;
use crate::error::{Error, Result};
use crate::image::{RgbImage, RgbView};

/// Fractional bits of the fixed-point weights: Pillow's `PRECISION_BITS` (32 - 8 - 2).
const PRECISION_BITS: u32 = 32 - 8 - 2;
/// Added to every sum so that the final shift rounds to nearest.
const HALF: i32 = 1 << (PRECISION_BITS - 1);

/// The largest `|w|` of a weight the SIMD kernels take, `2^23 - 2^16` (about 1.98 in fixed
/// point; Pillow's cubic reaches about 1.09 where a window cuts a lobe off at an edge). Every
/// split of theirs holds it: the AVX2 halves `w >> 11` and the 8-bit splits `w >> 8` and
/// `(w + 128) >> 8` are i16s, and the signed base-256 digits of `w = 65536 a + 256 b + c`
/// stay in `[-128, 127]` (up to `127 * 65793 = 8355711`).
pub(crate) const SIMD_WEIGHT_LIMIT: i32 = (1 << 23) - (1 << 16);

/// The largest sum of `|w|` over one output's weights the SIMD kernels take:
/// `floor((i32::MAX - HALF) / 255)`. With pixels in `[0, 255]` an output's exact sum
/// `HALF + sum(v w)` then lies in `[HALF - 255 N, HALF + 255 P]` (`P`, `N`: the sums of its
/// positive and negative weights, `P + N <= ` this), inside i32. The kernels add in
/// wrapping (mod 2^32) arithmetic, in any order and through any split of the weights, so
/// a result that fits is the exact one; its shift by `PRECISION_BITS` lies in
/// `[-512, 511]`, which the kernels' clamps (saturating packs or min/max) bring to
/// `[0, 255]` as Pillow's `clip8` does. (The triangle's sums are at most `2^22 + taps / 2`,
/// Pillow's cubic's about `1.25 * 2^22`: both far inside.)
const SIMD_ABS_SUM_LIMIT: i64 = (i32::MAX as i64 - HALF as i64) / 255;

/// The largest sum of an output's weights, all non-negative, whose sums need no clamp:
/// `HALF + 255 * sum(w)` stays below `256 << PRECISION_BITS`, so the shift lies in
/// `[0, 255]`. Pillow's triangle sums to at most `2^22 + taps / 2` (each weight rounded
/// up by less than 1/2), this limit less 8223: its resizes never clip below 16446 taps,
/// far more than the SIMD kernels take.
const NO_CLIP_SUM_LIMIT: i64 = ((256i64 << PRECISION_BITS) - 1 - HALF as i64) / 255;

/// The weight range of the pair format `(w - 128 h, h)`, `h = clamp(w >> 7, -32768, 32767)`
/// (see [`AxisCoeffs`]'s `pair`): both halves i16. Beyond it (cubic upscales, whose edge
/// weights exceed 1), the vertical kernels that multiply pairs do not run.
const PAIR_WEIGHT_MIN: i32 = -(1 << 22) - 32768;
const PAIR_WEIGHT_MAX: i32 = 128 * 32767 + 32767;

/// `$body` with the const `$t` set to `$taps` when that is 2 to 8 (the vertical windows of
/// upscales and of downscales up to about 3.5x), else to 0 (meaning: any count, read at run
/// time). A vertical kernel compiled for a constant count unrolls its tap loop and keeps the
/// weights and row pointers in registers, where a run-time loop pays per-tap loads and an exit
/// branch that mispredicts whenever the count changes between output rows (as it does in a
/// downscale). The horizontal windows' padding uses it too, so that each output's weights copy
/// without a call to `memcpy`.
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

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod coeffs_x86;
mod portable;
mod tensor;

pub use tensor::TensorArith;

/// Pillow's `clip8`: the fixed-point sum back to a byte, clamped.
#[inline(always)]
fn clip8(acc: i32) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// The resampling filter of a [`Resizer`]: the Pillow filters torchvision's `InterpolationMode`
/// names for PIL images. Every one is bit-exact with Pillow's `Image.resize`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Filter {
    /// `Image.NEAREST`: each output pixel is the source pixel under its center (no averaging).
    Nearest,
    /// `Image.BILINEAR`, antialiased: the triangle filter, support 1 widened by the downscale
    /// factor. torchvision's default.
    #[default]
    Bilinear,
    /// `Image.BICUBIC`, antialiased: Keys' cubic (`a = -0.5`), support 2 widened by the
    /// downscale factor. Has negative lobes: sums are clamped to 0..=255 (Pillow's `clip8`).
    Bicubic,
    /// `Image.BOX`: each output the mean of the inputs its (widened) box covers.
    Box,
    /// `Image.HAMMING`: a Hamming-windowed sinc, support 1 widened by the downscale factor.
    Hamming,
    /// `Image.LANCZOS`: Lanczos-3, support 3 widened by the downscale factor; negative lobes
    /// clamped as the cubic's.
    Lanczos,
}

impl Filter {
    /// Every filter, for the tests that must cover them all.
    pub const ALL: [Filter; 6] = [
        Filter::Nearest,
        Filter::Bilinear,
        Filter::Bicubic,
        Filter::Box,
        Filter::Hamming,
        Filter::Lanczos,
    ];

    /// The filter's name as torchvision and the pipeline spec spell it.
    pub fn name(self) -> &'static str {
        match self {
            Filter::Nearest => "nearest",
            Filter::Bilinear => "bilinear",
            Filter::Bicubic => "bicubic",
            Filter::Box => "box",
            Filter::Hamming => "hamming",
            Filter::Lanczos => "lanczos",
        }
    }
}

/// The convolution filters' weight functions (Pillow's `struct filter`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Convolution {
    /// `box_filter`, support 0.5.
    Box,
    /// `bilinear_filter`, support 1.
    #[default]
    Triangle,
    /// `hamming_filter`, support 1.
    Hamming,
    /// `bicubic_filter` with `a = -0.5`, support 2.
    Cubic,
    /// `lanczos_filter` (sinc windowed by sinc, three lobes), support 3.
    Lanczos,
}

impl Convolution {
    /// The filter's support before widening by the downscale factor.
    fn support(self) -> f64 {
        match self {
            Convolution::Box => 0.5,
            Convolution::Triangle | Convolution::Hamming => 1.0,
            Convolution::Cubic => 2.0,
            Convolution::Lanczos => 3.0,
        }
    }

    /// The weight at `x`, in Pillow's f64 operations and order (no fused multiply-adds:
    /// Pillow's wheels are built for baseline x86-64, and Rust never contracts). The box and
    /// Lanczos windows are half-open as Pillow's are, so they take the signed `x`. `sin` and
    /// `cos` are the C library's, as Pillow's are (Rust's `f64::sin` calls libm's).
    #[inline(always)]
    fn weight(self, x: f64) -> f64 {
        match self {
            Convolution::Box => {
                if x > -0.5 && x <= 0.5 {
                    1.0
                } else {
                    0.0
                }
            }
            Convolution::Triangle => {
                let x = x.abs();
                if x < 1.0 {
                    1.0 - x
                } else {
                    0.0
                }
            }
            Convolution::Hamming => {
                let x = x.abs();
                if x == 0.0 {
                    1.0
                } else if x >= 1.0 {
                    0.0
                } else {
                    // Pillow writes the constants as floats (`0.54f`, `0.46f`).
                    let x = x * std::f64::consts::PI;
                    x.sin() / x * (f64::from(0.54f32) + f64::from(0.46f32) * x.cos())
                }
            }
            Convolution::Cubic => {
                const A: f64 = -0.5;
                let x = x.abs();
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
            Convolution::Lanczos => {
                if (-3.0..3.0).contains(&x) {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
        }
    }
}

/// Pillow's `sinc_filter`: `sin(pi x) / (pi x)`, 1 at 0.
#[inline(always)]
fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        return 1.0;
    }
    let x = x * std::f64::consts::PI;
    x.sin() / x
}

/// The fixed-point resampling weights of one axis (`precompute_coeffs` followed by
/// `normalize_coeffs_8bpc` in Pillow), cached for the last `(in_size, out_size)`, plus the
/// same weights laid out for the kernels.
#[derive(Clone, Debug, Default)]
pub struct AxisCoeffs {
    in_size: u32,
    out_size: u32,
    /// The filter the weights are of.
    conv: Convolution,
    /// The weights are torch's uint8 kernel's ([`AxisCoeffs::prepare_torch`]), not Pillow's.
    torch: bool,
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
    /// `out_size * stride` weights as the i16 pair `(w - 128 h, h)`,
    /// `h = clamp(w >> 7, -32768, 32767)`, for `pmaddwd` against values stored as the pair
    /// `(v, v << 7)`; exact where `pairs_fit`.
    pair: Vec<i32>,
    /// Whether `pstart`/`pweights` and `pair` match the current weights (built on demand:
    /// only the horizontal axis needs the first, only the SIMD vertical pass the second).
    padded_ready: bool,
    pair_ready: bool,
    /// Every weight within `±SIMD_WEIGHT_LIMIT` and every output's sum of `|w|` at most
    /// `SIMD_ABS_SUM_LIMIT`: what the SIMD kernels' splits and exact wrapping sums need
    /// (see those constants). Pillow's triangle and cubic weights always are; where not
    /// (only hand-made weights), the portable kernels run.
    simd_friendly: bool,
    /// Every weight within `PAIR_WEIGHT_MIN..=PAIR_WEIGHT_MAX` (the pair format is exact).
    pairs_fit: bool,
    /// Some weight is negative (the cubic's lobes), or some output's weights sum to more
    /// than `NO_CLIP_SUM_LIMIT` (only hand-made weights): sums can leave `[0, 255]` after
    /// the shift, so the SIMD stores that would otherwise truncate must clamp. False for
    /// the triangle, whose stores then skip the clamp.
    may_clip: bool,
    /// What the three flags above were decided from.
    range: WeightRange,
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
        self.prepare_with(
            in_size,
            out_size,
            mirrored,
            Convolution::Triangle,
            SimdLevel::Avx512,
        );
    }

    /// [`AxisCoeffs::prepare_mirrored`], computing four or eight outputs at a time with AVX2
    /// or AVX-512 where `level` allows and the CPU has it (the same IEEE operations in the
    /// same order, lane by lane: identical weights). The vectorized code has only the
    /// triangle filter; the cubic's weights are computed one output at a time.
    fn prepare_with(
        &mut self,
        in_size: u32,
        out_size: u32,
        mirrored: bool,
        conv: Convolution,
        level: SimdLevel,
    ) {
        if self.cached(in_size, out_size, mirrored, conv, false) {
            return;
        }
        self.in_size = in_size;
        self.out_size = out_size;
        self.conv = conv;
        self.torch = false;
        self.mirrored = false;
        // Pillow passes the box as floats: `in1 - in0` is a float32 subtraction (exact below
        // 2^24), then the scale is computed in double.
        let scale = f64::from(in_size as f32) / f64::from(out_size);
        let filterscale = scale.max(1.0);
        // The filter's support, widened by the downscale factor.
        let support = conv.support() * filterscale;
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
            conv,
            in_size,
            scale,
            support,
            ss,
            stride,
        };
        let level = level.min(SimdLevel::detected());
        let (start, count, weights) = (&mut self.start, &mut self.count, &mut self.weights);
        // The per-output sums come out of the computation (the vectorized one sums its lanes
        // as it goes): a separate pass over the rows cost 3% of a bilinear crop's resize.
        let (done, mut sums) = match level {
            _ if conv != Convolution::Triangle => (0, RowSums::default()),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has the AVX-512 features (`detected`).
            SimdLevel::Avx512 => unsafe { coeffs_x86::compute512(&axis, start, count, weights) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX2 (`detected`).
            SimdLevel::Avx2 | SimdLevel::Avx512Ymm => unsafe {
                coeffs_x86::compute(&axis, start, count, weights)
            },
            _ => (0, RowSums::default()),
        };
        let rows = self.weights.chunks_exact_mut(stride).enumerate().skip(done);
        for ((xx, k_fixed), (start, count)) in
            rows.zip(self.start[done..].iter_mut().zip(&mut self.count[done..]))
        {
            (*start, *count) = axis.output(xx, k_fixed, &mut self.scratch);
            sums.add_row(&k_fixed[..*count as usize]);
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
        self.weights_set(min, max, &sums, mirrored);
    }

    /// [`AxisCoeffs::prepare_torch`] where `torch` (`conv` the triangle or the cubic), else
    /// [`AxisCoeffs::prepare_with`].
    fn prepare_for(
        &mut self,
        in_size: u32,
        out_size: u32,
        mirrored: bool,
        conv: Convolution,
        torch: bool,
        level: SimdLevel,
    ) {
        if torch {
            self.prepare_torch(in_size, out_size, mirrored, conv == Convolution::Cubic);
        } else {
            self.prepare_with(in_size, out_size, mirrored, conv, level);
        }
    }

    /// Whether the weights are those of `(in_size, out_size, conv, torch)`, put in the order
    /// `mirrored` asks for (reversed here if they were in the other).
    fn cached(
        &mut self,
        in_size: u32,
        out_size: u32,
        mirrored: bool,
        conv: Convolution,
        torch: bool,
    ) -> bool {
        if (self.in_size, self.out_size, self.conv, self.torch) != (in_size, out_size, conv, torch)
            || self.start.is_empty()
        {
            return false;
        }
        if self.mirrored != mirrored {
            // The other order of the same outputs (a random flip): just reverse.
            self.mirror();
        }
        true
    }

    /// torch's uint8 kernel's weights for resampling `in_size` samples to `out_size` with
    /// the cubic (else the triangle), outputs reversed when `mirrored`, in this type's
    /// 22-bit fixed point: torch's int16 weights `w` with `p <= 22` fractional bits
    /// ([`tensor::int16_weights`]) as `w << (22 - p)`. Then every pass of the kernels, `clip8`
    /// of `(2^21 + sum(v w 2^(22 - p))) >> 22`, is exactly torch's `clamp((2^(p - 1) + sum(v
    /// w)) >> p, 0, 255)` (the same sum times `2^(22 - p)`, exact in i32: the range checks
    /// below hold it). Both sizes must be at least 1.
    pub(crate) fn prepare_torch(
        &mut self,
        in_size: u32,
        out_size: u32,
        mirrored: bool,
        cubic: bool,
    ) {
        let conv = if cubic {
            Convolution::Cubic
        } else {
            Convolution::Triangle
        };
        if self.cached(in_size, out_size, mirrored, conv, true) {
            return;
        }
        self.in_size = in_size;
        self.out_size = out_size;
        self.conv = conv;
        self.torch = true;
        self.mirrored = false;
        let (stride, precision) = tensor::int16_weights(
            in_size,
            out_size,
            cubic,
            &mut self.scratch,
            &mut self.start,
            &mut self.count,
            &mut self.weights,
        );
        self.stride = stride;
        let shift = PRECISION_BITS - precision.min(PRECISION_BITS);
        for w in &mut self.weights {
            // |w| < 2^15 and shift <= 22 - 14 for any weights torch's precision search
            // gives (the largest weight about 1.1): no overflow; saturate all the same.
            *w = w.saturating_mul(1 << shift);
        }
        self.taps = self.count.iter().copied().max().unwrap_or(1) as usize;
        let mut sums = RowSums::default();
        for row in self.weights.chunks_exact(stride) {
            sums.add_row(row);
        }
        let (min, max) = min_max(&self.weights);
        // The SIMD kernels' limits decide from the weights themselves which kernels take
        // them (the cubic upscales' edge weights above 1 leave the pair format).
        self.weights_set(min, max, &sums, mirrored);
    }

    /// What follows new weights, Pillow's or torch's: the kernels' flags from their range, the
    /// kernels' layouts stale, the outputs reversed when `mirrored`.
    fn weights_set(&mut self, min: i32, max: i32, sums: &RowSums, mirrored: bool) {
        self.set_range(WeightRange {
            min,
            max,
            abs_sum_max: sums.abs_max,
            sum_max: sums.sum_max,
        });
        self.padded_ready = false;
        self.pair_ready = false;
        if mirrored {
            self.mirror();
        }
    }

    /// Sets `simd_friendly`, `pairs_fit` and `may_clip` from the weights' range.
    fn set_range(&mut self, range: WeightRange) {
        self.simd_friendly = range.min >= -SIMD_WEIGHT_LIMIT
            && range.max <= SIMD_WEIGHT_LIMIT
            && range.abs_sum_max <= SIMD_ABS_SUM_LIMIT;
        self.pairs_fit = range.min >= PAIR_WEIGHT_MIN && range.max <= PAIR_WEIGHT_MAX;
        self.may_clip = range.min < 0 || range.sum_max > NO_CLIP_SUM_LIMIT;
        self.range = range;
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

    /// What the current weights are of: the kernels' plans built from them are cached under it.
    pub(crate) fn key(&self) -> CoeffsKey {
        CoeffsKey {
            in_size: self.in_size,
            out_size: self.out_size,
            mirrored: self.mirrored,
            conv: self.conv,
            torch: self.torch,
        }
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

    /// See the `pairs_fit` field.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn pairs_fit(&self) -> bool {
        self.pairs_fit
    }

    /// See the `may_clip` field.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn may_clip(&self) -> bool {
        self.may_clip
    }
}

/// What one axis's weights are of ([`AxisCoeffs::key`]): equal keys, equal weights. The filter
/// is part of it: bilinear and bicubic weights of the same sizes differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CoeffsKey {
    in_size: u32,
    out_size: u32,
    /// Outputs in reverse order.
    mirrored: bool,
    conv: Convolution,
    /// torch's uint8 weights of `conv` (see [`AxisCoeffs::prepare_torch`]), not Pillow's.
    torch: bool,
}

/// One axis's resampling parameters, as Pillow's `precompute_coeffs` computes them.
#[derive(Clone, Copy, Debug)]
struct Axis {
    conv: Convolution,
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
            let w = self
                .conv
                .weight(((x as i64 + xmin) as f64 - center + 0.5) * self.ss);
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
        let h = (w >> 7).clamp(-32768, 32767);
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

/// The extremes of an axis's weights that decide which kernels may run them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct WeightRange {
    min: i32,
    max: i32,
    /// The largest sum of `|w|` over one output's weights.
    abs_sum_max: i64,
    /// The largest sum of one output's weights.
    sum_max: i64,
}

/// The largest per-output sums of `|w|` and of `w` over the outputs seen so far (0 for none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct RowSums {
    abs_max: i64,
    sum_max: i64,
}

impl RowSums {
    /// Adds one output's weights.
    #[inline(always)]
    fn add_row(&mut self, w: &[i32]) {
        let abs = w.iter().map(|&v| i64::from(v).abs()).sum::<i64>();
        let sum = w.iter().map(|&v| i64::from(v)).sum::<i64>();
        self.abs_max = self.abs_max.max(abs);
        self.sum_max = self.sum_max.max(sum);
    }
}

/// The range of `w`, `stride` weights per output (all 0 when empty): what tests compare
/// [`AxisCoeffs::prepare_with`]'s running sums against, and build hand-made weights' with.
#[cfg(test)]
fn weight_range(w: &[i32], stride: usize) -> WeightRange {
    let (min, max) = min_max(w);
    let mut sums = RowSums::default();
    for row in w.chunks_exact(stride.max(1)) {
        sums.add_row(row);
    }
    WeightRange {
        min,
        max,
        abs_sum_max: sums.abs_max,
        sum_max: sums.sum_max,
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
    /// the CPU's runs the same kernels as [`SimdLevel::detected`].) For tests and benches that
    /// compare the levels: behind the `test-hooks` feature.
    #[cfg(any(test, feature = "test-hooks"))]
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
    /// The filter of every resize (default bilinear).
    filter: Filter,
    /// Source column of each output column for [`Filter::Nearest`].
    nearest: NearestColumns,
    /// torch's arithmetic instead of Pillow's for `BILINEAR` and `BICUBIC` (an image after
    /// `ToImage`); `None`: Pillow's.
    tensor: Option<Api>,
    tensor_resizer: tensor::TensorResizer,
    #[cfg(target_arch = "x86_64")]
    simd: avx2::Scratch,
    #[cfg(target_arch = "x86_64")]
    zmm: avx512::Scratch,
}

impl Resizer {
    /// An empty context; the first calls size its buffers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses kernels up to `limit` at most (tests compare the levels; benchmarks measure
    /// them). The results are identical at every level.
    pub fn set_simd_limit(&mut self, limit: SimdLevel) {
        self.limit = limit;
    }

    /// Resamples with `filter` from now on (the default is [`Filter::Bilinear`]).
    pub fn set_filter(&mut self, filter: Filter) {
        self.filter = filter;
    }

    /// Resizes as torchvision's `api` resizes a uint8 tensor from now on where the filter is
    /// bilinear or bicubic (torch's arithmetic, [`TensorArith`]); `None` (the default):
    /// Pillow's, as on a PIL image.
    pub fn set_tensor_api(&mut self, api: Option<Api>) {
        self.tensor = api;
    }

    /// The filter resizes use.
    pub fn filter(&self) -> Filter {
        self.filter
    }

    /// `dst = src.resize((out_w, out_h), filter)` as Pillow computes it, for the filter set by
    /// [`Resizer::set_filter`].
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
        // torch's uint8 kernel runs on this module's kernels with its own weights.
        let mut torch = false;
        if let (Some(api), Filter::Bilinear | Filter::Bicubic) = (self.tensor, self.filter) {
            let cubic = self.filter == Filter::Bicubic;
            let arith = match api {
                Api::V1 => TensorArith::Float32,
                Api::V2 => TensorArith::v2(cubic),
            };
            if arith == TensorArith::Float32 {
                let level = self.limit.min(SimdLevel::detected());
                self.tensor_resizer
                    .resize_into(src, out_h, out_w, cubic, flip, level, sink);
                return Ok(());
            }
            torch = true;
        }
        let (in_w, in_h) = (src.width(), src.height());
        let need_h = out_w != in_w;
        let need_v = out_h != in_h;
        // torch's kernels go horizontal first always.
        let vfirst = need_v && !torch && vertical_first(in_w, in_h, out_w, out_h);
        let level = self.limit.min(SimdLevel::detected());
        let avx2 = level >= SimdLevel::Avx2;
        let conv = match self.filter {
            // Pillow copies when the size does not change, whatever the filter (below).
            Filter::Nearest if need_h || need_v => {
                self.resize_nearest(src, out_h, out_w, flip, sink);
                return Ok(());
            }
            Filter::Nearest | Filter::Bilinear => Convolution::Triangle,
            Filter::Bicubic => Convolution::Cubic,
            Filter::Box => Convolution::Box,
            Filter::Hamming => Convolution::Hamming,
            Filter::Lanczos => Convolution::Lanczos,
        };
        if !need_h {
            // Pillow copies (or runs only the vertical pass); a flip reverses the pixels.
            if need_v {
                self.vert
                    .prepare_for(in_h, out_h, false, conv, torch, level);
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
        self.horiz
            .prepare_for(in_w, out_w, flip, conv, torch, level);
        self.horiz.ensure_padded();
        if need_v {
            self.vert
                .prepare_for(in_h, out_h, false, conv, torch, level);
        }
        #[cfg(target_arch = "x86_64")]
        if level == SimdLevel::Avx512 && self.zmm.prepare(&self.horiz, need_v.then_some(&self.vert))
        {
            avx512::resize(self, src, out_h, need_v, vfirst, sink);
            return Ok(());
        }
        #[cfg(target_arch = "x86_64")]
        {
            // The ring-row vertical kernel runs only in the horizontal-first order.
            let h_first = need_v && !vfirst;
            // The AVX-512 instructions at 256 bits where allowed and present.
            let ymm512 = level >= SimdLevel::Avx512Ymm;
            if avx2
                && self
                    .simd
                    .prepare(&self.horiz, h_first.then_some(&self.vert), ymm512)
            {
                avx2::resize(self, src, out_h, need_v, vfirst, sink);
                return Ok(());
            }
        }
        if !need_v {
            for y in 0..out_h as usize {
                kernels::horizontal(avx2, src.row(y as u32), sink.row_mut(y), &self.horiz);
                sink.row_done(y);
            }
        } else if vfirst {
            self.vertical_then_horizontal(avx2, src, sink);
        } else {
            self.horizontal_then_vertical(avx2, src, sink);
        }
        Ok(())
    }

    /// [`Filter::Nearest`] (the sizes differ): Pillow's `ImagingScaleAffine` with the
    /// coefficients `Image.resize` gives it. Output pixels whose source coordinate falls
    /// outside the image stay 0, as Pillow fills them (it cannot happen for sizes below 2^24,
    /// but the rule is Pillow's and costs nothing).
    fn resize_nearest<S: RowSink + ?Sized>(
        &mut self,
        src: RgbView<'_>,
        out_h: u32,
        out_w: u32,
        flip: bool,
        sink: &mut S,
    ) {
        let (in_w, in_h) = (src.width(), src.height());
        let cols = self.nearest.prepare(in_w, out_w, flip);
        let mut rows = NearestSteps::new(in_h, out_h);
        for yy in 0..out_h as usize {
            let out = sink.row_mut(yy);
            match rows.next_index() {
                Some(y) => {
                    let row = src.row(y);
                    for (px, &x) in out.chunks_exact_mut(3).zip(cols) {
                        match row.get(3 * x as usize..3 * x as usize + 3) {
                            Some(p) => px.copy_from_slice(p),
                            None => px.fill(0),
                        }
                    }
                }
                None => out.fill(0),
            }
            sink.row_done(yy);
        }
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

/// The source positions of Pillow's nearest-neighbour scaling along one axis
/// (`ImagingScaleAffine`): `Image.resize` passes the step `a = (float)(in - 0) / out` (in f64)
/// and the start `0 + a * 0.5`; each output adds `a` to the running coordinate (in f64, so
/// rounding accumulates exactly as Pillow's does) and takes `COORD`: -1 below 0, else the
/// truncation. Positions outside `0..in` are Pillow's unwritten (zero-filled) pixels.
#[derive(Clone, Copy, Debug)]
struct NearestSteps {
    in_size: u32,
    step: f64,
    at: f64,
}

impl NearestSteps {
    fn new(in_size: u32, out_size: u32) -> Self {
        // Pillow's box is float32: `box[2] - box[0]` is a float32 subtraction (exact below
        // 2^24), converted to double and divided by the int size.
        let step = f64::from(in_size as f32) / f64::from(out_size);
        NearestSteps {
            in_size,
            step,
            at: 0.0 + step * 0.5,
        }
    }

    /// The next output's source index, `None` when outside the input.
    fn next_index(&mut self) -> Option<u32> {
        let at = self.at;
        self.at += self.step;
        if at < 0.0 {
            return None;
        }
        // `(int)at`; at >= 0, and an `as` conversion saturates where C's would be undefined.
        let i = at as i64;
        (i < i64::from(self.in_size)).then_some(i as u32)
    }
}

/// The source column of every output column for [`Filter::Nearest`], cached for the last
/// `(in_w, out_w, mirrored)`; `u32::MAX` marks a column outside the input (written as 0).
#[derive(Clone, Debug, Default)]
struct NearestColumns {
    key: Option<(u32, u32, bool)>,
    cols: Vec<u32>,
}

impl NearestColumns {
    /// The columns for resampling `in_w` to `out_w`, in reverse order when `mirrored` (a
    /// flipped resize).
    fn prepare(&mut self, in_w: u32, out_w: u32, mirrored: bool) -> &[u32] {
        if self.key != Some((in_w, out_w, mirrored)) {
            let mut steps = NearestSteps::new(in_w, out_w);
            self.cols.clear();
            self.cols
                .extend((0..out_w).map(|_| steps.next_index().unwrap_or(u32::MAX)));
            if mirrored {
                self.cols.reverse();
            }
            self.key = Some((in_w, out_w, mirrored));
        }
        &self.cols
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

/// Most taps [`through_ring`] takes per output row (the most any SIMD vertical kernel runs).
#[cfg(target_arch = "x86_64")]
const MAX_RING_TAPS: usize = 64;

/// The row buffers of [`by_blocks`]: `rows` for the vertical pass's output (source-width u8
/// rows), `block` for the horizontal pass's (`stride` bytes apart, of which the first
/// `values` are the output row's).
#[cfg(target_arch = "x86_64")]
struct BlockRows<'a> {
    rows: &'a mut Vec<u8>,
    block: &'a mut Vec<u8>,
    stride: usize,
    values: usize,
}

/// The vertical-first order of the SIMD resizes, and the one without a vertical pass: blocks
/// of `BLOCK` output rows, each first as source-width rows (`vertical(y, row)` writes output
/// row `y`'s; without it, the source rows themselves), then through `horizontal(rows, ahead,
/// block, stride)`, then copied out to `sink`. Without a vertical pass, the next block's source
/// rows are prefetched while this block's are resized.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn by_blocks<const BLOCK: usize, S: RowSink + ?Sized>(
    src: &RgbView<'_>,
    out_h: usize,
    buffers: BlockRows<'_>,
    mut vertical: Option<impl FnMut(usize, &mut [u8])>,
    mut horizontal: impl FnMut(&[&[u8]], Ahead, &mut [u8], usize),
    sink: &mut S,
) {
    let BlockRows {
        rows: rows_buf,
        block,
        stride,
        values,
    } = buffers;
    let row_bytes = 3 * src.width() as usize;
    if vertical.is_some() && rows_buf.len() < BLOCK * row_bytes {
        rows_buf.resize(BLOCK * row_bytes, 0);
    }
    if block.len() < BLOCK * stride {
        block.resize(BLOCK * stride, 0);
    }
    for y0 in (0..out_h).step_by(BLOCK) {
        let n = BLOCK.min(out_h - y0);
        let mut rows: [&[u8]; BLOCK] = [&[]; BLOCK];
        let ahead = match vertical.as_mut() {
            Some(vertical) => {
                for (i, dst) in rows_buf.chunks_exact_mut(row_bytes).take(n).enumerate() {
                    vertical(y0 + i, dst);
                }
                for (slot, row) in rows.iter_mut().zip(rows_buf.chunks_exact(row_bytes)) {
                    *slot = row;
                }
                Ahead::NONE
            }
            None => {
                for (i, slot) in rows.iter_mut().take(n).enumerate() {
                    *slot = src.row((y0 + i) as u32);
                }
                Ahead::rows(src, y0 + n, n.min(out_h - y0 - n))
            }
        };
        horizontal(&rows[..n], ahead, block, stride);
        for (i, row) in block.chunks_exact(stride).take(n).enumerate() {
            sink.row_mut(y0 + i).copy_from_slice(&row[..values]);
            sink.row_done(y0 + i);
        }
    }
}

/// `len` i32s of `buf` (grown as needed, never shrunk) from its first `ALIGN`-byte boundary.
#[cfg(target_arch = "x86_64")]
fn aligned_i32s<const ALIGN: usize>(buf: &mut Vec<i32>, len: usize) -> &mut [i32] {
    let lanes = ALIGN / 4;
    if buf.len() < len + lanes {
        buf.resize(len + lanes, 0);
    }
    let at = buf.as_ptr().align_offset(ALIGN).min(lanes);
    &mut buf[at..at + len]
}

/// The ring of i32 rows of [`through_ring`]: `stride` values a row (a multiple of `ALIGN / 4`),
/// every row `ALIGN`-byte aligned so that no load of the vertical pass straddles cache lines;
/// the first `values` of a row are an output row's.
#[cfg(target_arch = "x86_64")]
struct Ring<'a, const ALIGN: usize> {
    buf: &'a mut Vec<i32>,
    stride: usize,
    values: usize,
}

/// The horizontal-first order of the SIMD resizes: source rows go through `horizontal(rows,
/// ahead, ring rows)`, `BLOCK` at a time, into a ring of rows as the vertical pass comes to need
/// them (the ring stays in L1/L2 where the whole intermediate image, 4 bytes a value, would
/// not); then each output row `y` is `vertical(y, ring, its taps' row offsets, weights, row)`, handed
/// to `sink`. `taps_of` gives an output row's first source row and weights in the ring's
/// format; `vert` must have at most [`MAX_RING_TAPS`] taps.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn through_ring<'w, const BLOCK: usize, const ALIGN: usize, S: RowSink + ?Sized>(
    src: &RgbView<'_>,
    vert: &AxisCoeffs,
    taps_of: impl Fn(usize) -> (usize, &'w [i32]),
    ring: Ring<'_, ALIGN>,
    mut horizontal: impl FnMut(&[&[u8]], Ahead, &mut [&mut [i32]]),
    mut vertical: impl FnMut(usize, &[i32], &[usize], &[i32], &mut [u8]),
    sink: &mut S,
) {
    assert!(vert.taps <= MAX_RING_TAPS);
    let (first, end) = vert.span();
    let (stride, values) = (ring.stride, ring.values);
    let cap = BLOCK + vert.taps;
    let ring = aligned_i32s::<ALIGN>(ring.buf, cap * stride);
    let (mut next_base, mut start_base) = (first - first % cap, first - first % cap);
    let mut next = first;
    let mut offs = [0usize; MAX_RING_TAPS];
    for yy in 0..vert.out_size as usize {
        let (start, w) = taps_of(yy);
        while next < start + w.len() {
            // Rows [start, next + n) fit: next < start + taps, n <= BLOCK.
            let n = BLOCK.min(end - next);
            let ahead = Ahead::rows(src, next + n, BLOCK.min(end - next - n));
            let mut src_rows: [&[u8]; BLOCK] = [&[]; BLOCK];
            for (i, row) in src_rows.iter_mut().take(n).enumerate() {
                *row = src.row((next + i) as u32);
            }
            let (head, tail) = ring.split_at_mut(ring_slot(next, cap, &mut next_base) * stride);
            let slots = tail
                .chunks_exact_mut(stride)
                .chain(head.chunks_exact_mut(stride));
            let mut outs: [&mut [i32]; BLOCK] = std::array::from_fn(|_| Default::default());
            for (o, slot) in outs.iter_mut().zip(slots).take(n) {
                *o = slot;
            }
            horizontal(&src_rows[..n], ahead, &mut outs[..n]);
            next += n;
        }
        let s0 = ring_slot(start, cap, &mut start_base);
        for (o, s) in offs.iter_mut().zip(s0..s0 + w.len()) {
            // `w.len() <= taps < cap`: at most one wrap.
            *o = if s >= cap { s - cap } else { s } * stride;
        }
        vertical(
            yy,
            ring,
            &offs[..w.len()],
            w,
            &mut sink.row_mut(yy)[..values],
        );
        sink.row_done(yy);
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
            unsafe { super::avx2::horizontal_portable(src, dst, c) };
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
            unsafe { super::avx2::vertical_portable(row, w, dst, acc) };
            return;
        }
        let _ = avx2;
        portable::vertical(row, w, dst, acc);
    }
}

/// A deterministic `w`x`h` image for tests and benches: each byte is `pixel(x, y, channel,
/// draw)`, `draw` a fresh step of a 64-bit LCG seeded from `seed` (use its high bits). Behind
/// the `test-hooks` feature.
#[cfg(any(test, feature = "test-hooks"))]
pub fn generated_image(
    w: u32,
    h: u32,
    seed: u64,
    mut pixel: impl FnMut(u32, u32, u32, u64) -> u8,
) -> RgbImage {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut data = Vec::with_capacity(3 * (w * h) as usize);
    for y in 0..h {
        for x in 0..w {
            for c in 0..3u32 {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                data.push(pixel(x, y, c, state));
            }
        }
    }
    RgbImage::from_raw(w, h, data).expect("sizes match")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::CropRect;

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
    fn bicubic_coefficients_match_pillow_by_hand() {
        // 4 -> 2: scale 2, support 2 * 2, center 1.0 for output 0: xmin = int(-2.5) -> 0,
        // xmax = min(int(5.5), 4) = 4; cubic((x - 1 + 0.5) / 2) at -0.25, 0.25, 0.75, 1.25 =
        // 0.8671875, 0.8671875, 0.2265625, -0.0703125 (a negative lobe), sum 1.890625.
        let mut c = AxisCoeffs::default();
        c.prepare_with(4, 2, false, Convolution::Cubic, SimdLevel::detected());
        let (start, w) = c.taps_of(0);
        assert_eq!(start, 0);
        let expect = |v: f64| {
            let scaled = v / 1.890625 * 4_194_304.0;
            if v < 0.0 {
                (-0.5 + scaled) as i32
            } else {
                (0.5 + scaled) as i32
            }
        };
        let want = [0.8671875, 0.8671875, 0.2265625, -0.0703125].map(expect);
        assert_eq!(w, &want);
        // Negative weights: the SIMD kernels take them, with clamping stores.
        assert!(c.simd_friendly() && c.may_clip() && c.pairs_fit());
        // The triangle's weights of the same axis are cached apart: switching recomputes.
        c.prepare(4, 2);
        assert_eq!(c.taps_of(0).1.len(), 3);
        assert!(c.simd_friendly() && !c.may_clip());
    }

    #[test]
    fn nearest_steps_follow_pillows_running_coordinate() {
        // 5 -> 3: step 5/3, coordinates 0.833, 2.5, 4.167 -> columns 0, 2, 4.
        let mut cols = NearestColumns::default();
        assert_eq!(cols.prepare(5, 3, false), &[0, 2, 4]);
        assert_eq!(cols.prepare(5, 3, true), &[4, 2, 0]);
        // 2 -> 5: step 0.4 from 0.2: 0.2, 0.6, 1.0 (0.6000000000000001 + 0.4), 1.4, 1.8.
        assert_eq!(cols.prepare(2, 5, false), &[0, 0, 1, 1, 1]);
        // 1 -> 4: every output reads the only pixel.
        assert_eq!(cols.prepare(1, 4, false), &[0, 0, 0, 0]);
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
                scalar.prepare_with(
                    in_size,
                    out,
                    mirrored,
                    Convolution::Triangle,
                    SimdLevel::Portable,
                );
                // The sums kept while computing are those of the rows.
                let range = weight_range(&scalar.weights, scalar.stride);
                assert_eq!(scalar.range, range, "{in_size} -> {out}");
                for level in [SimdLevel::Avx2, SimdLevel::Avx512Ymm, SimdLevel::Avx512] {
                    let mut simd = AxisCoeffs::default();
                    simd.prepare_with(in_size, out, mirrored, Convolution::Triangle, level);
                    let what = format!("{in_size} -> {out}, mirrored {mirrored}, {level:?}");
                    assert_eq!(simd.start, scalar.start, "{what}");
                    assert_eq!(simd.count, scalar.count, "{what}");
                    assert!(simd.weights == scalar.weights, "{what}");
                    assert_eq!(simd.taps, scalar.taps, "{what}");
                    assert_eq!(simd.simd_friendly, scalar.simd_friendly, "{what}");
                    assert_eq!(simd.pairs_fit, scalar.pairs_fit, "{what}");
                    assert_eq!(simd.may_clip, scalar.may_clip, "{what}");
                    assert_eq!(simd.range, scalar.range, "{what}");
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
        generated_image(w, h, seed, |x, y, c, draw| {
            let noise = (draw >> 59) as u32;
            let v = match (x / 7 + y / 5 + c) % 4 {
                0 => 255,
                1 => 0,
                _ => (x * 3 + y * 5 + c * 40 + noise) % 256,
            };
            v as u8
        })
    }

    #[test]
    fn changing_the_filter_rebuilds_the_kernels_plans() {
        // Same sizes, other filter: the plans cached for the old weights must not run.
        let src = test_image(97, 61, 5);
        let (mut out, mut expected) = (RgbImage::new(), RgbImage::new());
        for level in SimdLevel::kernel_sets() {
            let mut reused = Resizer::new();
            reused.set_simd_limit(level);
            for filter in [Filter::Bilinear, Filter::Bicubic, Filter::Bilinear] {
                for (out_h, out_w) in [(40, 50), (61, 50), (25, 90)] {
                    reused.set_filter(filter);
                    reused
                        .resize(src.view(), out_h, out_w, &mut out)
                        .expect("resize");
                    let mut fresh = Resizer::new();
                    fresh.set_simd_limit(level);
                    fresh.set_filter(filter);
                    fresh
                        .resize(src.view(), out_h, out_w, &mut expected)
                        .expect("resize");
                    assert_eq!(out, expected, "{level:?} {filter:?} {out_w}x{out_h}");
                }
            }
        }
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
        portable.set_simd_limit(SimdLevel::Portable);
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
        // Bicubic and Lanczos run the SIMD kernels with clamping stores (and, for upscales,
        // without the pair format); nearest has one path.
        for filter in Filter::ALL {
            portable.set_filter(filter);
            for r in &mut fast {
                r.set_filter(filter);
            }
            for (i, &(iw, ih, ow, oh)) in sizes.iter().enumerate() {
                let img = test_image(iw, ih, i as u64);
                portable.resize(img.view(), oh, ow, &mut b).expect("valid");
                for (r, level) in fast.iter_mut().zip(&levels) {
                    r.resize(img.view(), oh, ow, &mut a).expect("valid");
                    assert!(a == b, "{iw}x{ih} -> {ow}x{oh}, {filter:?}, {level:?}");
                }
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
        let levels = [
            SimdLevel::Portable,
            SimdLevel::Avx2,
            SimdLevel::Avx512Ymm,
            SimdLevel::Avx512,
        ];
        let filters = Filter::ALL;
        for (level, filter) in levels
            .into_iter()
            .flat_map(|l| filters.into_iter().map(move |f| (l, f)))
        {
            let mut r = Resizer::new();
            r.set_simd_limit(level);
            r.set_filter(filter);
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
                assert!(
                    plain == flipped,
                    "{iw}x{ih} -> {ow}x{oh}, {filter:?} {level:?}"
                );
                // And back: the cached coefficients and plans turn around again.
                r.resize(img.view(), oh, ow, &mut again).expect("valid");
                crate::tensor::hflip(&mut again);
                assert!(
                    again == plain,
                    "{iw}x{ih} -> {ow}x{oh} again, {filter:?} {level:?}"
                );
            }
        }
    }

    /// Hard 0/255 patterns, where the cubic's negative lobes overshoot both ways and
    /// `clip8` decides the pixel: `kind` 0 vertical stripes, 1 horizontal stripes, 2 a
    /// checkerboard, 3 single white lines on black, 4 random 0/255 bytes.
    fn hard_edges(w: u32, h: u32, kind: u32, seed: u64) -> RgbImage {
        generated_image(w, h, seed, |x, y, c, draw| {
            let on = match kind {
                0 => (x + c) / 2 % 2 == 0,
                1 => (y / 3 + c) % 2 == 0,
                2 => (x + y + c) % 2 == 0,
                3 => x % 7 == c || y % 5 == c,
                _ => draw >> 63 == 1,
            };
            if on {
                255
            } else {
                0
            }
        })
    }

    #[test]
    fn bicubic_simd_kernels_clip_as_the_portable_ones() {
        // Every kernel set against the portable kernels on hard 0/255 edges: downscales and
        // upscales (whose edge weights exceed 1 and the pair format), both pass orders, one
        // pass only, odd sizes, 1-pixel inputs and outputs, and flips.
        let sizes = [
            (1, 1, 5, 7),
            (1, 9, 3, 4),
            (9, 1, 224, 1),
            (2, 2, 224, 224),
            (50, 40, 1, 40),
            (50, 40, 50, 1),
            (50, 40, 1, 1),
            (500, 375, 224, 224),
            (375, 500, 224, 224),
            (500, 375, 341, 256),
            (500, 375, 309, 232),
            (300, 300, 250, 199),
            (120, 150, 224, 224),
            (150, 120, 224, 224),
            (224, 300, 224, 224),
            (300, 224, 224, 224),
            (23, 17, 97, 61),
            (333, 251, 111, 83),
            (64, 64, 63, 65),
            (791, 599, 224, 224),
            (1000, 40, 224, 224),
            (40, 1000, 224, 224),
            (2000, 1500, 100, 40),
            (21, 50, 30, 30),
            (22, 50, 13, 30),
        ];
        let mut portable = Resizer::new();
        portable.set_simd_limit(SimdLevel::Portable);
        portable.set_filter(Filter::Bicubic);
        let mut fast: Vec<(SimdLevel, Resizer)> = SimdLevel::kernel_sets()
            .into_iter()
            .map(|level| {
                let mut r = Resizer::new();
                r.set_simd_limit(level);
                r.set_filter(Filter::Bicubic);
                (level, r)
            })
            .collect();
        let (mut want, mut got) = (RgbImage::new(), RgbImage::new());
        for (i, &(iw, ih, ow, oh)) in sizes.iter().enumerate() {
            for kind in 0..5 {
                let img = hard_edges(iw, ih, kind, i as u64);
                for flip in [false, true] {
                    fn sink_of(img: &mut RgbImage, ow: u32, oh: u32) -> PackedSink<'_> {
                        PackedSink {
                            data: img.reset(ow, oh),
                            row_len: 3 * ow as usize,
                        }
                    }
                    portable
                        .resize_into(img.view(), oh, ow, flip, &mut sink_of(&mut want, ow, oh))
                        .expect("valid");
                    for (level, r) in &mut fast {
                        r.resize_into(img.view(), oh, ow, flip, &mut sink_of(&mut got, ow, oh))
                            .expect("valid");
                        assert!(
                            got == want,
                            "{iw}x{ih} -> {ow}x{oh}, pattern {kind}, flip {flip}, {level:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn bicubic_runs_the_simd_kernels() {
        // The shapes of torchvision's recipes: eval resizes, RandomResizedCrop's down- and
        // upscales. The parity tests compare results; this pins that the SIMD kernels (not
        // the portable fallback) produced them.
        let shapes = [
            (500, 375, 224, 224),
            (500, 375, 341, 256),
            (500, 375, 309, 232),
            (120, 150, 224, 224),
            (300, 200, 224, 224),
            (300, 224, 224, 224),
        ];
        for (iw, ih, ow, oh) in shapes {
            let mut horiz = AxisCoeffs::default();
            let mut vert = AxisCoeffs::default();
            horiz.prepare_with(iw, ow, false, Convolution::Cubic, SimdLevel::detected());
            horiz.ensure_padded();
            vert.prepare_with(ih, oh, false, Convolution::Cubic, SimdLevel::detected());
            assert!(horiz.simd_friendly() && horiz.may_clip(), "{iw} -> {ow}");
            assert_eq!(horiz.range, weight_range(&horiz.weights, horiz.stride));
            assert_eq!(vert.range, weight_range(&vert.weights, vert.stride));
            assert!(
                vert.simd_friendly() && (ih == oh || vert.may_clip()),
                "{ih} -> {oh}"
            );
            let need_v = (ih != oh).then_some(&vert);
            if SimdLevel::detected() >= SimdLevel::Avx2 {
                let mut simd = avx2::Scratch::default();
                assert!(simd.prepare(&horiz, need_v, false), "AVX2 {iw}x{ih}");
            }
            if SimdLevel::detected() == SimdLevel::Avx512 {
                let mut simd = avx2::Scratch::default();
                assert!(simd.prepare(&horiz, need_v, true), "AVX-512 ymm {iw}x{ih}");
                let mut zmm = avx512::Scratch::default();
                assert!(zmm.prepare(&horiz, need_v), "AVX-512 {iw}x{ih}");
            }
        }
    }

    /// `Convolution::Cubic` coefficients of `in_size -> out_size` with each output's
    /// weights replaced by `first` and `second` at two of its taps (moving with the
    /// output, so that every split position sees them), zeros elsewhere.
    fn crafted(in_size: u32, out_size: u32, first: i32, second: i32) -> AxisCoeffs {
        let mut c = AxisCoeffs::default();
        c.prepare_with(
            in_size,
            out_size,
            false,
            Convolution::Cubic,
            SimdLevel::Portable,
        );
        let stride = c.stride;
        for (i, (row, &count)) in c.weights.chunks_exact_mut(stride).zip(&c.count).enumerate() {
            let count = count as usize;
            assert!(count >= 2);
            row.fill(0);
            row[i % count] = first;
            row[(i + 1) % count] = second;
        }
        let range = weight_range(&c.weights, stride);
        c.set_range(range);
        c
    }

    #[test]
    fn kernels_are_exact_at_the_weight_bounds() {
        // Hand-made weights at the limits `simd_friendly` and `pairs_fit` state: sums of
        // |w| at `SIMD_ABS_SUM_LIMIT` (all positive, all negative, mixed), which take the
        // exact sums to within 100 of i32's ends, and weights at the pair format's ends.
        // Every kernel set must give the portable kernels' pixels (which would overflow,
        // and panic in a test build, past the bound).
        let limit = SIMD_ABS_SUM_LIMIT as i32;
        let big = SIMD_WEIGHT_LIMIT;
        let sets = [
            (big, limit - big, false),
            (-big, -(limit - big), false),
            (PAIR_WEIGHT_MAX, -(limit - PAIR_WEIGHT_MAX), true),
            (PAIR_WEIGHT_MIN, limit + PAIR_WEIGHT_MIN, true),
            (PAIR_WEIGHT_MAX + 1, 0, false),
            (PAIR_WEIGHT_MIN - 1, 0, false),
        ];
        for (first, second, pairs) in sets {
            let c = crafted(40, 20, first, second);
            assert!(c.simd_friendly(), "{first} {second}");
            assert_eq!(c.pairs_fit(), pairs, "{first} {second}");
        }
        // One past each bound.
        assert!(!crafted(40, 20, big, limit - big + 1).simd_friendly());
        assert!(!crafted(40, 20, big + 1, 0).simd_friendly());
        assert!(!crafted(40, 20, -big - 1, 0).simd_friendly());
        // (in_w, in_h, out_w, out_h): horizontal first, vertical first, horizontal only.
        let shapes = [(40, 30, 20, 13), (40, 90, 20, 36), (40, 30, 20, 30)];
        let mut images: Vec<RgbImage> = (0..3).map(|s| hard_edges(40, 90, 4, s)).collect();
        images.push(RgbImage::from_raw(40, 90, vec![255; 3 * 40 * 90]).expect("sizes match"));
        let (mut want, mut got) = (RgbImage::new(), RgbImage::new());
        for (first, second, _) in sets {
            for (iw, ih, ow, oh) in shapes {
                let horiz = crafted(iw, ow, first, second);
                let vert = crafted(ih, oh, first, second);
                let run = |level: SimdLevel, img: &RgbImage, out: &mut RgbImage| {
                    let mut r = Resizer::new();
                    r.set_simd_limit(level);
                    r.set_filter(Filter::Bicubic);
                    // The same sizes and filter: `resize` keeps these as its cached weights.
                    (r.horiz, r.vert) = (horiz.clone(), vert.clone());
                    let view = img.crop_view(CropRect {
                        top: 0,
                        left: 0,
                        height: ih,
                        width: iw,
                    });
                    r.resize(view.expect("fits"), oh, ow, out).expect("valid");
                    assert_eq!(r.horiz.weights, horiz.weights, "cached weights kept");
                };
                for img in &images {
                    run(SimdLevel::Portable, img, &mut want);
                    for level in SimdLevel::kernel_sets() {
                        run(level, img, &mut got);
                        assert!(
                            got == want,
                            "{first} {second}: {iw}x{ih} -> {ow}x{oh}, {level:?}"
                        );
                    }
                }
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
