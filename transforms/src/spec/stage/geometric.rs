//! The geometric ops of a stage, on the u8 staging image with the arithmetic of torchvision's
//! PIL path (the kernels of [`crate::augment::geometry`], and Pillow's resize):
//! `RandomVerticalFlip`, `RandomRotation`, `RandomAffine`, `RandomPerspective`, `GaussianBlur`,
//! `Pad`, `RandomCrop`,
//! `CenterCrop`, and a `Resize` or `RandomResizedCrop` (or timm's
//! `RandomResizedCropAndInterpolation`) after the plan's geometry (`RandomResizedCrop(256)`
//! then `Resize(224)`). [`RandomCropOp`] and [`ResizedCropOp`] also serve the plan's geometry
//! (a `RandomCrop` or random resized crop standing first, or after `Resize`).
//!
//! After `ToImage` ([`Domain`]) the warps (`RandomRotation`, `RandomAffine`,
//! `RandomPerspective`) run torch's tensor kernels instead ([`crate::augment::grid_sample`]:
//! `grid_sample`'s NEAREST or BILINEAR, a float fill blended through a mask channel, BICUBIC
//! refused as torchvision refuses it); the other ops compute the same pixels on a tensor.
//! `ElasticTransform` runs torch's tensor kernel (its drawn displacement field through the
//! same sampler) on either side: torchvision runs it on a PIL image through `pil_to_tensor`.
//!
//! Every size check that the stage's (known) input size allows is made at plan time
//! ([`GeometricOp::output_size`]), so a planned op only fails on a sample for reasons the
//! sample causes.
//!
//! An op that cannot work in place writes [`StageScratch::spare`] and swaps it with the staging
//! image. Must not allocate per sample once warm, nor let the stage's output size depend on a
//! draw: `RandomRotation(expand=True)`'s does, so the plan requires an op after it that fixes the
//! size ([`GeometricOp::output_size_per_sample`]).

use super::{check_p, in_op, tensor_fill, tensor_interpolation, Domain, StageScratch};
use crate::augment::augmix::TensorWarp;
use crate::augment::elastic::{Elastic, ELASTIC_BICUBIC};
use crate::augment::geometry::perspective_coeffs;
use crate::augment::geometry::{
    perspective, vflip, Interpolation, Padder, Padding, PaddingMode, RandomCropSpec,
};
use crate::augment::policy::Api;
use crate::augment::policy::{
    self, draw_p, RandomAffine, RandomCropPlan, RandomPerspective, RandomRotation,
};
use crate::crop::{
    center_crop, crop_or_pad, random_crop_or_pad_offsets, CenterCrop, FilterChoice,
    KeepRatioResize, RandomResizedCrop,
};
use crate::decode::ImageInfo;
use crate::error::{Error, Result};
use crate::image::{CropRect, RgbImage, RgbView};
use crate::resize::{Filter, Resizer};
use crate::rng::SampleRng;
use crate::spec::{
    no_antialias, Fill, KernelSize, NumberOrRange, Op, OpSpec, PadMode, PaddingArg, Shear, Size,
    TimmInterpolation, WholeResize,
};

/// A geometric op, parameters checked.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::spec) enum GeometricOp {
    VFlip {
        p: f64,
    },
    Rotation {
        angle: RandomRotation,
        center: Option<[f64; 2]>,
        interpolation: Interpolation,
        fill: [u8; 3],
        /// Pillow's `expand=True`: the output holds the whole rotated image, its size
        /// following each angle (a later op of the stage fixes the sample's).
        expand: bool,
    },
    Affine {
        params: RandomAffine,
        center: Option<[f64; 2]>,
        interpolation: Interpolation,
        fill: [u8; 3],
    },
    Perspective {
        params: RandomPerspective,
        interpolation: Interpolation,
        fill: [u8; 3],
    },
    /// `RandomRotation` on a uint8 tensor.
    TensorRotation {
        angle: RandomRotation,
        center: Option<[f64; 2]>,
        warp: TensorWarp,
    },
    /// `RandomAffine` on a uint8 tensor.
    TensorAffine {
        params: RandomAffine,
        center: Option<[f64; 2]>,
        warp: TensorWarp,
    },
    /// `RandomPerspective` on a uint8 tensor.
    TensorPerspective {
        params: RandomPerspective,
        warp: TensorWarp,
    },
    /// `ElasticTransform`: torch's tensor kernel on either side of `ToImage` (torchvision
    /// runs it on a PIL image through `pil_to_tensor`).
    Elastic {
        params: Elastic,
        warp: TensorWarp,
    },
    Blur {
        sigma: policy::GaussianBlur,
        /// `[x, y]`.
        kernel_size: [u32; 2],
    },
    Pad {
        padding: Padding,
        mode: PaddingMode,
        fill: [u8; 3],
    },
    RandomCrop(RandomCropOp),
    /// `(height, width)`.
    CenterCrop((u32, u32)),
    /// `Resize(size, max_size)` of the staging image.
    Resize(WholeResize),
    /// `RandomResizedCrop` (or timm's `RandomResizedCropAndInterpolation`) of the staging
    /// image: the crop drawn on its size, resized.
    RandomResizedCrop(ResizedCropOp),
}

/// `RandomResizedCrop` or timm's `RandomResizedCropAndInterpolation`, checked: torchvision's
/// crop draw (timm's `get_params` is the same algorithm) and the filter(s) it resizes with,
/// one or timm's choice drawn right after the crop. Serves the plan's geometry (standing
/// first, or after `Resize`) and the stage alike.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(in crate::spec) struct ResizedCropOp {
    rrc: RandomResizedCrop,
    filters: FilterChoice,
    name: &'static str,
    /// After `ToImage`: the API whose tensor resize (torch's arithmetic) runs; `None`: Pillow's.
    pub(in crate::spec) tensor: Option<Api>,
}

