//! Random composition in a stage: `RandomApply`, `RandomChoice`, `RandomOrder` over nested
//! stage ops (planned with [`StageOp::plan`], so they nest in each other and hold colour,
//! geometric and policy ops and flips), with torchvision's draws (those of
//! [`crate::augment::policy`]). A nested `Compose` is flattened into `RandomApply`'s ops and is
//! one unit among `RandomChoice`'s choices and `RandomOrder`'s items.
//!
//! Must not let the output size depend on a draw (every outcome must leave the same size,
//! checked when planned), nor allocate per sample (a permutation is inline).

use super::{check_p, in_op, Domain, StageOp, StageScratch};
use crate::augment::policy::{draw_apply, RandomChoice, RandomOrder};
use crate::error::{Error, Result};
use crate::image::RgbImage;
use crate::rng::SampleRng;
use crate::spec::{Op, OpObserver, OpSpec};

/// A random composition, its nested ops planned.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::spec) enum ChoiceOp {
    /// All of `ops` or none.
    Apply { ops: Vec<StageOp>, p: f64 },
    /// One of `choices`, each a sequence (one op, or a `Compose`'s ops).
    Choice {
        choices: Vec<Vec<StageOp>>,
        draw: RandomChoice,
    },
    /// All of `items` in a drawn order, each a sequence.
    Order {
        items: Vec<Vec<StageOp>>,
        draw: RandomOrder,
    },
}

/// The op's name as written (`ToTensor`, `RandomResizedCrop`), for messages.
pub(super) fn op_name(op: &OpSpec) -> String {
    let debug = format!("{op:?}");
    debug
        .split([' ', '{', '('])
        .next()
        .unwrap_or_default()
        .to_string()
}

/// `transforms` planned as stage ops in order, nested `Compose`s flattened, in the `domain`
/// of the composition; `owner` names the composition in errors.
fn plan_sequence(
    owner: &'static str,
    transforms: &[OpSpec],
    domain: Domain,
) -> Result<Vec<StageOp>> {
    let mut ops = Vec::with_capacity(transforms.len());
    for (i, op) in transforms.iter().enumerate() {
        ops.extend(plan_unit(owner, i, op, domain)?);
    }
    Ok(ops)
}

/// One element of a composition's `transforms`: a stage op, or a `Compose`'s ops.
fn plan_unit(
    owner: &'static str,
    index: usize,
    op: &OpSpec,
    domain: Domain,
) -> Result<Vec<StageOp>> {
    match op {
        OpSpec::Compose { transforms } => return plan_sequence(owner, transforms, domain),
        // Nothing to run: the plan's channel count (`output_channels`) refused the RGB that
        // would make some samples three-channel and others not.
        OpSpec::Rgb => return Ok(Vec::new()),
        // A conversion that happens or not with the draw would leave the ops after the
        // composition on a PIL image for some samples and a tensor for others.
        OpSpec::ToImage { .. } => {
            return Err(Error::invalid(
                "transforms",
                format!(
                    "{owner}: transforms[{index}] is ToImage, which cannot run inside it: the \
                     image would be a tensor after it for some samples only; put ToImage \
                     before {owner}"
                ),
            ))
        }
        _ => {}
    }
    match StageOp::plan(op, domain).map_err(|e| in_op(owner, e))? {
        Some(stage) => Ok(vec![stage]),
        None => Err(Error::invalid(
            "transforms",
            format!(
                "{owner}: transforms[{index}] is {}, which cannot run inside it: only the ops \
                 that may stand between the geometry and ToTensor (flips, pixel, geometric and \
                 policy ops, random compositions, Compose of those)",
                op_name(op)
            ),
        )),
    }
}

/// The size `ops` leave for an input of `size`.
fn sequence_size(ops: &[StageOp], size: (u32, u32), limit: u64) -> Result<(u32, u32)> {
    ops.iter()
        .try_fold(size, |size, op| op.output_size(size, limit))
}

/// The most items of a `RandomOrder` whose orders are all checked for the size they leave when
/// some item changes the size (8! = 40320 orders); with more, every item must keep the size.
const MAX_ORDERS_CHECKED: usize = 8;

fn size_error(owner: &'static str, what: &str, a: (u32, u32), b: (u32, u32)) -> Error {
    Error::invalid(
        "transforms",
        format!(
            "{owner}: {what} leave {}x{} and {}x{}; every outcome must leave the same size \
             (samples are batched)",
            a.0, a.1, b.0, b.1
        ),
    )
}

