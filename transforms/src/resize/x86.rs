//! AVX2 kernels.
//!
//! The horizontal pass computes 8 output values (not pixels: RGB values in a row) per vector:
//! for each pair of taps a `pshufb` gathers, from a 16-byte source window per 128-bit lane,
//! the two input bytes of each value as an i16 pair, and two `pmaddwd`s multiply them by the
//! high and low 11-bit halves of the weights (exact: `w = 2048 hi + lo`, both < 2^15). The
//! gather masks, windows and weights depend only on the output column, so they are built once
//! per coefficient set ([`HPlan`]) and reused for every row. At
//! [`SimdLevel::Avx512Ymm`](super::SimdLevel::Avx512Ymm) the
//! same plan gathers with one `vpermb` per pair from a 32-byte window per 8 values (64 bytes
//! with `vpermt2b`), and `vpdpwssd` accumulates in place of `pmaddwd` + `paddd` (here and in
//! the vertical pass), still on 256-bit registers. From 3 taps on, that level takes four taps
//! per step where the windows allow ([`Gather::Quad`]): one unmasked `vpermb` puts each value's
//! four bytes in its dword, and three `vpdpbusd` multiply them by the weights' signed base-256
//! digits (`w = 65536 a + 256 b + c`, each in `[-128, 127]`); `(A << 16) + (B << 8) + C` of the
//! three sums is `sum(v w)` (the shifts may wrap, the result, in `[0, 2^30)`, does not). That
//! is one permute and three dot products per four taps, against two permutes, two mask moves
//! and four dot products with pairs.
//!
//! In the horizontal-first order the horizontal pass stores its values into a ring of i32 rows
//! that the vertical pass reads ([`vertical_ring`]): plain values, each tap a `vpmulld` and an
//! add; with VNNI each value `v` as the i16 pair `(v, v << 7)`, each tap one `vpdpwssd`
//! against the weight pair `(w - 128 h, h)`: `v (w - 128 h) + 128 v h = v w`.
//!
//! No clamping: the weights are non-negative and sum to at most `2^22 + taps / 2`, so every
//! sum lies in `[0, 255 * 2^22 + 2^21 + 255 * taps / 2]` and shifts to `[0, 255]` (for
//! `taps < 16000`, far above what the plan accepts).
//!
//! Must not run a plan on a CPU without the features its layout needs (the drivers assert
//! them), nor read outside a row: every window was checked against the row's length when the
//! plan was built.

use std::arch::asm;
use std::arch::x86_64::*;

use super::{
    by_blocks, portable, through_ring, vertical_first, Ahead, AxisCoeffs, BlockRows, Resizer, Ring,
    RowSink, HALF, PRECISION_BITS,
};
use crate::cpu;
use crate::image::RgbView;

/// Rows the horizontal kernel processes per block (keeps source and output in L1/L2).
const BLOCK_ROWS: usize = 16;
/// Tap pairs the horizontal kernel handles: up to 16 taps, downscales up to about 7.5x.
const MAX_PAIRS: usize = 8;
/// Tap quads the quad kernel handles (the same 16 taps).
const MAX_QUADS: usize = 4;
/// Taps the ring-row vertical kernel keeps in registers (downscales up to about 7x).
const MAX_V_TAPS: usize = 16;
/// The even bytes of a 256-bit vector: the low bytes of its i16 lanes.
const EVEN_BYTES: u32 = 0x5555_5555;

/// The portable horizontal row kernel compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn horizontal_portable(src: &[u8], dst: &mut [u8], c: &AxisCoeffs) {
    portable::horizontal(src, dst, c);
}

/// The portable vertical row kernel compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn vertical_portable<'a>(
    row: impl Fn(usize) -> &'a [u8],
    w: &[i32],
    dst: &mut [u8],
    acc: &mut Vec<i32>,
) {
    portable::vertical(row, w, dst, acc);
}

/// How the horizontal kernel gathers each step's tap bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Gather {
    /// AVX2: a 16-byte window per 128-bit lane (4 values), loaded twice and inserted,
    /// then one `pshufb`; where they fit, one window for both lanes, broadcast, or each
    /// lane's window once for all steps ([`narrow_windows`]); with `wide`, a second 16
    /// bytes per lane and a second `pshufb`.
    #[default]
    Shuffle,
    /// AVX-512 at 256 bits: one window per chunk (8 values), 32 bytes (`vpermb`) or,
    /// with `wide`, 64 bytes in two loads (`vpermt2b`).
    Permute,
    /// As `Permute`, four taps per step: each value's four bytes land in its dword
    /// unmasked, for `vpdpbusd` against the weights' signed base-256 digits.
    Quad,
    /// For 5 or 6 taps: a quad step (taps 0-3), then a pair step (taps 4-5) whose
    /// weights are split at 8 bits (as [`Gather::Permute`]'s), so that both steps' sums
    /// join one Horner chain. Two quads would spend three dot products on the last two
    /// taps (or one), this spends two.
    QuadPair,
}

impl Gather {
    /// Values that share a window: a lane's 4 or a chunk's 8.
    #[cfg(test)]
    fn group(self) -> usize {
        match self {
            Gather::Shuffle => 4,
            Gather::Permute | Gather::Quad | Gather::QuadPair => 8,
        }
    }

    /// Steps for `taps` taps.
    fn steps(self, taps: usize) -> usize {
        match self {
            Gather::Shuffle | Gather::Permute => taps.div_ceil(2),
            Gather::Quad => taps.div_ceil(4),
            Gather::QuadPair => 2,
        }
    }

    /// Step `step`'s first tap and how many taps it has room for.
    fn step_taps(self, step: usize) -> (usize, usize) {
        match self {
            Gather::Shuffle | Gather::Permute => (2 * step, 2),
            Gather::Quad => (4 * step, 4),
            Gather::QuadPair => [(0, 4), (4, 2)][step],
        }
    }

    /// Whether step `step` multiplies digits (a quad), not i16 halves (a pair).
    fn quad_step(self, step: usize) -> bool {
        match self {
            Gather::Shuffle | Gather::Permute => false,
            Gather::Quad => true,
            Gather::QuadPair => step == 0,
        }
    }

    /// Whether any step is a quad (the plan has digits of 256).
    fn has_quads(self) -> bool {
        self.quad_step(0)
    }

    /// Where a pair step splits each weight into i16 halves, `w = (hi << bits) + lo`:
    /// 8 bits where the sums can join a Horner chain (`hi` is at most `2^14`, still an
    /// i16), 11 for the AVX2 kernel's `pmaddwd`, whose two sums are always combined by
    /// a shift and an add.
    fn pair_split(self) -> u32 {
        if self == Gather::Shuffle {
            11
        } else {
            8
        }
    }

    /// Window bytes.
    fn window(self, wide: bool) -> usize {
        match (self, wide) {
            (Gather::Shuffle, false) => 16,
            (Gather::Shuffle, true)
            | (Gather::Permute | Gather::Quad | Gather::QuadPair, false) => 32,
            (Gather::Permute | Gather::Quad | Gather::QuadPair, true) => 64,
        }
    }
}

/// The horizontal pass as gather indices, windows and weights per 8-value chunk.
#[derive(Clone, Debug, Default)]
pub(super) struct HPlan {
    /// The coefficients' key and whether permutes were allowed when it was built, and
    /// whether the kernel can run it.
    key: Option<((u32, u32, bool), bool, bool)>,
    gather: Gather,
    /// Tap steps per chunk (pairs, or quads with [`Gather::Quad`]).
    steps: usize,
    /// Windows twice as long (see [`Gather`]): for downscales beyond about 3x, where a
    /// group's taps spread over more bytes than the narrow window.
    wide: bool,
    chunks: usize,
    /// Values per output row, `3 * out_w`.
    values: usize,
    /// Source row length the windows were checked against, `3 * in_w`.
    row_bytes: usize,
    /// Per chunk and step: the window offsets of the low and high lane (shuffles; the
    /// same where they share one), or the chunk's window offset twice (permutes).
    win: Vec<[u32; 2]>,
    /// Per chunk and step, per value the bytes of its taps: for pairs two (taps `2p` and
    /// `2p + 1`, the odd bytes zeroed), `pshufb` masks of the lanes' first 16 bytes (0x80
    /// writes 0) or the permute's indices into the whole window; for quads four (taps
    /// `4q` to `4q + 3`).
    masks: Vec<[u8; 32]>,
    /// Likewise for the lanes' second 16 bytes (wide shuffle plans only).
    masks_hi: Vec<[u8; 32]>,
    /// Per chunk and step: weight high halves as i16 pairs, one i32 per value (quads:
    /// the weights' digits of 65536 as bytes).
    whi: Vec<[i32; 8]>,
    /// Quads only: the digits of 256.
    wmid: Vec<[i32; 8]>,
    /// Per chunk and step: weight low halves (quads: the digits of 1).
    wlo: Vec<[i32; 8]>,
    /// Scratch for building the tables, per output pixel (`out_w + 8` entries, per pair
    /// for the weights; the three values of a pixel share them): its tap-0 byte
    /// `3 pstart`, and its pair's weights' high and low halves as i16 pairs.
    px_pos: Vec<i32>,
    px_hi: Vec<i32>,
    px_mid: Vec<i32>,
    px_lo: Vec<i32>,
}

impl HPlan {
    /// Builds the plan for `c` unless it is the cached one; returns whether a kernel can
    /// run it (each group's taps must fit its window). With `permute`, the permute
    /// layouts are tried first.
    fn prepare(&mut self, c: &AxisCoeffs, permute: bool) -> bool {
        if let Some((key, allowed, ok)) = self.key {
            if key == c.key() && allowed == permute {
                return ok;
            }
        }
        let built = [
            (Gather::QuadPair, false),
            (Gather::QuadPair, true),
            (Gather::Quad, false),
            (Gather::Quad, true),
            (Gather::Permute, false),
            (Gather::Permute, true),
            (Gather::Shuffle, false),
            (Gather::Shuffle, true),
        ]
        .into_iter()
        .filter(|&(gather, _)| permute || gather == Gather::Shuffle)
        // SAFETY: plans are only prepared on the AVX2 path (the CPU has AVX2).
        .any(|(gather, wide)| unsafe { self.fill_vector(c, gather, wide) });
        self.key = Some((c.key(), permute, built));
        built
    }

