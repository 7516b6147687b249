//! One rank's sample order for an epoch over tar shards: shards shuffled per (seed, epoch),
//! cut into equal contiguous shares for the ranks, samples through a bounded shuffle buffer.
//!
//! A pure function of its inputs, like [`Sampler`](crate::Sampler): must not keep state or read
//! entropy, so every rank, worker count and rerun computes the same order.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::sampler::Shard;

/// The inputs of [`epoch_order`].
#[derive(Clone, Copy, Debug)]
pub struct OrderParams {
    /// Shuffle shards and samples (false: shards in index order, samples in tar order).
    pub shuffle: bool,
    /// The run's seed.
    pub seed: u64,
    /// The epoch.
    pub epoch: u64,
    /// This rank's share, `None` for a single process.
    pub shard: Option<Shard>,
    /// Samples held by the shuffle buffer; 0 or 1 keeps the shards' order.
    pub shuffle_buffer: usize,
    /// Samples the buffer holds before it yields its first one (at least 1, at most
    /// `shuffle_buffer`); from there it grows by one sample per sample yielded until full, as
    /// WebDataset's `shuffle(bufsize, initial)` does. The first batch then waits for about
    /// `initial + 2 * batch_size` samples instead of `shuffle_buffer + batch_size`: with
    /// remote shards, a wait for data paid at the start of every epoch.
    pub shuffle_initial: usize,
}

/// The dataset indices rank `params.shard` reads in epoch `params.epoch`, where shard `i` holds
/// samples `starts[i]..starts[i + 1]` (`starts` ends with the total).
///
/// Ranks take contiguous runs of the epoch's shuffled shard sequence, each
/// `ceil(total / world_size)` samples long (as torch's `DistributedSampler` counts): so every
/// sample is read once per epoch across the ranks, and when the total does not divide evenly the
/// last ranks' runs wrap around to the sequence's head (`drop_last` cuts the runs to
/// `total / world_size` instead and leaves the tail out). A rank reads at most two shards in
/// part; when shards outnumber ranks, whole shards mostly. The shuffle buffer is seeded from
/// (seed, epoch, rank); it fills to `shuffle_initial` samples, then alternately takes a sample
/// in and swaps one out for the next (growing by one per sample out) until it holds
/// `shuffle_buffer`, then swaps one out for every sample in.
pub fn epoch_order(starts: &[usize], params: OrderParams) -> Vec<usize> {
    let num_shards = starts.len().saturating_sub(1);
    let total = starts.last().copied().unwrap_or(0);
    let mut shards: Vec<usize> = (0..num_shards).collect();
    if params.shuffle {
        let mut rng = rand_pcg::Pcg64::seed_from_u64(mix(params.seed, params.epoch, u64::MAX));
        shards.shuffle(&mut rng);
    }
    let sequence: Vec<usize> = shards
        .iter()
        .flat_map(|&s| starts[s]..starts[s + 1])
        .collect();
    let (share, rank) = match params.shard {
        None => (total, 0),
        Some(s) if s.drop_last => (total / s.world_size, s.rank),
        Some(s) => (total.div_ceil(s.world_size), s.rank),
    };
    if sequence.is_empty() {
        return Vec::new();
    }
    let run = (rank * share..(rank + 1) * share).map(|p| sequence[p % sequence.len()]);
    if !params.shuffle || params.shuffle_buffer <= 1 {
        return run.collect();
    }
    let mut rng = rand_pcg::Pcg64::seed_from_u64(mix(params.seed, params.epoch, rank as u64));
    let capacity = params.shuffle_buffer;
    let initial = params.shuffle_initial.clamp(1, capacity);
    let mut buffer = Vec::with_capacity(capacity.min(share));
    let mut out = Vec::with_capacity(share);
    let mut take_in = false;
    for index in run {
        if buffer.len() < initial {
            buffer.push(index);
            continue;
        }
        if buffer.len() < capacity {
            take_in = !take_in;
            if take_in {
                buffer.push(index);
                continue;
            }
        }
        let pick = rng.random_range(0..buffer.len());
        out.push(std::mem::replace(&mut buffer[pick], index));
    }
    buffer.shuffle(&mut rng);
    out.extend(buffer);
    out
}

