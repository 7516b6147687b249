//! timm's `RandAugment` (`timm.data.auto_augment`): the choice of `num_layers` ops among its
//! `AugmentOp`s, then per chosen op the skip coin, the magnitude noise, the clamp, the level
//! function (with its random sign) and, for a warp, the resampling filter; as a plan of
//! [`TimmStep`]s for the kernels (`spec::stage::timm`) to carry out. timm's `AutoAugment`
//! ([`TimmAutoAugment`]: one sub-policy, then its ops' own draws) and `AugMixAugment`
//! ([`TimmAugMix`]: the mixing weights, then per chain its depth, ops and their draws) plan
//! with the same [`TimmAugmentOp::draw`].
//!
//! Reference: timm 1.0's `RandAugment.__call__`, `AutoAugment.__call__`,
//! `AugMixAugment.__call__` and `AugmentOp.__call__`, draw for draw in kind, order and
//! arithmetic (float64 as Python computes, `int()` truncating toward zero):
//!
//! | timm | here |
//! |---|---|
//! | `np.random.choice(ops, n)` (uniform, with replacement) | `randint(len(ops))` per layer |
//! | `np.random.choice(ops, n, replace=False, p=w)` | per layer one `random()` against the cumulative weights of the ops not yet chosen, renormalized (numpy's distribution: successive draws without replacement) |
//! | `prob < 1 and random() > prob` | the same comparison on a 53-bit `random()` |
//! | `random.gauss(m, std)` | `m + cos(2 pi random()) * sqrt(-2 ln(1 - random())) * std` (CPython's formula; its cached second normal is not kept: the same distribution) |
//! | `random.uniform(0, m)` (`magnitude_std == inf`) | `0 + m * random()` |
//! | `max(0, min(m, magnitude_max or 10))` | the same |
//! | `_randomly_negate(v)` | `-v if random() > 0.5 else v` |
//! | `random.choice((BILINEAR, BICUBIC))` | `randint(2)` into the list (no draw for one filter) |
//! | `random.choice(self.policy)` (AutoAugment) | `randint(len(policy))` |
//! | `np.float32(np.random.dirichlet([alpha] * width))` (AugMix) | [`TorchDraws::dirichlet`] (torch's sampler, the same distribution; `alpha` in float32) |
//! | `np.float32(np.random.beta(alpha, alpha))` | the first share of a two-way [`TorchDraws::dirichlet`] |
//! | `np.random.randint(1, 4)` (`depth <= 0`) | `1 + randint(3)` |
//! | `np.random.choice(self.ops, depth, replace=True)` | `randint(len(ops))` per op |
//!
//! The generator is the sample's (any [`TorchDraws`], [`crate::rng::SampleRng`] in the
//! loader): Python's global `random` and numpy's cannot be reproduced, so distributions are
//! what is equal, and python-bindings/tests/test_timm_randaugment.py tests them against
//! timm's own draws.
//!
//! Must not allocate per sample (a plan is a fixed array), touch pixels, or draw from anything
//! but the sample's draws.

use super::super::geometry::Interpolation;
use crate::error::{Error, Result};
use crate::rng::TorchDraws;

/// timm's `_LEVEL_DENOM`: magnitudes are on a 0..10 scale (the clamp's default upper bound).
pub const LEVEL_DENOM: f64 = 10.0;

/// The most layers [`TimmRandAugment`] applies per sample (its plan's capacity).
pub const MAX_TIMM_LAYERS: usize = 16;

/// The most ops a [`TimmRandAugment`] chooses among.
pub const MAX_TIMM_OPS: usize = 64;

/// The most resampling filters one op chooses among per call.
pub const MAX_TIMM_FILTERS: usize = 3;

/// An op of timm's `NAME_TO_OP`, by its name there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum TimmOpKind {
    /// `ImageOps.autocontrast`.
    AutoContrast,
    /// `ImageOps.equalize`.
    Equalize,
    /// `ImageOps.invert`.
    Invert,
    /// `img.rotate(degrees)`, up to 30 degrees at level 10, random sign.
    Rotate,
    /// Keep `int(level / 10 * 4)` bits (0 to 4).
    Posterize,
    /// Keep `4 - int(level / 10 * 4)` bits (4 to 0).
    PosterizeIncreasing,
    /// Keep `int(level / 10 * 4) + 4` bits (4 to 8).
    PosterizeOriginal,
    /// Solarize at `min(256, int(level / 10 * 256))`.
    Solarize,
    /// Solarize at `256 - min(256, int(level / 10 * 256))`.
    SolarizeIncreasing,
    /// Add `min(128, int(level / 10 * 110))` to levels below 128 (capped at 255).
    SolarizeAdd,
    /// `ImageEnhance.Color` at `level / 10 * 1.8 + 0.1`.
    Color,
    /// `ImageEnhance.Color` at `max(0.1, 1 +- level / 10 * 0.9)`.
    ColorIncreasing,
    /// `ImageEnhance.Contrast` at `level / 10 * 1.8 + 0.1`.
    Contrast,
    /// `ImageEnhance.Contrast` at `max(0.1, 1 +- level / 10 * 0.9)`.
    ContrastIncreasing,
    /// `ImageEnhance.Brightness` at `level / 10 * 1.8 + 0.1`.
    Brightness,
    /// `ImageEnhance.Brightness` at `max(0.1, 1 +- level / 10 * 0.9)`.
    BrightnessIncreasing,
    /// `ImageEnhance.Sharpness` at `level / 10 * 1.8 + 0.1`.
    Sharpness,
    /// `ImageEnhance.Sharpness` at `max(0.1, 1 +- level / 10 * 0.9)`.
    SharpnessIncreasing,
    /// Affine `(1, f, 0, 0, 1, 0)`, `f` up to 0.3, random sign (about the top-left corner).
    ShearX,
    /// Affine `(1, 0, 0, f, 1, 0)`.
    ShearY,
    /// Affine `(1, 0, px, 0, 1, 0)`, `px = level / 10 * translate_const`, random sign.
    TranslateX,
    /// Affine `(1, 0, 0, 0, 1, px)`.
    TranslateY,
    /// As `TranslateX` with `px = pct * width`, `pct = level / 10 * translate_pct`.
    TranslateXRel,
    /// As `TranslateY` with `px = pct * height`.
    TranslateYRel,
    /// `ImageEnhance.Color` at `1 - (0.5 + 0.5 * level / 10)` (clamped to 0..=0.5).
    Desaturate,
    /// Pillow's `ImageFilter.GaussianBlur(radius)`, radius `0.1 + level / 10 * 1.9` (clamped
    /// to 0.1..=2).
    GaussianBlur,
    /// Pillow's `ImageFilter.GaussianBlur(radius)`, radius `uniform(0.1, 2 * factor)` drawn
    /// inside the op, `factor = level / 10` (clamped to 0..=1).
    GaussianBlurRand,
}

