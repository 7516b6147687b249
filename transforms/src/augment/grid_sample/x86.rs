//! The pixel loop of [`super`]'s warps on AVX2 with FMA, eight output pixels a step, with
//! the scalar loop's bits on every input.
//!
//! Each lane runs the scalar path's float32 operations in its order: the grid
//! `(x * a + y * b) + c` (separate multiplies and adds: Rust never contracts them), for
//! perspective the same over `(x * g + y * h) + 1` then `- 1`; the source coordinate
//! `fma(g + 1, size / 2, -0.5)` (`_mm256_fmadd_ps` rounds once, as `f32::mul_add` does);
//! NEAREST's `round` half to even, BILINEAR's `floor`, fractions, weights and the fused sum
//! `fma(se_v, se, fma(sw_v, sw, fma(ne_v, ne, nw_v * nw)))`, the mask sum and blends, and
//! round-half-even to bytes (`max(v, 0)` turns NaN into 0 as the scalar `as u8` does).
//!
//! Tap tests are made on the float coordinates (integral after `floor` or `round`, so exact
//! against the integral image size), which also covers coordinates beyond i32 and NaN (never
//! inside for BILINEAR; NEAREST's NaN is coordinate 0, as the scalar `NaN as i64` is).
//! Taps are gathered as 32-bit loads at byte offset `3 * index`, the last pixel's moved one
//! byte back and shifted, so nothing past the buffer is read; taps outside the image read 0.
//!
//! Must not run where [`crate::cpu::avx2_fma`] is false or on sizes [`fits`] refuses.

use std::arch::x86_64::*;

use super::{round_u8, AffineGrid, ElasticGrid, PerspectiveGrid, TensorMode, WarpParams};
use crate::augment::policy::Api;

/// Whether the kernel's preconditions hold for a `w` x `h` source of `len` bytes with axis
/// tables of `xs_len` and `ys_len` values: at least two pixels, `len` within i32, both
/// sizes exact in float32 (below 2^24), the column table padded to a multiple of 8.
pub(super) fn fits(w: usize, h: usize, len: usize, xs_len: usize, ys_len: usize) -> bool {
    w >= 1
        && h >= 1
        && w.checked_mul(h).and_then(|n| n.checked_mul(3)) == Some(len)
        && len >= 4
        && len <= i32::MAX as usize
        && w < 1 << 24
        && h < 1 << 24
        && xs_len >= w.div_ceil(8) * 8
        && ys_len >= h
}

/// A sampling grid evaluated eight output pixels at a time.
pub(super) trait Grid8 {
    /// The grid at pixel centres `x` (eight columns from `ox`) on row `y` (broadcast), row
    /// `oy`.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA.
    unsafe fn at8(&self, x: __m256, y: __m256, ox: usize, oy: usize) -> (__m256, __m256);
}

impl Grid8 for AffineGrid {
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn at8(&self, x: __m256, y: __m256, _ox: usize, _oy: usize) -> (__m256, __m256) {
        let [ax, bx, cx] = self.x.map(|v| _mm256_set1_ps(v));
        let [ay, by, cy] = self.y.map(|v| _mm256_set1_ps(v));
        let lin =
            |a, b, c| _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(x, a), _mm256_mul_ps(y, b)), c);
        (lin(ax, bx, cx), lin(ay, by, cy))
    }
}

impl Grid8 for PerspectiveGrid {
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn at8(&self, x: __m256, y: __m256, _ox: usize, _oy: usize) -> (__m256, __m256) {
        let [ax, bx, cx] = self.x.map(|v| _mm256_set1_ps(v));
        let [ay, by, cy] = self.y.map(|v| _mm256_set1_ps(v));
        let [g, h] = self.d.map(|v| _mm256_set1_ps(v));
        let one = _mm256_set1_ps(1.0);
        let lin =
            |a, b, c| _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(x, a), _mm256_mul_ps(y, b)), c);
        let den = lin(g, h, one);
        (
            _mm256_sub_ps(_mm256_div_ps(lin(ax, bx, cx), den), one),
            _mm256_sub_ps(_mm256_div_ps(lin(ay, by, cy), den), one),
        )
    }
}

