//! Profiles, their summaries and CPU counter groups as Python objects.
//!
//! [`PyProfile`] holds a `ferroloader_profiler::Profile` (the native loader's recording, or one
//! the Python-side instrumentation of a torchvision `DataLoader` wrote in the same schema) and
//! gives Python its exports: JSON, the Chrome/Perfetto trace, the summary. [`PyCounterGroup`]
//! lets Python code count its own ops with the counter groups the native workers use, so both
//! pipelines report the same counters. Must not interpret a profile: the numbers come from the
//! profiler crate, which both pipelines share.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use ferroloader_loader::profiler::counters::NUM_COUNTERS;
use ferroloader_loader::profiler::{
    chrome_trace, CounterArray, CounterConfig, CounterKind, CounterSet, Profile, Summary,
    TraceOptions,
};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::errors::ToPyErr;
use crate::fork::ForkLocal;

/// A recorded profile: one or more pipelines in the `ferroloader.profile` schema.
#[pyclass(frozen, module = "ferroloader._native", name = "Profile")]
#[derive(Debug, Clone)]
pub(crate) struct PyProfile {
    inner: Profile,
}

impl PyProfile {
    pub(crate) fn new(inner: Profile) -> Self {
        PyProfile { inner }
    }
}

#[pymethods]
impl PyProfile {
    /// Parses a profile from its JSON text; `ValueError` if it is not one (or is newer than
    /// this version reads).
    #[staticmethod]
    fn loads(py: Python<'_>, json: &str) -> PyResult<Self> {
        Profile::from_json(json)
            .map(Self::new)
            .map_err(|e| e.to_py_err(py))
    }

    /// Reads a profile file.
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        py.detach(|| Profile::load(&path))
            .map(Self::new)
            .map_err(|e| e.to_py_err(py))
    }

    /// The profile as JSON text.
    fn to_json(&self, py: Python<'_>) -> PyResult<String> {
        self.inner.to_json().map_err(|e| e.to_py_err(py))
    }

    /// Writes the profile as JSON.
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.detach(|| self.inner.save(&path))
            .map_err(|e| e.to_py_err(py))
    }

    /// Writes a Chrome trace (open it in Perfetto or chrome://tracing): one process per
    /// pipeline, one track per worker. `align=True` shifts each pipeline to start at 0, to
    /// overlay runs recorded one after the other.
    #[pyo3(signature = (path, *, align = false))]
    fn save_trace(&self, py: Python<'_>, path: PathBuf, align: bool) -> PyResult<()> {
        let options = TraceOptions {
            align_pipelines: align,
            ..TraceOptions::default()
        };
        py.detach(|| chrome_trace(&self.inner, &options).save(&path))
            .map_err(|e| e.to_py_err(py))
    }

    /// The summary: per pipeline throughput, waits, per-op times and counters.
    fn summary(&self, py: Python<'_>) -> PySummary {
        PySummary {
            inner: py.detach(|| Summary::from_profile(&self.inner)),
        }
    }

    /// A profile with this one's pipelines, then `other`'s (a repeated label gets `#2`...).
    fn merge(&self, other: &PyProfile) -> PyProfile {
        Self::new(self.inner.clone().merge(other.inner.clone()))
    }

    /// The pipelines' labels, in order.
    #[getter]
    fn labels(&self) -> Vec<String> {
        self.inner
            .pipelines
            .iter()
            .map(|p| p.label.clone())
            .collect()
    }

    fn __len__(&self) -> usize {
        self.inner.pipelines.len()
    }

    fn __repr__(&self) -> String {
        let pipelines: Vec<String> = self
            .inner
            .pipelines
            .iter()
            .map(|p| {
                format!(
                    "{}: {} spans, {} batches",
                    p.label,
                    p.spans.len(),
                    p.batches.len()
                )
            })
            .collect();
        format!("Profile([{}])", pipelines.join("; "))
    }
}

/// What a profile says, per pipeline: throughput, waits, per-op times and counters.
#[pyclass(frozen, module = "ferroloader._native", name = "Summary")]
#[derive(Debug)]
pub(crate) struct PySummary {
    inner: Summary,
}

#[pymethods]
impl PySummary {
    /// The summary as a text table.
    fn table(&self) -> String {
        self.inner.render_table()
    }

