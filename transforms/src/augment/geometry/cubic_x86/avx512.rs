//! The BICUBIC warps eight pixels a step on AVX-512 ([`super`] says how): one pixel per lane
//! of a 512-bit vector of doubles; the integer taps of two tap rows share a 512-bit vector, the
//! range tests are mask registers, and each step's 24 bytes (fewer at a row's end) go out in
//! one masked store.
//!
//! Must not run where the CPU lacks AVX2 or AVX-512 F, BW or VL.

use std::arch::x86_64::*;
use std::arch::x86_64::{
    __m256i as I, __m512d as F, __m512i as W, _mm256_set1_epi32 as set1_epi32,
    _mm512_add_epi32 as add_epi32, _mm512_add_pd as add_pd, _mm512_cvttpd_epi32 as cvttpd_epi32,
    _mm512_div_pd as div_pd, _mm512_max_pd as max_pd, _mm512_min_pd as min_pd,
    _mm512_mul_pd as mul_pd, _mm512_set1_pd as set1_pd, _mm512_setzero_pd as setzero_pd,
    _mm512_sub_epi32 as sub_epi32, _mm512_sub_pd as sub_pd,
};

const LANES: usize = 8;

/// A lane mask, one bit a lane.
type M = __mmask8;

cubic_lanes!("avx2,avx512f,avx512bw,avx512vl");

#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
#[inline]
fn load_pd(v: &[f64; LANES]) -> F {
    // SAFETY: eight doubles.
    unsafe { _mm512_loadu_pd(v.as_ptr()) }
}

/// The low 256 bits' eight i32 as doubles.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
#[inline]
fn lo(v: W) -> F {
    _mm512_cvtepi32_pd(_mm512_castsi512_si256(v))
}

/// The high 256 bits' eight i32 as doubles.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
#[inline]
fn hi(v: W) -> F {
    _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64::<1>(v))
}

#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
#[inline]
fn select(m: M, a: I, b: I) -> I {
    _mm256_mask_blend_epi32(m, a, b)
}

