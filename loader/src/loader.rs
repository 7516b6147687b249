//! The loader: a dataset, a sample processor and options, from which epochs are started.
//!
//! It owns what outlives an epoch (the ring of batch buffers, the workers' scratch states, the
//! epoch counter, the profiler and the profile collected so far) so that memory stays flat across
//! epochs. Must not run anything itself: every thread belongs to an [`EpochIter`] and ends with
//! it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use ferroloader_profiler::{Profile, Profiler, ProfilerConfig};

use crate::batch_op::BatchOps;
use crate::buffer::{buffer_error, BufferPool, TakeFailed, ALIGN};
use crate::dataset::Source;
use crate::error::{LoaderError, Result};
use crate::options::LoaderOptions;
use crate::options::{Delivery, ErrorPolicy};
use crate::pipeline::{Epoch, EpochIter, KitPool, ResumePoint, State};
use crate::process::{Instrument, NoHooks, SampleLayout, SampleProcessor};
use crate::profile::Profiling;
use crate::sampler::{plan_repeats, Sampler};

/// Loads batches of processed samples from a dataset with a pool of worker threads.
///
/// ```
/// use ferroloader_loader::{
///     DType, InMemory, Loader, LoaderOptions, OpHooks, SampleKey, SampleLayout,
///     SampleProcessor, SlotMut,
/// };
///
/// /// Writes each sample's first byte, as a float.
/// struct FirstByte;
///
/// impl SampleProcessor for FirstByte {
///     type Scratch = ();
///     fn new_scratch(&self) {}
///     fn sample_layout(&self) -> SampleLayout {
///         SampleLayout::chw(DType::F32, 1, 1, 1)
///     }
///     fn process(
///         &self,
///         bytes: &[u8],
///         _key: SampleKey,
///         _scratch: &mut (),
///         out: SlotMut<'_>,
///         _hooks: &mut dyn OpHooks,
///     ) -> Result<(), ferroloader_loader::transforms::Error> {
///         if let SlotMut::F32(out) = out {
///             out[0] = f32::from(bytes[0]);
///         }
///         Ok(())
///     }
/// }
///
/// let data = InMemory::from_samples((0..10u8).map(|i| (vec![i], i64::from(i % 2))));
/// let loader = Loader::new(data, FirstByte, LoaderOptions::default().batch_size(4))?;
/// let mut sizes = Vec::new();
/// for batch in loader.iter() {
///     sizes.push(batch?.len());
/// }
/// assert_eq!(sizes, [4, 4, 2]);
/// # Ok::<(), ferroloader_loader::LoaderError>(())
/// ```
pub struct Loader<S, P, H = NoHooks>
where
    S: Source + 'static,
    P: SampleProcessor,
    H: Instrument,
{
    source: Arc<S>,
    processor: Arc<P>,
    instrument: Arc<H>,
    profiling: Arc<Profiling>,
    options: LoaderOptions,
    layout: SampleLayout,
    sample_bytes: usize,
    /// Bytes of each part of a sample ([`SampleProcessor::sample_parts`]).
    part_bytes: Arc<[usize]>,
    sampler: Sampler,
    pool: Arc<BufferPool>,
    kits: Arc<KitPool<P::Scratch>>,
    /// The epoch `iter()` runs next.
    next_epoch: AtomicU64,
}

impl<S, P> Loader<S, P, NoHooks>
where
    S: Source + 'static,
    P: SampleProcessor,
{
    /// A loader without op hooks. Fails on invalid options or an empty sample layout.
    pub fn new(source: S, processor: P, options: LoaderOptions) -> Result<Self> {
        Self::with_instrument(source, processor, NoHooks, options)
    }
}

