//! Chrome trace export (Trace Event Format), for Perfetto and `chrome://tracing`.
//!
//! One process per pipeline label, one thread track per worker, and a consumer track with the
//! time `next()` blocked on each batch ("wait") and the time until it asked for the next one
//! ("step"), plus the consumer's own op spans (worker [`CONSUMER`]: batch assembly). A flow arrow
//! joins each batch's last op span on a worker to its delivery. Counter deltas are span
//! arguments. Built from serde types, never by string concatenation; this module must not read
//! anything but a [`Profile`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::counters::CounterKind;
use crate::error::ProfilerError;
use crate::recorder::CONSUMER;
use crate::schema::{PipelineRecord, Profile};

/// Thread id of the consumer track in every pipeline's process.
pub const CONSUMER_TID: u64 = 1_000_000;

/// How to lay out the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceOptions {
    /// Shift each pipeline so it starts at 0, to overlay runs recorded one after the other.
    /// Default: false (one common timeline, as recorded).
    pub align_pipelines: bool,
    /// Put counter deltas in span arguments. Default: true.
    pub counter_args: bool,
}

impl Default for TraceOptions {
    fn default() -> Self {
        TraceOptions {
            align_pipelines: false,
            counter_args: true,
        }
    }
}

/// A whole trace file (`{"traceEvents": [...], ...}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChromeTrace {
    /// The events.
    #[serde(rename = "traceEvents")]
    pub trace_events: Vec<TraceEvent>,
    /// Display unit hint (`"ns"`).
    #[serde(rename = "displayTimeUnit")]
    pub display_time_unit: String,
    /// Free-form metadata shown by the viewers.
    #[serde(rename = "otherData", default)]
    pub other_data: BTreeMap<String, Value>,
}

/// One Trace Event Format event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceEvent {
    /// Event name.
    pub name: String,
    /// Category.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cat: Option<String>,
    /// Phase: `X` complete, `M` metadata, `s`/`f` flow, `i` instant, `C` counter.
    pub ph: String,
    /// Timestamp, microseconds.
    #[serde(default)]
    pub ts: f64,
    /// Duration of an `X` event, microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dur: Option<f64>,
    /// Process id (one per pipeline).
    pub pid: u32,
    /// Thread id (the worker number, or [`CONSUMER_TID`]).
    #[serde(default)]
    pub tid: u64,
    /// Flow id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// Flow binding point (`"e"`: the enclosing slice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bp: Option<String>,
    /// Instant event scope (`"t"`: thread).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s: Option<String>,
    /// Arguments.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub args: Map<String, Value>,
}

impl TraceEvent {
    fn new(name: impl Into<String>, ph: &str, pid: u32, tid: u64, ts: f64) -> Self {
        TraceEvent {
            name: name.into(),
            cat: None,
            ph: ph.into(),
            ts,
            dur: None,
            pid,
            tid,
            id: None,
            bp: None,
            s: None,
            args: Map::new(),
        }
    }

    fn meta(name: &str, pid: u32, tid: u64, key: &str, value: Value) -> Self {
        let mut e = TraceEvent::new(name, "M", pid, tid, 0.0);
        e.args.insert(key.into(), value);
        e
    }

    fn cat(mut self, cat: &str) -> Self {
        self.cat = Some(cat.into());
        self
    }

    fn arg(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.args.insert(key.into(), value.into());
        self
    }
}

impl ChromeTrace {
    /// Encodes as JSON.
    pub fn to_json(&self) -> Result<String, ProfilerError> {
        Ok(serde_json::to_string(self)?)
    }

    /// Writes the trace to `path`.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), ProfilerError> {
        crate::error::write_json(path.as_ref(), self)
    }
}

/// Earliest time a pipeline recorded anything.
fn pipeline_origin(p: &PipelineRecord) -> u64 {
    let spans = p.spans.iter().map(|s| s.start_ns);
    let batches = p.batches.iter().filter_map(|b| {
        [
            b.planned_ns,
            b.first_started_ns,
            b.completed_ns,
            b.delivered_ns
                .map(|d| d.saturating_sub(b.wait_ns.unwrap_or(0))),
        ]
        .into_iter()
        .flatten()
        .min()
    });
    let start = (p.start_ns > 0).then_some(p.start_ns);
    start
        .into_iter()
        .chain(spans)
        .chain(batches)
        .min()
        .unwrap_or(0)
}

/// Builds the Chrome trace of every pipeline of `profile`.
pub fn chrome_trace(profile: &Profile, options: &TraceOptions) -> ChromeTrace {
    let common_origin = profile
        .pipelines
        .iter()
        .map(pipeline_origin)
        .min()
        .unwrap_or(0);
    let mut events = Vec::new();
    let mut next_flow_id = 1u64;
    for (index, p) in profile.pipelines.iter().enumerate() {
        let origin = if options.align_pipelines {
            pipeline_origin(p)
        } else {
            common_origin
        };
        let pid = u32::try_from(index + 1).unwrap_or(u32::MAX);
        pipeline_events(p, pid, origin, options, &mut next_flow_id, &mut events);
    }
    let mut other = BTreeMap::new();
    other.insert("schema".into(), Value::from(profile.schema.clone()));
    other.insert("version".into(), Value::from(profile.version));
    other.insert("clock".into(), Value::from(profile.clock.clone()));
    other.insert("origin_ns".into(), Value::from(common_origin));
    ChromeTrace {
        trace_events: events,
        display_time_unit: "ns".into(),
        other_data: other,
    }
}

