//! timm's `RandomErasing` (`timm.data.random_erasing`, what `create_transform(re_prob=,
//! re_mode=, re_count=)` appends after `Normalize`): the skip coin, the block count, and per
//! block the rectangle, drawn as timm's `_erase` draws them; the fill is the kernels' (see
//! `spec::tensor_op`).
//!
//! Reference: timm 1.0's `RandomErasing.__init__` and `_erase`, draw for draw in kind, order
//! and arithmetic (float64 as Python computes):
//!
//! | timm | here |
//! |---|---|
//! | `random.random() > probability` skips | the same comparison on a 53-bit `random()` |
//! | `randint(min_count, max_count)` (no draw when equal) | `min_count + randint(max_count - min_count + 1)` |
//! | `uniform(min_area, max_area) * area / count` | `(a + (b - a) * random()) * area / count` (CPython's `uniform`) |
//! | `exp(uniform(*log_aspect_ratio))` | the same, on `(ln min_aspect, ln max_aspect)` in that order |
//! | `int(round(sqrt(target_area * aspect)))`, `w` with `/` | `sqrt(..).round_ties_even()` (Python's `round` is half to even) |
//! | `w < img_w and h < img_h`, else the next of 10 attempts | the same (a non-finite size does not fit) |
//! | `randint(0, img_h - h)`, then `randint(0, img_w - w)` | `randint(img_h - h + 1)`, then the width's |
//!
//! The generator is the sample's (any [`TorchDraws`], [`crate::rng::SampleRng`] in the
//! loader): Python's global `random` cannot be reproduced, so distributions are what is equal
//! (python-bindings/tests/test_timm_erasing.py compares them with timm's own draws, and replays
//! the draws made here into timm's `_erase` to check the arithmetic).
//!
//! Must not touch pixels, allocate, or draw from anything but the sample's draws.

use super::single::EraseRect;
use crate::error::{Error, Result};
use crate::rng::TorchDraws;

/// The most blocks [`TimmRandomErasing`] erases per image (`max_count`): timm's recipes use 1
/// to 3; the bound keeps a sample's work bounded.
pub const MAX_TIMM_ERASE_COUNT: u32 = 64;

/// Attempts per block before timm gives it up.
const ATTEMPTS: u32 = 10;

/// What timm writes into a block (`mode`), on the normalized float32 tensor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimmEraseMode {
    /// `'const'` (timm's default): zeros.
    #[default]
    Const,
    /// `'rand'`: one standard normal per channel per block.
    Rand,
    /// `'pixel'`: one standard normal per channel per pixel.
    Pixel,
}

/// timm's `RandomErasing(probability=0.5, min_area=0.02, max_area=1/3, min_aspect=0.3,
/// max_aspect=None, mode='const', min_count=1, max_count=None)`, parameters checked.
///
/// Invariants: `probability` in `[0, 1]`; the area bounds finite and non-negative; the log
/// aspect bounds finite; `min_count <= max_count <= MAX_TIMM_ERASE_COUNT`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimmRandomErasing {
    probability: f64,
    area: (f64, f64),
    log_aspect: (f64, f64),
    mode: TimmEraseMode,
    min_count: u32,
    max_count: u32,
}

