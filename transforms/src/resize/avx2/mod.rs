//! AVX2 kernels.
//!
//! The horizontal pass computes 8 output values (not pixels: RGB values in a row) per vector:
//! for each pair of taps a `pshufb` gathers, from a 16-byte source window per 128-bit lane,
//! the two input bytes of each value as an i16 pair, and two `pmaddwd`s multiply them by the
//! high and low 11-bit halves of the weights (exact: `w = 2048 hi + lo`, both < 2^15). The
//! gather masks, windows and weights depend only on the output column, so they are built once
//! per coefficient set ([`HorizontalPlan`], in [`plan`]) and reused for every row. At
//! [`SimdLevel::Avx512Ymm`](super::SimdLevel::Avx512Ymm) the same plan gathers with one
//! `vpermb` per pair from a 32-byte window per 8 values (64 bytes with `vpermt2b`), and
//! `vpdpwssd` accumulates in place of `pmaddwd` + `paddd` (here and in the vertical pass),
//! still on 256-bit registers. From 3 taps on, that level takes four taps
//! per step where the windows allow ([`Gather::Quad`]): one unmasked `vpermb` puts each value's
//! four bytes in its dword, and three `vpdpbusd` multiply them by the weights' signed base-256
//! digits (`w = 65536 a + 256 b + c`, each in `[-128, 127]`); `(A << 16) + (B << 8) + C` of the
//! three sums is `sum(v w)` (the shifts may wrap, the result, an exact i32, does not). That
//! is one permute and three dot products per four taps, against two permutes, two mask moves
//! and four dot products with pairs.
//!
//! In the horizontal-first order the horizontal pass stores its values into a ring of i32 rows
//! that the vertical pass reads ([`vertical_ring`]): plain values, each tap a `vpmulld` and an
//! add; with VNNI each value `v` as the i16 pair `(v, v << 7)`, each tap one `vpdpwssd`
//! against the weight pair `(w - 128 h, h)`: `v (w - 128 h) + 128 v h = v w`.
//!
//! Weights may be negative (the cubic's lobes): every split above is of signed weights
//! (arithmetic shifts, signed digits, signed i16 halves), and within the range
//! [`AxisCoeffs::simd_friendly`] checks every sum is exact in wrapping i32 arithmetic (see
//! `SIMD_ABS_SUM_LIMIT`). A sum shifted by `PRECISION_BITS` then lies in `[-512, 511]`, and
//! is brought to `[0, 255]` as Pillow's `clip8` does: by the saturating packs of the u8
//! stores and of the vertical kernel (`packus_epi32` then `packus_epi16`), and, for the ring
//! rows, by a min/max that only plans with negative weights run ([`RingStore`]'s `CLAMP`;
//! the triangle's sums always shift into `[0, 255]`).
//!
//! Must not run a plan on a CPU without the features its layout needs (the drivers assert
//! them), nor read outside a row: every window was checked against the row's length when the
//! plan was built.

use std::arch::asm;
use std::arch::x86_64::*;

use super::{
    by_blocks, portable, through_ring, Ahead, AxisCoeffs, BlockRows, Resizer, Ring, RowSink, HALF,
    PRECISION_BITS,
};
use crate::cpu;
use crate::image::RgbView;

mod plan;

use plan::{Gather, HorizontalPlan};

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

/// The SIMD path's plan and buffers.
#[derive(Clone, Debug, Default)]
pub(super) struct Scratch {
    plan: HorizontalPlan,
    /// A ring of horizontal-pass rows, `chunks * 8` values each: in pair format where
    /// `vnni`, else as plain values (see [`vertical_ring`]).
    ring: Vec<i32>,
    /// u8 rows out of the horizontal kernel, `chunks * 8` bytes apart.
    block: Vec<u8>,
    /// u8 rows into the horizontal kernel in the vertical-first order.
    rows: Vec<u8>,
    /// The vertical kernel may use VNNI's `vpdpwssd` (the CPU has it; the level allows;
    /// the vertical weights fit the pair format), over a ring in pair format.
    vnni: bool,
    /// The horizontal weights have negative ones: the ring stores clamp.
    clamp: bool,
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
        let permute = ymm512 && cpu::avx512_vnni();
        // Cubic upscales' edge weights exceed the pair format: the ring then holds values.
        self.vnni = permute && ring_vert.is_none_or(AxisCoeffs::pairs_fit);
        self.clamp = horiz.may_clip();
        if !self.plan.prepare(horiz, permute) {
            return false;
        }
        match ring_vert {
            None => true,
            Some(v) => v.taps <= MAX_V_TAPS && v.simd_friendly(),
        }
    }
}

