//! Affine warps on packed RGB with torch's tensor semantics: torchvision's `F.affine` and
//! `F.rotate` on a uint8 tensor build a sampling grid (`_gen_affine_grid`: a float32 `bmm` of
//! pixel centres with the inverse matrix divided by half the size) and sample it with
//! `grid_sample(mode, padding_mode="zeros", align_corners=False)`, optionally with a fill
//! carried through a mask channel, then *round* half to even to uint8. This is not Pillow's
//! affine (double coordinates, clamped taps, truncation) that [`super::geometry`] reproduces.
//!
//! The arithmetic follows torch's CPU kernels in float32, operation by operation: the grid
//! is `(x * a + y * b) + c` (what `bmm` computes here, checked against torch); in
//! `grid_sample`'s vectorized kernel the compiler fused its multiply-adds, so the source
//! coordinate is `fma(g + 1, size / 2, -0.5)` and the bilinear sum
//! `fma(se_v, se, fma(sw_v, sw, fma(ne_v, ne, nw_v * nw)))` with weights
//! `(1 - dy) * (1 - dx)` etc. and taps outside the image read as 0 (checked against torch
//! 2.x on AVX2/AVX-512 builds: the unfused expressions differ in the last place, which moves
//! a rounded level now and then); nearest rounds half to even. The fill blend differs between APIs: v1 `v * m + (1 - m) * fill`, v2
//! `(v - fill) * m + fill`; v2's `rotate` also returns exact copies and quarter turns for
//! angles of 0, 180 (and 90, 270 on square images) without sampling. `elastic` samples the
//! identity grid (`_create_identity_grid`'s float32 `linspace`) plus a per-pixel displacement
//! ([`super::elastic`]) through the same loop.
//!
//! The pixel loop runs eight output pixels a step on AVX2 with FMA where the CPU has them
//! (`x86`: the same operations in the same order, so the same bits; a test compares it with
//! the scalar loop on random warps), else the scalar loop below.
//!
//! BICUBIC is refused, as torchvision refuses it on tensors (`_assert_grid_transform_inputs`
//! allows nearest and bilinear only, v1 and v2 alike, AugMix included), with its message:
//! torch's `grid_sample` has a bicubic mode, but no torchvision tensor kernel reaches it.
//!
//! Must not allocate once warm (the grid's axis tables live in [`GridSampler`] and only
//! grow), reassociate the float operations or fuse others than those, draw, or panic on
//! input.

use super::elastic::{ElasticField, ELASTIC_BICUBIC, FIELD_PADDING};
use super::fma::with_fma;
use super::geometry::affine::py_mod_360;
use super::geometry::{inverse_affine_matrix, AffineMatrix, Interpolation, PerspectiveCoeffs};
use super::policy::{torch_linspace, Api};
use crate::error::{Error, Result};
use crate::image::RgbImage;

#[cfg(target_arch = "x86_64")]
mod x86;

/// torchvision's message where its tensor kernels refuse BICUBIC (torchvision 0.29's
/// `_assert_grid_transform_inputs`, for `rotate`, `affine` and `perspective`, v1 and v2).
pub const BICUBIC_ON_TENSORS: &str =
    "Interpolation mode 'bicubic' is unsupported with Tensor input";

/// How torch's `grid_sample` samples here: the modes torchvision's tensor kernels pass it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TensorMode {
    Nearest,
    Bilinear,
}

impl TensorMode {
    /// The mode of `interpolation`; BICUBIC is torchvision's error.
    fn of(interpolation: Interpolation) -> Result<Self> {
        match interpolation {
            Interpolation::Nearest => Ok(TensorMode::Nearest),
            Interpolation::Bilinear => Ok(TensorMode::Bilinear),
            Interpolation::Bicubic => Err(Error::invalid("interpolation", BICUBIC_ON_TENSORS)),
        }
    }
}

/// torchvision's tensor `fill` as the float32 triple its mask blend uses: `None` samples
/// outside the image as 0 with no mask channel (not the same as a fill of 0 under BILINEAR).
pub type TensorFill = Option<[f32; 3]>;

/// Reusable axis tables of the sampling grid; only grows.
#[derive(Debug, Default, Clone)]
pub struct GridSampler {
    xs: Vec<f32>,
    ys: Vec<f32>,
}

impl GridSampler {
    /// Empty; the first warp sizes it.
    pub fn new() -> Self {
        Self::default()
    }

    /// `F.affine(img, angle, translate, scale, shear, center)` on a uint8 tensor, into `out`
    /// (same size). `center` is in pixels (`None`: the image centre); the matrix is
    /// torchvision's `_get_inverse_affine_matrix` about `center - size / 2`.
    #[allow(clippy::too_many_arguments)]
    pub fn affine(
        &mut self,
        src: &RgbImage,
        angle: f64,
        translate: [f64; 2],
        scale: f64,
        shear: [f64; 2],
        center: Option<[f64; 2]>,
        mode: Interpolation,
        fill: TensorFill,
        api: Api,
        out: &mut RgbImage,
    ) -> Result<()> {
        let center_f = centre_offset(src, center);
        let matrix = inverse_affine_matrix(center_f, angle, translate, scale, shear);
        self.warp(src, &matrix, mode, fill, api, out)
    }

