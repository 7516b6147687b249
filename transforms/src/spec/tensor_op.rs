//! The tensor ops of a plan: torchvision's `RandomErasing` and timm's, and v2's
//! `GaussianNoise`, after the conversion, on the float32 CHW sample in the batch slot (where
//! torchvision's reference recipes and timm's `create_transform` run them: after `ToTensor`
//! and `Normalize`; the noise also before `Normalize`, where the plan then normalizes the slot
//! after it, see [`TensorOp::needs_unnormalized_slot`]). The draws are
//! [`crate::augment::policy::RandomErasing`]'s and
//! [`crate::augment::policy::TimmRandomErasing`]'s, the kernel
//! [`crate::augment::geometry::erase`]'s; both fill a rectangle the same way
//! ([`fill_rect`]: constant values, or standard normals, normalized when the op stands before
//! `Normalize`).
//!
//! Must not allocate per sample (the random values go to a buffer the context reserves for a
//! whole sample), nor draw outside the pipeline's order (a tensor op draws after every
//! stage op and the flip fused into the conversion).

use crate::augment::geometry::erase::{erase, EraseValue as Fill};
use crate::augment::policy::{
    EraseRect, EraseValue, RandomErasing, TimmEraseMode, TimmRandomErasing,
};
use crate::error::{Error, Result};
use crate::image::CropRect;
use crate::rng::TorchDraws;
use crate::spec::stage::in_op;
use crate::spec::{EraseFill, Op, OpSpec};
use crate::tensor::normalize_value;

/// Which tensor op, parameters checked.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// torchvision's `RandomErasing`.
    Torchvision(RandomErasing),
    /// timm's `RandomErasing`.
    Timm(TimmRandomErasing),
    /// v2's `GaussianNoise`.
    Noise(GaussianNoise),
}

/// v2's `GaussianNoise(mean, sigma, clip)`, parameters checked: `mean` and `sigma` as torch
/// uses them on a float32 tensor (narrowed to float32).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GaussianNoise {
    mean: f32,
    sigma: f32,
    clip: bool,
}

impl GaussianNoise {
    /// `sigma` negative is torchvision's error (`sigma shouldn't be negative`); a value that is
    /// not finite is refused too (it would make every element NaN or infinite).
    pub fn new(mean: f64, sigma: f64, clip: bool) -> Result<Self> {
        if !mean.is_finite() {
            return Err(Error::invalid(
                "mean",
                format!("GaussianNoise: {mean} is not a finite number"),
            ));
        }
        if !sigma.is_finite() {
            return Err(Error::invalid(
                "sigma",
                format!("GaussianNoise: {sigma} is not a finite number"),
            ));
        }
        if sigma < 0.0 {
            return Err(Error::invalid(
                "sigma",
                format!("GaussianNoise: sigma shouldn't be negative. Got {sigma}"),
            ));
        }
        Ok(GaussianNoise {
            mean: mean as f32,
            sigma: sigma as f32,
            clip,
        })
    }
}

/// v2's `gaussian_noise_image` on a float32 `slot`: one standard normal per element drawn into
/// `values` (left there: the normals used), then `x + (mean + z * sigma)` in float32, as torch's
/// `mean + randn_like(image) * sigma` and `image + noise` compute it (no fused multiply-add),
/// clamped to `[0, 1]` when `clip`. `values` with the capacity of `slot` does not allocate.
pub fn apply_gaussian_noise<D: TorchDraws + ?Sized>(
    noise: &GaussianNoise,
    slot: &mut [f32],
    draws: &mut D,
    values: &mut Vec<f32>,
) {
    values.clear();
    values.resize(slot.len(), 0.0);
    draws.fill_standard_normal(values);
    let GaussianNoise { mean, sigma, clip } = *noise;
    for (x, z) in slot.iter_mut().zip(values.iter()) {
        let y = *x + (mean + *z * sigma);
        *x = if clip { y.clamp(0.0, 1.0) } else { y };
    }
}

