//! Affine warps as Pillow's `Image.transform(size, AFFINE, matrix, resample, fillcolor=fill)`
//! runs them, and the matrices torchvision (`F.affine`) and Pillow (`Image.rotate`) hand it.
//!
//! Pillow picks one of four engines for the same call and each rounds differently, so each is
//! reproduced as written there, not replaced by a "better" equivalent:
//! - NEAREST, no rotation or shear (`a[1] == a[3] == 0`): the scale path, float positions
//!   accumulated by repeated addition from the first pixel centre;
//! - NEAREST, all four corners map inside +-32768: 16.16 fixed point, accumulated per pixel and
//!   per row;
//! - NEAREST otherwise: the same accumulation in doubles;
//! - BILINEAR: every pixel mapped afresh in doubles (`a0*(x+0.5) + a1*(y+0.5) + a2`), two-by-two
//!   interpolation with clamped taps, truncated to 8 bits;
//! - BICUBIC: the same mapping, four-by-four cubic convolution with `a = -1` (Pillow's
//!   `BICUBIC` macro of Geometry.c, not the `a = -0.5` of its resize) on clamped taps, four
//!   horizontal passes then one vertical, clipped to 0..=255 and truncated.
//!
//! Must not: allocate once warm (column tables live in [`AffineWarp`] and only grow), draw
//! random numbers, or accept a non-finite matrix (Pillow's C casts NaN to an integer).

use crate::error::{Error, Result};
use crate::image::{RgbImage, RgbView};
use crate::resize::SimdLevel;

/// An inverse affine map, Pillow's `data` for `Transform.AFFINE`: output pixel centre `(x, y)`
/// samples the input at `(a0*x + a1*y + a2, a3*x + a4*y + a5)`.
pub type AffineMatrix = [f64; 6];

/// How a warp samples the input (torchvision's `InterpolationMode`, as Pillow filters); in
/// pipeline specs by torchvision's lowercase names, `nearest`, `bilinear` and `bicubic`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Interpolation {
    /// `Image.NEAREST`: bit-exact with Pillow on every engine.
    #[default]
    Nearest,
    /// `Image.BILINEAR`: Pillow's generic transform filter, reproduced operation by operation
    /// (bit-exact: the same double arithmetic in the same order).
    Bilinear,
    /// `Image.BICUBIC`: Pillow's generic transform filter (`bicubic_filter32RGB`), reproduced
    /// operation by operation (bit-exact). torchvision takes it on PIL images only: its tensor
    /// kernels (and so [`crate::augment::grid_sample`], AugMix) refuse it.
    Bicubic,
}

/// torchvision's `_get_inverse_affine_matrix(center, angle, translate, scale, shear)`, in the
/// same double-precision operations in the same order (so the matrix is bit-identical).
///
/// `angle` and `shear` are in degrees, `center` and `translate` in pixels (torchvision's
/// `F.affine` on a PIL image uses `center = [width * 0.5, height * 0.5]` unless given: see
/// [`affine_center`]). `scale` must be positive (torchvision refuses otherwise; here a zero
/// scale would give an infinite matrix, which [`AffineWarp::warp`] refuses).
pub fn inverse_affine_matrix(
    center: [f64; 2],
    angle: f64,
    translate: [f64; 2],
    scale: f64,
    shear: [f64; 2],
) -> AffineMatrix {
    let rot = angle.to_radians();
    let sx = shear[0].to_radians();
    let sy = shear[1].to_radians();
    let [cx, cy] = center;
    let [tx, ty] = translate;

    let a = (rot - sy).cos() / sy.cos();
    let b = -(rot - sy).cos() * sx.tan() / sy.cos() - rot.sin();
    let c = (rot - sy).sin() / sy.cos();
    let d = -(rot - sy).sin() * sx.tan() / sy.cos() + rot.cos();

    let mut m = [d, -b, 0.0, -c, a, 0.0].map(|v| v / scale);
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
    m[2] += cx;
    m[5] += cy;
    m
}

/// The centre torchvision's `F.affine` uses for a PIL image when `center` is None:
/// `[width * 0.5, height * 0.5]` (no half-pixel offset).
pub fn affine_center(width: u32, height: u32) -> [f64; 2] {
    [f64::from(width) * 0.5, f64::from(height) * 0.5]
}

/// Python's `angle % 360.0`: the remainder takes the divisor's sign, and a zero is +0.
pub(crate) fn py_mod_360(angle: f64) -> f64 {
    let r = angle % 360.0;
    if r == 0.0 {
        0.0
    } else if r < 0.0 {
        r + 360.0
    } else {
        r
    }
}

/// Python's `round(x, 15)`: the decimal with 15 fractional digits nearest to `x`, read back.
///
/// CPython rounds through a correctly rounded decimal string; Rust's `{:.15}` formatting is also
/// exact, and parsing is correctly rounded, so the two agree. Formats into a stack buffer (no
/// allocation); a value too long for it (never for the sines and cosines this serves) is
/// returned unrounded.
fn py_round_15(x: f64) -> f64 {
    use std::fmt::Write;

    struct Buf {
        bytes: [u8; 48],
        len: usize,
    }
    impl Write for Buf {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            let end = self.len + s.len();
            let dst = self.bytes.get_mut(self.len..end).ok_or(std::fmt::Error)?;
            dst.copy_from_slice(s.as_bytes());
            self.len = end;
            Ok(())
        }
    }

    if !x.is_finite() {
        return x;
    }
    let mut buf = Buf {
        bytes: [0; 48],
        len: 0,
    };
    if write!(buf, "{x:.15}").is_err() {
        return x;
    }
    std::str::from_utf8(&buf.bytes[..buf.len])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(x)
}

/// The matrix Pillow's `Image.rotate(angle, resample, expand=False, center, fillcolor)` hands to
/// `transform` (no post-rotation translate): the angle taken modulo 360 as Python does, the
/// sines and cosines rounded to 15 decimals, `center` defaulting to `(width / 2, height / 2)`.
///
/// This is the general path only: [`AffineWarp::rotate`] also takes Pillow's fast paths (0, 90,
/// 180, 270 degrees without a centre), which do not go through a matrix.
pub fn rotate_matrix(
    angle: f64,
    center: Option<[f64; 2]>,
    width: u32,
    height: u32,
) -> AffineMatrix {
    let theta = -py_mod_360(angle).to_radians();
    let (sin, cos) = (theta.sin(), theta.cos());
    let mut m = [
        py_round_15(cos),
        py_round_15(sin),
        0.0,
        py_round_15(-sin),
        py_round_15(cos),
        0.0,
    ];
    let [cx, cy] = center.unwrap_or([f64::from(width) / 2.0, f64::from(height) / 2.0]);
    let (x, y) = (-cx, -cy);
    // Pillow's `a * x + b * y + c`; addition commutes exactly, so `+=` is the same double.
    m[2] += m[0] * x + m[1] * y;
    m[5] += m[3] * x + m[4] * y;
    m[2] += cx;
    m[5] += cy;
    m
}

/// Pillow's `Image.rotate(.., expand=True)` matrix and output size (width, height): the
/// corners of the source mapped by [`rotate_matrix`], the size `ceil(max) - floor(min)` on each
/// axis, and the matrix re-centred on it. Errors when that size does not fit `u32`.
pub fn rotate_expand_matrix(
    angle: f64,
    center: Option<[f64; 2]>,
    width: u32,
    height: u32,
) -> Result<(AffineMatrix, (u32, u32))> {
    let mut m = rotate_matrix(angle, center, width, height);
    let (w, h) = (f64::from(width), f64::from(height));
    let map =
        |m: &AffineMatrix, x: f64, y: f64| (m[0] * x + m[1] * y + m[2], m[3] * x + m[4] * y + m[5]);
    let (mut x_min, mut x_max) = (f64::INFINITY, f64::NEG_INFINITY);
    let (mut y_min, mut y_max) = (f64::INFINITY, f64::NEG_INFINITY);
    for (x, y) in [(0.0, 0.0), (w, 0.0), (w, h), (0.0, h)] {
        let (tx, ty) = map(&m, x, y);
        (x_min, x_max) = (x_min.min(tx), x_max.max(tx));
        (y_min, y_max) = (y_min.min(ty), y_max.max(ty));
    }
    let nw = x_max.ceil() - x_min.floor();
    let nh = y_max.ceil() - y_min.floor();
    let fits = |v: f64| (0.0..=f64::from(u32::MAX)).contains(&v);
    if !(fits(nw) && fits(nh)) {
        return Err(Error::invalid(
            "expand",
            format!("a {nw}x{nh} output does not fit"),
        ));
    }
    let (tx, ty) = map(&m, -(nw - w) / 2.0, -(nh - h) / 2.0);
    (m[2], m[5]) = (tx, ty);
    Ok((m, (nw as u32, nh as u32)))
}