impl ChoiceOp {
    /// `Ok(None)`: `op` is not a random composition.
    pub(super) fn plan(op: &OpSpec, domain: Domain) -> Result<Option<Self>> {
        Ok(Some(match op {
            OpSpec::RandomApply { transforms, p } => ChoiceOp::Apply {
                ops: plan_sequence("RandomApply", transforms, domain)?,
                p: check_p("RandomApply", *p)?,
            },
            OpSpec::RandomChoice { transforms, p } => {
                let draw = RandomChoice::new(transforms.len(), p.as_deref())
                    .map_err(|e| in_op("RandomChoice", e))?;
                let choices = transforms
                    .iter()
                    .enumerate()
                    .map(|(i, op)| plan_unit("RandomChoice", i, op, domain))
                    .collect::<Result<_>>()?;
                ChoiceOp::Choice { choices, draw }
            }
            OpSpec::RandomOrder { transforms } => {
                let draw =
                    RandomOrder::new(transforms.len()).map_err(|e| in_op("RandomOrder", e))?;
                let items = transforms
                    .iter()
                    .enumerate()
                    .map(|(i, op)| plan_unit("RandomOrder", i, op, domain))
                    .collect::<Result<_>>()?;
                ChoiceOp::Order { items, draw }
            }
            _ => return Ok(None),
        }))
    }

    /// The `(height, width)` this op leaves for an input of `size`; an error when two outcomes
    /// would leave different sizes.
    pub(super) fn output_size(&self, size: (u32, u32), limit: u64) -> Result<(u32, u32)> {
        match self {
            ChoiceOp::Apply { ops, .. } => {
                let applied =
                    sequence_size(ops, size, limit).map_err(|e| in_op("RandomApply", e))?;
                if applied != size {
                    return Err(size_error(
                        "RandomApply",
                        "applying its transforms and skipping them",
                        applied,
                        size,
                    ));
                }
                Ok(size)
            }
            ChoiceOp::Choice { choices, .. } => {
                let mut sizes = choices.iter().map(|ops| sequence_size(ops, size, limit));
                let first = sizes
                    .next()
                    .unwrap_or(Ok(size))
                    .map_err(|e| in_op("RandomChoice", e))?;
                for other in sizes {
                    let other = other.map_err(|e| in_op("RandomChoice", e))?;
                    if other != first {
                        return Err(size_error("RandomChoice", "two choices", first, other));
                    }
                }
                Ok(first)
            }
            ChoiceOp::Order { items, .. } => order_size(items, size, limit),
        }
    }

    /// The span the composition (its draws) runs in; the nested ops have their own inside it.
    pub(super) fn span(&self) -> Op {
        match self {
            ChoiceOp::Apply { .. } => Op::RandomApply,
            ChoiceOp::Choice { .. } => Op::RandomChoice,
            ChoiceOp::Order { .. } => Op::RandomOrder,
        }
    }

    /// Draws and runs the nested ops; whether they mirrored the image horizontally.
    pub(super) fn run(
        &self,
        img: &mut RgbImage,
        scratch: &mut StageScratch,
        rng: &mut SampleRng,
        obs: &mut dyn OpObserver,
    ) -> Result<bool> {
        match self {
            ChoiceOp::Apply { ops, p } => {
                if !draw_apply(rng, *p) {
                    return Ok(false);
                }
                run_all(ops, img, scratch, rng, obs)
            }
            ChoiceOp::Choice { choices, draw } => {
                let chosen = choices.get(draw.draw(rng)).ok_or_else(|| {
                    Error::invalid("transforms", "RandomChoice drew past its choices")
                })?;
                run_all(chosen, img, scratch, rng, obs)
            }
            ChoiceOp::Order { items, draw } => {
                let order = draw.draw(rng);
                let mut mirrored = false;
                for &i in order.as_slice() {
                    let item = items.get(usize::from(i)).ok_or_else(|| {
                        Error::invalid("transforms", "RandomOrder drew past its items")
                    })?;
                    mirrored ^= run_all(item, img, scratch, rng, obs)?;
                }
                Ok(mirrored)
            }
        }
    }
}

