//! Standard normals for the real generator ([`SampleRng`]), fast: Box-Muller over uniforms
//! from a counter-based stream the sample generator keys, its `ln`, `sin` and `cos` float32
//! polynomials, all of it written so the compiler vectorizes it.
//!
//! The distribution is torch's `normal_()` on a float32 tensor: Box-Muller over 24-bit
//! uniforms, radius `sqrt(-2 ln(1 - u1))`, angle `2 pi u2`, both branches kept, so the tails
//! stop near 5.77 standard deviations as torch's do. Only the arithmetic differs from libm's,
//! by the bounds stated on [`ln_unit`] and [`cos_sin_turns`].
//!
//! The uniforms do not come from the PCG one call at a time: its 128-bit multiply chain is
//! serial and cost as much as the whole vectorized transform. Each fill takes two 64-bit draws
//! from the sample generator as a key, and pair `i` of the fill hashes its counter with it
//! ([`StreamKey::bits`]), which vectorizes. The values stay a pure function of the sample's
//! generator (so of seed, epoch and index).
//!
//! Must not give values that depend on the CPU: every kernel level runs the same Rust
//! arithmetic (integer hashing; separate float multiplies and adds, never `mul_add`, which
//! Rust does not contract; `sqrt`, correctly rounded everywhere), only compiled with different
//! target features, so the AVX-512, AVX2 and plain builds agree bit for bit. Must not
//! allocate: the uniforms and an odd tail live in fixed arrays on the stack.

use rand::RngCore;

use super::{mix64, SampleRng};

/// Box-Muller pairs per block: one block's uniforms are hashed into stack arrays, then
/// transformed, in one kernel call.
const BLOCK: usize = 64;

/// The key of one fill's uniform stream: two draws from the sample generator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StreamKey {
    /// Where the inner SplitMix64 counter starts.
    start: u64,
    /// XORed between the two mixes: fills whose counter ranges happen to overlap (odds about
    /// `2^-47` for two image-sized fills) still get unrelated bits.
    outer: u64,
}

impl StreamKey {
    /// SplitMix64's odd increment (2^64 over the golden ratio).
    const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

    /// The 64 bits of pair `i`: SplitMix64's output `i` from `start`, mixed again with
    /// `outer`. A bijection of `i` for a fixed key, so the pairs of a fill never repeat.
    #[inline(always)]
    fn bits(self, i: u64) -> u64 {
        mix64(mix64(self.start.wrapping_add(i.wrapping_mul(Self::GAMMA))) ^ self.outer)
    }
}

/// Fills `out` with standard normals keyed by two 64-bit draws from `rng` (none for an empty
/// `out`). Pair `i` takes [`StreamKey::bits`]`(i)`: its high 32 bits give the radius uniform,
/// its low 32 bits the angle's, each keeping its top 24 bits, as torch's float uniforms do.
///
/// Values go in blocks of `2 * BLOCK`: the pairs' cosine branches fill the first half, their
/// sine branches the second (torch's `normal_fill_16` lays out its 16-value blocks the same
/// way). A tail of `t` values takes `ceil(t / 2)` pairs and keeps their cosines, then as many
/// sines as fit. The values are a pure function of the generator's state and `out.len()`.
pub(super) fn fill(rng: &mut SampleRng, out: &mut [f32]) {
    if out.is_empty() {
        return;
    }
    let key = StreamKey {
        start: rng.next_u64(),
        outer: rng.next_u64(),
    };
    fill_keyed(Level::detect(), key, out);
}

/// [`fill`] from `key` with the kernel of `level` (which must be supported: see
/// [`Level::detect`]).
fn fill_keyed(level: Level, key: StreamKey, out: &mut [f32]) {
    let mut first_pair = 0u64;
    let mut blocks = out.chunks_exact_mut(2 * BLOCK);
    for block in &mut blocks {
        let (cos, sin) = block.split_at_mut(BLOCK);
        level.block(key, first_pair, cos, sin);
        first_pair += BLOCK as u64;
    }
    let tail = blocks.into_remainder();
    if tail.is_empty() {
        return;
    }
    let pairs = tail.len().div_ceil(2);
    let mut sin = [0f32; BLOCK];
    let sin = &mut sin[..pairs];
    let (tail_cos, tail_sin) = tail.split_at_mut(pairs);
    level.block(key, first_pair, tail_cos, sin);
    // An odd tail drops the last pair's sine branch.
    tail_sin.copy_from_slice(&sin[..tail_sin.len()]);
}

