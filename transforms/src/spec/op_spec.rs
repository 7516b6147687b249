//! The op vocabulary of a [`PipelineSpec`](super::PipelineSpec): [`OpSpec`], one variant per
//! torchvision transform with its parameter names and defaults, and the argument types they
//! share (sizes, interpolation modes, fills, ranges), as serde reads them from JSON.
//!
//! Must not check values or plan anything: the planner ([`Pipeline::new`](super::Pipeline::new)
//! and the stage families) owns every check, so a spec always parses and is refused there with
//! the op and argument named.

use serde::{Deserialize, Serialize};

use crate::crop::resize_shorter_side;
use crate::error::Result;
use crate::resize::Filter;

/// `int` (square, or the shorter side for `Resize`) or `[height, width]`, as torchvision takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Size {
    /// One number.
    Int(u32),
    /// `[height, width]`.
    Pair([u32; 2]),
}

impl Size {
    pub(crate) fn square_or_pair(self) -> (u32, u32) {
        match self {
            Size::Int(s) => (s, s),
            Size::Pair([h, w]) => (h, w),
        }
    }

    /// The `(height, width)` torchvision's `Resize(self, max_size)` gives a `width` x `height`
    /// image: the shorter side to an int ([`resize_shorter_side`]), a pair as it is.
    pub(crate) fn resized(
        self,
        width: u32,
        height: u32,
        max_size: Option<u32>,
    ) -> Result<(u32, u32)> {
        match self {
            Size::Int(s) => resize_shorter_side(width, height, s, max_size),
            Size::Pair([h, w]) => Ok((h, w)),
        }
    }
}

/// Interpolation modes of `Resize` and `RandomResizedCrop`, as torchvision applies them to PIL
/// images (Pillow's filters, bit-exact). torchvision's `NEAREST_EXACT` has no Pillow filter:
/// naming it is a deserialization error that names it, not a silent substitute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Interpolation {
    /// Pillow's `NEAREST`: the source pixel under each output pixel's center.
    Nearest,
    /// Pillow's `BILINEAR` with antialias (support widened by the downscale factor).
    #[default]
    Bilinear,
    /// Pillow's `BICUBIC` with antialias (support widened by the downscale factor).
    Bicubic,
    /// Pillow's `BOX`.
    Box,
    /// Pillow's `HAMMING`.
    Hamming,
    /// Pillow's `LANCZOS`.
    Lanczos,
}

impl Interpolation {
    /// The resize filter that runs it.
    pub fn filter(self) -> Filter {
        match self {
            Interpolation::Nearest => Filter::Nearest,
            Interpolation::Bilinear => Filter::Bilinear,
            Interpolation::Bicubic => Filter::Bicubic,
            Interpolation::Box => Filter::Box,
            Interpolation::Hamming => Filter::Hamming,
            Interpolation::Lanczos => Filter::Lanczos,
        }
    }
}

pub(super) fn default_scale() -> [f64; 2] {
    [0.08, 1.0]
}

pub(super) fn default_ratio() -> [f64; 2] {
    [3.0 / 4.0, 4.0 / 3.0]
}

fn default_flip_p() -> f64 {
    0.5
}

pub(super) fn default_true() -> bool {
    true
}

fn default_half() -> f64 {
    0.5
}

fn default_grayscale_p() -> f64 {
    0.1
}

fn default_one() -> i64 {
    1
}

/// One `ColorJitter` argument as torchvision takes it: a single number or a `[min, max]` pair.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum JitterArg {
    /// `v`: `[max(0, center - v), center + v]` (hue: `[-v, v]`); 0 is off.
    Number(f64),
    /// `[min, max]`, within the argument's bounds.
    Range([f64; 2]),
}

/// `JPEG`'s `quality` as torchvision takes it: one quality or a `[min, max]` range to draw from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum QualityArg {
    /// `q`: always this quality, the same as `[q, q]`.
    Number(i64),
    /// `[min, max]`, both ends included.
    Range([i64; 2]),
}

impl QualityArg {
    /// `[min, max]` (a single quality is both).
    pub fn range(self) -> [i64; 2] {
        match self {
            QualityArg::Number(q) => [q, q],
            QualityArg::Range(r) => r,
        }
    }
}

impl Default for JitterArg {
    /// 0: the adjustment is off, torchvision's default.
    fn default() -> Self {
        JitterArg::Number(0.0)
    }
}

/// How the warps sample (torchvision's `InterpolationMode` of `RandomRotation`,
/// `RandomAffine`, `RandomPerspective` and the policies): `nearest`, `bilinear` or `bicubic`,
/// Pillow's three transform filters. `AugMix` refuses `bicubic` when planned, as torchvision's
/// tensor kernels (which AugMix runs) refuse it.
pub type WarpInterpolation = crate::augment::geometry::Interpolation;

/// Whose draws a policy follows (`torchvision.transforms` or `.v2`).
pub type PolicyApi = crate::augment::policy::Api;

/// `AutoAugmentPolicy`, by its value (`imagenet`, `cifar10`, `svhn`).
pub type AutoAugmentPolicySpec = crate::augment::policy::AutoAugmentPolicy;

fn default_tensor_api() -> PolicyApi {
    PolicyApi::V2
}

fn default_magnitude_bins() -> i64 {
    31
}

fn default_rand_augment_ops() -> i64 {
    2
}

fn default_rand_augment_magnitude() -> i64 {
    9
}

fn default_augmix_severity() -> i64 {
    3
}

fn default_augmix_width() -> i64 {
    3
}

fn default_augmix_chain_depth() -> i64 {
    -1
}

fn default_augmix_alpha() -> f64 {
    1.0
}

fn default_perspective_interpolation() -> WarpInterpolation {
    WarpInterpolation::Bilinear
}

fn default_augmix_interpolation() -> WarpInterpolation {
    WarpInterpolation::Bilinear
}

fn default_elastic_alpha() -> [f64; 2] {
    [50.0, 50.0]
}

fn default_elastic_sigma() -> [f64; 2] {
    [5.0, 5.0]
}

