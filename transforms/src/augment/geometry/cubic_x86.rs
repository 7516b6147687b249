//! The BICUBIC affine and perspective warps ([`super::affine`],
//! [`perspective`](mod@super::perspective)) on AVX2: four output pixels a step, one per lane of
//! a 256-bit vector of doubles, one channel at a time.
//!
//! Each lane runs the scalar path's operations in its order, so the bits are Pillow's
//! (`bicubic_filter32RGB`): the source position as the scalar path maps it, the range test
//! (outside on either axis: the fill; NaN inside it: black), `floor` (exact, as the scalar
//! truncation is) and the fraction `v - floor(v)`, the taps clamped to the source (Pillow's
//! repeated edge rows are the clamped rows' values), the horizontal coefficients summed in
//! 32-bit integers (exact, as Pillow's C sums `int`s), the Horner steps
//! `p1 + d (p2 + d (p3 + d p4))` as separate multiplies and adds (Rust never contracts them
//! into fused multiply-adds, whose single rounding would change bits), the vertical
//! coefficients in doubles left to right, then the clip to 0..=255 and truncation (a NaN lane
//! comes out 0, as the scalar cast gives).
//!
//! The sixteen taps of four pixels are gathered straight from the source rows, two tap rows
//! per 256-bit gather: each lane reads the four bytes that end with its pixel (the pixel and
//! the byte before it, or for column 0 the pixel and the byte after it, which exists because
//! the source is at least two pixels wide), so no read leaves the row and no copy of the
//! source is made.
//!
//! Must not run where the CPU lacks AVX2 (an [`Avx2Cubic`] exists only where it has it), nor on
//! a source [`CubicSource::new`] refuses (narrower than 2 pixels, or offsets past `i32`): the
//! callers keep the scalar path there.

use std::arch::x86_64::*;

use super::affine::AffineMatrix;
use super::perspective::PerspectiveCoeffs;
use crate::image::RgbView;

/// A token that the CPU has AVX2: the kernels' entry points are safe methods on it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Avx2Cubic(());

impl Avx2Cubic {
    /// The kernel, where the CPU has AVX2.
    pub(super) fn new() -> Option<Self> {
        crate::cpu::avx2().then_some(Avx2Cubic(()))
    }

