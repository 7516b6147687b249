//! One epoch in flight: the worker threads, the cursor that hands out samples in batch order, and
//! the consumer side that turns finished batch buffers into [`Batch`]es.
//!
//! A sample, not a batch, is the unit of work: workers claim the next position of the epoch under
//! one short-held mutex, so all of them help finish the oldest batch first. Each claim hands the
//! worker the owned piece of the batch buffer its sample goes into; the worker reads and
//! processes outside the lock and hands the piece back with the outcome. At most
//! `prefetch_batches` batches are in flight; workers wait on one condvar for room, the consumer on
//! another for the batch it needs. Under [`ErrorPolicy::Skip`], the consumer compacts batches so
//! that each is filled from the next good samples in order; the output therefore depends only on
//! the plan and the data, never on timing. Under [`ErrorPolicy::Replace`], a worker fills a
//! failed sample's slot with the dataset's next samples instead, so batches stay as planned.
//! The worker whose sample completes a batch runs the batch op the consumer planned for it, if
//! one has arrived ([`crate::BatchOps`]), before the consumer may take the batch.
//!
//! Profiling ([`crate::profile`]): each worker runs its profiler hooks next to the user's, the
//! worker that opens, starts or completes a batch records that event (after releasing the
//! epoch's lock), and the consumer records its batch assembly as a `collate` span and each
//! delivery with its wait, order and queue occupancy. With profiling off, each of these is a
//! branch. Must not spin, allocate per sample in steady state, or leave a thread running once its
//! iterator is gone.

use std::any::Any;
use std::collections::VecDeque;
use std::fmt;
use std::iter::FusedIterator;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use bytes::BytesMut;
use ferroloader_profiler::{now_ns, ops, Arrival, BatchEvent};

use crate::batch::{Batch, BatchImagesMut, BatchTiming};
use crate::batch_op::{BatchOp, BatchOps};
use crate::buffer::{buffer_error, touch_pages, BatchBuffer, BufferPool, Outcome};
use crate::dataset::Source;
use crate::error::LoaderError;
use crate::options::{Delivery, ErrorPolicy};
use crate::process::{
    DType, Instrument, NoHooks, Op, OpHooks, OpTracker, SampleContext, SampleKey, SampleLayout,
    SampleProcessor, SlotParts,
};
use crate::profile::{ProfileHooks, Profiling, Tee};

/// A worker's reusable belongings, kept by the loader between epochs.
pub(crate) struct Kit<T> {
    scratch: T,
    /// Where file bytes are read to.
    buf: Vec<u8>,
}

/// Kits of workers that are not running.
pub(crate) type KitPool<T> = Mutex<Vec<Kit<T>>>;

/// Everything an epoch's workers and its consumer share.
pub(crate) struct Epoch<S, P: SampleProcessor, H> {
    pub(crate) source: Arc<S>,
    pub(crate) processor: Arc<P>,
    pub(crate) instrument: Arc<H>,
    pub(crate) profiling: Arc<Profiling>,
    /// Loader-wide number of this epoch's batch 0 (see [`SampleContext::batch_id`]).
    pub(crate) batch_base: u64,
    pub(crate) kits: Arc<KitPool<P::Scratch>>,
    pub(crate) pool: Arc<BufferPool>,
    /// Dataset index of every position of the epoch.
    pub(crate) plan: Vec<usize>,
    /// [`SampleKey::repeat`] of every position of the plan; empty when all are 0 (an epoch
    /// that visits each index once, the common case, stores nothing).
    pub(crate) repeats: Vec<u64>,
    /// The epoch's own number of each planned batch, when the plan is what is left of an epoch
    /// resumed in completion order (so batches keep their numbers); empty: `first_number` on.
    pub(crate) batch_numbers: Vec<usize>,
    /// The number of planned batch 0 when `batch_numbers` is empty: the batches an in-order
    /// epoch resumed from had delivered, else 0.
    pub(crate) first_number: usize,
    /// Batch ops planned by the consumer, run by the worker that completes each batch.
    pub(crate) batch_ops: Arc<BatchOps>,
    /// What a failing sample does (the workers retry under [`ErrorPolicy::Replace`]).
    pub(crate) policy: ErrorPolicy,
    pub(crate) batch_size: usize,
    /// Samples each batch buffer is made for: `batch_size`, or the whole plan when shorter.
    pub(crate) buffer_samples: usize,
    pub(crate) layout: SampleLayout,
    pub(crate) sample_bytes: usize,
    /// Bytes of each part of a sample ([`SampleProcessor::sample_parts`]); one entry,
    /// `sample_bytes`, when samples are not cut.
    pub(crate) part_bytes: Arc<[usize]>,
    pub(crate) prefetch: usize,
    /// [`crate::LoaderOptions::scratch_limit`].
    pub(crate) scratch_limit: usize,
    pub(crate) seed: u64,
    pub(crate) epoch: u64,
    pub(crate) state: Mutex<State>,
    /// Workers wait here for room in the prefetch window.
    pub(crate) work_cv: Condvar,
    /// The consumer waits here for a batch to complete.
    pub(crate) done_cv: Condvar,
}