fn default_elastic_fill() -> Option<Fill> {
    Some(Fill::Number(0.0))
}

fn default_distort_brightness() -> [f64; 2] {
    [0.875, 1.125]
}

fn default_distort_contrast() -> [f64; 2] {
    [0.5, 1.5]
}

fn default_distort_hue() -> [f64; 2] {
    [-0.05, 0.05]
}

fn default_noise_sigma() -> f64 {
    0.1
}

fn default_erase_scale() -> [f64; 2] {
    [0.02, 0.33]
}

fn default_erase_ratio() -> [f64; 2] {
    [0.3, 3.3]
}

/// `RandomErasing`'s `value` as torchvision takes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EraseFill {
    /// One value for every channel.
    Number(f64),
    /// One value per channel (3), or one for all (1).
    Values(Vec<f64>),
    /// `"random"`: standard normal values from the sample's generator (any other word is
    /// refused when the pipeline is planned).
    Word(String),
}

impl Default for EraseFill {
    /// 0, torchvision's default.
    fn default() -> Self {
        EraseFill::Number(0.0)
    }
}

fn default_timm_min_area() -> f64 {
    0.02
}

fn default_timm_max_area() -> f64 {
    1.0 / 3.0
}

fn default_timm_min_aspect() -> f64 {
    0.3
}

/// timm's `RandomErasing` `mode`: `const`, `rand` or `pixel`.
pub type TimmEraseModeSpec = crate::augment::policy::TimmEraseMode;

fn default_blur_sigma() -> NumberOrRange {
    NumberOrRange::Range([0.1, 2.0])
}

/// A range argument as torchvision takes it: one number (each op says what range it means:
/// `degrees` `d` is `[-d, d]`, `sigma` `s` is `[s, s]`) or a `[min, max]` pair.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum NumberOrRange {
    /// One number.
    Number(f64),
    /// `[min, max]`.
    Range([f64; 2]),
}

/// `RandomAffine`'s `shear`: a number `s` (`[-s, s]` on x), or 2 (x) or 4 (x, then y) bounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Shear {
    /// `s`: x shear in `[-s, s]`.
    Number(f64),
    /// `[x_min, x_max]` or `[x_min, x_max, y_min, y_max]`.
    Bounds(Vec<f64>),
}

/// torchvision's `fill` for a PIL image: one number for every channel, or one per channel
/// (truncated toward zero, clipped to 0..=255, as Pillow does).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Fill {
    /// One value for every channel.
    Number(f64),
    /// One value per channel (or a single one, for every channel).
    PerChannel(Vec<f64>),
}

impl Default for Fill {
    /// 0: black, torchvision's default.
    fn default() -> Self {
        Fill::Number(0.0)
    }
}

impl Fill {
    /// The RGB triple it fills with (see [`parse_fill`](crate::augment::geometry::parse_fill)).
    pub(crate) fn rgb(&self) -> Result<[u8; 3]> {
        match self {
            Fill::Number(v) => crate::augment::geometry::parse_fill(Some(&[*v])),
            Fill::PerChannel(v) => crate::augment::geometry::parse_fill(Some(v)),
        }
    }
}

impl OpSpec {
    /// The `fill` of an op that fills pixels a warp or a pad leaves uncovered (`None` for the
    /// rest, and for a policy or `ElasticTransform` given none).
    pub(crate) fn fill(&self) -> Option<&Fill> {
        match self {
            OpSpec::RandomRotation { fill, .. }
            | OpSpec::RandomAffine { fill, .. }
            | OpSpec::RandomPerspective { fill, .. }
            | OpSpec::Pad { fill, .. }
            | OpSpec::RandomCrop { fill, .. }
            | OpSpec::CenterCropOrPad { fill, .. }
            | OpSpec::RandomCropOrPad { fill, .. } => Some(fill),
            OpSpec::ElasticTransform { fill, .. }
            | OpSpec::TrivialAugmentWide { fill, .. }
            | OpSpec::RandAugment { fill, .. }
            | OpSpec::AutoAugment { fill, .. }
            | OpSpec::AugMix { fill, .. } => fill.as_ref(),
            _ => None,
        }
    }
}

/// `GaussianBlur`'s `kernel_size`: one odd size, or `[x, y]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum KernelSize {
    /// The same size on both axes.
    Int(i64),
    /// `[x, y]`: the horizontal kernel's size, then the vertical one's.
    Pair([i64; 2]),
}

/// `Pad`'s and `RandomCrop`'s `padding`: one number (every side), or 1, 2
/// (`[left/right, top/bottom]`) or 4 (`[left, top, right, bottom]`) numbers. Negative values
/// (torchvision crops then) are refused at plan time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PaddingArg {
    /// Every side.
    Int(i64),
    /// 1, 2 or 4 values.
    Seq(Vec<i64>),
}

/// torchvision's `padding_mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PadMode {
    /// The fill colour.
    #[default]
    Constant,
    /// The edge pixel repeated.
    Edge,
    /// Mirrored without repeating the edge.
    Reflect,
    /// Mirrored with the edge repeated.
    Symmetric,
}

fn default_timm_magnitude() -> f64 {
    10.0
}

fn default_timm_layers() -> i64 {
    2
}

fn default_translate_pct() -> f64 {
    0.45
}

fn default_translate_const() -> f64 {
    250.0
}

fn default_timm_fill() -> Fill {
    Fill::PerChannel(vec![128.0, 128.0, 128.0])
}

/// timm's `magnitude_std`: a number (0 or below: no noise), or the word `"inf"` (uniform
/// sampling in `[0, magnitude]`; JSON has no infinity). Other words are refused when planned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MagnitudeStd {
    /// The standard deviation of the Gaussian noise.
    Number(f64),
    /// `"inf"`.
    Word(String),
}

impl Default for MagnitudeStd {
    /// 0: no noise, timm's default.
    fn default() -> Self {
        MagnitudeStd::Number(0.0)
    }
}

