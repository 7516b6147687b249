//! The BICUBIC affine and perspective warps ([`super::affine`],
//! [`perspective`](mod@super::perspective)) on x86-64 vector units, one output pixel per lane
//! of a vector of doubles, one channel at a time: AVX2 ([`avx2`], four pixels a step on 256-bit
//! registers) and AVX-512 ([`avx512`], eight on 512-bit ones). [`CubicKernel::new`] picks the
//! widest that the SIMD limit and the CPU allow.
//!
//! Each lane runs the scalar path's operations in its order, so the bits are Pillow's
//! (`bicubic_filter32RGB`) at both widths: the source position as the scalar path maps it, the
//! range test (outside on either axis: the fill; NaN inside it: black), `floor` (exact, as the
//! scalar truncation is) and the fraction `v - floor(v)`, the taps clamped to the source
//! (Pillow's repeated edge rows are the clamped rows' values), the horizontal coefficients
//! summed in 32-bit integers (exact, as Pillow's C sums `int`s), the Horner steps
//! `p1 + d (p2 + d (p3 + d p4))` as separate multiplies and adds (Rust never contracts them
//! into fused multiply-adds, whose single rounding would change bits), the vertical
//! coefficients in doubles left to right, then the clip to 0..=255 and truncation (a NaN lane
//! comes out 0, as the scalar cast gives). That arithmetic and the warps' loops are written
//! once ([`cubic_lanes`]) and compiled at each width; only the range test, the tap loads and
//! the stores differ.
//!
//! Every tap is read from the source rows, clamped into them, so no read leaves a row and no
//! copy of the source is made: where every lane's sixteen taps are unclamped, each tap row's
//! four taps are one 16-byte load; elsewhere they are gathered, each lane reading the four
//! bytes that end with its pixel (the pixel and the byte before it, or for column 0 the pixel
//! and the byte after it, which exists because the source is at least two pixels wide). The
//! last step of a row computes lanes past its end and does not store them.
//!
//! Must not run where the CPU lacks a width's features (a [`CubicKernel`] exists only where it
//! has them), nor on a source [`CubicSource::new`] refuses (narrower than 2 pixels, or offsets
//! past `i32`): the callers keep the scalar path there.

use super::affine::AffineMatrix;
use super::perspective::PerspectiveCoeffs;
use crate::image::RgbView;
use crate::resize::SimdLevel;