/// The mutable part of an epoch, behind its mutex.
#[derive(Default)]
pub(crate) struct State {
    /// The next position to hand out.
    next_position: usize,
    /// Batches opened so far, which is the index of the next one to open.
    opened: usize,
    /// Opened batches not yet taken by the consumer (at most `prefetch`).
    open: Vec<Planned>,
    /// Set when the iterator is dropped or finished: workers stop claiming.
    shutdown: bool,
    /// Set when the epoch cannot go on (a worker died outside a sample, a batch buffer could not
    /// be allocated): the consumer reports it instead of waiting, and workers stop claiming.
    fatal: Option<LoaderError>,
}

/// A batch as planned: a run of consecutive positions and the buffer they are written into.
struct Planned {
    index: usize,
    /// First position.
    start: usize,
    /// Positions in the batch.
    len: usize,
    /// Samples processed (successfully or not).
    done: usize,
    /// Slots holding a delivered sample, once the consumer walks the batch.
    fill: usize,
    buffer: BatchBuffer,
    timing: BatchTiming,
    /// It completed while an earlier batch was still being made (recorded when profiling).
    completed_early: bool,
    /// A worker is running its batch op: complete, but not to be taken yet.
    mixing: bool,
    /// The batch op a worker ran on it.
    applied: Option<&'static str>,
}

impl Planned {
    /// Keeps the sample in `slot` as the next filled slot of this same batch.
    fn keep(&mut self, slot: usize, index: usize, label: i64) {
        if self.fill != slot {
            self.buffer.move_piece(slot, self.fill);
        }
        self.record(index, label);
    }

    /// Notes that the next slot now holds sample `index`.
    fn record(&mut self, index: usize, label: i64) {
        self.buffer.labels.push(label);
        self.buffer.indices.push(index);
        self.fill += 1;
    }
}

/// One sample handed to a worker.
struct Task {
    batch: usize,
    slot: usize,
    position: usize,
    index: usize,
    /// The sample's [`SampleKey::repeat`].
    repeat: u64,
    /// Its slot's pieces, one per part, in part order (a worker's own vector, reused).
    pieces: Vec<BytesMut>,
    /// When this claim opened the batch, its planned time and size (for the profiler).
    opened: Option<(u64, usize)>,
    /// When this claim started the batch's first sample, the time (for the profiler).
    started: Option<u64>,
    /// The piece is part of a buffer never filled before: touch its pages first.
    fresh: bool,
}

/// A complete batch whose planned op the worker that completed it runs, its buffer out of the
/// epoch's window meanwhile.
struct BatchOpJob {
    /// Its planned index.
    index: usize,
    samples: usize,
    buffer: BatchBuffer,
    op: Box<dyn BatchOp>,
}

/// Why one sample failed, before the path is attached.
enum Failure {
    Read(std::io::Error),
    Transform(ferroloader_transforms::Error),
    Layout(String),
}

