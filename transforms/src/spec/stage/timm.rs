//! timm's `RandAugment`, `AutoAugment` and `AugMixAugment` in a stage: the spec checked into a
//! [`TimmRandAugment`], [`TimmAutoAugment`] or [`TimmAugMix`], its plan drawn from the sample's
//! generator, and each op that runs carried out with the Pillow-exact kernels of
//! [`crate::augment::color`] and [`crate::augment::geometry`] with timm's arguments, in a
//! nested span `<policy>/<Op>` (`TimmAutoAugment/Rotate`, [`OpObserver::enter_named`]). AugMix's
//! chains run on the chain image of [`StageScratch::timm_mix`] and are mixed as timm mixes them
//! ([`crate::augment::timm_mix`]: numpy's float32 sum, Pillow's `Image.blend`).
//!
//! timm's ops on a PIL image, as computed here:
//! - Rotate: `img.rotate(degrees, resample, fillcolor)`, Pillow's rotation about the centre
//!   (the kernel torchvision's PIL rotate uses);
//! - ShearX/Y, TranslateX/Y(Rel): `img.transform(size, AFFINE, matrix, resample, fillcolor)`
//!   with timm's matrices (`(1, f, 0, 0, 1, 0)`: a shear about the top-left corner; a float
//!   offset, which Pillow samples);
//! - the colour ops: Pillow's ImageOps and ImageEnhance kernels, SolarizeAdd's table;
//! - GaussianBlur, GaussianBlurRand: `img.filter(ImageFilter.GaussianBlur(radius))`, Pillow's
//!   extended box blurs ([`crate::augment::box_blur`]).
//!
//! One difference, on purpose: a Posterize level of 0 bits or fewer (PosterizeIncreasing at
//! magnitude 10, reached by timm's `rand-m9-mstd0.5-inc1` about one call in 45, and by AugMix's
//! uniform magnitudes about one op in 13 million) makes a black image, what
//! `ImageOps.posterize` computed up to Pillow 12 and what timm's level function means ("keep 0
//! MSB"); Pillow 13 raises `ValueError` there instead, which fails the whole sample in timm. 8
//! bits or more leave the image, as timm returns it.
//!
//! Must not allocate per sample once warm (warps write [`StageScratch::spare`] and swap it
//! with the image they work on; AugMix's buffers only grow), nor draw outside timm's order:
//! the plan is drawn whole before the first op runs (timm's ops draw only what the plan holds:
//! the filter is drawn with the rest, and so is GaussianBlurRand's radius, which timm's op
//! draws right after its level function).

use super::{in_op, Domain, StageScratch};
use crate::augment::box_blur::PillowGaussianBlur;
use crate::augment::color::{self, ColorScratch};
use crate::augment::geometry::{AffineMatrix, AffineWarp, Interpolation};
use crate::augment::policy::{
    TimmAugMix, TimmAugmentOp, TimmAutoAugment, TimmOpKind, TimmPlan, TimmPolicyKind,
    TimmRandAugment, TimmStep,
};
use crate::augment::timm_mix::pillow_blend;
use crate::error::{Error, Result};
use crate::image::RgbImage;
use crate::rng::SampleRng;
use crate::spec::{MagnitudeStd, OpObserver, OpSpec, TimmAugmentOpSpec, TimmInterpolation};

/// One of timm's policies, parameters checked.
#[derive(Clone, Debug, PartialEq)]
enum TimmPolicy {
    Rand(TimmRandAugment),
    Auto(TimmAutoAugment),
    AugMix(TimmAugMix),
}

/// timm's `RandAugment`, `AutoAugment` or `AugMixAugment`, parameters checked.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::spec) struct TimmOp(TimmPolicy);

