//! The colour ops of a stage: torchvision's colour transforms on the u8 staging image, with
//! Pillow's arithmetic (the kernels of [`crate::augment::color`]) on a PIL image, or torch's
//! (those of [`crate::augment::tensor_color`]) after `ToImage` ([`Domain`]).
//!
//! `JPEG` lives here too: a pixel op in place, the same pixels in both domains (Pillow and
//! torchvision's `encode_jpeg` configure libjpeg alike).
//!
//! Must not change the image's size or allocate per sample (sharpness's rows and the JPEG
//! round trip's buffer live in the [`StageScratch`]).

use super::{check_p, in_op, Domain, StageScratch};
use crate::augment::policy::Api;
use crate::augment::policy::{draw_p, draw_p_item, randperm, ColorJitter, ColorStep};
use crate::augment::{color, tensor_color};
use crate::encode::JpegRoundTrip;
use crate::error::{Error, Result};
use crate::image::RgbImage;
use crate::rng::{SampleRng, TorchDraws};
use crate::spec::{JitterArg, Op, OpSpec};

/// A colour op, parameters checked, with the kernels of the domain it stands in.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::spec) struct ColorOp {
    kind: ColorKind,
    /// `None`: Pillow's arithmetic; else torch's tensor kernels of that API.
    tensor: Option<Api>,
    one_channel: bool,
}

/// What a colour op does; parameters checked (`Jpeg`: `1 <= min <= max <= 100`).
#[derive(Clone, Debug, PartialEq)]
enum ColorKind {
    ColorJitter(ColorJitter),
    Grayscale,
    RandomGrayscale { p: f64 },
    Posterize { bits: u8, p: f64 },
    Solarize { threshold: f64, p: f64 },
    Equalize { p: f64 },
    Autocontrast { p: f64 },
    Sharpness { factor: f64, p: f64 },
    Invert { p: f64 },
    Jpeg { min: u8, max: u8 },
    ChannelPermutation,
    PhotometricDistort(PhotometricDistort),
}

/// v2's `RandomPhotometricDistort`, its ranges checked.
#[derive(Clone, Copy, Debug, PartialEq)]
struct PhotometricDistort {
    /// brightness, contrast, saturation, hue: in `make_params`' order.
    ranges: [(f64, f64); 4],
    p: f64,
}

/// One `RandomPhotometricDistort` range: finite, ordered, within `[low, high]`.
fn distort_range(
    name: &'static str,
    [lo, hi]: [f64; 2],
    low: f64,
    high: f64,
) -> Result<(f64, f64)> {
    if !(lo.is_finite() && hi.is_finite() && low <= lo && lo <= hi && hi <= high) {
        return Err(Error::invalid(
            name,
            format!(
                "RandomPhotometricDistort: [{lo}, {hi}] is not an ordered range within \
                 [{low}, {high}] (torchvision's kernels refuse a factor outside it)"
            ),
        ));
    }
    Ok((lo, hi))
}

/// The draws of one `RandomPhotometricDistort` call.
struct DistortPlan {
    /// brightness, contrast, saturation, hue factors; `None`: not applied.
    factors: [Option<f64>; 4],
    contrast_before: bool,
    /// `None`: no permutation.
    permutation: Option<[u8; 3]>,
}

impl PhotometricDistort {
    /// `make_params`: per adjustment `torch.rand(1) < p`, then its factor
    /// (`ColorJitter._generate_value`: a float32 uniform); `torch.rand(()) < 0.5` for the
    /// contrast's place; `torch.rand(1) < p`, then `torch.randperm(channels)` (no draw on one
    /// channel).
    fn draw(&self, rng: &mut SampleRng, one_channel: bool) -> DistortPlan {
        let mut factors = [None; 4];
        for (factor, (lo, hi)) in factors.iter_mut().zip(self.ranges) {
            if draw_p(rng, self.p) {
                *factor = Some(f64::from(rng.uniform_f32(lo as f32, hi as f32)));
            }
        }
        let contrast_before = draw_p(rng, 0.5);
        let permutation = draw_p(rng, self.p).then(|| {
            let mut order = [0u8, 1, 2];
            if !one_channel {
                randperm(rng, &mut order);
            }
            order
        });
        DistortPlan {
            factors,
            contrast_before,
            permutation,
        }
    }

