//! The four automatic augmentation policies: `TrivialAugmentWide`, `RandAugment`,
//! `AutoAugment` and `AugMix`, as torchvision v1 draws them.
//!
//! Each `draw` makes exactly torchvision's draws, in its order: the op index, then (only where
//! the op has a magnitude table) the bin, then (only where the op is signed) the sign. Must not
//! skip a draw torchvision makes nor add one, or a scripted replay of torch's values diverges;
//! transforms/tests/policy_draws.rs replays recorded torchvision runs.
//!
//! v2 (`torchvision.transforms.v2`) draws differently, with the same distributions: the sign is
//! `torch.rand(()) <= 0.5` (a float draw) instead of `torch.randint(2)`; `AutoAugment` draws a
//! probability (and a sign) per sub-policy step as it goes instead of two of each up front. And
//! one difference shows in pixels: v2's Solarize table runs from 1.0 to 0.0 and is scaled by 255
//! in float64, so its thresholds sit just above v1's float32 ones (v1 238.0, v2 238.0000010:
//! v1 inverts a pixel of 238, v2 does not). [`Api`] selects which to follow; v1 is the default.

use super::ops::{OpKind, OpSeq, PixelOp};
use super::space::{torch_linspace, AugmentationSpace};
use crate::error::{Error, Result};
use crate::rng::TorchDraws;

/// The op `space.ops()[op_index]` at a magnitude bin drawn by `bin` (only when the op has a
/// table), with a sign drawn by `randint(2)` (only when signed; 1 flips the magnitude, as
/// Python's `if signed and torch.randint(2, (1,))`): the common inner step of
/// `TrivialAugmentWide`, `RandAugment` and `AugMix`. AutoAugment's sign rule differs (0
/// flips, drawn up front) and does not use it.
fn op_at<D: TorchDraws + ?Sized>(
    draws: &mut D,
    api: Api,
    space: AugmentationSpace,
    op_index: u32,
    num_bins: u32,
    (height, width): (u32, u32),
    bin: impl FnOnce(&mut D) -> u32,
) -> PixelOp {
    let Some(&(kind, signed)) = space.ops().get(op_index as usize) else {
        return PixelOp::Identity;
    };
    // Ops without a table get magnitude 0.0 and no bin or sign draw.
    if space.magnitude(kind, num_bins, 0, height, width).is_none() {
        return PixelOp::from_magnitude(kind, 0.0);
    }
    let b = bin(draws);
    let mut magnitude = table_magnitude(api, space, kind, num_bins, b, (height, width));
    if signed && api.draw_negative(draws) {
        magnitude = -magnitude;
    }
    PixelOp::from_magnitude(kind, magnitude)
}

/// Which torchvision API a policy follows: the classes of `torchvision.transforms` (v1, the
/// default and the reference) or of `torchvision.transforms.v2`. See the module doc for what
/// differs. In pipeline specs: `v1`, `v2`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// `torchvision.transforms`.
    #[default]
    V1,
    /// `torchvision.transforms.v2`.
    V2,
}

impl Api {
    /// The sign draw of a signed op: v1 `torch.randint(2, (1,))` is truthy (1 flips), v2
    /// `torch.rand(()) <= 0.5` (float32 compare) flips.
    fn draw_negative<D: TorchDraws + ?Sized>(self, draws: &mut D) -> bool {
        match self {
            Api::V1 => draws.randint(2) == 1,
            Api::V2 => draws.uniform_f32(0.0, 1.0) <= 0.5,
        }
    }
}

/// Bin `bin` of `kind`'s table before the sign, as `_apply_op` receives it: v1's float32 table
/// widened, except v2's Solarize, `255.0 * float(linspace(1.0, 0.0)[bin])` in float64.
fn table_magnitude(
    api: Api,
    space: AugmentationSpace,
    kind: OpKind,
    num_bins: u32,
    bin: u32,
    (height, width): (u32, u32),
) -> f64 {
    if api == Api::V2 && kind == OpKind::Solarize {
        return 255.0 * f64::from(torch_linspace(1.0, 0.0, num_bins, bin));
    }
    f64::from(
        space
            .magnitude(kind, num_bins, bin, height, width)
            .unwrap_or(0.0),
    )
}