/// The per-lane arithmetic and the warps' loops of a kernel `LANES` pixels wide, written once.
/// The module that expands it names its vector types and operations:
///
/// - `F`: `LANES` doubles; `add_pd`, `sub_pd`, `mul_pd`, `div_pd`, `set1_pd`, `max_pd`,
///   `min_pd`, `setzero_pd` (the intrinsics of that width) and `load_pd(&[f64; LANES])`;
/// - `I`: `LANES` i32s, a channel's results and the taps' offsets; `set1_epi32` and
///   `cvttpd_epi32` (truncating `F` to `I`);
/// - `W`: `2 LANES` i32s, two tap rows of one channel's taps (the first row in the low half);
///   `add_epi32`, `sub_epi32`, and `lo`/`hi` (a half's values as `F`);
/// - `M`: a lane mask, and `select(m, a, b)` (`b` where `m` is set, else `a`);
/// - `pixels(&Consts, xs, ys)` (the `LANES` pixels at those positions) and
///   `store(row, at, pixels)` (their bytes at `at`, fewer at the row's end).
macro_rules! cubic_lanes {
    ($features:literal) => {
        /// The loop-invariant vectors of a warp.
        #[derive(Clone, Copy)]
        struct Consts {
            fw: F,
            fh: F,
            max_x: I,
            max_y: I,
            stride: I,
            /// The fill's channels, one per vector, in every lane.
            fill: [I; 3],
            /// 16-byte loads start below this offset (so end within `bytes`).
            last_load: I,
            base: *const i32,
        }

        impl Consts {
            #[target_feature(enable = $features)]
            fn new(src: &super::CubicSource<'_>, fill: [u8; 3]) -> Self {
                Consts {
                    fw: set1_pd(f64::from(src.width)),
                    fh: set1_pd(f64::from(src.height)),
                    // `CubicSource::new` bounds all three by i32::MAX.
                    max_x: set1_epi32(src.width as i32 - 1),
                    max_y: set1_epi32(src.height as i32 - 1),
                    stride: set1_epi32(src.stride as i32),
                    fill: fill.map(|c| set1_epi32(i32::from(c))),
                    last_load: set1_epi32(src.bytes.len().min(i32::MAX as usize) as i32 - 15),
                    base: src.bytes.as_ptr().cast(),
                }
            }
        }

        /// `p1 + d * (p2 + d * (p3 + d * p4))` per lane, each step rounded.
        #[target_feature(enable = $features)]
        #[inline]
        fn horner(p1: F, p2: F, p3: F, p4: F, d: F) -> F {
            let t = add_pd(p3, mul_pd(d, p4));
            let t = add_pd(p2, mul_pd(d, t));
            add_pd(p1, mul_pd(d, t))
        }

        /// Pillow's `BICUBIC` across two tap rows of `LANES` pixels at once: `x1..x4` hold one
        /// channel's taps, the first row's pixels in the low half and the second row's in the
        /// high. The coefficients `v2`, `-v1 + v3`, `2 (v1 - v2) + v3 - v4` and
        /// `-v1 + v2 - v3 + v4` in integers (exact, so any order), then Horner in doubles with
        /// `dx`; the two rows' results.
        #[target_feature(enable = $features)]
        #[inline]
        fn across([x1, x2, x3, x4]: [W; 4], dx: F) -> (F, F) {
            let d12 = sub_epi32(x1, x2);
            let p2 = sub_epi32(x3, x1);
            let p3 = sub_epi32(add_epi32(add_epi32(d12, d12), x3), x4);
            let p4 = sub_epi32(sub_epi32(x4, x3), d12);
            (
                horner(lo(x2), lo(p2), lo(p3), lo(p4), dx),
                horner(hi(x2), hi(p2), hi(p3), hi(p4), dx),
            )
        }

        /// Pillow's `BICUBIC` down the four horizontal results, its sums left to right:
        /// `-v1 + v3` is `v3 - v1` in IEEE arithmetic (subtraction adds the negation) and
        /// `-v1 + v2` is `v2 - v1`. Clipped before truncating
        /// (`v <= 0 ? 0 : v >= 255 ? 255 : (UINT8)v`): `max` returns its second operand for a
        /// NaN first one, so NaN becomes 0 as in the scalar cast.
        #[target_feature(enable = $features)]
        #[inline]
        fn down([v1, v2, v3, v4]: [F; 4], dy: F) -> I {
            let p2 = sub_pd(v3, v1);
            let p3 = sub_pd(add_pd(mul_pd(set1_pd(2.0), sub_pd(v1, v2)), v3), v4);
            let p4 = add_pd(sub_pd(sub_pd(v2, v1), v3), v4);
            let v = horner(v2, p2, p3, p4, dy);
            let v = min_pd(max_pd(v, setzero_pd()), set1_pd(255.0));
            cvttpd_epi32(v)
        }

        /// One channel of `LANES` pixels: `taps(p)` gives tap rows `2p` and `2p + 1` (in the
        /// halves), columns 0..4; lanes not `inside` take `edge`.
        #[target_feature(enable = $features)]
        #[inline]
        fn channel(dx: F, dy: F, inside: M, edge: I, taps: impl Fn(usize) -> [W; 4]) -> I {
            let (h0, h1) = across(taps(0), dx);
            let (h2, h3) = across(taps(1), dx);
            select(inside, edge, down([h0, h1, h2, h3], dy))
        }

        /// Writes every row of `dst` (packed RGB, `w` pixels a row), `LANES` pixels a step,
        /// sampled where `position(y + 0.5, x)` maps the step at column `x`; where it gives
        /// `None`, that row's pixels from `x` on are left as they are.
        #[target_feature(enable = $features)]
        #[inline]
        fn steps(
            src: &super::CubicSource<'_>,
            fill: [u8; 3],
            w: usize,
            dst: &mut [u8],
            position: impl Fn(f64, usize) -> Option<(F, F)>,
        ) {
            if w == 0 {
                return;
            }
            let k = Consts::new(src, fill);
            for (y, row) in dst.chunks_exact_mut(3 * w).enumerate() {
                let yin = y as f64 + 0.5;
                for x in (0..w).step_by(LANES) {
                    let Some((xs, ys)) = position(yin, x) else {
                        break;
                    };
                    store(row, 3 * x, pixels(&k, xs, ys));
                }
            }
        }

        /// [`super::CubicKernel::affine`].
        ///
        /// # Safety
        /// The CPU has this width's features.
        #[target_feature(enable = $features)]
        #[allow(clippy::too_many_arguments)]
        pub(super) unsafe fn affine(
            src: &super::CubicSource<'_>,
            a: &super::AffineMatrix,
            col_a: &[f64],
            col_b: &[f64],
            fill: [u8; 3],
            w: usize,
            dst: &mut [u8],
        ) {
            let (a2, a5) = (set1_pd(a[2]), set1_pd(a[5]));
            steps(src, fill, w, dst, |yin, x| {
                // The row products as the scalar path takes them (invariant along a row).
                let (ry, rx) = (set1_pd(a[1] * yin), set1_pd(a[4] * yin));
                let ca = col_a.get(x..)?.first_chunk()?;
                let cb = col_b.get(x..)?.first_chunk()?;
                let xs = add_pd(add_pd(load_pd(ca), ry), a2);
                let ys = add_pd(add_pd(load_pd(cb), rx), a5);
                Some((xs, ys))
            })
        }

        /// [`super::CubicKernel::perspective`].
        ///
        /// # Safety
        /// The CPU has this width's features.
        #[target_feature(enable = $features)]
        pub(super) unsafe fn perspective(
            src: &super::CubicSource<'_>,
            c: &super::PerspectiveCoeffs,
            fill: [u8; 3],
            w: usize,
            dst: &mut [u8],
        ) {
            let [c0, c2, c3, c5, c6] = [c[0], c[2], c[3], c[5], c[6]].map(|v| set1_pd(v));
            let one = set1_pd(1.0);
            let lanes = load_pd(&std::array::from_fn(|i| i as f64 + 0.5));
            steps(src, fill, w, dst, |yin, x| {
                let (rx, ry, rd) = (c[1] * yin, c[4] * yin, c[7] * yin);
                let (rx, ry, rd) = (set1_pd(rx), set1_pd(ry), set1_pd(rd));
                // `x + 0.5` exactly (x is far below 2^52).
                let xin = add_pd(set1_pd(x as f64), lanes);
                let den = add_pd(add_pd(mul_pd(c6, xin), rd), one);
                let xs = add_pd(add_pd(mul_pd(c0, xin), rx), c2);
                let ys = add_pd(add_pd(mul_pd(c3, xin), ry), c5);
                Some((div_pd(xs, den), div_pd(ys, den)))
            })
        }
    };
}

