//! The declarative pipeline: torchvision's op names and arguments in, an execution plan out.
//!
//! A [`PipelineSpec`] is what users write (or what `from_torchvision` produces); [`Pipeline`]
//! checks it once, decides whether the crop can drive a region-of-interest decode and whether the
//! ops fuse (or, with pixel ops, run in stages over a u8 image of the output size), and then runs
//! samples. It must not own threads, files or a profiler: the caller
//! passes bytes, a per-sample RNG and an [`OpObserver`] that sees every op's boundaries.

use serde::{Deserialize, Serialize};

use crate::augment::geometry::Padder;
use crate::augment::policy::{Api, RandomCropPlan};
use crate::crop::{center_crop, KeepRatioResize};
use crate::decode::{DecodeContext, DecodeOptions, Decoder};
use crate::error::{Error, Result};
use crate::fused::{self, FusedKernel, OutputKind, OutputSlot};
use crate::image::{CropRect, RgbImage, RgbView};
use crate::resize::{Filter, Resizer, SimdLevel};
use crate::rng::SampleRng;
use crate::tensor::{self, Scaling};

mod op_spec;
mod stage;
mod tensor_op;

pub use op_spec::*;
use op_spec::{default_ratio, default_scale, default_true};

pub use stage::{apply_timm_op, plan_timm_augmix, plan_timm_auto_augment, plan_timm_rand_augment};
use stage::{pad_center_crop, Domain, RandomCropOp, ResizedCropOp, StageOp, StageScratch, Staged};
pub use tensor_op::{
    apply_gaussian_noise, apply_timm_random_erasing, plan_gaussian_noise, plan_timm_random_erasing,
    GaussianNoise,
};
use tensor_op::{SlotState, TensorOp};

/// timm's `ResizeKeepRatio` as the plan checks it (errors name the argument), for drawing a
/// sample's size outside a pipeline (the Python bindings' parity hooks); `Ok(None)`: `op` is
/// not one.
pub fn plan_resize_keep_ratio(op: &OpSpec) -> Result<Option<KeepRatioResize>> {
    stage::plan_keep_ratio(op)
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

/// The mode torchvision's dataset hands the transform its images in (Pillow's name for it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ImageMode {
    /// Three channels: what `ImageFolder`'s loader converts every file to.
    #[default]
    #[serde(rename = "RGB")]
    Rgb,
    /// One channel (MNIST's `Image.fromarray(x, mode="L")`): samples come out with one channel,
    /// unless a `Grayscale(num_output_channels=3)` makes three.
    #[serde(rename = "L")]
    L,
}

