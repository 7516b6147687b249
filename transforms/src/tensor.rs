//! The last ops of a classification pipeline, one at a time: `RandomHorizontalFlip`,
//! `ToTensor` and `Normalize`, with torchvision's float32 arithmetic.
//!
//! These are the op-by-op reference the fused kernel ([`crate::fused`]) is tested against, so
//! the per-value arithmetic lives in [`to_tensor_value`] and [`normalize_value`] and both paths
//! call them. Must not change the order or precision of those float32 operations (no folding
//! into a multiply-add, no f64): torch computes `x.float().div(255)` (v1) or
//! `x.float().mul_(1.0 / 255)` (v2's `ToDtype`, see [`Scaling`]) and then `(x - mean) / std`,
//! each rounded to float32.

use crate::error::{Error, Result};
use crate::image::{RgbImage, RgbView};
use crate::rng::TorchDraws;

/// torchvision's `RandomHorizontalFlip(p)`.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct RandomHorizontalFlip {
    p: f64,
}

impl RandomHorizontalFlip {
    /// Flip with probability `p`, which must lie in `[0, 1]`.
    pub fn new(p: f64) -> Result<Self> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::invalid(
                "p",
                format!("{p} is not a probability in [0, 1]"),
            ));
        }
        Ok(RandomHorizontalFlip { p })
    }

    /// The flip probability.
    pub fn p(&self) -> f64 {
        self.p
    }

    /// Whether to flip: torchvision's `torch.rand(1) < self.p`. Always takes one draw. The
    /// comparison happens in float32, as torch compares a float32 tensor with a Python float.
    pub fn draw<D: TorchDraws + ?Sized>(&self, draws: &mut D) -> bool {
        draw_flip(draws, self.p)
    }
}

/// The functional form of [`RandomHorizontalFlip::draw`]: `torch.rand(1) < p` in float32.
pub fn draw_flip<D: TorchDraws + ?Sized>(draws: &mut D, p: f64) -> bool {
    draws.uniform_f32(0.0, 1.0) < p as f32
}

/// Mirrors `img` left to right in place (`F.hflip`, Pillow's `FLIP_LEFT_RIGHT`).
pub fn hflip(img: &mut RgbImage) {
    let row_len = 3 * img.width() as usize;
    if row_len == 0 {
        return;
    }
    for row in img.as_raw_mut().chunks_exact_mut(row_len) {
        hflip_row(row);
    }
}

/// Mirrors one packed RGB row in place.
pub fn hflip_row(row: &mut [u8]) {
    let n = row.len() / 3;
    let (left, right) = row.split_at_mut(3 * (n / 2));
    // `right` holds the middle pixel (odd widths) followed by the mirror images of `left`.
    let right = &mut right[3 * (n % 2)..];
    for (a, b) in left
        .chunks_exact_mut(3)
        .zip(right.chunks_exact_mut(3).rev())
    {
        a.swap_with_slice(b);
    }
}

/// Which float32 arithmetic turns a uint8 value into `[0, 1]`. torchvision has two that
/// differ by one ulp on 126 of the 256 levels, so the spec names which one a pipeline's
/// conversion reproduces; each is exact for the transforms it names.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Scaling {
    /// `x / 255`, one correctly rounded division: v1's `ToTensor()` and
    /// `ConvertImageDtype(torch.float32)` (and v2's deprecated `ToTensor()`, which calls v1's).
    #[default]
    Divide,
    /// `x * float32(1 / 255)`, one float32 multiply: v2's `ToDtype(torch.float32, scale=True)`
    /// and v2's `ConvertImageDtype` (`to_dtype_image`'s `image.to(float32).mul_(1.0 / 255)`;
    /// torch rounds the Python scalar to the tensor's float32 first).
    Reciprocal,
}

/// `1 / 255` rounded to float32: what torch multiplies by for [`Scaling::Reciprocal`] (the
/// Python float `1.0 / 255`, a double, rounded to the tensor's float32).
pub const RECIP_255: f32 = (1.0f64 / 255.0) as f32;

/// One value of torchvision's `to_tensor` on a uint8 image: `img.float().div(255)`
/// ([`Scaling::Divide`]).
#[inline(always)]
pub fn to_tensor_value(v: u8) -> f32 {
    f32::from(v) / 255.0
}

/// One value of the conversion to float32 with `scaling`'s arithmetic.
#[inline(always)]
pub fn to_float_value(v: u8, scaling: Scaling) -> f32 {
    match scaling {
        Scaling::Divide => to_tensor_value(v),
        Scaling::Reciprocal => f32::from(v) * RECIP_255,
    }
}