    /// Sets the plan's shape for a layout; returns the number of (chunk, pair) entries.
    fn set_layout(&mut self, c: &AxisCoeffs, gather: Gather, wide: bool) -> usize {
        let values = 3 * c.out_size as usize;
        self.gather = gather;
        self.steps = gather.steps(c.taps);
        self.wide = wide;
        self.chunks = values.div_ceil(8);
        self.values = values;
        self.row_bytes = 3 * c.in_size as usize;
        self.chunks * self.steps
    }

    /// Fills the tables for a pair layout that [`fits`], one value at a time: the
    /// reference that [`HPlan::fill_vector`] is tested against.
    #[cfg(test)]
    fn fill(&mut self, c: &AxisCoeffs, gather: Gather, wide: bool) {
        let taps = c.taps;
        let window = gather.window(wide);
        let entries = self.set_layout(c, gather, wide);
        let (pairs, row_bytes) = (self.steps, self.row_bytes);
        let len = self.fill_pixels_scalar(c, gather);
        let HPlan {
            win,
            masks,
            masks_hi,
            whi,
            wlo,
            px_hi,
            px_lo,
            ..
        } = self;
        win.clear();
        win.resize(entries, [0; 2]);
        masks.clear();
        masks.resize(entries, [0x80; 32]);
        masks_hi.clear();
        let split_masks = wide && gather == Gather::Shuffle;
        if split_masks {
            masks_hi.resize(entries, [0x80; 32]);
        }
        whi.clear();
        whi.resize(entries, [0; 8]);
        wlo.clear();
        wlo.resize(entries, [0; 8]);
        // Value j of the row is channel j % 3 of output pixel j / 3; its tap k reads source
        // byte 3 * (pstart + k) + j % 3. Value j sits at bytes 4 (j mod 8) and
        // 4 (j mod 8) + 2 of its chunk's masks (taps 2p and 2p + 1), and its lane (shuffles)
        // is 0 or 1.
        // Per chunk, a narrow shuffle's cheaper windows where they fit (`narrow_windows`,
        // from each half's span of tap-0 bytes, `i32::MAX`/`MIN` where it has no values).
        let narrow: Vec<_> = groups(c, 8)
            .map(|(_, n, base)| {
                let half = |h: usize| {
                    let values = &base[4 * h..n.max(4 * h).min(4 * h + 4)];
                    match (values.iter().min(), values.iter().max()) {
                        (Some(&lo), Some(&hi)) => (lo as i32, hi as i32),
                        _ => (i32::MAX, i32::MIN),
                    }
                };
                let (h0, h1) = (half(0), half(1));
                (gather == Gather::Shuffle && !wide)
                    .then(|| narrow_windows([h0.0, h1.0], [h0.1, h1.1], taps, row_bytes))
                    .flatten()
            })
            .collect();
        for (group_start, n, base) in groups(c, gather.group()) {
            let (lo, _) = span(&base[..n]);
            let (m, lane) = (group_start / 8, (group_start / 4) % 2);
            for p in 0..pairs {
                let ka = 2 * p;
                // Without tap 2p + 1 its byte repeats tap 2p's, against a zero weight.
                let second = if ka + 1 < taps { 3 } else { 0 };
                let wo = match narrow[m] {
                    Some(narrow) => narrow[p][lane],
                    None => window_start(lo, ka, row_bytes, window),
                };
                let e = m * pairs + p;
                match gather {
                    Gather::Shuffle => win[e][lane] = wo as u32,
                    Gather::Permute => win[e] = [wo as u32; 2],
                    Gather::Quad | Gather::QuadPair => {
                        unreachable!("the reference covers the pair layouts")
                    }
                }
                let (mask, whi, wlo) = (&mut masks[e], &mut whi[e], &mut wlo[e]);
                for (q, &b) in base[..n].iter().enumerate() {
                    let (v, px) = ((group_start + q) % 8, (group_start + q) / 3);
                    let a = b + 3 * ka - wo;
                    mask[4 * v] = a as u8;
                    mask[4 * v + 2] = (a + second) as u8;
                    (whi[v], wlo[v]) = (px_hi[p * len + px], px_lo[p * len + px]);
                }
                if split_masks {
                    // A position past a lane's first 16 bytes goes into the mask of its
                    // second 16, so that OR-ing the two shuffles merges them.
                    for (at, high) in mask.iter_mut().zip(masks_hi[e].iter_mut()) {
                        if *at != 0x80 && *at >= 16 {
                            (*high, *at) = (*at - 16, 0x80);
                        }
                    }
                }
            }
        }
    }

    /// Zeroes the per-pixel scratch at its size for `c` and the layout's steps (`px_mid`
    /// only for quads); returns its entries per step.
    fn reset_pixels(&mut self, c: &AxisCoeffs, quads: bool) -> usize {
        let (steps, len) = (self.steps, c.out_size as usize + 8);
        for (v, n) in [
            (&mut self.px_pos, len),
            (&mut self.px_hi, steps * len),
            (&mut self.px_mid, if quads { steps * len } else { 0 }),
            (&mut self.px_lo, steps * len),
        ] {
            v.clear();
            v.resize(n, 0);
        }
        len
    }

    /// Fills the per-pixel scratch (`px_pos`, and per step the weights as `gather`'s
    /// kernel multiplies them) one weight at a time; returns the entries per step,
    /// `out_w + 8` (a chunk loads 8 from its first pixel). The reference that
    /// [`HPlan::fill_pixels`] is tested against.
    #[cfg(test)]
    fn fill_pixels_scalar(&mut self, c: &AxisCoeffs, gather: Gather) -> usize {
        let (taps, steps) = (c.taps, self.steps);
        let len = self.reset_pixels(c, gather.has_quads());
        let bits = gather.pair_split();
        let low = (1 << bits) - 1;
        for (px, (w, &st)) in c.pweights.chunks_exact(taps).zip(&c.pstart).enumerate() {
            self.px_pos[px] = 3 * st as i32;
            let tap = |k: usize| w.get(k).copied().unwrap_or(0);
            for step in 0..steps {
                let at = step * len + px;
                let (k0, _) = gather.step_taps(step);
                if gather.quad_step(step) {
                    // Byte j of each: the digit of tap k0 + j.
                    let mut d = [0u32; 3];
                    for j in 0..4 {
                        for (d, digit) in d.iter_mut().zip(signed_digits(tap(k0 + j))) {
                            *d |= u32::from(digit as u8) << (8 * j);
                        }
                    }
                    let [a, b, lo] = d.map(|v| v as i32);
                    (self.px_hi[at], self.px_mid[at], self.px_lo[at]) = (a, b, lo);
                } else {
                    let (wa, wb) = (tap(k0), tap(k0 + 1));
                    self.px_hi[at] = ((wa >> bits) & 0xffff) | ((wb >> bits) << 16);
                    self.px_lo[at] = (wa & low) | ((wb & low) << 16);
                }
            }
        }
        len
    }

