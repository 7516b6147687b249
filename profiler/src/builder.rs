//! Builds a [`Profile`] from raw records made outside the native recorder.
//!
//! The Python instrumentation of a torch `DataLoader` records spans as plain tuples in its
//! worker processes and ships them to the main process inside each batch; there it feeds them
//! to a [`ProfileBuilder`]: the processes that recorded (worker number, pid, tid, the counters
//! they read), the sampler's batch plans, each delivered batch with its spans, and failed
//! samples. [`ProfileBuilder::finish`] gives a validated [`Profile`] in the crate's schema, so the
//! schema (its names, version, counter names and "unavailable" markers) is declared here and in
//! [`crate::schema`] only.
//!
//! Batch numbers are delivery ordinals. A delivered batch is matched to the sampler's plan of
//! the same epoch by its samples (the samples of its top-level spans, in order), which gives
//! its `planned_ns`; it is out of order when it completed before a batch delivered ahead of it,
//! or when a batch the sampler planned earlier was delivered after it.
//!
//! This module must not record anything itself (no clock reads; the one side effect is
//! probing which counters this process can open, in [`ProfileBuilder::finish`], when a counting
//! run reported none) and must not know about images, torch or Python.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::counters::{CounterAvailability, CounterConfig, CounterDeltas, CounterKind, CounterSet};
use crate::error::ProfilerError;
use crate::schema::{
    BatchRecord, Mode, PipelineRecord, PipelineStats, Profile, SampleFailure, SpanRecord,
    ThreadInfo,
};

/// A process (or thread) that recorded spans, as registered with [`ProfileBuilder::process`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProcessId(usize);

/// Who recorded a set of spans: a worker number, its process and thread, and the counters its
/// span records carry.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordingProcess {
    /// Worker number (`0..num_workers`); a later epoch's new process may reuse it.
    pub worker: u32,
    /// Process id.
    pub pid: u32,
    /// OS thread id.
    pub tid: u64,
    /// The counters of each span's `before`/`after` readings, in order.
    pub counters: Vec<CounterKind>,
    /// Which counters the process could open, and why not (`None`: it did not try).
    pub availability: Option<CounterAvailability>,
}

/// One span as recorded: an op from `start_ns` to `end_ns`, and the raw counter readings at
/// both ends when counting (in the order of [`RecordingProcess::counters`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RecordedSpan<'a> {
    /// Op name.
    pub op: &'a str,
    /// Sample being processed, when there was one.
    pub sample: Option<u64>,
    /// Start (`CLOCK_MONOTONIC` ns).
    pub start_ns: u64,
    /// End.
    pub end_ns: u64,
    /// Nesting level (0: top level).
    pub depth: u8,
    /// Counter readings at the start and at the end.
    pub counters: Option<(&'a [u64], &'a [u64])>,
}

/// What a batch's spans say about it: its samples (those of its top-level spans, in order) and
/// when its first span started. Kept for a batch whose spans were dropped, so its plan and
/// latency are still known.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchFacts {
    /// Samples of the top-level spans that have one, in record order.
    pub samples: Vec<Option<u64>>,
    /// Earliest span start.
    pub first_started_ns: Option<u64>,
}

impl BatchFacts {
    /// Notes one span of the batch.
    pub fn observe(&mut self, span: &RecordedSpan<'_>) {
        if span.depth == 0 && span.sample.is_some() {
            self.samples.push(span.sample);
        }
        self.first_started_ns = Some(match self.first_started_ns {
            Some(t) => t.min(span.start_ns),
            None => span.start_ns,
        });
    }
}

/// A batch the consumer received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Epoch whose sampler planned it.
    pub epoch: u64,
    /// The process that completed it.
    pub process: ProcessId,
    /// When its last step (collate) ended.
    pub completed_ns: u64,
    /// When the consumer's `next()` was entered.
    pub requested_ns: u64,
    /// When `next()` returned it.
    pub delivered_ns: u64,
}