impl TimmOp {
    /// `Ok(None)`: `op` is not one of timm's policies. After `ToImage` they are refused:
    /// timm's ops call Pillow's methods and fail on a tensor.
    pub(super) fn plan(op: &OpSpec, domain: Domain) -> Result<Option<Self>> {
        let policy = if let Some(p) = plan_timm_rand_augment(op)? {
            TimmPolicy::Rand(p)
        } else if let Some(p) = plan_timm_auto_augment(op)? {
            TimmPolicy::Auto(p)
        } else if let Some(p) = plan_timm_augmix(op)? {
            TimmPolicy::AugMix(p)
        } else {
            return Ok(None);
        };
        let op = TimmOp(policy);
        if domain.tensor.is_some() {
            let name = op.span().name();
            return Err(Error::invalid(
                name,
                format!(
                    "timm's {} takes a PIL image (its ops fail on a tensor): put it before \
                     ToImage/PILToTensor",
                    name.strip_prefix("Timm").unwrap_or(name)
                ),
            ));
        }
        Ok(Some(op))
    }

    /// The op's own span.
    pub(super) fn span(&self) -> crate::spec::Op {
        match self.0 {
            TimmPolicy::Rand(_) => crate::spec::Op::TimmRandAugment,
            TimmPolicy::Auto(_) => crate::spec::Op::TimmAutoAugment,
            TimmPolicy::AugMix(_) => crate::spec::Op::TimmAugMix,
        }
    }

    /// Draws the sample's plan and applies the ops that run to `img`, each in its named span
    /// (`TimmRandAugment/Rotate`); AugMix's chains run on the stage scratch's chain image and
    /// are mixed into `img`.
    pub(super) fn run(
        &self,
        img: &mut RgbImage,
        scratch: &mut StageScratch,
        rng: &mut SampleRng,
        obs: &mut dyn OpObserver,
    ) -> Result<()> {
        let name = self.span().name();
        let StageScratch {
            color,
            spare,
            warp,
            timm_mix,
            pillow_blur,
            ..
        } = scratch;
        let mut kernels = Kernels {
            warp,
            color,
            spare,
            blur: pillow_blur,
        };
        match &self.0 {
            TimmPolicy::Rand(p) => {
                let plan = p.draw(rng);
                kernels.run(&plan, TimmPolicyKind::RandAugment, img, obs)
            }
            TimmPolicy::Auto(p) => {
                let plan = p.draw(rng);
                kernels.run(&plan.steps, TimmPolicyKind::AutoAugment, img, obs)
            }
            TimmPolicy::AugMix(p) => {
                let plan = p.draw(rng);
                let kind = TimmPolicyKind::AugMix;
                if plan.blended() {
                    // _apply_blended: each chain from the original, blended into the image.
                    timm_mix.keep_original(img);
                    let weights = plan.blended_weights();
                    for (chain, &w) in plan.chains().iter().zip(&weights) {
                        let aug = timm_mix.begin_chain_from_original();
                        kernels.run(chain, kind, aug, obs)?;
                        pillow_blend(img.as_raw_mut(), timm_mix.chain().as_raw(), w)
                            .map_err(|e| in_op(name, e))?;
                    }
                    Ok(())
                } else {
                    // _apply_basic: the float32 mix of the chains, blended with the image.
                    timm_mix.start_mix(img);
                    for (chain, &mw) in plan.chains().iter().zip(plan.mixing_weights()) {
                        let aug = timm_mix.begin_chain(img);
                        kernels.run(chain, kind, aug, obs)?;
                        timm_mix.add_chain(mw).map_err(|e| in_op(name, e))?;
                    }
                    timm_mix
                        .finish_mix(img, plan.m())
                        .map_err(|e| in_op(name, e))
                }
            }
        }
    }
}

/// The stage scratch the ops' kernels use.
struct Kernels<'a> {
    warp: &'a mut AffineWarp,
    color: &'a mut ColorScratch,
    spare: &'a mut RgbImage,
    blur: &'a mut PillowGaussianBlur,
}

impl Kernels<'_> {
    /// The plan's applied steps on `img`, in order, each in its span named after `policy`.
    fn run(
        &mut self,
        plan: &TimmPlan,
        policy: TimmPolicyKind,
        img: &mut RgbImage,
        obs: &mut dyn OpObserver,
    ) -> Result<()> {
        let op_name = match policy {
            TimmPolicyKind::RandAugment => "TimmRandAugment",
            TimmPolicyKind::AutoAugment => "TimmAutoAugment",
            TimmPolicyKind::AugMix => "TimmAugMix",
        };
        for step in plan.steps().filter(|s| s.applied) {
            let name = step.kind.span_name_in(policy);
            obs.enter_named(name);
            let done = apply_timm_step(step, img, self.warp, self.color, self.spare, self.blur)
                .map_err(|e| in_op(op_name, e));
            obs.exit_named(name);
            done?;
        }
        Ok(())
    }
}