    /// `HPlan::fill_pixels_scalar` (the tests' reference) with a pixel's step of taps split at
    /// once, bit for bit (tested): the scalar digit split was half of building a plan, which
    /// runs for every new crop width. (A pixel's taps are contiguous: no gathers, which cost
    /// more here than the split.)
    ///
    /// # Safety
    /// AVX2.
    #[target_feature(enable = "avx2")]
    unsafe fn fill_pixels(&mut self, c: &AxisCoeffs, gather: Gather) -> usize {
        let (taps, steps) = (c.taps, self.steps);
        let len = self.reset_pixels(c, gather.has_quads());
        // Every step has a tap (so the loads below start within the pixel's), and the
        // steps have room for all of them.
        let (k_last, per_last) = gather.step_taps(steps - 1);
        assert!(k_last < taps && k_last + per_last >= taps);
        let bits = gather.pair_split();
        let (split, low_bits) = (
            _mm_cvtsi32_si128(bits as i32),
            _mm_set1_epi32((1 << bits) - 1),
        );
        // Byte 0 of each dword (quads: the digits, in tap order), or bytes 0 and 1 of the
        // first two (pairs: the i16 halves); the other bytes 0.
        let quad_bytes = _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
        let pair_bytes = _mm_setr_epi8(0, 1, 4, 5, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
        let pick = |v: __m128i, bytes| _mm_cvtsi128_si32(_mm_shuffle_epi8(v, bytes));
        // Sign-extends each dword's low byte.
        let low_i8 = |v: __m128i| _mm_srai_epi32::<24>(_mm_slli_epi32::<24>(v));
        let lane = _mm_setr_epi32(0, 1, 2, 3);
        let pixels = c.pweights.chunks_exact(taps).zip(&c.pstart);
        for (px, (w, &st)) in pixels.enumerate() {
            self.px_pos[px] = 3 * st as i32;
            for step in 0..steps {
                let (k0, per) = gather.step_taps(step);
                // The step's taps; past the last one, zero weights (digits).
                let n = per.min(taps.saturating_sub(k0));
                let keep = _mm_cmpgt_epi32(_mm_set1_epi32(n as i32), lane);
                // SAFETY: the kept lanes read `w[k0..k0 + n]`, within the pixel's taps.
                let w = unsafe { _mm_maskload_epi32(w[k0..].as_ptr(), keep) };
                let at = step * len + px;
                if gather.quad_step(step) {
                    // w = 65536 a + 256 b + c, each digit in [-128, 127].
                    let c = low_i8(w);
                    let r = _mm_srai_epi32::<8>(_mm_sub_epi32(w, c));
                    let b = low_i8(r);
                    let a = _mm_srai_epi32::<8>(_mm_sub_epi32(r, b));
                    (self.px_hi[at], self.px_mid[at]) = (pick(a, quad_bytes), pick(b, quad_bytes));
                    self.px_lo[at] = pick(c, quad_bytes);
                } else {
                    self.px_hi[at] = pick(_mm_sra_epi32(w, split), pair_bytes);
                    self.px_lo[at] = pick(_mm_and_si128(w, low_bits), pair_bytes);
                }
            }
        }
        len
    }

    /// Fills the tables for a layout a chunk (8 values) at a time, with the `fits` (test)
    /// check folded in: false if the layout is not [`allowed`] or a group's taps do not
    /// fit its window (the tables are then half filled, and the caller fills another
    /// layout). The same tables as `HPlan::fill` (the tests') for the pair layouts, bit for bit
    /// (tested), in under half the time: this runs for every new crop width.
    ///
    /// # Safety
    /// AVX2.
    #[target_feature(enable = "avx2")]
    unsafe fn fill_vector(&mut self, c: &AxisCoeffs, gather: Gather, wide: bool) -> bool {
        if !allowed(c, gather, wide) {
            return false;
        }
        let (taps, quads) = (c.taps, gather.has_quads());
        let (shuffle, split_masks) = (gather == Gather::Shuffle, gather == Gather::Shuffle && wide);
        let window = gather.window(wide);
        let entries = self.set_layout(c, gather, wide);
        let (steps, row_bytes, values) = (self.steps, self.row_bytes, self.values);
        // SAFETY: AVX2 (this function's features).
        let len = unsafe { self.fill_pixels(c, gather) };
        self.masks_hi.clear();
        if split_masks {
            self.masks_hi.resize(entries, [0; 32]);
        }
        self.win.resize(entries, [0; 2]);
        self.masks.resize(entries, [0; 32]);
        self.whi.resize(entries, [0; 8]);
        self.wmid.clear();
        if quads {
            self.wmid.resize(entries, [0; 8]);
        }
        self.wlo.resize(entries, [0; 8]);
        // Value 8m + q of the row is channel k of pixel 8m / 3 + rel: with r = 8m mod 3,
        // rel = (r + q) / 3 and k = (r + q) mod 3.
        let pattern = |f: fn(i32) -> i32| -> [__m256i; 3] {
            std::array::from_fn(|r| {
                let r = r as i32;
                _mm256_setr_epi32(
                    f(r),
                    f(r + 1),
                    f(r + 2),
                    f(r + 3),
                    f(r + 4),
                    f(r + 5),
                    f(r + 6),
                    f(r + 7),
                )
            })
        };
        let rel = pattern(|x| x / 3);
        let chan = pattern(|x| x % 3);
        let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        // A padding lane's index bytes (the scalar builder's untouched 0x80s); a value's
        // odd bytes are 0x80 too (zeroed by the kernel's mask whatever they are).
        let unused = _mm256_set1_epi32(0x8080_8080_u32 as i32);
        let odd = _mm256_set1_epi32(0x8000_8000_u32 as i32);
        for m in 0..self.chunks {
            let (px0, r) = (8 * m / 3, 8 * m % 3);
            let valid = _mm256_cmpgt_epi32(_mm256_set1_epi32((values - 8 * m) as i32), lane);
            // SAFETY: `px0 < out`, so 8 entries from `px0` lie within `len` (per pair).
            let pick = |v: &[i32]| unsafe {
                _mm256_permutevar8x32_epi32(_mm256_loadu_si256(v[px0..].as_ptr().cast()), rel[r])
            };
            let pos = _mm256_add_epi32(pick(&self.px_pos), chan[r]);
            // The span of each 128-bit half's values (a shuffle lane's group), or of the
            // chunk's; padding lanes are left out, and a half without values keeps
            // `i32::MAX` as its lowest.
            let (lo, hi) = {
                let lo = half_min(_mm256_blendv_epi8(_mm256_set1_epi32(i32::MAX), pos, valid));
                let hi = half_max(_mm256_blendv_epi8(_mm256_set1_epi32(i32::MIN), pos, valid));
                if shuffle {
                    (lo, hi)
                } else {
                    ([lo[0].min(lo[1]); 2], [hi[0].max(hi[1]); 2])
                }
            };
            let narrow = (shuffle && !wide)
                .then(|| narrow_windows(lo, hi, taps, row_bytes))
                .flatten();
            for step in 0..steps {
                let (k0, per) = gather.step_taps(step);
                // The step's last tap; the taps past it repeat its byte, against zero
                // weights.
                let klast = (k0 + per - 1).min(taps - 1);
                // Each half's window (a shuffle's half without values keeps 0), or a
                // narrow shuffle's cheaper ones where they fit.
                let mut wo = [0usize; 2];
                if let Some(narrow) = narrow {
                    wo = narrow[step];
                } else {
                    for ((wo, &lo), &hi) in wo.iter_mut().zip(&lo).zip(&hi) {
                        if lo == i32::MAX {
                            continue;
                        }
                        *wo = window_start(lo as usize, k0, row_bytes, window);
                        if hi as usize + 3 * klast >= *wo + window {
                            return false;
                        }
                    }
                }
                // Each value's tap-k0 byte in its half's window.
                let shift = |h: usize| _mm_set1_epi32((3 * k0) as i32 - wo[h] as i32);
                let a = _mm256_add_epi32(pos, _mm256_set_m128i(shift(1), shift(0)));
                let idx = if gather.quad_step(step) {
                    // Bytes a, a + 3, a + 6, a + 9 (all below the window's 64).
                    let d = klast - k0;
                    let offs: usize = (0..4).map(|j| (3 * j.min(d)) << (8 * j)).sum();
                    _mm256_add_epi32(
                        _mm256_mullo_epi32(a, _mm256_set1_epi32(0x0101_0101)),
                        _mm256_set1_epi32(offs as i32),
                    )
                } else {
                    let b = _mm256_add_epi32(a, _mm256_set1_epi32(3 * (klast - k0) as i32));
                    _mm256_or_si256(_mm256_or_si256(a, _mm256_slli_epi32::<16>(b)), odd)
                };
                let idx = _mm256_blendv_epi8(unused, idx, valid);
                let e = m * steps + step;
                self.win[e] = wo.map(|w| w as u32);
                let weights = |px: &[i32]| _mm256_and_si256(pick(&px[step * len..]), valid);
                // SAFETY: entry `e < chunks * steps`, the tables' length; 32 bytes each.
                unsafe {
                    if split_masks {
                        // Bytes past a lane's first 16 go into the mask of its second 16
                        // (0x80 elsewhere), so that OR-ing the two shuffles merges them.
                        let past = _mm256_cmpgt_epi8(idx, _mm256_set1_epi8(15));
                        let second = _mm256_sub_epi8(idx, _mm256_set1_epi8(16));
                        _mm256_storeu_si256(
                            self.masks[e].as_mut_ptr().cast(),
                            _mm256_blendv_epi8(idx, unused, past),
                        );
                        _mm256_storeu_si256(
                            self.masks_hi[e].as_mut_ptr().cast(),
                            _mm256_blendv_epi8(unused, second, past),
                        );
                    } else {
                        _mm256_storeu_si256(self.masks[e].as_mut_ptr().cast(), idx);
                    }
                    _mm256_storeu_si256(self.whi[e].as_mut_ptr().cast(), weights(&self.px_hi));
                    _mm256_storeu_si256(self.wlo[e].as_mut_ptr().cast(), weights(&self.px_lo));
                    if quads {
                        _mm256_storeu_si256(
                            self.wmid[e].as_mut_ptr().cast(),
                            weights(&self.px_mid),
                        );
                    }
                }
            }
        }
        true
    }
}

/// `w` as signed base-256 digits `[a, b, c]`, `w = 65536 a + 256 b + c`, each in
/// `[-128, 127]` for `|w| <= 2^22` (Pillow's weights are in `[0, 2^22]`).
#[cfg(test)]
fn signed_digits(w: i32) -> [i8; 3] {
    let c = w as i8;
    let r = (w - i32::from(c)) >> 8;
    let b = r as i8;
    [((r - i32::from(b)) >> 8) as i8, b, c]
}

/// The smallest of each 128-bit half's 4 lanes.
#[target_feature(enable = "avx2")]
fn half_min(v: __m256i) -> [i32; 2] {
    let v = _mm256_min_epi32(v, _mm256_shuffle_epi32::<0b01_00_11_10>(v));
    let v = _mm256_min_epi32(v, _mm256_shuffle_epi32::<0b10_11_00_01>(v));
    [_mm256_extract_epi32::<0>(v), _mm256_extract_epi32::<4>(v)]
}

/// The largest of each 128-bit half's 4 lanes.
#[target_feature(enable = "avx2")]
fn half_max(v: __m256i) -> [i32; 2] {
    let v = _mm256_max_epi32(v, _mm256_shuffle_epi32::<0b01_00_11_10>(v));
    let v = _mm256_max_epi32(v, _mm256_shuffle_epi32::<0b10_11_00_01>(v));
    [_mm256_extract_epi32::<0>(v), _mm256_extract_epi32::<4>(v)]
}

/// Whether the kernels are instantiated for `c`'s taps in the layout and its rows are at
/// least a window long (a layout can only fit if so).
fn allowed(c: &AxisCoeffs, gather: Gather, wide: bool) -> bool {
    let rows_fit =
        3 * c.in_size as usize >= gather.window(wide) && c.simd_friendly() && c.padded_ready;
    match gather {
        // Two taps or fewer: a pair does less work than a quad's three dot products.
        Gather::Quad => return rows_fit && c.taps > 2 && c.taps.div_ceil(4) <= MAX_QUADS,
        Gather::QuadPair => return rows_fit && (5..=6).contains(&c.taps),
        Gather::Shuffle | Gather::Permute => {}
    }
    let pairs = c.taps.div_ceil(2);
    let max_pairs = if wide { MAX_PAIRS } else { MAX_PAIRS / 2 };
    // (The wide kernels are instantiated for 2 to 8 pairs; 1 pair always fits narrow.)
    pairs <= max_pairs
        && (!wide || pairs >= 2)
        && 3 * c.in_size as usize >= gather.window(wide)
        && c.simd_friendly()
        && c.padded_ready
}

/// Whether `c`'s horizontal pass fits the layout: [`allowed`], and every group's taps
/// within its window.
#[cfg(test)]
fn fits(c: &AxisCoeffs, gather: Gather, wide: bool) -> bool {
    let pairs = c.taps.div_ceil(2);
    let row_bytes = 3 * c.in_size as usize;
    let window = gather.window(wide);
    if !allowed(c, gather, wide) {
        return false;
    }
    groups(c, gather.group()).all(|(_, n, base)| {
        let (lo, hi) = span(&base[..n]);
        (0..pairs).all(|p| {
            let (ka, kb) = (2 * p, 2 * p + 1);
            // The pair reads bytes [lo + 3ka, hi + 3kb] (hi + 3ka without tap kb).
            let last = hi + 3 * if kb < c.taps { kb } else { ka };
            last < window_start(lo, ka, row_bytes, window) + window
        })
    })
}

/// The groups of `group` values of a row: the first value, how many, and per value its
/// byte for tap 0 (`3 * pstart + channel`).
#[cfg(test)]
fn groups(c: &AxisCoeffs, group: usize) -> impl Iterator<Item = (usize, usize, [usize; 8])> + '_ {
    let values = 3 * c.out_size as usize;
    let pstart = &c.pstart[..];
    (0..values).step_by(group).map(move |start| {
        let n = (values - start).min(group);
        let mut base = [0usize; 8];
        for (q, b) in base.iter_mut().take(n).enumerate() {
            let (px, channel) = ((start + q) / 3, (start + q) % 3);
            *b = 3 * pstart[px] as usize + channel;
        }
        (start, n, base)
    })
}