impl Grid8 for ElasticGrid<'_> {
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn at8(&self, x: __m256, y: __m256, ox: usize, oy: usize) -> (__m256, __m256) {
        let i = oy * self.width + ox;
        // `padded` (the only way this kernel runs an elastic grid): the eight values from any
        // step's first pixel lie inside both fields; lanes past the row end are not stored.
        let load = |f: &[f32]| match f.get(i..i + 8) {
            // SAFETY: eight floats inside the slice; AVX (this function's features).
            Some(v) => unsafe { _mm256_loadu_ps(v.as_ptr()) },
            None => _mm256_set1_ps(f32::NAN),
        };
        (
            _mm256_add_ps(x, load(self.dx)),
            _mm256_add_ps(y, load(self.dy)),
        )
    }
}

/// Byte shuffle of four `RGBx` pixels in each 128-bit half into 12 packed RGB bytes.
#[inline(always)]
fn pack_rgbx() -> __m256i {
    // SAFETY: AVX, which every caller's target features include.
    unsafe {
        _mm256_setr_epi8(
            0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1, 0, 1, 2, 4, 5, 6, 8, 9, 10, 12,
            13, 14, -1, -1, -1, -1,
        )
    }
}

/// Byte shuffle of planar `[r0..r3, g0..g3, b0..b3, ..]` in each 128-bit half into packed RGB.
#[inline(always)]
fn pack_planar() -> __m256i {
    // SAFETY: as in `pack_rgbx`.
    unsafe {
        _mm256_setr_epi8(
            0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, -1, -1, -1, -1, 0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7,
            11, -1, -1, -1, -1,
        )
    }
}

/// Per-warp constants of the kernel.
struct Consts {
    base: *const u8,
    /// `3 * w`, `3 * w * h - 4`.
    stride: __m256i,
    last: __m256i,
    fw: __m256,
    fh: __m256,
    /// `w - 1`, `h - 1`.
    fw1: __m256,
    fh1: __m256,
    scale_x: __m256,
    scale_y: __m256,
}

impl Consts {
    /// The `u32` at byte `3 * (y * w + x)` of the source for lanes in `valid` (0 elsewhere).
    ///
    /// # Safety
    /// AVX2; in `valid` lanes `0 <= x < w` and `0 <= y < h` (integers), `fits` held.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn gather(&self, x: __m256i, y: __m256i, valid: __m256i) -> __m256i {
        let three = _mm256_set1_epi32(3);
        let off = _mm256_add_epi32(
            _mm256_mullo_epi32(y, self.stride),
            _mm256_mullo_epi32(x, three),
        );
        let off = _mm256_and_si256(off, valid);
        // Only the last pixel's offset passes `len - 4`; read it a byte early and shift.
        let at = _mm256_min_epi32(off, self.last);
        let shift = _mm256_slli_epi32::<3>(_mm256_sub_epi32(off, at));
        // SAFETY: valid lanes' offsets are at most `3 * (w * h - 1)`, others 0; `at` is at most
        // `len - 4`, so the four bytes read are inside the source.
        let v = unsafe {
            _mm256_mask_i32gather_epi32::<1>(_mm256_setzero_si256(), self.base.cast(), at, valid)
        };
        _mm256_srlv_epi32(v, shift)
    }
}

