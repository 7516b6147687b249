//! Point ops and blends on packed RGB: ImageOps LUTs, ImageEnhance blends, grayscale, hue.
//!
//! Each kernel reproduces, bit for bit, what `torchvision.transforms.functional` returns for a
//! PIL RGB image (Pillow 13), so a policy run natively draws the same pixels as one run through
//! PIL. That fixes the arithmetic: Pillow's `Image.blend` works in `float` with the factor
//! narrowed to `f32` and truncates; `convert("L")` uses 16-bit fixed-point weights; the SMOOTH
//! filter sums in `f32` in a fixed order; `rgb2hsv`/`hsv2rgb` mix `float` and `double` steps.
//! The code below keeps every one of those roundings, in Pillow's order, and must not be
//! "simplified" into exact or fused arithmetic (no `mul_add`, no reassociation): either changes
//! some outputs by one level.
//!
//! Kernels work in place on an [`RgbImage`] and take their parameters already drawn. They must
//! not allocate once warm: the one op that needs more than the image (sharpness, which keeps
//! its source rows' filter terms while it overwrites them) uses a [`ColorScratch`] that only
//! grows; the others keep their small tables and pixel blocks on the stack.
//!
//! Speed comes from keeping the loops flat so they vectorize: interleaved pixels are split
//! into small planes where a per-pixel formula needs all three channels (gray levels, hue),
//! the loops have AVX2 builds picked at run time (the same IEEE operations in the same order as
//! the baseline build, which unit tests check), and the float-to-byte clamp is written so that
//! it vectorizes. `unsafe` appears only in those two places: calls of the AVX2 builds after
//! the CPU check, and the unchecked conversion after the clamp in `trunc8`/`trunc8_f64`. A
//! faster kernel must still pass `tests/color_parity.rs` with zero differences.

use crate::error::{Error, Result};
use crate::image::RgbImage;

/// Reusable buffers for the colour ops that need more than the image: sharpness keeps the
/// weighted sums of source rows (three rows with SMOOTH's edge weights, one with its centre
/// weights) while it overwrites the image. Only grows.
#[derive(Debug, Default, Clone)]
pub struct ColorScratch {
    sums: Vec<f32>,
}

impl ColorScratch {
    /// Empty scratch; the first call sizes it.
    pub fn new() -> Self {
        Self::default()
    }

