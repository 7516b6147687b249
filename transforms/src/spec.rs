//! The declarative pipeline: torchvision's op names and arguments in, an execution plan out.
//!
//! A [`PipelineSpec`] is what users write (or what `from_torchvision` produces); [`Pipeline`]
//! checks it once, decides whether the crop can drive a region-of-interest decode and whether the
//! ops fuse (or, with pixel ops, run in stages over a u8 image of the output size), and then runs
//! samples. It must not own threads, files or a profiler: the caller
//! passes bytes, a per-sample RNG and an [`OpObserver`] that sees every op's boundaries.

use serde::{Deserialize, Serialize};

use crate::augment::color::{self, ColorScratch};
use crate::augment::policy::{draw_p, draw_p_item, ColorJitter, ColorStep};
use crate::crop::{center_crop_rect, resize_shorter_side, RandomResizedCrop};
use crate::decode::{DecodeContext, DecodeOptions, Decoder};
use crate::error::{Error, Result};
use crate::fused::{self, FusedKernel, OutputKind, OutputSlot};
use crate::image::{CropRect, RgbImage, RgbView};
use crate::resize::{Filter, Resizer, SimdLevel};
use crate::rng::SampleRng;
use crate::tensor;

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
    fn square_or_pair(self) -> (u32, u32) {
        match self {
            Size::Int(s) => (s, s),
            Size::Pair([h, w]) => (h, w),
        }
    }
}

/// Interpolation modes of `Resize` and `RandomResizedCrop`, as torchvision applies them to PIL
/// images (Pillow's filters, bit-exact). The other modes (box, hamming, lanczos) are not
/// implemented: naming one is a deserialization error that names it, not a silent substitute.
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
}

impl Interpolation {
    /// The resize filter that runs it.
    pub fn filter(self) -> Filter {
        match self {
            Interpolation::Nearest => Filter::Nearest,
            Interpolation::Bilinear => Filter::Bilinear,
            Interpolation::Bicubic => Filter::Bicubic,
        }
    }
}

fn default_scale() -> [f64; 2] {
    [0.08, 1.0]
}

fn default_ratio() -> [f64; 2] {
    [3.0 / 4.0, 4.0 / 3.0]
}

fn default_flip_p() -> f64 {
    0.5
}

fn default_true() -> bool {
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

impl Default for JitterArg {
    /// 0: the adjustment is off, torchvision's default.
    fn default() -> Self {
        JitterArg::Number(0.0)
    }
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
    /// `ColorJitter(brightness=0, contrast=0, saturation=0, hue=0)`: each a number `v`
    /// (`[max(0, 1 - v), 1 + v]`, hue `[-v, v]` with `v <= 0.5`) or a `[min, max]` pair; 0 (or
    /// the no-op pair) turns an adjustment off. A pixel op (see [`Pipeline`]).
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
    /// `ToTensor()`: u8 HWC to f32 CHW in [0, 1].
    ToTensor,
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
}

/// Element type of the samples written into batch buffers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputDtype {
    /// As the torchvision pipeline produces: `float32` CHW after `ToTensor`/`Normalize`.
    #[default]
    Float32,
    /// `uint8` pixels, 4x less memory and bandwidth; `ToTensor`/`Normalize` are left to the
    /// consumer (typically on the GPU), see [`Pipeline::deferred_normalize`].
    Uint8,
}

/// Memory layout of `uint8` output (`float32` output is always CHW, as torchvision's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Channels first, `[3, H, W]`.
    #[default]
    Chw,
    /// Channels last, `[H, W, 3]`.
    Hwc,
}

/// How a sample's ops run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Execution {
    /// Crop, resize, flip, to-tensor and normalize in one pass into the output slot.
    #[default]
    Fused,
    /// Each op on its own buffer, one observer span each: for profiling each op and for parity.
    OpByOp,
}

fn default_max_pixels() -> u64 {
    DecodeOptions::default().max_pixels
}

/// A whole per-sample pipeline: decode options, ops and output format.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSpec {
    /// The ops, in torchvision order.
    pub ops: Vec<OpSpec>,
    /// JPEG decoder; default `turbo` (libjpeg-turbo, Pillow-exact).
    #[serde(default)]
    pub decoder: Decoder,
    /// Default `float32`.
    #[serde(default)]
    pub output: OutputDtype,
    /// Layout of `uint8` output; default `chw`.
    #[serde(default)]
    pub layout: Layout,
    /// Decode only the region a random crop needs when the decoder can (exact); default `true`.
    #[serde(default = "default_true")]
    pub roi_decode: bool,
    /// DCT-scaled decode (1/2, 1/4, 1/8) when the crop is much larger than the output.
    /// Faster, NOT pixel-exact with Pillow; default `false`.
    #[serde(default)]
    pub dct_scaling: bool,
    /// Default `fused`.
    #[serde(default)]
    pub execution: Execution,
    /// Decode-bomb limit in pixels; default 178,956,970 (Pillow's).
    #[serde(default = "default_max_pixels")]
    pub max_pixels: u64,
}

impl PipelineSpec {
    /// A spec with these ops and every other field at its default.
    pub fn new(ops: Vec<OpSpec>) -> Self {
        PipelineSpec {
            ops,
            decoder: Decoder::default(),
            output: OutputDtype::default(),
            layout: Layout::default(),
            roi_decode: true,
            dct_scaling: false,
            execution: Execution::default(),
            max_pixels: default_max_pixels(),
        }
    }