impl TimmOpKind {
    /// Every op, in declaration order.
    pub const ALL: [TimmOpKind; 27] = [
        TimmOpKind::AutoContrast,
        TimmOpKind::Equalize,
        TimmOpKind::Invert,
        TimmOpKind::Rotate,
        TimmOpKind::Posterize,
        TimmOpKind::PosterizeIncreasing,
        TimmOpKind::PosterizeOriginal,
        TimmOpKind::Solarize,
        TimmOpKind::SolarizeIncreasing,
        TimmOpKind::SolarizeAdd,
        TimmOpKind::Color,
        TimmOpKind::ColorIncreasing,
        TimmOpKind::Contrast,
        TimmOpKind::ContrastIncreasing,
        TimmOpKind::Brightness,
        TimmOpKind::BrightnessIncreasing,
        TimmOpKind::Sharpness,
        TimmOpKind::SharpnessIncreasing,
        TimmOpKind::ShearX,
        TimmOpKind::ShearY,
        TimmOpKind::TranslateX,
        TimmOpKind::TranslateY,
        TimmOpKind::TranslateXRel,
        TimmOpKind::TranslateYRel,
        TimmOpKind::Desaturate,
        TimmOpKind::GaussianBlur,
        TimmOpKind::GaussianBlurRand,
    ];

    /// timm's name (the key of `NAME_TO_OP` and `LEVEL_TO_ARG`).
    pub fn name(self) -> &'static str {
        self.names().0
    }

    /// The profiler span of this op chosen by `TimmRandAugment`: `TimmRandAugment/<name>`
    /// (`'static`, so naming a span per sample allocates nothing).
    pub fn span_name(self) -> &'static str {
        self.span_name_in(TimmPolicyKind::RandAugment)
    }

    /// The profiler span of this op run by `policy`: `<policy's op name>/<name>`
    /// (`TimmAutoAugment/Rotate`), `'static`.
    pub fn span_name_in(self, policy: TimmPolicyKind) -> &'static str {
        let (_, rand, auto, augmix) = self.names();
        match policy {
            TimmPolicyKind::RandAugment => rand,
            TimmPolicyKind::AutoAugment => auto,
            TimmPolicyKind::AugMix => augmix,
        }
    }

    fn names(self) -> (&'static str, &'static str, &'static str, &'static str) {
        macro_rules! names {
            ($($kind:ident),* $(,)?) => {
                match self {
                    $(TimmOpKind::$kind => (
                        stringify!($kind),
                        concat!("TimmRandAugment/", stringify!($kind)),
                        concat!("TimmAutoAugment/", stringify!($kind)),
                        concat!("TimmAugMix/", stringify!($kind)),
                    ),)*
                }
            };
        }
        names!(
            AutoContrast,
            Equalize,
            Invert,
            Rotate,
            Posterize,
            PosterizeIncreasing,
            PosterizeOriginal,
            Solarize,
            SolarizeIncreasing,
            SolarizeAdd,
            Color,
            ColorIncreasing,
            Contrast,
            ContrastIncreasing,
            Brightness,
            BrightnessIncreasing,
            Sharpness,
            SharpnessIncreasing,
            ShearX,
            ShearY,
            TranslateX,
            TranslateY,
            TranslateXRel,
            TranslateYRel,
            Desaturate,
            GaussianBlur,
            GaussianBlurRand,
        )
    }

    /// The op timm names `name`; an error naming `name` for a name timm does not have.
    pub fn from_name(name: &str) -> Result<TimmOpKind> {
        if let Some(kind) = TimmOpKind::ALL.into_iter().find(|k| k.name() == name) {
            return Ok(kind);
        }
        Err(Error::invalid(
            "name",
            format!("{name:?} is not one of timm's auto_augment ops (NAME_TO_OP)"),
        ))
    }

    /// Whether the op warps (and so draws a filter when given a choice of them).
    pub fn is_warp(self) -> bool {
        matches!(
            self,
            TimmOpKind::Rotate
                | TimmOpKind::ShearX
                | TimmOpKind::ShearY
                | TimmOpKind::TranslateX
                | TimmOpKind::TranslateY
                | TimmOpKind::TranslateXRel
                | TimmOpKind::TranslateYRel
        )
    }

    /// Whether `LEVEL_TO_ARG` has no level function for it (AutoContrast, Equalize, Invert:
    /// the op takes no argument).
    pub fn takes_no_level(self) -> bool {
        matches!(
            self,
            TimmOpKind::AutoContrast | TimmOpKind::Equalize | TimmOpKind::Invert
        )
    }
}

/// Which of timm's policies runs an op (its spans are named after it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimmPolicyKind {
    /// `RandAugment` (`TimmRandAugment`).
    RandAugment,
    /// `AutoAugment` (`TimmAutoAugment`).
    AutoAugment,
    /// `AugMixAugment` (`TimmAugMix`).
    AugMix,
}

/// `_randomly_negate(v)`: one `random()`, negative when it is above 0.5.
fn randomly_negate<D: TorchDraws + ?Sized>(v: f64, draws: &mut D) -> f64 {
    if draws.py_random() > 0.5 {
        -v
    } else {
        v
    }
}

/// Python's `max(a, b)` of floats: `b` only when it is greater.
fn py_max(a: f64, b: f64) -> f64 {
    if b > a {
        b
    } else {
        a
    }
}

/// Python's `min(a, b)` of floats: `b` only when it is smaller.
fn py_min(a: f64, b: f64) -> f64 {
    if b < a {
        b
    } else {
        a
    }
}

/// Python's `int(x)` of a float, saturating where Python's would grow (the callers clamp).
fn py_int(x: f64) -> f64 {
    (x as i64) as f64
}

/// One of timm's `AugmentOp`s as `RandAugment` holds it: the op, its probability, magnitude
/// and noise, the clamp, and the hparams its level function and warp read.
#[derive(Clone, Debug, PartialEq)]
pub struct TimmAugmentOp {
    kind: TimmOpKind,
    prob: f64,
    magnitude: f64,
    magnitude_std: f64,
    upper_bound: f64,
    translate_pct: f64,
    translate_const: f64,
    fill: [u8; 3],
    filters: [Interpolation; MAX_TIMM_FILTERS],
    num_filters: usize,
}

/// `value` when finite, else an error naming `name`.
fn finite(name: &'static str, value: f64) -> Result<f64> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(Error::invalid(
            name,
            format!("{value} is not a finite number"),
        ))
    }
}