mod avx2;
mod avx512;

/// A BICUBIC kernel the CPU runs: its entry points are safe methods on it.
#[derive(Clone, Copy, Debug)]
pub(super) struct CubicKernel(Width);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Width {
    /// AVX2: four pixels a step.
    Avx2,
    /// AVX2 and AVX-512 F, BW and VL: eight pixels a step.
    Avx512,
}

impl CubicKernel {
    /// The widest kernel `limit` and the CPU allow: eight pixels a step at
    /// [`SimdLevel::Avx512`], four at [`SimdLevel::Avx2`] and [`SimdLevel::Avx512Ymm`], none
    /// at [`SimdLevel::Portable`] or without AVX2.
    pub(super) fn new(limit: SimdLevel) -> Option<Self> {
        let level = limit.min(SimdLevel::detected());
        if level == SimdLevel::Avx512 && crate::cpu::avx2() && crate::cpu::avx512_bw_vl() {
            Some(CubicKernel(Width::Avx512))
        } else if level >= SimdLevel::Avx2 && crate::cpu::avx2() {
            Some(CubicKernel(Width::Avx2))
        } else {
            None
        }
    }

    /// Whether this kernel takes eight pixels a step.
    #[cfg(test)]
    pub(super) fn is_512(self) -> bool {
        self.0 == Width::Avx512
    }