impl<S, P, H> Loader<S, P, H>
where
    S: Source + 'static,
    P: SampleProcessor,
    H: Instrument,
{
    /// A loader whose workers report every sample and op to hooks made by `instrument`.
    pub fn with_instrument(
        source: S,
        processor: P,
        instrument: H,
        options: LoaderOptions,
    ) -> Result<Self> {
        options.validate()?;
        let layout = processor.sample_layout();
        let sample_bytes = layout.byte_len().filter(|&n| n > 0).ok_or_else(|| {
            LoaderError::invalid(
                "sample_layout",
                format!("{layout:?} has no elements or too many"),
            )
        })?;
        let part_bytes = part_bytes(&processor.sample_parts(), layout, sample_bytes)?;
        let sampler = Sampler::new(source.len(), options.shuffle, options.seed, options.shard)?;
        // The ring keeps the batches in flight plus two the consumer may hold (the one in use
        // and the one just returned), so a consumer that drops each batch in turn never makes
        // the loader allocate.
        let ring = options.prefetch_batches + 2 + options.host_memory.held_for_device();
        let pool = BufferPool::new(sample_bytes, ring, options.host_memory.clone());
        let buffer_samples = options.batch_size.min(sampler.num_samples()).max(1);
        check_ring_fits(buffer_samples, sample_bytes, ring)?;
        // The first buffer now, so that memory the allocator refuses is the constructor's
        // error, not the first batch's (its pages are not touched until workers write).
        let first = pool
            .take(buffer_samples)
            .map_err(|e| buffer_error(buffer_samples, sample_bytes, e))?;
        pool.put(first);
        let profiling = Arc::new(Profiling::new(Self::profiler_config(
            ProfilerConfig::new(options.profile_mode),
            &options,
            source.len(),
        )));
        source.attach_profiler(profiling.profiler());
        Ok(Loader {
            source: Arc::new(source),
            processor: Arc::new(processor),
            instrument: Arc::new(instrument),
            profiling,
            layout,
            sample_bytes,
            part_bytes,
            sampler,
            pool,
            kits: Arc::new(Mutex::new(Vec::new())),
            next_epoch: AtomicU64::new(0),
            options,
        })
    }

    /// Replaces the profiler made from [`LoaderOptions::profile_mode`] with one made from `config`
    /// (its mode wins; its worker count and batch size are filled in from the options when
    /// zero). Use it for a label, metadata, the counter groups or the buffer sizes.
    pub fn with_profiler(mut self, config: ProfilerConfig) -> Self {
        self.options.profile_mode = config.mode;
        let config = Self::profiler_config(config, &self.options, self.source.len());
        self.profiling = Arc::new(Profiling::new(config));
        self.source.attach_profiler(self.profiling.profiler());
        self
    }

    /// Fills in what the loader knows about the run.
    fn profiler_config(
        mut config: ProfilerConfig,
        options: &LoaderOptions,
        samples: usize,
    ) -> ProfilerConfig {
        if config.num_workers == 0 {
            config.num_workers = u32::try_from(options.num_workers).unwrap_or(u32::MAX);
        }
        if config.batch_size == 0 {
            config.batch_size = u32::try_from(options.batch_size).unwrap_or(u32::MAX);
        }
        let delivery = match options.delivery {
            Delivery::InOrder => "in_order",
            Delivery::CompletionOrder => "completion_order",
        };
        let on_error = match options.on_error {
            ErrorPolicy::Raise => "raise",
            ErrorPolicy::Skip => "skip",
            ErrorPolicy::Replace { .. } => "replace",
        };
        let meta = [
            ("loader.samples", samples.to_string()),
            (
                "loader.prefetch_batches",
                options.prefetch_batches.to_string(),
            ),
            ("loader.delivery", delivery.to_owned()),
            ("loader.on_error", on_error.to_owned()),
            ("loader.shuffle", options.shuffle.to_string()),
            ("loader.processor", std::any::type_name::<P>().to_owned()),
        ];
        for (key, value) in meta {
            config.meta.entry(key.to_owned()).or_insert(value);
        }
        config
    }

    /// The options it was built with.
    pub fn options(&self) -> &LoaderOptions {
        &self.options
    }

    /// The profiler the workers and the consumer record into.
    pub fn profiler(&self) -> &Profiler {
        self.profiling.profiler()
    }

    /// Everything the profiler recorded since the loader was made (or since the last
    /// [`Self::take_profile`]): every op span of every worker, the consumer's batch assembly,
    /// batch events and failed samples, in one pipeline labelled `"native"`, timed from the
    /// first epoch's start to the last one's end. Epochs still running are included up to their
    /// workers' last buffer hand-off (`stats.unflushed_recorders` counts the recorders still
    /// live); finish or drop their iterators first for the whole of them. Empty in
    /// [`Mode::Off`](crate::profiler::Mode::Off).
    pub fn profile(&self) -> Profile {
        self.profiling.collect(false)
    }

    /// Like [`Self::profile`], then forgets it: the next profile starts from here (bounds the
    /// memory of long runs).
    pub fn take_profile(&self) -> Profile {
        self.profiling.collect(true)
    }

    /// The dataset.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The sample processor.
    pub fn processor(&self) -> &P {
        &self.processor
    }

    /// The instrument making the workers' hooks.
    pub fn instrument(&self) -> &H {
        &self.instrument
    }

    /// The layout of one processed sample.
    pub fn layout(&self) -> SampleLayout {
        self.layout
    }

    /// The sampler computing each epoch's order.
    pub fn sampler(&self) -> &Sampler {
        &self.sampler
    }

    /// Sets the epoch the next [`Self::iter`] runs (torch's `sampler.set_epoch`).
    pub fn set_epoch(&self, epoch: u64) {
        self.next_epoch.store(epoch, Ordering::Relaxed);
    }

    /// The epoch the next [`Self::iter`] runs.
    pub fn next_epoch(&self) -> u64 {
        self.next_epoch.load(Ordering::Relaxed)
    }

    /// Samples per epoch (this rank's share when sharded), before `drop_last`.
    pub fn num_samples(&self) -> usize {
        self.sampler.num_samples()
    }

    /// Batches per epoch when no sample is skipped (`len(dataloader)` in torch).
    pub fn num_batches(&self) -> usize {
        self.batches_for(self.num_samples())
    }

    /// Starts the epoch set by [`Self::set_epoch`] (0 at first) and moves the counter on by
    /// one, so that successive calls shuffle differently, as torch's `RandomSampler` does;
    /// calling `set_epoch(e)` before each epoch gives `DistributedSampler`'s behaviour.
    pub fn iter(&self) -> EpochIter<S, P, H> {
        let epoch = self.next_epoch.fetch_add(1, Ordering::Relaxed);
        self.epoch(epoch)
    }

    /// Starts epoch `epoch` (the counter of [`Self::iter`] is left alone). Any number of
    /// epochs, of this loader or others, may run at once.
    pub fn epoch(&self, epoch: u64) -> EpochIter<S, P, H> {
        let (plan, repeats) = self.own_plan(epoch);
        self.start(epoch, plan, repeats)
    }

    /// The sample order of epoch `epoch`: the source's own ([`Source::epoch_order`]) where it
    /// has one, else the sampler's.
    pub fn epoch_order(&self, epoch: u64) -> Vec<usize> {
        self.own_plan(epoch).0
    }

    /// [`Self::epoch_order`] and the [`SampleKey::repeat`](crate::SampleKey::repeat) of each
    /// position: the sampler's padding numbers ([`Sampler::repeats`]), or a source's order
    /// counted within this rank's share ([`plan_repeats`]: a source that pads a shard with
    /// samples another rank also loads gives those copies the original's draws).
    fn own_plan(&self, epoch: u64) -> (Vec<usize>, Vec<u64>) {
        match self.source.epoch_order(epoch, &self.sampler) {
            Some(order) => {
                let repeats = plan_repeats(&order, self.source.len(), None);
                (order, repeats)
            }
            None => (self.sampler.indices(epoch), self.sampler.repeats()),
        }
    }

    /// The repeat numbers of a plan given by the caller (a sampler's).
    fn given_repeats(&self, indices: &[usize]) -> Vec<u64> {
        plan_repeats(indices, self.source.len(), self.options.indices_rank)
    }

    /// Starts an epoch over the dataset indices given, in that order (no shuffling or sharding
    /// is applied; `batch_size`, `drop_last` and the per-sample keys of `epoch` are). An index
    /// given several times draws differently each time ([`plan_repeats`], with
    /// [`LoaderOptions::indices_rank`]).
    pub fn epoch_with_indices(
        &self,
        epoch: u64,
        indices: Vec<usize>,
    ) -> Result<EpochIter<S, P, H>> {
        self.check_indices(&indices)?;
        let repeats = self.given_repeats(&indices);
        Ok(self.start(epoch, indices, repeats))
    }

    fn batches_for(&self, samples: usize) -> usize {
        if self.options.drop_last {
            samples / self.options.batch_size
        } else {
            samples.div_ceil(self.options.batch_size)
        }
    }

    /// Starts epoch `epoch` where `from` (an earlier [`EpochIter::resume_point`] of the same
    /// epoch, loader configuration and dataset) left it: the batches it yields are exactly those
    /// the first run would have yielded after that point, sample for sample and draw for draw,
    /// whatever the number of workers. `indices` is the epoch's plan when the first run was
    /// given one ([`Self::epoch_with_indices`]); `None` for the epoch's own order
    /// ([`Self::epoch_order`]). Fails when `from` does not fit the plan.
    pub fn resume(
        &self,
        epoch: u64,
        indices: Option<Vec<usize>>,
        from: ResumePoint,
    ) -> Result<EpochIter<S, P, H>> {
        // The repeat numbers come from the whole plan, as the first run counted them, before
        // the part already delivered is cut away.
        let (mut plan, mut repeats) = match indices {
            Some(indices) => {
                self.check_indices(&indices)?;
                let repeats = self.given_repeats(&indices);
                (indices, repeats)
            }
            None => self.own_plan(epoch),
        };
        let batch_size = self.options.batch_size;
        let batches = self.batches_for(plan.len());
        plan.truncate(batches * batch_size);
        repeats.truncate(plan.len());
        let bad = |reason: String| Err(LoaderError::invalid("state", reason));
        let numbers = match self.options.delivery {
            Delivery::InOrder => {
                if from.position > plan.len() || !from.delivered.is_empty() {
                    return bad(format!(
                        "position {} is past the epoch's {} samples",
                        from.position,
                        plan.len()
                    ));
                }
                plan.drain(..from.position);
                repeats.drain(..from.position.min(repeats.len()));
                Vec::new()
            }
            Delivery::CompletionOrder => {
                let mut done = vec![false; batches];
                for &b in &from.delivered {
                    match done.get_mut(b) {
                        Some(seen @ false) => *seen = true,
                        _ => return bad(format!("batch {b} is not an undelivered batch")),
                    }
                }
                let mut rest = Vec::with_capacity(plan.len());
                let mut rest_repeats = Vec::with_capacity(repeats.len());
                let mut numbers = Vec::with_capacity(batches);
                for (b, chunk) in plan.chunks(batch_size).enumerate() {
                    if !done[b] {
                        rest.extend_from_slice(chunk);
                        let start = (b * batch_size).min(repeats.len());
                        let end = (start + chunk.len()).min(repeats.len());
                        rest_repeats.extend_from_slice(&repeats[start..end]);
                        numbers.push(b);
                    }
                }
                plan = rest;
                repeats = rest_repeats;
                numbers
            }
        };
        Ok(self.launch(epoch, plan, repeats, numbers, from))
    }

    fn check_indices(&self, indices: &[usize]) -> Result<()> {
        let len = self.source.len();
        match indices.iter().enumerate().find(|(_, &i)| i >= len) {
            Some((position, &index)) => Err(LoaderError::IndexOutOfRange {
                index,
                position,
                len,
            }),
            None => Ok(()),
        }
    }

    fn start(&self, epoch: u64, mut plan: Vec<usize>, mut repeats: Vec<u64>) -> EpochIter<S, P, H> {
        let batches = self.batches_for(plan.len());
        plan.truncate(batches * self.options.batch_size);
        repeats.truncate(plan.len());
        self.launch(epoch, plan, repeats, Vec::new(), ResumePoint::default())
    }

    /// Starts the workers over `plan`, already cut to the epoch's batches, with the repeat
    /// numbers of its positions (empty: all 0).
    fn launch(
        &self,
        epoch: u64,
        plan: Vec<usize>,
        repeats: Vec<u64>,
        batch_numbers: Vec<usize>,
        resume: ResumePoint,
    ) -> EpochIter<S, P, H> {
        self.source.epoch_plan(&plan);
        let batches = plan.len().div_ceil(self.options.batch_size);
        let batch_base = self.profiling.epoch_started(batches);
        let buffer_samples = self.options.batch_size.min(plan.len()).max(1);
        let shared = Epoch {
            source: Arc::clone(&self.source),
            processor: Arc::clone(&self.processor),
            instrument: Arc::clone(&self.instrument),
            profiling: Arc::clone(&self.profiling),
            batch_base,
            kits: Arc::clone(&self.kits),
            pool: Arc::clone(&self.pool),
            plan,
            repeats,
            first_number: match self.options.delivery {
                Delivery::InOrder if batch_numbers.is_empty() => resume.batches,
                _ => 0,
            },
            batch_numbers,
            // An op over `[B, sample]` images cannot run on samples cut into blocks.
            batch_ops: Arc::new(BatchOps::new(
                self.options.on_error.keeps_batches() && self.part_bytes.len() == 1,
            )),
            policy: self.options.on_error,
            batch_size: self.options.batch_size,
            buffer_samples,
            layout: self.layout,
            sample_bytes: self.sample_bytes,
            part_bytes: Arc::clone(&self.part_bytes),
            prefetch: self.options.prefetch_batches,
            scratch_limit: self.options.scratch_limit,
            seed: self.options.seed,
            epoch,
            state: Mutex::new(State::default()),
            work_cv: Condvar::new(),
            done_cv: Condvar::new(),
        };
        EpochIter::start(
            shared,
            self.options.num_workers,
            self.options.delivery,
            resume,
        )
    }
}