/// Run-level facts of a pipeline: everything of [`PipelineRecord`] that is not an event.
#[derive(Clone, Debug, PartialEq)]
pub struct RunInfo {
    /// Pipeline label.
    pub label: String,
    /// What was recorded.
    pub mode: Mode,
    /// The consumer process.
    pub pid: Option<u32>,
    /// Worker processes.
    pub num_workers: u32,
    /// Samples per batch.
    pub batch_size: u32,
    /// Run start.
    pub start_ns: u64,
    /// Run end (a value before `start_ns` is taken as `start_ns`).
    pub end_ns: u64,
    /// Free-form metadata.
    pub meta: BTreeMap<String, String>,
    /// Spans not kept (over a cap).
    pub dropped_spans: u64,
}

/// Where a batch plan waits for its delivery: the plan's ordinal in its epoch and its time.
type PlanQueue = VecDeque<(u64, u64)>;

/// Assembles one pipeline from raw records; see the module docs.
#[derive(Debug)]
pub struct ProfileBuilder {
    run: RunInfo,
    processes: Vec<RecordingProcess>,
    spans: Vec<SpanRecord>,
    batches: Vec<BatchRecord>,
    failures: Vec<SampleFailure>,
    /// The epoch and plan ordinal of each delivered batch, by batch number.
    delivered_plans: Vec<(u64, Option<u64>)>,
    plans: HashMap<(u64, Vec<Option<u64>>), PlanQueue>,
    plans_per_epoch: HashMap<u64, u64>,
    latest_completion_ns: u64,
    /// Pids that delivered batches, per worker number, first seen first.
    delivering_pids: BTreeMap<u32, Vec<u32>>,
}

impl ProfileBuilder {
    /// An empty builder for the pipeline `run` describes.
    pub fn new(run: RunInfo) -> Self {
        ProfileBuilder {
            run,
            processes: Vec::new(),
            spans: Vec::new(),
            batches: Vec::new(),
            failures: Vec::new(),
            delivered_plans: Vec::new(),
            plans: HashMap::new(),
            plans_per_epoch: HashMap::new(),
            latest_completion_ns: 0,
            delivering_pids: BTreeMap::new(),
        }
    }

    /// Registers a process that recorded spans; its spans and batches refer to the returned id.
    pub fn process(&mut self, process: RecordingProcess) -> ProcessId {
        self.processes.push(process);
        ProcessId(self.processes.len() - 1)
    }

    /// Notes that the sampler of `epoch` planned a batch of `samples` at `planned_ns` (`None`:
    /// its samples are unknown, so no delivery matches it). Plans are given in sampler order.
    pub fn plan(&mut self, epoch: u64, planned_ns: u64, samples: Option<Vec<Option<u64>>>) {
        let ordinal = self.plans_per_epoch.entry(epoch).or_insert(0);
        let n = *ordinal;
        *ordinal += 1;
        if let Some(samples) = samples {
            self.plans
                .entry((epoch, samples))
                .or_default()
                .push_back((n, planned_ns));
        }
    }