/// The lowest and highest of a group's tap-0 bytes.
#[cfg(test)]
fn span(base: &[usize]) -> (usize, usize) {
    let lo = base.iter().copied().min().unwrap_or(0);
    let hi = base.iter().copied().max().unwrap_or(0);
    (lo, hi)
}

/// Where the window of the pair whose first tap is `ka` starts, for a group whose lowest
/// tap-0 byte is `lo`: at the pair's first byte, or as far right as the row allows.
fn window_start(lo: usize, ka: usize, row_bytes: usize, window: usize) -> usize {
    (lo + 3 * ka).min(row_bytes - window)
}

/// A narrow shuffle chunk's lane windows per pair step, where one of two cheaper
/// loads fits (the chunk's halves' tap-0 bytes in `lo[h]..=hi[h]`, `lo[h] == i32::MAX`
/// for a half without values, which keeps 0): one window for both lanes, where every
/// step's bytes fit one ([`shared_window`]), which the kernel loads per step with
/// `vbroadcasti128`, a plain load; else one window per lane for all steps, where each
/// lane's bytes of all `taps` taps fit one, which the kernel loads and inserts once per
/// chunk. `None`: each step's own lane windows, a load and an insert per step. (On Zen 3
/// `vinserti128` runs on the shuffle pipes and costs about as much as the `pshufb` after
/// it.) The same choice for every step keeps the kernel on one path per chunk.
fn narrow_windows(
    lo: [i32; 2],
    hi: [i32; 2],
    taps: usize,
    row_bytes: usize,
) -> Option<[[usize; 2]; MAX_PAIRS / 2]> {
    let mut windows = [[0; 2]; MAX_PAIRS / 2];
    let steps = taps.div_ceil(2);
    let all_shared = windows.iter_mut().take(steps).enumerate().all(|(s, w)| {
        let shared = shared_window(lo, hi, 2 * s, (2 * s + 1).min(taps - 1), row_bytes);
        *w = [shared.unwrap_or(0); 2];
        shared.is_some()
    });
    if all_shared {
        return Some(windows);
    }
    let window = Gather::Shuffle.window(false);
    let mut wo = [0usize; 2];
    for ((wo, &lo), &hi) in wo.iter_mut().zip(&lo).zip(&hi) {
        if lo == i32::MAX {
            continue;
        }
        *wo = window_start(lo as usize, 0, row_bytes, window);
        if hi as usize + 3 * (taps - 1) >= *wo + window {
            return None;
        }
    }
    Some([wo; MAX_PAIRS / 2])
}

/// For a narrow shuffle step whose taps `k0..=klast` of both halves' values lie in one
/// 16-byte window (see [`narrow_windows`]): that window's start.
fn shared_window(
    lo: [i32; 2],
    hi: [i32; 2],
    k0: usize,
    klast: usize,
    row_bytes: usize,
) -> Option<usize> {
    if lo.contains(&i32::MAX) {
        return None;
    }
    let window = Gather::Shuffle.window(false);
    let wo = window_start(lo[0].min(lo[1]) as usize, k0, row_bytes, window);
    (hi[0].max(hi[1]) as usize + 3 * klast < wo + window).then_some(wo)
}

/// The SIMD path's plan and buffers.
#[derive(Clone, Debug, Default)]
pub(super) struct Scratch {
    plan: HPlan,
    /// A ring of horizontal-pass rows, `chunks * 8` values each: in pair format where
    /// `vnni`, else as plain values (see [`vertical_ring`]).
    ring: Vec<i32>,
    /// u8 rows out of the horizontal kernel, `chunks * 8` bytes apart.
    block: Vec<u8>,
    /// u8 rows into the horizontal kernel in the vertical-first order.
    rows: Vec<u8>,
    /// The vertical kernel may use VNNI's `vpdpwssd` (the CPU has it; the level allows),
    /// over a ring in pair format.
    vnni: bool,
}

impl Scratch {
    /// Prepares the horizontal plan; returns whether the SIMD path can run this resize.
    /// `ring_vert` is the vertical pass when it runs second, over the ring rows;
    /// `ymm512` allows the AVX-512 instructions at 256 bits where the CPU has them.
    pub(super) fn prepare(
        &mut self,
        horiz: &AxisCoeffs,
        ring_vert: Option<&AxisCoeffs>,
        ymm512: bool,
    ) -> bool {
        self.vnni = ymm512 && cpu::avx512_vnni();
        if !self.plan.prepare(horiz, self.vnni) {
            return false;
        }
        match ring_vert {
            None => true,
            Some(v) => v.taps <= MAX_V_TAPS && v.simd_friendly(),
        }
    }
}

/// The whole resize with the AVX2 kernels (`horiz` needed; `vert` when `need_v`); the
/// caller checked AVX2 and [`Scratch::prepare`].
pub(super) fn resize<S: RowSink + ?Sized>(
    r: &mut Resizer,
    src: RgbView<'_>,
    out_h: u32,
    need_v: bool,
    sink: &mut S,
) {
    let Resizer {
        horiz,
        vert,
        acc,
        simd,
        ..
    } = r;
    let plan = &simd.plan;
    let (stride, values) = (plan.chunks * 8, plan.values);
    if !need_v || vertical_first(src.width(), src.height(), horiz.out_size, out_h) {
        // The portable vertical kernel, compiled for AVX2. Source rows widened once into a
        // ring of pairs for the pair kernel (as the 512-bit path does) were slower here even
        // with the per-count kernels: whole resizes 1.0-1.45x (a probe, 5 crops to 224x224),
        // the widening's store per 8 values costing about as much as the vertical pass itself.
        let vertical = need_v.then_some(|y, dst: &mut [u8]| {
            let (start, w) = vert.taps_of(y);
            // SAFETY: `resize` runs only after the caller checked AVX2.
            unsafe { vertical_portable(|k| src.row((start + k) as u32), w, dst, acc) };
        });
        let buffers = BlockRows {
            rows: &mut simd.rows,
            block: &mut simd.block,
            stride,
            values,
        };
        let horizontal = |rows: &[&[u8]], ahead, block: &mut [u8], stride| {
            horizontal_u8(plan, rows, ahead, block, stride);
        };
        by_blocks::<BLOCK_ROWS, S>(&src, out_h as usize, buffers, vertical, horizontal, sink);
        return;
    }
    // The ring holds pairs or values (see `vertical_ring`), 32-byte aligned rows.
    let vnni = simd.vnni;
    if vnni {
        vert.ensure_pairs();
    }
    let ring = Ring::<32> {
        buf: &mut simd.ring,
        stride,
        values,
    };
    through_ring::<BLOCK_ROWS, 32, S>(
        &src,
        vert,
        |v, y| {
            if vnni {
                v.pair_taps_of(y)
            } else {
                v.taps_of(y)
            }
        },
        ring,
        |rows, ahead, outs| horizontal_ring(plan, rows, ahead, outs, vnni),
        |ring, offs, w, out| vertical_ring(ring, offs, w, out, vnni),
        sink,
    );
}

/// Horizontal pass of `rows` into u8 rows of `out`, `stride` bytes apart.
fn horizontal_u8(plan: &HPlan, rows: &[&[u8]], ahead: Ahead, out: &mut [u8], stride: usize) {
    let mut store = U8Store { out, stride };
    run_horizontal(plan, rows, ahead, &mut store);
}

/// Horizontal pass of `rows` into the ring rows `out`: in pair format where `pairs`, else
/// as values.
fn horizontal_ring(
    plan: &HPlan,
    rows: &[&[u8]],
    ahead: Ahead,
    out: &mut [&mut [i32]],
    pairs: bool,
) {
    // The AVX2 shuffle kernel cannot inline the VBMI store.
    let vbmi = cpu::avx512_vbmi() && plan.gather != Gather::Shuffle;
    match (pairs, vbmi) {
        (false, _) => run_horizontal(
            plan,
            rows,
            ahead,
            &mut RingStore::<false, false> { rows: out },
        ),
        (true, true) => run_horizontal(
            plan,
            rows,
            ahead,
            &mut RingStore::<true, true> { rows: out },
        ),
        (true, false) => run_horizontal(
            plan,
            rows,
            ahead,
            &mut RingStore::<true, false> { rows: out },
        ),
    }
}

