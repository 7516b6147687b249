//! Point ops and blends on packed RGB with torch's *tensor* arithmetic, for the ops torchvision
//! runs on a uint8 tensor (AugMix's chains: `pil_to_tensor` first, then the tensor
//! functionals). They differ from the PIL kernels of [`super::color`] in their roundings:
//!
//! - blends (`_blend`) compute `ratio * x + (1 - ratio) * y` in float32 and *truncate* to
//!   uint8 (Pillow rounds its own way, in a different order);
//! - the gray level of saturation and contrast is `0.2989 r + 0.587 g + 0.114 b` in float32,
//!   truncated (Pillow's `convert("L")` rounds 16-bit fixed-point weights);
//! - sharpness blurs with `conv2d` and *rounds* the blurred image before the blend;
//! - autocontrast scales in float32 per channel and truncates;
//! - grayscale truncates the float32 gray level, and hue goes through torch's float32 HSV
//!   (`_rgb2hsv`/`_hsv2rgb`) and `x * 255.999` truncated, where Pillow works on 8-bit HSV.
//!
//! [`Api::V1`] follows `torchvision.transforms.functional` (v1's `_functional_tensor`);
//! [`Api::V2`] follows `torchvision.transforms.v2.functional`, whose blends are
//! `x.mul(ratio).add_(y, alpha=1 - ratio)`: torch's vectorized `add` with an alpha is a fused
//! multiply-add, so V2 uses `mul_add` exactly there (and nowhere else). Posterize, solarize
//! and equalize are integer ops that agree between v1, v2 (and, for equalize, Pillow).
//!
//! Every float expression keeps torch's operations in torch's order, each rounded to float32:
//! must not be reassociated, fused (except where V2 says) or widened to float64, or some
//! outputs move by one level. Kernels work in place (sharpness reads a copy of the image in a
//! caller-owned [`RgbImage`]); must not allocate once warm, draw, or panic on input.

use super::color;
use super::fma::with_fma;
use super::policy::Api;
use crate::error::{Error, Result};
use crate::image::RgbImage;

/// float32 to uint8 as torch's `.clamp(0, 255).to(torch.uint8)`: clamp, then truncate toward
/// zero.
#[inline(always)]
fn clamp_trunc(v: f32) -> u8 {
    // `as` truncates toward zero and saturates; the clamp keeps NaN-free inputs in range.
    v.clamp(0.0, 255.0) as u8
}

/// The blend factor as torch uses a Python float scalar against a float32 tensor: narrowed
/// to float32. Negative or non-finite factors are refused, as torchvision refuses them.
fn factor_f32(name: &'static str, factor: f64) -> Result<(f32, f32)> {
    if !(factor.is_finite() && factor >= 0.0) {
        return Err(Error::invalid(
            name,
            format!("{factor} is not a non-negative finite factor"),
        ));
    }
    // `1.0 - ratio` is taken in Python (float64) before torch narrows it.
    Ok((factor as f32, (1.0 - factor) as f32))
}

/// `_blend(x, y, ratio)` for one value: v1 `ratio * x + (1 - ratio) * y`, v2
/// `fma(y, 1 - ratio, x * ratio)`, clamped and truncated.
#[inline(always)]
fn blend(api: Api, x: u8, y: f32, ratio: f32, rest: f32) -> u8 {
    let x = f32::from(x);
    match api {
        Api::V1 => clamp_trunc(ratio * x + rest * y),
        Api::V2 => clamp_trunc(rest.mul_add(y, x * ratio)),
    }
}

/// The gray level torch's `rgb_to_grayscale` computes in float32, before its conversion:
/// v1 `(0.2989 r + 0.587 g) + 0.114 b`, v2 the same with the two additions fused
/// (`r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114)`). Both then truncate (v1's
/// `.to(uint8)`, v2's `floor_()`; the level is never negative).
#[inline(always)]
fn gray(api: Api, r: u8, g: u8, b: u8) -> f32 {
    let (r, g, b) = (f32::from(r), f32::from(g), f32::from(b));
    let (wr, wg, wb) = (0.2989f32, 0.587f32, 0.114f32);
    let level = match api {
        Api::V1 => wr * r + wg * g + wb * b,
        Api::V2 => b.mul_add(wb, g.mul_add(wg, r * wr)),
    };
    level.trunc()
}