    /// `F.rotate(img, angle, center=center)` (counter-clockwise degrees, about `center` in
    /// pixels or the image centre, no expand) on a uint8 tensor, into `out` (same size). v2
    /// first takes the angle modulo 360 (Python's `%`) and, about the image centre, its
    /// shortcuts for multiples of 90 degrees (see the module doc).
    #[allow(clippy::too_many_arguments)]
    pub fn rotate(
        &mut self,
        src: &RgbImage,
        angle: f64,
        center: Option<[f64; 2]>,
        mode: Interpolation,
        fill: TensorFill,
        api: Api,
        out: &mut RgbImage,
    ) -> Result<()> {
        let angle = match api {
            Api::V1 => angle,
            Api::V2 => py_mod_360(angle),
        };
        if api == Api::V2 && center.is_none() && quarter_turn(src, angle, out) {
            return Ok(());
        }
        let center_f = centre_offset(src, center);
        let matrix = inverse_affine_matrix(center_f, -angle, [0.0, 0.0], 1.0, [0.0, 0.0]);
        self.warp(src, &matrix, mode, fill, api, out)
    }

    /// `F.perspective(img, coefficients=coeffs)` on a uint8 tensor (v1's `_perspective_grid`
    /// and v2's compute the same values): output pixel centre `(x, y)`, in pixels from the
    /// top-left corner, samples the input at
    /// `((c0 x + c1 y + c2) / (c6 x + c7 y + 1), (c3 x + c4 y + c5) / (..))`, in float32 with
    /// the numerator's coefficients divided by half the size first and `1` taken off after the
    /// division (grid coordinates). Errors as [`GridSampler::warp`] does, and for non-finite
    /// coefficients.
    pub fn perspective(
        &mut self,
        src: &RgbImage,
        coeffs: &PerspectiveCoeffs,
        mode: Interpolation,
        fill: TensorFill,
        api: Api,
        out: &mut RgbImage,
    ) -> Result<()> {
        let c = coeffs.map(|v| v as f32);
        let grid = |[half_w, half_h]: [f32; 2]| PerspectiveGrid {
            x: [c[0] / half_w, c[1] / half_w, c[2] / half_w],
            y: [c[3] / half_h, c[4] / half_h, c[5] / half_h],
            d: [c[6], c[7]],
        };
        let checked = Checked::new("coefficients", coeffs, mode, fill)?;
        self.sample(src, checked, corner_axis, grid, api, out);
        Ok(())
    }

    /// torchvision's `elastic` (v2 `elastic_image`, v1 `F_t.elastic_transform`) on a uint8
    /// tensor, into `out` (same size): the grid is the identity grid (float32
    /// `linspace((1 - n) / n, (n - 1) / n, n)` per axis) plus `field`'s displacement, added
    /// in float32, sampled as the other warps. Errors for a field of another size, a fill
    /// outside 0..=255 and BICUBIC ([`ELASTIC_BICUBIC`]: torchvision runs `grid_sample`'s
    /// bicubic mode here, not implemented).
    pub fn elastic(
        &mut self,
        src: &RgbImage,
        field: &ElasticField,
        mode: Interpolation,
        fill: TensorFill,
        api: Api,
        out: &mut RgbImage,
    ) -> Result<()> {
        let (width, height) = (src.width(), src.height());
        if field.size() != (width, height) {
            return Err(Error::invalid(
                "displacement",
                format!(
                    "a {:?} (w, h) field for a {width}x{height} (w x h) image",
                    field.size()
                ),
            ));
        }
        if mode == Interpolation::Bicubic {
            return Err(Error::invalid("interpolation", ELASTIC_BICUBIC));
        }
        let checked = Checked::new("displacement", &[], mode, fill)?;
        let n = width as usize * height as usize;
        let grid = |_| ElasticGrid {
            dx: field.dx(),
            dy: field.dy(),
            width: width as usize,
            padded: field.dx().len() >= n + FIELD_PADDING && field.dy().len() >= n + FIELD_PADDING,
        };
        self.sample(src, checked, identity_axis, grid, api, out);
        Ok(())
    }

    /// Samples `src` through the inverse map `matrix` (torchvision's centre-relative
    /// convention: output pixel centre `(x, y)` measured from the image centre maps to
    /// `(m0 x + m1 y + m2, m3 x + m4 y + m5)`), into `out` of the same size. Errors for a
    /// non-finite matrix, a fill outside 0..=255 and BICUBIC ([`BICUBIC_ON_TENSORS`]).
    pub fn warp(
        &mut self,
        src: &RgbImage,
        matrix: &AffineMatrix,
        mode: Interpolation,
        fill: TensorFill,
        api: Api,
        out: &mut RgbImage,
    ) -> Result<()> {
        // theta in float32, its transpose divided by half the size, as `_gen_affine_grid` does.
        let t = matrix.map(|v| v as f32);
        let grid = |[half_w, half_h]: [f32; 2]| AffineGrid {
            x: [t[0] / half_w, t[1] / half_w, t[2] / half_w],
            y: [t[3] / half_h, t[4] / half_h, t[5] / half_h],
        };
        let checked = Checked::new("matrix", matrix, mode, fill)?;
        self.sample(src, checked, fill_axis, grid, api, out);
        Ok(())
    }

