//! Scripted draws: replays the values torch would have returned through [`TorchDraws`] and
//! records what was asked, so a test can inject torchvision's draws and check the ranges and
//! bounds the code under test asks for. A module of `tests/suite.rs`.

use std::collections::VecDeque;

use ferroloader_transforms::rng::TorchDraws;

/// Replays scripted draws (the values torch would have returned) and records what was asked.
#[derive(Default)]
pub struct Scripted {
    /// Uniform draws not yet taken.
    pub uniforms: VecDeque<f32>,
    /// Integer draws not yet taken.
    pub ints: VecDeque<u32>,
    /// `(from, to)` of each uniform draw.
    pub uniform_ranges: Vec<(f32, f32)>,
    /// `high` of each randint draw.
    pub int_highs: Vec<u32>,
    /// Refuse a scripted uniform outside the range asked (torch's `uniform_` returns
    /// `[from, to)`); off where a test scripts a value at a degenerate range's edge.
    check_ranges: bool,
}

impl Scripted {
    /// Replays `uniforms` for the uniform draws and `ints` for the integer ones, in order.
    pub fn new(uniforms: &[f32], ints: &[u32]) -> Self {
        Scripted {
            uniforms: uniforms.iter().copied().collect(),
            ints: ints.iter().copied().collect(),
            ..Default::default()
        }
    }

    /// [`Self::new`], and every scripted uniform must lie in the range asked.
    pub fn in_range(uniforms: &[f32], ints: &[u32]) -> Self {
        Scripted {
            check_ranges: true,
            ..Self::new(uniforms, ints)
        }
    }
}

impl TorchDraws for Scripted {
    fn uniform_f32(&mut self, from: f32, to: f32) -> f32 {
        self.uniform_ranges.push((from, to));
        let v = self
            .uniforms
            .pop_front()
            .expect("script has another uniform draw");
        // Only values torch could have drawn: `uniform_` returns [from, to).
        assert!(
            !self.check_ranges || (from..to).contains(&v),
            "{v} outside [{from}, {to})"
        );
        v
    }

    fn randint(&mut self, high: u32) -> u32 {
        self.int_highs.push(high);
        let v = self.ints.pop_front().expect("script has another int draw");
        assert!(v < high, "{v} outside [0, {high})");
        v
    }
}