    /// torchvision's ImageNet training pipeline: `RandomResizedCrop(size)`,
    /// `RandomHorizontalFlip()`, `ToTensor()`, `Normalize(IMAGENET_MEAN, IMAGENET_STD)`.
    pub fn imagenet_train(size: u32) -> Self {
        Self::new(vec![
            OpSpec::RandomResizedCrop {
                size: Size::Int(size),
                scale: default_scale(),
                ratio: default_ratio(),
                interpolation: Interpolation::Bilinear,
                antialias: true,
            },
            OpSpec::RandomHorizontalFlip { p: 0.5 },
            OpSpec::ToTensor,
            OpSpec::Normalize {
                mean: IMAGENET_MEAN,
                std: IMAGENET_STD,
            },
        ])
    }

    /// torchvision's ImageNet evaluation pipeline: `Resize(resize)`, `CenterCrop(crop)`,
    /// `ToTensor()`, `Normalize(IMAGENET_MEAN, IMAGENET_STD)`.
    pub fn imagenet_eval(resize: u32, crop: u32) -> Self {
        Self::new(vec![
            OpSpec::Resize {
                size: Size::Int(resize),
                max_size: None,
                interpolation: Interpolation::Bilinear,
                antialias: true,
            },
            OpSpec::CenterCrop {
                size: Size::Int(crop),
            },
            OpSpec::ToTensor,
            OpSpec::Normalize {
                mean: IMAGENET_MEAN,
                std: IMAGENET_STD,
            },
        ])
    }

    /// Chained setter for [`PipelineSpec::decoder`].
    pub fn decoder(mut self, decoder: Decoder) -> Self {
        self.decoder = decoder;
        self
    }

    /// Chained setter for [`PipelineSpec::output`].
    pub fn output(mut self, output: OutputDtype) -> Self {
        self.output = output;
        self
    }

    /// Chained setter for [`PipelineSpec::layout`].
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// Chained setter for [`PipelineSpec::roi_decode`].
    pub fn roi_decode(mut self, on: bool) -> Self {
        self.roi_decode = on;
        self
    }

    /// Chained setter for [`PipelineSpec::dct_scaling`].
    pub fn dct_scaling(mut self, on: bool) -> Self {
        self.dct_scaling = on;
        self
    }

    /// Chained setter for [`PipelineSpec::execution`].
    pub fn execution(mut self, execution: Execution) -> Self {
        self.execution = execution;
        self
    }

    /// Chained setter for [`PipelineSpec::max_pixels`].
    pub fn max_pixels(mut self, max_pixels: u64) -> Self {
        self.max_pixels = max_pixels;
        self
    }
}

/// ImageNet channel means, as in torchvision's reference scripts.
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
/// ImageNet channel standard deviations, as in torchvision's reference scripts.
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// The ops an [`OpObserver`] sees. Reading the file and collating are the loader's, not here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Bytes to RGB pixels (full or region of interest), color conversion included.
    Decode,
    /// Drawing the random crop parameters (and the flip coin).
    CropParams,
    /// Copying the crop out (op-by-op; with pixel ops, the center crop into the staging image).
    Crop,
    /// Resizing (op-by-op, or the whole-image resize of an eval pipeline; with pixel ops, the
    /// crop + resize (+ a flip standing before them) into the staging image).
    Resize,
    /// Horizontal flip (op-by-op; with pixel ops, a flip standing between two of them).
    Flip,
    /// u8 HWC to f32 CHW (op-by-op; with pixel ops, the final pass from the staging image into
    /// the slot, with normalize and a flip standing after them fused in, for every output).
    ToTensor,
    /// Per-channel normalization (op-by-op only).
    Normalize,
    /// Crop + resize + flip + to-tensor + normalize in one pass.
    Fused,
    /// `ColorJitter`: its draw and all four adjustments, one span.
    ColorJitter,
    /// `Grayscale(num_output_channels=3)`.
    Grayscale,
    /// `RandomGrayscale`: the coin and, when it says so, the conversion.
    RandomGrayscale,
    /// `RandomPosterize`.
    RandomPosterize,
    /// `RandomSolarize`.
    RandomSolarize,
    /// `RandomEqualize`.
    RandomEqualize,
    /// `RandomAutocontrast`.
    RandomAutocontrast,
    /// `RandomAdjustSharpness`.
    RandomAdjustSharpness,
    /// `RandomInvert`.
    RandomInvert,
}

impl Op {
    /// Every op, in declaration order (`op as usize` indexes this array; the loader's
    /// profiler tables rely on it, so new ops go at the end, here and in the enum).
    pub const ALL: [Op; 17] = [
        Op::Decode,
        Op::CropParams,
        Op::Crop,
        Op::Resize,
        Op::Flip,
        Op::ToTensor,
        Op::Normalize,
        Op::Fused,
        Op::ColorJitter,
        Op::Grayscale,
        Op::RandomGrayscale,
        Op::RandomPosterize,
        Op::RandomSolarize,
        Op::RandomEqualize,
        Op::RandomAutocontrast,
        Op::RandomAdjustSharpness,
        Op::RandomInvert,
    ];

    /// The name spans and summaries use.
    pub fn name(self) -> &'static str {
        match self {
            Op::Decode => "decode",
            Op::CropParams => "crop_params",
            Op::Crop => "crop",
            Op::Resize => "resize",
            Op::Flip => "flip",
            Op::ToTensor => "to_tensor",
            Op::Normalize => "normalize",
            Op::Fused => "fused",
            Op::ColorJitter => "ColorJitter",
            Op::Grayscale => "Grayscale",
            Op::RandomGrayscale => "RandomGrayscale",
            Op::RandomPosterize => "RandomPosterize",
            Op::RandomSolarize => "RandomSolarize",
            Op::RandomEqualize => "RandomEqualize",
            Op::RandomAutocontrast => "RandomAutocontrast",
            Op::RandomAdjustSharpness => "RandomAdjustSharpness",
            Op::RandomInvert => "RandomInvert",
        }
    }
}