impl<S, P, H> Epoch<S, P, H>
where
    S: Source + 'static,
    P: SampleProcessor,
    H: Instrument,
{
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; if something ever did, the state is still
        // consistent enough to shut down, which beats a second panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next sample in epoch order, waiting while the prefetch window is full; `None` when
    /// there is nothing left to do or the epoch is shutting down.
    /// `spare` is the calling worker's vector for the task's pieces (taken, handed back
    /// through [`Task::pieces`]), so claims do not allocate.
    fn claim(&self, spare: &mut Vec<BytesMut>) -> Option<Task> {
        let mut st = self.lock();
        loop {
            if st.shutdown || st.fatal.is_some() || st.next_position >= self.plan.len() {
                return None;
            }
            let position = st.next_position;
            let batch = position / self.batch_size;
            let mut opened = None;
            if batch == st.opened {
                if st.open.len() >= self.prefetch {
                    st = self
                        .work_cv
                        .wait(st)
                        .unwrap_or_else(PoisonError::into_inner);
                    continue;
                }
                match self.open_batch(&mut st) {
                    Ok(o) => opened = Some(o),
                    Err(error) => {
                        st.fatal.get_or_insert(error);
                        drop(st);
                        self.done_cv.notify_all();
                        self.work_cv.notify_all();
                        return None;
                    }
                }
            }
            // The batch is open and its piece home: the consumer only takes a batch once all
            // its samples are back, and each position is claimed once.
            let mut pieces = std::mem::take(spare);
            pieces.clear();
            let claimed = st.open.iter_mut().find(|p| p.index == batch).and_then(|p| {
                let slot = position - p.start;
                let rows = p.buffer.rows;
                for part in 0..self.part_bytes.len() {
                    pieces.push(p.buffer.pieces.get_mut(part * rows + slot)?.take()?);
                }
                let started = match p.timing.started_ns {
                    Some(_) => None,
                    None => Some(*p.timing.started_ns.insert(now_ns())),
                };
                Some((slot, started, p.buffer.fresh))
            });
            let Some((slot, started, fresh)) = claimed else {
                st.fatal.get_or_insert_with(|| LoaderError::Worker {
                    message: format!("batch {batch} lost track of its samples"),
                });
                drop(st);
                self.done_cv.notify_all();
                return None;
            };
            st.next_position += 1;
            return Some(Task {
                batch,
                slot,
                position,
                index: self.plan[position],
                repeat: self.repeats.get(position).copied().unwrap_or(0),
                pieces,
                opened,
                started,
                fresh,
            });
        }
    }

    /// Takes a buffer from the ring for the next batch and splits it into per-sample pieces;
    /// returns when it was planned and its size. Allocates only when the ring is empty (at the
    /// start, or while the consumer holds batches), and fails when the allocator refuses.
    fn open_batch(&self, st: &mut State) -> Result<(u64, usize), LoaderError> {
        let index = st.opened;
        let start = index * self.batch_size;
        let len = self.batch_size.min(self.plan.len() - start);
        let mut buffer = self
            .pool
            .take(self.buffer_samples)
            .map_err(|e| buffer_error(self.buffer_samples, self.sample_bytes, e))?;
        buffer.split(len, &self.part_bytes);
        let planned_ns = now_ns();
        st.open.push(Planned {
            index,
            start,
            len,
            done: 0,
            fill: 0,
            buffer,
            timing: BatchTiming::planned_at(planned_ns),
            completed_early: false,
            mixing: false,
            applied: None,
        });
        st.opened += 1;
        Ok((planned_ns, len))
    }

    /// The loader-wide number of batch `batch` of this epoch.
    #[inline]
    fn batch_id(&self, batch: usize) -> u64 {
        self.batch_base + batch as u64
    }

    /// The number planned batch `batch` is delivered as when no sample is skipped.
    fn batch_number(&self, batch: usize) -> usize {
        self.batch_numbers
            .get(batch)
            .copied()
            .unwrap_or(self.first_number + batch)
    }

    /// Records the batch events a claim caused (outside the epoch's lock).
    fn record_claim(&self, task: &Task, worker: usize) {
        let profiler = self.profiling.profiler();
        if !profiler.is_enabled() {
            return;
        }
        let id = self.batch_id(task.batch);
        if let Some((t, size)) = task.opened {
            let size = u32::try_from(size).unwrap_or(u32::MAX);
            profiler.batch_event_at(id, t, BatchEvent::Planned { size });
        }
        if let Some(t) = task.started {
            let worker = u32::try_from(worker).unwrap_or(u32::MAX - 1);
            profiler.batch_event_at(id, t, BatchEvent::FirstSampleStarted { worker });
        }
    }

    /// Hands a processed sample's piece back and wakes the consumer when its batch is complete,
    /// unless the batch has a planned op and all its samples succeeded: then returns the job,
    /// for the calling worker to run ([`Epoch::run_batch_op`]) and hand back
    /// ([`Epoch::batch_op_done`]), which wakes the consumer.
    ///
    /// Leaves `task.pieces` empty, for the worker's next claim.
    fn complete(&self, task: &mut Task, outcome: Outcome, worker: usize) -> Option<BatchOpJob> {
        let mut st = self.lock();
        let profiling = self.profiling.enabled();
        let i = st.open.iter().position(|p| p.index == task.batch)?;
        let planned = &mut st.open[i];
        let rows = planned.buffer.rows;
        for (part, piece) in task.pieces.drain(..).enumerate() {
            if let Some(home) = planned.buffer.pieces.get_mut(part * rows + task.slot) {
                *home = Some(piece);
            }
        }
        planned.buffer.outcomes[task.slot] = outcome;
        planned.done += 1;
        if planned.done == planned.len {
            let t = now_ns();
            planned.timing.completed_ns = Some(t);
            if profiling {
                let early = st
                    .open
                    .iter()
                    .any(|p| p.index < task.batch && p.done < p.len);
                st.open[i].completed_early = early;
            }
            let planned = &mut st.open[i];
            let op = if planned
                .buffer
                .outcomes
                .iter()
                .all(|o| !matches!(o, Outcome::Failed(_)))
            {
                self.batch_ops.take(self.batch_number(planned.index))
            } else {
                None
            };
            let job = op.map(|op| {
                planned.mixing = true;
                BatchOpJob {
                    index: planned.index,
                    samples: planned.len,
                    buffer: std::mem::take(&mut planned.buffer),
                    op,
                }
            });
            drop(st);
            if job.is_none() {
                self.done_cv.notify_all();
            }
            if profiling {
                let worker = u32::try_from(worker).unwrap_or(u32::MAX - 1);
                self.profiling.profiler().batch_event_at(
                    self.batch_id(task.batch),
                    t,
                    BatchEvent::Completed {
                        worker: Some(worker),
                    },
                );
            }
            return job;
        }
        None
    }

    /// Runs a job's op on its batch's images, joined back into one buffer; false when it could
    /// not run (the consumer then runs it).
    fn run_batch_op(&self, job: &mut BatchOpJob) -> bool {
        if !job.buffer.join() {
            return false;
        }
        let Some(bytes) = job.buffer.images.get_mut(..job.samples * self.sample_bytes) else {
            return false;
        };
        let images = match self.layout.dtype {
            DType::U8 => BatchImagesMut::U8(bytes),
            DType::F32 => match bytemuck::try_cast_slice_mut(bytes) {
                Ok(values) => BatchImagesMut::F32(values),
                Err(_) => return false,
            },
        };
        job.op.apply(images, job.samples, self.layout).is_ok()
    }

    /// Puts a job's batch back into the window, complete, and wakes the consumer.
    fn batch_op_done(&self, job: BatchOpJob, applied: bool) {
        let name = job.op.name();
        let mut st = self.lock();
        if let Some(planned) = st.open.iter_mut().find(|p| p.index == job.index) {
            planned.buffer = job.buffer;
            planned.mixing = false;
            planned.applied = applied.then_some(name);
        } else {
            // The epoch was shut down meanwhile: the buffer goes back to the ring.
            drop(st);
            let mut buffer = job.buffer;
            if buffer.join() {
                self.pool.put(buffer);
            }
            return;
        }
        drop(st);
        self.done_cv.notify_all();
    }

    /// Reads and processes one sample into its piece; under [`ErrorPolicy::Replace`], the next
    /// samples of the dataset in turn when it fails, drawing from the failed sample's key (a
    /// replacement is not a copy of its own slot elsewhere in the epoch).
    fn run(
        &self,
        worker: usize,
        task: &mut Task,
        kit: &mut Kit<P::Scratch>,
        hooks: &mut Tee<'_, H::Hooks>,
    ) -> Outcome {
        let mut outcome = self.attempt(worker, task, task.index, kit, hooks);
        let ErrorPolicy::Replace { retries } = self.policy else {
            return outcome;
        };
        let len = self.source.len();
        let mut failures = Vec::new();
        for tried in 1..=retries as usize {
            let Outcome::Failed(error) = outcome else {
                break;
            };
            failures.push(((task.index + tried - 1) % len, error));
            let index = (task.index + tried) % len;
            outcome = match self.attempt(worker, task, index, kit, hooks) {
                Outcome::Done => {
                    return Outcome::Replaced {
                        index,
                        failures: std::mem::take(&mut failures),
                    }
                }
                other => other,
            };
        }
        outcome
    }

    /// Reads sample `index` and processes it into the task's piece, drawing from the task's
    /// sample key.
    fn attempt(
        &self,
        worker: usize,
        task: &mut Task,
        index: usize,
        kit: &mut Kit<P::Scratch>,
        hooks: &mut Tee<'_, H::Hooks>,
    ) -> Outcome {
        let ctx = SampleContext {
            worker,
            epoch: self.epoch,
            batch: task.batch,
            batch_id: self.batch_id(task.batch),
            slot: task.slot,
            position: task.position,
            index,
        };
        let key = SampleKey {
            seed: self.seed,
            epoch: self.epoch,
            index: task.index as u64,
            repeat: task.repeat,
        };
        hooks.sample_start(&ctx);
        let mut tracker = OpTracker::new(hooks);
        if std::mem::take(&mut task.fresh) {
            tracker.enter(Op::FirstTouch);
            for piece in &mut task.pieces {
                touch_pages(piece);
            }
            tracker.exit(Op::FirstTouch);
        }
        let result = panic::catch_unwind(AssertUnwindSafe(|| {
            tracker.enter(Op::Read);
            let read = self.source.read(index, &mut kit.buf);
            tracker.exit(Op::Read);
            let bytes = read.map_err(Failure::Read)?;
            let slot =
                SlotParts::new(self.layout.dtype, &mut task.pieces).map_err(Failure::Layout)?;
            self.processor
                .process_parts(bytes, key, &mut kit.scratch, slot, &mut tracker)
                .map_err(Failure::Transform)
        }));
        let op = tracker.failing_op();
        let path = || self.source.error_name(index);
        let outcome = match result {
            Ok(Ok(())) => Outcome::Done,
            Ok(Err(Failure::Read(source))) => Outcome::Failed(LoaderError::Read {
                index,
                path: path(),
                source,
            }),
            Ok(Err(Failure::Transform(source))) => {
                // A failed op may leave the scratch in a state that fails the next samples too
                // (a decoder handle after a corrupt Huffman table does): start afresh, as after
                // a panic. Costs nothing on samples that succeed.
                kit.scratch = self.processor.new_scratch();
                Outcome::Failed(LoaderError::Transform {
                    index,
                    path: path(),
                    op,
                    source,
                })
            }
            Ok(Err(Failure::Layout(message))) => Outcome::Failed(LoaderError::Worker { message }),
            Err(payload) => {
                // The scratch may be half-updated: start the next sample from a clean one.
                kit.scratch = self.processor.new_scratch();
                Outcome::Failed(LoaderError::Panic {
                    index,
                    path: path(),
                    op,
                    message: panic_message(payload.as_ref()),
                })
            }
        };
        // After an outlier, give its memory back (the next samples regrow what they need).
        if kit.buf.capacity() > self.scratch_limit {
            kit.buf = Vec::new();
        }
        if self.processor.scratch_bytes(&kit.scratch) > self.scratch_limit {
            kit.scratch = self.processor.new_scratch();
        }
        let tee = tracker.inner();
        if let Outcome::Failed(error) = &outcome {
            tee.prof.sample_failed(op, error);
        }
        tee.sample_end(&ctx, matches!(outcome, Outcome::Done));
        outcome
    }

    /// Takes a complete batch out of the window: batch `want`, or with `None` the
    /// lowest-numbered complete one, waiting for it when `wait` (else `None` when there is none
    /// yet). Also returns, when profiling, how many other complete batches are left in the
    /// window.
    fn take(
        &self,
        want: Option<usize>,
        wait: bool,
    ) -> Result<Option<(Planned, usize)>, LoaderError> {
        let mut st = self.lock();
        loop {
            let complete = st
                .open
                .iter()
                .enumerate()
                .filter(|(_, p)| p.done == p.len && !p.mixing);
            let found = match want {
                Some(b) => complete
                    .filter(|(_, p)| p.index == b)
                    .map(|(i, _)| i)
                    .next(),
                None => complete.min_by_key(|(_, p)| p.index).map(|(i, _)| i),
            };
            if let Some(i) = found {
                let planned = st.open.swap_remove(i);
                let waiting = if self.profiling.enabled() {
                    st.open.iter().filter(|p| p.done == p.len).count()
                } else {
                    0
                };
                drop(st);
                self.work_cv.notify_all();
                return Ok(Some((planned, waiting)));
            }
            if let Some(error) = st.fatal.take() {
                return Err(error);
            }
            if !wait {
                return Ok(None);
            }
            st = self
                .done_cv
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(panic payload is not a string)".to_owned()
    }
}

/// Reports a worker thread that dies outside a sample (a bug in the loader or in the hooks), so
/// the consumer gets an error instead of waiting for ever.
struct DeathNotice<'a> {
    state: &'a Mutex<State>,
    done_cv: &'a Condvar,
    worker: usize,
}

