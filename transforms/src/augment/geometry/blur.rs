//! torchvision's `GaussianBlur` / `F.gaussian_blur` on a PIL image, which goes through a tensor:
//! a float32 kernel (`_get_gaussian_kernel1d`: linspace, exp, normalised by its sum), reflect
//! padding (edge not repeated), a float32 2-D convolution, `torch.round` (half to even), uint8.
//!
//! Here the convolution is separable (horizontal pass into a float32 scratch, then vertical),
//! which rounds differently from torch's 2-D kernel `ky[i] * kx[j]` summed in its own order:
//! outputs agree within one 8-bit level, almost always exactly.
//!
//! Must not: allocate once warm (the kernels and scratch rows live in [`GaussianBlur`] and only
//! grow), or accept what torch refuses (even or zero kernel sizes, non-positive sigma, a
//! padding as large as the image).

use crate::error::{Error, Result};
use crate::image::RgbImage;

/// torchvision's `_get_gaussian_kernel1d(size, sigma, torch.float32)` into `out`: positions
/// from `torch.linspace(-(size-1)/2, (size-1)/2, size)` in float32, `exp(-0.5 * (x / sigma)^2)`,
/// divided by their sum. `size` must be odd and positive and `sigma` positive (not checked
/// here; [`GaussianBlur::apply`] checks).
pub fn gaussian_kernel1d(size: u32, sigma: f64, out: &mut Vec<f32>) {
    out.clear();
    let half = f64::from(size.saturating_sub(1)) * 0.5;
    let (start, end) = (-half as f32, half as f32);
    let steps = i64::from(size);
    if steps == 1 {
        out.push(start);
    } else {
        // torch's linspace kernel: from the start for the first half, from the end after.
        let step = (end - start) / (steps - 1) as f32;
        let halfway = steps / 2;
        out.extend((0..steps).map(|i| {
            if i < halfway {
                start + step * i as f32
            } else {
                end - step * (steps - i - 1) as f32
            }
        }));
    }
    let s = sigma as f32;
    for v in out.iter_mut() {
        let t = *v / s;
        *v = (-0.5f32 * (t * t)).exp();
    }
    let sum: f32 = out.iter().sum();
    for v in out.iter_mut() {
        *v /= sum;
    }
}

/// torch's reflect padding index: `-1 -> 1`, `n -> n - 2` (valid for pads below `n`).
#[inline]
fn reflect(i: i64, n: i64) -> usize {
    let r = if i < 0 {
        -i
    } else if i >= n {
        2 * (n - 1) - i
    } else {
        i
    };
    r as usize
}

/// Reusable state of Gaussian blurs: the last kernels and float32 scratch that only grows.
#[derive(Clone, Debug, Default)]
pub struct GaussianBlur {
    /// The kernel sizes and sigma bits `kx` and `ky` were computed for.
    key: Option<([u32; 2], [u64; 2])>,
    /// Horizontal kernel (torchvision's `kernel_size[0]`, `sigma[0]`).
    kx: Vec<f32>,
    /// Vertical kernel (`kernel_size[1]`, `sigma[1]`).
    ky: Vec<f32>,
    /// One source row, reflect-padded, as float32 channels.
    padded: Vec<f32>,
    /// The horizontal pass over the whole image.
    tmp: Vec<f32>,
    /// One output row before rounding.
    acc: Vec<f32>,
}

impl GaussianBlur {
    /// Empty scratch; the first blur sizes it.
    pub fn new() -> Self {
        Self::default()
    }