/// The instruction sets a transform kernel is compiled for. The values do not depend on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    /// The target's baseline (SSE2 on x86-64), what any CPU runs.
    Plain,
    /// AVX2: eight lanes.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX-512 F, BW, VL and DQ: sixteen lanes.
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Level {
    /// The widest level this CPU runs.
    fn detect() -> Level {
        #[cfg(target_arch = "x86_64")]
        {
            if crate::cpu::avx512_bw_vl_dq() {
                return Level::Avx512;
            }
            if crate::cpu::avx2() {
                return Level::Avx2;
            }
        }
        Level::Plain
    }

    /// [`block`] compiled for this level.
    #[inline]
    fn block(self, key: StreamKey, first_pair: u64, cos: &mut [f32], sin: &mut [f32]) {
        match self {
            Level::Plain => block(key, first_pair, cos, sin),
            // SAFETY: `Level::detect` only gives `Avx2` where `cpu::avx2()` saw AVX2, and tests
            // build the level from `detect` too; the kernel is otherwise safe code.
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => unsafe { block_avx2(key, first_pair, cos, sin) },
            // SAFETY: as above, with `cpu::avx512_bw_vl_dq()` having seen AVX-512 F, BW, VL and
            // DQ.
            #[cfg(target_arch = "x86_64")]
            Level::Avx512 => unsafe { block_avx512(key, first_pair, cos, sin) },
        }
    }
}

/// [`block`] with AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn block_avx2(key: StreamKey, first_pair: u64, cos: &mut [f32], sin: &mut [f32]) {
    block(key, first_pair, cos, sin)
}

/// [`block`] with AVX-512 (its 64-bit multiplies need DQ).
///
/// # Safety
/// The CPU must support AVX-512 F, BW, VL and DQ.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq")]
unsafe fn block_avx512(key: StreamKey, first_pair: u64, cos: &mut [f32], sin: &mut [f32]) {
    block(key, first_pair, cos, sin)
}

/// Pairs `first_pair..first_pair + cos.len()` of `key`'s stream (at most [`BLOCK`] of them)
/// into `cos` and `sin`, which have the same length. Inlined into each level's context.
#[inline(always)]
fn block(key: StreamKey, first_pair: u64, cos: &mut [f32], sin: &mut [f32]) {
    let pairs = cos.len().min(BLOCK);
    let mut radius_bits = [0u32; BLOCK];
    let mut angle_bits = [0u32; BLOCK];
    for (i, (r, a)) in radius_bits
        .iter_mut()
        .zip(angle_bits.iter_mut())
        .enumerate()
    {
        let bits = key.bits(first_pair.wrapping_add(i as u64));
        *r = (bits >> 32) as u32;
        *a = bits as u32;
    }
    transform(&radius_bits[..pairs], &angle_bits[..pairs], cos, sin);
}

/// Box-Muller on each pair: `cos[i]`, `sin[i]` from `radius_bits[i]`, `angle_bits[i]` (the
/// top 24 bits of each used). Inlined into each level's context, where the loop vectorizes.
#[inline(always)]
fn transform(radius_bits: &[u32], angle_bits: &[u32], cos: &mut [f32], sin: &mut [f32]) {
    // Groups of a fixed 32 lanes: the compiler unrolls each group into independent vectors
    // (two of AVX-512's, four of AVX2's) whose long ln / sqrt chains overlap; one vector per
    // iteration left the loop waiting on its latency.
    const GROUP: usize = 32;
    let groups = radius_bits
        .chunks_exact(GROUP)
        .zip(angle_bits.chunks_exact(GROUP))
        .zip(cos.chunks_exact_mut(GROUP).zip(sin.chunks_exact_mut(GROUP)));
    for ((r, a), (c, s)) in groups {
        for i in 0..GROUP {
            (c[i], s[i]) = box_muller_bits(r[i], a[i]);
        }
    }
    let done = radius_bits.len() / GROUP * GROUP;
    let rest = radius_bits[done..]
        .iter()
        .zip(&angle_bits[done..])
        .zip(cos[done..].iter_mut().zip(sin[done..].iter_mut()));
    for ((&r, &a), (c, s)) in rest {
        (*c, *s) = box_muller_bits(r, a);
    }
}