    /// What every warp does once its arguments are checked: the axis tables (`axis` measures
    /// pixel centres from the image centre or from the top-left corner, as the warp's grid
    /// expects), the grid built from the half sizes (float64 `0.5 * w` narrowed, as torch
    /// computes them), then `src` sampled through it into `out` of the same size.
    fn sample<G: Grid>(
        &mut self,
        src: &RgbImage,
        checked: Checked,
        axis: fn(&mut Vec<f32>, u32),
        grid: impl FnOnce([f32; 2]) -> G,
        api: Api,
        out: &mut RgbImage,
    ) {
        let (width, height) = (src.width(), src.height());
        axis(&mut self.xs, width);
        axis(&mut self.ys, height);
        let grid = grid([
            (0.5 * f64::from(width)) as f32,
            (0.5 * f64::from(height)) as f32,
        ]);
        // grid_sample's unnormalize scale: float32 size over 2.
        let params = WarpParams {
            scale: [width as f32 / 2.0, height as f32 / 2.0],
            size: [width as usize, height as usize],
            mode: checked.mode,
            fill: checked.fill,
            api,
        };
        let dest = out.reset(width, height);
        sample_grid(&params, &grid, &self.xs, &self.ys, src.as_raw(), dest);
    }
}

/// A warp's mode and fill once checked, with its matrix or coefficients: only
/// [`Checked::new`] makes one, so [`GridSampler::sample`] cannot run on unchecked values.
#[derive(Clone, Copy, Debug)]
struct Checked {
    mode: TensorMode,
    fill: TensorFill,
}

impl Checked {
    /// Errors for BICUBIC ([`BICUBIC_ON_TENSORS`]), a non-finite value among `values` (named
    /// `name` in the error) and a fill outside 0..=255.
    fn new(
        name: &'static str,
        values: &[f64],
        mode: Interpolation,
        fill: TensorFill,
    ) -> Result<Self> {
        let mode = TensorMode::of(mode)?;
        if values.iter().any(|v| !v.is_finite()) {
            return Err(Error::invalid(name, format!("{values:?} is not finite")));
        }
        check_fill(fill)?;
        Ok(Checked { mode, fill })
    }
}

/// `center` (pixels) as torchvision's tensor kernels measure it: from the image centre
/// (`c - size * 0.5`); `None` is the centre itself.
fn centre_offset(src: &RgbImage, center: Option<[f64; 2]>) -> [f64; 2] {
    let (w, h) = (f64::from(src.width()), f64::from(src.height()));
    center.map_or([0.0, 0.0], |[cx, cy]| [cx - w * 0.5, cy - h * 0.5])
}

/// A fill must be within 0..=255 (torch would wrap it when casting back to uint8).
fn check_fill(fill: TensorFill) -> Result<()> {
    if let Some(f) = fill {
        if f.iter().any(|v| !(0.0..=255.0).contains(v)) {
            return Err(Error::invalid(
                "fill",
                format!("{f:?} is not within 0..=255"),
            ));
        }
    }
    Ok(())
}

/// An affine sampling grid in float32: the rows `x` and `y` are `(a, b, c)` with
/// `g = (x a + y b) + c` (what `bmm` computes here, checked against torch), `x` and `y` the
/// pixel centres measured from the image centre.
#[derive(Clone, Copy, Debug)]
struct AffineGrid {
    x: [f32; 3],
    y: [f32; 3],
}

impl Grid for AffineGrid {
    #[inline(always)]
    fn at(&self, x: f32, y: f32, _ox: usize, _oy: usize) -> (f32, f32) {
        let [ax, bx, cx] = self.x;
        let [ay, by, cy] = self.y;
        (x * ax + y * bx + cx, x * ay + y * by + cy)
    }
}

/// `_perspective_grid`'s arithmetic in float32: two `bmm`s of the pixel centres measured from
/// the top-left corner (`(x a + y b) + c`, as the affine grid), the first divided by the
/// second, minus 1.
#[derive(Clone, Copy, Debug)]
struct PerspectiveGrid {
    /// `(c0, c1, c2) / (w / 2)`.
    x: [f32; 3],
    /// `(c3, c4, c5) / (h / 2)`.
    y: [f32; 3],
    /// `(c6, c7)`.
    d: [f32; 2],
}

impl Grid for PerspectiveGrid {
    #[inline(always)]
    fn at(&self, x: f32, y: f32, _ox: usize, _oy: usize) -> (f32, f32) {
        let [ax, bx, cx] = self.x;
        let [ay, by, cy] = self.y;
        let [g, h] = self.d;
        let den = x * g + y * h + 1.0;
        (
            (x * ax + y * bx + cx) / den - 1.0,
            (x * ay + y * by + cy) / den - 1.0,
        )
    }
}

/// The elastic grid: the identity grid's `(x, y)` (from the axis tables) plus the pixel's
/// displacement, one float32 addition each (`_create_identity_grid(..).add_(displacement)`).
#[derive(Clone, Copy, Debug)]
struct ElasticGrid<'a> {
    /// Row-major `w * h` displacements (`padded`: at least [`FIELD_PADDING`] more values).
    dx: &'a [f32],
    dy: &'a [f32],
    width: usize,
    padded: bool,
}

