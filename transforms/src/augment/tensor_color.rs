//! Point ops and blends on packed RGB with torch's *tensor* arithmetic, for the ops torchvision
//! runs on a uint8 tensor (AugMix's chains: `pil_to_tensor` first, then the tensor
//! functionals). They differ from the PIL kernels of [`super::color`] in their roundings:
//!
//! - blends (`_blend`) compute `ratio * x + (1 - ratio) * y` in float32 and *truncate* to
//!   uint8 (Pillow rounds its own way, in a different order);
//! - the gray level of saturation and contrast is `0.2989 r + 0.587 g + 0.114 b` in float32,
//!   truncated (Pillow's `convert("L")` rounds 16-bit fixed-point weights);
//! - sharpness blurs with `conv2d` and *rounds* the blurred image before the blend;
//! - autocontrast scales in float32 per channel and truncates.
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
