//! AVX-512 kernels (F, BW, VL, VBMI, VNNI): 16 values per vector, byte permutes over 64-byte
//! windows and dot-product instructions, so that a tap costs about one permute and one `vpdp*`.
//!
//! Weights are split as `w = 256 h + l` with `l` in `[-128, 127]` and `|h| < 2^15` (signed:
//! the cubic's lobes are negative). The high
//! parts multiply `256 (v - 128)`: the tap's byte XOR 0x80 put into the high byte of an i16
//! lane (the low byte taken from a zeroed byte of the window), two taps per `vpdpwssd`; the
//! low parts multiply the plain bytes, four taps per `vpdpbusd` (unsigned bytes times signed
//! bytes). Both land in one i32 accumulator that starts at `HALF + 32768 * sum(h)`, which
//! cancels the `- 128`: the accumulator ends at exactly Pillow's `HALF + sum(v w)`, in i32 for
//! the weights [`AxisCoeffs::simd_friendly`] accepts (the additions wrap, the result does
//! not). Shifted, it lies in `[-512, 511]`: where the weights have negative ones, the
//! stores clamp it to `[0, 255]` as Pillow's `clip8` does (the triangle's sums need not).
//!
//! The horizontal pass runs chunk by chunk over blocks of rows (each chunk's plan loaded once a
//! block), prefetching the next block's source rows into L2. The horizontal-first order keeps
//! only the rows the vertical pass still needs, in a ring of 64-byte aligned pair-format rows
//! (see [`super::avx2`]) that stays in L1/L2, instead of the whole intermediate image; the
//! vertical pass is then one `vpdpwssd` per tap and 16 values. The vertical-first order widens
//! each source row once into a ring of `(v, 256 (v - 128))` lane pairs, runs the same vertical
//! kernel over them against `(w mod 256, w / 256)` weights (the bias again cancels the
//! `- 128`) into u8 rows, and those through the horizontal pass. Where the vertical weights do
//! not fit the pair format (the cubic's upscales, whose edge weights exceed 1), the
//! horizontal-first ring holds such lane pairs too: `w / 256` is an i16 for every weight the
//! kernels take, at the cost of a per-row bias (the bilinear resizes keep the pair format,
//! whose weights need no separate table).
//!
//! `vpdpwssd`/`vpdpbusd` and zero-masked `vpermb` are issued with `asm!`: LLVM otherwise
//! splits some dot products into `vpmaddwd` + `vpaddd`, and turns the masked permute into a
//! two-table one or a permute and an AND, each a second uop on the ports these kernels
//! saturate.
//!
//! Must not run where [`crate::cpu`] did not report every one of these features: the resize
//! chooses this module only at [`SimdLevel::Avx512`](super::SimdLevel::Avx512).

use std::arch::asm;
use std::arch::x86_64::*;

use super::{
    aligned_i32s, by_blocks, ring_slot, through_ring, Ahead, AxisCoeffs, BlockRows, CoeffsKey,
    Resizer, Ring, RowSink, HALF, PRECISION_BITS,
};
use crate::image::RgbView;

/// Rows the horizontal kernel runs per block (each chunk's plan is loaded once a block).
const BLOCK: usize = 32;
/// Tap pairs the horizontal plan handles: 16 taps, downscales up to about 7x (when the
/// windows fit).
const MAX_PAIRS: usize = 8;
/// Taps the vertical kernels take (downscales up to about 30x); beyond, AVX2/portable.
const MAX_V_TAPS: usize = 64;
/// Bytes 0 and 3 of every dword: where [`widen`] puts each value.
const LO_HI_BYTES: u64 = 0x9999_9999_9999_9999;

/// 64 bytes, aligned for vector loads and stores.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
struct Z([u8; 64]);

impl Default for Z {
    fn default() -> Self {
        Z([0; 64])
    }
}

dot_instruction! {
    /// `acc + dot(a, b)` over i16 pairs (`vpdpwssd`).
    #[target_feature(enable = "avx512f,avx512vnni")]
    fn dpwssd(__m512i) = "vpdpwssd {acc}, {a}, {b}"
}

