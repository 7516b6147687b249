//! The per-sample random number generator.
//!
//! Every random decision about a sample (crop parameters, flip) is drawn from a generator seeded
//! by `(seed, epoch, index)` alone, so the output of a run does not depend on how many workers
//! there are or which one processes which sample.
//!
//! Must not hold any global or thread-local state, and must not read entropy from the OS: a
//! sample's draws are a pure function of those three numbers. It does not reproduce torch's
//! generator (nothing can, short of reimplementing torch's global Mersenne twister state and call
//! order); parity tests inject draws instead (see [`TorchDraws`]).

use rand::{RngCore, SeedableRng};

mod normals;

/// The generator every sample draws from: PCG-64 MCG (128-bit multiplicative congruential state,
/// XSL-RR output), small, fast and statistically strong for this use.
pub type SampleRng = rand_pcg::Pcg64Mcg;

/// The 64-bit finalizer of SplitMix64 (Stafford's "mix13"): a bijection whose every output bit
/// depends on every input bit, so nearby inputs (index 7 and 8) give unrelated outputs.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The generator for sample `index` of epoch `epoch` of a run seeded with `seed`: the first
/// (often only) copy of that index in the epoch, `sample_rng_repeat(seed, epoch, index, 0)`.
///
/// The three inputs are absorbed one after the other through [`mix64`], each step keyed with a
/// different odd constant so that swapping `epoch` and `index` gives a different stream; the
/// resulting 64-bit hash and a second mix of it fill the 128-bit PCG state.
pub fn sample_rng(seed: u64, epoch: u64, index: u64) -> SampleRng {
    sample_rng_repeat(seed, epoch, index, 0)
}

/// The generator for copy `repeat` of sample `index` in epoch `epoch` (a sampler that draws
/// with replacement, or repeats each index for repeated augmentation, visits an index several
/// times; the loader numbers the copies, see `ferroloader_loader::SampleKey::repeat`).
///
/// Invariant: `repeat == 0` is exactly [`sample_rng`]'s stream as it was before copies were
/// numbered (the fourth input is absorbed only when non-zero), so runs without repeats keep
/// their draws; every other `repeat` gives an unrelated stream.
pub fn sample_rng_repeat(seed: u64, epoch: u64, index: u64, repeat: u64) -> SampleRng {
    const K_SEED: u64 = 0x9e37_79b9_7f4a_7c15;
    const K_EPOCH: u64 = 0xd1b5_4a32_d192_ed03;
    const K_INDEX: u64 = 0x8cb9_2ba7_2f3d_8dd7;
    const K_REPEAT: u64 = 0xe703_7ed1_a0b4_28db;
    const K_LOW: u64 = 0xa076_1d64_78bd_642f;
    let mut h = mix64(seed ^ K_SEED);
    h = mix64(h ^ epoch.wrapping_mul(K_EPOCH).wrapping_add(K_EPOCH));
    h = mix64(h ^ index.wrapping_mul(K_INDEX).wrapping_add(K_INDEX));
    if repeat != 0 {
        h = mix64(h ^ repeat.wrapping_mul(K_REPEAT).wrapping_add(K_REPEAT));
    }
    let low = mix64(h ^ K_LOW);
    let state = (u128::from(h) << 64) | u128::from(low);
    // Pcg64Mcg forces the state odd itself; from_seed keeps the full 128 bits we built.
    SampleRng::from_seed(state.to_le_bytes())
}

/// The random draws torchvision's classification transforms make, in torch's float32
/// arithmetic: two primitive ones ([`uniform_f32`](Self::uniform_f32),
/// [`randint`](Self::randint)) and, with default implementations built on those two, Python's
/// `random.random()`, normals, Gamma and Dirichlet draws.
///
/// [`SampleRng`] implements it with torch's formulas over its own bits; tests implement it with
/// scripted values to replay draws taken from torch.
pub trait TorchDraws {
    /// `torch.empty(1).uniform_(from, to).item()` on a float32 tensor: a float32 in `[from, to)`.
    fn uniform_f32(&mut self, from: f32, to: f32) -> f32;

    /// `torch.randint(0, high, size=(1,)).item()`: an integer in `[0, high)`. `high` is at
    /// least 1 (callers guarantee it; implementations may return 0 otherwise).
    fn randint(&mut self, high: u32) -> u32;

