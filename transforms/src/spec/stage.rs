//! The staged part of a plan: the ops between the geometry (which fixes the size the pixel ops
//! see) and the conversion into the batch slot, run in place on a u8 image, each in its own
//! span.
//!
//! Each op is planned in a [`Domain`]: what torchvision holds where the op stands, a PIL image
//! (Pillow's arithmetic, the default) or, after `ToImage`/`PILToTensor`, a uint8 tensor (torch's
//! tensor kernels: [`crate::augment::tensor_color`], [`crate::augment::grid_sample`]). The
//! colour ops, the warps and the policies pick their kernels by it; the ops that compute the
//! same pixels either way (flips, crops, padding, blur, resizes) ignore it.
//!
//! Ops come in families, a file each: [`color`] (point ops and blends), [`geometric`] (flips,
//! rotations, affine warps, blur, padding: the ops that need a second image or change the
//! size), [`policy`] (torchvision's automatic augmentation policies, whose chosen op runs in a
//! nested span named by both, e.g. `TrivialAugmentWide/Solarize`), [`augmix`] (AugMix, with
//! torch's tensor kernels and nested `AugMix/<Op>` spans) and [`choice`]
//! (`RandomApply`, `RandomChoice`, `RandomOrder` over nested stage ops), and [`timm`]
//! (timm's `RandAugment`, nested `TimmRandAugment/<Op>` spans). A family plans its
//! [`OpSpec`]s, names its spans and runs its ops; this module only dispatches.
//!
//! Must not allocate per sample once the [`StageScratch`] is warm (an op that writes a new
//! image writes [`StageScratch::spare`] and swaps it with the staging image), nor draw outside
//! the ops' written order: output must stay a function of (seed, epoch, index).

mod augmix;
mod choice;
mod color;
mod geometric;
mod policy;
mod timm;

use crate::augment::augmix::AugMixScratch;
use crate::augment::box_blur::PillowGaussianBlur;
use crate::augment::color::ColorScratch;
use crate::augment::elastic::ElasticField;
use crate::augment::geometry::{AffineWarp, GaussianBlur, Padder};
use crate::augment::grid_sample::{GridSampler, BICUBIC_ON_TENSORS};
use crate::augment::policy::Api;
use crate::augment::timm_mix::TimmMixScratch;
use crate::encode::JpegRoundTrip;
use crate::error::{Error, Result};
use crate::image::RgbImage;
use crate::resize::Resizer;
use crate::rng::SampleRng;
use crate::spec::{observed, Fill, OpObserver, OpSpec, WarpInterpolation};
use crate::tensor;

use augmix::AugMixOp;
use choice::ChoiceOp;
use color::ColorOp;
use geometric::GeometricOp;
pub(in crate::spec) use geometric::{
    pad_center_crop, plan_keep_ratio, RandomCropOp, ResizedCropOp,
};
use policy::PolicyOp;
use timm::TimmOp;
pub use timm::{apply_timm_op, plan_timm_augmix, plan_timm_auto_augment, plan_timm_rand_augment};

/// Refuses a per-channel `fill` of more than one value where the image has one channel:
/// torchvision's `_parse_fill` (PIL) and its tensor warps raise on the first sample, and here,
/// with the gray level replicated into three channels, channel 0's value would fill silently.
pub(in crate::spec) fn check_fill_channels(op: &OpSpec, domain: Domain) -> Result<()> {
    match (domain.one_channel, op.fill()) {
        (true, Some(Fill::PerChannel(values))) if values.len() > 1 => Err(Error::invalid(
            "fill",
            format!(
                "{}: {values:?}: the number of elements in 'fill' does not match the number \
                 of channels of the image ({} != 1)",
                choice::op_name(op),
                values.len()
            ),
        )),
        _ => Ok(()),
    }
}

/// `err` with the op it came from named in front of its reason (the argument is named already).
pub(super) fn in_op(op: &'static str, err: Error) -> Error {
    match err {
        Error::InvalidArgument { name, reason } => Error::InvalidArgument {
            name,
            reason: format!("{op}: {reason}"),
        },
        other => other,
    }
}