impl TimmAugmentOp {
    /// `AugmentOp(name, prob, magnitude, hparams)` with timm's hparams already read:
    /// `magnitude_std` (0 or below: no noise; infinite: uniform in `[0, magnitude]`),
    /// `magnitude_max` (`None` or 0: timm's 10), `translate_pct`, `translate_const`, the fill
    /// (`img_mean`), and the warps' filters (`interpolation`: one, or a choice drawn per call).
    ///
    /// Errors name the argument: `prob` outside `[0, 1]`, a non-finite number (but an infinite
    /// `magnitude_std` or `magnitude_max`), no filter or more than [`MAX_TIMM_FILTERS`].
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kind: TimmOpKind,
        prob: f64,
        magnitude: f64,
        magnitude_std: f64,
        magnitude_max: Option<f64>,
        translate_pct: f64,
        translate_const: f64,
        fill: [u8; 3],
        interpolation: &[Interpolation],
    ) -> Result<Self> {
        if !(0.0..=1.0).contains(&prob) {
            return Err(Error::invalid(
                "prob",
                format!("{prob} is not a probability in [0, 1]"),
            ));
        }
        if magnitude_std.is_nan() {
            return Err(Error::invalid("magnitude_std", "NaN is not a number"));
        }
        // `self.magnitude_max or _LEVEL_DENOM`: None and 0 both mean 10.
        let upper_bound = match magnitude_max {
            Some(m) if m.is_nan() => {
                return Err(Error::invalid("magnitude_max", "NaN is not a number"))
            }
            Some(m) if m != 0.0 => m,
            _ => LEVEL_DENOM,
        };
        let mut filters = [Interpolation::Bilinear; MAX_TIMM_FILTERS];
        if interpolation.is_empty() || interpolation.len() > MAX_TIMM_FILTERS {
            return Err(Error::invalid(
                "interpolation",
                format!(
                    "{} filters: give one, or a choice of 2 or 3 (NEAREST, BILINEAR, BICUBIC)",
                    interpolation.len()
                ),
            ));
        }
        filters[..interpolation.len()].copy_from_slice(interpolation);
        Ok(TimmAugmentOp {
            kind,
            prob,
            magnitude: finite("magnitude", magnitude)?,
            magnitude_std,
            upper_bound,
            translate_pct: finite("translate_pct", translate_pct)?,
            translate_const: finite("translate_const", translate_const)?,
            fill,
            filters,
            num_filters: interpolation.len(),
        })
    }

    /// The op.
    pub fn kind(&self) -> TimmOpKind {
        self.kind
    }

    /// The filters a warp chooses among (one: no draw).
    pub fn filters(&self) -> &[Interpolation] {
        &self.filters[..self.num_filters]
    }

    /// `AugmentOp.__call__`'s draws for one call, as step `index` of the policy's ops (the
    /// image's size plays no part: a relative translation's fraction is multiplied by it when
    /// the step runs).
    pub fn draw<D: TorchDraws + ?Sized>(&self, index: usize, draws: &mut D) -> TimmStep {
        let mut step = TimmStep {
            op: index,
            kind: self.kind,
            applied: false,
            magnitude: 0.0,
            arg: None,
            interpolation: None,
            fill: self.fill,
        };
        if self.prob < 1.0 && draws.py_random() > self.prob {
            return step;
        }
        let mut magnitude = self.magnitude;
        if self.magnitude_std > 0.0 {
            magnitude = if self.magnitude_std == f64::INFINITY {
                // random.uniform(0, magnitude): a + (b - a) * random().
                0.0 + (magnitude - 0.0) * draws.py_random()
            } else {
                // random.gauss(mu, sigma), CPython's formula (first the angle, then the radius).
                let x2pi = draws.py_random() * std::f64::consts::TAU;
                let g2rad = (-2.0 * (1.0 - draws.py_random()).ln()).sqrt();
                magnitude + x2pi.cos() * g2rad * self.magnitude_std
            };
        }
        magnitude = py_max(0.0, py_min(magnitude, self.upper_bound));
        step.applied = true;
        step.magnitude = magnitude;
        step.arg = self.level_arg(magnitude, draws);
        if self.kind.is_warp() {
            let filters = self.filters();
            let pick = if filters.len() > 1 {
                draws.randint(filters.len() as u32) as usize
            } else {
                0
            };
            step.interpolation = filters.get(pick).copied();
        }
        step
    }

    /// `LEVEL_TO_ARG[name](level, hparams)`: the argument timm hands the op (`None` for the
    /// three without one), with the sign drawn where timm draws one.
    fn level_arg<D: TorchDraws + ?Sized>(&self, level: f64, draws: &mut D) -> Option<f64> {
        use TimmOpKind as K;
        let frac = level / LEVEL_DENOM;
        let posterize = || py_int(frac * 4.0);
        let solarize = || py_min(256.0, py_int(frac * 256.0));
        Some(match self.kind {
            K::AutoContrast | K::Equalize | K::Invert => return None,
            K::Rotate => randomly_negate(frac * 30.0, draws),
            K::Posterize => posterize(),
            K::PosterizeIncreasing => 4.0 - posterize(),
            K::PosterizeOriginal => posterize() + 4.0,
            K::Solarize => solarize(),
            K::SolarizeIncreasing => 256.0 - solarize(),
            K::SolarizeAdd => py_min(128.0, py_int(frac * 110.0)),
            K::Color | K::Contrast | K::Brightness | K::Sharpness => frac * 1.8 + 0.1,
            K::ColorIncreasing
            | K::ContrastIncreasing
            | K::BrightnessIncreasing
            | K::SharpnessIncreasing => {
                let level = frac * 0.9;
                py_max(0.1, 1.0 + randomly_negate(level, draws))
            }
            K::ShearX | K::ShearY => randomly_negate(frac * 0.3, draws),
            K::TranslateX | K::TranslateY => randomly_negate(frac * self.translate_const, draws),
            K::TranslateXRel | K::TranslateYRel => {
                randomly_negate(frac * self.translate_pct, draws)
            }
            K::Desaturate => {
                // _minmax_level_to_arg(level, min_val=0.5, max_val=1.0).
                let level = 0.5 + (1.0 - 0.5) * frac;
                py_max(0.5, py_min(1.0, level))
            }
            K::GaussianBlur => {
                // _minmax_level_to_arg(level, min_val=0.1, max_val=2.0).
                let level = 0.1 + (2.0 - 0.1) * frac;
                py_max(0.1, py_min(2.0, level))
            }
            K::GaussianBlurRand => {
                // _minmax_level_to_arg(level) (0..1), then the op's own
                // random.uniform(0.1, 2.0 * factor) = a + (b - a) * random(): the op runs right
                // after its level function in timm, so this draw keeps timm's order.
                let factor = py_max(0.0, py_min(1.0, 0.0 + (1.0 - 0.0) * frac));
                0.1 + (2.0 * factor - 0.1) * draws.py_random()
            }
        })
    }
}