    /// Records a delivered batch and its spans; returns its batch number. `facts` stands in
    /// for what the spans say of the batch when its spans were dropped (`spans` empty); `None`:
    /// read them from `spans`. Nothing is recorded if a span is refused.
    pub fn deliver(
        &mut self,
        delivery: &Delivery,
        facts: Option<BatchFacts>,
        spans: &[RecordedSpan<'_>],
    ) -> Result<u64, ProfilerError> {
        let process = self.recording_process(delivery.process)?;
        let (worker, pid) = (process.worker, process.pid);
        let number = self.batches.len() as u64;
        let records = self.span_records(delivery.process, Some(number), spans)?;
        let facts = facts.unwrap_or_else(|| {
            let mut observed = BatchFacts::default();
            spans.iter().for_each(|s| observed.observe(s));
            observed
        });
        self.spans.extend(records);
        let planned = self
            .plans
            .get_mut(&(delivery.epoch, facts.samples.clone()))
            .and_then(VecDeque::pop_front);
        self.delivered_plans
            .push((delivery.epoch, planned.map(|(n, _)| n)));
        let pids = self.delivering_pids.entry(worker).or_default();
        if !pids.contains(&pid) {
            pids.push(pid);
        }
        self.batches.push(BatchRecord {
            batch: number,
            size: (!facts.samples.is_empty()).then_some(facts.samples.len() as u32),
            planned_ns: planned.map(|(_, t)| t),
            first_started_ns: facts.first_started_ns,
            completed_ns: Some(delivery.completed_ns),
            completed_by: Some(worker),
            delivered_ns: Some(delivery.delivered_ns),
            wait_ns: Some(delivery.delivered_ns.saturating_sub(delivery.requested_ns)),
            // Finished before a batch delivered ahead of it: the loader held it back for order.
            out_of_order: delivery.completed_ns < self.latest_completion_ns,
            queue_occupancy: None,
        });
        self.latest_completion_ns = self.latest_completion_ns.max(delivery.completed_ns);
        Ok(number)
    }

    /// Records a sample (or batch step, `sample: None`) that failed in `op` at `t_ns`, with
    /// the spans its batch had so far (kept under no batch: the batch never arrived). Nothing
    /// is recorded if a span is refused.
    #[allow(clippy::too_many_arguments)] // the failure's own fields
    pub fn failure(
        &mut self,
        process: ProcessId,
        sample: Option<u64>,
        t_ns: u64,
        op: &str,
        cause: &str,
        spans: &[RecordedSpan<'_>],
    ) -> Result<(), ProfilerError> {
        let worker = self.recording_process(process)?.worker;
        let records = self.span_records(process, None, spans)?;
        self.spans.extend(records);
        self.failures.push(SampleFailure {
            worker: Some(worker),
            batch: None,
            sample,
            t_ns,
            op: Some(op.to_owned()),
            cause: cause.to_owned(),
        });
        Ok(())
    }

    /// The profile of this one pipeline. Threads: one per worker number, named after the first
    /// process that used it (`meta["worker_pids"]` lists every process that delivered for it).
    /// Counter availability: the first registered process's when counting (probed in this
    /// process if none reported any), else "not requested" naming the mode.
    pub fn finish(mut self) -> Result<Profile, ProfilerError> {
        self.mark_delivered_out_of_plan_order();
        let counting = self.run.mode == Mode::Counters;
        let mut threads: BTreeMap<u32, ThreadInfo> = BTreeMap::new();
        for p in &self.processes {
            threads.entry(p.worker).or_insert_with(|| ThreadInfo {
                worker: p.worker,
                name: format!("worker-{}", p.worker),
                pid: Some(p.pid),
                tid: Some(p.tid),
                counters: p.availability.clone().filter(|_| counting),
                stats: Default::default(),
            });
        }
        let counters = if counting {
            match self.processes.iter().find_map(|p| p.availability.clone()) {
                Some(availability) => availability,
                None => CounterSet::open(CounterConfig::default()).1,
            }
        } else {
            CounterAvailability::not_requested(&format!(
                "profiler mode is {}",
                self.run.mode.name()
            ))
        };
        let mut meta = self.run.meta;
        if !self.delivering_pids.is_empty() {
            let pids: Vec<String> = self
                .delivering_pids
                .iter()
                .map(|(w, pids)| {
                    let list: Vec<String> = pids.iter().map(u32::to_string).collect();
                    format!("{w}:{}", list.join(","))
                })
                .collect();
            meta.insert("worker_pids".into(), pids.join(" "));
        }
        self.spans.sort_by_key(|s| (s.start_ns, s.depth));
        let pipeline = PipelineRecord {
            label: self.run.label,
            pid: self.run.pid,
            mode: self.run.mode,
            num_workers: self.run.num_workers,
            batch_size: self.run.batch_size,
            start_ns: self.run.start_ns,
            end_ns: self.run.end_ns.max(self.run.start_ns),
            meta,
            counters,
            threads: threads.into_values().collect(),
            spans: self.spans,
            batches: self.batches,
            failures: self.failures,
            stats: PipelineStats {
                dropped_spans: self.run.dropped_spans,
                ..Default::default()
            },
        };
        if pipeline.label.is_empty() {
            return Err(ProfilerError::InvalidRecord(
                "the pipeline label is empty".into(),
            ));
        }
        let profile = Profile::new(vec![pipeline]);
        profile.validate()?;
        Ok(profile)
    }

    /// Marks each batch that a batch planned earlier in its epoch was delivered after (the
    /// loader delivered out of sampler order).
    fn mark_delivered_out_of_plan_order(&mut self) {
        let mut later_min: HashMap<u64, u64> = HashMap::new();
        for (batch, &(epoch, planned)) in self.batches.iter_mut().zip(&self.delivered_plans).rev() {
            let Some(planned) = planned else { continue };
            let min = later_min.entry(epoch).or_insert(planned);
            if planned > *min {
                batch.out_of_order = true;
            }
            *min = (*min).min(planned);
        }
    }

    /// The schema's records of `spans`, recorded by `process` in `batch`; an error for the
    /// first span that is not valid.
    fn span_records(
        &self,
        process: ProcessId,
        batch: Option<u64>,
        spans: &[RecordedSpan<'_>],
    ) -> Result<Vec<SpanRecord>, ProfilerError> {
        let recorder = self.recording_process(process)?;
        spans
            .iter()
            .map(|span| {
                if span.end_ns < span.start_ns {
                    return Err(ProfilerError::InvalidRecord(format!(
                        "span {:?} ends at {} ns, before its start at {} ns",
                        span.op, span.end_ns, span.start_ns
                    )));
                }
                let counters = match span.counters {
                    None => None,
                    Some((before, after)) => deltas(recorder, span.op, before, after)?,
                };
                Ok(SpanRecord {
                    op: span.op.to_owned(),
                    worker: recorder.worker,
                    batch,
                    sample: span.sample,
                    start_ns: span.start_ns,
                    end_ns: span.end_ns,
                    depth: span.depth,
                    counters,
                    bytes: None,
                })
            })
            .collect()
    }

    fn recording_process(&self, id: ProcessId) -> Result<&RecordingProcess, ProfilerError> {
        self.processes.get(id.0).ok_or_else(|| {
            ProfilerError::InvalidRecord(format!(
                "process {} was not registered with this builder",
                id.0
            ))
        })
    }
}

/// The counter deltas of a span from its raw readings; only counters the process could open
/// are kept (a counter that went backwards reads 0). `None` when none was counted.
fn deltas(
    process: &RecordingProcess,
    op: &str,
    before: &[u64],
    after: &[u64],
) -> Result<Option<CounterDeltas>, ProfilerError> {
    let n = process.counters.len();
    if before.len() != n || after.len() != n {
        return Err(ProfilerError::InvalidRecord(format!(
            "span {op:?} of worker {} carries {} and {} counter readings; its process reads {n}",
            process.worker,
            before.len(),
            after.len()
        )));
    }
    let mask = process.availability.as_ref().map_or(0, |a| a.mask());
    let mut out = CounterDeltas::default();
    for ((&kind, &b), &a) in process.counters.iter().zip(before).zip(after) {
        if mask & (1 << kind.index()) != 0 {
            out.set(kind, Some(a.saturating_sub(b)));
        }
    }
    Ok((!out.is_empty()).then_some(out))
}

/// The counter of schema name `name` (`"task_clock"`...).
pub fn counter_kind(name: &str) -> Result<CounterKind, ProfilerError> {
    CounterKind::ALL
        .into_iter()
        .find(|k| k.name() == name)
        .ok_or_else(|| ProfilerError::InvalidRecord(format!("unknown counter name {name:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::{EventAvailability, GroupAvailability};

    fn run(mode: Mode) -> RunInfo {
        RunInfo {
            label: "torchvision".into(),
            mode,
            pid: Some(10),
            num_workers: 2,
            batch_size: 2,
            start_ns: 100,
            end_ns: 1_000,
            meta: BTreeMap::from([("decoder".into(), "PIL".into())]),
            dropped_spans: 3,
        }
    }

    fn worker(worker: u32, pid: u32) -> RecordingProcess {
        RecordingProcess {
            worker,
            pid,
            tid: u64::from(pid),
            counters: Vec::new(),
            availability: None,
        }
    }

    fn span(
        op: &str,
        sample: Option<u64>,
        start_ns: u64,
        end_ns: u64,
        depth: u8,
    ) -> RecordedSpan<'_> {
        RecordedSpan {
            op,
            sample,
            start_ns,
            end_ns,
            depth,
            counters: None,
        }
    }

    /// Delivers a batch of `samples` (one top-level span each, then a collate) from `process`.
    fn deliver(
        b: &mut ProfileBuilder,
        process: ProcessId,
        epoch: u64,
        samples: &[u64],
        completed_ns: u64,
    ) -> Result<u64, ProfilerError> {
        let spans: Vec<RecordedSpan<'_>> = samples
            .iter()
            .map(|&s| span("process", Some(s), 200 + s, 210 + s, 0))
            .chain([span("collate", None, 300, completed_ns, 0)])
            .collect();
        let delivery = Delivery {
            epoch,
            process,
            completed_ns,
            requested_ns: completed_ns - 5,
            delivered_ns: completed_ns + 10,
        };
        b.deliver(&delivery, None, &spans)
    }

    #[test]
    fn batches_get_their_plan_size_and_delivery_ordinal() -> Result<(), ProfilerError> {
        let mut b = ProfileBuilder::new(run(Mode::Spans));
        let w0 = b.process(worker(0, 20));
        b.plan(0, 150, Some(vec![Some(4), Some(5)]));
        b.plan(0, 151, Some(vec![Some(6)]));
        assert_eq!(deliver(&mut b, w0, 0, &[4, 5], 400)?, 0);
        assert_eq!(deliver(&mut b, w0, 0, &[6], 500)?, 1);
        let profile = b.finish()?;
        let p = &profile.pipelines[0];
        assert_eq!(p.batches[0].planned_ns, Some(150));
        assert_eq!(p.batches[1].planned_ns, Some(151));
        assert_eq!(p.batches[0].size, Some(2));
        assert_eq!(p.batches[0].first_started_ns, Some(204));
        assert_eq!(p.batches[0].wait_ns, Some(15));
        assert_eq!(p.batches[0].completed_by, Some(0));
        assert!(p.batches.iter().all(|b| !b.out_of_order));
        assert_eq!(p.spans.len(), 5);
        assert!(p.spans.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
        assert_eq!(p.stats.dropped_spans, 3);
        assert_eq!(p.meta["worker_pids"], "0:20");
        assert_eq!(p.meta["decoder"], "PIL");
        assert!(!p.counters.software.available);
        assert_eq!(
            p.counters.software.reason.as_deref(),
            Some("profiler mode is spans")
        );
        // What the builder gives reads back as the same profile from its JSON.
        assert_eq!(Profile::from_json(&profile.to_json()?)?, profile);
        Ok(())
    }

    #[test]
    fn out_of_order_by_completion_and_by_plan() -> Result<(), ProfilerError> {
        let mut b = ProfileBuilder::new(run(Mode::Spans));
        let w0 = b.process(worker(0, 20));
        let w1 = b.process(worker(1, 21));
        b.plan(0, 150, Some(vec![Some(0)]));
        b.plan(0, 151, Some(vec![Some(1)]));
        b.plan(0, 152, Some(vec![Some(2)]));
        // Delivered in plan order, but batch 1 (worker 1) completed before batch 0.
        deliver(&mut b, w0, 0, &[0], 900)?;
        deliver(&mut b, w1, 0, &[1], 800)?;
        // The next epoch delivers out of plan order: plan 1 first.
        b.plan(1, 160, Some(vec![Some(0)]));
        b.plan(1, 161, Some(vec![Some(1)]));
        deliver(&mut b, w1, 1, &[1], 1_000)?;
        deliver(&mut b, w0, 1, &[0], 1_100)?;
        deliver(&mut b, w0, 0, &[2], 1_200)?;
        let p = b.finish()?.pipelines.remove(0);
        let flags: Vec<bool> = p.batches.iter().map(|b| b.out_of_order).collect();
        assert_eq!(flags, [false, true, true, false, false]);
        assert_eq!(p.threads.len(), 2);
        assert_eq!(p.meta["worker_pids"], "0:20 1:21");
        Ok(())
    }

    #[test]
    fn a_reused_worker_number_keeps_its_first_process_and_lists_all() -> Result<(), ProfilerError> {
        let mut b = ProfileBuilder::new(run(Mode::Spans));
        let first = b.process(worker(0, 20));
        let second = b.process(worker(0, 30));
        deliver(&mut b, first, 0, &[0], 400)?;
        deliver(&mut b, second, 1, &[0], 500)?;
        let p = b.finish()?.pipelines.remove(0);
        assert_eq!(p.threads.len(), 1);
        assert_eq!(p.threads[0].pid, Some(20));
        assert_eq!(p.meta["worker_pids"], "0:20,30");
        // Unmatched plans leave planned_ns out.
        assert!(p.batches.iter().all(|b| b.planned_ns.is_none()));
        Ok(())
    }

    fn availability(counted: &[CounterKind]) -> CounterAvailability {
        let mut a = CounterAvailability::not_requested("not opened");
        for e in a.software.events.iter_mut().chain(&mut a.hardware.events) {
            if counted.contains(&e.counter) {
                *e = EventAvailability {
                    counter: e.counter,
                    available: true,
                    reason: None,
                };
            }
        }
        a.software = GroupAvailability {
            available: true,
            ..a.software
        };
        a
    }

    #[test]
    fn counter_deltas_keep_only_what_the_process_counted() -> Result<(), ProfilerError> {
        let mut b = ProfileBuilder::new(run(Mode::Counters));
        let kinds = vec![CounterKind::TaskClock, CounterKind::PageFaults];
        let w0 = b.process(RecordingProcess {
            counters: kinds,
            availability: Some(availability(&[CounterKind::TaskClock])),
            ..worker(0, 20)
        });
        let mut s = span("decode", Some(1), 10, 20, 1);
        s.counters = Some((&[100, 7], &[250, 9]));
        // A counter that went backwards reads 0, never wraps.
        let mut back = s;
        back.counters = Some((&[300, 7], &[200, 9]));
        b.failure(w0, Some(1), 25, "decode", "bad file", &[s, back])?;
        let p = b.finish()?.pipelines.remove(0);
        let kept = |i: usize| p.spans[i].counters.map(|c| (c.task_clock, c.page_faults));
        assert_eq!(kept(0), Some((Some(150), None)));
        assert_eq!(kept(1), Some((Some(0), None)));
        assert!(p.counters.software.available);
        assert_eq!(p.threads[0].counters, Some(p.counters.clone()));
        assert_eq!(p.failures[0].worker, Some(0));
        assert_eq!(p.failures[0].op.as_deref(), Some("decode"));
        Ok(())
    }

    #[test]
    fn bad_records_are_errors_naming_the_cause() -> Result<(), ProfilerError> {
        fn message<T>(r: Result<T, ProfilerError>) -> String {
            r.err().map(|e| e.to_string()).unwrap_or_default()
        }
        let mut b = ProfileBuilder::new(run(Mode::Counters));
        let w0 = b.process(RecordingProcess {
            counters: vec![CounterKind::TaskClock],
            ..worker(0, 20)
        });
        let mut s = span("decode", None, 10, 20, 0);
        s.counters = Some((&[1, 2], &[3, 4]));
        let e = message(b.failure(w0, None, 1, "decode", "x", &[s]));
        assert!(e.contains("counter readings"), "{e}");
        let delivery = Delivery {
            epoch: 0,
            process: w0,
            completed_ns: 30,
            requested_ns: 30,
            delivered_ns: 31,
        };
        let backwards = [
            span("collate", None, 1, 2, 0),
            span("decode", None, 20, 10, 0),
        ];
        let e = message(b.deliver(&delivery, None, &backwards));
        assert!(e.contains("before its start"), "{e}");
        // A refused batch leaves nothing behind: the next one is still batch 0.
        assert_eq!(b.deliver(&delivery, None, &backwards[..1])?, 0);
        let mut other = ProfileBuilder::new(run(Mode::Spans));
        let e = message(other.failure(w0, None, 1, "decode", "x", &[]));
        assert!(e.contains("not registered"), "{e}");
        assert!(counter_kind("tsc").is_err());
        assert_eq!(counter_kind("task_clock")?, CounterKind::TaskClock);
        let empty = ProfileBuilder::new(RunInfo {
            label: String::new(),
            ..run(Mode::Spans)
        });
        assert!(message(empty.finish()).contains("label"));
        Ok(())
    }

    #[test]
    fn an_empty_run_still_has_its_header_and_end() -> Result<(), ProfilerError> {
        let b = ProfileBuilder::new(RunInfo {
            end_ns: 50,
            ..run(Mode::Off)
        });
        let profile = b.finish()?;
        let p = &profile.pipelines[0];
        assert_eq!((p.start_ns, p.end_ns), (100, 100));
        assert!(p.threads.is_empty() && p.batches.is_empty());
        assert!(!p.meta.contains_key("worker_pids"));
        assert_eq!(profile.schema, crate::schema::SCHEMA_NAME);
        Ok(())
    }
}
