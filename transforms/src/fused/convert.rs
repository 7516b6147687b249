//! Packed RGB rows to planar rows: table lookups (float kinds) or plain bytes. Knows nothing of
//! crops or resizing: the fused kernel hands it finished rows.

use crate::resize::SimdLevel;
use crate::tensor::{Scaling, RECIP_255};

/// What `RECIP_255` misses of `1 / 255`, rounded to float32.
const RECIP_255_LO: f32 = (1.0 / 255.0 - RECIP_255 as f64) as f32;

/// How a float kind replaces each IEEE division `a / b` (by 255 for [`Scaling::Divide`], then
/// by the std).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Quotient {
    /// `fma(a, hi, a * lo)`, `hi + lo` being `1 / b` to about 48 bits: a single rounding
    /// of a value within far less than half an ulp of `a / b` (two operations).
    Split,
    /// `q = a * hi` corrected once with the exact residual `a - q b` (an FMA):
    /// `q + (a - q b) hi` (three operations).
    Corrected,
}

/// The float kinds' arithmetic without divisions (see [`Quotient`]). Either form gives
/// the correctly rounded quotient for nearly all inputs; [`FastFloat::matches`] checks all
/// 256 a channel can see before one is used.
#[derive(Clone, Copy, Debug)]
pub(super) struct FastFloat {
    pub(super) quotient: Quotient,
    /// [`Scaling::Reciprocal`] is torch's own single multiply, computed as it is; only
    /// [`Scaling::Divide`] goes through `quotient`.
    scaling: Scaling,
    normalize: bool,
    mean: [f32; 3],
    std: [f32; 3],
    /// `1 / std` rounded to float32, and what that misses, rounded.
    recip: [f32; 3],
    recip_lo: [f32; 3],
}

impl FastFloat {
    /// `(v / 255 - mean) / std`, `v / 255` by `scaling`.
    pub(super) fn normalized(
        mean: [f32; 3],
        std: [f32; 3],
        scaling: Scaling,
        quotient: Quotient,
    ) -> Self {
        let recip = std.map(|s| 1.0 / s);
        let mut recip_lo = [0.0; 3];
        for ((lo, &s), &hi) in recip_lo.iter_mut().zip(&std).zip(&recip) {
            *lo = (1.0 / f64::from(s) - f64::from(hi)) as f32;
        }
        FastFloat {
            quotient,
            scaling,
            normalize: true,
            mean,
            std,
            recip,
            recip_lo,
        }
    }

    /// `v / 255` by `scaling`.
    pub(super) fn unnormalized(scaling: Scaling, quotient: Quotient) -> Self {
        FastFloat {
            quotient,
            scaling,
            normalize: false,
            mean: [0.0; 3],
            std: [1.0; 3],
            recip: [1.0; 3],
            recip_lo: [0.0; 3],
        }
    }

    /// The SIMD kernels' operations on one value, in scalar form (`mul_add` is the same
    /// single-rounding FMA as `vfmadd`).
    pub(super) fn value(&self, v: u8, c: usize) -> f32 {
        let x = f32::from(v);
        let t = match (self.scaling, self.quotient) {
            (Scaling::Reciprocal, _) => x * RECIP_255,
            (Scaling::Divide, Quotient::Split) => x.mul_add(RECIP_255, x * RECIP_255_LO),
            (Scaling::Divide, Quotient::Corrected) => {
                let q = x * RECIP_255;
                (-q).mul_add(255.0, x).mul_add(RECIP_255, q)
            }
        };
        if !self.normalize {
            return t;
        }
        let y = t - self.mean[c];
        match self.quotient {
            Quotient::Split => y.mul_add(self.recip[c], y * self.recip_lo[c]),
            Quotient::Corrected => {
                let q = y * self.recip[c];
                (-q).mul_add(self.std[c], y).mul_add(self.recip[c], q)
            }
        }
    }