/// `ops` checked, errors naming the op (`TimmAutoAugment: policy[2][0] (Rotate): ...`);
/// `at(i)` names op `i`.
fn checked_ops(
    op: &str,
    specs: &[TimmAugmentOpSpec],
    at: impl Fn(usize) -> String,
) -> Result<Vec<TimmAugmentOp>> {
    specs
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            augment_op(spec).map_err(|e| match e {
                Error::InvalidArgument { name, reason } => Error::InvalidArgument {
                    name,
                    reason: format!("{op}: {} ({}): {reason}", at(i), spec.name),
                },
                other => other,
            })
        })
        .collect()
}

/// The policy a `TimmRandAugment` spec describes, checked; `Ok(None)` for any other op. Errors
/// name the argument (`ops[2].name: ...`).
pub fn plan_timm_rand_augment(op: &OpSpec) -> Result<Option<TimmRandAugment>> {
    const NAME: &str = "TimmRandAugment";
    let OpSpec::TimmRandAugment {
        ops,
        num_layers,
        choice_weights,
    } = op
    else {
        return Ok(None);
    };
    let max = crate::augment::policy::MAX_TIMM_LAYERS as i64;
    let layers = u32::try_from(*num_layers)
        .ok()
        .filter(|n| i64::from(*n) <= max)
        .ok_or_else(|| {
            Error::invalid(
                "num_layers",
                format!("{NAME}: {num_layers} is not in [0, {max}]"),
            )
        })?;
    let checked = checked_ops(NAME, ops, |i| format!("ops[{i}]"))?;
    TimmRandAugment::new(checked, layers, choice_weights.as_deref())
        .map(Some)
        .map_err(|e| in_op(NAME, e))
}

/// The policy a `TimmAutoAugment` spec describes, checked; `Ok(None)` for any other op.
/// Errors name the op (`policy[3][1] (Rotate): ...`).
pub fn plan_timm_auto_augment(op: &OpSpec) -> Result<Option<TimmAutoAugment>> {
    const NAME: &str = "TimmAutoAugment";
    let OpSpec::TimmAutoAugment { policy } = op else {
        return Ok(None);
    };
    let checked = policy
        .iter()
        .enumerate()
        .map(|(i, sub)| checked_ops(NAME, sub, |j| format!("policy[{i}][{j}]")))
        .collect::<Result<Vec<_>>>()?;
    TimmAutoAugment::new(checked)
        .map(Some)
        .map_err(|e| in_op(NAME, e))
}

/// The policy a `TimmAugMix` spec describes, checked; `Ok(None)` for any other op.
pub fn plan_timm_augmix(op: &OpSpec) -> Result<Option<TimmAugMix>> {
    const NAME: &str = "TimmAugMix";
    let OpSpec::TimmAugMix {
        ops,
        alpha,
        width,
        depth,
        blended,
    } = op
    else {
        return Ok(None);
    };
    let checked = checked_ops(NAME, ops, |i| format!("ops[{i}]"))?;
    TimmAugMix::new(checked, *alpha, *width, *depth, *blended)
        .map(Some)
        .map_err(|e| in_op(NAME, e))
}

