//! The profile file: versioned, round-trips exactly, readable from a Python-written file, and
//! mergeable for side-by-side comparison.

mod common;

use common::run_workload;
use ferroloader_profiler::{chrome_trace, Mode, Profile, ProfilerError, Summary, TraceOptions};
use serde_json::Value;

/// What the Python instrumentation of a torchvision DataLoader writes: op names as strings,
/// worker processes with their own pids, flat spans without depth or counters.
const TORCHVISION_JSON: &str = r#"{
  "schema": "ferroloader.profile",
  "version": 1,
  "pipelines": [{
    "label": "torchvision",
    "pid": 4242,
    "mode": "spans",
    "num_workers": 2,
    "batch_size": 2,
    "start_ns": 1000000,
    "end_ns": 9000000,
    "meta": {"decoder": "PIL"},
    "counters": {"software": {"available": false, "reason": "not measured from Python"}},
    "threads": [
      {"worker": 0, "name": "DataLoader worker 0", "pid": 4243},
      {"worker": 1, "name": "DataLoader worker 1", "pid": 4244}
    ],
    "spans": [
      {"op": "Loader", "worker": 0, "batch": 0, "sample": 0, "start_ns": 1100000, "end_ns": 2100000},
      {"op": "RandomResizedCrop", "worker": 0, "batch": 0, "sample": 0, "start_ns": 2100000, "end_ns": 2400000},
      {"op": "Loader", "worker": 0, "batch": 0, "sample": 1, "start_ns": 2400000, "end_ns": 3400000},
      {"op": "RandomResizedCrop", "worker": 0, "batch": 0, "sample": 1, "start_ns": 3400000, "end_ns": 3700000},
      {"op": "Collation", "worker": 0, "batch": 0, "start_ns": 3700000, "end_ns": 3800000},
      {"op": "Loader", "worker": 1, "batch": 1, "sample": 2, "start_ns": 1100000, "end_ns": 2000000},
      {"op": "Collation", "worker": 1, "batch": 1, "start_ns": 2000000, "end_ns": 2050000}
    ],
    "batches": [
      {"batch": 0, "completed_ns": 3800000, "delivered_ns": 4000000, "wait_ns": 2900000},
      {"batch": 1, "completed_ns": 2050000, "delivered_ns": 4100000, "wait_ns": 0, "out_of_order": true}
    ],
    "future_field_ignored": true
  }]
}"#;

#[test]
fn profile_round_trips_through_a_file() {
    // Counters mode so counters, availability reasons and per-thread stats are all in the file.
    let w = run_workload(Mode::Counters, 2, 20_000, 60_000);
    let mut profile = w.profile;
    profile.pipelines[0]
        .failures
        .push(ferroloader_profiler::SampleFailure {
            worker: Some(1),
            batch: Some(0),
            sample: Some(3),
            t_ns: 5,
            op: Some("decode".into()),
            cause: "bad \"quoted\" input\nsecond line".into(),
        });
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("profile.json");
    profile.save(&path).expect("save");
    let loaded = Profile::load(&path).expect("load");
    assert_eq!(loaded, profile);
    assert_eq!(
        Profile::from_json(&profile.to_json().expect("json")).expect("parse"),
        profile
    );

    // The header is what the schema says.
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("v");
    assert_eq!(v["schema"], "ferroloader.profile");
    assert_eq!(v["version"], 1);
    assert_eq!(
        v["pipelines"][0]["spans"][0]["op"]
            .as_str()
            .map(str::len)
            .map(|n| n > 0),
        Some(true)
    );
    assert!(v["pipelines"][0]["counters"]["hardware"]["available"].is_boolean());
}

#[test]
fn wrong_schema_and_newer_versions_are_refused() {
    let wrong = r#"{"schema": "something.else", "version": 1, "pipelines": []}"#;
    assert!(matches!(
        Profile::from_json(wrong),
        Err(ProfilerError::WrongSchema { found }) if found == "something.else"
    ));
    let newer = r#"{"schema": "ferroloader.profile", "version": 2, "pipelines": []}"#;
    assert!(matches!(
        Profile::from_json(newer),
        Err(ProfilerError::UnsupportedVersion {
            found: 2,
            supported: 1
        })
    ));
    assert!(matches!(
        Profile::from_json("not json"),
        Err(ProfilerError::Json(_))
    ));
    let missing = std::path::Path::new("/nonexistent/profile.json");
    assert!(matches!(
        Profile::load(missing),
        Err(ProfilerError::Io { path, .. }) if path == missing
    ));
}