    /// Whether every value of every channel equals the reference table's, bit for bit.
    pub(super) fn matches(&self, lut: &[[f32; 256]; 3]) -> bool {
        lut.iter().enumerate().all(|(c, table)| {
            (0..=255u8).all(|v| self.value(v, c).to_bits() == table[usize::from(v)].to_bits())
        })
    }
}

/// `planes[c][x] = lut[c][row[3x + c]]`, computed with `fast` where given (the caller
/// verified it and the CPU's AVX2 and FMA) by the kernels of `level` (which the CPU runs),
/// looked up otherwise.
///
/// [`SimdLevel::Avx512Ymm`] runs the AVX2 kernel: a 256-bit form of the AVX-512 one was no
/// faster and slowed the decode that followed it (see `benches/train_ratio.rs`).
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut, unused_variables))]
pub(super) fn f32_row(
    fast: Option<&FastFloat>,
    level: SimdLevel,
    row: &[u8],
    lut: &[[f32; 256]; 3],
    mut planes: [&mut [f32]; 3],
) {
    let done = match (fast, level) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's CPU runs `level`'s AVX-512 features, and AVX2 and FMA
        // (`fast`).
        (Some(fast), SimdLevel::Avx512) => unsafe { x86::f32_row_512(row, fast, &mut planes) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `fast` is only set after `cpu::avx2_fma()` saw AVX2 and FMA.
        (Some(fast), _) => unsafe { x86::f32_row(row, fast, &mut planes) },
        _ => 0,
    };
    let [r, g, b] = planes;
    let tail = row[3 * done..].chunks_exact(3);
    for (((px, r), g), b) in tail
        .zip(&mut r[done..])
        .zip(&mut g[done..])
        .zip(&mut b[done..])
    {
        *r = lut[0][usize::from(px[0])];
        *g = lut[1][usize::from(px[1])];
        *b = lut[2][usize::from(px[2])];
    }
}

/// `planes[c][x] = row[3x + c]`, with the kernels of `level` (which the CPU runs).
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut, unused_variables))]
pub(super) fn u8_row(level: SimdLevel, row: &[u8], mut planes: [&mut [u8]; 3]) {
    let done = if level >= SimdLevel::Avx512 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's CPU runs the AVX-512 features.
        unsafe {
            x86::u8_row_512(row, &mut planes)
        }
        #[cfg(not(target_arch = "x86_64"))]
        0
    } else if level >= SimdLevel::Avx2 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's CPU runs AVX2.
        unsafe {
            x86::u8_row(row, &mut planes)
        }
        #[cfg(not(target_arch = "x86_64"))]
        0
    } else {
        0
    };
    let [r, g, b] = planes;
    let tail = row[3 * done..].chunks_exact(3);
    for (((px, r), g), b) in tail
        .zip(&mut r[done..])
        .zip(&mut g[done..])
        .zip(&mut b[done..])
    {
        *r = px[0];
        *g = px[1];
        *b = px[2];
    }
}