/// One `AugmentOp` spec, checked.
fn augment_op(spec: &TimmAugmentOpSpec) -> Result<TimmAugmentOp> {
    let kind = TimmOpKind::from_name(&spec.name)?;
    let magnitude_std = match &spec.magnitude_std {
        MagnitudeStd::Number(v) => *v,
        MagnitudeStd::Word(w) if w == "inf" => f64::INFINITY,
        MagnitudeStd::Word(w) => {
            return Err(Error::invalid(
                "magnitude_std",
                format!("{w:?}: give a number, or \"inf\" for uniform sampling"),
            ))
        }
    };
    let filter = |name: &str| match name {
        "nearest" => Ok(Interpolation::Nearest),
        "bilinear" => Ok(Interpolation::Bilinear),
        "bicubic" => Ok(Interpolation::Bicubic),
        other => Err(Error::invalid(
            "interpolation",
            format!(
                "{other:?}: Pillow's transform and rotate take NEAREST, BILINEAR and BICUBIC only"
            ),
        )),
    };
    let mut filters = [Interpolation::Bilinear; crate::augment::policy::timm::MAX_TIMM_FILTERS];
    let count = match &spec.interpolation {
        TimmInterpolation::One(name) => {
            filters[0] = filter(name)?;
            1
        }
        TimmInterpolation::Choice(names) => {
            for (slot, name) in filters.iter_mut().zip(names) {
                *slot = filter(name)?;
            }
            names.len()
        }
    };
    let filters = filters.get(..count).ok_or_else(|| {
        Error::invalid(
            "interpolation",
            format!("{count} filters: give one, or a choice of 2 or 3"),
        )
    })?;
    let fill = match &spec.fill {
        crate::spec::Fill::PerChannel(v) if v.len() != 3 => {
            return Err(Error::invalid(
                "fill",
                format!(
                    "{} values: timm's img_mean is a fillcolor of 3 (one per channel)",
                    v.len()
                ),
            ))
        }
        f => f.rgb()?,
    };
    TimmAugmentOp::new(
        kind,
        spec.prob,
        spec.magnitude,
        magnitude_std,
        spec.magnitude_max,
        spec.translate_pct,
        spec.translate_const,
        fill,
        filters,
    )
}

/// timm's op `kind` with its level argument `arg` (see
/// [`TimmStep::arg`](crate::augment::policy::TimmStep::arg)) on `img`, as timm's
/// `NAME_TO_OP[name](img, arg, fillcolor=fill, resample=interpolation)` computes it on a PIL
/// image; `interpolation` only matters for the warps (None: BICUBIC, timm's default filter).
/// For checking against timm: the loader runs the same code through its stage scratch.
pub fn apply_timm_op(
    kind: TimmOpKind,
    arg: Option<f64>,
    interpolation: Option<Interpolation>,
    fill: [u8; 3],
    img: &mut RgbImage,
) -> Result<()> {
    let step = TimmStep {
        op: 0,
        kind,
        applied: true,
        magnitude: 0.0,
        arg,
        interpolation,
        fill,
    };
    apply_timm_step(
        &step,
        img,
        &mut AffineWarp::new(),
        &mut ColorScratch::new(),
        &mut RgbImage::new(),
        &mut PillowGaussianBlur::new(),
    )
}

