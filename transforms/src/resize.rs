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
//! windows with zero weights, splitting weights into 16-bit halves for `pmaddwd`); every f64
//! operation in the coefficients and every rounding to u8 between the passes must stay exactly
//! Pillow's. The AVX2 kernels are checked against the portable ones and both against Pillow.
//!
//! Must not allocate per call in the steady state: [`Resizer`] owns the coefficient tables and
//! the intermediate buffers and only grows them. Must not touch anything but the pixels it is
//! given: crops are views, and what happens to an output row (copy, flip, to-tensor) is the
//! caller's [`RowSink`].

use crate::error::{Error, Result};
use crate::image::{RgbImage, RgbView};

/// Fractional bits of the fixed-point weights: Pillow's `PRECISION_BITS` (32 - 8 - 2).
const PRECISION_BITS: u32 = 32 - 8 - 2;
/// Added to every sum so that the final shift rounds to nearest.
const HALF: i32 = 1 << (PRECISION_BITS - 1);

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
        if self.key() == (in_size, out_size, mirrored) && !self.start.is_empty() {
            return;
        }
        self.in_size = in_size;
        self.out_size = out_size;
        self.mirrored = mirrored;
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
        self.count.clear();
        self.weights.clear();
        self.weights.resize(out * stride, 0);
        let in_max = i64::from(in_size);
        let mut stack = [0.0f64; 16];
        let mut taps = 1;
        let mut simd_friendly = true;
        for (xx, k_fixed) in self.weights.chunks_exact_mut(stride).enumerate() {
            let center = (xx as f64 + 0.5) * scale;
            // `(int)` truncates toward zero; negative starts clamp to 0 either way.
            let xmin = ((center - support + 0.5) as i64).max(0);
            let xmax = ((center + support + 0.5) as i64).min(in_max);
            // xmin <= center - 0.5 < in_size - 0.5 and xmax >= xmin + 1 (see Pillow): the
            // window is never empty, but stay defensive against degenerate floats.
            let count = (xmax - xmin).clamp(1, stride as i64) as usize;
            let xmin = xmin.min(in_max - 1);
            let ws = if count <= stack.len() {
                &mut stack[..count]
            } else {
                self.scratch.resize(count, 0.0);
                &mut self.scratch[..count]
            };
            let mut ww = 0.0;
            for (x, slot) in ws.iter_mut().enumerate() {
                let w = bilinear_filter(((x as i64 + xmin) as f64 - center + 0.5) * ss);
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
                simd_friendly &= (0..=(1 << PRECISION_BITS) + 127).contains(k);
            }
            self.start.push(xmin as u32);
            self.count.push(count as u32);
            taps = taps.max(count);
        }
        self.taps = taps;
        self.simd_friendly = simd_friendly;
        if mirrored {
            self.start.reverse();
            self.count.reverse();
            let rows = self.weights.len() / stride;
            for i in 0..rows / 2 {
                let (head, tail) = self.weights.split_at_mut((rows - 1 - i) * stride);
                head[i * stride..(i + 1) * stride].swap_with_slice(&mut tail[..stride]);
            }
        }
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
        self.pweights.clear();
        self.pweights.resize(self.start.len() * taps, 0);
        let in_size = self.in_size as usize;
        let rows = self.weights.chunks_exact(self.stride);
        for (((padded, w), &start), &count) in self
            .pweights
            .chunks_exact_mut(taps)
            .zip(rows)
            .zip(&self.start)
            .zip(&self.count)
        {
            let (start, w) = (start as usize, &w[..count as usize]);
            // count <= in_size, so a window of `taps` fits; shift it left at the end.
            let pstart = start.min(in_size - taps);
            padded[start - pstart..start - pstart + w.len()].copy_from_slice(w);
            self.pstart.push(pstart as u32);
        }
        self.padded_ready = true;
    }

    /// Builds `pair` (the SIMD vertical kernel reads it).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn ensure_pairs(&mut self) {
        if self.pair_ready {
            return;
        }
        self.pair.clear();
        self.pair.extend(self.weights.iter().map(|&w| {
            let h = (w >> 7).clamp(0, 32767);
            let l = w - 128 * h;
            (l & 0xffff) | (h << 16)
        }));
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
    /// Use only the portable kernels.
    portable_only: bool,
    #[cfg(target_arch = "x86_64")]
    simd: x86::Scratch,
}

