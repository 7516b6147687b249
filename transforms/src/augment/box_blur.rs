//! Pillow's `ImageFilter.GaussianBlur(radius)` on an RGB image, bit for bit (Pillow 13's
//! `BoxBlur.c`): `ImagingGaussianBlur` turns the Gaussian's standard deviation into the radius
//! of an *extended* box (`_gaussian_blur_radius(radius, passes=3)`, float32 with a double
//! square root), then `ImagingBoxBlur` runs three horizontal box passes, then three vertical
//! ones (Pillow transposes and runs the horizontal pass; a column here is the same line), each
//! pass rounding to 8 bits.
//!
//! One pass over a line of `n` pixels with the fractional radius `r` (integer part `ri`): 24-bit
//! fixed-point weights `ww = trunc(2^24 / (2r + 1))` for the `2ri + 1` inner pixels and
//! `fw = (2^24 - (2ri + 1) * ww) / 2` for the two outer ones, a running u32 sum with the line's
//! first and last pixels repeated past its ends (also when the box is wider than the line),
//! and `(bulk + 2^23) >> 24`.
//!
//! Edge cases, as Pillow: radius 0 returns the image unchanged (`GaussianBlur.filter` copies),
//! as does a radius so small that its box radius is 0 (`r * r` underflows in float32); a box
//! wider than the image averages the repeated edge pixels; a 1-pixel line keeps its value.
//!
//! Must not: allocate once warm (the scratch lines live in [`PillowGaussianBlur`] and only
//! grow), draw random numbers, or accept a radius that is negative, not finite or absurdly
//! large (Pillow's C `int` arithmetic would overflow).

use crate::error::{Error, Result};
use crate::image::RgbImage;

/// Pillow's passes for `ImageFilter.GaussianBlur` (`ImagingGaussianBlur`'s default).
const PASSES: u32 = 3;

/// The largest radius taken: far beyond any image side, well inside Pillow's `int` sums.
pub const MAX_RADIUS: f64 = 1.0e6;

/// Pillow's `_gaussian_blur_radius(radius, passes)`: float32 throughout but for the square
/// root and the floor, which C evaluates in double (`12.0`, `1.0`, `2.0` are double literals).
pub fn gaussian_box_radius(radius: f32, passes: u32) -> f32 {
    let sigma2 = radius * radius / passes as f32;
    let big_l = (12.0 * f64::from(sigma2) + 1.0).sqrt() as f32;
    let l = ((f64::from(big_l) - 1.0) / 2.0).floor() as f32;
    let mut a = (2.0 * l + 1.0) * (l * (l + 1.0) - 3.0 * sigma2);
    a /= 6.0 * (sigma2 - (l + 1.0) * (l + 1.0));
    l + a
}

/// One box pass's fixed-point weights (`ImagingHorizontalBoxBlur`'s prologue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoxWeights {
    /// `(int)floatRadius`.
    pub radius: u32,
    /// Weight of each of the `2 * radius + 1` inner pixels, in 2^-24.
    pub ww: u32,
    /// Weight of each of the two outer pixels, in 2^-24.
    pub fw: u32,
}

impl BoxWeights {
    /// The weights for a box radius `r` (non-negative and finite; not checked here).
    pub fn new(r: f32) -> Self {
        let radius = r as u32;
        // float32 division, truncated to UINT32, as C does.
        let ww = ((1u32 << 24) as f32 / (r * 2.0 + 1.0)) as u32;
        let fw = (1u32 << 24).wrapping_sub((radius * 2 + 1).wrapping_mul(ww)) / 2;
        Self { radius, ww, fw }
    }
}

/// Pillow's `ImagingLineBoxBlur32` on packed RGB: `n = inp.len() / 3` pixels from `inp` into
/// `out` (same length, `n >= 1`). The u32 sums wrap as C's do (a pixel subtracted before its
/// successor is added); the true sum never goes negative, so the wrap cancels.
fn line_box_blur(out: &mut [u8], inp: &[u8], w: BoxWeights) {
    let n = inp.len() / 3;
    if n == 0 {
        return;
    }
    let last = n - 1;
    let r = w.radius as usize;
    // Invariants that keep every index below in 0..n: edge_a <= r + 1 and edge_a <= n,
    // edge_b + r + 1 <= n.
    let edge_a = (r + 1).min(n);
    let edge_b = n.saturating_sub(r + 1);
    for c in 0..3 {
        let px = |x: usize| u32::from(inp[3 * x + c]);
        let mut acc = px(0).wrapping_mul(w.radius.wrapping_add(1));
        for x in 0..edge_a - 1 {
            acc = acc.wrapping_add(px(x));
        }
        acc = acc.wrapping_add(px(last).wrapping_mul((r + 1 - edge_a) as u32));
        let mut step = |x: usize, sub: usize, add: usize, left: usize, right: usize| {
            acc = acc.wrapping_add(px(add)).wrapping_sub(px(sub));
            let bulk = acc
                .wrapping_mul(w.ww)
                .wrapping_add((px(left) + px(right)).wrapping_mul(w.fw));
            out[3 * x + c] = (bulk.wrapping_add(1 << 23) >> 24) as u8;
        };
        if edge_a <= edge_b {
            for x in 0..edge_a {
                step(x, 0, x + r, 0, x + r + 1);
            }
            for x in edge_a..edge_b {
                step(x, x - r - 1, x + r, x - r - 1, x + r + 1);
            }
            for x in edge_b..n {
                step(x, x - r - 1, last, x - r - 1, last);
            }
        } else {
            for x in 0..edge_b {
                step(x, 0, x + r, 0, x + r + 1);
            }
            for x in edge_b..edge_a {
                step(x, 0, last, 0, last);
            }
            for x in edge_a..n {
                step(x, x - r - 1, last, x - r - 1, last);
            }
        }
    }
}

