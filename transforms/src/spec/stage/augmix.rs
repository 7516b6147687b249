//! torchvision's `AugMix` in a stage: the draws of [`crate::augment::policy::AugMix`], then
//! the chains and the float32 mix of [`crate::augment::augmix`] with torch's tensor kernels
//! (torchvision converts the PIL image to a uint8 tensor for AugMix, unlike the other
//! policies). The whole op runs in the `AugMix` span, each chain op in a nested span named
//! `AugMix/<Op>` (through [`OpObserver::enter_named`]).
//!
//! Must not allocate per sample once warm (the mix, chain and warp buffers live in
//! [`StageScratch::augmix`]), nor draw outside torchvision's order: every draw (the two
//! Dirichlets, then per chain its depth and ops) comes before the first op runs, which is
//! torchvision's order too, since its ops draw nothing.

use super::{in_op, tensor_fill, tensor_interpolation, Domain, StageScratch};
use crate::augment::augmix::TensorWarp;
use crate::augment::policy::{AugMix, AugmentationSpace};
use crate::error::{Error, Result};
use crate::image::RgbImage;
use crate::rng::SampleRng;
use crate::spec::{OpObserver, OpSpec};

const NAME: &str = "AugMix";

/// `AugMix`, parameters checked.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::spec) struct AugMixOp {
    augmix: AugMix,
    warp: TensorWarp,
    all_ops: bool,
}

impl AugMixOp {
    /// `Ok(None)`: `op` is not `AugMix`.
    pub(super) fn plan(op: &OpSpec, domain: Domain) -> Result<Option<Self>> {
        let OpSpec::AugMix {
            severity,
            mixture_width,
            chain_depth,
            alpha,
            all_ops,
            interpolation,
            fill,
            api,
        } = op
        else {
            return Ok(None);
        };
        // torchvision's AugMix warps a uint8 tensor, whose kernels refuse BICUBIC (on the
        // first warp drawn; here when planned).
        let interpolation = tensor_interpolation(NAME, *interpolation)?;
        let int = |name: &'static str, v: i64| {
            i32::try_from(v).map_err(|_| {
                Error::invalid(name, format!("{NAME}: {v} is out of the supported range"))
            })
        };
        let severity = u32::try_from(int("severity", *severity)?).map_err(|_| {
            Error::invalid("severity", format!("{NAME}: {severity} is not in [1, 10]"))
        })?;
        let width = u32::try_from(int("mixture_width", *mixture_width)?).map_err(|_| {
            Error::invalid(
                "mixture_width",
                format!("{NAME}: {mixture_width} is not a positive count"),
            )
        })?;
        let depth = int("chain_depth", *chain_depth)?;
        // torchvision builds `torch.tensor([alpha] * n)` in float32.
        let alpha32 = *alpha as f32;
        if !(alpha.is_finite() && alpha32 > 0.0) {
            return Err(Error::invalid(
                "alpha",
                format!("{NAME}: {alpha} is not a positive concentration"),
            ));
        }
        let augmix = AugMix::new(severity, width, depth, alpha32, *all_ops)
            .map_err(|e| in_op(NAME, e))?
            .with_api(*api);
        Ok(Some(AugMixOp {
            augmix,
            warp: TensorWarp {
                interpolation,
                fill: tensor_fill(NAME, fill.as_ref())?,
                api: *api,
                one_channel: domain.one_channel,
            },
            all_ops: *all_ops,
        }))
    }

    /// Draws the plan and applies it to `img`: chains on copies of it, each op in a named
    /// span, mixed in float32 and truncated back.
    pub(super) fn run(
        &self,
        img: &mut RgbImage,
        scratch: &mut StageScratch,
        rng: &mut SampleRng,
        obs: &mut dyn OpObserver,
    ) -> Result<()> {
        let plan = self.augmix.draw(img.width(), img.height(), rng);
        let space = AugmentationSpace::AugMix {
            all_ops: self.all_ops,
        };
        let mix = &mut scratch.augmix;
        mix.start(img, plan.original_weight());
        for chain in plan.chains() {
            mix.begin_chain(img);
            for op in &chain.ops {
                let name = space.span_name(op.kind());
                obs.enter_named(name);
                let done = mix.apply(op, &self.warp).map_err(|e| in_op(NAME, e));
                obs.exit_named(name);
                done?;
            }
            mix.add_chain(chain.weight)?;
        }
        mix.finish(img)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Fill;

    #[test]
    fn fill_broadcasts_and_refuses_what_torch_would_wrap() {
        assert_eq!(tensor_fill(NAME, None).expect("none"), None);
        assert_eq!(
            tensor_fill(NAME, Some(&Fill::Number(127.5))).expect("one"),
            Some([127.5; 3])
        );
        assert_eq!(
            tensor_fill(NAME, Some(&Fill::PerChannel(vec![1.0, 2.0, 3.0]))).expect("three"),
            Some([1.0, 2.0, 3.0])
        );
        for bad in [
            Fill::Number(256.0),
            Fill::Number(-1.0),
            Fill::PerChannel(vec![1.0, 2.0]),
        ] {
            let err = tensor_fill(NAME, Some(&bad))
                .expect_err("refused")
                .to_string();
            assert!(err.contains("fill") && err.contains("AugMix"), "{err}");
        }
    }
}