/// timm's `interpolation`: one filter, or a list of them, one drawn per call. The warps'
/// hparam (`TimmAugmentOpSpec`) takes `"nearest"`, `"bilinear"` and `"bicubic"` (default
/// `["bilinear", "bicubic"]`); `RandomResizedCropAndInterpolation` takes every resize filter,
/// and the word `"random"` for timm's `["bilinear", "bicubic"]`. Names are checked when
/// planned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TimmInterpolation {
    /// Always this filter.
    One(String),
    /// One of these per call, uniformly.
    Choice(Vec<String>),
}

impl Default for TimmInterpolation {
    /// timm's `_RANDOM_INTERPOLATION`: BILINEAR or BICUBIC, drawn per call.
    fn default() -> Self {
        TimmInterpolation::Choice(vec!["bilinear".into(), "bicubic".into()])
    }
}

/// timm's `ResizeKeepRatio` default `random_scale_range`.
fn default_keep_ratio_scale() -> [f64; 2] {
    [0.85, 1.05]
}

/// timm's `ResizeKeepRatio` default `random_aspect_range`.
fn default_keep_ratio_aspect() -> [f64; 2] {
    [0.9, 1.11]
}

/// timm's `RandomResizedCropAndInterpolation` default: `'bilinear'`.
fn default_rrc_interpolation() -> TimmInterpolation {
    TimmInterpolation::One("bilinear".into())
}

/// One of timm's `AugmentOp`s (`timm.data.auto_augment`), by what the object holds: its name,
/// `prob`, `magnitude`, and the hparams it reads. Defaults are timm's
/// (`AugmentOp(name, prob=0.5, magnitude=10)` with `_HPARAMS_DEFAULT`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimmAugmentOpSpec {
    /// A key of timm's `NAME_TO_OP` (`Rotate`, `PosterizeIncreasing`, `GaussianBlurRand`, ...);
    /// another name is refused when planned.
    pub name: String,
    /// Probability of applying it, in `[0, 1]`; default 0.5.
    #[serde(default = "default_half")]
    pub prob: f64,
    /// On timm's 0..10 scale; default 10.
    #[serde(default = "default_timm_magnitude")]
    pub magnitude: f64,
    /// Default 0 (no noise).
    #[serde(default)]
    pub magnitude_std: MagnitudeStd,
    /// Upper bound of the noisy magnitude; default None (timm's 10; 0 also means 10).
    #[serde(default)]
    pub magnitude_max: Option<f64>,
    /// Of `TranslateXRel`/`TranslateYRel`: the largest shift as a fraction of the side;
    /// default 0.45.
    #[serde(default = "default_translate_pct")]
    pub translate_pct: f64,
    /// Of `TranslateX`/`TranslateY`: the largest shift in pixels; default 250 (timm's
    /// `_HPARAMS_DEFAULT`; `create_transform` gives `int(0.45 * min(img_size))`).
    #[serde(default = "default_translate_const")]
    pub translate_const: f64,
    /// The warps' `fillcolor` (timm's `img_mean`); default `[128, 128, 128]`.
    #[serde(default = "default_timm_fill")]
    pub fill: Fill,
    /// The warps' filter(s); default a choice of `bilinear` and `bicubic`.
    #[serde(default)]
    pub interpolation: TimmInterpolation,
}

