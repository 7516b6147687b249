//! The loader's settings: one struct with a default for every field and chained setters.
//!
//! Only data and validation live here; must not start anything.

use ferroloader_profiler::Mode;

use crate::error::{LoaderError, Result};
use crate::host_memory::HostMemory;
use crate::sampler::Shard;

/// Most worker threads a loader starts: far above any machine's cores, low enough that a typo
/// (`10**9`) is an error rather than an attempt to start a billion threads.
pub const MAX_NUM_WORKERS: usize = 4096;

/// Most batches prepared ahead of the consumer: past a few per worker, more only pin memory
/// (each is a whole batch buffer).
pub const MAX_PREFETCH_BATCHES: usize = 1024;

/// What to do when a sample cannot be loaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ErrorPolicy {
    /// The iterator yields the error (naming the file, the op and the cause) in the batch's
    /// place and then ends; the loader can start another epoch.
    #[default]
    Raise,
    /// The sample is dropped, counted and kept with its cause ([`crate::EpochIter::skipped`]);
    /// in-order batches are filled from the next samples in order, so only the epoch's last
    /// batch may be short, with `drop_last` too (the plan is cut to whole batches before any
    /// sample is loaded). In completion order, the batch with the failure is short instead.
    Skip,
    /// timm's `ImageDataset`: the slot is filled with the next sample of the dataset (index + 1,
    /// wrapping around) instead, up to `retries` samples in turn, each failure kept with its
    /// cause ([`crate::EpochIter::skipped`]); batches keep their size, the replacement is
    /// delivered twice that epoch. Past `retries` failures in a row, as [`Self::Raise`].
    Replace {
        /// Samples tried in turn after the failing one before the error is raised.
        retries: u32,
    },
}

impl ErrorPolicy {
    /// Whether every planned batch is delivered as planned, each slot filled (no compaction).
    pub(crate) fn keeps_batches(self) -> bool {
        !matches!(self, ErrorPolicy::Skip)
    }
}

/// In which order finished batches are handed to the consumer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Delivery {
    /// In the epoch's order.
    #[default]
    InOrder,
    /// As soon as each batch is complete, whatever its place (torch's `in_order=False`); every
    /// [`crate::Batch`] says whether it overtook an earlier one.
    CompletionOrder,
}

/// How a [`crate::Loader`] batches, orders and processes samples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoaderOptions {
    /// Samples per batch. Default: 32.
    pub batch_size: usize,
    /// Visit samples in a fresh random order each epoch, drawn from `(seed, epoch)`.
    /// Default: false.
    pub shuffle: bool,
    /// Seed of the shuffle and of every sample's random key. Default: 0.
    pub seed: u64,
    /// Drop the epoch's last batch when it would be short. Default: false.
    pub drop_last: bool,
    /// Load only this rank's share of the dataset (torch's `DistributedSampler`). Default: None.
    pub shard: Option<Shard>,
    /// `(rank, world_size)` of the distributed job whose sampler gives the indices of
    /// [`crate::Loader::epoch_with_indices`] (torch's `DistributedSampler`, torchvision's
    /// `RASampler`, timm's `RepeatAugSampler`): such samplers may send copies of an index to
    /// several ranks, so each rank numbers its copies apart from the others' (see
    /// [`crate::sampler::plan_repeats`]). Rank 0's first copies keep the keys of an undistributed
    /// run. Not used by the loader's own order ([`Self::shard`] numbers its padding itself).
    /// Default: None.
    pub indices_rank: Option<(usize, usize)>,
    /// Worker threads. 0 starts none: the thread that calls `next()` processes each batch's
    /// samples when asked (torch's `num_workers=0`), with the same batches as any other count.
    /// Default: the number of cores available to the process.
    pub num_workers: usize,
    /// Batches being prepared at once ahead of the consumer; with `batch_size`, this bounds the
    /// memory of batches in flight. Keep `prefetch_batches * batch_size` above `num_workers`
    /// so no worker waits for work. Default: 2.
    pub prefetch_batches: usize,
    /// Order of delivery. Default: [`Delivery::InOrder`].
    pub delivery: Delivery,
    /// What a failing sample does. Default: [`ErrorPolicy::Raise`].
    pub on_error: ErrorPolicy,
    /// Most bytes a worker's scratch (decoded images, file bytes) may keep between samples:
    /// past it, after an outlier image, the scratch is freed and regrows to what the next
    /// samples need. Default: 64 MiB, above a 20-megapixel photo's decoded pixels, so typical
    /// datasets never pay for regrowing.
    pub scratch_limit: usize,
    /// What the loader's profiler records ([`crate::Loader::profile`]): nothing, op spans and
    /// batch events, or those plus CPU counters per op. Default: [`Mode::Off`], which costs a
    /// branch per op.
    pub profile_mode: Mode,
    /// Where batch buffers live: [`HostMemory::PageLocked`] locks each one for a device's
    /// asynchronous copies (`pin_memory`). Default: [`HostMemory::Pageable`].
    pub host_memory: HostMemory,
}