    /// The affine warp into `dst` (packed RGB, `w` pixels a row): output pixel `(x, y)`
    /// samples `((col_a[x] + a1 (y + 0.5)) + a2, (col_b[x] + a4 (y + 0.5)) + a5)`, as the
    /// scalar path maps it. `col_a` and `col_b` hold at least `w` rounded up to a multiple of
    /// 4 values (the last step's spare lanes compute and are not stored); with fewer, the
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
        // SAFETY: an `Avx2Cubic` exists only where the CPU has AVX2 (`new`).
        unsafe { affine_avx2(src, a, col_a, col_b, fill, w, dst) }
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
        // SAFETY: an `Avx2Cubic` exists only where the CPU has AVX2 (`new`).
        unsafe { perspective_avx2(src, c, fill, w, dst) }
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

/// The loop-invariant vectors of a warp.
#[derive(Clone, Copy)]
struct Consts {
    fw: __m256d,
    fh: __m256d,
    max_x: __m128i,
    max_y: __m128i,
    stride: __m128i,
    /// The fill's channels, one per vector, in every lane.
    fill: [__m128i; 3],
    /// 16-byte loads start below this offset (so end within `bytes`).
    last_load: __m128i,
    base: *const i32,
}

impl Consts {
    #[target_feature(enable = "avx2")]
    fn new(src: &CubicSource<'_>, fill: [u8; 3]) -> Self {
        Consts {
            fw: _mm256_set1_pd(f64::from(src.width)),
            fh: _mm256_set1_pd(f64::from(src.height)),
            // `new` bounds all three by i32::MAX.
            max_x: _mm_set1_epi32(src.width as i32 - 1),
            max_y: _mm_set1_epi32(src.height as i32 - 1),
            stride: _mm_set1_epi32(src.stride as i32),
            fill: fill.map(|c| _mm_set1_epi32(i32::from(c))),
            last_load: _mm_set1_epi32(src.bytes.len().min(i32::MAX as usize) as i32 - 15),
            base: src.bytes.as_ptr().cast(),
        }
    }
}

/// `p1 + d * (p2 + d * (p3 + d * p4))` per lane, each step rounded.
#[target_feature(enable = "avx2")]
#[inline]
fn horner(p1: __m256d, p2: __m256d, p3: __m256d, p4: __m256d, d: __m256d) -> __m256d {
    let t = _mm256_add_pd(p3, _mm256_mul_pd(d, p4));
    let t = _mm256_add_pd(p2, _mm256_mul_pd(d, t));
    _mm256_add_pd(p1, _mm256_mul_pd(d, t))
}

/// Pillow's `BICUBIC` across two tap rows of four pixels at once: `x1..x4` hold one channel's
/// taps, the first row's four pixels in the low 128 bits and the second row's in the high.
/// The coefficients `v2`, `-v1 + v3`, `2 (v1 - v2) + v3 - v4` and `-v1 + v2 - v3 + v4` in
/// integers (exact, so any order), then Horner in doubles with `dx`; the two rows' results.
#[target_feature(enable = "avx2")]
#[inline]
fn across([x1, x2, x3, x4]: [__m256i; 4], dx: __m256d) -> (__m256d, __m256d) {
    let d12 = _mm256_sub_epi32(x1, x2);
    let p2 = _mm256_sub_epi32(x3, x1);
    let p3 = _mm256_sub_epi32(_mm256_add_epi32(_mm256_add_epi32(d12, d12), x3), x4);
    let p4 = _mm256_sub_epi32(_mm256_sub_epi32(x4, x3), d12);
    let lo = |v: __m256i| _mm256_cvtepi32_pd(_mm256_castsi256_si128(v));
    let hi = |v: __m256i| _mm256_cvtepi32_pd(_mm256_extracti128_si256::<1>(v));
    (
        horner(lo(x2), lo(p2), lo(p3), lo(p4), dx),
        horner(hi(x2), hi(p2), hi(p3), hi(p4), dx),
    )
}

/// Pillow's `BICUBIC` down the four horizontal results, its sums left to right: `-v1 + v3` is
/// `v3 - v1` in IEEE arithmetic (subtraction adds the negation) and `-v1 + v2` is `v2 - v1`.
/// Clipped before truncating (`v <= 0 ? 0 : v >= 255 ? 255 : (UINT8)v`): `max` returns its
/// second operand for a NaN first one, so NaN becomes 0 as in the scalar cast.
#[target_feature(enable = "avx2")]
#[inline]
fn down([v1, v2, v3, v4]: [__m256d; 4], dy: __m256d) -> __m128i {
    let p2 = _mm256_sub_pd(v3, v1);
    let p3 = _mm256_sub_pd(
        _mm256_add_pd(
            _mm256_mul_pd(_mm256_set1_pd(2.0), _mm256_sub_pd(v1, v2)),
            v3,
        ),
        v4,
    );
    let p4 = _mm256_add_pd(_mm256_sub_pd(_mm256_sub_pd(v2, v1), v3), v4);
    let v = horner(v2, p2, p3, p4, dy);
    let v = _mm256_min_pd(_mm256_max_pd(v, _mm256_setzero_pd()), _mm256_set1_pd(255.0));
    _mm256_cvttpd_epi32(v)
}

/// A 64-bit lane mask as four 32-bit lanes (all-ones or zero survive the packing).
#[target_feature(enable = "avx2")]
#[inline]
fn mask32(m: __m256d) -> __m128i {
    let m = _mm256_castpd_si256(m);
    _mm_packs_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256::<1>(m))
}

/// One channel of four pixels: `taps(p)` gives tap rows `2p` and `2p + 1` (in the halves),
/// columns 0..4; lanes not `inside32` take `edge`.
#[target_feature(enable = "avx2")]
#[inline]
fn channel(
    dx: __m256d,
    dy: __m256d,
    inside32: __m128i,
    edge: __m128i,
    taps: impl Fn(usize) -> [__m256i; 4],
) -> __m128i {
    let (h0, h1) = across(taps(0), dx);
    let (h2, h3) = across(taps(1), dx);
    _mm_blendv_epi8(edge, down([h0, h1, h2, h3], dy), inside32)
}

