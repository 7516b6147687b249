//! Summary of a profile: per op and per run figures, as JSON, CSV or a terminal table.
//!
//! Per op: count, total (inclusive) and self time (nested spans subtracted), mean and
//! percentiles of the span durations, the share of worker busy time, counter deltas and the
//! metrics derived from them. Per run: throughput, batch latency and its spread, the consumer's
//! wait (Lotus-style buckets), out-of-order deliveries, CPU time per image and the bottleneck
//! op. Spans of the consumer thread (worker [`CONSUMER`]: batch assembly) are summarized apart,
//! as shares of wall time, and never count as worker time. This module must only read a
//! [`Profile`]; it never records anything.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::{self, Write as _};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::counters::{CounterDeltas, CounterKind};
use crate::error::ProfilerError;
use crate::recorder::{CONSUMER, IO};
use crate::schema::{Mode, PipelineRecord, Profile, SpanRecord};

/// The `schema` string of a summary file.
pub const SUMMARY_SCHEMA: &str = "ferroloader.summary";
/// The summary schema version. 2: `cpu_seconds_per_image` is CPU time only (task-clock), no
/// longer span time when task-clock was not counted; span time is `worker_seconds_per_image`.
pub const SUMMARY_VERSION: u32 = 2;

/// A wait at most this long counts as "about zero" (the batch was already there).
pub const WAIT_NEAR_ZERO_NS: u64 = 10_000;

/// Summary of every pipeline of a profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Always [`SUMMARY_SCHEMA`].
    pub schema: String,
    /// [`SUMMARY_VERSION`].
    pub version: u32,
    /// One per pipeline, in profile order.
    pub pipelines: Vec<PipelineSummary>,
}

/// Summary of one pipeline run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PipelineSummary {
    /// The pipeline label.
    pub label: String,
    /// What was recorded.
    pub mode: Mode,
    /// Worker threads or processes.
    pub num_workers: u32,
    /// Samples per batch.
    pub batch_size: u32,
    /// Run wall time.
    pub wall_ns: u64,
    /// Images processed: sizes of the delivered batches, else distinct samples in spans.
    pub images: u64,
    /// Images per second of wall time.
    pub images_per_s: f64,
    /// Batches delivered (or recorded, when none was delivered).
    pub batches: u64,
    /// Batch latency (completion minus first sample start, else minus plan), over batches.
    pub batch_latency: Option<Distribution>,
    /// Delay between completion and delivery (Lotus' "delay"), mean.
    pub batch_delay_mean_ns: Option<f64>,
    /// Total time the consumer blocked in `next()`.
    pub consumer_wait_ns: u64,
    /// `consumer_wait_ns / wall_ns`.
    pub consumer_wait_share: f64,
    /// Shares of delivered batches by consumer wait.
    pub wait_buckets: WaitBuckets,
    /// Share of delivered batches that arrived out of order.
    pub out_of_order_share: f64,
    /// Sum of top-level span time over workers.
    pub busy_ns: u64,
    /// CPU seconds per image: the task-clock of the top-level spans, when it was counted.
    /// Never span time, which includes time a thread waited for a core (see
    /// `worker_seconds_per_image`).
    pub cpu_seconds_per_image: Option<f64>,
    /// `"task_clock"`, or `"not_counted"` when `cpu_seconds_per_image` is `None`.
    pub cpu_time_source: String,
    /// Wall time inside top-level spans over workers, per image (`busy_ns / images`): what the
    /// workers spent, running or waiting for a core.
    pub worker_seconds_per_image: Option<f64>,
    /// The op with the most self time.
    pub bottleneck: Option<String>,
    /// Failed or skipped samples.
    pub failures: u64,
    /// Spans lost (see `PipelineStats`).
    pub dropped_spans: u64,
    /// Counters that were counted.
    pub counters_available: Vec<CounterKind>,
    /// Per worker.
    pub workers: Vec<WorkerSummary>,
    /// Per op, most self time first.
    pub ops: Vec<OpSummary>,
    /// Ops the consumer thread ran itself (batch assembly), most self time first; their `share`
    /// is of wall time.
    #[serde(default)]
    pub consumer_ops: Vec<OpSummary>,
    /// Seconds of I/O requests (spans of worker [`IO`], such as shard reads), summed over
    /// requests that may overlap: compare with the workers' decode time.
    #[serde(default)]
    pub io_seconds: f64,
    /// Bytes those requests moved.
    #[serde(default)]
    pub io_bytes: u64,
}

