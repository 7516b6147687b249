//! torchvision v2's `MixUp` and `CutMix` on a whole batch of CHW samples, in place: each sample
//! mixed with the one before it in the batch (the batch rolled by one, the first sample taking
//! the last), as torchvision pairs them. And timm's `FastCollateMixup` on a uint8 batch
//! ([`fast_collate_mix_in_place`]): each sample mixed with its mirror (`B - 1 - i`), with its
//! own mix (per batch, pair or element) and timm's rounding back to uint8.
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

    /// Refuses a box `(x1, y1, x2, y2)` that is not within a sample.
    fn check_box(&self, (x1, y1, x2, y2): (usize, usize, usize, usize)) -> Result<()> {
        if x1 > x2 || x2 > self.width || y1 > y2 || y2 > self.height {
            return Err(Error::invalid(
                "box",
                format!(
                    "({x1}, {y1}, {x2}, {y2}) is not within {}x{}",
                    self.width, self.height
                ),
            ));
        }
        Ok(())
    }
}

/// Refuses a blend weight outside `[0, 1]`.
fn check_lam(lam: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&lam) {
        return Err(Error::invalid("lam", format!("{lam} is not in [0, 1]")));
    }
    Ok(())
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
    check_lam(lam)?;
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
    shape.check_box((x1, y1, x2, y2))?;
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

/// What one sample of timm's `FastCollateMixup` becomes, from itself and its mirror (sample
/// `B - 1 - i`), both as they were before the batch was mixed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MirrorMix {
    /// Left as it is (timm's `lam == 1`).
    Keep,
    /// `round_half_even(float32(x) * float32(lam) + float32(mirror) * float32(1 - lam))`, each
    /// product and the sum rounded to float32, as timm's `mixed.float() * lam +
    /// other.float() * (1 - lam)` then `torch.round` computes it (`lam` in `[0, 1]`).
    Blend(f64),
    /// The box `(x1, y1, x2, y2)` (columns `x1..x2`, rows `y1..y2`) taken from the mirror.
    Cut((usize, usize, usize, usize)),
}

/// timm's `FastCollateMixup` on a uint8 `batch` in place: sample `i` becomes `mixes[i]` of
/// itself and sample `B - 1 - i`, both read as they were before. `mixes` holds one mix per
/// sample, or one per sample of the first half (timm's `half` mode: the second half, the
/// mirrors, is left as it is and is not part of timm's output). Nothing is written unless every
/// mix is valid. `scratch` holds one sample where a pair both change and one is cut (reused
/// between calls).
pub fn fast_collate_mix_in_place(
    batch: &mut [u8],
    shape: BatchShape,
    mixes: &[MirrorMix],
    scratch: &mut Vec<u8>,
) -> Result<()> {
    shape.check(batch)?;
    let samples = shape.samples;
    let half = mixes.len() != samples;
    if half && mixes.len() * 2 != samples {
        return Err(Error::invalid(
            "mixes",
            format!(
                "{} mixes for {samples} samples: give one per sample or one per sample of the first half",
                mixes.len()
            ),
        ));
    }
    for mix in mixes {
        match *mix {
            MirrorMix::Keep => {}
            MirrorMix::Blend(lam) => check_lam(lam)?,
            MirrorMix::Cut(cut) => shape.check_box(cut)?,
        }
    }
    let n = shape.sample_len();
    if n == 0 {
        return Ok(());
    }
    for i in 0..samples / 2 {
        let j = samples - 1 - i;
        let (front, back) = batch.split_at_mut(j * n);
        let (a, b) = (&mut front[i * n..(i + 1) * n], &mut back[..n]);
        let mirror = if half { MirrorMix::Keep } else { mixes[j] };
        mix_pair(a, b, mixes[i], mirror, shape, scratch);
    }
    if samples % 2 == 1 {
        // The middle sample (an odd batch, which timm refuses) is its own mirror.
        let middle = samples / 2;
        if let MirrorMix::Blend(lam) = mixes[middle] {
            let (keep, take) = factors(lam);
            for x in &mut batch[middle * n..(middle + 1) * n] {
                *x = blend(*x, *x, keep, take);
            }
        }
    }
    Ok(())
}