/// Four pixels sampled at `(xs, ys)`: bytes 0..12 of the result are their packed RGB.
#[target_feature(enable = "avx2")]
#[inline]
fn four_pixels(k: &Consts, xs: __m256d, ys: __m256d) -> __m128i {
    let zero = _mm256_setzero_pd();
    // Pillow's range test: outside on either axis fills; a NaN coordinate passes it (every
    // comparison is false) and comes out black. Ordered comparisons are false for NaN.
    let outside = _mm256_or_pd(
        _mm256_or_pd(
            _mm256_cmp_pd::<_CMP_LT_OQ>(xs, zero),
            _mm256_cmp_pd::<_CMP_GE_OQ>(xs, k.fw),
        ),
        _mm256_or_pd(
            _mm256_cmp_pd::<_CMP_LT_OQ>(ys, zero),
            _mm256_cmp_pd::<_CMP_GE_OQ>(ys, k.fh),
        ),
    );
    let inside = _mm256_and_pd(
        _mm256_and_pd(
            _mm256_cmp_pd::<_CMP_GE_OQ>(xs, zero),
            _mm256_cmp_pd::<_CMP_LT_OQ>(xs, k.fw),
        ),
        _mm256_and_pd(
            _mm256_cmp_pd::<_CMP_GE_OQ>(ys, zero),
            _mm256_cmp_pd::<_CMP_LT_OQ>(ys, k.fh),
        ),
    );
    let outside32 = mask32(outside);
    let edge = k
        .fill
        .map(|f| _mm_blendv_epi8(_mm_setzero_si128(), f, outside32));
    let [r, g, b] = if _mm256_movemask_pd(inside) == 0 {
        edge
    } else {
        let half = _mm256_set1_pd(0.5);
        let (vx, vy) = (_mm256_sub_pd(xs, half), _mm256_sub_pd(ys, half));
        let (fx, fy) = (_mm256_floor_pd(vx), _mm256_floor_pd(vy));
        let (dx, dy) = (_mm256_sub_pd(vx, fx), _mm256_sub_pd(vy, fy));
        // Lanes outside convert to anything (i32::MIN for huge or NaN values) and wrap when
        // offset; clamping keeps every tap inside the source, and their results are replaced.
        let (ix, iy) = (_mm256_cvttpd_epi32(fx), _mm256_cvttpd_epi32(fy));
        let izero = _mm_setzero_si128();
        let clamp = |v: __m128i, max: __m128i| _mm_min_epi32(_mm_max_epi32(v, izero), max);
        let row = |r: i32| {
            _mm_mullo_epi32(
                clamp(_mm_add_epi32(iy, _mm_set1_epi32(r)), k.max_y),
                k.stride,
            )
        };
        let rows = [row(-1), row(0), row(1), row(2)];
        let inside32 = mask32(inside);
        let byte = _mm256_set1_epi32(0xff);
        let take = |v: __m256i, bits: i32| {
            _mm256_and_si256(_mm256_srl_epi32(v, _mm_cvtsi32_si128(bits)), byte)
        };
        // Every lane inside with all 16 taps unclamped (and 16 bytes readable from each tap
        // row's first tap): each tap row's four taps are 12 consecutive bytes, one load.
        let first = _mm_sub_epi32(_mm_add_epi32(_mm_add_epi32(ix, ix), ix), _mm_set1_epi32(3));
        let unclamped = _mm_and_si128(
            _mm_and_si128(
                _mm_cmpgt_epi32(ix, izero),
                _mm_cmpgt_epi32(k.max_x, _mm_add_epi32(ix, _mm_set1_epi32(1))),
            ),
            _mm_and_si128(
                _mm_and_si128(
                    _mm_cmpgt_epi32(iy, izero),
                    _mm_cmpgt_epi32(k.max_y, _mm_add_epi32(iy, _mm_set1_epi32(1))),
                ),
                _mm_cmpgt_epi32(k.last_load, _mm_add_epi32(rows[3], first)),
            ),
        );
        let unclamped = _mm_and_si128(unclamped, inside32);
        if _mm_movemask_ps(_mm_castsi128_ps(unclamped)) == 0xf {
            let mut offsets = [[0i32; 4]; 4];
            for (o, r) in offsets.iter_mut().zip(rows) {
                // SAFETY: a 16-byte store into four i32.
                unsafe { _mm_storeu_si128(o.as_mut_ptr().cast(), _mm_add_epi32(r, first)) };
            }
            // Per 128-bit half: the 12 tap bytes as dwords of one channel's four taps.
            let by_channel = _mm256_broadcastsi128_si256(_mm_setr_epi8(
                0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11, -1, -1, -1, -1,
            ));
            // Tap rows 0 and 1, then 2 and 3, in the halves; per pixel, then transposed to
            // per channel: dword `p` holds pixel `p`'s four taps of that channel.
            let pair = |lo: usize| {
                let [m0, m1, m2, m3]: [__m256i; 4] = std::array::from_fn(|p| {
                    let at = |r: usize| offsets[r][p] as usize;
                    // SAFETY: every offset is at least 0 (the taps are unclamped, so inside)
                    // and below `last_load` (`unclamped`), 16 bytes or more before the end
                    // of `bytes`; rows further up start earlier.
                    let v = unsafe {
                        _mm256_loadu2_m128i(
                            k.base.cast::<u8>().add(at(lo + 1)).cast(),
                            k.base.cast::<u8>().add(at(lo)).cast(),
                        )
                    };
                    _mm256_shuffle_epi8(v, by_channel)
                });
                let (t0, t1) = (_mm256_unpacklo_epi32(m0, m1), _mm256_unpackhi_epi32(m0, m1));
                let (t2, t3) = (_mm256_unpacklo_epi32(m2, m3), _mm256_unpackhi_epi32(m2, m3));
                [
                    _mm256_unpacklo_epi64(t0, t2),
                    _mm256_unpackhi_epi64(t0, t2),
                    _mm256_unpacklo_epi64(t1, t3),
                ]
            };
            let pairs = [pair(0), pair(2)];
            let taps = |p: usize, c: usize| {
                let v = pairs[p][c];
                [
                    take(v, 0),
                    take(v, 8),
                    take(v, 16),
                    _mm256_srli_epi32::<24>(v),
                ]
            };
            [0, 1, 2].map(|c| channel(dx, dy, inside32, edge[c], |p| taps(p, c)))
        } else {
            let one = _mm_set1_epi32(1);
            // Per tap column: the offset of the four bytes that end with the pixel (3 c - 1)
            // and the shift that drops the byte before it, or for column 0 the offset 0 and
            // no shift (the byte after it is the next pixel's, in the same row: the source
            // is 2 wide).
            let cols: [(__m256i, __m256i); 4] = std::array::from_fn(|j| {
                let c = clamp(_mm_add_epi32(ix, _mm_set1_epi32(j as i32 - 1)), k.max_x);
                let past_0 = _mm_andnot_si128(_mm_cmpeq_epi32(c, izero), one);
                let offset = _mm_sub_epi32(_mm_add_epi32(_mm_add_epi32(c, c), c), past_0);
                let shift = _mm_slli_epi32::<3>(past_0);
                (
                    _mm256_broadcastsi128_si256(offset),
                    _mm256_broadcastsi128_si256(shift),
                )
            });
            // Tap rows 0 and 1, then 2 and 3, in the halves.
            let pairs = [
                _mm256_set_m128i(rows[1], rows[0]),
                _mm256_set_m128i(rows[3], rows[2]),
            ];
            let taps: [[__m256i; 4]; 2] = pairs.map(|rows| {
                cols.map(|(offset, shift)| {
                    // SAFETY: every offset is `row * stride + 3 c - 1` (or `row * stride` for
                    // c = 0) with the row and column clamped to the source, so the four bytes
                    // read lie in the row (`CubicSource::new`: offsets fit i32 and `bytes`
                    // holds every row).
                    let taps = unsafe {
                        _mm256_i32gather_epi32::<1>(k.base, _mm256_add_epi32(rows, offset))
                    };
                    _mm256_srlv_epi32(taps, shift)
                })
            });
            [0, 8, 16].map(|bits| {
                channel(dx, dy, inside32, edge[bits as usize / 8], |p| {
                    taps[p].map(|v| take(v, bits))
                })
            })
        }
    };
    // Unsigned saturation to bytes (every value is in 0..=255 already), planar
    // `[r0..r3, g0..g3, b0..b3]`, interleaved back into packed RGB.
    let planar = _mm_packus_epi16(_mm_packus_epi32(r, g), _mm_packus_epi32(b, b));
    _mm_shuffle_epi8(
        planar,
        _mm_setr_epi8(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, -1, -1, -1, -1),
    )
}