/// Mean, spread and extremes of a set of durations.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    /// Values.
    pub count: u64,
    /// Mean.
    pub mean_ns: f64,
    /// Population standard deviation.
    pub std_ns: f64,
    /// Coefficient of variation, `std / mean`.
    pub cv: f64,
    /// Smallest.
    pub min_ns: u64,
    /// Largest.
    pub max_ns: u64,
}

impl Distribution {
    fn of(values: &[u64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        let n = values.len() as f64;
        let mean = values.iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = values
            .iter()
            .map(|&v| (v as f64 - mean).powi(2))
            .sum::<f64>()
            / n;
        let std = var.sqrt();
        Some(Distribution {
            count: values.len() as u64,
            mean_ns: mean,
            std_ns: std,
            cv: if mean > 0.0 { std / mean } else { 0.0 },
            min_ns: values.iter().copied().min().unwrap_or(0),
            max_ns: values.iter().copied().max().unwrap_or(0),
        })
    }
}

/// Shares of delivered batches by how long the consumer waited (Lotus' buckets).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WaitBuckets {
    /// Wait below [`WAIT_NEAR_ZERO_NS`]: the batch was ready.
    pub near_zero: f64,
    /// From [`WAIT_NEAR_ZERO_NS`] to 1 ms.
    pub under_1ms: f64,
    /// 1 ms or more (includes `over_500ms`).
    pub over_1ms: f64,
    /// 500 ms or more.
    pub over_500ms: f64,
}

/// One worker's activity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerSummary {
    /// Worker number.
    pub worker: u32,
    /// Spans recorded.
    pub spans: u64,
    /// Sum of its top-level spans.
    pub busy_ns: u64,
    /// `busy_ns / wall_ns`.
    pub utilization: f64,
}

/// One op's figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpSummary {
    /// Op name.
    pub op: String,
    /// Spans.
    pub count: u64,
    /// Sum of span durations (nested spans included).
    pub total_ns: u64,
    /// Sum of span durations minus their nested spans.
    pub self_ns: u64,
    /// Mean span duration.
    pub mean_ns: f64,
    /// Median span duration.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// Longest span.
    pub max_ns: u64,
    /// `self_ns` over the workers' busy time (self shares add up to 1).
    pub share: f64,
    /// Counter deltas summed over the op's spans, nested spans subtracted (self counts).
    pub counters: Option<CounterDeltas>,
    /// Metrics derived from `counters`.
    pub derived: DerivedMetrics,
}

/// Ratios derived from an op's counters; `None` where an input was not counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DerivedMetrics {
    /// Instructions per cycle.
    pub ipc: Option<f64>,
    /// Cache misses per cache reference.
    pub cache_miss_rate: Option<f64>,
    /// Cache misses per thousand instructions.
    pub mpki: Option<f64>,
    /// Branch misses per branch.
    pub branch_miss_rate: Option<f64>,
    /// Page faults per span.
    pub page_faults_per_op: Option<f64>,
    /// Task-clock (CPU) nanoseconds per span.
    pub task_clock_ns_per_op: Option<f64>,
    /// Task-clock over self time: below 1, the op waited off-CPU (I/O, preemption).
    pub cpu_utilization: Option<f64>,
}