/// Refuses a ring of batch buffers larger than the machine's physical memory: the allocator
/// would grant it (pages are only reserved), and the process would be killed once workers
/// filled it. Names `batch_size` when one buffer alone is too large, else `prefetch_batches`.
/// Bytes of each of `parts` (elements each; none: the whole sample) of a `layout` sample, or
/// why they do not cut it.
fn part_bytes(parts: &[usize], layout: SampleLayout, sample_bytes: usize) -> Result<Arc<[usize]>> {
    if parts.is_empty() {
        return Ok(Arc::from([sample_bytes]));
    }
    let total = parts.iter().try_fold(0usize, |acc, &n| acc.checked_add(n));
    if parts.contains(&0) || total != layout.numel() {
        return Err(LoaderError::invalid(
            "sample_parts",
            format!("{parts:?} elements do not cut a sample of {layout:?} into parts"),
        ));
    }
    Ok(parts.iter().map(|&n| n * layout.dtype.size()).collect())
}

fn check_ring_fits(samples: usize, sample_bytes: usize, ring: usize) -> Result<()> {
    let Some(buffer) = samples
        .checked_mul(sample_bytes)
        .and_then(|n| n.checked_add(ALIGN))
        .filter(|&n| n <= isize::MAX as usize)
    else {
        return Err(buffer_error(
            samples,
            sample_bytes,
            TakeFailed::Alloc { bytes: usize::MAX },
        ));
    };
    let total = buffer.saturating_mul(ring);
    let Some(memory) = physical_memory() else {
        return Ok(());
    };
    if buffer > memory {
        return Err(buffer_error(
            samples,
            sample_bytes,
            TakeFailed::Alloc { bytes: buffer },
        ));
    }
    if total > memory {
        return Err(LoaderError::OutOfMemory {
            name: "prefetch_batches",
            what: format!(
                "{ring} batch buffers (prefetch_batches and those the consumer holds) of {buffer} bytes each, more than \
                 this machine's {memory} bytes of memory"
            ),
            bytes: total,
        });
    }
    Ok(())
}

/// Bytes of physical memory, where the OS says.
fn physical_memory() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        let info = rustix::system::sysinfo();
        // `totalram` is a C `unsigned long`: 32 bits on 32-bit targets.
        #[allow(clippy::useless_conversion)]
        let bytes = u64::from(info.totalram).checked_mul(u64::from(info.mem_unit))?;
        usize::try_from(bytes).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

impl<S, P, H> IntoIterator for &Loader<S, P, H>
where
    S: Source + 'static,
    P: SampleProcessor,
    H: Instrument,
{
    type Item = Result<crate::Batch>;
    type IntoIter = EpochIter<S, P, H>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<S, P, H> fmt::Debug for Loader<S, P, H>
where
    S: Source + 'static,
    P: SampleProcessor,
    H: Instrument,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loader")
            .field("samples", &self.source.len())
            .field("layout", &self.layout)
            .field("options", &self.options)
            .field("next_epoch", &self.next_epoch())
            .finish_non_exhaustive()
    }
}