/// The pixel at column `x` of row `y` (as an array, so that copies are three-byte moves, not
/// slice copies).
#[inline(always)]
fn pixel(src: RgbView<'_>, x: usize, y: u32) -> [u8; 3] {
    src.row(y).as_chunks::<3>().0[x]
}

/// Pillow's `COORD`: -1 for negative positions (so they fall outside), else truncation.
/// `as` saturates where C would be undefined; both land outside any image.
#[inline]
pub(super) fn coord(v: f64) -> i64 {
    if v < 0.0 {
        -1
    } else {
        v as i64
    }
}

/// Writes `fill` into every pixel of `dst` (packed RGB).
#[inline]
pub(super) fn fill_pixels(dst: &mut [u8], fill: [u8; 3]) {
    for px in dst.as_chunks_mut::<3>().0 {
        *px = fill;
    }
}

/// The start every warp shares: refuses non-finite `coefficients` (named `what` in the error),
/// sizes `out` to `size` = (width, height) and returns its pixels, or `None` when there is
/// nothing left to compute (an empty output, or an empty source: all fill).
pub(super) fn start_warp<'o>(
    src: RgbView<'_>,
    size: (u32, u32),
    what: &'static str,
    coefficients: &[f64],
    fill: [u8; 3],
    out: &'o mut RgbImage,
) -> Result<Option<&'o mut [u8]>> {
    if coefficients.iter().any(|v| !v.is_finite()) {
        return Err(Error::invalid(
            what,
            format!("{coefficients:?}: the warp's {what} must be finite"),
        ));
    }
    let (w, h) = size;
    let dst = out.reset(w, h);
    if w == 0 || h == 0 {
        return Ok(None);
    }
    if src.width() == 0 || src.height() == 0 {
        fill_pixels(dst, fill);
        return Ok(None);
    }
    Ok(Some(dst))
}

/// Reusable state of affine warps: per-column position tables that only grow.
#[derive(Clone, Debug)]
pub struct AffineWarp {
    /// Per output column: `a0 * (x + 0.5)` (bilinear) or the source column (scale path).
    col_a: Vec<f64>,
    /// Per output column: `a3 * (x + 0.5)` (bilinear).
    col_b: Vec<f64>,
    /// Per output column: the source column or -1 (NEAREST scale path).
    col_src: Vec<i64>,
    /// `col_src` as runs: (output length, first source column or -1).
    runs: Vec<(usize, i64)>,
    /// Per output column, its source column taps when they are the same on every row
    /// (bilinear with `a[1] == 0`); empty otherwise.
    col_x: Vec<Option<AxisTap>>,
    /// `col_x` for the bicubic filter's four taps.
    col_cubic: Vec<CubicAxis>,
    /// The source's pixels as little-endian `u32` (a spare zero byte), contiguous, for the
    /// NEAREST engines that jump between rows and for the vector BILINEAR kernels: Pillow's own
    /// layout, one load (or gather lane) per pixel, instead of a row lookup and byte moves.
    src_px: Vec<u32>,
    /// The widest kernels the BILINEAR and BICUBIC warps may use (all give the scalar
    /// path's bits).
    limit: SimdLevel,
}

impl Default for AffineWarp {
    fn default() -> Self {
        Self {
            col_a: Vec::new(),
            col_b: Vec::new(),
            col_src: Vec::new(),
            runs: Vec::new(),
            col_x: Vec::new(),
            col_cubic: Vec::new(),
            src_px: Vec::new(),
            // The fused kernel's choice, for the same reason: 512-bit registers only where
            // they do not slow the decode that follows.
            limit: crate::fused::default_simd(),
        }
    }
}

impl AffineWarp {
    /// Empty tables; the first warp sizes them.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses kernels up to `limit` at most for BILINEAR ([`SimdLevel::Portable`]: the scalar
    /// path; [`SimdLevel::Avx2`] and [`SimdLevel::Avx512Ymm`]: four pixels a step on 256-bit
    /// registers; [`SimdLevel::Avx512`]: eight on 512-bit ones) and likewise for BICUBIC. The
    /// results are identical at every level; tests compare them and benchmarks measure them.
    pub fn set_simd_limit(&mut self, limit: SimdLevel) {
        self.limit = limit;
    }

    /// Pillow's `src.transform(src.size, Transform.AFFINE, matrix, resample, fillcolor=fill)`
    /// into `out` (resized to the source's size): pixels that map outside the source get `fill`.
    ///
    /// torchvision's `F_pil.affine` and `F_pil.rotate` end here; its `fill` (None, a number or a
    /// sequence) becomes the triple [`super::parse_fill`] gives. Errors on a non-finite matrix;
    /// never panics on input.
    pub fn warp(
        &mut self,
        src: RgbView<'_>,
        matrix: &AffineMatrix,
        interpolation: Interpolation,
        fill: [u8; 3],
        out: &mut RgbImage,
    ) -> Result<()> {
        let size = (src.width(), src.height());
        self.warp_to(src, size, matrix, interpolation, fill, out)
    }

    /// [`AffineWarp::warp`] into an output of `size` = (width, height), Pillow's
    /// `src.transform(size, ...)` (what `rotate(expand=True)` needs).
    pub fn warp_to(
        &mut self,
        src: RgbView<'_>,
        size: (u32, u32),
        matrix: &AffineMatrix,
        interpolation: Interpolation,
        fill: [u8; 3],
        out: &mut RgbImage,
    ) -> Result<()> {
        let Some(dst) = start_warp(src, size, "matrix", matrix, fill, out)? else {
            return Ok(());
        };
        let (w, h) = size;
        let dims = (w as usize, h as usize);
        match interpolation {
            Interpolation::Nearest => {
                let a = matrix;
                if a[1] == 0.0 && a[3] == 0.0 {
                    self.nearest_scale(src, dims, a, fill, dst);
                } else {
                    let src_px = gather(src, &mut self.src_px);
                    if fits_fixed(a, w, h) {
                        nearest_fixed(src_px, src.width(), src.height(), dims, a, fill, dst);
                    } else {
                        nearest_float(src_px, src.width(), src.height(), dims, a, fill, dst);
                    }
                }
            }
            Interpolation::Bilinear => self.bilinear(src, dims, matrix, fill, dst),
            Interpolation::Bicubic => self.bicubic(src, dims, matrix, fill, dst),
        }
        Ok(())
    }

    /// torchvision's `F.affine(img, angle, translate, scale, shear, interpolation, fill, center)`
    /// on a PIL image: [`inverse_affine_matrix`] about `center` (default [`affine_center`]),
    /// then [`AffineWarp::warp`].
    #[allow(clippy::too_many_arguments)]
    pub fn affine(
        &mut self,
        src: RgbView<'_>,
        angle: f64,
        translate: [f64; 2],
        scale: f64,
        shear: [f64; 2],
        center: Option<[f64; 2]>,
        interpolation: Interpolation,
        fill: [u8; 3],
        out: &mut RgbImage,
    ) -> Result<()> {
        if scale.is_nan() || scale <= 0.0 {
            return Err(Error::invalid("scale", format!("{scale} is not positive")));
        }
        let center = center.unwrap_or_else(|| affine_center(src.width(), src.height()));
        let m = inverse_affine_matrix(center, angle, translate, scale, shear);
        self.warp(src, &m, interpolation, fill, out)
    }