/// Eight pixels sampled at `(xs, ys)`: bytes 0..24 of the result are their packed RGB.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
#[inline]
fn pixels(k: &Consts, xs: F, ys: F) -> __m256i {
    let zero = _mm512_setzero_pd();
    // Pillow's range test: outside on either axis fills; a NaN coordinate passes it (every
    // comparison is false) and comes out black. Ordered comparisons are false for NaN.
    let outside = _mm512_cmp_pd_mask::<_CMP_LT_OQ>(xs, zero)
        | _mm512_cmp_pd_mask::<_CMP_GE_OQ>(xs, k.fw)
        | _mm512_cmp_pd_mask::<_CMP_LT_OQ>(ys, zero)
        | _mm512_cmp_pd_mask::<_CMP_GE_OQ>(ys, k.fh);
    let inside = _mm512_cmp_pd_mask::<_CMP_GE_OQ>(xs, zero)
        & _mm512_cmp_pd_mask::<_CMP_LT_OQ>(xs, k.fw)
        & _mm512_cmp_pd_mask::<_CMP_GE_OQ>(ys, zero)
        & _mm512_cmp_pd_mask::<_CMP_LT_OQ>(ys, k.fh);
    let edge = k.fill.map(|f| _mm256_maskz_mov_epi32(outside, f));
    let [r, g, b] = if inside == 0 {
        edge
    } else {
        let half = _mm512_set1_pd(0.5);
        let (vx, vy) = (_mm512_sub_pd(xs, half), _mm512_sub_pd(ys, half));
        let floor = |v| _mm512_roundscale_pd::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(v);
        let (fx, fy) = (floor(vx), floor(vy));
        let (dx, dy) = (_mm512_sub_pd(vx, fx), _mm512_sub_pd(vy, fy));
        // Lanes outside convert to anything (i32::MIN for huge or NaN values) and wrap when
        // offset; clamping keeps every tap inside the source, and their results are replaced.
        let (ix, iy) = (_mm512_cvttpd_epi32(fx), _mm512_cvttpd_epi32(fy));
        let izero = _mm256_setzero_si256();
        let clamp = |v: I, max: I| _mm256_min_epi32(_mm256_max_epi32(v, izero), max);
        let row = |r: i32| {
            _mm256_mullo_epi32(
                clamp(_mm256_add_epi32(iy, _mm256_set1_epi32(r)), k.max_y),
                k.stride,
            )
        };
        let rows = [row(-1), row(0), row(1), row(2)];
        let byte = _mm512_set1_epi32(0xff);
        let take =
            |v: W, bits: i32| _mm512_and_si512(_mm512_srl_epi32(v, _mm_cvtsi32_si128(bits)), byte);
        // Every lane inside with all 16 taps unclamped (and 16 bytes readable from each tap
        // row's first tap): each tap row's four taps are 12 consecutive bytes, one load.
        let first = _mm256_sub_epi32(
            _mm256_add_epi32(_mm256_add_epi32(ix, ix), ix),
            _mm256_set1_epi32(3),
        );
        let one = _mm256_set1_epi32(1);
        let unclamped = _mm256_cmpgt_epi32_mask(ix, izero)
            & _mm256_cmpgt_epi32_mask(k.max_x, _mm256_add_epi32(ix, one))
            & _mm256_cmpgt_epi32_mask(iy, izero)
            & _mm256_cmpgt_epi32_mask(k.max_y, _mm256_add_epi32(iy, one))
            & _mm256_cmpgt_epi32_mask(k.last_load, _mm256_add_epi32(rows[3], first));
        if unclamped & inside == 0xff {
            let mut offsets = [[0i32; 8]; 4];
            for (o, r) in offsets.iter_mut().zip(rows) {
                // SAFETY: a 32-byte store into eight i32.
                unsafe { _mm256_storeu_si256(o.as_mut_ptr().cast(), _mm256_add_epi32(r, first)) };
            }
            // Per 128-bit lane: the 12 tap bytes as dwords of one channel's four taps.
            let by_channel = _mm512_broadcast_i32x4(_mm_setr_epi8(
                0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11, -1, -1, -1, -1,
            ));
            // Tap rows 0 and 1, then 2 and 3. Vector `q` holds, in its 128-bit lanes, the
            // tap row of pixels `q` and `q + 4` in the first row, then in the second; the
            // transpose within lanes makes dword `p` of lane `l` pixel `p` (of `0..4` in
            // lanes 0 and 2, of `4..8` in lanes 1 and 3) of one channel: each 256-bit half is
            // one tap row's eight pixels in order.
            let pair = |lo: usize| {
                let [m0, m1, m2, m3]: [W; 4] = std::array::from_fn(|q| {
                    let load = |r: usize, p: usize| {
                        // SAFETY: every offset is at least 0 (the taps are unclamped, so
                        // inside) and below `last_load` (`unclamped`), 16 bytes or more
                        // before the end of `bytes`; rows further up start earlier.
                        unsafe {
                            _mm_loadu_si128(k.base.cast::<u8>().add(offsets[r][p] as usize).cast())
                        }
                    };
                    let v = _mm512_castsi128_si512(load(lo, q));
                    let v = _mm512_inserti32x4::<1>(v, load(lo, q + 4));
                    let v = _mm512_inserti32x4::<2>(v, load(lo + 1, q));
                    let v = _mm512_inserti32x4::<3>(v, load(lo + 1, q + 4));
                    _mm512_shuffle_epi8(v, by_channel)
                });
                let (t0, t1) = (_mm512_unpacklo_epi32(m0, m1), _mm512_unpackhi_epi32(m0, m1));
                let (t2, t3) = (_mm512_unpacklo_epi32(m2, m3), _mm512_unpackhi_epi32(m2, m3));
                [
                    _mm512_unpacklo_epi64(t0, t2),
                    _mm512_unpackhi_epi64(t0, t2),
                    _mm512_unpacklo_epi64(t1, t3),
                ]
            };
            let pairs = [pair(0), pair(2)];
            let taps = |p: usize, c: usize| {
                let v = pairs[p][c];
                [
                    take(v, 0),
                    take(v, 8),
                    take(v, 16),
                    _mm512_srli_epi32::<24>(v),
                ]
            };
            [0, 1, 2].map(|c| channel(dx, dy, inside, edge[c], |p| taps(p, c)))
        } else {
            // Per tap column: the offset of the four bytes that end with the pixel (3 c - 1)
            // and the shift that drops the byte before it, or for column 0 the offset 0 and
            // no shift (the byte after it is the next pixel's, in the same row: the source
            // is 2 wide).
            let cols: [(W, W); 4] = std::array::from_fn(|j| {
                let c = clamp(
                    _mm256_add_epi32(ix, _mm256_set1_epi32(j as i32 - 1)),
                    k.max_x,
                );
                let past_0 = _mm256_andnot_si256(_mm256_cmpeq_epi32(c, izero), one);
                let offset = _mm256_sub_epi32(_mm256_add_epi32(_mm256_add_epi32(c, c), c), past_0);
                let shift = _mm256_slli_epi32::<3>(past_0);
                (
                    _mm512_broadcast_i64x4(offset),
                    _mm512_broadcast_i64x4(shift),
                )
            });
            // Tap rows 0 and 1, then 2 and 3, in the halves.
            let pairs = [
                _mm512_inserti64x4::<1>(_mm512_castsi256_si512(rows[0]), rows[1]),
                _mm512_inserti64x4::<1>(_mm512_castsi256_si512(rows[2]), rows[3]),
            ];
            let taps: [[W; 4]; 2] = pairs.map(|rows| {
                cols.map(|(offset, shift)| {
                    // SAFETY: every offset is `row * stride + 3 c - 1` (or `row * stride` for
                    // c = 0) with the row and column clamped to the source, so the four bytes
                    // read lie in the row (`CubicSource::new`: offsets fit i32 and `bytes`
                    // holds every row).
                    let taps = unsafe {
                        _mm512_i32gather_epi32::<1>(_mm512_add_epi32(rows, offset), k.base)
                    };
                    _mm512_srlv_epi32(taps, shift)
                })
            });
            [0, 8, 16].map(|bits| {
                channel(dx, dy, inside, edge[bits as usize / 8], |p| {
                    taps[p].map(|v| take(v, bits))
                })
            })
        }
    };
    // Per 128-bit half, as in the AVX2 kernel: unsigned saturation to bytes (every value is
    // in 0..=255 already), planar `[r0..r3, g0..g3, b0..b3]`, interleaved back into packed
    // RGB; then the halves' 12 bytes (dwords 0-2 and 4-6) made the 24.
    let planar = _mm256_packus_epi16(_mm256_packus_epi32(r, g), _mm256_packus_epi32(b, b));
    let interleave = _mm256_broadcastsi128_si256(_mm_setr_epi8(
        0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, -1, -1, -1, -1,
    ));
    _mm256_permutevar8x32_epi32(
        _mm256_shuffle_epi8(planar, interleave),
        _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 7, 7),
    )
}

/// Writes bytes 0..24 of `px` (eight pixels) at byte `at` of `row`, fewer at its end.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
#[inline]
fn store(row: &mut [u8], at: usize, px: __m256i) {
    let n = row.len().saturating_sub(at).min(24);
    let at = at.min(row.len());
    // SAFETY: the mask covers bytes `at..at + n`, inside the row; masked-off bytes are
    // neither read nor written (and cannot fault).
    unsafe { _mm256_mask_storeu_epi8(row.as_mut_ptr().add(at).cast(), (1u32 << n) - 1, px) };
}
