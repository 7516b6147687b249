//! `ProfileBuilder`: the profiler crate's [`ProfileBuilder`] for the Python instrumentation.
//!
//! `ferroloader.torch` records spans as plain tuples in its worker processes and feeds them
//! here, in the main process, when a profile is asked for: one call per delivered batch (its
//! records converted in one loop, no dict per span) and per failure. Must not interpret the
//! records beyond converting them: numbering, plan matching, counter deltas and the schema's
//! defaults belong to the profiler crate.

use std::collections::BTreeMap;

use ferroloader_loader::profiler::builder::counter_kind;
use ferroloader_loader::profiler::counters::NUM_COUNTERS;
use ferroloader_loader::profiler::{
    BatchFacts, CounterAvailability, Delivery, Mode, ProcessId, ProfileBuilder, ProfilerError,
    RecordedSpan, RecordingProcess, RunInfo,
};
use pyo3::conversion::FromPyObjectOwned;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::PyTuple;

use crate::errors::ToPyErr;
use crate::profile::PyProfile;

/// Builds one pipeline's profile from raw records: `(op, sample, start_ns, end_ns, depth)`
/// tuples, plus `(counters_before, counters_after)` when counting.
#[pyclass(module = "ferroloader._native", name = "ProfileBuilder")]
pub(crate) struct PyProfileBuilder {
    /// `None` once `finish` took it.
    inner: Option<ProfileBuilder>,
    /// The ids `process` handed out, by the number Python holds.
    processes: Vec<ProcessId>,
}

#[pymethods]
impl PyProfileBuilder {
    /// An empty builder for a run labelled `label`, recorded in `mode` (`"off"`, `"spans"`,
    /// `"counters"`).
    #[new]
    #[pyo3(signature = (label, mode, *, pid, num_workers, batch_size, start_ns, end_ns, meta, dropped_spans))]
    #[allow(clippy::too_many_arguments)] // keyword-only on the Python side
    fn new(
        label: String,
        mode: &str,
        pid: u32,
        num_workers: u32,
        batch_size: u32,
        start_ns: u64,
        end_ns: u64,
        meta: BTreeMap<String, String>,
        dropped_spans: u64,
    ) -> PyResult<Self> {
        let mode = match mode {
            "off" => Mode::Off,
            "spans" => Mode::Spans,
            "counters" => Mode::Counters,
            other => {
                return Err(PyValueError::new_err(format!(
                    "mode: expected 'off', 'spans' or 'counters', got {other:?}"
                )))
            }
        };
        Ok(PyProfileBuilder {
            inner: Some(ProfileBuilder::new(RunInfo {
                label,
                mode,
                pid: Some(pid),
                num_workers,
                batch_size,
                start_ns,
                end_ns,
                meta,
                dropped_spans,
            })),
            processes: Vec::new(),
        })
    }

    /// Registers a process that recorded: its worker number, pid, tid, the counter names of
    /// its readings and its counter availability (the JSON `CounterGroup.availability_json`
    /// gives, or `None`). Returns the number its batches and failures refer to.
    #[pyo3(signature = (worker, pid, tid, counters, availability))]
    fn process(
        &mut self,
        py: Python<'_>,
        worker: u32,
        pid: u32,
        tid: u64,
        counters: Vec<PyBackedStr>,
        availability: Option<&str>,
    ) -> PyResult<usize> {
        let counters = counters
            .iter()
            .map(|name| counter_kind(name))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_py_err(py))?;
        let availability = availability
            .map(serde_json::from_str::<CounterAvailability>)
            .transpose()
            .map_err(|e| ProfilerError::Json(e).to_py_err(py))?;
        let id = self.builder()?.process(RecordingProcess {
            worker,
            pid,
            tid,
            counters,
            availability,
        });
        self.processes.push(id);
        Ok(self.processes.len() - 1)
    }

    /// Notes a batch the sampler of `epoch` planned at `planned_ns`, with its sample indices
    /// (`None`: unknown). Called in sampler order.
    fn plan(
        &mut self,
        epoch: u64,
        planned_ns: u64,
        samples: Option<Vec<Option<u64>>>,
    ) -> PyResult<()> {
        self.builder()?.plan(epoch, planned_ns, samples);
        Ok(())
    }

    /// Records a delivered batch and its spans; returns its batch number. `facts` (its samples
    /// and first start) stands in for the records of a batch whose spans were dropped.
    #[pyo3(signature = (process, epoch, records, completed_ns, requested_ns, delivered_ns, facts))]
    #[allow(clippy::too_many_arguments)] // one call per batch, positional for speed
    fn deliver(
        &mut self,
        py: Python<'_>,
        process: usize,
        epoch: u64,
        records: &Bound<'_, PyAny>,
        completed_ns: u64,
        requested_ns: u64,
        delivered_ns: u64,
        facts: Option<(Vec<Option<u64>>, Option<u64>)>,
    ) -> PyResult<u64> {
        let id = self.process_id(process)?;
        let converted = Record::extract_all(records)?;
        let spans: Vec<RecordedSpan<'_>> = converted.iter().map(Record::span).collect();
        let facts = facts.map(|(samples, first_started_ns)| BatchFacts {
            samples,
            first_started_ns,
        });
        let delivery = Delivery {
            epoch,
            process: id,
            completed_ns,
            requested_ns,
            delivered_ns,
        };
        self.builder()?
            .deliver(&delivery, facts, &spans)
            .map_err(|e| e.to_py_err(py))
    }

    /// Records a failed sample (`sample` any object; only a non-negative integer index is
    /// kept) and the spans its batch had so far, which no batch carries.
    #[pyo3(signature = (process, sample, t_ns, op, cause, records))]
    #[allow(clippy::too_many_arguments)] // one call per failure, positional
    fn failure(
        &mut self,
        py: Python<'_>,
        process: usize,
        sample: &Bound<'_, PyAny>,
        t_ns: u64,
        op: &str,
        cause: &str,
        records: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let id = self.process_id(process)?;
        let converted = Record::extract_all(records)?;
        let spans: Vec<RecordedSpan<'_>> = converted.iter().map(Record::span).collect();
        self.builder()?
            .failure(id, sample_index(sample), t_ns, op, cause, &spans)
            .map_err(|e| e.to_py_err(py))
    }

    /// The profile; the builder cannot be used afterwards.
    fn finish(&mut self, py: Python<'_>) -> PyResult<PyProfile> {
        let builder = self
            .inner
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("ProfileBuilder.finish: already finished"))?;
        builder
            .finish()
            .map(PyProfile::new)
            .map_err(|e| e.to_py_err(py))
    }
}

