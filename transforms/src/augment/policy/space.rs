//! The policies' augmentation spaces: which ops each may choose (in torchvision's dict order,
//! which is what `torch.randint(len(op_meta))` indexes), whether each is signed, and its
//! magnitude bins, computed on demand rather than stored (tables depend on the bin count and
//! the image size).
//!
//! Must stay bit-exact with torch: the bins are float32 values from `torch.linspace`, whose CPU
//! kernel computes `start + step * i` (first half) or `end - step * (steps - i - 1)` (second
//! half) with one fused multiply-add each. transforms/tests/policy_draws.rs compares every bin
//! with tables written by the installed torchvision.

/// Which torchvision policy's `_augmentation_space`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AugmentationSpace {
    /// `TrivialAugmentWide`: wide ranges, image-size independent.
    TrivialAugmentWide,
    /// `RandAugment`: translations up to `150 / 331` of the image side.
    RandAugment,
    /// `AutoAugment`: as `RandAugment` without `Identity`, with `Invert`.
    AutoAugment,
    /// `AugMix`: translations up to a third of the side, Posterize 4 to 0 bits; the four
    /// enhance ops only with `all_ops`.
    AugMix {
        /// torchvision's `all_ops` (default `True`).
        all_ops: bool,
    },
}

use super::ops::OpKind;

const TRIVIAL_AND_RAND: [(OpKind, bool); 14] = [
    (OpKind::Identity, false),
    (OpKind::ShearX, true),
    (OpKind::ShearY, true),
    (OpKind::TranslateX, true),
    (OpKind::TranslateY, true),
    (OpKind::Rotate, true),
    (OpKind::Brightness, true),
    (OpKind::Color, true),
    (OpKind::Contrast, true),
    (OpKind::Sharpness, true),
    (OpKind::Posterize, false),
    (OpKind::Solarize, false),
    (OpKind::AutoContrast, false),
    (OpKind::Equalize, false),
];

const AUTO: [(OpKind, bool); 14] = [
    (OpKind::ShearX, true),
    (OpKind::ShearY, true),
    (OpKind::TranslateX, true),
    (OpKind::TranslateY, true),
    (OpKind::Rotate, true),
    (OpKind::Brightness, true),
    (OpKind::Color, true),
    (OpKind::Contrast, true),
    (OpKind::Sharpness, true),
    (OpKind::Posterize, false),
    (OpKind::Solarize, false),
    (OpKind::AutoContrast, false),
    (OpKind::Equalize, false),
    (OpKind::Invert, false),
];

/// AugMix with `all_ops`: the partial space's nine ops, then the four enhance ops.
const AUGMIX: [(OpKind, bool); 13] = [
    (OpKind::ShearX, true),
    (OpKind::ShearY, true),
    (OpKind::TranslateX, true),
    (OpKind::TranslateY, true),
    (OpKind::Rotate, true),
    (OpKind::Posterize, false),
    (OpKind::Solarize, false),
    (OpKind::AutoContrast, false),
    (OpKind::Equalize, false),
    (OpKind::Brightness, true),
    (OpKind::Color, true),
    (OpKind::Contrast, true),
    (OpKind::Sharpness, true),
];

/// `"Policy/Op"` for every op in [`OpKind::ALL`] order, as `'static` strings so that naming a
/// span per sample allocates nothing.
macro_rules! span_names {
    ($policy:literal) => {
        [
            concat!($policy, "/Identity"),
            concat!($policy, "/ShearX"),
            concat!($policy, "/ShearY"),
            concat!($policy, "/TranslateX"),
            concat!($policy, "/TranslateY"),
            concat!($policy, "/Rotate"),
            concat!($policy, "/Brightness"),
            concat!($policy, "/Color"),
            concat!($policy, "/Contrast"),
            concat!($policy, "/Sharpness"),
            concat!($policy, "/Posterize"),
            concat!($policy, "/Solarize"),
            concat!($policy, "/AutoContrast"),
            concat!($policy, "/Equalize"),
            concat!($policy, "/Invert"),
        ]
    };
}

