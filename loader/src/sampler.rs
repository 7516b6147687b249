//! The order samples are visited in each epoch: sequential or shuffled from `(seed, epoch)`, and
//! optionally one rank's share of a distributed job, exactly as torch's `DistributedSampler` cuts it.
//!
//! A pure function of its inputs: must not keep state between epochs or read entropy from the
//! OS, so every rank and every rerun computes the same order. The shuffle itself cannot match
//! torch's `randperm` (torch's generator is not reproducible outside torch); everything around it
//! (padding, truncation, striding) does.

use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::error::{LoaderError, Result};

/// One rank's share of a distributed job (torch's `DistributedSampler` arguments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// This process's rank, `0..world_size`.
    pub rank: usize,
    /// Number of ranks.
    pub world_size: usize,
    /// `DistributedSampler`'s `drop_last`: cut the tail so every rank gets the same number of
    /// samples without repeats, instead of padding by wrapping around. Default: false.
    pub drop_last: bool,
}

impl Shard {
    /// Rank `rank` of `world_size`, padding (not dropping) to an even split.
    pub fn new(rank: usize, world_size: usize) -> Self {
        Shard {
            rank,
            world_size,
            drop_last: false,
        }
    }

    /// Sets [`Self::drop_last`].
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.drop_last = drop_last;
        self
    }
}

/// Computes each epoch's sample order for a dataset of `len` samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sampler {
    len: usize,
    shuffle: bool,
    seed: u64,
    shard: Option<Shard>,
}

impl Sampler {
    /// A sampler over `0..len`; fails if the shard's rank is not below its world size.
    pub fn new(len: usize, shuffle: bool, seed: u64, shard: Option<Shard>) -> Result<Self> {
        if let Some(s) = shard {
            if s.world_size == 0 {
                return Err(LoaderError::invalid(
                    "shard.world_size",
                    "must be at least 1",
                ));
            }
            if s.rank >= s.world_size {
                return Err(LoaderError::invalid(
                    "shard.rank",
                    format!("{} is not below world_size {}", s.rank, s.world_size),
                ));
            }
        }
        Ok(Sampler {
            len,
            shuffle,
            seed,
            shard,
        })
    }

    /// Whether epochs are shuffled.
    pub fn shuffle(&self) -> bool {
        self.shuffle
    }

    /// The seed of the shuffle.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// This rank's share of a distributed job, if any.
    pub fn shard(&self) -> Option<Shard> {
        self.shard
    }

    /// The dataset length this sampler covers.
    pub fn dataset_len(&self) -> usize {
        self.len
    }

    /// Samples per epoch on this rank (`DistributedSampler.num_samples`; the dataset length
    /// when not sharded).
    pub fn num_samples(&self) -> usize {
        match self.shard {
            None => self.len,
            // torch: ceil((len - world) / world) when dropping an uneven tail, which is
            // len / world for len >= world and 0 below.
            Some(s) if s.drop_last => self.len / s.world_size,
            Some(s) => self.len.div_ceil(s.world_size),
        }
    }

    /// [`crate::SampleKey::repeat`] of each position of [`Self::indices`]: the times its
    /// index's list wrapped around before it in the whole (all ranks') list, so the copies
    /// that pad a sharded epoch draw apart from the originals, which another rank (or this
    /// one, on a dataset smaller than the world) loads. Empty when nothing is padded. The same
    /// for every epoch.
    pub fn repeats(&self) -> Vec<u64> {
        let Some(shard) = self.shard else {
            return Vec::new();
        };
        let total = self.num_samples() * shard.world_size;
        if self.len == 0 || total <= self.len {
            return Vec::new();
        }
        (shard.rank..total)
            .step_by(shard.world_size)
            .map(|i| (i / self.len) as u64)
            .collect()
    }

    /// The dataset indices of epoch `epoch`, in visiting order.
    pub fn indices(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.len).collect();
        if self.shuffle {
            let mut rng = rand_pcg::Pcg64::seed_from_u64(shuffle_seed(self.seed, epoch));
            order.shuffle(&mut rng);
        }
        let Some(shard) = self.shard else {
            return order;
        };
        if order.is_empty() {
            return order;
        }
        let total = self.num_samples() * shard.world_size;
        // Padding wraps around the (shuffled) list: position i >= len holds order[i % len],
        // which is what torch's `indices += indices[:pad]` (repeated when pad > len) builds;
        // with drop_last, total <= len and this only truncates.
        (shard.rank..total)
            .step_by(shard.world_size)
            .map(|i| order[i % order.len()])
            .collect()
    }
}