/// `vpermb` with zero-masking: byte `i` = `table[idx[i] & 63]` where bit `i` of `keep` is
/// set, else 0. (LLVM turns the intrinsic into a two-table permute against zero, two or
/// three uops on Ice Lake, or a permute and an AND.)
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
#[inline]
fn permb_z(keep: u64, idx: __m512i, table: __m512i) -> __m512i {
    let out: __m512i;
    // SAFETY: a register-only instruction of the enabled features; no memory, stack or
    // flags touched.
    unsafe {
        asm!(
            "vpermb {out}{{{k}}}{{z}}, {idx}, {table}",
            k = in(kreg) keep,
            out = out(zmm_reg) out,
            idx = in(zmm_reg) idx,
            table = in(zmm_reg) table,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    out
}

dot_instruction! {
    /// `acc + dot(a, b)` over 4 unsigned bytes of `a` times 4 signed bytes of `b`
    /// (`vpdpbusd`).
    #[target_feature(enable = "avx512f,avx512vnni")]
    fn dpbusd(__m512i) = "vpdpbusd {acc}, {a}, {b}"
}

/// What a [`HorizontalPlan`] was built for, and whether the kernel can run it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Built {
    coeffs: CoeffsKey,
    runnable: bool,
}

/// The horizontal pass per 16-value chunk: a window offset and, in `data`, the start value
/// of the accumulators, the permute indices and weights of the high parts (two taps per
/// vector) and of the low parts (four taps per vector).
#[derive(Clone, Debug, Default)]
pub(super) struct HorizontalPlan {
    /// What it was built for, once built.
    built: Option<Built>,
    /// High-part vectors per chunk (`taps / 2` rounded up); low-part ones are half that.
    pairs: usize,
    /// 128-byte windows (two-table permutes) instead of 64-byte ones.
    two: bool,
    chunks: usize,
    /// Values per output row, `3 * out_w`.
    values: usize,
    /// Source row length the windows were checked against, `3 * in_w`.
    row_bytes: usize,
    /// Per chunk: the window's first byte in the source row.
    win: Vec<u32>,
    /// Per chunk: the dwords of the (two) window(s) to keep in the flipped copy; the one
    /// left out is zeroed (the high parts' zero low bytes).
    zmask: Vec<u32>,
    /// Per chunk: the range of `fetch_blocks` its windows reach first (each 64-byte
    /// block of a row once), which the kernel prefetches in the next block's rows.
    fetch: Vec<(u16, u16)>,
    fetch_blocks: Vec<u16>,
    /// Which 64-byte blocks of a row the windows so far reach (while building).
    reached: Vec<bool>,
    /// Per chunk, `per_chunk()` vectors: bias, high indices, high weights, low indices,
    /// low weights.
    data: Vec<Z>,
    /// Per output pixel (`out_w + 16` entries, zero padded, per pair or quad): the
    /// accumulator start, the first byte it reads, the high-part weight pairs and the
    /// low-part weight quads; the chunks are expanded from these.
    px_bias: Vec<i32>,
    px_pos: Vec<i32>,
    px_hi: Vec<i32>,
    px_lo: Vec<i32>,
}

impl HorizontalPlan {
    fn quads(&self) -> usize {
        self.pairs.div_ceil(2)
    }

    fn per_chunk(&self) -> usize {
        1 + 2 * self.pairs + 2 * self.quads()
    }

    /// Window bytes.
    fn window(two: bool) -> usize {
        if two {
            128
        } else {
            64
        }
    }

    /// Builds the plan for `c` unless it is the cached one; returns whether the kernel
    /// can run it. Only called where the CPU has the module's features.
    fn prepare(&mut self, c: &AxisCoeffs) -> bool {
        if let Some(built) = self.built {
            if built.coeffs == c.key() {
                return built.runnable;
            }
        }
        let runnable = self.build(c);
        self.built = Some(Built {
            coeffs: c.key(),
            runnable,
        });
        runnable
    }

    fn build(&mut self, c: &AxisCoeffs) -> bool {
        let taps = c.taps;
        let pairs = taps.div_ceil(2);
        let row_bytes = 3 * c.in_size as usize;
        // (Row blocks are numbered in u16: rows up to 4 MiB.)
        if pairs > MAX_PAIRS
            || row_bytes < 64
            || row_bytes > 64 * usize::from(u16::MAX)
            || !c.simd_friendly()
            || !c.padded_ready
        {
            return false;
        }
        let out = c.out_size as usize;
        self.pairs = pairs;
        self.values = 3 * out;
        self.chunks = self.values.div_ceil(16);
        self.row_bytes = row_bytes;
        let quads = self.quads();
        // Per pixel, in blocks of 16 (and 16 more entries: the chunks load 16 from any
        // pixel); every entry a chunk uses is overwritten, so the arrays only grow.
        let len = out.next_multiple_of(16) + 16;
        for (v, n) in [
            (&mut self.px_bias, len),
            (&mut self.px_pos, len),
            (&mut self.px_hi, pairs * len),
            (&mut self.px_lo, quads * len),
        ] {
            if v.len() < n {
                v.resize(n, 0);
            }
        }
        // SAFETY: plans are only prepared on the AVX-512 path (the CPU has the features);
        // the arrays were sized above; `pweights` holds `out * taps` weights and `pstart`
        // `out` starts (padded coefficients, checked ready above).
        unsafe { self.fill_pixels(&c.pweights[..out * taps], &c.pstart[..out], taps, len) };
        // Every vector is overwritten: growing only.
        self.data
            .resize(self.chunks * self.per_chunk(), Z::default());
        for two in [false, true] {
            if row_bytes < Self::window(two) {
                break;
            }
            self.two = two;
            // SAFETY: plans are only prepared on the AVX-512 path (the CPU has the
            // features); the per-pixel arrays hold `len` entries per pair/quad and `data`
            // `chunks * per_chunk()` vectors, as `expand` needs.
            if unsafe { self.expand(taps, len) } {
                return self.consistent();
            }
        }
        false
    }

    /// Whether the plan was built and the kernel can run it (see [`HorizontalPlan::consistent`]).
    fn runnable(&self) -> bool {
        self.built.is_some_and(|b| b.runnable)
    }

    /// The bounds `horizontal_kernel` relies on, checked once per plan rather than on
    /// every call: one plan serves a whole image, block after block. Nothing changes a
    /// plan but `build`.
    fn consistent(&self) -> bool {
        let window = Self::window(self.two);
        let chunks = self.chunks;
        let fetch_in_row = self.fetch.iter().all(|&(first, count)| {
            let blocks = self
                .fetch_blocks
                .get(first as usize..(first + count) as usize);
            blocks.is_some_and(|b| b.iter().all(|&k| 64 * (k as usize) < self.row_bytes))
        });
        self.win.len() == chunks
            && self.zmask.len() == chunks
            && self.fetch.len() == chunks
            && fetch_in_row
            && self.data.len() == chunks * self.per_chunk()
            && self
                .win
                .iter()
                .all(|&w| w as usize + window <= self.row_bytes)
            && (1..=MAX_PAIRS).contains(&self.pairs)
    }

    /// The per-pixel arrays from the padded coefficients, 16 pixels at a time.
    ///
    /// # Safety
    /// The module's AVX-512 features; `pweights.len() == pstart.len() * taps`; the arrays
    /// hold `len >= pstart.len()` rounded up to 16 entries (per pair or quad).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
    unsafe fn fill_pixels(&mut self, pweights: &[i32], pstart: &[u32], taps: usize, len: usize) {
        let out = pstart.len();
        let lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        for p0 in (0..out).step_by(16) {
            let valid = ((1u32 << (out - p0).min(16)) - 1) as __mmask16;
            let first = _mm512_mullo_epi32(
                _mm512_add_epi32(_mm512_set1_epi32(p0 as i32), lane),
                _mm512_set1_epi32(taps as i32),
            );
            let mut hsum = _mm512_setzero_si512();
            let mut hi = [_mm512_setzero_si512(); MAX_PAIRS];
            let mut lo = [_mm512_setzero_si512(); MAX_PAIRS / 2];
            for k in 0..taps {
                let at = _mm512_add_epi32(first, _mm512_set1_epi32(k as i32));
                // SAFETY: valid lanes read weight `(p0 + lane) * taps + k` of the
                // `out * taps`; the others are masked off (not read).
                let w = unsafe {
                    _mm512_mask_i32gather_epi32::<4>(
                        _mm512_setzero_si512(),
                        valid,
                        at,
                        pweights.as_ptr(),
                    )
                };
                // w = 256 h + l, l in [-128, 127].
                let h = _mm512_srai_epi32::<8>(_mm512_add_epi32(w, _mm512_set1_epi32(128)));
                let l = _mm512_sub_epi32(w, _mm512_slli_epi32::<8>(h));
                hsum = _mm512_add_epi32(hsum, h);
                let hs = _mm_cvtsi32_si128(16 * (k % 2) as i32);
                // A negative `h` has its sign in the upper 16 bits: keep its i16 only.
                let h16 = _mm512_and_si512(h, _mm512_set1_epi32(0xffff));
                hi[k / 2] = _mm512_or_si512(hi[k / 2], _mm512_sll_epi32(h16, hs));
                let l = _mm512_and_si512(l, _mm512_set1_epi32(0xff));
                let ls = _mm_cvtsi32_si128(8 * (k % 4) as i32);
                lo[k / 4] = _mm512_or_si512(lo[k / 4], _mm512_sll_epi32(l, ls));
            }
            let bias = _mm512_add_epi32(_mm512_set1_epi32(HALF), _mm512_slli_epi32::<15>(hsum));
            // SAFETY: 16 entries from `p0 < out` lie within `len` (a multiple of 16 at
            // least `out`); the start load is masked to the `out - p0` left.
            unsafe {
                let st = _mm512_maskz_loadu_epi32(valid, pstart[p0..].as_ptr().cast());
                let pos = _mm512_mullo_epi32(st, _mm512_set1_epi32(3));
                _mm512_storeu_si512(self.px_pos[p0..p0 + 16].as_mut_ptr().cast(), pos);
                _mm512_storeu_si512(self.px_bias[p0..p0 + 16].as_mut_ptr().cast(), bias);
                for (p, v) in hi.iter().enumerate().take(taps.div_ceil(2)) {
                    let at = p * len + p0;
                    _mm512_storeu_si512(self.px_hi[at..at + 16].as_mut_ptr().cast(), *v);
                }
                for (q, v) in lo.iter().enumerate().take(taps.div_ceil(4)) {
                    let at = q * len + p0;
                    _mm512_storeu_si512(self.px_lo[at..at + 16].as_mut_ptr().cast(), *v);
                }
            }
        }
    }

    /// Fills `win` and `data` from the per-pixel arrays; false if a chunk's taps do not
    /// fit its window.
    ///
    /// # Safety
    /// The module's AVX-512 features; `px_*` hold `len = out_w + 16` entries (per pair
    /// or quad), `data` `chunks * per_chunk()` vectors.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
    unsafe fn expand(&mut self, taps: usize, len: usize) -> bool {
        let (pairs, quads, per) = (self.pairs, self.quads(), self.per_chunk());
        self.win.clear();
        self.zmask.clear();
        self.fetch.clear();
        self.fetch_blocks.clear();
        self.reached.clear();
        self.reached.resize(self.row_bytes.div_ceil(64), false);
        let window = Self::window(self.two);
        let limit = (self.row_bytes - window) as i32;
        // Value 16 m + q of the row is channel c of pixel 16m / 3 + rel: with
        // r = m mod 3 (16 = 1 mod 3), rel = (r + q) / 3 and c = (r + q) mod 3.
        let pattern = |f: fn(usize) -> usize| -> [__m512i; 3] {
            std::array::from_fn(|r| {
                let v: [i32; 16] = std::array::from_fn(|q| f(r + q) as i32);
                // SAFETY: reads the 64 bytes of `v`.
                unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
            })
        };
        let rel = pattern(|x| x / 3);
        let chan = pattern(|x| x % 3);
        let base = self.data.as_mut_ptr();
        for m in 0..self.chunks {
            let (px0, r) = (16 * m / 3, m % 3);
            let n = (self.values - 16 * m).min(16);
            let valid = ((1u32 << n) - 1) as __mmask16;
            debug_assert!(px0 + 16 <= len);
            // SAFETY: `px0 < out`, so the 16 entries from `px0` lie within `len`; the
            // 1 + 2 pairs + 2 quads vectors of chunk `m` lie within `data`.
            unsafe {
                let gather = |v: &[i32]| {
                    _mm512_permutexvar_epi32(rel[r], _mm512_loadu_si512(v[px0..].as_ptr().cast()))
                };
                let pos = _mm512_add_epi32(gather(&self.px_pos), chan[r]);
                let lo = _mm512_mask_reduce_min_epi32(valid, pos);
                let hi = _mm512_mask_reduce_max_epi32(valid, pos);
                let wo = lo.min(limit);
                // The taps' bytes in the window, and a 4-byte block clear of them whose
                // flipped copy the kernel zeroes (the high parts' zero low bytes).
                let (first, last) = (lo - wo, hi + 3 * (taps as i32 - 1) - wo);
                if last >= window as i32 {
                    return false;
                }
                let z = if first >= 4 {
                    0
                } else if last < window as i32 - 4 {
                    window as i32 / 4 - 1
                } else {
                    return false;
                };
                self.win.push(wo as u32);
                self.zmask.push(!(1u32 << z));
                let first_block = self.fetch_blocks.len() as u16;
                let blocks = wo as usize / 64..(wo as usize + window).div_ceil(64);
                for k in blocks {
                    if !self.reached[k] {
                        self.reached[k] = true;
                        self.fetch_blocks.push(k as u16);
                    }
                }
                let count = self.fetch_blocks.len() as u16 - first_block;
                self.fetch.push((first_block, count));
                // Tap 0's byte in the window (0 in the padding lanes).
                let b = _mm512_maskz_sub_epi32(valid, pos, _mm512_set1_epi32(wo));
                let d = base.add(m * per).cast::<__m512i>();
                _mm512_store_si512(d, gather(&self.px_bias));
                let zeros = _mm512_set1_epi32((4 * z) | ((4 * z) << 16));
                for p in 0..pairs {
                    let t = _mm512_add_epi32(b, _mm512_set1_epi32(6 * p as i32));
                    let t3 = _mm512_add_epi32(t, _mm512_set1_epi32(3));
                    let idx = _mm512_or_si512(
                        zeros,
                        _mm512_or_si512(_mm512_slli_epi32::<8>(t), _mm512_slli_epi32::<24>(t3)),
                    );
                    _mm512_store_si512(d.add(1 + p), idx);
                    _mm512_store_si512(d.add(1 + pairs + p), gather(&self.px_hi[p * len..]));
                }
                for q in 0..quads {
                    let t = _mm512_add_epi32(b, _mm512_set1_epi32(12 * q as i32));
                    let idx = _mm512_add_epi32(
                        _mm512_mullo_epi32(t, _mm512_set1_epi32(0x0101_0101)),
                        _mm512_set1_epi32(0x0906_0300),
                    );
                    _mm512_store_si512(d.add(1 + 2 * pairs + q), idx);
                    let lw = gather(&self.px_lo[q * len..]);
                    _mm512_store_si512(d.add(1 + 2 * pairs + quads + q), lw);
                }
            }
        }
        true
    }
}

/// The AVX-512 path's plan and buffers.
#[derive(Clone, Debug, Default)]
pub(super) struct Scratch {
    /// The plans of the last two horizontal coefficient sets (a random flip alternates
    /// between the two orders of the same outputs), `plans[cur]` the current one.
    plans: [HorizontalPlan; 2],
    cur: usize,
    /// The ring: pair-format rows of the horizontal-first order (`BLOCK + taps` of them),
    /// or widened source rows of the vertical-first order (`taps`).
    ring: Vec<i32>,
    /// u8 rows out of the horizontal kernel, `chunks * 16` bytes apart.
    block: Vec<u8>,
    /// u8 rows into the horizontal kernel in the vertical-first order.
    rows: Vec<u8>,
    /// Vertical weights as i16 pairs `(w mod 256, w / 256)` (`/` rounding down), and per
    /// output row the accumulator start `HALF + 32768 * sum(w / 256)` (mod 2^32); for `vkey`.
    vweights: Vec<i32>,
    vbias: Vec<i32>,
    vkey: Option<CoeffsKey>,
}

impl Scratch {
    /// Prepares the horizontal plan; returns whether this path can run the resize
    /// (`vert`: the vertical pass, when there is one). Only called where the CPU has the
    /// module's features.
    pub(super) fn prepare(&mut self, horiz: &AxisCoeffs, vert: Option<&AxisCoeffs>) -> bool {
        let key = Some(horiz.key());
        if self.plans[self.cur].built.map(|b| b.coeffs) != key {
            // The other plan: the cached one if it matches, else the older one, rebuilt.
            self.cur = 1 - self.cur;
        }
        if !self.plans[self.cur].prepare(horiz) {
            return false;
        }
        match vert {
            None => true,
            Some(v) => v.taps <= MAX_V_TAPS && v.simd_friendly(),
        }
    }

    /// The vertical pass's weights for `vert`.
    fn prepare_vertical(&mut self, vert: &AxisCoeffs) {
        if self.vkey == Some(vert.key()) {
            return;
        }
        self.vweights.clear();
        self.vweights.extend(vert.weights.iter().map(|&w| {
            let (h, l) = (w >> 8, w & 255);
            l | (h << 16)
        }));
        self.vbias.clear();
        self.vbias
            .extend(vert.weights.chunks_exact(vert.stride).map(|w| {
                let high = w.iter().map(|&w| w >> 8).fold(0i32, i32::wrapping_add);
                HALF.wrapping_add(high.wrapping_mul(32768))
            }));
        self.vkey = Some(vert.key());
    }
}

/// The whole resize with the AVX-512 kernels (`horiz` needed; `vert` when `need_v`),
/// the vertical pass first where `vfirst` (Pillow's order; torch's is never); the caller
/// checked the CPU and [`Scratch::prepare`].
pub(super) fn resize<S: RowSink + ?Sized>(
    r: &mut Resizer,
    src: RgbView<'_>,
    out_h: u32,
    need_v: bool,
    vfirst: bool,
    sink: &mut S,
) {
    let Resizer {
        horiz, vert, zmm, ..
    } = r;
    let (in_w, in_h) = (src.width(), src.height());
    // The horizontal-first ring's format: pairs where the weights fit (see the module docs).
    let pairs = vert.pairs_fit();
    if vfirst || (need_v && !pairs) {
        zmm.prepare_vertical(vert);
    }
    let plan = &zmm.plans[zmm.cur];
    let (stride, values) = (plan.chunks * 16, plan.values);
    if !need_v || vfirst {
        // The vertical pass reads the source rows widened once each into a ring of
        // `(v, 256 (v - 128))` lane pairs, `taps` of them.
        let wide = (3 * in_w as usize).next_multiple_of(16);
        let cap = vert.taps;
        let mut ring: &mut [i32] = &mut [];
        if need_v {
            ring = aligned_i32s::<64>(&mut zmm.ring, cap * wide);
        }
        let (mut next, mut next_base, mut start_base) = (0, 0, 0);
        let mut offs = [0usize; MAX_V_TAPS];
        let (vweights, vbias) = (&zmm.vweights, &zmm.vbias);
        let vertical = need_v.then_some(|y: usize, dst: &mut [u8]| {
            let (start, count) = (vert.start[y] as usize, vert.count[y] as usize);
            // Rows [start, start + count) fit: count <= taps = cap.
            while next < start + count {
                let at = ring_slot(next, cap, &mut next_base) * wide;
                // Prefetching a few rows ahead hides a cold source's latency.
                let ahead = (next + 4 < in_h as usize).then(|| src.row(next as u32 + 4));
                widen(src.row(next as u32), ahead, &mut ring[at..at + wide]);
                next += 1;
            }
            let s0 = ring_slot(start, cap, &mut start_base);
            for (o, s) in offs.iter_mut().zip(s0..s0 + count) {
                // `count <= cap`: at most one wrap.
                *o = if s >= cap { s - cap } else { s } * wide;
            }
            let w = &vweights[y * vert.stride..y * vert.stride + count];
            vertical_pairs(ring, &offs[..count], w, vbias[y], dst);
        });
        let buffers = BlockRows {
            rows: &mut zmm.rows,
            block: &mut zmm.block,
            stride,
            values,
        };
        let horizontal = |rows: &[&[u8]], ahead, block: &mut [u8], stride| {
            if horiz.may_clip() {
                run_horizontal(
                    plan,
                    rows,
                    ahead,
                    &mut U8Rows::<true> { out: block, stride },
                );
            } else {
                run_horizontal(
                    plan,
                    rows,
                    ahead,
                    &mut U8Rows::<false> { out: block, stride },
                );
            }
        };
        by_blocks::<BLOCK, S>(&src, out_h as usize, buffers, vertical, horizontal, sink);
        return;
    }
    // Horizontal first: a ring of pair-format rows, or of `(v, 256 (v - 128))` ones where
    // the weights do not fit pairs; 64-byte aligned.
    if pairs {
        vert.ensure_pairs();
    }
    let vert: &AxisCoeffs = vert;
    let (vweights, vbias) = (&zmm.vweights, &zmm.vbias);
    let ring = Ring::<64> {
        buf: &mut zmm.ring,
        stride,
        values,
    };
    let clamp = horiz.may_clip();
    through_ring::<BLOCK, 64, S>(
        &src,
        vert,
        |y| {
            if pairs {
                vert.pair_taps_of(y)
            } else {
                let (start, count) = (vert.start[y] as usize, vert.count[y] as usize);
                (start, &vweights[y * vert.stride..y * vert.stride + count])
            }
        },
        ring,
        |rows, ahead, outs| match (clamp, pairs) {
            (false, true) => run_horizontal(
                plan,
                rows,
                ahead,
                &mut PairRows::<false, false> { rows: outs },
            ),
            (true, true) => run_horizontal(
                plan,
                rows,
                ahead,
                &mut PairRows::<true, false> { rows: outs },
            ),
            (false, false) => run_horizontal(
                plan,
                rows,
                ahead,
                &mut PairRows::<false, true> { rows: outs },
            ),
            (true, false) => run_horizontal(
                plan,
                rows,
                ahead,
                &mut PairRows::<true, true> { rows: outs },
            ),
        },
        |y, ring, offs, w, out| {
            let bias = if pairs { HALF } else { vbias[y] };
            vertical_pairs(ring, offs, w, bias, out)
        },
        sink,
    );
}

/// Where the horizontal kernel puts the 16 accumulators of row `r`, chunk `m`.
trait Store {
    /// Whether `rows` rows of `values` values fit.
    fn fits(&self, rows: usize, values: usize) -> bool;
    /// Stores `clip8` of `acc` (16 exact i32 sums, `HALF` included; shifted, each in
    /// `[-512, 511]`, and in `[0, 255]` where the store does not clamp).
    ///
    /// # Safety
    /// The AVX-512 features of the module, and `r`, `m` within what [`Store::fits`]
    /// accepted.
    unsafe fn store(&mut self, r: usize, m: usize, acc: __m512i);
}

/// u8 rows, `stride` bytes apart. With `CLAMP` the shifted sums are clamped to `[0, 255]`
/// (a max and a saturating narrow), else narrowed by truncation (sums known in range).
struct U8Rows<'a, const CLAMP: bool> {
    out: &'a mut [u8],
    stride: usize,
}