impl Drop for DeathNotice<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            st.fatal.get_or_insert_with(|| LoaderError::Worker {
                message: format!("worker {} panicked outside a sample", self.worker),
            });
            drop(st);
            self.done_cv.notify_all();
        }
    }
}

fn worker_main<S, P, H>(epoch: Arc<Epoch<S, P, H>>, worker: usize) -> Kit<P::Scratch>
where
    S: Source + 'static,
    P: SampleProcessor,
    H: Instrument,
{
    let _notice = DeathNotice {
        state: &epoch.state,
        done_cv: &epoch.done_cv,
        worker,
    };
    let mut hand = Hand::new(&epoch, worker);
    while let Some(task) = epoch.claim(&mut hand.spare) {
        hand.work(&epoch, task);
    }
    hand.kit
}

/// What one thread needs to process samples: its kit and its hooks, made on that thread (the
/// profiler's counters count the thread that makes them).
struct Hand<T, H> {
    worker: usize,
    kit: Kit<T>,
    prof: ProfileHooks,
    hooks: H,
    /// The vector a claimed sample's pieces travel in, between claims.
    spare: Vec<BytesMut>,
}

impl<T, H: OpHooks> Hand<T, H> {
    fn new<S, P, I>(epoch: &Epoch<S, P, I>, worker: usize) -> Self
    where
        S: Source + 'static,
        P: SampleProcessor<Scratch = T>,
        I: Instrument<Hooks = H>,
    {
        let reused = epoch
            .kits
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let kit = reused.unwrap_or_else(|| Kit {
            scratch: epoch.processor.new_scratch(),
            buf: Vec::new(),
        });
        Hand {
            worker,
            kit,
            prof: epoch.profiling.instrument.worker_hooks(worker),
            hooks: epoch.instrument.worker_hooks(worker),
            spare: Vec::with_capacity(epoch.part_bytes.len()),
        }
    }