impl DerivedMetrics {
    fn from(c: &CounterDeltas, count: u64, self_ns: u64) -> Self {
        let ratio = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) if b > 0 => Some(a as f64 / b as f64),
            _ => None,
        };
        let per_op = |a: Option<u64>| a.filter(|_| count > 0).map(|a| a as f64 / count as f64);
        DerivedMetrics {
            ipc: ratio(c.instructions, c.cycles),
            cache_miss_rate: ratio(c.cache_misses, c.cache_references),
            mpki: ratio(c.cache_misses, c.instructions).map(|r| r * 1000.0),
            branch_miss_rate: ratio(c.branch_misses, c.branch_instructions),
            page_faults_per_op: per_op(c.page_faults),
            task_clock_ns_per_op: per_op(c.task_clock),
            cpu_utilization: ratio(c.task_clock, Some(self_ns)),
        }
    }
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Per span: the duration and counters of its direct children, and whether it has a parent.
/// Spans nest by time interval within a worker (works for flat Python spans without depth too).
fn nesting(spans: &[SpanRecord]) -> (Vec<u64>, Vec<CounterDeltas>, Vec<bool>) {
    let mut child_ns = vec![0u64; spans.len()];
    let mut child_counters = vec![CounterDeltas::default(); spans.len()];
    let mut has_parent = vec![false; spans.len()];
    let mut by_worker: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, s) in spans.iter().enumerate() {
        by_worker.entry(s.worker).or_default().push(i);
    }
    for idx in by_worker.values_mut() {
        idx.sort_by_key(|&i| {
            (
                spans[i].start_ns,
                std::cmp::Reverse(spans[i].end_ns),
                spans[i].depth,
            )
        });
        let mut stack: Vec<usize> = Vec::new();
        for &i in idx.iter() {
            let s = &spans[i];
            while let Some(&top) = stack.last() {
                if spans[top].end_ns <= s.start_ns {
                    stack.pop();
                } else {
                    break;
                }
            }
            if let Some(&parent) = stack.last() {
                if spans[parent].end_ns >= s.end_ns {
                    has_parent[i] = true;
                    child_ns[parent] += s.dur_ns();
                    if let Some(c) = &s.counters {
                        child_counters[parent].accumulate(c);
                    }
                }
            }
            stack.push(i);
        }
    }
    (child_ns, child_counters, has_parent)
}

/// Spans of one op, gathered for its [`OpSummary`].
#[derive(Default)]
struct OpAcc {
    durs: Vec<u64>,
    total: u64,
    self_ns: u64,
    counters: Option<CounterDeltas>,
}

impl OpAcc {
    fn add(&mut self, dur: u64, self_ns: u64, own_counters: Option<CounterDeltas>) {
        self.durs.push(dur);
        self.total += dur;
        self.self_ns += self_ns;
        if let Some(own) = own_counters {
            self.counters
                .get_or_insert_with(Default::default)
                .accumulate(&own);
        }
    }

    /// One summary per op, most self time first; `share` is self time over `of_ns`.
    fn summarize(per_op: BTreeMap<&str, OpAcc>, of_ns: u64) -> Vec<OpSummary> {
        let mut ops: Vec<OpSummary> = per_op
            .into_iter()
            .map(|(op, mut a)| {
                a.durs.sort_unstable();
                let count = a.durs.len() as u64;
                let derived = a
                    .counters
                    .as_ref()
                    .map(|c| DerivedMetrics::from(c, count, a.self_ns))
                    .unwrap_or_default();
                OpSummary {
                    op: op.to_owned(),
                    count,
                    total_ns: a.total,
                    self_ns: a.self_ns,
                    mean_ns: a.total as f64 / count.max(1) as f64,
                    p50_ns: percentile(&a.durs, 50.0),
                    p90_ns: percentile(&a.durs, 90.0),
                    p99_ns: percentile(&a.durs, 99.0),
                    max_ns: a.durs.last().copied().unwrap_or(0),
                    share: if of_ns > 0 {
                        a.self_ns as f64 / of_ns as f64
                    } else {
                        0.0
                    },
                    counters: a.counters,
                    derived,
                }
            })
            .collect();
        ops.sort_by(|a, b| b.self_ns.cmp(&a.self_ns).then_with(|| a.op.cmp(&b.op)));
        ops
    }
}