    /// torchvision's `F.gaussian_blur(img, kernel_size, sigma)` on a PIL image, in place.
    ///
    /// `kernel_size` and `sigma` are `[x, y]` as torchvision takes them (a single value is the
    /// same for both; `GaussianBlur` draws one sigma for both). Errors where torch does: a
    /// kernel size that is even or zero, a sigma that is not positive and finite, or a kernel
    /// half-width not smaller than the image (`reflect` padding needs `pad < size`).
    pub fn apply(
        &mut self,
        img: &mut RgbImage,
        kernel_size: [u32; 2],
        sigma: [f64; 2],
    ) -> Result<()> {
        for k in kernel_size {
            if k % 2 == 0 {
                return Err(Error::invalid(
                    "kernel_size",
                    format!("{kernel_size:?}: sizes must be odd and positive"),
                ));
            }
        }
        for s in sigma {
            if !(s > 0.0 && s.is_finite()) {
                return Err(Error::invalid(
                    "sigma",
                    format!("{sigma:?}: sigma must be positive"),
                ));
            }
        }
        let (w, h) = (img.width(), img.height());
        let (rx, ry) = (kernel_size[0] / 2, kernel_size[1] / 2);
        if rx >= w || ry >= h {
            return Err(Error::invalid(
                "kernel_size",
                format!("{kernel_size:?} pads more than a {w}x{h} image can reflect"),
            ));
        }
        let key = (kernel_size, sigma.map(f64::to_bits));
        if self.key != Some(key) {
            gaussian_kernel1d(kernel_size[0], sigma[0], &mut self.kx);
            gaussian_kernel1d(kernel_size[1], sigma[1], &mut self.ky);
            self.key = Some(key);
        }

        let (wu, hu) = (w as usize, h as usize);
        let row_len = 3 * wu;
        let (rx, ry) = (rx as usize, ry as usize);
        self.padded.resize(3 * (wu + 2 * rx), 0.0);
        self.tmp.resize(row_len * hu, 0.0);
        self.acc.resize(row_len, 0.0);
        let pixels = img.as_raw_mut();

        for (src, out) in pixels
            .chunks_exact(row_len)
            .zip(self.tmp.chunks_exact_mut(row_len))
        {
            for (p, dst) in self.padded.chunks_exact_mut(3).enumerate() {
                let s = 3 * reflect(p as i64 - rx as i64, i64::from(w));
                for c in 0..3 {
                    dst[c] = f32::from(src[s + c]);
                }
            }
            convolve(&self.kx, |j| &self.padded[3 * j..3 * j + row_len], out);
        }

        let tmp = &self.tmp;
        for (y, out) in pixels.chunks_exact_mut(row_len).enumerate() {
            convolve(
                &self.ky,
                |i| {
                    let r = reflect(y as i64 + i as i64 - ry as i64, i64::from(h));
                    &tmp[r * row_len..(r + 1) * row_len]
                },
                &mut self.acc,
            );
            for (o, &v) in out.iter_mut().zip(&self.acc) {
                *o = round_to_u8(v);
            }
        }
        Ok(())
    }
}

/// `torch.round(v).to(torch.uint8)` for a blurred value (within [0, 255] up to rounding; clamped).
///
/// Adding and subtracting 2^23 rounds a float32 in [0, 2^22) to an integer, half to even, under
/// the default rounding mode: the same as `round_ties_even`, which on baseline x86-64 (no
/// SSE4.1) is a libm call per byte. NaN becomes 0.
#[inline]
fn round_to_u8(v: f32) -> u8 {
    const MAGIC: f32 = 8_388_608.0;
    let v = v.clamp(0.0, 255.0);
    ((v + MAGIC) - MAGIC) as u8
}

/// `out[i] = sum_j kernel[j] * tap(j)[i]`, summed in float32 in kernel order.
#[inline]
fn convolve<'a>(kernel: &[f32], tap: impl Fn(usize) -> &'a [f32], out: &mut [f32]) {
    let Some((&k0, rest)) = kernel.split_first() else {
        return;
    };
    for (o, &v) in out.iter_mut().zip(tap(0)) {
        *o = k0 * v;
    }
    for (j, &k) in rest.iter().enumerate() {
        for (o, &v) in out.iter_mut().zip(tap(j + 1)) {
            *o += k * v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_are_normalised_and_symmetric() {
        let mut k = Vec::new();
        for (size, sigma) in [(1, 1.0), (3, 0.1), (9, 2.0), (23, 5.0)] {
            gaussian_kernel1d(size, sigma, &mut k);
            assert_eq!(k.len(), size as usize);
            let sum: f32 = k.iter().sum();
            assert!((sum - 1.0).abs() < 1e-6, "{size} {sigma}: {sum}");
            for (a, b) in k.iter().zip(k.iter().rev()) {
                assert_eq!(a, b);
            }
        }
    }

    #[test]
    fn rounding_is_half_to_even_and_clamped() {
        for v in 0..=2550 {
            let v = v as f32 * 0.1;
            assert_eq!(round_to_u8(v), v.round_ties_even() as u8, "{v}");
        }
        for (v, want) in [
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (254.5, 254),
            (-0.3, 0),
            (255.4, 255),
        ] {
            assert_eq!(round_to_u8(v), want, "{v}");
        }
        assert_eq!(round_to_u8(f32::NAN), 0);
    }

    #[test]
    fn flat_image_stays_flat_and_bad_params_are_refused() {
        let mut img = RgbImage::from_raw(5, 4, vec![77; 60]).expect("sizes match");
        let mut blur = GaussianBlur::new();
        blur.apply(&mut img, [3, 7], [0.8, 2.0])
            .expect("pads 1 and 3 fit");
        assert!(img.as_raw().iter().all(|&v| v == 77));
        assert!(blur.apply(&mut img, [4, 3], [1.0, 1.0]).is_err());
        assert!(blur.apply(&mut img, [3, 3], [0.0, 1.0]).is_err());
        assert!(blur.apply(&mut img, [3, 9], [1.0, 1.0]).is_err());
    }
}