impl ResizedCropOp {
    /// `Ok(None)`: `op` is neither. Errors name the argument and the op.
    pub(in crate::spec) fn plan(op: &OpSpec) -> Result<Option<Self>> {
        let (name, size, scale, ratio, filters) = match op {
            OpSpec::RandomResizedCrop {
                size,
                scale,
                ratio,
                interpolation,
                antialias,
            } => {
                let name = "RandomResizedCrop";
                if !*antialias {
                    return Err(in_op(name, no_antialias()));
                }
                let filters = FilterChoice::one(interpolation.filter());
                (name, size, scale, ratio, filters)
            }
            OpSpec::RandomResizedCropAndInterpolation {
                size,
                scale,
                ratio,
                interpolation,
            } => {
                let name = "RandomResizedCropAndInterpolation";
                let filters = resize_filters(interpolation).map_err(|e| in_op(name, e))?;
                (name, size, scale, ratio, filters)
            }
            _ => return Ok(None),
        };
        let (h, w) = size.square_or_pair();
        if h == 0 || w == 0 {
            return Err(in_op(
                name,
                Error::invalid("size", format!("size {h}x{w} must be positive")),
            ));
        }
        let rrc = RandomResizedCrop::new((h, w), (scale[0], scale[1]), (ratio[0], ratio[1]))
            .map_err(|e| in_op(name, e))?;
        Ok(Some(ResizedCropOp {
            rrc,
            filters,
            name,
            tensor: None,
        }))
    }

    /// The output `(height, width)`.
    pub(in crate::spec) fn size(&self) -> (u32, u32) {
        self.rrc.size()
    }

    /// The filter a resize context starts with: the only one, or the first to choose from
    /// (a choice sets each sample's before it resizes).
    pub(in crate::spec) fn first_filter(&self) -> Filter {
        self.filters.filters()[0]
    }

    /// The sample's draws, in timm's order: the crop of a `width` x `height` image
    /// (torchvision's `get_params`), then the filter when there is a choice.
    pub(in crate::spec) fn draw(
        &self,
        width: u32,
        height: u32,
        rng: &mut SampleRng,
    ) -> (CropRect, Filter) {
        let crop = self.rrc.get_params(width, height, rng);
        (crop, self.filters.draw(rng))
    }
}

/// timm's `ResizeKeepRatio`, checked (errors name the argument and the op); `Ok(None)`: `op`
/// is not one. It is the plan's geometry only (its size depends on the draws), never a stage
/// op.
pub(in crate::spec) fn plan_keep_ratio(op: &OpSpec) -> Result<Option<KeepRatioResize>> {
    let OpSpec::ResizeKeepRatio {
        size,
        longest,
        interpolation,
        random_scale_prob,
        random_scale_range,
        random_scale_area,
        random_aspect_prob,
        random_aspect_range,
    } = op
    else {
        return Ok(None);
    };
    let name = "ResizeKeepRatio";
    let filters = resize_filters(interpolation).map_err(|e| in_op(name, e))?;
    KeepRatioResize::new(
        size.square_or_pair(),
        *longest,
        filters,
        *random_scale_prob,
        (random_scale_range[0], random_scale_range[1]),
        *random_scale_area,
        *random_aspect_prob,
        (random_aspect_range[0], random_aspect_range[1]),
    )
    .map(Some)
    .map_err(|e| in_op(name, e))
}

/// timm's `interpolation` of `RandomResizedCropAndInterpolation`, by name: one filter, a list,
/// or `"random"` (timm's `_RANDOM_INTERPOLATION`, BILINEAR then BICUBIC).
fn resize_filters(interpolation: &TimmInterpolation) -> Result<FilterChoice> {
    let filter = |name: &str| {
        Filter::ALL
            .into_iter()
            .find(|f| f.name() == name)
            .ok_or_else(|| {
                Error::invalid(
                    "interpolation",
                    format!(
                        "{name:?} is not a resize filter (nearest, bilinear, bicubic, box, \
                         hamming, lanczos; or \"random\" alone)"
                    ),
                )
            })
    };
    match interpolation {
        TimmInterpolation::One(word) if word == "random" => {
            FilterChoice::new(&[Filter::Bilinear, Filter::Bicubic])
        }
        TimmInterpolation::One(name) => filter(name).map(FilterChoice::one),
        TimmInterpolation::Choice(names) => {
            let filters = names
                .iter()
                .map(|name| filter(name))
                .collect::<Result<Vec<_>>>()?;
            FilterChoice::new(&filters)
        }
    }
}

/// `RandomCrop(size, padding, pad_if_needed, fill, padding_mode)`, or timm's
/// `CenterCropOrPad`/`RandomCropOrPad(size, fill, padding_mode)`, checked: its draw
/// (torchvision's `get_params` after the padding; timm's offsets) and its pixels (v1's two
/// paddings, then the window; timm's one padding, then the window). The output size is `size`
/// whatever the input's, which is what lets it follow a `ResizeKeepRatio`.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::spec) struct RandomCropOp {
    kind: CropKind,
    spec: RandomCropSpec,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum CropKind {
    /// torchvision's `RandomCrop`: `spec` says its padding.
    Torch(policy::RandomCrop),
    /// timm's `CenterCropOrPad` (`random: false`) or `RandomCropOrPad`: each sample's padding
    /// comes with its plan (`spec`'s is none).
    OrPad { random: bool },
}