/// torchvision v2's check of every `p` (v1 checks none; a `p` outside `[0, 1]` is a mistake).
pub(super) fn check_p(op: &'static str, p: f64) -> Result<f64> {
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::invalid(
            "p",
            format!("{op}: {p} is not a probability in [0, 1]"),
        ));
    }
    Ok(p)
}

/// What torchvision holds where an op stands, which decides whose arithmetic the op follows.
/// The default: a three-channel PIL image.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(in crate::spec) struct Domain {
    /// `None`: a PIL image (Pillow's arithmetic). `Some(api)`: a uint8 tensor (after `ToImage`
    /// or `PILToTensor`), whose single ops run `api`'s tensor kernels
    /// (`torchvision.transforms.functional` or `.v2`'s); the policies and AugMix follow their
    /// own `api`.
    pub tensor: Option<Api>,
    /// The image has one channel (an `L` image, replicated into R, G and B here): on a tensor,
    /// the colour ops that mix channels act as torch's do on one channel.
    pub one_channel: bool,
}

/// A warp's `interpolation` where its kernel is torch's tensor one: BICUBIC is torchvision's
/// error (`op`: the transform, named in front of the message).
pub(super) fn tensor_interpolation(
    op: &'static str,
    interpolation: WarpInterpolation,
) -> Result<WarpInterpolation> {
    if interpolation == WarpInterpolation::Bicubic {
        return Err(Error::invalid(
            "interpolation",
            format!("{op}: {BICUBIC_ON_TENSORS}"),
        ));
    }
    Ok(interpolation)
}

/// torchvision's tensor `fill`: one value for every channel, or one per channel, each a
/// float within 0..=255 (torch would wrap a value outside it when casting back to uint8);
/// `None` is no fill channel (which differs from 0 under BILINEAR).
pub(super) fn tensor_fill(op: &'static str, fill: Option<&Fill>) -> Result<Option<[f32; 3]>> {
    let values: &[f64] = match fill {
        None => return Ok(None),
        Some(Fill::Number(v)) => std::slice::from_ref(v),
        Some(Fill::PerChannel(v)) => v,
    };
    let channel = |v: f64| {
        if v.is_finite() && (0.0..=255.0).contains(&v) {
            Ok(v as f32)
        } else {
            Err(Error::invalid(
                "fill",
                format!("{op}: {v} is not a number within 0..=255"),
            ))
        }
    };
    match values {
        [v] => Ok(Some([channel(*v)?; 3])),
        [r, g, b] => Ok(Some([channel(*r)?, channel(*g)?, channel(*b)?])),
        other => Err(Error::invalid(
            "fill",
            format!(
                "{op}: {} values do not broadcast to the image's 3 channels",
                other.len()
            ),
        )),
    }
}

/// Per-worker buffers of the stage ops; they only grow, so a warm context allocates nothing.
#[derive(Debug, Default)]
pub(in crate::spec) struct StageScratch {
    /// Sharpness's rows.
    pub color: ColorScratch,
    /// Where an op that cannot work in place writes its result before swapping it with the
    /// staging image.
    pub spare: RgbImage,
    /// Rotation and affine tables.
    pub warp: AffineWarp,
    /// Blur kernels and rows.
    pub blur: GaussianBlur,
    /// Pillow's GaussianBlur filter's lines (timm's GaussianBlur ops).
    pub pillow_blur: PillowGaussianBlur,
    /// Padding state.
    pub padder: Padder,
    /// AugMix's float32 mix, chain image and grid tables.
    pub augmix: AugMixScratch,
    /// timm's AugMix: its float32 mix, chain image and original.
    pub timm_mix: TimmMixScratch,
    /// The grid tables of the tensor-domain warps.
    pub grid: GridSampler,
    /// `ElasticTransform`'s displacement field and blur lines.
    pub elastic: ElasticField,
    /// A `Resize` or `RandomResizedCrop` in the stage (made by the first).
    pub resizer: Option<Resizer>,
    /// `JPEG`'s compressor, decompressor and JPEG buffer (made by the first).
    pub jpeg: Option<JpegRoundTrip>,
}

impl StageScratch {
    /// Bytes its images hold on to.
    pub fn retained_bytes(&self) -> usize {
        self.spare.retained_bytes()
            + self.augmix.retained_bytes()
            + self.timm_mix.retained_bytes()
            + self.elastic.retained_bytes()
    }
}