/// One value of torchvision's `normalize`: `tensor.sub_(mean).div_(std)`, two float32 roundings.
#[inline(always)]
pub fn normalize_value(x: f32, mean: f32, std: f32) -> f32 {
    (x - mean) / std
}

/// torchvision's `ToTensor` on an RGB image: `out` (length `3 * h * w`) receives the CHW
/// float32 tensor `img / 255`.
pub fn to_tensor(img: RgbView<'_>, out: &mut [f32]) -> Result<()> {
    to_float(img, out, Scaling::Divide)
}

/// [`to_tensor`] with `scaling`'s arithmetic: v1's `ToTensor` ([`Scaling::Divide`]) or v2's
/// `ToDtype(torch.float32, scale=True)` ([`Scaling::Reciprocal`]).
pub fn to_float(img: RgbView<'_>, out: &mut [f32], scaling: Scaling) -> Result<()> {
    split_planes(img, out, "floats", |v| to_float_value(v, scaling))
}

/// torchvision's `PILToTensor` on an RGB image: `out` (length `3 * h * w`) receives the CHW
/// uint8 planes.
pub fn to_chw_u8(img: RgbView<'_>, out: &mut [u8]) -> Result<()> {
    split_planes(img, out, "bytes", |v| v)
}

/// HWC pixels to three CHW planes, each value through `convert`; `unit` names the element in
/// the size error.
fn split_planes<T>(
    img: RgbView<'_>,
    out: &mut [T],
    unit: &str,
    convert: impl Fn(u8) -> T,
) -> Result<()> {
    let (w, h) = (img.width() as usize, img.height() as usize);
    let plane = w * h;
    if out.len() != 3 * plane {
        return Err(Error::invalid(
            "out",
            format!(
                "{} {unit} for a 3x{h}x{w} tensor, expected {}",
                out.len(),
                3 * plane
            ),
        ));
    }
    if plane == 0 {
        return Ok(());
    }
    let (r, gb) = out.split_at_mut(plane);
    let (g, b) = gb.split_at_mut(plane);
    for y in 0..h {
        let src = img.row(y as u32);
        let dst = y * w..(y + 1) * w;
        for (((px, r), g), b) in src
            .chunks_exact(3)
            .zip(&mut r[dst.clone()])
            .zip(&mut g[dst.clone()])
            .zip(&mut b[dst])
        {
            *r = convert(px[0]);
            *g = convert(px[1]);
            *b = convert(px[2]);
        }
    }
    Ok(())
}

/// The functional form of [`Normalize`]: `F.normalize(tensor, mean, std)` on a CHW tensor.
pub fn normalize(tensor: &mut [f32], mean: &[f32; 3], std: &[f32; 3]) -> Result<()> {
    Normalize::new(*mean, *std)?.apply(tensor)
}

/// torchvision's `Normalize(mean, std)` for 3-channel float32 tensors.
///
/// `mean` and `std` are float32 here because torch converts them to the tensor's dtype before
/// the arithmetic; convert Python floats with `as f32` (round to nearest) to match.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Normalize {
    mean: [f32; 3],
    std: [f32; 3],
}

impl Normalize {
    /// Errors if a `std` is zero (torchvision raises too) or a value is not finite.
    pub fn new(mean: [f32; 3], std: [f32; 3]) -> Result<Self> {
        if std.contains(&0.0) {
            return Err(Error::invalid(
                "std",
                format!("{std:?} contains zero, which would divide by zero"),
            ));
        }
        if !mean.iter().chain(&std).all(|v| v.is_finite()) {
            return Err(Error::invalid(
                "mean/std",
                format!("mean {mean:?} and std {std:?} must be finite"),
            ));
        }
        Ok(Normalize { mean, std })
    }

    /// Per-channel means.
    pub fn mean(&self) -> [f32; 3] {
        self.mean
    }

    /// Per-channel standard deviations.
    pub fn std(&self) -> [f32; 3] {
        self.std
    }