impl<const CLAMP: bool> Store for U8Rows<'_, CLAMP> {
    fn fits(&self, rows: usize, values: usize) -> bool {
        self.stride >= values && self.out.len() >= rows * self.stride
    }

    #[inline(always)]
    unsafe fn store(&mut self, r: usize, m: usize, acc: __m512i) {
        // SAFETY: `fits` guaranteed `r * stride + 16 m + 16 <= out.len()`.
        unsafe {
            let p = self.out.as_mut_ptr().add(r * self.stride + 16 * m);
            let v = _mm512_srai_epi32::<PRECISION_BITS>(acc);
            let bytes = if CLAMP {
                // Unsigned saturation of a non-negative value: the clamp to 255.
                _mm512_cvtusepi32_epi8(_mm512_max_epi32(v, _mm512_setzero_si512()))
            } else {
                _mm512_cvtepi32_epi8(v)
            };
            _mm_storeu_si128(p.cast(), bytes);
        }
    }
}

/// Pair-format rows (`v | v << 23`, the i16 pair `(v, 128 v)`), or with `BIASED` rows of
/// `v | (v ^ 0x80) << 24`, the i16 pair `(v, 256 (v - 128))` that [`widen`] makes too; one
/// slice each. With `CLAMP` the sums are clamped first, so that `v = clip8(sum)`.
struct PairRows<'a, 'b, const CLAMP: bool, const BIASED: bool> {
    rows: &'b mut [&'a mut [i32]],
}