/// `F.adjust_brightness(x, factor)` on a uint8 tensor: `x * factor` in float32, truncated
/// (v1's blend with a zero image adds an exact zero, so v1 and v2 agree).
pub fn adjust_brightness(img: &mut RgbImage, factor: f64) -> Result<()> {
    let (ratio, _) = factor_f32("brightness_factor", factor)?;
    let mut lut = [0u8; 256];
    for (i, v) in lut.iter_mut().enumerate() {
        *v = clamp_trunc(i as f32 * ratio);
    }
    for v in img.as_raw_mut() {
        *v = lut[usize::from(*v)];
    }
    Ok(())
}

/// `F.adjust_saturation(x, factor)` on a uint8 RGB tensor: a blend with the truncated float32
/// gray level of each pixel.
pub fn adjust_saturation(img: &mut RgbImage, factor: f64, api: Api) -> Result<()> {
    let (ratio, rest) = factor_f32("saturation_factor", factor)?;
    with_fma(|| saturate(img.as_raw_mut(), api, ratio, rest));
    Ok(())
}

/// The pixel loop of [`adjust_saturation`].
#[inline(always)]
fn saturate(data: &mut [u8], api: Api, ratio: f32, rest: f32) {
    for px in data.chunks_exact_mut(3) {
        let l = gray(api, px[0], px[1], px[2]);
        for v in px.iter_mut() {
            *v = blend(api, *v, l, ratio, rest);
        }
    }
}

/// `F.adjust_contrast(x, factor)` on a uint8 RGB tensor: a blend with the float32 mean of the
/// truncated gray levels.
///
/// The mean is `sum / n` in float32 with the sum exact: torch sums exact small integers, so
/// its float32 sum is exact while it stays below 2^24 (images up to 65,793 pixels, 224x224
/// included); above that torch's cascade summation may round where this exact sum does not.
pub fn adjust_contrast(img: &mut RgbImage, factor: f64, api: Api) -> Result<()> {
    let (ratio, rest) = factor_f32("contrast_factor", factor)?;
    let data = img.as_raw_mut();
    let sum = with_fma(|| gray_sum(data, api));
    let n = (data.len() / 3).max(1);
    let mean = sum as f32 / n as f32;
    let mut lut = [0u8; 256];
    for (i, v) in lut.iter_mut().enumerate() {
        *v = blend(api, i as u8, mean, ratio, rest);
    }
    for v in data.iter_mut() {
        *v = lut[usize::from(*v)];
    }
    Ok(())
}

/// The sum of the truncated gray levels of `data`'s pixels, exact.
#[inline(always)]
fn gray_sum(data: &[u8], api: Api) -> u64 {
    data.chunks_exact(3)
        .map(|px| gray(api, px[0], px[1], px[2]) as u64)
        .sum()
}

/// `round(conv2d(x, [[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13))` at one interior value, from the
/// window's sum `n` (the eight neighbours plus five times the centre): `n / 13` is never
/// halfway between two integers (13 is odd), and torch's float32 error (about 1e-4) is far
/// below the 1/26 that separates it from one, so the exact rounding is torch's.
#[inline(always)]
fn blurred(n: u32) -> f32 {
    ((2 * n + 13) / 26) as f32
}

/// `F.adjust_sharpness(x, factor)` on a uint8 tensor: a blend with the rounded 3x3 blur of
/// the interior (the one-pixel border keeps its values). v1 blends every pixel
/// (`ratio * x + (1 - ratio) * blurred`, the border with itself); v2 moves only the interior,
/// as `x + (1 - ratio) * (blurred - x)` with the multiply-add fused. Images with a side of 2
/// or less stay as they are. `copy` receives a copy of the input (scratch).
pub fn adjust_sharpness(
    img: &mut RgbImage,
    factor: f64,
    api: Api,
    copy: &mut RgbImage,
) -> Result<()> {
    let (ratio, rest) = factor_f32("sharpness_factor", factor)?;
    let (w, h) = (img.width() as usize, img.height() as usize);
    if w <= 2 || h <= 2 {
        return Ok(());
    }
    copy.reset(img.width(), img.height())
        .copy_from_slice(img.as_raw());
    with_fma(|| sharpen(img.as_raw_mut(), copy.as_raw(), [w, h], api, ratio, rest));
    Ok(())
}

