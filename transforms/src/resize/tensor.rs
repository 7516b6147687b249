//! torch's antialiased resize of a uint8 image tensor, as torchvision computes `Resize` (and
//! `RandomResizedCrop`'s resize) after `ToImage`/`PILToTensor`: `F.interpolate(...,
//! antialias=True)` with `BILINEAR` or `BICUBIC`, in one of two arithmetics
//! (`aten/src/ATen/native/cpu/UpSampleKernel.cpp`):
//!
//! - [`TensorArith::Float32`]: v1's `resize` (and v2's where torch has no uint8 kernel) casts
//!   to float32 and interpolates: per axis the weights of `_compute_indices_weights_aa` in
//!   float32 (the scale `in / out`, the window `[center - support + 0.5, center + support +
//!   0.5)`, Keys' cubic with `a = -0.5` written as `cubic_convolution1/2`, normalized), the
//!   horizontal pass first (skipped where the width stays), into a float32 image, then the
//!   vertical pass; each output `t0 w0`, then `+ tk wk` in order as fused multiply-adds (torch's
//!   AVX2 and AVX-512 builds contract them: measured against torch, and torch forced to its
//!   `DEFAULT` capability differs); then the cubic clamped to `[0, 255]` and rounded half to
//!   even back to uint8. The weights' cubic is contracted the same way. One value in about
//!   10^5 of a downscale still differs by a level: torch's horizontal pass there sums in an
//!   order neither the fused nor the unfused sequence reproduces (upscales are exact).
//!   Computed here ([`TensorResizer`]): portable loops, or 8 (AVX2 and FMA) or 16 (AVX-512)
//!   outputs per vector ([`x86`]); the vectors hold independent outputs, so every output's
//!   operations are the portable ones and every kernel set gives the same bytes. Measured
//!   (`benches/resize_filters.rs`, 500x375 to 224x224 and to 309x232): 2.4-2.8x Pillow's
//!   resize of the same sizes for BILINEAR, 1.8-2.3x for BICUBIC, with AVX-512; with AVX2
//!   alone 1.6-2.0x and 0.7-1.3x Pillow's AVX2 resize. The float32 work itself costs that:
//!   the block transposes (uint8 rows to float32 columns and back) and a sum per value where
//!   Pillow's kernels sum 16-bit products of bytes.
//! - [`TensorArith::Uint8`]: v2's uint8 kernel (the Pillow-SIMD-derived AVX2 one, and the
//!   generic one with the same integer arithmetic): the weights in f64 by the same formulas,
//!   then to int16 with `p` fractional bits, `p` the largest below 22 at which the largest
//!   weight still rounds below `2^15` ([`int16_weights`]); each pass sums `2^(p-1) + sum(v w)`
//!   in i32, shifts by `p` and clamps to `[0, 255]`: a uint8 image between the passes,
//!   horizontal first always. Not computed here: with the weights shifted to 22 bits,
//!   Pillow's kernels compute exactly these passes ([`super::AxisCoeffs::prepare_torch`]), so
//!   [`super::Resizer`] runs them (all its SIMD levels, in torch's pass order) at Pillow's
//!   speed.
//!
//! Where this differs from Pillow ([`super::Resizer`]'s own weights): the cubic's formula (its
//! f64 values differ in the last bits), the weights' precision (16-ish bits, not 22), the pass
//! order (Pillow 13 may go vertical first) and, for float32, no rounding between the passes.
//!
//! Must not allocate per call in the steady state (the weights are cached per axis, the
//! buffers only grow); must not be used for a PIL image (that is Pillow's resize); must not
//! reorder any output's float32 operations (vectors run across outputs, never within a sum).

use super::{Convolution, RowSink, SimdLevel};
use crate::image::RgbView;

#[cfg(target_arch = "x86_64")]
mod x86;

/// Which of torch's arithmetics a tensor resize computes (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorArith {
    /// uint8 cast to float32, interpolated, rounded back (v1; v2 without a uint8 kernel).
    Float32,
    /// torch's uint8 kernel: int16 fixed-point weights, uint8 between the passes (v2).
    Uint8,
}

impl TensorArith {
    /// What v2's `resize_image` runs on this CPU for a uint8 image: the uint8 kernel for
    /// `BICUBIC` always, for `BILINEAR` where torch's CPU capability is AVX2 or AVX-512 (x86
    /// with AVX2 and FMA) or on ARM64 (`_do_native_uint8_resize_on_cpu`); float32 otherwise.
    pub fn v2(cubic: bool) -> TensorArith {
        if cubic || torch_has_native_uint8_bilinear() {
            TensorArith::Uint8
        } else {
            TensorArith::Float32
        }
    }
}