impl<const CLAMP: bool, const BIASED: bool> Store for PairRows<'_, '_, CLAMP, BIASED> {
    fn fits(&self, rows: usize, values: usize) -> bool {
        self.rows.len() >= rows && self.rows.iter().all(|r| r.len() >= values)
    }

    #[inline(always)]
    unsafe fn store(&mut self, r: usize, m: usize, acc: __m512i) {
        // SAFETY: `fits` guaranteed row `r` holds `16 m + 16` values.
        unsafe {
            // Clamped to `[0, 2^30 - 1]`, bits 22..29 are `clip8(acc)`.
            let acc = if CLAMP {
                let top = _mm512_set1_epi32((256 << PRECISION_BITS) - 1);
                _mm512_min_epi32(_mm512_max_epi32(acc, _mm512_setzero_si512()), top)
            } else {
                acc
            };
            // v = acc >> 22 (bits 22..29; bits 30, 31 are 0).
            let v = if BIASED {
                // Per dword, bytes 0 and 3 take bits 22..29 (v); then one ternary-logic op
                // keeps bytes 0 and 3 and flips bit 7 of byte 3:
                // `(spread & 0xFF0000FF) ^ 0x80000000` (truth table 0x6A).
                let ctrl = _mm512_set1_epi64(i64::from_le_bytes([22, 0, 0, 22, 54, 0, 0, 54]));
                let spread = _mm512_multishift_epi64_epi8(ctrl, acc);
                _mm512_ternarylogic_epi32::<0x6A>(
                    spread,
                    _mm512_set1_epi32(0xFF00_00FF_u32 as i32),
                    _mm512_set1_epi32(0x8000_0000_u32 as i32),
                )
            } else {
                // Per dword, byte 0 takes bits 22..29 (v), byte 3 bits 23..30 (v >> 1),
                // byte 2 bits 15..22 of which only bit 22 (v & 1, at bit 7) is kept:
                // v + (v << 23).
                let ctrl = _mm512_set1_epi64(i64::from_le_bytes([22, 0, 15, 23, 54, 0, 47, 55]));
                let spread = _mm512_multishift_epi64_epi8(ctrl, acc);
                _mm512_and_si512(spread, _mm512_set1_epi32(0xFF80_00FF_u32 as i32))
            };
            _mm512_storeu_si512(self.rows[r].as_mut_ptr().add(16 * m).cast(), v);
        }
    }
}

