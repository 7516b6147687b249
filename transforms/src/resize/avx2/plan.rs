//! The AVX2 horizontal pass as data ([`HorizontalPlan`]): per chunk of 8 output values and per step of
//! taps, where each lane's source window starts, which of its bytes each value's taps read
//! (`pshufb` masks, or `vpermb` indices at the 256-bit AVX-512 level) and the weights' i16
//! halves or digits, all laid out in the value order the kernels in [`super`] read them.
//!
//! Built once per coefficient set, that is for every new crop width, so building must stay
//! cheap (the vector builders, checked bit for bit against the scalar references in the
//! tests). Must not pick a window that lets a kernel read outside a source row: every plan's
//! windows are checked against the row length here, and the kernels rely on that.

use std::arch::x86_64::*;

use super::{AxisCoeffs, MAX_PAIRS, MAX_QUADS};
use crate::resize::CoeffsKey;

/// How the horizontal kernel gathers each step's tap bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Gather {
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

/// What a [`HorizontalPlan`] was built for, and whether a kernel can run it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Built {
    coeffs: CoeffsKey,
    /// Whether the permute layouts were allowed.
    permute: bool,
    runnable: bool,
}

/// The horizontal pass as gather indices, windows and weights per 8-value chunk.
#[derive(Clone, Debug, Default)]
pub(super) struct HorizontalPlan {
    /// What it was built for, once built.
    built: Option<Built>,
    pub(super) gather: Gather,
    /// Tap steps per chunk (pairs, or quads with [`Gather::Quad`]).
    pub(super) steps: usize,
    /// Windows twice as long (see [`Gather`]): for downscales beyond about 3x, where a
    /// group's taps spread over more bytes than the narrow window.
    pub(super) wide: bool,
    pub(super) chunks: usize,
    /// Values per output row, `3 * out_w`.
    pub(super) values: usize,
    /// Source row length the windows were checked against, `3 * in_w`.
    pub(super) row_bytes: usize,
    /// Per chunk and step: the window offsets of the low and high lane (shuffles; the
    /// same where they share one), or the chunk's window offset twice (permutes).
    pub(super) win: Vec<[u32; 2]>,
    /// Per chunk and step, per value the bytes of its taps: for pairs two (taps `2p` and
    /// `2p + 1`, the odd bytes zeroed), `pshufb` masks of the lanes' first 16 bytes (0x80
    /// writes 0) or the permute's indices into the whole window; for quads four (taps
    /// `4q` to `4q + 3`).
    pub(super) masks: Vec<[u8; 32]>,
    /// Likewise for the lanes' second 16 bytes (wide shuffle plans only).
    pub(super) masks_hi: Vec<[u8; 32]>,
    /// Per chunk and step: weight high halves as i16 pairs, one i32 per value (quads:
    /// the weights' digits of 65536 as bytes).
    pub(super) whi: Vec<[i32; 8]>,
    /// Quads only: the digits of 256.
    pub(super) wmid: Vec<[i32; 8]>,
    /// Per chunk and step: weight low halves (quads: the digits of 1).
    pub(super) wlo: Vec<[i32; 8]>,
    /// Scratch for building the tables, per output pixel (`out_w + 8` entries, per pair
    /// for the weights; the three values of a pixel share them): its tap-0 byte
    /// `3 pstart`, and its pair's weights' high and low halves as i16 pairs.
    px_pos: Vec<i32>,
    px_hi: Vec<i32>,
    px_mid: Vec<i32>,
    px_lo: Vec<i32>,
}

impl HorizontalPlan {
    /// Builds the plan for `c` unless it is the cached one; returns whether a kernel can
    /// run it (each group's taps must fit its window). With `permute`, the permute
    /// layouts are tried first.
    pub(super) fn prepare(&mut self, c: &AxisCoeffs, permute: bool) -> bool {
        if let Some(built) = self.built {
            if built.coeffs == c.key() && built.permute == permute {
                return built.runnable;
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
        self.built = Some(Built {
            coeffs: c.key(),
            permute,
            runnable: built,
        });
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
    /// reference that [`HorizontalPlan::fill_vector`] is tested against.
    #[cfg(test)]
    fn fill(&mut self, c: &AxisCoeffs, gather: Gather, wide: bool) {
        let taps = c.taps;
        let window = gather.window(wide);
        let entries = self.set_layout(c, gather, wide);
        let (pairs, row_bytes) = (self.steps, self.row_bytes);
        let len = self.fill_pixels_scalar(c, gather);
        let HorizontalPlan {
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
    /// [`HorizontalPlan::fill_pixels`] is tested against.
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

    /// `HorizontalPlan::fill_pixels_scalar` (the tests' reference) with a pixel's step of taps split at
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
    /// layout). The same tables as `HorizontalPlan::fill` (the tests') for the pair layouts, bit for bit
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
/// `[-128, 127]` for `|w| <= SIMD_WEIGHT_LIMIT` (the cubic's weights are signed).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu;

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
            let mut plan = HorizontalPlan::default();
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
                let mut plan = HorizontalPlan::default();
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
        let limit = crate::resize::SIMD_WEIGHT_LIMIT;
        for w in -limit..=limit {
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
                let (mut scalar, mut vector) =
                    (HorizontalPlan::default(), HorizontalPlan::default());
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
                let mut scalar = HorizontalPlan::default();
                let fits = fits(&c, gather, wide);
                if fits {
                    scalar.fill(&c, gather, wide);
                }
                let mut vector = HorizontalPlan::default();
                // SAFETY: the CPU has AVX2 (checked above).
                let built = unsafe { vector.fill_vector(&c, gather, wide) };
                assert_eq!(built, fits, "{case}");
                if !fits {
                    continue;
                }
                checked += 1;
                let shape = |p: &HorizontalPlan| {
                    (p.gather, p.steps, p.wide, p.chunks, p.values, p.row_bytes)
                };
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
