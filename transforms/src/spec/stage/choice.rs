//! Random composition in a stage: `RandomApply`, `RandomChoice`, `RandomOrder` over nested
//! stage ops (planned with [`StageOp::plan`]), with torchvision's draws.
//!
//! Must not let the output size depend on a draw (every branch must leave the same size), nor
//! allocate per sample.

use super::{StageOp, StageScratch};
use crate::error::Result;
use crate::image::RgbImage;
use crate::rng::SampleRng;
use crate::spec::{Op, OpObserver, OpSpec};

/// A random composition, its nested ops planned.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::spec) enum ChoiceOp {}

impl ChoiceOp {
    /// `Ok(None)`: `op` is not a random composition.
    pub(super) fn plan(op: &OpSpec) -> Result<Option<Self>> {
        let _ = (op, StageOp::plan);
        Ok(None)
    }

    /// The `(height, width)` this op leaves for an input of `size`.
    pub(super) fn output_size(&self, size: (u32, u32)) -> Result<(u32, u32)> {
        let _ = size;
        match *self {}
    }

    /// The span the composition (its draws) runs in; the nested ops have their own.
    pub(super) fn span(&self) -> Op {
        match *self {}
    }

    /// Draws and runs the nested ops; whether they mirrored the image horizontally.
    pub(super) fn run(
        &self,
        img: &mut RgbImage,
        scratch: &mut StageScratch,
        rng: &mut SampleRng,
        obs: &mut dyn OpObserver,
    ) -> Result<bool> {
        let _ = (img, scratch, rng, obs);
        match *self {}
    }
}