impl PipelineSummary {
    /// Summarizes one pipeline.
    pub fn from_pipeline(p: &PipelineRecord) -> Self {
        let wall_ns = p.wall_ns();
        let (child_ns, child_counters, has_parent) = nesting(&p.spans);

        let mut per_op: BTreeMap<&str, OpAcc> = BTreeMap::new();
        let mut consumer_per_op: BTreeMap<&str, OpAcc> = BTreeMap::new();
        let mut workers: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        let mut busy_ns = 0u64;
        let mut top_task_clock: Option<u64> = None;
        let (mut io_ns, mut io_bytes) = (0u64, 0u64);
        for (i, s) in p.spans.iter().enumerate() {
            let d = s.dur_ns();
            let own = s
                .counters
                .as_ref()
                .map(|c| c.saturating_sub(&child_counters[i]));
            if s.worker == IO {
                io_ns += d;
                io_bytes += s.bytes.unwrap_or(0);
                continue;
            }
            let target = if s.worker == CONSUMER {
                &mut consumer_per_op
            } else {
                &mut per_op
            };
            target
                .entry(&s.op)
                .or_default()
                .add(d, d.saturating_sub(child_ns[i]), own);
            if s.worker == CONSUMER {
                continue;
            }
            let w = workers.entry(s.worker).or_insert((0, 0));
            w.0 += 1;
            if !has_parent[i] {
                w.1 += d;
                busy_ns += d;
                if let Some(tc) = s.counters.as_ref().and_then(|c| c.task_clock) {
                    *top_task_clock.get_or_insert(0) += tc;
                }
            }
        }
        let ops = OpAcc::summarize(per_op, busy_ns);
        let consumer_ops = OpAcc::summarize(consumer_per_op, wall_ns);

        // Batches.
        let delivered: Vec<_> = p
            .batches
            .iter()
            .filter(|b| b.delivered_ns.is_some())
            .collect();
        let mut images: u64 = delivered
            .iter()
            .map(|b| u64::from(b.size.unwrap_or(p.batch_size)))
            .sum();
        if images == 0 {
            let samples: HashSet<(Option<u64>, u64)> = p
                .spans
                .iter()
                .filter_map(|s| s.sample.map(|x| (s.batch, x)))
                .collect();
            images = samples.len() as u64;
        }
        let latencies: Vec<u64> = p
            .batches
            .iter()
            .filter_map(|b| {
                let end = b.completed_ns?;
                let start = b.first_started_ns.or(b.planned_ns)?;
                Some(end.saturating_sub(start))
            })
            .collect();
        let delays: Vec<u64> = delivered
            .iter()
            .filter_map(|b| Some(b.delivered_ns?.saturating_sub(b.completed_ns?)))
            .collect();
        let waits: Vec<u64> = delivered.iter().map(|b| b.wait_ns.unwrap_or(0)).collect();
        let consumer_wait_ns: u64 = waits.iter().sum();
        let share_of = |n: usize| {
            if waits.is_empty() {
                0.0
            } else {
                n as f64 / waits.len() as f64
            }
        };
        let wait_buckets = WaitBuckets {
            near_zero: share_of(waits.iter().filter(|&&w| w < WAIT_NEAR_ZERO_NS).count()),
            under_1ms: share_of(
                waits
                    .iter()
                    .filter(|&&w| (WAIT_NEAR_ZERO_NS..1_000_000).contains(&w))
                    .count(),
            ),
            over_1ms: share_of(waits.iter().filter(|&&w| w >= 1_000_000).count()),
            over_500ms: share_of(waits.iter().filter(|&&w| w >= 500_000_000).count()),
        };
        let out_of_order_share = share_of(delivered.iter().filter(|b| b.out_of_order).count());

        let (cpu_ns, cpu_time_source) = match top_task_clock {
            Some(tc) => (Some(tc), "task_clock"),
            None => (None, "not_counted"),
        };
        let per_image = |ns: u64| (images > 0 && ns > 0).then(|| ns as f64 / 1e9 / images as f64);
        let seconds = wall_ns as f64 / 1e9;
        let counters_available = p
            .spans
            .iter()
            .find_map(|s| s.counters.as_ref())
            .map(|c| {
                CounterKind::ALL
                    .into_iter()
                    .filter(|&k| c.get(k).is_some())
                    .collect()
            })
            .unwrap_or_default();

        PipelineSummary {
            label: p.label.clone(),
            mode: p.mode,
            num_workers: p.num_workers,
            batch_size: p.batch_size,
            wall_ns,
            images,
            images_per_s: if seconds > 0.0 {
                images as f64 / seconds
            } else {
                0.0
            },
            batches: if delivered.is_empty() {
                p.batches.len() as u64
            } else {
                delivered.len() as u64
            },
            batch_latency: Distribution::of(&latencies),
            batch_delay_mean_ns: Distribution::of(&delays).map(|d| d.mean_ns),
            consumer_wait_ns,
            consumer_wait_share: if wall_ns > 0 {
                consumer_wait_ns as f64 / wall_ns as f64
            } else {
                0.0
            },
            wait_buckets,
            out_of_order_share,
            busy_ns,
            cpu_seconds_per_image: cpu_ns.and_then(per_image),
            cpu_time_source: cpu_time_source.into(),
            worker_seconds_per_image: per_image(busy_ns),
            bottleneck: ops.first().map(|o| o.op.clone()),
            failures: p.failures.len() as u64,
            dropped_spans: p.stats.dropped_spans,
            counters_available,
            workers: workers
                .into_iter()
                .map(|(worker, (spans, busy))| WorkerSummary {
                    worker,
                    spans,
                    busy_ns: busy,
                    utilization: if wall_ns > 0 {
                        busy as f64 / wall_ns as f64
                    } else {
                        0.0
                    },
                })
                .collect(),
            ops,
            consumer_ops,
            io_seconds: io_ns as f64 / 1e9,
            io_bytes,
        }
    }