/// One chosen op of a sample's plan: what timm's `AugmentOp.__call__` drew.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct TimmStep {
    /// Its index among the policy's ops.
    pub op: usize,
    /// The op.
    pub kind: TimmOpKind,
    /// Whether it runs (`false`: the `prob` coin skipped it, and nothing else was drawn).
    pub applied: bool,
    /// The magnitude after the noise and the clamp (0 when skipped).
    pub magnitude: f64,
    /// The level function's output, the argument timm passes to the op: degrees (Rotate),
    /// bits (Posterize*), threshold (Solarize*), addend (SolarizeAdd), enhance factor (Color,
    /// Contrast, Brightness, Sharpness and their Increasing variants), shear factor, pixels
    /// (TranslateX/Y), fraction of the side (TranslateX/YRel), the level in `[0.5, 1]`
    /// (Desaturate, which enhances Color at `1 - level`), the blur radius (GaussianBlur; for
    /// GaussianBlurRand the radius its op draws, `uniform(0.1, 2 * factor)`, not the level
    /// function's `factor`). `None` for AutoContrast, Equalize
    /// and Invert, and when skipped.
    pub arg: Option<f64>,
    /// The filter a warp resamples with (drawn when the op has a choice); `None` otherwise.
    pub interpolation: Option<Interpolation>,
    /// The warps' fill (timm's `img_mean`).
    pub fill: [u8; 3],
}

/// A sample's plan: up to [`MAX_TIMM_LAYERS`] steps, inline (no heap).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimmPlan {
    steps: [Option<TimmStep>; MAX_TIMM_LAYERS],
    len: usize,
}

impl TimmPlan {
    fn new() -> Self {
        TimmPlan {
            steps: [None; MAX_TIMM_LAYERS],
            len: 0,
        }
    }

    fn push(&mut self, step: TimmStep) {
        if let Some(slot) = self.steps.get_mut(self.len) {
            *slot = Some(step);
            self.len += 1;
        }
    }

    /// The steps in the order they apply, skipped ones included.
    pub fn steps(&self) -> impl Iterator<Item = &TimmStep> {
        self.steps[..self.len].iter().flatten()
    }

    /// How many layers were chosen.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// timm's `RandAugment(ops, num_layers=2, choice_weights=None)`.
#[derive(Clone, Debug, PartialEq)]
pub struct TimmRandAugment {
    ops: Vec<TimmAugmentOp>,
    num_layers: u32,
    /// The choice weights (`None`: uniform with replacement).
    weights: Option<Vec<f64>>,
}

impl TimmRandAugment {
    /// `num_layers` (at most [`MAX_TIMM_LAYERS`]) of `ops` (1 to [`MAX_TIMM_OPS`]; none only
    /// with no layers) per sample. `choice_weights`: one non-negative weight per op with at
    /// least `num_layers` of them positive, chosen without replacement as numpy's
    /// `choice(replace=False, p=...)` does (timm normalizes them to sum to 1; here they are
    /// normalized whatever their sum).
    pub fn new(
        ops: Vec<TimmAugmentOp>,
        num_layers: u32,
        choice_weights: Option<&[f64]>,
    ) -> Result<Self> {
        if num_layers as usize > MAX_TIMM_LAYERS {
            return Err(Error::invalid(
                "num_layers",
                format!("{num_layers} is above the supported {MAX_TIMM_LAYERS}"),
            ));
        }
        if ops.len() > MAX_TIMM_OPS || (ops.is_empty() && num_layers > 0) {
            return Err(Error::invalid(
                "ops",
                format!(
                    "{} ops: give 1 to {MAX_TIMM_OPS} (numpy's choice cannot draw from none)",
                    ops.len()
                ),
            ));
        }
        let weights = match choice_weights {
            None => None,
            Some(w) => {
                if w.len() != ops.len() {
                    return Err(Error::invalid(
                        "choice_weights",
                        format!("{} weights for {} ops", w.len(), ops.len()),
                    ));
                }
                if let Some(bad) = w.iter().find(|v| !(v.is_finite() && **v >= 0.0)) {
                    return Err(Error::invalid(
                        "choice_weights",
                        format!("{bad} is not a finite non-negative weight"),
                    ));
                }
                let positive = w.iter().filter(|v| **v > 0.0).count();
                if positive < num_layers as usize {
                    return Err(Error::invalid(
                        "choice_weights",
                        format!(
                            "{positive} positive weights for {num_layers} layers drawn without \
                             replacement (numpy: fewer non-zero entries in p than size)"
                        ),
                    ));
                }
                Some(w.to_vec())
            }
        };
        Ok(TimmRandAugment {
            ops,
            num_layers,
            weights,
        })
    }

    /// The ops, in timm's order.
    pub fn ops(&self) -> &[TimmAugmentOp] {
        &self.ops
    }

    /// Layers per sample.
    pub fn num_layers(&self) -> u32 {
        self.num_layers
    }

    /// One sample's plan: the layers chosen first (all of them, as numpy's `choice` does),
    /// then each chosen op's draws in order.
    pub fn draw<D: TorchDraws + ?Sized>(&self, draws: &mut D) -> TimmPlan {
        let mut chosen = [0usize; MAX_TIMM_LAYERS];
        let layers = &mut chosen[..self.num_layers as usize];
        match &self.weights {
            None => {
                for slot in layers.iter_mut() {
                    *slot = draws.randint(self.ops.len() as u32) as usize;
                }
            }
            Some(weights) => choose_weighted(weights, layers, draws),
        }
        let mut plan = TimmPlan::new();
        for &index in layers.iter() {
            if let Some(op) = self.ops.get(index) {
                plan.push(op.draw(index, draws));
            }
        }
        plan
    }
}

/// numpy's `choice(len(weights), size, replace=False, p=weights)` into `layers`: each layer one
/// uniform `u` against the weights of the ops not chosen yet, cumulated and divided by their
/// total (numpy's `cdf /= cdf[-1]`), the first op whose cumulative share exceeds `u`
/// (`searchsorted(u, side="right")`).
fn choose_weighted<D: TorchDraws + ?Sized>(weights: &[f64], layers: &mut [usize], draws: &mut D) {
    for k in 0..layers.len() {
        let (done, rest) = layers.split_at_mut(k);
        let open = |i: &usize| !done.contains(i);
        let total: f64 = (0..weights.len()).filter(open).map(|i| weights[i]).sum();
        let u = draws.py_random();
        let mut acc = 0.0;
        let mut pick = None;
        for i in (0..weights.len()).filter(open) {
            acc += weights[i];
            if acc / total > u {
                pick = Some(i);
                break;
            }
        }
        // The last share is `total / total`, exactly 1, above any `u`; the fallback (the last
        // open op with weight) only answers a draw source that returns 1.
        let fallback = || (0..weights.len()).filter(open).rfind(|&i| weights[i] > 0.0);
        if let Some(slot) = rest.first_mut() {
            *slot = pick.or_else(fallback).unwrap_or(0);
        }
    }
}

/// The most sub-policies a [`TimmAutoAugment`] chooses among (timm's have 25; `3a` has 3).
pub const MAX_TIMM_SUB_POLICIES: usize = 256;

/// timm's `AutoAugment(policy)`: per call one sub-policy, uniformly (`random.choice`), whose
/// ops then run in order, each with its own draws (skip coin, magnitude, sign, filter).
#[derive(Clone, Debug, PartialEq)]
pub struct TimmAutoAugment {
    policy: Vec<Vec<TimmAugmentOp>>,
}

/// One sample's draws of a [`TimmAutoAugment`]: the sub-policy chosen and its ops' steps
/// ([`TimmStep::op`] is the op's index within the sub-policy).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimmAutoPlan {
    /// The index of the sub-policy chosen.
    pub sub_policy: usize,
    /// Its ops' draws, in order, skipped ones included.
    pub steps: TimmPlan,
}