    /// `transform`: brightness, contrast (before), saturation, hue, contrast (after), then
    /// the permutation, each with the kernels of the domain (`tensor`: v2's tensor kernels).
    fn run(
        &self,
        img: &mut RgbImage,
        rng: &mut SampleRng,
        tensor: Option<Api>,
        one_channel: bool,
    ) -> Result<()> {
        let plan = self.draw(rng, one_channel);
        let [brightness, contrast, saturation, hue] = plan.factors;
        let contrast_step = |img: &mut RgbImage, f: f64| match tensor {
            None => color::adjust_contrast(img, f),
            Some(api) if one_channel => tensor_color::adjust_contrast_one_channel(img, f, api),
            Some(api) => tensor_color::adjust_contrast(img, f, api),
        };
        if let Some(f) = brightness {
            match tensor {
                None => color::adjust_brightness(img, f)?,
                Some(_) => tensor_color::adjust_brightness(img, f)?,
            }
        }
        if let (Some(f), true) = (contrast, plan.contrast_before) {
            contrast_step(img, f)?;
        }
        // torch's kernels leave one channel alone here (Pillow's keep a gray image gray).
        let tensor_one_channel = tensor.is_some() && one_channel;
        if let (Some(f), false) = (saturation, tensor_one_channel) {
            match tensor {
                None => color::adjust_saturation(img, f)?,
                Some(api) => tensor_color::adjust_saturation(img, f, api)?,
            }
        }
        if let (Some(f), false) = (hue, tensor_one_channel) {
            match tensor {
                None => color::adjust_hue(img, f)?,
                Some(api) => tensor_color::adjust_hue(img, f, api)?,
            }
        }
        if let (Some(f), false) = (contrast, plan.contrast_before) {
            contrast_step(img, f)?;
        }
        if let Some(order) = plan.permutation {
            color::permute_channels(img, order);
        }
        Ok(())
    }
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
    /// `Ok(None)`: `op` is not a colour op. On a tensor, a `RandomSolarize` threshold above
    /// 255 is refused, as torchvision refuses it there.
    pub(super) fn plan(op: &OpSpec, domain: Domain) -> Result<Option<Self>> {
        let Some(kind) = ColorKind::plan(op)? else {
            return Ok(None);
        };
        if let (ColorKind::Solarize { threshold, .. }, Some(_)) = (&kind, domain.tensor) {
            if *threshold > 255.0 {
                return Err(Error::invalid(
                    "threshold",
                    format!(
                        "RandomSolarize: {threshold} is above 255, the largest level of a uint8 \
                         tensor (torchvision refuses it there)"
                    ),
                ));
            }
        }
        Ok(Some(ColorOp {
            kind,
            tensor: domain.tensor,
            one_channel: domain.one_channel,
        }))
    }

    /// The span this op runs in.
    pub(super) fn span(&self) -> Op {
        self.kind.span()
    }

    /// Draws this op's parameters from `rng` and applies it to `img` in place (see
    /// [`ColorKind::run`] and [`ColorKind::run_tensor`]).
    pub(super) fn run(
        &self,
        img: &mut RgbImage,
        scratch: &mut StageScratch,
        rng: &mut SampleRng,
    ) -> Result<()> {
        match self.tensor {
            None => self.kind.run(img, scratch, rng, self.one_channel),
            Some(api) => self
                .kind
                .run_tensor(img, scratch, rng, api, self.one_channel),
        }
    }
}