impl ImageMode {
    fn is_rgb(&self) -> bool {
        *self == ImageMode::Rgb
    }
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
    /// Transpose each decoded image per its EXIF Orientation as `PIL.ImageOps.exif_transpose`
    /// does (Hugging Face `datasets`' `Image` decode), before any op sees it: the crops and
    /// resizes see the transposed size. Default `false`: the pixels as stored, as torchvision's
    /// `ImageFolder` loader gives them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exif_transpose: bool,
    /// Default `fused`.
    #[serde(default)]
    pub execution: Execution,
    /// Decode-bomb limit in pixels; default 178,956,970 (Pillow's).
    #[serde(default = "default_max_pixels")]
    pub max_pixels: u64,
    /// `[height, width]` of every image, for a pipeline whose samples' size follows it (CIFAR's
    /// `ToTensor(), Normalize(...)`, or a `Resize(int)` alone): batching needs one size, as
    /// torch's collate does. The loader sets it from the first sample
    /// ([`PipelineSpec::needs_image_size`]); an image that would give another size is that
    /// sample's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_size: Option<[u32; 2]>,
    /// The images' mode as the dataset gives them; default `RGB`. Decoded images are RGB
    /// whatever the mode (a grayscale file is replicated into R, G and B).
    #[serde(default, skip_serializing_if = "ImageMode::is_rgb")]
    pub mode: ImageMode,
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
            exif_transpose: false,
            execution: Execution::default(),
            max_pixels: default_max_pixels(),
            image_size: None,
            mode: ImageMode::default(),
        }
    }

    /// Whether the pipeline starts with no crop or resize, so that its images keep their own
    /// size into the ops after (and [`PipelineSpec::image_size`] must say what it is).
    pub fn keeps_image_size(&self) -> bool {
        let mut flat = Vec::with_capacity(self.ops.len());
        flatten_compose(&self.ops, &mut flat);
        flat.retain(|op| !is_marker(op));
        !flat.first().is_some_and(|op| {
            matches!(op, OpSpec::Resize { .. } | OpSpec::ResizeKeepRatio { .. }) || is_crop(op)
        })
    }

    /// Whether the samples' size follows the images' own, so that [`PipelineSpec::image_size`]
    /// must say what it is: the pipeline keeps it ([`PipelineSpec::keeps_image_size`]), or
    /// starts with a `Resize(int)` that no crop follows (its output keeps each image's aspect
    /// ratio: CIFAR's `Resize(224)` before a pretrained model).
    pub fn needs_image_size(&self) -> bool {
        let mut flat = Vec::with_capacity(self.ops.len());
        flatten_compose(&self.ops, &mut flat);
        flat.retain(|op| !is_marker(op));
        match flat.as_slice() {
            [OpSpec::Resize {
                size: Size::Int(_), ..
            }, rest @ ..] => !rest.first().is_some_and(|op| is_crop(op)),
            [OpSpec::Resize { .. } | OpSpec::ResizeKeepRatio { .. }, ..] => false,
            [first, ..] => !is_crop(first),
            [] => true,
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

    /// Chained setter for [`PipelineSpec::exif_transpose`].
    pub fn exif_transpose(mut self, on: bool) -> Self {
        self.exif_transpose = on;
        self
    }

    /// The decode options the spec asks for (decoder, pixel limit, EXIF transposition).
    pub fn decode_options(&self) -> DecodeOptions {
        DecodeOptions::default()
            .decoder(self.decoder)
            .max_pixels(self.max_pixels)
            .exif_transpose(self.exif_transpose)
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
    /// `RandomVerticalFlip`.
    RandomVerticalFlip,
    /// `RandomRotation`.
    RandomRotation,
    /// `RandomAffine`.
    RandomAffine,
    /// `GaussianBlur`.
    GaussianBlur,
    /// `Pad`.
    Pad,
    /// `RandomCrop` (its padding and crop).
    RandomCrop,
    /// `TrivialAugmentWide`: its draw and the chosen op, which has a nested named span.
    TrivialAugmentWide,
    /// `RandAugment`: its draws and the chosen ops (nested named spans).
    RandAugment,
    /// `AutoAugment`: its draws and the chosen ops (nested named spans).
    AutoAugment,
    /// `AugMix`: its draws, chains and mix.
    AugMix,
    /// `RandomApply`: its coin; the applied ops have their own spans.
    RandomApply,
    /// `RandomChoice`: its draw; the chosen op has its own span.
    RandomChoice,
    /// `RandomOrder`: its permutation; the ops have their own spans.
    RandomOrder,
    /// `RandomErasing`, on the tensor in the batch slot.
    RandomErasing,
    /// `RandomPerspective`: the coin, the corners, the solve and the warp.
    RandomPerspective,
    /// timm's `RandAugment`: its draws and the ops applied (nested named spans,
    /// `TimmRandAugment/Rotate`).
    TimmRandAugment,
    /// timm's `AutoAugment`: its draws and the ops applied (`TimmAutoAugment/Rotate`).
    TimmAutoAugment,
    /// timm's `AugMixAugment`: its draws, the chains' ops (`TimmAugMix/Rotate`) and the mix.
    TimmAugMix,
    /// timm's `RandomErasing`, on the tensor in the batch slot: its coin, blocks and fills.
    TimmRandomErasing,
    /// `JPEG`: the quality draw, the compression and the decompression.
    Jpeg,
    /// `ElasticTransform`: the displacement's draws, blur and the warp.
    ElasticTransform,
    /// v2's `RandomChannelPermutation`: its permutation and the shuffle.
    RandomChannelPermutation,
    /// v2's `GaussianNoise`, on the tensor in the batch slot: its normals and the sums.
    GaussianNoise,
    /// v2's `RandomPhotometricDistort`: its draws and the adjustments applied, one span.
    RandomPhotometricDistort,
    /// timm's `CenterCropOrPad` where it pads (a window of the image is the fused pass's).
    CenterCropOrPad,
    /// timm's `RandomCropOrPad` where it pads (its draw is in `crop_params` when it follows
    /// the geometry's resize).
    RandomCropOrPad,
}

impl Op {
    /// Every op, in declaration order (`op as usize` indexes this array; the loader's
    /// profiler tables rely on it, so new ops go at the end, here and in the enum).
    pub const ALL: [Op; 43] = [
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
        Op::RandomVerticalFlip,
        Op::RandomRotation,
        Op::RandomAffine,
        Op::GaussianBlur,
        Op::Pad,
        Op::RandomCrop,
        Op::TrivialAugmentWide,
        Op::RandAugment,
        Op::AutoAugment,
        Op::AugMix,
        Op::RandomApply,
        Op::RandomChoice,
        Op::RandomOrder,
        Op::RandomErasing,
        Op::RandomPerspective,
        Op::TimmRandAugment,
        Op::TimmAutoAugment,
        Op::TimmAugMix,
        Op::TimmRandomErasing,
        Op::Jpeg,
        Op::ElasticTransform,
        Op::RandomChannelPermutation,
        Op::GaussianNoise,
        Op::RandomPhotometricDistort,
        Op::CenterCropOrPad,
        Op::RandomCropOrPad,
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
            Op::RandomVerticalFlip => "RandomVerticalFlip",
            Op::RandomRotation => "RandomRotation",
            Op::RandomAffine => "RandomAffine",
            Op::GaussianBlur => "GaussianBlur",
            Op::Pad => "Pad",
            Op::RandomCrop => "RandomCrop",
            Op::TrivialAugmentWide => "TrivialAugmentWide",
            Op::RandAugment => "RandAugment",
            Op::AutoAugment => "AutoAugment",
            Op::AugMix => "AugMix",
            Op::RandomApply => "RandomApply",
            Op::RandomChoice => "RandomChoice",
            Op::RandomOrder => "RandomOrder",
            Op::RandomErasing => "RandomErasing",
            Op::RandomPerspective => "RandomPerspective",
            Op::TimmRandAugment => "TimmRandAugment",
            Op::TimmAutoAugment => "TimmAutoAugment",
            Op::TimmAugMix => "TimmAugMix",
            Op::TimmRandomErasing => "TimmRandomErasing",
            Op::Jpeg => "JPEG",
            Op::ElasticTransform => "ElasticTransform",
            Op::RandomChannelPermutation => "RandomChannelPermutation",
            Op::GaussianNoise => "GaussianNoise",
            Op::RandomPhotometricDistort => "RandomPhotometricDistort",
            Op::CenterCropOrPad => "CenterCropOrPad",
            Op::RandomCropOrPad => "RandomCropOrPad",
        }
    }
}

/// Sees the boundaries of every op a sample runs through (the profiler's attachment point).
/// Every hook defaults to nothing, so `&mut ()` observes nothing at no cost.
pub trait OpObserver {
    /// Called right before `op` starts.
    fn enter(&mut self, op: Op) {
        let _ = op;
    }
    /// Called right after `op` ends, also when it failed.
    fn exit(&mut self, op: Op) {
        let _ = op;
    }
    /// Called right before an op named at run time starts: the op a policy chose, named by
    /// both (`TrivialAugmentWide/Solarize`), nested in the policy's [`Op`] span. Names are
    /// `'static` so an observer can key them by address.
    fn enter_named(&mut self, name: &'static str) {
        let _ = name;
    }
    /// Called right after the op named `name` ends, also when it failed.
    fn exit_named(&mut self, name: &'static str) {
        let _ = name;
    }
}

impl OpObserver for () {}

/// A shorter-lived copy of `out`, so the slot can be written again after a kernel took it.
fn reborrow<'b>(out: &'b mut OutputSlot<'_>) -> OutputSlot<'b> {
    match out {
        OutputSlot::F32(s) => OutputSlot::F32(s),
        OutputSlot::U8(s) => OutputSlot::U8(s),
    }
}

/// Runs `f` as op `op` for `obs`.
#[inline]
pub(crate) fn observed<T>(obs: &mut dyn OpObserver, op: Op, f: impl FnOnce() -> T) -> T {
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
    /// The filter the geometry resized with: drawn per sample by a
    /// `RandomResizedCropAndInterpolation` with a choice, else the pipeline's own (bilinear
    /// where the geometry does not resample).
    pub filter: Filter,
}

/// The geometric part of a plan, reduced to what the fused kernel needs.
#[derive(Clone, Debug, PartialEq)]
enum Geometry {
    /// Random crop of the source, resized to the output.
    RandomResizedCrop(ResizedCropOp),
    /// Resize the whole image (shorter side or exact), then optionally center-crop.
    Resize {
        resize: WholeResize,
        center_crop: Option<(u32, u32)>,
    },
    /// Center crop of the source at its own resolution.
    CenterCrop((u32, u32)),
    /// `RandomCrop` (or timm's `CenterCropOrPad`, `RandomCropOrPad`) of the decoded image of
    /// any size (after `Resize` or timm's `ResizeKeepRatio` when `resize` is set), padded as it
    /// says; the crop's size is the output's.
    RandomCrop {
        resize: Option<FirstResize>,
        crop: RandomCropOp,
    },
    /// The decoded image as it is, which must be `(height, width)` (the spec's `image_size`).
    Whole((u32, u32)),
    /// `Resize` of the whole image, then `RandomResizedCrop` of the resized one (a fine-tuning
    /// order): no region decode, the crop is drawn on the resized size.
    ResizeThenRandomResizedCrop {
        resize: WholeResize,
        rrc: ResizedCropOp,
    },
}

/// The whole-image resize a [`Geometry::RandomCrop`] starts with: torchvision's `Resize`, or
/// timm's `ResizeKeepRatio` (its size and filter drawn per sample, before the crop's draw).
#[derive(Clone, Copy, Debug, PartialEq)]
enum FirstResize {
    Whole(WholeResize),
    KeepRatio(KeepRatioResize),
}

/// A `Resize` of the whole image, checked: in the geometry (where a later op may resample
/// with a filter of its own) or in the stage.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(in crate::spec) struct WholeResize {
    pub(in crate::spec) size: Size,
    pub(in crate::spec) max_size: Option<u32>,
    pub(in crate::spec) filter: Filter,
    /// After `ToImage`: the API whose tensor resize (torch's arithmetic) runs; `None`: Pillow's.
    pub(in crate::spec) tensor: Option<Api>,
}

impl WholeResize {
    /// `Resize`'s arguments, checked as torchvision checks them (a pair with no zero side and no
    /// `max_size`), with antialias as PIL images always have it.
    pub(in crate::spec) fn plan(
        size: Size,
        max_size: Option<u32>,
        interpolation: Interpolation,
        antialias: bool,
    ) -> Result<Self> {
        if !antialias {
            return Err(no_antialias());
        }
        if let Size::Pair([h, w]) = size {
            check_size("size", (h, w))?;
            if max_size.is_some() {
                return Err(Error::invalid(
                    "max_size",
                    "only allowed when size is an int (torchvision's rule)",
                ));
            }
        }
        Ok(WholeResize {
            size,
            max_size,
            filter: interpolation.filter(),
            tensor: None,
        })
    }
}