/// Scratch of Pillow's Gaussian blur: two lines (a row or a column) that only grow.
#[derive(Clone, Debug, Default)]
pub struct PillowGaussianBlur {
    a: Vec<u8>,
    b: Vec<u8>,
}

impl PillowGaussianBlur {
    /// Empty scratch; the first blur sizes it.
    pub fn new() -> Self {
        Self::default()
    }

    /// `img.filter(ImageFilter.GaussianBlur(radius))` in place. `radius` is Python's float,
    /// narrowed to float32 as Pillow's argument parsing does. Errors on a radius that is
    /// negative, not finite or above [`MAX_RADIUS`].
    pub fn apply(&mut self, img: &mut RgbImage, radius: f64) -> Result<()> {
        if !(radius.is_finite() && (0.0..=MAX_RADIUS).contains(&radius)) {
            return Err(Error::invalid(
                "radius",
                format!("{radius}: must be finite and in [0, {MAX_RADIUS}]"),
            ));
        }
        if radius == 0.0 {
            return Ok(());
        }
        let box_radius = gaussian_box_radius(radius as f32, PASSES);
        if box_radius == 0.0 {
            // ImagingBoxBlur copies when both radii are 0 (`-0.0` included).
            return Ok(());
        }
        let weights = BoxWeights::new(box_radius);
        let (w, h) = (img.width() as usize, img.height() as usize);
        if w == 0 || h == 0 {
            return Ok(());
        }
        let side = w.max(h) * 3;
        if self.a.len() < side {
            self.a.resize(side, 0);
            self.b.resize(side, 0);
        }
        let data = img.as_raw_mut();
        let row = 3 * w;
        for y in 0..h {
            let line = &mut data[y * row..(y + 1) * row];
            let (a, b) = (&mut self.a[..row], &mut self.b[..row]);
            a.copy_from_slice(line);
            line_box_blur(b, a, weights);
            line_box_blur(a, b, weights);
            line_box_blur(line, a, weights);
        }
        let col = 3 * h;
        for x in 0..w {
            let (a, b) = (&mut self.a[..col], &mut self.b[..col]);
            for y in 0..h {
                let src = y * row + 3 * x;
                a[3 * y..3 * y + 3].copy_from_slice(&data[src..src + 3]);
            }
            line_box_blur(b, a, weights);
            line_box_blur(a, b, weights);
            line_box_blur(b, a, weights);
            for y in 0..h {
                let dst = y * row + 3 * x;
                data[dst..dst + 3].copy_from_slice(&b[3 * y..3 * y + 3]);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn radius_zero_and_tiny_leave_the_image() {
        let data: Vec<u8> = (0..5 * 4 * 3).map(|i| (i * 37 % 256) as u8).collect();
        let mut img = RgbImage::from_raw(5, 4, data.clone()).expect("image");
        let mut blur = PillowGaussianBlur::new();
        blur.apply(&mut img, 0.0).expect("blur");
        assert_eq!(img.as_raw(), &data[..]);
        blur.apply(&mut img, 1e-30).expect("blur");
        assert_eq!(img.as_raw(), &data[..]);
    }

    #[test]
    fn bad_radii_refused() {
        let mut img = RgbImage::from_raw(1, 1, vec![1, 2, 3]).expect("image");
        let mut blur = PillowGaussianBlur::new();
        for r in [-0.5, f64::NAN, f64::INFINITY, 2.0e6] {
            let e = blur.apply(&mut img, r).expect_err("refused");
            assert!(e.to_string().contains("radius"), "{e}");
        }
    }

    #[test]
    fn constant_and_one_pixel_images_keep_their_values() {
        let mut blur = PillowGaussianBlur::new();
        for (w, h) in [(1, 1), (1, 7), (9, 1), (6, 5)] {
            let data: Vec<u8> = (0..w * h).flat_map(|_| [200u8, 17, 255]).collect();
            let mut img = RgbImage::from_raw(w, h, data.clone()).expect("image");
            for r in [0.1, 1.0, 2.0, 50.0] {
                blur.apply(&mut img, r).expect("blur");
                assert_eq!(img.as_raw(), &data[..], "{w}x{h} radius {r}");
            }
        }
    }

    #[test]
    fn weights_match_pillow() {
        // _gaussian_blur_radius(2.0, 3): sigma2 = 4/3, l = 1, a = 3 * (2 - 4) / (6 * (4/3 - 4)).
        let r = gaussian_box_radius(2.0, 3);
        assert!((r - 1.375).abs() < 1e-6, "{r}");
        let w = BoxWeights::new(r);
        assert_eq!((w.radius, w.ww, w.fw), (1, 4_473_924, 1_677_722));
    }
}