    /// Four `f32` rows of `len` values each.
    fn four_rows(&mut self, len: usize) -> [&mut [f32]; 4] {
        if self.sums.len() < 4 * len {
            self.sums.resize(4 * len, 0.0);
        }
        let (a, rest) = self.sums.split_at_mut(len);
        let (b, rest) = rest.split_at_mut(len);
        let (c, rest) = rest.split_at_mut(len);
        [a, b, c, &mut rest[..len]]
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers shared by the ops.

/// Pillow's `convert("L")` of one pixel: ITU-R 601-2 weights in 16-bit fixed point, rounded
/// (`L24` in libImaging/Convert.c).
#[inline]
pub fn luma(r: u8, g: u8, b: u8) -> u8 {
    ((u32::from(r) * 19595 + u32::from(g) * 38470 + u32::from(b) * 7471 + 0x8000) >> 16) as u8
}

/// Pixels per block of the gray-level loops: planes of this many bytes live on the stack.
const LUMA_BLOCK: usize = 128;

/// [`luma`] of each pixel of `px` (at most [`LUMA_BLOCK`] packed RGB pixels) into `out`,
/// one per pixel: split into planes first, so that the weighted sum runs as a flat loop,
/// which vectorizes (a loop over interleaved pixels does not). AVX2 build when `avx2`.
fn lumas(px: &[u8], out: &mut [u8], avx2: bool) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` comes from `crate::cpu::avx2()`, so the CPU runs AVX2 code; the
        // function has no other requirement.
        unsafe { lumas_avx2(px, out) };
        return;
    }
    let _ = avx2;
    lumas_body(px, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn lumas_avx2(px: &[u8], out: &mut [u8]) {
    lumas_body(px, out);
}

#[inline(always)]
fn lumas_body(px: &[u8], out: &mut [u8]) {
    let mut planes = [[0u8; LUMA_BLOCK]; 3];
    let n = out.len().min(px.len() / 3).min(LUMA_BLOCK);
    for (i, p) in px.chunks_exact(3).take(n).enumerate() {
        planes[0][i] = p[0];
        planes[1][i] = p[1];
        planes[2][i] = p[2];
    }
    let [r, g, b] = &planes;
    for (((o, &r), &g), &b) in out[..n].iter_mut().zip(&r[..n]).zip(&g[..n]).zip(&b[..n]) {
        *o = luma(r, g, b);
    }
}

/// `Image.blend`'s factor: Python's float narrowed to C `float`, rejected when not finite
/// (Pillow would cast a NaN to `UINT8`, which is undefined behaviour in C).
fn blend_alpha(name: &'static str, factor: f64) -> Result<f32> {
    if !factor.is_finite() {
        return Err(Error::invalid(
            name,
            format!("{factor} is not a finite number"),
        ));
    }
    Ok(factor as f32)
}

/// One channel value of `Image.blend(degenerate, image, alpha)`: `d + alpha * (x - d)` in
/// `f32`, clamped to 0..=255 and truncated. Pillow has two loops (interpolation without the
/// clamp for alpha in [0, 1], extrapolation with it); in [0, 1] the value never leaves
/// 0..=255, so one clamp and truncation is both.
#[inline(always)]
fn blend1(d: u8, x: u8, alpha: f32) -> u8 {
    let d = f32::from(d);
    trunc8(d + alpha * (f32::from(x) - d))
}

/// `v` clamped to 0..=255 and truncated, as `v as u8` (and Pillow's `clip8`) do, NaN giving 0.
/// Rust's saturating casts compile to a compare-and-branch per element, which keeps the blend
/// loops scalar; the clamp written as selects (x86 MAXPS/MINPS) and an unchecked conversion
/// vectorize.
#[inline(always)]
fn trunc8(v: f32) -> u8 {
    let v = if v > 0.0 { v } else { 0.0 };
    let v = if v < 255.0 { v } else { 255.0 };
    // SAFETY: `v` is in [0, 255] here (a NaN fails `v > 0.0` and became 0), so it is finite
    // and its truncation fits in i32, the conditions of `to_int_unchecked`.
    unsafe { v.to_int_unchecked::<i32>() as u8 }
}

/// Applies a table per channel.
fn apply_luts(data: &mut [u8], luts: &[[u8; 256]; 3]) {
    for px in data.chunks_exact_mut(3) {
        px[0] = luts[0][usize::from(px[0])];
        px[1] = luts[1][usize::from(px[1])];
        px[2] = luts[2][usize::from(px[2])];
    }
}

/// Per-channel histograms (`Image.histogram()` of an RGB image).
///
/// Even and odd pixels count into separate tables, summed at the end: runs of equal values
/// (flat regions) would otherwise make each increment wait for the previous one's store.
fn histograms(data: &[u8]) -> [[u32; 256]; 3] {
    let mut h = [[0u32; 256]; 6];
    let mut pairs = data.chunks_exact(6);
    for px in &mut pairs {
        h[0][usize::from(px[0])] += 1;
        h[1][usize::from(px[1])] += 1;
        h[2][usize::from(px[2])] += 1;
        h[3][usize::from(px[3])] += 1;
        h[4][usize::from(px[4])] += 1;
        h[5][usize::from(px[5])] += 1;
    }
    for px in pairs.remainder().chunks_exact(3) {
        h[0][usize::from(px[0])] += 1;
        h[1][usize::from(px[1])] += 1;
        h[2][usize::from(px[2])] += 1;
    }
    let mut out = [[0u32; 256]; 3];
    for (c, o) in out.iter_mut().enumerate() {
        for (v, (a, b)) in o.iter_mut().zip(h[c].iter().zip(&h[c + 3])) {
            *v = a + b;
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// ImageOps.

/// `ImageOps.invert`: `255 - v` on every channel.
pub fn invert(img: &mut RgbImage) {
    for v in img.as_raw_mut() {
        *v = 255 - *v;
    }
}

/// v2's `permute_channels(img, permutation)`: output channel `c` is input channel
/// `permutation[c]` (`image[..., permutation, :, :]`; its PIL kernel goes through that tensor
/// one). `permutation` must hold 0, 1 and 2, which the caller's `randperm` guarantees; an
/// index above 2 is read as 2 rather than panicking.
pub fn permute_channels(img: &mut RgbImage, permutation: [u8; 3]) {
    let data = img.as_raw_mut();
    // One loop per order with the indices known at compile time: no bounds checks inside,
    // and the shuffle vectorizes (a runtime index kept it a byte at a time).
    match permutation.map(|i| i.min(2)) {
        [0, 2, 1] => shuffle::<0, 2, 1>(data),
        [1, 0, 2] => shuffle::<1, 0, 2>(data),
        [1, 2, 0] => shuffle::<1, 2, 0>(data),
        [2, 0, 1] => shuffle::<2, 0, 1>(data),
        [2, 1, 0] => shuffle::<2, 1, 0>(data),
        [0, 1, 2] => {}
        // Not a permutation (a repeated index): the same gather, unspecialized.
        [a, b, c] => {
            let [a, b, c] = [a, b, c].map(usize::from);
            for px in data.chunks_exact_mut(3) {
                let old = [px[0], px[1], px[2]];
                px[0] = old[a];
                px[1] = old[b];
                px[2] = old[c];
            }
        }
    }
}

/// Every pixel's channels in the order `A, B, C` of the old ones.
fn shuffle<const A: usize, const B: usize, const C: usize>(data: &mut [u8]) {
    for px in data.chunks_exact_mut(3) {
        let old = [px[0], px[1], px[2]];
        px[0] = old[A];
        px[1] = old[B];
        px[2] = old[C];
    }
}

/// `ImageOps.posterize(img, bits)`: keeps the top `bits` bits of every channel. `bits` must be
/// 1..=8, as Pillow requires (torchvision's own check lets 0 through to Pillow, which raises).
pub fn posterize(img: &mut RgbImage, bits: u8) -> Result<()> {
    if !(1..=8).contains(&bits) {
        return Err(Error::invalid(
            "bits",
            format!("{bits} is not between 1 and 8"),
        ));
    }
    let mask = !((1u16 << (8 - bits)) - 1) as u8;
    for v in img.as_raw_mut() {
        *v &= mask;
    }
    Ok(())
}

/// `ImageOps.solarize(img, threshold)`: every channel value `v` with `v >= threshold` becomes
/// `255 - v`. The threshold is compared as Python compares an int with a float, so fractional
/// thresholds (TrivialAugmentWide's bins, such as 246.5) behave as Pillow's do. A NaN
/// threshold inverts everything, as in Pillow (`v < NaN` is false for every level).
pub fn solarize(img: &mut RgbImage, threshold: f64) {
    // The first level that is not below the threshold: 0..=256 (256: nothing inverts).
    let cut = (0u16..256)
        .find(|&i| f64::from(i).partial_cmp(&threshold) != Some(std::cmp::Ordering::Less))
        .unwrap_or(256);
    // A select, not a conditional store, so the loop vectorizes.
    for v in img.as_raw_mut() {
        *v = if u16::from(*v) >= cut { 255 - *v } else { *v };
    }
}

/// timm's `solarize_add(img, add, thresh)`: `img.point(lut)` with `lut[i] = min(255, i + add)`
/// for `i < thresh`, `i` above (an addend of 0, or a threshold of 0, leaves the image).
pub fn solarize_add(img: &mut RgbImage, add: u32, threshold: u32) {
    let mut lut = identity_lut();
    for (i, v) in lut.iter_mut().enumerate() {
        let i = i as u32;
        if i < threshold {
            *v = i.saturating_add(add).min(255) as u8;
        }
    }
    for v in img.as_raw_mut() {
        *v = lut[usize::from(*v)];
    }
}

/// `ImageOps.equalize(img)` (no mask): per channel, Pillow's cumulative-histogram table. A
/// channel with a single level, or too few pixels besides its top level (`step == 0`), stays
/// as it is.
pub fn equalize(img: &mut RgbImage) {
    let data = img.as_raw_mut();
    let h = histograms(data);
    let mut luts = [[0u8; 256]; 3];
    for (lut, hist) in luts.iter_mut().zip(&h) {
        *lut = equalize_lut(hist);
    }
    apply_luts(data, &luts);
}

fn identity_lut() -> [u8; 256] {
    let mut lut = [0u8; 256];
    for (i, v) in lut.iter_mut().enumerate() {
        *v = i as u8;
    }
    lut
}

fn equalize_lut(h: &[u32; 256]) -> [u8; 256] {
    let nonzero = h.iter().filter(|&&c| c != 0).count();
    let Some(&last) = h.iter().rev().find(|&&c| c != 0) else {
        return identity_lut();
    };
    if nonzero <= 1 {
        return identity_lut();
    }
    let total: u64 = h.iter().map(|&c| u64::from(c)).sum();
    let step = (total - u64::from(last)) / 255;
    if step == 0 {
        return identity_lut();
    }
    let mut lut = [0u8; 256];
    let mut n = step / 2;
    for (v, &c) in lut.iter_mut().zip(h) {
        // Pillow's list holds n // step, which can reach 256 for the top levels;
        // `Image.point` clips it to 255.
        *v = (n / step).min(255) as u8;
        n += u64::from(c);
    }
    lut
}

/// `ImageOps.autocontrast(img)` with torchvision's arguments (cutoff 0, no ignore, no mask):
/// per channel, stretches the lowest..highest level present to 0..=255 with Pillow's double
/// arithmetic (`int(ix * scale + offset)`, clamped). A channel with one level stays.
pub fn autocontrast(img: &mut RgbImage) {
    let data = img.as_raw_mut();
    let h = histograms(data);
    let mut luts = [[0u8; 256]; 3];
    for (lut, hist) in luts.iter_mut().zip(&h) {
        *lut = autocontrast_lut(hist);
    }
    apply_luts(data, &luts);
}

fn autocontrast_lut(h: &[u32; 256]) -> [u8; 256] {
    let lo = h.iter().position(|&c| c != 0);
    let hi = h.iter().rposition(|&c| c != 0);
    let (Some(lo), Some(hi)) = (lo, hi) else {
        return identity_lut();
    };
    if hi <= lo {
        return identity_lut();
    }
    let scale = 255.0 / (hi - lo) as f64;
    let offset = -(lo as f64) * scale;
    let mut lut = [0u8; 256];
    for (ix, v) in lut.iter_mut().enumerate() {
        // Python's int() truncates toward zero; the clamp follows.
        let t = (ix as f64 * scale + offset) as i64;
        *v = t.clamp(0, 255) as u8;
    }
    lut
}

// ---------------------------------------------------------------------------------------------
// ImageEnhance.

/// `ImageEnhance.Brightness(img).enhance(factor)`: a blend with black.
/// Errors if `factor` is not finite.
pub fn adjust_brightness(img: &mut RgbImage, factor: f64) -> Result<()> {
    let alpha = blend_alpha("brightness_factor", factor)?;
    if alpha == 1.0 {
        return Ok(());
    }
    blend_const(0, img.as_raw_mut(), alpha, crate::cpu::avx2());
    Ok(())
}

/// `ImageEnhance.Contrast(img).enhance(factor)`: a blend with the flat gray image of the mean
/// of `convert("L")` (rounded half up, as `int(mean + 0.5)`).
/// Errors if `factor` is not finite.
pub fn adjust_contrast(img: &mut RgbImage, factor: f64) -> Result<()> {
    let alpha = blend_alpha("contrast_factor", factor)?;
    if alpha == 1.0 {
        return Ok(());
    }
    let mean = gray_mean(img.as_raw());
    blend_const(mean, img.as_raw_mut(), alpha, crate::cpu::avx2());
    Ok(())
}

/// `int(ImageStat.Stat(img.convert("L")).mean[0] + 0.5)`: the exact sum of the L levels over
/// the pixel count, one correctly rounded double division (as Python's int / int), then
/// truncation. 0 for an empty image, as ImageStat gives.
fn gray_mean(data: &[u8]) -> u8 {
    let count = (data.len() / 3) as u64;
    if count == 0 {
        return 0;
    }
    // ImageStat sums level * count over the histogram: the same integer as summing the levels.
    let avx2 = crate::cpu::avx2();
    let mut levels = [0u8; LUMA_BLOCK];
    let mut sum = 0u64;
    for block in data.chunks(3 * LUMA_BLOCK) {
        let levels = &mut levels[..block.len() / 3];
        lumas(block, levels, avx2);
        sum += levels.iter().map(|&l| u64::from(l)).sum::<u64>();
    }
    // sum < 2^53 for any image that fits in memory, so both conversions are exact.
    let mean = sum as f64 / count as f64;
    (mean + 0.5) as u8
}

/// `ImageEnhance.Color(img).enhance(factor)` (torchvision's `adjust_saturation`): a blend with
/// `convert("L").convert("RGB")`, the gray level computed per pixel on the fly.
/// Errors if `factor` is not finite.
pub fn adjust_saturation(img: &mut RgbImage, factor: f64) -> Result<()> {
    let alpha = blend_alpha("saturation_factor", factor)?;
    if alpha == 1.0 {
        return Ok(());
    }
    let avx2 = crate::cpu::avx2();
    // Blocks of pixels: the gray levels replicated into a small stack buffer, then one flat
    // blend loop over the block's bytes, which vectorizes (an interleaved per-pixel loop
    // does not).
    let mut levels = [0u8; LUMA_BLOCK];
    let mut gray = [0u8; 3 * LUMA_BLOCK];
    for block in img.as_raw_mut().chunks_mut(3 * LUMA_BLOCK) {
        let levels = &mut levels[..block.len() / 3];
        lumas(block, levels, avx2);
        let gray = &mut gray[..block.len()];
        for (g, &l) in gray.chunks_exact_mut(3).zip(levels.iter()) {
            g.fill(l);
        }
        blend_bytes(gray, block, alpha, avx2);
    }
    Ok(())
}

/// `data[i] = blend1(degenerate[i], data[i], alpha)`, with the AVX2 build when `avx2`.
fn blend_bytes(degenerate: &[u8], data: &mut [u8], alpha: f32, avx2: bool) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` comes from `crate::cpu::avx2()`, so the CPU runs AVX2 code; the
        // function has no other requirement.
        unsafe { blend_bytes_avx2(degenerate, data, alpha) };
        return;
    }
    let _ = avx2;
    blend_bytes_body(degenerate, data, alpha);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn blend_bytes_avx2(degenerate: &[u8], data: &mut [u8], alpha: f32) {
    blend_bytes_body(degenerate, data, alpha);
}

/// `data[i] = blend1(d, data[i], alpha)`: the blend with a flat degenerate image (brightness,
/// contrast), computed rather than looked up because the vector arithmetic beats a byte-wise
/// table walk. AVX2 build when `avx2`.
fn blend_const(d: u8, data: &mut [u8], alpha: f32, avx2: bool) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` comes from `crate::cpu::avx2()`, so the CPU runs AVX2 code; the
        // function has no other requirement.
        unsafe { blend_const_avx2(d, data, alpha) };
        return;
    }
    let _ = avx2;
    blend_const_body(d, data, alpha);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn blend_const_avx2(d: u8, data: &mut [u8], alpha: f32) {
    blend_const_body(d, data, alpha);
}

#[inline(always)]
fn blend_const_body(d: u8, data: &mut [u8], alpha: f32) {
    for x in data {
        *x = blend1(d, *x, alpha);
    }
}

#[inline(always)]
fn blend_bytes_body(degenerate: &[u8], data: &mut [u8], alpha: f32) {
    for (x, &d) in data.iter_mut().zip(degenerate) {
        *x = blend1(d, *x, alpha);
    }
}

/// `ImageEnhance.Sharpness(img).enhance(factor)`: a blend with `img.filter(ImageFilter.SMOOTH)`.
///
/// Pillow's 3x3 filter leaves the first and last row and column as they are (so the blend
/// leaves them too) and leaves an image under 3 pixels in either direction whole. Inside, each
/// channel is `((0.5 + row(y+1)) + row(y)) + row(y-1)` summed in `f32` in that order, each row
/// term `(left * k0 + centre * k1) + right * k2`, then clamped and truncated. The row terms
/// are computed once per source row (rows above and below share the edge weights, so each is
/// reused two rows later) into `scratch`, before that row is overwritten: the same `f32`
/// values in the same order as Pillow's, with a third of the multiplications.
/// Errors if `factor` is not finite.
pub fn adjust_sharpness(img: &mut RgbImage, factor: f64, scratch: &mut ColorScratch) -> Result<()> {
    let alpha = blend_alpha("sharpness_factor", factor)?;
    let (w, h) = (img.width() as usize, img.height() as usize);
    if alpha == 1.0 || w < 3 || h < 3 {
        return Ok(());
    }
    let avx2 = crate::cpu::avx2();
    let row_len = 3 * w;
    // Interior values per row: every channel of pixels 1..w-1.
    let n = row_len - 6;
    let [e0, e1, e2, centre] = scratch.four_rows(n);
    // Edge-weight terms of rows y-1, y, y+1 (rotated as y advances).
    let (mut above, mut here, mut below) = (e0, e1, e2);
    let data = img.as_raw_mut();
    row_terms(&data[..row_len], above, SMOOTH_EDGE, avx2);
    row_terms(&data[row_len..2 * row_len], here, SMOOTH_EDGE, avx2);
    for y in 1..h - 1 {
        let (head, tail) = data.split_at_mut((y + 1) * row_len);
        let out = &mut head[y * row_len..];
        row_terms(&tail[..row_len], below, SMOOTH_EDGE, avx2);
        row_terms(out, centre, SMOOTH_CENTER, avx2);
        sharpen_row(below, centre, above, &mut out[3..3 + n], alpha, avx2);
        // Row y+1's edge terms serve again as row (y+2)-1's.
        std::mem::swap(&mut above, &mut here);
        std::mem::swap(&mut here, &mut below);
    }
    Ok(())
}

/// SMOOTH's weights as `_imaging.c` hands them to the filter: each integer weight divided by
/// the divisor 13 in `f32`.
const SMOOTH_EDGE: f32 = 1.0 / 13.0;
const SMOOTH_CENTER: f32 = 5.0 / 13.0;

/// `terms[i] = (row[i] * k + row[i + 3] * mid) + row[i + 6] * k` in `f32` (Pillow's
/// `KERNEL1x3` at the interior value `i + 3`, with `k = 1/13`). AVX2 build when `avx2`.
fn row_terms(row: &[u8], terms: &mut [f32], mid: f32, avx2: bool) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` comes from `crate::cpu::avx2()`, so the CPU runs AVX2 code; the
        // function has no other requirement.
        unsafe { row_terms_avx2(row, terms, mid) };
        return;
    }
    let _ = avx2;
    row_terms_body(row, terms, mid);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn row_terms_avx2(row: &[u8], terms: &mut [f32], mid: f32) {
    row_terms_body(row, terms, mid);
}