/// A checked, planned [`PipelineSpec`]; immutable and shared by every worker.
///
/// Without pixel ops a sample is one decode (of the crop's region when it can) and one fused
/// pass into the slot. With pixel ops (the colour ops of [`OpSpec`], in any order and number,
/// with flips among them, between the geometry and the conversion) execution is staged: the
/// same decode; crop + resize (+ a flip written before the pixel ops) into a u8 image of the
/// output size held by the [`PipelineContext`]; each pixel op in place there, in the order
/// written, in its own span; then to-tensor (+ normalize, + a flip written after them) into the
/// slot. The pixel ops see what torchvision's would see on a PIL image (Pillow's arithmetic),
/// or, after a `ToImage` marker ([`OpSpec::ToImage`]), on a uint8 tensor (torch's tensor
/// kernels; the marker may stand anywhere before the conversion and costs nothing per sample).
/// Geometric stage ops (flips, rotations, affine warps, blur, padding, crops) run there too;
/// `Pad` and the crops change the size, planned through the stage once.
///
/// A `RandomCrop` standing first (or right after `Resize`) is the geometry: the decoded (or
/// resized) image of any size, its window taken by the fused pass when nothing pads, else
/// padded into an image of the crop's size first. A `RandomResizedCrop` right after `Resize` is
/// drawn on the resized image (decoded whole, no region decode), each resize with its own
/// filter. timm's `ResizeKeepRatio` standing first resizes the whole image to a size drawn per
/// sample (with a filter drawn per sample), and the crop after it (`CenterCropOrPad`,
/// `RandomCropOrPad`, `CenterCrop`, `RandomCrop`) fixes the output size: the same geometry as
/// `Resize` then `RandomCrop`, the crop-or-pads being crops that pad where the image is short. With none of these first, the images keep their own size (the spec's
/// `image_size`).
///
/// Random compositions (`RandomApply`, `RandomChoice`, `RandomOrder`) are stage ops over
/// stage ops; a nested `Compose` is flattened where it stands. After the conversion, tensor
/// ops (`RandomErasing`, timm's `TimmRandomErasing`, v2's `GaussianNoise`) run on the float32
/// sample in the slot, each in its own span; an erasing written before `Normalize` runs after
/// the fused conversion too, its fill normalized with the same arithmetic (op by op it runs
/// where written; the samples are equal). A `GaussianNoise` before `Normalize` makes the
/// conversion write the `ToTensor` values and the slot normalized after the ops before it (in a
/// `normalize` span), so every tensor op sees what torchvision's would.
///
/// Draws, from the sample's generator, in the order the ops are written (torchvision's):
/// the crop (`RandomResizedCrop`'s or `RandomCrop`'s; timm's `RandomResizedCropAndInterpolation`
/// then draws its filter, when it has a choice, and resizes with it), then each flip's coin and each pixel op's parameters, then each tensor op's. A pixel op draws even when
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
    /// `(height, width)` the geometry produces: what the stage ops start from.
    geometry_size: (u32, u32),
    /// The sample's size: the geometry's, changed by stage ops that pad.
    out_h: u32,
    out_w: u32,
    /// `RandomErasing`s (torchvision's, timm's) on the float32 slot after the conversion, in
    /// the order written;
    /// empty (no per-sample cost) for most pipelines.
    tensor_ops: Vec<TensorOp>,
    /// The `Normalize` run on the slot between the tensor ops standing before it and those
    /// after it, instead of in the conversion: set when a `GaussianNoise` stands before it
    /// (the conversion then writes the `ToTensor` values).
    slot_normalize: Option<NormalizeArgs>,
    /// Channels of a sample: 3, or 1 for an `L` image or after `Grayscale(1)`.
    channels: usize,
    /// After `ToImage`, the API of the geometry's last resize (the one the fused pass or the
    /// staged crop runs): torch's tensor resize; `None`: Pillow's.
    fused_tensor: Option<Api>,
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
    stage: StageScratch,
    /// The random values of `RandomErasing(value="random")` and timm's `mode="pixel"`,
    /// reserved for the largest rectangle.
    erase_values: Vec<f32>,
    /// The three-channel sample a one-channel pipeline runs into before keeping channel 0
    /// (empty for three channels).
    rgb_slot: RgbSlot,
}

/// A three-channel sample's worth of each element type.
#[derive(Debug, Default)]
struct RgbSlot {
    f32s: Vec<f32>,
    u8s: Vec<u8>,
}

impl PipelineContext {
    /// Bytes its image and decode buffers hold on to (they only grow, to the largest image
    /// seen). The resizer's rows and coefficients, a few rows wide, are not counted.
    pub fn retained_bytes(&self) -> usize {
        self.decode.retained_bytes()
            + self.decoded.retained_bytes()
            + self.stage_a.retained_bytes()
            + self.stage_b.retained_bytes()
            + self.stage.retained_bytes()
            + self.erase_values.capacity() * std::mem::size_of::<f32>()
            + self.rgb_slot.f32s.capacity() * std::mem::size_of::<f32>()
            + self.rgb_slot.u8s.capacity()
    }

    /// Runs the resize and conversion kernels up to `limit` ([`fused::default_simd`] unless
    /// set), for profiling one kernel set against another. The samples are identical at every
    /// level.
    pub fn set_simd_limit(&mut self, limit: SimdLevel) {
        self.kernel.set_simd_limit(limit);
        self.resizer.set_simd_limit(limit);
    }
}

pub(in crate::spec) fn no_antialias() -> Error {
    Error::invalid(
        "antialias",
        "PIL images are always resized with antialias; false is not supported",
    )
}