    /// The summary as JSON text.
    fn to_json(&self, py: Python<'_>) -> PyResult<String> {
        self.inner.to_json().map_err(|e| e.to_py_err(py))
    }

    /// One CSV row per pipeline and op.
    fn to_csv(&self) -> String {
        self.inner.to_csv()
    }

    /// Writes the JSON.
    fn save_json(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        self.inner.save_json(&path).map_err(|e| e.to_py_err(py))
    }

    /// Writes the CSV.
    fn save_csv(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        self.inner.save_csv(&path).map_err(|e| e.to_py_err(py))
    }

    fn __str__(&self) -> String {
        self.table()
    }
}

/// The open counter groups of the thread that made it.
struct OpenCounters {
    set: Option<CounterSet>,
    /// Counters read, in the order `read` returns them.
    kinds: Vec<CounterKind>,
    values: CounterArray,
    /// The thread whose activity the groups count.
    thread: std::thread::ThreadId,
}

/// CPU counter groups (hardware and software, as the native workers open them) counting the
/// thread that made the object, for Python code to count its own ops.
#[pyclass(frozen, module = "ferroloader._native", name = "CounterGroup")]
pub(crate) struct PyCounterGroup {
    open: ForkLocal<Mutex<OpenCounters>>,
    /// The schema's `CounterAvailability`, as JSON.
    availability: String,
}

#[pymethods]
impl PyCounterGroup {
    /// Opens the groups asked for on the calling thread. Never fails for lack of counters:
    /// what could not be opened, and why, is in `availability`; `names` lists what is read.
    #[new]
    #[pyo3(signature = (*, hardware = true, software = true))]
    fn new(py: Python<'_>, hardware: bool, software: bool) -> PyResult<Self> {
        let (set, availability) = CounterSet::open(CounterConfig { hardware, software });
        let mask = set.as_ref().map_or(0, CounterSet::mask);
        let kinds = CounterKind::ALL
            .into_iter()
            .filter(|k| mask & (1 << k.index()) != 0)
            .collect();
        let availability = serde_json::to_string(&availability)
            .map_err(|e| ferroloader_loader::profiler::ProfilerError::Json(e).to_py_err(py))?;
        Ok(PyCounterGroup {
            open: ForkLocal::new(Mutex::new(OpenCounters {
                set,
                kinds,
                values: [0; NUM_COUNTERS],
                thread: std::thread::current().id(),
            })),
            availability,
        })
    }

    /// The counters `read` returns, by their schema names (`"task_clock"`, `"cycles"`...).
    #[getter]
    fn names(&self) -> PyResult<Vec<&'static str>> {
        let open = self.lock()?;
        Ok(open.kinds.iter().map(|k| k.name()).collect())
    }

    /// Which counters could be opened and why not: the schema's `CounterAvailability`
    /// (`{"hardware": {...}, "software": {...}, "perf_event_paranoid": n}`), as a new dict.
    #[getter]
    fn availability<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py.import("json")?
            .call_method1("loads", (self.availability.as_str(),))
    }

    /// The same availability as JSON text (what `ProfileBuilder.process` takes; a worker
    /// process ships it to the main one as is).
    #[getter]
    fn availability_json(&self) -> &str {
        &self.availability
    }

    /// The counters' running totals, in `names` order (one `read(2)` per group). Subtract two
    /// reads for the counts in between. Must be called on the thread that made the group.
    fn read<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let mut open = self.lock()?;
        if std::thread::current().id() != open.thread {
            return Err(PyRuntimeError::new_err(
                "CounterGroup.read: the groups count the thread that made them; make one on \
                 this thread",
            ));
        }
        let OpenCounters {
            set, kinds, values, ..
        } = &mut *open;
        if let Some(set) = set {
            if !set.read(values) {
                return Err(PyRuntimeError::new_err(
                    "CounterGroup.read: reading a perf_event group failed",
                ));
            }
        }
        PyTuple::new(py, kinds.iter().map(|k| values[k.index()]))
    }
}

impl PyCounterGroup {
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, OpenCounters>> {
        Ok(self
            .open
            .get("counter group")?
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of every profile timestamp (equal to
/// `time.monotonic_ns()`).
#[pyfunction]
pub(crate) fn now_ns() -> u64 {
    ferroloader_loader::profiler::now_ns()
}