fn torch_has_native_uint8_bilinear() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(target_arch = "aarch64")]
    {
        true
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// torch's `aa_filter` of `HelperInterpLinear` in float32.
fn triangle_f32(x: f32) -> f32 {
    let x = x.abs();
    if x < 1.0 {
        1.0 - x
    } else {
        0.0
    }
}

/// torch's `aa_filter` of `HelperInterpCubic` (`a = -0.5`) in float32, with the fused
/// multiply-adds torch's AVX2 build contracts `cubic_convolution1/2` into (measured against
/// torch: the unfused polynomial is off slightly more often).
fn cubic_f32(x: f32) -> f32 {
    const A: f32 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0).mul_add(x, -(A + 3.0)) * x).mul_add(x, 1.0)
    } else if x < 2.0 {
        A.mul_add(x, -5.0 * A)
            .mul_add(x, 8.0 * A)
            .mul_add(x, -4.0 * A)
    } else {
        0.0
    }
}

fn cubic_f64(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A
    } else {
        0.0
    }
}

/// One axis's float32 windows and weights, cached for the last `(in, out, cubic)`.
///
/// Invariant: `start[i] + count[i] <= in_size`, `1 <= count[i] <= stride`, and the weights of
/// output `i` are `f32s[i * stride..i * stride + count[i]]`, zeros after them up to the
/// stride.
#[derive(Clone, Debug, Default)]
pub(crate) struct TorchAxis {
    key: Option<(u32, u32, bool)>,
    stride: usize,
    start: Vec<u32>,
    count: Vec<u32>,
    f32s: Vec<f32>,
    /// The largest count: every window padded to `taps` inputs for the SIMD horizontal pass.
    taps: usize,
    /// Start of each padded window, moved left where it would pass the end of the input
    /// (`pstart[i] + taps <= in_size`).
    pstart: Vec<u32>,
    /// `taps` weights per output aligned to the padded windows, zeros where padded.
    pweights: Vec<f32>,
}

impl TorchAxis {
    /// Computes the weights of resampling `in_size` samples to `out_size` (both at least 1)
    /// unless they are the cached ones.
    pub(crate) fn prepare(&mut self, in_size: u32, out_size: u32, cubic: bool) {
        let key = Some((in_size, out_size, cubic));
        if self.key == key {
            return;
        }
        self.key = key;
        self.prepare_f32(in_size, out_size, cubic);
        self.pad(in_size as usize);
    }

    /// Builds `taps`, `pstart` and `pweights` from the windows.
    fn pad(&mut self, in_size: usize) {
        let taps = self.count.iter().copied().max().unwrap_or(1) as usize;
        self.taps = taps;
        reset(&mut self.pstart, self.start.len());
        self.pweights.clear();
        self.pweights.resize(self.start.len() * taps, 0.0);
        for (i, padded) in self.pweights.chunks_exact_mut(taps).enumerate() {
            let (start, count) = (self.start[i] as usize, self.count[i] as usize);
            // count <= taps <= in_size (every count is at most in_size): the window moves
            // left by what passes the end, which `start + count <= in_size` leaves room for.
            let shift = start - start.min(in_size - taps);
            padded[shift..shift + count]
                .copy_from_slice(&self.f32s[i * self.stride..i * self.stride + count]);
            self.pstart[i] = (start - shift) as u32;
        }
    }

    /// `_compute_indices_weights_aa<float>`: every operation at the type C++ gives it (float32
    /// where both operands are float, f64 where a double literal enters).
    fn prepare_f32(&mut self, in_size: u32, out_size: u32, cubic: bool) {
        let half: f32 = if cubic { 2.0 } else { 1.0 };
        let filter = if cubic { cubic_f32 } else { triangle_f32 };
        let scale = in_size as f32 / out_size as f32;
        let support = if scale >= 1.0 { half * scale } else { half };
        let invscale = if scale >= 1.0 {
            (1.0 / f64::from(scale)) as f32
        } else {
            1.0
        };
        let stride = support.ceil() as usize * 2 + 1;
        let out = out_size as usize;
        self.stride = stride;
        reset(&mut self.start, out);
        reset(&mut self.count, out);
        self.f32s.clear();
        self.f32s.resize(out * stride, 0.0);
        let in_max = i64::from(in_size);
        for (i, ws) in self.f32s.chunks_exact_mut(stride).enumerate() {
            let center = (f64::from(scale) * (i as f64 + 0.5)) as f32;
            let xmin = ((f64::from(center - support) + 0.5) as i64).max(0);
            let xmax = ((f64::from(center + support) + 0.5) as i64).min(in_max);
            // Never empty for sizes of at least 1 (center - 0.5 < in_size); stay in bounds
            // against degenerate floats all the same.
            let xmin = xmin.min(in_max - 1);
            let count = (xmax - xmin).clamp(1, stride as i64) as usize;
            let mut total = 0.0f32;
            for (j, w) in ws[..count].iter_mut().enumerate() {
                let d = (j as i64 + xmin) as f32 - center;
                let x = ((f64::from(d) + 0.5) * f64::from(invscale)) as f32;
                *w = filter(x);
                total += *w;
            }
            if total != 0.0 {
                for w in &mut ws[..count] {
                    *w /= total;
                }
            }
            self.start[i] = xmin as u32;
            self.count[i] = count as u32;
        }
    }

    /// Output `i`'s first input and its weights.
    fn window_f32(&self, i: usize) -> (usize, &[f32]) {
        let at = i * self.stride;
        (
            self.start[i] as usize,
            &self.f32s[at..at + self.count[i] as usize],
        )
    }

