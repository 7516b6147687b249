//! The colour ops of a stage: torchvision's colour transforms on the u8 staging image, with
//! Pillow's arithmetic (the kernels of [`crate::augment::color`]).
//!
//! Must not change the image's size or allocate per sample (sharpness's rows live in the
//! [`StageScratch`]).

use super::{check_p, in_op, StageScratch};
use crate::augment::color;
use crate::augment::policy::{draw_p, draw_p_item, ColorJitter, ColorStep};
use crate::error::{Error, Result};
use crate::image::RgbImage;
use crate::rng::SampleRng;
use crate::spec::{JitterArg, Op, OpSpec};

/// A colour op, parameters checked.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::spec) enum ColorOp {
    ColorJitter(ColorJitter),
    Grayscale,
    RandomGrayscale { p: f64 },
    Posterize { bits: u8, p: f64 },
    Solarize { threshold: f64, p: f64 },
    Equalize { p: f64 },
    Autocontrast { p: f64 },
    Sharpness { factor: f64, p: f64 },
    Invert { p: f64 },
}

/// A `ColorJitter` argument resolved as torchvision's `_check_input` does.
fn jitter_range(name: &'static str, arg: JitterArg) -> Result<Option<(f64, f64)>> {
    match arg {
        JitterArg::Range([lo, hi]) => Ok(Some((lo, hi))),
        // The policy owns the single-number rule (clip at 0, hue's bound); ask it for this one.
        JitterArg::Number(v) => {
            let (b, c, s, h) = match name {
                "brightness" => ColorJitter::from_scalars(v, 0.0, 0.0, 0.0),
                "contrast" => ColorJitter::from_scalars(0.0, v, 0.0, 0.0),
                "saturation" => ColorJitter::from_scalars(0.0, 0.0, v, 0.0),
                _ => ColorJitter::from_scalars(0.0, 0.0, 0.0, v),
            }?
            .ranges();
            Ok(b.or(c).or(s).or(h))
        }
    }
}

impl ColorOp {
    /// `Ok(None)`: `op` is not a colour op.
    pub(super) fn plan(op: &OpSpec) -> Result<Option<Self>> {
        Ok(Some(match op {
            OpSpec::ColorJitter {
                brightness,
                contrast,
                saturation,
                hue,
            } => {
                let jitter = (|| {
                    ColorJitter::from_ranges(
                        jitter_range("brightness", *brightness)?,
                        jitter_range("contrast", *contrast)?,
                        jitter_range("saturation", *saturation)?,
                        jitter_range("hue", *hue)?,
                    )
                })()
                .map_err(|e| in_op("ColorJitter", e))?;
                ColorOp::ColorJitter(jitter)
            }
            // The channel count it leaves is the plan's (`output_channels`): the image stays
            // three-channel here, and a one-channel sample keeps channel 0 at the end.
            OpSpec::Grayscale { .. } => ColorOp::Grayscale,
            OpSpec::RandomGrayscale { p } => ColorOp::RandomGrayscale {
                p: check_p("RandomGrayscale", *p)?,
            },
            OpSpec::RandomPosterize { bits, p } => {
                let bits = u8::try_from(*bits)
                    .ok()
                    .filter(|b| (1..=8).contains(b))
                    .ok_or_else(|| {
                        Error::invalid(
                            "bits",
                            format!("RandomPosterize: {bits} is not between 1 and 8"),
                        )
                    })?;
                ColorOp::Posterize {
                    bits,
                    p: check_p("RandomPosterize", *p)?,
                }
            }
            OpSpec::RandomSolarize { threshold, p } => {
                if !threshold.is_finite() {
                    return Err(Error::invalid(
                        "threshold",
                        format!("RandomSolarize: {threshold} is not a finite number"),
                    ));
                }
                ColorOp::Solarize {
                    threshold: *threshold,
                    p: check_p("RandomSolarize", *p)?,
                }
            }
            OpSpec::RandomEqualize { p } => ColorOp::Equalize {
                p: check_p("RandomEqualize", *p)?,
            },
            OpSpec::RandomAutocontrast { p } => ColorOp::Autocontrast {
                p: check_p("RandomAutocontrast", *p)?,
            },
            OpSpec::RandomAdjustSharpness {
                sharpness_factor,
                p,
            } => {
                if !(sharpness_factor.is_finite() && *sharpness_factor >= 0.0) {
                    return Err(Error::invalid(
                        "sharpness_factor",
                        format!(
                            "RandomAdjustSharpness: {sharpness_factor} is not a finite \
                             non-negative number"
                        ),
                    ));
                }
                ColorOp::Sharpness {
                    factor: *sharpness_factor,
                    p: check_p("RandomAdjustSharpness", *p)?,
                }
            }
            OpSpec::RandomInvert { p } => ColorOp::Invert {
                p: check_p("RandomInvert", *p)?,
            },
            _ => return Ok(None),
        }))
    }