/// The noise a `GaussianNoise` spec describes, checked; `Ok(None)` for any other op.
pub fn plan_gaussian_noise(op: &OpSpec) -> Result<Option<GaussianNoise>> {
    let OpSpec::GaussianNoise { mean, sigma, clip } = op else {
        return Ok(None);
    };
    GaussianNoise::new(*mean, *sigma, *clip).map(Some)
}

/// A tensor op, parameters checked.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::spec) struct TensorOp {
    kind: Kind,
    /// The `Normalize(mean, std)` written after this op: the fused conversion normalizes
    /// before the op runs, so its fill goes through the same arithmetic to match.
    normalize_after: Option<([f32; 3], [f32; 3])>,
}

/// Whether the slot already holds the normalized tensor when a tensor op runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::spec) enum SlotState {
    /// As written: an op standing before `Normalize` sees the `ToTensor` values (op by op).
    AsWritten,
    /// Every op after the whole conversion (fused and staged runs).
    Normalized,
}

/// What a rectangle is filled with, before the normalization of an op standing before
/// `Normalize`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum RectFill {
    /// One value per channel.
    Values([f32; 3]),
    /// Standard normals, `3 * height * width` in CHW order, drawn here.
    Normals,
}

/// Fills `rect` of the `3 x height x width` `slot` with `fill`, its values mapped through
/// `normalize` when given. `values` holds the normals; its capacity is reserved for the
/// largest rectangle, so this does not allocate.
fn fill_rect<D: TorchDraws + ?Sized>(
    slot: &mut [f32],
    (height, width): (usize, usize),
    rect: EraseRect,
    fill: RectFill,
    normalize: Option<([f32; 3], [f32; 3])>,
    draws: &mut D,
    values: &mut Vec<f32>,
) -> Result<()> {
    let crop = CropRect {
        top: rect.top,
        left: rect.left,
        height: rect.height,
        width: rect.width,
    };
    match fill {
        RectFill::Values(v) => {
            let v = match normalize {
                Some((mean, std)) => [0, 1, 2].map(|c| normalize_value(v[c], mean[c], std[c])),
                None => v,
            };
            erase(slot, 3, height, width, crop, Fill::PerChannel(&v))
        }
        RectFill::Normals => {
            let plane = rect.height as usize * rect.width as usize;
            values.clear();
            values.resize(3 * plane, 0.0);
            draws.fill_standard_normal(values);
            if let Some((mean, std)) = normalize {
                for (c, channel) in values.chunks_exact_mut(plane.max(1)).enumerate() {
                    let (m, s) = (mean[c % 3], std[c % 3]);
                    for v in channel {
                        *v = normalize_value(*v, m, s);
                    }
                }
            }
            erase(slot, 3, height, width, crop, Fill::Source(values))
        }
    }
}

/// timm's erasing `erasing` on a `3 x height x width` slot holding the normalized tensor, as
/// the pipeline runs it (its tail after `Normalize`): the coin and count, then per block its
/// rectangle and fill, each block's draws complete before the next's. `on_block` sees each
/// block erased, with the values it was filled with (`[c]` for `rand`, `[c * h * w]` for
/// `pixel`, empty for `const`); the pipeline passes a no-op.
pub fn apply_timm_random_erasing<D: TorchDraws + ?Sized>(
    erasing: &TimmRandomErasing,
    slot: &mut [f32],
    size: (u32, u32),
    draws: &mut D,
    values: &mut Vec<f32>,
    on_block: &mut dyn FnMut(EraseRect, &[f32]),
) -> Result<()> {
    timm_erase(erasing, slot, size, None, draws, values, on_block)
}