/// The pixel loop of [`adjust_sharpness`]: `out` from its copy `src`, both packed RGB of `w x h`
/// with both sides above 2.
#[inline(always)]
fn sharpen(out: &mut [u8], src: &[u8], [w, h]: [usize; 2], api: Api, ratio: f32, rest: f32) {
    let stride = 3 * w;
    for y in 0..h {
        let interior_row = y > 0 && y + 1 < h;
        for x in 0..w {
            let interior = interior_row && x > 0 && x + 1 < w;
            for c in 0..3 {
                let i = y * stride + 3 * x + c;
                let v = src[i];
                out[i] = if interior {
                    let mut n = 4 * u32::from(v);
                    for row in [i - stride, i, i + stride] {
                        n +=
                            u32::from(src[row - 3]) + u32::from(src[row]) + u32::from(src[row + 3]);
                    }
                    let b = blurred(n);
                    match api {
                        Api::V1 => blend(api, v, b, ratio, rest),
                        Api::V2 => {
                            let x = f32::from(v);
                            clamp_trunc((b - x).mul_add(rest, x))
                        }
                    }
                } else {
                    match api {
                        Api::V1 => blend(api, v, f32::from(v), ratio, rest),
                        Api::V2 => v,
                    }
                };
            }
        }
    }
}

/// `F.posterize(x, bits)` on a uint8 tensor: keeps the top `bits` bits; unlike Pillow's, 0
/// bits is allowed (everything becomes 0). Errors above 8.
pub fn posterize(img: &mut RgbImage, bits: u8) -> Result<()> {
    if bits > 8 {
        return Err(Error::invalid(
            "bits",
            format!("{bits} is not between 0 and 8"),
        ));
    }
    let mask = !((1u16 << (8 - bits)) - 1) as u8;
    for v in img.as_raw_mut() {
        *v &= mask;
    }
    Ok(())
}

/// `F.solarize(x, threshold)` on a uint8 tensor: `where(x >= threshold, 255 - x, x)`, the
/// comparison in float32 (torch narrows the Python float threshold to the tensor's promoted
/// type), so v2's float64 thresholds such as 238.0000010 act as 238. Errors above 255 or for
/// NaN, as torchvision refuses a threshold above the bound.
pub fn solarize(img: &mut RgbImage, threshold: f64) -> Result<()> {
    if threshold.is_nan() || threshold > 255.0 {
        return Err(Error::invalid(
            "threshold",
            format!("{threshold} is not at most 255"),
        ));
    }
    let t = threshold as f32;
    for v in img.as_raw_mut() {
        *v = if f32::from(*v) >= t { 255 - *v } else { *v };
    }
    Ok(())
}

/// `F.autocontrast(x)` on a uint8 tensor: per channel, its lowest..highest level stretched to
/// 0..=255 in float32 and truncated. v1 multiplies by `255 / (max - min)` (which torch
/// computes as `(1 / (max - min)) * 255`), v2 divides by
/// `(max - min) * (1 / 255)`; a channel with one level stays.
pub fn autocontrast(img: &mut RgbImage, api: Api) {
    let data = img.as_raw_mut();
    let mut lo = [255u8; 3];
    let mut hi = [0u8; 3];
    for px in data.chunks_exact(3) {
        for c in 0..3 {
            lo[c] = lo[c].min(px[c]);
            hi[c] = hi[c].max(px[c]);
        }
    }
    let mut luts = [[0u8; 256]; 3];
    for (c, lut) in luts.iter_mut().enumerate() {
        let (min, max) = (f32::from(lo[c]), f32::from(hi[c]));
        for (i, v) in lut.iter_mut().enumerate() {
            let x = i as f32;
            *v = match api {
                Api::V1 => {
                    // `255 / t` is `t.reciprocal() * 255` in torch: two roundings.
                    let scale = (1.0f32 / (max - min)) * 255.0;
                    let (min, scale) = if scale.is_finite() {
                        (min, scale)
                    } else {
                        (0.0, 1.0)
                    };
                    clamp_trunc((x - min) * scale)
                }
                Api::V2 => {
                    let (min, inv_scale) = if max == min {
                        (0.0, 1.0)
                    } else {
                        (min, (max - min) * (1.0f64 / 255.0) as f32)
                    };
                    clamp_trunc((x - min) / inv_scale)
                }
            };
        }
    }
    for px in data.chunks_exact_mut(3) {
        for c in 0..3 {
            px[c] = luts[c][usize::from(px[c])];
        }
    }
}