/// The same IEEE operations in the same order whatever the instruction set: Rust never
/// contracts `a * b + c` into an FMA.
#[inline(always)]
fn row_terms_body(row: &[u8], terms: &mut [f32], mid: f32) {
    let n = terms.len();
    // Equal-length windows, so the loop carries no bounds checks and vectorizes.
    let (l, c, r) = (&row[..n], &row[3..3 + n], &row[6..6 + n]);
    let k = SMOOTH_EDGE;
    for i in 0..n {
        terms[i] = f32::from(l[i]) * k + f32::from(c[i]) * mid + f32::from(r[i]) * k;
    }
}

/// The interior of one row of [`adjust_sharpness`]: `out[i] = blend1(smooth, out[i], alpha)`
/// with `smooth = trunc8(((0.5 + below[i]) + centre[i]) + above[i])`, Pillow's order (it adds
/// the row under the pixel first). AVX2 build when `avx2`.
fn sharpen_row(
    below: &[f32],
    centre: &[f32],
    above: &[f32],
    out: &mut [u8],
    alpha: f32,
    avx2: bool,
) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` comes from `crate::cpu::avx2()`, so the CPU runs AVX2 code; the
        // function has no other requirement.
        unsafe { sharpen_row_avx2(below, centre, above, out, alpha) };
        return;
    }
    let _ = avx2;
    sharpen_row_body(below, centre, above, out, alpha);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sharpen_row_avx2(below: &[f32], centre: &[f32], above: &[f32], out: &mut [u8], alpha: f32) {
    sharpen_row_body(below, centre, above, out, alpha);
}

#[inline(always)]
fn sharpen_row_body(below: &[f32], centre: &[f32], above: &[f32], out: &mut [u8], alpha: f32) {
    let n = out.len();
    let (below, centre, above) = (&below[..n], &centre[..n], &above[..n]);
    for i in 0..n {
        let mut ss = 0.5f32;
        ss += below[i];
        ss += centre[i];
        ss += above[i];
        out[i] = blend1(trunc8(ss), out[i], alpha);
    }
}

// ---------------------------------------------------------------------------------------------
// Grayscale.

/// `rgb_to_grayscale(img, num_output_channels=3)`: `convert("L")` replicated into R, G and B.
pub fn to_grayscale_rgb(img: &mut RgbImage) {
    let avx2 = crate::cpu::avx2();
    let mut levels = [0u8; LUMA_BLOCK];
    for block in img.as_raw_mut().chunks_mut(3 * LUMA_BLOCK) {
        let levels = &mut levels[..block.len() / 3];
        lumas(block, levels, avx2);
        for (px, &l) in block.chunks_exact_mut(3).zip(levels.iter()) {
            px.fill(l);
        }
    }
}

/// `rgb_to_grayscale(img, num_output_channels=1)`: `convert("L")` into `out`, one byte per
/// pixel, rows `width` bytes apart. Errors unless `out` holds exactly `width * height` bytes.
pub fn to_grayscale(img: &RgbImage, out: &mut [u8]) -> Result<()> {
    let pixels = img.width() as usize * img.height() as usize;
    if out.len() != pixels {
        return Err(Error::invalid(
            "out",
            format!(
                "{} bytes for a {}x{} gray plane, expected {pixels}",
                out.len(),
                img.width(),
                img.height()
            ),
        ));
    }
    let avx2 = crate::cpu::avx2();
    for (o, px) in out
        .chunks_mut(LUMA_BLOCK)
        .zip(img.as_raw().chunks(3 * LUMA_BLOCK))
    {
        lumas(px, o, avx2);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Hue.

/// torchvision's `adjust_hue` on a PIL image: `convert("HSV")`, H shifted by
/// `uint8(int32(hue_factor * 255))` with wrap-around, back to RGB, with Pillow's own
/// `rgb2hsv`/`hsv2rgb` (each channel 8 bits, so the round trip itself moves colours: a factor
/// of 0 is not the identity, and this reproduces that). Errors unless `hue_factor` is in
/// [-0.5, 0.5], as torchvision does.
pub fn adjust_hue(img: &mut RgbImage, hue_factor: f64) -> Result<()> {
    if !(-0.5..=0.5).contains(&hue_factor) {
        return Err(Error::invalid(
            "hue_factor",
            format!("{hue_factor} is not in [-0.5, 0.5]"),
        ));
    }
    // np.int32(x) truncates toward zero; .astype(np.uint8) keeps the low 8 bits.
    let shift = (hue_factor * 255.0) as i32 as u8;
    let avx2 = crate::cpu::avx2();
    for block in img.as_raw_mut().chunks_mut(3 * HUE_BLOCK) {
        hue_block(block, shift, avx2);
    }
    Ok(())
}

/// Pixels per block of [`adjust_hue`].
const HUE_BLOCK: usize = 128;

/// One block of at most [`HUE_BLOCK`] pixels: split into planes on the stack, shifted plane
/// by plane (a flat loop over lanes, which vectorizes), interleaved back.
fn hue_block(block: &mut [u8], shift: u8, avx2: bool) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` comes from `crate::cpu::avx2()`, so the CPU runs AVX2 code; the
        // function has no other requirement.
        unsafe { hue_block_avx2(block, shift) };
        return;
    }
    let _ = avx2;
    hue_block_body(block, shift);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn hue_block_avx2(block: &mut [u8], shift: u8) {
    hue_block_body(block, shift);
}