    /// Processes one claimed sample and hands it back.
    fn work<S, P, I>(&mut self, epoch: &Epoch<S, P, I>, mut task: Task)
    where
        S: Source + 'static,
        P: SampleProcessor<Scratch = T>,
        I: Instrument<Hooks = H>,
    {
        epoch.record_claim(&task, self.worker);
        let mut tee = Tee {
            prof: &mut self.prof,
            user: &mut self.hooks,
        };
        let outcome = epoch.run(self.worker, &mut task, &mut self.kit, &mut tee);
        let job = epoch.complete(&mut task, outcome, self.worker);
        self.spare = task.pieces;
        if let Some(mut job) = job {
            let op = Op::Custom(job.op.name());
            let id = epoch.batch_id(job.index);
            let applied = self.prof.batch_op(id, op, || epoch.run_batch_op(&mut job));
            epoch.batch_op_done(job, applied);
        }
    }
}

/// Where an epoch stands for the consumer, to start it again from there
/// ([`crate::Loader::resume`]). Small: a few numbers, and in completion order the planned
/// batches delivered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResumePoint {
    /// Batches delivered (the index the next in-order batch gets).
    pub batches: usize,
    /// In order: positions of the epoch's plan that delivered batches used up, skipped samples
    /// included (the next batch starts there).
    pub position: usize,
    /// In completion order: the planned batches delivered, in delivery order.
    pub delivered: Vec<usize>,
}

/// A sample dropped under [`ErrorPolicy::Skip`], with why.
#[derive(Debug)]
pub struct SkippedSample {
    /// Its index in the dataset.
    pub index: usize,
    /// Its position in the epoch's order.
    pub position: usize,
    /// What went wrong.
    pub error: LoaderError,
}