/// Sees the boundaries of every op a sample runs through (the profiler's attachment point).
/// Both hooks default to nothing, so `&mut ()` observes nothing at no cost.
pub trait OpObserver {
    /// Called right before `op` starts.
    fn enter(&mut self, op: Op) {
        let _ = op;
    }
    /// Called right after `op` ends, also when it failed.
    fn exit(&mut self, op: Op) {
        let _ = op;
    }
}

impl OpObserver for () {}

/// Runs `f` as op `op` for `obs`.
#[inline]
fn observed<T>(obs: &mut dyn OpObserver, op: Op, f: impl FnOnce() -> T) -> T {
    obs.enter(op);
    let out = f();
    obs.exit(op);
    out
}

/// What a sample's run did, for tests and the profiler's per-sample records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleReport {
    /// Source image width.
    pub width: u32,
    /// Source image height.
    pub height: u32,
    /// The crop taken from the source (the whole image when the pipeline does not crop first).
    pub crop: CropRect,
    /// Whether the sample was flipped (mirrored on the whole: an odd number of flips ran).
    pub flipped: bool,
}

/// The geometric part of a plan, reduced to what the fused kernel needs.
#[derive(Clone, Debug, PartialEq)]
enum Geometry {
    /// Random crop of the source, resized to the output.
    RandomResizedCrop(RandomResizedCrop),
    /// Resize the whole image (shorter side or exact), then optionally center-crop.
    Resize {
        size: Size,
        max_size: Option<u32>,
        center_crop: Option<(u32, u32)>,
    },
    /// Center crop of the source at its own resolution.
    CenterCrop((u32, u32)),
}

/// A checked, planned [`PipelineSpec`]; immutable and shared by every worker.
///
/// Without pixel ops a sample is one decode (of the crop's region when it can) and one fused
/// pass into the slot. With pixel ops (the colour ops of [`OpSpec`], in any order and number,
/// with flips among them, between the geometry and the conversion) execution is staged: the
/// same decode; crop + resize (+ a flip written before the pixel ops) into a u8 image of the
/// output size held by the [`PipelineContext`]; each pixel op in place there, in the order
/// written, in its own span; then to-tensor (+ normalize, + a flip written after them) into the
/// slot. The pixel ops see what torchvision's would see on a PIL image (Pillow's arithmetic).
///
/// Draws, from the sample's generator, in the order the ops are written (torchvision's):
/// the crop, then each flip's coin and each pixel op's parameters. A pixel op draws even when
/// it does not run (`p = 0`, a coin that says no), as torchvision does; a flip with `p = 0`
/// draws nothing (as before pixel ops existed, so those samples do not change).
///
/// Must not allocate per sample once the context is warm, nor draw outside this order: output
/// must stay a function of (seed, epoch, index), whatever the number of workers.
#[derive(Clone, Debug)]
pub struct Pipeline {
    spec: PipelineSpec,
    geometry: Geometry,
    /// The resize filter of the geometry (its `interpolation`; bilinear for `CenterCrop`).
    filter: Filter,
    /// The flip standing right after the geometry (before any pixel op): fused into the resize.
    flip_p: f64,
    /// The pixel ops; `None` runs the single fused pass.
    staged: Option<Staged>,
    output: OutputKind,
    deferred_normalize: Option<([f32; 3], [f32; 3])>,
    out_h: u32,
    out_w: u32,
}

/// Per-worker scratch of a [`Pipeline`]: decoder handle, resizer, intermediate images.
/// Reused across samples so the steady state allocates nothing.
#[derive(Debug)]
pub struct PipelineContext {
    decode: DecodeContext,
    kernel: FusedKernel,
    resizer: Resizer,
    decoded: RgbImage,
    stage_a: RgbImage,
    stage_b: RgbImage,
    color: ColorScratch,
}

impl PipelineContext {
    /// Bytes its image and decode buffers hold on to (they only grow, to the largest image
    /// seen). The resizer's rows and coefficients, a few rows wide, are not counted.
    pub fn retained_bytes(&self) -> usize {
        self.decode.retained_bytes()
            + self.decoded.retained_bytes()
            + self.stage_a.retained_bytes()
            + self.stage_b.retained_bytes()
    }

    /// Runs the resize and conversion kernels up to `limit` ([`fused::default_simd`] unless
    /// set), for profiling one kernel set against another. The samples are identical at every
    /// level.
    pub fn set_simd_limit(&mut self, limit: SimdLevel) {
        self.kernel.set_simd_limit(limit);
        self.resizer.set_simd_limit(limit);
    }
}

fn bad_order(reason: &str) -> Error {
    Error::invalid(
        "ops",
        format!(
            "{reason}; supported: RandomResizedCrop | Resize [CenterCrop] | CenterCrop, then \
             any number of RandomHorizontalFlip and pixel ops (ColorJitter, Grayscale, \
             RandomGrayscale, RandomPosterize, RandomSolarize, RandomEqualize, \
             RandomAutocontrast, RandomAdjustSharpness, RandomInvert) in any order, then \
             ToTensor [Normalize] or PILToTensor"
        ),
    )
}