fn check_bins(num_magnitude_bins: u32) -> Result<()> {
    if num_magnitude_bins < 2 {
        return Err(Error::invalid(
            "num_magnitude_bins",
            format!("{num_magnitude_bins} is below 2 (the Posterize table divides by bins - 1)"),
        ));
    }
    Ok(())
}

/// torchvision's `TrivialAugmentWide(num_magnitude_bins=31)`: one op, uniform over the 14 ops
/// of [`AugmentationSpace::TrivialAugmentWide`], at a uniformly drawn bin, with a fair sign.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrivialAugmentWide {
    num_magnitude_bins: u32,
    api: Api,
}

impl TrivialAugmentWide {
    /// With `num_magnitude_bins` bins (torchvision's default 31); at least 2.
    pub fn new(num_magnitude_bins: u32) -> Result<Self> {
        check_bins(num_magnitude_bins)?;
        Ok(TrivialAugmentWide {
            num_magnitude_bins,
            api: Api::V1,
        })
    }

    /// Follow `api`'s draws (v1 unless told).
    pub fn with_api(self, api: Api) -> Self {
        TrivialAugmentWide { api, ..self }
    }

    /// The number of magnitude bins.
    pub fn num_magnitude_bins(&self) -> u32 {
        self.num_magnitude_bins
    }

    /// The op for one sample: `randint(14)` for the op, `randint(num_magnitude_bins)` for the
    /// bin unless the op has no table (Identity, AutoContrast, Equalize), `randint(2)` for the
    /// sign when the op is signed (1 means negative). The table does not depend on the image
    /// size, so neither does this.
    pub fn draw<D: TorchDraws + ?Sized>(&self, draws: &mut D) -> PixelOp {
        let space = AugmentationSpace::TrivialAugmentWide;
        let op_index = draws.randint(space.ops().len() as u32);
        let bins = self.num_magnitude_bins;
        op_at(draws, self.api, space, op_index, bins, (1, 1), |d| {
            d.randint(bins)
        })
    }
}

/// The most ops [`RandAugment`] applies per sample (its plan's capacity).
pub const MAX_RAND_AUGMENT_OPS: usize = 16;

/// torchvision's `RandAugment(num_ops=2, magnitude=9, num_magnitude_bins=31)`: `num_ops`
/// independent ops, each uniform over [`AugmentationSpace::RandAugment`], all at the fixed bin
/// `magnitude`, each with a fair sign.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RandAugment {
    num_ops: u32,
    magnitude: u32,
    num_magnitude_bins: u32,
    api: Api,
}

impl RandAugment {
    /// `num_ops` at most [`MAX_RAND_AUGMENT_OPS`]; `magnitude` below `num_magnitude_bins`
    /// (torchvision fails on the first sample otherwise, with an index error); at least 2 bins.
    pub fn new(num_ops: u32, magnitude: u32, num_magnitude_bins: u32) -> Result<Self> {
        check_bins(num_magnitude_bins)?;
        if num_ops as usize > MAX_RAND_AUGMENT_OPS {
            return Err(Error::invalid(
                "num_ops",
                format!("{num_ops} is above the supported {MAX_RAND_AUGMENT_OPS}"),
            ));
        }
        if magnitude >= num_magnitude_bins {
            return Err(Error::invalid(
                "magnitude",
                format!("{magnitude} is not a bin of {num_magnitude_bins}"),
            ));
        }
        Ok(RandAugment {
            num_ops,
            magnitude,
            num_magnitude_bins,
            api: Api::V1,
        })
    }