    /// The span this op runs in.
    pub(super) fn span(&self) -> Op {
        match self {
            ColorOp::ColorJitter(_) => Op::ColorJitter,
            ColorOp::Grayscale => Op::Grayscale,
            ColorOp::RandomGrayscale { .. } => Op::RandomGrayscale,
            ColorOp::Posterize { .. } => Op::RandomPosterize,
            ColorOp::Solarize { .. } => Op::RandomSolarize,
            ColorOp::Equalize { .. } => Op::RandomEqualize,
            ColorOp::Autocontrast { .. } => Op::RandomAutocontrast,
            ColorOp::Sharpness { .. } => Op::RandomAdjustSharpness,
            ColorOp::Invert { .. } => Op::RandomInvert,
        }
    }

    /// Draws this op's parameters from `rng` (torchvision's draws, in its order and number:
    /// one coin per `Random*` op even at `p` 0 or 1, `randperm(4)` and a factor per enabled
    /// adjustment for `ColorJitter`) and applies it to `img` in place.
    ///
    /// The coins are v1's comparisons (`draw_p` for `RandomGrayscale`, `draw_p_item` for the
    /// others); v2 compares in float32 throughout, which differs only for the one draw equal
    /// to `p` narrowed to float32.
    pub(super) fn run(
        &self,
        img: &mut RgbImage,
        scratch: &mut StageScratch,
        rng: &mut SampleRng,
    ) -> Result<()> {
        match *self {
            ColorOp::ColorJitter(jitter) => {
                let plan = jitter.draw(rng);
                for step in plan.steps() {
                    match step {
                        ColorStep::Brightness(f) => color::adjust_brightness(img, f)?,
                        ColorStep::Contrast(f) => color::adjust_contrast(img, f)?,
                        ColorStep::Saturation(f) => color::adjust_saturation(img, f)?,
                        ColorStep::Hue(f) => color::adjust_hue(img, f)?,
                    }
                }
            }
            ColorOp::Grayscale => color::to_grayscale_rgb(img),
            ColorOp::RandomGrayscale { p } => {
                if draw_p(rng, p) {
                    color::to_grayscale_rgb(img);
                }
            }
            ColorOp::Posterize { bits, p } => {
                if draw_p_item(rng, p) {
                    color::posterize(img, bits)?;
                }
            }
            ColorOp::Solarize { threshold, p } => {
                if draw_p_item(rng, p) {
                    color::solarize(img, threshold);
                }
            }
            ColorOp::Equalize { p } => {
                if draw_p_item(rng, p) {
                    color::equalize(img);
                }
            }
            ColorOp::Autocontrast { p } => {
                if draw_p_item(rng, p) {
                    color::autocontrast(img);
                }
            }
            ColorOp::Sharpness { factor, p } => {
                if draw_p_item(rng, p) {
                    color::adjust_sharpness(img, factor, &mut scratch.color)?;
                }
            }
            ColorOp::Invert { p } => {
                if draw_p_item(rng, p) {
                    color::invert(img);
                }
            }
        }
        Ok(())
    }
}