/// The warp of `grid` into `dest`, the scalar [`super::sample_rows`]'s bits.
///
/// # Safety
/// The CPU has AVX2 and FMA; `fits(w, h, source.len(), xs.len(), ys.len())` with `p.size`
/// `[w, h]`, and `dest.len() == source.len()`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn sample_rows_avx2<G: Grid8>(
    p: &WarpParams,
    grid: &G,
    xs: &[f32],
    ys: &[f32],
    source: &[u8],
    dest: &mut [u8],
) {
    let [w, h] = p.size;
    let c = Consts {
        base: source.as_ptr(),
        stride: _mm256_set1_epi32(3 * w as i32),
        last: _mm256_set1_epi32(source.len() as i32 - 4),
        fw: _mm256_set1_ps(w as f32),
        fh: _mm256_set1_ps(h as f32),
        fw1: _mm256_set1_ps(w as f32 - 1.0),
        fh1: _mm256_set1_ps(h as f32 - 1.0),
        scale_x: _mm256_set1_ps(p.scale[0]),
        scale_y: _mm256_set1_ps(p.scale[1]),
    };
    let one = _mm256_set1_ps(1.0);
    let neg_half = _mm256_set1_ps(-0.5);
    for (oy, row) in dest.chunks_exact_mut(3 * w).take(h).enumerate() {
        let y = _mm256_set1_ps(ys[oy]);
        for ox in (0..w).step_by(8) {
            // SAFETY: `fits`: the column table holds `ox + 8` values.
            let x = unsafe { _mm256_loadu_ps(xs.as_ptr().add(ox)) };
            // SAFETY: AVX2 and FMA (this function's features).
            let (gx, gy) = unsafe { grid.at8(x, y, ox, oy) };
            let ix = _mm256_fmadd_ps(_mm256_add_ps(gx, one), c.scale_x, neg_half);
            let iy = _mm256_fmadd_ps(_mm256_add_ps(gy, one), c.scale_y, neg_half);
            // SAFETY: AVX2 and FMA; `fits`.
            let out = unsafe {
                match p.mode {
                    TensorMode::Nearest => nearest8(&c, p, ix, iy),
                    TensorMode::Bilinear => bilinear8(&c, p, ix, iy),
                }
            };
            let at = 3 * ox;
            if at + 32 <= row.len() {
                // SAFETY: 32 bytes from `at` are inside the row; the 8 past this step's 24
                // are the next step's, written after.
                unsafe { _mm256_storeu_si256(row.as_mut_ptr().add(at).cast(), out) };
            } else {
                let mut bytes = [0u8; 32];
                // SAFETY: a 32-byte store into a 32-byte array.
                unsafe { _mm256_storeu_si256(bytes.as_mut_ptr().cast(), out) };
                let n = (row.len() - at).min(24);
                row[at..at + n].copy_from_slice(&bytes[..n]);
            }
        }
    }
}

/// Whether integral `v` lies in `0..=max` (ordered: NaN is not).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn in_range(v: __m256, max: __m256) -> __m256 {
    _mm256_and_ps(
        _mm256_cmp_ps::<_CMP_GE_OQ>(v, _mm256_setzero_ps()),
        _mm256_cmp_ps::<_CMP_LE_OQ>(v, max),
    )
}

/// Eight NEAREST pixels at source coordinates `(ix, iy)`, as 24 packed RGB bytes (then 8
/// of no meaning).
///
/// # Safety
/// AVX2 and FMA; `fits`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn nearest8(c: &Consts, p: &WarpParams, ix: __m256, iy: __m256) -> __m256i {
    const RNE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    let (rx, ry) = (_mm256_round_ps::<RNE>(ix), _mm256_round_ps::<RNE>(iy));
    // The scalar `NaN as i64` is 0.
    let rx = _mm256_and_ps(rx, _mm256_cmp_ps::<_CMP_ORD_Q>(rx, rx));
    let ry = _mm256_and_ps(ry, _mm256_cmp_ps::<_CMP_ORD_Q>(ry, ry));
    let valid = _mm256_castps_si256(_mm256_and_ps(in_range(rx, c.fw1), in_range(ry, c.fh1)));
    // SAFETY: valid lanes are integral coordinates inside the image.
    let px = unsafe { c.gather(_mm256_cvtps_epi32(rx), _mm256_cvtps_epi32(ry), valid) };
    let fill = match p.fill {
        Some(f) => {
            let [r, g, b] = f.map(round_u8);
            i32::from_le_bytes([r, g, b, 0])
        }
        None => 0,
    };
    let px = _mm256_blendv_epi8(_mm256_set1_epi32(fill), px, valid);
    let packed = _mm256_shuffle_epi8(px, pack_rgbx());
    _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 7, 7))
}

