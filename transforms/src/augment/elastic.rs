//! torchvision's `ElasticTransform` displacement field (v1 `get_params`, v2 `make_params`):
//! per axis a `torch.rand(1, 1, h, w) * 2 - 1` field, blurred when that axis's sigma is
//! positive (`gaussian_blur` with a square kernel of `int(8 * sigma + 1)` made odd, the
//! sigmas `[sigma_x, sigma_y]` of both axes, reflect padding), then `* alpha / size` (the
//! width for x, the height for y). [`super::grid_sample::GridSampler::elastic`] samples the
//! image through the identity grid plus this field.
//!
//! The blur runs separably (rows with the x kernel, then columns with the y kernel), which is
//! torch's 2D convolution with the outer product of the same two 1D kernels up to float32
//! rounding (torch's `conv2d` sums its 41 x 41 taps in its own order; neither is exact). The
//! 1D kernels follow each API's formula in float32: v1
//! `exp(-0.5 * (linspace(-r, r) / sigma)^2)` normalized by its sum, v2
//! `softmax(-(linspace(-r / sqrt 2, r / sqrt 2) / sigma)^2)`.
//!
//! Must not allocate once warm (the fields and the line buffers only grow), draw from anything
//! but the generator it is handed, or panic on input (an image too small for the blur's
//! reflect padding is torch's error, returned).

use super::policy::{torch_linspace, Api};
use crate::error::{Error, Result};
use crate::rng::TorchDraws;

/// Why `ElasticTransform` refuses BICUBIC: torchvision's elastic kernel runs `grid_sample`'s
/// bicubic mode (it does not refuse it, unlike its rotate, affine and perspective kernels),
/// which [`super::grid_sample`] does not implement.
pub const ELASTIC_BICUBIC: &str =
    "bicubic: torch's grid_sample bicubic mode (which torchvision's elastic kernel runs) is not \
     implemented natively; NEAREST and BILINEAR are";

/// The most pixels a blur kernel may have (sigma up to about 65,000): a kernel wider than
/// twice the image cannot reflect anyway, so this only keeps an absurd sigma from allocating.
pub const MAX_KERNEL: u32 = 1 << 19;

/// Values past the `w * h` of each field, so the grid sampler's eight-pixel steps read
/// inside the buffer at the end of the last row.
pub const FIELD_PADDING: usize = 8;

/// `ElasticTransform(alpha, sigma)`'s parameters, checked, with the blur's 1D kernels.
#[derive(Clone, Debug, PartialEq)]
pub struct Elastic {
    alpha: [f32; 2],
    /// Per field (x then y): the row kernel (sigma x) and the column kernel (sigma y), both
    /// of the field's size; `None`: that field is not blurred.
    kernels: [Option<[Vec<f32>; 2]>; 2],
}

impl Elastic {
    /// `alpha` and `sigma` as `[x, y]`. Errors for a non-finite value, and for one sigma
    /// positive and the other not: torchvision then blurs a field with a non-positive sigma,
    /// which its `gaussian_blur` refuses ("sigma should have positive values").
    pub fn new(alpha: [f64; 2], sigma: [f64; 2], api: Api) -> Result<Self> {
        if alpha.iter().any(|a| !a.is_finite()) {
            return Err(Error::invalid(
                "alpha",
                format!("{alpha:?} must be finite numbers"),
            ));
        }
        if sigma.iter().any(|s| !s.is_finite()) {
            return Err(Error::invalid(
                "sigma",
                format!("{sigma:?} must be finite numbers"),
            ));
        }
        if (sigma[0] > 0.0) != (sigma[1] > 0.0) {
            return Err(Error::invalid(
                "sigma",
                format!(
                    "{sigma:?}: torchvision blurs each displacement with both sigmas once \
                     either is positive, and its gaussian_blur raises \"sigma should have \
                     positive values\"; give two positive sigmas or none"
                ),
            ));
        }
        let field = |s: f64| -> Result<Option<[Vec<f32>; 2]>> {
            if s <= 0.0 {
                return Ok(None);
            }
            let size = kernel_size(s)?;
            Ok(Some([
                kernel_1d(size, sigma[0], api),
                kernel_1d(size, sigma[1], api),
            ]))
        };
        Ok(Elastic {
            // `dx * alpha[0]`: torch multiplies a float32 tensor by the scalar in float32.
            alpha: [alpha[0] as f32, alpha[1] as f32],
            kernels: [field(sigma[0])?, field(sigma[1])?],
        })
    }

