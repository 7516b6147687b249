//! The BILINEAR affine warp of [`super::affine`] on x86-64 vector units: AVX2 (four pixels a
//! step, one per f64 lane) and AVX-512 (eight).
//!
//! Each lane runs the scalar path's IEEE double operations in the scalar path's order, so the
//! bits are Pillow's on every machine: the source position `(a0 (x + 0.5) + a1 (y + 0.5)) + a2`
//! (the column products tabulated as the scalar path tabulates them), the inside test, `floor`
//! (exact, as the scalar truncation is), the fraction `v - floor(v)`, two `a + (b - a) d`
//! interpolations whose `b - a` is taken in integers, then `v1 + (v2 - v1) dy`, truncated to
//! 8 bits (with unsigned saturation, as Rust's `as u8` saturates). Multiplies and adds are
//! separate instructions: Rust never contracts them into fused multiply-adds, whose single
//! rounding would change bits. Pillow's "last row: `v2 = v1`" falls out of clamping the far
//! row to the near one (`v1 + (v1 - v1) dy` is `v1`), so no lane takes a branch of its own.
//!
//! The taps are gathered from the source's pixels as packed `u32` (the buffer
//! [`super::affine`]'s NEAREST engines use too), indices `row * width + column` in i32.
//!
//! Must not run where [`crate::cpu`] did not report the kernel's features, nor on a source
//! whose `width * height` does not fit i32 (the caller keeps the scalar path there).

use std::arch::x86_64::*;

use super::affine::AffineMatrix;

/// What a kernel needs besides the output: the source pixels, the matrix and the per-column
/// products of the scalar path.
#[derive(Clone, Copy, Debug)]
pub(super) struct BilinearWarp<'a> {
    /// The source's pixels as little-endian `u32` with a zero high byte, rows `width` apart.
    pub src: &'a [u32],
    /// Source width and height, both at least 1, their product at most `i32::MAX` and at most
    /// `src.len()`.
    pub width: usize,
    pub height: usize,
    pub matrix: &'a AffineMatrix,
    /// Per output column `x`: `a0 * (x + 0.5)` and `a3 * (x + 0.5)`; at least the output width
    /// rounded up to a multiple of 8 (lanes past the width compute and are not stored).
    pub col_a: &'a [f64],
    pub col_b: &'a [f64],
    pub fill: [u8; 3],
}

impl BilinearWarp<'_> {
    /// Whether the kernels' preconditions hold for an output `w` pixels wide.
    pub(super) fn fits(&self, w: usize) -> bool {
        let lanes = w.div_ceil(8) * 8;
        self.width >= 1
            && self.height >= 1
            && self
                .width
                .checked_mul(self.height)
                .is_some_and(|n| n <= i32::MAX as usize && n <= self.src.len())
            && self.col_a.len() >= lanes
            && self.col_b.len() >= lanes
    }
}

/// Bytes 0..12 of the four-pixel result: the planar `[r0..r3, g0..g3, b0..b3]` interleaved
/// back into packed RGB.
#[inline(always)]
fn interleave_rgb() -> __m128i {
    // SAFETY: SSE2, part of x86-64's baseline.
    unsafe { _mm_setr_epi8(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, -1, -1, -1, -1) }
}

