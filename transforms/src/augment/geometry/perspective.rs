//! Perspective warps as torchvision's `F.perspective(img, startpoints, endpoints, interpolation,
//! fill)` runs them on a PIL image: the eight coefficients of `_get_perspective_coeffs`
//! (solved in doubles, rounded to float32), then Pillow's
//! `Image.transform(size, PERSPECTIVE, coeffs, resample, fillcolor=fill)`.
//!
//! Pillow has one engine for this call (its generic transform), so there is one path per
//! filter: each output pixel centre `(x + 0.5, y + 0.5)` is mapped afresh in doubles,
//! `((a0 xin + a1 yin + a2) / (a6 xin + a7 yin + 1), (a3 xin + a4 yin + a5) / (..))`, then
//! sampled by the NEAREST filter (truncation, outside -> fill) or by the BILINEAR or BICUBIC
//! filter that the affine warp shares ([`super::affine`]'s taps and interpolation; BICUBIC
//! four pixels a step on AVX2 or eight on AVX-512 where the SIMD limit and the CPU allow it
//! and the source is 2 or more pixels wide, the affine warp's kernels, with the same bits).
//!
//! The coefficients: torchvision solves the 8x8 system with `torch.linalg.lstsq(driver="gels")`
//! (LAPACK's QR, from MKL on x86 wheels), which cannot be reproduced bit for bit (MKL picks its
//! kernels by CPU). Here it is Gaussian elimination with partial pivoting in doubles. After the
//! rounding to float32 both give the same coefficients except those that are zero in exact
//! arithmetic, where each method leaves rounding noise of its own (about 1e-16 from QR, zero or
//! about 1e-17 from elimination); that noise moves sample positions by about 1e-13 pixel,
//! which changes a BILINEAR output by one level only where a position falls exactly on a pixel
//! centre (distortion_scale=0 and the like) and the next tap is darker, and a NEAREST one only
//! where it falls exactly on a pixel edge. `transforms/tests/geometry_parity.rs` and
//! `python-bindings/tests/test_fixture_drift.py` measure it.
//!
//! Must not: allocate per sample (nothing is kept but the output), draw random numbers, or
//! panic on input (a singular system and non-finite positions have defined results).

use super::affine::{
    axis_tap, bilinear_pixel, coord, cubic_axis, cubic_sample, start_warp, Interpolation,
};
use crate::error::{Error, Result};
use crate::image::{RgbImage, RgbView};
use crate::resize::SimdLevel;

/// Pillow's `data` for `Transform.PERSPECTIVE`: output pixel centre `(x, y)` samples the input
/// at `((a0 x + a1 y + a2) / (a6 x + a7 y + 1), (a3 x + a4 y + a5) / (a6 x + a7 y + 1))`.
pub type PerspectiveCoeffs = [f64; 8];

/// Four corners `[top-left, top-right, bottom-right, bottom-left]`, each `[x, y]` in pixels.
pub type Corners = [[f64; 2]; 4];

/// The corners torchvision's `RandomPerspective.get_params` starts from on a `width` x
/// `height` image: `[[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]`.
pub fn image_corners(width: u32, height: u32) -> Corners {
    let (r, b) = (
        f64::from(width.saturating_sub(1)),
        f64::from(height.saturating_sub(1)),
    );
    [[0.0, 0.0], [r, 0.0], [r, b], [0.0, b]]
}

/// torchvision's `_get_perspective_coeffs(startpoints, endpoints)`: the map from the endpoints
/// (the output) back to the startpoints (the input), solved in doubles and rounded to float32
/// as torchvision rounds it (`.to(torch.float32)`), handed back as doubles (Pillow reads them
/// as such).
///
/// The system is torchvision's, row for row; the solver is Gaussian elimination with partial
/// pivoting (see the module doc for how that compares with torchvision's QR). A singular
/// system (three endpoints on one line, reachable with `distortion_scale` near 1) has no unique
/// solution: an unknown with no pivot is taken as 0 (torchvision returns whatever QR yields
/// there). Errors only for non-finite points.
pub fn perspective_coeffs(startpoints: &Corners, endpoints: &Corners) -> Result<PerspectiveCoeffs> {
    if startpoints
        .iter()
        .chain(endpoints)
        .flatten()
        .any(|v| !v.is_finite())
    {
        return Err(Error::invalid(
            "startpoints",
            format!("{startpoints:?} -> {endpoints:?}: the corners must be finite"),
        ));
    }
    let mut a = [[0.0f64; 8]; 8];
    let mut b = [0.0f64; 8];
    for (i, (p1, p2)) in endpoints.iter().zip(startpoints).enumerate() {
        a[2 * i] = [
            p1[0],
            p1[1],
            1.0,
            0.0,
            0.0,
            0.0,
            -p2[0] * p1[0],
            -p2[0] * p1[1],
        ];
        a[2 * i + 1] = [
            0.0,
            0.0,
            0.0,
            p1[0],
            p1[1],
            1.0,
            -p2[1] * p1[0],
            -p2[1] * p1[1],
        ];
        b[2 * i] = p2[0];
        b[2 * i + 1] = p2[1];
    }
    let solution = solve8(a, b);
    // torchvision's `.to(torch.float32)`: the nearest float32, read back as a double.
    Ok(solution.map(|v| f64::from(v as f32)))
}