    /// Follow `api`'s draws (v1 unless told).
    pub fn with_api(self, api: Api) -> Self {
        RandAugment { api, ..self }
    }

    /// The ops for one sample of a `width` x `height` image (translations scale with it):
    /// per op `randint(14)`, then `randint(2)` for the sign when the op is signed. No bin draw.
    pub fn draw<D: TorchDraws + ?Sized>(
        &self,
        width: u32,
        height: u32,
        draws: &mut D,
    ) -> OpSeq<MAX_RAND_AUGMENT_OPS> {
        let space = AugmentationSpace::RandAugment;
        let mut plan = OpSeq::new();
        for _ in 0..self.num_ops {
            let op_index = draws.randint(space.ops().len() as u32);
            let bin = self.magnitude;
            plan.push(op_at(
                draws,
                self.api,
                space,
                op_index,
                self.num_magnitude_bins,
                (height, width),
                |_| bin,
            ));
        }
        plan
    }
}

/// The sub-policy tables of `AutoAugment`, from the AutoAugment paper as torchvision has them.
/// In pipeline specs by torchvision's enum values: `imagenet`, `cifar10`, `svhn`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum AutoAugmentPolicy {
    /// `AutoAugmentPolicy.IMAGENET` (torchvision's default).
    #[default]
    ImageNet,
    /// `AutoAugmentPolicy.CIFAR10`.
    Cifar10,
    /// `AutoAugmentPolicy.SVHN`.
    Svhn,
}

/// One step of a sub-policy: apply `op` with probability `probability` at bin `magnitude_bin`
/// of the 10-bin [`AugmentationSpace::AutoAugment`] table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PolicyStep {
    /// The op.
    pub op: OpKind,
    /// torchvision's Python float; compared in float32 (`probs[i] <= p` on a float32 tensor).
    pub probability: f64,
    /// The bin, `None` for ops without a magnitude.
    pub magnitude_bin: Option<u8>,
}

const fn step(op: OpKind, probability: f64, magnitude_bin: Option<u8>) -> PolicyStep {
    PolicyStep {
        op,
        probability,
        magnitude_bin,
    }
}

/// torchvision's `AutoAugment(policy)`: one of 25 two-step sub-policies, uniformly; each step
/// applied with its probability, signed ops with a fair sign.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoAugment {
    policy: AutoAugmentPolicy,
    api: Api,
}

impl AutoAugment {
    /// With the sub-policies of `policy`.
    pub fn new(policy: AutoAugmentPolicy) -> Self {
        AutoAugment {
            policy,
            api: Api::V1,
        }
    }

    /// Follow `api`'s draws (v1 unless told).
    pub fn with_api(self, api: Api) -> Self {
        AutoAugment { api, ..self }
    }

