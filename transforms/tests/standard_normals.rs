//! The sample generator's standard normals (`SampleRng::fill_standard_normal`, the fast
//! Box-Muller over a counter-based stream the sample generator keys) against the standard
//! normal distribution, over a few million draws: moments, a Kolmogorov-Smirnov test and a fine
//! chi-square against the normal CDF, tail frequencies, the 24-bit uniforms' tail limit, and no
//! correlation between neighbours, between the two Box-Muller branches of a pair, or between
//! the generators of adjacent sample indices.
//!
//! Bounds are about five standard errors of each statistic: planted faults (a radius 1% off,
//! radius and angle sharing bits, every sample keyed alike) fail them, chance does not.

use ferroloader_transforms::rng::{sample_rng, TorchDraws};

/// The values of one 224x224 RGB image, the size GaussianNoise fills.
const IMAGE: usize = 3 * 224 * 224;

/// `IMAGE`-sized fills of 28 consecutive sample indices: 4.2 million normals.
fn draws() -> Vec<f32> {
    let mut all = vec![0f32; 28 * IMAGE];
    for (index, chunk) in all.chunks_exact_mut(IMAGE).enumerate() {
        sample_rng(11, 2, index as u64).fill_standard_normal(chunk);
    }
    all
}

/// The standard normal CDF, from `erfc` (Numerical Recipes' Chebyshev fit, relative error
/// below 1.2e-7: far inside the KS bound).
fn normal_cdf(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    if x >= 0.0 {
        1.0 - 0.5 * erfc
    } else {
        0.5 * erfc
    }
}

fn correlation(pairs: impl Iterator<Item = (f32, f32)>) -> f64 {
    let (mut n, mut sx, mut sy, mut sxx, mut syy, mut sxy) = (0.0f64, 0.0, 0.0, 0.0, 0.0, 0.0);
    for (x, y) in pairs {
        let (x, y) = (f64::from(x), f64::from(y));
        n += 1.0;
        sx += x;
        sy += y;
        sxx += x * x;
        syy += y * y;
        sxy += x * y;
    }
    let cov = sxy / n - (sx / n) * (sy / n);
    cov / ((sxx / n - (sx / n).powi(2)) * (syy / n - (sy / n).powi(2))).sqrt()
}

#[test]
fn moments_match_the_standard_normal() {
    let z = draws();
    let n = z.len() as f64;
    let mean = z.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
    let central = |k: i32| {
        z.iter()
            .map(|&x| (f64::from(x) - mean).powi(k))
            .sum::<f64>()
            / n
    };
    let var = central(2);
    let skew = central(3) / var.powf(1.5);
    let excess_kurtosis = central(4) / (var * var) - 3.0;
    // Standard errors at n = 4.2M: mean 4.9e-4, variance 6.9e-4, skew 1.2e-3, kurtosis 2.4e-3.
    assert!(mean.abs() < 2.5e-3, "mean {mean}");
    assert!((var - 1.0).abs() < 3.5e-3, "variance {var}");
    assert!(skew.abs() < 6e-3, "skew {skew}");
    assert!(
        excess_kurtosis.abs() < 1.2e-2,
        "excess kurtosis {excess_kurtosis}"
    );
}

#[test]
fn the_cdf_matches_the_normal_one() {
    let mut z = draws();
    assert!(z.iter().all(|x| x.is_finite()));
    z.sort_unstable_by(f32::total_cmp);
    let n = z.len() as f64;
    // Kolmogorov-Smirnov: D's 1% critical value is 1.63 / sqrt(n).
    let mut d = 0.0f64;
    for (i, &x) in z.iter().enumerate() {
        let f = normal_cdf(f64::from(x));
        d = d
            .max((f - i as f64 / n).abs())
            .max(((i + 1) as f64 / n - f).abs());
    }
    assert!(d < 1.63 / n.sqrt(), "KS D = {d} over {n} draws");
    // A chi-square over 2000 equiprobable bins catches fine structure (a lattice, a gap)
    // that KS averages away: 1999 degrees of freedom, standard deviation 63.2.
    let bins = 2000usize;
    let mut counts = vec![0u64; bins];
    for &x in &z {
        let b = (normal_cdf(f64::from(x)) * bins as f64) as usize;
        counts[b.min(bins - 1)] += 1;
    }
    let expected = n / bins as f64;
    let chi2: f64 = counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum();
    assert!(chi2 < 1999.0 + 5.0 * 63.2, "chi-square {chi2}");
}