    /// The float32 weights (tests).
    #[cfg(test)]
    pub(crate) fn f32_weights(&self) -> (&[u32], &[u32], usize, &[f32]) {
        (&self.start, &self.count, self.stride, &self.f32s)
    }
}

/// `v` cleared and refilled with `n` zeros (its capacity kept).
fn reset<T: Copy + Default>(v: &mut Vec<T>, n: usize) {
    v.clear();
    v.resize(n, T::default());
}

/// `_compute_indices_int16_weights_aa`: torch's uint8 kernel's windows and weights. The f64
/// weights by Pillow's formulas but torch's cubic (into `f64s`), then int16 at the precision
/// their largest value allows. Fills `start` and `count` (one per output) and `ints`
/// (`stride` per output, zeros past each count); returns `(stride, precision)`, `precision`
/// (at most 22) the weights' fractional bits.
///
/// Invariant: `start[i] + count[i] <= in_size`, `1 <= count[i] <= stride`, every weight
/// below `2^15` in magnitude. Sizes must be at least 1.
pub(super) fn int16_weights(
    in_size: u32,
    out_size: u32,
    cubic: bool,
    f64s: &mut Vec<f64>,
    start: &mut Vec<u32>,
    count: &mut Vec<u32>,
    ints: &mut Vec<i32>,
) -> (usize, u32) {
    let half: f64 = if cubic { 2.0 } else { 1.0 };
    // The triangle is Pillow's own (the same two f64 operations); the cubic is torch's form.
    let filter: fn(f64) -> f64 = if cubic {
        cubic_f64
    } else {
        |x| Convolution::Triangle.weight(x)
    };
    let scale = f64::from(in_size) / f64::from(out_size);
    let support = if scale >= 1.0 { half * scale } else { half };
    let invscale = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
    let stride = support.ceil() as usize * 2 + 1;
    let out = out_size as usize;
    reset(start, out);
    reset(count, out);
    reset(f64s, out * stride);
    let in_max = i64::from(in_size);
    for (i, ws) in f64s.chunks_exact_mut(stride).enumerate() {
        let center = scale * (i as f64 + 0.5);
        let xmin = ((center - support + 0.5) as i64).max(0);
        let xmax = ((center + support + 0.5) as i64).min(in_max);
        let xmin = xmin.min(in_max - 1);
        let n = (xmax - xmin).clamp(1, stride as i64) as usize;
        let mut total = 0.0f64;
        for (j, w) in ws[..n].iter_mut().enumerate() {
            *w = filter(((j as i64 + xmin) as f64 - center + 0.5) * invscale);
            total += *w;
        }
        if total != 0.0 {
            for w in &mut ws[..n] {
                *w /= total;
            }
        }
        start[i] = xmin as u32;
        count[i] = n as u32;
    }
    let precision = int16_precision(f64s);
    let unit = f64::from(1u32 << precision);
    ints.clear();
    ints.extend(f64s.iter().map(|&v| {
        // `(int)(±0.5 + v * 2^p)`: half away from zero, by truncation.
        if v < 0.0 {
            (-0.5 + v * unit) as i32
        } else {
            (0.5 + v * unit) as i32
        }
    }));
    (stride, precision)
}

/// torch's weights precision: the largest `p < 22` such that `(int)(0.5 + w_max 2^(p+1))`
/// is still below `2^15` stops the search at `p` (`w_max` the largest weight, signed).
fn int16_precision(weights: &[f64]) -> u32 {
    let w_max = weights.iter().copied().fold(weights[0], f64::max);
    let mut p = 0;
    while p < 22 {
        let next = (0.5 + w_max * f64::from(1u32 << (p + 1))) as i32;
        if next >= 1 << 15 {
            break;
        }
        p += 1;
    }
    p
}

/// torch's float32 tensor resize context: the two axes' weights and the intermediate image.
/// One per worker; steady-state calls allocate nothing.
#[derive(Clone, Debug, Default)]
pub(crate) struct TensorResizer {
    horiz: TorchAxis,
    vert: TorchAxis,
    /// The horizontal pass's float32 output (`in_h` rows of `3 out_w`).
    mid_f32: Vec<f32>,
    /// The SIMD horizontal pass's block of input rows as float32 columns.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    cols: Vec<f32>,
    /// One output row before a flip.
    row: Vec<u8>,
    /// The vertical pass's sums of one output row.
    acc_f32: Vec<f32>,
}