impl RandomCropOp {
    /// `Ok(None)`: `op` is none of the three.
    pub(in crate::spec) fn plan(op: &OpSpec) -> Result<Option<Self>> {
        let (name, random, size, fill, padding_mode) = match op {
            OpSpec::RandomCrop {
                size,
                padding,
                pad_if_needed,
                fill,
                padding_mode,
            } => {
                let planned = (|| {
                    let (height, width) = size.square_or_pair();
                    let padding = padding.as_ref().map(parse_padding).transpose()?;
                    let p = padding.unwrap_or_default();
                    let draw = policy::RandomCrop::new(
                        (height, width),
                        [p.left, p.top, p.right, p.bottom],
                        *pad_if_needed,
                    )?;
                    let spec = RandomCropSpec {
                        height,
                        width,
                        padding,
                        pad_if_needed: *pad_if_needed,
                        fill: fill.rgb()?,
                        mode: padding_mode_of(*padding_mode),
                    };
                    Ok(RandomCropOp {
                        kind: CropKind::Torch(draw),
                        spec,
                    })
                })()
                .map_err(|e| in_op("RandomCrop", e))?;
                return Ok(Some(planned));
            }
            OpSpec::CenterCropOrPad {
                size,
                fill,
                padding_mode,
            } => ("CenterCropOrPad", false, size, fill, padding_mode),
            OpSpec::RandomCropOrPad {
                size,
                fill,
                padding_mode,
            } => ("RandomCropOrPad", true, size, fill, padding_mode),
            _ => return Ok(None),
        };
        let planned = (|| {
            let (height, width) = size.square_or_pair();
            if height == 0 || width == 0 {
                return Err(Error::invalid(
                    "size",
                    format!("size {height}x{width} must be positive"),
                ));
            }
            Ok(RandomCropOp {
                kind: CropKind::OrPad { random },
                spec: RandomCropSpec {
                    height,
                    width,
                    padding: None,
                    pad_if_needed: false,
                    fill: fill.rgb()?,
                    mode: padding_mode_of(*padding_mode),
                },
            })
        })()
        .map_err(|e| in_op(name, e))?;
        Ok(Some(planned))
    }

    /// The op's name, for errors.
    pub(in crate::spec) fn name(&self) -> &'static str {
        match self.kind {
            CropKind::Torch(_) => "RandomCrop",
            CropKind::OrPad { random: false } => "CenterCropOrPad",
            CropKind::OrPad { random: true } => "RandomCropOrPad",
        }
    }

    /// The crop's `(height, width)`: the output size, whatever the input's.
    pub(in crate::spec) fn size(&self) -> (u32, u32) {
        (self.spec.height, self.spec.width)
    }

    /// The span its padded window runs in.
    pub(in crate::spec) fn span(&self) -> Op {
        match self.kind {
            CropKind::Torch(_) => Op::RandomCrop,
            CropKind::OrPad { random: false } => Op::CenterCropOrPad,
            CropKind::OrPad { random: true } => Op::RandomCropOrPad,
        }
    }

    /// The `(height, width)` of the output for an input of `size`, or the error every sample
    /// of that size would raise (a crop larger than the padded image).
    fn output_size(&self, (h, w): (u32, u32)) -> Result<(u32, u32)> {
        if let CropKind::OrPad { .. } = self.kind {
            return Ok(self.size());
        }
        let (pw, ph) = self
            .spec
            .padded_size(w, h)
            .map_err(|e| in_op("RandomCrop", e))?;
        if ph < self.spec.height || pw < self.spec.width {
            return Err(too_small(self.size(), (ph, pw)));
        }
        Ok(self.size())
    }

    /// The draw for a `width` x `height` input: torchvision's (the padding, then the window's
    /// position, see [`policy::RandomCrop::draw`]; errors, naming both sizes, when the crop is
    /// larger than the padded image), or timm's (`CenterCropOrPad` draws nothing,
    /// `RandomCropOrPad` its two offsets, see [`random_crop_or_pad_offsets`]).
    pub(in crate::spec) fn draw(
        &self,
        width: u32,
        height: u32,
        rng: &mut SampleRng,
    ) -> Result<RandomCropPlan> {
        let (th, tw) = self.size();
        let draw = match self.kind {
            CropKind::Torch(draw) => draw,
            CropKind::OrPad { random } => {
                let crop = if random {
                    let (top, left) = random_crop_or_pad_offsets(width, height, th, tw, rng);
                    crop_or_pad(width, height, th, tw, top, left)
                } else {
                    center_crop(width, height, th, tw)
                }
                .map_err(|e| in_op(self.name(), e))?;
                return Ok(RandomCropPlan {
                    pad: crop.padding,
                    rect: crop.rect,
                });
            }
        };
        let padded = self
            .spec
            .padded_size(width, height)
            .map_err(|e| in_op("RandomCrop", e))?;
        if padded.1 < self.spec.height || padded.0 < self.spec.width {
            return Err(too_small(self.size(), (padded.1, padded.0)));
        }
        draw.draw(width, height, rng)
            .map_err(|e| in_op("RandomCrop", e))
    }

    /// What a sample's report calls its crop: the window when it is a plain crop of the
    /// decoded image, else (padded, or of the resized image) the whole source, as for the
    /// geometries that do not crop the source first.
    pub(in crate::spec) fn source_rect(
        plan: &RandomCropPlan,
        resized: bool,
        source: ImageInfo,
    ) -> CropRect {
        if Self::is_plain_crop(plan) && !resized {
            plan.rect
        } else {
            CropRect::full(source.width, source.height)
        }
    }

    /// Whether `plan` pads nothing, so its window is a plain crop of the input.
    pub(in crate::spec) fn is_plain_crop(plan: &RandomCropPlan) -> bool {
        plan.pad == [0; 4]
    }

    /// The pixels of `plan` (drawn by [`RandomCropOp::draw`] for `src`'s size) into `out`.
    pub(in crate::spec) fn apply(
        &self,
        src: RgbView<'_>,
        plan: &RandomCropPlan,
        padder: &mut Padder,
        out: &mut RgbImage,
    ) -> Result<()> {
        let spec = match self.kind {
            CropKind::Torch(_) => self.spec,
            CropKind::OrPad { .. } => {
                let [left, top, right, bottom] = plan.pad;
                RandomCropSpec {
                    padding: Some(Padding::ltrb(left, top, right, bottom)),
                    ..self.spec
                }
            }
        };
        padder
            .random_crop(src, &spec, plan.rect.top, plan.rect.left, out)
            .map_err(|e| in_op(self.name(), e))
    }
}

