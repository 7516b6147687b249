//! torchvision's automatic augmentation policies in a stage: `TrivialAugmentWide`,
//! `RandAugment`, `AutoAugment`, `AugMix`. The draws are [`crate::augment::policy`]'s; the
//! chosen ops run with the colour and geometry kernels, each in a nested span named by the
//! policy and the op (`AugmentationSpace::span_name`, e.g. `TrivialAugmentWide/Solarize`),
//! through [`OpObserver::enter_named`](crate::spec::OpObserver::enter_named).
//!
//! Must not allocate per sample once warm, nor draw outside torchvision's order.

use super::StageScratch;
use crate::error::Result;
use crate::image::RgbImage;
use crate::rng::SampleRng;
use crate::spec::{Op, OpObserver, OpSpec};

/// A policy, parameters checked.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::spec) enum PolicyOp {}

impl PolicyOp {
    /// `Ok(None)`: `op` is not a policy.
    pub(super) fn plan(op: &OpSpec) -> Result<Option<Self>> {
        let _ = op;
        Ok(None)
    }

    /// The span the whole policy (its draw and the chosen ops) runs in.
    pub(super) fn span(&self) -> Op {
        match *self {}
    }

    /// Draws the policy's ops and applies them to `img`, each chosen op in a named span.
    pub(super) fn run(
        &self,
        img: &mut RgbImage,
        scratch: &mut StageScratch,
        rng: &mut SampleRng,
        obs: &mut dyn OpObserver,
    ) -> Result<()> {
        let _ = (img, scratch, rng, obs);
        match *self {}
    }
}