    /// Pillow's `Image.rotate(angle, resample, expand, center, fillcolor=fill)`, which
    /// torchvision's `F.rotate` (RandomRotation, the policies' Rotate) calls for a PIL image.
    /// Without a centre, 0 and 180 degrees (and 90 and 270 on a square image, or on any image
    /// with `expand`) are exact copies or transposes, whatever the filter; otherwise
    /// [`rotate_matrix`] (or [`rotate_expand_matrix`]) and [`AffineWarp::warp_to`]. `angle` is
    /// counter-clockwise in degrees. `out` takes the source's size, or with `expand` the size
    /// that holds the whole rotated image.
    #[allow(clippy::too_many_arguments)]
    pub fn rotate(
        &mut self,
        src: RgbView<'_>,
        angle: f64,
        center: Option<[f64; 2]>,
        expand: bool,
        interpolation: Interpolation,
        fill: [u8; 3],
        out: &mut RgbImage,
    ) -> Result<()> {
        if !angle.is_finite() {
            return Err(Error::invalid("angle", format!("{angle} is not finite")));
        }
        let (w, h) = (src.width(), src.height());
        if center.is_none() {
            let a = py_mod_360(angle);
            if a == 0.0 {
                src.to_image(out);
                return Ok(());
            }
            if a == 180.0 {
                rotate_180(src, out);
                return Ok(());
            }
            if (a == 90.0 || a == 270.0) && (expand || w == h) {
                rotate_quarter(src, a == 90.0, out);
                return Ok(());
            }
        }
        if expand {
            let (m, size) = rotate_expand_matrix(angle, center, w, h)?;
            self.warp_to(src, size, &m, interpolation, fill, out)
        } else {
            let m = rotate_matrix(angle, center, w, h);
            self.warp(src, &m, interpolation, fill, out)
        }
    }

    /// Pillow's `ImagingScaleAffine`: no rotation or shear; source columns tabulated once by
    /// accumulating `a0` from the first pixel centre, rows by accumulating `a4`. The table is
    /// then cut into runs of consecutive source columns, so a translation copies whole rows.
    fn nearest_scale(
        &mut self,
        src: RgbView<'_>,
        (w, h): (usize, usize),
        a: &AffineMatrix,
        fill: [u8; 3],
        dst: &mut [u8],
    ) {
        let (sw, sh) = (i64::from(src.width()), i64::from(src.height()));
        self.col_src.clear();
        let mut xo = a[2] + a[0] * 0.5;
        for _ in 0..w {
            let xin = coord(xo);
            self.col_src.push(if xin < sw { xin } else { -1 });
            xo += a[0];
        }
        self.runs.clear();
        self.runs.reserve(w);
        for &xin in &self.col_src {
            match self.runs.last_mut() {
                Some((len, start))
                    if (*start < 0 && xin < 0) || (*start >= 0 && xin == *start + *len as i64) =>
                {
                    *len += 1
                }
                _ => self.runs.push((1, xin)),
            }
        }
        let mut yo = a[5] + a[4] * 0.5;
        for row in dst.chunks_exact_mut(3 * w).take(h) {
            let yin = coord(yo);
            yo += a[4];
            if !(0..sh).contains(&yin) {
                fill_pixels(row, fill);
                continue;
            }
            let srow = src.row(yin as u32);
            let mut x = 0;
            for &(len, start) in &self.runs {
                let seg = &mut row[3 * x..3 * (x + len)];
                if start < 0 {
                    fill_pixels(seg, fill);
                } else {
                    let s = 3 * start as usize;
                    seg.copy_from_slice(&srow[s..s + seg.len()]);
                }
                x += len;
            }
        }
    }

    /// Pillow's generic transform with `bilinear_filter32RGB`, operation for operation.
    ///
    /// Three shortcuts, each giving Pillow's bits: a whole-pixel translation samples every
    /// output at a pixel centre (both fractions 0, so each value is its tap: the NEAREST
    /// copy); when the matrix has no x term in y (`a[3] == 0`) a row's source rows and `dy`
    /// are the same for every pixel, and when it has no y term in x (`a[1] == 0`) a column's
    /// source columns and `dx` are the same for every row, so those are computed once. The
    /// policies' shears and translations hit them; a rotation takes the general path.
    fn bilinear(
        &mut self,
        src: RgbView<'_>,
        (w, h): (usize, usize),
        a: &AffineMatrix,
        fill: [u8; 3],
        dst: &mut [u8],
    ) {
        if whole_pixel_shift(a) {
            return self.nearest_scale(src, (w, h), a, fill, dst);
        }
        let (sw, sh) = (i64::from(src.width()), i64::from(src.height()));
        let (fw, fh) = (f64::from(src.width()), f64::from(src.height()));
        // `a0 * xin` and `a3 * xin` depend on the column only: the same products, tabulated
        // (past `w` to a multiple of 8: the vector kernels' last step reads whole vectors).
        self.col_a.clear();
        self.col_b.clear();
        for x in 0..w.div_ceil(8) * 8 {
            let xin = x as f64 + 0.5;
            self.col_a.push(a[0] * xin);
            self.col_b.push(a[3] * xin);
        }
        #[cfg(target_arch = "x86_64")]
        if self.bilinear_simd(src, w, a, fill, dst) {
            return;
        }
        // With `a[1] == 0` the row term `a[1] * yin` is a zero, which adds nothing: a column's
        // source position is the same on every row.
        self.col_x.clear();
        if a[1] == 0.0 {
            self.col_x.extend(
                self.col_a[..w]
                    .iter()
                    .map(|&ca| axis_tap(ca + a[2], fw, sw)),
            );
        }
        for (y, row) in dst.chunks_exact_mut(3 * w).take(h).enumerate() {
            let yin = y as f64 + 0.5;
            let (ry, rx) = (a[1] * yin, a[4] * yin);
            let pixels = row.as_chunks_mut::<3>().0;
            // With `a[3] == 0` the column term is a zero: the source row is the row's own.
            let row_tap = (a[3] == 0.0).then(|| axis_tap(rx + a[5], fh, sh));
            if let Some(None) = row_tap {
                fill_pixels(row, fill);
                continue;
            }
            for (x, px) in pixels.iter_mut().enumerate() {
                let xt = match self.col_x.get(x) {
                    Some(&t) => t,
                    None => axis_tap(self.col_a[x] + ry + a[2], fw, sw),
                };
                let yt = match row_tap {
                    Some(t) => t,
                    None => axis_tap(self.col_b[x] + rx + a[5], fh, sh),
                };
                // Pillow tests both coordinates together: outside (or NaN) on either fills.
                *px = match (xt, yt) {
                    (Some(xt), Some(yt)) => bilinear_pixel(src, xt, yt),
                    _ => fill,
                };
            }
        }
    }

    /// Pillow's generic transform with `bicubic_filter32RGB`, operation for operation, with
    /// the BILINEAR warp's shortcuts (the same reasoning holds for four taps): a whole-pixel
    /// translation is the NEAREST copy, and with `a[1] == 0` a column's taps, with
    /// `a[3] == 0` a row's, are found once. On AVX2 or AVX-512, where [`Self::set_simd_limit`]
    /// and the CPU allow it and the source is at least 2 pixels wide, four or eight pixels a
    /// step (the same bits: the vector kernels map every pixel afresh, which the shortcuts only
    /// skip).
    fn bicubic(
        &mut self,
        src: RgbView<'_>,
        (w, h): (usize, usize),
        a: &AffineMatrix,
        fill: [u8; 3],
        dst: &mut [u8],
    ) {
        if whole_pixel_shift(a) {
            return self.nearest_scale(src, (w, h), a, fill, dst);
        }
        let (fw, sw) = (f64::from(src.width()), i64::from(src.width()));
        // Past `w` to a multiple of 8: the vector kernels' last step reads whole vectors.
        self.col_a.clear();
        self.col_b.clear();
        for x in 0..w.div_ceil(8) * 8 {
            let xin = x as f64 + 0.5;
            self.col_a.push(a[0] * xin);
            self.col_b.push(a[3] * xin);
        }
        #[cfg(target_arch = "x86_64")]
        {
            use super::cubic_x86::{CubicKernel, CubicSource};
            let kernel = CubicKernel::new(self.limit);
            if let (Some(kernel), Some(source)) = (kernel, CubicSource::new(src)) {
                let (col_a, col_b) = (&self.col_a[..], &self.col_b[..]);
                return kernel.affine(&source, a, col_a, col_b, fill, w, dst);
            }
        }
        self.col_cubic.clear();
        if a[1] == 0.0 {
            self.col_cubic.extend(
                self.col_a[..w]
                    .iter()
                    .map(|&ca| cubic_axis(ca + a[2], fw, sw)),
            );
        }
        let warp = CubicWarp {
            src,
            matrix: a,
            col_a: &self.col_a,
            col_b: &self.col_b,
            col_x: &self.col_cubic,
            fill,
        };
        warp.rows(w, dst);
    }