/// `err` with the op it came from named in front of its reason (the argument is named already).
fn in_op(op: &'static str, err: Error) -> Error {
    match err {
        Error::InvalidArgument { name, reason } => Error::InvalidArgument {
            name,
            reason: format!("{op}: {reason}"),
        },
        other => other,
    }
}

/// torchvision v2's check of every `p` (v1 checks none; a `p` outside `[0, 1]` is a mistake).
fn check_p(op: &'static str, p: f64) -> Result<f64> {
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::invalid(
            "p",
            format!("{op}: {p} is not a probability in [0, 1]"),
        ));
    }
    Ok(p)
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

/// One op of the staged part of a plan, between the geometry and the conversion, parameters
/// checked. The ops of `augment::geometry` (vertical flip, rotation, affine, blur, padding)
/// plug in here, an arm each, with their draws and kernels in [`StageOp::run`].
#[derive(Clone, Debug, PartialEq)]
enum StageOp {
    HFlip { p: f64 },
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

impl StageOp {
    /// `Ok(None)`: `op` is not a flip or a pixel op (the conversion, or an op out of place).
    fn plan(op: &OpSpec) -> Result<Option<Self>> {
        Ok(Some(match op {
            OpSpec::RandomHorizontalFlip { p } => StageOp::HFlip {
                p: check_p("RandomHorizontalFlip", *p)?,
            },
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
                StageOp::ColorJitter(jitter)
            }
            OpSpec::Grayscale {
                num_output_channels,
            } => {
                if *num_output_channels != 3 {
                    return Err(Error::invalid(
                        "num_output_channels",
                        format!(
                            "Grayscale: {num_output_channels} is not supported, samples are \
                             3-channel (torchvision's default is 1); write num_output_channels=3"
                        ),
                    ));
                }
                StageOp::Grayscale
            }
            OpSpec::RandomGrayscale { p } => StageOp::RandomGrayscale {
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
                StageOp::Posterize {
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
                StageOp::Solarize {
                    threshold: *threshold,
                    p: check_p("RandomSolarize", *p)?,
                }
            }
            OpSpec::RandomEqualize { p } => StageOp::Equalize {
                p: check_p("RandomEqualize", *p)?,
            },
            OpSpec::RandomAutocontrast { p } => StageOp::Autocontrast {
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
                StageOp::Sharpness {
                    factor: *sharpness_factor,
                    p: check_p("RandomAdjustSharpness", *p)?,
                }
            }
            OpSpec::RandomInvert { p } => StageOp::Invert {
                p: check_p("RandomInvert", *p)?,
            },
            _ => return Ok(None),
        }))
    }

    /// The span this op runs in.
    fn span(&self) -> Op {
        match self {
            StageOp::HFlip { .. } => Op::Flip,
            StageOp::ColorJitter(_) => Op::ColorJitter,
            StageOp::Grayscale => Op::Grayscale,
            StageOp::RandomGrayscale { .. } => Op::RandomGrayscale,
            StageOp::Posterize { .. } => Op::RandomPosterize,
            StageOp::Solarize { .. } => Op::RandomSolarize,
            StageOp::Equalize { .. } => Op::RandomEqualize,
            StageOp::Autocontrast { .. } => Op::RandomAutocontrast,
            StageOp::Sharpness { .. } => Op::RandomAdjustSharpness,
            StageOp::Invert { .. } => Op::RandomInvert,
        }
    }

    /// Draws this op's parameters from `rng` (torchvision's draws, in its order and number:
    /// one coin per `Random*` op even at `p` 0 or 1, `randperm(4)` and a factor per enabled
    /// adjustment for `ColorJitter`; flips keep the pipeline's rule of no coin at `p = 0`)
    /// and applies it to `img` in place. Returns whether it mirrored the image.
    ///
    /// The coins are v1's comparisons (`draw_p` for `RandomGrayscale`, `draw_p_item` for the
    /// others); v2 compares in float32 throughout, which differs only for the one draw equal
    /// to `p` narrowed to float32.
    fn run(
        &self,
        img: &mut RgbImage,
        scratch: &mut ColorScratch,
        rng: &mut SampleRng,
    ) -> Result<bool> {
        match *self {
            StageOp::HFlip { p } => {
                let flip = p > 0.0 && tensor::draw_flip(rng, p);
                if flip {
                    tensor::hflip(img);
                }
                return Ok(flip);
            }
            StageOp::ColorJitter(jitter) => {
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
            StageOp::Grayscale => color::to_grayscale_rgb(img),
            StageOp::RandomGrayscale { p } => {
                if draw_p(rng, p) {
                    color::to_grayscale_rgb(img);
                }
            }
            StageOp::Posterize { bits, p } => {
                if draw_p_item(rng, p) {
                    color::posterize(img, bits)?;
                }
            }
            StageOp::Solarize { threshold, p } => {
                if draw_p_item(rng, p) {
                    color::solarize(img, threshold);
                }
            }
            StageOp::Equalize { p } => {
                if draw_p_item(rng, p) {
                    color::equalize(img);
                }
            }
            StageOp::Autocontrast { p } => {
                if draw_p_item(rng, p) {
                    color::autocontrast(img);
                }
            }
            StageOp::Sharpness { factor, p } => {
                if draw_p_item(rng, p) {
                    color::adjust_sharpness(img, factor, scratch)?;
                }
            }
            StageOp::Invert { p } => {
                if draw_p_item(rng, p) {
                    color::invert(img);
                }
            }
        }
        Ok(false)
    }
}

/// The staged part of a plan: pixel ops (and flips between them) in place on a u8 image of
/// the output size, then a flip standing after the last of them, fused into the conversion.
#[derive(Clone, Debug, PartialEq)]
struct Staged {
    ops: Vec<StageOp>,
    post_flip_p: f64,
}

impl Staged {
    /// Splits the ops between geometry and conversion into the flip fused into the resize,
    /// and the stages; `None` when only that flip (or nothing) stands there, so the single
    /// fused pass runs exactly as without pixel ops.
    fn split(mut middle: Vec<StageOp>) -> (f64, Option<Staged>) {
        let flip_p = match middle.first() {
            Some(&StageOp::HFlip { p }) => {
                middle.remove(0);
                p
            }
            _ => 0.0,
        };
        if middle.is_empty() {
            return (flip_p, None);
        }
        let post_flip_p = match middle.last() {
            Some(&StageOp::HFlip { p }) => {
                middle.pop();
                p
            }
            _ => 0.0,
        };
        (
            flip_p,
            Some(Staged {
                ops: middle,
                post_flip_p,
            }),
        )
    }

