//! Pillow's `ImageFilter.GaussianBlur(radius)` on an RGB image, bit for bit (Pillow 13's
//! `BoxBlur.c`): `ImagingGaussianBlur` turns the Gaussian's standard deviation into the radius
//! of an *extended* box (`_gaussian_blur_radius(radius, passes=3)`, float32 with a double
//! square root), then `ImagingBoxBlur` runs three horizontal box passes, then three vertical
//! ones (Pillow transposes and runs the horizontal pass), each pass rounding to 8 bits.
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
//! The vertical passes run down all columns at once (one running sum per byte of a row, which
//! vectorises), where Pillow transposes: the same arithmetic per column.
//!
//! Must not: allocate once warm (the scratch rows and image copy live in
//! [`PillowGaussianBlur`] and only grow), draw random numbers, or accept a radius that is
//! negative, not finite or absurdly large (Pillow's C `int` arithmetic would overflow).

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
/// `out` (same length, `n >= 1`), the three channels side by side. The u32 sums wrap as C's
/// do (a pixel subtracted before its successor is added); the true sum never goes negative,
/// so the wrap cancels.
fn line_box_blur(out: &mut [u8], inp: &[u8], w: BoxWeights) {
    let n = inp.len() / 3;
    if n == 0 || out.len() < 3 * n {
        return;
    }
    let last = n - 1;
    let r = w.radius as usize;
    // Invariants that keep every index below in 0..n: edge_a <= r + 1 and edge_a <= n,
    // edge_b + r + 1 <= n.
    let edge_a = (r + 1).min(n);
    let edge_b = n.saturating_sub(r + 1);
    let px = |x: usize| -> [u32; 3] {
        let p = &inp[3 * x..3 * x + 3];
        [u32::from(p[0]), u32::from(p[1]), u32::from(p[2])]
    };
    let (first, end) = (px(0), px(last));
    let mut acc = [0u32; 3];
    for c in 0..3 {
        acc[c] = first[c].wrapping_mul(w.radius.wrapping_add(1));
    }
    for x in 0..edge_a - 1 {
        let p = px(x);
        for c in 0..3 {
            acc[c] = acc[c].wrapping_add(p[c]);
        }
    }
    for c in 0..3 {
        acc[c] = acc[c].wrapping_add(end[c].wrapping_mul((r + 1 - edge_a) as u32));
    }
    let step = |x: usize, sub: usize, add: usize, left: usize, right: usize| {
        let (s, a, l, rr) = (px(sub), px(add), px(left), px(right));
        let o = &mut out[3 * x..3 * x + 3];
        for c in 0..3 {
            acc[c] = acc[c].wrapping_add(a[c]).wrapping_sub(s[c]);
            o[c] = box_value(acc[c], l[c] + rr[c], w);
        }
    };
    each_position(n, r, edge_a, edge_b, step);
}

/// [`line_box_blur`] down the columns, all of them at once: `src` and `dst` hold `h` rows of
/// `row` bytes, and each byte of a row is its own line (every channel of every column), so
/// the sums run over whole rows and vectorise. Pillow transposes and blurs rows; the
/// arithmetic per line is the same.
fn vertical_box_blur(dst: &mut [u8], src: &[u8], row: usize, w: BoxWeights, acc: &mut [u32]) {
    let h = src.len().checked_div(row).unwrap_or(0);
    if h == 0 || dst.len() < h * row || acc.len() < row {
        return;
    }
    let acc = &mut acc[..row];
    let last = h - 1;
    let r = w.radius as usize;
    let edge_a = (r + 1).min(h);
    let edge_b = h.saturating_sub(r + 1);
    let line = |y: usize| &src[y * row..(y + 1) * row];
    let times = |k: u32| move |v: &u8| u32::from(*v).wrapping_mul(k);
    for (a, v) in acc
        .iter_mut()
        .zip(line(0).iter().map(times(w.radius.wrapping_add(1))))
    {
        *a = v;
    }
    for y in 0..edge_a - 1 {
        for (a, &v) in acc.iter_mut().zip(line(y)) {
            *a = a.wrapping_add(u32::from(v));
        }
    }
    let tail = (r + 1 - edge_a) as u32;
    for (a, v) in acc.iter_mut().zip(line(last).iter().map(times(tail))) {
        *a = a.wrapping_add(v);
    }
    let step = |y: usize, sub: usize, add: usize, left: usize, right: usize| {
        let out = &mut dst[y * row..(y + 1) * row];
        let lanes = out
            .iter_mut()
            .zip(acc.iter_mut())
            .zip(line(sub).iter().zip(line(add)))
            .zip(line(left).iter().zip(line(right)));
        for (((o, a), (&s, &ad)), (&l, &rr)) in lanes {
            *a = a.wrapping_add(u32::from(ad)).wrapping_sub(u32::from(s));
            *o = box_value(*a, u32::from(l) + u32::from(rr), w);
        }
    };
    each_position(h, r, edge_a, edge_b, step);
}

/// Pillow's walk along a line of `n` values with a box of radius `r`: for each position
/// `step(x, sub, add, left, right)`, the value leaving the running sum, the one entering it,
/// and the two that the fractional edges weigh, clamped to the line as `ImagingLineBoxBlur`
/// clamps them (`edge_a = min(r + 1, n)`, `edge_b = n - (r + 1)` saturated; a box wider than
/// the line repeats its ends).
fn each_position(
    n: usize,
    r: usize,
    edge_a: usize,
    edge_b: usize,
    mut step: impl FnMut(usize, usize, usize, usize, usize),
) {
    let last = n - 1;
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

/// One output value: the running sum `acc` weighted by `ww` plus the two edge values by
/// `fw`, in Pillow's wrapping 32-bit fixed point, rounded from 24 fraction bits.
#[inline(always)]
fn box_value(acc: u32, edges: u32, w: BoxWeights) -> u8 {
    let bulk = acc
        .wrapping_mul(w.ww)
        .wrapping_add(edges.wrapping_mul(w.fw));
    (bulk.wrapping_add(1 << 23) >> 24) as u8
}

/// Scratch of Pillow's Gaussian blur, which only grows: two rows, a copy of the image and a
/// row of column sums.
#[derive(Clone, Debug, Default)]
pub struct PillowGaussianBlur {
    a: Vec<u8>,
    b: Vec<u8>,
    image: Vec<u8>,
    sums: Vec<u32>,
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
        let row = 3 * w;
        if self.a.len() < row {
            self.a.resize(row, 0);
            self.b.resize(row, 0);
            self.sums.resize(row, 0);
        }
        if self.image.len() < row * h {
            self.image.resize(row * h, 0);
        }
        let data = &mut img.as_raw_mut()[..row * h];
        for line in data.chunks_exact_mut(row) {
            let (a, b) = (&mut self.a[..row], &mut self.b[..row]);
            a.copy_from_slice(line);
            line_box_blur(b, a, weights);
            line_box_blur(a, b, weights);
            line_box_blur(line, a, weights);
        }
        let (tmp, sums) = (&mut self.image[..row * h], &mut self.sums[..row]);
        vertical_box_blur(tmp, data, row, weights, sums);
        vertical_box_blur(data, tmp, row, weights, sums);
        vertical_box_blur(tmp, data, row, weights, sums);
        data.copy_from_slice(tmp);
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