/// `F.equalize(x)` on a uint8 tensor: torch's table (`(cumsum + step // 2) // step`, shifted
/// by one level, clamped to 255) is Pillow's, so this is [`color::equalize`].
pub fn equalize(img: &mut RgbImage) {
    color::equalize(img);
}

/// `F.rgb_to_grayscale(x, num_output_channels=3)` on a uint8 RGB tensor: the float32 gray
/// level (v1 or v2's arithmetic, as saturation and contrast compute it), truncated, in all
/// three channels (torch truncates where Pillow's `convert("L")` rounds fixed-point weights).
pub fn to_grayscale(img: &mut RgbImage, api: Api) {
    with_fma(|| grayscale_pixels(img.as_raw_mut(), api));
}

/// The pixel loop of [`to_grayscale`].
#[inline(always)]
fn grayscale_pixels(data: &mut [u8], api: Api) {
    for px in data.chunks_exact_mut(3) {
        // The level is below 255 (the weights sum to 0.9999) and never negative.
        let l = gray(api, px[0], px[1], px[2]) as u8;
        px.fill(l);
    }
}

/// [`adjust_contrast`] of a one-channel tensor (an `L` image after `ToImage`, replicated into
/// R, G and B here): torch takes the mean of the values themselves, not of a gray level.
pub fn adjust_contrast_one_channel(img: &mut RgbImage, factor: f64, api: Api) -> Result<()> {
    let (ratio, rest) = factor_f32("contrast_factor", factor)?;
    let data = img.as_raw_mut();
    let sum: u64 = data.chunks_exact(3).map(|px| u64::from(px[0])).sum();
    let n = (data.len() / 3).max(1);
    let mean = sum as f32 / n as f32;
    let mut lut = [0u8; 256];
    for (i, v) in lut.iter_mut().enumerate() {
        *v = with_fma(|| blend(api, i as u8, mean, ratio, rest));
    }
    for v in data.iter_mut() {
        *v = lut[usize::from(*v)];
    }
    Ok(())
}

/// `F.adjust_hue(x, factor)` on a uint8 RGB tensor: to float32 in `[0, 1]`, torch's float
/// HSV (`_rgb2hsv`), the hue moved by `factor` modulo 1, back (`_hsv2rgb`), and
/// `x * 255.999` truncated (`convert_image_dtype` / `to_dtype_image(scale=True)`).
///
/// v1 and v2 differ in their roundings: v1 divides by 255 and by 6, v2 multiplies by the
/// float32 reciprocals, and v2 computes `t` as `(s f + (1 - s)) v` where v1 has
/// `v (1 - s (1 - f))`. Every step is one float32 operation in torch's order (no fusing).
/// Errors for a factor outside `[-0.5, 0.5]`, as torchvision's.
pub fn adjust_hue(img: &mut RgbImage, factor: f64, api: Api) -> Result<()> {
    if !(-0.5..=0.5).contains(&factor) {
        return Err(Error::invalid(
            "hue_factor",
            format!("{factor} is not in [-0.5, 0.5]"),
        ));
    }
    // torch adds the Python float to the float32 hue in float32.
    let shift = factor as f32;
    let mut unit = [0f32; 256];
    for (i, u) in unit.iter_mut().enumerate() {
        *u = match api {
            Api::V1 => i as f32 / 255.0,
            Api::V2 => i as f32 * (1.0f64 / 255.0) as f32,
        };
    }
    with_fma(|| hue_pixels(img.as_raw_mut(), &unit, shift, api));
    Ok(())
}

/// Pixels per block of [`hue_pixels`]: split into three float planes so the loop vectorizes.
const HUE_BLOCK: usize = 32;