    /// Runs the stage ops in order on `img`, each in its own span; whether they mirrored it
    /// (an odd number of flips).
    fn run_ops(
        &self,
        img: &mut RgbImage,
        scratch: &mut ColorScratch,
        rng: &mut SampleRng,
        obs: &mut dyn OpObserver,
    ) -> Result<bool> {
        let mut flipped = false;
        for op in &self.ops {
            flipped ^= observed(obs, op.span(), || op.run(img, scratch, rng))?;
        }
        Ok(flipped)
    }

    /// The coin of the flip after the pixel ops (none when there is no such flip or `p = 0`).
    fn draw_post_flip(&self, rng: &mut SampleRng) -> bool {
        self.post_flip_p > 0.0 && tensor::draw_flip(rng, self.post_flip_p)
    }
}

fn check_size(name: &'static str, (h, w): (u32, u32)) -> Result<(u32, u32)> {
    if h == 0 || w == 0 {
        return Err(Error::invalid(
            name,
            format!("size {h}x{w} must be positive"),
        ));
    }
    Ok((h, w))
}

/// Refuses a limit of 0 (no image could be decoded) and an output larger than the limit: each
/// batch slot holds one output, so an output no decodable image could reach would only be a way
/// to allocate without bound (and `3 * h * w` elements can overflow `usize`).
fn check_output_size(out_h: u32, out_w: u32, max_pixels: u64) -> Result<()> {
    if max_pixels == 0 {
        return Err(Error::invalid("max_pixels", "must be at least 1"));
    }
    let pixels = u64::from(out_h) * u64::from(out_w);
    // Whatever the limit says, a sample of f32 elements must be addressable (u64::MAX as a
    // limit lets u32::MAX x u32::MAX through).
    let addressable = pixels
        .checked_mul(3 * 4)
        .is_some_and(|bytes| bytes <= isize::MAX as u64);
    if pixels > max_pixels {
        return Err(Error::invalid(
            "size",
            format!(
                "an output of {out_h}x{out_w} ({pixels} pixels) exceeds max_pixels = {max_pixels}"
            ),
        ));
    }
    if !addressable {
        return Err(Error::invalid(
            "size",
            format!("an output of {out_h}x{out_w} cannot be addressed in memory"),
        ));
    }
    Ok(())
}

impl Pipeline {
    /// Checks `spec` and plans its execution. Refused besides a wrong op order or parameter:
    /// an output of more than `max_pixels` pixels, and `max_pixels` 0.
    pub fn new(spec: PipelineSpec) -> Result<Self> {
        let mut ops = spec.ops.iter().peekable();
        let (geometry, (out_h, out_w), filter) = match ops.next() {
            Some(OpSpec::RandomResizedCrop {
                size,
                scale,
                ratio,
                interpolation,
                antialias,
            }) => {
                if !antialias {
                    return Err(Error::invalid(
                        "antialias",
                        "PIL images are always resized with antialias; false is not supported",
                    ));
                }
                let size = check_size("size", size.square_or_pair())?;
                let rrc = RandomResizedCrop::new(size, (scale[0], scale[1]), (ratio[0], ratio[1]))?;
                (
                    Geometry::RandomResizedCrop(rrc),
                    size,
                    interpolation.filter(),
                )
            }
            Some(OpSpec::Resize {
                size,
                max_size,
                interpolation,
                antialias,
            }) => {
                if !antialias {
                    return Err(Error::invalid(
                        "antialias",
                        "PIL images are always resized with antialias; false is not supported",
                    ));
                }
                if let Size::Pair(pair) = size {
                    check_size("size", (pair[0], pair[1]))?;
                    if max_size.is_some() {
                        return Err(Error::invalid(
                            "max_size",
                            "only allowed when size is an int (torchvision's rule)",
                        ));
                    }
                }
                let center_crop = match ops.peek() {
                    Some(OpSpec::CenterCrop { size }) => {
                        let crop = check_size("size", size.square_or_pair())?;
                        ops.next();
                        Some(crop)
                    }
                    _ => None,
                };
                let out_size =
                    match (center_crop, size) {
                        (Some(crop), _) => crop,
                        (None, Size::Pair([h, w])) => (*h, *w),
                        (None, Size::Int(_)) => return Err(bad_order(
                            "Resize(int) alone leaves the output size depending on each image, \
                             so samples cannot be batched; add CenterCrop",
                        )),
                    };
                (
                    Geometry::Resize {
                        size: *size,
                        max_size: *max_size,
                        center_crop,
                    },
                    out_size,
                    interpolation.filter(),
                )
            }
            Some(OpSpec::CenterCrop { size }) => {
                let size = check_size("size", size.square_or_pair())?;
                // Crops only: the staged pass's same-size resize is a copy whatever the filter.
                (Geometry::CenterCrop(size), size, Filter::Bilinear)
            }
            _ => {
                return Err(bad_order(
                    "the pipeline must start with an op that fixes the output size",
                ))
            }
        };
        check_output_size(out_h, out_w, spec.max_pixels)?;
        // Flips and pixel ops, in the order written, up to the conversion.
        let mut middle = Vec::new();
        while let Some(op) = ops.peek() {
            let Some(stage) = StageOp::plan(op)? else {
                break;
            };
            middle.push(stage);
            ops.next();
        }
        let (flip_p, staged) = Staged::split(middle);
        let (float, mut normalize) = match (ops.next(), ops.next()) {
            (Some(OpSpec::ToTensor), None) => (true, None),
            (Some(OpSpec::ToTensor), Some(OpSpec::Normalize { mean, std })) => {
                if std.iter().any(|s| *s == 0.0 || !s.is_finite()) {
                    return Err(Error::invalid(
                        "std",
                        format!("{std:?} must be finite and non-zero"),
                    ));
                }
                (true, Some((*mean, *std)))
            }
            (Some(OpSpec::PilToTensor), None) => (false, None),
            (None, None) => (false, None),
            _ => return Err(bad_order("unexpected op after the geometric ops")),
        };
        if ops.next().is_some() {
            return Err(bad_order("ops after Normalize"));
        }
        if !float && spec.output == OutputDtype::Float32 {
            return Err(Error::invalid(
                "output",
                "float32 output needs ToTensor; use output=uint8 with PILToTensor",
            ));
        }
        let (output, deferred_normalize) = match spec.output {
            OutputDtype::Float32 => match normalize.take() {
                Some((mean, std)) => (OutputKind::F32Chw { mean, std }, None),
                None => (OutputKind::F32ChwUnnormalized, None),
            },
            OutputDtype::Uint8 => (
                match spec.layout {
                    Layout::Chw => OutputKind::U8Chw,
                    Layout::Hwc => OutputKind::U8Hwc,
                },
                normalize.take(),
            ),
        };
        Ok(Pipeline {
            spec,
            geometry,
            filter,
            flip_p,
            staged,
            output,
            deferred_normalize,
            out_h,
            out_w,
        })
    }

