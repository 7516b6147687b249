//! torchvision's `AugMix` carried out on packed RGB, for a plan already drawn
//! ([`AugMixPlan`](super::policy::AugMixPlan)): each chain's ops run on a copy of the image
//! with torch's *tensor* kernels ([`super::tensor_color`], [`super::grid_sample`]), as
//! torchvision runs them after `pil_to_tensor`; the chains are mixed in float32 as
//! `mix = m0 * x`, then `mix += w_i * chain_i` per chain (a product, then a sum, each rounded
//! to float32), and the mix is truncated back to uint8 (`.to(torch.uint8)`).
//!
//! [`AugMixScratch`] holds the float32 mix, the chain image and the kernels' scratch; it only
//! grows, so a warm one allocates nothing. Its steps ([`AugMixScratch::start`],
//! [`AugMixScratch::begin_chain`], [`AugMixScratch::apply`], [`AugMixScratch::add_chain`],
//! [`AugMixScratch::finish`]) let a caller wrap each op (the pipeline's spans); [`augmix`]
//! runs them all. Must not draw, know about the profiler, or reorder the float operations.

use super::geometry::Interpolation;
use super::grid_sample::{GridSampler, TensorFill};
use super::policy::{Api, AugMixPlan, PixelOp};
use super::tensor_color;
use crate::error::{Error, Result};
use crate::image::RgbImage;

/// How AugMix's warps sample and fill, and whose tensor kernels run (v1
/// `torchvision.transforms` or v2 `torchvision.transforms.v2`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TensorWarp {
    /// torchvision's `interpolation` (`NEAREST` or `BILINEAR`, AugMix's default).
    pub interpolation: Interpolation,
    /// torchvision's `fill` as floats; `None` (the default) is no fill channel at all.
    pub fill: TensorFill,
    /// Whose kernels.
    pub api: Api,
    /// The tensor has one channel (an `L` image, replicated into R, G and B here): `Color` is
    /// then the identity and `Contrast` blends with the mean of the values, as torch's kernels
    /// treat a one-channel tensor.
    pub one_channel: bool,
}

/// Reusable buffers of one AugMix application; only grows.
#[derive(Debug, Default, Clone)]
pub struct AugMixScratch {
    mix: Vec<f32>,
    chain: RgbImage,
    spare: RgbImage,
    grid: GridSampler,
}

impl AugMixScratch {
    /// Empty; the first image sizes it.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes its buffers hold on to.
    pub fn retained_bytes(&self) -> usize {
        self.mix.capacity() * std::mem::size_of::<f32>()
            + self.chain.retained_bytes()
            + self.spare.retained_bytes()
    }

    /// `mix = original_weight * img` in float32.
    pub fn start(&mut self, img: &RgbImage, original_weight: f32) {
        let data = img.as_raw();
        self.mix.clear();
        self.mix
            .extend(data.iter().map(|&v| original_weight * f32::from(v)));
    }

    /// The chain image becomes a copy of `img` (every chain starts from the original).
    pub fn begin_chain(&mut self, img: &RgbImage) {
        self.chain
            .reset(img.width(), img.height())
            .copy_from_slice(img.as_raw());
    }

    /// torchvision's `_apply_op(chain, op, magnitude, interpolation, fill)` on the uint8
    /// tensor: `op` on the chain image with the tensor kernels.
    pub fn apply(&mut self, op: &PixelOp, warp: &TensorWarp) -> Result<()> {
        apply_tensor_op(op, &mut self.chain, &mut self.spare, &mut self.grid, warp)
    }

    /// `mix += weight * chain` in float32 (the product rounded, then the sum).
    pub fn add_chain(&mut self, weight: f32) -> Result<()> {
        let chain = self.chain.as_raw();
        if chain.len() != self.mix.len() {
            return Err(Error::invalid(
                "image",
                format!(
                    "an AugMix chain has {} values where the mix has {}",
                    chain.len(),
                    self.mix.len()
                ),
            ));
        }
        for (m, &v) in self.mix.iter_mut().zip(chain) {
            *m += weight * f32::from(v);
        }
        Ok(())
    }