impl Grid for ElasticGrid<'_> {
    #[inline(always)]
    fn at(&self, x: f32, y: f32, ox: usize, oy: usize) -> (f32, f32) {
        let i = oy * self.width + ox;
        // Always inside (the field was checked against the image's size); a NaN would sample
        // as outside the image rather than panic.
        let d = |f: &[f32]| f.get(i).copied().unwrap_or(f32::NAN);
        (x + d(self.dx), y + d(self.dy))
    }

    fn vectors(&self) -> bool {
        self.padded
    }
}

/// A warp's float32 constants: grid_sample's unnormalize scales, the image size and how to
/// sample.
#[derive(Clone, Copy, Debug)]
struct WarpParams {
    scale: [f32; 2],
    size: [usize; 2],
    mode: TensorMode,
    fill: TensorFill,
    api: Api,
}

/// A sampling grid: normalized source coordinates of output pixel `(ox, oy)`, centred at
/// `(x, y)` (from the axis tables), and on x86-64 the same eight columns at a time.
trait Grid: VectorGrid {
    fn at(&self, x: f32, y: f32, ox: usize, oy: usize) -> (f32, f32);

    /// Whether the eight-column kernel may evaluate this grid (its buffers are padded).
    fn vectors(&self) -> bool {
        true
    }
}

#[cfg(target_arch = "x86_64")]
trait VectorGrid: x86::Grid8 {}
#[cfg(target_arch = "x86_64")]
impl<T: x86::Grid8> VectorGrid for T {}
#[cfg(not(target_arch = "x86_64"))]
trait VectorGrid {}
#[cfg(not(target_arch = "x86_64"))]
impl<T> VectorGrid for T {}

/// [`sample_rows`] of `grid` over the axis tables `xs` and `ys` (`xs` padded past the width
/// to a multiple of 8): on AVX2 with FMA where the CPU has them and the sizes fit (the same
/// bits), else the scalar loop with hardware fused multiply-adds where the CPU has them.
fn sample_grid<G: Grid>(
    p: &WarpParams,
    grid: &G,
    xs: &[f32],
    ys: &[f32],
    source: &[u8],
    dest: &mut [u8],
) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::avx2_fma()
        && grid.vectors()
        && dest.len() == source.len()
        && x86::fits(p.size[0], p.size[1], source.len(), xs.len(), ys.len())
    {
        // SAFETY: the kernel's requirements, all checked just above: the CPU has AVX2 and
        // FMA, `fits` holds and `dest` is as long as `source`.
        unsafe { x86::sample_rows_avx2(p, grid, xs, ys, source, dest) };
        return;
    }
    sample_rows_scalar(p, grid, xs, ys, source, dest);
}

/// [`sample_rows`] of `grid`, with hardware fused multiply-adds where the CPU has them.
fn sample_rows_scalar<G: Grid>(
    p: &WarpParams,
    grid: &G,
    xs: &[f32],
    ys: &[f32],
    source: &[u8],
    dest: &mut [u8],
) {
    with_fma(|| sample_rows(p, |ox, oy| grid.at(xs[ox], ys[oy], ox, oy), source, dest));
}

/// The pixel loop of the warps: every output pixel `(ox, oy)` of `dest` (packed RGB of
/// `p.size`) sampled from `source` (the same size) at its grid point `grid(ox, oy)`
/// (normalized: -1 and 1 are the outer edges).
#[inline(always)]
fn sample_rows(
    p: &WarpParams,
    grid: impl Fn(usize, usize) -> (f32, f32),
    source: &[u8],
    dest: &mut [u8],
) {
    let [scale_x, scale_y] = p.scale;
    let [w, h] = p.size;
    let (mode, fill, api) = (p.mode, p.fill, p.api);
    let stride = 3 * w;
    let tap = |x: i64, y: i64| -> Option<usize> {
        (x >= 0 && y >= 0 && (x as usize) < w && (y as usize) < h)
            .then(|| y as usize * stride + 3 * x as usize)
    };
    for (oy, row) in dest.chunks_exact_mut(stride).enumerate() {
        for (ox, px) in row.chunks_exact_mut(3).enumerate() {
            let (gx, gy) = grid(ox, oy);
            let ix = (gx + 1.0).mul_add(scale_x, -0.5);
            let iy = (gy + 1.0).mul_add(scale_y, -0.5);
            match mode {
                TensorMode::Nearest => {
                    let at = tap(ix.round_ties_even() as i64, iy.round_ties_even() as i64);
                    for c in 0..3 {
                        let v = match (at, fill) {
                            (Some(i), _) => f32::from(source[i + c]),
                            (None, Some(f)) => f[c],
                            (None, None) => 0.0,
                        };
                        px[c] = round_u8(v);
                    }
                }
                TensorMode::Bilinear => {
                    let (x0, y0) = (ix.floor(), iy.floor());
                    let (dx, dy) = (ix - x0, iy - y0);
                    let (ex, sy) = (1.0 - dx, 1.0 - dy);
                    let weights = [sy * ex, sy * dx, dy * ex, dy * dx];
                    // A far-off coordinate saturates to i64's ends (out of the image either
                    // way): its neighbour must not overflow.
                    let (xi, yi) = (x0 as i64, y0 as i64);
                    let (xj, yj) = (xi.saturating_add(1), yi.saturating_add(1));
                    let taps = [tap(xi, yi), tap(xj, yi), tap(xi, yj), tap(xj, yj)];
                    let sum = |value: &dyn Fn(usize) -> f32| {
                        let v = |k: usize| taps[k].map_or(0.0, value);
                        let acc = v(0) * weights[0];
                        let acc = v(1).mul_add(weights[1], acc);
                        let acc = v(2).mul_add(weights[2], acc);
                        v(3).mul_add(weights[3], acc)
                    };
                    let mask = fill.map(|_| sum(&|_| 1.0));
                    for c in 0..3 {
                        let v = sum(&|i| f32::from(source[i + c]));
                        let v = match (fill, mask) {
                            (Some(f), Some(m)) => match api {
                                Api::V1 => v * m + (1.0 - m) * f[c],
                                Api::V2 => (v - f[c]) * m + f[c],
                            },
                            _ => v,
                        };
                        px[c] = round_u8(v);
                    }
                }
            }
        }
    }
}