impl TensorResizer {
    /// Resizes `src` to `out_w x out_h` in [`TensorArith::Float32`] with the cubic (else the
    /// triangle), mirrored when `flip`, each row handed to `sink`, with the kernels of
    /// `level` at most (all give the same bytes). Sizes must be at least 1 (checked by the
    /// caller).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn resize_into<S: RowSink + ?Sized>(
        &mut self,
        src: RgbView<'_>,
        out_h: u32,
        out_w: u32,
        cubic: bool,
        flip: bool,
        level: SimdLevel,
        sink: &mut S,
    ) {
        let (in_w, in_h) = (src.width(), src.height());
        let need_h = in_w != out_w;
        let need_v = in_h != out_h;
        let row_len = 3 * out_w as usize;
        let width = Width::of(level);
        if self.row.len() < row_len {
            self.row.resize(row_len, 0);
        }
        if need_h {
            self.horiz.prepare(in_w, out_w, cubic);
        }
        if need_v {
            self.vert.prepare(in_h, out_h, cubic);
        }
        let clamp = cubic;
        // The SIMD passes keep only a ring of intermediate rows (row `y` in slot `y % cap`):
        // 16-row blocks, so `cap` is a multiple of 16 at least 15 more than the tallest
        // vertical window (the rows of the next pending output survive the blocks until it
        // is ready; the windows' starts never decrease). The portable one keeps every row:
        // the tests compare the two.
        let vtaps = if need_v { self.vert.taps } else { 1 };
        let tall = (in_h as usize).next_multiple_of(16);
        let cap = match width {
            Width::Portable => in_h as usize,
            _ => tall.min((16 + vtaps).next_multiple_of(16)),
        };
        let mid_len = if need_h { cap * row_len } else { 0 };
        if self.mid_f32.len() < mid_len {
            self.mid_f32.resize(mid_len, 0.0);
        }
        if self.acc_f32.len() < row_len {
            self.acc_f32.resize(row_len, 0.0);
        }
        if need_h {
            // Each output row as soon as the horizontal pass has made the rows it reads:
            // they are still in cache (the whole intermediate image is not).
            let (vert, row, acc) = (&self.vert, &mut self.row[..row_len], &mut self.acc_f32);
            let acc = &mut acc[..row_len];
            let mut next = 0;
            let mut rows_done = |mid: &[f32], done: usize| {
                while next < out_h as usize {
                    // Without the vertical pass, one tap of weight 1: `v * 1 = v`, then the
                    // same rounding.
                    let (start, ws) = if need_v {
                        vert.window_f32(next)
                    } else {
                        (next, &[1.0f32][..])
                    };
                    if start + ws.len() > done {
                        break;
                    }
                    let rows = |k: usize| &mid[(start + k) % cap * row_len..][..row_len];
                    vertical_row(rows, ws, clamp, width, acc, row);
                    emit(row, next, flip, sink);
                    next += 1;
                }
            };
            let mid = &mut self.mid_f32[..mid_len];
            horizontal_pass(
                src,
                &self.horiz,
                width,
                &mut self.cols,
                mid,
                row_len,
                cap,
                &mut rows_done,
            );
            return;
        }
        for yy in 0..out_h as usize {
            let row = &mut self.row[..row_len];
            if need_v {
                let (start, ws) = self.vert.window_f32(yy);
                let acc = &mut self.acc_f32[..row_len];
                vertical_row(|k| src.row((start + k) as u32), ws, clamp, width, acc, row);
            } else {
                row.copy_from_slice(src.row(yy as u32));
            }
            emit(row, yy, flip, sink);
        }
    }
}

/// Which kernels the float32 resize runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Width {
    /// The scalar loops (with the FMA instruction where the CPU has it).
    Portable,
    /// AVX2 and FMA, 8 lanes.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx2,
    /// AVX-512 F and FMA, 16 lanes (taken where the CPU has AVX-512 BW and VL too).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx512,
}

impl Width {
    /// The widest kernels `level` allows and the CPU has.
    fn of(level: SimdLevel) -> Width {
        if crate::cpu::avx2_fma() {
            if level >= SimdLevel::Avx512 && crate::cpu::avx512_bw_vl() {
                return Width::Avx512;
            }
            if level >= SimdLevel::Avx2 {
                return Width::Avx2;
            }
        }
        Width::Portable
    }
}

/// The horizontal pass of every row of `src` into `mid` (`row_len` floats a row; row `y` in
/// slot `y % cap`, `cap` a multiple of 16 or at least the height), calling `done(mid, n)`
/// whenever its first `n` rows are complete (the last call with every row).
#[allow(clippy::too_many_arguments)]
fn horizontal_pass(
    src: RgbView<'_>,
    axis: &TorchAxis,
    width: Width,
    cols: &mut Vec<f32>,
    mid: &mut [f32],
    row_len: usize,
    cap: usize,
    done: &mut dyn FnMut(&[f32], usize),
) {
    #[cfg(target_arch = "x86_64")]
    {
        let pad = x86::Padded {
            taps: axis.taps,
            start: &axis.pstart,
            weights: &axis.pweights,
        };
        match width {
            // SAFETY: `Width::of` saw AVX-512 F and FMA.
            Width::Avx512 => unsafe {
                return x86::horizontal16(src, &pad, cols, (mid, row_len, cap), done);
            },
            // SAFETY: `Width::of` saw AVX2 and FMA.
            Width::Avx2 => unsafe {
                return x86::horizontal8(src, &pad, cols, (mid, row_len, cap), done);
            },
            Width::Portable => {}
        }
    }
    let _ = (width, cols);
    // `mul_add` is one instruction only where compiled with FMA.
    for y in 0..src.height() as usize {
        let out = &mut mid[y % cap * row_len..][..row_len];
        crate::augment::fma::with_fma(|| horizontal_f32(src.row(y as u32), out, axis));
        done(mid, y + 1);
    }
}

