//! The Chrome trace parses as JSON and has the events a viewer needs.

mod common;

use std::collections::{HashMap, HashSet};

use common::{run_workload, WORKERS};
use ferroloader_profiler::trace::CONSUMER_TID;
use ferroloader_profiler::{chrome_trace, Mode, TraceOptions};
use serde_json::Value;

fn events(v: &Value) -> &Vec<Value> {
    v["traceEvents"].as_array().expect("traceEvents array")
}

#[test]
fn trace_has_spans_threads_waits_and_flows() {
    let w = run_workload(Mode::Spans, 6, 30_000, 150_000);
    let trace = chrome_trace(&w.profile, &TraceOptions::default());
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("trace.json");
    trace.save(&path).expect("save");
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("valid JSON");
    let evs = events(&v);
    let p = &w.profile.pipelines[0];

    // Metadata: the pipeline's process and a thread per worker plus the consumer.
    let meta = |name: &str| -> Vec<&Value> {
        evs.iter()
            .filter(|e| e["ph"] == "M" && e["name"] == name)
            .collect()
    };
    let procs = meta("process_name");
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0]["args"]["name"], "synthetic");
    let pid = procs[0]["pid"].as_u64().expect("pid");
    let threads: HashMap<u64, String> = meta("thread_name")
        .iter()
        .map(|e| {
            (
                e["tid"].as_u64().expect("tid"),
                e["args"]["name"].as_str().expect("name").to_owned(),
            )
        })
        .collect();
    for wk in 0..u64::from(WORKERS) {
        assert_eq!(
            threads.get(&wk).map(String::as_str),
            Some(&*format!("worker-{wk}"))
        );
    }
    assert_eq!(
        threads.get(&CONSUMER_TID).map(String::as_str),
        Some("consumer")
    );

    // One X event per op span, on the worker's track, with the right duration and args.
    let op_spans: Vec<&Value> = evs
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "op")
        .collect();
    assert_eq!(op_spans.len(), p.spans.len());
    assert_eq!(op_spans.len() as u64, 4 * w.samples);
    let mut per_op: HashMap<&str, usize> = HashMap::new();
    let mut tids = HashSet::new();
    for e in &op_spans {
        *per_op.entry(e["name"].as_str().expect("name")).or_default() += 1;
        tids.insert(e["tid"].as_u64().expect("tid"));
        assert_eq!(e["pid"].as_u64(), Some(pid));
        assert!(e["dur"].as_f64().expect("dur") > 0.0);
        assert!(e["args"]["batch"].is_u64() && e["args"]["sample"].is_u64());
    }
    for op in ["read", "decode", "resize", "normalize"] {
        assert_eq!(per_op.get(op), Some(&(w.samples as usize)), "{op}");
    }
    assert_eq!(tids, (0..u64::from(WORKERS)).collect::<HashSet<_>>());
    let decode = op_spans
        .iter()
        .find(|e| e["name"] == "decode")
        .expect("decode span");
    assert!(
        decode["dur"].as_f64().expect("dur") >= 150.0,
        "dur is in microseconds"
    );

    // Consumer track: a wait span per delivered batch.
    let waits: Vec<&Value> = evs
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "wait")
        .collect();
    assert_eq!(waits.len() as u64, w.batches);
    for e in &waits {
        assert_eq!(e["tid"].as_u64(), Some(CONSUMER_TID));
    }

    // Flow arrows: one start/finish pair per batch, start before finish, start inside an op
    // span of its thread (so it binds to it), finish on the consumer with binding point "e".
    let mut starts: HashMap<u64, &Value> = HashMap::new();
    let mut finishes: HashMap<u64, &Value> = HashMap::new();
    for e in evs {
        let id = || e["id"].as_u64().expect("flow id");
        if e["ph"] == "s" {
            assert!(starts.insert(id(), e).is_none(), "duplicate flow start");
        } else if e["ph"] == "f" {
            assert!(finishes.insert(id(), e).is_none(), "duplicate flow finish");
        }
    }
    assert_eq!(starts.len() as u64, w.batches);
    assert_eq!(
        starts.keys().collect::<HashSet<_>>(),
        finishes.keys().collect::<HashSet<_>>()
    );
    for (id, s) in &starts {
        let f = finishes[id];
        assert_eq!(f["bp"], "e");
        assert_eq!(f["tid"].as_u64(), Some(CONSUMER_TID));
        assert_eq!(s["args"]["batch"], f["args"]["batch"]);
        let (ts, tf) = (s["ts"].as_f64().expect("ts"), f["ts"].as_f64().expect("ts"));
        assert!(ts <= tf, "flow goes back in time");
        let enclosing = op_spans.iter().any(|x| {
            let (t0, d) = (
                x["ts"].as_f64().unwrap_or(0.0),
                x["dur"].as_f64().unwrap_or(0.0),
            );
            x["tid"] == s["tid"]
                && t0 <= ts
                && ts <= t0 + d
                && x["args"]["batch"] == s["args"]["batch"]
        });
        assert!(enclosing, "flow start {s} not inside a span of its batch");
    }
}

#[test]
fn counter_deltas_become_span_args() {
    let w = run_workload(Mode::Counters, 1, 20_000, 50_000);
    let p = &w.profile.pipelines[0];
    let v: Value = serde_json::from_str(
        &chrome_trace(&w.profile, &TraceOptions::default())
            .to_json()
            .expect("json"),
    )
    .expect("valid JSON");
    let spans: Vec<&Value> = events(&v)
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "op")
        .collect();
    assert!(!spans.is_empty());
    if p.counters.software.available {
        for e in spans {
            assert!(e["args"]["task_clock"].is_u64(), "{e}");
        }
    } else {
        eprintln!(
            "software counters unavailable ({:?}); checked spans carry no counter args",
            p.counters.software.reason
        );
        assert!(spans.iter().all(|e| e["args"].get("task_clock").is_none()));
    }
    let no_args = chrome_trace(
        &w.profile,
        &TraceOptions {
            counter_args: false,
            ..Default::default()
        },
    );
    assert!(no_args
        .trace_events
        .iter()
        .all(|e| !e.args.contains_key("task_clock")));
}
