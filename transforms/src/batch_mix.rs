//! torchvision v2's `MixUp` and `CutMix` on a whole batch of CHW samples, in place: each sample
//! mixed with the one before it in the batch (the batch rolled by one, the first sample taking
//! the last), as torchvision pairs them.
//!
//! Must not draw anything: the caller gives lambda and the box (drawn per batch, so batches stay
//! the same whatever the number of workers), and computes the mixed labels.

use crate::{Error, Result};

/// The batch's layout: `samples` samples of `channels x height x width` values each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchShape {
    /// Samples in the batch.
    pub samples: usize,
    /// Channels of each sample.
    pub channels: usize,
    /// Rows of each channel.
    pub height: usize,
    /// Columns of each row.
    pub width: usize,
}

impl BatchShape {
    fn sample_len(&self) -> usize {
        self.channels * self.height * self.width
    }

    fn check<T>(&self, batch: &[T]) -> Result<()> {
        let len = self
            .samples
            .checked_mul(self.sample_len())
            .ok_or_else(|| Error::invalid("batch", "its shape overflows"))?;
        if len != batch.len() {
            return Err(Error::invalid(
                "batch",
                format!("{} values, but its shape {self:?} holds {len}", batch.len()),
            ));
        }
        Ok(())
    }
}

/// `MixUp` with `lam`: sample `i` becomes `x[i - 1] * (1 - lam) + x[i] * lam` (`x[-1]` the
/// last), with torchvision's float32 arithmetic (`batch.roll(1, 0).mul_(1.0 - lam)
/// .add_(batch.mul(lam))`: each factor rounded to float32, each product and the sum rounded).
/// `scratch` keeps the last sample's values (reused between calls).
pub fn mixup_in_place(
    batch: &mut [f32],
    shape: BatchShape,
    lam: f64,
    scratch: &mut Vec<f32>,
) -> Result<()> {
    shape.check(batch)?;
    if !(0.0..=1.0).contains(&lam) {
        return Err(Error::invalid("lam", format!("{lam} is not in [0, 1]")));
    }
    let n = shape.sample_len();
    if shape.samples == 0 || n == 0 {
        return Ok(());
    }
    let (keep, take) = (lam as f32, (1.0 - lam) as f32);
    scratch.clear();
    scratch.extend_from_slice(&batch[(shape.samples - 1) * n..]);
    // From the last sample down: sample i reads sample i - 1 before it is overwritten.
    for i in (1..shape.samples).rev() {
        let (before, rest) = batch.split_at_mut(i * n);
        mix(&mut rest[..n], &before[(i - 1) * n..], keep, take);
    }
    mix(&mut batch[..n], scratch, keep, take);
    Ok(())
}

fn mix(sample: &mut [f32], previous: &[f32], keep: f32, take: f32) {
    for (x, &p) in sample.iter_mut().zip(previous) {
        *x = p * take + *x * keep;
    }
}