    /// `img = mix.to(torch.uint8)`: truncated toward zero (the mix's weights sum to 1 up to
    /// float32 rounding, so it stays within 0..=255 but for a last-place excess, saturated).
    pub fn finish(&self, img: &mut RgbImage) -> Result<()> {
        let out = img.as_raw_mut();
        if out.len() != self.mix.len() {
            return Err(Error::invalid(
                "image",
                format!(
                    "the AugMix mix has {} values for an image of {}",
                    self.mix.len(),
                    out.len()
                ),
            ));
        }
        for (o, &m) in out.iter_mut().zip(&self.mix) {
            *o = m as u8;
        }
        Ok(())
    }
}

/// `plan` applied to `img` in place: the whole of torchvision's `AugMix.forward` after its
/// draws.
pub fn augmix(
    plan: &AugMixPlan,
    img: &mut RgbImage,
    scratch: &mut AugMixScratch,
    warp: &TensorWarp,
) -> Result<()> {
    scratch.start(img, plan.original_weight());
    for chain in plan.chains() {
        scratch.begin_chain(img);
        for op in &chain.ops {
            scratch.apply(op, warp)?;
        }
        scratch.add_chain(chain.weight)?;
    }
    scratch.finish(img)
}

/// One op of torchvision's `_apply_op` on a uint8 tensor, with torch's tensor kernels: warps
/// through `grid_sample` (shears about the top-left corner, `center=[0, 0]`; translations and
/// rotations about the centre) into `spare`, then swapped with `img`; the others in place.
pub fn apply_tensor_op(
    op: &PixelOp,
    img: &mut RgbImage,
    spare: &mut RgbImage,
    grid: &mut GridSampler,
    warp: &TensorWarp,
) -> Result<()> {
    let TensorWarp {
        interpolation,
        fill,
        api,
        one_channel,
    } = *warp;
    let mut affine = |img: &RgbImage, spare: &mut RgbImage, translate, shear, center| {
        grid.affine(
            img,
            0.0,
            translate,
            1.0,
            shear,
            center,
            interpolation,
            fill,
            api,
            spare,
        )
    };
    match *op {
        PixelOp::Identity => return Ok(()),
        PixelOp::ShearX { degrees } => {
            affine(img, spare, [0.0, 0.0], [degrees, 0.0], Some([0.0, 0.0]))?;
        }
        PixelOp::ShearY { degrees } => {
            affine(img, spare, [0.0, 0.0], [0.0, degrees], Some([0.0, 0.0]))?;
        }
        PixelOp::TranslateX { pixels } => {
            affine(img, spare, [f64::from(pixels), 0.0], [0.0, 0.0], None)?;
        }
        PixelOp::TranslateY { pixels } => {
            affine(img, spare, [0.0, f64::from(pixels)], [0.0, 0.0], None)?;
        }
        PixelOp::Rotate { degrees } => {
            grid.rotate(img, degrees, None, interpolation, fill, api, spare)?;
        }
        PixelOp::Brightness { factor } => return tensor_color::adjust_brightness(img, factor),
        PixelOp::Color { .. } if one_channel => return Ok(()),
        PixelOp::Color { factor } => return tensor_color::adjust_saturation(img, factor, api),
        PixelOp::Contrast { factor } if one_channel => {
            return tensor_color::adjust_contrast_one_channel(img, factor, api)
        }
        PixelOp::Contrast { factor } => return tensor_color::adjust_contrast(img, factor, api),
        PixelOp::Sharpness { factor } => {
            return tensor_color::adjust_sharpness(img, factor, api, spare)
        }
        PixelOp::Posterize { bits } => return tensor_color::posterize(img, bits),
        PixelOp::Solarize { threshold } => return tensor_color::solarize(img, threshold),
        PixelOp::AutoContrast => {
            tensor_color::autocontrast(img, api);
            return Ok(());
        }
        PixelOp::Equalize => {
            tensor_color::equalize(img);
            return Ok(());
        }
        PixelOp::Invert => {
            super::color::invert(img);
            return Ok(());
        }
    }
    // Only the warps reach here: their output is in `spare`.
    std::mem::swap(img, spare);
    Ok(())
}