    /// The figures of op `name`.
    pub fn op(&self, name: &str) -> Option<&OpSummary> {
        self.ops.iter().find(|o| o.op == name)
    }
}

fn ms(ns: f64) -> String {
    format!("{:.3}", ns / 1e6)
}

fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1e3)
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

impl Summary {
    /// Summarizes every pipeline of `profile`.
    pub fn from_profile(profile: &Profile) -> Self {
        Summary {
            schema: SUMMARY_SCHEMA.into(),
            version: SUMMARY_VERSION,
            pipelines: profile
                .pipelines
                .iter()
                .map(PipelineSummary::from_pipeline)
                .collect(),
        }
    }

    /// The summary of pipeline `label`.
    pub fn pipeline(&self, label: &str) -> Option<&PipelineSummary> {
        self.pipelines.iter().find(|p| p.label == label)
    }

    /// Pretty JSON (`summary.json`).
    pub fn to_json(&self) -> Result<String, ProfilerError> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    /// Writes `summary.json`.
    pub fn save_json(&self, path: impl AsRef<Path>) -> Result<(), ProfilerError> {
        let path = path.as_ref();
        std::fs::write(path, self.to_json()?).map_err(ProfilerError::io_at(path))
    }

    /// One CSV row per (pipeline, op), with a header row.
    pub fn to_csv(&self) -> String {
        let mut out = String::from(
            "pipeline,op,count,total_ns,self_ns,mean_ns,p50_ns,p90_ns,p99_ns,max_ns,share",
        );
        for k in CounterKind::ALL {
            out.push(',');
            out.push_str(k.name());
        }
        out.push_str(
            ",ipc,cache_miss_rate,mpki,branch_miss_rate,page_faults_per_op,task_clock_ns_per_op\n",
        );
        let f = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v}"));
        for p in &self.pipelines {
            // Consumer-side ops are named `consumer:<op>`; their share is of wall time.
            let rows = p.ops.iter().map(|o| (o.op.clone(), o)).chain(
                p.consumer_ops
                    .iter()
                    .map(|o| (format!("consumer:{}", o.op), o)),
            );
            for (name, o) in rows {
                let _ = write!(
                    out,
                    "{},{},{},{},{},{:.1},{},{},{},{},{:.6}",
                    csv_field(&p.label),
                    csv_field(&name),
                    o.count,
                    o.total_ns,
                    o.self_ns,
                    o.mean_ns,
                    o.p50_ns,
                    o.p90_ns,
                    o.p99_ns,
                    o.max_ns,
                    o.share
                );
                for k in CounterKind::ALL {
                    out.push(',');
                    if let Some(v) = o.counters.and_then(|c| c.get(k)) {
                        let _ = write!(out, "{v}");
                    }
                }
                let d = &o.derived;
                let _ = writeln!(
                    out,
                    ",{},{},{},{},{},{}",
                    f(d.ipc),
                    f(d.cache_miss_rate),
                    f(d.mpki),
                    f(d.branch_miss_rate),
                    f(d.page_faults_per_op),
                    f(d.task_clock_ns_per_op)
                );
            }
        }
        out
    }

    /// Writes the CSV of [`Summary::to_csv`].
    pub fn save_csv(&self, path: impl AsRef<Path>) -> Result<(), ProfilerError> {
        let path = path.as_ref();
        std::fs::write(path, self.to_csv()).map_err(ProfilerError::io_at(path))
    }

    /// A plain-text table for terminals.
    pub fn render_table(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.pipelines.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

/// One op line of the terminal table.
fn op_row(f: &mut fmt::Formatter<'_>, name: &str, o: &OpSummary) -> fmt::Result {
    let d = &o.derived;
    writeln!(
        f,
        "{:<14} {:>8} {:>11} {:>11} {:>5.1}% {:>9} {:>9} {:>9} {:>9} {:>9} {:>5} {:>6} {:>6} {:>6} {:>8} {:>9}",
        name,
        o.count,
        ms(o.total_ns as f64),
        ms(o.self_ns as f64),
        o.share * 100.0,
        us(o.mean_ns),
        us(o.p50_ns as f64),
        us(o.p90_ns as f64),
        us(o.p99_ns as f64),
        us(o.max_ns as f64),
        opt(d.ipc, |v| format!("{v:.2}")),
        opt(d.cache_miss_rate, |v| format!("{:.1}", v * 100.0)),
        opt(d.mpki, |v| format!("{v:.2}")),
        opt(d.branch_miss_rate, |v| format!("{:.2}", v * 100.0)),
        opt(d.page_faults_per_op, |v| format!("{v:.2}")),
        opt(d.task_clock_ns_per_op, us),
    )
}

impl fmt::Display for PipelineSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "== {} (mode {}, {} workers, batch {}) ==",
            self.label,
            self.mode.name(),
            self.num_workers,
            self.batch_size
        )?;
        writeln!(
            f,
            "wall {:.3} s  images {}  {:.1} img/s  batches {}  failures {}{}",
            self.wall_ns as f64 / 1e9,
            self.images,
            self.images_per_s,
            self.batches,
            self.failures,
            if self.dropped_spans > 0 {
                format!("  DROPPED SPANS {}", self.dropped_spans)
            } else {
                String::new()
            }
        )?;
        if let Some(l) = &self.batch_latency {
            writeln!(
                f,
                "batch latency mean {} ms  std {} ms  CV {:.3}  delay mean {} ms",
                ms(l.mean_ns),
                ms(l.std_ns),
                l.cv,
                opt(self.batch_delay_mean_ns, ms)
            )?;
        }
        let b = &self.wait_buckets;
        writeln!(
            f,
            "consumer wait {} ms ({:.1}% of wall)  waits ~0 {:.0}%  <1ms {:.0}%  >1ms {:.0}%  >500ms {:.0}%  out-of-order {:.0}%",
            ms(self.consumer_wait_ns as f64),
            self.consumer_wait_share * 100.0,
            b.near_zero * 100.0,
            b.under_1ms * 100.0,
            b.over_1ms * 100.0,
            b.over_500ms * 100.0,
            self.out_of_order_share * 100.0
        )?;
        if self.io_bytes > 0 || self.io_seconds > 0.0 {
            writeln!(
                f,
                "io {:.3} s in requests  {:.1} MB",
                self.io_seconds,
                self.io_bytes as f64 / 1e6
            )?;
        }
        writeln!(
            f,
            "CPU per image {} ms ({})  worker time per image {} ms  bottleneck {}",
            opt(self.cpu_seconds_per_image, |s| ms(s * 1e9)),
            self.cpu_time_source,
            opt(self.worker_seconds_per_image, |s| ms(s * 1e9)),
            self.bottleneck.as_deref().unwrap_or("-")
        )?;
        for w in &self.workers {
            writeln!(
                f,
                "  worker {:>3}: {:>8} spans  busy {} ms  ({:.0}% of wall)",
                w.worker,
                w.spans,
                ms(w.busy_ns as f64),
                w.utilization * 100.0
            )?;
        }
        writeln!(
            f,
            "{:<14} {:>8} {:>11} {:>11} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>5} {:>6} {:>6} {:>6} {:>8} {:>9}",
            "op", "count", "total ms", "self ms", "share", "mean us", "p50 us", "p90 us",
            "p99 us", "max us", "IPC", "miss%", "MPKI", "brm%", "flt/op", "cpu us/op"
        )?;
        for o in &self.ops {
            op_row(f, &o.op, o)?;
        }
        if !self.consumer_ops.is_empty() {
            writeln!(f, "consumer thread (share of wall time):")?;
            for o in &self.consumer_ops {
                op_row(f, &format!("  {}", o.op), o)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 90.0), 90);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&[7], 99.0), 7);
        assert_eq!(percentile(&[], 50.0), 0);
    }

    #[test]
    fn csv_quotes_what_needs_it() {
        assert_eq!(csv_field("decode"), "decode");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }

    #[test]
    fn consumer_spans_are_summarized_apart_from_worker_time() {
        let span = |op: &str, worker, start, end| SpanRecord {
            op: op.into(),
            worker,
            batch: Some(0),
            sample: None,
            start_ns: start,
            end_ns: end,
            depth: 0,
            counters: None,
            bytes: None,
        };
        let mut p = PipelineRecord::new("t");
        p.end_ns = 1000;
        p.spans = vec![
            span("decode", 0, 0, 300),
            span("decode", 1, 0, 100),
            span("collate", CONSUMER, 300, 350),
        ];
        let s = PipelineSummary::from_pipeline(&p);
        assert_eq!(s.busy_ns, 400);
        assert_eq!(s.workers.len(), 2);
        assert_eq!(s.ops.len(), 1);
        assert!((s.ops[0].share - 1.0).abs() < 1e-9);
        assert_eq!(s.consumer_ops.len(), 1);
        assert_eq!(s.consumer_ops[0].op, "collate");
        assert_eq!(s.consumer_ops[0].total_ns, 50);
        assert!((s.consumer_ops[0].share - 0.05).abs() < 1e-9);
        let summary = Summary {
            schema: SUMMARY_SCHEMA.into(),
            version: SUMMARY_VERSION,
            pipelines: vec![s],
        };
        assert!(summary.to_csv().contains(",consumer:collate,1,50,"));
        assert!(summary.render_table().contains("consumer thread"));
    }

    #[test]
    fn nested_spans_subtract_from_parent() {
        let span = |op: &str, start, end, depth| SpanRecord {
            op: op.into(),
            worker: 0,
            batch: None,
            sample: Some(0),
            start_ns: start,
            end_ns: end,
            depth,
            counters: None,
            bytes: None,
        };
        let mut p = PipelineRecord::new("t");
        p.end_ns = 1000;
        p.spans = vec![
            span("process", 0, 100, 0),
            span("decode", 10, 60, 1),
            span("resize", 60, 90, 1),
            span("read", 100, 120, 0),
        ];
        let s = PipelineSummary::from_pipeline(&p);
        assert_eq!(s.busy_ns, 120);
        assert_eq!(s.op("process").map(|o| o.self_ns), Some(20));
        assert_eq!(s.op("process").map(|o| o.total_ns), Some(100));
        assert_eq!(s.op("decode").map(|o| o.self_ns), Some(50));
        let shares: f64 = s.ops.iter().map(|o| o.share).sum();
        assert!((shares - 1.0).abs() < 1e-9);
        assert_eq!(s.bottleneck.as_deref(), Some("decode"));
    }
}