fn us(t: u64, origin: u64) -> f64 {
    (t as i128 - origin as i128) as f64 / 1000.0
}

fn pipeline_events(
    p: &PipelineRecord,
    pid: u32,
    origin: u64,
    options: &TraceOptions,
    next_flow_id: &mut u64,
    out: &mut Vec<TraceEvent>,
) {
    // Process and thread names.
    out.push(TraceEvent::meta(
        "process_name",
        pid,
        0,
        "name",
        Value::from(p.label.clone()),
    ));
    out.push(TraceEvent::meta(
        "process_sort_index",
        pid,
        0,
        "sort_index",
        Value::from(pid),
    ));
    let mut labels = vec![format!("mode={}", p.mode.name())];
    if let Some(real) = p.pid {
        labels.push(format!("pid={real}"));
    }
    labels.push(format!("workers={}", p.num_workers));
    labels.push(format!("batch_size={}", p.batch_size));
    out.push(TraceEvent::meta(
        "process_labels",
        pid,
        0,
        "labels",
        Value::from(labels.join(", ")),
    ));

    let mut names: BTreeMap<u32, String> = BTreeMap::new();
    for t in p.threads.iter().filter(|t| t.worker != CONSUMER) {
        let name = if t.name.is_empty() {
            format!("worker-{}", t.worker)
        } else {
            t.name.clone()
        };
        names.insert(t.worker, name);
    }
    let workers: BTreeSet<u32> = p
        .spans
        .iter()
        .map(|s| s.worker)
        .filter(|&w| w != CONSUMER)
        .collect();
    for w in workers {
        names.entry(w).or_insert_with(|| format!("worker-{w}"));
    }
    for (w, name) in &names {
        let tid = u64::from(*w);
        out.push(TraceEvent::meta(
            "thread_name",
            pid,
            tid,
            "name",
            Value::from(name.clone()),
        ));
        out.push(TraceEvent::meta(
            "thread_sort_index",
            pid,
            tid,
            "sort_index",
            Value::from(i64::from(*w) + 1),
        ));
    }
    out.push(TraceEvent::meta(
        "thread_name",
        pid,
        CONSUMER_TID,
        "name",
        Value::from("consumer"),
    ));
    out.push(TraceEvent::meta(
        "thread_sort_index",
        pid,
        CONSUMER_TID,
        "sort_index",
        Value::from(0),
    ));

    // Op spans; remember each batch's last-ending worker span for its flow arrow.
    let mut last_of_batch: HashMap<u64, (u64, u64, u32)> = HashMap::new();
    for s in &p.spans {
        let on_consumer = s.worker == CONSUMER;
        let tid = if on_consumer {
            CONSUMER_TID
        } else {
            u64::from(s.worker)
        };
        let mut e = TraceEvent::new(s.op.clone(), "X", pid, tid, us(s.start_ns, origin)).cat("op");
        e.dur = Some(s.dur_ns() as f64 / 1000.0);
        if let Some(b) = s.batch {
            e = e.arg("batch", b);
        }
        if let Some(b) = s.batch.filter(|_| !on_consumer) {
            let entry = last_of_batch
                .entry(b)
                .or_insert((s.start_ns, s.end_ns, s.worker));
            if s.end_ns > entry.1 {
                *entry = (s.start_ns, s.end_ns, s.worker);
            }
        }
        if let Some(x) = s.sample {
            e = e.arg("sample", x);
        }
        if s.depth > 0 {
            e = e.arg("depth", s.depth);
        }
        if options.counter_args {
            if let Some(c) = &s.counters {
                for k in CounterKind::ALL {
                    if let Some(v) = c.get(k) {
                        e = e.arg(k.name(), v);
                    }
                }
            }
        }
        out.push(e);
    }

    // Consumer track: wait then step per delivered batch, in delivery order.
    let mut delivered: Vec<_> = p
        .batches
        .iter()
        .filter_map(|b| b.delivered_ns.map(|d| (d, b)))
        .collect();
    delivered.sort_by_key(|(d, b)| (*d, b.batch));
    for (i, (d, b)) in delivered.iter().enumerate() {
        let wait = b.wait_ns.unwrap_or(0);
        let wait_start = d.saturating_sub(wait);
        let mut w = TraceEvent::new(
            format!("wait batch {}", b.batch),
            "X",
            pid,
            CONSUMER_TID,
            us(wait_start, origin),
        )
        .cat("wait")
        .arg("batch", b.batch)
        .arg("wait_ns", wait)
        .arg("out_of_order", b.out_of_order);
        if let Some(q) = b.queue_occupancy {
            w = w.arg("queue_occupancy", q);
        }
        w.dur = Some(wait as f64 / 1000.0);
        out.push(w);

        // The step lasts until the consumer starts waiting for the next batch (or the run ends).
        let step_end = delivered
            .get(i + 1)
            .map(|(nd, nb)| nd.saturating_sub(nb.wait_ns.unwrap_or(0)))
            .unwrap_or(p.end_ns)
            .max(*d);
        let mut step = TraceEvent::new(
            format!("batch {}", b.batch),
            "X",
            pid,
            CONSUMER_TID,
            us(*d, origin),
        )
        .cat("consume")
        .arg("batch", b.batch);
        if let Some(c) = b.completed_ns {
            step = step.arg("delay_ns", d.saturating_sub(c));
        }
        step.dur = Some(step_end.saturating_sub(*d) as f64 / 1000.0);
        out.push(step);

        if let Some(q) = b.queue_occupancy {
            out.push(
                TraceEvent::new("queue occupancy", "C", pid, CONSUMER_TID, us(*d, origin))
                    .arg("batches", q),
            );
        }

        // Flow from the batch's last op (or its completion mark) to its delivery.
        let source = match last_of_batch.get(&b.batch) {
            // Inside the span (its last nanosecond), so the arrow binds to it.
            Some(&(start, end, worker)) => Some((end.saturating_sub(1).max(start), worker)),
            None => b
                .completed_ns
                .map(|c| (c, b.completed_by.unwrap_or(u32::MAX))),
        };
        if let Some((ts, worker)) = source {
            let id = *next_flow_id;
            *next_flow_id += 1;
            let tid = if worker == u32::MAX {
                CONSUMER_TID
            } else {
                u64::from(worker)
            };
            let mut s = TraceEvent::new("batch", "s", pid, tid, us(ts, origin)).cat("batch");
            s.id = Some(id);
            s = s.arg("batch", b.batch);
            out.push(s);
            let mut f =
                TraceEvent::new("batch", "f", pid, CONSUMER_TID, us(*d, origin)).cat("batch");
            f.id = Some(id);
            f.bp = Some("e".into());
            f = f.arg("batch", b.batch);
            out.push(f);
        }
    }

    for fl in &p.failures {
        let tid = fl.worker.map_or(CONSUMER_TID, u64::from);
        let mut e =
            TraceEvent::new("sample failed", "i", pid, tid, us(fl.t_ns, origin)).cat("failure");
        e.s = Some("t".into());
        e = e.arg("cause", fl.cause.clone());
        if let Some(op) = &fl.op {
            e = e.arg("op", op.clone());
        }
        if let Some(b) = fl.batch {
            e = e.arg("batch", b);
        }
        if let Some(x) = fl.sample {
            e = e.arg("sample", x);
        }
        out.push(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{BatchRecord, SpanRecord, ThreadInfo};

    #[test]
    fn consumer_spans_go_on_the_consumer_track_and_flows_start_on_workers() {
        let span = |op: &str, worker, start, end| SpanRecord {
            op: op.into(),
            worker,
            batch: Some(7),
            sample: None,
            start_ns: start,
            end_ns: end,
            depth: 0,
            counters: None,
            bytes: None,
        };
        let thread = |worker, name: &str| ThreadInfo {
            worker,
            name: name.into(),
            pid: None,
            tid: None,
            counters: None,
            stats: Default::default(),
        };
        let mut p = PipelineRecord::new("t");
        p.start_ns = 1_000;
        p.end_ns = 10_000;
        p.threads = vec![thread(0, "worker-0"), thread(CONSUMER, "consumer")];
        p.spans = vec![
            span("decode", 0, 1_000, 5_000),
            span("collate", CONSUMER, 6_000, 6_500),
        ];
        p.batches = vec![BatchRecord {
            batch: 7,
            completed_ns: Some(5_000),
            delivered_ns: Some(7_000),
            wait_ns: Some(2_000),
            ..Default::default()
        }];
        let trace = chrome_trace(&Profile::new(vec![p]), &TraceOptions::default());
        let evs = &trace.trace_events;
        let collate = evs.iter().find(|e| e.name == "collate").expect("collate");
        assert_eq!(collate.tid, CONSUMER_TID);
        // No worker track is made up for the consumer's recorder.
        let named: Vec<u64> = evs
            .iter()
            .filter(|e| e.name == "thread_name")
            .map(|e| e.tid)
            .collect();
        assert_eq!(named, [0, CONSUMER_TID]);
        let start = evs.iter().find(|e| e.ph == "s").expect("flow start");
        assert_eq!(start.tid, 0, "the flow starts at the worker's last span");
        let end = evs.iter().find(|e| e.ph == "f").expect("flow end");
        assert_eq!((end.tid, end.id), (CONSUMER_TID, start.id));
    }
}