/// The warp into `dst` (packed RGB, `w` pixels a row, `3 * w * h` bytes), four pixels a step.
///
/// # Safety
/// The CPU has AVX2, and `warp.fits(w)`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn bilinear_avx2(warp: &BilinearWarp<'_>, w: usize, dst: &mut [u8]) {
    if w == 0 {
        return;
    }
    let a = warp.matrix;
    let fw = _mm256_set1_pd(warp.width as f64);
    let fh = _mm256_set1_pd(warp.height as f64);
    let zero = _mm256_setzero_pd();
    let half = _mm256_set1_pd(0.5);
    let (a2, a5) = (_mm256_set1_pd(a[2]), _mm256_set1_pd(a[5]));
    let max_x = _mm_set1_epi32(warp.width as i32 - 1);
    let max_y = _mm_set1_epi32(warp.height as i32 - 1);
    let stride = _mm_set1_epi32(warp.width as i32);
    let one = _mm_set1_epi32(1);
    let izero = _mm_setzero_si128();
    let byte = _mm_set1_epi32(0xff);
    let fill = warp.fill.map(|c| _mm_set1_epi32(i32::from(c)));
    let [f0, f1, f2] = warp.fill.map(|c| c as i8);
    let fill_px = _mm_setr_epi8(f0, f1, f2, f0, f1, f2, f0, f1, f2, f0, f1, f2, 0, 0, 0, 0);
    let interleave = interleave_rgb();
    let base = warp.src.as_ptr().cast::<i32>();
    for (y, row) in dst.chunks_exact_mut(3 * w).enumerate() {
        let yin = y as f64 + 0.5;
        let ry = _mm256_set1_pd(a[1] * yin);
        let rx = _mm256_set1_pd(a[4] * yin);
        for x in (0..w).step_by(4) {
            // SAFETY: `fits`: the column tables hold `x + 4` values.
            let (ca, cb) = unsafe {
                (
                    _mm256_loadu_pd(warp.col_a.as_ptr().add(x)),
                    _mm256_loadu_pd(warp.col_b.as_ptr().add(x)),
                )
            };
            let xs = _mm256_add_pd(_mm256_add_pd(ca, ry), a2);
            let ys = _mm256_add_pd(_mm256_add_pd(cb, rx), a5);
            // Ordered comparisons: a NaN lane is outside, as Pillow's test leaves it.
            let inside = _mm256_and_pd(
                _mm256_and_pd(
                    _mm256_cmp_pd::<_CMP_GE_OQ>(xs, zero),
                    _mm256_cmp_pd::<_CMP_LT_OQ>(xs, fw),
                ),
                _mm256_and_pd(
                    _mm256_cmp_pd::<_CMP_GE_OQ>(ys, zero),
                    _mm256_cmp_pd::<_CMP_LT_OQ>(ys, fh),
                ),
            );
            let out = if _mm256_movemask_pd(inside) == 0 {
                fill_px
            } else {
                let vx = _mm256_sub_pd(xs, half);
                let vy = _mm256_sub_pd(ys, half);
                let (fx, fy) = (_mm256_floor_pd(vx), _mm256_floor_pd(vy));
                let (dx, dy) = (_mm256_sub_pd(vx, fx), _mm256_sub_pd(vy, fy));
                // Lanes outside convert to anything (i32::MIN for huge values); clamping keeps
                // every gather index inside the source, and their results are replaced by fill.
                let (ix, iy) = (_mm256_cvttpd_epi32(fx), _mm256_cvttpd_epi32(fy));
                let clamp = |v: __m128i, max: __m128i| _mm_min_epi32(_mm_max_epi32(v, izero), max);
                let x0 = clamp(ix, max_x);
                let x1 = clamp(_mm_add_epi32(ix, one), max_x);
                let r0 = _mm_mullo_epi32(clamp(iy, max_y), stride);
                // The far row clamped: on the last row it is the near one (Pillow's `v2 = v1`).
                let r1 = _mm_mullo_epi32(clamp(_mm_add_epi32(iy, one), max_y), stride);
                // SAFETY: every index is `row * width + column` with both clamped to the
                // source, below `width * height <= src.len()` (`fits`).
                let [p0, q0, p1, q1] = unsafe {
                    [
                        _mm_i32gather_epi32::<4>(base, _mm_add_epi32(r0, x0)),
                        _mm_i32gather_epi32::<4>(base, _mm_add_epi32(r0, x1)),
                        _mm_i32gather_epi32::<4>(base, _mm_add_epi32(r1, x0)),
                        _mm_i32gather_epi32::<4>(base, _mm_add_epi32(r1, x1)),
                    ]
                };
                // The 64-bit lane masks as 32-bit ones (all-ones or zero survive the packing).
                let inside32 = _mm_packs_epi32(
                    _mm256_castsi256_si128(_mm256_castpd_si256(inside)),
                    _mm256_extracti128_si256::<1>(_mm256_castpd_si256(inside)),
                );
                let channel = |shift: __m128i, fill: __m128i| {
                    let take = |v: __m128i| _mm_and_si128(_mm_srl_epi32(v, shift), byte);
                    let (p0, q0, p1, q1) = (take(p0), take(q0), take(p1), take(q1));
                    let v1 = _mm256_add_pd(
                        _mm256_cvtepi32_pd(p0),
                        _mm256_mul_pd(_mm256_cvtepi32_pd(_mm_sub_epi32(q0, p0)), dx),
                    );
                    let v2 = _mm256_add_pd(
                        _mm256_cvtepi32_pd(p1),
                        _mm256_mul_pd(_mm256_cvtepi32_pd(_mm_sub_epi32(q1, p1)), dx),
                    );
                    let v = _mm256_add_pd(v1, _mm256_mul_pd(_mm256_sub_pd(v2, v1), dy));
                    _mm_blendv_epi8(fill, _mm256_cvttpd_epi32(v), inside32)
                };
                let r = channel(_mm_cvtsi32_si128(0), fill[0]);
                let g = channel(_mm_cvtsi32_si128(8), fill[1]);
                let b = channel(_mm_cvtsi32_si128(16), fill[2]);
                // Unsigned saturation to bytes: `as u8` on the truncated value.
                let planar = _mm_packus_epi16(_mm_packus_epi32(r, g), _mm_packus_epi32(b, b));
                _mm_shuffle_epi8(planar, interleave)
            };
            let at = 3 * x;
            if at + 16 <= row.len() {
                // SAFETY: 16 bytes from `at` are inside the row; the 4 past this step's 12
                // are the next step's, written after.
                unsafe { _mm_storeu_si128(row.as_mut_ptr().add(at).cast(), out) };
            } else {
                let mut bytes = [0u8; 16];
                // SAFETY: a 16-byte store into a 16-byte array.
                unsafe { _mm_storeu_si128(bytes.as_mut_ptr().cast(), out) };
                let n = (row.len() - at).min(12);
                row[at..at + n].copy_from_slice(&bytes[..n]);
            }
        }
    }
}