#[inline(always)]
fn hue_block_body(block: &mut [u8], shift: u8) {
    let mut planes = [[0u8; HUE_BLOCK]; 3];
    let n = (block.len() / 3).min(HUE_BLOCK);
    for (i, px) in block.chunks_exact(3).take(n).enumerate() {
        planes[0][i] = px[0];
        planes[1][i] = px[1];
        planes[2][i] = px[2];
    }
    let [r, g, b] = &mut planes;
    for ((r, g), b) in r[..n].iter_mut().zip(&mut g[..n]).zip(&mut b[..n]) {
        [*r, *g, *b] = shift_hue([*r, *g, *b], shift);
    }
    for (i, px) in block.chunks_exact_mut(3).take(n).enumerate() {
        px[0] = planes[0][i];
        px[1] = planes[1][i];
        px[2] = planes[2][i];
    }
}

/// `hsv_to_rgb(rgb_to_hsv(rgb))` with H shifted by `shift`, without branches or table
/// lookups, so that a loop of it vectorizes: the same arithmetic as the two reference
/// functions (the unit tests compare them over a large share of all colours), rearranged only
/// where the result is provably the same.
///
/// - Pillow's three hue formulas are one, `(base + a / cr) - b / cr` in double narrowed to
///   float: for the red-is-max case Pillow subtracts in float, but the double difference of
///   two floats is exact, so its one rounding to float is the float subtraction.
/// - A gray pixel (no hue) gets S = 0, and `hsv2rgb` with `fs = 0` yields (v, v, v) from
///   every sector, which is the pixel itself; the division by zero is avoided with `cr >= 1`.
/// - `hsv2rgb`'s `floor` of a non-negative value is a truncation, its switch a set of selects.
#[inline(always)]
fn shift_hue([r, g, b]: [u8; 3], shift: u8) -> [u8; 3] {
    let maxc = r.max(g).max(b);
    let minc = r.min(g).min(b);
    let gray = maxc == minc;
    let cr = f32::from((maxc - minc).max(1));
    // (base, numerator of a, numerator of b) by which channel is the maximum, in Pillow's
    // order of tests (red first, then green).
    let rmax = r == maxc;
    let gmax = !rmax && g == maxc;
    let base: f64 = if rmax {
        0.0
    } else if gmax {
        2.0
    } else {
        4.0
    };
    let na = if rmax {
        maxc - b
    } else if gmax {
        maxc - r
    } else {
        maxc - g
    };
    let nb = if rmax {
        maxc - g
    } else if gmax {
        maxc - b
    } else {
        maxc - r
    };
    let a = f32::from(na) / cr;
    let bq = f32::from(nb) / cr;
    let h = (base + f64::from(a) - f64::from(bq)) as f32;
    let x = f64::from(h) / 6.0 + 1.0;
    let h = (if x >= 1.0 { x - 1.0 } else { x }) as f32;
    let uh = trunc8_f64(f64::from(h) * 255.0);
    let s = cr / f32::from(maxc.max(1));
    let us = if gray {
        0
    } else {
        trunc8_f64(f64::from(s) * 255.0)
    };

    let h2 = uh.wrapping_add(shift);
    let h6 = f64::from(h2) * 6.0 / 255.0;
    let i = trunc8_f64(h6);
    let f = (h6 - f64::from(f32::from(i))) as f32;
    let fs = (f64::from(us) / 255.0) as f32;
    let vf = f64::from(maxc);
    let p = round8(vf * (1.0 - f64::from(fs)));
    let q = round8(vf * (1.0 - f64::from(fs * f)));
    let t = round8(vf * (1.0 - f64::from(fs) * (1.0 - f64::from(f))));
    let v = maxc;
    // hsv2rgb's switch on i % 6 (i is 0..=6, and 6 is sector 0):
    // 0: (v, t, p)  1: (q, v, p)  2: (p, v, t)  3: (p, q, v)  4: (t, p, v)  5: (v, p, q)
    let red = if i == 0 || i == 5 || i == 6 {
        v
    } else if i == 1 {
        q
    } else if i == 4 {
        t
    } else {
        p
    };
    let green = if i == 1 || i == 2 {
        v
    } else if i == 0 || i == 6 {
        t
    } else if i == 3 {
        q
    } else {
        p
    };
    let blue = if i == 3 || i == 4 {
        v
    } else if i == 2 {
        t
    } else if i == 5 {
        q
    } else {
        p
    };
    [red, green, blue]
}