/// The batches of one epoch, yielded as they are ready; dropping it stops and joins the workers.
///
/// Yields `Ok(batch)` for every batch, or under [`ErrorPolicy::Raise`] an `Err` in place of the
/// first batch with a failing sample, after which it ends. Also ends (after an `Err`) if a worker
/// thread cannot run.
pub struct EpochIter<S, P, H = NoHooks>
where
    S: Source + 'static,
    P: SampleProcessor,
    H: Instrument,
{
    epoch: Arc<Epoch<S, P, H>>,
    workers: Vec<JoinHandle<Kit<P::Scratch>>>,
    /// With no worker threads, samples are processed by the thread calling `next()`, on
    /// demand; its kit and hooks, made at the first call (on that thread).
    inline: Option<Option<Hand<P::Scratch, H::Hooks>>>,
    delivery: Delivery,
    /// Batches in the plan.
    planned: usize,
    /// Planned batches taken from the window so far.
    walked: usize,
    /// Completion order: which planned batches were taken, and the first one not yet taken.
    taken: Vec<bool>,
    first_untaken: usize,
    /// In order, after a skip: the batch being filled from later samples.
    partial: Option<Planned>,
    /// Batches ready for `next()`.
    ready: VecDeque<Batch>,
    /// Batches made so far (the next in-order batch index).
    emitted: usize,
    /// Skips since the last batch was made.
    skips_since_batch: usize,
    skipped: Vec<SkippedSample>,
    /// What the consumer has been given so far, to resume from.
    resume: ResumePoint,
    finished: bool,
    /// Complete batches left in the window at the last take (when profiling).
    window_ready: usize,
    /// The epoch counts as running for the loader's profile until `finish`.
    profile_live: bool,
}