/// One Box-Muller pair from two 32-bit draws: `u1 = (r >> 8) / 2^24`, `u2 = (a >> 8) / 2^24`,
/// radius `sqrt(-2 ln(1 - u1))`, angle `2 pi u2`; `(radius cos, radius sin)`.
#[inline(always)]
pub(super) fn box_muller_bits(r: u32, a: u32) -> (f32, f32) {
    // 1 - u1 = (2^24 - (r >> 8)) / 2^24, in [2^-24, 1], exactly.
    let radius = (-2.0 * ln_unit(0x0100_0000 - (r >> 8))).sqrt();
    let (c, s) = cos_sin_turns(a >> 8);
    (radius * c, radius * s)
}

/// `ln(n / 2^24)` for `n` in `1..=2^24`: Cephes' `logf` (mantissa in `[sqrt(1/2), sqrt(2))`,
/// a degree-9 polynomial for `ln(1 + x)`, `ln 2` split in two), written branch-free.
///
/// Invariants (checked against float64 `ln` on every `n` by the tests): within 1 ulp of the
/// exact logarithm (0.85 ulp at worst), at most 0 (so the radius is never NaN), and exactly 0 at `n = 2^24`.
#[inline(always)]
pub(super) fn ln_unit(n: u32) -> f32 {
    // n <= 2^24 converts exactly, and scaling by a power of two is exact.
    let v = n as f32 * (1.0 / 16_777_216.0);
    let bits = v.to_bits();
    // v = m 2^e with m in [1/2, 1); v is at least 2^-24, so normal.
    let e = (bits >> 23) as i32 - 126;
    let m = f32::from_bits((bits & 0x007f_ffff) | 0x3f00_0000);
    let small = m < std::f32::consts::FRAC_1_SQRT_2;
    let x = if small { m + m - 1.0 } else { m - 1.0 };
    let e = (if small { e - 1 } else { e }) as f32;
    let z = x * x;
    // The degree-8 polynomial in Estrin's form: a dependency chain of 6 operations, not
    // Horner's 16, so the lanes of a few vectors overlap.
    let z2 = z * z;
    let p01 = x * -2.499_999_4e-1 + 3.333_333e-1;
    let p23 = x * -1.666_805_8e-1 + 2.000_071_4e-1;
    let p45 = x * -1.242_014_1e-1 + 1.424_932_3e-1;
    let p67 = x * -1.151_461e-1 + 1.167_699_9e-1;
    let p03 = p23 * z + p01;
    let p47 = p67 * z + p45;
    let p = (p47 * z2 + p03) + (z2 * z2) * 7.037_683_6e-2;
    let mut y = x * z * p;
    y += e * -2.121_944_4e-4;
    y += z * -0.5;
    (x + y) + e * 0.693_359_4
}