/// One output row of the vertical pass: `dst[j] = to_u8(rows(0)[j] w0 + ...)`, `acc` scratch
/// of `dst.len()` floats.
fn vertical_row<'a, T: Sample + 'a>(
    rows: impl Fn(usize) -> &'a [T],
    ws: &[f32],
    clamp: bool,
    width: Width,
    acc: &mut [f32],
    dst: &mut [u8],
) {
    #[cfg(target_arch = "x86_64")]
    if ws.len() <= x86::MAX_TAPS {
        match width {
            // SAFETY: `Width::of` saw AVX-512 F and FMA.
            Width::Avx512 => return unsafe { x86::vertical16(rows, ws, clamp, dst) },
            // SAFETY: `Width::of` saw AVX2 and FMA.
            Width::Avx2 => return unsafe { x86::vertical8(rows, ws, clamp, dst) },
            Width::Portable => {}
        }
    }
    let _ = width;
    crate::augment::fma::with_fma(|| vertical_f32(rows, ws, acc));
    for (o, &v) in dst.iter_mut().zip(acc.iter()) {
        *o = to_u8(v, clamp);
    }
}

/// Hands `row` (packed RGB) to the sink as output row `y`, mirrored when `flip`.
fn emit<S: RowSink + ?Sized>(row: &[u8], y: usize, flip: bool, sink: &mut S) {
    let out = sink.row_mut(y);
    if flip {
        for (o, i) in out.chunks_exact_mut(3).zip(row.chunks_exact(3).rev()) {
            o.copy_from_slice(i);
        }
    } else {
        out.copy_from_slice(row);
    }
    sink.row_done(y);
}

/// torch's float32-to-uint8 end: the cubic clamped to `[0, 255]`, then `round` (half to
/// even) and the cast (the triangle's sums stay within `[0, 255]` up to rounding, which the
/// final clamp absorbs as the cast of a value rounding to 255 would).
#[inline(always)]
fn to_u8(v: f32, clamp: bool) -> u8 {
    let v = if clamp { v.clamp(0.0, 255.0) } else { v };
    v.round_ties_even().clamp(0.0, 255.0) as u8
}

#[inline(always)]
fn horizontal_f32(src: &[u8], dst: &mut [f32], axis: &TorchAxis) {
    for (xx, out) in dst.chunks_exact_mut(3).enumerate() {
        let (start, ws) = axis.window_f32(xx);
        let px = &src[3 * start..3 * (start + ws.len())];
        for (c, o) in out.iter_mut().enumerate() {
            let mut acc = f32::from(px[c]) * ws[0];
            for (k, &w) in ws.iter().enumerate().skip(1) {
                acc = f32::from(px[3 * k + c]).mul_add(w, acc);
            }
            *o = acc;
        }
    }
}

/// Values that a float32 sum reads: float32 (the horizontal pass's) or uint8 (the input's).
#[cfg(target_arch = "x86_64")]
trait Sample: Copy + x86::Lanes {
    fn value(self) -> f32;
}

/// Values that a float32 sum reads: float32 (the horizontal pass's) or uint8 (the input's).
#[cfg(not(target_arch = "x86_64"))]
trait Sample: Copy {
    fn value(self) -> f32;
}

impl Sample for f32 {
    #[inline(always)]
    fn value(self) -> f32 {
        self
    }
}

impl Sample for u8 {
    #[inline(always)]
    fn value(self) -> f32 {
        f32::from(self)
    }
}