const TRIVIAL_SPANS: [&str; 15] = span_names!("TrivialAugmentWide");
const RAND_SPANS: [&str; 15] = span_names!("RandAugment");
const AUTO_SPANS: [&str; 15] = span_names!("AutoAugment");
const AUGMIX_SPANS: [&str; 15] = span_names!("AugMix");

impl AugmentationSpace {
    /// torchvision's class name of the policy.
    pub fn policy_name(self) -> &'static str {
        match self {
            AugmentationSpace::TrivialAugmentWide => "TrivialAugmentWide",
            AugmentationSpace::RandAugment => "RandAugment",
            AugmentationSpace::AutoAugment => "AutoAugment",
            AugmentationSpace::AugMix { .. } => "AugMix",
        }
    }

    /// The profiler span name of `op` chosen by this policy, e.g.
    /// `"TrivialAugmentWide/Solarize"` (issue 20: an op chosen by a policy is named by both).
    pub fn span_name(self, op: OpKind) -> &'static str {
        let names = match self {
            AugmentationSpace::TrivialAugmentWide => &TRIVIAL_SPANS,
            AugmentationSpace::RandAugment => &RAND_SPANS,
            AugmentationSpace::AutoAugment => &AUTO_SPANS,
            AugmentationSpace::AugMix { .. } => &AUGMIX_SPANS,
        };
        let index = OpKind::ALL.iter().position(|&k| k == op).unwrap_or(0);
        names.get(index).copied().unwrap_or("")
    }

    /// The ops and their `signed` flags, in torchvision's order.
    pub fn ops(self) -> &'static [(OpKind, bool)] {
        match self {
            AugmentationSpace::TrivialAugmentWide | AugmentationSpace::RandAugment => {
                &TRIVIAL_AND_RAND
            }
            AugmentationSpace::AutoAugment => &AUTO,
            AugmentationSpace::AugMix { all_ops: true } => &AUGMIX,
            AugmentationSpace::AugMix { all_ops: false } => AUGMIX.split_at(9).0,
        }
    }

    /// Magnitude bin `bin` of `op` with `num_bins` bins on a `width` x `height` image:
    /// `float(magnitudes[bin].item())` in torchvision, before the sign.
    ///
    /// `None` where torchvision's table is a 0-d tensor (Identity, AutoContrast, Equalize,
    /// Invert: no magnitude drawn), for an op outside this space, for `bin >= num_bins`, and
    /// for `num_bins < 2` (torchvision's Posterize row divides by `num_bins - 1`; the
    /// policies' constructors refuse it).
    pub fn magnitude(
        self,
        op: OpKind,
        num_bins: u32,
        bin: u32,
        height: u32,
        width: u32,
    ) -> Option<f32> {
        if num_bins < 2 || bin >= num_bins || !self.ops().iter().any(|&(k, _)| k == op) {
            return None;
        }
        let wide = self == AugmentationSpace::TrivialAugmentWide;
        let augmix = matches!(self, AugmentationSpace::AugMix { .. });
        let lin = |end: f64| Some(torch_linspace(0.0, end, num_bins, bin));
        // The translate ends are Python floats (float64) before linspace narrows them.
        let translate_end = |side: u32| {
            if wide {
                32.0
            } else if augmix {
                f64::from(side) / 3.0
            } else {
                150.0 / 331.0 * f64::from(side)
            }
        };
        match op {
            OpKind::ShearX | OpKind::ShearY => lin(if wide { 0.99 } else { 0.3 }),
            OpKind::TranslateX => lin(translate_end(width)),
            OpKind::TranslateY => lin(translate_end(height)),
            OpKind::Rotate => lin(if wide { 135.0 } else { 30.0 }),
            OpKind::Brightness | OpKind::Color | OpKind::Contrast | OpKind::Sharpness => {
                lin(if wide { 0.99 } else { 0.9 })
            }
            OpKind::Posterize => {
                // `top - (torch.arange(n) / ((n - 1) / div)).round().int()`: the int64 arange
                // divided in float32 by the float64 divisor narrowed to float32, rounded half
                // to even.
                let (top, div) = match (wide, augmix) {
                    (true, _) => (8.0, 6.0),
                    (false, true) => (4.0, 4.0),
                    (false, false) => (8.0, 4.0),
                };
                let divisor = (f64::from(num_bins - 1) / div) as f32;
                Some(top - (bin as f32 / divisor).round_ties_even())
            }
            OpKind::Solarize => Some(torch_linspace(255.0, 0.0, num_bins, bin)),
            OpKind::Identity | OpKind::AutoContrast | OpKind::Equalize | OpKind::Invert => None,
        }
    }
}