/// `torch.linspace((1 - n) / 2, (n - 1) / 2, n)`: the pixel centres of one axis, measured
/// from the image centre (v1's `-n * 0.5 + 0.5` and `n * 0.5 + 0.5 - 1` are the same
/// float64 values).
fn fill_axis(axis: &mut Vec<f32>, n: u32) {
    axis.clear();
    let (start, end) = ((1.0 - f64::from(n)) * 0.5, (f64::from(n) - 1.0) * 0.5);
    axis.extend((0..n).map(|i| torch_linspace(start, end, n, i)));
    pad_axis(axis);
}

/// `torch.linspace((-n + 1) / n, (n - 1) / n, n)`: `_create_identity_grid`'s normalized
/// pixel centres of one axis (v1's and v2's are the same float64 bounds).
fn identity_axis(axis: &mut Vec<f32>, n: u32) {
    axis.clear();
    let nf = f64::from(n);
    let (start, end) = ((1.0 - nf) / nf, (nf - 1.0) / nf);
    axis.extend((0..n).map(|i| torch_linspace(start, end, n, i)));
    pad_axis(axis);
}

/// `torch.linspace(0.5, n - 0.5, n)`: the pixel centres of one axis measured from the
/// top-left corner (`_perspective_grid`'s).
fn corner_axis(axis: &mut Vec<f32>, n: u32) {
    axis.clear();
    let (start, end) = (0.5, f64::from(n) - 0.5);
    axis.extend((0..n).map(|i| torch_linspace(start, end, n, i)));
    pad_axis(axis);
}

/// Zeros past an axis table's end up to a multiple of 8 values: the vector kernel's last step
/// reads whole vectors (its lanes past the width are not stored).
fn pad_axis(axis: &mut Vec<f32>) {
    axis.resize(axis.len().div_ceil(8) * 8, 0.0);
}

/// `torch.round(v).to(torch.uint8)` for the values a warp produces (within 0..=255 up to
/// float32 rounding): half to even, then clamped so a sum that rounded above 255 stays 255.
#[inline]
fn round_u8(v: f32) -> u8 {
    v.round_ties_even().clamp(0.0, 255.0) as u8
}