impl<S, P, H> EpochIter<S, P, H>
where
    S: Source + 'static,
    P: SampleProcessor,
    H: Instrument,
{
    /// Starts the workers of `epoch`; with `num_workers == 0`, none: `next()` processes the
    /// samples itself.
    pub(crate) fn start(
        epoch: Epoch<S, P, H>,
        num_workers: usize,
        delivery: Delivery,
        resume: ResumePoint,
    ) -> Self {
        let planned = epoch.plan.len().div_ceil(epoch.batch_size);
        let threads = num_workers.min(epoch.plan.len());
        let epoch = Arc::new(epoch);
        let mut workers = Vec::with_capacity(threads);
        for worker in 0..threads {
            let shared = Arc::clone(&epoch);
            let spawned = thread::Builder::new()
                .name(format!("ferroloader-{worker}"))
                .spawn(move || worker_main(shared, worker));
            match spawned {
                Ok(handle) => workers.push(handle),
                Err(e) => {
                    // Fewer workers only make the epoch slower; none at all would make it hang.
                    if workers.is_empty() {
                        epoch.lock().fatal = Some(LoaderError::Worker {
                            message: format!("cannot start a worker thread: {e}"),
                        });
                    }
                    break;
                }
            }
        }
        let taken = match delivery {
            Delivery::InOrder => Vec::new(),
            Delivery::CompletionOrder => vec![false; planned],
        };
        EpochIter {
            epoch,
            workers,
            delivery,
            planned,
            walked: 0,
            taken,
            first_untaken: 0,
            inline: (num_workers == 0).then_some(None),
            partial: None,
            ready: VecDeque::new(),
            emitted: resume.batches,
            skips_since_batch: 0,
            skipped: Vec::new(),
            resume,
            finished: false,
            window_ready: 0,
            profile_live: true,
        }
    }

    /// The epoch number.
    pub fn epoch(&self) -> u64 {
        self.epoch.epoch
    }

    /// Where this epoch stands after the batches `next()` has returned: what
    /// [`crate::Loader::resume`] needs to yield exactly the batches that would follow.
    pub fn resume_point(&self) -> &ResumePoint {
        &self.resume
    }

    /// Batches planned for the epoch (fewer are delivered when samples are skipped or an
    /// error ends the epoch).
    pub fn num_batches(&self) -> usize {
        self.planned
    }

    /// Samples planned for the epoch.
    pub fn num_samples(&self) -> usize {
        self.epoch.plan.len()
    }

    /// The planned batches, in the order the workers make them: the number each is delivered
    /// as when no sample is skipped ([`Batch::index`]) and its samples. What a consumer plans
    /// batch ops for.
    pub fn planned_batches(&self) -> Vec<(usize, usize)> {
        let (size, total) = (self.epoch.batch_size, self.epoch.plan.len());
        (0..self.planned)
            .map(|b| (self.epoch.batch_number(b), size.min(total - b * size)))
            .collect()
    }

    /// Where the consumer plans the ops the workers run on this epoch's batches.
    pub fn batch_ops(&self) -> Arc<BatchOps> {
        Arc::clone(&self.epoch.batch_ops)
    }

    /// The samples skipped so far this epoch, in epoch order, each with its error.
    pub fn skipped(&self) -> &[SkippedSample] {
        &self.skipped
    }

    /// Takes the next planned batch the delivery order wants and turns it into batches, timed as
    /// the consumer's `collate` span when profiling.
    fn advance(&mut self) -> Result<(), LoaderError> {
        let want = match self.delivery {
            Delivery::InOrder => Some(self.walked),
            Delivery::CompletionOrder => None,
        };
        let (planned, waiting) = match &mut self.inline {
            None => self
                .epoch
                .take(want, true)?
                .ok_or_else(|| LoaderError::Worker {
                    message: "the batch window closed while waiting".to_owned(),
                })?,
            Some(hand) => {
                let hand = hand.get_or_insert_with(|| Hand::new(&self.epoch, 0));
                loop {
                    if let Some(found) = self.epoch.take(want, false)? {
                        break found;
                    }
                    let Some(task) = self.epoch.claim(&mut hand.spare) else {
                        // A buffer that could not be allocated stops the claims: report it.
                        let fatal = self.epoch.lock().fatal.take();
                        return Err(fatal.unwrap_or_else(|| LoaderError::Worker {
                            message: "no sample left to make the next batch from".to_owned(),
                        }));
                    };
                    hand.work(&self.epoch, task);
                }
            }
        };
        self.window_ready = waiting;
        if !self.epoch.profiling.enabled() {
            return self.assemble(planned);
        }
        let id = self.epoch.batch_id(planned.index);
        let start = now_ns();
        let assembled = self.assemble(planned);
        let profiler = self.epoch.profiling.profiler();
        profiler.consumer_span(ops::COLLATE, id, start, now_ns());
        assembled
    }

    /// Batch assembly: checks the outcomes of a complete planned batch and makes batches of its
    /// good samples in the delivery order.
    fn assemble(&mut self, mut planned: Planned) -> Result<(), LoaderError> {
        self.walked += 1;
        if self.epoch.policy != ErrorPolicy::Skip {
            let failed = planned
                .buffer
                .outcomes
                .iter_mut()
                .find(|o| matches!(o, Outcome::Failed(_)));
            if let Some(outcome) = failed {
                if let Outcome::Failed(error) = std::mem::replace(outcome, Outcome::Pending) {
                    self.recycle(planned);
                    return Err(error);
                }
            }
        }
        match self.delivery {
            Delivery::InOrder => self.walk_in_order(planned),
            Delivery::CompletionOrder => {
                let out_of_order = planned.index != self.first_untaken;
                self.taken[planned.index] = true;
                while self.taken.get(self.first_untaken) == Some(&true) {
                    self.first_untaken += 1;
                }
                for slot in 0..planned.len {
                    if let Some(index) = self.take_good(&mut planned, slot) {
                        let label = self.epoch.source.label(index);
                        planned.keep(slot, index, label);
                    }
                }
                let index = self
                    .epoch
                    .batch_numbers
                    .get(planned.index)
                    .copied()
                    .unwrap_or(planned.index);
                self.emit_or_recycle(planned, out_of_order, index)
            }
        }
    }

    /// Fills batches with the good samples of `planned`, in order: into the batch still being
    /// filled from earlier samples if there is one, else into `planned` itself, compacting in
    /// place (a sample only ever moves to an earlier slot, so nothing is overwritten before it is
    /// read). When nothing was skipped, no sample moves and `planned` is delivered as it is.
    fn walk_in_order(&mut self, mut planned: Planned) -> Result<(), LoaderError> {
        for slot in 0..planned.len {
            let Some(index) = self.take_good(&mut planned, slot) else {
                continue;
            };
            let label = self.epoch.source.label(index);
            let Some(partial) = self.partial.as_mut() else {
                planned.keep(slot, index, label);
                continue;
            };
            partial
                .buffer
                .copy_piece_from(partial.fill, &planned.buffer, slot);
            partial.record(index, label);
            partial.timing.completed_ns = planned.timing.completed_ns;
            if partial.fill == self.epoch.batch_size {
                if let Some(full) = self.partial.take() {
                    let index = self.next_index();
                    self.emit_or_recycle(full, false, index)?;
                }
            }
        }
        if planned.fill == self.epoch.batch_size {
            let index = self.next_index();
            self.emit_or_recycle(planned, false, index)
        } else if planned.fill > 0 {
            // Short: filled from the next batch, or delivered as the epoch's last.
            self.partial = Some(planned);
            Ok(())
        } else {
            self.recycle(planned);
            Ok(())
        }
    }

    /// The dataset index of the sample in `slot` when it succeeded; records it as skipped when
    /// it failed.
    fn take_good(&mut self, planned: &mut Planned, slot: usize) -> Option<usize> {
        let position = planned.start + slot;
        let index = self.epoch.plan[position];
        let outcome = std::mem::replace(&mut planned.buffer.outcomes[slot], Outcome::Pending);
        match outcome {
            Outcome::Failed(error) => {
                self.skip(index, position, error);
                None
            }
            Outcome::Replaced { index, failures } => {
                // Reported, but the slot is filled: no position is used up beyond it.
                self.skipped
                    .extend(failures.into_iter().map(|(index, error)| SkippedSample {
                        index,
                        position,
                        error,
                    }));
                Some(index)
            }
            Outcome::Done | Outcome::Pending => Some(index),
        }
    }

    fn skip(&mut self, index: usize, position: usize, error: LoaderError) {
        self.skips_since_batch += 1;
        self.skipped.push(SkippedSample {
            index,
            position,
            error,
        });
    }

    fn next_index(&mut self) -> usize {
        self.emitted += 1;
        self.emitted - 1
    }

    /// Makes a batch of the filled slots of `planned`, or recycles it when none is filled.
    fn emit_or_recycle(
        &mut self,
        mut planned: Planned,
        out_of_order: bool,
        index: usize,
    ) -> Result<(), LoaderError> {
        if planned.fill == 0 {
            self.recycle(planned);
            return Ok(());
        }
        if !planned.buffer.join() {
            return Err(LoaderError::Worker {
                message: "a batch buffer could not be joined back together".to_owned(),
            });
        }
        self.ready.push_back(Batch {
            rows: planned.buffer.rows,
            buffer: planned.buffer,
            pool: Arc::clone(&self.epoch.pool),
            len: planned.fill,
            layout: self.epoch.layout,
            sample_bytes: self.epoch.sample_bytes,
            part_bytes: Arc::clone(&self.epoch.part_bytes),
            index,
            epoch: self.epoch.epoch,
            out_of_order,
            skipped: std::mem::take(&mut self.skips_since_batch),
            wait: Duration::ZERO,
            timing: planned.timing,
            batch_id: self.epoch.batch_id(planned.index),
            planned_len: planned.len,
            completed_early: planned.completed_early,
            applied: planned.applied,
        });
        Ok(())
    }

    /// Records the delivery of `batch` after `wait_ns` in `next()`.
    fn record_delivery(&self, batch: &Batch, wait_ns: u64, t: u64) {
        let profiler = self.epoch.profiling.profiler();
        if batch.len != batch.planned_len {
            // Skips changed the batch: the size to count is what the consumer got.
            let size = u32::try_from(batch.len).unwrap_or(u32::MAX);
            profiler.batch_event_at(batch.batch_id, t, BatchEvent::Planned { size });
        }
        let queue = 1 + self.ready.len() + self.window_ready;
        profiler.batch_event_at(
            batch.batch_id,
            t,
            BatchEvent::Delivered(Arrival {
                wait_ns,
                out_of_order: batch.out_of_order || batch.completed_early,
                queue_occupancy: u32::try_from(queue).unwrap_or(u32::MAX),
            }),
        );
    }

    fn recycle(&self, mut planned: Planned) {
        if planned.buffer.join() {
            self.epoch.pool.put(planned.buffer);
        }
    }

    /// Stops the workers, joins them, keeps their kits and puts the buffers in flight back in
    /// the ring. Idempotent.
    fn finish(&mut self) {
        self.finished = true;
        self.epoch.lock().shutdown = true;
        self.epoch.work_cv.notify_all();
        if let Some(Some(hand)) = self.inline.take() {
            self.epoch
                .kits
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(hand.kit);
        }
        for handle in self.workers.drain(..) {
            // A worker that panicked outside a sample has no kit to give back; its death was
            // already reported through `fatal`.
            if let Ok(kit) = handle.join() {
                self.epoch
                    .kits
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(kit);
            }
        }
        // Every piece is home now that the workers are gone.
        let open = std::mem::take(&mut self.epoch.lock().open);
        for planned in open {
            self.recycle(planned);
        }
        if let Some(partial) = self.partial.take() {
            self.recycle(partial);
        }
        if std::mem::take(&mut self.profile_live) {
            self.epoch.profiling.epoch_ended();
        }
    }
}