impl ColorKind {
    /// `Ok(None)`: `op` is not a colour op.
    fn plan(op: &OpSpec) -> Result<Option<Self>> {
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
                ColorKind::ColorJitter(jitter)
            }
            // The channel count it leaves is the plan's (`output_channels`): the image stays
            // three-channel here, and a one-channel sample keeps channel 0 at the end.
            OpSpec::Grayscale { .. } => ColorKind::Grayscale,
            OpSpec::RandomGrayscale { p } => ColorKind::RandomGrayscale {
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
                ColorKind::Posterize {
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
                ColorKind::Solarize {
                    threshold: *threshold,
                    p: check_p("RandomSolarize", *p)?,
                }
            }
            OpSpec::RandomEqualize { p } => ColorKind::Equalize {
                p: check_p("RandomEqualize", *p)?,
            },
            OpSpec::RandomAutocontrast { p } => ColorKind::Autocontrast {
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
                ColorKind::Sharpness {
                    factor: *sharpness_factor,
                    p: check_p("RandomAdjustSharpness", *p)?,
                }
            }
            OpSpec::RandomInvert { p } => ColorKind::Invert {
                p: check_p("RandomInvert", *p)?,
            },
            OpSpec::Jpeg { quality } => {
                let [lo, hi] = quality.range();
                let in_range = |q: i64| u8::try_from(q).ok().filter(|q| (1..=100).contains(q));
                match (in_range(lo), in_range(hi)) {
                    (Some(min), Some(max)) if min <= max => ColorKind::Jpeg { min, max },
                    // torchvision's own message.
                    _ => {
                        return Err(Error::invalid(
                            "quality",
                            format!(
                                "JPEG: quality must be an integer from 1 to 100, got quality \
                                 =[{lo}, {hi}]"
                            ),
                        ))
                    }
                }
            }
            OpSpec::RandomChannelPermutation => ColorKind::ChannelPermutation,
            OpSpec::RandomPhotometricDistort {
                brightness,
                contrast,
                saturation,
                hue,
                p,
            } => ColorKind::PhotometricDistort(PhotometricDistort {
                ranges: [
                    distort_range("brightness", *brightness, 0.0, f64::INFINITY)?,
                    distort_range("contrast", *contrast, 0.0, f64::INFINITY)?,
                    distort_range("saturation", *saturation, 0.0, f64::INFINITY)?,
                    distort_range("hue", *hue, -0.5, 0.5)?,
                ],
                p: check_p("RandomPhotometricDistort", *p)?,
            }),
            _ => return Ok(None),
        }))
    }

    /// The span this op runs in.
    fn span(&self) -> Op {
        match self {
            ColorKind::ColorJitter(_) => Op::ColorJitter,
            ColorKind::Grayscale => Op::Grayscale,
            ColorKind::RandomGrayscale { .. } => Op::RandomGrayscale,
            ColorKind::Posterize { .. } => Op::RandomPosterize,
            ColorKind::Solarize { .. } => Op::RandomSolarize,
            ColorKind::Equalize { .. } => Op::RandomEqualize,
            ColorKind::Autocontrast { .. } => Op::RandomAutocontrast,
            ColorKind::Sharpness { .. } => Op::RandomAdjustSharpness,
            ColorKind::Invert { .. } => Op::RandomInvert,
            ColorKind::Jpeg { .. } => Op::Jpeg,
            ColorKind::ChannelPermutation => Op::RandomChannelPermutation,
            ColorKind::PhotometricDistort(_) => Op::RandomPhotometricDistort,
        }
    }

    /// Draws this op's parameters from `rng` (torchvision's draws, in its order and number:
    /// one coin per `Random*` op even at `p` 0 or 1, `randperm(4)` and a factor per enabled
    /// adjustment for `ColorJitter`, `randperm(3)` for `RandomChannelPermutation` unless
    /// `one_channel`: an `L` image, replicated into three channels) and applies it to `img` in
    /// place.
    ///
    /// The coins are v1's comparisons (`draw_p` for `RandomGrayscale`, `draw_p_item` for the
    /// others); v2 compares in float32 throughout, which differs only for the one draw equal
    /// to `p` narrowed to float32.
    fn run(
        &self,
        img: &mut RgbImage,
        scratch: &mut StageScratch,
        rng: &mut SampleRng,
        one_channel: bool,
    ) -> Result<()> {
        match *self {
            ColorKind::ColorJitter(jitter) => {
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
            ColorKind::Grayscale => color::to_grayscale_rgb(img),
            ColorKind::RandomGrayscale { p } => {
                if draw_p(rng, p) {
                    color::to_grayscale_rgb(img);
                }
            }
            ColorKind::Posterize { bits, p } => {
                if draw_p_item(rng, p) {
                    color::posterize(img, bits)?;
                }
            }
            ColorKind::Solarize { threshold, p } => {
                if draw_p_item(rng, p) {
                    color::solarize(img, threshold);
                }
            }
            ColorKind::Equalize { p } => {
                if draw_p_item(rng, p) {
                    color::equalize(img);
                }
            }
            ColorKind::Autocontrast { p } => {
                if draw_p_item(rng, p) {
                    color::autocontrast(img);
                }
            }
            ColorKind::Sharpness { factor, p } => {
                if draw_p_item(rng, p) {
                    color::adjust_sharpness(img, factor, &mut scratch.color)?;
                }
            }
            ColorKind::Invert { p } => {
                if draw_p_item(rng, p) {
                    color::invert(img);
                }
            }
            ColorKind::Jpeg { min, max } => jpeg(img, scratch, rng, min, max)?,
            ColorKind::ChannelPermutation => permute_channels(img, rng, one_channel),
            ColorKind::PhotometricDistort(distort) => distort.run(img, rng, None, one_channel)?,
        }
        Ok(())
    }

    /// [`ColorKind::run`] on a uint8 tensor: the same draws, torch's kernels of `api`
    /// (truncating float32 blends and gray levels, float HSV for the hue, float32
    /// autocontrast; posterize, solarize, equalize and invert are the same integer ops). On a
    /// one-channel tensor saturation, hue and grayscale leave it as it is and contrast blends
    /// with the mean of its values, as torch's kernels do.
    fn run_tensor(
        &self,
        img: &mut RgbImage,
        scratch: &mut StageScratch,
        rng: &mut SampleRng,
        api: Api,
        one_channel: bool,
    ) -> Result<()> {
        let grayscale = |img: &mut RgbImage| {
            if !one_channel {
                tensor_color::to_grayscale(img, api);
            }
        };
        match *self {
            ColorKind::ColorJitter(jitter) => {
                let plan = jitter.draw(rng);
                for step in plan.steps() {
                    match step {
                        ColorStep::Brightness(f) => tensor_color::adjust_brightness(img, f)?,
                        ColorStep::Contrast(f) if one_channel => {
                            tensor_color::adjust_contrast_one_channel(img, f, api)?
                        }
                        ColorStep::Contrast(f) => tensor_color::adjust_contrast(img, f, api)?,
                        ColorStep::Saturation(_) | ColorStep::Hue(_) if one_channel => {}
                        ColorStep::Saturation(f) => tensor_color::adjust_saturation(img, f, api)?,
                        ColorStep::Hue(f) => tensor_color::adjust_hue(img, f, api)?,
                    }
                }
            }
            ColorKind::Grayscale => grayscale(img),
            ColorKind::RandomGrayscale { p } => {
                if draw_p(rng, p) {
                    grayscale(img);
                }
            }
            ColorKind::Posterize { bits, p } => {
                if draw_p_item(rng, p) {
                    tensor_color::posterize(img, bits)?;
                }
            }
            ColorKind::Solarize { threshold, p } => {
                if draw_p_item(rng, p) {
                    tensor_color::solarize(img, threshold)?;
                }
            }
            ColorKind::Equalize { p } => {
                if draw_p_item(rng, p) {
                    tensor_color::equalize(img);
                }
            }
            ColorKind::Autocontrast { p } => {
                if draw_p_item(rng, p) {
                    tensor_color::autocontrast(img, api);
                }
            }
            ColorKind::Sharpness { factor, p } => {
                if draw_p_item(rng, p) {
                    tensor_color::adjust_sharpness(img, factor, api, &mut scratch.spare)?;
                }
            }
            ColorKind::Invert { p } => {
                if draw_p_item(rng, p) {
                    color::invert(img);
                }
            }
            ColorKind::Jpeg { min, max } => jpeg(img, scratch, rng, min, max)?,
            ColorKind::ChannelPermutation => permute_channels(img, rng, one_channel),
            ColorKind::PhotometricDistort(distort) => {
                distort.run(img, rng, Some(api), one_channel)?
            }
        }
        Ok(())
    }
}