/// [`crate::SampleKey::repeat`] of each position of a plan the loader did not cut itself (a
/// sampler's indices, a source's own order): the number of earlier visits of the same index in
/// the plan, so the k-th copy of an index draws as no other does. `rank`, the `(rank,
/// world_size)` of the distributed job whose sampler made the plan, spreads the numbers over
/// the ranks (`k * world_size + rank`): that sampler may send copies of an index to several
/// ranks (torchvision's `RASampler`, timm's `RepeatAugSampler`), and only the ranks together
/// see them all. Empty when every number is 0 (no index twice, and rank 0 or none).
///
/// Indices must be below `len` (the loader checks plans before this).
pub fn plan_repeats(plan: &[usize], len: usize, rank: Option<(usize, usize)>) -> Vec<u64> {
    let (rank, world) = rank.map_or((0, 1), |(r, w)| (r as u64, w.max(1) as u64));
    let mut seen = vec![0u32; len];
    let mut repeats = Vec::with_capacity(plan.len());
    let mut any = rank != 0;
    for &index in plan {
        let Some(count) = seen.get_mut(index) else {
            repeats.push(rank);
            continue;
        };
        any |= *count > 0;
        repeats.push(u64::from(*count) * world + rank);
        *count = count.saturating_add(1);
    }
    if !any {
        repeats.clear();
        repeats.shrink_to_fit();
    }
    repeats
}