    /// The blur's kernel size of the x and y fields (`None`: not blurred).
    pub fn kernel_sizes(&self) -> [Option<u32>; 2] {
        self.kernels
            .each_ref()
            .map(|k| k.as_ref().map(|[row, _]| row.len() as u32))
    }

    /// An error where torch's reflect padding of the blur cannot pad an `h` x `w` field
    /// (padding must be less than the size), as every sample of that size would fail.
    pub fn check_size(&self, w: u32, h: u32) -> Result<()> {
        for k in self.kernel_sizes().into_iter().flatten() {
            let pad = k / 2;
            if pad >= w || pad >= h {
                return Err(Error::invalid(
                    "sigma",
                    format!(
                        "ElasticTransform: the displacement's {k}x{k} blur kernel pads {pad} \
                         pixels, more than the {h}x{w} (h x w) image can reflect (torch's \
                         reflect padding needs it below the size)"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// `int(8 * sigma + 1)`, made odd.
fn kernel_size(sigma: f64) -> Result<u32> {
    let k = (8.0 * sigma + 1.0).trunc();
    if k >= f64::from(MAX_KERNEL) {
        return Err(Error::invalid(
            "sigma",
            format!("{sigma}: a blur kernel of {k} pixels is too large"),
        ));
    }
    let k = k as u32;
    Ok(if k.is_multiple_of(2) { k + 1 } else { k })
}

/// torchvision's 1D Gaussian kernel of `size` taps (odd) and `sigma` (positive) in float32,
/// by `api`'s formula (see the module doc).
pub fn kernel_1d(size: u32, sigma: f64, api: Api) -> Vec<f32> {
    let s = sigma as f32;
    let half = f64::from(size - 1) * 0.5;
    match api {
        Api::V1 => {
            let pdf: Vec<f32> = (0..size)
                .map(|i| {
                    let x = torch_linspace(-half, half, size, i) / s;
                    (-0.5 * (x * x)).exp()
                })
                .collect();
            let sum: f32 = pdf.iter().sum();
            pdf.into_iter().map(|p| p / sum).collect()
        }
        Api::V2 => {
            let lim = f64::from(size - 1) / (2.0 * std::f64::consts::SQRT_2);
            let logits: Vec<f32> = (0..size)
                .map(|i| {
                    let x = torch_linspace(-lim, lim, size, i) / s;
                    -(x * x)
                })
                .collect();
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let exps: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
            let sum: f32 = exps.iter().sum();
            exps.into_iter().map(|e| e / sum).collect()
        }
    }
}

/// The displacement field of one sample, `dx` and `dy` row-major over the image (each
/// [`FIELD_PADDING`] zeros longer), and the blur's buffers; only grows.
#[derive(Debug, Default, Clone)]
pub struct ElasticField {
    dx: Vec<f32>,
    dy: Vec<f32>,
    /// The row pass's output.
    rows: Vec<f32>,
    /// One reflect-padded row.
    line: Vec<f32>,
    width: usize,
    height: usize,
}

impl ElasticField {
    /// Empty; the first draw sizes it.
    pub fn new() -> Self {
        Self::default()
    }

    /// Draws the field of a `w` x `h` image as torchvision does: `dx`'s `w * h` uniforms
    /// (row-major), its blur and scale, then `dy`'s. Errors where the blur cannot reflect
    /// ([`Elastic::check_size`]), before drawing.
    pub fn draw<D: TorchDraws + ?Sized>(
        &mut self,
        params: &Elastic,
        w: u32,
        h: u32,
        draws: &mut D,
    ) -> Result<()> {
        params.check_size(w, h)?;
        self.resize(w, h);
        let n = self.width * self.height;
        for axis in 0..2 {
            let (field, blur) = self.field_mut(axis);
            for v in &mut field[..n] {
                *v = draws.uniform_f32(0.0, 1.0) * 2.0 - 1.0;
            }
            blur.finish(params, axis, &mut field[..n]);
        }
        Ok(())
    }

    /// Sets the field of a `w` x `h` image from given uniform fields `ux` and `uy` (each
    /// `w * h` values of `torch.rand(..) * 2 - 1`, row-major), blurred and scaled as
    /// [`ElasticField::draw`] does: what parity tests compare with torchvision's
    /// `make_params` over the same uniforms.
    pub fn from_uniform(
        &mut self,
        params: &Elastic,
        w: u32,
        h: u32,
        ux: &[f32],
        uy: &[f32],
    ) -> Result<()> {
        params.check_size(w, h)?;
        let n = w as usize * h as usize;
        if ux.len() != n || uy.len() != n {
            return Err(Error::invalid(
                "displacement",
                format!(
                    "uniform fields of {} and {} values for a {h}x{w} image",
                    ux.len(),
                    uy.len()
                ),
            ));
        }
        self.resize(w, h);
        self.dx[..n].copy_from_slice(ux);
        self.dy[..n].copy_from_slice(uy);
        for axis in 0..2 {
            let (field, blur) = self.field_mut(axis);
            blur.finish(params, axis, &mut field[..n]);
        }
        Ok(())
    }

    /// Sets the field of a `w` x `h` image to a given displacement (`[h, w, 2]` row-major,
    /// x then y: torchvision's `displacement[0]`), as is. Errors for another length or a
    /// non-finite value.
    pub fn set(&mut self, w: u32, h: u32, displacement: &[f32]) -> Result<()> {
        let n = w as usize * h as usize;
        if displacement.len() != 2 * n {
            return Err(Error::invalid(
                "displacement",
                format!(
                    "{} values where a {h}x{w} image takes {} ([h, w, 2])",
                    displacement.len(),
                    2 * n
                ),
            ));
        }
        if displacement.iter().any(|v| !v.is_finite()) {
            return Err(Error::invalid("displacement", "values must be finite"));
        }
        self.resize(w, h);
        for (i, xy) in displacement.chunks_exact(2).enumerate() {
            self.dx[i] = xy[0];
            self.dy[i] = xy[1];
        }
        Ok(())
    }

    /// The x displacement, `w * h` values row-major then [`FIELD_PADDING`] zeros.
    pub fn dx(&self) -> &[f32] {
        &self.dx
    }

    /// The y displacement, laid out as [`ElasticField::dx`].
    pub fn dy(&self) -> &[f32] {
        &self.dy
    }

    /// Bytes its buffers hold on to.
    pub fn retained_bytes(&self) -> usize {
        let floats = [&self.dx, &self.dy, &self.rows, &self.line]
            .iter()
            .map(|v| v.capacity())
            .sum::<usize>();
        floats * std::mem::size_of::<f32>()
    }

    /// `(width, height)` of the field.
    pub fn size(&self) -> (u32, u32) {
        (self.width as u32, self.height as u32)
    }

    fn resize(&mut self, w: u32, h: u32) {
        let n = w as usize * h as usize;
        self.width = w as usize;
        self.height = h as usize;
        for f in [&mut self.dx, &mut self.dy] {
            f.resize(n + FIELD_PADDING, 0.0);
            f[n..].fill(0.0);
        }
    }

    /// Field `axis` (0: x, 1: y) and the blur's buffers, borrowed apart.
    fn field_mut(&mut self, axis: usize) -> (&mut Vec<f32>, Blur<'_>) {
        let field = if axis == 0 {
            &mut self.dx
        } else {
            &mut self.dy
        };
        let blur = Blur {
            rows: &mut self.rows,
            line: &mut self.line,
            width: self.width,
            height: self.height,
        };
        (field, blur)
    }
}

/// The blur's buffers and the field's size.
struct Blur<'a> {
    /// The row pass's output.
    rows: &'a mut Vec<f32>,
    /// One reflect-padded row.
    line: &'a mut Vec<f32>,
    width: usize,
    height: usize,
}

impl Blur<'_> {
    /// Blurs (when the axis's sigma is positive) and scales `field` (`w * h`; axis 0: x, by
    /// the width; 1: y, by the height).
    fn finish(mut self, params: &Elastic, axis: usize, field: &mut [f32]) {
        if let Some([row_k, col_k]) = &params.kernels[axis] {
            self.blur(field, row_k, col_k);
        }
        let alpha = params.alpha[axis];
        let size = if axis == 0 { self.width } else { self.height } as f32;
        for v in field.iter_mut() {
            *v = *v * alpha / size;
        }
    }

    /// `field` (`w * h`, row-major) convolved with `row_k` along rows and `col_k` along
    /// columns, reflect-padded by half the kernel (the caller checked it is below the size).
    fn blur(&mut self, field: &mut [f32], row_k: &[f32], col_k: &[f32]) {
        let (w, h) = (self.width, self.height);
        let (rr, rc) = (row_k.len() / 2, col_k.len() / 2);
        self.rows.resize(w * h, 0.0);
        self.line.resize(w + 2 * rr, 0.0);
        for (src, dst) in field.chunks_exact(w).zip(self.rows.chunks_exact_mut(w)) {
            for (j, l) in self.line.iter_mut().enumerate() {
                *l = src[reflect(j as isize - rr as isize, w)];
            }
            dst.fill(0.0);
            // Tap-major, so the inner loop runs along the row (vectorizes).
            for (k, &wk) in row_k.iter().enumerate() {
                for (d, &v) in dst.iter_mut().zip(&self.line[k..k + w]) {
                    *d += wk * v;
                }
            }
        }
        for (y, dst) in field.chunks_exact_mut(w).enumerate() {
            dst.fill(0.0);
            for (k, &wk) in col_k.iter().enumerate() {
                let sy = reflect(y as isize + k as isize - rc as isize, h);
                for (d, &v) in dst.iter_mut().zip(&self.rows[sy * w..sy * w + w]) {
                    *d += wk * v;
                }
            }
        }
    }
}

/// torch's `reflect` padding index (the edge not repeated) of `i` on an axis of `n`; `i` is
/// within `-(n - 1)..2n - 1` (the padding is below `n`).
#[inline]
fn reflect(i: isize, n: usize) -> usize {
    let n = n as isize;
    let r = if i < 0 {
        -i
    } else if i >= n {
        2 * (n - 1) - i
    } else {
        i
    };
    r.clamp(0, n - 1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scripted uniforms: a repeating ramp.
    struct Ramp(u32);

    impl TorchDraws for Ramp {
        fn uniform_f32(&mut self, from: f32, to: f32) -> f32 {
            self.0 = (self.0 + 7) % 97;
            from + (to - from) * self.0 as f32 / 97.0
        }
        fn randint(&mut self, high: u32) -> u32 {
            self.0 % high.max(1)
        }
    }

    #[test]
    fn kernels_are_normalized_symmetric_and_match_the_apis() {
        for api in [Api::V1, Api::V2] {
            let k = kernel_1d(41, 5.0, api);
            assert_eq!(k.len(), 41);
            let sum: f32 = k.iter().sum();
            assert!((sum - 1.0).abs() < 1e-6, "{api:?} {sum}");
            for i in 0..20 {
                assert!((k[i] - k[40 - i]).abs() < 1e-9, "{api:?} {i}");
            }
            assert!(k[20] > k[19] && k[19] > k[0]);
        }
        let (a, b) = (kernel_1d(41, 5.0, Api::V1), kernel_1d(41, 5.0, Api::V2));
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-6);
        }
        assert_eq!(kernel_size(5.0).expect("size"), 41);
        assert_eq!(kernel_size(0.5).expect("size"), 5);
        assert_eq!(kernel_size(0.25).expect("size"), 3);
        assert!(kernel_size(1e12).is_err());
    }

    #[test]
    fn refuses_bad_parameters() {
        assert!(Elastic::new([f64::NAN, 1.0], [5.0, 5.0], Api::V1).is_err());
        assert!(Elastic::new([1.0, 1.0], [5.0, 0.0], Api::V1).is_err());
        assert!(Elastic::new([1.0, 1.0], [-1.0, 5.0], Api::V2).is_err());
        assert!(Elastic::new([1.0, 1.0], [0.0, -1.0], Api::V2).is_ok());
        let e = Elastic::new([50.0, 50.0], [5.0, 5.0], Api::V1).expect("params");
        assert!(e.check_size(20, 40).is_err());
        assert!(e.check_size(21, 21).is_ok());
        let mut f = ElasticField::new();
        assert!(f.draw(&e, 20, 40, &mut Ramp(0)).is_err());
        assert!(f.set(2, 2, &[0.0; 7]).is_err());
        assert!(f.set(2, 1, &[0.0, 0.0, f32::NAN, 0.0]).is_err());
    }

    #[test]
    fn a_constant_field_blurs_to_itself_and_scales_by_alpha_over_size() {
        let e = Elastic::new([30.0, 10.0], [2.0, 3.0], Api::V2).expect("params");
        let (w, h) = (40u32, 30u32);
        let n = (w * h) as usize;
        let mut f = ElasticField::new();
        f.from_uniform(&e, w, h, &vec![0.5; n], &vec![-0.25; n])
            .expect("field");
        for &v in &f.dx()[..n] {
            assert!((v - 0.5 * 30.0 / 40.0).abs() < 1e-5, "{v}");
        }
        for &v in &f.dy()[..n] {
            assert!((v + 0.25 * 10.0 / 30.0).abs() < 1e-5, "{v}");
        }
        assert!(f.dx()[n..].iter().all(|&v| v == 0.0));
    }

    #[test]
    fn separable_blur_equals_the_direct_2d_convolution() {
        let e = Elastic::new([1.0, 1.0], [1.0, 0.6], Api::V1).expect("params");
        let (w, h) = (13usize, 11usize);
        let mut f = ElasticField::new();
        f.draw(&e, w as u32, h as u32, &mut Ramp(3)).expect("draw");
        // Redo dx's uniforms (the first w * h draws) and convolve directly in float64.
        let mut r = Ramp(3);
        let u: Vec<f64> = (0..w * h)
            .map(|_| f64::from(r.uniform_f32(0.0, 1.0) * 2.0 - 1.0))
            .collect();
        let [Some([kx, ky]), _] = &e.kernels else {
            panic!("blurred")
        };
        let (rx, ry) = (kx.len() / 2, ky.len() / 2);
        for y in 0..h {
            for x in 0..w {
                let mut s = 0.0;
                for (j, &b) in ky.iter().enumerate() {
                    for (i, &a) in kx.iter().enumerate() {
                        let sx = reflect(x as isize + i as isize - rx as isize, w);
                        let sy = reflect(y as isize + j as isize - ry as isize, h);
                        s += f64::from(a) * f64::from(b) * u[sy * w + sx];
                    }
                }
                let want = s / w as f64;
                let got = f64::from(f.dx()[y * w + x]);
                assert!((got - want).abs() < 1e-6, "({x}, {y}): {got} {want}");
            }
        }
    }

    #[test]
    fn reflect_mirrors_without_repeating_the_edge() {
        assert_eq!(reflect(-1, 5), 1);
        assert_eq!(reflect(-4, 5), 4);
        assert_eq!(reflect(5, 5), 3);
        assert_eq!(reflect(8, 5), 0);
        assert_eq!(reflect(2, 5), 2);
    }
}