fn bad_order(reason: &str) -> Error {
    Error::invalid(
        "ops",
        format!(
            "{reason}; supported: RandomResizedCrop | Resize [CenterCrop | RandomCrop | \
             RandomResizedCrop] | CenterCrop | RandomCrop | ResizeKeepRatio (CenterCropOrPad | \
             RandomCropOrPad | CenterCrop | RandomCrop) | CenterCropOrPad | RandomCropOrPad \
             (RandomResizedCropAndInterpolation \
             wherever RandomResizedCrop; or none of them: the images' own \
             size), then any number of RandomHorizontalFlip, pixel ops (ColorJitter, \
             Grayscale, RandomGrayscale, RandomPosterize, RandomSolarize, RandomEqualize, \
             RandomAutocontrast, RandomAdjustSharpness, RandomInvert, JPEG, \
             RandomChannelPermutation, RandomPhotometricDistort), \
             policies (TrivialAugmentWide, RandAugment, AutoAugment, AugMix, timm's \
             TimmRandAugment, TimmAutoAugment, TimmAugMix), geometric ops \
             (RandomVerticalFlip, RandomRotation, RandomAffine, RandomPerspective, \
             ElasticTransform, GaussianBlur, Pad, RandomCrop, \
             CenterCrop, Resize, RandomResizedCrop) and RandomApply, RandomChoice, RandomOrder of those, in any order, \
             then ToTensor [Normalize] (with RandomErasing, TimmRandomErasing or \
             GaussianNoise before or after Normalize) or \
             PILToTensor; Compose anywhere, and ToImage anywhere before the conversion (the \
             ops after it run torch's tensor kernels)"
        ),
    )
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

/// `ops` with every `Compose` replaced by its ops, recursively: a nested `Compose` stands for
/// its ops where it stands (inside a random composition its owner plans it instead).
/// Channels of the pipeline's samples: the mode's, changed by each `Grayscale` standing in the
/// pipeline itself. One inside a random op (`RandomApply`, `RandomChoice`, `RandomOrder`) must
/// keep the count, or samples would differ in shape (torch's collate would fail on them too).
fn output_channels(spec: &PipelineSpec) -> Result<usize> {
    fn visit(ops: &[OpSpec], channels: &mut usize, random: Option<&'static str>) -> Result<()> {
        for op in ops {
            match op {
                OpSpec::Compose { transforms } => visit(transforms, channels, random)?,
                OpSpec::RandomApply { transforms, .. } => {
                    visit(transforms, channels, Some("RandomApply"))?
                }
                OpSpec::RandomChoice { transforms, .. } => {
                    visit(transforms, channels, Some("RandomChoice"))?
                }
                OpSpec::RandomOrder { transforms } => {
                    visit(transforms, channels, Some("RandomOrder"))?
                }
                OpSpec::Grayscale {
                    num_output_channels,
                } => {
                    let n = match *num_output_channels {
                        1 => 1,
                        3 => 3,
                        other => {
                            return Err(Error::invalid(
                                "num_output_channels",
                                format!("Grayscale: {other} is not 1 or 3"),
                            ))
                        }
                    };
                    if let Some(container) = random.filter(|_| n != *channels) {
                        return Err(Error::invalid(
                            "num_output_channels",
                            format!(
                                "Grayscale({n}) inside {container} would make some samples \
                                 {n}-channel and others {channels}-channel"
                            ),
                        ));
                    }
                    *channels = n;
                }
                OpSpec::Rgb => {
                    if let Some(container) = random.filter(|_| *channels != 3) {
                        return Err(Error::invalid(
                            "transforms",
                            format!(
                                "RGB inside {container} would make some samples 3-channel and \
                                 others {channels}-channel"
                            ),
                        ));
                    }
                    *channels = 3;
                }
                _ => {}
            }
        }
        Ok(())
    }
    let mut channels = match spec.mode {
        ImageMode::Rgb => 3,
        ImageMode::L => 1,
    };
    visit(&spec.ops, &mut channels, None)?;
    Ok(channels)
}

/// A crop that can stand first, or right after a first `Resize`, and fix the sample's size.
fn is_crop(op: &OpSpec) -> bool {
    matches!(
        op,
        OpSpec::RandomResizedCrop { .. }
            | OpSpec::RandomResizedCropAndInterpolation { .. }
            | OpSpec::CenterCrop { .. }
            | OpSpec::RandomCrop { .. }
            | OpSpec::CenterCropOrPad { .. }
            | OpSpec::RandomCropOrPad { .. }
    )
}

/// A marker that changes no pixel where it stands, only how the ops after it compute
/// (`ToImage`) or how many channels the sample keeps (`RGB`).
fn is_marker(op: &OpSpec) -> bool {
    matches!(op, OpSpec::ToImage { .. } | OpSpec::Rgb)
}

/// `flat` without its markers, and the [`Domain`] each remaining op stands in: a PIL image
/// until a `ToImage` (a uint8 tensor of its API after it; a second `ToImage` changes only the
/// API of the single ops after it), one channel for an `L` image until a `Grayscale(3)` or
/// an `RGB`, after a `Grayscale(1)`.
fn mark_domains(flat: Vec<&OpSpec>, mode: ImageMode) -> (Vec<&OpSpec>, Vec<Domain>) {
    let mut domain = Domain {
        tensor: None,
        one_channel: mode == ImageMode::L,
    };
    let mut ops = Vec::with_capacity(flat.len());
    let mut domains = Vec::with_capacity(flat.len());
    for op in flat {
        match op {
            OpSpec::ToImage { api } => {
                domain.tensor = Some(*api);
                continue;
            }
            OpSpec::Rgb => {
                domain.one_channel = false;
                continue;
            }
            _ => {}
        }
        ops.push(op);
        domains.push(domain);
        if let OpSpec::Grayscale {
            num_output_channels,
        } = op
        {
            domain.one_channel = *num_output_channels == 1;
        }
    }
    (ops, domains)
}

fn flatten_compose<'a>(ops: &'a [OpSpec], flat: &mut Vec<&'a OpSpec>) {
    for op in ops {
        match op {
            OpSpec::Compose { transforms } => flatten_compose(transforms, flat),
            other => flat.push(other),
        }
    }
}

/// `Normalize(mean, std)` as planned.
type NormalizeArgs = ([f32; 3], [f32; 3]);

/// The conversion at the end of a plan: `ToTensor` (or v2's `ToDtype`), then erasings
/// (torchvision's and timm's) and at most one `Normalize` in any order; or `PILToTensor`; or
/// nothing. Returns the float conversion's arithmetic (`None`: no conversion to float), the
/// `Normalize`, and the tensor ops (each knowing whether it stands before `Normalize`).
fn plan_conversion<'a>(
    ops: &mut impl Iterator<Item = &'a OpSpec>,
) -> Result<(Option<Scaling>, Option<NormalizeArgs>, Vec<TensorOp>)> {
    let needs_tensor = || {
        Error::invalid(
            "ops",
            "RandomErasing and TimmRandomErasing work on the float tensor, as GaussianNoise \
             does: put ToTensor (and Normalize) before them",
        )
    };
    match ops.next() {
        Some(conversion @ (OpSpec::ToTensor | OpSpec::ToDtypeFloat32)) => {
            let scaling = match conversion {
                OpSpec::ToDtypeFloat32 => Scaling::Reciprocal,
                _ => Scaling::Divide,
            };
            let mut normalize = None;
            let mut planned = Vec::new();
            for op in ops {
                if let Some(tensor_op) = TensorOp::plan(op)? {
                    planned.push((tensor_op, normalize.is_none()));
                    continue;
                }
                match op {
                    OpSpec::Normalize { mean, std } if normalize.is_none() => {
                        if std.iter().any(|s| *s == 0.0 || !s.is_finite()) {
                            return Err(Error::invalid(
                                "std",
                                format!("{std:?} must be finite and non-zero"),
                            ));
                        }
                        normalize = Some((*mean, *std));
                    }
                    OpSpec::Normalize { .. } => return Err(bad_order("a second Normalize")),
                    _ => {
                        return Err(bad_order(
                            "after ToTensor only Normalize, RandomErasing, \
                             TimmRandomErasing and GaussianNoise can run",
                        ))
                    }
                }
            }
            let tensor_ops = planned
                .into_iter()
                .map(|(op, before)| match normalize {
                    Some((mean, std)) if before => op.before_normalize(mean, std),
                    _ => op,
                })
                .collect();
            Ok((Some(scaling), normalize, tensor_ops))
        }
        Some(OpSpec::PilToTensor) => match ops.next() {
            None => Ok((None, None, Vec::new())),
            Some(op) if TensorOp::is_tensor_op(op) => Err(needs_tensor()),
            Some(_) => Err(bad_order("ops after PILToTensor")),
        },
        None => Ok((None, None, Vec::new())),
        Some(op) if TensorOp::is_tensor_op(op) => Err(needs_tensor()),
        Some(_) => Err(bad_order("unexpected op after the geometric ops")),
    }
}