/// The horizontal pass of `rows` into `store`, prefetching (into L2) the windows of the
/// rows `ahead`, the next block's: the source image is often cold (just decoded, or one of
/// many), and one block of computing hides the next block's memory latency.
fn run_horizontal<S: Store>(plan: &HorizontalPlan, rows: &[&[u8]], ahead: Ahead, store: &mut S) {
    // The plan's own bounds were checked when it was built (`HorizontalPlan::consistent`); every
    // window lies in `[0, row_bytes)`: the kernel's loads need rows that long, and the
    // stores need `rows.len()` rows of `chunks * 16` values.
    assert!(plan.runnable());
    assert!(rows.iter().all(|r| r.len() >= plan.row_bytes));
    assert!(store.fits(rows.len(), plan.chunks * 16));
    // SAFETY: (every arm) the resize runs this only on CPUs with the module's AVX-512
    // features; the row, window and store bounds the kernel relies on were asserted above
    // and, for the plan, when it was built.
    unsafe {
        match (plan.two, plan.pairs) {
            (false, 1) => horizontal_kernel::<1, false, S>(plan, rows, ahead, store),
            (false, 2) => horizontal_kernel::<2, false, S>(plan, rows, ahead, store),
            (false, 3) => horizontal_kernel::<3, false, S>(plan, rows, ahead, store),
            (false, 4) => horizontal_kernel::<4, false, S>(plan, rows, ahead, store),
            (false, 5) => horizontal_kernel::<5, false, S>(plan, rows, ahead, store),
            (false, 6) => horizontal_kernel::<6, false, S>(plan, rows, ahead, store),
            (false, 7) => horizontal_kernel::<7, false, S>(plan, rows, ahead, store),
            (false, _) => horizontal_kernel::<8, false, S>(plan, rows, ahead, store),
            (true, 1) => horizontal_kernel::<1, true, S>(plan, rows, ahead, store),
            (true, 2) => horizontal_kernel::<2, true, S>(plan, rows, ahead, store),
            (true, 3) => horizontal_kernel::<3, true, S>(plan, rows, ahead, store),
            (true, 4) => horizontal_kernel::<4, true, S>(plan, rows, ahead, store),
            (true, 5) => horizontal_kernel::<5, true, S>(plan, rows, ahead, store),
            (true, 6) => horizontal_kernel::<6, true, S>(plan, rows, ahead, store),
            (true, 7) => horizontal_kernel::<7, true, S>(plan, rows, ahead, store),
            (true, _) => horizontal_kernel::<8, true, S>(plan, rows, ahead, store),
        }
    }
}