/// One op of the staged part of a plan, parameters checked.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::spec) enum StageOp {
    /// `RandomHorizontalFlip`; planned here so flips can stand between the other ops.
    HFlip {
        p: f64,
    },
    Color(ColorOp),
    Geometric(GeometricOp),
    Policy(PolicyOp),
    Choice(ChoiceOp),
    AugMix(AugMixOp),
    Timm(TimmOp),
}

impl StageOp {
    /// `Ok(None)`: `op` is not a stage op (the conversion, or an op out of place). `domain`:
    /// what torchvision holds where `op` stands.
    pub fn plan(op: &OpSpec, domain: Domain) -> Result<Option<Self>> {
        check_fill_channels(op, domain)?;
        if let OpSpec::RandomHorizontalFlip { p } = op {
            return Ok(Some(StageOp::HFlip {
                p: check_p("RandomHorizontalFlip", *p)?,
            }));
        }
        if let Some(op) = ColorOp::plan(op, domain)? {
            return Ok(Some(StageOp::Color(op)));
        }
        if let Some(op) = GeometricOp::plan(op, domain)? {
            return Ok(Some(StageOp::Geometric(op)));
        }
        if let Some(op) = PolicyOp::plan(op, domain)? {
            return Ok(Some(StageOp::Policy(op)));
        }
        if let Some(op) = AugMixOp::plan(op, domain)? {
            return Ok(Some(StageOp::AugMix(op)));
        }
        if let Some(op) = TimmOp::plan(op, domain)? {
            return Ok(Some(StageOp::Timm(op)));
        }
        Ok(ChoiceOp::plan(op, domain)?.map(StageOp::Choice))
    }

    /// The `(height, width)` of this op's output for an input of `size`; an error when it
    /// would depend on the sample (so samples could not be batched), or when it, or an image
    /// made on the way inside it, would hold more than `limit` pixels: no decodable image
    /// leads there, and the op would allocate it for every sample (`Resize(60000)` before a
    /// `CenterCrop`).
    pub fn output_size(&self, size: (u32, u32), limit: u64) -> Result<(u32, u32)> {
        match self {
            // The only ops that make a new size; a container's ops come here one by one.
            StageOp::Geometric(op) => {
                let (h, w) = op.output_size(size)?;
                let pixels = u64::from(h) * u64::from(w);
                if pixels > limit {
                    return Err(Error::invalid(
                        "size",
                        format!(
                            "{} makes a {h}x{w} image, {pixels} pixels, more than max_pixels \
                             ({limit})",
                            op.name()
                        ),
                    ));
                }
                Ok((h, w))
            }
            StageOp::Choice(op) => op.output_size(size, limit),
            StageOp::HFlip { .. }
            | StageOp::Color(_)
            | StageOp::Policy(_)
            | StageOp::AugMix(_)
            | StageOp::Timm(_) => Ok(size),
        }
    }

    /// Draws this op's parameters from `rng` (torchvision's draws, in its order and number;
    /// flips keep the pipeline's rule of no coin at `p = 0`) and applies it to `img`, in the
    /// op's own span (a policy's chosen op in a nested one). Returns whether it mirrored the
    /// image horizontally.
    pub fn run(
        &self,
        img: &mut RgbImage,
        scratch: &mut StageScratch,
        rng: &mut SampleRng,
        obs: &mut dyn OpObserver,
    ) -> Result<bool> {
        match self {
            StageOp::HFlip { p } => Ok(observed(obs, crate::spec::Op::Flip, || {
                let flip = *p > 0.0 && tensor::draw_flip(rng, *p);
                if flip {
                    tensor::hflip(img);
                }
                flip
            })),
            StageOp::Color(op) => {
                observed(obs, op.span(), || op.run(img, scratch, rng))?;
                Ok(false)
            }
            StageOp::Geometric(op) => {
                observed(obs, op.span(), || op.run(img, scratch, rng))?;
                Ok(false)
            }
            // These two report nested spans (the op a policy or a choice picked) through `obs`.
            StageOp::Policy(op) => {
                obs.enter(op.span());
                let done = op.run(img, scratch, rng, obs);
                obs.exit(op.span());
                done.map(|()| false)
            }
            StageOp::Choice(op) => {
                obs.enter(op.span());
                let mirrored = op.run(img, scratch, rng, obs);
                obs.exit(op.span());
                mirrored
            }
            StageOp::AugMix(op) => {
                obs.enter(crate::spec::Op::AugMix);
                let done = op.run(img, scratch, rng, obs);
                obs.exit(crate::spec::Op::AugMix);
                done.map(|()| false)
            }
            StageOp::Timm(op) => {
                obs.enter(op.span());
                let done = op.run(img, scratch, rng, obs);
                obs.exit(op.span());
                done.map(|()| false)
            }
        }
    }
}