/// One op, named and parameterized as in `torchvision.transforms`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", deny_unknown_fields)]
pub enum OpSpec {
    /// `RandomResizedCrop(size, scale=(0.08, 1.0), ratio=(3/4, 4/3))`.
    RandomResizedCrop {
        /// Output size.
        size: Size,
        /// Range of the crop's area as a fraction of the image's; default `[0.08, 1.0]`.
        #[serde(default = "default_scale")]
        scale: [f64; 2],
        /// Range of the crop's aspect ratio (w / h); default `[3/4, 4/3]`.
        #[serde(default = "default_ratio")]
        ratio: [f64; 2],
        /// Default `bilinear`.
        #[serde(default)]
        interpolation: Interpolation,
        /// Default `true`; PIL images are always antialiased, so `false` is rejected.
        #[serde(default = "default_true")]
        antialias: bool,
    },
    /// timm's `RandomResizedCropAndInterpolation(size, scale=(0.08, 1.0), ratio=(3/4, 4/3),
    /// interpolation='bilinear')` (`timm.data.transforms`): `RandomResizedCrop`'s crop (the
    /// same draws), resized with Pillow's antialiased filter: the one `interpolation` names,
    /// or one of a list drawn per sample right after the crop (timm's `random.choice`;
    /// `"random"` is `["bilinear", "bicubic"]`). Planned wherever `RandomResizedCrop` is; a
    /// sample resized with a given filter is `RandomResizedCrop`'s with that filter.
    RandomResizedCropAndInterpolation {
        /// Output size.
        size: Size,
        /// Range of the crop's area as a fraction of the image's; default `[0.08, 1.0]`.
        #[serde(default = "default_scale")]
        scale: [f64; 2],
        /// Range of the crop's aspect ratio (w / h); default `[3/4, 4/3]`.
        #[serde(default = "default_ratio")]
        ratio: [f64; 2],
        /// A filter name (`nearest`, `bilinear`, `bicubic`, `box`, `hamming`, `lanczos`),
        /// `"random"`, or a list of names (1 to 8); default `bilinear`.
        #[serde(default = "default_rrc_interpolation")]
        interpolation: TimmInterpolation,
    },
    /// `Resize(size, max_size=None)`: an int resizes the shorter side, a pair sets both.
    Resize {
        /// Shorter side, or `[height, width]`.
        size: Size,
        /// Cap on the longer side when `size` is an int; default none.
        #[serde(default)]
        max_size: Option<u32>,
        /// Default `bilinear`.
        #[serde(default)]
        interpolation: Interpolation,
        /// Default `true`.
        #[serde(default = "default_true")]
        antialias: bool,
    },
    /// `CenterCrop(size)`.
    CenterCrop {
        /// Output size.
        size: Size,
    },
    /// `RandomHorizontalFlip(p=0.5)`.
    RandomHorizontalFlip {
        /// Probability of flipping; default 0.5.
        #[serde(default = "default_flip_p")]
        p: f64,
    },
    /// `RandomVerticalFlip(p=0.5)`: one coin, drawn whatever `p` (as torchvision, v1 and v2).
    /// A stage op.
    RandomVerticalFlip {
        /// Probability of flipping; default 0.5.
        #[serde(default = "default_flip_p")]
        p: f64,
    },
    /// `RandomRotation(degrees, interpolation="nearest", expand=False, center=None, fill=0)`:
    /// Pillow's `Image.rotate` by an angle drawn from `degrees` (a number `d` is `[-d, d]`).
    /// `expand=True` (on the PIL image only) makes the output hold the whole rotated image, its
    /// size following each angle: an op fixing the size (a crop, a resize to a pair, a random
    /// resized crop, timm's crop-or-pads) must follow it among the stage ops, not inside a
    /// random composition. A stage op.
    RandomRotation {
        /// A non-negative number `d` (`[-d, d]`) or a `[min, max]` pair, in degrees.
        degrees: NumberOrRange,
        /// Default `nearest`.
        #[serde(default)]
        interpolation: WarpInterpolation,
        /// Default `false`.
        #[serde(default)]
        expand: bool,
        /// `[x, y]` in pixels; default the image centre.
        #[serde(default)]
        center: Option<[f64; 2]>,
        /// Default 0 (black).
        #[serde(default)]
        fill: Fill,
    },
    /// `RandomAffine(degrees, translate=None, scale=None, shear=None, interpolation="nearest",
    /// fill=0, center=None)`: torchvision's `F.affine` on a PIL image. A stage op.
    RandomAffine {
        /// A non-negative number `d` (`[-d, d]`) or a `[min, max]` pair, in degrees.
        degrees: NumberOrRange,
        /// Maximal fractions `[a, b]` of width and height, each in `[0, 1]`; default none.
        #[serde(default)]
        translate: Option<[f64; 2]>,
        /// `[min, max]`, positive; default none (1).
        #[serde(default)]
        scale: Option<[f64; 2]>,
        /// A number `s` (`[-s, s]` on x), 2 bounds (x) or 4 (x then y), in degrees; default none.
        #[serde(default)]
        shear: Option<Shear>,
        /// Default `nearest`.
        #[serde(default)]
        interpolation: WarpInterpolation,
        /// Default 0 (black).
        #[serde(default)]
        fill: Fill,
        /// `[x, y]` in pixels; default the image centre.
        #[serde(default)]
        center: Option<[f64; 2]>,
    },
    /// `RandomPerspective(distortion_scale=0.5, p=0.5, interpolation="bilinear", fill=0)`:
    /// torchvision's `F.perspective` on a PIL image with drawn corners (Pillow's perspective
    /// transform, bit-exact given the coefficients; see
    /// [`perspective`](mod@crate::augment::geometry::perspective) for the solve). A stage op.
    RandomPerspective {
        /// How far corners may move, in `[0, 1]` of half the side; default 0.5.
        #[serde(default = "default_flip_p")]
        distortion_scale: f64,
        /// Probability of the warp, in `[0, 1]`; default 0.5.
        #[serde(default = "default_flip_p")]
        p: f64,
        /// Default `bilinear` (torchvision's default here, unlike `RandomAffine`'s).
        #[serde(default = "default_perspective_interpolation")]
        interpolation: WarpInterpolation,
        /// Default 0 (black).
        #[serde(default)]
        fill: Fill,
    },
    /// `ElasticTransform(alpha=50.0, sigma=5.0, interpolation="bilinear", fill=0)`: a
    /// displacement field drawn per sample (two uniform fields, blurred and scaled as
    /// torchvision's `get_params`/`make_params`), added to the identity grid and sampled with
    /// torch's `grid_sample` (NEAREST or BILINEAR; BICUBIC refused, as torchvision's tensor
    /// kernel refuses it) and a mask-channel fill. torchvision runs the same tensor kernel on
    /// a PIL image (through `pil_to_tensor`), so the op computes the same either side of
    /// `ToImage`. A stage op.
    ElasticTransform {
        /// `[x, y]` displacement magnitudes, finite; default `[50, 50]`.
        #[serde(default = "default_elastic_alpha")]
        alpha: [f64; 2],
        /// `[x, y]` smoothness: both positive (blurred) or both not; default `[5, 5]`.
        #[serde(default = "default_elastic_sigma")]
        sigma: [f64; 2],
        /// `nearest` or `bilinear` (default); `bicubic` is refused when planned.
        #[serde(default = "default_augmix_interpolation")]
        interpolation: WarpInterpolation,
        /// Default 0; floats within 0..=255; `null`: no fill channel (v2's `fill=None`).
        #[serde(default = "default_elastic_fill")]
        fill: Option<Fill>,
        /// Whose kernels (the blur's 1D kernel formula and the fill blend); default `v1`.
        #[serde(default)]
        api: PolicyApi,
    },
    /// `GaussianBlur(kernel_size, sigma=(0.1, 2.0))`: one sigma drawn for both axes; within
    /// one level of torchvision (a separable float32 convolution). A stage op.
    GaussianBlur {
        /// Odd, positive: one size, or `[x, y]`.
        kernel_size: KernelSize,
        /// A positive number `s` (fixed) or a `[min, max]` pair; default `[0.1, 2.0]`.
        #[serde(default = "default_blur_sigma")]
        sigma: NumberOrRange,
    },
    /// `Pad(padding, fill=0, padding_mode="constant")`: changes the sample's size. A stage op.
    Pad {
        /// One number (every side), `[left/right, top/bottom]` or `[left, top, right, bottom]`;
        /// non-negative.
        padding: PaddingArg,
        /// Default 0 (black); used by the constant mode only.
        #[serde(default)]
        fill: Fill,
        /// Default `constant`.
        #[serde(default)]
        padding_mode: PadMode,
    },
    /// `RandomCrop(size, padding=None, pad_if_needed=False, fill=0, padding_mode="constant")`,
    /// with v1's padding (`padding`, then `pad_if_needed`'s, each reflecting the previous
    /// result). The first op (of the decoded image, or after `Resize`) or a stage op.
    ///
    /// v2's class pads once by the sum of both paddings: the same pixels except in the
    /// reflect and symmetric modes with both paddings at work (the Python conversion refuses
    /// that case); it also skips the offset draw of an axis the crop fills (v1 draws
    /// `randint(1)` there), which moves later draws in the stream, not their distribution.
    RandomCrop {
        /// Output size.
        size: Size,
        /// As `Pad`'s; default none.
        #[serde(default)]
        padding: Option<PaddingArg>,
        /// Pad an image smaller than `size` up to it; default `false`.
        #[serde(default)]
        pad_if_needed: bool,
        /// Default 0 (black).
        #[serde(default)]
        fill: Fill,
        /// Default `constant`.
        #[serde(default)]
        padding_mode: PadMode,
    },
    /// timm's `ResizeKeepRatio(size, longest=0, interpolation='bilinear',
    /// random_scale_prob=0, random_scale_range=(0.85, 1.05), random_scale_area=False,
    /// random_aspect_prob=0, random_aspect_range=(0.9, 1.11))` (`timm.data.transforms`): the
    /// whole image resized (Pillow's antialiased filter) to `round(side * factor / ratio)` on
    /// each axis, `ratio` blending the larger and smaller of the image-to-`size` ratios by
    /// `longest`, the factors drawn per sample as timm's `get_params` draws them. Its size
    /// follows each image and each draw, so it stands first and a crop that fixes the size
    /// (`CenterCropOrPad`, `RandomCropOrPad`, `CenterCrop` or `RandomCrop`) must follow it.
    ResizeKeepRatio {
        /// The target `[height, width]` the ratios are taken against.
        size: Size,
        /// In `[0, 1]`: 0 fits the shorter ratio (the image covers `size`), 1 the longer (it
        /// fits inside `size`); default 0.
        #[serde(default)]
        longest: f64,
        /// A filter name, `"random"` (bilinear or bicubic per sample, drawn after the
        /// factors), or a list of names; default `bilinear`.
        #[serde(default = "default_rrc_interpolation")]
        interpolation: TimmInterpolation,
        /// Probability of a random scale factor, in `[0, 1]`; default 0.
        #[serde(default)]
        random_scale_prob: f64,
        /// `[min, max]` of the factor (uniform); default `[0.85, 1.05]`.
        #[serde(default = "default_keep_ratio_scale")]
        random_scale_range: [f64; 2],
        /// The factor `f` drawn is an area (`1 / sqrt(f)` scales the sides); default `false`.
        #[serde(default)]
        random_scale_area: bool,
        /// Probability of a random aspect factor, in `[0, 1]`; default 0.
        #[serde(default)]
        random_aspect_prob: f64,
        /// `[min, max]` of the aspect factor (log-uniform), positive; default `[0.9, 1.11]`.
        #[serde(default = "default_keep_ratio_aspect")]
        random_aspect_range: [f64; 2],
    },
    /// timm's `CenterCropOrPad(size, fill=0, padding_mode='constant')`: torchvision's
    /// `CenterCrop` with its padding's `fill` and `padding_mode` given.
    CenterCropOrPad {
        /// Output size.
        size: Size,
        /// Default 0 (black).
        #[serde(default)]
        fill: Fill,
        /// Default `constant`.
        #[serde(default)]
        padding_mode: PadMode,
    },
    /// timm's `RandomCropOrPad(size, fill=0, padding_mode='constant')`: a window placed at
    /// random within the image (a longer axis) or the image placed at random within the window
    /// (a shorter one, padded), `randint(0, |delta|)` per axis, rows first.
    RandomCropOrPad {
        /// Output size.
        size: Size,
        /// Default 0 (black).
        #[serde(default)]
        fill: Fill,
        /// Default `constant`.
        #[serde(default)]
        padding_mode: PadMode,
    },
    /// `ColorJitter(brightness=0, contrast=0, saturation=0, hue=0)`: each a number `v`
    /// (`[max(0, 1 - v), 1 + v]`, hue `[-v, v]` with `v <= 0.5`) or a `[min, max]` pair; 0 (or
    /// the no-op pair) turns an adjustment off. A pixel op (see [`Pipeline`](super::Pipeline)).
    ColorJitter {
        /// Default 0.
        #[serde(default)]
        brightness: JitterArg,
        /// Default 0.
        #[serde(default)]
        contrast: JitterArg,
        /// Default 0.
        #[serde(default)]
        saturation: JitterArg,
        /// Default 0.
        #[serde(default)]
        hue: JitterArg,
    },
    /// `Grayscale(num_output_channels=1)`. Only 3 is accepted: samples are 3-channel, and
    /// torchvision's default 1 would change the sample's shape. A pixel op.
    Grayscale {
        /// Default 1 (torchvision's), refused; write 3.
        #[serde(default = "default_one")]
        num_output_channels: i64,
    },
    /// `RandomGrayscale(p=0.1)`: grayscale replicated into 3 channels. A pixel op.
    RandomGrayscale {
        /// Default 0.1.
        #[serde(default = "default_grayscale_p")]
        p: f64,
    },
    /// `RandomPosterize(bits, p=0.5)`: keeps the top `bits` (1 to 8) bits. A pixel op.
    RandomPosterize {
        /// Bits kept per channel, 1 to 8.
        bits: i64,
        /// Default 0.5.
        #[serde(default = "default_half")]
        p: f64,
    },
    /// `RandomSolarize(threshold, p=0.5)`: inverts every level `>= threshold`. A pixel op.
    RandomSolarize {
        /// Finite; compared as Python compares an int with a float.
        threshold: f64,
        /// Default 0.5.
        #[serde(default = "default_half")]
        p: f64,
    },
    /// `RandomEqualize(p=0.5)`: Pillow's `ImageOps.equalize`. A pixel op.
    RandomEqualize {
        /// Default 0.5.
        #[serde(default = "default_half")]
        p: f64,
    },
    /// `RandomAutocontrast(p=0.5)`: Pillow's `ImageOps.autocontrast`. A pixel op.
    RandomAutocontrast {
        /// Default 0.5.
        #[serde(default = "default_half")]
        p: f64,
    },
    /// `RandomAdjustSharpness(sharpness_factor, p=0.5)`. A pixel op.
    RandomAdjustSharpness {
        /// Non-negative, finite (0 blurs, 1 is the original, 2 sharpens).
        sharpness_factor: f64,
        /// Default 0.5.
        #[serde(default = "default_half")]
        p: f64,
    },
    /// `RandomInvert(p=0.5)`. A pixel op.
    RandomInvert {
        /// Default 0.5.
        #[serde(default = "default_half")]
        p: f64,
    },
    /// torchvision v2's `JPEG(quality)`: the image compressed to JPEG at a quality drawn
    /// uniformly from `[min, max]` (`torch.randint(min, max + 1)`, drawn even when `min ==
    /// max`) and decompressed, with the settings of Pillow's `save(format="JPEG")` (and of
    /// torchvision's `encode_jpeg`, which give the same pixels). A pixel op, the same on a PIL
    /// image and after `ToImage`.
    #[serde(rename = "JPEG")]
    Jpeg {
        /// One quality or `[min, max]`, with `1 <= min <= max <= 100`.
        quality: QualityArg,
    },
    /// `TrivialAugmentWide(num_magnitude_bins=31, interpolation=NEAREST, fill=None)`: one op
    /// of the wide space at a random bin and sign. A pixel op; the chosen op has a nested span
    /// (`TrivialAugmentWide/Rotate`).
    TrivialAugmentWide {
        /// At least 2; default 31.
        #[serde(default = "default_magnitude_bins")]
        num_magnitude_bins: i64,
        /// Of the shears, translations and rotations: `nearest` (default), `bilinear` or
        /// `bicubic`.
        #[serde(default)]
        interpolation: WarpInterpolation,
        /// Where the warps uncover the image: None (black, default), a number, or 1 or 3
        /// numbers, as torchvision's `fill` on a PIL image.
        #[serde(default)]
        fill: Option<Fill>,
        /// Whose draws: `v1` (`torchvision.transforms`, default) or `v2`
        /// (`torchvision.transforms.v2`: a float sign draw, Solarize thresholds from a float64
        /// table).
        #[serde(default)]
        api: PolicyApi,
    },
    /// `RandAugment(num_ops=2, magnitude=9, num_magnitude_bins=31, interpolation=NEAREST,
    /// fill=None)`: `num_ops` random ops at bin `magnitude`. A pixel op; nested spans per op.
    RandAugment {
        /// 0 to 16; default 2.
        #[serde(default = "default_rand_augment_ops")]
        num_ops: i64,
        /// The bin, below `num_magnitude_bins`; default 9.
        #[serde(default = "default_rand_augment_magnitude")]
        magnitude: i64,
        /// At least 2; default 31.
        #[serde(default = "default_magnitude_bins")]
        num_magnitude_bins: i64,
        /// Default `nearest`.
        #[serde(default)]
        interpolation: WarpInterpolation,
        /// Default None (black).
        #[serde(default)]
        fill: Option<Fill>,
        /// Default `v1`.
        #[serde(default)]
        api: PolicyApi,
    },
    /// `AutoAugment(policy=IMAGENET, interpolation=NEAREST, fill=None)`: one of the policy's
    /// 25 sub-policies. A pixel op; nested spans per op applied.
    AutoAugment {
        /// `imagenet` (default), `cifar10` or `svhn`.
        #[serde(default)]
        policy: AutoAugmentPolicySpec,
        /// Default `nearest`.
        #[serde(default)]
        interpolation: WarpInterpolation,
        /// Default None (black).
        #[serde(default)]
        fill: Option<Fill>,
        /// Default `v1`.
        #[serde(default)]
        api: PolicyApi,
    },
    /// `AugMix(severity=3, mixture_width=3, chain_depth=-1, alpha=1.0, all_ops=True,
    /// interpolation=BILINEAR, fill=None)`. A pixel op run as torchvision runs it on a uint8
    /// tensor (torch's tensor kernels, a float32 mix truncated back); nested spans per op.
    /// `fill` values are floats within 0..=255 (None: no fill channel, not the same as 0).
    AugMix {
        /// Default 3.
        #[serde(default = "default_augmix_severity")]
        severity: i64,
        /// Default 3.
        #[serde(default = "default_augmix_width")]
        mixture_width: i64,
        /// Default -1 (a random depth in 1..=3).
        #[serde(default = "default_augmix_chain_depth")]
        chain_depth: i64,
        /// Default 1.0.
        #[serde(default = "default_augmix_alpha")]
        alpha: f64,
        /// Default true.
        #[serde(default = "default_true")]
        all_ops: bool,
        /// `nearest` or `bilinear` (default); `bicubic` is refused when planned (torchvision's
        /// tensor kernels refuse it).
        #[serde(default = "default_augmix_interpolation")]
        interpolation: WarpInterpolation,
        /// Default None (black).
        #[serde(default)]
        fill: Option<Fill>,
        /// Default `v1`.
        #[serde(default)]
        api: PolicyApi,
    },
    /// timm's `RandAugment(ops, num_layers=2, choice_weights=None)`
    /// (`timm.data.auto_augment`, what `create_transform(auto_augment="rand-...")` builds):
    /// `num_layers` of `ops` per sample, uniformly with replacement, or without replacement
    /// by `choice_weights` (numpy's `choice(replace=False, p=...)`); each with timm's draws
    /// (skip coin, magnitude noise, clamp, sign, filter) and Pillow's kernels. A pixel op;
    /// nested spans per op applied (`TimmRandAugment/Rotate`).
    TimmRandAugment {
        /// The `AugmentOp`s, in timm's order; 1 to 64.
        ops: Vec<TimmAugmentOpSpec>,
        /// 0 to 16; default 2.
        #[serde(default = "default_timm_layers")]
        num_layers: i64,
        /// One non-negative weight per op; default None (uniform, with replacement).
        #[serde(default)]
        choice_weights: Option<Vec<f64>>,
    },
    /// timm's `AutoAugment(policy)` (what `create_transform(auto_augment="original")`,
    /// `"originalr"`, `"v0"`, `"v0r"` build): per sample one sub-policy, uniformly, whose ops
    /// then run in order, each with timm's draws (skip coin, magnitude, sign, filter) and
    /// Pillow's kernels. A pixel op; nested spans per op applied (`TimmAutoAugment/Rotate`).
    TimmAutoAugment {
        /// The sub-policies, each a list of `AugmentOp`s (at most 16); 1 to 256 of them.
        policy: Vec<Vec<TimmAugmentOpSpec>>,
    },
    /// timm's `AugMixAugment(ops, alpha=1.0, width=3, depth=-1, blended=False)` (what
    /// `create_transform(auto_augment="augmix-...")` builds): `width` chains of `depth` ops
    /// (random 1 to 3 per chain when `depth <= 0`) chosen uniformly, each op with timm's
    /// draws, mixed by Dirichlet weights in float32 and blended with the image by a Beta
    /// draw through Pillow's `Image.blend` (`blended`: each chain blended into the image in
    /// turn). A pixel op; nested spans per op applied (`TimmAugMix/Rotate`).
    TimmAugMix {
        /// The `AugmentOp`s, in timm's order; 1 to 64.
        ops: Vec<TimmAugmentOpSpec>,
        /// The Dirichlet and Beta concentration, positive; default 1.0.
        #[serde(default = "default_augmix_alpha")]
        alpha: f64,
        /// Chains, 1 to 16; default 3.
        #[serde(default = "default_augmix_width")]
        width: i64,
        /// Ops per chain, at most 16; 0 or below (default -1): random 1 to 3 per chain.
        #[serde(default = "default_augmix_chain_depth")]
        depth: i64,
        /// Blend each chain into the image in turn (timm's `b1`); default false.
        #[serde(default)]
        blended: bool,
    },
    /// `RandomApply(transforms, p=0.5)`: the stage ops `transforms` (a nested `Compose` is
    /// flattened into them), all or none. One draw: v1's `p < torch.rand(1)` skips, so a draw
    /// equal to `p` applies; v2 skips on `torch.rand(1) >= p` (they differ only for that one
    /// value, so `p = 0` applies with probability 2^-24 here, as in v1). Every outcome must
    /// leave the size the ops found.
    RandomApply {
        /// Stage ops, nested compositions included.
        transforms: Vec<OpSpec>,
        /// Default 0.5.
        #[serde(default = "default_half")]
        p: f64,
    },
    /// `RandomChoice(transforms, p=None)`: one of `transforms` (a `Compose` among them is one
    /// choice running its ops in order), weighted by `p` (`None`: uniform). v1 draws with
    /// Python's `random.choices`, v2 with `torch.multinomial`: the same distribution. Every
    /// choice must leave the same size.
    RandomChoice {
        /// 1 to 16 stage ops or compositions.
        transforms: Vec<OpSpec>,
        /// Non-negative weights, one per transform (need not sum to 1); default uniform.
        #[serde(default)]
        p: Option<Vec<f64>>,
    },
    /// `RandomOrder(transforms)`: all of `transforms` (a `Compose` among them moves as one) in
    /// a random order (v1 `random.shuffle`, v2 `torch.randperm`: both uniform). Every order
    /// must leave the same size.
    RandomOrder {
        /// 1 to 16 stage ops or compositions.
        transforms: Vec<OpSpec>,
    },
    /// `Compose(transforms)` nested in a pipeline: its ops stand where it stands (flattened),
    /// except as one choice of `RandomChoice` or one item of `RandomOrder`, where it is one unit.
    Compose {
        /// The ops, in order.
        transforms: Vec<OpSpec>,
    },
    /// `RandomErasing(p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0, inplace=False)`: a
    /// tensor op, after `ToTensor` (before or after `Normalize`), on the float32 sample in the
    /// batch slot. `inplace` changes nothing here (the slot is always erased in place). Refused
    /// with `uint8` output: the slot then holds pixels, and the values erasing writes belong
    /// to the float tensor. v2's class takes the same arguments and draws the same.
    RandomErasing {
        /// Default 0.5.
        #[serde(default = "default_half")]
        p: f64,
        /// Range of the erased area as a fraction of the image's; default `[0.02, 0.33]`.
        #[serde(default = "default_erase_scale")]
        scale: [f64; 2],
        /// Range of the erased rectangle's aspect ratio (h / w); default `[0.3, 3.3]`.
        #[serde(default = "default_erase_ratio")]
        ratio: [f64; 2],
        /// Default 0.
        #[serde(default)]
        value: EraseFill,
        /// Default `false`; accepted for torchvision's signature, no effect.
        #[serde(default)]
        inplace: bool,
    },
    /// timm's `RandomErasing(probability=0.5, min_area=0.02, max_area=1/3, min_aspect=0.3,
    /// max_aspect=None, mode="const", min_count=1, max_count=None)`
    /// (`timm.data.random_erasing`, what `create_transform(re_prob=, re_mode=, re_count=)`
    /// appends after `Normalize`): with probability `probability`, `min_count` to `max_count`
    /// blocks, each up to 10 attempts at `uniform(min_area, max_area) / count` of the area
    /// with a log-uniform aspect, filled with zeros (`const`), one standard normal per channel
    /// (`rand`) or per pixel (`pixel`); timm's draws (see
    /// [`TimmRandomErasing`](crate::augment::policy::TimmRandomErasing)). A tensor op, as
    /// `RandomErasing` (after `ToTensor`, before or after `Normalize`; refused with `uint8`
    /// output), in its own span. timm's `num_splits` and `device` have no meaning per sample
    /// and are not here.
    TimmRandomErasing {
        /// Default 0.5.
        #[serde(default = "default_half")]
        probability: f64,
        /// Default 0.02.
        #[serde(default = "default_timm_min_area")]
        min_area: f64,
        /// Default 1/3.
        #[serde(default = "default_timm_max_area")]
        max_area: f64,
        /// Default 0.3.
        #[serde(default = "default_timm_min_aspect")]
        min_aspect: f64,
        /// Default None (or 0): `1 / min_aspect`.
        #[serde(default)]
        max_aspect: Option<f64>,
        /// `const` (default), `rand` or `pixel`.
        #[serde(default)]
        mode: TimmEraseModeSpec,
        /// Default 1.
        #[serde(default = "default_one")]
        min_count: i64,
        /// Default None (or 0): `min_count`; at most 64.
        #[serde(default)]
        max_count: Option<i64>,
    },
    /// `ToImage()` (or `PILToTensor()`) standing before other ops: from here on torchvision
    /// holds a uint8 tensor, so the colour ops, the warps and the policies after it run torch's
    /// tensor kernels (truncating float32 blends, float HSV, `grid_sample` warps, which refuse
    /// `bicubic`) instead of Pillow's arithmetic. A marker: it costs nothing when a sample
    /// runs (the conversion to the output stays where `ToTensor`/`PILToTensor` stands), may
    /// stand anywhere before the conversion (first, as in torchvision's v2 recipes, or after
    /// the crop), and not inside `RandomApply`/`RandomChoice`/`RandomOrder`.
    ToImage {
        /// Whose tensor kernels the single ops after it run: `v2` (default,
        /// `torchvision.transforms.v2.functional`) or `v1` (`torchvision.transforms.functional`,
        /// after v1's `PILToTensor`). The policies and AugMix keep their own `api`.
        #[serde(default = "default_tensor_api")]
        api: PolicyApi,
    },
    /// `ToTensor()`: u8 HWC to f32 CHW in [0, 1], `x / 255`
    /// ([`Scaling::Divide`](crate::tensor::Scaling::Divide); also v1's
    /// `ConvertImageDtype(torch.float32)`).
    ToTensor,
    /// v2's `ToDtype(torch.float32, scale=True)` (and v2's `ConvertImageDtype(torch.float32)`):
    /// `ToTensor` with torchvision v2's arithmetic, `x * float32(1 / 255)`
    /// ([`Scaling::Reciprocal`](crate::tensor::Scaling::Reciprocal)), one ulp off `ToTensor`'s on 126 of the 256 levels. Stands
    /// where `ToTensor` may, with the same ops after it.
    #[serde(rename = "ToDtype")]
    ToDtypeFloat32,
    /// `PILToTensor()`: u8 HWC to u8 CHW.
    #[serde(rename = "PILToTensor")]
    PilToTensor,
    /// `Normalize(mean, std)` per channel.
    Normalize {
        /// Per-channel mean.
        mean: [f32; 3],
        /// Per-channel standard deviation, non-zero.
        std: [f32; 3],
    },
    /// v2's `RGB()`: three channels. On a three-channel image nothing; on a one-channel one
    /// (an `L` image, or after `Grayscale(1)`) the gray level in all three, as
    /// `Grayscale(num_output_channels=3)` gives. A marker: one-channel images already run
    /// replicated into three channels, so it changes no pixel, only the sample's channel count
    /// and the rules the tensor kernels after it follow. Inside `RandomApply`/`RandomChoice`/
    /// `RandomOrder` only where it changes nothing (else some samples would differ in shape).
    #[serde(rename = "RGB")]
    Rgb,
    /// v2's `GaussianNoise(mean=0.0, sigma=0.1, clip=True)`: a tensor op on the float32 sample
    /// (after `ToTensor`, before or after `Normalize`), `image + (mean + N(0, 1) * sigma)` per
    /// element in float32, clamped to `[0, 1]` when `clip`; the normals from the sample's
    /// generator. torchvision refuses it on a PIL image; on a uint8 tensor it is not native.
    /// Refused with `uint8` output (the slot then holds pixels).
    GaussianNoise {
        /// Default 0.
        #[serde(default)]
        mean: f64,
        /// Non-negative; default 0.1.
        #[serde(default = "default_noise_sigma")]
        sigma: f64,
        /// Default `true`.
        #[serde(default = "default_true")]
        clip: bool,
    },
    /// v2's `RandomPhotometricDistort(brightness=(0.875, 1.125), contrast=(0.5, 1.5),
    /// saturation=(0.5, 1.5), hue=(-0.05, 0.05), p=0.5)`: each adjustment with probability `p`
    /// (a coin, then its factor, uniform in its range, in the order brightness, contrast,
    /// saturation, hue), then a coin for contrast before or after saturation and hue, then a
    /// coin (`p`) for a channel permutation (`randperm`); applied brightness, contrast (if
    /// before), saturation, hue, contrast (if after), permutation, with `ColorJitter`'s kernels.
    /// A pixel op (Pillow's arithmetic on a PIL image, v2's tensor kernels after `ToImage`).
    RandomPhotometricDistort {
        /// `[min, max]`, non-negative; default `[0.875, 1.125]`.
        #[serde(default = "default_distort_brightness")]
        brightness: [f64; 2],
        /// `[min, max]`, non-negative; default `[0.5, 1.5]`.
        #[serde(default = "default_distort_contrast")]
        contrast: [f64; 2],
        /// `[min, max]`, non-negative; default `[0.5, 1.5]`.
        #[serde(default = "default_distort_contrast")]
        saturation: [f64; 2],
        /// `[min, max]` within `[-0.5, 0.5]`; default `[-0.05, 0.05]`.
        #[serde(default = "default_distort_hue")]
        hue: [f64; 2],
        /// Default 0.5.
        #[serde(default = "default_half")]
        p: f64,
    },
    /// v2's `RandomChannelPermutation()`: the channels in a uniformly random order
    /// (`torch.randperm(channels)`), per sample. A pixel op; on a one-channel image the
    /// identity, drawing nothing (`randperm(1)`).
    RandomChannelPermutation,
}