/// Values of a pair blended a chunk at a time (a stack copy, well within L1).
const PAIR_CHUNK: usize = 1024;

/// Mixes a pair of mirrors, each from both as they were.
fn mix_pair(
    a: &mut [u8],
    b: &mut [u8],
    mix_a: MirrorMix,
    mix_b: MirrorMix,
    shape: BatchShape,
    scratch: &mut Vec<u8>,
) {
    match (mix_a, mix_b) {
        (MirrorMix::Keep, MirrorMix::Keep) => {}
        (_, MirrorMix::Keep) => mix_from(a, b, mix_a, shape),
        (MirrorMix::Keep, _) => mix_from(b, a, mix_b, shape),
        (MirrorMix::Blend(lam_a), MirrorMix::Blend(lam_b)) => {
            // One pass for both (timm's `pair` mode, and `batch`/`elem` mixups), a cache-sized
            // chunk at a time: each output is a loop of its own, which vectorizes better than
            // both in one, from a copy of the chunk of `a` it overwrites first.
            let (keep_a, take_a) = factors(lam_a);
            let (keep_b, take_b) = factors(lam_b);
            let mut saved = [0u8; PAIR_CHUNK];
            for (chunk_a, chunk_b) in a.chunks_mut(PAIR_CHUNK).zip(b.chunks_mut(PAIR_CHUNK)) {
                let old_a = &mut saved[..chunk_a.len()];
                old_a.copy_from_slice(chunk_a);
                for (x, &y) in chunk_a.iter_mut().zip(chunk_b.iter()) {
                    *x = blend(*x, y, keep_a, take_a);
                }
                for (y, &x) in chunk_b.iter_mut().zip(old_a.iter()) {
                    *y = blend(*y, x, keep_b, take_b);
                }
            }
        }
        (MirrorMix::Cut(cut), _) => {
            // `a` reads only `b`'s box: kept aside, `b` mixes from `a` as it was first.
            save_box(b, cut, shape, scratch);
            mix_from(b, a, mix_b, shape);
            restore_box(a, cut, shape, scratch);
        }
        (_, MirrorMix::Cut(cut)) => {
            save_box(a, cut, shape, scratch);
            mix_from(a, b, mix_a, shape);
            restore_box(b, cut, shape, scratch);
        }
    }
}

/// The rows of `cut` (`(x1, y1, x2, y2)`) in every channel: each row's first value's index.
fn box_rows(
    (x1, y1, _, y2): (usize, usize, usize, usize),
    shape: BatchShape,
) -> impl Iterator<Item = usize> {
    (0..shape.channels)
        .flat_map(move |c| (y1..y2).map(move |y| (c * shape.height + y) * shape.width + x1))
}

/// `scratch` becomes `sample`'s box, row after row.
fn save_box(
    sample: &[u8],
    cut: (usize, usize, usize, usize),
    shape: BatchShape,
    scratch: &mut Vec<u8>,
) {
    scratch.clear();
    for row in box_rows(cut, shape) {
        scratch.extend_from_slice(&sample[row..row + cut.2 - cut.0]);
    }
}

/// `sample`'s box becomes `saved` (as `save_box` left it).
fn restore_box(
    sample: &mut [u8],
    cut: (usize, usize, usize, usize),
    shape: BatchShape,
    saved: &[u8],
) {
    let width = cut.2 - cut.0;
    if width == 0 {
        return;
    }
    for (row, values) in box_rows(cut, shape).zip(saved.chunks_exact(width)) {
        sample[row..row + width].copy_from_slice(values);
    }
}