/// The step's op on `img`. Warps write `spare`, which then trades places with `img`; the
/// colour ops work in place.
fn apply_timm_step(
    step: &TimmStep,
    img: &mut RgbImage,
    warp: &mut AffineWarp,
    color: &mut ColorScratch,
    spare: &mut RgbImage,
    blur: &mut PillowGaussianBlur,
) -> Result<()> {
    use TimmOpKind as K;
    let arg = || {
        step.arg.ok_or_else(|| {
            Error::invalid(
                "arg",
                format!("{} takes a level argument", step.kind.name()),
            )
        })
    };
    let interpolation = step.interpolation.unwrap_or(Interpolation::Bicubic);
    let (width, height) = (f64::from(img.width()), f64::from(img.height()));
    let matrix: AffineMatrix = match step.kind {
        K::AutoContrast => {
            color::autocontrast(img);
            return Ok(());
        }
        K::Equalize => {
            color::equalize(img);
            return Ok(());
        }
        K::Invert => {
            color::invert(img);
            return Ok(());
        }
        K::Posterize | K::PosterizeIncreasing | K::PosterizeOriginal => {
            let bits = arg()?;
            if bits >= 8.0 {
                return Ok(());
            }
            if bits < 1.0 {
                // Pillow 12's table for bits <= 0 (`i & ~(2 ** (8 - bits) - 1)`): all zero.
                img.as_raw_mut().fill(0);
                return Ok(());
            }
            return color::posterize(img, bits as u8);
        }
        K::Solarize | K::SolarizeIncreasing => {
            color::solarize(img, arg()?);
            return Ok(());
        }
        K::SolarizeAdd => {
            // `min(128, int(...))` of a non-negative level: 0..=128, whole.
            let add = arg()?.clamp(0.0, 255.0) as u32;
            color::solarize_add(img, add, 128);
            return Ok(());
        }
        K::Color | K::ColorIncreasing => return color::adjust_saturation(img, arg()?),
        K::Contrast | K::ContrastIncreasing => return color::adjust_contrast(img, arg()?),
        K::Brightness | K::BrightnessIncreasing => return color::adjust_brightness(img, arg()?),
        K::Sharpness | K::SharpnessIncreasing => {
            return color::adjust_sharpness(img, arg()?, color)
        }
        K::GaussianBlur | K::GaussianBlurRand => return blur.apply(img, arg()?),
        K::Desaturate => {
            // desaturate(): min(1, max(0, 1 - level)), then ImageEnhance.Color.
            let factor = 1.0 - arg()?;
            let factor = if 0.0 > factor { 0.0 } else { factor };
            let factor = if factor < 1.0 { factor } else { 1.0 };
            return color::adjust_saturation(img, factor);
        }
        K::Rotate => {
            warp.rotate(
                img.view(),
                arg()?,
                None,
                false,
                interpolation,
                step.fill,
                spare,
            )?;
            std::mem::swap(img, spare);
            return Ok(());
        }
        K::ShearX => [1.0, arg()?, 0.0, 0.0, 1.0, 0.0],
        K::ShearY => [1.0, 0.0, 0.0, arg()?, 1.0, 0.0],
        K::TranslateX => [1.0, 0.0, arg()?, 0.0, 1.0, 0.0],
        K::TranslateY => [1.0, 0.0, 0.0, 0.0, 1.0, arg()?],
        // translate_x_rel: pixels = pct * img.size[0].
        K::TranslateXRel => [1.0, 0.0, arg()? * width, 0.0, 1.0, 0.0],
        K::TranslateYRel => [1.0, 0.0, 0.0, 0.0, 1.0, arg()? * height],
    };
    warp.warp(img.view(), &matrix, interpolation, step.fill, spare)?;
    std::mem::swap(img, spare);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> RgbImage {
        let data = (0..3 * 7 * 5).map(|i| (i * 37 % 256) as u8).collect();
        RgbImage::from_raw(7, 5, data).expect("size")
    }

    #[test]
    fn posterize_levels_outside_pillows_range() {
        let mut img = image();
        apply_timm_op(
            TimmOpKind::PosterizeOriginal,
            Some(8.0),
            None,
            [0; 3],
            &mut img,
        )
        .expect("runs");
        assert_eq!(img, image(), "8 bits: timm returns the image");
        apply_timm_op(
            TimmOpKind::PosterizeIncreasing,
            Some(0.0),
            None,
            [0; 3],
            &mut img,
        )
        .expect("runs");
        assert!(img.as_raw().iter().all(|&v| v == 0), "0 bits: black");
        let mut img = image();
        apply_timm_op(TimmOpKind::Posterize, Some(3.0), None, [0; 3], &mut img).expect("runs");
        assert!(img.as_raw().iter().all(|&v| v & 0x1f == 0));
    }

    #[test]
    fn whole_translations_shift_and_fill() {
        let mut img = image();
        let fill = [1, 2, 3];
        apply_timm_op(
            TimmOpKind::TranslateX,
            Some(2.0),
            Some(Interpolation::Bicubic),
            fill,
            &mut img,
        )
        .expect("runs");
        let src = image();
        for y in 0..5usize {
            for x in 0..7usize {
                let got = &img.as_raw()[3 * (7 * y + x)..][..3];
                if x + 2 < 7 {
                    assert_eq!(got, &src.as_raw()[3 * (7 * y + x + 2)..][..3]);
                } else {
                    assert_eq!(got, fill);
                }
            }
        }
    }

    #[test]
    fn a_missing_argument_is_an_error_not_a_panic() {
        let mut img = image();
        let err =
            apply_timm_op(TimmOpKind::Rotate, None, None, [0; 3], &mut img).expect_err("refused");
        assert!(
            err.to_string().contains("Rotate takes a level argument"),
            "{err}"
        );
    }
}