/// `v` (a double) clamped to 0..=255 and truncated, NaN giving 0, in a form that vectorizes
/// (see [`trunc8`]).
#[inline(always)]
fn trunc8_f64(v: f64) -> u8 {
    let v = if v > 0.0 { v } else { 0.0 };
    let v = if v < 255.0 { v } else { 255.0 };
    // SAFETY: `v` is in [0, 255] here (a NaN fails `v > 0.0` and became 0), so it is finite
    // and its truncation fits in i32, the conditions of `to_int_unchecked`.
    unsafe { v.to_int_unchecked::<i32>() as u8 }
}

/// C's `round` (half away from zero) then `CLIP8` of a value in [0, 255]: `x - trunc(x)` is
/// exact for non-negative `x`, so comparing it with 0.5 decides exactly as `round` does.
#[inline(always)]
fn round8(x: f64) -> u8 {
    let t = trunc8_f64(x);
    let up = x - f64::from(t) >= 0.5;
    t.saturating_add(u8::from(up))
}

/// Pillow's `rgb2hsv_row` (libImaging/Convert.c), one pixel, keeping its mix of `float` and
/// `double` steps: the hue offsets 2 and 4 and the wrap `fmod(h / 6 + 1, 1)` are `double`,
/// the ratios `float`; H and S truncate from `double`.
pub fn rgb_to_hsv([r, g, b]: [u8; 3]) -> [u8; 3] {
    let maxc = r.max(g).max(b);
    let minc = r.min(g).min(b);
    if maxc == minc {
        return [0, 0, maxc];
    }
    let cr = f32::from(maxc - minc);
    let s = cr / f32::from(maxc);
    let rc = f32::from(maxc - r) / cr;
    let gc = f32::from(maxc - g) / cr;
    let bc = f32::from(maxc - b) / cr;
    let h: f32 = if r == maxc {
        bc - gc
    } else if g == maxc {
        (2.0 + f64::from(rc) - f64::from(bc)) as f32
    } else {
        (4.0 + f64::from(gc) - f64::from(rc)) as f32
    };
    // fmod(x, 1.0) for x = h / 6 + 1, which lies in [0.83, 1.84) (h is in [-1, 5]): x - 1 when
    // x >= 1, exact there (Sterbenz), so the same double as the libm call, without the call.
    let x = f64::from(h) / 6.0 + 1.0;
    let h = (if x >= 1.0 { x - 1.0 } else { x }) as f32;
    let uh = clip8((f64::from(h) * 255.0) as i32);
    let us = clip8((f64::from(s) * 255.0) as i32);
    [uh, us, maxc]
}