/// The pixels of a `CenterCrop` that pads (`crop.pads()`): `src` padded with zeros, then the
/// window, into `out` (the padder's constant mode is the padding torchvision's `center_crop`
/// calls with `fill=0`).
pub(in crate::spec) fn pad_center_crop(
    src: RgbView<'_>,
    crop: &CenterCrop,
    padder: &mut Padder,
    out: &mut RgbImage,
) -> Result<()> {
    let [left, top, right, bottom] = crop.padding;
    let spec = RandomCropSpec {
        height: crop.rect.height,
        width: crop.rect.width,
        padding: Some(Padding::ltrb(left, top, right, bottom)),
        pad_if_needed: false,
        fill: [0; 3],
        mode: PaddingMode::Constant,
    };
    padder
        .random_crop(src, &spec, crop.rect.top, crop.rect.left, out)
        .map_err(|e| in_op("CenterCrop", e))
}

/// The resizer of a worker's stage: the kernels the fused pass uses (see
/// [`crate::fused::default_simd`]).
fn stage_resizer() -> Resizer {
    let mut resizer = Resizer::new();
    resizer.set_simd_limit(crate::fused::default_simd());
    resizer
}

/// `RandomRotation(expand=True)` with no op after it that fixes the size, or inside a random
/// composition (whose output size must not depend on a draw).
pub(super) fn expand_needs_a_fixed_size() -> Error {
    Error::invalid(
        "expand",
        "RandomRotation(expand=True): its size follows each angle and image, so a crop or a \
         resize to a fixed size (CenterCrop, RandomCrop, Resize((h, w)), RandomResizedCrop, \
         CenterCropOrPad, RandomCropOrPad) must follow it among the stage ops (not inside \
         RandomApply, RandomChoice or RandomOrder)",
    )
}

/// torchvision's `ValueError` for a crop larger than the (padded) image, sizes as `(h, w)`.
fn too_small((th, tw): (u32, u32), (h, w): (u32, u32)) -> Error {
    Error::invalid(
        "size",
        format!(
            "RandomCrop: the crop of {th}x{tw} (h x w) is larger than the {h}x{w} (padded) \
             image; pad it (padding, pad_if_needed=True) or crop smaller"
        ),
    )
}

/// torchvision's `padding` forms: an int, or 1, 2 or 4 numbers; negative values refused.
fn parse_padding(arg: &PaddingArg) -> Result<Padding> {
    let side = |v: i64| {
        u32::try_from(v).map_err(|_| {
            Error::invalid(
                "padding",
                format!("{v} is not a non-negative number of pixels below 2^32"),
            )
        })
    };
    match arg {
        PaddingArg::Int(p) => Ok(Padding::all(side(*p)?)),
        PaddingArg::Seq(v) => match v.as_slice() {
            [p] => Ok(Padding::all(side(*p)?)),
            [lr, tb] => Ok(Padding::lr_tb(side(*lr)?, side(*tb)?)),
            [l, t, r, b] => Ok(Padding::ltrb(side(*l)?, side(*t)?, side(*r)?, side(*b)?)),
            other => Err(Error::invalid(
                "padding",
                format!(
                    "{} values; torchvision takes 1, 2 or 4 (left, top, right, bottom)",
                    other.len()
                ),
            )),
        },
    }
}

fn padding_mode_of(mode: PadMode) -> PaddingMode {
    match mode {
        PadMode::Constant => PaddingMode::Constant,
        PadMode::Edge => PaddingMode::Edge,
        PadMode::Reflect => PaddingMode::Reflect,
        PadMode::Symmetric => PaddingMode::Symmetric,
    }
}

/// torchvision's `_setup_angle`: a non-negative number `d` is `(-d, d)`.
fn angle_range(degrees: NumberOrRange) -> Result<RandomRotation> {
    match degrees {
        NumberOrRange::Number(d) => RandomRotation::symmetric(d),
        NumberOrRange::Range([lo, hi]) => RandomRotation::new((lo, hi)),
    }
}

fn degrees_pair(degrees: NumberOrRange) -> Result<(f64, f64)> {
    match degrees {
        NumberOrRange::Number(d) if d.is_nan() || d < 0.0 => Err(Error::invalid(
            "degrees",
            format!("{d}: a single number must be non negative"),
        )),
        NumberOrRange::Number(d) => Ok((-d, d)),
        NumberOrRange::Range([lo, hi]) => Ok((lo, hi)),
    }
}

fn check_center(center: Option<[f64; 2]>) -> Result<Option<[f64; 2]>> {
    if let Some(c) = center {
        if c.iter().any(|v| !v.is_finite()) {
            return Err(Error::invalid(
                "center",
                format!("{c:?} is not a finite point"),
            ));
        }
    }
    Ok(center)
}

fn kernel_sizes(kernel_size: KernelSize) -> Result<[u32; 2]> {
    let (x, y) = match kernel_size {
        KernelSize::Int(k) => (k, k),
        KernelSize::Pair([x, y]) => (x, y),
    };
    let odd = |k: i64| {
        u32::try_from(k).ok().filter(|k| k % 2 == 1).ok_or_else(|| {
            Error::invalid(
                "kernel_size",
                format!("{k}: kernel sizes must be odd and positive"),
            )
        })
    };
    Ok([odd(x)?, odd(y)?])
}

