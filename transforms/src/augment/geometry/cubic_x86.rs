//! The BICUBIC pixel of the affine and perspective warps ([`super::affine`],
//! [`perspective`](mod@super::perspective)) on AVX2: one output pixel at a time, its three
//! channels side by side in the lanes of a 256-bit vector of doubles (the fourth lane idle).
//!
//! Each lane runs the scalar kernel's operations in its order, so the bits are Pillow's: the
//! horizontal coefficients summed in 32-bit integers (exact, as Pillow's C sums `int`s), the
//! Horner steps `p1 + d (p2 + d (p3 + d p4))` as separate multiplies and adds (Rust never
//! contracts them into fused multiply-adds, whose single rounding would change bits), the
//! vertical coefficients in doubles left to right, then the clip to 0..=255 and truncation
//! (a NaN lane comes out 0, as the scalar cast gives).
//!
//! Must not run where the CPU lacks AVX2: an [`Avx2Cubic`] exists only where it has it.

use std::arch::x86_64::*;

use super::affine::{CubicPixel, CubicTap};
use crate::image::RgbView;

/// The AVX2 pixel kernel, a token that the CPU has AVX2.
#[derive(Clone, Copy, Debug)]
pub(super) struct Avx2Cubic(());

impl Avx2Cubic {
    /// The kernel, where the CPU has AVX2.
    pub(super) fn new() -> Option<Self> {
        crate::cpu::avx2().then_some(Avx2Cubic(()))
    }

    /// Runs `job` compiled with AVX2, so that the pixels of the loops in it (generic
    /// `#[inline(always)]` code over [`CubicPixel`]) inline this kernel.
    #[inline(always)]
    pub(super) fn run<R>(self, job: impl FnOnce(Self) -> R) -> R {
        // SAFETY: an `Avx2Cubic` exists only where the CPU has AVX2 (`new`).
        unsafe { in_avx2(self, job) }
    }
}

/// `job(kernel)` compiled with AVX2.
///
/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
unsafe fn in_avx2<R>(kernel: Avx2Cubic, job: impl FnOnce(Avx2Cubic) -> R) -> R {
    job(kernel)
}

impl CubicPixel for Avx2Cubic {
    #[inline(always)]
    fn pixel(self, src: RgbView<'_>, xt: &CubicTap, yt: &CubicTap) -> [u8; 3] {
        // SAFETY: an `Avx2Cubic` exists only where the CPU has AVX2 (`new`).
        unsafe { pixel(src, xt, yt) }
    }
}

/// The pixel at byte offset `x` of `line` as four `i32` lanes: its channels, then 0.
#[target_feature(enable = "avx2")]
#[inline]
fn channels(line: &[u8], x: usize) -> __m128i {
    // One 4-byte load where the row has a byte after the pixel (all but its last pixel).
    let packed = match line.get(x..x + 4) {
        Some(&[r, g, b, _]) => u32::from_le_bytes([r, g, b, 0]),
        _ => u32::from_le_bytes([line[x], line[x + 1], line[x + 2], 0]),
    };
    _mm_cvtepu8_epi32(_mm_cvtsi32_si128(packed as i32))
}

/// `p1 + d * (p2 + d * (p3 + d * p4))` per lane, each step rounded.
#[target_feature(enable = "avx2")]
#[inline]
fn horner(p1: __m256d, p2: __m256d, p3: __m256d, p4: __m256d, d: __m256d) -> __m256d {
    let t = _mm256_add_pd(p3, _mm256_mul_pd(d, p4));
    let t = _mm256_add_pd(p2, _mm256_mul_pd(d, t));
    _mm256_add_pd(p1, _mm256_mul_pd(d, t))
}