/// Element `index` of `torch.linspace(start, end, steps)` (float32, CPU), bit for bit.
///
/// torch narrows `start` and `end` to float32, takes `step = (end - start) / (steps - 1)` in
/// float32, and computes each element with one rounding: a fused multiply-add (the compiler
/// contracts ATen's `start + step * i`). Without the fused multiply-add a few bins differ in
/// the last place (e.g. bin 19 of TrivialAugmentWide's 0.99 table), so must not be "simplified".
/// `steps < 2` gives `start`; `index` is not bounds-checked (it extends the line).
pub fn torch_linspace(start: f64, end: f64, steps: u32, index: u32) -> f32 {
    let (start, end) = (start as f32, end as f32);
    if steps < 2 {
        return start;
    }
    // ATen's int64 `steps - 1` converts exactly to float32 below 2^24 and rounds above, as here.
    let step = (end - start) / (steps - 1) as f32;
    if index < steps / 2 {
        step.mul_add(index as f32, start)
    } else {
        (-step).mul_add((steps - index - 1) as f32, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linspace_ends_are_exact() {
        assert_eq!(torch_linspace(0.0, 0.99, 31, 0), 0.0);
        assert_eq!(torch_linspace(0.0, 0.99, 31, 30), 0.99f32);
        assert_eq!(torch_linspace(255.0, 0.0, 31, 30), 0.0);
        assert_eq!(torch_linspace(3.0, 7.0, 1, 0), 3.0);
        // torch.linspace(0, 0.99, 31)[19] is 0.62700003, where
        // an unfused start + step * 19 gives 0.627.
        assert_eq!(torch_linspace(0.0, 0.99, 31, 19), 0.627_000_03);
    }

    #[test]
    fn posterize_rows() {
        let ta =
            |b| AugmentationSpace::TrivialAugmentWide.magnitude(OpKind::Posterize, 31, b, 1, 1);
        assert_eq!(ta(0), Some(8.0));
        assert_eq!(ta(30), Some(2.0));
        let mix = |b| {
            AugmentationSpace::AugMix { all_ops: true }.magnitude(OpKind::Posterize, 10, b, 1, 1)
        };
        assert_eq!(mix(0), Some(4.0));
        assert_eq!(mix(9), Some(0.0));
    }

    #[test]
    fn span_names_join_policy_and_op() {
        for space in [
            AugmentationSpace::TrivialAugmentWide,
            AugmentationSpace::RandAugment,
            AugmentationSpace::AutoAugment,
            AugmentationSpace::AugMix { all_ops: false },
        ] {
            for op in OpKind::ALL {
                assert_eq!(
                    space.span_name(op),
                    format!("{}/{}", space.policy_name(), op.name())
                );
            }
        }
    }

    #[test]
    fn outside_the_space_or_table_is_none() {
        let s = AugmentationSpace::AutoAugment;
        assert_eq!(s.magnitude(OpKind::Identity, 10, 0, 1, 1), None);
        assert_eq!(s.magnitude(OpKind::Rotate, 10, 10, 1, 1), None);
        assert_eq!(s.magnitude(OpKind::Rotate, 1, 0, 1, 1), None);
        assert_eq!(
            AugmentationSpace::AugMix { all_ops: false }.magnitude(OpKind::Color, 10, 1, 1, 1),
            None
        );
        assert_eq!(AugmentationSpace::AugMix { all_ops: false }.ops().len(), 9);
    }
}