    /// The sub-policies, in torchvision's order.
    pub fn sub_policies(&self) -> &'static [[PolicyStep; 2]; 25] {
        match self.policy {
            AutoAugmentPolicy::ImageNet => &IMAGENET,
            AutoAugmentPolicy::Cifar10 => &CIFAR10,
            AutoAugmentPolicy::Svhn => &SVHN,
        }
    }

    /// The ops for one sample of a `width` x `height` image. torchvision's `get_params` always
    /// makes the same five draws, used or not: `randint(25)` for the sub-policy, two
    /// `torch.rand` for the steps' probabilities (a step runs when `rand <= p`), two
    /// `randint(2)` for the signs (0 means negative, unlike the other policies).
    ///
    /// v2 ([`Api::V2`]) draws `randint(25)`, then per step `torch.rand(())` (skip unless
    /// `<= p`) and, for a signed op that runs, `torch.rand(()) <= 0.5` for a negative sign.
    pub fn draw<D: TorchDraws + ?Sized>(&self, width: u32, height: u32, draws: &mut D) -> OpSeq<2> {
        if self.api == Api::V2 {
            return self.draw_v2(width, height, draws);
        }
        let policies = self.sub_policies();
        let id = draws.randint(policies.len() as u32) as usize;
        let probs = [draws.uniform_f32(0.0, 1.0), draws.uniform_f32(0.0, 1.0)];
        let signs = [draws.randint(2), draws.randint(2)];
        let mut plan = OpSeq::new();
        let Some(sub) = policies.get(id) else {
            return plan;
        };
        let space = AugmentationSpace::AutoAugment;
        for ((step, prob), sign) in sub.iter().zip(probs).zip(signs) {
            if prob > step.probability as f32 {
                continue;
            }
            let signed = space.ops().iter().any(|&(k, s)| k == step.op && s);
            let mut magnitude = step.magnitude_bin.map_or(0.0, |bin| {
                f64::from(
                    space
                        .magnitude(step.op, 10, u32::from(bin), height, width)
                        .unwrap_or(0.0),
                )
            });
            if signed && sign == 0 {
                magnitude = -magnitude;
            }
            plan.push(PixelOp::from_magnitude(step.op, magnitude));
        }
        plan
    }

    fn draw_v2<D: TorchDraws + ?Sized>(&self, width: u32, height: u32, draws: &mut D) -> OpSeq<2> {
        let policies = self.sub_policies();
        let id = draws.randint(policies.len() as u32) as usize;
        let mut plan = OpSeq::new();
        let Some(sub) = policies.get(id) else {
            return plan;
        };
        let space = AugmentationSpace::AutoAugment;
        for step in sub {
            if draws.uniform_f32(0.0, 1.0) > step.probability as f32 {
                continue;
            }
            let signed = space.ops().iter().any(|&(k, s)| k == step.op && s);
            let has_table = space.magnitude(step.op, 10, 0, height, width).is_some();
            let mut magnitude = 0.0;
            if let (true, Some(bin)) = (has_table, step.magnitude_bin) {
                let size = (height, width);
                magnitude = table_magnitude(Api::V2, space, step.op, 10, u32::from(bin), size);
                if signed && Api::V2.draw_negative(draws) {
                    magnitude = -magnitude;
                }
            }
            plan.push(PixelOp::from_magnitude(step.op, magnitude));
        }
        plan
    }
}

/// The most chains (`mixture_width`) an [`AugMix`] plan holds.
pub const MAX_AUGMIX_WIDTH: usize = 8;
/// The most ops per [`AugMix`] chain (`chain_depth`; the random depth is at most 3).
pub const MAX_AUGMIX_DEPTH: usize = 8;

/// torchvision's `AugMix(severity=3, mixture_width=3, chain_depth=-1, alpha=1.0,
/// all_ops=True)`.
///
/// Unlike the other policies, torchvision runs AugMix's ops on a uint8 *tensor* (it converts a
/// PIL image with `pil_to_tensor` first), so the kernels must follow the tensor functionals
/// (e.g. `F.rotate` through `grid_sample`, tensor `adjust_sharpness`), and the mix
/// `m0 * img + sum(w_i * chain_i(img))` is taken in float32 and truncated back to uint8.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AugMix {
    severity: u32,
    mixture_width: u32,
    chain_depth: i32,
    alpha: f32,
    all_ops: bool,
    api: Api,
}

/// One AugMix chain: its weight in the mix and its ops, applied in order to the original image.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AugMixChain {
    /// `dirichlet(alpha)[i] * m[1]` in float32.
    pub weight: f32,
    /// The chain's ops.
    pub ops: OpSeq<MAX_AUGMIX_DEPTH>,
}

/// An AugMix plan: `original_weight * image + sum(chain.weight * chain.ops(image))`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AugMixPlan {
    original_weight: f32,
    chains: [AugMixChain; MAX_AUGMIX_WIDTH],
    len: usize,
}

