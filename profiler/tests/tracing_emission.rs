//! With the `tracing` feature and `emit_tracing(true)`, every op span is also a `tracing` span
//! that users' own subscribers see.
#![cfg(feature = "tracing")]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ferroloader_profiler::{ops, Mode, Profiler, ProfilerConfig};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

#[derive(Default)]
struct Seen {
    next_id: AtomicU64,
    ops: Mutex<Vec<String>>,
    entered: AtomicU64,
    exited: AtomicU64,
}

struct Recorder(Arc<Seen>);

struct OpField(Option<String>);

impl Visit for OpField {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "op" {
            self.0 = Some(value.to_owned());
        }
    }
    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut v = OpField(None);
        span.record(&mut v);
        if span.metadata().name() == "op" {
            if let (Some(op), Ok(mut ops)) = (v.0, self.0.ops.lock()) {
                ops.push(op);
            }
        }
        Id::from_u64(self.0.next_id.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {
        self.0.entered.fetch_add(1, Ordering::Relaxed);
    }
    fn exit(&self, _: &Id) {
        self.0.exited.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn op_spans_reach_tracing_subscribers_only_when_asked() {
    let seen = Arc::new(Seen::default());
    tracing::subscriber::with_default(Recorder(Arc::clone(&seen)), || {
        let quiet = Profiler::new(ProfilerConfig::new(Mode::Spans));
        let rec = quiet.thread(0, "w");
        rec.in_span(ops::DECODE, || ());
        assert_eq!(
            seen.next_id.load(Ordering::Relaxed),
            0,
            "off unless emit_tracing"
        );

        let loud = Profiler::new(ProfilerConfig::new(Mode::Spans).emit_tracing(true));
        let rec = loud.thread(0, "w");
        // Registered after the recorder took its name snapshot.
        let custom = loud.register_op("late_op").expect("op");
        {
            let _p = rec.span(ops::PROCESS);
            rec.in_span(ops::DECODE, || ());
            rec.in_span(custom, || ());
        }
        // A forgotten exit is closed on the tracing side too.
        rec.enter(ops::PROCESS);
        rec.enter(ops::RESIZE);
        rec.exit(ops::PROCESS);
        drop(rec);
        assert_eq!(loud.finish().pipelines[0].spans.len(), 4);
    });
    let ops = seen.ops.lock().map(|o| o.clone()).unwrap_or_default();
    assert_eq!(ops, ["process", "decode", "late_op", "process", "resize"]);
    assert_eq!(seen.entered.load(Ordering::Relaxed), 5);
    assert_eq!(seen.exited.load(Ordering::Relaxed), 5);
}