    /// The spec this pipeline was planned from.
    pub fn spec(&self) -> &PipelineSpec {
        &self.spec
    }

    /// What each sample is written as.
    pub fn output_kind(&self) -> OutputKind {
        self.output
    }

    /// Output `(height, width)`.
    pub fn output_size(&self) -> (u32, u32) {
        (self.out_h, self.out_w)
    }

    /// Shape of one sample: `[3, H, W]`, or `[H, W, 3]` for `uint8` HWC.
    pub fn sample_shape(&self) -> [usize; 3] {
        let (h, w) = (self.out_h as usize, self.out_w as usize);
        match self.output {
            OutputKind::U8Hwc => [h, w, 3],
            _ => [3, h, w],
        }
    }

    /// Elements per sample.
    pub fn sample_len(&self) -> usize {
        3 * self.out_h as usize * self.out_w as usize
    }

    /// With `uint8` output, the `Normalize(mean, std)` left for the consumer to apply
    /// (`(x / 255 - mean) / std`), so a GPU can finish what the spec asked for.
    pub fn deferred_normalize(&self) -> Option<([f32; 3], [f32; 3])> {
        self.deferred_normalize
    }

    /// Per-worker scratch for [`Pipeline::run`].
    pub fn new_context(&self) -> Result<PipelineContext> {
        let options = DecodeOptions::default()
            .decoder(self.spec.decoder)
            .max_pixels(self.spec.max_pixels);
        Ok(PipelineContext {
            decode: DecodeContext::new(options)?,
            kernel: {
                let mut kernel = FusedKernel::new();
                kernel.set_filter(self.filter);
                kernel
            },
            resizer: {
                // The kernels the fused path uses, for the same reason (fused::default_simd):
                // on some CPUs 512-bit code here would slow the next sample's decode down.
                let mut resizer = Resizer::new();
                resizer.set_simd_limit(fused::default_simd());
                resizer.set_filter(self.filter);
                resizer
            },
            decoded: RgbImage::new(),
            stage_a: RgbImage::new(),
            stage_b: RgbImage::new(),
            color: ColorScratch::new(),
        })
    }

    /// Decodes `bytes` and runs the ops, writing one sample into `out`. Random draws come from
    /// `rng` in a fixed order (crop, then flips and pixel ops as written), so fused, staged and
    /// op-by-op runs give the same sample. The report's `flipped` is the net mirror (an odd
    /// number of flips ran).
    pub fn run(
        &self,
        bytes: &[u8],
        rng: &mut SampleRng,
        ctx: &mut PipelineContext,
        out: OutputSlot<'_>,
        obs: &mut dyn OpObserver,
    ) -> Result<SampleReport> {
        self.check_slot(&out)?;
        match (self.spec.execution, &self.staged) {
            (Execution::Fused, None) => self.run_fused(bytes, rng, ctx, out, obs),
            (Execution::Fused, Some(staged)) => self.run_staged(staged, bytes, rng, ctx, out, obs),
            (Execution::OpByOp, _) => self.run_op_by_op(bytes, rng, ctx, out, obs),
        }
    }

