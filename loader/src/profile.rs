//! The profiler wired into the loader: op spans from each worker, batch events from the
//! coordinator and the consumer, and the profile of a loader's whole run.
//!
//! [`ProfileInstrument`] is an [`Instrument`] whose per-worker [`ProfileHooks`] hold a
//! [`ThreadRecorder`] made on the worker thread (so counter groups count that thread). Every
//! sample is a `process` span (from before its bytes are read until it is written) around the op
//! spans the loader and the processor report; loader [`Op`]s become profiler [`OpId`]s through a
//! table made when the hooks are made (custom op names are registered the first time a worker
//! sees them, then found by pointer). A loader makes its own instrument from
//! [`LoaderOptions::profile_mode`](crate::LoaderOptions::profile_mode) and runs it next to the
//! user's hooks; [`Profiling`] is the loader's side of it (batch numbering, the run's clock,
//! collecting the profile).
//!
//! This module must not do string work, allocate or lock per op, or record anything in
//! [`Mode::Off`](ferroloader_profiler::Mode::Off) (every hook returns after one branch); it must not know what an op does.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use ferroloader_profiler::schema::PipelineRecord;
use ferroloader_profiler::{
    now_ns, ops, BatchRecord, OpId, Profile, Profiler, ProfilerConfig, ThreadRecorder,
};

use crate::error::LoaderError;
use crate::process::{Instrument, Op, OpHooks, SampleContext, TransformOp};

/// Profiler ids of the transforms crate's ops, indexed by `TransformOp as usize`.
type TransformTable = [Option<OpId>; TransformOp::ALL.len()];

/// Custom op names a worker has met, by the address and length of their `&'static str`.
const CUSTOM_CAPACITY: usize = 16;

/// Makes a [`ProfileHooks`] per worker thread, recording into one [`Profiler`].
///
/// A [`Loader`](crate::Loader) makes its own from its options and also records batch events;
/// used on its own (as a loader's [`Instrument`]), it records op spans only.
#[derive(Clone)]
pub struct ProfileInstrument {
    profiler: Profiler,
    transform_ops: TransformTable,
}

impl fmt::Debug for ProfileInstrument {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProfileInstrument")
            .field("profiler", &self.profiler)
            .finish_non_exhaustive()
    }
}

impl ProfileInstrument {
    /// An instrument recording into `profiler`. Registers the names of the transforms crate's
    /// ops once, here.
    pub fn new(profiler: Profiler) -> Self {
        let mut transform_ops: TransformTable = [None; TransformOp::ALL.len()];
        for op in TransformOp::ALL {
            let id = ops::well_known(op.name()).or_else(|| profiler.register_op(op.name()).ok());
            if let Some(slot) = transform_ops.get_mut(op as usize) {
                *slot = id;
            }
        }
        ProfileInstrument {
            profiler,
            transform_ops,
        }
    }

    /// The profiler it records into.
    pub fn profiler(&self) -> &Profiler {
        &self.profiler
    }
}

impl Instrument for ProfileInstrument {
    type Hooks = ProfileHooks;

    /// Called on the worker thread, which the recorder's counters then count.
    fn worker_hooks(&self, worker: usize) -> ProfileHooks {
        let enabled = self.profiler.is_enabled();
        let name = if enabled {
            format!("worker-{worker}")
        } else {
            String::new()
        };
        // Worker numbers are small; `u32::MAX` is the consumer's.
        let number = u32::try_from(worker).map_or(u32::MAX - 1, |w| w.min(u32::MAX - 1));
        ProfileHooks {
            rec: self.profiler.thread(number, name),
            enabled,
            transform_ops: self.transform_ops,
            custom: Vec::with_capacity(if enabled { CUSTOM_CAPACITY } else { 0 }),
            profiler: self.profiler.clone(),
        }
    }
}

/// One worker's hooks: a `process` span per sample and an op span per reported op, into the
/// worker's own [`ThreadRecorder`]. Every call is one branch in [`Mode::Off`](ferroloader_profiler::Mode::Off).
pub struct ProfileHooks {
    rec: ThreadRecorder,
    enabled: bool,
    transform_ops: TransformTable,
    /// `(address, length, id)` of the custom names seen so far; `None`: the profiler has no room
    /// for another name, the op is not recorded.
    custom: Vec<(usize, usize, Option<OpId>)>,
    profiler: Profiler,
}

