//! timm's `AugMixAugment` mixing, for chains already run (the ops are timm's, on the PIL
//! image: `spec::stage::timm` runs them on [`TimmMixScratch::begin_chain`]'s image):
//!
//! - basic mode (`_apply_basic`): `mixed = zeros(float32)`, per chain
//!   `mixed += mw * float32(chain)` (numpy's float32: the product rounded, then the sum),
//!   `clip(mixed, 0, 255).astype(uint8)` (truncation), then `Image.blend(img, mixed, m)`;
//! - blended mode (`_apply_blended`): per chain `img = Image.blend(img, chain, w)`, every chain
//!   starting from the original image.
//!
//! [`pillow_blend`] is Pillow's `ImagingBlend` (libImaging/Blend.c) bit for bit: `alpha` is a
//! C `float`; within `[0, 1]` each value is `(UINT8)(in1 + alpha * (in2 - in1))` in float32 (a
//! product, then a sum, each rounded: Pillow's x86-64 wheels are built without FMA
//! contraction, which python-bindings/tests/test_timm_policies.py checks over every pair of
//! levels), truncated; outside it the same float clipped to 0..=255 first.
//!
//! [`TimmMixScratch`] only grows, so a warm one allocates nothing. Must not draw, know about
//! the profiler, or reorder the float operations.

use crate::error::{Error, Result};
use crate::image::RgbImage;

/// `img = Image.blend(img, other, alpha)` in place (see the module doc). Errors when the
/// sizes differ (Pillow raises `ValueError: images do not match`).
pub fn pillow_blend(img: &mut [u8], other: &[u8], alpha: f32) -> Result<()> {
    if img.len() != other.len() {
        return Err(Error::invalid(
            "image",
            format!(
                "Image.blend of {} values with {}: images do not match",
                img.len(),
                other.len()
            ),
        ));
    }
    // Pillow's two loops (interpolation, extrapolation) compute the same float; the first
    // stays within [in1, in2] (the product never exceeds |in2 - in1|) and truncates, the
    // second clips `temp <= 0` to 0 and `temp >= 255` to 255 first. Rust's saturating cast
    // does both (and maps a NaN, undefined in C, to 0).
    for (a, &b) in img.iter_mut().zip(other) {
        let a1 = f32::from(*a);
        *a = (a1 + alpha * (f32::from(b) - a1)) as u8;
    }
    Ok(())
}

/// Buffers of one timm AugMix application: the float32 mix, the chain image and (blended
/// mode) the original. Only grows.
#[derive(Debug, Default, Clone)]
pub struct TimmMixScratch {
    mix: Vec<f32>,
    chain: RgbImage,
    original: RgbImage,
}

impl TimmMixScratch {
    /// Empty; the first image sizes it.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes its buffers hold on to.
    pub fn retained_bytes(&self) -> usize {
        self.mix.capacity() * std::mem::size_of::<f32>()
            + self.chain.retained_bytes()
            + self.original.retained_bytes()
    }

    /// Basic mode: the mix becomes `np.zeros_like(img, dtype=np.float32)`.
    pub fn start_mix(&mut self, img: &RgbImage) {
        self.mix.clear();
        self.mix.resize(img.as_raw().len(), 0.0);
    }

    /// Blended mode: keeps a copy of `img`, which every chain starts from.
    pub fn keep_original(&mut self, img: &RgbImage) {
        self.original
            .reset(img.width(), img.height())
            .copy_from_slice(img.as_raw());
    }

    /// The chain image, now a copy of `img` (basic mode: every chain starts from the image).
    pub fn begin_chain(&mut self, img: &RgbImage) -> &mut RgbImage {
        self.chain
            .reset(img.width(), img.height())
            .copy_from_slice(img.as_raw());
        &mut self.chain
    }

    /// The chain image, now a copy of the image [`keep_original`](Self::keep_original) kept.
    pub fn begin_chain_from_original(&mut self) -> &mut RgbImage {
        let Self {
            chain, original, ..
        } = self;
        chain
            .reset(original.width(), original.height())
            .copy_from_slice(original.as_raw());
        chain
    }

    /// The chain image as the chain's ops left it.
    pub fn chain(&self) -> &RgbImage {
        &self.chain
    }