/// The staged part of a plan: stage ops (and flips between them) on a u8 image of the
/// geometry's output size, then a flip standing after the last of them, fused into the
/// conversion.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::spec) struct Staged {
    ops: Vec<StageOp>,
    post_flip_p: f64,
}

impl Staged {
    /// Splits the ops between geometry and conversion into the flip fused into the resize,
    /// and the stages; `None` when only that flip (or nothing) stands there, so the single
    /// fused pass runs exactly as without stage ops.
    pub fn split(mut middle: Vec<StageOp>) -> (f64, Option<Staged>) {
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

    /// The size the stage ops leave for an input of `size` (the geometry's output); every image
    /// on the way within `limit` pixels ([`StageOp::output_size`]).
    pub fn output_size(&self, size: (u32, u32), limit: u64) -> Result<(u32, u32)> {
        // `Err(bound)`: known only per sample, after a `RandomRotation(expand=True)` until an op
        // that fixes the size, and at most `bound` on each side (a rotation's bounding box is
        // at most `w + h` wide and high, plus a pixel of rounding each side).
        let mut known: std::result::Result<(u32, u32), (u32, u32)> = Ok(size);
        for op in &self.ops {
            known = match (op, known) {
                (StageOp::Geometric(g), Ok((h, w)) | Err((h, w))) if g.sizes_per_sample() => {
                    let side = u64::from(h) + u64::from(w) + 2;
                    let pixels = side.saturating_mul(side);
                    match u32::try_from(side) {
                        Ok(side) if pixels <= limit => Err((side, side)),
                        _ => {
                            return Err(Error::invalid(
                                "size",
                                format!(
                                    "RandomRotation(expand=True) of a {h}x{w} image can make a \
                                     {side}x{side} one, {pixels} pixels, more than max_pixels \
                                     ({limit})"
                                ),
                            ))
                        }
                    }
                }
                (_, Ok(size)) => Ok(op.output_size(size, limit)?),
                (StageOp::Geometric(g), Err(bound)) => match g.output_size_per_sample()? {
                    Some(fixed) => Ok(op.output_size(fixed, limit)?),
                    None => Err(bound),
                },
                (StageOp::Choice(_), Err(_)) => return Err(Error::invalid(
                    "ops",
                    "RandomApply, RandomChoice or RandomOrder after RandomRotation(expand=True) \
                         needs the size its ops see: put it after the crop or resize that fixes \
                         the size",
                )),
                (_, Err(bound)) => Err(bound),
            };
        }
        known.map_err(|_| geometric::expand_needs_a_fixed_size())
    }

    /// The flip after the stage ops, fused into the conversion (0: none).
    pub fn post_flip_p(&self) -> f64 {
        self.post_flip_p
    }

    /// Runs the stage ops in order on `img`; whether they mirrored it (an odd number of
    /// flips).
    pub fn run_ops(
        &self,
        img: &mut RgbImage,
        scratch: &mut StageScratch,
        rng: &mut SampleRng,
        obs: &mut dyn OpObserver,
    ) -> Result<bool> {
        let mut flipped = false;
        for op in &self.ops {
            flipped ^= op.run(img, scratch, rng, obs)?;
        }
        Ok(flipped)
    }

    /// The coin of the flip after the stage ops (none when there is no such flip or `p = 0`).
    pub fn draw_post_flip(&self, rng: &mut SampleRng) -> bool {
        self.post_flip_p > 0.0 && tensor::draw_flip(rng, self.post_flip_p)
    }
}