impl fmt::Debug for ProfileHooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProfileHooks")
            .field("rec", &self.rec)
            .field("custom_ops", &self.custom.len())
            .finish_non_exhaustive()
    }
}

impl ProfileHooks {
    /// Whether it records anything.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// The profiler id of `op`.
    #[inline]
    fn id(&mut self, op: Op) -> Option<OpId> {
        match op {
            Op::Read => Some(ops::READ),
            Op::Process => Some(ops::PROCESS),
            Op::FirstTouch => Some(ops::FIRST_TOUCH),
            Op::Transform(t) => match self.transform_ops.get(t as usize) {
                Some(&id) => id,
                None => ops::well_known(t.name()),
            },
            Op::Custom(name) => self.custom_id(name),
        }
    }

    /// The id of a custom op name: found by the name's address (no string comparison); the first
    /// time a worker meets a name, registered with the profiler (a lock, once).
    #[inline]
    fn custom_id(&mut self, name: &'static str) -> Option<OpId> {
        let key = (name.as_ptr() as usize, name.len());
        if let Some(&(_, _, id)) = self.custom.iter().find(|c| (c.0, c.1) == key) {
            return id;
        }
        self.register_custom(key, name)
    }

    #[cold]
    fn register_custom(&mut self, key: (usize, usize), name: &str) -> Option<OpId> {
        let id = ops::well_known(name).or_else(|| self.profiler.register_op(name).ok());
        self.custom.push((key.0, key.1, id));
        id
    }

    /// Records that the current sample failed in `op` (rare path: allocates the message).
    pub(crate) fn sample_failed(&mut self, op: Op, error: &LoaderError) {
        if !self.enabled {
            return;
        }
        let id = self.id(op);
        self.rec.sample_failed(id, error.to_string());
    }
}

impl ProfileHooks {
    /// Runs `f`, an op on the whole of batch `batch_id` (no sample of its own), inside an `op`
    /// span of this worker.
    pub(crate) fn batch_op<R>(&mut self, batch_id: u64, op: Op, f: impl FnOnce() -> R) -> R {
        if !self.enabled {
            return f();
        }
        let Some(id) = self.id(op) else {
            return f();
        };
        self.rec
            .set_sample(batch_id, ferroloader_profiler::recorder::NO_INDEX);
        self.rec.enter(id);
        let result = f();
        self.rec.exit(id);
        result
    }
}

impl OpHooks for ProfileHooks {
    #[inline]
    fn sample_start(&mut self, ctx: &SampleContext) {
        if !self.enabled {
            return;
        }
        self.rec.set_sample(ctx.batch_id, ctx.index as u64);
        self.rec.enter(ops::PROCESS);
    }

    #[inline]
    fn enter(&mut self, op: Op) {
        if !self.enabled {
            return;
        }
        if let Some(id) = self.id(op) {
            self.rec.enter(id);
        }
    }

    #[inline]
    fn exit(&mut self, op: Op) {
        if !self.enabled {
            return;
        }
        if let Some(id) = self.id(op) {
            self.rec.exit(id);
        }
    }

    /// Closes the `process` span, and with it any op span a panic left open (counted as
    /// unbalanced in the profile's stats).
    #[inline]
    fn sample_end(&mut self, _ctx: &SampleContext, _ok: bool) {
        if !self.enabled {
            return;
        }
        self.rec.exit(ops::PROCESS);
    }
}

/// A worker's hooks and the user's, called in turn: the profiler's span starts after the user's
/// `enter` and ends before the user's `exit`, so user hooks' time stays out of the spans.
pub(crate) struct Tee<'a, U: OpHooks> {
    pub(crate) prof: &'a mut ProfileHooks,
    pub(crate) user: &'a mut U,
}

impl<U: OpHooks> OpHooks for Tee<'_, U> {
    #[inline]
    fn sample_start(&mut self, ctx: &SampleContext) {
        self.user.sample_start(ctx);
        self.prof.sample_start(ctx);
    }

    #[inline]
    fn enter(&mut self, op: Op) {
        self.user.enter(op);
        self.prof.enter(op);
    }

    #[inline]
    fn exit(&mut self, op: Op) {
        self.prof.exit(op);
        self.user.exit(op);
    }

    #[inline]
    fn sample_end(&mut self, ctx: &SampleContext, ok: bool) {
        self.prof.sample_end(ctx, ok);
        self.user.sample_end(ctx, ok);
    }
}