/// v2 `rotate_image`'s shortcuts (`angle % 360` of 0 or 180, or 90 and 270 on a square
/// image: `torch.rot90`), into `out`; false when none applies.
fn quarter_turn(src: &RgbImage, angle: f64, out: &mut RgbImage) -> bool {
    let angle = angle.rem_euclid(360.0);
    let (width, height) = (src.width(), src.height());
    let square = width == height;
    let turns = if angle == 0.0 {
        0
    } else if angle == 180.0 {
        2
    } else if square && angle == 90.0 {
        1
    } else if square && angle == 270.0 {
        3
    } else {
        return false;
    };
    let (w, h) = (width as usize, height as usize);
    let source = src.as_raw();
    let dest = out.reset(width, height);
    for (y, row) in dest.chunks_exact_mut(3 * w).enumerate() {
        for (x, px) in row.chunks_exact_mut(3).enumerate() {
            // torch.rot90 with k counter-clockwise quarter turns over (H, W).
            let (sx, sy) = match turns {
                0 => (x, y),
                1 => (w - 1 - y, x),
                2 => (w - 1 - x, h - 1 - y),
                _ => (y, h - 1 - x),
            };
            let i = 3 * (sy * w + sx);
            px.copy_from_slice(&source[i..i + 3]);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(w: u32, h: u32) -> RgbImage {
        let data = (0..w * h * 3).map(|i| (i * 7 % 251) as u8).collect();
        RgbImage::from_raw(w, h, data).expect("image")
    }

    #[test]
    fn identity_keeps_pixels() {
        let src = ramp(9, 7);
        let mut out = RgbImage::new();
        let mut g = GridSampler::new();
        for mode in [Interpolation::Nearest, Interpolation::Bilinear] {
            for fill in [None, Some([10.0, 20.0, 30.0])] {
                g.affine(
                    &src,
                    0.0,
                    [0.0, 0.0],
                    1.0,
                    [0.0, 0.0],
                    None,
                    mode,
                    fill,
                    Api::V1,
                    &mut out,
                )
                .expect("warp");
                assert_eq!(out.as_raw(), src.as_raw(), "{mode:?} {fill:?}");
            }
        }
    }

    #[test]
    fn translation_fills_the_uncovered_columns() {
        let src = ramp(6, 4);
        let mut out = RgbImage::new();
        let mut g = GridSampler::new();
        let fill = Some([1.0, 2.0, 3.0]);
        g.affine(
            &src,
            0.0,
            [2.0, 0.0],
            1.0,
            [0.0, 0.0],
            None,
            Interpolation::Nearest,
            fill,
            Api::V1,
            &mut out,
        )
        .expect("warp");
        for y in 0..4usize {
            let row = &out.as_raw()[y * 18..(y + 1) * 18];
            assert_eq!(&row[..6], &[1, 2, 3, 1, 2, 3]);
            assert_eq!(&row[6..], &src.as_raw()[y * 18..y * 18 + 12]);
        }
    }

    #[test]
    fn quarter_turns_match_rot90() {
        // 2x2 [[a, b], [c, d]] turned once counter-clockwise is [[b, d], [a, c]].
        let src = RgbImage::from_raw(2, 2, vec![1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]).expect("img");
        let mut out = RgbImage::new();
        assert!(quarter_turn(&src, 90.0, &mut out));
        assert_eq!(out.as_raw(), &[2, 2, 2, 4, 4, 4, 1, 1, 1, 3, 3, 3]);
        assert!(quarter_turn(&src, -90.0, &mut out));
        assert_eq!(out.as_raw(), &[3, 3, 3, 1, 1, 1, 4, 4, 4, 2, 2, 2]);
        assert!(!quarter_turn(&src, 30.0, &mut out));
    }

    #[test]
    fn fma_build_equals_the_baseline() {
        let src = ramp(23, 17);
        let mut g = GridSampler::new();
        fill_axis(&mut g.xs, 23);
        fill_axis(&mut g.ys, 17);
        for mode in [TensorMode::Nearest, TensorMode::Bilinear] {
            for (fill, api) in [(None, Api::V1), (Some([9.5, 0.0, 255.0]), Api::V2)] {
                let grid = AffineGrid {
                    x: [0.93, -0.21, 0.07],
                    y: [0.19, 1.04, -0.13],
                };
                let p = WarpParams {
                    scale: [11.5, 8.5],
                    size: [23, 17],
                    mode,
                    fill,
                    api,
                };
                let mut base = vec![0u8; src.as_raw().len()];
                let mut fast = base.clone();
                sample_rows(
                    &p,
                    |ox, oy| grid.at(g.xs[ox], g.ys[oy], ox, oy),
                    src.as_raw(),
                    &mut base,
                );
                sample_rows_scalar(&p, &grid, &g.xs, &g.ys, src.as_raw(), &mut fast);
                assert_eq!(base, fast, "{mode:?} {fill:?}");
            }
        }
    }

    /// Fixed-seed random warps, drawn from the crate's generator.
    struct Cases(rand_pcg::Pcg64);

    impl Cases {
        fn next(&mut self) -> u64 {
            rand::RngCore::next_u64(&mut self.0)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        /// Uniform in `-r..r`.
        fn uniform(&mut self, r: f64) -> f64 {
            ((self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * r
        }

        /// A matrix or coefficient value: mostly moderate, sometimes an edge (0, 1, a half,
        /// huge or tiny).
        fn value(&mut self, typical: f64) -> f64 {
            const EDGES: [f64; 7] = [0.0, 1.0, -1.0, 0.5, 1e30, -1e-30, 3.0e9];
            match self.below(12) {
                k @ 0..=6 => EDGES[k as usize],
                _ => self.uniform(typical),
            }
        }

        fn fill(&mut self) -> TensorFill {
            match self.below(4) {
                0 => None,
                1 => Some([0.0, 255.0, 128.0]),
                2 => Some([9.5, 0.5, 254.5]),
                _ => Some([0, 1, 2].map(|_| (self.below(2551) as f32) / 10.0)),
            }
        }

        fn image(&mut self, w: u32, h: u32) -> RgbImage {
            let two_level = self.below(3) == 0;
            let data = (0..3 * w * h)
                .map(|_| {
                    let v = self.next();
                    match (two_level, v % 2) {
                        (true, 0) => 0,
                        (true, _) => 255,
                        (false, _) => (v >> 8) as u8,
                    }
                })
                .collect();
            RgbImage::from_raw(w, h, data).expect("sized")
        }
    }

    #[test]
    fn vector_warps_equal_the_scalar_loop_bit_for_bit() {
        #[cfg(target_arch = "x86_64")]
        if !crate::cpu::avx2_fma() {
            return; // no AVX2 and FMA here: nothing to compare
        }
        #[cfg(not(target_arch = "x86_64"))]
        return;
        #[cfg(target_arch = "x86_64")]
        {
            let mut rng = Cases(rand::SeedableRng::seed_from_u64(0x5eed_9a1d));
            let sizes = [
                (1, 2),
                (2, 1),
                (1, 9),
                (9, 1),
                (2, 2),
                (3, 5),
                (8, 3),
                (17, 4),
            ];
            let mut g = GridSampler::new();
            for case in 0..3000 {
                let (w, h) = match sizes.get(case % 12) {
                    Some(&s) => s,
                    None => (1 + rng.below(40) as u32, 1 + rng.below(40) as u32),
                };
                let src = rng.image(w, h);
                let mode = [TensorMode::Nearest, TensorMode::Bilinear][case % 2];
                let api = [Api::V1, Api::V2][(case / 2) % 2];
                let fill = rng.fill();
                let p = WarpParams {
                    scale: [w as f32 / 2.0, h as f32 / 2.0],
                    size: [w as usize, h as usize],
                    mode,
                    fill,
                    api,
                };
                let run = |warp: &dyn Fn(&mut [u8], &mut [u8])| {
                    let (mut s, mut v) =
                        (vec![0u8; src.as_raw().len()], vec![1u8; src.as_raw().len()]);
                    warp(&mut s, &mut v);
                    (s, v)
                };
                let perspective = case % 3 == 0;
                if perspective {
                    corner_axis(&mut g.xs, w);
                    corner_axis(&mut g.ys, h);
                } else {
                    fill_axis(&mut g.xs, w);
                    fill_axis(&mut g.ys, h);
                }
                assert!(
                    x86::fits(
                        w as usize,
                        h as usize,
                        src.as_raw().len(),
                        g.xs.len(),
                        g.ys.len()
                    ) || w * h < 2
                );
                if w * h < 2 {
                    continue;
                }
                let (xs, ys) = (&g.xs, &g.ys);
                let (s, v) = if perspective {
                    let mut c = [0.0; 8];
                    for (k, v) in c.iter_mut().enumerate() {
                        *v = if k < 6 {
                            rng.value(2.0)
                        } else {
                            rng.value(0.05)
                        } as f32;
                    }
                    // Mostly near the identity, as RandomPerspective's coefficients are.
                    if rng.below(2) == 0 {
                        c = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0];
                        for v in &mut c {
                            *v += rng.uniform(0.3) as f32
                                * if rng.below(2) == 0 { 1.0 } else { 0.01 };
                        }
                    }
                    let (hw, hh) = (w as f32 / 2.0, h as f32 / 2.0);
                    let grid = PerspectiveGrid {
                        x: [c[0] / hw, c[1] / hw, c[2] / hw],
                        y: [c[3] / hh, c[4] / hh, c[5] / hh],
                        d: [c[6], c[7]],
                    };
                    run(&|s, v| {
                        sample_rows_scalar(&p, &grid, xs, ys, src.as_raw(), s);
                        // SAFETY: AVX2 and FMA (checked above); `fits` (asserted above).
                        unsafe { x86::sample_rows_avx2(&p, &grid, xs, ys, src.as_raw(), v) };
                    })
                } else {
                    let matrix = if rng.below(2) == 0 {
                        let angle = rng.uniform(180.0);
                        let t = [rng.uniform(5.0).round(), rng.uniform(5.0)];
                        let scale = 1.0 + rng.uniform(0.5);
                        let shear = [rng.uniform(30.0), 0.0];
                        let center = [rng.uniform(3.0) * 0.5, rng.uniform(3.0) * 0.5];
                        inverse_affine_matrix(center, angle, t, scale, shear)
                    } else {
                        [0; 6].map(|_| rng.value(3.0))
                    };
                    let t = matrix.map(|v| v as f32);
                    let (hw, hh) = (w as f32 / 2.0, h as f32 / 2.0);
                    let grid = AffineGrid {
                        x: [t[0] / hw, t[1] / hw, t[2] / hw],
                        y: [t[3] / hh, t[4] / hh, t[5] / hh],
                    };
                    run(&|s, v| {
                        sample_rows_scalar(&p, &grid, xs, ys, src.as_raw(), s);
                        // SAFETY: AVX2 and FMA (checked above); `fits` (asserted above).
                        unsafe { x86::sample_rows_avx2(&p, &grid, xs, ys, src.as_raw(), v) };
                    })
                };
                assert_eq!(
                    s, v,
                    "case {case}: {w}x{h} {mode:?} {fill:?} {api:?} perspective {perspective}"
                );
            }
        }
    }

    #[test]
    fn identity_perspective_and_zero_rotation_about_a_point_keep_pixels() {
        let src = ramp(9, 7);
        let mut out = RgbImage::new();
        let mut g = GridSampler::new();
        let identity = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0];
        for mode in [Interpolation::Nearest, Interpolation::Bilinear] {
            for api in [Api::V1, Api::V2] {
                g.perspective(&src, &identity, mode, Some([9.0; 3]), api, &mut out)
                    .expect("warp");
                assert_eq!(out.as_raw(), src.as_raw(), "{mode:?} {api:?}");
                g.rotate(&src, 0.0, Some([2.0, 3.5]), mode, None, api, &mut out)
                    .expect("rotate");
                assert_eq!(out.as_raw(), src.as_raw(), "{mode:?} {api:?}");
            }
        }
        let bad = [f64::NAN, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0];
        assert!(g
            .perspective(&src, &bad, Interpolation::Nearest, None, Api::V1, &mut out)
            .is_err());
    }

    #[test]
    fn v2_takes_the_angle_modulo_360_before_its_shortcuts() {
        // -270 % 360 is 90: v2 turns the square image a quarter, exactly (torch.rot90).
        let src = RgbImage::from_raw(2, 2, vec![1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]).expect("img");
        let mut out = RgbImage::new();
        let mut g = GridSampler::new();
        g.rotate(
            &src,
            -270.0,
            None,
            Interpolation::Bilinear,
            None,
            Api::V2,
            &mut out,
        )
        .expect("rotate");
        assert_eq!(out.as_raw(), &[2, 2, 2, 4, 4, 4, 1, 1, 1, 3, 3, 3]);
    }

    #[test]
    fn zero_displacement_keeps_pixels_and_a_wrong_size_is_refused() {
        let src = ramp(9, 7);
        let mut out = RgbImage::new();
        let mut g = GridSampler::new();
        let mut field = ElasticField::new();
        field.set(9, 7, &[0.0; 2 * 63]).expect("field");
        for mode in [Interpolation::Nearest, Interpolation::Bilinear] {
            for api in [Api::V1, Api::V2] {
                g.elastic(&src, &field, mode, Some([9.0; 3]), api, &mut out)
                    .expect("warp");
                assert_eq!(out.as_raw(), src.as_raw(), "{mode:?} {api:?}");
            }
        }
        field.set(7, 9, &[0.0; 2 * 63]).expect("field");
        assert!(g
            .elastic(
                &src,
                &field,
                Interpolation::Nearest,
                None,
                Api::V1,
                &mut out
            )
            .is_err());
    }

    #[test]
    fn vector_elastic_warps_equal_the_scalar_loop_bit_for_bit() {
        #[cfg(target_arch = "x86_64")]
        if !crate::cpu::avx2_fma() {
            return;
        }
        #[cfg(not(target_arch = "x86_64"))]
        return;
        #[cfg(target_arch = "x86_64")]
        {
            let mut rng = Cases(rand::SeedableRng::seed_from_u64(0x0e1a_571c));
            let mut g = GridSampler::new();
            let mut field = ElasticField::new();
            for case in 0..600 {
                let (w, h) = (1 + rng.below(30) as u32, 1 + rng.below(30) as u32);
                if w * h < 2 {
                    continue;
                }
                let src = rng.image(w, h);
                let n = (w * h) as usize;
                let reach = [0.01, 0.2, 1.5][case % 3];
                let d: Vec<f32> = (0..2 * n).map(|_| rng.uniform(reach) as f32).collect();
                field.set(w, h, &d).expect("field");
                identity_axis(&mut g.xs, w);
                identity_axis(&mut g.ys, h);
                let grid = ElasticGrid {
                    dx: field.dx(),
                    dy: field.dy(),
                    width: w as usize,
                    padded: true,
                };
                let p = WarpParams {
                    scale: [w as f32 / 2.0, h as f32 / 2.0],
                    size: [w as usize, h as usize],
                    mode: [TensorMode::Nearest, TensorMode::Bilinear][case % 2],
                    fill: rng.fill(),
                    api: [Api::V1, Api::V2][(case / 2) % 2],
                };
                let (mut s, mut v) = (vec![0u8; 3 * n], vec![1u8; 3 * n]);
                sample_rows_scalar(&p, &grid, &g.xs, &g.ys, src.as_raw(), &mut s);
                assert!(x86::fits(
                    w as usize,
                    h as usize,
                    3 * n,
                    g.xs.len(),
                    g.ys.len()
                ));
                // SAFETY: AVX2 and FMA (checked above); `fits` (asserted above); the field is
                // padded (`ElasticField::set`).
                unsafe { x86::sample_rows_avx2(&p, &grid, &g.xs, &g.ys, src.as_raw(), &mut v) };
                assert_eq!(s, v, "case {case}: {w}x{h} {p:?}");
            }
        }
    }

    #[test]
    fn refuses_bicubic_with_torchvisions_message() {
        let src = ramp(4, 3);
        let mut out = RgbImage::new();
        let mut g = GridSampler::new();
        for api in [Api::V1, Api::V2] {
            let err = g
                .rotate(
                    &src,
                    30.0,
                    None,
                    Interpolation::Bicubic,
                    None,
                    api,
                    &mut out,
                )
                .expect_err("torchvision refuses bicubic on tensors");
            let text = err.to_string();
            assert!(text.contains(BICUBIC_ON_TENSORS), "{text}");
            assert!(text.contains("interpolation"), "{text}");
        }
    }

    #[test]
    fn refuses_bad_matrix_and_fill() {
        let src = ramp(3, 3);
        let mut out = RgbImage::new();
        let mut g = GridSampler::new();
        let m = [f64::NAN, 0.0, 0.0, 0.0, 1.0, 0.0];
        assert!(g
            .warp(&src, &m, Interpolation::Nearest, None, Api::V1, &mut out)
            .is_err());
        let m = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0];
        assert!(g
            .warp(
                &src,
                &m,
                Interpolation::Nearest,
                Some([300.0, 0.0, 0.0]),
                Api::V1,
                &mut out
            )
            .is_err());
    }
}