    /// Python's `random.random()` (the module torchvision v1's `RandomChoice` and
    /// `RandomOrder` draw from, not torch's generator): a float64 in `[0, 1)` with 53 random
    /// bits, built as CPython builds it from two 32-bit draws (27 and 26 bits kept).
    ///
    /// The default takes two [`randint`](Self::randint) draws, so scripted implementations need
    /// not know about it.
    fn py_random(&mut self) -> f64 {
        let a = f64::from(self.randint(1 << 27));
        let b = f64::from(self.randint(1 << 26));
        (a * 67_108_864.0 + b) * (1.0 / 9_007_199_254_740_992.0)
    }

    /// One standard normal float32, as torch's `normal_()` makes them on a float32 tensor of
    /// 16 or more elements: Box-Muller over two float32 uniforms `u1, u2`, radius
    /// `sqrt(-2 ln(1 - u1))`, angle `2 pi u2`, the cosine branch.
    ///
    /// Like torch's, the tails stop near 5.8 standard deviations (24-bit uniforms). The
    /// default takes two [`uniform_f32`](Self::uniform_f32) draws.
    fn standard_normal(&mut self) -> f32 {
        let (z, _) = box_muller(self.uniform_f32(0.0, 1.0), self.uniform_f32(0.0, 1.0));
        z
    }

    /// Fills `out` with standard normal float32s (`torch.empty(..).normal_()`), both
    /// Box-Muller branches used, so one uniform per value (an odd tail takes one extra pair).
    /// `GaussianNoise`, `RandomErasing(value="random")` and timm's `RandomErasing` in `rand`
    /// and `pixel` modes fill with these.
    ///
    /// The default goes pair by pair through [`uniform_f32`](Self::uniform_f32) and libm, the
    /// order scripted implementations replay torch's normals in; [`SampleRng`] overrides it
    /// with a vectorized Box-Muller of the same distribution (see its implementation).
    fn fill_standard_normal(&mut self, out: &mut [f32]) {
        fill_standard_normal_pairwise(self, out);
    }

    /// A Gamma(`alpha`, 1) draw in float64 with torch's `sample_gamma` (Marsaglia and Tsang's
    /// rejection method, `alpha < 1` boosted by `u^(1/alpha)`), over float64 uniforms
    /// ([`py_random`](Self::py_random)) and float64 Box-Muller normals.
    ///
    /// `alpha <= 0` (or NaN) gives 0. Must terminate whatever the draws are (a scripted source
    /// may repeat one value forever): after 1000 rejections it gives up and returns the mean
    /// (of the boosted `alpha`, scaled), which a real generator reaches with probability below
    /// 0.05^1000.
    fn gamma(&mut self, alpha: f64) -> f64 {
        gamma_marsaglia_tsang(self, alpha)
    }

    /// `torch._sample_dirichlet(torch.tensor([alpha] * out.len()))` into `out`, as ATen's
    /// `_s_dirichlet_cpu`: Gamma draws kept in float64 (small `alpha` gives draws far below
    /// float32's range), normalized by their float64 sum, then narrowed to float32 and clamped
    /// to `[f32::MIN_POSITIVE, 1 - 2^-24]`. Empty `out` draws nothing.
    ///
    /// Up to [`DIRICHLET_F64_LEN`] weights are held in float64 on the stack; longer slices (no
    /// policy asks for them) keep each draw in float32, floored at `f32::MIN_POSITIVE`. Scripted
    /// implementations may override it to replay weights taken from torch.
    fn dirichlet(&mut self, alpha: f32, out: &mut [f32]) {
        let clamp = |w: f32| w.clamp(f32::MIN_POSITIVE, 1.0 - f32::EPSILON / 2.0);
        let mut wide = [0.0f64; DIRICHLET_F64_LEN];
        if let Some(wide) = wide.get_mut(..out.len()) {
            for w in wide.iter_mut() {
                *w = self.gamma(f64::from(alpha));
            }
            let sum: f64 = wide.iter().sum();
            for (o, w) in out.iter_mut().zip(wide.iter()) {
                *o = clamp((w / sum) as f32);
            }
            return;
        }
        let mut sum = 0.0f64;
        for w in out.iter_mut() {
            *w = (self.gamma(f64::from(alpha)) as f32).max(f32::MIN_POSITIVE);
            sum += f64::from(*w);
        }
        for w in out.iter_mut() {
            *w = clamp((f64::from(*w) / sum) as f32);
        }
    }
}

/// How many Dirichlet weights [`TorchDraws::dirichlet`] normalizes in float64.
pub const DIRICHLET_F64_LEN: usize = 32;

