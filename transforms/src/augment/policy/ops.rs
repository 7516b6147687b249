//! The op vocabulary of the policies: which op, with the parameter torchvision's `_apply_op`
//! passes to the functional (`F.affine`, `F.rotate`, `F.adjust_*`, `F.posterize`, ...).
//!
//! Must not hold pixels or know how an op is carried out; the kernels match on [`PixelOp`].

/// An op a policy can choose, without its parameter; named as torchvision names it (the
/// profiler's span for an op chosen by a policy is `Policy/Name`, e.g.
/// `TrivialAugmentWide/Solarize`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum OpKind {
    /// No change.
    Identity,
    /// Horizontal shear.
    ShearX,
    /// Vertical shear.
    ShearY,
    /// Horizontal translation.
    TranslateX,
    /// Vertical translation.
    TranslateY,
    /// Rotation about the center.
    Rotate,
    /// `ImageEnhance.Brightness`.
    Brightness,
    /// `ImageEnhance.Color` (saturation).
    Color,
    /// `ImageEnhance.Contrast`.
    Contrast,
    /// `ImageEnhance.Sharpness`.
    Sharpness,
    /// Keep the top bits of each channel.
    Posterize,
    /// Invert values at or above a threshold.
    Solarize,
    /// Stretch each channel to the full range.
    AutoContrast,
    /// Histogram equalization.
    Equalize,
    /// `255 - x`.
    Invert,
}

impl OpKind {
    /// Every op, in declaration order.
    pub const ALL: [OpKind; 15] = [
        OpKind::Identity,
        OpKind::ShearX,
        OpKind::ShearY,
        OpKind::TranslateX,
        OpKind::TranslateY,
        OpKind::Rotate,
        OpKind::Brightness,
        OpKind::Color,
        OpKind::Contrast,
        OpKind::Sharpness,
        OpKind::Posterize,
        OpKind::Solarize,
        OpKind::AutoContrast,
        OpKind::Equalize,
        OpKind::Invert,
    ];

    /// torchvision's name for the op (the key of `_augmentation_space`).
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Identity => "Identity",
            OpKind::ShearX => "ShearX",
            OpKind::ShearY => "ShearY",
            OpKind::TranslateX => "TranslateX",
            OpKind::TranslateY => "TranslateY",
            OpKind::Rotate => "Rotate",
            OpKind::Brightness => "Brightness",
            OpKind::Color => "Color",
            OpKind::Contrast => "Contrast",
            OpKind::Sharpness => "Sharpness",
            OpKind::Posterize => "Posterize",
            OpKind::Solarize => "Solarize",
            OpKind::AutoContrast => "AutoContrast",
            OpKind::Equalize => "Equalize",
            OpKind::Invert => "Invert",
        }
    }

    /// The op torchvision names `name`, if any.
    pub fn from_name(name: &str) -> Option<OpKind> {
        OpKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// An op with its parameter, as torchvision's `_apply_op(img, op_name, magnitude)` hands it to
/// the functional for a PIL image. Built by [`PixelOp::from_magnitude`].
///
/// Float parameters are float64 because torchvision's are Python floats (`float(t.item())` of
/// a float32 table entry, then float64 arithmetic); a kernel that needs float32 rounds once.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub enum PixelOp {
    /// No change.
    Identity,
    /// `F.affine(angle=0, translate=[0, 0], scale=1, shear=[degrees, 0], center=[0, 0])`:
    /// note the top-left center, not the image center.
    ShearX {
        /// `math.degrees(math.atan(magnitude))`.
        degrees: f64,
    },
    /// `F.affine(..., shear=[0, degrees], center=[0, 0])`.
    ShearY {
        /// `math.degrees(math.atan(magnitude))`.
        degrees: f64,
    },
    /// `F.affine(angle=0, translate=[pixels, 0], scale=1, shear=[0, 0])` (default center).
    TranslateX {
        /// `int(magnitude)`: truncated toward zero.
        pixels: i32,
    },
    /// `F.affine(angle=0, translate=[0, pixels], scale=1, shear=[0, 0])`.
    TranslateY {
        /// `int(magnitude)`: truncated toward zero.
        pixels: i32,
    },
    /// `F.rotate(img, degrees)` (counter-clockwise, about the center, no expand).
    Rotate {
        /// The magnitude as is.
        degrees: f64,
    },
    /// `F.adjust_brightness(img, factor)`.
    Brightness {
        /// `1.0 + magnitude`.
        factor: f64,
    },
    /// `F.adjust_saturation(img, factor)` (Pillow's `ImageEnhance.Color`).
    Color {
        /// `1.0 + magnitude`.
        factor: f64,
    },
    /// `F.adjust_contrast(img, factor)`.
    Contrast {
        /// `1.0 + magnitude`.
        factor: f64,
    },
    /// `F.adjust_sharpness(img, factor)`.
    Sharpness {
        /// `1.0 + magnitude`.
        factor: f64,
    },
    /// `F.posterize(img, bits)`.
    Posterize {
        /// `int(magnitude)`, in `0..=8`.
        bits: u8,
    },
    /// `F.solarize(img, threshold)`: pixels `>= threshold` are inverted.
    Solarize {
        /// The magnitude as is (0 to 255 in v1 tables).
        threshold: f64,
    },
    /// `F.autocontrast(img)`.
    AutoContrast,
    /// `F.equalize(img)`.
    Equalize,
    /// `F.invert(img)`.
    Invert,
}