/// The horizontal pass of `rows` into `store`, prefetching (into L2) the rows `ahead`,
/// the next block's: the source image is often cold (just decoded, or one of many).
fn run_horizontal<S: Store>(plan: &HPlan, rows: &[&[u8]], ahead: Ahead, store: &mut S) {
    // Every window lies in `[0, row_bytes)`: the kernel's loads need rows that long, and
    // the stores need `rows.len()` rows of `chunks * 8` values.
    assert!(rows.iter().all(|r| r.len() >= plan.row_bytes));
    assert!(store.fits(rows.len(), plan.chunks * 8));
    assert_eq!(plan.win.len(), plan.chunks * plan.steps);
    if plan.gather == Gather::QuadPair {
        assert!(cpu::avx512_vnni() && plan.steps == 2);
        assert_eq!(plan.wmid.len(), plan.win.len());
        // SAFETY: (both arms) as for the quad kernel below.
        unsafe {
            if plan.wide {
                quad_pair_kernel::<true, S>(plan, rows, ahead, store);
            } else {
                quad_pair_kernel::<false, S>(plan, rows, ahead, store);
            }
        }
        return;
    }
    if plan.gather == Gather::Quad {
        assert!(cpu::avx512_vnni() && (1..=MAX_QUADS).contains(&plan.steps));
        assert_eq!(plan.wmid.len(), plan.win.len());
        // SAFETY: (every arm) the CPU has the quad kernel's features (asserted), and the
        // row and store bounds it relies on were asserted above.
        unsafe {
            match (plan.wide, plan.steps) {
                (false, 1) => quad_kernel::<1, false, S>(plan, rows, ahead, store),
                (false, 2) => quad_kernel::<2, false, S>(plan, rows, ahead, store),
                (false, 3) => quad_kernel::<3, false, S>(plan, rows, ahead, store),
                (false, _) => quad_kernel::<4, false, S>(plan, rows, ahead, store),
                (true, 1) => quad_kernel::<1, true, S>(plan, rows, ahead, store),
                (true, 2) => quad_kernel::<2, true, S>(plan, rows, ahead, store),
                (true, 3) => quad_kernel::<3, true, S>(plan, rows, ahead, store),
                (true, _) => quad_kernel::<4, true, S>(plan, rows, ahead, store),
            }
        }
        return;
    }
    assert!(plan.steps <= MAX_PAIRS && (plan.steps <= MAX_PAIRS / 2 || plan.wide));
    assert!(!plan.wide || plan.steps >= 2);
    match plan.gather {
        // Plans are only built with permutes where `cpu::avx512_vnni()` said yes.
        Gather::Permute | Gather::Quad | Gather::QuadPair => assert!(cpu::avx512_vnni()),
        Gather::Shuffle => assert!(!plan.wide || plan.masks_hi.len() == plan.win.len()),
    }
    // SAFETY: (every arm) the resize runs this only on CPUs with AVX2, and the permute
    // plans' features were asserted; the row and store bounds the kernels rely on were
    // asserted above.
    unsafe {
        match (plan.wide, plan.steps) {
            (false, 1) => horizontal_kernel::<1, false, S>(plan, rows, ahead, store),
            (false, 2) => horizontal_kernel::<2, false, S>(plan, rows, ahead, store),
            (false, 3) => horizontal_kernel::<3, false, S>(plan, rows, ahead, store),
            (false, _) => horizontal_kernel::<4, false, S>(plan, rows, ahead, store),
            (true, 2) => horizontal_kernel::<2, true, S>(plan, rows, ahead, store),
            (true, 3) => horizontal_kernel::<3, true, S>(plan, rows, ahead, store),
            (true, 4) => horizontal_kernel::<4, true, S>(plan, rows, ahead, store),
            (true, 5) => horizontal_kernel::<5, true, S>(plan, rows, ahead, store),
            (true, 6) => horizontal_kernel::<6, true, S>(plan, rows, ahead, store),
            (true, 7) => horizontal_kernel::<7, true, S>(plan, rows, ahead, store),
            (true, 8) => horizontal_kernel::<8, true, S>(plan, rows, ahead, store),
            (true, _) => unreachable!("asserted above: wide plans have 2 to 8 pairs"),
        }
    }
}

/// The kernel of `plan`'s gather, for `P` pairs and `WIDE` windows.
///
/// # Safety
/// As [`shuffle_kernel`] or [`permute_kernel`] for `plan.gather`.
unsafe fn horizontal_kernel<const P: usize, const WIDE: bool, S: Store>(
    plan: &HPlan,
    rows: &[&[u8]],
    ahead: Ahead,
    store: &mut S,
) {
    // SAFETY: the caller's guarantees are the chosen kernel's.
    unsafe {
        match plan.gather {
            Gather::Shuffle => shuffle_kernel::<P, WIDE, S>(plan, rows, ahead, store),
            Gather::Permute => permute_kernel::<P, WIDE, S>(plan, rows, ahead, store),
            Gather::Quad | Gather::QuadPair => {
                unreachable!("quad plans run `quad_kernel` or `quad_pair_kernel`")
            }
        }
    }
}

/// Where the horizontal kernel puts 8 finished values of row `r`, chunk `m`.
trait Store {
    /// Whether `rows` rows of `values` values fit.
    fn fits(&self, rows: usize, values: usize) -> bool;
    /// Stores the values of 8 fixed-point sums (`sum >> PRECISION_BITS`, each in
    /// `[0, 255]`; the sums are non-negative and below 2^30).
    ///
    /// # Safety
    /// AVX2, and `r`, `m` within what [`Store::fits`] accepted.
    unsafe fn store(&mut self, r: usize, m: usize, sum: __m256i);
}

struct U8Store<'a> {
    out: &'a mut [u8],
    stride: usize,
}

impl Store for U8Store<'_> {
    fn fits(&self, rows: usize, values: usize) -> bool {
        self.stride >= values && self.out.len() >= rows * self.stride
    }

    #[inline(always)]
    unsafe fn store(&mut self, r: usize, m: usize, sum: __m256i) {
        // SAFETY: `fits` guaranteed `r * stride + 8 * m + 8 <= out.len()`.
        unsafe {
            let p = self.out.as_mut_ptr().add(r * self.stride + 8 * m);
            let v = _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(sum);
            _mm_storel_epi64(p.cast(), pack8(v));
        }
    }
}

/// The ring's rows, one slice each: values (`v`, an i32 in `[0, 255]`), or with `PAIRS`
/// the pair format (`v | v << 23`, the i16 pair `(v, 128 v)`), built by [`pair_bytes`]
/// with `VBMI` (for the kernels that enable AVX-512 VBMI). Values take one shift per 8
/// values where the pair format takes two more operations, and on Zen 3 both shifts
/// queue for the two pipes that also run the shuffles (a probe that stored the sums
/// unconverted: whole resizes 11% faster, 67.5 against 76 us); [`vertical_ring`] reads
/// values with `vpmulld`.
struct RingStore<'a, 'b, const PAIRS: bool, const VBMI: bool> {
    rows: &'b mut [&'a mut [i32]],
}

impl<const PAIRS: bool, const VBMI: bool> Store for RingStore<'_, '_, PAIRS, VBMI> {
    fn fits(&self, rows: usize, values: usize) -> bool {
        self.rows.len() >= rows && self.rows.iter().all(|r| r.len() >= values)
    }

    #[inline(always)]
    unsafe fn store(&mut self, r: usize, m: usize, sum: __m256i) {
        // SAFETY: `fits` guaranteed that row `r` exists and holds `8 m + 8` values.
        unsafe {
            let p = self.rows.get_unchecked_mut(r).as_mut_ptr().add(8 * m);
            let entry = if PAIRS && VBMI {
                pair_bytes(sum)
            } else {
                let v = _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(sum);
                if PAIRS {
                    _mm256_or_si256(v, _mm256_slli_epi32::<23>(v))
                } else {
                    v
                }
            };
            _mm256_storeu_si256(p.cast(), entry);
        }
    }
}

/// The pair format of 8 sums' values in two instructions instead of three shifts and an
/// OR: one `vpmultishiftqb` copies bits 22-29 (`v`) to byte 0, bits 15-22 to byte 2 and
/// bits 23-30 to byte 3 of each dword, and an AND keeps byte 0, bit 7 of byte 2 (`v & 1`)
/// and byte 3 (`v >> 1`; bit 30 of a sum is 0): `v + (v << 23)`. (The 512-bit kernels do
/// the same.)
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi")]
#[inline]
fn pair_bytes(sum: __m256i) -> __m256i {
    let ctrl = _mm256_set1_epi64x(i64::from_le_bytes([22, 0, 15, 23, 54, 0, 47, 55]));
    let spread = _mm256_multishift_epi64_epi8(ctrl, sum);
    _mm256_and_si256(spread, _mm256_set1_epi32(0xFF80_00FF_u32 as i32))
}

/// The 8 i32 of `v` (each in `[0, 255]`) as the low 8 bytes.
#[inline(always)]
unsafe fn pack8(v: __m256i) -> __m128i {
    // SAFETY: AVX2 is enabled in every caller; these intrinsics only touch registers.
    unsafe {
        let w = _mm256_packus_epi32(v, v);
        let b = _mm256_packus_epi16(w, w);
        _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256::<1>(b))
    }
}

/// The loop every horizontal kernel shares: per 8-value chunk its `N` steps' windows
/// (copied out of the plan, so that they stay in registers across the stores) and tables,
/// loaded once by `tables(t)` (`t`: the chunk's first entry), then per row the chunk's
/// fixed-point sums from `row_sum(tables, windows, row)`, shifted and stored. Every fourth
/// chunk (32 values, about a cache line of the source or less) prefetches the line after
/// the window's start in the next block's rows.
///
/// # Safety
/// `row_sum`'s loads are in bounds for every row of `rows` and the chunk's windows; `store`
/// fits `rows.len()` rows of `plan.chunks * 8` values; the CPU has AVX2.
#[inline(always)]
unsafe fn chunk_rows<const N: usize, T: Copy, S: Store>(
    plan: &HPlan,
    rows: &[&[u8]],
    ahead: Ahead,
    store: &mut S,
    tables: impl Fn(usize) -> T,
    row_sum: impl Fn(T, &[[u32; 2]; N], *const u8) -> __m256i,
) {
    for m in 0..plan.chunks {
        let t = m * N;
        let win: [[u32; 2]; N] = std::array::from_fn(|q| plan.win[t + q]);
        let tab = tables(t);
        if m % 4 == 0 {
            // SAFETY: a prefetch accesses nothing.
            unsafe { ahead.prefetch(win[0][0] as usize + 64) };
        }
        for (r, row) in rows.iter().enumerate() {
            let sum = row_sum(tab, &win, row.as_ptr());
            // SAFETY: AVX2 and the store bounds are the caller's.
            unsafe { store.store(r, m, sum) };
        }
    }
}