    fn check_slot(&self, out: &OutputSlot<'_>) -> Result<()> {
        let (len, float) = match out {
            OutputSlot::F32(s) => (s.len(), true),
            OutputSlot::U8(s) => (s.len(), false),
        };
        let want_float = self.output.is_f32();
        if float != want_float || len != self.sample_len() {
            return Err(Error::invalid(
                "out",
                format!(
                    "slot of {len} {} elements, the pipeline writes {} {}",
                    if float { "f32" } else { "u8" },
                    self.sample_len(),
                    if want_float { "f32" } else { "u8" },
                ),
            ));
        }
        Ok(())
    }

    /// Draws the flip coin after the crop, as torchvision's Compose order does.
    fn draw_flip(&self, rng: &mut SampleRng) -> bool {
        self.flip_p > 0.0 && tensor::draw_flip(rng, self.flip_p)
    }

    fn run_fused(
        &self,
        bytes: &[u8],
        rng: &mut SampleRng,
        ctx: &mut PipelineContext,
        out: OutputSlot<'_>,
        obs: &mut dyn OpObserver,
    ) -> Result<SampleReport> {
        let PipelineContext {
            decode,
            kernel,
            resizer,
            decoded,
            stage_a,
            ..
        } = ctx;
        let (src, rect, report) =
            self.decode_stage(bytes, rng, decode, resizer, decoded, stage_a, obs)?;
        observed(obs, Op::Fused, || {
            let size = (self.out_h, self.out_w);
            kernel.run(src, rect, size, report.flipped, &self.output, out)
        })?;
        Ok(report)
    }

    /// Staged execution (pixel ops present): the fused pass's decode, then crop + resize (+ the
    /// flip standing before the pixel ops) into `stage_b`, a u8 image of the output size, by
    /// the fused kernel's own resize (so the pixels are those the single pass would convert);
    /// the pixel ops in place there; then the fused kernel again, at the same size (a copy,
    /// no resampling), for the flip standing after them and the conversion into the slot.
    fn run_staged(
        &self,
        staged: &Staged,
        bytes: &[u8],
        rng: &mut SampleRng,
        ctx: &mut PipelineContext,
        out: OutputSlot<'_>,
        obs: &mut dyn OpObserver,
    ) -> Result<SampleReport> {
        let PipelineContext {
            decode,
            kernel,
            resizer,
            decoded,
            stage_a,
            stage_b,
            color,
            ..
        } = ctx;
        let (src, rect, mut report) =
            self.decode_stage(bytes, rng, decode, resizer, decoded, stage_a, obs)?;
        let size = (self.out_h, self.out_w);
        let into_stage = match self.geometry {
            Geometry::RandomResizedCrop(_) => Op::Resize,
            _ => Op::Crop,
        };
        observed(obs, into_stage, || {
            let pixels = stage_b.try_reset(self.out_w, self.out_h)?;
            kernel.run(
                src,
                rect,
                size,
                report.flipped,
                &OutputKind::U8Hwc,
                OutputSlot::U8(pixels),
            )
        })?;
        report.flipped ^= staged.run_ops(stage_b, color, rng, obs)?;
        let post_flip = observed(obs, Op::ToTensor, || {
            let flip = staged.draw_post_flip(rng);
            let full = CropRect::full(self.out_w, self.out_h);
            kernel
                .run(stage_b.view(), full, size, flip, &self.output, out)
                .map(|()| flip)
        })?;
        report.flipped ^= post_flip;
        Ok(report)
    }

    /// Decode and crop parameters, as the fused pass runs them: the image the output's crop is
    /// taken from (the decoded region, or for eval pipelines the resized image), the crop in
    /// it, and the report (the crop drawn, the coin of the flip fused into the resize).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn decode_stage<'a>(
        &self,
        bytes: &[u8],
        rng: &mut SampleRng,
        decode: &mut DecodeContext,
        resizer: &mut Resizer,
        decoded: &'a mut RgbImage,
        resized: &'a mut RgbImage,
        obs: &mut dyn OpObserver,
    ) -> Result<(RgbView<'a>, CropRect, SampleReport)> {
        match &self.geometry {
            Geometry::RandomResizedCrop(rrc) => {
                // One decode span per sample: the crop is drawn between reading the header
                // and decoding the region, so its span nests inside decode's.
                obs.enter(Op::Decode);
                let decoded_crop = (|| {
                    let info = decode.info(bytes)?;
                    let (crop, flipped) = observed(obs, Op::CropParams, || {
                        let crop = rrc.get_params(info.width, info.height, rng);
                        (crop, self.draw_flip(rng))
                    });
                    let inner = if self.spec.dct_scaling {
                        decode
                            .decode_region_scaled(bytes, crop, self.out_h, self.out_w, decoded)
                            .map(|(rect, _)| rect)
                    } else if self.spec.roi_decode {
                        decode.decode_region(bytes, crop, decoded)
                    } else {
                        decode.decode(bytes, decoded).map(|_| crop)
                    }?;
                    Ok::<_, Error>((info, crop, flipped, inner))
                })();
                obs.exit(Op::Decode);
                let (info, crop, flipped, inner) = decoded_crop?;
                let decoded: &'a RgbImage = decoded;
                let report = SampleReport {
                    width: info.width,
                    height: info.height,
                    crop,
                    flipped,
                };
                Ok((decoded.view(), inner, report))
            }
            Geometry::Resize { .. } | Geometry::CenterCrop(_) => {
                let info = observed(obs, Op::Decode, || decode.decode(bytes, decoded))?;
                let flipped = observed(obs, Op::CropParams, || self.draw_flip(rng));
                let decoded: &'a RgbImage = decoded;
                let (src, rect, crop) = self.eval_source(decoded, resizer, resized, obs)?;
                let report = SampleReport {
                    width: info.width,
                    height: info.height,
                    crop,
                    flipped,
                };
                Ok((src, rect, report))
            }
        }
    }