impl AugMixPlan {
    /// A plan given outright (parity tests inject torchvision's weights and ops): the
    /// original's weight and up to [`MAX_AUGMIX_WIDTH`] chains, each of up to
    /// [`MAX_AUGMIX_DEPTH`] ops. Errors when there are more.
    pub fn new(original_weight: f32, chains: &[(f32, &[PixelOp])]) -> Result<Self> {
        if chains.len() > MAX_AUGMIX_WIDTH {
            return Err(Error::invalid(
                "chains",
                format!("{} chains, above {MAX_AUGMIX_WIDTH}", chains.len()),
            ));
        }
        let mut plan = AugMixPlan {
            original_weight,
            chains: [AugMixChain {
                weight: 0.0,
                ops: OpSeq::new(),
            }; MAX_AUGMIX_WIDTH],
            len: chains.len(),
        };
        for (slot, &(weight, ops)) in plan.chains.iter_mut().zip(chains) {
            if ops.len() > MAX_AUGMIX_DEPTH {
                return Err(Error::invalid(
                    "chains",
                    format!("a chain of {} ops, above {MAX_AUGMIX_DEPTH}", ops.len()),
                ));
            }
            slot.weight = weight;
            for &op in ops {
                slot.ops.push(op);
            }
        }
        Ok(plan)
    }

    /// `m[0]` of the Beta(alpha, alpha) draw (a two-way Dirichlet): the original image's weight.
    pub fn original_weight(&self) -> f32 {
        self.original_weight
    }

    /// The `mixture_width` chains, in torchvision's order.
    pub fn chains(&self) -> &[AugMixChain] {
        self.chains.get(..self.len).unwrap_or(&[])
    }
}

impl AugMix {
    /// torchvision's checks (`severity` in `1..=10`, `alpha > 0`, `mixture_width >= 1`) and
    /// ours: `mixture_width` at most [`MAX_AUGMIX_WIDTH`], `chain_depth` at most
    /// [`MAX_AUGMIX_DEPTH`] (0 or below means a random depth in `1..=3`, as in torchvision).
    pub fn new(
        severity: u32,
        mixture_width: u32,
        chain_depth: i32,
        alpha: f32,
        all_ops: bool,
    ) -> Result<Self> {
        if !(1..=10).contains(&severity) {
            return Err(Error::invalid(
                "severity",
                format!("{severity} is not in [1, 10]"),
            ));
        }
        if mixture_width == 0 || mixture_width as usize > MAX_AUGMIX_WIDTH {
            return Err(Error::invalid(
                "mixture_width",
                format!("{mixture_width} is not in [1, {MAX_AUGMIX_WIDTH}]"),
            ));
        }
        if chain_depth > MAX_AUGMIX_DEPTH as i32 {
            return Err(Error::invalid(
                "chain_depth",
                format!("{chain_depth} is above the supported {MAX_AUGMIX_DEPTH}"),
            ));
        }
        if !(alpha > 0.0 && alpha.is_finite()) {
            return Err(Error::invalid(
                "alpha",
                format!("{alpha} is not a positive concentration"),
            ));
        }
        Ok(AugMix {
            severity,
            mixture_width,
            chain_depth,
            alpha,
            all_ops,
            api: Api::V1,
        })
    }

    /// Follow `api`'s draws (v1 unless told).
    pub fn with_api(self, api: Api) -> Self {
        AugMix { api, ..self }
    }