/// `CutMix` with the box `(x1, y1, x2, y2)` (columns `x1..x2`, rows `y1..y2`, as torchvision's
/// `output[..., y1:y2, x1:x2] = rolled[..., y1:y2, x1:x2]`): the box of sample `i` becomes
/// sample `i - 1`'s (`x[-1]` the last). `scratch` keeps the last sample's box.
pub fn cutmix_in_place<T: Copy>(
    batch: &mut [T],
    shape: BatchShape,
    (x1, y1, x2, y2): (usize, usize, usize, usize),
    scratch: &mut Vec<T>,
) -> Result<()> {
    shape.check(batch)?;
    if x1 > x2 || x2 > shape.width || y1 > y2 || y2 > shape.height {
        return Err(Error::invalid(
            "box",
            format!(
                "({x1}, {y1}, {x2}, {y2}) is not within {}x{}",
                shape.width, shape.height
            ),
        ));
    }
    let n = shape.sample_len();
    if shape.samples == 0 || x1 == x2 || y1 == y2 {
        return Ok(());
    }
    let rows = |sample: usize| {
        (0..shape.channels).flat_map(move |c| {
            (y1..y2).map(move |y| sample * n + (c * shape.height + y) * shape.width)
        })
    };
    scratch.clear();
    for row in rows(shape.samples - 1) {
        scratch.extend_from_slice(&batch[row + x1..row + x2]);
    }
    for i in (1..shape.samples).rev() {
        for row in rows(i) {
            batch.copy_within(row - n + x1..row - n + x2, row + x1);
        }
    }
    for (row, saved) in rows(0).zip(scratch.chunks_exact(x2 - x1)) {
        batch[row + x1..row + x2].copy_from_slice(saved);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(samples: usize) -> BatchShape {
        BatchShape {
            samples,
            channels: 2,
            height: 3,
            width: 4,
        }
    }

    fn batch(samples: usize) -> Vec<f32> {
        (0..samples * 24).map(|v| v as f32 * 1.5 + 0.25).collect()
    }

    #[test]
    fn mixup_pairs_each_sample_with_the_one_before_and_the_first_with_the_last() {
        let original = batch(3);
        let mut mixed = original.clone();
        let lam = 0.3_f64;
        mixup_in_place(&mut mixed, shape(3), lam, &mut Vec::new()).expect("a batch of its shape");
        for i in 0..3 {
            let previous = (i + 2) % 3;
            for k in 0..24 {
                let want = original[previous * 24 + k] * (1.0 - lam) as f32
                    + original[i * 24 + k] * lam as f32;
                assert_eq!(
                    mixed[i * 24 + k].to_bits(),
                    want.to_bits(),
                    "sample {i} value {k}"
                );
            }
        }
    }

    #[test]
    fn cutmix_moves_each_box_one_sample_on_and_leaves_the_rest() {
        let original = batch(3);
        let mut mixed = original.clone();
        cutmix_in_place(&mut mixed, shape(3), (1, 0, 3, 2), &mut Vec::new())
            .expect("a batch of its shape");
        for i in 0..3 {
            let previous = (i + 2) % 3;
            for c in 0..2 {
                for y in 0..3 {
                    for x in 0..4 {
                        let k = (c * 3 + y) * 4 + x;
                        let inside = (1..3).contains(&x) && y < 2;
                        let from = if inside { previous } else { i };
                        assert_eq!(
                            mixed[i * 24 + k],
                            original[from * 24 + k],
                            "{i} {c} {y} {x}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn one_sample_mixes_with_itself_and_empty_boxes_change_nothing() {
        let original = batch(1);
        let mut mixed = original.clone();
        cutmix_in_place(&mut mixed, shape(1), (0, 0, 4, 3), &mut Vec::new())
            .expect("a batch of its shape");
        assert_eq!(mixed, original);
        let mut two = batch(2);
        cutmix_in_place(&mut two, shape(2), (2, 1, 2, 3), &mut Vec::new())
            .expect("a batch of its shape");
        assert_eq!(two, batch(2));
    }

    #[test]
    fn bad_shapes_boxes_and_lambdas_are_refused() {
        let mut values = batch(2);
        assert!(mixup_in_place(&mut values, shape(3), 0.5, &mut Vec::new()).is_err());
        assert!(mixup_in_place(&mut values, shape(2), 1.5, &mut Vec::new()).is_err());
        assert!(mixup_in_place(&mut values, shape(2), f64::NAN, &mut Vec::new()).is_err());
        for bad in [(3, 0, 2, 1), (0, 0, 5, 1), (0, 2, 1, 1), (0, 0, 1, 4)] {
            assert!(cutmix_in_place(&mut values, shape(2), bad, &mut Vec::new()).is_err());
        }
        let huge = BatchShape {
            samples: usize::MAX,
            channels: 2,
            height: 1,
            width: 1,
        };
        assert!(cutmix_in_place(&mut values, huge, (0, 0, 1, 1), &mut Vec::new()).is_err());
    }
}