/// The loader's side of profiling: its instrument, run-wide batch numbers, the run's start and
/// end, and the profile collected so far.
pub(crate) struct Profiling {
    pub(crate) instrument: ProfileInstrument,
    /// The next batch number to hand out (loader-wide).
    next_batch: AtomicU64,
    /// When the first epoch since the last collection started; 0: none has.
    run_start: AtomicU64,
    /// When the last epoch to end ended.
    last_end: AtomicU64,
    /// Epochs whose iterator has not finished.
    live_epochs: AtomicUsize,
    /// Everything collected by earlier calls of [`Profiling::collect`].
    collected: Mutex<Option<PipelineRecord>>,
}

impl fmt::Debug for Profiling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Profiling")
            .field("mode", &self.profiler().mode())
            .field("live_epochs", &self.live_epochs.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Profiling {
    pub(crate) fn new(config: ProfilerConfig) -> Self {
        Profiling {
            instrument: ProfileInstrument::new(Profiler::new(config)),
            next_batch: AtomicU64::new(0),
            run_start: AtomicU64::new(0),
            last_end: AtomicU64::new(0),
            live_epochs: AtomicUsize::new(0),
            collected: Mutex::new(None),
        }
    }

    #[inline]
    pub(crate) fn profiler(&self) -> &Profiler {
        &self.instrument.profiler
    }

    /// Whether anything is recorded.
    #[inline]
    pub(crate) fn enabled(&self) -> bool {
        self.instrument.profiler.is_enabled()
    }

    /// An epoch of `batches` planned batches starts: reserves their numbers (returns the first)
    /// and starts the run clock if no epoch ran since the last collection.
    pub(crate) fn epoch_started(&self, batches: usize) -> u64 {
        let base = self.next_batch.fetch_add(batches as u64, Ordering::Relaxed);
        if self.enabled() {
            self.live_epochs.fetch_add(1, Ordering::Relaxed);
            let _ = self.run_start.compare_exchange(
                0,
                now_ns().max(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        base
    }

    /// An epoch started with [`Profiling::epoch_started`] is over (its workers are joined).
    pub(crate) fn epoch_ended(&self) {
        if self.enabled() {
            self.last_end.fetch_max(now_ns(), Ordering::Relaxed);
            self.live_epochs.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Everything recorded since the loader was made (or since the last `take`): the data the
    /// profiler collected now, merged into what earlier calls collected. With `take`, forgets
    /// it, so the next call starts afresh.
    pub(crate) fn collect(&self, take: bool) -> Profile {
        let fresh = self.profiler().finish().pipelines.into_iter().next();
        let mut collected = self
            .collected
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut pipeline = match (collected.take(), fresh) {
            (Some(mut old), Some(new)) => {
                merge_into(&mut old, new);
                old
            }
            (Some(old), None) => old,
            (None, Some(new)) => new,
            (None, None) => PipelineRecord::new(self.profiler().label()),
        };
        // The run lasts from the first epoch's start to the last one's end (now, while one is
        // running), rather than from the loader's construction to this call.
        let live = self.live_epochs.load(Ordering::Relaxed) > 0;
        let start = self.run_start.load(Ordering::Relaxed);
        let end = self.last_end.load(Ordering::Relaxed);
        if start > 0 {
            pipeline.start_ns = start;
            pipeline.end_ns = if live { now_ns() } else { end.max(start) };
        }
        if take {
            self.run_start
                .store(if live { now_ns() } else { 0 }, Ordering::Relaxed);
            Profile::new(vec![pipeline])
        } else {
            let out = Profile::new(vec![pipeline.clone()]);
            *collected = Some(pipeline);
            out
        }
    }
}

/// Adds what a later [`Profiler::finish`] returned to an earlier result of the same profiler.
fn merge_into(old: &mut PipelineRecord, new: PipelineRecord) {
    // A later chunk may hold spans that started before the last one collected.
    let sorted_join = match (old.spans.last(), new.spans.first()) {
        (Some(a), Some(b)) => a.start_ns <= b.start_ns,
        _ => true,
    };
    old.spans.extend(new.spans);
    if !sorted_join {
        old.spans.sort_by_key(|s| (s.start_ns, s.worker, s.depth));
    }
    merge_batches(&mut old.batches, new.batches);
    old.failures.extend(new.failures);
    // The profiler keeps its threads and their (cumulative) stats: the newest list is complete.
    old.threads = new.threads;
    old.counters = new.counters;
    old.stats.dropped_spans += new.stats.dropped_spans;
    old.stats.unbalanced_exits = new.stats.unbalanced_exits;
    old.stats.counter_read_errors = new.stats.counter_read_errors;
    old.stats.unflushed_recorders = new.stats.unflushed_recorders;
    old.end_ns = old.end_ns.max(new.end_ns);
}

/// Joins the records of batches whose events were collected in two parts.
fn merge_batches(old: &mut Vec<BatchRecord>, new: Vec<BatchRecord>) {
    if new.is_empty() {
        return;
    }
    let mut by_batch: std::collections::BTreeMap<u64, BatchRecord> =
        old.drain(..).map(|b| (b.batch, b)).collect();
    for b in new {
        let Some(r) = by_batch.get_mut(&b.batch) else {
            by_batch.insert(b.batch, b);
            continue;
        };
        let earliest = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        r.planned_ns = earliest(r.planned_ns, b.planned_ns);
        r.first_started_ns = earliest(r.first_started_ns, b.first_started_ns);
        // Later events describe the batch as it ended up.
        r.size = b.size.or(r.size);
        if b.completed_ns.is_some() {
            r.completed_ns = b.completed_ns;
            r.completed_by = b.completed_by;
        }
        if b.delivered_ns.is_some() {
            r.delivered_ns = b.delivered_ns;
            r.wait_ns = b.wait_ns;
            r.out_of_order = b.out_of_order;
            r.queue_occupancy = b.queue_occupancy;
        }
    }
    old.extend(by_batch.into_values());
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroloader_profiler::Mode;

    #[test]
    fn every_transform_op_has_its_well_known_id() {
        let inst = ProfileInstrument::new(Profiler::new(ProfilerConfig::new(Mode::Spans)));
        for op in TransformOp::ALL {
            let id = inst.transform_ops[op as usize].expect("mapped");
            assert_eq!(inst.profiler.op_name(id).as_deref(), Some(op.name()));
        }
    }

    #[test]
    fn custom_names_are_registered_once_and_found_by_address() {
        let inst = ProfileInstrument::new(Profiler::new(ProfilerConfig::new(Mode::Spans)));
        let mut hooks = inst.worker_hooks(0);
        let a = hooks.id(Op::Custom("my_op")).expect("registered");
        assert_eq!(hooks.id(Op::Custom("my_op")), Some(a));
        assert_eq!(inst.profiler.op_name(a).as_deref(), Some("my_op"));
        // A well-known name given as a custom op keeps its fixed id.
        assert_eq!(hooks.id(Op::Custom("collate")), Some(ops::COLLATE));
        assert_eq!(hooks.id(Op::Read), Some(ops::READ));
        assert_eq!(hooks.id(Op::FirstTouch), Some(ops::FIRST_TOUCH));
        assert_eq!(
            Op::FirstTouch.name(),
            ops::WELL_KNOWN[ops::FIRST_TOUCH.0 as usize]
        );
        assert!(hooks.custom.len() <= 2);
    }

    #[test]
    fn batches_collected_in_two_parts_are_joined() {
        let mut old = vec![BatchRecord {
            batch: 3,
            size: Some(4),
            planned_ns: Some(10),
            first_started_ns: Some(11),
            ..Default::default()
        }];
        let new = vec![
            BatchRecord {
                batch: 3,
                size: Some(3),
                planned_ns: Some(40),
                completed_ns: Some(30),
                completed_by: Some(1),
                delivered_ns: Some(50),
                wait_ns: Some(5),
                queue_occupancy: Some(1),
                ..Default::default()
            },
            BatchRecord {
                batch: 1,
                ..Default::default()
            },
        ];
        merge_batches(&mut old, new);
        assert_eq!(old.len(), 2);
        assert_eq!(old[0].batch, 1);
        let b = &old[1];
        assert_eq!(
            (b.size, b.planned_ns, b.first_started_ns),
            (Some(3), Some(10), Some(11))
        );
        assert_eq!((b.completed_ns, b.completed_by), (Some(30), Some(1)));
        assert_eq!((b.delivered_ns, b.wait_ns), (Some(50), Some(5)));
    }
}