impl TimmAutoAugment {
    /// 1 to [`MAX_TIMM_SUB_POLICIES`] sub-policies (Python's `random.choice` raises on none),
    /// each of at most [`MAX_TIMM_LAYERS`] ops (an empty one leaves the image).
    pub fn new(policy: Vec<Vec<TimmAugmentOp>>) -> Result<Self> {
        if policy.is_empty() || policy.len() > MAX_TIMM_SUB_POLICIES {
            return Err(Error::invalid(
                "policy",
                format!(
                    "{} sub-policies: give 1 to {MAX_TIMM_SUB_POLICIES} (random.choice cannot \
                     choose from none)",
                    policy.len()
                ),
            ));
        }
        if let Some((i, long)) = policy
            .iter()
            .enumerate()
            .find(|(_, sub)| sub.len() > MAX_TIMM_LAYERS)
        {
            return Err(Error::invalid(
                "policy",
                format!(
                    "policy[{i}] holds {} ops, above the supported {MAX_TIMM_LAYERS}",
                    long.len()
                ),
            ));
        }
        Ok(TimmAutoAugment { policy })
    }

    /// The sub-policies, in timm's order.
    pub fn policy(&self) -> &[Vec<TimmAugmentOp>] {
        &self.policy
    }

    /// One sample's plan: `random.choice(self.policy)` (one uniform index), then each of the
    /// sub-policy's ops' draws in order.
    pub fn draw<D: TorchDraws + ?Sized>(&self, draws: &mut D) -> TimmAutoPlan {
        let sub_policy = draws.randint(self.policy.len() as u32) as usize;
        let mut steps = TimmPlan::new();
        if let Some(ops) = self.policy.get(sub_policy) {
            for (index, op) in ops.iter().enumerate() {
                steps.push(op.draw(index, draws));
            }
        }
        TimmAutoPlan { sub_policy, steps }
    }
}

/// The most chains (`width`) a [`TimmAugMix`] mixes.
pub const MAX_TIMM_AUGMIX_WIDTH: usize = 16;

/// timm's `AugMixAugment(ops, alpha=1, width=3, depth=-1, blended=False)`: `width` chains of
/// `depth` ops (a random 1 to 3 per chain when `depth <= 0`) chosen uniformly with
/// replacement, each op with its own draws, mixed with Dirichlet weights and blended with the
/// original by a Beta draw (or, `blended`, blended into the image chain by chain).
#[derive(Clone, Debug, PartialEq)]
pub struct TimmAugMix {
    ops: Vec<TimmAugmentOp>,
    alpha: f32,
    width: usize,
    depth: i64,
    blended: bool,
}

/// One sample's draws of a [`TimmAugMix`]: the float32 mixing weights and Beta draw, and per
/// chain its ops' steps ([`TimmStep::op`] is the op's index among the policy's ops).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimmAugMixPlan {
    weights: [f32; MAX_TIMM_AUGMIX_WIDTH],
    m: f32,
    chains: [TimmPlan; MAX_TIMM_AUGMIX_WIDTH],
    len: usize,
    blended: bool,
}

impl TimmAugMixPlan {
    /// `np.float32(np.random.dirichlet([alpha] * width))`: one weight per chain.
    pub fn mixing_weights(&self) -> &[f32] {
        self.weights.get(..self.len).unwrap_or(&[])
    }

    /// `np.float32(np.random.beta(alpha, alpha))`: the mixed image's share in the final
    /// `Image.blend(img, mixed, m)` (basic mode), the scale of the weights (blended mode).
    pub fn m(&self) -> f32 {
        self.m
    }

    /// The chains' steps, one plan per mixing weight.
    pub fn chains(&self) -> &[TimmPlan] {
        self.chains.get(..self.len).unwrap_or(&[])
    }

    /// Whether the chains are blended into the image one by one (`blended=True`).
    pub fn blended(&self) -> bool {
        self.blended
    }

    /// `_calc_blended_weights(mixing_weights, m)` as numpy computes it in float32 (numpy 2's
    /// rules: a Python float meeting a float32 stays float32): `ws = weights * m`, then from
    /// the last chain back, `alpha = w / cump; cump *= 1 - alpha`, each rounded to float32.
    /// Chain `i` is blended into the image with weight `[i]`.
    pub fn blended_weights(&self) -> [f32; MAX_TIMM_AUGMIX_WIDTH] {
        let mut out = [0.0f32; MAX_TIMM_AUGMIX_WIDTH];
        let mut cump = 1.0f32;
        for (o, &w) in out.iter_mut().zip(&self.weights).take(self.len).rev() {
            let alpha = (w * self.m) / cump;
            cump *= 1.0 - alpha;
            *o = alpha;
        }
        out
    }
}

impl TimmAugMix {
    /// timm's arguments: 1 to [`MAX_TIMM_OPS`] ops (numpy's `choice` cannot draw from none),
    /// `alpha` a positive finite concentration (drawn with in float32, as the Dirichlet of
    /// torchvision's AugMix, which this shares), `width` 1 to [`MAX_TIMM_AUGMIX_WIDTH`],
    /// `depth` at most [`MAX_TIMM_LAYERS`] (0 or below: random 1 to 3 per chain).
    pub fn new(
        ops: Vec<TimmAugmentOp>,
        alpha: f64,
        width: i64,
        depth: i64,
        blended: bool,
    ) -> Result<Self> {
        if ops.is_empty() || ops.len() > MAX_TIMM_OPS {
            return Err(Error::invalid(
                "ops",
                format!(
                    "{} ops: give 1 to {MAX_TIMM_OPS} (numpy's choice cannot draw from none)",
                    ops.len()
                ),
            ));
        }
        let alpha32 = alpha as f32;
        if !(alpha.is_finite() && alpha32 > 0.0 && alpha32.is_finite()) {
            return Err(Error::invalid(
                "alpha",
                format!("{alpha} is not a positive finite concentration"),
            ));
        }
        let width = usize::try_from(width)
            .ok()
            .filter(|w| (1..=MAX_TIMM_AUGMIX_WIDTH).contains(w))
            .ok_or_else(|| {
                Error::invalid(
                    "width",
                    format!("{width} is not in [1, {MAX_TIMM_AUGMIX_WIDTH}]"),
                )
            })?;
        if depth > MAX_TIMM_LAYERS as i64 {
            return Err(Error::invalid(
                "depth",
                format!("{depth} is above the supported {MAX_TIMM_LAYERS}"),
            ));
        }
        Ok(TimmAugMix {
            ops,
            alpha: alpha32,
            width,
            depth,
            blended,
        })
    }