/// [`TorchDraws::fill_standard_normal`]'s default: pair by pair, each from two
/// [`uniform_f32`](TorchDraws::uniform_f32) draws through libm's `ln`, `sqrt`, `cos`, `sin`.
fn fill_standard_normal_pairwise<D: TorchDraws + ?Sized>(draws: &mut D, out: &mut [f32]) {
    let mut pairs = out.chunks_exact_mut(2);
    for pair in &mut pairs {
        let (z0, z1) = box_muller(draws.uniform_f32(0.0, 1.0), draws.uniform_f32(0.0, 1.0));
        pair[0] = z0;
        pair[1] = z1;
    }
    if let [last] = pairs.into_remainder() {
        *last = draws.standard_normal();
    }
}

/// The trait's default [`TorchDraws::fill_standard_normal`] on any source, [`SampleRng`]
/// included: the scalar libm path the fast one replaced, kept for benches and comparisons.
/// Behind the `test-hooks` feature.
#[cfg(any(test, feature = "test-hooks"))]
pub fn fill_standard_normal_scalar<D: TorchDraws + ?Sized>(draws: &mut D, out: &mut [f32]) {
    fill_standard_normal_pairwise(draws, out);
}

/// Box-Muller over two float32 uniforms in `[0, 1)` as torch's `normal_fill_16`: both branches.
fn box_muller(u1: f32, u2: f32) -> (f32, f32) {
    let radius = (-2.0 * (1.0 - u1).ln()).sqrt();
    let theta = 2.0 * std::f32::consts::PI * u2;
    (radius * theta.cos(), radius * theta.sin())
}

/// ATen's `sample_gamma` (Distributions.h) in float64; see [`TorchDraws::gamma`].
fn gamma_marsaglia_tsang<D: TorchDraws + ?Sized>(draws: &mut D, alpha: f64) -> f64 {
    if alpha.is_nan() || alpha <= 0.0 {
        return 0.0;
    }
    let mut alpha = alpha;
    let mut scale = 1.0f64;
    if alpha < 1.0 {
        scale *= (1.0 - draws.py_random()).powf(1.0 / alpha);
        alpha += 1.0;
    }
    let d = alpha - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    for _ in 0..1000 {
        let mut x = 0.0;
        let mut y = 0.0;
        for _ in 0..1000 {
            x = normal_f64(draws);
            y = 1.0 + c * x;
            if y > 0.0 {
                break;
            }
        }
        if y <= 0.0 {
            break;
        }
        let v = y * y * y;
        let u = 1.0 - draws.py_random();
        let xx = x * x;
        if u < 1.0 - 0.0331 * xx * xx || u.ln() < 0.5 * xx + d * (1.0 - v + v.ln()) {
            return scale * d * v;
        }
    }
    // Only a degenerate scripted source gets here; the boosted mean keeps the result sane.
    scale * alpha
}