    /// The plan for one sample of a `width` x `height` image, in torchvision's order: a
    /// two-way Dirichlet (`m`), a `mixture_width`-way Dirichlet (chain weights, times `m[1]`),
    /// then per chain the depth (`randint(1, 4)` when `chain_depth <= 0`) and per op
    /// `randint(len(space))`, `randint(severity)` for the bin when the op has a table (bins of
    /// the 10-bin table: severity caps the strength), `randint(2)` for the sign (1 negative).
    pub fn draw<D: TorchDraws + ?Sized>(
        &self,
        width: u32,
        height: u32,
        draws: &mut D,
    ) -> AugMixPlan {
        let mut m = [0.0f32; 2];
        draws.dirichlet(self.alpha, &mut m);
        let mut weights = [0.0f32; MAX_AUGMIX_WIDTH];
        let n = (self.mixture_width as usize).min(MAX_AUGMIX_WIDTH);
        if let Some(w) = weights.get_mut(..n) {
            draws.dirichlet(self.alpha, w);
        }
        let space = AugmentationSpace::AugMix {
            all_ops: self.all_ops,
        };
        let mut plan = AugMixPlan {
            original_weight: m[0],
            chains: [AugMixChain {
                weight: 0.0,
                ops: OpSeq::new(),
            }; MAX_AUGMIX_WIDTH],
            len: n,
        };
        let severity = self.severity;
        for (chain, &w) in plan.chains.iter_mut().zip(&weights).take(n) {
            chain.weight = w * m[1];
            let depth = if self.chain_depth > 0 {
                self.chain_depth as u32
            } else {
                draws.randint(3) + 1
            };
            for _ in 0..depth {
                let op_index = draws.randint(space.ops().len() as u32);
                chain.ops.push(op_at(
                    draws,
                    self.api,
                    space,
                    op_index,
                    10,
                    (height, width),
                    |d| d.randint(severity),
                ));
            }
        }
        plan
    }
}

const IMAGENET: [[PolicyStep; 2]; 25] = [
    [
        step(OpKind::Posterize, 0.4, Some(8)),
        step(OpKind::Rotate, 0.6, Some(9)),
    ],
    [
        step(OpKind::Solarize, 0.6, Some(5)),
        step(OpKind::AutoContrast, 0.6, None),
    ],
    [
        step(OpKind::Equalize, 0.8, None),
        step(OpKind::Equalize, 0.6, None),
    ],
    [
        step(OpKind::Posterize, 0.6, Some(7)),
        step(OpKind::Posterize, 0.6, Some(6)),
    ],
    [
        step(OpKind::Equalize, 0.4, None),
        step(OpKind::Solarize, 0.2, Some(4)),
    ],
    [
        step(OpKind::Equalize, 0.4, None),
        step(OpKind::Rotate, 0.8, Some(8)),
    ],
    [
        step(OpKind::Solarize, 0.6, Some(3)),
        step(OpKind::Equalize, 0.6, None),
    ],
    [
        step(OpKind::Posterize, 0.8, Some(5)),
        step(OpKind::Equalize, 1.0, None),
    ],
    [
        step(OpKind::Rotate, 0.2, Some(3)),
        step(OpKind::Solarize, 0.6, Some(8)),
    ],
    [
        step(OpKind::Equalize, 0.6, None),
        step(OpKind::Posterize, 0.4, Some(6)),
    ],
    [
        step(OpKind::Rotate, 0.8, Some(8)),
        step(OpKind::Color, 0.4, Some(0)),
    ],
    [
        step(OpKind::Rotate, 0.4, Some(9)),
        step(OpKind::Equalize, 0.6, None),
    ],
    [
        step(OpKind::Equalize, 0.0, None),
        step(OpKind::Equalize, 0.8, None),
    ],
    [
        step(OpKind::Invert, 0.6, None),
        step(OpKind::Equalize, 1.0, None),
    ],
    [
        step(OpKind::Color, 0.6, Some(4)),
        step(OpKind::Contrast, 1.0, Some(8)),
    ],
    [
        step(OpKind::Rotate, 0.8, Some(8)),
        step(OpKind::Color, 1.0, Some(2)),
    ],
    [
        step(OpKind::Color, 0.8, Some(8)),
        step(OpKind::Solarize, 0.8, Some(7)),
    ],
    [
        step(OpKind::Sharpness, 0.4, Some(7)),
        step(OpKind::Invert, 0.6, None),
    ],
    [
        step(OpKind::ShearX, 0.6, Some(5)),
        step(OpKind::Equalize, 1.0, None),
    ],
    [
        step(OpKind::Color, 0.4, Some(0)),
        step(OpKind::Equalize, 0.6, None),
    ],
    [
        step(OpKind::Equalize, 0.4, None),
        step(OpKind::Solarize, 0.2, Some(4)),
    ],
    [
        step(OpKind::Solarize, 0.6, Some(5)),
        step(OpKind::AutoContrast, 0.6, None),
    ],
    [
        step(OpKind::Invert, 0.6, None),
        step(OpKind::Equalize, 1.0, None),
    ],
    [
        step(OpKind::Color, 0.6, Some(4)),
        step(OpKind::Contrast, 1.0, Some(8)),
    ],
    [
        step(OpKind::Equalize, 0.8, None),
        step(OpKind::Equalize, 0.6, None),
    ],
];