impl Resizer {
    /// An empty context; the first calls size its buffers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses only the portable kernels, never the SIMD ones (for tests that compare the two,
    /// and for benchmarks). The results are identical either way.
    pub fn set_portable_only(&mut self, portable_only: bool) {
        self.portable_only = portable_only;
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
        let avx2 = !self.portable_only && kernels::avx2();
        if !need_h {
            // Pillow copies (or runs only the vertical pass); a flip reverses the pixels.
            if need_v {
                self.vert.prepare(in_h, out_h);
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
        self.horiz.prepare_mirrored(in_w, out_w, flip);
        self.horiz.ensure_padded();
        if need_v {
            self.vert.prepare(in_h, out_h);
        }
        #[cfg(target_arch = "x86_64")]
        {
            // The pair-format vertical kernel runs only in the horizontal-first order.
            let h_first = need_v && !vertical_first(in_w, in_h, out_w, out_h);
            if avx2
                && self
                    .simd
                    .prepare(&self.horiz, h_first.then_some(&self.vert))
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

/// Kernel dispatch: the portable kernels, compiled for AVX2 too when the CPU has it.
mod kernels {
    use super::{portable, AxisCoeffs};

    /// Whether this CPU runs AVX2 (cached by std after the first call).
    #[inline]
    pub(super) fn avx2() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx2")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

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

/// AVX2 kernels.
///
/// The horizontal pass computes 8 output values (not pixels: RGB values in a row) per vector:
/// for each pair of taps a `pshufb` gathers, from a 16-byte source window per 128-bit lane,
/// the two input bytes of each value as an i16 pair, and two `pmaddwd`s multiply them by the
/// high and low 11-bit halves of the weights (exact: `w = 2048 hi + lo`, both < 2^15). The
/// gather masks, windows and weights depend only on the output column, so they are built once
/// per coefficient set ([`HPlan`]) and reused for every row.
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
    use std::arch::x86_64::*;

    use super::{portable, vertical_first, AxisCoeffs, Resizer, RowSink, HALF, PRECISION_BITS};
    use crate::image::RgbView;

    /// Rows the horizontal kernel processes per block (keeps source and output in L1/L2).
    const BLOCK_ROWS: usize = 16;
    /// Tap pairs the horizontal kernel handles: up to 16 taps, downscales up to about 7.5x.
    const MAX_PAIRS: usize = 8;
    /// Taps the pair-format vertical kernel keeps in registers (downscales up to about 7x).
    const MAX_V_TAPS: usize = 16;

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

    /// The horizontal pass as gather masks, windows and weights per 8-value chunk.
    #[derive(Clone, Debug, Default)]
    pub(super) struct HPlan {
        /// The coefficients' key it was built for, and whether the kernel can run it.
        key: Option<((u32, u32, bool), bool)>,
        pairs: usize,
        /// 32-byte windows (two `pshufb`s per pair) instead of 16-byte ones, for downscales
        /// beyond about 3x where 4 values' taps spread over more than 16 bytes.
        wide: bool,
        chunks: usize,
        /// Values per output row, `3 * out_w`.
        values: usize,
        /// Source row length the windows were checked against, `3 * in_w`.
        row_bytes: usize,
        /// Per chunk and pair: the window offsets of the low and high lane.
        win: Vec<[u32; 2]>,
        /// Per chunk and pair: `pshufb` masks (low lane, high lane) for the window's first
        /// 16 bytes.
        masks: Vec<[u8; 32]>,
        /// Likewise for the window's second 16 bytes (wide plans only).
        masks_hi: Vec<[u8; 32]>,
        /// Per chunk and pair: weight high halves as i16 pairs, one i32 per value.
        whi: Vec<[i32; 8]>,
        /// Per chunk and pair: weight low halves.
        wlo: Vec<[i32; 8]>,
    }

    impl HPlan {
        /// Builds the plan for `c` unless it is the cached one; returns whether the kernel
        /// can run it (each gather window must fit 16, or else 32, bytes of the source row).
        fn prepare(&mut self, c: &AxisCoeffs) -> bool {
            if let Some((key, ok)) = self.key {
                if key == c.key() {
                    return ok;
                }
            }
            let ok = self.build(c, false) || self.build(c, true);
            self.key = Some((c.key(), ok));
            ok
        }

        fn build(&mut self, c: &AxisCoeffs, wide: bool) -> bool {
            let taps = c.taps;
            let pairs = taps.div_ceil(2);
            let row_bytes = 3 * c.in_size as usize;
            let window = if wide { 32 } else { 16 };
            let max_pairs = if wide { MAX_PAIRS } else { MAX_PAIRS / 2 };
            // (The wide kernel is instantiated for 2 to 8 pairs; 1 pair always fits narrow.)
            if pairs > max_pairs
                || (wide && pairs < 2)
                || row_bytes < window
                || !c.simd_friendly()
                || !c.padded_ready
            {
                return false;
            }
            let values = 3 * c.out_size as usize;
            let chunks = values.div_ceil(8);
            let entries = chunks * pairs;
            self.pairs = pairs;
            self.wide = wide;
            self.chunks = chunks;
            self.values = values;
            self.row_bytes = row_bytes;
            self.win.clear();
            self.win.resize(entries, [0; 2]);
            self.masks.clear();
            self.masks.resize(entries, [0x80; 32]);
            self.masks_hi.clear();
            if wide {
                self.masks_hi.resize(entries, [0x80; 32]);
            }
            self.whi.clear();
            self.whi.resize(entries, [0; 8]);
            self.wlo.clear();
            self.wlo.resize(entries, [0; 8]);
            // Value j of the row is channel j % 3 of output pixel j / 3; its tap k reads source
            // byte 3 * (pstart + k) + j % 3. Lane `l` of chunk `m` holds values 8m + 4l ..+4.
            let (pstart, pweights) = (&c.pstart[..], &c.pweights[..]);
            for lane_start in (0..values).step_by(4) {
                let n = (values - lane_start).min(4);
                // Per value: its byte for tap 0 and where its pixel's weights start.
                let mut base = [0usize; 4];
                let mut wrow = [0usize; 4];
                for (q, (b, wr)) in base.iter_mut().zip(&mut wrow).take(n).enumerate() {
                    let j = lane_start + q;
                    let px = j / 3;
                    *b = 3 * pstart[px] as usize + (j - 3 * px);
                    *wr = px * taps;
                }
                let lo = base[..n].iter().copied().min().unwrap_or(0);
                let hi = base[..n].iter().copied().max().unwrap_or(0);
                let (m, lane) = (lane_start / 8, (lane_start / 4) % 2);
                for p in 0..pairs {
                    let (ka, kb) = (2 * p, 2 * p + 1);
                    // The pair reads bytes [lo + 3ka, hi + 3kb] (hi + 3ka without tap kb).
                    let last = hi + 3 * if kb < taps { kb } else { ka };
                    let wo = (lo + 3 * ka).min(row_bytes - window);
                    if last >= wo + window {
                        return false;
                    }
                    let e = m * pairs + p;
                    self.win[e][lane] = wo as u32;
                    let mut mask = [0x80u8; 32];
                    let whi = &mut self.whi[e][4 * lane..4 * lane + 4];
                    let wlo = &mut self.wlo[e][4 * lane..4 * lane + 4];
                    for q in 0..n {
                        let w = &pweights[wrow[q]..wrow[q] + taps];
                        let a = base[q] + 3 * ka - wo;
                        let (b, wa, wb) = if kb < taps {
                            (a + 3, w[ka], w[kb])
                        } else {
                            (a, w[ka], 0)
                        };
                        mask[4 * q] = a as u8;
                        mask[4 * q + 2] = b as u8;
                        whi[q] = ((wa >> 11) & 0xffff) | ((wb >> 11) << 16);
                        wlo[q] = (wa & 0x7ff) | ((wb & 0x7ff) << 16);
                    }
                    // Split window positions into the two 16-byte halves' masks; 0x80
                    // makes `pshufb` write 0, so OR-ing the two shuffles merges them.
                    for (i, &at) in mask.iter().enumerate().take(16) {
                        let (first, second) = match at {
                            0x80 => (0x80, 0x80),
                            0..=15 => (at, 0x80),
                            _ => (0x80, at - 16),
                        };
                        self.masks[e][16 * lane + i] = first;
                        if wide {
                            self.masks_hi[e][16 * lane + i] = second;
                        }
                    }
                }
            }
            true
        }
    }

    /// The SIMD path's plan and buffers.
    #[derive(Clone, Debug, Default)]
    pub(super) struct Scratch {
        plan: HPlan,
        /// Horizontal-pass output in pair format, rows `chunks * 8` values apart.
        pairs: Vec<i32>,
        /// u8 rows out of the horizontal kernel, `chunks * 8` bytes apart.
        block: Vec<u8>,
        /// u8 rows into the horizontal kernel in the vertical-first order.
        rows: Vec<u8>,
    }

    impl Scratch {
        /// Prepares the horizontal plan; returns whether the SIMD path can run this resize.
        /// `pair_vert` is the vertical pass when it runs second, over the pair format.
        pub(super) fn prepare(
            &mut self,
            horiz: &AxisCoeffs,
            pair_vert: Option<&AxisCoeffs>,
        ) -> bool {
            if !self.plan.prepare(horiz) {
                return false;
            }
            match pair_vert {
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
                horizontal_u8(plan, &rows[..n], &mut simd.block, stride);
                for (i, row) in simd.block.chunks_exact(stride).take(n).enumerate() {
                    sink.row_mut(y0 + i).copy_from_slice(&row[..values]);
                    sink.row_done(y0 + i);
                }
            }
            return;
        }
        // Horizontal first, into pair format, then the vertical pass straight into the sink.
        vert.ensure_pairs();
        let (first, end) = vert.span();
        let tmp_rows = end - first;
        if simd.pairs.len() < tmp_rows * stride {
            simd.pairs.resize(tmp_rows * stride, 0);
        }
        for (b, out) in simd.pairs[..tmp_rows * stride]
            .chunks_mut(BLOCK_ROWS * stride)
            .enumerate()
        {
            let y0 = first + b * BLOCK_ROWS;
            let n = out.len() / stride;
            let mut rows: [&[u8]; BLOCK_ROWS] = [&[]; BLOCK_ROWS];
            for (i, slot) in rows.iter_mut().take(n).enumerate() {
                *slot = src.row((y0 + i) as u32);
            }
            horizontal_pairs(plan, &rows[..n], out, stride);
        }
        let tmp = &simd.pairs[..tmp_rows * stride];
        for yy in 0..out_h as usize {
            let (start, w) = vert.pair_taps_of(yy);
            let out = sink.row_mut(yy);
            vertical_pairs(tmp, stride, start - first, w, &mut out[..values]);
            sink.row_done(yy);
        }
    }

    /// Horizontal pass of `rows` into u8 rows of `out`, `stride` bytes apart.
    fn horizontal_u8(plan: &HPlan, rows: &[&[u8]], out: &mut [u8], stride: usize) {
        let mut store = U8Store { out, stride };
        run_horizontal(plan, rows, &mut store);
    }

    /// Horizontal pass of `rows` into pair-format rows of `out`, `stride` values apart.
    fn horizontal_pairs(plan: &HPlan, rows: &[&[u8]], out: &mut [i32], stride: usize) {
        let mut store = PairStore { out, stride };
        run_horizontal(plan, rows, &mut store);
    }

    fn run_horizontal<S: Store>(plan: &HPlan, rows: &[&[u8]], store: &mut S) {
        // Every window lies in `[0, row_bytes)`: the kernel's loads need rows that long, and
        // the stores need `rows.len()` rows of `chunks * 8` values.
        assert!(rows.iter().all(|r| r.len() >= plan.row_bytes));
        assert!(store.fits(rows.len(), plan.chunks * 8));
        assert_eq!(plan.win.len(), plan.chunks * plan.pairs);
        assert!(plan.pairs <= MAX_PAIRS && (plan.pairs <= MAX_PAIRS / 2 || plan.wide));
        assert!(!plan.wide || (plan.pairs >= 2 && plan.masks_hi.len() == plan.win.len()));
        // SAFETY: (every arm) the resize runs this only on CPUs with AVX2; the row and store
        // bounds the kernel relies on were asserted just above.
        unsafe {
            match (plan.wide, plan.pairs) {
                (false, 1) => horizontal_kernel::<1, false, S>(plan, rows, store),
                (false, 2) => horizontal_kernel::<2, false, S>(plan, rows, store),
                (false, 3) => horizontal_kernel::<3, false, S>(plan, rows, store),
                (false, _) => horizontal_kernel::<4, false, S>(plan, rows, store),
                (true, 2) => horizontal_kernel::<2, true, S>(plan, rows, store),
                (true, 3) => horizontal_kernel::<3, true, S>(plan, rows, store),
                (true, 4) => horizontal_kernel::<4, true, S>(plan, rows, store),
                (true, 5) => horizontal_kernel::<5, true, S>(plan, rows, store),
                (true, 6) => horizontal_kernel::<6, true, S>(plan, rows, store),
                (true, 7) => horizontal_kernel::<7, true, S>(plan, rows, store),
                (true, 8) => horizontal_kernel::<8, true, S>(plan, rows, store),
                (true, _) => unreachable!("asserted above: wide plans have 2 to 8 pairs"),
            }
        }
    }

    /// Where the horizontal kernel puts 8 finished values of row `r`, chunk `m`.
    trait Store {
        /// Whether `rows` rows of `values` values fit.
        fn fits(&self, rows: usize, values: usize) -> bool;
        /// Stores `v` (8 i32 in `[0, 255]`).
        ///
        /// # Safety
        /// AVX2, and `r`, `m` within what [`Store::fits`] accepted.
        unsafe fn store(&mut self, r: usize, m: usize, v: __m256i);
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
        unsafe fn store(&mut self, r: usize, m: usize, v: __m256i) {
            // SAFETY: `fits` guaranteed `r * stride + 8 * m + 8 <= out.len()`.
            unsafe {
                let p = self.out.as_mut_ptr().add(r * self.stride + 8 * m);
                _mm_storel_epi64(p.cast(), pack8(v));
            }
        }
    }

    struct PairStore<'a> {
        out: &'a mut [i32],
        stride: usize,
    }

    impl Store for PairStore<'_> {
        fn fits(&self, rows: usize, values: usize) -> bool {
            self.stride >= values && self.out.len() >= rows * self.stride
        }

        #[inline(always)]
        unsafe fn store(&mut self, r: usize, m: usize, v: __m256i) {
            // SAFETY: `fits` guaranteed `r * stride + 8 * m + 8 <= out.len()`.
            unsafe {
                let p = self.out.as_mut_ptr().add(r * self.stride + 8 * m);
                let pair = _mm256_or_si256(v, _mm256_slli_epi32::<23>(v));
                _mm256_storeu_si256(p.cast(), pair);
            }
        }
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

    /// # Safety
    /// AVX2; every row at least `plan.row_bytes` long; `store` fits `rows.len()` rows of
    /// `plan.chunks * 8` values; `plan.pairs == P`, `plan.wide == WIDE` and the tables hold
    /// `chunks * P` entries.
    #[target_feature(enable = "avx2")]
    unsafe fn horizontal_kernel<const P: usize, const WIDE: bool, S: Store>(
        plan: &HPlan,
        rows: &[&[u8]],
        store: &mut S,
    ) {
        // SAFETY: window offsets are at most `row_bytes - 16` (narrow) or `row_bytes - 32`
        // (wide; the second load is at +16) per HPlan::build, and rows are at least
        // `row_bytes` long, so every 16-byte load is in bounds; the table reads are
        // bounds-checked; the stores are within what the caller checked with `fits`.
        unsafe {
            let half = _mm256_set1_epi32(HALF);
            for m in 0..plan.chunks {
                let t = m * P;
                let win = &plan.win[t..t + P];
                let mut masks = [_mm256_setzero_si256(); P];
                let mut masks_hi = [_mm256_setzero_si256(); P];
                let mut whi = [_mm256_setzero_si256(); P];
                let mut wlo = [_mm256_setzero_si256(); P];
                for p in 0..P {
                    masks[p] = _mm256_loadu_si256(plan.masks[t + p].as_ptr().cast());
                    if WIDE {
                        masks_hi[p] = _mm256_loadu_si256(plan.masks_hi[t + p].as_ptr().cast());
                    }
                    whi[p] = _mm256_loadu_si256(plan.whi[t + p].as_ptr().cast());
                    wlo[p] = _mm256_loadu_si256(plan.wlo[t + p].as_ptr().cast());
                }
                for (r, row) in rows.iter().enumerate() {
                    let ptr = row.as_ptr();
                    let mut hi = _mm256_setzero_si256();
                    let mut lo = half;
                    for p in 0..P {
                        let [w0, w1] = win[p];
                        let (p0, p1) = (ptr.add(w0 as usize), ptr.add(w1 as usize));
                        let a = _mm_loadu_si128(p0.cast());
                        let b = _mm_loadu_si128(p1.cast());
                        let window = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(a), b);
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
                    let sum = _mm256_add_epi32(_mm256_slli_epi32::<11>(hi), lo);
                    store.store(r, m, _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(sum));
                }
            }
        }
    }

    /// One output row of the vertical pass over pair-format rows: output row = rows
    /// `base..base + w.len()` of `tmp` (`stride` values apart) weighted by `w` (pairs).
    fn vertical_pairs(tmp: &[i32], stride: usize, base: usize, w: &[i32], out: &mut [u8]) {
        let chunks = out.len().div_ceil(8);
        assert!(w.len() <= MAX_V_TAPS && chunks * 8 <= stride);
        assert!((base + w.len()) * stride <= tmp.len());
        // SAFETY: the resize runs this only on CPUs with AVX2; bounds asserted above.
        unsafe { vertical_pairs_kernel(tmp, stride, base, w, out) }
    }

    /// # Safety
    /// AVX2; `w.len() <= MAX_V_TAPS`; rows `base..base + w.len()` of `stride` values lie in
    /// `tmp`; `stride >= 8 * ceil(out.len() / 8)`.
    #[target_feature(enable = "avx2")]
    unsafe fn vertical_pairs_kernel(
        tmp: &[i32],
        stride: usize,
        base: usize,
        w: &[i32],
        out: &mut [u8],
    ) {
        // SAFETY: each load reads 8 values at `(base + k) * stride + v` with `v + 8 <= stride`
        // (v < 8 * ceil(n / 8) <= stride) and `base + k < base + w.len()`, inside `tmp`;
        // stores cover `[8m, 8m + 32)` or `[8m, 8m + 8)` only when that lies within `out`,
        // and the tail goes through a copy.
        unsafe {
            let mut wv = [_mm256_setzero_si256(); MAX_V_TAPS];
            for (v, &wk) in wv.iter_mut().zip(w) {
                *v = _mm256_set1_epi32(wk);
            }
            let taps = w.len();
            let half = _mm256_set1_epi32(HALF);
            let rows = tmp.as_ptr().add(base * stride);
            let n = out.len();
            let mut m = 0;
            // 32 values per step: four accumulators share each weight broadcast, and one
            // 32-byte store replaces four 8-byte ones.
            let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
            while 8 * m + 32 <= n {
                let (mut a0, mut a1, mut a2, mut a3) = (half, half, half, half);
                for (k, &wk) in wv.iter().enumerate().take(taps) {
                    let p = rows.add(k * stride + 8 * m);
                    a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_loadu_si256(p.cast()), wk));
                    let p1 = p.add(8).cast();
                    a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_loadu_si256(p1), wk));
                    let p2 = p.add(16).cast();
                    a2 = _mm256_add_epi32(a2, _mm256_madd_epi16(_mm256_loadu_si256(p2), wk));
                    let p3 = p.add(24).cast();
                    a3 = _mm256_add_epi32(a3, _mm256_madd_epi16(_mm256_loadu_si256(p3), wk));
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
                for (k, &wk) in wv.iter().enumerate().take(taps) {
                    let v = _mm256_loadu_si256(rows.add(k * stride + 8 * m).cast());
                    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(v, wk));
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
    fn simd_and_portable_kernels_agree() {
        // Whatever kernels this CPU runs must equal the portable ones, for every pass order,
        // tap count (including the ones the SIMD plan rejects) and the tiny widths whose rows
        // are shorter than a SIMD window.
        let mut fast = Resizer::new();
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
        for (i, &(iw, ih, ow, oh)) in sizes.iter().enumerate() {
            let img = test_image(iw, ih, i as u64);
            fast.resize(img.view(), oh, ow, &mut a).expect("valid");
            portable.resize(img.view(), oh, ow, &mut b).expect("valid");
            assert!(a == b, "{iw}x{ih} -> {ow}x{oh}");
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
        ];
        for portable_only in [false, true] {
            let mut r = Resizer::new();
            r.set_portable_only(portable_only);
            let (mut plain, mut flipped) = (RgbImage::new(), RgbImage::new());
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
                    "{iw}x{ih} -> {ow}x{oh}, portable {portable_only}"
                );
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