/// Entry `i` of a table of 32-byte rows, as a vector.
///
/// # Safety
/// AVX (`T` is 32 bytes: checked at compile time).
#[inline(always)]
unsafe fn load256<T>(table: &[T], i: usize) -> __m256i {
    const { assert!(std::mem::size_of::<T>() == 32) };
    // SAFETY: `table[i]` is bounds-checked and 32 readable bytes.
    unsafe { _mm256_loadu_si256((&table[i] as *const T).cast()) }
}

/// The horizontal kernel of the shuffle plans (AVX2).
///
/// # Safety
/// AVX2; every row at least `plan.row_bytes` long; `store` fits `rows.len()` rows of
/// `plan.chunks * 8` values; `plan.gather == Shuffle`, `plan.steps == P`,
/// `plan.wide == WIDE` and the tables hold `chunks * P` entries.
#[target_feature(enable = "avx2")]
unsafe fn shuffle_kernel<const P: usize, const WIDE: bool, S: Store>(
    plan: &HPlan,
    rows: &[&[u8]],
    ahead: Ahead,
    store: &mut S,
) {
    // SAFETY: window offsets are at most `row_bytes - 16` (narrow) or `row_bytes - 32`
    // (wide; the second load is at +16) per `window_start`, and rows are at least
    // `row_bytes` long, so every 16-byte load is in bounds; the table reads are
    // bounds-checked; the stores are within what the caller checked with `fits`; the
    // prefetches access nothing.
    unsafe {
        let half = _mm256_set1_epi32(HALF);
        let tables = |t: usize| {
            let masks: [__m256i; P] = std::array::from_fn(|p| load256(&plan.masks, t + p));
            let masks_hi: [__m256i; P] = std::array::from_fn(|p| {
                if WIDE {
                    load256(&plan.masks_hi, t + p)
                } else {
                    _mm256_setzero_si256()
                }
            });
            let whi: [__m256i; P] = std::array::from_fn(|p| load256(&plan.whi, t + p));
            let wlo: [__m256i; P] = std::array::from_fn(|p| load256(&plan.wlo, t + p));
            (masks, masks_hi, whi, wlo)
        };
        chunk_rows::<P, _, S>(plan, rows, ahead, store, tables, |tab, win, ptr| {
            let (masks, masks_hi, whi, wlo) = tab;
            // Where the plan gave the lanes one window per step, one broadcast load per
            // step; where it gave every step the same lane windows, one load and insert
            // per chunk (`narrow_windows`).
            let shared = !WIDE && win.iter().all(|&[w0, w1]| w0 == w1);
            let same = !WIDE && !shared && win.iter().all(|&w| w == win[0]);
            let lanes = |[w0, w1]: [u32; 2]| {
                let a = _mm_loadu_si128(ptr.add(w0 as usize).cast());
                let b = _mm_loadu_si128(ptr.add(w1 as usize).cast());
                _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(a), b)
            };
            let common = if same {
                lanes(win[0])
            } else {
                _mm256_setzero_si256()
            };
            let mut hi = _mm256_setzero_si256();
            let mut lo = half;
            for p in 0..P {
                let [w0, w1] = win[p];
                let (p0, p1) = (ptr.add(w0 as usize), ptr.add(w1 as usize));
                let window = if shared {
                    _mm256_broadcastsi128_si256(_mm_loadu_si128(p0.cast()))
                } else if same {
                    common
                } else {
                    lanes(win[p])
                };
                let mut g = _mm256_shuffle_epi8(window, masks[p]);
                if WIDE {
                    let a = _mm_loadu_si128(p0.add(16).cast());
                    let b = _mm_loadu_si128(p1.add(16).cast());
                    let window = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(a), b);
                    g = _mm256_or_si256(g, _mm256_shuffle_epi8(window, masks_hi[p]));
                }
                hi = _mm256_add_epi32(hi, _mm256_madd_epi16(g, whi[p]));
                lo = _mm256_add_epi32(lo, _mm256_madd_epi16(g, wlo[p]));
            }
            _mm256_add_epi32(_mm256_slli_epi32::<11>(hi), lo)
        });
    }
}