    /// For eval pipelines: the view the final crop is taken from (the resized image when the
    /// pipeline resizes first; Pillow resizes the whole image, then crops, and so do we).
    fn eval_source<'a>(
        &self,
        decoded: &'a RgbImage,
        resizer: &mut Resizer,
        resized: &'a mut RgbImage,
        obs: &mut dyn OpObserver,
    ) -> Result<(RgbView<'a>, CropRect, CropRect)> {
        let (w, h) = (decoded.width(), decoded.height());
        match &self.geometry {
            Geometry::Resize {
                size,
                max_size,
                center_crop,
            } => {
                let (rh, rw) = match size {
                    Size::Int(s) => resize_shorter_side(w, h, *s, *max_size)?,
                    Size::Pair([ph, pw]) => (*ph, *pw),
                };
                // Resize(int) scales the longer side with the shorter: a thin image would be
                // resized to an intermediate far past the decode limit before the center crop.
                let pixels = u64::from(rh) * u64::from(rw);
                if pixels > self.spec.max_pixels {
                    return Err(Error::TooLarge {
                        width: rw,
                        height: rh,
                        pixels,
                        limit: self.spec.max_pixels,
                    });
                }
                observed(obs, Op::Resize, || {
                    resizer.resize(decoded.view(), rh, rw, resized)
                })?;
                let resized: &'a RgbImage = resized;
                let rect = match center_crop {
                    Some((ch, cw)) => center_crop_rect(rw, rh, *ch, *cw)?,
                    None => CropRect::full(rw, rh),
                };
                Ok((resized.view(), rect, CropRect::full(w, h)))
            }
            Geometry::CenterCrop((ch, cw)) => {
                let rect = center_crop_rect(w, h, *ch, *cw)?;
                Ok((decoded.view(), rect, rect))
            }
            Geometry::RandomResizedCrop(_) => Err(Error::invalid("ops", "not an eval pipeline")),
        }
    }

    fn run_op_by_op(
        &self,
        bytes: &[u8],
        rng: &mut SampleRng,
        ctx: &mut PipelineContext,
        out: OutputSlot<'_>,
        obs: &mut dyn OpObserver,
    ) -> Result<SampleReport> {
        let PipelineContext {
            decode,
            resizer,
            decoded,
            stage_a,
            stage_b,
            color,
            ..
        } = ctx;
        let info = observed(obs, Op::Decode, || decode.decode(bytes, decoded))?;
        let (crop, flipped) = observed(obs, Op::CropParams, || {
            let crop = match &self.geometry {
                Geometry::RandomResizedCrop(rrc) => rrc.get_params(info.width, info.height, rng),
                _ => CropRect::full(info.width, info.height),
            };
            (crop, self.draw_flip(rng))
        });
        match &self.geometry {
            Geometry::RandomResizedCrop(_) => {
                observed(obs, Op::Crop, || {
                    decoded.crop_view(crop).map(|v| v.to_image(stage_b))
                })?;
                observed(obs, Op::Resize, || {
                    resizer.resize(stage_b.view(), self.out_h, self.out_w, stage_a)
                })?;
            }
            _ => {
                let (src, rect, _) = self.eval_source(decoded, resizer, stage_b, obs)?;
                observed(obs, Op::Crop, || {
                    src.crop(rect).map(|v| v.to_image(stage_a))
                })?;
            }
        }
        if flipped {
            observed(obs, Op::Flip, || tensor::hflip(stage_a));
        }
        let mut flipped = flipped;
        if let Some(staged) = &self.staged {
            flipped ^= staged.run_ops(stage_a, color, rng, obs)?;
            if staged.post_flip_p > 0.0 {
                let post = observed(obs, Op::Flip, || {
                    let flip = staged.draw_post_flip(rng);
                    if flip {
                        tensor::hflip(stage_a);
                    }
                    flip
                });
                flipped ^= post;
            }
        }
        match (self.output, out) {
            (OutputKind::F32ChwUnnormalized, OutputSlot::F32(dst)) => {
                observed(obs, Op::ToTensor, || tensor::to_tensor(stage_a.view(), dst))?;
            }
            (OutputKind::F32Chw { mean, std }, OutputSlot::F32(dst)) => {
                observed(obs, Op::ToTensor, || tensor::to_tensor(stage_a.view(), dst))?;
                observed(obs, Op::Normalize, || tensor::normalize(dst, &mean, &std))?;
            }
            (OutputKind::U8Chw, OutputSlot::U8(dst)) => {
                observed(obs, Op::ToTensor, || tensor::to_chw_u8(stage_a.view(), dst))?;
            }
            (OutputKind::U8Hwc, OutputSlot::U8(dst)) => dst.copy_from_slice(stage_a.as_raw()),
            _ => return Err(Error::invalid("out", "slot type does not match the output")),
        }
        Ok(SampleReport {
            width: info.width,
            height: info.height,
            crop,
            flipped,
        })
    }
}