/// A standard normal float64 (Box-Muller over two float64 uniforms, cosine branch), as
/// `at::normal_distribution<double>` samples for `sample_gamma`.
fn normal_f64<D: TorchDraws + ?Sized>(draws: &mut D) -> f64 {
    let u1 = draws.py_random();
    let u2 = draws.py_random();
    (-2.0 * (1.0 - u1).ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

impl TorchDraws for SampleRng {
    fn uniform_f32(&mut self, from: f32, to: f32) -> f32 {
        // ATen's uniform_real_distribution<float>: 24 random bits scaled by 2^-24, then
        // `x * (to - from) + from`, every step in float32.
        let x = (self.next_u32() & 0x00ff_ffff) as f32 * (1.0 / 16_777_216.0);
        x * (to - from) + from
    }

    /// Box-Muller with vectorized float32 `ln`, `sin` and `cos` (within 1 ulp of exact
    /// results, of 1 for `sin` and `cos`) over 24-bit uniforms from a counter-based stream
    /// keyed by two 64-bit draws of this generator; cosine branches of a block of pairs first,
    /// then their sines; the same values on every CPU. See the `normals` module.
    fn fill_standard_normal(&mut self, out: &mut [f32]) {
        normals::fill(self, out);
    }

    fn randint(&mut self, high: u32) -> u32 {
        // ATen's random_from_to for ranges below 2^32: a 32-bit draw modulo the range (with the
        // same slight modulo bias).
        if high == 0 {
            return 0;
        }
        self.next_u32() % high
    }
}

impl<T: TorchDraws + ?Sized> TorchDraws for &mut T {
    fn uniform_f32(&mut self, from: f32, to: f32) -> f32 {
        (**self).uniform_f32(from, to)
    }

    fn randint(&mut self, high: u32) -> u32 {
        (**self).randint(high)
    }

    fn py_random(&mut self) -> f64 {
        (**self).py_random()
    }

    fn standard_normal(&mut self) -> f32 {
        (**self).standard_normal()
    }

    fn fill_standard_normal(&mut self, out: &mut [f32]) {
        (**self).fill_standard_normal(out)
    }

    fn gamma(&mut self, alpha: f64) -> f64 {
        (**self).gamma(alpha)
    }

    fn dirichlet(&mut self, alpha: f32, out: &mut [f32]) {
        (**self).dirichlet(alpha, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first(seed: u64, epoch: u64, index: u64) -> [u64; 4] {
        let mut rng = sample_rng(seed, epoch, index);
        [
            rng.next_u64(),
            rng.next_u64(),
            rng.next_u64(),
            rng.next_u64(),
        ]
    }

    #[test]
    fn same_inputs_same_stream() {
        assert_eq!(first(1, 2, 3), first(1, 2, 3));
    }

    #[test]
    fn each_input_changes_the_stream() {
        let base = first(1, 2, 3);
        assert_ne!(base, first(0, 2, 3));
        assert_ne!(base, first(1, 3, 3));
        assert_ne!(base, first(1, 2, 4));
        // Swapping epoch and index must not collide.
        assert_ne!(first(1, 2, 3), first(1, 3, 2));
        assert_ne!(first(0, 0, 0), first(0, 0, 1));
    }

    #[test]
    fn repeats_are_keyed_apart_and_the_first_is_unchanged() {
        let stream = |mut rng: SampleRng| [rng.next_u64(), rng.next_u64()];
        // Repeat 0 is the stream of before repeats were keyed: values pinned from an
        // independent reimplementation of that formula, not only sample_rng (which now
        // delegates to sample_rng_repeat).
        assert_eq!(
            stream(sample_rng_repeat(1, 2, 3, 0)),
            [0xa2d5_e2be_4415_dea3, 0xc60e_8cb9_bf6c_4131]
        );
        assert_eq!(stream(sample_rng_repeat(1, 2, 3, 0)), first(1, 2, 3)[..2]);
        let mut seen = vec![first(1, 2, 3)[..2].to_vec()];
        for repeat in 1..64u64 {
            let s = stream(sample_rng_repeat(1, 2, 3, repeat)).to_vec();
            assert!(!seen.contains(&s), "repeat {repeat} collides");
            seen.push(s);
        }
        // A repeat of one index is not another index's first copy.
        assert_ne!(
            stream(sample_rng_repeat(1, 2, 3, 1)),
            stream(sample_rng(1, 2, 4))
        );
    }

    #[test]
    fn neighbouring_indices_look_unrelated() {
        // Over many neighbouring indices, the first outputs' bits should be balanced: a weak
        // mix (e.g. seeding with index directly) shows strongly correlated low bits.
        let mut ones = [0u32; 64];
        let n = 4096u64;
        for index in 0..n {
            let v = sample_rng(42, 0, index).next_u64();
            for (bit, count) in ones.iter_mut().enumerate() {
                *count += ((v >> bit) & 1) as u32;
            }
        }
        for (bit, &count) in ones.iter().enumerate() {
            let frac = f64::from(count) / n as f64;
            assert!((0.45..0.55).contains(&frac), "bit {bit}: {frac}");
        }
    }

    #[test]
    fn torch_draws_stay_in_range() {
        let mut rng = sample_rng(7, 1, 2);
        for _ in 0..10_000 {
            let u = rng.uniform_f32(0.08, 1.0);
            assert!((0.08..1.0).contains(&u), "{u}");
            let unit = rng.uniform_f32(0.0, 1.0);
            assert!((0.0..1.0).contains(&unit));
            // 24-bit resolution: the unit draw is an exact multiple of 2^-24.
            assert_eq!((unit * 16_777_216.0).fract(), 0.0);
            assert!(rng.randint(3) < 3);
        }
        assert_eq!(rng.randint(1), 0);
        assert_eq!(rng.randint(0), 0);
        assert_eq!(rng.uniform_f32(0.5, 0.5), 0.5);
    }

    #[test]
    fn mix64_is_a_known_bijection() {
        // SplitMix64's first output for seed 0 is mix64(0x9e3779b97f4a7c15).
        assert_eq!(mix64(0x9e37_79b9_7f4a_7c15), 0xe220_a839_7b1d_cdaf);
        assert_eq!(mix64(0), 0);
    }
}
