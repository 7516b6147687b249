//! torchvision's automatic augmentation policies in a stage: `TrivialAugmentWide`,
//! `RandAugment`, `AutoAugment` (`AugMix`, which runs torch's tensor kernels, is
//! [`super::augmix`]'s). The
//! draws are [`crate::augment::policy`]'s; the chosen ops run with the colour and geometry
//! kernels ([`apply_pixel_op`]) on a PIL image, or after `ToImage` ([`Domain`]) with torch's
//! tensor kernels of the policy's `api` ([`apply_tensor_op`], as AugMix runs its chains;
//! BICUBIC refused there as torchvision refuses it), each in a nested span named by the policy
//! and the op
//! (`AugmentationSpace::span_name`, e.g. `TrivialAugmentWide/Solarize`), through
//! [`OpObserver::enter_named`](crate::spec::OpObserver::enter_named).
//!
//! Must not allocate per sample once warm (warps write [`StageScratch::spare`] and swap it
//! with the staging image), nor draw outside torchvision's order: a policy makes all its draws
//! before its first op runs, which is torchvision's order too, since its ops draw nothing.

use super::{in_op, tensor_fill, tensor_interpolation, Domain, StageScratch};
use crate::augment::augmix::{apply_tensor_op, TensorWarp};
use crate::augment::color;
use crate::augment::geometry::{parse_fill, Interpolation};
use crate::augment::policy::{
    Api, AugmentationSpace, AutoAugment, PixelOp, RandAugment, TrivialAugmentWide,
};
use crate::error::{Error, Result};
use crate::image::RgbImage;
use crate::rng::SampleRng;
use crate::spec::{Fill, Op, OpObserver, OpSpec};

/// How a policy's warps (shears, translations, rotations) sample and fill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::spec) struct Warp {
    /// torchvision's `interpolation`.
    pub interpolation: Interpolation,
    /// torchvision's `fill` as Pillow applies it on an RGB image.
    pub fill: [u8; 3],
}

/// Whose kernels a policy's ops run with, and how its warps sample and fill.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(in crate::spec) enum PolicyWarp {
    /// On a PIL image: Pillow's.
    Pil(Warp),
    /// On a uint8 tensor (after `ToImage`): torch's tensor kernels.
    Tensor(TensorWarp),
}

impl PolicyWarp {
    /// `op`'s kernels in `domain`, with the policy's `api`: on a tensor, the fill as
    /// torchvision's tensor path takes it (None: no fill channel) and BICUBIC refused.
    fn plan(
        op: &'static str,
        interpolation: Interpolation,
        fill: Option<&Fill>,
        api: Api,
        domain: Domain,
    ) -> Result<Self> {
        if domain.tensor.is_some() {
            return Ok(PolicyWarp::Tensor(TensorWarp {
                interpolation: tensor_interpolation(op, interpolation)?,
                fill: tensor_fill(op, fill)?,
                api,
                one_channel: domain.one_channel,
            }));
        }
        let fill = fill
            .map_or_else(|| parse_fill(None), Fill::rgb)
            .map_err(|e| in_op(op, e))?;
        Ok(PolicyWarp::Pil(Warp {
            interpolation,
            fill,
        }))
    }
}

/// A policy, parameters checked.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::spec) enum PolicyOp {
    TrivialAugmentWide(TrivialAugmentWide, PolicyWarp),
    RandAugment(RandAugment, PolicyWarp),
    AutoAugment(AutoAugment, PolicyWarp),
}

/// `value` as a `u32` when it is in `range`, else an error naming `name` in `op`.
fn count(
    op: &'static str,
    name: &'static str,
    value: i64,
    range: std::ops::RangeInclusive<i64>,
) -> Result<u32> {
    if !range.contains(&value) {
        return Err(Error::invalid(
            name,
            format!(
                "{op}: {value} is not in [{}, {}]",
                range.start(),
                range.end()
            ),
        ));
    }
    u32::try_from(value).map_err(|_| Error::invalid(name, format!("{op}: {value} is negative")))
}

impl PolicyOp {
    /// `Ok(None)`: `op` is not one of these three policies.
    pub(super) fn plan(op: &OpSpec, domain: Domain) -> Result<Option<Self>> {
        Ok(Some(match op {
            OpSpec::TrivialAugmentWide {
                num_magnitude_bins,
                interpolation,
                fill,
                api,
            } => {
                const NAME: &str = "TrivialAugmentWide";
                let bins = count(NAME, "num_magnitude_bins", *num_magnitude_bins, 2..=1 << 24)?;
                let policy = TrivialAugmentWide::new(bins)
                    .map_err(|e| in_op(NAME, e))?
                    .with_api(*api);
                PolicyOp::TrivialAugmentWide(
                    policy,
                    PolicyWarp::plan(NAME, *interpolation, fill.as_ref(), *api, domain)?,
                )
            }
            OpSpec::RandAugment {
                num_ops,
                magnitude,
                num_magnitude_bins,
                interpolation,
                fill,
                api,
            } => {
                const NAME: &str = "RandAugment";
                let max_ops = crate::augment::policy::MAX_RAND_AUGMENT_OPS as i64;
                let ops = count(NAME, "num_ops", *num_ops, 0..=max_ops)?;
                let bins = count(NAME, "num_magnitude_bins", *num_magnitude_bins, 2..=1 << 24)?;
                let magnitude = count(NAME, "magnitude", *magnitude, 0..=i64::from(bins) - 1)?;
                let policy = RandAugment::new(ops, magnitude, bins)
                    .map_err(|e| in_op(NAME, e))?
                    .with_api(*api);
                PolicyOp::RandAugment(
                    policy,
                    PolicyWarp::plan(NAME, *interpolation, fill.as_ref(), *api, domain)?,
                )
            }
            OpSpec::AutoAugment {
                policy,
                interpolation,
                fill,
                api,
            } => PolicyOp::AutoAugment(
                AutoAugment::new(*policy).with_api(*api),
                PolicyWarp::plan("AutoAugment", *interpolation, fill.as_ref(), *api, domain)?,
            ),
            _ => return Ok(None),
        }))
    }