/// The pixel loop of [`adjust_hue`]: blocks of pixels through [`hue_block`].
#[inline(always)]
fn hue_pixels(data: &mut [u8], unit: &[f32; 256], shift: f32, api: Api) {
    for block in data.chunks_mut(3 * HUE_BLOCK) {
        // Lanes past the block's end stay black: computed, never written back.
        let mut planes = [[0f32; HUE_BLOCK]; 3];
        for (k, px) in block.chunks_exact(3).enumerate() {
            for c in 0..3 {
                planes[c][k] = unit[usize::from(px[c])];
            }
        }
        hue_block(&mut planes, shift, api);
        for (k, px) in block.chunks_exact_mut(3).enumerate() {
            for c in 0..3 {
                // The values are within [0, 1]: at most 255.999, truncated.
                px[c] = (planes[c][k] * TO_U8_SCALE) as u8;
            }
        }
    }
}

/// [`rgb_to_hsv_f32`], the hue shift ([`torch_remainder_1`]) and [`hsv_to_rgb_f32`] on a
/// block of float pixels in place, written without branches so that it vectorizes. The same
/// values: the remainders are exact subtractions on the ranges they see here (`h / 6 + 1` is
/// in `[5/6, 11/6]`, `h + shift` in `[-0.5, 1.5)`; Sterbenz), and the sector is selected, not
/// computed. `tests::hue_block_equals_the_scalar_steps` checks it.
#[inline(always)]
fn hue_block(planes: &mut [[f32; HUE_BLOCK]; 3], shift: f32, api: Api) {
    let [rs, gs, bs] = planes;
    for k in 0..HUE_BLOCK {
        let [h, s, v] = hsv_unwrapped([rs[k], gs[k], bs[k]], api);
        let h = if h >= 1.0 { h - 1.0 } else { h };
        let h = h + shift;
        let h = if h < 0.0 {
            h + 1.0
        } else if h >= 1.0 {
            h - 1.0
        } else {
            h
        };
        let ([p, q, t], i) = hsv_sector([h, s, v], api);
        // Sector 6 (h rounded up to 1) is sector 0.
        let i = if i >= 6.0 { 0.0 } else { i };
        rs[k] = if i == 0.0 || i == 5.0 {
            v
        } else if i == 1.0 {
            q
        } else if i == 4.0 {
            t
        } else {
            p
        };
        gs[k] = if i == 1.0 || i == 2.0 {
            v
        } else if i == 0.0 {
            t
        } else if i == 3.0 {
            q
        } else {
            p
        };
        bs[k] = if i == 3.0 || i == 4.0 {
            v
        } else if i == 2.0 {
            t
        } else if i == 5.0 {
            q
        } else {
            p
        };
    }
}

/// torch's RGB-to-HSV of one float32 pixel (`_rgb2hsv` for v1, `_rgb_to_hsv` for v2) up to
/// the hue's final remainder: the hue is `h / 6 + 1`, in `[5/6, 11/6]`, so a caller takes it
/// into `[0, 1)` with `% 1.0` or, exactly the same there, one subtraction. Branch-free (the
/// hue's case is selected by multiplying with 0 or 1, as torch does) so it vectorizes.
#[inline(always)]
fn hsv_unwrapped([r, g, b]: [f32; 3], api: Api) -> [f32; 3] {
    let maxc = r.max(g).max(b);
    let minc = r.min(g).min(b);
    let eqc = maxc == minc;
    let cr = maxc - minc;
    let s = cr / if eqc { 1.0 } else { maxc };
    let divisor = if eqc { 1.0 } else { cr };
    let rc = (maxc - r) / divisor;
    let gc = (maxc - g) / divisor;
    let bc = (maxc - b) / divisor;
    let is = |c: bool| if c { 1.0f32 } else { 0.0 };
    let hr = is(maxc == r) * (bc - gc);
    let hg = is(maxc == g && maxc != r) * ((2.0 + rc) - bc);
    let hb = is(maxc != g && maxc != r) * ((4.0 + gc) - rc);
    let h = (hr + hg) + hb;
    let h = match api {
        Api::V1 => h / 6.0 + 1.0,
        Api::V2 => h * (1.0f64 / 6.0) as f32 + 1.0,
    };
    [h, s, maxc]
}