    /// The BILINEAR warp on the vector kernels [`Self::set_simd_limit`] and the CPU allow
    /// (the column tables already computed); false, with nothing written, where none runs.
    #[cfg(target_arch = "x86_64")]
    fn bilinear_simd(
        &mut self,
        src: RgbView<'_>,
        w: usize,
        a: &AffineMatrix,
        fill: [u8; 3],
        dst: &mut [u8],
    ) -> bool {
        use super::affine_x86::{bilinear_avx2, bilinear_avx512, BilinearWarp};
        let level = self.limit.min(SimdLevel::detected());
        if level == SimdLevel::Portable {
            return false;
        }
        let warp = BilinearWarp {
            src: gather(src, &mut self.src_px),
            width: src.width() as usize,
            height: src.height() as usize,
            matrix: a,
            col_a: &self.col_a,
            col_b: &self.col_b,
            fill,
        };
        if !warp.fits(w) {
            return false;
        }
        if level == SimdLevel::Avx512 {
            // SAFETY: `detected` saw AVX2 and AVX-512 F, BW and VL (and more); `fits` holds.
            unsafe { bilinear_avx512(&warp, w, dst) };
        } else {
            // SAFETY: `detected` saw AVX2; `fits` holds.
            unsafe { bilinear_avx2(&warp, w, dst) };
        }
        true
    }
}

/// Whether `a` translates by whole pixels only: every output pixel centre then lands on a
/// source pixel centre, both fractions are 0, and the BILINEAR and BICUBIC filters give each
/// tap itself (`v + (w - v) * 0` and `v + 0 * (..)` are `v`): the NEAREST copy.
fn whole_pixel_shift(a: &AffineMatrix) -> bool {
    a[0] == 1.0
        && a[1] == 0.0
        && a[3] == 0.0
        && a[4] == 1.0
        && a[2].fract() == 0.0
        && a[5].fract() == 0.0
}

/// One axis of a bilinear sample, as Pillow's `bilinear_filter32RGB` takes it.
#[derive(Clone, Copy, Debug)]
pub(super) struct AxisTap {
    /// `floor(v - 0.5)`, clamped to the axis.
    near: usize,
    /// The next one, clamped to the axis.
    far: usize,
    /// Whether that next one is inside the axis before clamping (for rows: Pillow reuses the
    /// near row on the last one).
    far_inside: bool,
    /// `(v - 0.5) - floor(v - 0.5)`, in `f64` as Pillow computes it.
    frac: f64,
}

/// The taps of source coordinate `v` on an axis of `len` pixels (`flen` as `f64`); `None`
/// outside `[0, len)` or for NaN, which Pillow fills.
#[inline(always)]
pub(super) fn axis_tap(v: f64, flen: f64, len: i64) -> Option<AxisTap> {
    if !(v >= 0.0 && v < flen) {
        return None;
    }
    let v = v - 0.5;
    let i = floor_half(v);
    Some(AxisTap {
        near: i.clamp(0, len - 1) as usize,
        far: (i + 1).clamp(0, len - 1) as usize,
        far_inside: i + 1 < len,
        frac: v - i as f64,
    })
}

/// Pillow's `bilinear_filter32RGB` at the taps of one sample (both inside the source): two
/// horizontal interpolations, then the vertical one, truncated to 8 bits. Shared by the affine
/// and perspective warps, which differ only in how they find the sample position.
#[inline(always)]
pub(super) fn bilinear_pixel(src: RgbView<'_>, xt: AxisTap, yt: AxisTap) -> [u8; 3] {
    let (x0, x1) = (3 * xt.near, 3 * xt.far);
    let r0 = src.row(yt.near as u32);
    let (p0, q0) = (taps(r0, x0), taps(r0, x1));
    let mut px = [0u8; 3];
    if yt.far_inside {
        let r1 = src.row(yt.far as u32);
        let (p1, q1) = (taps(r1, x0), taps(r1, x1));
        for b in 0..3 {
            let v1 = lerp(p0[b], q0[b], xt.frac);
            let v2 = lerp(p1[b], q1[b], xt.frac);
            px[b] = (v1 + (v2 - v1) * yt.frac) as u8;
        }
    } else {
        // Pillow's `v2 = v1`: `v1 + (v1 - v1) * dy`, which is v1 itself.
        for b in 0..3 {
            px[b] = lerp(p0[b], q0[b], xt.frac) as u8;
        }
    }
    px
}

/// A BICUBIC affine warp's inputs once its column tables are made.
struct CubicWarp<'a> {
    src: RgbView<'a>,
    matrix: &'a AffineMatrix,
    /// Per output column `x`: `a0 * (x + 0.5)` and `a3 * (x + 0.5)`.
    col_a: &'a [f64],
    col_b: &'a [f64],
    /// Per output column, its taps when the same on every row (`a[1] == 0`), else empty.
    col_x: &'a [CubicAxis],
    fill: [u8; 3],
}

impl CubicWarp<'_> {
    /// Every row of `dst` (`w` pixels a row), each pixel mapped afresh as Pillow's
    /// `affine_transform` maps it, `(a0 xin + a1 yin) + a2`, and sampled.
    #[inline(always)]
    fn rows(&self, w: usize, dst: &mut [u8]) {
        let (src, a) = (self.src, self.matrix);
        let (sw, sh) = (i64::from(src.width()), i64::from(src.height()));
        let (fw, fh) = (f64::from(src.width()), f64::from(src.height()));
        for (y, row) in dst.chunks_exact_mut(3 * w).enumerate() {
            let yin = y as f64 + 0.5;
            let (ry, rx) = (a[1] * yin, a[4] * yin);
            // With `a[3] == 0` the column term is a zero: the source row is the row's own.
            let row_tap = (a[3] == 0.0).then(|| cubic_axis(rx + a[5], fh, sh));
            if let Some(CubicAxis::Outside) = row_tap {
                fill_pixels(row, self.fill);
                continue;
            }
            for (x, px) in row.as_chunks_mut::<3>().0.iter_mut().enumerate() {
                let xt = match self.col_x.get(x) {
                    Some(&t) => t,
                    None => cubic_axis(self.col_a[x] + ry + a[2], fw, sw),
                };
                let yt = match row_tap {
                    Some(t) => t,
                    None => cubic_axis(self.col_b[x] + rx + a[5], fh, sh),
                };
                *px = cubic_sample(src, xt, yt, self.fill);
            }
        }
    }
}

/// One axis of a bicubic sample, as Pillow's `BICUBIC_HEAD` takes it.
#[derive(Clone, Copy, Debug)]
pub(super) enum CubicAxis {
    /// Outside `[0, len)`: Pillow leaves the fill.
    Outside,
    /// NaN, which passes Pillow's range test (every comparison is false) and then
    /// interpolates to NaN, which its x86-64 build stores as 0.
    NotANumber,
    /// Inside: the four taps.
    At(CubicTap),
}

/// The four taps of a bicubic sample on one axis.
#[derive(Clone, Copy, Debug)]
pub(super) struct CubicTap {
    /// `floor(v - 0.5) - 1 ..= floor(v - 0.5) + 2`, each clamped to the axis. Pillow clamps
    /// columns (`XCLIP`) and the first row (`YCLIP`), and repeats the previous row's value
    /// for a row past either edge, which is the clamped row's value: the same taps.
    pub(super) idx: [usize; 4],
    /// `(v - 0.5) - floor(v - 0.5)`, in `f64` as Pillow computes it.
    pub(super) frac: f64,
}

/// The taps of source coordinate `v` on an axis of `len` pixels (`flen` as `f64`).
#[inline(always)]
pub(super) fn cubic_axis(v: f64, flen: f64, len: i64) -> CubicAxis {
    if v < 0.0 || v >= flen {
        return CubicAxis::Outside;
    }
    if v.is_nan() {
        return CubicAxis::NotANumber;
    }
    let v = v - 0.5;
    let i = floor_half(v);
    CubicAxis::At(CubicTap {
        idx: [i - 1, i, i + 1, i + 2].map(|k| k.clamp(0, len - 1) as usize),
        frac: v - i as f64,
    })
}

/// Pillow's `bicubic_filter32RGB` at a source position's two axes: the fill when either is
/// outside the source (Pillow tests both together), black for a NaN one inside the test.
/// Shared by the affine and perspective warps.
#[inline(always)]
pub(super) fn cubic_sample(
    src: RgbView<'_>,
    xt: CubicAxis,
    yt: CubicAxis,
    fill: [u8; 3],
) -> [u8; 3] {
    match (xt, yt) {
        (CubicAxis::Outside, _) | (_, CubicAxis::Outside) => fill,
        (CubicAxis::At(xt), CubicAxis::At(yt)) => cubic_pixel(src, &xt, &yt),
        _ => [0; 3],
    }
}