/// [`CubicPixel::pixel`] on AVX2.
#[target_feature(enable = "avx2")]
#[inline]
fn pixel(src: RgbView<'_>, xt: &CubicTap, yt: &CubicTap) -> [u8; 3] {
    let dx = _mm256_set1_pd(xt.frac);
    let cols = [3 * xt.idx[0], 3 * xt.idx[1], 3 * xt.idx[2], 3 * xt.idx[3]];
    // Pillow's `BICUBIC` across each tap row (written out here, not in a function of its
    // own, which the compiler would not inline four times): the coefficients `v2`,
    // `-v1 + v3`, `2 (v1 - v2) + v3 - v4` and `-v1 + v2 - v3 + v4` in integers, then Horner.
    let mut rows = [_mm256_setzero_pd(); 4];
    for (row, &r) in rows.iter_mut().zip(&yt.idx) {
        let line = src.row(r as u32);
        let (v1, v2) = (channels(line, cols[0]), channels(line, cols[1]));
        let (v3, v4) = (channels(line, cols[2]), channels(line, cols[3]));
        let p2 = _mm_sub_epi32(v3, v1);
        let p3 = _mm_sub_epi32(
            _mm_add_epi32(_mm_slli_epi32::<1>(_mm_sub_epi32(v1, v2)), v3),
            v4,
        );
        let p4 = _mm_add_epi32(_mm_sub_epi32(_mm_sub_epi32(v2, v1), v3), v4);
        *row = horner(
            _mm256_cvtepi32_pd(v2),
            _mm256_cvtepi32_pd(p2),
            _mm256_cvtepi32_pd(p3),
            _mm256_cvtepi32_pd(p4),
            dx,
        );
    }
    let [v1, v2, v3, v4] = rows;
    // `-v1 + v3` is `v3 - v1` in IEEE arithmetic (subtraction adds the negation), and
    // `(-v1 + v2)` is `v2 - v1`; the rest left to right as Pillow's macro sums it.
    let p2 = _mm256_sub_pd(v3, v1);
    let p3 = _mm256_sub_pd(
        _mm256_add_pd(
            _mm256_mul_pd(_mm256_set1_pd(2.0), _mm256_sub_pd(v1, v2)),
            v3,
        ),
        v4,
    );
    let p4 = _mm256_add_pd(_mm256_sub_pd(_mm256_sub_pd(v2, v1), v3), v4);
    let v = horner(v2, p2, p3, p4, _mm256_set1_pd(yt.frac));
    // Clipped before truncating (Pillow's `v <= 0 ? 0 : v >= 255 ? 255 : (UINT8)v`): `max`
    // returns its second operand for a NaN first one, so NaN becomes 0 as in the scalar cast.
    let v = _mm256_min_pd(_mm256_max_pd(v, _mm256_setzero_pd()), _mm256_set1_pd(255.0));
    let bytes = _mm_packus_epi16(
        _mm_packus_epi32(_mm256_cvttpd_epi32(v), _mm_setzero_si128()),
        _mm_setzero_si128(),
    );
    let [r, g, b, _] = _mm_cvtsi128_si32(bytes).to_le_bytes();
    [r, g, b]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::augment::geometry::affine::ScalarCubic;
    use crate::image::RgbImage;

    /// Fixed-seed test cases, drawn from the crate's generator.
    struct Cases(rand_pcg::Pcg64);

    impl Cases {
        fn next(&mut self) -> u64 {
            rand::RngCore::next_u64(&mut self.0)
        }

        /// Edge fractions (0, a half, the largest below 1, subnormal-small, NaN) or uniform.
        fn frac(&mut self) -> f64 {
            const EDGES: [f64; 6] = [0.0, 0.5, 0.25, 1.0 - f64::EPSILON, 1e-300, f64::NAN];
            match self.next() % 8 {
                k @ 0..=5 => EDGES[k as usize],
                _ => (self.next() >> 11) as f64 / (1u64 << 53) as f64,
            }
        }

        fn tap(&mut self, len: u32) -> CubicTap {
            let mut idx = [0; 4];
            for i in &mut idx {
                *i = (self.next() % u64::from(len)) as usize;
            }
            CubicTap {
                idx,
                frac: self.frac(),
            }
        }
    }

    #[test]
    fn the_vector_pixel_is_the_scalar_one_bit_for_bit() {
        let Some(kernel) = Avx2Cubic::new() else {
            return; // no AVX2 here: nothing to compare
        };
        let mut rng = Cases(rand::SeedableRng::seed_from_u64(0x9e37_79b9_7f4a_7c15));
        let (w, h) = (7u32, 5u32);
        for case in 0..4000 {
            // Two-level taps overshoot both clips; uniform ones do not.
            let two_level = case % 2 == 0;
            let data = (0..3 * w * h)
                .map(|_| {
                    let v = rng.next();
                    match (two_level, v % 2) {
                        (true, 0) => 0,
                        (true, _) => 255,
                        (false, _) => (v >> 8) as u8,
                    }
                })
                .collect();
            let src = RgbImage::from_raw(w, h, data).expect("sized");
            let (xt, yt) = (rng.tap(w), rng.tap(h));
            let want = ScalarCubic.pixel(src.view(), &xt, &yt);
            let got = kernel.run(|k| k.pixel(src.view(), &xt, &yt));
            assert_eq!(got, want, "case {case}: {xt:?} {yt:?}");
        }
    }
}