/// Runs `ops` in order; whether they mirrored the image (an odd number of flips).
fn run_all(
    ops: &[StageOp],
    img: &mut RgbImage,
    scratch: &mut StageScratch,
    rng: &mut SampleRng,
    obs: &mut dyn OpObserver,
) -> Result<bool> {
    let mut mirrored = false;
    for op in ops {
        mirrored ^= op.run(img, scratch, rng, obs)?;
    }
    Ok(mirrored)
}

/// The size `RandomOrder`'s items leave whatever their order: the size itself when every item
/// keeps it; otherwise every order is tried (up to [`MAX_ORDERS_CHECKED`] items).
fn order_size(items: &[Vec<StageOp>], size: (u32, u32), limit: u64) -> Result<(u32, u32)> {
    order_size_by(items.len(), size, |i, size| {
        sequence_size(&items[i], size, limit).map_err(|e| in_op("RandomOrder", e))
    })
}

/// [`order_size`] over `n` items whose sizes `item_size(i, input)` gives.
fn order_size_by(
    n: usize,
    size: (u32, u32),
    item_size: impl Fn(usize, (u32, u32)) -> Result<(u32, u32)>,
) -> Result<(u32, u32)> {
    let mut keep_size = true;
    for i in 0..n {
        keep_size &= item_size(i, size)? == size;
    }
    if keep_size {
        return Ok(size);
    }
    if n > MAX_ORDERS_CHECKED {
        return Err(Error::invalid(
            "transforms",
            format!(
                "RandomOrder: with more than {MAX_ORDERS_CHECKED} items every item must keep \
                 the size it finds (some item here changes it)"
            ),
        ));
    }
    // Heap's algorithm over the item indices: every order once.
    let mut order: Vec<usize> = (0..n).collect();
    let size_of = |order: &[usize]| order.iter().try_fold(size, |size, &i| item_size(i, size));
    let first = size_of(&order)?;
    let mut counters = vec![0usize; n];
    let mut i = 1;
    while i < n {
        if counters[i] < i {
            let j = if i % 2 == 0 { 0 } else { counters[i] };
            order.swap(j, i);
            let other = size_of(&order)?;
            if other != first {
                return Err(size_error("RandomOrder", "two orders", first, other));
            }
            counters[i] += 1;
            i = 1;
        } else {
            counters[i] = 0;
            i += 1;
        }
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Items as size maps: `Pad(k)` adds `2k` to both sides (orders commute), `Crop(s)` sets
    /// the size (orders do not commute with a pad), `Keep` changes nothing.
    #[derive(Clone, Copy)]
    enum Item {
        Pad(u32),
        Crop(u32),
        Keep,
    }

    fn sizes(items: &[Item]) -> Result<(u32, u32)> {
        order_size_by(items.len(), (10, 10), |i, (h, w)| {
            Ok(match items[i] {
                Item::Pad(k) => (h + 2 * k, w + 2 * k),
                Item::Crop(s) => (s, s),
                Item::Keep => (h, w),
            })
        })
    }

    #[test]
    fn every_order_is_checked_when_an_item_changes_the_size() {
        assert_eq!(sizes(&[Item::Keep, Item::Keep]).ok(), Some((10, 10)));
        assert_eq!(
            sizes(&[Item::Pad(1), Item::Keep, Item::Pad(2)]).ok(),
            Some((16, 16))
        );
        // A crop to 8 then a pad gives 10; a pad then the crop gives 8, in some order only.
        let err = sizes(&[Item::Keep, Item::Pad(1), Item::Keep, Item::Crop(8)])
            .expect_err("orders differ");
        assert!(err.to_string().contains("RandomOrder"), "{err}");
        // Written crop-first: the order that differs (pad first) comes later.
        let err = sizes(&[Item::Crop(8), Item::Keep, Item::Keep, Item::Pad(1)])
            .expect_err("orders differ");
        assert!(err.to_string().contains("two orders"), "{err}");
        // Crops to the same size in any order agree.
        assert_eq!(sizes(&[Item::Crop(6), Item::Crop(6)]).ok(), Some((6, 6)));
        // Too many to try.
        let many = [Item::Pad(1); MAX_ORDERS_CHECKED + 1];
        assert!(sizes(&many).is_err());
        let mut keep = [Item::Keep; MAX_ORDERS_CHECKED + 4];
        assert_eq!(sizes(&keep).ok(), Some((10, 10)));
        keep[0] = Item::Crop(3);
        assert!(sizes(&keep).is_err());
    }
}