/// `ElasticTransform`'s `interpolation`: torchvision hands BICUBIC to `grid_sample`'s bicubic
/// mode (its elastic kernel, unlike rotate/affine/perspective, does not refuse it), which is
/// not implemented here.
fn elastic_interpolation(interpolation: Interpolation) -> Result<Interpolation> {
    if interpolation == Interpolation::Bicubic {
        return Err(Error::invalid("interpolation", ELASTIC_BICUBIC));
    }
    Ok(interpolation)
}

/// A single warp's `fill` and `interpolation` on a tensor: `fill` as torchvision's tensor
/// path takes it (v1 makes None 0, and so does the spec's default; always a mask channel).
fn single_tensor_warp(
    op: &'static str,
    interpolation: Interpolation,
    fill: &Fill,
    api: policy::Api,
    one_channel: bool,
) -> Result<TensorWarp> {
    Ok(TensorWarp {
        interpolation: tensor_interpolation(op, interpolation)?,
        fill: tensor_fill(op, Some(fill))?,
        api,
        one_channel,
    })
}

impl GeometricOp {
    /// `Ok(None)`: `op` is not a geometric stage op. In the tensor domain the warps plan
    /// torch's kernels.
    pub(super) fn plan(op: &OpSpec, domain: Domain) -> Result<Option<Self>> {
        let planned = Self::plan_pil(op)?;
        let Some(api) = domain.tensor else {
            return Ok(planned);
        };
        let tensor_warp = |name, interpolation, fill: &Fill| {
            single_tensor_warp(name, interpolation, fill, api, domain.one_channel)
        };
        Ok(match (planned, op) {
            (Some(GeometricOp::Rotation { expand: true, .. }), _) => {
                return Err(in_op(
                    "RandomRotation",
                    Error::invalid(
                        "expand",
                        "true on an image tensor (after ToImage) is not supported: torch's \
                         kernel sizes it otherwise; rotate the PIL image (before ToImage)",
                    ),
                ))
            }
            (
                Some(GeometricOp::Rotation { angle, center, .. }),
                OpSpec::RandomRotation {
                    interpolation,
                    fill,
                    ..
                },
            ) => Some(GeometricOp::TensorRotation {
                angle,
                center,
                warp: tensor_warp("RandomRotation", *interpolation, fill)?,
            }),
            (
                Some(GeometricOp::Affine { params, center, .. }),
                OpSpec::RandomAffine {
                    interpolation,
                    fill,
                    ..
                },
            ) => Some(GeometricOp::TensorAffine {
                params,
                center,
                warp: tensor_warp("RandomAffine", *interpolation, fill)?,
            }),
            (
                Some(GeometricOp::Perspective { params, .. }),
                OpSpec::RandomPerspective {
                    interpolation,
                    fill,
                    ..
                },
            ) => Some(GeometricOp::TensorPerspective {
                params,
                warp: tensor_warp("RandomPerspective", *interpolation, fill)?,
            }),
            (Some(GeometricOp::Resize(mut resize)), _) => {
                resize.tensor = Some(api);
                Some(GeometricOp::Resize(resize))
            }
            (Some(GeometricOp::RandomResizedCrop(mut crop)), _) => {
                crop.tensor = Some(api);
                Some(GeometricOp::RandomResizedCrop(crop))
            }
            (other, _) => other,
        })
    }