/// Pillow's `BICUBIC_BODY` for the three channels at the taps of one sample, on scalar
/// doubles channel after channel: a cubic along each of the four tap rows, then one down the
/// column of results, clipped to 0..=255 and truncated. The reference the vector kernels
/// (`cubic_x86`) are tested against, bit for bit.
#[inline(always)]
fn cubic_pixel(src: RgbView<'_>, xt: &CubicTap, yt: &CubicTap) -> [u8; 3] {
    let cols = xt.idx.map(|i| 3 * i);
    let rows: [[f64; 3]; 4] = yt.idx.map(|r| {
        let line = src.row(r as u32);
        std::array::from_fn(|b| cubic_u8(cols.map(|c| line[c + b]), xt.frac))
    });
    std::array::from_fn(|b| {
        let v = cubic_f64([rows[0][b], rows[1][b], rows[2][b], rows[3][b]], yt.frac);
        // Pillow's `v <= 0 ? 0 : v >= 255 ? 255 : (UINT8)v`; Rust's cast of NaN is 0, as
        // x86-64's conversion gives there.
        if v <= 0.0 {
            0
        } else if v >= 255.0 {
            255
        } else {
            v as u8
        }
    })
}

/// Pillow's `BICUBIC(v, v1, v2, v3, v4, d)` on 8-bit taps, whose coefficients C sums in `int`
/// (exactly) before the double Horner steps.
#[inline(always)]
fn cubic_u8(taps: [u8; 4], d: f64) -> f64 {
    let [v1, v2, v3, v4] = taps.map(i32::from);
    horner(
        f64::from(v2),
        f64::from(-v1 + v3),
        f64::from(2 * (v1 - v2) + v3 - v4),
        f64::from(-v1 + v2 - v3 + v4),
        d,
    )
}

/// Pillow's `BICUBIC` on the doubles of the horizontal pass, its sums left to right.
#[inline(always)]
pub(super) fn cubic_f64([v1, v2, v3, v4]: [f64; 4], d: f64) -> f64 {
    horner(
        v2,
        -v1 + v3,
        2.0 * (v1 - v2) + v3 - v4,
        -v1 + v2 - v3 + v4,
        d,
    )
}

/// `p1 + d * (p2 + d * (p3 + d * p4))`, each step rounded (no fused multiply-add: Pillow's
/// x86-64 build has none).
#[inline(always)]
fn horner(p1: f64, p2: f64, p3: f64, p4: f64, d: f64) -> f64 {
    p1 + d * (p2 + d * (p3 + d * p4))
}

/// Pillow's `BILINEAR(v, a, b, d)` on 8-bit taps: `a + (b - a) * d`, the difference taken in
/// integers.
#[inline(always)]
fn lerp(a: u8, b: u8, d: f64) -> f64 {
    f64::from(a) + f64::from(i32::from(b) - i32::from(a)) * d
}

/// The three channels at byte offset `x` of a row.
#[inline(always)]
fn taps(row: &[u8], x: usize) -> [u8; 3] {
    [row[x], row[x + 1], row[x + 2]]
}

/// `floor(v)` (finite, within i64) as Pillow's `FLOOR` gives it, by truncation: `f64::floor` is a libm
/// call on baseline x86-64 (no SSE4.1), this is two instructions.
#[inline(always)]
fn floor_half(v: f64) -> i64 {
    let t = v as i64;
    if (t as f64) > v {
        t - 1
    } else {
        t
    }
}

/// Pillow's `check_fixed` on the four corners: whether 16.16 fixed point can hold every
/// position.
fn fits_fixed(a: &AffineMatrix, w: u32, h: u32) -> bool {
    let ok = |x: f64, y: f64| {
        (x * a[0] + y * a[1] + a[2]).abs() < 32768.0 && (x * a[3] + y * a[4] + a[5]).abs() < 32768.0
    };
    let (w, h) = (f64::from(w), f64::from(h));
    ok(0.0, 0.0) && ok(w, h) && ok(0.0, h) && ok(w, 0.0)
}

/// The pixels of `src`, row after row, as `u32` in `buf` (which only grows; nothing is zeroed).
fn gather<'b>(src: RgbView<'_>, buf: &'b mut Vec<u32>) -> &'b [u32] {
    let w = src.width() as usize;
    let n = w * src.height() as usize;
    if buf.len() < n {
        buf.resize(n, 0);
    }
    let buf = &mut buf[..n];
    if w == 0 {
        return buf;
    }
    for (y, out) in buf.chunks_exact_mut(w).enumerate() {
        let row = src.row(y as u32);
        // A 4-byte load per pixel with the next pixel's first byte masked off (three times
        // faster than assembling bytes); the last pixel of the row has no byte after it.
        let (body, last) = out.split_at_mut(w - 1);
        for (k, o) in body.iter_mut().enumerate() {
            if let Some(b) = row[3 * k..].first_chunk::<4>() {
                *o = u32::from_le_bytes(*b) & 0x00ff_ffff;
            }
        }
        let l = &row[3 * (w - 1)..];
        last[0] = u32::from_le_bytes([l[0], l[1], l[2], 0]);
    }
    buf
}

/// Writes one output row of packed RGB from `next()`, called once per pixel left to right:
/// 4-byte stores whose spare byte the next pixel overwrites, 3 bytes for the last.
#[inline(always)]
fn store_row(row: &mut [u8], mut next: impl FnMut() -> u32) {
    let w = row.len() / 3;
    if w == 0 {
        return;
    }
    for k in 0..w - 1 {
        row[3 * k..3 * k + 4].copy_from_slice(&next().to_le_bytes());
    }
    let last = next().to_le_bytes();
    row[3 * (w - 1)..3 * w].copy_from_slice(&last[..3]);
}

/// Pillow's `affine_fixed`: 16.16 positions, `>> 16` to the pixel, increments added with C's
/// 32-bit (wrapping) arithmetic.
fn nearest_fixed(
    src: &[u32],
    sw: u32,
    sh: u32,
    (w, h): (usize, usize),
    a: &AffineMatrix,
    fill: [u8; 3],
    dst: &mut [u8],
) {
    let fix = |v: f64| (v * 65536.0 + 0.5).floor() as i32;
    let stride = sw as usize;
    let (sw, sh) = (sw as i32, sh as i32);
    let (a0, a1, a3, a4) = (fix(a[0]), fix(a[1]), fix(a[3]), fix(a[4]));
    let mut a2 = fix(a[2] + a[0] * 0.5 + a[1] * 0.5);
    let mut a5 = fix(a[5] + a[3] * 0.5 + a[4] * 0.5);
    let fill = u32::from_le_bytes([fill[0], fill[1], fill[2], 0]);
    for row in dst.chunks_exact_mut(3 * w).take(h) {
        let (mut xx, mut yy) = (a2, a5);
        store_row(row, || {
            let (xin, yin) = (xx >> 16, yy >> 16);
            xx = xx.wrapping_add(a0);
            yy = yy.wrapping_add(a3);
            if (0..sw).contains(&xin) && (0..sh).contains(&yin) {
                src[yin as usize * stride + xin as usize]
            } else {
                fill
            }
        });
        a2 = a2.wrapping_add(a1);
        a5 = a5.wrapping_add(a4);
    }
}

/// Pillow's floating-point NEAREST affine (positions beyond fixed point's range).
fn nearest_float(
    src: &[u32],
    sw: u32,
    sh: u32,
    (w, h): (usize, usize),
    a: &AffineMatrix,
    fill: [u8; 3],
    dst: &mut [u8],
) {
    let stride = sw as usize;
    let (sw, sh) = (i64::from(sw), i64::from(sh));
    let mut xo = a[2] + a[1] * 0.5 + a[0] * 0.5;
    let mut yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
    let fill = u32::from_le_bytes([fill[0], fill[1], fill[2], 0]);
    for row in dst.chunks_exact_mut(3 * w).take(h) {
        let (mut xx, mut yy) = (xo, yo);
        store_row(row, || {
            let (xin, yin) = (coord(xx), coord(yy));
            xx += a[0];
            yy += a[3];
            if (0..sw).contains(&xin) && (0..sh).contains(&yin) {
                src[yin as usize * stride + xin as usize]
            } else {
                fill
            }
        });
        xo += a[1];
        yo += a[4];
    }
}