#[test]
fn tails_have_the_normal_frequencies_and_stop_where_24_bit_uniforms_stop() {
    let z = draws();
    let n = z.len() as f64;
    for (sigma, p) in [(3.0f32, 2.699_796e-3), (4.0, 6.334_248e-5)] {
        let count = z.iter().filter(|x| x.abs() > sigma).count() as f64;
        let expected = n * p;
        let tolerance = 5.0 * expected.sqrt();
        assert!(
            (count - expected).abs() < tolerance,
            "{count} beyond {sigma} sigma, expected {expected}"
        );
    }
    // 1 - u1 >= 2^-24: the radius is at most sqrt(48 ln 2) = 5.768.
    let max = z.iter().fold(0f32, |m, x| m.max(x.abs()));
    assert!(max <= 5.7683, "max |z| {max}");
}

#[test]
fn neighbours_branches_and_adjacent_samples_are_uncorrelated() {
    let z = draws();
    // 5 standard errors of a correlation over ~4M pairs.
    let bound = 5.0 / (z.len() as f64).sqrt();
    let lag1 = correlation(z.windows(2).map(|w| (w[0], w[1])));
    assert!(lag1.abs() < bound, "lag-1 correlation {lag1}");
    // Blocks of 128 values: the cosine branches of 64 pairs, then their sines (half as many
    // pairs as values: the bound doubles, over the 1.41 the count alone asks).
    let branches = correlation(
        z.chunks_exact(128)
            .flat_map(|b| b[..64].iter().copied().zip(b[64..].iter().copied())),
    );
    assert!(
        branches.abs() < 2.0 * bound,
        "cos/sin branch correlation {branches}"
    );
    // Squares too: the two branches share a radius, so their magnitudes would correlate if
    // the angle were not uniform.
    let magnitudes = correlation(z.chunks_exact(128).flat_map(|b| {
        b[..64]
            .iter()
            .zip(b[64..].iter())
            .map(|(c, s)| (c * c, s * s))
    }));
    assert!(
        magnitudes.abs() < 2.0 * bound,
        "squared branch correlation {magnitudes}"
    );
    // The same position in the fills of sample indices i and i + 1.
    let adjacent = correlation(
        z.chunks_exact(IMAGE)
            .zip(z.chunks_exact(IMAGE).skip(1))
            .flat_map(|(a, b)| a.iter().copied().zip(b.iter().copied())),
    );
    assert!(
        adjacent.abs() < bound,
        "adjacent-index correlation {adjacent}"
    );
}

#[test]
fn the_fill_is_a_pure_function_of_the_generator_and_continues_it() {
    let mut a = vec![0f32; 1001];
    let mut b = vec![0f32; 1001];
    let mut ra = sample_rng(5, 0, 7);
    let mut rb = sample_rng(5, 0, 7);
    ra.fill_standard_normal(&mut a);
    // Through the `&mut T` forwarding the pipeline's generic code uses.
    fn through<D: TorchDraws>(mut draws: D, out: &mut [f32]) {
        draws.fill_standard_normal(out);
    }
    through(&mut rb, &mut b);
    assert_eq!(a, b);
    assert_eq!(ra.uniform_f32(0.0, 1.0), rb.uniform_f32(0.0, 1.0));
    let mut c = vec![0f32; 1001];
    sample_rng(5, 0, 8).fill_standard_normal(&mut c);
    assert_ne!(a, c);
    // The odd tail keeps the cosines of its pairs, then the sines that fit.
    let mut one = [0f32];
    sample_rng(5, 0, 7).fill_standard_normal(&mut one);
    let mut two = [0f32; 2];
    sample_rng(5, 0, 7).fill_standard_normal(&mut two);
    assert_eq!(one[0], two[0]);
    assert!(a.iter().all(|x| x.is_finite()));
}