impl Pipeline {
    /// Checks `spec` and plans its execution. Refused besides a wrong op order or parameter:
    /// an output of more than `max_pixels` pixels, and `max_pixels` 0.
    pub fn new(spec: PipelineSpec) -> Result<Self> {
        let channels = output_channels(&spec)?;
        let mut flat = Vec::with_capacity(spec.ops.len());
        flatten_compose(&spec.ops, &mut flat);
        // The ops from the geometry on, the markers gone; each stage op is planned in the
        // domain it stands in (the geometry computes the same pixels in either).
        let (flat, domains) = mark_domains(flat, spec.mode);
        for (op, domain) in flat.iter().zip(&domains) {
            stage::check_fill_channels(op, *domain)?;
        }
        let total = flat.len();
        let mut ops = flat.into_iter().peekable();
        let keeps_size = spec.keeps_image_size();
        let first = ops.next_if(|_| !keeps_size);
        let first_rrc = first.map(ResizedCropOp::plan).transpose()?.flatten();
        // After `ToImage` the geometry's resizes are torch's tensor resize.
        let first_rrc = first_rrc.map(|mut rrc| {
            rrc.tensor = domains[0].tensor;
            rrc
        });
        let (geometry, geometry_size, filter) =
            if let Some(rrc) = first_rrc {
                // Its draws and filters decided per sample; the context starts on the first one.
                (
                    Geometry::RandomResizedCrop(rrc),
                    rrc.size(),
                    rrc.first_filter(),
                )
            } else {
                match first {
                    Some(OpSpec::Resize {
                        size,
                        max_size,
                        interpolation,
                        antialias,
                    }) => {
                        let mut resize =
                            WholeResize::plan(*size, *max_size, *interpolation, *antialias)?;
                        resize.tensor = domains[0].tensor;
                        // `Resize(256)` then `RandomResizedCrop(224)`: the crop fixes the size.
                        if let Some(mut rrc) = ops
                            .peek()
                            .map(|op| ResizedCropOp::plan(op))
                            .transpose()?
                            .flatten()
                        {
                            ops.next();
                            rrc.tensor = domains[1].tensor;
                            (
                                Geometry::ResizeThenRandomResizedCrop { resize, rrc },
                                rrc.size(),
                                rrc.first_filter(),
                            )
                        } else if let Some(crop) = ops
                            .peek()
                            .map(|op| RandomCropOp::plan(op))
                            .transpose()?
                            .flatten()
                        {
                            ops.next();
                            let out_size = check_size("size", crop.size())?;
                            (
                                Geometry::RandomCrop {
                                    resize: Some(FirstResize::Whole(resize)),
                                    crop,
                                },
                                out_size,
                                resize.filter,
                            )
                        } else {
                            let center_crop = match ops.peek() {
                                Some(OpSpec::CenterCrop { size }) => {
                                    let crop = check_size("size", size.square_or_pair())?;
                                    ops.next();
                                    Some(crop)
                                }
                                _ => None,
                            };
                            let out_size = match (center_crop, resize.size, spec.image_size) {
                                (Some(crop), _, _) => crop,
                                (None, Size::Pair([h, w]), _) => (h, w),
                                (None, Size::Int(_), Some([h, w])) => {
                                    check_size("size", resize.size.resized(w, h, resize.max_size)?)?
                                }
                                (None, Size::Int(_), None) => return Err(Error::invalid(
                                    "image_size",
                                    "Resize(int) alone keeps each image's aspect ratio: give the \
                                 size all images have (a loader takes it from the first sample)",
                                )),
                            };
                            (
                                Geometry::Resize {
                                    resize,
                                    center_crop,
                                },
                                out_size,
                                resize.filter,
                            )
                        }
                    }
                    Some(op @ OpSpec::ResizeKeepRatio { .. }) => {
                        let keep = stage::plan_keep_ratio(op)?.ok_or_else(|| {
                            Error::invalid("ops", "ResizeKeepRatio: not planned as one")
                        })?;
                        // Its size follows each image and draw: the crop after it fixes the
                        // output's (torchvision's `CenterCrop` is `CenterCropOrPad` with
                        // zeros).
                        let crop = match ops.peek() {
                            Some(OpSpec::CenterCrop { size }) => {
                                RandomCropOp::plan(&OpSpec::CenterCropOrPad {
                                    size: *size,
                                    fill: Fill::default(),
                                    padding_mode: PadMode::Constant,
                                })?
                            }
                            Some(next) => RandomCropOp::plan(next)?,
                            None => None,
                        };
                        let Some(crop) = crop else {
                            return Err(bad_order(
                                "ResizeKeepRatio's size follows each image and draw: a \
                                 CenterCropOrPad, RandomCropOrPad, CenterCrop or RandomCrop \
                                 must follow it",
                            ));
                        };
                        ops.next();
                        let out_size = check_size("size", crop.size())?;
                        let first_filter = keep.filters().filters()[0];
                        (
                            Geometry::RandomCrop {
                                resize: Some(FirstResize::KeepRatio(keep)),
                                crop,
                            },
                            out_size,
                            first_filter,
                        )
                    }
                    Some(OpSpec::CenterCrop { size }) => {
                        let size = check_size("size", size.square_or_pair())?;
                        // Crops only: the staged pass's same-size resize is a copy whatever the filter.
                        (Geometry::CenterCrop(size), size, Filter::Bilinear)
                    }
                    other => match other.map(RandomCropOp::plan).transpose()?.flatten() {
                        Some(crop) => {
                            let size = check_size("size", crop.size())?;
                            // A crop of the decoded image: no resampling, whatever the filter.
                            (
                                Geometry::RandomCrop { resize: None, crop },
                                size,
                                Filter::Bilinear,
                            )
                        }
                        None => match spec.image_size {
                            Some([h, w]) => {
                                // Copies only: the staged pass's same-size resize, whatever the filter.
                                let size = check_size("image_size", (h, w))?;
                                (Geometry::Whole(size), size, Filter::Bilinear)
                            }
                            None => return Err(Error::invalid(
                                "image_size",
                                "a pipeline that does not start with a crop or resize keeps each \
                             image's own size: give the size all images have (a loader takes \
                             it from the first sample)",
                            )),
                        },
                    },
                }
            };
        check_output_size(geometry_size.0, geometry_size.1, spec.max_pixels)?;
        let fused_tensor = match &geometry {
            Geometry::RandomResizedCrop(rrc)
            | Geometry::ResizeThenRandomResizedCrop { rrc, .. } => rrc.tensor,
            Geometry::Resize { resize, .. } => resize.tensor,
            _ => None,
        };
        // Flips and pixel ops, in the order written, up to the conversion.
        let mut middle = Vec::new();
        while let Some(&op) = ops.peek() {
            let domain = domains[total - ops.len()];
            let Some(stage) = StageOp::plan(op, domain)? else {
                break;
            };
            middle.push(stage);
            ops.next();
        }
        let (flip_p, staged) = Staged::split(middle);
        let (out_h, out_w) = match &staged {
            Some(staged) => staged.output_size(geometry_size, spec.max_pixels)?,
            None => geometry_size,
        };
        check_output_size(out_h, out_w, spec.max_pixels)?;
        let (scaling, mut normalize, tensor_ops) = plan_conversion(&mut ops)?;
        if scaling.is_none() && spec.output == OutputDtype::Float32 {
            return Err(Error::invalid(
                "output",
                "float32 output needs ToTensor; use output=uint8 with PILToTensor",
            ));
        }
        if !tensor_ops.is_empty() && spec.output == OutputDtype::Uint8 {
            return Err(Error::invalid(
                "output",
                "RandomErasing (torchvision's or timm's) and GaussianNoise write into the \
                 float32 tensor (normalized values, or standard \
                 normals), which uint8 pixels cannot hold, and with uint8 output Normalize is \
                 left to the consumer; use output=float32, or erase after normalizing on the \
                 consumer's side",
            ));
        }
        let slot_normalize = if tensor_ops.iter().any(TensorOp::needs_unnormalized_slot) {
            normalize.take()
        } else {
            None
        };
        let (output, deferred_normalize) = match spec.output {
            OutputDtype::Float32 => {
                let scaling = scaling.unwrap_or_default();
                match normalize.take() {
                    Some((mean, std)) => (OutputKind::F32Chw { mean, std, scaling }, None),
                    None => (OutputKind::F32ChwUnnormalized { scaling }, None),
                }
            }
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
            geometry_size,
            out_h,
            out_w,
            tensor_ops,
            slot_normalize,
            channels,
            fused_tensor,
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

    /// Channels of a sample: 3, or 1 (see [`ImageMode::L`]).
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// Shape of one sample: `[C, H, W]`, or `[H, W, C]` for `uint8` HWC.
    pub fn sample_shape(&self) -> [usize; 3] {
        let (h, w) = (self.out_h as usize, self.out_w as usize);
        match self.output {
            OutputKind::U8Hwc => [h, w, self.channels],
            _ => [self.channels, h, w],
        }
    }

    /// Elements per sample.
    pub fn sample_len(&self) -> usize {
        self.channels * self.out_h as usize * self.out_w as usize
    }

    /// With `uint8` output, the `Normalize(mean, std)` left for the consumer to apply
    /// (`(x / 255 - mean) / std`), so a GPU can finish what the spec asked for; one value per
    /// channel of the sample. `x / 255` to the bit is the spec's conversion's arithmetic:
    /// `x.float().div(255)` after `ToTensor`, `x.float().mul(1.0 / 255)` after v2's `ToDtype`
    /// (see [`Scaling`]).
    pub fn deferred_normalize(&self) -> Option<(&[f32], &[f32])> {
        let c = self.channels;
        self.deferred_normalize
            .as_ref()
            .map(|(mean, std)| (&mean[..c], &std[..c]))
    }

    /// Per-worker scratch for [`Pipeline::run`].
    pub fn new_context(&self) -> Result<PipelineContext> {
        let options = self.spec.decode_options();
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
            stage: StageScratch::default(),
            // A rectangle is smaller than the sample, so one sample's worth never grows.
            erase_values: if self.tensor_ops.iter().any(TensorOp::draws_values) {
                Vec::with_capacity(3 * self.out_h as usize * self.out_w as usize)
            } else {
                Vec::new()
            },
            rgb_slot: RgbSlot::default(),
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
        if self.channels == 3 {
            return self.run_rgb(bytes, rng, ctx, out, obs);
        }
        // One channel: the ops ran on the image replicated into R, G and B, which they keep
        // equal (they act on each channel alike, and the colour ops that mix channels leave a
        // gray pixel gray, as torchvision leaves an `L` image), so channel 0 is the `L` result.
        let mut rgb = std::mem::take(&mut ctx.rgb_slot);
        let plane = self.out_h as usize * self.out_w as usize;
        let report = match out {
            OutputSlot::F32(dst) => {
                rgb.f32s.resize(3 * plane, 0.0);
                let report = self.run_rgb(bytes, rng, ctx, OutputSlot::F32(&mut rgb.f32s), obs);
                dst.copy_from_slice(&rgb.f32s[..plane]);
                report
            }
            OutputSlot::U8(dst) => {
                rgb.u8s.resize(3 * plane, 0);
                let report = self.run_rgb(bytes, rng, ctx, OutputSlot::U8(&mut rgb.u8s), obs);
                match self.output {
                    OutputKind::U8Hwc => {
                        for (d, pixel) in dst.iter_mut().zip(rgb.u8s.chunks_exact(3)) {
                            *d = pixel[0];
                        }
                    }
                    _ => dst.copy_from_slice(&rgb.u8s[..plane]),
                }
                report
            }
        };
        ctx.rgb_slot = rgb;
        report
    }

    /// [`Pipeline::run`] into a three-channel slot.
    fn run_rgb(
        &self,
        bytes: &[u8],
        rng: &mut SampleRng,
        ctx: &mut PipelineContext,
        out: OutputSlot<'_>,
        obs: &mut dyn OpObserver,
    ) -> Result<SampleReport> {
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

    /// The planned sizes make this an invariant; checked so that a stage op breaking it is an
    /// error, not a wrong slot.
    fn check_staged_size(&self, img: &RgbImage) -> Result<()> {
        if (img.height(), img.width()) != (self.out_h, self.out_w) {
            return Err(Error::invalid(
                "ops",
                format!(
                    "the stage ops left a {}x{} image, the plan says {}x{}",
                    img.height(),
                    img.width(),
                    self.out_h,
                    self.out_w
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
            stage,
            erase_values,
            ..
        } = ctx;
        let mut out = out;
        let (src, rect, report) = self.decode_stage(
            bytes,
            rng,
            decode,
            resizer,
            decoded,
            stage_a,
            &mut stage.padder,
            obs,
        )?;
        // A field store: the weights are cached by filter, so a one-filter pipeline's caches
        // stay warm and a choice's samples each get their own filter's.
        kernel.set_filter(report.filter);
        kernel.set_tensor_api(self.fused_tensor);
        observed(obs, Op::Fused, || {
            let size = self.geometry_size;
            kernel.run(
                src,
                rect,
                size,
                report.flipped,
                &self.output,
                reborrow(&mut out),
            )
        })?;
        self.run_tensor_ops(out, SlotState::Normalized, rng, erase_values, obs)?;
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
            stage,
            erase_values,
            ..
        } = ctx;
        let mut out = out;
        let (src, rect, mut report) = self.decode_stage(
            bytes,
            rng,
            decode,
            resizer,
            decoded,
            stage_a,
            &mut stage.padder,
            obs,
        )?;
        // The whole image may be of another size than the first one when the stage ops fix the
        // sample's size (`stage_ops_fix_the_size`): it goes into the stage as it is.
        let size = match self.geometry {
            Geometry::Whole(_) => (rect.height, rect.width),
            _ => self.geometry_size,
        };
        let into_stage = match self.geometry {
            Geometry::RandomResizedCrop(_) | Geometry::ResizeThenRandomResizedCrop { .. } => {
                Op::Resize
            }
            _ => Op::Crop,
        };
        kernel.set_filter(report.filter);
        kernel.set_tensor_api(self.fused_tensor);
        observed(obs, into_stage, || {
            let pixels = stage_b.try_reset(size.1, size.0)?;
            kernel.run(
                src,
                rect,
                size,
                report.flipped,
                &OutputKind::U8Hwc,
                OutputSlot::U8(pixels),
            )
        })?;
        report.flipped ^= staged.run_ops(stage_b, stage, rng, obs)?;
        self.check_staged_size(stage_b)?;
        let post_flip = observed(obs, Op::ToTensor, || {
            let flip = staged.draw_post_flip(rng);
            let full = CropRect::full(self.out_w, self.out_h);
            let size = (self.out_h, self.out_w);
            kernel
                .run(
                    stage_b.view(),
                    full,
                    size,
                    flip,
                    &self.output,
                    reborrow(&mut out),
                )
                .map(|()| flip)
        })?;
        report.flipped ^= post_flip;
        self.run_tensor_ops(out, SlotState::Normalized, rng, erase_values, obs)?;
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
        padder: &mut Padder,
        obs: &mut dyn OpObserver,
    ) -> Result<(RgbView<'a>, CropRect, SampleReport)> {
        match &self.geometry {
            Geometry::RandomResizedCrop(rrc) => {
                // One decode span per sample: the crop is drawn between reading the header
                // and decoding the region, so its span nests inside decode's.
                obs.enter(Op::Decode);
                let (out_h, out_w) = self.geometry_size;
                let decoded_crop = (|| {
                    let info = decode.info(bytes)?;
                    let (crop, filter, flipped) = observed(obs, Op::CropParams, || {
                        let (crop, filter) = rrc.draw(info.width, info.height, rng);
                        (crop, filter, self.draw_flip(rng))
                    });
                    let inner = if self.spec.dct_scaling {
                        decode
                            .decode_region_scaled(bytes, crop, out_h, out_w, decoded)
                            .map(|(rect, _)| rect)
                    } else if self.spec.roi_decode {
                        decode.decode_region(bytes, crop, decoded)
                    } else {
                        decode.decode(bytes, decoded).map(|_| crop)
                    }?;
                    Ok::<_, Error>((info, crop, filter, flipped, inner))
                })();
                obs.exit(Op::Decode);
                let (info, crop, filter, flipped, inner) = decoded_crop?;
                let decoded: &'a RgbImage = decoded;
                let report = SampleReport {
                    width: info.width,
                    height: info.height,
                    crop,
                    flipped,
                    filter,
                };
                Ok((decoded.view(), inner, report))
            }
            Geometry::ResizeThenRandomResizedCrop { resize, rrc } => {
                let info = observed(obs, Op::Decode, || decode.decode(bytes, decoded))?;
                let (crop, filter, flipped) =
                    self.resized_crop_params(resize, rrc, decoded, resized, resizer, rng, obs)?;
                let decoded: &'a RgbImage = decoded;
                let report = SampleReport {
                    width: info.width,
                    height: info.height,
                    crop: CropRect::full(info.width, info.height),
                    flipped,
                    filter,
                };
                Ok((decoded.view(), crop, report))
            }
            Geometry::RandomCrop { resize, crop } => {
                let info = observed(obs, Op::Decode, || decode.decode(bytes, decoded))?;
                let (plan, flipped, filter) =
                    self.random_crop_params(*resize, crop, decoded, resized, resizer, rng, obs)?;
                // Without padding the window is a crop the fused kernel takes itself.
                let plain = RandomCropOp::is_plain_crop(&plan);
                if !plain {
                    observed(obs, crop.span(), || {
                        crop.apply(decoded.view(), &plan, padder, resized)
                    })?;
                }
                let report = SampleReport {
                    width: info.width,
                    height: info.height,
                    crop: RandomCropOp::source_rect(&plan, resize.is_some(), info),
                    flipped,
                    filter,
                };
                let (decoded, resized): (&'a RgbImage, &'a RgbImage) = (decoded, resized);
                Ok(if plain {
                    (decoded.view(), plan.rect, report)
                } else {
                    let (h, w) = crop.size();
                    (resized.view(), CropRect::full(w, h), report)
                })
            }
            Geometry::Resize { .. } | Geometry::CenterCrop(_) | Geometry::Whole(_) => {
                let info = observed(obs, Op::Decode, || decode.decode(bytes, decoded))?;
                let flipped = observed(obs, Op::CropParams, || self.draw_flip(rng));
                let (src, rect, crop) = self.eval_source(decoded, resizer, resized, padder, obs)?;
                let report = SampleReport {
                    width: info.width,
                    height: info.height,
                    crop,
                    flipped,
                    filter: self.filter,
                };
                Ok((src, rect, report))
            }
        }
    }

    /// For eval pipelines: the view the final crop is taken from (the resized image when the
    /// pipeline resizes first; Pillow resizes the whole image, then crops, and so do we), the
    /// crop in it, and the report's crop. A `CenterCrop` larger than its input pads with zeros
    /// as torchvision's does, into whichever of `decoded` and `resized` is free (the view is
    /// then the whole padded crop).
    fn eval_source<'a>(
        &self,
        decoded: &'a mut RgbImage,
        resizer: &mut Resizer,
        resized: &'a mut RgbImage,
        padder: &mut Padder,
        obs: &mut dyn OpObserver,
    ) -> Result<(RgbView<'a>, CropRect, CropRect)> {
        let (w, h) = (decoded.width(), decoded.height());
        let source = CropRect::full(w, h);
        match &self.geometry {
            Geometry::Resize {
                resize,
                center_crop: crop,
            } => {
                let (rh, rw) = self.resize_whole(decoded, *resize, resizer, resized, obs)?;
                let Some((ch, cw)) = *crop else {
                    let (gh, gw) = self.geometry_size;
                    if (rh, rw) != (gh, gw) {
                        // Only a `Resize(int)` sized from the first image gets here.
                        return Err(Error::invalid(
                            "image_size",
                            format!(
                                "the image is {w}x{h}, resized to {rw}x{rh}, the pipeline's \
                                 images to {gw}x{gh} (the first sample's): Resize(int) keeps \
                                 each image's aspect ratio, and samples of several sizes cannot \
                                 be batched; add CenterCrop, or give Resize (height, width)"
                            ),
                        ));
                    }
                    return Ok((resized.view(), CropRect::full(rw, rh), source));
                };
                let crop = center_crop(rw, rh, ch, cw)?;
                if !crop.pads() {
                    let resized: &'a RgbImage = resized;
                    return Ok((resized.view(), crop.rect, source));
                }
                // The decoded image is no longer needed: the padded crop goes there.
                observed(obs, Op::Crop, || {
                    pad_center_crop(resized.view(), &crop, padder, decoded)
                })?;
                let decoded: &'a RgbImage = decoded;
                Ok((decoded.view(), CropRect::full(cw, ch), source))
            }
            Geometry::CenterCrop((ch, cw)) => {
                let crop = center_crop(w, h, *ch, *cw)?;
                if !crop.pads() {
                    let decoded: &'a RgbImage = decoded;
                    return Ok((decoded.view(), crop.rect, crop.rect));
                }
                observed(obs, Op::Crop, || {
                    pad_center_crop(decoded.view(), &crop, padder, resized)
                })?;
                let resized: &'a RgbImage = resized;
                Ok((resized.view(), CropRect::full(*cw, *ch), source))
            }
            Geometry::Whole((h0, w0)) => {
                if (h, w) != (*h0, *w0) && !self.stage_ops_fix_the_size(h, w) {
                    return Err(Error::invalid(
                        "image_size",
                        format!(
                            "the image is {w}x{h}, the pipeline's images {w0}x{h0} (the first \
                             sample's size): with no crop or resize first, every image must \
                             have one size to be batched; add Resize or a crop"
                        ),
                    ));
                }
                let decoded: &'a RgbImage = decoded;
                Ok((decoded.view(), source, source))
            }
            Geometry::RandomResizedCrop(_)
            | Geometry::ResizeThenRandomResizedCrop { .. }
            | Geometry::RandomCrop { .. } => Err(Error::invalid("ops", "not an eval pipeline")),
        }
    }

    /// For a pipeline planned on the first image's size with no crop or resize first: whether
    /// the stage ops make the planned sample of an `h x w` image too (a crop or resize among
    /// them fixes the size: `ColorJitter(), RandomResizedCrop(224)`), so that images of any size
    /// batch, as they do with torchvision.
    fn stage_ops_fix_the_size(&self, h: u32, w: u32) -> bool {
        self.staged.as_ref().is_some_and(|staged| {
            staged.output_size((h, w), self.spec.max_pixels).ok() == Some((self.out_h, self.out_w))
        })
    }

    /// Runs the tensor ops, each in its own span, on the sample the conversion wrote into
    /// `out` (nothing when there are none, the common case).
    #[inline]
    fn run_tensor_ops(
        &self,
        out: OutputSlot<'_>,
        state: SlotState,
        rng: &mut SampleRng,
        values: &mut Vec<f32>,
        obs: &mut dyn OpObserver,
    ) -> Result<()> {
        if self.tensor_ops.is_empty() {
            return Ok(());
        }
        let OutputSlot::F32(slot) = out else {
            return Err(Error::invalid(
                "output",
                "RandomErasing needs float32 output (the plan refuses uint8)",
            ));
        };
        let Some((mean, std)) = self.slot_normalize else {
            for op in &self.tensor_ops {
                self.run_tensor_op(op, slot, state, rng, values, obs)?;
            }
            return Ok(());
        };
        // The conversion wrote the ToTensor values: each op where it is written, as op by op.
        let (before, after) = self.tensor_ops.split_at(
            self.tensor_ops
                .partition_point(TensorOp::is_before_normalize),
        );
        for op in before {
            self.run_tensor_op(op, slot, SlotState::AsWritten, rng, values, obs)?;
        }
        observed(obs, Op::Normalize, || tensor::normalize(slot, &mean, &std))?;
        for op in after {
            self.run_tensor_op(op, slot, SlotState::AsWritten, rng, values, obs)?;
        }
        Ok(())
    }

    fn run_tensor_op(
        &self,
        op: &TensorOp,
        slot: &mut [f32],
        state: SlotState,
        rng: &mut SampleRng,
        values: &mut Vec<f32>,
        obs: &mut dyn OpObserver,
    ) -> Result<()> {
        let size = (self.out_h, self.out_w);
        observed(obs, op.span(), || op.run(slot, size, state, rng, values))
    }

    /// `Resize(size, max_size)` of the whole `decoded` image into `resized`, in its span;
    /// returns the new `(height, width)`.
    fn resize_whole(
        &self,
        decoded: &RgbImage,
        resize: WholeResize,
        resizer: &mut Resizer,
        resized: &mut RgbImage,
        obs: &mut dyn OpObserver,
    ) -> Result<(u32, u32)> {
        let (rh, rw) = resize
            .size
            .resized(decoded.width(), decoded.height(), resize.max_size)?;
        // Resize(int) scales the longer side with the shorter: a thin image would be resized
        // to an intermediate far past the decode limit before the crop.
        let pixels = u64::from(rh) * u64::from(rw);
        if pixels > self.spec.max_pixels {
            return Err(Error::TooLarge {
                width: rw,
                height: rh,
                pixels,
                limit: self.spec.max_pixels,
            });
        }
        resizer.set_filter(resize.filter);
        resizer.set_tensor_api(resize.tensor);
        observed(obs, Op::Resize, || {
            resizer.resize(decoded.view(), rh, rw, resized)
        })?;
        Ok((rh, rw))
    }

    /// For a [`Geometry::RandomCrop`]: the decoded image resized (when the geometry says so)
    /// into `decoded` itself (its buffer swapped with `spare`'s: no copy, no allocation),
    /// then the crop's draw and the flip's coin, in that order. Returns the plan.
    #[allow(clippy::too_many_arguments)]
    fn random_crop_params(
        &self,
        resize: Option<FirstResize>,
        crop: &RandomCropOp,
        decoded: &mut RgbImage,
        spare: &mut RgbImage,
        resizer: &mut Resizer,
        rng: &mut SampleRng,
        obs: &mut dyn OpObserver,
    ) -> Result<(RandomCropPlan, bool, Filter)> {
        let mut filter = self.filter;
        match resize {
            Some(FirstResize::Whole(resize)) => {
                self.resize_whole(decoded, resize, resizer, spare, obs)?;
                std::mem::swap(decoded, spare);
            }
            Some(FirstResize::KeepRatio(keep)) => {
                filter = self.resize_keep_ratio(decoded, &keep, resizer, spare, rng, obs)?;
                std::mem::swap(decoded, spare);
            }
            None => {}
        }
        observed(obs, Op::CropParams, || {
            let plan = crop.draw(decoded.width(), decoded.height(), rng)?;
            Ok((plan, self.draw_flip(rng), filter))
        })
    }

    /// timm's `ResizeKeepRatio` of the whole `decoded` image into `resized`: its draws (in
    /// the crop-parameters span), then the resize with the filter drawn. Returns the filter. A
    /// size of 0 (Pillow refuses it) or past the decode limit is the sample's error.
    fn resize_keep_ratio(
        &self,
        decoded: &RgbImage,
        keep: &KeepRatioResize,
        resizer: &mut Resizer,
        resized: &mut RgbImage,
        rng: &mut SampleRng,
        obs: &mut dyn OpObserver,
    ) -> Result<Filter> {
        let (w, h) = (decoded.width(), decoded.height());
        let ((rh, rw), index) = observed(obs, Op::CropParams, || keep.draw(w, h, rng));
        let filters = keep.filters();
        let filter = filters.filters().get(index).copied().unwrap_or(self.filter);
        if rh == 0 || rw == 0 {
            return Err(Error::invalid(
                "size",
                format!(
                    "ResizeKeepRatio: the {w}x{h} image resizes to {rw}x{rh}; a side of 0 \
                     cannot be resized to (Pillow refuses it too)"
                ),
            ));
        }
        let pixels = rh.saturating_mul(rw);
        if pixels > self.spec.max_pixels || rh > u64::from(u32::MAX) || rw > u64::from(u32::MAX) {
            return Err(Error::invalid(
                "size",
                format!(
                    "ResizeKeepRatio: the {w}x{h} image resizes to {rw}x{rh}, more than \
                     max_pixels = {}",
                    self.spec.max_pixels
                ),
            ));
        }
        // Both sides were just bounded by u32::MAX.
        let (rh, rw) = (rh as u32, rw as u32);
        resizer.set_filter(filter);
        resizer.set_tensor_api(None);
        observed(obs, Op::Resize, || {
            resizer.resize(decoded.view(), rh, rw, resized)
        })?;
        Ok(filter)
    }

    /// For a [`Geometry::ResizeThenRandomResizedCrop`]: the decoded image resized into
    /// `decoded` itself (buffers swapped with `spare`), then the crop (and its filter) drawn on
    /// the resized size and the flip's coin, in that order.
    #[allow(clippy::too_many_arguments)]
    fn resized_crop_params(
        &self,
        resize: &WholeResize,
        rrc: &ResizedCropOp,
        decoded: &mut RgbImage,
        spare: &mut RgbImage,
        resizer: &mut Resizer,
        rng: &mut SampleRng,
        obs: &mut dyn OpObserver,
    ) -> Result<(CropRect, Filter, bool)> {
        self.resize_whole(decoded, *resize, resizer, spare, obs)?;
        std::mem::swap(decoded, spare);
        Ok(observed(obs, Op::CropParams, || {
            let (crop, filter) = rrc.draw(decoded.width(), decoded.height(), rng);
            (crop, filter, self.draw_flip(rng))
        }))
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
            stage,
            erase_values,
            ..
        } = ctx;
        let (out_h, out_w) = self.geometry_size;
        let info = observed(obs, Op::Decode, || decode.decode(bytes, decoded))?;
        let (crop, filter, flipped) = match &self.geometry {
            Geometry::RandomCrop { resize, crop } => {
                let (plan, flipped, filter) =
                    self.random_crop_params(*resize, crop, decoded, stage_b, resizer, rng, obs)?;
                // Always through the padder here, so the fused path's plain crop is checked
                // against it.
                observed(obs, crop.span(), || {
                    crop.apply(decoded.view(), &plan, &mut stage.padder, stage_a)
                })?;
                (
                    RandomCropOp::source_rect(&plan, resize.is_some(), info),
                    filter,
                    flipped,
                )
            }
            Geometry::ResizeThenRandomResizedCrop { resize, rrc } => {
                self.resized_crop_params(resize, rrc, decoded, stage_b, resizer, rng, obs)?
            }
            _ => observed(obs, Op::CropParams, || {
                let (crop, filter) = match &self.geometry {
                    Geometry::RandomResizedCrop(rrc) => rrc.draw(info.width, info.height, rng),
                    _ => (CropRect::full(info.width, info.height), self.filter),
                };
                (crop, filter, self.draw_flip(rng))
            }),
        };
        match &self.geometry {
            Geometry::RandomCrop { .. } => {}
            Geometry::RandomResizedCrop(_) | Geometry::ResizeThenRandomResizedCrop { .. } => {
                observed(obs, Op::Crop, || {
                    decoded.crop_view(crop).map(|v| v.to_image(stage_b))
                })?;
                resizer.set_filter(filter);
                resizer.set_tensor_api(self.fused_tensor);
                observed(obs, Op::Resize, || {
                    resizer.resize(stage_b.view(), out_h, out_w, stage_a)
                })?;
            }
            _ => {
                let (src, rect, _) =
                    self.eval_source(decoded, resizer, stage_b, &mut stage.padder, obs)?;
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
            flipped ^= staged.run_ops(stage_a, stage, rng, obs)?;
            self.check_staged_size(stage_a)?;
            if staged.post_flip_p() > 0.0 {
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
            (OutputKind::F32ChwUnnormalized { scaling }, OutputSlot::F32(dst)) => {
                observed(obs, Op::ToTensor, || {
                    tensor::to_float(stage_a.view(), dst, scaling)
                })?;
                let tail = OutputSlot::F32(dst);
                self.run_tensor_ops(tail, SlotState::AsWritten, rng, erase_values, obs)?;
            }
            (OutputKind::F32Chw { mean, std, scaling }, OutputSlot::F32(dst)) => {
                observed(obs, Op::ToTensor, || {
                    tensor::to_float(stage_a.view(), dst, scaling)
                })?;
                // Each erasing where it is written: on the ToTensor values before Normalize.
                let (before, after) = self.tensor_ops.split_at(
                    self.tensor_ops
                        .partition_point(TensorOp::is_before_normalize),
                );
                for op in before {
                    self.run_tensor_op(op, dst, SlotState::AsWritten, rng, erase_values, obs)?;
                }
                observed(obs, Op::Normalize, || tensor::normalize(dst, &mean, &std))?;
                for op in after {
                    self.run_tensor_op(op, dst, SlotState::AsWritten, rng, erase_values, obs)?;
                }
            }
            (OutputKind::U8Chw, OutputSlot::U8(dst)) => {
                observed(obs, Op::ToTensor, || tensor::to_chw_u8(stage_a.view(), dst))?;
            }
            (OutputKind::U8Hwc, OutputSlot::U8(dst)) => dst.copy_from_slice(stage_a.as_raw()),
            _ => return Err(Error::invalid("out", "slot type does not match the output")),
        }
        // As the fused pass reports it: a crop drawn on the resized image is no crop of the
        // source.
        let crop = match self.geometry {
            Geometry::ResizeThenRandomResizedCrop { .. } => CropRect::full(info.width, info.height),
            _ => crop,
        };
        Ok(SampleReport {
            width: info.width,
            height: info.height,
            crop,
            flipped,
            filter,
        })
    }
}