/// Pillow's `ROTATE_180` transpose.
fn rotate_180(src: RgbView<'_>, out: &mut RgbImage) {
    let (w, h) = (src.width(), src.height());
    let dst = out.reset(w, h);
    let row_len = 3 * w as usize;
    if row_len == 0 {
        return;
    }
    for (y, row) in dst.chunks_exact_mut(row_len).enumerate() {
        let srow = src.row(h - 1 - y as u32);
        for (px, spx) in row
            .as_chunks_mut::<3>()
            .0
            .iter_mut()
            .zip(srow.as_chunks::<3>().0.iter().rev())
        {
            *px = *spx;
        }
    }
}

/// Pillow's `ROTATE_90` (counter-clockwise) or `ROTATE_270` transpose: a `w` x `h` source
/// gives an `h` x `w` output.
fn rotate_quarter(src: RgbView<'_>, ccw: bool, out: &mut RgbImage) {
    let (w, h) = (src.width(), src.height());
    let dst = out.reset(h, w);
    let row_len = 3 * h as usize;
    if row_len == 0 || w == 0 {
        return;
    }
    for (y, row) in dst.chunks_exact_mut(row_len).enumerate() {
        let y = y as u32;
        for (x, px) in row.as_chunks_mut::<3>().0.iter_mut().enumerate() {
            let x = x as u32;
            // ROTATE_90: out(w-1-sx, sy) = in(sy, sx); ROTATE_270: out(sx, h-1-sy) = in(sy, sx).
            let (sy, sx) = if ccw { (x, w - 1 - y) } else { (h - 1 - x, y) };
            *px = pixel(src, sx as usize, sy);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::CropRect;

    /// The bilinear transform pixel by pixel with no shortcut: Pillow's loop as written.
    fn bilinear_reference(src: &RgbImage, a: &AffineMatrix, fill: [u8; 3]) -> Vec<u8> {
        let (w, h) = (src.width() as usize, src.height() as usize);
        let (sw, sh) = (i64::from(src.width()), i64::from(src.height()));
        let (fw, fh) = (f64::from(src.width()), f64::from(src.height()));
        let view = src.view();
        let mut out = vec![0u8; 3 * w * h];
        for y in 0..h {
            for x in 0..w {
                let (xin, yin) = (x as f64 + 0.5, y as f64 + 0.5);
                let xs = a[0] * xin + a[1] * yin + a[2];
                let ys = a[3] * xin + a[4] * yin + a[5];
                let px = &mut out[3 * (y * w + x)..3 * (y * w + x) + 3];
                if !(xs >= 0.0 && xs < fw && ys >= 0.0 && ys < fh) {
                    px.copy_from_slice(&fill);
                    continue;
                }
                let (xs, ys) = (xs - 0.5, ys - 0.5);
                let (xi, yi) = (xs.floor() as i64, ys.floor() as i64);
                let (dx, dy) = (xs - xi as f64, ys - yi as f64);
                let x0 = 3 * xi.clamp(0, sw - 1) as usize;
                let x1 = 3 * (xi + 1).clamp(0, sw - 1) as usize;
                let r0 = view.row(yi.clamp(0, sh - 1) as u32);
                let r1 = if yi + 1 < sh {
                    view.row((yi + 1) as u32)
                } else {
                    r0
                };
                for b in 0..3 {
                    let v1 = lerp(r0[x0 + b], r0[x1 + b], dx);
                    let v2 = lerp(r1[x0 + b], r1[x1 + b], dx);
                    px[b] = (v1 + (v2 - v1) * dy) as u8;
                }
            }
        }
        out
    }

    #[test]
    fn bilinear_shortcuts_equal_the_plain_loop() {
        let (w, h) = (37u32, 23u32);
        let data = (0..3 * w * h).map(|i| (i * 7919 % 251) as u8).collect();
        let src = RgbImage::from_raw(w, h, data).expect("sized");
        let fill = [9, 99, 199];
        let matrices: [AffineMatrix; 8] = [
            [1.0, 0.0, 3.0, 0.0, 1.0, -2.0], // whole-pixel shift (the NEAREST copy)
            [1.0, 0.0, -40.0, 0.0, 1.0, 0.0], // shifted out entirely
            [1.0, 0.0, 2.25, 0.0, 1.0, -1.5], // fractional shift: both axes tabulated
            [1.0, 0.3, -4.1, 0.0, 1.0, 0.0], // ShearX: rows tabulated
            [1.0, 0.0, 0.0, -0.27, 1.0, 5.2], // ShearY: columns tabulated
            [0.9, -0.4, 6.0, 0.4, 0.9, -3.0], // rotation: the general path
            [1.0, -0.0, 0.5, -0.0, 1.0, 0.5], // negative zeros
            [1.0, 0.0, 0.0, 0.0, 1.0, 22.5], // the last row alone (Pillow's v2 = v1)
        ];
        let mut warp = AffineWarp::new();
        let mut out = RgbImage::new();
        // The scalar path (with its shortcuts) and every vector kernel against the plain loop.
        for level in SimdLevel::kernel_sets()
            .into_iter()
            .chain([SimdLevel::Portable])
        {
            warp.set_simd_limit(level);
            for m in &matrices {
                warp.warp(src.view(), m, Interpolation::Bilinear, fill, &mut out)
                    .expect("warp");
                assert_eq!(
                    out.as_raw(),
                    &bilinear_reference(&src, m, fill)[..],
                    "{level:?}, matrix {m:?}"
                );
            }
        }
    }

    /// A generator for the tests' random cases (xorshift64*; no dependency, fixed seeds).
    struct Cases(u64);

    impl Cases {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        /// Uniform in `[lo, hi)`.
        fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
            lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }

        fn below(&mut self, n: u32) -> u32 {
            (self.next() % u64::from(n)) as u32
        }
    }

    /// Every kernel set this CPU runs, and the portable one.
    fn warp_levels() -> Vec<SimdLevel> {
        let mut levels = SimdLevel::kernel_sets();
        levels.retain(|&l| l != SimdLevel::Portable);
        levels
    }

    #[test]
    fn vector_bilinear_equals_the_scalar_path_bit_for_bit() {
        let mut rng = Cases(0x9e37_79b9_7f4a_7c15);
        let mut scalar = AffineWarp::new();
        scalar.set_simd_limit(SimdLevel::Portable);
        let mut vector = AffineWarp::new();
        let (mut expected, mut out) = (RgbImage::new(), RgbImage::new());
        let levels = warp_levels();
        for case in 0..600 {
            // Odd and even sizes, widths that leave every tail length of both vector widths.
            let (sw, sh) = (1 + rng.below(70), 1 + rng.below(50));
            let data = (0..3 * sw * sh).map(|_| rng.next() as u8).collect();
            let src = RgbImage::from_raw(sw, sh, data).expect("sized");
            let (w, h) = if rng.below(2) == 0 {
                (sw, sh)
            } else {
                (1 + rng.below(70), 1 + rng.below(40))
            };
            let center = [
                rng.uniform(-5.0, f64::from(sw) + 5.0),
                rng.uniform(-5.0, f64::from(sh) + 5.0),
            ];
            let angle = match rng.below(4) {
                0 => 0.0,
                1 => rng.uniform(-30.0, 30.0),
                _ => rng.uniform(-360.0, 360.0),
            };
            let translate = [
                rng.uniform(-0.5, 0.5) * f64::from(sw),
                rng.uniform(-0.5, 0.5) * f64::from(sh),
            ];
            let scale = rng.uniform(0.3, 3.0);
            let shear = match rng.below(3) {
                0 => [rng.uniform(-45.0, 45.0), 0.0],
                1 => [0.0, rng.uniform(-45.0, 45.0)],
                _ => [rng.uniform(-30.0, 30.0), rng.uniform(-30.0, 30.0)],
            };
            let m = inverse_affine_matrix(center, angle, translate, scale, shear);
            let fill = [rng.next() as u8, rng.next() as u8, rng.next() as u8];
            scalar
                .warp_to(
                    src.view(),
                    (w, h),
                    &m,
                    Interpolation::Bilinear,
                    fill,
                    &mut expected,
                )
                .expect("warp");
            for &level in &levels {
                vector.set_simd_limit(level);
                vector
                    .warp_to(
                        src.view(),
                        (w, h),
                        &m,
                        Interpolation::Bilinear,
                        fill,
                        &mut out,
                    )
                    .expect("warp");
                assert_eq!(
                    out, expected,
                    "case {case} {level:?}: {sw}x{sh} -> {w}x{h}, {m:?}"
                );
            }
        }
    }

    #[test]
    fn vector_bilinear_takes_the_matrices_at_the_edges() {
        // Extreme and degenerate matrices: all outside, huge (non-i32) positions, the last
        // row and column alone, exact pixel centres, negative zeros, a 1x1 source.
        let matrices: [AffineMatrix; 8] = [
            [1.0, 0.0, 0.0, 0.0, 1.0, 22.5],
            [1.0, 0.0, 36.5, 0.0, 1.0, 0.0],
            [1e300, 0.0, 0.0, 0.0, 1.0, 0.0],
            [1.0, 1e12, -3e12, 0.0, 1.0, 0.0],
            [-1.0, -0.0, 37.0, -0.0, -1.0, 23.0],
            [0.0, 0.0, 0.25, 0.0, 0.0, 0.75],
            [0.5, 0.5, -3.0, -0.5, 0.5, 9.0],
            [1e-300, 0.0, 36.99, 0.0, 1.0, -0.4],
        ];
        let mut scalar = AffineWarp::new();
        scalar.set_simd_limit(SimdLevel::Portable);
        let mut vector = AffineWarp::new();
        let (mut expected, mut out) = (RgbImage::new(), RgbImage::new());
        for (sw, sh) in [(37u32, 23u32), (1, 1), (1, 9), (9, 1)] {
            let data = (0..3 * sw * sh).map(|i| (i * 7919 % 251) as u8).collect();
            let src = RgbImage::from_raw(sw, sh, data).expect("sized");
            for m in &matrices {
                for size in [(sw, sh), (37, 23), (3, 2), (17, 5)] {
                    scalar
                        .warp_to(
                            src.view(),
                            size,
                            m,
                            Interpolation::Bilinear,
                            [1, 2, 3],
                            &mut expected,
                        )
                        .expect("warp");
                    for &level in &warp_levels() {
                        vector.set_simd_limit(level);
                        vector
                            .warp_to(
                                src.view(),
                                size,
                                m,
                                Interpolation::Bilinear,
                                [1, 2, 3],
                                &mut out,
                            )
                            .expect("warp");
                        assert_eq!(out, expected, "{level:?}: {sw}x{sh} -> {size:?}, {m:?}");
                    }
                }
            }
        }
    }

    /// Pillow's `BICUBIC` macro with its coefficients in doubles (exact for 8-bit taps).
    fn cubic_reference(v: [f64; 4], d: f64) -> f64 {
        let p2 = -v[0] + v[2];
        let p3 = 2.0 * (v[0] - v[1]) + v[2] - v[3];
        let p4 = -v[0] + v[1] - v[2] + v[3];
        v[1] + d * (p2 + d * (p3 + d * p4))
    }

    /// The bicubic transform pixel by pixel as `bicubic_filter32RGB` is written: rows past an
    /// edge repeat the previous row's value rather than being clamped.
    fn bicubic_reference(
        src: &RgbImage,
        size: (u32, u32),
        a: &AffineMatrix,
        fill: [u8; 3],
    ) -> Vec<u8> {
        let (w, h) = (size.0 as usize, size.1 as usize);
        let (sw, sh) = (i64::from(src.width()), i64::from(src.height()));
        let (fw, fh) = (f64::from(src.width()), f64::from(src.height()));
        let view = src.view();
        let mut out = vec![0u8; 3 * w * h];
        for y in 0..h {
            for x in 0..w {
                let (xin, yin) = (x as f64 + 0.5, y as f64 + 0.5);
                let xs = a[0] * xin + a[1] * yin + a[2];
                let ys = a[3] * xin + a[4] * yin + a[5];
                let px = &mut out[3 * (y * w + x)..3 * (y * w + x) + 3];
                if xs < 0.0 || xs >= fw || ys < 0.0 || ys >= fh {
                    px.copy_from_slice(&fill);
                    continue;
                }
                let (xs, ys) = (xs - 0.5, ys - 0.5);
                let (xi, yi) = (xs.floor() as i64, ys.floor() as i64);
                let (dx, dy) = (xs - xi as f64, ys - yi as f64);
                let (xi, yi) = (xi - 1, yi - 1);
                for b in 0..3 {
                    let across = |r: i64| {
                        let row = view.row(r as u32);
                        let tap =
                            |k: i64| f64::from(row[3 * (xi + k).clamp(0, sw - 1) as usize + b]);
                        cubic_reference([tap(0), tap(1), tap(2), tap(3)], dx)
                    };
                    let mut v = [across(yi.clamp(0, sh - 1)); 4];
                    for k in 1..4 {
                        v[k] = if (0..sh).contains(&(yi + k as i64)) {
                            across(yi + k as i64)
                        } else {
                            v[k - 1]
                        };
                    }
                    let r = cubic_reference(v, dy);
                    px[b] = if r <= 0.0 {
                        0
                    } else if r >= 255.0 {
                        255
                    } else {
                        r as u8
                    };
                }
            }
        }
        out
    }

    #[test]
    fn bicubic_equals_pillows_loop_as_written() {
        let mut rng = Cases(0x5151_7e57_b1c0_b1c0);
        let mut warp = AffineWarp::new();
        let mut out = RgbImage::new();
        let fixed: [AffineMatrix; 9] = [
            [1.0, 0.0, 3.0, 0.0, 1.0, -2.0], // whole-pixel shift (the NEAREST copy)
            [1.0, 0.0, 2.25, 0.0, 1.0, -1.5], // fractional shift: both axes tabulated
            [1.0, 0.3, -4.1, 0.0, 1.0, 0.0], // ShearX: rows tabulated
            [1.0, 0.0, 0.0, -0.27, 1.0, 5.2], // ShearY: columns tabulated
            [0.9, -0.4, 6.0, 0.4, 0.9, -3.0], // rotation: the general path
            [1.0, -0.0, 0.5, -0.0, 1.0, 0.5], // negative zeros
            [1.0, 0.0, 0.0, 0.0, 1.0, 22.5], // the last row alone
            [0.25, 0.0, 0.1, 0.0, 0.3, 0.2], // upscaled: taps past both edges
            [-1.0, -0.0, 37.0, -0.0, -1.0, 23.0],
        ];
        for (sw, sh) in [(37u32, 23u32), (1, 1), (1, 9), (9, 1), (2, 3)] {
            // Two-level textures overshoot, so both clips are taken.
            let data = (0..3 * sw * sh)
                .map(|_| if rng.below(2) == 0 { 0 } else { 255 })
                .collect();
            let src = RgbImage::from_raw(sw, sh, data).expect("sized");
            let mut matrices = fixed.to_vec();
            for _ in 0..40 {
                let m = inverse_affine_matrix(
                    [rng.uniform(-5.0, 42.0), rng.uniform(-5.0, 28.0)],
                    rng.uniform(-180.0, 180.0),
                    [rng.uniform(-9.0, 9.0), rng.uniform(-9.0, 9.0)],
                    rng.uniform(0.2, 3.0),
                    [rng.uniform(-30.0, 30.0), rng.uniform(-30.0, 30.0)],
                );
                matrices.push(m);
            }
            for m in &matrices {
                for size in [(sw, sh), (37, 23), (5, 2)] {
                    let want = bicubic_reference(&src, size, m, [9, 99, 199]);
                    // The scalar kernel, and the vector one where the CPU has it.
                    for level in [SimdLevel::Portable, SimdLevel::detected()] {
                        warp.set_simd_limit(level);
                        warp.warp_to(
                            src.view(),
                            size,
                            m,
                            Interpolation::Bicubic,
                            [9, 99, 199],
                            &mut out,
                        )
                        .expect("warp");
                        assert_eq!(
                            out.as_raw(),
                            &want[..],
                            "{level:?}: {sw}x{sh} -> {size:?}, matrix {m:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn bicubic_matches_hand_computed_pillow_values() {
        // A one-row image shifted by half a pixel: Pillow 13 gives [0, 127, 255, 115, 18, 7]
        // (7: the fill past the right edge). At x = 3 the taps are 255, 255, 0, 100 with
        // d = 0.5: 255 + 0.5 (-255 + 0.5 (-100 + 0.5 * 100)) = 115.
        let row = [0u8, 0, 255, 255, 0, 100];
        let data = row.iter().flat_map(|&v| [v; 3]).collect();
        let src = RgbImage::from_raw(6, 1, data).expect("sized");
        let mut out = RgbImage::new();
        let mut warp = AffineWarp::new();
        for (shift, want) in [
            (0.5, [0u8, 127, 255, 115, 18, 7]),
            (0.25, [0, 63, 255, 186, 0, 114]),
        ] {
            let m = [1.0, 0.0, shift, 0.0, 1.0, 0.0];
            warp.warp(src.view(), &m, Interpolation::Bicubic, [7; 3], &mut out)
                .expect("warp");
            let got: Vec<u8> = out.as_raw().iter().step_by(3).copied().collect();
            assert_eq!(got, want, "shift {shift}");
        }
        // Positions that overflow to inf - inf = NaN pass Pillow's range test and come out
        // black; the others are inside or filled (Pillow 13, the same matrix and image).
        let data = (0..60u8).map(|v| v * 4 + 10).collect();
        let src = RgbImage::from_raw(5, 4, data).expect("sized");
        let m = [1e308, -1e308, 0.0, 0.0, 1.0, 0.0];
        warp.warp(src.view(), &m, Interpolation::Bicubic, [7; 3], &mut out)
            .expect("warp");
        let mut want = [7u8; 60];
        want[..3].copy_from_slice(&[8, 12, 16]);
        want[18..21].copy_from_slice(&[68, 72, 76]);
        for p in [12, 13, 14, 17, 18, 19] {
            want[3 * p..3 * p + 3].fill(0);
        }
        assert_eq!(out.as_raw(), &want[..]);
    }

    /// A random matrix for the BICUBIC property test: the policies' warps (rotations, shears,
    /// translations, whole-pixel shifts), torchvision's random affines, and extreme or
    /// degenerate ones (all outside, positions past i32 or overflowing to inf and NaN, zeros,
    /// negative zeros, non-finite entries).
    fn random_cubic_matrix(rng: &mut Cases, sw: u32, sh: u32) -> AffineMatrix {
        let (fw, fh) = (f64::from(sw), f64::from(sh));
        const EXTREMES: [f64; 16] = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            1e-300,
            -1e-300,
            1e300,
            -1e300,
            1e308,
            -1e308,
            2147483648.0,
            -2147483649.5,
            1e12,
            f64::NAN,
            f64::INFINITY,
        ];
        match rng.below(8) {
            0 => rotate_matrix(rng.uniform(-360.0, 360.0), None, sw, sh),
            1 => [1.0, rng.uniform(-0.5, 0.5), 0.0, 0.0, 1.0, 0.0],
            2 => [1.0, 0.0, 0.0, rng.uniform(-0.5, 0.5), 1.0, 0.0],
            3 => {
                // Translations, fractional or whole.
                let mut t = [rng.uniform(-0.6, 0.6) * fw, rng.uniform(-0.6, 0.6) * fh];
                if rng.below(2) == 0 {
                    t = t.map(f64::round);
                }
                [1.0, 0.0, t[0], 0.0, 1.0, t[1]]
            }
            4 | 5 => inverse_affine_matrix(
                [rng.uniform(-5.0, fw + 5.0), rng.uniform(-5.0, fh + 5.0)],
                rng.uniform(-360.0, 360.0),
                [rng.uniform(-0.5, 0.5) * fw, rng.uniform(-0.5, 0.5) * fh],
                rng.uniform(0.1, 4.0),
                [rng.uniform(-40.0, 40.0), rng.uniform(-40.0, 40.0)],
            ),
            6 => {
                // Near-degenerate: tiny or huge scales about a point inside.
                let s = [1e-9, 1e-3, 50.0, 1e9][rng.below(4) as usize];
                [s, 0.0, rng.uniform(0.0, fw), 0.0, s, rng.uniform(0.0, fh)]
            }
            _ => std::array::from_fn(|_| {
                if rng.below(3) == 0 {
                    EXTREMES[rng.below(EXTREMES.len() as u32) as usize]
                } else {
                    rng.uniform(-2.0, 2.0) * [1.0, fw][rng.below(2) as usize]
                }
            }),
        }
    }

    #[test]
    fn vector_bicubic_equals_the_scalar_path_bit_for_bit() {
        let mut rng = Cases(0x0b1c_0b1c_5eed_0001);
        let mut scalar = AffineWarp::new();
        scalar.set_simd_limit(SimdLevel::Portable);
        let mut vector = AffineWarp::new();
        let (mut expected, mut out) = (RgbImage::new(), RgbImage::new());
        let levels = warp_levels();
        let mut refused = 0;
        for case in 0..3000 {
            // Sizes from 1 (the scalar path's alone below 2 columns) up, often under 4.
            let side = |rng: &mut Cases, max: u32| {
                if rng.below(3) == 0 {
                    1 + rng.below(4)
                } else {
                    1 + rng.below(max)
                }
            };
            let (sw, sh) = (side(&mut rng, 60), side(&mut rng, 40));
            // The source is sometimes a crop of a larger image: rows further apart than 3 w,
            // and pixels before and after the view.
            let (pad_w, pad_h) = if rng.below(2) == 0 {
                (rng.below(5), rng.below(4))
            } else {
                (0, 0)
            };
            let (iw, ih) = (sw + pad_w, sh + pad_h);
            // Two-level textures overshoot, so both clips are taken; uniform ones do not.
            let two_level = rng.below(2) == 0;
            let data = (0..3 * iw * ih)
                .map(|_| match (two_level, rng.next() % 2) {
                    (true, 0) => 0,
                    (true, _) => 255,
                    (false, _) => rng.next() as u8,
                })
                .collect();
            let image = RgbImage::from_raw(iw, ih, data).expect("sized");
            let rect = CropRect {
                top: rng.below(pad_h + 1),
                left: rng.below(pad_w + 1),
                height: sh,
                width: sw,
            };
            let src = image.crop_view(rect).expect("inside");
            let size = if rng.below(2) == 0 {
                (sw, sh)
            } else {
                (side(&mut rng, 70), side(&mut rng, 40))
            };
            let m = random_cubic_matrix(&mut rng, sw, sh);
            let fill = [rng.next() as u8, rng.next() as u8, rng.next() as u8];
            let want = scalar.warp_to(src, size, &m, Interpolation::Bicubic, fill, &mut expected);
            if want.is_err() {
                refused += 1;
            }
            for &level in &levels {
                vector.set_simd_limit(level);
                let got = vector.warp_to(src, size, &m, Interpolation::Bicubic, fill, &mut out);
                assert_eq!(got.is_ok(), want.is_ok(), "case {case}: {m:?}");
                if got.is_ok() {
                    assert_eq!(
                        out, expected,
                        "case {case} {level:?}: {sw}x{sh} in {iw}x{ih} at {rect:?} -> {size:?}, {m:?}"
                    );
                }
            }
        }
        // Non-finite matrices are refused, not warped; most cases warp.
        assert!((1..300).contains(&refused), "{refused} refused");
    }

    #[test]
    fn python_modulo_and_rounding() {
        assert_eq!(py_mod_360(-90.0), 270.0);
        assert_eq!(py_mod_360(450.0), 90.0);
        assert_eq!(py_mod_360(-360.0).to_bits(), 0.0f64.to_bits());
        // cos(90 degrees) is 6.1e-17 in doubles; Python's round(.., 15) makes it zero.
        assert_eq!(py_round_15((90.0f64).to_radians().cos()), 0.0);
        assert_eq!(py_round_15(0.123_456_789_012_345_67), 0.123_456_789_012_346);
        assert_eq!(py_round_15(-1.0), -1.0);
    }

    #[test]
    fn identity_matrix_copies() {
        let m = inverse_affine_matrix([5.0, 5.0], 0.0, [0.0, 0.0], 1.0, [0.0, 0.0]);
        assert_eq!(m, [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
        let data: Vec<u8> = (0..5 * 4 * 3).map(|v| v as u8).collect();
        let img = RgbImage::from_raw(5, 4, data).expect("sizes match");
        let mut out = RgbImage::new();
        let mut warp = AffineWarp::new();
        for interp in [
            Interpolation::Nearest,
            Interpolation::Bilinear,
            Interpolation::Bicubic,
        ] {
            warp.warp(img.view(), &m, interp, [1, 2, 3], &mut out)
                .expect("finite matrix");
            assert_eq!(out, img, "{interp:?}");
        }
    }

    #[test]
    fn refuses_non_finite_matrices() {
        let img = RgbImage::from_raw(2, 2, vec![7; 12]).expect("sizes match");
        let mut out = RgbImage::new();
        let m = [f64::NAN, 0.0, 0.0, 0.0, 1.0, 0.0];
        assert!(AffineWarp::new()
            .warp(img.view(), &m, Interpolation::Nearest, [0; 3], &mut out)
            .is_err());
    }
}