/// `JPEG`'s draw, `torch.randint(min, max + 1, ())` (one draw even for a single quality), then
/// the round trip, made on first use and dropped after a failure (libjpeg-turbo recovers, but a
/// fresh pair costs one sample's time and rules out any state left behind).
fn jpeg(
    img: &mut RgbImage,
    scratch: &mut StageScratch,
    rng: &mut SampleRng,
    min: u8,
    max: u8,
) -> Result<()> {
    let span = u32::from(max.saturating_sub(min)) + 1;
    let quality = u32::from(min) + rng.randint(span);
    let quality = u8::try_from(quality).unwrap_or(max);
    let round_trip = match &mut scratch.jpeg {
        Some(round_trip) => round_trip,
        slot => slot.insert(JpegRoundTrip::new()?),
    };
    let done = round_trip.apply(img, quality);
    if done.is_err() {
        scratch.jpeg = None;
    }
    done
}

/// `RandomChannelPermutation`: `torch.randperm(channels)`, then the channels in that order (the
/// same on a PIL image, whose kernel goes through a tensor, and on a tensor). One channel:
/// `randperm(1)` draws nothing and permutes nothing.
fn permute_channels(img: &mut RgbImage, rng: &mut SampleRng, one_channel: bool) {
    if one_channel {
        return;
    }
    let mut order = [0u8; 3];
    randperm(rng, &mut order);
    color::permute_channels(img, order);
}
