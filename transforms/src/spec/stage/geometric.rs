//! The geometric ops of a stage, on the u8 staging image with the arithmetic of torchvision's
//! PIL path (the kernels of [`crate::augment::geometry`]): `RandomVerticalFlip`,
//! `RandomRotation`, `RandomAffine`, `GaussianBlur`, `Pad`.
//!
//! An op that cannot work in place writes [`StageScratch::spare`] and swaps it with the staging
//! image. Must not allocate per sample once warm, nor let the output size depend on a draw.

use super::StageScratch;
use crate::error::Result;
use crate::image::RgbImage;
use crate::rng::SampleRng;
use crate::spec::{Op, OpSpec};

/// A geometric op, parameters checked.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::spec) enum GeometricOp {}

impl GeometricOp {
    /// `Ok(None)`: `op` is not a geometric stage op.
    pub(super) fn plan(op: &OpSpec) -> Result<Option<Self>> {
        let _ = op;
        Ok(None)
    }

    /// The `(height, width)` this op leaves for an input of `size`.
    pub(super) fn output_size(&self, size: (u32, u32)) -> Result<(u32, u32)> {
        let _ = size;
        match *self {}
    }

    /// The span this op runs in.
    pub(super) fn span(&self) -> Op {
        match *self {}
    }

    /// Draws this op's parameters (torchvision's draws, in its order and number) and applies
    /// it to `img`.
    pub(super) fn run(
        &self,
        img: &mut RgbImage,
        scratch: &mut StageScratch,
        rng: &mut SampleRng,
    ) -> Result<()> {
        let _ = (img, scratch, rng);
        match *self {}
    }
}