    /// Normalizes a CHW tensor (`3 * plane` values) in place.
    pub fn apply(&self, tensor: &mut [f32]) -> Result<()> {
        if !tensor.len().is_multiple_of(3) {
            return Err(Error::invalid(
                "tensor",
                format!("{} values is not 3 channel planes", tensor.len()),
            ));
        }
        let plane = tensor.len() / 3;
        if plane == 0 {
            return Ok(());
        }
        for ((ch, &m), &s) in tensor
            .chunks_exact_mut(plane)
            .zip(&self.mean)
            .zip(&self.std)
        {
            for x in ch {
                *x = normalize_value(*x, m, s);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hflip_mirrors_odd_and_even_widths() {
        for w in 1..6u32 {
            let data: Vec<u8> = (0..3 * w * 2).map(|v| v as u8).collect();
            let mut img = RgbImage::from_raw(w, 2, data.clone()).expect("sizes match");
            hflip(&mut img);
            for y in 0..2usize {
                for x in 0..w as usize {
                    let src = (y * w as usize + (w as usize - 1 - x)) * 3;
                    let dst = (y * w as usize + x) * 3;
                    assert_eq!(&img.as_raw()[dst..dst + 3], &data[src..src + 3], "w={w}");
                }
            }
            hflip(&mut img);
            assert_eq!(img.as_raw(), &data[..]);
        }
    }

    #[test]
    fn to_tensor_is_chw_over_255() {
        let img = RgbImage::from_raw(2, 1, vec![0, 51, 255, 1, 2, 3]).expect("sizes match");
        let mut out = vec![0.0; 6];
        to_tensor(img.view(), &mut out).expect("right length");
        assert_eq!(out, [0.0, 1.0 / 255.0, 0.2, 2.0 / 255.0, 1.0, 3.0 / 255.0]);
        assert!(to_tensor(img.view(), &mut [0.0; 5]).is_err());
    }

    #[test]
    fn scalings_follow_torch_formulas_at_every_level() {
        let recip = (1.0f64 / 255.0) as f32;
        let mut differ = 0;
        for v in 0..=255u8 {
            let x = f32::from(v);
            let divide = to_float_value(v, Scaling::Divide);
            let reciprocal = to_float_value(v, Scaling::Reciprocal);
            assert_eq!(divide.to_bits(), (x / 255.0).to_bits(), "level {v}");
            assert_eq!(divide.to_bits(), to_tensor_value(v).to_bits(), "level {v}");
            assert_eq!(reciprocal.to_bits(), (x * recip).to_bits(), "level {v}");
            // At most one ulp apart: the two are torchvision's two roundings of v / 255.
            assert!(
                divide.to_bits().abs_diff(reciprocal.to_bits()) <= 1,
                "level {v}"
            );
            differ += usize::from(divide != reciprocal);
        }
        // The count torch gives for `x.div(255) != x.mul(1.0 / 255)` over 0..=255.
        assert_eq!(differ, 126);
        let img = RgbImage::from_raw(2, 1, vec![0, 51, 255, 1, 2, 3]).expect("sizes match");
        let mut out = vec![0.0; 6];
        to_float(img.view(), &mut out, Scaling::Reciprocal).expect("right length");
        let want = [0u8, 1, 51, 2, 255, 3].map(|v| f32::from(v) * recip);
        assert_eq!(out, want);
        assert_eq!(
            serde_json::to_string(&Scaling::Reciprocal).ok().as_deref(),
            Some("\"reciprocal\"")
        );
    }

    #[test]
    fn to_chw_u8_splits_planes() {
        let img = RgbImage::from_raw(2, 1, vec![0, 51, 255, 1, 2, 3]).expect("sizes match");
        let mut out = vec![0u8; 6];
        to_chw_u8(img.view(), &mut out).expect("right length");
        assert_eq!(out, [0, 1, 51, 2, 255, 3]);
        assert!(to_chw_u8(img.view(), &mut [0; 7]).is_err());
    }

    #[test]
    fn normalize_rounds_twice_in_f32() {
        let (m, sd) = (0.485f32, 0.229f32);
        let n = Normalize::new([m, 0.456, 0.406], [sd, 0.224, 0.225]).expect("valid");
        // Find a pixel value where torch's two float32 roundings differ from evaluating the
        // expression in f64 and rounding once: the op must give the former.
        let x = (0..=255u8)
            .map(to_tensor_value)
            .find(|&x| {
                let once = ((f64::from(x) - f64::from(m)) / f64::from(sd)) as f32;
                once != (x - m) / sd
            })
            .expect("some value exposes double rounding");
        let mut t = vec![x, 0.0, 0.0];
        n.apply(&mut t).expect("3 planes");
        assert_eq!(t[0].to_bits(), ((x - m) / sd).to_bits());
        assert!(Normalize::new([0.0; 3], [1.0, 0.0, 1.0]).is_err());
        assert!(Normalize::new([f32::NAN, 0.0, 0.0], [1.0; 3]).is_err());
        assert!(n.apply(&mut [0.0; 4]).is_err());
    }

    #[test]
    fn flip_probability_edges() {
        let mut rng = crate::rng::sample_rng(1, 2, 3);
        let never = RandomHorizontalFlip::new(0.0).expect("valid");
        let always = RandomHorizontalFlip::new(1.0).expect("valid");
        for _ in 0..1000 {
            assert!(!never.draw(&mut rng));
            assert!(always.draw(&mut rng));
        }
        assert!(RandomHorizontalFlip::new(1.5).is_err());
        assert!(RandomHorizontalFlip::new(f64::NAN).is_err());
    }
}