    /// `mixed += mw * np.asarray(chain, dtype=np.float32)`.
    pub fn add_chain(&mut self, mw: f32) -> Result<()> {
        let chain = self.chain.as_raw();
        if chain.len() != self.mix.len() {
            return Err(Error::invalid(
                "image",
                format!(
                    "a timm AugMix chain has {} values where the mix has {}",
                    chain.len(),
                    self.mix.len()
                ),
            ));
        }
        for (m, &v) in self.mix.iter_mut().zip(chain) {
            *m += mw * f32::from(v);
        }
        Ok(())
    }

    /// `Image.blend(img, Image.fromarray(clip(mixed, 0, 255).astype(uint8)), m)` into `img`
    /// (the chain image holds the truncated mix on the way).
    pub fn finish_mix(&mut self, img: &mut RgbImage, m: f32) -> Result<()> {
        let Self { mix, chain, .. } = self;
        let out = chain.reset(img.width(), img.height());
        if out.len() != mix.len() {
            return Err(Error::invalid(
                "image",
                format!(
                    "the timm AugMix mix has {} values for an image of {}",
                    mix.len(),
                    out.len()
                ),
            ));
        }
        // `as u8` saturates (the clip) and truncates toward zero (`astype`).
        for (o, &v) in out.iter_mut().zip(mix.iter()) {
            *o = v as u8;
        }
        pillow_blend(img.as_raw_mut(), chain.as_raw(), m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blend_truncates_and_clips_as_pillow() {
        // Values from Pillow 13: Image.blend of 1x1 images.
        let mut a = [10u8, 200, 0, 255];
        pillow_blend(&mut a, &[20, 100, 255, 0], 0.25).expect("same size");
        // 10 + 2.5 = 12.5 -> 12; 200 - 25 = 175; 63.75 -> 63; 255 - 63.75 = 191.25 -> 191.
        assert_eq!(a, [12, 175, 63, 191]);
        let mut b = [10u8, 200];
        pillow_blend(&mut b, &[20, 100], 1.5).expect("same size");
        // 10 + 15 = 25; 200 - 150 = 50.
        assert_eq!(b, [25, 50]);
        let mut c = [10u8, 200];
        pillow_blend(&mut c, &[250, 0], 2.0).expect("same size");
        assert_eq!(c, [255, 0], "clipped");
        // A float32 alpha whose product rounds: 0.1f32 * 10 = 1.0000000149 -> 1.
        let mut d = [0u8];
        pillow_blend(&mut d, &[10], 0.1).expect("same size");
        assert_eq!(d, [1]);
        // Where the float32 product and sum round up to a whole level that float64 misses
        // (found by search over every pair of levels; Pillow 13's outputs).
        for (alpha, a, b, want) in [
            (0.573_643_3f32, 55u8, 184u8, 129u8),
            (0.950_354_6, 141, 0, 7),
            (0.627_450_9, 97, 148, 129),
        ] {
            let mut v = [a];
            pillow_blend(&mut v, &[b], alpha).expect("same size");
            assert_eq!(v, [want], "blend({a}, {b}, {alpha})");
        }
        assert!(pillow_blend(&mut [0u8; 3], &[0u8; 6], 0.5).is_err());
    }

    #[test]
    fn the_mix_accumulates_in_float32_and_truncates() {
        let img = RgbImage::from_raw(1, 1, vec![100, 0, 255]).expect("size");
        let mut scratch = TimmMixScratch::new();
        scratch.start_mix(&img);
        scratch
            .begin_chain(&img)
            .as_raw_mut()
            .copy_from_slice(&[101, 3, 255]);
        scratch.add_chain(0.5).expect("sizes");
        scratch.begin_chain(&img);
        scratch.add_chain(0.5).expect("sizes");
        // mixed = [100.5, 1.5, 255] -> [100, 1, 255]; blend with m = 1: the mix itself.
        let mut out = img.clone();
        scratch.finish_mix(&mut out, 1.0).expect("sizes");
        assert_eq!(out.as_raw(), &[100, 1, 255]);
        let mut out = img.clone();
        scratch.finish_mix(&mut out, 0.0).expect("sizes");
        assert_eq!(out, img, "m = 0 keeps the image");
    }
}
