//! The random draws of torchvision's augmentation policies and random single ops, as plans:
//! small `Copy` values (no heap) that say which pixel op to run with which parameter, for the
//! kernels in [`super::color`] and [`super::geometry`] to carry out.
//!
//! - [`ops`]: the op vocabulary ([`OpKind`], [`PixelOp`] with the parameter torchvision passes
//!   to the functional) and the fixed-capacity [`OpSeq`].
//! - [`space`]: the magnitude tables (`_augmentation_space`) of each policy, computed as torch
//!   computes them (float32 `linspace` with fused multiply-adds), exactly.
//! - [`auto`]: `TrivialAugmentWide`, `RandAugment`, `AutoAugment`, `AugMix`.
//! - [`timm`](mod@timm): timm's `RandAugment`, `AutoAugment` and `AugMixAugment`
//!   (`timm.data.auto_augment`), whose draws are
//!   Python's `random` and numpy's rather than torch's (its module doc has the table).
//! - [`timm_erasing`]: timm's `RandomErasing` (`timm.data.random_erasing`): the coin, the
//!   block count and each block's rectangle, on Python's `random` (its module doc has the
//!   table).
//! - [`single`]: `ColorJitter`, `RandomRotation`, `RandomAffine`, `GaussianBlur`,
//!   `RandomErasing`, `RandomCrop`, `RandomApply`, `RandomChoice`, `RandomOrder` and the
//!   "apply with probability p" ops.
//!
//! Reference: torchvision's v1 classes (`torchvision.transforms`), draw for draw: the same
//! draws in the same order and number, including draws torchvision makes and then ignores, so
//! a scripted [`TorchDraws`](crate::rng::TorchDraws) replaying torch's values reproduces
//! torchvision's choices (transforms/tests/policy_draws.rs does this against recorded runs).
//! Where v2 (`torchvision.transforms.v2`) draws differently, the item's doc says how.
//!
//! | torchvision (v1) | here | plan |
//! |---|---|---|
//! | `TrivialAugmentWide` | [`TrivialAugmentWide::draw`] | one [`PixelOp`] |
//! | `RandAugment` | [`RandAugment::draw`] | [`OpSeq`] of `num_ops` |
//! | `AutoAugment` | [`AutoAugment::draw`] | [`OpSeq`] of 0 to 2 |
//! | `AugMix` | [`AugMix::draw`] | [`AugMixPlan`]: weights and chains (tensor semantics) |
//! | `ColorJitter` | [`ColorJitter::draw`] | [`ColorJitterPlan`] (order, factors) |
//! | `RandomRotation` | [`RandomRotation::draw`] | angle |
//! | `RandomAffine` | [`RandomAffine::draw`] | [`AffinePlan`] |
//! | `RandomPerspective` | [`RandomPerspective::draw`] | `Option<`[`PerspectivePlan`]`>` (coin, corners) |
//! | `GaussianBlur` | [`GaussianBlur::draw`] | sigma |
//! | `RandomErasing` | [`RandomErasing::draw`] | `Option<`[`EraseRect`]`>`; "random" values via [`fill_standard_normal`](crate::rng::TorchDraws::fill_standard_normal) |
//! | `RandomCrop` | [`RandomCrop::draw`] | [`RandomCropPlan`] (padding, crop) |
//! | `RandomApply` | [`draw_apply`] | bool |
//! | `RandomChoice`, `RandomOrder` | [`RandomChoice::draw`], [`RandomOrder::draw`] | index, [`Permutation`] |
//! | `RandomGrayscale`, `RandomVerticalFlip` | [`draw_p`] | bool |
//! | `RandomInvert`, `RandomPosterize`, `RandomSolarize`, `RandomAdjustSharpness`, `RandomAutocontrast`, `RandomEqualize` | [`draw_p_item`] | bool |
//!
//! For the v2 classes: the policies take [`Api::V2`] (`with_api`); v2's `RandomApply` and
//! every v2 op with a `p` is [`draw_p`]; the other single ops draw as v1 up to stream order
//! (each item's doc says where), with the same distributions.
//!
//! A sample's ops must draw in pipeline order from the one sample generator, each op's draws
//! complete before the next op's (the kernels of `RandomErasing(value="random")` draw their
//! normals right after its plan). Span names for ops a policy chose:
//! [`AugmentationSpace::span_name`].
//!
//! Must not touch pixels, allocate, or draw from anything but the sample's draws: a plan is a
//! pure function of the sample's generator, so output stays a function of (seed, epoch, index).

pub mod auto;
pub mod ops;
pub mod single;
pub mod space;
pub mod timm;
pub mod timm_erasing;

pub use auto::{
    Api, AugMix, AugMixChain, AugMixPlan, AutoAugment, AutoAugmentPolicy, PolicyStep, RandAugment,
    TrivialAugmentWide, MAX_AUGMIX_DEPTH, MAX_AUGMIX_WIDTH, MAX_RAND_AUGMENT_OPS,
};
pub use ops::{OpKind, OpSeq, PixelOp};
pub use single::{
    draw_apply, draw_p, draw_p_item, randperm, AffinePlan, ColorJitter, ColorJitterPlan, ColorStep,
    EraseRect, EraseValue, GaussianBlur, Permutation, PerspectivePlan, RandomAffine, RandomChoice,
    RandomCrop, RandomCropPlan, RandomErasing, RandomOrder, RandomPerspective, RandomRotation,
    MAX_CHOICES,
};
pub use space::{torch_linspace, AugmentationSpace};
pub use timm::{
    TimmAugMix, TimmAugMixPlan, TimmAugmentOp, TimmAutoAugment, TimmAutoPlan, TimmOpKind, TimmPlan,
    TimmPolicyKind, TimmRandAugment, TimmStep, MAX_TIMM_AUGMIX_WIDTH, MAX_TIMM_LAYERS,
    MAX_TIMM_OPS, MAX_TIMM_SUB_POLICIES,
};
pub use timm_erasing::{TimmEraseMode, TimmRandomErasing, MAX_TIMM_ERASE_COUNT};