/// A seed from (seed, epoch, stream): SplitMix64's finalizer over the three, so nearby inputs
/// give unrelated streams.
fn mix(seed: u64, epoch: u64, stream: u64) -> u64 {
    fn fin(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let a = fin(seed ^ 0x5851_f42d_4c95_7f2d);
    let b = fin(a ^ epoch.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    fin(b ^ stream.wrapping_mul(0xd1b5_4a32_d192_ed03))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(shuffle: bool, epoch: u64, shard: Option<Shard>) -> OrderParams {
        OrderParams {
            shuffle,
            seed: 3,
            epoch,
            shard,
            shuffle_buffer: 7,
            shuffle_initial: 7,
        }
    }

    #[test]
    fn unshuffled_is_the_shards_in_order() {
        let starts = [0, 3, 5, 9];
        assert_eq!(
            epoch_order(&starts, params(false, 0, None)),
            (0..9).collect::<Vec<_>>()
        );
        // Two ranks, 9 samples: runs of 5, the second wraps to sample 0.
        let r0 = epoch_order(&starts, params(false, 0, Some(Shard::new(0, 2))));
        let r1 = epoch_order(&starts, params(false, 0, Some(Shard::new(1, 2))));
        assert_eq!(r0, [0, 1, 2, 3, 4]);
        assert_eq!(r1, [5, 6, 7, 8, 0]);
        let d1 = epoch_order(
            &starts,
            params(false, 0, Some(Shard::new(1, 2).drop_last(true))),
        );
        assert_eq!(d1, [4, 5, 6, 7]);
    }

    #[test]
    fn ranks_cover_every_sample_once_and_shuffles_vary_by_epoch() {
        let starts: Vec<usize> = (0..=10).map(|s| s * 10).collect();
        for epoch in 0..3 {
            let mut all: Vec<usize> = (0..4)
                .flat_map(|r| epoch_order(&starts, params(true, epoch, Some(Shard::new(r, 4)))))
                .collect();
            assert_eq!(all.len(), 100);
            all.sort_unstable();
            assert_eq!(all, (0..100).collect::<Vec<_>>());
        }
        let a = epoch_order(&starts, params(true, 0, None));
        assert_eq!(a, epoch_order(&starts, params(true, 0, None)));
        assert_ne!(a, epoch_order(&starts, params(true, 1, None)));
        // The buffer moves samples at most a bounded distance ahead of their shard's place.
        let unbuffered = epoch_order(
            &starts,
            OrderParams {
                shuffle_buffer: 1,
                shuffle_initial: 1,
                ..params(true, 0, None)
            },
        );
        assert_ne!(a, unbuffered);
        for (pos, idx) in unbuffered.iter().enumerate() {
            let got = a.iter().position(|x| x == idx).expect("present");
            assert!(got + 7 > pos, "sample {idx} came out too early");
        }
    }

    #[test]
    fn the_buffer_yields_from_its_initial_size_and_grows_to_full() {
        let starts: Vec<usize> = (0..=10).map(|s| s * 10).collect();
        let (capacity, initial) = (20, 4);
        let with = |shuffle_buffer, shuffle_initial| {
            epoch_order(
                &starts,
                OrderParams {
                    shuffle_buffer,
                    shuffle_initial,
                    ..params(true, 0, None)
                },
            )
        };
        // Where each sample stands in the shuffled shards before the buffer.
        let unbuffered = with(1, 1);
        let mut position = vec![0; 100];
        for (p, &index) in unbuffered.iter().enumerate() {
            position[index] = p;
        }
        let out = with(capacity, initial);
        let mut sorted = out.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        let came_from: Vec<usize> = out.iter().map(|&i| position[i]).collect();
        for (k, &p) in came_from.iter().enumerate().take(100 - capacity) {
            // Sample k goes out when input `initial + 2k + 1` comes in while the buffer grows,
            // input `k + capacity` once it is full; it is one of the inputs before.
            let comes_in = (initial + 2 * k + 1).min(k + capacity);
            assert!(p < comes_in, "output {k} is input {p}, not yet read then");
        }
        // It grew past its initial size: a buffer that stayed at `initial` samples would yield
        // sample k from the inputs before `k + initial`.
        assert!(came_from.iter().enumerate().any(|(k, &p)| p >= k + initial));
        // The initial size is clamped to 1..=shuffle_buffer; at shuffle_buffer the buffer fills
        // completely before its first sample goes out.
        assert_eq!(with(capacity, 0), with(capacity, 1));
        assert_eq!(with(capacity, 50), with(capacity, capacity));
        let full = with(capacity, capacity);
        assert!(full.iter().take(10).all(|&i| position[i] < capacity + 10));
        assert_ne!(full, out);
    }
}