impl PyProfileBuilder {
    fn builder(&mut self) -> PyResult<&mut ProfileBuilder> {
        self.inner
            .as_mut()
            .ok_or_else(|| PyRuntimeError::new_err("ProfileBuilder: already finished"))
    }

    fn process_id(&self, process: usize) -> PyResult<ProcessId> {
        self.processes.get(process).copied().ok_or_else(|| {
            PyValueError::new_err(format!(
                "process: {process} was not returned by this builder's process()"
            ))
        })
    }
}

/// One raw record, converted from its tuple.
struct Record {
    op: PyBackedStr,
    sample: Option<u64>,
    start_ns: u64,
    end_ns: u64,
    depth: u8,
    /// Readings before and after, and how many of each array are used.
    counters: Option<([u64; NUM_COUNTERS], [u64; NUM_COUNTERS], usize)>,
}

impl Record {
    fn extract_all(records: &Bound<'_, PyAny>) -> PyResult<Vec<Self>> {
        records
            .try_iter()?
            .map(|record| Record::extract(&record?))
            .collect()
    }

    fn extract(record: &Bound<'_, PyAny>) -> PyResult<Self> {
        let tuple = record.cast::<PyTuple>().map_err(|_| {
            PyTypeError::new_err(format!(
                "records: expected tuples (op, sample, start_ns, end_ns, depth[, before, \
                 after]), got {}",
                record
                    .get_type()
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string())
            ))
        })?;
        let len = tuple.len();
        if len != 5 && len != 7 {
            return Err(PyValueError::new_err(format!(
                "records: a record has 5 or 7 items, got {len}"
            )));
        }
        let counters = if len == 7 {
            let mut before = [0; NUM_COUNTERS];
            let mut after = [0; NUM_COUNTERS];
            let n = readings(&tuple.get_item(5)?, &mut before)?;
            let m = readings(&tuple.get_item(6)?, &mut after)?;
            if n != m {
                return Err(PyValueError::new_err(format!(
                    "records: {n} counter readings before a span and {m} after"
                )));
            }
            Some((before, after, n))
        } else {
            None
        };
        Ok(Record {
            op: item(tuple, 0, "op")?,
            sample: sample_index(&tuple.get_item(1)?),
            start_ns: item(tuple, 2, "start_ns")?,
            end_ns: item(tuple, 3, "end_ns")?,
            depth: item(tuple, 4, "depth (0 to 255)")?,
            counters,
        })
    }

    fn span(&self) -> RecordedSpan<'_> {
        RecordedSpan {
            op: &self.op,
            sample: self.sample,
            start_ns: self.start_ns,
            end_ns: self.end_ns,
            depth: self.depth,
            counters: self
                .counters
                .as_ref()
                .map(|(before, after, n)| (&before[..*n], &after[..*n])),
        }
    }
}

/// Item `index` of a record, converted; the error names the item and what it held.
fn item<'py, T: FromPyObjectOwned<'py>>(
    record: &Bound<'py, PyTuple>,
    index: usize,
    name: &str,
) -> PyResult<T> {
    let value = record.get_item(index)?;
    value.extract().map_err(|_| {
        PyValueError::new_err(format!(
            "records: a record's {name} cannot be {}",
            value.repr().map_or_else(|_| "?".into(), |r| r.to_string())
        ))
    })
}

/// Reads a tuple of counter values into `out`; returns how many there were.
fn readings(values: &Bound<'_, PyAny>, out: &mut [u64; NUM_COUNTERS]) -> PyResult<usize> {
    let mut n = 0;
    for value in values.try_iter()? {
        let slot = out.get_mut(n).ok_or_else(|| {
            PyValueError::new_err(format!(
                "records: more than {NUM_COUNTERS} counter readings in a record"
            ))
        })?;
        *slot = value?.extract()?;
        n += 1;
    }
    Ok(n)
}

/// A sample's index: a non-negative integer (anything with `__index__`); anything else (a
/// key, `None`) is no index.
fn sample_index(sample: &Bound<'_, PyAny>) -> Option<u64> {
    if sample.is_none() {
        return None;
    }
    sample.extract::<u64>().ok()
}

/// The counter availability in which nothing is counted, for `reason`, as JSON (what a
/// process that could not open its counter groups reports).
#[pyfunction]
pub(crate) fn counters_unavailable(py: Python<'_>, reason: &str) -> PyResult<String> {
    serde_json::to_string(&CounterAvailability::not_requested(reason))
        .map_err(|e| ProfilerError::Json(e).to_py_err(py))
}