const CIFAR10: [[PolicyStep; 2]; 25] = [
    [
        step(OpKind::Invert, 0.1, None),
        step(OpKind::Contrast, 0.2, Some(6)),
    ],
    [
        step(OpKind::Rotate, 0.7, Some(2)),
        step(OpKind::TranslateX, 0.3, Some(9)),
    ],
    [
        step(OpKind::Sharpness, 0.8, Some(1)),
        step(OpKind::Sharpness, 0.9, Some(3)),
    ],
    [
        step(OpKind::ShearY, 0.5, Some(8)),
        step(OpKind::TranslateY, 0.7, Some(9)),
    ],
    [
        step(OpKind::AutoContrast, 0.5, None),
        step(OpKind::Equalize, 0.9, None),
    ],
    [
        step(OpKind::ShearY, 0.2, Some(7)),
        step(OpKind::Posterize, 0.3, Some(7)),
    ],
    [
        step(OpKind::Color, 0.4, Some(3)),
        step(OpKind::Brightness, 0.6, Some(7)),
    ],
    [
        step(OpKind::Sharpness, 0.3, Some(9)),
        step(OpKind::Brightness, 0.7, Some(9)),
    ],
    [
        step(OpKind::Equalize, 0.6, None),
        step(OpKind::Equalize, 0.5, None),
    ],
    [
        step(OpKind::Contrast, 0.6, Some(7)),
        step(OpKind::Sharpness, 0.6, Some(5)),
    ],
    [
        step(OpKind::Color, 0.7, Some(7)),
        step(OpKind::TranslateX, 0.5, Some(8)),
    ],
    [
        step(OpKind::Equalize, 0.3, None),
        step(OpKind::AutoContrast, 0.4, None),
    ],
    [
        step(OpKind::TranslateY, 0.4, Some(3)),
        step(OpKind::Sharpness, 0.2, Some(6)),
    ],
    [
        step(OpKind::Brightness, 0.9, Some(6)),
        step(OpKind::Color, 0.2, Some(8)),
    ],
    [
        step(OpKind::Solarize, 0.5, Some(2)),
        step(OpKind::Invert, 0.0, None),
    ],
    [
        step(OpKind::Equalize, 0.2, None),
        step(OpKind::AutoContrast, 0.6, None),
    ],
    [
        step(OpKind::Equalize, 0.2, None),
        step(OpKind::Equalize, 0.6, None),
    ],
    [
        step(OpKind::Color, 0.9, Some(9)),
        step(OpKind::Equalize, 0.6, None),
    ],
    [
        step(OpKind::AutoContrast, 0.8, None),
        step(OpKind::Solarize, 0.2, Some(8)),
    ],
    [
        step(OpKind::Brightness, 0.1, Some(3)),
        step(OpKind::Color, 0.7, Some(0)),
    ],
    [
        step(OpKind::Solarize, 0.4, Some(5)),
        step(OpKind::AutoContrast, 0.9, None),
    ],
    [
        step(OpKind::TranslateY, 0.9, Some(9)),
        step(OpKind::TranslateY, 0.7, Some(9)),
    ],
    [
        step(OpKind::AutoContrast, 0.9, None),
        step(OpKind::Solarize, 0.8, Some(3)),
    ],
    [
        step(OpKind::Equalize, 0.8, None),
        step(OpKind::Invert, 0.1, None),
    ],
    [
        step(OpKind::TranslateY, 0.7, Some(9)),
        step(OpKind::AutoContrast, 0.9, None),
    ],
];