impl<S, P, H> Iterator for EpochIter<S, P, H>
where
    S: Source + 'static,
    P: SampleProcessor,
    H: Instrument,
{
    type Item = Result<Batch, LoaderError>;

    fn next(&mut self) -> Option<Self::Item> {
        let called = now_ns();
        loop {
            if let Some(mut batch) = self.ready.pop_front() {
                let now = now_ns();
                let wait_ns = now.saturating_sub(called);
                batch.wait = Duration::from_nanos(wait_ns);
                batch.timing.delivered_ns = Some(now);
                self.resume.batches += 1;
                match self.delivery {
                    Delivery::InOrder => self.resume.position += batch.len + batch.skipped,
                    Delivery::CompletionOrder => self.resume.delivered.push(batch.index),
                }
                if self.epoch.profiling.enabled() {
                    self.record_delivery(&batch, wait_ns, now);
                }
                return Some(Ok(batch));
            }
            if self.finished {
                return None;
            }
            if self.walked == self.planned {
                // The last in-order batch may be short after skips.
                if let Some(partial) = self.partial.take() {
                    let index = self.next_index();
                    if let Err(e) = self.emit_or_recycle(partial, false, index) {
                        self.finish();
                        return Some(Err(e));
                    }
                    continue;
                }
                self.finish();
                return None;
            }
            if let Err(e) = self.advance() {
                self.finish();
                return Some(Err(e));
            }
        }
    }
}

impl<S, P, H> FusedIterator for EpochIter<S, P, H>
where
    S: Source + 'static,
    P: SampleProcessor,
    H: Instrument,
{
}

impl<S, P, H> Drop for EpochIter<S, P, H>
where
    S: Source + 'static,
    P: SampleProcessor,
    H: Instrument,
{
    fn drop(&mut self) {
        self.finish();
    }
}

impl<S, P, H> fmt::Debug for EpochIter<S, P, H>
where
    S: Source + 'static,
    P: SampleProcessor,
    H: Instrument,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EpochIter")
            .field("epoch", &self.epoch.epoch)
            .field("batches", &self.planned)
            .field("walked", &self.walked)
            .field("workers", &self.workers.len())
            .field("skipped", &self.skipped.len())
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}