/// `a x = b` by Gaussian elimination with partial pivoting (the first row of largest
/// magnitude), in doubles; an unknown whose column has no non-zero pivot is 0.
fn solve8(mut a: [[f64; 8]; 8], mut b: [f64; 8]) -> [f64; 8] {
    const N: usize = 8;
    let mut pivot_of = [false; N];
    for col in 0..N {
        let mut best = col;
        for r in col + 1..N {
            if a[r][col].abs() > a[best][col].abs() {
                best = r;
            }
        }
        a.swap(col, best);
        b.swap(col, best);
        let p = a[col][col];
        if p == 0.0 {
            continue;
        }
        pivot_of[col] = true;
        let pivot_row = a[col];
        let pivot_b = b[col];
        for r in col + 1..N {
            let f = a[r][col] / p;
            if f == 0.0 {
                continue;
            }
            for (v, &pv) in a[r][col..].iter_mut().zip(&pivot_row[col..]) {
                *v -= f * pv;
            }
            b[r] -= f * pivot_b;
        }
    }
    let mut x = [0.0f64; N];
    for i in (0..N).rev() {
        if !pivot_of[i] {
            continue;
        }
        let mut s = b[i];
        for j in i + 1..N {
            s -= a[i][j] * x[j];
        }
        x[i] = s / a[i][i];
    }
    x
}

/// Writes every pixel of `dst` (`w` pixels a row) as `sample` gives it at the source position
/// of its centre: Pillow's `perspective_transform`,
/// `(a0 xin + a1 yin + a2) / (a6 xin + a7 yin + 1)` and likewise for y, in its double
/// operations and order. The row products are taken once a row and the denominator once a
/// pixel (Pillow computes the same value twice): the same roundings, so the same positions.
#[inline(always)]
fn map_rows(
    dst: &mut [u8],
    w: u32,
    c: &PerspectiveCoeffs,
    mut sample: impl FnMut(f64, f64) -> [u8; 3],
) {
    for (y, row) in dst.chunks_exact_mut(3 * w as usize).enumerate() {
        let yin = y as f64 + 0.5;
        let (rx, ry, rd) = (c[1] * yin, c[4] * yin, c[7] * yin);
        for (x, px) in row.as_chunks_mut::<3>().0.iter_mut().enumerate() {
            let xin = x as f64 + 0.5;
            let den = c[6] * xin + rd + 1.0;
            let xs = (c[0] * xin + rx + c[2]) / den;
            let ys = (c[3] * xin + ry + c[5]) / den;
            *px = sample(xs, ys);
        }
    }
}

/// The BICUBIC warp's pixels: Pillow's `bicubic_filter32RGB` at each mapped position, on
/// scalar doubles.
#[inline(always)]
fn bicubic_rows(
    src: RgbView<'_>,
    dst: &mut [u8],
    w: u32,
    coeffs: &PerspectiveCoeffs,
    fill: [u8; 3],
) {
    let (sw, sh) = (i64::from(src.width()), i64::from(src.height()));
    let (fw, fh) = (f64::from(src.width()), f64::from(src.height()));
    map_rows(dst, w, coeffs, |xs, ys| {
        let (xt, yt) = (cubic_axis(xs, fw, sw), cubic_axis(ys, fh, sh));
        cubic_sample(src, xt, yt, fill)
    });
}