/// The shuffle's seed for an epoch: both inputs mixed (SplitMix64's finalizer) so that nearby
/// seeds and epochs give unrelated permutations, and (seed, epoch) is never confused with
/// (seed + 1, epoch - 1) as torch's `seed + epoch` is.
fn shuffle_seed(seed: u64, epoch: u64) -> u64 {
    fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    mix(mix(seed ^ 0x5851_f42d_4c95_7f2d) ^ epoch.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(rank: usize, world: usize, drop_last: bool) -> Option<Shard> {
        Some(Shard::new(rank, world).drop_last(drop_last))
    }

    #[test]
    fn sequential_sharding_matches_torch() {
        // torch: DistributedSampler(range(10), num_replicas=3, rank=r, shuffle=False)
        let expected = [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]];
        for (rank, want) in expected.iter().enumerate() {
            let s = Sampler::new(10, false, 0, shard(rank, 3, false)).expect("valid");
            assert_eq!(s.num_samples(), 4);
            assert_eq!(s.indices(0), want);
        }
        // ... and with drop_last=True.
        let expected = [[0, 3, 6], [1, 4, 7], [2, 5, 8]];
        for (rank, want) in expected.iter().enumerate() {
            let s = Sampler::new(10, false, 0, shard(rank, 3, true)).expect("valid");
            assert_eq!(s.num_samples(), 3);
            assert_eq!(s.indices(0), want);
        }
        // Padding longer than the dataset: 2 samples over 5 ranks repeat [0, 1, 0, 1, 0].
        let got: Vec<Vec<usize>> = (0..5)
            .map(|r| {
                Sampler::new(2, false, 0, shard(r, 5, false))
                    .expect("valid")
                    .indices(3)
            })
            .collect();
        assert_eq!(got, vec![vec![0], vec![1], vec![0], vec![1], vec![0]]);
        // Fewer samples than ranks with drop_last: nobody gets anything.
        let s = Sampler::new(2, false, 0, shard(1, 5, true)).expect("valid");
        assert_eq!(s.num_samples(), 0);
        assert!(s.indices(0).is_empty());
    }

    #[test]
    fn a_shard_outside_its_world_names_the_field() {
        let invalid = |rank, world| match Sampler::new(4, false, 0, shard(rank, world, false)) {
            Err(LoaderError::InvalidOption { name, reason }) => (name, reason),
            other => panic!("rank {rank} of {world}: {other:?}"),
        };
        assert_eq!(
            invalid(0, 0),
            ("shard.world_size", "must be at least 1".to_string())
        );
        assert_eq!(
            invalid(2, 2),
            ("shard.rank", "2 is not below world_size 2".to_string())
        );
    }

    #[test]
    fn shuffled_shards_pad_with_the_head_of_the_same_permutation() {
        let len = 23;
        let world = 4;
        let full = Sampler::new(len, true, 7, None).expect("valid").indices(2);
        let mut seen = Vec::new();
        for rank in 0..world {
            let s = Sampler::new(len, true, 7, shard(rank, world, false)).expect("valid");
            let got = s.indices(2);
            assert_eq!(got.len(), 6);
            for (k, &idx) in got.iter().enumerate() {
                assert_eq!(idx, full[(rank + k * world) % len]);
            }
            seen.extend(got);
        }
        seen.sort_unstable();
        let mut want: Vec<usize> = (0..len).collect();
        want.extend(&full[..24 - len]);
        want.sort_unstable();
        assert_eq!(seen, want);
    }

    #[test]
    fn shuffle_depends_on_seed_and_epoch_only() {
        let s = Sampler::new(100, true, 1, None).expect("valid");
        let a = s.indices(0);
        assert_eq!(a, s.indices(0));
        assert_ne!(a, s.indices(1));
        assert_ne!(
            a,
            Sampler::new(100, true, 2, None).expect("valid").indices(0)
        );
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        assert_eq!(
            Sampler::new(5, false, 1, None).expect("valid").indices(9),
            vec![0, 1, 2, 3, 4]
        );
    }

    #[test]
    fn repeats_number_each_copy_apart() {
        // Within one plan: the k-th visit of an index is repeat k; rank 0 or no rank keeps
        // the first visits at 0 (today's keys) and stores nothing without repeats.
        assert_eq!(plan_repeats(&[0, 0, 1, 1, 0], 2, None), [0, 1, 0, 1, 2]);
        assert_eq!(
            plan_repeats(&[0, 0, 1, 1, 0], 2, Some((0, 2))),
            [0, 2, 0, 2, 4]
        );
        assert!(plan_repeats(&[2, 0, 1], 3, None).is_empty());
        assert!(plan_repeats(&[2, 0, 1], 3, Some((0, 4))).is_empty());
        // Across ranks: RASampler sends the copies of an index to different ranks; no two
        // (rank, copy) pairs share a number.
        let world = 3;
        let mut numbers: Vec<u64> = (0..world)
            .flat_map(|rank| plan_repeats(&[5, 5, 5, 5], 6, Some((rank, world))))
            .collect();
        assert_eq!(&numbers[4..8], [1, 4, 7, 10]);
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(numbers.len(), 12);
    }

    #[test]
    fn the_padding_of_a_shard_is_numbered_apart_from_its_original() {
        // 10 samples over 3 ranks: positions 10 and 11 of the whole list pad with 0 and 1.
        let repeats: Vec<Vec<u64>> = (0..3)
            .map(|r| {
                Sampler::new(10, false, 0, shard(r, 3, false))
                    .expect("valid")
                    .repeats()
            })
            .collect();
        assert_eq!(
            repeats,
            [vec![0, 0, 0, 0], vec![0, 0, 0, 1], vec![0, 0, 0, 1]]
        );
        // 2 samples over 5 ranks: [0, 1, 0, 1, 0], copies 0, 0, 1, 1, 2.
        let repeats: Vec<u64> = (0..5)
            .flat_map(|r| {
                Sampler::new(2, false, 0, shard(r, 5, false))
                    .expect("valid")
                    .repeats()
            })
            .collect();
        assert_eq!(repeats, [0, 0, 1, 1, 2]);
        // No padding (even split, drop_last, unsharded): nothing stored.
        assert!(Sampler::new(9, true, 0, shard(1, 3, false))
            .expect("valid")
            .repeats()
            .is_empty());
        assert!(Sampler::new(10, true, 0, shard(1, 3, true))
            .expect("valid")
            .repeats()
            .is_empty());
        assert!(Sampler::new(10, true, 0, None)
            .expect("valid")
            .repeats()
            .is_empty());
    }

    #[test]
    fn bad_shards_are_rejected() {
        assert!(Sampler::new(5, false, 0, shard(3, 3, false)).is_err());
        assert!(Sampler::new(5, false, 0, shard(0, 0, false)).is_err());
    }
}