/// 8 pixels per step: two overlapping 16-byte loads; per channel, two `pshufb`s that pick
/// its 8 bytes (`3i + c`) from whichever load holds them (bytes out), or one 256-bit
/// `pshufb` over both loads that picks them as dwords (floats out).
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Masks for channel `c`: from the load at byte 0 (`[..16]`) and the one at byte 8.
    const fn masks(c: usize) -> ([u8; 16], [u8; 16]) {
        let mut lo = [0x80u8; 16];
        let mut hi = [0x80u8; 16];
        let mut i = 0;
        while i < 8 {
            let at = 3 * i + c;
            if at < 16 {
                lo[i] = at as u8;
            } else {
                hi[i] = (at - 8) as u8;
            }
            i += 1;
        }
        (lo, hi)
    }

    const MASKS: [([u8; 16], [u8; 16]); 3] = [masks(0), masks(1), masks(2)];

    /// `pshufb` masks for channel `c` of [`pixels8`]'s two lanes: dword `i` of lane 0 takes
    /// byte `3i + c` of the first load (pixels 0-3), of lane 1 byte `3 (i + 4) + c - 8` of
    /// the second (pixels 4-7); the other bytes are zeroed.
    const fn dword_masks(c: usize) -> [u8; 32] {
        let mut m = [0x80u8; 32];
        let mut i = 0;
        while i < 4 {
            m[4 * i] = (3 * i + c) as u8;
            m[16 + 4 * i] = (3 * (i + 4) + c - 8) as u8;
            i += 1;
        }
        m
    }

    const DWORD_MASKS: [[u8; 32]; 3] = [dword_masks(0), dword_masks(1), dword_masks(2)];

    /// Pixels `8g..8g + 8`: bytes `24g..24g + 16` in the low lane, `24g + 8..24g + 24` in
    /// the high one, so that one in-lane `pshufb` per channel picks its 8 bytes already
    /// zero-extended to dwords.
    ///
    /// # Safety
    /// AVX2; `row` holds at least `24 (g + 1)` bytes.
    #[inline(always)]
    unsafe fn pixels8(row: &[u8], g: usize) -> __m256i {
        // SAFETY: bytes `24g .. 24g + 24` are in `row` (caller).
        unsafe {
            let p = row.as_ptr().add(24 * g);
            let a = _mm_loadu_si128(p.cast());
            let b = _mm_loadu_si128(p.add(8).cast());
            _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(a), b)
        }
    }

    /// Channel `c` of pixels `8g..8g + 8` in the low 8 bytes.
    ///
    /// # Safety
    /// AVX2; `row` holds at least `24 (g + 1)` bytes.
    #[inline(always)]
    unsafe fn channel(row: &[u8], g: usize, c: usize) -> __m128i {
        // SAFETY: bytes `24g .. 24g + 24` are in `row` (caller), the masks are constants.
        unsafe {
            let p = row.as_ptr().add(24 * g);
            let a = _mm_loadu_si128(p.cast());
            let b = _mm_loadu_si128(p.add(8).cast());
            let (ml, mh) = &MASKS[c];
            _mm_or_si128(
                _mm_shuffle_epi8(a, _mm_loadu_si128(ml.as_ptr().cast())),
                _mm_shuffle_epi8(b, _mm_loadu_si128(mh.as_ptr().cast())),
            )
        }
    }

    /// Converts the first `8 * floor(n / 8)` pixels with [`super::FastFloat`]'s
    /// arithmetic and returns how many.
    ///
    /// Plain stores on purpose: between the arithmetic's instructions, non-temporal stores
    /// and `prefetchw` of the next row made the kernel slower in the pipeline, though
    /// non-temporal stores alone fill a slot faster (see `benches/train_ratio.rs`).
    ///
    /// # Safety
    /// AVX2 and FMA. (Bounds: checked here.)
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn f32_row(
        row: &[u8],
        fast: &super::FastFloat,
        planes: &mut [&mut [f32]; 3],
    ) -> usize {
        let n = (row.len() / 3).min(planes.iter().map(|p| p.len()).min().unwrap_or(0));
        let groups = n / 8;
        // Group `g < n / 8` reads row bytes below `24 (g + 1) <= 3n` and writes plane
        // values `8g .. 8g + 8 <= n`.
        let split = fast.quotient == super::Quotient::Split;
        let reciprocal = fast.scaling == super::Scaling::Reciprocal;
        // `a / b` as `FastFloat::value` computes it, from `hi`, `lo` (split) or `b`.
        let quotient = |a: __m256, hi: f32, lo: f32, b: f32| {
            let hi = _mm256_set1_ps(hi);
            if split {
                _mm256_fmadd_ps(a, hi, _mm256_mul_ps(a, _mm256_set1_ps(lo)))
            } else {
                let q = _mm256_mul_ps(a, hi);
                _mm256_fmadd_ps(_mm256_fnmadd_ps(q, _mm256_set1_ps(b), a), hi, q)
            }
        };
        // SAFETY: the masks are 32 readable bytes each.
        let masks: [__m256i; 3] =
            std::array::from_fn(|c| unsafe { _mm256_loadu_si256(DWORD_MASKS[c].as_ptr().cast()) });
        for g in 0..groups {
            // SAFETY: row bytes below `24 (g + 1) <= 3n` (see above).
            let px = unsafe { pixels8(row, g) };
            for (c, plane) in planes.iter_mut().enumerate() {
                let v = _mm256_shuffle_epi8(px, masks[c]);
                let x = _mm256_cvtepi32_ps(v);
                let mut z = if reciprocal {
                    _mm256_mul_ps(x, _mm256_set1_ps(super::RECIP_255))
                } else {
                    quotient(x, super::RECIP_255, super::RECIP_255_LO, 255.0)
                };
                if fast.normalize {
                    let y = _mm256_sub_ps(z, _mm256_set1_ps(fast.mean[c]));
                    z = quotient(y, fast.recip[c], fast.recip_lo[c], fast.std[c]);
                }
                // SAFETY: plane values `8g .. 8g + 8 <= n` (see above).
                unsafe { _mm256_storeu_ps(plane.as_mut_ptr().add(8 * g), z) };
            }
        }
        8 * groups
    }

    /// Per channel: the `vpermb` indices that put byte `3i + c` of 48 into byte 0 of
    /// dword `i` (the other bytes are masked to zero by [`DWORD_LOW_BYTES`]), and the
    /// ones that put it into byte `i`.
    const fn indices512(c: usize, spread: bool) -> [u8; 64] {
        let mut idx = [0u8; 64];
        let mut i = 0;
        while i < 16 {
            idx[if spread { 4 * i } else { i }] = (3 * i + c) as u8;
            i += 1;
        }
        idx
    }

    const SPREAD: [[u8; 64]; 3] = [
        indices512(0, true),
        indices512(1, true),
        indices512(2, true),
    ];
    const PACKED: [[u8; 64]; 3] = [
        indices512(0, false),
        indices512(1, false),
        indices512(2, false),
    ];
    /// Byte 0 of every dword.
    const DWORD_LOW_BYTES: u64 = 0x1111_1111_1111_1111;
    /// The 48 bytes of 16 pixels.
    const PIXELS_16: u64 = (1 << 48) - 1;

    /// `vpermb` with zero-masking to byte 0 of each dword (dword `i` = byte `idx[4i]` of
    /// `px`, zero-extended), as one instruction: LLVM otherwise emits the permute and an
    /// AND.
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
    #[inline]
    fn spread_bytes(idx: __m512i, px: __m512i) -> __m512i {
        let out: __m512i;
        // SAFETY: a register-only instruction of the enabled features; no memory, stack or
        // flags touched.
        unsafe {
            std::arch::asm!(
                "vpermb {out}{{{k}}}{{z}}, {idx}, {px}",
                k = in(kreg) DWORD_LOW_BYTES,
                out = out(zmm_reg) out,
                idx = in(zmm_reg) idx,
                px = in(zmm_reg) px,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        out
    }

    /// [`f32_row`] 16 pixels per step: one masked 48-byte load, per channel one `vpermb`
    /// that zero-extends its 16 bytes to dwords, then the same arithmetic in 16 lanes.
    ///
    /// # Safety
    /// AVX-512 F, BW, VL and VBMI. (Bounds: checked here.)
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi")]
    pub(super) unsafe fn f32_row_512(
        row: &[u8],
        fast: &super::FastFloat,
        planes: &mut [&mut [f32]; 3],
    ) -> usize {
        let n = (row.len() / 3).min(planes.iter().map(|p| p.len()).min().unwrap_or(0));
        let groups = n / 16;
        // SAFETY: the index tables are 64 readable bytes each.
        let idx: [__m512i; 3] =
            std::array::from_fn(|c| unsafe { _mm512_loadu_si512(SPREAD[c].as_ptr().cast()) });
        let split = fast.quotient == super::Quotient::Split;
        let reciprocal = fast.scaling == super::Scaling::Reciprocal;
        // `a / b` as `FastFloat::value` computes it, from `hi`, `lo` (split) or `b`.
        let quotient = |a: __m512, hi: f32, lo: f32, b: f32| {
            let hi = _mm512_set1_ps(hi);
            if split {
                _mm512_fmadd_ps(a, hi, _mm512_mul_ps(a, _mm512_set1_ps(lo)))
            } else {
                let q = _mm512_mul_ps(a, hi);
                _mm512_fmadd_ps(_mm512_fnmadd_ps(q, _mm512_set1_ps(b), a), hi, q)
            }
        };
        for g in 0..groups {
            // SAFETY: group `g < n / 16` reads row bytes `48g .. 48g + 48 <= 3n` (the load
            // is masked to those).
            let px = unsafe { _mm512_maskz_loadu_epi8(PIXELS_16, row.as_ptr().add(48 * g).cast()) };
            for (c, plane) in planes.iter_mut().enumerate() {
                let v = spread_bytes(idx[c], px);
                let x = _mm512_cvtepi32_ps(v);
                let mut z = if reciprocal {
                    _mm512_mul_ps(x, _mm512_set1_ps(super::RECIP_255))
                } else {
                    quotient(x, super::RECIP_255, super::RECIP_255_LO, 255.0)
                };
                if fast.normalize {
                    let y = _mm512_sub_ps(z, _mm512_set1_ps(fast.mean[c]));
                    z = quotient(y, fast.recip[c], fast.recip_lo[c], fast.std[c]);
                }
                // SAFETY: plane values `16g .. 16g + 16 <= n`.
                unsafe { _mm512_storeu_ps(plane.as_mut_ptr().add(16 * g), z) };
            }
        }
        16 * groups
    }

    /// [`u8_row`] 16 pixels per step.
    ///
    /// # Safety
    /// AVX-512 F, BW, VL and VBMI.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi")]
    pub(super) unsafe fn u8_row_512(row: &[u8], planes: &mut [&mut [u8]; 3]) -> usize {
        let n = (row.len() / 3).min(planes.iter().map(|p| p.len()).min().unwrap_or(0));
        let groups = n / 16;
        // SAFETY: the index tables are 64 readable bytes each.
        let idx: [__m512i; 3] =
            std::array::from_fn(|c| unsafe { _mm512_loadu_si512(PACKED[c].as_ptr().cast()) });
        for g in 0..groups {
            // SAFETY: as in `f32_row_512`: reads below `3n`, 16-byte writes below `n`.
            unsafe {
                let px = _mm512_maskz_loadu_epi8(PIXELS_16, row.as_ptr().add(48 * g).cast());
                for (c, plane) in planes.iter_mut().enumerate() {
                    let v = _mm512_permutexvar_epi8(idx[c], px);
                    let dst = plane.as_mut_ptr().add(16 * g);
                    _mm_storeu_si128(dst.cast(), _mm512_castsi512_si128(v));
                }
            }
        }
        16 * groups
    }

    /// Splits the first `8 * floor(n / 8)` pixels and returns how many.
    ///
    /// # Safety
    /// AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn u8_row(row: &[u8], planes: &mut [&mut [u8]; 3]) -> usize {
        let n = (row.len() / 3).min(planes.iter().map(|p| p.len()).min().unwrap_or(0));
        let groups = n / 8;
        // SAFETY: as in `f32_row`: reads below `3n`, 8-byte writes below `n`.
        unsafe {
            for g in 0..groups {
                for (c, plane) in planes.iter_mut().enumerate() {
                    let dst = plane.as_mut_ptr().add(8 * g);
                    _mm_storel_epi64(dst.cast(), channel(row, g, c));
                }
            }
        }
        8 * groups
    }
}