    /// [`GeometricOp::plan`] on a PIL image.
    fn plan_pil(op: &OpSpec) -> Result<Option<Self>> {
        Ok(Some(match op {
            OpSpec::RandomVerticalFlip { p } => GeometricOp::VFlip {
                p: check_p("RandomVerticalFlip", *p)?,
            },
            OpSpec::RandomRotation {
                degrees,
                interpolation,
                expand,
                center,
                fill,
            } => (|| {
                Ok(GeometricOp::Rotation {
                    angle: angle_range(*degrees)?,
                    center: check_center(*center)?,
                    interpolation: *interpolation,
                    fill: fill.rgb()?,
                    expand: *expand,
                })
            })()
            .map_err(|e| in_op("RandomRotation", e))?,
            OpSpec::RandomAffine {
                degrees,
                translate,
                scale,
                shear,
                interpolation,
                fill,
                center,
            } => (|| {
                let shear = match shear {
                    None => None,
                    Some(Shear::Number(s)) if s.is_nan() || *s < 0.0 => {
                        return Err(Error::invalid(
                            "shear",
                            format!("{s}: a single number must be non negative"),
                        ))
                    }
                    Some(Shear::Number(s)) => Some(vec![-s, *s]),
                    Some(Shear::Bounds(b)) => Some(b.clone()),
                };
                let params = RandomAffine::new(
                    degrees_pair(*degrees)?,
                    translate.map(|[a, b]| (a, b)),
                    scale.map(|[a, b]| (a, b)),
                    shear.as_deref(),
                )?;
                Ok(GeometricOp::Affine {
                    params,
                    center: check_center(*center)?,
                    interpolation: *interpolation,
                    fill: fill.rgb()?,
                })
            })()
            .map_err(|e| in_op("RandomAffine", e))?,
            OpSpec::RandomPerspective {
                distortion_scale,
                p,
                interpolation,
                fill,
            } => (|| {
                Ok(GeometricOp::Perspective {
                    params: RandomPerspective::new(*distortion_scale, *p)?,
                    interpolation: *interpolation,
                    fill: fill.rgb()?,
                })
            })()
            .map_err(|e| in_op("RandomPerspective", e))?,
            OpSpec::ElasticTransform {
                alpha,
                sigma,
                interpolation,
                fill,
                api,
            } => (|| {
                Ok(GeometricOp::Elastic {
                    params: Elastic::new(*alpha, *sigma, *api)?,
                    warp: TensorWarp {
                        interpolation: elastic_interpolation(*interpolation)?,
                        fill: tensor_fill("ElasticTransform", fill.as_ref())?,
                        api: *api,
                        one_channel: false,
                    },
                })
            })()
            .map_err(|e| in_op("ElasticTransform", e))?,
            OpSpec::GaussianBlur { kernel_size, sigma } => (|| {
                let sigma = match *sigma {
                    NumberOrRange::Number(s) => policy::GaussianBlur::new((s, s)),
                    NumberOrRange::Range([lo, hi]) => policy::GaussianBlur::new((lo, hi)),
                }?;
                Ok(GeometricOp::Blur {
                    sigma,
                    kernel_size: kernel_sizes(*kernel_size)?,
                })
            })()
            .map_err(|e| in_op("GaussianBlur", e))?,
            OpSpec::Pad {
                padding,
                fill,
                padding_mode,
            } => (|| {
                Ok(GeometricOp::Pad {
                    padding: parse_padding(padding)?,
                    mode: padding_mode_of(*padding_mode),
                    fill: fill.rgb()?,
                })
            })()
            .map_err(|e| in_op("Pad", e))?,
            OpSpec::Resize {
                size,
                max_size,
                interpolation,
                antialias,
            } => WholeResize::plan(*size, *max_size, *interpolation, *antialias)
                .map(GeometricOp::Resize)
                .map_err(|e| in_op("Resize", e))?,
            OpSpec::RandomResizedCrop { .. } | OpSpec::RandomResizedCropAndInterpolation { .. } => {
                match ResizedCropOp::plan(op)? {
                    Some(crop) => GeometricOp::RandomResizedCrop(crop),
                    None => return Ok(None),
                }
            }
            OpSpec::CenterCrop { size } => {
                let (h, w) = size.square_or_pair();
                if h == 0 || w == 0 {
                    return Err(Error::invalid(
                        "size",
                        format!("CenterCrop: size {h}x{w} must be positive"),
                    ));
                }
                GeometricOp::CenterCrop((h, w))
            }
            other => match RandomCropOp::plan(other)? {
                Some(crop) => GeometricOp::RandomCrop(crop),
                None => return Ok(None),
            },
        }))
    }

    /// Whether its output's size follows each sample's draw (`RandomRotation(expand=True)`).
    pub(super) fn sizes_per_sample(&self) -> bool {
        matches!(self, GeometricOp::Rotation { expand: true, .. })
    }

    /// The `(height, width)` this op leaves for an input whose size is known only per sample:
    /// `Some` for the ops that fix it (a crop, a resize to a pair, a random resized crop),
    /// `None` for those that keep it (the warps and flips); an error for the ops whose checks
    /// need the input's size when planned or that grow it (blur, elastic, padding,
    /// `Resize(int)`).
    pub(super) fn output_size_per_sample(&self) -> Result<Option<(u32, u32)>> {
        match self {
            GeometricOp::CenterCrop(size) => Ok(Some(*size)),
            GeometricOp::RandomCrop(crop) => Ok(Some(crop.size())),
            GeometricOp::RandomResizedCrop(crop) => Ok(Some(crop.size())),
            GeometricOp::Resize(resize) => match resize.size {
                Size::Pair([h, w]) => Ok(Some((h, w))),
                Size::Int(_) => Err(Error::invalid(
                    "ops",
                    "Resize(int) after RandomRotation(expand=True) makes a size that follows each \
                     angle: give Resize (height, width), or crop first",
                )),
            },
            GeometricOp::VFlip { .. }
            | GeometricOp::Rotation { .. }
            | GeometricOp::Affine { .. }
            | GeometricOp::Perspective { .. }
            | GeometricOp::TensorRotation { .. }
            | GeometricOp::TensorAffine { .. }
            | GeometricOp::TensorPerspective { .. } => Ok(None),
            // Blur and Elastic check the size; Pad and Resize(int) grow it past the bound the
            // plan checks against the pixel limit.
            GeometricOp::Elastic { .. } | GeometricOp::Blur { .. } | GeometricOp::Pad { .. } => {
                Err(Error::invalid(
                    "ops",
                    format!(
                    "{} after RandomRotation(expand=True) needs the image's size when planned: \
                     put it after the crop or resize that fixes the size",
                    self.name()
                ),
                ))
            }
        }
    }

    /// The `(height, width)` this op leaves for an input of `size`; an error where every
    /// sample of that size would fail (a crop or blur kernel larger than the image).
    pub(super) fn output_size(&self, size: (u32, u32)) -> Result<(u32, u32)> {
        let (h, w) = size;
        match self {
            GeometricOp::Rotation { expand: true, .. } => Err(expand_needs_a_fixed_size()),
            GeometricOp::VFlip { .. }
            | GeometricOp::Rotation { .. }
            | GeometricOp::Affine { .. }
            | GeometricOp::Perspective { .. }
            | GeometricOp::TensorRotation { .. }
            | GeometricOp::TensorAffine { .. }
            | GeometricOp::TensorPerspective { .. } => Ok(size),
            GeometricOp::Elastic { params, .. } => params
                .check_size(w, h)
                .map(|()| size)
                .map_err(|e| in_op("ElasticTransform", e)),
            GeometricOp::Blur { kernel_size, .. } => {
                if kernel_size[0] / 2 >= w || kernel_size[1] / 2 >= h {
                    return Err(Error::invalid(
                        "kernel_size",
                        format!(
                            "GaussianBlur: {kernel_size:?} (x, y) pads more than the {h}x{w} \
                             (h x w) image it would blur can reflect"
                        ),
                    ));
                }
                Ok(size)
            }
            GeometricOp::Pad { padding, .. } => padding
                .padded_size(w, h)
                .map(|(pw, ph)| (ph, pw))
                .ok_or_else(|| {
                    Error::invalid("padding", format!("Pad: {padding:?} overflows the size"))
                }),
            GeometricOp::RandomCrop(crop) => crop.output_size(size),
            GeometricOp::CenterCrop(size) => Ok(*size),
            GeometricOp::Resize(resize) => resize
                .size
                .resized(w, h, resize.max_size)
                .map_err(|e| in_op("Resize", e)),
            GeometricOp::RandomResizedCrop(crop) => Ok(crop.size()),
        }
    }