/// The tap pairs' bytes of 8 values as i16 pairs (odd bytes zeroed): `vpermb` of a
/// 32-byte window with zero-masking, as one instruction (LLVM otherwise emits a permute
/// and an AND).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi")]
#[inline]
fn permute_pairs(idx: __m256i, window: __m256i) -> __m256i {
    let out: __m256i;
    // SAFETY: a register-only instruction of the enabled features; no memory, stack or
    // flags touched.
    unsafe {
        asm!(
            "vpermb {out:y}{{{k}}}{{z}}, {idx:y}, {window:y}",
            k = in(kreg) EVEN_BYTES,
            out = out(zmm_reg) out,
            idx = in(zmm_reg) idx,
            window = in(zmm_reg) window,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    out
}

/// Byte `i` = byte `idx[i] & 63` of the 64-byte window `first ++ second` where bit `i` of
/// `keep` is set, else 0 (`vpermt2b` with zero-masking): [`EVEN_BYTES`] for the pair
/// kernel, all bytes for the quad kernel. (With the intrinsic, LLVM merges the two adjacent
/// loads into one 512-bit `vpermb`, and on Intel's Xeons 512-bit instructions slow the next
/// decode down: see [`crate::fused::default_simd`].)
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi")]
#[inline]
fn permute2(keep: u32, idx: __m256i, first: __m256i, second: __m256i) -> __m256i {
    let mut out = first;
    // SAFETY: as in `permute_pairs`.
    unsafe {
        asm!(
            "vpermt2b {out:y}{{{k}}}{{z}}, {idx:y}, {second:y}",
            k = in(kreg) keep,
            out = inout(zmm_reg) out,
            idx = in(zmm_reg) idx,
            second = in(zmm_reg) second,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    out
}

/// `acc + dot(a, b)` over i16 pairs in one `vpdpwssd` (`vpmaddwd` + `vpaddd`'s wrapping
/// arithmetic; the kernels' sums never wrap).
///
/// # Safety
/// AVX2, AVX-512 VNNI and VL.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn dot_acc(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
    let mut acc = acc;
    // SAFETY: a register-only instruction the CPU has (caller); no memory, stack or flags
    // touched.
    unsafe {
        asm!(
            "vpdpwssd {acc}, {a}, {b}",
            acc = inout(ymm_reg) acc,
            a = in(ymm_reg) a,
            b = in(ymm_reg) b,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// One step's tap bytes of 8 values from the window at `at`: 32 bytes through `vpermb`, or
/// with `WIDE` 64 bytes in two loads through `vpermt2b`; with `PAIRS` the odd bytes zeroed
/// (i16 pairs for `vpdpwssd`), else all four bytes of each dword kept (a quad for
/// `vpdpbusd`).
///
/// # Safety
/// `at` starts `32` (`WIDE`: `64`) readable bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi")]
#[inline]
unsafe fn step_bytes<const WIDE: bool, const PAIRS: bool>(at: *const u8, idx: __m256i) -> __m256i {
    // SAFETY: the loads are in bounds (caller); the permutes touch registers only.
    unsafe {
        let first = _mm256_loadu_si256(at.cast());
        let keep = if PAIRS { EVEN_BYTES } else { u32::MAX };
        if WIDE {
            permute2(keep, idx, first, _mm256_loadu_si256(at.add(32).cast()))
        } else if PAIRS {
            permute_pairs(idx, first)
        } else {
            _mm256_permutexvar_epi8(idx, first)
        }
    }
}

/// The horizontal kernel of the permute plans: per tap pair one window load (two for wide
/// plans), one permute and two accumulating dot products, against AVX2's two loads, an
/// insert, a shuffle, two multiplies and two adds.
///
/// # Safety
/// AVX2 and AVX-512 F/BW/VL/VBMI/VNNI; every row at least `plan.row_bytes` long; `store`
/// fits `rows.len()` rows of `plan.chunks * 8` values; `plan.gather == Permute`,
/// `plan.steps == P`, `plan.wide == WIDE` and the tables hold `chunks * P` entries.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
unsafe fn permute_kernel<const P: usize, const WIDE: bool, S: Store>(
    plan: &HPlan,
    rows: &[&[u8]],
    ahead: Ahead,
    store: &mut S,
) {
    // SAFETY: window offsets are at most `row_bytes - 32` (or `- 64` for wide plans, whose
    // second load is at +32) per `window_start`, and rows are at least `row_bytes` long, so
    // every 32-byte load is in bounds; the table reads are bounds-checked; the stores are
    // within what the caller checked with `fits`; the prefetches access nothing.
    unsafe {
        let (bias, half) = (_mm256_set1_epi32(PAIR_HORNER_BIAS), _mm256_set1_epi32(HALF));
        let tables = |t: usize| {
            let idx: [__m256i; P] = std::array::from_fn(|p| load256(&plan.masks, t + p));
            let whi: [__m256i; P] = std::array::from_fn(|p| load256(&plan.whi, t + p));
            let wlo: [__m256i; P] = std::array::from_fn(|p| load256(&plan.wlo, t + p));
            (idx, whi, wlo)
        };
        chunk_rows::<P, _, S>(plan, rows, ahead, store, tables, |tab, win, ptr| {
            let (idx, whi, wlo) = tab;
            let g = |p: usize| step_bytes::<WIDE, true>(ptr.add(win[p][0] as usize), idx[p]);
            if P == 1 {
                // Horner's rule, `(H << 8) + L`, from the rounding bias over 256: no
                // zeroed accumulator and no add (1-2 taps, about a quarter of
                // RandomResizedCrop's crops).
                let g0 = g(0);
                let acc = dot_acc(bias, g0, whi[0]);
                dot_acc(_mm256_slli_epi32::<8>(acc), g0, wlo[0])
            } else {
                let (mut hi, mut lo) = (_mm256_setzero_si256(), half);
                for p in 0..P {
                    let gp = g(p);
                    hi = dot_acc(hi, gp, whi[p]);
                    lo = dot_acc(lo, gp, wlo[p]);
                }
                _mm256_add_epi32(_mm256_slli_epi32::<8>(hi), lo)
            }
        });
    }
}

dot_instruction! {
    /// `acc + dot(a, b)` over 4 unsigned bytes of `a` times 4 signed bytes of `b`
    /// (`vpdpbusd` on 256-bit registers, any of the 32).
    #[target_feature(enable = "avx512f,avx512vl,avx512vnni")]
    fn dpbusd(__m256i) = "vpdpbusd {acc:y}, {a:y}, {b:y}"
}

/// Where the pair kernel's Horner chain starts: the rounding bias over 256, which the
/// chain's shift by 8 brings back to `HALF` exactly.
const PAIR_HORNER_BIAS: i32 = {
    assert!(HALF % (1 << 8) == 0);
    HALF >> 8
};

/// Where the Horner chains of the quad kernels start: the rounding bias over 65536, which
/// the chain's two shifts by 8 bring back to `HALF` exactly.
const HORNER_BIAS: i32 = {
    assert!(HALF % (1 << 16) == 0);
    HALF >> 16
};

/// The horizontal kernel of the quad plans: per four taps one window load (two for wide
/// plans), one unmasked permute that puts each value's four bytes in its dword, and three
/// `vpdpbusd` against the weights' digits of 65536, 256 and 1, whose sums combine exactly
/// into Pillow's (the digits are signed, so no offset is needed: the pixels are the
/// unsigned operand).
///
/// # Safety
/// AVX2 and AVX-512 F/BW/VL/VBMI/VNNI; every row at least `plan.row_bytes` long; `store`
/// fits `rows.len()` rows of `plan.chunks * 8` values; `plan.gather == Quad`,
/// `plan.steps == Q`, `plan.wide == WIDE` and the tables hold `chunks * Q` entries.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
unsafe fn quad_kernel<const Q: usize, const WIDE: bool, S: Store>(
    plan: &HPlan,
    rows: &[&[u8]],
    ahead: Ahead,
    store: &mut S,
) {
    // SAFETY: as in `permute_kernel` (the same windows); the digit tables are
    // bounds-checked.
    unsafe {
        let (bias, half, zero) = (
            _mm256_set1_epi32(HORNER_BIAS),
            _mm256_set1_epi32(HALF),
            _mm256_setzero_si256(),
        );
        let tables = |t: usize| {
            let idx: [__m256i; Q] = std::array::from_fn(|q| load256(&plan.masks, t + q));
            let wa: [__m256i; Q] = std::array::from_fn(|q| load256(&plan.whi, t + q));
            let wb: [__m256i; Q] = std::array::from_fn(|q| load256(&plan.wmid, t + q));
            let wc: [__m256i; Q] = std::array::from_fn(|q| load256(&plan.wlo, t + q));
            (idx, wa, wb, wc)
        };
        chunk_rows::<Q, _, S>(plan, rows, ahead, store, tables, |tab, win, ptr| {
            let (idx, wa, wb, wc) = tab;
            let g: [__m256i; Q] = std::array::from_fn(|q| {
                step_bytes::<WIDE, false>(ptr.add(win[q][0] as usize), idx[q])
            });
            if Q == 1 {
                // Horner's rule, `(((A << 8) + B) << 8) + C`, in one accumulator that
                // starts at the rounding bias over 65536: no zeroed accumulators and two
                // adds fewer than the general form (typical crops, 3-4 taps: their
                // resizes 4-5% faster in a probe). With more quads, one chain of 3 Q dot
                // products, or two chains, were 1-3% slower than the general form.
                let mut acc = bias;
                acc = dpbusd(acc, g[0], wa[0]);
                acc = _mm256_slli_epi32::<8>(acc);
                acc = dpbusd(acc, g[0], wb[0]);
                acc = _mm256_slli_epi32::<8>(acc);
                dpbusd(acc, g[0], wc[0])
            } else {
                let (mut a, mut b, mut c) = (zero, zero, half);
                for q in 0..Q {
                    a = dpbusd(a, g[q], wa[q]);
                    b = dpbusd(b, g[q], wb[q]);
                    c = dpbusd(c, g[q], wc[q]);
                }
                let ab = _mm256_add_epi32(_mm256_slli_epi32::<16>(a), _mm256_slli_epi32::<8>(b));
                _mm256_add_epi32(ab, c)
            }
        });
    }
}

/// The horizontal kernel of the quad-pair plans (5 or 6 taps): per value the quad's three
/// digit sums and the pair's two half sums in one Horner chain,
/// `(((A << 8) + B + H) << 8) + C + L` from a start at the rounding bias over 65536, where
/// `A`, `B`, `C` are the quad's dot products with the digits of 65536, 256 and 1 and `H`,
/// `L` the pair's with its weights' `w >> 8` and `w & 255`: the same integer as Pillow's
/// sum, so the same pixels. Every operation wraps modulo 2^32, and the final sum is in
/// `[0, 2^30)`, so the intermediate values need no range of their own.
///
/// # Safety
/// As [`quad_kernel`], with `plan.gather == QuadPair` (`plan.steps == 2`).
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
unsafe fn quad_pair_kernel<const WIDE: bool, S: Store>(
    plan: &HPlan,
    rows: &[&[u8]],
    ahead: Ahead,
    store: &mut S,
) {
    // SAFETY: as in `permute_kernel` (the same windows); the tables are bounds-checked.
    unsafe {
        let bias = _mm256_set1_epi32(HORNER_BIAS);
        let tables = |t: usize| {
            let idx: [__m256i; 2] = std::array::from_fn(|s| load256(&plan.masks, t + s));
            let quad = [&plan.whi, &plan.wmid, &plan.wlo].map(|w| load256(w, t));
            let pair = [&plan.whi, &plan.wlo].map(|w| load256(w, t + 1));
            (idx, quad, pair)
        };
        chunk_rows::<2, _, S>(plan, rows, ahead, store, tables, |tab, win, ptr| {
            let (idx, [wa, wb, wc], [wh, wl]) = tab;
            let quad = step_bytes::<WIDE, false>(ptr.add(win[0][0] as usize), idx[0]);
            let pair = step_bytes::<WIDE, true>(ptr.add(win[1][0] as usize), idx[1]);
            let mut acc = dpbusd(bias, quad, wa);
            acc = _mm256_slli_epi32::<8>(acc);
            acc = dpbusd(acc, quad, wb);
            acc = dot_acc(acc, pair, wh);
            acc = _mm256_slli_epi32::<8>(acc);
            acc = dpbusd(acc, quad, wc);
            dot_acc(acc, pair, wl)
        });
    }
}

/// One output row of the vertical pass: output row = the rows at `offs` (value offsets into
/// `ring`) weighted by `w`. With `vnni`, rows and weights are in pair format and each tap
/// is one `vpdpwssd`; else the rows are values and the weights whole, and each tap is a
/// `vpmulld` and an add, as many operations as `vpmaddwd` and an add over pairs, with
/// cheaper rows (see [`RingStore`]). (`vpmulld` runs at `vpmaddwd`'s rate on Zen 3, two a
/// cycle; on Intel's cores it is two micro-ops.)
fn vertical_ring(ring: &[i32], offs: &[usize], w: &[i32], out: &mut [u8], vnni: bool) {
    let chunks = out.len().div_ceil(8);
    assert!(w.len() <= MAX_V_TAPS && offs.len() == w.len());
    assert!(offs.iter().all(|&o| o + chunks * 8 <= ring.len()));
    if vnni {
        assert!(cpu::avx512_vnni());
        // SAFETY: the CPU has AVX-512 VNNI and VL (asserted) and AVX2; bounds asserted
        // above.
        unsafe { with_taps!(w.len(), |T| vertical_kernel::<true, T>(ring, offs, w, out)) }
    } else {
        // SAFETY: the resize runs this only on CPUs with AVX2; bounds asserted above.
        unsafe { with_taps!(w.len(), |T| vertical_kernel::<false, T>(ring, offs, w, out)) }
    }
}

/// `acc` plus a ring row's 8 entries `a` times a tap's weight `b`: pairs through
/// [`dot_acc`] where `PAIRS`, else values by `vpmulld` (whose products stay below 2^30).
///
/// # Safety
/// AVX2, and AVX-512 VNNI and VL where `PAIRS`.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn tap_acc<const PAIRS: bool>(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
    if PAIRS {
        // SAFETY: the caller's CPU has VNNI and VL where `PAIRS`.
        unsafe { dot_acc(acc, a, b) }
    } else {
        _mm256_add_epi32(acc, _mm256_mullo_epi32(a, b))
    }
}

/// # Safety
/// AVX2 (and AVX-512 VNNI and VL where `PAIRS`); `w.len() <= MAX_V_TAPS`,
/// `offs.len() == w.len()` and, unless 0, `TAPS == w.len()`; each row at `offs` holds
/// `8 * ceil(out.len() / 8)` values of `ring`.
#[target_feature(enable = "avx2")]
unsafe fn vertical_kernel<const PAIRS: bool, const TAPS: usize>(
    ring: &[i32],
    offs: &[usize],
    w: &[i32],
    out: &mut [u8],
) {
    // SAFETY: each load reads 8 values at `offs[k] + v` with `v + 8 <= 8 * ceil(n / 8)`,
    // inside `ring`; stores cover `[8m, 8m + 32)` or `[8m, 8m + 8)` only when that lies
    // within `out`, and the tail goes through a copy.
    unsafe {
        let taps = if TAPS == 0 { w.len() } else { TAPS };
        let mut wv = [_mm256_setzero_si256(); MAX_V_TAPS];
        let mut rows = [ring.as_ptr(); MAX_V_TAPS];
        for k in 0..taps {
            wv[k] = _mm256_set1_epi32(w[k]);
            rows[k] = ring.as_ptr().add(offs[k]);
        }
        let half = _mm256_set1_epi32(HALF);
        let n = out.len();
        let mut m = 0;
        // 32 values per step: four accumulators share each weight broadcast, and one
        // 32-byte store replaces four 8-byte ones.
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        while 8 * m + 32 <= n {
            let (mut a0, mut a1, mut a2, mut a3) = (half, half, half, half);
            for (&row, &wk) in rows.iter().zip(&wv).take(taps) {
                let p = row.add(8 * m);
                a0 = tap_acc::<PAIRS>(a0, _mm256_loadu_si256(p.cast()), wk);
                a1 = tap_acc::<PAIRS>(a1, _mm256_loadu_si256(p.add(8).cast()), wk);
                a2 = tap_acc::<PAIRS>(a2, _mm256_loadu_si256(p.add(16).cast()), wk);
                a3 = tap_acc::<PAIRS>(a3, _mm256_loadu_si256(p.add(24).cast()), wk);
            }
            let s01 = _mm256_packus_epi32(
                _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(a0),
                _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(a1),
            );
            let s23 = _mm256_packus_epi32(
                _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(a2),
                _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(a3),
            );
            // Bytes are in lane order (a0[0..4] a1[0..4] a2[0..4] a3[0..4] | the
            // upper halves); gather the dwords back into value order.
            let bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(s01, s23), order);
            _mm256_storeu_si256(out.as_mut_ptr().add(8 * m).cast(), bytes);
            m += 4;
        }
        while 8 * m < n {
            let mut acc = half;
            for (&row, &wk) in rows.iter().zip(&wv).take(taps) {
                acc = tap_acc::<PAIRS>(acc, _mm256_loadu_si256(row.add(8 * m).cast()), wk);
            }
            let bytes = pack8(_mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(acc));
            if 8 * m + 8 <= n {
                _mm_storel_epi64(out.as_mut_ptr().add(8 * m).cast(), bytes);
            } else {
                let mut tail = [0u8; 16];
                _mm_storeu_si128(tail.as_mut_ptr().cast(), bytes);
                out[8 * m..].copy_from_slice(&tail[..n - 8 * m]);
            }
            m += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_take_the_layout_each_downscale_needs() {
        // The parity tests compare results; this pins which kernel they exercised. Input
        // widths to 224 outputs: upscales (2 taps) take the 256-bit pair permutes; 3 and 4
        // taps a quad, 5 and 6 (2x to 3x) a quad and a pair, in 32-byte windows and for a
        // few widths 64-byte ones; 7 taps and more two quads or more, in 64-byte windows up
        // to about 6x; then the pair permutes' 64-byte windows up to about 6.7x, the AVX2
        // shuffles' 32-byte lane windows up to 8x (8 pairs); rows shorter than a window
        // take a smaller one. (in, out, the layout: gather and wide, or none that fits)
        type Case = (u32, u32, Option<(Gather, bool)>);
        let cases: [Case; 13] = [
            (200, 224, Some((Gather::Permute, false))),
            (300, 224, Some((Gather::Quad, false))),
            (500, 224, Some((Gather::QuadPair, false))),
            (600, 224, Some((Gather::QuadPair, false))),
            (601, 224, Some((Gather::QuadPair, true))),
            (700, 224, Some((Gather::Quad, true))),
            (1300, 224, Some((Gather::Quad, true))),
            (1400, 224, Some((Gather::Permute, true))),
            (1680, 224, Some((Gather::Shuffle, true))),
            (1800, 224, None),
            (11, 5, Some((Gather::QuadPair, false))),
            (17, 5, Some((Gather::Quad, false))),
            (10, 7, Some((Gather::Shuffle, false))),
        ];
        for (in_size, out, expected) in cases {
            let mut c = AxisCoeffs::default();
            c.prepare(in_size, out);
            c.ensure_padded();
            let mut plan = HPlan::default();
            let built = plan
                .prepare(&c, cpu::avx512_vnni())
                .then_some((plan.gather, plan.wide));
            let expected = match expected {
                // Without AVX-512 the permute layouts are never tried.
                Some((Gather::Permute | Gather::Quad | Gather::QuadPair, _))
                    if !cpu::avx512_vnni() =>
                {
                    built
                }
                e => e,
            };
            assert_eq!(built, expected, "{in_size} -> {out}");
        }
    }

    #[test]
    fn narrow_shuffles_take_the_cheapest_windows_that_fit() {
        if !cpu::avx2() {
            return;
        }
        // Every index of a narrow shuffle plan reads inside its lane's 16 bytes, whichever
        // windows it has. Per chunk (`narrow_windows`): downscales to about 1.5x give most
        // chunks one window for both lanes (the typical crop's 330 -> 224: 72 of 84), up
        // to about 2x most of the rest one window per lane for all steps; beyond, each
        // step its own.
        let mut kinds_at = Vec::new();
        for in_size in (2..=40).chain(100..=700) {
            for out in [1, 5, 224] {
                let mut c = AxisCoeffs::default();
                c.prepare(in_size, out);
                c.ensure_padded();
                let mut plan = HPlan::default();
                // SAFETY: the CPU has AVX2 (checked above).
                if !unsafe { plan.fill_vector(&c, Gather::Shuffle, false) } {
                    continue;
                }
                for mask in &plan.masks {
                    assert!(
                        mask.iter().all(|&i| i == 0x80 || i < 16),
                        "{in_size} -> {out}"
                    );
                }
                let chunks = plan.win.chunks_exact(plan.steps);
                let shared = chunks
                    .clone()
                    .filter(|steps| steps.iter().all(|&[w0, w1]| w0 == w1))
                    .count();
                let per_lane = chunks
                    .filter(|steps| steps.iter().all(|&w| w == steps[0] && w[0] != w[1]))
                    .count();
                if out == 224 {
                    kinds_at.push((in_size, (shared, per_lane)));
                }
            }
        }
        let kinds = |size: u32| kinds_at.iter().find(|&&(s, _)| s == size).map(|s| s.1);
        assert_eq!(
            kinds(224),
            Some((84, 0)),
            "an identity width's chunks all share"
        );
        assert_eq!(kinds(330), Some((72, 12)));
        assert_eq!(kinds(400), Some((25, 59)));
        assert_eq!(kinds(430), Some((10, 74)));
        assert_eq!(kinds(600), Some((1, 0)));
    }

    #[test]
    fn signed_digits_rebuild_every_weight() {
        for w in -(1 << 22)..=(1 << 22) {
            let [a, b, c] = signed_digits(w).map(i32::from);
            assert_eq!(65536 * a + 256 * b + c, w, "{w}");
        }
    }

    #[test]
    fn vector_pixel_tables_equal_the_scalar_ones() {
        if !cpu::avx2() {
            return;
        }
        let ins = (1..=40).chain((41..1500).step_by(11));
        let outs = [1, 2, 3, 7, 8, 9, 64, 223, 224, 301];
        let mut checked = 0;
        for (in_size, out) in ins.flat_map(|i| outs.map(|o| (i, o))) {
            for (gather, mirrored) in [Gather::Quad, Gather::QuadPair, Gather::Permute]
                .into_iter()
                .flat_map(|g| [(g, false), (g, true)])
            {
                let mut c = AxisCoeffs::default();
                c.prepare_mirrored(in_size, out, mirrored);
                c.ensure_padded();
                if gather == Gather::QuadPair && !(5..=6).contains(&c.taps) {
                    continue;
                }
                let case = format!("{in_size} -> {out}, {gather:?}, mirrored {mirrored}");
                let (mut scalar, mut vector) = (HPlan::default(), HPlan::default());
                scalar.set_layout(&c, gather, false);
                vector.set_layout(&c, gather, false);
                let len = scalar.fill_pixels_scalar(&c, gather);
                // SAFETY: the CPU has AVX2 (checked above).
                assert_eq!(unsafe { vector.fill_pixels(&c, gather) }, len, "{case}");
                assert_eq!(vector.px_pos, scalar.px_pos, "{case}");
                assert_eq!(vector.px_hi, scalar.px_hi, "{case}");
                assert_eq!(vector.px_mid, scalar.px_mid, "{case}");
                assert_eq!(vector.px_lo, scalar.px_lo, "{case}");
                checked += 1;
            }
        }
        assert!(checked > 5000, "only {checked} tables compared");
    }

    #[test]
    fn vector_plans_equal_the_scalar_ones() {
        if !cpu::avx2() {
            return;
        }
        let ins = (1..=80).chain((81..2000).step_by(7));
        let outs = [1, 2, 3, 4, 5, 7, 9, 13, 64, 100, 223, 224, 301];
        let layouts = [Gather::Permute, Gather::Shuffle].map(|g| [(g, false), (g, true)]);
        let mut checked = 0;
        for (in_size, out) in ins.flat_map(|i| outs.map(|o| (i, o))) {
            for ((gather, wide), mirrored) in layouts
                .into_iter()
                .flatten()
                .flat_map(|l| [(l, false), (l, true)])
            {
                let mut c = AxisCoeffs::default();
                c.prepare_mirrored(in_size, out, mirrored);
                c.ensure_padded();
                let case =
                    format!("{in_size} -> {out}, {gather:?}, wide {wide}, mirrored {mirrored}");
                let mut scalar = HPlan::default();
                let fits = fits(&c, gather, wide);
                if fits {
                    scalar.fill(&c, gather, wide);
                }
                let mut vector = HPlan::default();
                // SAFETY: the CPU has AVX2 (checked above).
                let built = unsafe { vector.fill_vector(&c, gather, wide) };
                assert_eq!(built, fits, "{case}");
                if !fits {
                    continue;
                }
                checked += 1;
                let shape =
                    |p: &HPlan| (p.gather, p.steps, p.wide, p.chunks, p.values, p.row_bytes);
                assert_eq!(shape(&vector), shape(&scalar), "{case}");
                assert_eq!(vector.win, scalar.win, "{case}");
                assert_eq!(vector.masks, scalar.masks, "{case}");
                assert_eq!(vector.masks_hi, scalar.masks_hi, "{case}");
                assert_eq!(vector.whi, scalar.whi, "{case}");
                assert_eq!(vector.wlo, scalar.wlo, "{case}");
            }
        }
        assert!(checked > 3000, "only {checked} plans compared");
    }
}