/// Eight BILINEAR pixels at source coordinates `(ix, iy)`, as [`nearest8`] returns them.
///
/// # Safety
/// AVX2 and FMA; `fits`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn bilinear8(c: &Consts, p: &WarpParams, ix: __m256, iy: __m256) -> __m256i {
    let one = _mm256_set1_ps(1.0);
    let (x0, y0) = (_mm256_floor_ps(ix), _mm256_floor_ps(iy));
    let (dx, dy) = (_mm256_sub_ps(ix, x0), _mm256_sub_ps(iy, y0));
    let (ex, sy) = (_mm256_sub_ps(one, dx), _mm256_sub_ps(one, dy));
    let weights = [
        _mm256_mul_ps(sy, ex),
        _mm256_mul_ps(sy, dx),
        _mm256_mul_ps(dy, ex),
        _mm256_mul_ps(dy, dx),
    ];
    // Tap `x0` is inside for `0 <= x0 <= w - 1`, tap `x0 + 1` for `-1 <= x0 <= w - 2`.
    let neg_one = _mm256_set1_ps(-1.0);
    let near_x = in_range(x0, c.fw1);
    let far_x = _mm256_and_ps(
        _mm256_cmp_ps::<_CMP_GE_OQ>(x0, neg_one),
        _mm256_cmp_ps::<_CMP_LT_OQ>(x0, _mm256_sub_ps(c.fw, one)),
    );
    let near_y = in_range(y0, c.fh1);
    let far_y = _mm256_and_ps(
        _mm256_cmp_ps::<_CMP_GE_OQ>(y0, neg_one),
        _mm256_cmp_ps::<_CMP_LT_OQ>(y0, _mm256_sub_ps(c.fh, one)),
    );
    let valid = [
        _mm256_and_ps(near_x, near_y),
        _mm256_and_ps(far_x, near_y),
        _mm256_and_ps(near_x, far_y),
        _mm256_and_ps(far_x, far_y),
    ];
    // Lanes where any tap is valid hold coordinates within i32 (others are masked).
    let (xi, yi) = (_mm256_cvttps_epi32(x0), _mm256_cvttps_epi32(y0));
    let ione = _mm256_set1_epi32(1);
    let (xi1, yi1) = (_mm256_add_epi32(xi, ione), _mm256_add_epi32(yi, ione));
    // SAFETY: each tap's valid lanes are integral coordinates inside the image.
    let taps = unsafe {
        [
            c.gather(xi, yi, _mm256_castps_si256(valid[0])),
            c.gather(xi1, yi, _mm256_castps_si256(valid[1])),
            c.gather(xi, yi1, _mm256_castps_si256(valid[2])),
            c.gather(xi1, yi1, _mm256_castps_si256(valid[3])),
        ]
    };
    let sum = |v: [__m256; 4]| {
        let acc = _mm256_mul_ps(v[0], weights[0]);
        let acc = _mm256_fmadd_ps(v[1], weights[1], acc);
        let acc = _mm256_fmadd_ps(v[2], weights[2], acc);
        _mm256_fmadd_ps(v[3], weights[3], acc)
    };
    let byte = _mm256_set1_epi32(0xff);
    let channel = |k: i32| {
        let shift = _mm_cvtsi32_si128(8 * k);
        taps.map(|t| _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(t, shift), byte)))
    };
    let mut values = [0, 1, 2].map(|k| sum(channel(k)));
    if let Some(f) = p.fill {
        let m = sum(valid.map(|v| _mm256_and_ps(v, one)));
        let one_m = _mm256_sub_ps(one, m);
        for (v, f) in values.iter_mut().zip(f) {
            let f = _mm256_set1_ps(f);
            *v = match p.api {
                Api::V1 => _mm256_add_ps(_mm256_mul_ps(*v, m), _mm256_mul_ps(one_m, f)),
                Api::V2 => _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(*v, f), m), f),
            };
        }
    }
    const RNE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    let [r, g, b] = values.map(|v| {
        // `max` returns its second operand for NaN: 0, as the scalar `NaN as u8`.
        let v = _mm256_max_ps(_mm256_round_ps::<RNE>(v), _mm256_setzero_ps());
        _mm256_cvtps_epi32(_mm256_min_ps(v, _mm256_set1_ps(255.0)))
    });
    let planar = _mm256_packus_epi16(_mm256_packus_epi32(r, g), _mm256_packus_epi32(b, b));
    let packed = _mm256_shuffle_epi8(planar, pack_planar());
    _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 7, 7))
}
