//! The BICUBIC warps four pixels a step on AVX2 ([`super`] says how): one pixel per lane of a
//! 256-bit vector of doubles; the integer taps of two tap rows share a 256-bit vector.
//!
//! Must not run where the CPU lacks AVX2.

use std::arch::x86_64::*;
use std::arch::x86_64::{
    __m128i as I, __m256d as F, __m256i as W, _mm256_add_epi32 as add_epi32,
    _mm256_add_pd as add_pd, _mm256_cvttpd_epi32 as cvttpd_epi32, _mm256_div_pd as div_pd,
    _mm256_max_pd as max_pd, _mm256_min_pd as min_pd, _mm256_mul_pd as mul_pd,
    _mm256_set1_pd as set1_pd, _mm256_setzero_pd as setzero_pd, _mm256_sub_epi32 as sub_epi32,
    _mm256_sub_pd as sub_pd, _mm_set1_epi32 as set1_epi32,
};

const LANES: usize = 4;

/// A lane mask: all-ones or zero 32-bit lanes.
type M = __m128i;

cubic_lanes!("avx2");

#[target_feature(enable = "avx2")]
#[inline]
fn load_pd(v: &[f64; LANES]) -> F {
    // SAFETY: four doubles.
    unsafe { _mm256_loadu_pd(v.as_ptr()) }
}

/// The low 128 bits' four i32 as doubles.
#[target_feature(enable = "avx2")]
#[inline]
fn lo(v: W) -> F {
    _mm256_cvtepi32_pd(_mm256_castsi256_si128(v))
}

/// The high 128 bits' four i32 as doubles.
#[target_feature(enable = "avx2")]
#[inline]
fn hi(v: W) -> F {
    _mm256_cvtepi32_pd(_mm256_extracti128_si256::<1>(v))
}

#[target_feature(enable = "avx2")]
#[inline]
fn select(m: M, a: I, b: I) -> I {
    _mm_blendv_epi8(a, b, m)
}

/// A 64-bit lane mask as four 32-bit lanes (all-ones or zero survive the packing).
#[target_feature(enable = "avx2")]
#[inline]
fn mask32(m: __m256d) -> __m128i {
    let m = _mm256_castpd_si256(m);
    _mm_packs_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256::<1>(m))
}

/// Four pixels sampled at `(xs, ys)`: bytes 0..12 of the result are their packed RGB.
#[target_feature(enable = "avx2")]
#[inline]
fn pixels(k: &Consts, xs: F, ys: F) -> __m128i {
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