/// Pillow's `Image.transform(size, PERSPECTIVE, coeffs, resample, fillcolor=fill)` of `src`
/// into `out` (resized to `size`, `(width, height)`): torchvision's `F.perspective` once the
/// coefficients are known ([`perspective_coeffs`]).
///
/// Pillow's filters as compiled for x86-64: NEAREST truncates a position (a negative or NaN
/// one falls outside) and fills outside the source; BILINEAR and BICUBIC fill a position
/// outside `[0, w) x [0, h)`, and a NaN one (a zero denominator over a zero numerator), which
/// passes Pillow's range test, becomes black (C's float-to-int conversion of NaN gives 0 bytes
/// there).
/// Errors for non-finite coefficients.
///
/// BICUBIC takes the vector kernels up to the default SIMD limit
/// ([`crate::fused::default_simd`]); [`perspective_warp_simd`] names another.
pub fn perspective_warp(
    src: RgbView<'_>,
    size: (u32, u32),
    coeffs: &PerspectiveCoeffs,
    interpolation: Interpolation,
    fill: [u8; 3],
    out: &mut RgbImage,
) -> Result<()> {
    let limit = crate::fused::default_simd();
    perspective_warp_simd(src, size, coeffs, interpolation, fill, limit, out)
}

/// [`perspective_warp`] with BICUBIC on kernels up to `limit` at most, as
/// [`AffineWarp::set_simd_limit`](super::AffineWarp::set_simd_limit) picks them: the same
/// bits at every level; tests compare them and benchmarks measure them.
pub fn perspective_warp_simd(
    src: RgbView<'_>,
    size: (u32, u32),
    coeffs: &PerspectiveCoeffs,
    interpolation: Interpolation,
    fill: [u8; 3],
    limit: SimdLevel,
    out: &mut RgbImage,
) -> Result<()> {
    let Some(dst) = start_warp(src, size, "coefficients", coeffs, fill, out)? else {
        return Ok(());
    };
    let (w, _) = size;
    let (sw, sh) = (i64::from(src.width()), i64::from(src.height()));
    let (fw, fh) = (f64::from(src.width()), f64::from(src.height()));
    match interpolation {
        Interpolation::Nearest => map_rows(dst, w, coeffs, |xs, ys| {
            // Pillow's `COORD` casts NaN to INT_MIN (outside); Rust's cast gives 0.
            let (xi, yi) = if xs.is_nan() || ys.is_nan() {
                (-1, -1)
            } else {
                (coord(xs), coord(ys))
            };
            if (0..sw).contains(&xi) && (0..sh).contains(&yi) {
                let r = src.row(yi as u32);
                let i = 3 * xi as usize;
                [r[i], r[i + 1], r[i + 2]]
            } else {
                fill
            }
        }),
        Interpolation::Bilinear => map_rows(dst, w, coeffs, |xs, ys| {
            if xs < 0.0 || xs >= fw || ys < 0.0 || ys >= fh {
                return fill;
            }
            match (axis_tap(xs, fw, sw), axis_tap(ys, fh, sh)) {
                (Some(xt), Some(yt)) => bilinear_pixel(src, xt, yt),
                // Inside Pillow's range test yet no tap: a NaN coordinate.
                _ => [0; 3],
            }
        }),
        Interpolation::Bicubic => {
            #[cfg(target_arch = "x86_64")]
            {
                use super::cubic_x86::{CubicKernel, CubicSource};
                let kernel = CubicKernel::new(limit);
                if let (Some(kernel), Some(source)) = (kernel, CubicSource::new(src)) {
                    kernel.perspective(&source, coeffs, fill, w as usize, dst);
                    return Ok(());
                }
            }
            bicubic_rows(src, dst, w, coeffs, fill);
        }
    }
    Ok(())
}

