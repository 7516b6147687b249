//! The tensor ops of a plan: `RandomErasing`, after the conversion, on the float32 CHW sample in
//! the batch slot (where torchvision's reference recipes run it: after `ToTensor` and
//! `Normalize`). The draws are [`crate::augment::policy::RandomErasing`]'s, the kernel
//! [`crate::augment::geometry::erase`]'s.
//!
//! Must not allocate per sample (the random values go to a buffer the context reserves for the
//! largest rectangle), nor draw outside the pipeline's order (a tensor op draws after every
//! stage op and the flip fused into the conversion).

use crate::augment::geometry::erase::{erase, EraseValue as Fill};
use crate::augment::policy::{EraseValue, RandomErasing};
use crate::error::{Error, Result};
use crate::image::CropRect;
use crate::rng::{SampleRng, TorchDraws};
use crate::spec::stage::in_op;
use crate::spec::EraseFill;
use crate::tensor::normalize_value;

/// `RandomErasing`, parameters checked.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::spec) struct TensorOp {
    erasing: RandomErasing,
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

impl TensorOp {
    /// Plans a `RandomErasing` spec (as standing after `Normalize`, if any).
    pub fn plan(p: f64, scale: [f64; 2], ratio: [f64; 2], value: &EraseFill) -> Result<Self> {
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
        let erasing = RandomErasing::new(p, (scale[0], scale[1]), (ratio[0], ratio[1]), value)
            .map_err(|e| in_op("RandomErasing", e))?;
        Ok(TensorOp {
            erasing,
            normalize_after: None,
        })
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

    /// Whether the op fills with random values (and needs a buffer for them).
    pub fn draws_values(&self) -> bool {
        self.erasing.value() == EraseValue::Random
    }

    /// Draws the rectangle (and its random values) and erases it in `slot`, a `3 x height x
    /// width` float32 sample. `values` holds the random values; its capacity is reserved for
    /// the largest rectangle, so this does not allocate.
    pub fn run(
        &self,
        slot: &mut [f32],
        (height, width): (u32, u32),
        state: SlotState,
        rng: &mut SampleRng,
        values: &mut Vec<f32>,
    ) -> Result<()> {
        let Some(rect) = self.erasing.draw(width, height, rng) else {
            return Ok(());
        };
        let crop = CropRect {
            top: rect.top,
            left: rect.left,
            height: rect.height,
            width: rect.width,
        };
        let normalize = match state {
            SlotState::Normalized => self.normalize_after,
            SlotState::AsWritten => None,
        };
        let (h, w) = (height as usize, width as usize);
        let fill = |v: [f32; 3]| match normalize {
            Some((mean, std)) => [0, 1, 2].map(|c| normalize_value(v[c], mean[c], std[c])),
            None => v,
        };
        match self.erasing.value() {
            EraseValue::Constant(v) => erase(slot, 3, h, w, crop, Fill::PerChannel(&fill([v; 3]))),
            EraseValue::PerChannel(v) => erase(slot, 3, h, w, crop, Fill::PerChannel(&fill(v))),
            EraseValue::Random => {
                let plane = rect.height as usize * rect.width as usize;
                values.clear();
                values.resize(3 * plane, 0.0);
                rng.fill_standard_normal(values);
                if let Some((mean, std)) = normalize {
                    for (c, channel) in values.chunks_exact_mut(plane.max(1)).enumerate() {
                        let (m, s) = (mean[c % 3], std[c % 3]);
                        for v in channel {
                            *v = normalize_value(*v, m, s);
                        }
                    }
                }
                erase(slot, 3, h, w, crop, Fill::Source(values))
            }
        }
    }
}