    /// torchvision's name of the op, for messages.
    pub(super) fn name(&self) -> &'static str {
        match self {
            GeometricOp::VFlip { .. } => "RandomVerticalFlip",
            GeometricOp::Rotation { .. } | GeometricOp::TensorRotation { .. } => "RandomRotation",
            GeometricOp::Affine { .. } | GeometricOp::TensorAffine { .. } => "RandomAffine",
            GeometricOp::Perspective { .. } | GeometricOp::TensorPerspective { .. } => {
                "RandomPerspective"
            }
            GeometricOp::Elastic { .. } => "ElasticTransform",
            GeometricOp::Blur { .. } => "GaussianBlur",
            GeometricOp::Pad { .. } => "Pad",
            GeometricOp::RandomCrop(crop) => crop.name(),
            GeometricOp::CenterCrop(_) => "CenterCrop",
            GeometricOp::Resize(_) => "Resize",
            GeometricOp::RandomResizedCrop(crop) => crop.name,
        }
    }

    /// The span this op runs in.
    pub(super) fn span(&self) -> Op {
        match self {
            GeometricOp::VFlip { .. } => Op::RandomVerticalFlip,
            GeometricOp::Rotation { .. } | GeometricOp::TensorRotation { .. } => Op::RandomRotation,
            GeometricOp::Affine { .. } | GeometricOp::TensorAffine { .. } => Op::RandomAffine,
            GeometricOp::Perspective { .. } | GeometricOp::TensorPerspective { .. } => {
                Op::RandomPerspective
            }
            GeometricOp::Elastic { .. } => Op::ElasticTransform,
            GeometricOp::Blur { .. } => Op::GaussianBlur,
            GeometricOp::Pad { .. } => Op::Pad,
            GeometricOp::RandomCrop(crop) => crop.span(),
            GeometricOp::CenterCrop(_) => Op::Crop,
            GeometricOp::Resize(_) | GeometricOp::RandomResizedCrop(_) => Op::Resize,
        }
    }

    /// Draws this op's parameters (torchvision's draws, in its order and number: one coin for
    /// `RandomVerticalFlip` whatever `p`, the angle, `RandomAffine`'s angle, translation,
    /// scale and shear as configured, `RandomPerspective`'s coin then (when it applies) its
    /// eight corner coordinates, the blur's sigma, the crop's row then column) and
    /// applies it to `img`.
    pub(super) fn run(
        &self,
        img: &mut RgbImage,
        scratch: &mut StageScratch,
        rng: &mut SampleRng,
    ) -> Result<()> {
        match self {
            GeometricOp::VFlip { p } => {
                if draw_p(rng, *p) {
                    vflip(img);
                }
            }
            GeometricOp::Rotation {
                angle,
                center,
                interpolation,
                fill,
                expand,
            } => {
                let angle = angle.draw(rng);
                scratch.warp.rotate(
                    img.view(),
                    angle,
                    *center,
                    *expand,
                    *interpolation,
                    *fill,
                    &mut scratch.spare,
                )?;
                std::mem::swap(img, &mut scratch.spare);
            }
            GeometricOp::Affine {
                params,
                center,
                interpolation,
                fill,
            } => {
                let plan = params.draw(img.width(), img.height(), rng);
                let (tx, ty) = plan.translate;
                scratch.warp.affine(
                    img.view(),
                    plan.angle,
                    [f64::from(tx), f64::from(ty)],
                    plan.scale,
                    [plan.shear.0, plan.shear.1],
                    *center,
                    *interpolation,
                    *fill,
                    &mut scratch.spare,
                )?;
                std::mem::swap(img, &mut scratch.spare);
            }
            GeometricOp::Perspective {
                params,
                interpolation,
                fill,
            } => {
                if let Some(plan) = params.draw(img.width(), img.height(), rng) {
                    let (start, end) = plan.corners();
                    perspective(
                        img.view(),
                        &start,
                        &end,
                        *interpolation,
                        *fill,
                        &mut scratch.spare,
                    )?;
                    std::mem::swap(img, &mut scratch.spare);
                }
            }
            GeometricOp::TensorRotation {
                angle,
                center,
                warp,
            } => {
                let angle = angle.draw(rng);
                scratch.grid.rotate(
                    img,
                    angle,
                    *center,
                    warp.interpolation,
                    warp.fill,
                    warp.api,
                    &mut scratch.spare,
                )?;
                std::mem::swap(img, &mut scratch.spare);
            }
            GeometricOp::TensorAffine {
                params,
                center,
                warp,
            } => {
                let plan = params.draw(img.width(), img.height(), rng);
                let (tx, ty) = plan.translate;
                scratch.grid.affine(
                    img,
                    plan.angle,
                    [f64::from(tx), f64::from(ty)],
                    plan.scale,
                    [plan.shear.0, plan.shear.1],
                    *center,
                    warp.interpolation,
                    warp.fill,
                    warp.api,
                    &mut scratch.spare,
                )?;
                std::mem::swap(img, &mut scratch.spare);
            }
            GeometricOp::TensorPerspective { params, warp } => {
                if let Some(plan) = params.draw(img.width(), img.height(), rng) {
                    let (start, end) = plan.corners();
                    let coeffs = perspective_coeffs(&start, &end)?;
                    scratch.grid.perspective(
                        img,
                        &coeffs,
                        warp.interpolation,
                        warp.fill,
                        warp.api,
                        &mut scratch.spare,
                    )?;
                    std::mem::swap(img, &mut scratch.spare);
                }
            }
            GeometricOp::Elastic { params, warp } => {
                scratch
                    .elastic
                    .draw(params, img.width(), img.height(), rng)?;
                scratch.grid.elastic(
                    img,
                    &scratch.elastic,
                    warp.interpolation,
                    warp.fill,
                    warp.api,
                    &mut scratch.spare,
                )?;
                std::mem::swap(img, &mut scratch.spare);
            }
            GeometricOp::Blur { sigma, kernel_size } => {
                let sigma = sigma.draw(rng);
                scratch.blur.apply(img, *kernel_size, [sigma, sigma])?;
            }
            GeometricOp::Pad {
                padding,
                mode,
                fill,
            } => {
                scratch
                    .padder
                    .pad(img.view(), *padding, *mode, *fill, &mut scratch.spare)?;
                std::mem::swap(img, &mut scratch.spare);
            }
            GeometricOp::RandomCrop(crop) => {
                let plan = crop.draw(img.width(), img.height(), rng)?;
                crop.apply(img.view(), &plan, &mut scratch.padder, &mut scratch.spare)?;
                std::mem::swap(img, &mut scratch.spare);
            }
            GeometricOp::Resize(resize) => {
                let (rh, rw) = resize
                    .size
                    .resized(img.width(), img.height(), resize.max_size)?;
                let resizer = scratch.resizer.get_or_insert_with(stage_resizer);
                resizer.set_filter(resize.filter);
                resizer.set_tensor_api(resize.tensor);
                resizer.resize(img.view(), rh, rw, &mut scratch.spare)?;
                std::mem::swap(img, &mut scratch.spare);
            }
            GeometricOp::RandomResizedCrop(crop) => {
                let (rect, filter) = crop.draw(img.width(), img.height(), rng);
                let (oh, ow) = crop.size();
                let resizer = scratch.resizer.get_or_insert_with(stage_resizer);
                resizer.set_filter(filter);
                resizer.set_tensor_api(crop.tensor);
                resizer.resize(img.crop_view(rect)?, oh, ow, &mut scratch.spare)?;
                std::mem::swap(img, &mut scratch.spare);
            }
            GeometricOp::CenterCrop((ch, cw)) => {
                let crop = center_crop(img.width(), img.height(), *ch, *cw)?;
                if crop.pads() {
                    pad_center_crop(img.view(), &crop, &mut scratch.padder, &mut scratch.spare)?;
                } else {
                    img.crop_view(crop.rect)?.to_image(&mut scratch.spare);
                }
                std::mem::swap(img, &mut scratch.spare);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{sample_rng, TorchDraws};

    fn plan(json: serde_json::Value) -> Result<Option<ResizedCropOp>> {
        ResizedCropOp::plan(&serde_json::from_value(json).expect("parses"))
    }

    #[test]
    fn both_crops_plan_to_one_op_with_their_filters() {
        let filters = |json| plan(json).expect("valid").expect("a crop").filters;
        let random = serde_json::json!({"op": "RandomResizedCropAndInterpolation", "size": 8,
            "interpolation": "random"});
        assert_eq!(
            filters(random).filters(),
            &[Filter::Bilinear, Filter::Bicubic]
        );
        let listed = serde_json::json!({"op": "RandomResizedCropAndInterpolation", "size": 8,
            "interpolation": ["lanczos", "hamming", "lanczos"]});
        assert_eq!(
            filters(listed).filters(),
            &[Filter::Lanczos, Filter::Hamming, Filter::Lanczos]
        );
        // timm's default, and torchvision's op: one filter.
        let timm = serde_json::json!({"op": "RandomResizedCropAndInterpolation", "size": 8});
        assert_eq!(filters(timm), FilterChoice::one(Filter::Bilinear));
        let tv = serde_json::json!({"op": "RandomResizedCrop", "size": 8,
            "interpolation": "box"});
        assert_eq!(filters(tv), FilterChoice::one(Filter::Box));
        assert!(plan(serde_json::json!({"op": "CenterCrop", "size": 8}))
            .expect("not a refusal")
            .is_none());
        let no_antialias = serde_json::json!({"op": "RandomResizedCrop", "size": 8,
            "antialias": false});
        let err = plan(no_antialias).expect_err("refused");
        assert!(err.to_string().contains("RandomResizedCrop: "), "{err}");
    }

    #[test]
    fn the_filter_is_drawn_right_after_the_crop() {
        let op = plan(
            serde_json::json!({"op": "RandomResizedCropAndInterpolation",
            "size": [5, 7], "interpolation": "random"}),
        )
        .expect("valid")
        .expect("a crop");
        let mut seen = [false; 2];
        for index in 0..64 {
            let mut rng = sample_rng(3, 0, index);
            let (crop, filter) = op.draw(300, 200, &mut rng);
            let mut by_hand = sample_rng(3, 0, index);
            assert_eq!(crop, op.rrc.get_params(300, 200, &mut by_hand));
            assert_eq!(filter, op.filters.draw(&mut by_hand));
            // Nothing drawn after it.
            assert_eq!(rng.randint(1 << 30), by_hand.randint(1 << 30));
            seen[usize::from(filter == Filter::Bicubic)] = true;
        }
        assert_eq!(seen, [true, true]);
        assert_eq!(op.size(), (5, 7));
        assert_eq!(op.first_filter(), Filter::Bilinear);
    }
}