fn timm_erase<D: TorchDraws + ?Sized>(
    erasing: &TimmRandomErasing,
    slot: &mut [f32],
    (height, width): (u32, u32),
    normalize: Option<([f32; 3], [f32; 3])>,
    draws: &mut D,
    values: &mut Vec<f32>,
    on_block: &mut dyn FnMut(EraseRect, &[f32]),
) -> Result<()> {
    let count = erasing.draw_count(draws);
    let dims = (height as usize, width as usize);
    for _ in 0..count {
        let Some(rect) = erasing.draw_block(width, height, count, draws) else {
            continue;
        };
        match erasing.mode() {
            TimmEraseMode::Const => {
                fill_rect(
                    slot,
                    dims,
                    rect,
                    RectFill::Values([0.0; 3]),
                    normalize,
                    draws,
                    values,
                )?;
                on_block(rect, &[]);
            }
            TimmEraseMode::Rand => {
                // timm's `torch.empty((chan, 1, 1)).normal_()`: one normal per channel.
                let mut colour = [0.0f32; 3];
                draws.fill_standard_normal(&mut colour);
                fill_rect(
                    slot,
                    dims,
                    rect,
                    RectFill::Values(colour),
                    normalize,
                    draws,
                    values,
                )?;
                on_block(rect, &colour);
            }
            TimmEraseMode::Pixel => {
                fill_rect(
                    slot,
                    dims,
                    rect,
                    RectFill::Normals,
                    normalize,
                    draws,
                    values,
                )?;
                on_block(rect, values);
            }
        }
    }
    Ok(())
}

/// The erasing a `TimmRandomErasing` spec describes, checked; `Ok(None)` for any other op.
/// Errors name the argument (`` `max_count`: TimmRandomErasing: ... ``).
pub fn plan_timm_random_erasing(op: &OpSpec) -> Result<Option<TimmRandomErasing>> {
    let OpSpec::TimmRandomErasing {
        probability,
        min_area,
        max_area,
        min_aspect,
        max_aspect,
        mode,
        min_count,
        max_count,
    } = op
    else {
        return Ok(None);
    };
    TimmRandomErasing::new(
        *probability,
        *min_area,
        *max_area,
        *min_aspect,
        *max_aspect,
        *mode,
        *min_count,
        *max_count,
    )
    .map(Some)
    .map_err(|e| in_op("TimmRandomErasing", e))
}

impl TensorOp {
    /// Plans a tensor op (as standing after `Normalize`, if any); `Ok(None)` for an op that is
    /// not one.
    pub fn plan(op: &OpSpec) -> Result<Option<Self>> {
        let kind = match op {
            OpSpec::RandomErasing {
                p,
                scale,
                ratio,
                value,
                inplace: _,
            } => Kind::Torchvision(plan_torchvision(*p, *scale, *ratio, value)?),
            OpSpec::TimmRandomErasing { .. } => match plan_timm_random_erasing(op)? {
                Some(timm) => Kind::Timm(timm),
                None => return Ok(None),
            },
            OpSpec::GaussianNoise { .. } => match plan_gaussian_noise(op)? {
                Some(noise) => Kind::Noise(noise),
                None => return Ok(None),
            },
            _ => return Ok(None),
        };
        Ok(Some(TensorOp {
            kind,
            normalize_after: None,
        }))
    }

    /// Whether `op` is a tensor op (before it is checked).
    pub fn is_tensor_op(op: &OpSpec) -> bool {
        matches!(
            op,
            OpSpec::RandomErasing { .. }
                | OpSpec::TimmRandomErasing { .. }
                | OpSpec::GaussianNoise { .. }
        )
    }

    /// Whether the op must see the slot before `Normalize` as torchvision computes it: a noise
    /// standing before `Normalize` (its sum and clamp are not linear in the normalized values,
    /// so the plan converts without normalizing and normalizes the slot after it).
    pub fn needs_unnormalized_slot(&self) -> bool {
        matches!(self.kind, Kind::Noise(_)) && self.normalize_after.is_some()
    }