/// The whole resize with the AVX2 kernels (`horiz` needed; `vert` when `need_v`),
/// the vertical pass first where `vfirst` (Pillow's order; torch's is never); the caller
/// checked AVX2 and [`Scratch::prepare`].
pub(super) fn resize<S: RowSink + ?Sized>(
    r: &mut Resizer,
    src: RgbView<'_>,
    out_h: u32,
    need_v: bool,
    vfirst: bool,
    sink: &mut S,
) {
    let Resizer {
        vert, acc, simd, ..
    } = r;
    let plan = &simd.plan;
    let (stride, values) = (plan.chunks * 8, plan.values);
    if !need_v || vfirst {
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
    let (vnni, clamp) = (simd.vnni, simd.clamp);
    if vnni {
        vert.ensure_pairs();
    }
    let ring = Ring::<32> {
        buf: &mut simd.ring,
        stride,
        values,
    };
    let vert: &AxisCoeffs = vert;
    through_ring::<BLOCK_ROWS, 32, S>(
        &src,
        vert,
        |y| {
            if vnni {
                vert.pair_taps_of(y)
            } else {
                vert.taps_of(y)
            }
        },
        ring,
        |rows, ahead, outs| horizontal_ring(plan, rows, ahead, outs, vnni, clamp),
        |_, ring, offs, w, out| vertical_ring(ring, offs, w, out, vnni),
        sink,
    );
}

/// Horizontal pass of `rows` into u8 rows of `out`, `stride` bytes apart.
fn horizontal_u8(
    plan: &HorizontalPlan,
    rows: &[&[u8]],
    ahead: Ahead,
    out: &mut [u8],
    stride: usize,
) {
    let mut store = U8Store { out, stride };
    run_horizontal(plan, rows, ahead, &mut store);
}

/// Horizontal pass of `rows` into the ring rows `out`: in pair format where `pairs`, else
/// as values; clamped to `[0, 255]` where `clamp` (negative weights).
fn horizontal_ring(
    plan: &HorizontalPlan,
    rows: &[&[u8]],
    ahead: Ahead,
    out: &mut [&mut [i32]],
    pairs: bool,
    clamp: bool,
) {
    // The AVX2 shuffle kernel cannot inline the VBMI store.
    let vbmi = cpu::avx512_vbmi() && plan.gather != Gather::Shuffle;
    macro_rules! run {
        ($pairs:literal, $vbmi:literal, $clamp:literal) => {
            run_horizontal(
                plan,
                rows,
                ahead,
                &mut RingStore::<$pairs, $vbmi, $clamp> { rows: out },
            )
        };
    }
    match (pairs, vbmi, clamp) {
        (false, _, false) => run!(false, false, false),
        (false, _, true) => run!(false, false, true),
        (true, true, false) => run!(true, true, false),
        (true, true, true) => run!(true, true, true),
        (true, false, false) => run!(true, false, false),
        (true, false, true) => run!(true, false, true),
    }
}

/// The horizontal pass of `rows` into `store`, prefetching (into L2) the rows `ahead`,
/// the next block's: the source image is often cold (just decoded, or one of many).
fn run_horizontal<S: Store>(plan: &HorizontalPlan, rows: &[&[u8]], ahead: Ahead, store: &mut S) {
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
    plan: &HorizontalPlan,
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
    /// Stores the values of 8 fixed-point sums: `clip8(sum)`, Pillow's shift and clamp to
    /// `[0, 255]` (the shift lies in `[-512, 511]`, see the module docs).
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
            // The saturating packs are the clamp.
            _mm_storel_epi64(p.cast(), pack8(v));
        }
    }
}

/// The ring's rows, one slice each: values (`v`, an i32 in `[0, 255]`), or with `PAIRS`
/// the pair format (`v | v << 23`, the i16 pair `(v, 128 v)`), built by [`pair_bytes`]
/// with `VBMI` (for the kernels that enable AVX-512 VBMI). With `CLAMP` (weights with
/// negative ones) the sums are clamped first, as Pillow's `clip8`; without, they are
/// known to shift into `[0, 255]`, and the two operations per 8 values are saved (the
/// bilinear resizes). Values take one shift per 8
/// values where the pair format takes two more operations, and on Zen 3 both shifts
/// queue for the two pipes that also run the shuffles (a probe that stored the sums
/// unconverted: whole resizes 11% faster, 67.5 against 76 us); [`vertical_ring`] reads
/// values with `vpmulld`.
struct RingStore<'a, 'b, const PAIRS: bool, const VBMI: bool, const CLAMP: bool> {
    rows: &'b mut [&'a mut [i32]],
}

impl<const PAIRS: bool, const VBMI: bool, const CLAMP: bool> Store
    for RingStore<'_, '_, PAIRS, VBMI, CLAMP>
{
    fn fits(&self, rows: usize, values: usize) -> bool {
        self.rows.len() >= rows && self.rows.iter().all(|r| r.len() >= values)
    }

    #[inline(always)]
    unsafe fn store(&mut self, r: usize, m: usize, sum: __m256i) {
        // SAFETY: `fits` guaranteed that row `r` exists and holds `8 m + 8` values.
        unsafe {
            let p = self.rows.get_unchecked_mut(r).as_mut_ptr().add(8 * m);
            let entry = if PAIRS && VBMI {
                // Clamped to `[0, 2^30 - 1]`: bits 22-29 hold `clip8(sum)`, bit 30 is 0.
                let sum = if CLAMP {
                    let top = _mm256_set1_epi32((256 << PRECISION_BITS) - 1);
                    _mm256_min_epi32(_mm256_max_epi32(sum, _mm256_setzero_si256()), top)
                } else {
                    sum
                };
                pair_bytes(sum)
            } else {
                let v = _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(sum);
                let v = if CLAMP {
                    let top = _mm256_set1_epi32(255);
                    _mm256_min_epi32(_mm256_max_epi32(v, _mm256_setzero_si256()), top)
                } else {
                    v
                };
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

/// The 8 i32 of `v` as the low 8 bytes, each clamped to `[0, 255]` (for `v` in i16 range:
/// the first pack saturates to `[0, 65535]`, the second reads that as i16).
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
    plan: &HorizontalPlan,
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
    plan: &HorizontalPlan,
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
    plan: &HorizontalPlan,
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
    plan: &HorizontalPlan,
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
/// i32 range (`SIMD_ABS_SUM_LIMIT`), so the intermediate values need no range of their own.
///
/// # Safety
/// As [`quad_kernel`], with `plan.gather == QuadPair` (`plan.steps == 2`).
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
unsafe fn quad_pair_kernel<const WIDE: bool, S: Store>(
    plan: &HorizontalPlan,
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
/// [`dot_acc`] where `PAIRS`, else values by `vpmulld` (whose products, `255 |w|` with
/// `|w| < 2^23`, stay below 2^31).
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