/// `acc = r0 w0`, then `acc = rk wk + acc` fused, row by row: per value the order torch sums in.
#[inline(always)]
fn vertical_f32<'a, T: Sample + 'a>(rows: impl Fn(usize) -> &'a [T], ws: &[f32], acc: &mut [f32]) {
    for (a, &v) in acc.iter_mut().zip(rows(0)) {
        *a = v.value() * ws[0];
    }
    for (k, &w) in ws.iter().enumerate().skip(1) {
        for (a, &v) in acc.iter_mut().zip(rows(k)) {
            *a = v.value().mul_add(w, *a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{generated_image, AxisCoeffs, Filter, Resizer, SimdLevel};
    use super::*;
    use crate::augment::policy::Api;
    use crate::image::RgbImage;

    /// The weights of [`int16_weights`] and their precision.
    fn int16(
        in_size: u32,
        out_size: u32,
        cubic: bool,
    ) -> (Vec<u32>, Vec<u32>, usize, Vec<i32>, u32) {
        let (mut f64s, mut start, mut count, mut ints) = Default::default();
        let (stride, p) = int16_weights(
            in_size, out_size, cubic, &mut f64s, &mut start, &mut count, &mut ints,
        );
        (start, count, stride, ints, p)
    }

    #[test]
    fn int16_weights_are_torchs_by_hand() {
        // 5 -> 2 bilinear: scale 2.5, output 0's window [0, 4) at distances -0.3, 0.1, 0.5,
        // 0.9 (in units of the widened support): triangle 0.7, 0.9, 0.5, 0.1 over 2.2. The
        // largest, 9/22, allows 16 bits (2^17 * 9/22 = 53620 passes 2^15).
        let (start, count, stride, ints, precision) = int16(5, 2, false);
        assert_eq!(precision, 16);
        assert_eq!(
            (&start[..], &count[..], stride),
            (&[0, 1][..], &[4, 4][..], 7)
        );
        assert_eq!(&ints[..4], &[20852, 26810, 14895, 2979]);
        assert_eq!(&ints[stride..stride + 4], &[2979, 14895, 26810, 20852]);
        // An upscale's cubic: the largest weight above 1 at the edge (the lobe cut off)
        // lowers the precision to 14 bits.
        let (_, count, stride, ints, precision) = int16(3, 8, true);
        let max = ints.iter().copied().max().unwrap_or(0);
        assert!(
            max >= 1 << precision && max < 1 << 15,
            "{max} at {precision} bits"
        );
        assert_eq!(precision, 14);
        for (i, &n) in count.iter().enumerate() {
            let sum: i32 = ints[i * stride..i * stride + n as usize].iter().sum();
            assert!((sum - (1 << precision)).abs() <= 2, "output {i}: {sum}");
        }
    }

    #[test]
    fn float32_weights_are_torchs_by_hand() {
        // 4 -> 2 bilinear in float32: scale 2, support 2, invscale 0.5; output 0 centred at
        // 1: window [0, 3) at (j - 0.5) / 2 = -0.25, 0.25, 0.75 -> 0.75, 0.75, 0.25 over 1.75.
        let mut axis = TorchAxis::default();
        axis.prepare(4, 2, false);
        let (start, count, stride, w) = axis.f32_weights();
        assert_eq!((start, count, stride), (&[0, 1][..], &[3, 3][..], 5));
        assert_eq!(&w[..3], &[0.75f32 / 1.75, 0.75 / 1.75, 0.25 / 1.75]);
        // Keys' cubic (a = -0.5) at 0.5 and 1.5: 0.5625 and -0.0625 (exact in binary).
        assert_eq!(cubic_f32(0.5), 0.5625);
        assert_eq!(cubic_f32(1.5), -0.0625);
        assert_eq!(cubic_f64(-1.5), -0.0625);
    }

    struct Rows(Vec<u8>, usize);

    impl RowSink for Rows {
        fn row_mut(&mut self, y: usize) -> &mut [u8] {
            &mut self.0[y * self.1..(y + 1) * self.1]
        }
        fn row_done(&mut self, _y: usize) {}
    }

    /// torch's uint8 kernel as torch's generic C++ writes it, value by value: the reference
    /// the SIMD kernels (through [`AxisCoeffs::prepare_torch`]) must equal. Horizontal pass
    /// first (skipped where the width stays), into uint8, then the vertical pass.
    fn reference_uint8(src: &RgbImage, out_w: u32, out_h: u32, cubic: bool) -> Vec<u8> {
        let (in_w, in_h) = (src.width(), src.height());
        fn pass(values: impl Fn(usize) -> i32, ws: &[i32], p: u32) -> u8 {
            let mut acc = 1i32 << (p - 1);
            for (k, &w) in ws.iter().enumerate() {
                acc += values(k) * w;
            }
            (acc >> p).clamp(0, 255) as u8
        }
        let px = |img: &[u8], w: u32, x: usize, y: usize, c: usize| {
            i32::from(img[(y * w as usize + x) * 3 + c])
        };
        let mut mid = src.as_raw().to_vec();
        if in_w != out_w {
            let (start, count, stride, ints, p) = int16(in_w, out_w, cubic);
            let mut next = vec![0u8; (3 * out_w * in_h) as usize];
            for y in 0..in_h as usize {
                for xx in 0..out_w as usize {
                    let (s, n) = (start[xx] as usize, count[xx] as usize);
                    let ws = &ints[xx * stride..xx * stride + n];
                    for c in 0..3 {
                        next[(y * out_w as usize + xx) * 3 + c] =
                            pass(|k| px(&mid, in_w, s + k, y, c), ws, p);
                    }
                }
            }
            mid = next;
        }
        if in_h == out_h {
            return mid;
        }
        let (start, count, stride, ints, p) = int16(in_h, out_h, cubic);
        let mut out = vec![0u8; (3 * out_w * out_h) as usize];
        for yy in 0..out_h as usize {
            let (s, n) = (start[yy] as usize, count[yy] as usize);
            let ws = &ints[yy * stride..yy * stride + n];
            for x in 0..out_w as usize {
                for c in 0..3 {
                    out[(yy * out_w as usize + x) * 3 + c] =
                        pass(|k| px(&mid, out_w, x, s + k, c), ws, p);
                }
            }
        }
        out
    }

    /// Gradients, noise, saturated bands and single bright pixels (the cubic's overshoots
    /// both ways), deterministic.
    fn test_image(w: u32, h: u32, seed: u64) -> RgbImage {
        generated_image(w, h, seed, |x, y, c, draw| {
            let noise = (draw >> 58) as u32;
            match (x / 5 + y / 3 + c) % 5 {
                0 => 255,
                1 => 0,
                2 if draw >> 63 == 1 => 255,
                _ => ((x * 7 + y * 3 + c * 50 + noise) % 256) as u8,
            }
        })
    }

    #[test]
    fn uint8_kernel_runs_on_the_simd_kernels_exactly() {
        // Every kernel set this CPU has (and the portable one) with torch's weights equals
        // torch's uint8 kernel value by value: down and up scales (cubic upscales' edge
        // weights above 1, out of the pair format), 1-pixel sides, one pass only, flips,
        // both pass orders Pillow would pick (torch's is horizontal first always).
        let cut = {
            let mut c = AxisCoeffs::default();
            c.prepare_torch(3, 8, false, true);
            c
        };
        assert!(cut.simd_friendly() && !cut.pairs_fit() && cut.may_clip());
        let mut sizes = vec![
            (1, 1, 1, 1),
            (1, 1, 7, 3),
            (1, 9, 1, 4),
            (9, 1, 4, 1),
            (5, 2, 3, 9),
            (3, 3, 8, 8),
            (3, 40, 8, 11),
            (6, 6, 5, 5),
            (7, 5, 7, 3),
            (7, 5, 4, 5),
            (40, 120, 30, 20),
            (120, 40, 20, 30),
            (100, 90, 224, 224),
            (250, 187, 112, 112),
            (500, 375, 224, 224),
            (500, 375, 232, 309),
            (900, 60, 100, 30),
            (60, 900, 30, 100),
            (21, 50, 30, 30),
            (22, 50, 13, 30),
        ];
        let mut state = 777u64;
        let mut next = |n: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % n + 1
        };
        for _ in 0..60 {
            let (iw, ih) = (next(160) as u32, next(160) as u32);
            sizes.push((iw, ih, next(120) as u32, next(120) as u32));
        }
        let mut levels = SimdLevel::kernel_sets();
        if !levels.contains(&SimdLevel::Portable) {
            levels.insert(0, SimdLevel::Portable);
        }
        let mut resizers: Vec<Resizer> = levels
            .iter()
            .map(|&level| {
                let mut r = Resizer::new();
                r.set_simd_limit(level);
                r.set_tensor_api(Some(Api::V2));
                r
            })
            .collect();
        let mut out = RgbImage::new();
        for (filter, cubic) in [(Filter::Bilinear, false), (Filter::Bicubic, true)] {
            if TensorArith::v2(cubic) != TensorArith::Uint8 {
                // v2 runs float32 for BILINEAR on this CPU (as torch does).
                continue;
            }
            for (i, &(iw, ih, ow, oh)) in sizes.iter().enumerate() {
                let img = test_image(iw, ih, i as u64);
                let want = reference_uint8(&img, ow, oh, cubic);
                let mirrored: Vec<u8> = want
                    .chunks_exact(3 * ow as usize)
                    .flat_map(|row| row.chunks_exact(3).rev().flatten().copied())
                    .collect();
                for (r, level) in resizers.iter_mut().zip(&levels) {
                    // The flip first: its weights computed mirrored, then reversed back.
                    r.set_filter(filter);
                    let what = format!("{iw}x{ih} -> {ow}x{oh} {filter:?} {level:?}");
                    let mut flipped = Rows(vec![0; want.len()], 3 * ow as usize);
                    r.resize_into(img.view(), oh, ow, true, &mut flipped)
                        .expect("resizes");
                    assert!(flipped.0 == mirrored, "{what} flipped");
                    r.resize(img.view(), oh, ow, &mut out).expect("resizes");
                    assert!(out.as_raw() == &want[..], "{what}");
                }
            }
        }
    }

    #[test]
    fn float32_simd_kernels_equal_the_portable_ones() {
        // Vectors across rows (horizontal) and across columns (vertical) keep every sum's
        // operations: each kernel set this CPU has gives the portable kernels' bytes, for
        // widths around the lane counts, one pass only, 1-pixel sides, flips, and windows
        // wider than the SIMD vertical kernel takes (100x downscales).
        let mut sizes = vec![
            (1, 1, 1, 1),
            (1, 1, 7, 3),
            (1, 9, 1, 4),
            (9, 1, 4, 1),
            (5, 2, 3, 9),
            (3, 3, 8, 8),
            (7, 5, 7, 3),
            (7, 5, 4, 5),
            (40, 120, 30, 20),
            (120, 40, 20, 30),
            (100, 90, 224, 224),
            (500, 375, 224, 224),
            (500, 375, 232, 309),
            (16, 33, 16, 17),
            (33, 16, 17, 16),
            (4000, 30, 40, 7),
            (30, 4000, 7, 40),
        ];
        let mut state = 99u64;
        let mut next = |n: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % n + 1
        };
        for _ in 0..60 {
            let (iw, ih) = (next(200) as u32, next(200) as u32);
            sizes.push((iw, ih, next(150) as u32, next(150) as u32));
        }
        let make = |level: SimdLevel| {
            let mut r = Resizer::new();
            r.set_simd_limit(level);
            r.set_tensor_api(Some(Api::V1));
            r
        };
        let mut portable = make(SimdLevel::Portable);
        let levels: Vec<SimdLevel> = SimdLevel::kernel_sets()
            .into_iter()
            .filter(|&l| l != SimdLevel::Portable)
            .collect();
        let mut fast: Vec<Resizer> = levels.iter().map(|&l| make(l)).collect();
        let (mut a, mut b) = (RgbImage::new(), RgbImage::new());
        for filter in [Filter::Bilinear, Filter::Bicubic] {
            portable.set_filter(filter);
            for (i, &(iw, ih, ow, oh)) in sizes.iter().enumerate() {
                let img = test_image(iw, ih, 1000 + i as u64);
                portable
                    .resize(img.view(), oh, ow, &mut b)
                    .expect("resizes");
                let mut want_flipped = Rows(vec![0; b.as_raw().len()], 3 * ow as usize);
                portable
                    .resize_into(img.view(), oh, ow, true, &mut want_flipped)
                    .expect("resizes");
                for (r, level) in fast.iter_mut().zip(&levels) {
                    r.set_filter(filter);
                    let what = format!("{iw}x{ih} -> {ow}x{oh} {filter:?} {level:?}");
                    r.resize(img.view(), oh, ow, &mut a).expect("resizes");
                    assert!(a == b, "{what}");
                    let mut flipped = Rows(vec![0; b.as_raw().len()], 3 * ow as usize);
                    r.resize_into(img.view(), oh, ow, true, &mut flipped)
                        .expect("resizes");
                    assert!(flipped.0 == want_flipped.0, "{what} flipped");
                }
            }
        }
    }

    #[test]
    fn torch_weights_are_cached_apart_from_pillows() {
        // The same sizes and filter, Pillow's weights then torch's and back: each resize
        // equals a fresh context's (the kernels' plans are keyed by the weights' origin).
        let img = test_image(97, 61, 3);
        let (mut a, mut b) = (RgbImage::new(), RgbImage::new());
        for level in SimdLevel::kernel_sets() {
            let mut reused = Resizer::new();
            reused.set_simd_limit(level);
            reused.set_filter(Filter::Bicubic);
            for api in [None, Some(Api::V2), None, Some(Api::V2)] {
                reused.set_tensor_api(api);
                reused.resize(img.view(), 40, 50, &mut a).expect("resizes");
                let mut fresh = Resizer::new();
                fresh.set_simd_limit(level);
                fresh.set_filter(Filter::Bicubic);
                fresh.set_tensor_api(api);
                fresh.resize(img.view(), 40, 50, &mut b).expect("resizes");
                assert_eq!(a, b, "{level:?} {api:?}");
            }
            reused.set_tensor_api(None);
            reused.resize(img.view(), 40, 50, &mut a).expect("resizes");
            reused.set_tensor_api(Some(Api::V2));
            reused.resize(img.view(), 40, 50, &mut b).expect("resizes");
            assert_ne!(a, b, "torch's weights differ from Pillow's here");
        }
    }

    #[test]
    fn flat_images_stay_flat_and_flips_mirror() {
        let (w, h) = (37u32, 11u32);
        let flat = vec![201u8; (3 * w * h) as usize];
        let ramp: Vec<u8> = (0..3 * w * h).map(|i| (i * 7 % 251) as u8).collect();
        let mut resizer = Resizer::default();
        for api in [Api::V1, Api::V2] {
            resizer.set_tensor_api(Some(api));
            for filter in [Filter::Bilinear, Filter::Bicubic] {
                resizer.set_filter(filter);
                for (ow, oh) in [(5u32, 3u32), (80, 29), (1, 1), (37, 4)] {
                    let view = RgbView::new(&flat, w, h, 3 * w as usize).expect("view");
                    let mut out = Rows(vec![0; (3 * ow * oh) as usize], 3 * ow as usize);
                    resizer
                        .resize_into(view, oh, ow, false, &mut out)
                        .expect("resizes");
                    assert!(
                        out.0.iter().all(|&v| v == 201),
                        "{api:?} {filter:?} {ow}x{oh}"
                    );
                    let view = RgbView::new(&ramp, w, h, 3 * w as usize).expect("view");
                    let mut plain = Rows(vec![0; (3 * ow * oh) as usize], 3 * ow as usize);
                    resizer
                        .resize_into(view, oh, ow, false, &mut plain)
                        .expect("resizes");
                    let mut flipped = Rows(vec![0; (3 * ow * oh) as usize], 3 * ow as usize);
                    resizer
                        .resize_into(view, oh, ow, true, &mut flipped)
                        .expect("resizes");
                    for (a, b) in plain
                        .0
                        .chunks(3 * ow as usize)
                        .zip(flipped.0.chunks(3 * ow as usize))
                    {
                        let mirrored: Vec<u8> = b.chunks(3).rev().flatten().copied().collect();
                        assert_eq!(a, &mirrored[..]);
                    }
                }
            }
        }
    }
}