    /// Marks this op as standing before `Normalize(mean, std)`.
    pub fn before_normalize(mut self, mean: [f32; 3], std: [f32; 3]) -> Self {
        self.normalize_after = Some((mean, std));
        self
    }

    /// Whether the op stands before `Normalize`.
    pub fn is_before_normalize(&self) -> bool {
        self.normalize_after.is_some()
    }

    /// Whether the op fills with random values per pixel (and needs a buffer for them).
    pub fn draws_values(&self) -> bool {
        match self.kind {
            Kind::Torchvision(e) => e.value() == EraseValue::Random,
            Kind::Timm(e) => e.mode() == TimmEraseMode::Pixel,
            Kind::Noise(_) => true,
        }
    }

    /// The op's span.
    pub fn span(&self) -> Op {
        match self.kind {
            Kind::Torchvision(_) => Op::RandomErasing,
            Kind::Timm(_) => Op::TimmRandomErasing,
            Kind::Noise(_) => Op::GaussianNoise,
        }
    }

    /// Draws the rectangles (and their random values) and erases them in `slot`, or the noise
    /// and adds it, in `slot`, a `3 x height x width` float32 sample. `values` holds the random
    /// values; its capacity is reserved for a whole sample, so this does not allocate.
    pub fn run<D: TorchDraws + ?Sized>(
        &self,
        slot: &mut [f32],
        (height, width): (u32, u32),
        state: SlotState,
        rng: &mut D,
        values: &mut Vec<f32>,
    ) -> Result<()> {
        let normalize = match state {
            SlotState::Normalized => self.normalize_after,
            SlotState::AsWritten => None,
        };
        match &self.kind {
            Kind::Noise(noise) => {
                if normalize.is_some() {
                    // The plan normalizes the slot after a noise standing before Normalize.
                    return Err(Error::invalid(
                        "ops",
                        "GaussianNoise before Normalize ran on the normalized slot",
                    ));
                }
                apply_gaussian_noise(noise, slot, rng, values);
                Ok(())
            }
            Kind::Timm(timm) => timm_erase(
                timm,
                slot,
                (height, width),
                normalize,
                rng,
                values,
                &mut |_, _| {},
            ),
            Kind::Torchvision(erasing) => {
                let Some(rect) = erasing.draw(width, height, rng) else {
                    return Ok(());
                };
                let fill = match erasing.value() {
                    EraseValue::Constant(v) => RectFill::Values([v; 3]),
                    EraseValue::PerChannel(v) => RectFill::Values(v),
                    EraseValue::Random => RectFill::Normals,
                };
                let dims = (height as usize, width as usize);
                fill_rect(slot, dims, rect, fill, normalize, rng, values)
            }
        }
    }
}

/// torchvision's `RandomErasing` arguments, checked.
fn plan_torchvision(
    p: f64,
    scale: [f64; 2],
    ratio: [f64; 2],
    value: &EraseFill,
) -> Result<RandomErasing> {
    let value = match value {
        EraseFill::Number(v) => EraseValue::Constant(*v as f32),
        EraseFill::Values(v) => match v.as_slice() {
            [v] => EraseValue::Constant(*v as f32),
            [r, g, b] => EraseValue::PerChannel([*r as f32, *g as f32, *b as f32]),
            _ => {
                return Err(Error::invalid(
                    "value",
                    format!(
                        "RandomErasing: {} values; give 1 or 3 (one per channel)",
                        v.len()
                    ),
                ))
            }
        },
        EraseFill::Word(w) if w == "random" => EraseValue::Random,
        EraseFill::Word(w) => {
            return Err(Error::invalid(
                "value",
                format!("RandomErasing: {w:?}; the only word accepted is \"random\""),
            ))
        }
    };
    RandomErasing::new(p, (scale[0], scale[1]), (ratio[0], ratio[1]), value)
        .map_err(|e| in_op("RandomErasing", e))
}