/// Pillow's `hsv2rgb` (libImaging/Convert.c), one pixel: sector and fraction in `double`
/// narrowed to `float`, `q` from a `float` product, `round` half away from zero.
pub fn hsv_to_rgb([h, s, v]: [u8; 3]) -> [u8; 3] {
    if s == 0 {
        return [v, v, v];
    }
    let h6 = f64::from(h) * 6.0 / 255.0;
    // floor of a non-negative value: truncation.
    let i = h6 as i32;
    let f = (h6 - f64::from(i as f32)) as f32;
    let fs = (f64::from(s) / 255.0) as f32;
    let vf = f64::from(v);
    let p = clip8(round_half_up(vf * (1.0 - f64::from(fs))));
    let q = clip8(round_half_up(vf * (1.0 - f64::from(fs * f))));
    let t = clip8(round_half_up(
        vf * (1.0 - f64::from(fs) * (1.0 - f64::from(f))),
    ));
    match i % 6 {
        0 => [v, t, p],
        1 => [q, v, p],
        2 => [p, v, t],
        3 => [p, q, v],
        4 => [t, p, v],
        _ => [v, p, q],
    }
}

/// C's `round` (half away from zero) of a value in [0, 255], without the libm call that
/// `f64::round` becomes on baseline x86-64: `x - trunc(x)` is exact for non-negative `x`, so
/// the comparison with 0.5 decides exactly as `round` does.
#[inline]
fn round_half_up(x: f64) -> i32 {
    let t = x as i32;
    t + i32::from(x - f64::from(t) >= 0.5)
}