/// # Safety
/// AVX-512 F/BW/VL/VBMI/VNNI; `plan.pairs == P`, `plan.two == TWO`; every row at least
/// `plan.row_bytes` long and every window inside it; `store` fits
/// `rows.len()` rows of `plan.chunks * 16` values; `plan.data` holds
/// `chunks * per_chunk()` vectors.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
unsafe fn horizontal_kernel<const P: usize, const TWO: bool, S: Store>(
    plan: &HorizontalPlan,
    rows: &[&[u8]],
    ahead: Ahead,
    store: &mut S,
) {
    let quads = P.div_ceil(2);
    let per = 1 + 2 * P + 2 * quads;
    let flip = _mm512_set1_epi8(0x80u8 as i8);
    for m in 0..plan.chunks {
        // SAFETY: chunk `m`'s `per` vectors lie within `data` (caller).
        let d = unsafe { plan.data.as_ptr().add(m * per).cast::<__m512i>() };
        // SAFETY: as above; `Z` is 64-aligned.
        let load = |i: usize| unsafe { _mm512_load_si512(d.add(i)) };
        let bias = load(0);
        let mut hidx = [_mm512_setzero_si512(); P];
        let mut hw = [_mm512_setzero_si512(); P];
        let mut lidx = [_mm512_setzero_si512(); 4];
        let mut lw = [_mm512_setzero_si512(); 4];
        for p in 0..P {
            hidx[p] = load(1 + p);
            hw[p] = load(1 + P + p);
        }
        for q in 0..quads {
            lidx[q] = load(1 + 2 * P + q);
            lw[q] = load(1 + 2 * P + quads + q);
        }
        let wo = plan.win[m] as usize;
        let keep = plan.zmask[m];
        let (keep_a, keep_b) = (keep as __mmask16, (keep >> 16) as __mmask16);
        // The row blocks this chunk's windows reach first: prefetch them in the next
        // block's rows (each block once a row, about every third chunk).
        let (first, count) = plan.fetch[m];
        for &k in &plan.fetch_blocks[first as usize..(first + count) as usize] {
            // SAFETY: prefetches only (the caller's features include SSE).
            unsafe { ahead.prefetch(64 * k as usize) };
        }
        for (r, row) in rows.iter().enumerate() {
            // SAFETY: the window `[wo, wo + 64)` (and `[wo + 64, wo + 128)` when TWO) lies
            // within the row (caller).
            let (a, b) = unsafe {
                let ptr = row.as_ptr().add(wo);
                let a = _mm512_loadu_si512(ptr.cast());
                let b = if TWO {
                    _mm512_loadu_si512(ptr.add(64).cast())
                } else {
                    a
                };
                (a, b)
            };
            // The flipped window with one dword zeroed: the high-part permutes fetch their
            // zero low bytes there.
            let xa = _mm512_maskz_xor_epi32(keep_a, a, flip);
            let xb = if TWO {
                _mm512_maskz_xor_epi32(keep_b, b, flip)
            } else {
                xa
            };
            let mut acc = bias;
            for p in 0..P {
                let g = if TWO {
                    _mm512_permutex2var_epi8(xa, hidx[p], xb)
                } else {
                    _mm512_permutexvar_epi8(hidx[p], xa)
                };
                acc = dpwssd(acc, g, hw[p]);
            }
            for q in 0..quads {
                let g = if TWO {
                    _mm512_permutex2var_epi8(a, lidx[q], b)
                } else {
                    _mm512_permutexvar_epi8(lidx[q], a)
                };
                acc = dpbusd(acc, g, lw[q]);
            }
            // SAFETY: `r < rows.len()` and `m < chunks`, within what the caller checked.
            unsafe { store.store(r, m, acc) };
        }
    }
}