const SVHN: [[PolicyStep; 2]; 25] = [
    [
        step(OpKind::ShearX, 0.9, Some(4)),
        step(OpKind::Invert, 0.2, None),
    ],
    [
        step(OpKind::ShearY, 0.9, Some(8)),
        step(OpKind::Invert, 0.7, None),
    ],
    [
        step(OpKind::Equalize, 0.6, None),
        step(OpKind::Solarize, 0.6, Some(6)),
    ],
    [
        step(OpKind::Invert, 0.9, None),
        step(OpKind::Equalize, 0.6, None),
    ],
    [
        step(OpKind::Equalize, 0.6, None),
        step(OpKind::Rotate, 0.9, Some(3)),
    ],
    [
        step(OpKind::ShearX, 0.9, Some(4)),
        step(OpKind::AutoContrast, 0.8, None),
    ],
    [
        step(OpKind::ShearY, 0.9, Some(8)),
        step(OpKind::Invert, 0.4, None),
    ],
    [
        step(OpKind::ShearY, 0.9, Some(5)),
        step(OpKind::Solarize, 0.2, Some(6)),
    ],
    [
        step(OpKind::Invert, 0.9, None),
        step(OpKind::AutoContrast, 0.8, None),
    ],
    [
        step(OpKind::Equalize, 0.6, None),
        step(OpKind::Rotate, 0.9, Some(3)),
    ],
    [
        step(OpKind::ShearX, 0.9, Some(4)),
        step(OpKind::Solarize, 0.3, Some(3)),
    ],
    [
        step(OpKind::ShearY, 0.8, Some(8)),
        step(OpKind::Invert, 0.7, None),
    ],
    [
        step(OpKind::Equalize, 0.9, None),
        step(OpKind::TranslateY, 0.6, Some(6)),
    ],
    [
        step(OpKind::Invert, 0.9, None),
        step(OpKind::Equalize, 0.6, None),
    ],
    [
        step(OpKind::Contrast, 0.3, Some(3)),
        step(OpKind::Rotate, 0.8, Some(4)),
    ],
    [
        step(OpKind::Invert, 0.8, None),
        step(OpKind::TranslateY, 0.0, Some(2)),
    ],
    [
        step(OpKind::ShearY, 0.7, Some(6)),
        step(OpKind::Solarize, 0.4, Some(8)),
    ],
    [
        step(OpKind::Invert, 0.6, None),
        step(OpKind::Rotate, 0.8, Some(4)),
    ],
    [
        step(OpKind::ShearY, 0.3, Some(7)),
        step(OpKind::TranslateX, 0.9, Some(3)),
    ],
    [
        step(OpKind::ShearX, 0.1, Some(6)),
        step(OpKind::Invert, 0.6, None),
    ],
    [
        step(OpKind::Solarize, 0.7, Some(2)),
        step(OpKind::TranslateY, 0.6, Some(7)),
    ],
    [
        step(OpKind::ShearY, 0.8, Some(4)),
        step(OpKind::Invert, 0.8, None),
    ],
    [
        step(OpKind::ShearX, 0.7, Some(9)),
        step(OpKind::TranslateY, 0.8, Some(3)),
    ],
    [
        step(OpKind::ShearY, 0.8, Some(5)),
        step(OpKind::AutoContrast, 0.7, None),
    ],
    [
        step(OpKind::ShearX, 0.7, Some(2)),
        step(OpKind::Invert, 0.1, None),
    ],
];