/// Writes bytes 0..12 of `px` (four pixels) at byte `at` of `row`, fewer at its end.
#[target_feature(enable = "avx2")]
#[inline]
fn store(row: &mut [u8], at: usize, px: __m128i) {
    if let Some(dst) = row.get_mut(at..at + 16) {
        // SAFETY: 16 bytes from `at` are inside the row; the 4 past this step's 12 are the
        // next step's, written after.
        unsafe { _mm_storeu_si128(dst.as_mut_ptr().cast(), px) };
    } else {
        let mut bytes = [0u8; 16];
        // SAFETY: a 16-byte store into a 16-byte array.
        unsafe { _mm_storeu_si128(bytes.as_mut_ptr().cast(), px) };
        let n = row.len().saturating_sub(at).min(12);
        row[at..at + n].copy_from_slice(&bytes[..n]);
    }
}

/// [`Avx2Cubic::affine`].
///
/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn affine_avx2(
    src: &CubicSource<'_>,
    a: &AffineMatrix,
    col_a: &[f64],
    col_b: &[f64],
    fill: [u8; 3],
    w: usize,
    dst: &mut [u8],
) {
    if w == 0 {
        return;
    }
    let k = Consts::new(src, fill);
    let (a2, a5) = (_mm256_set1_pd(a[2]), _mm256_set1_pd(a[5]));
    for (y, row) in dst.chunks_exact_mut(3 * w).enumerate() {
        let yin = y as f64 + 0.5;
        let ry = _mm256_set1_pd(a[1] * yin);
        let rx = _mm256_set1_pd(a[4] * yin);
        let cols = col_a.chunks_exact(4).zip(col_b.chunks_exact(4));
        for (x, (ca, cb)) in (0..w).step_by(4).zip(cols) {
            // SAFETY: each chunk holds 4 values.
            let (ca, cb) = unsafe { (_mm256_loadu_pd(ca.as_ptr()), _mm256_loadu_pd(cb.as_ptr())) };
            let xs = _mm256_add_pd(_mm256_add_pd(ca, ry), a2);
            let ys = _mm256_add_pd(_mm256_add_pd(cb, rx), a5);
            store(row, 3 * x, four_pixels(&k, xs, ys));
        }
    }
}