/// `sample` becomes `mix` of itself and `mirror`.
fn mix_from(sample: &mut [u8], mirror: &[u8], mix: MirrorMix, shape: BatchShape) {
    match mix {
        MirrorMix::Keep => {}
        MirrorMix::Blend(lam) => {
            let (keep, take) = factors(lam);
            for (x, &y) in sample.iter_mut().zip(mirror) {
                *x = blend(*x, y, keep, take);
            }
        }
        MirrorMix::Cut((x1, y1, x2, y2)) => {
            for c in 0..shape.channels {
                for y in y1..y2 {
                    let row = (c * shape.height + y) * shape.width;
                    sample[row + x1..row + x2].copy_from_slice(&mirror[row + x1..row + x2]);
                }
            }
        }
    }
}

/// timm's factors: `lam` and `1 - lam` (in double, as Python computes it, then rounded to
/// float32 as torch takes a scalar into a float32 product).
fn factors(lam: f64) -> (f32, f32) {
    (lam as f32, (1.0 - lam) as f32)
}

/// 2^23: from it up to 2^24, float32 holds the integers and only them, each `2^23 + n` with
/// `n` in its low mantissa bits.
const INTEGERS_FROM: f32 = 8_388_608.0;

/// `round_half_even(float32(x) * keep + float32(y) * take)` as uint8, as `torch.round` then
/// `.byte()`. The sum is in `[0, 255.5)` (`keep + take` is 1 within float32's rounding):
/// adding 2^23 rounds it to an integer `n`, ties to even (the default rounding mode), and
/// leaves `n` in the low byte of the bits. Unlike `f32::round_ties_even` and a cast this needs
/// no SSE4.1 instruction (a call per value without it) nor a saturating conversion, and
/// vectorizes.
#[inline]
fn blend(x: u8, y: u8, keep: f32, take: f32) -> u8 {
    let mixed = f32::from(x) * keep + f32::from(y) * take;
    (mixed + INTEGERS_FROM).to_bits() as u8
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

    fn pixels(samples: usize) -> Vec<u8> {
        (0..samples * 24).map(|v| (v * 37 % 256) as u8).collect()
    }

    fn reference(x: u8, y: u8, lam: f64) -> u8 {
        (f32::from(x) * lam as f32 + f32::from(y) * (1.0 - lam) as f32).round_ties_even() as u8
    }

    #[test]
    fn the_blend_rounds_half_to_even_as_torch_round_does() {
        for x in 0..=255u8 {
            for y in [0u8, 1, 2, 3, 127, 128, 254, 255] {
                for lam in [0.0, 0.5, 0.25, 0.75, 1.0, 0.3, 1e-9, 0.999_999_9] {
                    let (keep, take) = factors(lam);
                    assert_eq!(
                        blend(x, y, keep, take),
                        reference(x, y, lam),
                        "{x} {y} {lam}"
                    );
                }
            }
        }
        // Exact halves: 1 and 2 at one half each give 1.5, which rounds to 2; 3 and 2 give 2.5: 2.
        assert_eq!(blend(1, 2, 0.5, 0.5), 2);
        assert_eq!(blend(3, 2, 0.5, 0.5), 2);
    }

    /// Each sample of `mixes` applied to `original` one value at a time, from the originals.
    fn mixed_one_by_one(original: &[u8], mixes: &[MirrorMix]) -> Vec<u8> {
        let samples = original.len() / 24;
        let mut out = original.to_vec();
        for (i, mix) in mixes.iter().enumerate() {
            let j = samples - 1 - i;
            for k in 0..24 {
                let (x, y) = (k % 4, (k / 4) % 3);
                let (own, other) = (original[i * 24 + k], original[j * 24 + k]);
                out[i * 24 + k] = match *mix {
                    MirrorMix::Keep => own,
                    MirrorMix::Blend(lam) => reference(own, other, lam),
                    MirrorMix::Cut((x1, y1, x2, y2)) => {
                        if (x1..x2).contains(&x) && (y1..y2).contains(&y) {
                            other
                        } else {
                            own
                        }
                    }
                };
            }
        }
        out
    }

    #[test]
    fn each_sample_mixes_with_its_mirror_as_it_was() {
        use MirrorMix::{Blend, Cut, Keep};
        let batches: [&[MirrorMix]; 5] = [
            &[Blend(0.3), Cut((1, 0, 3, 2)), Keep, Blend(0.8)],
            // Every pairing of kinds, the boxes of a pair apart.
            &[
                Cut((0, 0, 2, 2)),
                Blend(0.6),
                Cut((1, 1, 4, 3)),
                Keep,
                Cut((2, 0, 3, 1)),
                Blend(0.25),
            ],
            &[
                Blend(0.6),
                Cut((0, 1, 4, 2)),
                Cut((3, 2, 4, 3)),
                Cut((0, 0, 1, 3)),
                Blend(0.1),
                Cut((0, 0, 2, 2)),
            ],
            &[Cut((0, 0, 0, 3)), Cut((0, 0, 4, 3)), Blend(0.0), Blend(1.0)],
            // Half: the mirrors kept.
            &[Cut((1, 1, 3, 3)), Blend(0.4)],
        ];
        for mixes in batches {
            let samples = if mixes.len() == 2 { 4 } else { mixes.len() };
            let original = pixels(samples);
            let mut mixed = original.clone();
            fast_collate_mix_in_place(&mut mixed, shape(samples), mixes, &mut Vec::new())
                .expect("a batch of its shape");
            assert_eq!(mixed, mixed_one_by_one(&original, mixes), "{mixes:?}");
        }
    }

    #[test]
    fn pairs_swap_their_boxes_and_half_batches_leave_the_mirrors() {
        let original = pixels(2);
        let cut = MirrorMix::Cut((0, 1, 4, 3));
        let mut swapped = original.clone();
        fast_collate_mix_in_place(&mut swapped, shape(2), &[cut, cut], &mut Vec::new())
            .expect("a batch of its shape");
        for k in 0..24 {
            let inside = (k % 12) >= 4;
            let (first, second) = if inside { (24 + k, k) } else { (k, 24 + k) };
            assert_eq!(
                (swapped[k], swapped[24 + k]),
                (original[first], original[second]),
                "{k}"
            );
        }
        let mut half = pixels(4);
        let mixes = [MirrorMix::Blend(0.5), cut];
        fast_collate_mix_in_place(&mut half, shape(4), &mixes, &mut Vec::new())
            .expect("a batch of its shape");
        assert_eq!(half[48..], pixels(4)[48..]);
        assert_eq!(half[0], reference(pixels(4)[0], pixels(4)[72], 0.5));
    }

    #[test]
    fn bad_mixes_are_refused_before_anything_is_written() {
        let mut values = pixels(4);
        let bad = [
            vec![MirrorMix::Keep; 3],
            vec![MirrorMix::Blend(0.5), MirrorMix::Blend(1.5)],
            vec![MirrorMix::Blend(0.5), MirrorMix::Blend(f64::NAN)],
            vec![MirrorMix::Blend(0.5), MirrorMix::Cut((0, 0, 5, 1))],
            vec![MirrorMix::Blend(0.5), MirrorMix::Cut((2, 0, 1, 1))],
            vec![MirrorMix::Blend(0.5), MirrorMix::Cut((0, 0, 1, 4))],
        ];
        for mixes in bad {
            assert!(
                fast_collate_mix_in_place(&mut values, shape(4), &mixes, &mut Vec::new()).is_err()
            );
            assert_eq!(values, pixels(4));
        }
        assert!(fast_collate_mix_in_place(
            &mut values,
            shape(3),
            &[MirrorMix::Keep; 3],
            &mut Vec::new()
        )
        .is_err());
    }
}