impl PixelOp {
    /// torchvision's `_apply_op` parameter mapping: the op `kind` at the (already signed)
    /// `magnitude`. Ops without a parameter ignore it.
    ///
    /// Posterize's bits are clamped to `0..=8` (torchvision's tables never leave that range;
    /// the clamp only keeps a kernel's shift in range). Translations saturate at `i32`'s range.
    pub fn from_magnitude(kind: OpKind, magnitude: f64) -> PixelOp {
        let shear = || magnitude.atan().to_degrees();
        let factor = 1.0 + magnitude;
        match kind {
            OpKind::Identity => PixelOp::Identity,
            OpKind::ShearX => PixelOp::ShearX { degrees: shear() },
            OpKind::ShearY => PixelOp::ShearY { degrees: shear() },
            // `as` truncates toward zero like Python's int() and saturates; NaN gives 0.
            OpKind::TranslateX => PixelOp::TranslateX {
                pixels: magnitude as i32,
            },
            OpKind::TranslateY => PixelOp::TranslateY {
                pixels: magnitude as i32,
            },
            OpKind::Rotate => PixelOp::Rotate { degrees: magnitude },
            OpKind::Brightness => PixelOp::Brightness { factor },
            OpKind::Color => PixelOp::Color { factor },
            OpKind::Contrast => PixelOp::Contrast { factor },
            OpKind::Sharpness => PixelOp::Sharpness { factor },
            OpKind::Posterize => PixelOp::Posterize {
                bits: magnitude.trunc().clamp(0.0, 8.0) as u8,
            },
            OpKind::Solarize => PixelOp::Solarize {
                threshold: magnitude,
            },
            OpKind::AutoContrast => PixelOp::AutoContrast,
            OpKind::Equalize => PixelOp::Equalize,
            OpKind::Invert => PixelOp::Invert,
        }
    }

    /// The op without its parameter.
    pub fn kind(&self) -> OpKind {
        match self {
            PixelOp::Identity => OpKind::Identity,
            PixelOp::ShearX { .. } => OpKind::ShearX,
            PixelOp::ShearY { .. } => OpKind::ShearY,
            PixelOp::TranslateX { .. } => OpKind::TranslateX,
            PixelOp::TranslateY { .. } => OpKind::TranslateY,
            PixelOp::Rotate { .. } => OpKind::Rotate,
            PixelOp::Brightness { .. } => OpKind::Brightness,
            PixelOp::Color { .. } => OpKind::Color,
            PixelOp::Contrast { .. } => OpKind::Contrast,
            PixelOp::Sharpness { .. } => OpKind::Sharpness,
            PixelOp::Posterize { .. } => OpKind::Posterize,
            PixelOp::Solarize { .. } => OpKind::Solarize,
            PixelOp::AutoContrast => OpKind::AutoContrast,
            PixelOp::Equalize => OpKind::Equalize,
            PixelOp::Invert => OpKind::Invert,
        }
    }
}

/// Up to `N` ops in order, inline (no heap): a policy's plan for one sample.
///
/// Only this module's draw functions push, and their constructors bound the count by `N`, so a
/// plan never silently drops an op.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OpSeq<const N: usize> {
    ops: [PixelOp; N],
    len: usize,
}

impl<const N: usize> OpSeq<N> {
    /// The most ops it holds.
    pub const CAPACITY: usize = N;

    /// No ops.
    pub const fn new() -> Self {
        OpSeq {
            ops: [PixelOp::Identity; N],
            len: 0,
        }
    }

    /// The ops, in the order to apply them.
    pub fn as_slice(&self) -> &[PixelOp] {
        self.ops.get(..self.len).unwrap_or(&[])
    }

    /// How many ops.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `op`; a full sequence ignores it (callers size `N` so that never happens).
    pub(crate) fn push(&mut self, op: PixelOp) {
        debug_assert!(self.len < N, "OpSeq<{N}> overflow");
        if let Some(slot) = self.ops.get_mut(self.len) {
            *slot = op;
            self.len += 1;
        }
    }
}

impl<const N: usize> Default for OpSeq<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a, const N: usize> IntoIterator for &'a OpSeq<N> {
    type Item = &'a PixelOp;
    type IntoIter = std::slice::Iter<'a, PixelOp>;

    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in OpKind::ALL {
            assert_eq!(OpKind::from_name(kind.name()), Some(kind));
            assert_eq!(PixelOp::from_magnitude(kind, 0.5).kind(), kind);
        }
        assert_eq!(OpKind::from_name("Cutout"), None);
    }

    #[test]
    fn parameters_follow_apply_op() {
        // math.degrees(math.atan(0.3)) in Python.
        assert_eq!(
            PixelOp::from_magnitude(OpKind::ShearX, 0.3),
            PixelOp::ShearX {
                degrees: 16.69924423399362
            }
        );
        assert_eq!(
            PixelOp::from_magnitude(OpKind::TranslateY, -12.9),
            PixelOp::TranslateY { pixels: -12 }
        );
        assert_eq!(
            PixelOp::from_magnitude(OpKind::Brightness, -0.25),
            PixelOp::Brightness { factor: 0.75 }
        );
        assert_eq!(
            PixelOp::from_magnitude(OpKind::Posterize, 6.0),
            PixelOp::Posterize { bits: 6 }
        );
        assert_eq!(
            PixelOp::from_magnitude(OpKind::Solarize, 76.5),
            PixelOp::Solarize { threshold: 76.5 }
        );
    }

    #[test]
    fn op_seq_keeps_order_and_capacity() {
        let mut seq = OpSeq::<2>::new();
        assert!(seq.is_empty());
        seq.push(PixelOp::Invert);
        seq.push(PixelOp::Equalize);
        assert_eq!(seq.as_slice(), &[PixelOp::Invert, PixelOp::Equalize]);
        assert_eq!(seq.len(), 2);
        assert_eq!((&seq).into_iter().count(), 2);
    }
}