    /// The span the whole policy (its draw and the chosen ops) runs in.
    pub(super) fn span(&self) -> Op {
        match self {
            PolicyOp::TrivialAugmentWide(..) => Op::TrivialAugmentWide,
            PolicyOp::RandAugment(..) => Op::RandAugment,
            PolicyOp::AutoAugment(..) => Op::AutoAugment,
        }
    }

    /// Draws the policy's ops and applies them to `img`, each chosen op in a named span.
    pub(super) fn run(
        &self,
        img: &mut RgbImage,
        scratch: &mut StageScratch,
        rng: &mut SampleRng,
        obs: &mut dyn OpObserver,
    ) -> Result<()> {
        let (width, height) = (img.width(), img.height());
        match self {
            PolicyOp::TrivialAugmentWide(policy, warp) => {
                let op = policy.draw(rng);
                let space = AugmentationSpace::TrivialAugmentWide;
                run_named(space, &op, img, scratch, warp, obs)
            }
            PolicyOp::RandAugment(policy, warp) => {
                let plan = policy.draw(width, height, rng);
                let space = AugmentationSpace::RandAugment;
                plan.as_slice()
                    .iter()
                    .try_for_each(|op| run_named(space, op, img, scratch, warp, obs))
            }
            PolicyOp::AutoAugment(policy, warp) => {
                let plan = policy.draw(width, height, rng);
                let space = AugmentationSpace::AutoAugment;
                plan.as_slice()
                    .iter()
                    .try_for_each(|op| run_named(space, op, img, scratch, warp, obs))
            }
        }
    }
}

/// [`apply_pixel_op`] (or on a tensor [`apply_tensor_op`]) in the span `space` names `op` by.
fn run_named(
    space: AugmentationSpace,
    op: &PixelOp,
    img: &mut RgbImage,
    scratch: &mut StageScratch,
    warp: &PolicyWarp,
    obs: &mut dyn OpObserver,
) -> Result<()> {
    let name = space.span_name(op.kind());
    obs.enter_named(name);
    let done = match warp {
        PolicyWarp::Pil(warp) => apply_pixel_op(op, img, scratch, warp),
        PolicyWarp::Tensor(warp) => {
            apply_tensor_op(op, img, &mut scratch.spare, &mut scratch.grid, warp)
        }
    }
    .map_err(|e| in_op(space.policy_name(), e));
    obs.exit_named(name);
    done
}

/// torchvision's `_apply_op` on a PIL image: `op` applied to `img` with Pillow's kernels. The
/// warps use `warp`'s interpolation and fill and write [`StageScratch::spare`], which then
/// trades places with `img`; the others work in place.
///
/// Shears turn about the top-left corner (`center=[0, 0]`), translations and rotations about
/// the image centre (`F.affine`'s and Pillow's defaults), rotations without `expand`.
pub(in crate::spec) fn apply_pixel_op(
    op: &PixelOp,
    img: &mut RgbImage,
    scratch: &mut StageScratch,
    warp: &Warp,
) -> Result<()> {
    let Warp {
        interpolation,
        fill,
    } = *warp;
    let affine = |scratch: &mut StageScratch, img: &RgbImage, translate, shear, center| {
        scratch.warp.affine(
            img.view(),
            0.0,
            translate,
            1.0,
            shear,
            center,
            interpolation,
            fill,
            &mut scratch.spare,
        )
    };
    match *op {
        PixelOp::Identity => return Ok(()),
        PixelOp::ShearX { degrees } => {
            affine(scratch, img, [0.0, 0.0], [degrees, 0.0], Some([0.0, 0.0]))?;
        }
        PixelOp::ShearY { degrees } => {
            affine(scratch, img, [0.0, 0.0], [0.0, degrees], Some([0.0, 0.0]))?;
        }
        PixelOp::TranslateX { pixels } => {
            affine(scratch, img, [f64::from(pixels), 0.0], [0.0, 0.0], None)?;
        }
        PixelOp::TranslateY { pixels } => {
            affine(scratch, img, [0.0, f64::from(pixels)], [0.0, 0.0], None)?;
        }
        PixelOp::Rotate { degrees } => {
            scratch.warp.rotate(
                img.view(),
                degrees,
                None,
                false,
                interpolation,
                fill,
                &mut scratch.spare,
            )?;
        }
        PixelOp::Brightness { factor } => return color::adjust_brightness(img, factor),
        PixelOp::Color { factor } => return color::adjust_saturation(img, factor),
        PixelOp::Contrast { factor } => return color::adjust_contrast(img, factor),
        PixelOp::Sharpness { factor } => {
            return color::adjust_sharpness(img, factor, &mut scratch.color)
        }
        PixelOp::Posterize { bits } => return color::posterize(img, bits),
        PixelOp::Solarize { threshold } => {
            color::solarize(img, threshold);
            return Ok(());
        }
        PixelOp::AutoContrast => {
            color::autocontrast(img);
            return Ok(());
        }
        PixelOp::Equalize => {
            color::equalize(img);
            return Ok(());
        }
        PixelOp::Invert => {
            color::invert(img);
            return Ok(());
        }
    }
    // Only the warps reach here: their output is in the spare image.
    std::mem::swap(img, &mut scratch.spare);
    Ok(())
}