/// 4 x 16 sums to 64 bytes in value order, each `clip8`ed (saturating packs).
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn pack64(acc: [__m512i; 4]) -> __m512i {
    let s = acc.map(|a| _mm512_srai_epi32::<PRECISION_BITS>(a));
    let w01 = _mm512_packus_epi32(s[0], s[1]);
    let w23 = _mm512_packus_epi32(s[2], s[3]);
    // Per 128-bit lane l: 4 values of each of s[0..4] (dword j of lane l = s[j]'s values
    // 4l..4l + 4); gather them back: dword 4j + l <- dword 4l + j.
    let b = _mm512_packus_epi16(w01, w23);
    let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_permutexvar_epi32(order, b)
}

/// Mask of the first `n` (at most 64) bytes.
#[inline(always)]
fn first_bytes(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// One output row of the vertical pass over rows of i16 lane pairs:
/// `out[i] = clip8(bias + sum_k dot(ring[offs[k] + i], w[k]))`. With pair-format rows and
/// weights, `bias = HALF`; with `(v, 256 (v - 128))` rows ([`widen`], [`PairRows`]) and
/// `(w mod 256, w / 256)` weights, `bias = HALF + 32768 sum(w / 256)`.
fn vertical_pairs(ring: &[i32], offs: &[usize], w: &[i32], bias: i32, out: &mut [u8]) {
    let n16 = out.len().div_ceil(16) * 16;
    assert!(offs.len() == w.len() && offs.iter().all(|&o| o + n16 <= ring.len()));
    // SAFETY: the resize runs this only on CPUs with the module's AVX-512 features;
    // bounds asserted above.
    unsafe {
        with_taps!(w.len(), |T| vertical_pairs_kernel::<T>(
            ring, offs, w, bias, out
        ))
    }
}

/// # Safety
/// AVX-512 F/BW/VL/VNNI; `offs.len() == w.len()` and, unless 0, `TAPS == w.len()`; `ring`
/// holds `ceil(out.len() / 16) * 16` values from every offset.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
unsafe fn vertical_pairs_kernel<const TAPS: usize>(
    ring: &[i32],
    offs: &[usize],
    w: &[i32],
    bias: i32,
    out: &mut [u8],
) {
    let taps = if TAPS == 0 { w.len() } else { TAPS };
    let n = out.len();
    let n16 = n.div_ceil(16) * 16;
    let dst = out.as_mut_ptr();
    let base = ring.as_ptr();
    let half = _mm512_set1_epi32(bias);
    let mut m = 0;
    // SAFETY: loads read values `[off + m, off + m + 64)` or `[off + m, off + m + 16)`
    // with `m + 64`/`m + 16 <= n16`, inside `ring` (caller); stores cover `[m, m + 64)`
    // within `out`, or are masked to `[m, n)`.
    unsafe {
        while m + 64 <= n16 {
            let mut acc = [half; 4];
            for (&off, &wk) in offs.iter().zip(w).take(taps) {
                let wk = _mm512_set1_epi32(wk);
                let p = base.add(off + m);
                for (i, a) in acc.iter_mut().enumerate() {
                    *a = dpwssd(*a, _mm512_loadu_si512(p.add(16 * i).cast()), wk);
                }
            }
            let bytes = pack64(acc);
            if m + 64 <= n {
                _mm512_storeu_si512(dst.add(m).cast(), bytes);
            } else {
                _mm512_mask_storeu_epi8(dst.add(m).cast(), first_bytes(n - m), bytes);
            }
            m += 64;
        }
        while m < n16 {
            let mut acc = half;
            for (&off, &wk) in offs.iter().zip(w).take(taps) {
                let v = _mm512_loadu_si512(base.add(off + m).cast());
                acc = dpwssd(acc, v, _mm512_set1_epi32(wk));
            }
            let v = _mm512_srai_epi32::<PRECISION_BITS>(acc);
            let mask = first_bytes(n - m) as u16;
            // `clip8`, as `pack64`'s saturating packs: a max, then unsigned saturation.
            let bytes = _mm512_cvtusepi32_epi8(_mm512_max_epi32(v, _mm512_setzero_si512()));
            _mm_mask_storeu_epi8(dst.add(m).cast(), mask, bytes);
            m += 16;
        }
    }
}

/// A u8 row as `(v, 256 (v - 128))` i16 lane pairs, one dword per value: `dst` holds
/// `src.len()` rounded up to 16 values (the padding gets 0 bytes' pairs). Prefetches
/// `ahead` (into L2) as it goes.
fn widen(src: &[u8], ahead: Option<&[u8]>, dst: &mut [i32]) {
    assert!(dst.len() >= src.len().div_ceil(16) * 16);
    // SAFETY: the resize runs this only on CPUs with the module's AVX-512 features;
    // bounds asserted above.
    unsafe { widen_kernel(src, ahead.unwrap_or(&[]), dst) }
}

/// # Safety
/// AVX-512 F/BW/VL/VBMI; `dst.len() >= ceil(src.len() / 16) * 16`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
unsafe fn widen_kernel(src: &[u8], ahead: &[u8], dst: &mut [i32]) {
    let n = src.len();
    let n16 = n.div_ceil(16) * 16;
    let flip = _mm512_set1_epi32(0x8000_0000_u32 as i32);
    // Sub-vector s, dword q: bytes 0 and 3 take byte 16 s + q of the 64 loaded (the
    // mask zeroes bytes 1 and 2): lanes (v, 256 v), then 256 (v - 128) by the flip.
    let idx: [__m512i; 4] = std::array::from_fn(|s| {
        let mut z = Z::default();
        for q in 0..16 {
            z.0[4 * q] = (16 * s + q) as u8;
            z.0[4 * q + 3] = (16 * s + q) as u8;
        }
        // SAFETY: reads the 64 bytes of `z`.
        unsafe { _mm512_load_si512(z.0.as_ptr().cast()) }
    });
    let mut m = 0;
    while m < n {
        let len = (n - m).min(64);
        if m < ahead.len() {
            // SAFETY: a prefetch (no access) of a byte inside `ahead`.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(ahead.as_ptr().add(m).cast()) };
        }
        // SAFETY: masked to the `len` bytes of `src` from `m`.
        let v = unsafe { _mm512_maskz_loadu_epi8(first_bytes(len), src.as_ptr().add(m).cast()) };
        for (s, &ix) in idx.iter().enumerate() {
            let at = m + 16 * s;
            if at >= n16 {
                break;
            }
            let g = _mm512_xor_si512(permb_z(LO_HI_BYTES, ix, v), flip);
            // SAFETY: values `[at, at + 16)` with `at + 16 <= n16 <= dst.len()`.
            unsafe { _mm512_storeu_si512(dst.as_mut_ptr().add(at).cast(), g) };
        }
        m += 64;
    }
}