/// torch's HSV-to-RGB of one float32 pixel (`_hsv2rgb`, `_hsv_to_rgb`) up to the choice by
/// sector: `[p, q, t]` (v1 and v2 order their products differently, so each is its own
/// arithmetic) and the sector `floor(h * 6)`, 0 to 6 (6 where `h * 6` rounds up: sector 0).
#[inline(always)]
fn hsv_sector([h, s, v]: [f32; 3], api: Api) -> ([f32; 3], f32) {
    let h6 = h * 6.0;
    let i = h6.floor();
    let f = h6 - i;
    let unit = |x: f32| x.clamp(0.0, 1.0);
    let pqt = match api {
        Api::V1 => [
            unit(v * (1.0 - s)),
            unit(v * (1.0 - s * f)),
            unit(v * (1.0 - s * (1.0 - f))),
        ],
        Api::V2 => {
            let sxf = s * f;
            let one_minus_s = 1.0 - s;
            [
                unit(one_minus_s * v),
                unit((1.0 - sxf) * v),
                unit((sxf + one_minus_s) * v),
            ]
        }
    };
    (pqt, i)
}

/// torchvision's float-to-uint8 scale, `255 + 1 - 1e-3` in float64, narrowed to float32.
const TO_U8_SCALE: f32 = (255.0f64 + 1.0 - 1e-3) as f32;

/// torch's `remainder(x, 1.0)` on float32: `fmod`, moved into `[0, 1)` when negative. This
/// and the two conversions below are torch's steps written straight, the reference
/// [`hue_block`] is tested against.
#[cfg(test)]
fn torch_remainder_1(x: f32) -> f32 {
    let m = x % 1.0;
    if m < 0.0 {
        m + 1.0
    } else {
        m
    }
}

/// `_rgb2hsv` (v1) or `_rgb_to_hsv` (v2) of one float32 pixel.
#[cfg(test)]
fn rgb_to_hsv_f32(rgb: [f32; 3], api: Api) -> [f32; 3] {
    let [h, s, v] = hsv_unwrapped(rgb, api);
    [h % 1.0, s, v]
}