/// [`bilinear_avx2`] eight pixels a step: the f64 arithmetic on 512-bit registers, masks in
/// mask registers, each step's 24 bytes (fewer at a row's end) in one masked store.
///
/// # Safety
/// The CPU has AVX2 and AVX-512 F, BW and VL, and `warp.fits(w)`.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn bilinear_avx512(warp: &BilinearWarp<'_>, w: usize, dst: &mut [u8]) {
    if w == 0 {
        return;
    }
    let a = warp.matrix;
    let fw = _mm512_set1_pd(warp.width as f64);
    let fh = _mm512_set1_pd(warp.height as f64);
    let zero = _mm512_setzero_pd();
    let half = _mm512_set1_pd(0.5);
    let (a2, a5) = (_mm512_set1_pd(a[2]), _mm512_set1_pd(a[5]));
    let max_x = _mm256_set1_epi32(warp.width as i32 - 1);
    let max_y = _mm256_set1_epi32(warp.height as i32 - 1);
    let stride = _mm256_set1_epi32(warp.width as i32);
    let one = _mm256_set1_epi32(1);
    let izero = _mm256_setzero_si256();
    let byte = _mm256_set1_epi32(0xff);
    let fill = warp.fill.map(|c| _mm256_set1_epi32(i32::from(c)));
    let interleave = _mm256_broadcastsi128_si256(interleave_rgb());
    // Each 128-bit half holds 12 bytes: dwords 0-2 and 4-6 are the 24.
    let compact = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 7, 7);
    let base = warp.src.as_ptr().cast::<i32>();
    for (y, row) in dst.chunks_exact_mut(3 * w).enumerate() {
        let yin = y as f64 + 0.5;
        let ry = _mm512_set1_pd(a[1] * yin);
        let rx = _mm512_set1_pd(a[4] * yin);
        for x in (0..w).step_by(8) {
            // SAFETY: `fits`: the column tables hold `x + 8` values.
            let (ca, cb) = unsafe {
                (
                    _mm512_loadu_pd(warp.col_a.as_ptr().add(x)),
                    _mm512_loadu_pd(warp.col_b.as_ptr().add(x)),
                )
            };
            let xs = _mm512_add_pd(_mm512_add_pd(ca, ry), a2);
            let ys = _mm512_add_pd(_mm512_add_pd(cb, rx), a5);
            let inside = _mm512_cmp_pd_mask::<_CMP_GE_OQ>(xs, zero)
                & _mm512_cmp_pd_mask::<_CMP_LT_OQ>(xs, fw)
                & _mm512_cmp_pd_mask::<_CMP_GE_OQ>(ys, zero)
                & _mm512_cmp_pd_mask::<_CMP_LT_OQ>(ys, fh);
            let [r, g, b] = if inside == 0 {
                fill
            } else {
                let vx = _mm512_sub_pd(xs, half);
                let vy = _mm512_sub_pd(ys, half);
                let fx = _mm512_roundscale_pd::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(vx);
                let fy = _mm512_roundscale_pd::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(vy);
                let (dx, dy) = (_mm512_sub_pd(vx, fx), _mm512_sub_pd(vy, fy));
                let (ix, iy) = (_mm512_cvttpd_epi32(fx), _mm512_cvttpd_epi32(fy));
                let clamp =
                    |v: __m256i, max: __m256i| _mm256_min_epi32(_mm256_max_epi32(v, izero), max);
                let x0 = clamp(ix, max_x);
                let x1 = clamp(_mm256_add_epi32(ix, one), max_x);
                let r0 = _mm256_mullo_epi32(clamp(iy, max_y), stride);
                let r1 = _mm256_mullo_epi32(clamp(_mm256_add_epi32(iy, one), max_y), stride);
                // SAFETY: as in `bilinear_avx2`: clamped indices below `width * height`.
                let [p0, q0, p1, q1] = unsafe {
                    [
                        _mm256_i32gather_epi32::<4>(base, _mm256_add_epi32(r0, x0)),
                        _mm256_i32gather_epi32::<4>(base, _mm256_add_epi32(r0, x1)),
                        _mm256_i32gather_epi32::<4>(base, _mm256_add_epi32(r1, x0)),
                        _mm256_i32gather_epi32::<4>(base, _mm256_add_epi32(r1, x1)),
                    ]
                };
                let channel = |shift: __m128i, fill: __m256i| {
                    let take = |v: __m256i| _mm256_and_si256(_mm256_srl_epi32(v, shift), byte);
                    let (p0, q0, p1, q1) = (take(p0), take(q0), take(p1), take(q1));
                    let v1 = _mm512_add_pd(
                        _mm512_cvtepi32_pd(p0),
                        _mm512_mul_pd(_mm512_cvtepi32_pd(_mm256_sub_epi32(q0, p0)), dx),
                    );
                    let v2 = _mm512_add_pd(
                        _mm512_cvtepi32_pd(p1),
                        _mm512_mul_pd(_mm512_cvtepi32_pd(_mm256_sub_epi32(q1, p1)), dx),
                    );
                    let v = _mm512_add_pd(v1, _mm512_mul_pd(_mm512_sub_pd(v2, v1), dy));
                    _mm256_mask_blend_epi32(inside, fill, _mm512_cvttpd_epi32(v))
                };
                [
                    channel(_mm_cvtsi32_si128(0), fill[0]),
                    channel(_mm_cvtsi32_si128(8), fill[1]),
                    channel(_mm_cvtsi32_si128(16), fill[2]),
                ]
            };
            // Per 128-bit half, as in the AVX2 kernel: planar bytes of four pixels, interleaved.
            let planar = _mm256_packus_epi16(_mm256_packus_epi32(r, g), _mm256_packus_epi32(b, b));
            let out = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(planar, interleave), compact);
            let at = 3 * x;
            let n = (row.len() - at).min(24);
            // SAFETY: the mask covers bytes `at..at + n`, inside the row; masked-off bytes are
            // neither read nor written (and cannot fault).
            unsafe {
                _mm256_mask_storeu_epi8(row.as_mut_ptr().add(at).cast(), (1u32 << n) - 1, out)
            };
        }
    }
}