    /// The affine warp into `dst` (packed RGB, `w` pixels a row): output pixel `(x, y)`
    /// samples `((col_a[x] + a1 (y + 0.5)) + a2, (col_b[x] + a4 (y + 0.5)) + a5)`, as the
    /// scalar path maps it. `col_a` and `col_b` hold at least `w` rounded up to a multiple of
    /// 8 values (the last step's spare lanes compute and are not stored); with fewer, the
    /// pixels past them are left as they are.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn affine(
        self,
        src: &CubicSource<'_>,
        a: &AffineMatrix,
        col_a: &[f64],
        col_b: &[f64],
        fill: [u8; 3],
        w: usize,
        dst: &mut [u8],
    ) {
        match self.0 {
            // SAFETY: `new` saw AVX2.
            Width::Avx2 => unsafe { avx2::affine(src, a, col_a, col_b, fill, w, dst) },
            // SAFETY: `new` saw AVX2 and AVX-512 F, BW and VL.
            Width::Avx512 => unsafe { avx512::affine(src, a, col_a, col_b, fill, w, dst) },
        }
    }

    /// The perspective warp into `dst` (packed RGB, `w` pixels a row): output pixel `(x, y)`
    /// samples `((c0 xin + c1 yin) + c2) / ((c6 xin + c7 yin) + 1)` and likewise for y, with
    /// `xin = x + 0.5`, `yin = y + 0.5` and the row products taken once a row, as the scalar
    /// path maps it.
    pub(super) fn perspective(
        self,
        src: &CubicSource<'_>,
        c: &PerspectiveCoeffs,
        fill: [u8; 3],
        w: usize,
        dst: &mut [u8],
    ) {
        match self.0 {
            // SAFETY: `new` saw AVX2.
            Width::Avx2 => unsafe { avx2::perspective(src, c, fill, w, dst) },
            // SAFETY: `new` saw AVX2 and AVX-512 F, BW and VL.
            Width::Avx512 => unsafe { avx512::perspective(src, c, fill, w, dst) },
        }
    }
}

/// A source the kernels can read: at least 2 pixels wide and 1 high, every byte offset
/// `y * stride + 3 * x + 3` of its pixels within `i32` and within `bytes`.
#[derive(Clone, Copy, Debug)]
pub(super) struct CubicSource<'a> {
    bytes: &'a [u8],
    stride: usize,
    width: u32,
    height: u32,
}

impl<'a> CubicSource<'a> {
    /// `src` where the kernels' preconditions hold, else `None`.
    pub(super) fn new(src: RgbView<'a>) -> Option<Self> {
        let (w, h) = (src.width() as usize, src.height() as usize);
        if w < 2 || h < 1 {
            return None;
        }
        let end = src.stride().checked_mul(h - 1)?.checked_add(3 * w)?;
        let bytes = src.bytes();
        (end <= i32::MAX as usize && end <= bytes.len()).then_some(CubicSource {
            bytes,
            stride: src.stride(),
            width: src.width(),
            height: src.height(),
        })
    }
}