#[test]
fn a_python_written_profile_loads_and_summarizes() {
    let profile = Profile::from_json(TORCHVISION_JSON).expect("python profile");
    let p = profile.pipeline("torchvision").expect("pipeline");
    assert_eq!(p.threads[1].pid, Some(4244));
    assert_eq!(p.spans.len(), 7);
    assert!(p.spans.iter().all(|s| s.depth == 0 && s.counters.is_none()));
    let s = Summary::from_profile(&profile);
    let ps = s.pipeline("torchvision").expect("summary");
    assert_eq!(ps.bottleneck.as_deref(), Some("Loader"));
    assert_eq!(ps.op("Loader").map(|o| o.total_ns), Some(2_900_000));
    assert_eq!(ps.images, 4, "delivered batches of batch_size 2");
    assert_eq!(ps.out_of_order_share, 0.5);
    assert_eq!(ps.wait_buckets.near_zero, 0.5);
    assert_eq!(ps.wait_buckets.over_1ms, 0.5);
    assert_eq!(ps.consumer_wait_ns, 2_900_000);
}

#[test]
fn merging_native_and_torchvision_gives_one_side_by_side_trace() {
    let native = run_workload(Mode::Spans, 2, 20_000, 60_000).profile;
    let mut native = native;
    native.pipelines[0].label = "native".into();
    let torch = Profile::from_json(TORCHVISION_JSON).expect("python profile");
    let merged = native.clone().merge(torch.clone());
    assert_eq!(merged.pipelines.len(), 2);
    assert_eq!(merged.pipelines[0], native.pipelines[0]);
    assert_eq!(merged.pipelines[1], torch.pipelines[0]);

    // A repeated label is renamed so each pipeline keeps its own process.
    let twice = merged.clone().merge(torch);
    let labels: Vec<&str> = twice.pipelines.iter().map(|p| p.label.as_str()).collect();
    assert_eq!(labels, ["native", "torchvision", "torchvision#2"]);

    // Merged files round-trip too.
    let back = Profile::from_json(&merged.to_json().expect("json")).expect("parse");
    assert_eq!(back, merged);

    for align in [false, true] {
        let trace = chrome_trace(
            &merged,
            &TraceOptions {
                align_pipelines: align,
                ..Default::default()
            },
        );
        let v: Value = serde_json::from_str(&trace.to_json().expect("json")).expect("v");
        let evs = v["traceEvents"].as_array().expect("events");
        let procs: Vec<(u64, &str)> = evs
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
            .map(|e| {
                (
                    e["pid"].as_u64().expect("pid"),
                    e["args"]["name"].as_str().expect("name"),
                )
            })
            .collect();
        assert_eq!(procs, [(1, "native"), (2, "torchvision")]);
        let torch_spans: Vec<&Value> = evs
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == "op" && e["pid"] == 2)
            .collect();
        assert_eq!(torch_spans.len(), 7);
        let first_ts = torch_spans
            .iter()
            .map(|e| e["ts"].as_f64().expect("ts"))
            .fold(f64::INFINITY, f64::min);
        // The torchvision run starts at 1 ms; its first span is 0.1 ms later in both layouts
        // (aligned: its own start is 0; common: it is the earliest thing recorded).
        assert!((first_ts - 100.0).abs() < 1e-9, "{first_ts}");
        let native_min = evs
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == 1)
            .map(|e| e["ts"].as_f64().expect("ts"))
            .fold(f64::INFINITY, f64::min);
        if align {
            assert!(
                native_min < 1e5,
                "aligned: native starts near 0, got {native_min}"
            );
        } else {
            assert!(
                native_min > 1e6,
                "common timeline: native is recorded much later"
            );
        }
        // Flows stay within their pipeline.
        let flows = evs
            .iter()
            .filter(|e| e["ph"] == "s" && e["pid"] == 2)
            .count();
        assert_eq!(flows, 2);
    }
}

#[test]
fn mode_parses_its_names_and_names_what_it_refuses() {
    for mode in [Mode::Off, Mode::Spans, Mode::Counters] {
        assert_eq!(
            mode.name().parse::<Mode>().expect("a mode's own name"),
            mode
        );
    }
    for bad in ["all", "Spans", " spans", ""] {
        let err = bad.parse::<Mode>().expect_err("not a mode name");
        assert!(
            matches!(&err, ProfilerError::UnknownMode { found } if found == bad),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!("expected 'off', 'spans' or 'counters', got {bad:?}")
        );
    }
}