/// torchvision's `F.perspective(img, startpoints, endpoints, interpolation, fill)` on a PIL
/// image: [`perspective_coeffs`], then [`perspective_warp`] at the source's size.
pub fn perspective(
    src: RgbView<'_>,
    startpoints: &Corners,
    endpoints: &Corners,
    interpolation: Interpolation,
    fill: [u8; 3],
    out: &mut RgbImage,
) -> Result<()> {
    let coeffs = perspective_coeffs(startpoints, endpoints)?;
    perspective_warp(
        src,
        (src.width(), src.height()),
        &coeffs,
        interpolation,
        fill,
        out,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each coefficient within 1e-12 of `want`: zeros come out as rounding noise (about
    /// 1e-17 here, 1e-16 from torchvision's QR), the rest exactly.
    fn assert_coeffs(got: PerspectiveCoeffs, want: PerspectiveCoeffs) {
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            if *w == 0.0 {
                assert!(g.abs() < 1e-12, "coefficient {k}: {g:e}, want 0 ({got:?})");
            } else {
                assert_eq!(g, w, "coefficient {k} ({got:?})");
            }
        }
    }

    #[test]
    fn coefficients_of_a_hand_checked_map() {
        // Endpoints = startpoints shifted by (+2, +3): the inverse map is x - 2, y - 3.
        let start = image_corners(10, 8);
        let end = start.map(|[x, y]| [x + 2.0, y + 3.0]);
        let c = perspective_coeffs(&start, &end).expect("finite");
        assert_coeffs(c, [1.0, 0.0, -2.0, 0.0, 1.0, -3.0, 0.0, 0.0]);
        // The identity comes out exact.
        let c = perspective_coeffs(&start, &start).expect("finite");
        assert_eq!(c, [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
        // A 2x scale about the origin: input = output / 2.
        let end = start.map(|[x, y]| [2.0 * x, 2.0 * y]);
        let c = perspective_coeffs(&start, &end).expect("finite");
        assert_coeffs(c, [0.5, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0]);
        // A keystone by hand: the top edge [0, 9] pulled in to [2, 7] on a 10 x 8 image
        // (corners (0,0),(9,0),(9,7),(0,7)); bottom fixed. The inverse maps (2,0) to (0,0),
        // (7,0) to (9,0), and the bottom corners to themselves.
        let end = [[2.0, 0.0], [7.0, 0.0], [9.0, 7.0], [0.0, 7.0]];
        let c = perspective_coeffs(&start, &end).expect("finite");
        let map = |x: f64, y: f64| {
            let den = c[6] * x + c[7] * y + 1.0;
            (
                (c[0] * x + c[1] * y + c[2]) / den,
                (c[3] * x + c[4] * y + c[5]) / den,
            )
        };
        for (e, s) in end.iter().zip(&start) {
            let (x, y) = map(e[0], e[1]);
            assert!(
                (x - s[0]).abs() < 1e-5 && (y - s[1]).abs() < 1e-5,
                "{e:?} -> {x}, {y}"
            );
        }
        // Solved by hand: y' = (9/5) y / (1 + (4/35) y), x' = ((9/5) x + (18/35) y - 18/5) / (the
        // same denominator); torchvision rounds each to float32.
        let f32_of = |v: f64| f64::from(v as f32);
        assert_coeffs(
            c,
            [
                f32_of(9.0 / 5.0),
                f32_of(18.0 / 35.0),
                f32_of(-18.0 / 5.0),
                0.0,
                f32_of(9.0 / 5.0),
                0.0,
                0.0,
                f32_of(4.0 / 35.0),
            ],
        );
    }

    #[test]
    fn coefficients_match_torchvision_on_a_true_perspective() {
        // torchvision 0.29 (torch 2.x, MKL): F._get_perspective_coeffs(
        //   [[0, 0], [15, 0], [15, 223], [0, 223]], [[3, 16], [12, 32], [15, 207], [3, 185]])
        // gives these float32 values; its a1 is QR noise (-1.97e-16), zero here.
        let start = [[0.0, 0.0], [15.0, 0.0], [15.0, 223.0], [0.0, 223.0]];
        let end = [[3.0, 16.0], [12.0, 32.0], [15.0, 207.0], [3.0, 185.0]];
        let c = perspective_coeffs(&start, &end).expect("finite");
        let tv = [
            1.7090991735458374,
            -1.9677836649715418e-16,
            -5.127297878265381,
            -3.194795608520508,
            1.7970725297927856,
            -19.168773651123047,
            -0.003234938019886613,
            0.0020087123848497868,
        ];
        for (k, (&mine, &theirs)) in c.iter().zip(&tv).enumerate() {
            if k == 1 {
                assert!(mine.abs() < 1e-12, "a1 = {mine}");
            } else {
                assert_eq!(mine, theirs, "coefficient {k}");
            }
        }
        // Each endpoint maps back onto its startpoint (to float32 precision).
        for (e, s) in end.iter().zip(&start) {
            let den = c[6] * e[0] + c[7] * e[1] + 1.0;
            let x = (c[0] * e[0] + c[1] * e[1] + c[2]) / den;
            let y = (c[3] * e[0] + c[4] * e[1] + c[5]) / den;
            assert!(
                (x - s[0]).abs() < 1e-3 && (y - s[1]).abs() < 1e-3,
                "{e:?} -> {x}, {y}"
            );
        }
    }

    #[test]
    fn singular_systems_and_bad_input_do_not_panic() {
        let start = image_corners(224, 224);
        // Three endpoints on the line x = 112.
        let end = [[112.0, 5.0], [112.0, 50.0], [200.0, 200.0], [112.0, 200.0]];
        let c = perspective_coeffs(&start, &end).expect("finite");
        let img = RgbImage::from_raw(4, 4, vec![9; 48]).expect("sized");
        let mut out = RgbImage::new();
        if c.iter().all(|v| v.is_finite()) {
            perspective_warp(
                img.view(),
                (4, 4),
                &c,
                Interpolation::Bilinear,
                [1; 3],
                &mut out,
            )
            .expect("finite");
        }
        let mut bad = start;
        bad[0][0] = f64::NAN;
        assert!(perspective_coeffs(&bad, &end).is_err());
        let nan = [f64::NAN; 8];
        assert!(perspective_warp(
            img.view(),
            (4, 4),
            &nan,
            Interpolation::Nearest,
            [0; 3],
            &mut out
        )
        .is_err());
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn bicubic_kernels_agree_bit_for_bit() {
        use super::super::cubic_x86::{CubicKernel, CubicSource};
        // Every vector kernel this CPU runs (none without AVX2: then the scalar path only).
        let kernels: Vec<CubicKernel> = SimdLevel::kernel_sets()
            .into_iter()
            .filter_map(CubicKernel::new)
            .collect();
        let wide = kernels.iter().filter(|k| k.is_512()).count();
        assert_eq!(wide > 0, SimdLevel::detected() == SimdLevel::Avx512);
        let (w, h) = (23u32, 17u32);
        let data = (0..3 * w * h).map(|i| (i * 7919 % 251) as u8).collect();
        let img = RgbImage::from_raw(w, h, data).expect("sized");
        let source = CubicSource::new(img.view()).expect("2 pixels wide");
        let start = image_corners(w, h);
        let ends = [
            [[3.0, 2.0], [20.0, 1.0], [21.0, 15.0], [1.0, 14.0]],
            [[0.0, 0.0], [22.0, 0.0], [22.0, 16.0], [5.0, 16.0]],
            [[-4.0, 3.0], [30.0, -2.0], [19.0, 25.0], [2.0, 11.0]],
        ];
        let mut coeffs: Vec<PerspectiveCoeffs> = ends
            .iter()
            .map(|end| perspective_coeffs(&start, end).expect("finite"))
            .collect();
        // 0 / 0 at the first pixel centre, and positions far outside.
        coeffs.push([2.0, 0.0, -1.0, 0.0, 2.0, -1.0, -2.0, 0.0]);
        coeffs.push([1e6, 3.0, -7.0, 0.5, 1e-6, 2.0, 0.01, -0.02]);
        // Exact fractions (half and quarter pixels, a 2x zoom): many sums land exactly on an
        // integer, where a result one ulp low truncates a level lower.
        coeffs.push([1.0, 0.0, 0.5, 0.0, 1.0, 0.25, 0.0, 0.0]);
        coeffs.push([1.0, 0.0, -0.25, 0.0, 1.0, 0.5, 0.0, 0.0]);
        coeffs.push([0.5, 0.0, 2.25, 0.0, 0.5, 1.75, 0.0, 0.0]);
        for c in &coeffs {
            let mut scalar = vec![0u8; (3 * w * h) as usize];
            let mut vector = scalar.clone();
            bicubic_rows(img.view(), &mut scalar, w, c, [1, 2, 3]);
            for kernel in &kernels {
                vector.fill(0);
                kernel.perspective(&source, c, [1, 2, 3], w as usize, &mut vector);
                assert_eq!(scalar, vector, "{kernel:?} {c:?}");
            }
        }
        // Random keystones of random sizes (every width modulo 8, 2 to 8 columns, one row),
        // two-level textures so that both clips are taken.
        let mut state = 0x243f_6a88_85a3_08d3u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for case in 0..400 {
            let (w, h) = (2 + (next() % 40) as u32, 1 + (next() % 30) as u32);
            let data = (0..3 * w * h)
                .map(|_| if next() % 2 == 0 { 0 } else { 255 })
                .collect();
            let img = RgbImage::from_raw(w, h, data).expect("sized");
            let source = CubicSource::new(img.view()).expect("2 pixels wide");
            let start = image_corners(w, h);
            let mut jitter = || (next() % 2001) as f64 / 100.0 - 10.0;
            let end = start.map(|[x, y]| [x + jitter(), y + jitter()]);
            let c = perspective_coeffs(&start, &end).expect("finite");
            let fill = [next() as u8, next() as u8, next() as u8];
            let mut scalar = vec![0u8; (3 * w * h) as usize];
            let mut vector = scalar.clone();
            bicubic_rows(img.view(), &mut scalar, w, &c, fill);
            for kernel in &kernels {
                vector.fill(0);
                kernel.perspective(&source, &c, fill, w as usize, &mut vector);
                assert_eq!(scalar, vector, "case {case} {kernel:?}: {w}x{h}, {c:?}");
            }
        }
    }

    #[test]
    fn warp_follows_pillows_pixel_centres_and_fill() {
        let (w, h) = (5u32, 4u32);
        let data: Vec<u8> = (0..3 * w * h).map(|v| (v * 5) as u8).collect();
        let img = RgbImage::from_raw(w, h, data).expect("sized");
        let mut out = RgbImage::new();
        let identity = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0];
        let all = [
            Interpolation::Nearest,
            Interpolation::Bilinear,
            Interpolation::Bicubic,
        ];
        for interp in all {
            perspective_warp(img.view(), (w, h), &identity, interp, [1, 2, 3], &mut out)
                .expect("finite");
            assert_eq!(out, img, "{interp:?}");
        }
        // A shift by one whole pixel to the right: column 0 falls outside and is filled.
        let shift = [1.0, 0.0, -1.0, 0.0, 1.0, 0.0, 0.0, 0.0];
        for interp in all {
            perspective_warp(img.view(), (w, h), &shift, interp, [1, 2, 3], &mut out)
                .expect("finite");
            for y in 0..h as usize {
                let row = &out.as_raw()[3 * w as usize * y..3 * w as usize * (y + 1)];
                assert_eq!(&row[..3], &[1, 2, 3], "{interp:?}");
                let src_row = &img.as_raw()[3 * w as usize * y..3 * w as usize * (y + 1)];
                assert_eq!(&row[3..], &src_row[..3 * (w as usize - 1)], "{interp:?}");
            }
        }
        // Half a pixel: BILINEAR averages neighbours (truncated), as Pillow does.
        let half = [1.0, 0.0, 0.5, 0.0, 1.0, 0.0, 0.0, 0.0];
        perspective_warp(
            img.view(),
            (w, h),
            &half,
            Interpolation::Bilinear,
            [0; 3],
            &mut out,
        )
        .expect("finite");
        let (a, b) = (img.as_raw()[0], img.as_raw()[3]);
        assert_eq!(out.as_raw()[0], ((f64::from(a) + f64::from(b)) / 2.0) as u8);
        // A NaN position (0 / 0 at the first pixel centre) is black for BILINEAR, fill for
        // NEAREST, as Pillow's x86-64 build gives.
        let nan_at_origin = [2.0, 0.0, -1.0, 0.0, 2.0, -1.0, -2.0, 0.0];
        perspective_warp(
            img.view(),
            (w, h),
            &nan_at_origin,
            Interpolation::Bilinear,
            [7; 3],
            &mut out,
        )
        .expect("finite");
        assert_eq!(&out.as_raw()[..3], &[0, 0, 0]);
        // BICUBIC likewise (Pillow 13: black there, the fill elsewhere on this map).
        perspective_warp(
            img.view(),
            (w, h),
            &nan_at_origin,
            Interpolation::Bicubic,
            [7; 3],
            &mut out,
        )
        .expect("finite");
        assert_eq!(&out.as_raw()[..6], &[0, 0, 0, 7, 7, 7]);
        perspective_warp(
            img.view(),
            (w, h),
            &nan_at_origin,
            Interpolation::Nearest,
            [7; 3],
            &mut out,
        )
        .expect("finite");
        assert_eq!(&out.as_raw()[..3], &[7, 7, 7]);
    }
}