/// [`Avx2Cubic::perspective`].
///
/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
unsafe fn perspective_avx2(
    src: &CubicSource<'_>,
    c: &PerspectiveCoeffs,
    fill: [u8; 3],
    w: usize,
    dst: &mut [u8],
) {
    if w == 0 {
        return;
    }
    let k = Consts::new(src, fill);
    let [c0, c2, c3, c5, c6] = [c[0], c[2], c[3], c[5], c[6]].map(|v| _mm256_set1_pd(v));
    let one = _mm256_set1_pd(1.0);
    let lanes = _mm256_setr_pd(0.5, 1.5, 2.5, 3.5);
    for (y, row) in dst.chunks_exact_mut(3 * w).enumerate() {
        let yin = y as f64 + 0.5;
        let (rx, ry, rd) = (c[1] * yin, c[4] * yin, c[7] * yin);
        let (rx, ry, rd) = (_mm256_set1_pd(rx), _mm256_set1_pd(ry), _mm256_set1_pd(rd));
        for x in (0..w).step_by(4) {
            // `x + 0.5` exactly (x is far below 2^52).
            let xin = _mm256_add_pd(_mm256_set1_pd(x as f64), lanes);
            let den = _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(c6, xin), rd), one);
            let xs = _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(c0, xin), rx), c2);
            let ys = _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(c3, xin), ry), c5);
            let (xs, ys) = (_mm256_div_pd(xs, den), _mm256_div_pd(ys, den));
            store(row, 3 * x, four_pixels(&k, xs, ys));
        }
    }
}