/// Pillow's `CLIP8`.
#[inline]
fn clip8(v: i32) -> u8 {
    v.clamp(0, 255) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(w: u32, h: u32, seed: u32) -> RgbImage {
        let mut s = seed;
        let data = (0..3 * w * h)
            .map(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (s >> 24) as u8
            })
            .collect();
        RgbImage::from_raw(w, h, data).expect("size")
    }

    #[test]
    fn trunc8_is_the_saturating_cast() {
        let mut v = -300.0f32;
        while v < 300.0 {
            assert_eq!(trunc8(v), v as u8, "{v}");
            v += 0.125;
        }
        for v in [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN,
            254.99998,
            -0.0,
            1e-30,
        ] {
            assert_eq!(trunc8(v), v as u8, "{v}");
            assert_eq!(trunc8_f64(f64::from(v)), f64::from(v) as u8, "{v}");
        }
        let mut v = -300.0f64;
        while v < 300.0 {
            assert_eq!(trunc8_f64(v), v as u8, "{v}");
            v += 0.0625;
        }
        for v in [254.999_999_999, 0.499_999_999_999_999_94, 0.5, 254.5, 255.0] {
            assert_eq!(round8(v), v.round() as u8, "{v}");
        }
    }

    #[test]
    fn solarize_add_is_timms_table() {
        let mut img = image(16, 16, 5);
        let before = img.as_raw().to_vec();
        solarize_add(&mut img, 99, 128);
        for (&b, &a) in before.iter().zip(img.as_raw()) {
            // timm: min(255, i + add) if i < thresh else i.
            let want = if b < 128 {
                (u32::from(b) + 99).min(255) as u8
            } else {
                b
            };
            assert_eq!(a, want, "{b}");
        }
        let mut img = image(4, 4, 6);
        let before = img.as_raw().to_vec();
        solarize_add(&mut img, 0, 128);
        assert_eq!(img.as_raw(), &before[..]);
        solarize_add(&mut img, u32::MAX, 256);
        assert!(img.as_raw().iter().all(|&v| v == 255));
    }

    #[test]
    fn luma_weights_sum_to_one() {
        assert_eq!(luma(0, 0, 0), 0);
        assert_eq!(luma(255, 255, 255), 255);
        assert_eq!(luma(255, 0, 0), 76);
        assert_eq!(luma(0, 255, 0), 150);
        assert_eq!(luma(0, 0, 255), 29);
    }

    #[test]
    fn invalid_arguments_are_errors() {
        let mut img = image(4, 4, 1);
        let before = img.clone();
        assert!(posterize(&mut img, 0).is_err());
        assert!(posterize(&mut img, 9).is_err());
        assert!(adjust_hue(&mut img, 0.51).is_err());
        assert!(adjust_hue(&mut img, f64::NAN).is_err());
        assert!(adjust_brightness(&mut img, f64::NAN).is_err());
        assert!(adjust_contrast(&mut img, f64::INFINITY).is_err());
        assert!(adjust_saturation(&mut img, f64::NEG_INFINITY).is_err());
        let mut scratch = ColorScratch::new();
        assert!(adjust_sharpness(&mut img, f64::NAN, &mut scratch).is_err());
        assert_eq!(img, before, "a refused call leaves the image alone");
        let mut plane = vec![0u8; 15];
        assert!(to_grayscale(&img, &mut plane).is_err());
    }

    #[test]
    fn factor_one_is_identity_and_zero_is_degenerate() {
        let img = image(9, 7, 2);
        let mut scratch = ColorScratch::new();
        let mut a = img.clone();
        adjust_brightness(&mut a, 1.0).expect("finite");
        adjust_contrast(&mut a, 1.0).expect("finite");
        adjust_saturation(&mut a, 1.0).expect("finite");
        adjust_sharpness(&mut a, 1.0, &mut scratch).expect("finite");
        assert_eq!(a, img);
        let mut black = img.clone();
        adjust_brightness(&mut black, 0.0).expect("finite");
        assert!(black.as_raw().iter().all(|&v| v == 0));
        let mut gray = img.clone();
        adjust_saturation(&mut gray, 0.0).expect("finite");
        let mut gray3 = img.clone();
        to_grayscale_rgb(&mut gray3);
        assert_eq!(gray, gray3);
    }

    #[test]
    fn fused_hue_shift_equals_the_reference_round_trip() {
        // Every 7th colour (2.4 million per shift, all branches and sectors), with
        // shifts that wrap and that do not.
        for shift in [0u8, 1, 33, 127, 128, 200, 255] {
            for c in (0..1u32 << 24).step_by(7) {
                let rgb = [(c >> 16) as u8, (c >> 8) as u8, c as u8];
                let [h, s, v] = rgb_to_hsv(rgb);
                let want = hsv_to_rgb([h.wrapping_add(shift), s, v]);
                assert_eq!(shift_hue(rgb, shift), want, "{rgb:?} shift {shift}");
            }
        }
    }

    #[test]
    fn avx2_and_baseline_builds_agree() {
        let img = image(67, 5, 3);
        let row = img.as_raw();
        let r = 3 * 67;
        for alpha in [0.0f32, 0.37, 1.0, 1.9, 3.3] {
            let (mut a, mut b) = (row.to_vec(), row.to_vec());
            blend_bytes(&row[r..], &mut a[..4 * r], alpha, false);
            blend_bytes(&row[r..], &mut b[..4 * r], alpha, crate::cpu::avx2());
            assert_eq!(a, b, "blend, alpha {alpha}");
            let (mut a, mut b) = (row.to_vec(), row.to_vec());
            blend_const(97, &mut a, alpha, false);
            blend_const(97, &mut b, alpha, crate::cpu::avx2());
            assert_eq!(a, b, "flat blend, alpha {alpha}");
            let (mut a, mut b) = ([0u8; LUMA_BLOCK], [0u8; LUMA_BLOCK]);
            lumas(&row[..3 * LUMA_BLOCK], &mut a, false);
            lumas(&row[..3 * LUMA_BLOCK], &mut b, crate::cpu::avx2());
            assert_eq!(a, b, "luma");
            let by_pixel: Vec<u8> = row[..3 * LUMA_BLOCK]
                .chunks_exact(3)
                .map(|p| luma(p[0], p[1], p[2]))
                .collect();
            assert_eq!(a.to_vec(), by_pixel, "luma planes");
            let shift = (alpha * 77.0) as u8;
            let (mut a, mut b) = (row.to_vec(), row.to_vec());
            hue_block(&mut a[..3 * HUE_BLOCK.min(67 * 5)], shift, false);
            hue_block(
                &mut b[..3 * HUE_BLOCK.min(67 * 5)],
                shift,
                crate::cpu::avx2(),
            );
            assert_eq!(a, b, "hue, shift {shift}");
            let terms = |y: usize, mid: f32, avx2: bool| {
                let mut t = vec![0f32; r - 6];
                row_terms(&row[y * r..(y + 1) * r], &mut t, mid, avx2);
                t
            };
            let base = [
                terms(0, SMOOTH_EDGE, false),
                terms(1, SMOOTH_CENTER, false),
                terms(2, SMOOTH_EDGE, false),
            ];
            let vector = [
                terms(0, SMOOTH_EDGE, crate::cpu::avx2()),
                terms(1, SMOOTH_CENTER, crate::cpu::avx2()),
                terms(2, SMOOTH_EDGE, crate::cpu::avx2()),
            ];
            assert!(
                base.iter()
                    .flatten()
                    .zip(vector.iter().flatten())
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "row terms"
            );
            let (mut a, mut b) = (
                row[r + 3..2 * r - 3].to_vec(),
                row[r + 3..2 * r - 3].to_vec(),
            );
            sharpen_row(&base[2], &base[1], &base[0], &mut a, alpha, false);
            sharpen_row(
                &base[2],
                &base[1],
                &base[0],
                &mut b,
                alpha,
                crate::cpu::avx2(),
            );
            assert_eq!(a, b, "sharpen, alpha {alpha}");
        }
    }

    #[test]
    fn hsv_round_trip_of_grays_is_exact() {
        for v in 0..=255u8 {
            assert_eq!(rgb_to_hsv([v, v, v]), [0, 0, v]);
            assert_eq!(hsv_to_rgb([0, 0, v]), [v, v, v]);
        }
    }
}