impl Default for LoaderOptions {
    fn default() -> Self {
        LoaderOptions {
            batch_size: 32,
            shuffle: false,
            seed: 0,
            drop_last: false,
            shard: None,
            indices_rank: None,
            num_workers: std::thread::available_parallelism().map_or(1, usize::from),
            prefetch_batches: 2,
            delivery: Delivery::InOrder,
            on_error: ErrorPolicy::Raise,
            profile_mode: Mode::Off,
            scratch_limit: 64 << 20,
            host_memory: HostMemory::Pageable,
        }
    }
}

impl LoaderOptions {
    /// Sets [`Self::batch_size`].
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Sets [`Self::shuffle`].
    pub fn shuffle(mut self, shuffle: bool) -> Self {
        self.shuffle = shuffle;
        self
    }

    /// Sets [`Self::seed`].
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Sets [`Self::drop_last`].
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.drop_last = drop_last;
        self
    }

    /// Sets [`Self::shard`].
    pub fn shard(mut self, shard: Shard) -> Self {
        self.shard = Some(shard);
        self
    }

    /// Sets [`Self::indices_rank`].
    pub fn indices_rank(mut self, rank: usize, world_size: usize) -> Self {
        self.indices_rank = Some((rank, world_size));
        self
    }

    /// Sets [`Self::num_workers`].
    pub fn num_workers(mut self, num_workers: usize) -> Self {
        self.num_workers = num_workers;
        self
    }

    /// Sets [`Self::prefetch_batches`].
    pub fn prefetch_batches(mut self, prefetch_batches: usize) -> Self {
        self.prefetch_batches = prefetch_batches;
        self
    }

    /// Sets [`Self::delivery`].
    pub fn delivery(mut self, delivery: Delivery) -> Self {
        self.delivery = delivery;
        self
    }

    /// Sets [`Self::on_error`].
    pub fn on_error(mut self, on_error: ErrorPolicy) -> Self {
        self.on_error = on_error;
        self
    }

    /// Sets [`Self::scratch_limit`].
    pub fn scratch_limit(mut self, bytes: usize) -> Self {
        self.scratch_limit = bytes;
        self
    }

    /// Sets [`Self::host_memory`].
    pub fn host_memory(mut self, memory: HostMemory) -> Self {
        self.host_memory = memory;
        self
    }

    /// Sets [`Self::profile_mode`].
    pub fn profile_mode(mut self, mode: Mode) -> Self {
        self.profile_mode = mode;
        self
    }

    /// Checks the values that have no meaning: zero batch sizes or prefetch, and more workers
    /// or batches ahead than [`MAX_NUM_WORKERS`] and [`MAX_PREFETCH_BATCHES`].
    pub fn validate(&self) -> Result<()> {
        for (name, value) in [
            ("batch_size", self.batch_size),
            ("prefetch_batches", self.prefetch_batches),
        ] {
            if value == 0 {
                return Err(LoaderError::invalid(name, "must be at least 1"));
            }
        }
        for (name, value, max) in [
            ("num_workers", self.num_workers, MAX_NUM_WORKERS),
            (
                "prefetch_batches",
                self.prefetch_batches,
                MAX_PREFETCH_BATCHES,
            ),
        ] {
            if value > max {
                return Err(LoaderError::invalid(
                    name,
                    format!("must be at most {max}, got {value}"),
                ));
            }
        }
        if let Some((rank, world_size)) = self.indices_rank {
            if rank >= world_size {
                return Err(LoaderError::invalid(
                    "indices_rank",
                    format!("rank {rank} is not below world_size {world_size}"),
                ));
            }
        }
        Ok(())
    }
}