impl TimmRandomErasing {
    /// timm's constructor with its defaults resolved as it resolves them: `max_aspect` None or
    /// 0 is `1 / min_aspect`, `max_count` None or 0 is `min_count` (Python's `or`). Either
    /// range may be given high to low, as Python's `uniform` takes it.
    ///
    /// Refused (timm accepts some of these and misbehaves later): a probability outside
    /// `[0, 1]`, a negative or non-finite area bound, a non-positive or non-finite aspect
    /// (`1 / min_aspect` included), `min_count` negative or above `max_count` (timm's `randint`
    /// raises), `max_count` above [`MAX_TIMM_ERASE_COUNT`].
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        probability: f64,
        min_area: f64,
        max_area: f64,
        min_aspect: f64,
        max_aspect: Option<f64>,
        mode: TimmEraseMode,
        min_count: i64,
        max_count: Option<i64>,
    ) -> Result<Self> {
        if !(0.0..=1.0).contains(&probability) {
            return Err(Error::invalid(
                "probability",
                format!("{probability} is not a probability in [0, 1]"),
            ));
        }
        for (name, v) in [("min_area", min_area), ("max_area", max_area)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::invalid(
                    name,
                    format!("{v} is not a finite, non-negative fraction of the image"),
                ));
            }
        }
        let max_aspect = match max_aspect {
            Some(m) if m != 0.0 => m,
            _ => 1.0 / min_aspect,
        };
        for (name, v) in [("min_aspect", min_aspect), ("max_aspect", max_aspect)] {
            if !(v.is_finite() && v > 0.0 && v.ln().is_finite()) {
                return Err(Error::invalid(
                    name,
                    format!("{v} is not a finite, positive aspect ratio (with a finite log)"),
                ));
            }
        }
        let max_count = match max_count {
            Some(m) if m != 0 => m,
            _ => min_count,
        };
        if min_count < 0 || min_count > max_count {
            return Err(Error::invalid(
                "min_count",
                format!("{min_count} must be in [0, max_count = {max_count}]"),
            ));
        }
        if max_count > i64::from(MAX_TIMM_ERASE_COUNT) {
            return Err(Error::invalid(
                "max_count",
                format!("{max_count} blocks per image; at most {MAX_TIMM_ERASE_COUNT}"),
            ));
        }
        // Both counts lie in 0..=MAX_TIMM_ERASE_COUNT here.
        let count = |c: i64| u32::try_from(c).unwrap_or(MAX_TIMM_ERASE_COUNT);
        Ok(TimmRandomErasing {
            probability,
            area: (min_area, max_area),
            log_aspect: (min_aspect.ln(), max_aspect.ln()),
            mode,
            min_count: count(min_count),
            max_count: count(max_count),
        })
    }

    /// The fill mode.
    pub fn mode(&self) -> TimmEraseMode {
        self.mode
    }

    /// `(min_count, max_count)`, resolved.
    pub fn counts(&self) -> (u32, u32) {
        (self.min_count, self.max_count)
    }

    /// How many blocks this image gets: 0 when `random() > probability` skips it (one draw),
    /// else `min_count`, or `randint(min_count, max_count)` when they differ (a second draw).
    pub fn draw_count<D: TorchDraws + ?Sized>(&self, draws: &mut D) -> u32 {
        if draws.py_random() > self.probability {
            return 0;
        }
        if self.min_count == self.max_count {
            return self.min_count;
        }
        self.min_count + draws.randint(self.max_count - self.min_count + 1)
    }

    /// One block of `count` on a `width` x `height` image: up to 10 attempts of an area and
    /// aspect (two `random()` each), the first that fits drawing its top then left offsets.
    /// `None` when no attempt fits (timm then erases nothing for this block). `count` is what
    /// [`draw_count`](Self::draw_count) gave (at least 1 when called).
    pub fn draw_block<D: TorchDraws + ?Sized>(
        &self,
        width: u32,
        height: u32,
        count: u32,
        draws: &mut D,
    ) -> Option<EraseRect> {
        let area = f64::from(width) * f64::from(height);
        let uniform = |(a, b): (f64, f64), draws: &mut D| a + (b - a) * draws.py_random();
        for _ in 0..ATTEMPTS {
            let target_area = uniform(self.area, draws) * area / f64::from(count);
            let aspect = uniform(self.log_aspect, draws).exp();
            let placed = EraseRect::place(target_area, aspect, width, height, draws);
            if placed.is_some() {
                return placed;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers `random()` from a script (two `randint` draws each by default, so scripted
    /// here directly) and `randint(n)` from another.
    struct Script {
        randoms: Vec<f64>,
        ints: Vec<u32>,
    }

    impl TorchDraws for Script {
        fn uniform_f32(&mut self, from: f32, _to: f32) -> f32 {
            from
        }
        fn randint(&mut self, high: u32) -> u32 {
            let v = self.ints.remove(0);
            assert!(v < high, "scripted {v} for randint({high})");
            v
        }
        fn py_random(&mut self) -> f64 {
            self.randoms.remove(0)
        }
    }

    fn erasing(p: f64, counts: (i64, Option<i64>)) -> TimmRandomErasing {
        TimmRandomErasing::new(
            p,
            0.02,
            1.0 / 3.0,
            0.3,
            None,
            TimmEraseMode::Const,
            counts.0,
            counts.1,
        )
        .expect("valid")
    }

    #[test]
    fn the_coin_skips_above_the_probability_and_counts_draw_only_when_they_differ() {
        let mut s = Script {
            randoms: vec![0.6, 0.5, 0.1],
            ints: vec![2],
        };
        assert_eq!(erasing(0.5, (1, None)).draw_count(&mut s), 0);
        // Equal to the probability: erases (timm skips on `>`).
        assert_eq!(erasing(0.5, (1, None)).draw_count(&mut s), 1);
        assert_eq!(erasing(0.5, (1, Some(3))).draw_count(&mut s), 3);
        assert!(s.randoms.is_empty() && s.ints.is_empty());
    }

    #[test]
    fn a_block_follows_timms_arithmetic() {
        // area u = 0.5 -> 0.02 + 0.31333.. * 0.5 = 0.176666.. of 100x60 over 2 blocks = 530;
        // aspect u = 0.5 -> exp(0) = 1: h = w = round(sqrt(530)) = 23.
        let mut s = Script {
            randoms: vec![0.5, 0.5],
            ints: vec![7, 11],
        };
        let rect = erasing(1.0, (2, None)).draw_block(100, 60, 2, &mut s);
        assert_eq!(
            rect,
            Some(EraseRect {
                top: 7,
                left: 11,
                height: 23,
                width: 23
            })
        );
        assert!(s.randoms.is_empty() && s.ints.is_empty());
    }

    #[test]
    fn sizes_round_half_to_even_and_the_fit_test_is_strict() {
        // target_area * aspect = 6.25 exactly: sqrt 2.5 rounds to 2 (half to even), not 3.
        let op = TimmRandomErasing::new(
            1.0,
            0.25,
            0.25,
            1.0,
            Some(1.0),
            TimmEraseMode::Const,
            1,
            None,
        )
        .expect("valid");
        let mut s = Script {
            randoms: vec![0.0, 0.0],
            ints: vec![0, 0],
        };
        let rect = op.draw_block(5, 5, 1, &mut s).expect("fits");
        assert_eq!((rect.height, rect.width), (2, 2));
        // A block as tall as the image does not fit: all ten attempts fail, 20 draws.
        let whole = TimmRandomErasing::new(1.0, 1.0, 1.0, 1.0, None, TimmEraseMode::Const, 1, None)
            .expect("valid");
        let mut s = Script {
            randoms: vec![0.3; 20],
            ints: vec![],
        };
        assert_eq!(whole.draw_block(8, 8, 1, &mut s), None);
        assert!(s.randoms.is_empty());
    }

    #[test]
    fn defaults_resolve_as_pythons_or() {
        let a = erasing(0.5, (2, Some(0)));
        assert_eq!(a.counts(), (2, 2));
        let b =
            TimmRandomErasing::new(0.5, 0.02, 0.3, 0.5, Some(0.0), TimmEraseMode::Rand, 1, None)
                .expect("valid");
        assert_eq!(b.log_aspect, (0.5f64.ln(), 2.0f64.ln()));
    }

    #[test]
    fn bad_parameters_are_refused_by_name() {
        let refused = |r: Result<TimmRandomErasing>, name: &str| {
            let e = r.expect_err("refused").to_string();
            assert!(e.contains(&format!("`{name}`")), "{e}");
        };
        let new = |p, lo, hi, asp: f64, max_asp, lo_c, hi_c| {
            TimmRandomErasing::new(p, lo, hi, asp, max_asp, TimmEraseMode::Pixel, lo_c, hi_c)
        };
        refused(new(1.5, 0.02, 0.3, 0.3, None, 1, None), "probability");
        refused(new(0.5, -0.1, 0.3, 0.3, None, 1, None), "min_area");
        refused(new(0.5, 0.02, f64::NAN, 0.3, None, 1, None), "max_area");
        refused(new(0.5, 0.02, 0.3, 0.0, None, 1, None), "min_aspect");
        refused(new(0.5, 0.02, 0.3, 5e-324, None, 1, None), "max_aspect");
        refused(new(0.5, 0.02, 0.3, 0.3, Some(-2.0), 1, None), "max_aspect");
        refused(new(0.5, 0.02, 0.3, 0.3, None, 3, Some(2)), "min_count");
        refused(new(0.5, 0.02, 0.3, 0.3, None, -1, None), "min_count");
        refused(new(0.5, 0.02, 0.3, 0.3, None, 1, Some(65)), "max_count");
        // A reversed aspect range is timm's own default for min_aspect > 1.
        assert!(new(0.5, 0.02, 0.3, 3.0, None, 1, None).is_ok());
    }
}