/// `_hsv2rgb` (v1) or `_hsv_to_rgb` (v2) of one float32 pixel.
#[cfg(test)]
fn hsv_to_rgb_f32([h, s, v]: [f32; 3], api: Api) -> [f32; 3] {
    let ([p, q, t], i) = hsv_sector([h, s, v], api);
    // `i % 6` on int32 (h is in [0, 1), so i is 0..=6, 6 only where h * 6 rounds up to 6).
    match (i as i32).rem_euclid(6) {
        0 => [v, t, p],
        1 => [q, v, p],
        2 => [p, v, t],
        3 => [p, q, v],
        4 => [t, p, v],
        _ => [v, p, q],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(pixels: &[[u8; 3]], width: u32) -> RgbImage {
        let data = pixels.iter().flatten().copied().collect();
        RgbImage::from_raw(width, pixels.len() as u32 / width, data).expect("image")
    }

    #[test]
    fn brightness_truncates() {
        // 0.5 * 5 = 2.5 and 0.5 * 255 = 127.5: truncated, where rounding would differ.
        let mut img = image(&[[5, 101, 255]], 1);
        adjust_brightness(&mut img, 0.5).expect("factor");
        assert_eq!(img.as_raw(), &[2, 50, 127]);
        assert!(adjust_brightness(&mut img, -0.1).is_err());
    }

    #[test]
    fn posterize_zero_bits_clears() {
        let mut img = image(&[[5, 101, 255]], 1);
        posterize(&mut img, 0).expect("bits");
        assert_eq!(img.as_raw(), &[0, 0, 0]);
        assert!(posterize(&mut img, 9).is_err());
    }

    #[test]
    fn solarize_compares_in_f32() {
        let mut img = image(&[[237, 238, 239]], 1);
        solarize(&mut img, 238.000_001_0).expect("threshold");
        assert_eq!(img.as_raw(), &[237, 17, 16]);
        assert!(solarize(&mut img, 255.5).is_err());
    }

    #[test]
    fn blurred_rounds_the_exact_quotient() {
        for n in 0..=13 * 255 {
            assert_eq!(blurred(n), (f64::from(n) / 13.0).round() as f32);
        }
    }

    #[test]
    fn hue_turns_red_into_green_and_keeps_grays() {
        for api in [Api::V1, Api::V2] {
            let mut img = image(&[[255, 0, 0], [0, 0, 0], [77, 77, 77], [255, 255, 255]], 2);
            adjust_hue(&mut img, 1.0 / 3.0, api).expect("factor");
            // A gray has no hue; `v / 255 * 255.999` truncates back to `v`.
            assert_eq!(
                img.as_raw(),
                &[0, 255, 0, 0, 0, 0, 77, 77, 77, 255, 255, 255],
                "{api:?}"
            );
            assert!(adjust_hue(&mut img, 0.51, api).is_err());
        }
    }

    #[test]
    fn hue_remainder_wraps_into_the_unit_interval() {
        assert_eq!(torch_remainder_1(-0.25), 0.75);
        assert_eq!(torch_remainder_1(1.25), 0.25);
        assert_eq!(torch_remainder_1(0.0), 0.0);
        // A tiny negative hue rounds up to 1.0, which `_hsv2rgb` maps to sector 0.
        assert_eq!(torch_remainder_1(-1e-9), 1.0);
        assert_eq!(hsv_to_rgb_f32([1.0, 1.0, 1.0], Api::V1), [1.0, 0.0, 0.0]);
    }

    #[test]
    fn hue_block_equals_the_scalar_steps() {
        // Every 7th level of each channel (and the extremes), at shifts across the range.
        let levels: Vec<u8> = (0..=255u8).step_by(7).chain([1, 254, 255]).collect();
        let mut colours = Vec::new();
        for &r in &levels {
            for &g in &levels {
                for &b in &levels {
                    colours.push([r, g, b]);
                }
            }
        }
        for api in [Api::V1, Api::V2] {
            for shift in [-0.5f32, -0.37, -1e-9, 0.0, 0.013, 0.25, 0.5] {
                for chunk in colours.chunks(HUE_BLOCK) {
                    let mut planes = [[0f32; HUE_BLOCK]; 3];
                    for (k, px) in chunk.iter().enumerate() {
                        for c in 0..3 {
                            planes[c][k] = f32::from(px[c]) / 255.0;
                        }
                    }
                    let mut block = planes;
                    hue_block(&mut block, shift, api);
                    for k in 0..chunk.len() {
                        let rgb = [planes[0][k], planes[1][k], planes[2][k]];
                        let [h, s, v] = rgb_to_hsv_f32(rgb, api);
                        let want = hsv_to_rgb_f32([torch_remainder_1(h + shift), s, v], api);
                        let got = [block[0][k], block[1][k], block[2][k]];
                        assert_eq!(
                            got.map(f32::to_bits),
                            want.map(f32::to_bits),
                            "{api:?} {shift} {:?}",
                            chunk[k]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn grayscale_truncates_the_float_level() {
        for api in [Api::V1, Api::V2] {
            // White is 0.9999 * 255 = 254.97: 254, where Pillow's rounding gives 255.
            let mut img = image(&[[255, 255, 255], [0, 0, 0], [10, 200, 30]], 3);
            to_grayscale(&mut img, api);
            let g = (0.2989f32 * 10.0 + 0.587 * 200.0 + 0.114 * 30.0) as u8;
            assert_eq!(img.as_raw(), &[254, 254, 254, 0, 0, 0, g, g, g], "{api:?}");
        }
    }

    #[test]
    fn one_channel_contrast_blends_with_the_mean_of_the_values() {
        // Values 0 and 255 (replicated): mean 127.5, factor 0.5 -> 63.75 and 191.25, truncated.
        let mut img = image(&[[0, 0, 0], [255, 255, 255]], 2);
        adjust_contrast_one_channel(&mut img, 0.5, Api::V1).expect("factor");
        assert_eq!(img.as_raw(), &[63, 63, 63, 191, 191, 191]);
    }

    #[test]
    fn autocontrast_flat_channel_stays() {
        let mut img = image(&[[7, 0, 9], [7, 255, 10]], 2);
        autocontrast(&mut img, Api::V1);
        assert_eq!(img.as_raw(), &[7, 0, 0, 7, 255, 255]);
        // v2 divides by (10 - 9) * float32(1 / 255): 254.99998, truncated (as torch does).
        let mut img = image(&[[7, 0, 9], [7, 255, 10]], 2);
        autocontrast(&mut img, Api::V2);
        assert_eq!(img.as_raw(), &[7, 0, 0, 7, 255, 254]);
    }
}