    /// The ops, in timm's order.
    pub fn ops(&self) -> &[TimmAugmentOp] {
        &self.ops
    }

    /// One sample's plan, in timm's order per stream: the `width`-way Dirichlet, the Beta
    /// (the first share of a two-way Dirichlet: `X / (X + Y)` of two Gamma(alpha) draws), then
    /// per chain its depth (`randint(1, 4)` when `depth <= 0`), its ops (uniform, with
    /// replacement, all chosen first as numpy's `choice` does) and each op's draws.
    pub fn draw<D: TorchDraws + ?Sized>(&self, draws: &mut D) -> TimmAugMixPlan {
        let mut plan = TimmAugMixPlan {
            weights: [0.0; MAX_TIMM_AUGMIX_WIDTH],
            m: 0.0,
            chains: [TimmPlan::new(); MAX_TIMM_AUGMIX_WIDTH],
            len: self.width,
            blended: self.blended,
        };
        if let Some(w) = plan.weights.get_mut(..self.width) {
            draws.dirichlet(self.alpha, w);
        }
        if self.width == 1 {
            // numpy's one-way Dirichlet is exactly 1; torch's sampler clamps its float32
            // weights below 1 (to 1 - 2^-24), which would truncate a 255 to 254 in the mix.
            plan.weights[0] = 1.0;
        }
        let mut beta = [0.0f32; 2];
        draws.dirichlet(self.alpha, &mut beta);
        plan.m = beta[0];
        for chain in plan.chains.iter_mut().take(self.width) {
            let depth = if self.depth > 0 {
                self.depth as usize
            } else {
                1 + draws.randint(3) as usize
            };
            let mut chosen = [0usize; MAX_TIMM_LAYERS];
            let chosen = chosen.get_mut(..depth).unwrap_or(&mut []);
            for slot in chosen.iter_mut() {
                *slot = draws.randint(self.ops.len() as u32) as usize;
            }
            for &index in chosen.iter() {
                if let Some(op) = self.ops.get(index) {
                    chain.push(op.draw(index, draws));
                }
            }
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::sample_rng;

    fn op(kind: TimmOpKind, magnitude: f64, std: f64) -> TimmAugmentOp {
        TimmAugmentOp::new(
            kind,
            1.0,
            magnitude,
            std,
            None,
            0.45,
            100.0,
            [124, 116, 104],
            &[Interpolation::Bicubic],
        )
        .expect("valid")
    }

    /// Answers every `random()` with a fixed value (two `randint` draws each) and `randint`
    /// with 0.
    struct Fixed(f64);
    impl TorchDraws for Fixed {
        fn uniform_f32(&mut self, from: f32, _to: f32) -> f32 {
            from
        }
        fn randint(&mut self, _high: u32) -> u32 {
            0
        }
        fn py_random(&mut self) -> f64 {
            self.0
        }
    }

    #[test]
    fn names_and_spans_round_trip() {
        for kind in TimmOpKind::ALL {
            assert_eq!(TimmOpKind::from_name(kind.name()).ok(), Some(kind));
            assert_eq!(kind.span_name(), format!("TimmRandAugment/{}", kind.name()));
        }
        assert_eq!(
            TimmOpKind::from_name("GaussianBlurRand").ok(),
            Some(TimmOpKind::GaussianBlurRand)
        );
        let unknown = TimmOpKind::from_name("Cutout").expect_err("refused");
        assert!(
            unknown.to_string().contains("not one of timm's"),
            "{unknown}"
        );
    }

    #[test]
    fn level_arguments_are_timms() {
        // Values from Python: timm.data.auto_augment.LEVEL_TO_ARG[name](9, {...}) with
        // _randomly_negate keeping the sign (random() <= 0.5).
        let arg = |kind, m| op(kind, m, 0.0).draw(0, &mut Fixed(0.25)).arg;
        assert_eq!(arg(TimmOpKind::Rotate, 9.0), Some(27.0));
        assert_eq!(arg(TimmOpKind::Posterize, 9.0), Some(3.0));
        assert_eq!(arg(TimmOpKind::PosterizeIncreasing, 9.0), Some(1.0));
        assert_eq!(arg(TimmOpKind::PosterizeIncreasing, 10.0), Some(0.0));
        assert_eq!(arg(TimmOpKind::PosterizeOriginal, 9.0), Some(7.0));
        assert_eq!(arg(TimmOpKind::Solarize, 9.0), Some(230.0));
        assert_eq!(arg(TimmOpKind::SolarizeIncreasing, 9.0), Some(26.0));
        assert_eq!(arg(TimmOpKind::SolarizeIncreasing, 0.0), Some(256.0));
        assert_eq!(arg(TimmOpKind::SolarizeAdd, 9.0), Some(99.0));
        // 0.9 * 1.8 + 0.1 in float64.
        assert_eq!(arg(TimmOpKind::Color, 9.0), Some(1.7200000000000002));
        assert_eq!(arg(TimmOpKind::ContrastIncreasing, 9.0), Some(1.81));
        assert_eq!(arg(TimmOpKind::ShearX, 9.0), Some(0.27));
        assert_eq!(arg(TimmOpKind::TranslateX, 9.0), Some(90.0));
        assert_eq!(arg(TimmOpKind::TranslateYRel, 9.0), Some(0.405));
        assert_eq!(arg(TimmOpKind::Desaturate, 9.0), Some(0.95));
        assert_eq!(arg(TimmOpKind::GaussianBlur, 9.0), Some(1.81));
        assert_eq!(arg(TimmOpKind::GaussianBlur, 0.0), Some(0.1));
        // GaussianBlurRand: factor 0.9, then uniform(0.1, 1.8) with random() = 0.25.
        assert_eq!(arg(TimmOpKind::GaussianBlurRand, 9.0), Some(0.525));
        assert_eq!(
            op(TimmOpKind::GaussianBlurRand, 10.0, 0.0)
                .draw(0, &mut Fixed(0.75))
                .arg,
            Some(1.525)
        );
        assert_eq!(arg(TimmOpKind::Invert, 9.0), None);
        // The sign: random() > 0.5 negates; Increasing factors keep their 0.1 floor.
        let negated = |kind, m| op(kind, m, 0.0).draw(0, &mut Fixed(0.75)).arg;
        assert_eq!(negated(TimmOpKind::Rotate, 9.0), Some(-27.0));
        assert_eq!(negated(TimmOpKind::BrightnessIncreasing, 10.0), Some(0.1));
        assert_eq!(negated(TimmOpKind::ShearY, 5.0), Some(-0.15));
    }

    #[test]
    fn the_coin_skips_and_draws_nothing_more() {
        let skipping = TimmAugmentOp::new(
            TimmOpKind::Rotate,
            0.5,
            9.0,
            0.5,
            None,
            0.45,
            100.0,
            [0; 3],
            &[Interpolation::Bilinear, Interpolation::Bicubic],
        )
        .expect("valid");
        let step = skipping.draw(3, &mut Fixed(0.75));
        assert!(!step.applied);
        assert_eq!((step.op, step.arg, step.interpolation), (3, None, None));
        // random() == prob runs (timm skips on `>`).
        assert!(skipping.draw(0, &mut Fixed(0.5)).applied);
    }

    #[test]
    fn magnitudes_are_clamped_to_the_bound() {
        // Uniform noise: 0 + 9 * random().
        let uniform = op(TimmOpKind::Rotate, 9.0, f64::INFINITY);
        assert_eq!(uniform.draw(0, &mut Fixed(0.5)).magnitude, 4.5);
        // Gaussian noise with cos(2 pi 0.5) = -1, radius sqrt(-2 ln 0.5).
        let gauss = op(TimmOpKind::Rotate, 9.0, 0.5);
        let m = gauss.draw(0, &mut Fixed(0.5)).magnitude;
        let expected =
            9.0 + (std::f64::consts::TAU * 0.5).cos() * (-2.0 * 0.5f64.ln()).sqrt() * 0.5;
        assert_eq!(m, expected);
        // Far out: clamped to 10 (and to magnitude_max when given), never below 0.
        let wide = op(TimmOpKind::Rotate, 9.0, 100.0);
        assert_eq!(wide.draw(0, &mut Fixed(0.5)).magnitude, 0.0);
        let high = op(TimmOpKind::Rotate, 12.0, 0.0);
        assert_eq!(high.draw(0, &mut Fixed(0.25)).magnitude, 10.0);
        let mmax = TimmAugmentOp::new(
            TimmOpKind::Rotate,
            1.0,
            12.0,
            0.0,
            Some(20.0),
            0.45,
            100.0,
            [0; 3],
            &[Interpolation::Nearest],
        )
        .expect("valid");
        assert_eq!(mmax.draw(0, &mut Fixed(0.25)).arg, Some(36.0));
    }

    #[test]
    fn weighted_choice_is_without_replacement() {
        let ops: Vec<_> = [TimmOpKind::Rotate, TimmOpKind::Invert, TimmOpKind::Equalize]
            .into_iter()
            .map(|k| op(k, 5.0, 0.0))
            .collect();
        let policy = TimmRandAugment::new(ops, 3, Some(&[0.7, 0.2, 0.1])).expect("valid");
        let mut counts = [[0u32; 3]; 3];
        let mut rng = sample_rng(3, 0, 0);
        let n = 20_000;
        for _ in 0..n {
            let plan = policy.draw(&mut rng);
            let picks: Vec<usize> = plan.steps().map(|s| s.op).collect();
            assert_eq!(picks.len(), 3);
            let mut sorted = picks.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, [0, 1, 2], "{picks:?}");
            for (layer, &p) in picks.iter().enumerate() {
                counts[layer][p] += 1;
            }
        }
        // First layer: the weights themselves.
        for (p, w) in [0.7, 0.2, 0.1].into_iter().enumerate() {
            let f = f64::from(counts[0][p]) / f64::from(n);
            assert!((f - w).abs() < 0.015, "layer 0 op {p}: {f}");
        }
        // Second layer, op 1: 0.7 * 0.2/0.3 + 0.1 * 0.2/0.8.
        let f = f64::from(counts[1][1]) / f64::from(n);
        assert!(
            (f - (0.7 * 0.2 / 0.3 + 0.1 * 0.2 / 0.8)).abs() < 0.015,
            "{f}"
        );
        assert!(
            TimmRandAugment::new(vec![op(TimmOpKind::Invert, 1.0, 0.0)], 2, Some(&[1.0])).is_err()
        );
    }

    #[test]
    fn uniform_choice_is_with_replacement() {
        let ops: Vec<_> = TimmOpKind::ALL
            .into_iter()
            .map(|k| op(k, 9.0, 0.5))
            .collect();
        let policy = TimmRandAugment::new(ops, 2, None).expect("valid");
        let mut rng = sample_rng(9, 1, 2);
        let mut repeats = 0;
        for _ in 0..5000 {
            let plan = policy.draw(&mut rng);
            let picks: Vec<usize> = plan.steps().map(|s| s.op).collect();
            repeats += usize::from(picks[0] == picks[1]);
        }
        // 1/25 of pairs repeat.
        assert!((100..320).contains(&repeats), "{repeats}");
    }

    #[test]
    fn refuses_what_timm_would_fail_on() {
        let bad = |prob: f64, std: f64, filters: &[Interpolation]| {
            TimmAugmentOp::new(
                TimmOpKind::Rotate,
                prob,
                9.0,
                std,
                None,
                0.45,
                100.0,
                [0; 3],
                filters,
            )
            .expect_err("refused")
            .to_string()
        };
        assert!(bad(1.5, 0.0, &[Interpolation::Nearest]).contains("prob"));
        assert!(bad(0.5, f64::NAN, &[Interpolation::Nearest]).contains("magnitude_std"));
        assert!(bad(0.5, 0.0, &[]).contains("interpolation"));
        assert!(TimmRandAugment::new(Vec::new(), 1, None).is_err());
        assert!(TimmRandAugment::new(Vec::new(), 0, None).is_ok());
        assert!(TimmRandAugment::new(vec![op(TimmOpKind::Invert, 1.0, 0.0)], 17, None).is_err());
    }
    fn augmix_ops() -> Vec<TimmAugmentOp> {
        [
            TimmOpKind::AutoContrast,
            TimmOpKind::Rotate,
            TimmOpKind::ShearX,
        ]
        .into_iter()
        .map(|k| op(k, 3.0, f64::INFINITY))
        .collect()
    }

    #[test]
    fn auto_augment_chooses_a_sub_policy_uniformly_then_draws_its_ops() {
        let coin = |kind, prob| {
            TimmAugmentOp::new(
                kind,
                prob,
                5.0,
                0.0,
                None,
                0.45,
                100.0,
                [0; 3],
                &[Interpolation::Bicubic],
            )
            .expect("valid")
        };
        let policy = TimmAutoAugment::new(vec![
            vec![coin(TimmOpKind::Rotate, 0.8), coin(TimmOpKind::Invert, 0.2)],
            vec![coin(TimmOpKind::Equalize, 1.0)],
            vec![],
        ])
        .expect("valid");
        let mut rng = sample_rng(4, 0, 1);
        let n = 30_000;
        let mut chosen = [0u32; 3];
        let (mut rotate, mut invert) = (0u32, 0u32);
        for _ in 0..n {
            let plan = policy.draw(&mut rng);
            chosen[plan.sub_policy] += 1;
            let steps: Vec<_> = plan.steps.steps().copied().collect();
            let kinds: Vec<_> = steps.iter().map(|s| s.kind).collect();
            match plan.sub_policy {
                0 => {
                    assert_eq!(kinds, [TimmOpKind::Rotate, TimmOpKind::Invert]);
                    assert_eq!((steps[0].op, steps[1].op), (0, 1));
                    rotate += u32::from(steps[0].applied);
                    invert += u32::from(steps[1].applied);
                    if steps[0].applied {
                        assert_eq!(steps[0].arg.map(f64::abs), Some(15.0));
                    }
                }
                1 => assert!(kinds == [TimmOpKind::Equalize] && steps[0].applied),
                _ => assert!(steps.is_empty()),
            }
        }
        for c in chosen {
            let f = f64::from(c) / f64::from(n);
            assert!((f - 1.0 / 3.0).abs() < 0.015, "{chosen:?}");
        }
        let rotate = f64::from(rotate) / f64::from(chosen[0]);
        let invert = f64::from(invert) / f64::from(chosen[0]);
        assert!(
            (rotate - 0.8).abs() < 0.02 && (invert - 0.2).abs() < 0.02,
            "{rotate} {invert}"
        );
        assert!(TimmAutoAugment::new(Vec::new()).is_err());
        let long = vec![vec![coin(TimmOpKind::Invert, 1.0); MAX_TIMM_LAYERS + 1]];
        let err = TimmAutoAugment::new(long).expect_err("refused").to_string();
        assert!(err.contains("policy[0]"), "{err}");
    }

    #[test]
    fn augmix_draws_weights_depths_and_ops() {
        let policy = TimmAugMix::new(augmix_ops(), 1.0, 4, -1, false).expect("valid");
        let mut rng = sample_rng(7, 0, 3);
        let n = 20_000;
        let (mut m_sum, mut w0_sum) = (0.0f64, 0.0f64);
        let mut depths = [0u32; 4];
        let mut ops = [0u32; 3];
        let mut magnitudes = 0.0f64;
        let mut count = 0u32;
        for _ in 0..n {
            let plan = policy.draw(&mut rng);
            assert_eq!(plan.mixing_weights().len(), 4);
            assert!(!plan.blended());
            let sum: f32 = plan.mixing_weights().iter().sum();
            assert!((sum - 1.0).abs() < 1e-5, "{sum}");
            m_sum += f64::from(plan.m());
            w0_sum += f64::from(plan.mixing_weights()[0]);
            for chain in plan.chains() {
                depths[chain.len()] += 1;
                for step in chain.steps() {
                    assert!(step.applied, "prob 1 never skips");
                    ops[step.op] += 1;
                    magnitudes += step.magnitude;
                    count += 1;
                    assert!((0.0..=3.0).contains(&step.magnitude));
                }
            }
        }
        let n = f64::from(n);
        // Beta(1, 1) has mean 1/2; a 4-way Dirichlet(1) weight 1/4.
        assert!((m_sum / n - 0.5).abs() < 0.01, "{}", m_sum / n);
        assert!((w0_sum / n - 0.25).abs() < 0.01, "{}", w0_sum / n);
        // Depth 1 to 3, uniformly; ops uniformly; magnitudes uniform in [0, 3].
        assert_eq!(depths[0], 0);
        for d in &depths[1..] {
            assert!(
                (f64::from(*d) / (4.0 * n) - 1.0 / 3.0).abs() < 0.01,
                "{depths:?}"
            );
        }
        for o in ops {
            assert!(
                (f64::from(o) / f64::from(count) - 1.0 / 3.0).abs() < 0.01,
                "{ops:?}"
            );
        }
        assert!((magnitudes / f64::from(count) - 1.5).abs() < 0.02);
        // A fixed depth.
        let fixed = TimmAugMix::new(augmix_ops(), 1.0, 2, 3, true).expect("valid");
        let plan = fixed.draw(&mut rng);
        assert!(plan.blended());
        assert!(plan.chains().iter().all(|c| c.len() == 3));
    }

    #[test]
    fn blended_weights_are_timms_float32_arithmetic() {
        let policy = TimmAugMix::new(augmix_ops(), 1.0, 3, 1, true).expect("valid");
        let mut plan = policy.draw(&mut sample_rng(1, 0, 0));
        // From Python: AugMixAugment._calc_blended_weights(np.float32([0.2, 0.3, 0.5]),
        // np.float32(0.6)) with numpy 2.
        plan.weights[..3].copy_from_slice(&[0.2, 0.3, 0.5]);
        plan.m = 0.6;
        let w = plan.blended_weights();
        let ws = [0.2f32 * 0.6, 0.3 * 0.6, 0.5 * 0.6];
        let a2 = ws[2];
        let c = 1.0 - a2;
        let a1 = ws[1] / c;
        let c = c * (1.0 - a1);
        let a0 = ws[0] / c;
        assert_eq!(&w[..3], &[a0, a1, a2]);
        assert_eq!(&w[..3], &[0.23076925f32, 0.25714287, 0.3], "numpy's values");
    }

    #[test]
    fn augmix_refuses_what_timm_would_fail_on() {
        let err = |r: Result<TimmAugMix>| r.expect_err("refused").to_string();
        assert!(err(TimmAugMix::new(Vec::new(), 1.0, 3, -1, false)).contains("ops"));
        assert!(err(TimmAugMix::new(augmix_ops(), 0.0, 3, -1, false)).contains("alpha"));
        assert!(err(TimmAugMix::new(augmix_ops(), f64::NAN, 3, -1, false)).contains("alpha"));
        assert!(err(TimmAugMix::new(augmix_ops(), 1.0, 0, -1, false)).contains("width"));
        assert!(err(TimmAugMix::new(augmix_ops(), 1.0, 17, -1, false)).contains("width"));
        assert!(err(TimmAugMix::new(augmix_ops(), 1.0, 3, 17, false)).contains("depth"));
        assert!(TimmAugMix::new(augmix_ops(), 1e-3, 16, 16, false).is_ok());
    }

    #[test]
    fn spans_name_the_policy() {
        assert_eq!(
            TimmOpKind::Rotate.span_name_in(TimmPolicyKind::AutoAugment),
            "TimmAutoAugment/Rotate"
        );
        assert_eq!(
            TimmOpKind::ShearX.span_name_in(TimmPolicyKind::AugMix),
            "TimmAugMix/ShearX"
        );
    }
}