/// `(cos, sin)` of `2 pi k / 2^24` for `k` in `0..2^24`: the turn split exactly (in integers)
/// into a quadrant and an angle in `[-pi/4, pi/4]`, Cephes' `sinf` / `cosf` polynomials there,
/// written branch-free.
///
/// Invariants (checked against float64 on every `k` by the tests): each within 1 ulp of 1
/// (0.89 ulp at worst; the absolute error the radius scales), exact zeros and ones on the axes, and both in
/// `[-1, 1]`.
#[inline(always)]
pub(super) fn cos_sin_turns(k: u32) -> (f32, f32) {
    // Quarter turns of 2^22 steps: the nearest one, and the signed remainder, |rem| <= 2^21.
    let quadrant = (k + (1 << 21)) >> 22;
    let rem = k as i32 - (quadrant << 22) as i32;
    let x = rem as f32 * (std::f32::consts::FRAC_PI_2 / 4_194_304.0);
    let z = x * x;
    let s = x + x * z * ((z * -1.951_529_6e-4 + 8.332_161e-3) * z - 1.666_665_5e-1);
    let c = 1.0 - z * 0.5 + z * z * ((z * 2.443_315_7e-5 - 1.388_731_6e-3) * z + 4.166_664_6e-2);
    // Quadrant q turns (c, s) into (c, s), (-s, c), (-c, -s), (s, -c).
    let (c, s) = if quadrant & 1 == 0 { (c, s) } else { (s, c) };
    let cos_sign = ((quadrant + 1) & 2) << 30;
    let sin_sign = (quadrant & 2) << 30;
    (
        f32::from_bits(c.to_bits() ^ cos_sign),
        f32::from_bits(s.to_bits() ^ sin_sign),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::sample_rng;

    /// Distance in float32 steps near `exact` (an ulp of `max(|exact|, floor)`).
    fn ulps(got: f32, exact: f64, floor: f64) -> f64 {
        let scale = exact.abs().max(floor) as f32;
        let ulp = f64::from(f32::from_bits(scale.to_bits() + 1) - scale);
        (f64::from(got) - exact).abs() / ulp
    }

    #[test]
    fn ln_is_within_one_ulp_of_float64_on_every_input() {
        let mut worst = (0.0f64, 0u32);
        for n in 1..=(1u32 << 24) {
            let got = ln_unit(n);
            assert!(got <= 0.0, "ln({n} / 2^24) = {got} > 0");
            let exact = (f64::from(n) / 16_777_216.0).ln();
            let err = ulps(got, exact, f64::from(f32::MIN_POSITIVE));
            if err > worst.0 {
                worst = (err, n);
            }
        }
        assert_eq!(ln_unit(1 << 24), 0.0);
        assert!(worst.0 <= 1.0, "worst {} ulp at n = {}", worst.0, worst.1);
    }

    #[test]
    fn cos_and_sin_are_within_one_ulp_of_one_on_every_input() {
        let mut worst = (0.0f64, 0u32);
        for k in 0..(1u32 << 24) {
            let (c, s) = cos_sin_turns(k);
            let turn = std::f64::consts::TAU * f64::from(k) / 16_777_216.0;
            let err = ulps(c, turn.cos(), 1.0).max(ulps(s, turn.sin(), 1.0));
            assert!(c.abs() <= 1.0 && s.abs() <= 1.0, "k = {k}: ({c}, {s})");
            if err > worst.0 {
                worst = (err, k);
            }
        }
        assert!(worst.0 <= 1.0, "worst {} ulp at k = {}", worst.0, worst.1);
        for (k, cs) in [
            (0, (1.0, 0.0)),
            (1 << 22, (0.0, 1.0)),
            (2 << 22, (-1.0, 0.0)),
        ] {
            assert_eq!(cos_sin_turns(k), cs, "k = {k}");
        }
        assert_eq!(cos_sin_turns(3 << 22), (0.0, -1.0));
    }

    #[test]
    fn every_level_gives_the_plain_values_bit_for_bit() {
        let detected = Level::detect();
        let to_bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for len in [0, 1, 2, 3, 127, 128, 129, 1000, 150_528] {
            let mut rng = sample_rng(3, 1, len as u64);
            let key = StreamKey {
                start: rng.next_u64(),
                outer: rng.next_u64(),
            };
            let mut plain = vec![0f32; len];
            fill_keyed(Level::Plain, key, &mut plain);
            // Per pair, one call at a time: no vectorization to disagree with.
            let mut scalar = vec![0f32; len];
            for (b, block) in scalar.chunks_mut(2 * BLOCK).enumerate() {
                let pairs = block.len().div_ceil(2);
                let mut sines = [0f32; BLOCK];
                for (i, c) in block[..pairs].iter_mut().enumerate() {
                    let bits = key.bits(std::hint::black_box((b * BLOCK + i) as u64));
                    (*c, sines[i]) = box_muller_bits((bits >> 32) as u32, bits as u32);
                }
                let rest = block.len() - pairs;
                block[pairs..].copy_from_slice(&sines[..rest]);
            }
            assert_eq!(to_bits(&plain), to_bits(&scalar), "len {len}");
            let mut fast = vec![0f32; len];
            fill_keyed(detected, key, &mut fast);
            assert_eq!(to_bits(&plain), to_bits(&fast), "len {len}, {detected:?}");
            #[cfg(target_arch = "x86_64")]
            if crate::cpu::avx2() {
                let mut avx2 = vec![0f32; len];
                fill_keyed(Level::Avx2, key, &mut avx2);
                assert_eq!(to_bits(&plain), to_bits(&avx2), "len {len}, AVX2");
            }
        }
    }

    #[test]
    fn a_fill_takes_two_draws_from_the_generator_and_an_empty_one_none() {
        for len in [0usize, 1, 2, 3, 128, 129, 300] {
            let mut rng = sample_rng(9, 0, 0);
            let mut out = vec![0f32; len];
            fill(&mut rng, &mut out);
            let mut reference = sample_rng(9, 0, 0);
            for _ in 0..if len == 0 { 0 } else { 2 } {
                reference.next_u64();
            }
            assert_eq!(rng.next_u64(), reference.next_u64(), "len {len}");
        }
    }

    #[test]
    fn the_pairs_of_a_fill_are_distinct() {
        // `bits` is a bijection of the counter: no two pairs of an image-sized fill share
        // their 64 bits.
        let key = StreamKey {
            start: 0x0123_4567_89ab_cdef,
            outer: 42,
        };
        let mut seen: Vec<u64> = (0..75_264).map(|i| key.bits(i)).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 75_264);
    }
}
