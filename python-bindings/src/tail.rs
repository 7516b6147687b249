//! Python tails: the transforms with no native equivalent, run in Python after the longest
//! native prefix, on what torchvision would hand them there.
//!
//! [`Processor`] is what the loader runs per sample: the planned native pipeline alone, or
//! ([`PythonTail`]) the native prefix into a per-worker scratch, then, under the process-wide
//! tail lock ([`tail_lock`]) and the GIL, the tail's ops in order, each in its own profiler
//! span, their result copied into the batch slot. The sample layout is what the whole pipeline
//! gives the first sample ([`PythonTail::probe`]); a later sample of another shape or dtype
//! fails like any other sample. The Python side of the crossing (building the PIL image or
//! tensor, seeding, converting the result) is `ferroloader/_tail.py`'s `TailRunner`.
//!
//! Must not hold the GIL while the native prefix runs, nor take the tail lock while holding the
//! GIL (the lock is always taken first, so a worker waiting for the GIL never blocks one that
//! holds it).

use std::collections::HashSet;
use std::fmt;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use ferroloader_loader::transforms::rng::mix64;
use ferroloader_loader::transforms::spec::PipelineContext;
use ferroloader_loader::transforms::Error as TransformError;
use ferroloader_loader::{
    DType, ErrorPolicy, ImagePipeline, LoaderError, Op, OpHooks, SampleKey, SampleLayout,
    SampleProcessor, SlotMut, SlotParts, Source,
};
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::fork;
use crate::views::{Views, ViewsScratch};

/// The span around a sample's whole Python tail: waiting for the lock and the GIL, seeding,
/// building the input, the ops (nested spans of their own) and copying the result.
pub(crate) const TAIL_SPAN: &str = "python_tail";

/// Serializes tails across the process (see [`tail_lock`]): the current fork generation's
/// lock, or null before the first tail. Non-null values come from `Box::into_raw` and are never
/// freed (one per fork generation that runs a tail).
static TAIL_LOCK: AtomicPtr<GenerationLock> = AtomicPtr::new(ptr::null_mut());

/// A mutex that belongs to one fork generation.
struct GenerationLock {
    generation: u64,
    mutex: Mutex<()>,
}

/// The lock every tail runs under. The tail's randomness comes from Python's global
/// generators, seeded per sample just before its ops run; Python switches threads every few
/// milliseconds and torch ops release the GIL, so the GIL alone would let another worker
/// reseed them mid-sample. Costs little: tails hold the GIL anyway.
///
/// One lock per fork generation: a child forked while a parent's worker held the lock would
/// otherwise wait forever for a thread that does not exist there.
fn tail_lock() -> &'static Mutex<()> {
    let generation = fork::generation();
    loop {
        let current = TAIL_LOCK.load(Ordering::Acquire);
        // SAFETY: a non-null pointer in TAIL_LOCK came from `Box::into_raw` below and is never
        // freed, so it is valid for the life of the process.
        if let Some(lock) = unsafe { current.as_ref() } {
            if lock.generation == generation {
                return &lock.mutex;
            }
        }
        let fresh = Box::into_raw(Box::new(GenerationLock {
            generation,
            mutex: Mutex::new(()),
        }));
        if TAIL_LOCK
            .compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            // SAFETY: `fresh` is now published and never freed (see above).
            return unsafe { &(*fresh).mutex };
        }
        // Another thread published its lock first: use that one on the next turn.
        // SAFETY: `fresh` came from `Box::into_raw` just above and was never shared.
        drop(unsafe { Box::from_raw(fresh) });
    }
}

/// The sample's seed for the tail's Python generators: a 63-bit hash of `(seed, epoch, index,
/// repeat)` keyed apart from the native ops' generator (`sample_rng_repeat`), so the two draw
/// unrelated values. As there, `repeat` is absorbed only when non-zero: an index's first copy
/// keeps the seed of before copies were numbered.
pub(crate) fn tail_seed(key: SampleKey) -> u64 {
    const K_TAIL: u64 = 0x5851_f42d_4c95_7f2d;
    const K_EPOCH: u64 = 0x2545_f491_4f6c_dd1d;
    const K_INDEX: u64 = 0x9fb2_1c65_1e98_df25;
    const K_REPEAT: u64 = 0xc2b2_ae3d_27d4_eb4f;
    let mut h = mix64(key.seed ^ K_TAIL);
    h = mix64(h ^ key.epoch.wrapping_mul(K_EPOCH).wrapping_add(K_EPOCH));
    h = mix64(h ^ key.index.wrapping_mul(K_INDEX).wrapping_add(K_INDEX));
    if key.repeat != 0 {
        h = mix64(h ^ key.repeat.wrapping_mul(K_REPEAT).wrapping_add(K_REPEAT));
    }
    h >> 1
}

/// [`tail_seed`] for Python: the seed a dataset run in Python (`ferroloader._pydataset`) gives
/// the global generators before sample `index` (copy `repeat` of it in the epoch), so its
/// draws, like a tail's, depend on the sample's key alone.
#[pyfunction]
#[pyo3(signature = (seed, epoch, index, repeat = 0))]
pub(crate) fn python_seed(seed: u64, epoch: u64, index: u64, repeat: u64) -> u64 {
    tail_seed(SampleKey {
        seed,
        epoch,
        index,
        repeat,
    })
}

/// `name` with a `'static` lifetime, as profiler ops need: leaked once per distinct name for
/// the life of the process (a few per pipeline), never per loader or per sample.
pub(crate) fn intern(name: String) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(&known) = names.get(name.as_str()) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.into_boxed_str());
    names.insert(leaked);
    leaked
}

/// What the tail's first op gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TailInput {
    /// No native prefix: the file's bytes, opened by Pillow as torchvision's loader does.
    Bytes,
    /// The prefix's RGB pixels as a PIL image (the prefix stopped before `ToTensor`).
    Image,
    /// The prefix's tensor, uint8 or float32 CHW (it ended with a conversion).
    Tensor,
}

impl TailInput {
    pub(crate) fn parse(name: &str) -> PyResult<Self> {
        match name {
            "bytes" => Ok(TailInput::Bytes),
            "image" => Ok(TailInput::Image),
            "uint8" | "float32" => Ok(TailInput::Tensor),
            other => Err(pyo3::exceptions::PyValueError::new_err(format!(
                "tail_input: expected 'bytes', 'image', 'uint8' or 'float32', got {other:?}"
            ))),
        }
    }
}

/// One op of the tail.
struct TailOp {
    callable: Py<PyAny>,
    /// The profiler op: `python:<class or function name>`.
    span: &'static str,
    /// Its position and name, for errors.
    label: String,
}

/// The native prefix (if any) and the Python ops after it.
pub(crate) struct PythonTail {
    prefix: Option<ImagePipeline>,
    input: TailInput,
    ops: Vec<TailOp>,
    /// `ferroloader._tail.TailRunner`.
    runner: Py<PyAny>,
    /// What every sample must come out as; `None` until [`PythonTail::probe`] has run.
    layout: Option<TailLayout>,
}

/// A tail result's element type and shape, and the 3-dimensional layout the batch ring holds
/// it in: leading dimensions folded into the first (`FiveCrop`'s `(5, 3, H, W)` is held as
/// `(15, H, W)`), missing ones 1; the Python loader views each batch back at `shape`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct TailLayout {
    layout: SampleLayout,
    shape: Vec<usize>,
}

impl fmt::Debug for PythonTail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PythonTail")
            .field("prefix", &self.prefix)
            .field("input", &self.input)
            .field(
                "ops",
                &self.ops.iter().map(|op| op.span).collect::<Vec<_>>(),
            )
            .field("layout", &self.layout)
            .finish()
    }
}

/// The prefix's output, as the tail's input is built from it.
enum Prefixed<'a> {
    Bytes(&'a [u8]),
    U8(&'a [u8], [usize; 3]),
    F32(&'a [f32], [usize; 3]),
}

impl PythonTail {
    /// `ops` are `(callable, name)` pairs in order; `prefix` must be planned to give what
    /// `input` says (`None` exactly when `input` is [`TailInput::Bytes`]).
    pub(crate) fn new(
        prefix: Option<ImagePipeline>,
        input: TailInput,
        ops: Vec<(Py<PyAny>, String)>,
        runner: Py<PyAny>,
    ) -> PyResult<Self> {
        let expected_u8_hwc = match &prefix {
            None if input == TailInput::Bytes => None,
            Some(p) if input != TailInput::Bytes => {
                Some(p.sample_layout().order == ferroloader_loader::AxisOrder::Hwc)
            }
            _ => {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "tail_input: 'bytes' exactly when there is no native prefix",
                ))
            }
        };
        if expected_u8_hwc.is_some_and(|hwc| hwc != (input == TailInput::Image)) {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "tail_input: an 'image' tail needs a prefix without a tensor conversion",
            ));
        }
        let ops = ops
            .into_iter()
            .enumerate()
            .map(|(i, (callable, name))| TailOp {
                callable,
                span: intern(format!("python:{name}")),
                label: format!("tail op #{i} {name}"),
            })
            .collect();
        Ok(PythonTail {
            prefix,
            input,
            ops,
            runner,
            layout: None,
        })
    }

    /// The profiler ops of the tail, in order.
    pub(crate) fn spans(&self) -> Vec<&'static str> {
        self.ops.iter().map(|op| op.span).collect()
    }

    /// The native prefix, when there is one.
    pub(crate) fn prefix(&self) -> Option<&ImagePipeline> {
        self.prefix.as_ref()
    }

    /// A sample's shape as the tail returns it (any number of dimensions); `None` before the
    /// probe.
    pub(crate) fn sample_shape(&self) -> Option<&[usize]> {
        self.layout.as_ref().map(|l| l.shape.as_slice())
    }

    /// Runs the whole pipeline on the first sample that works (only the first with
    /// `ErrorPolicy::Raise`, up to 16 under `Skip`) and fixes the layout to its result's.
    /// Called without the GIL.
    pub(crate) fn probe(
        mut self,
        source: &dyn Source,
        seed: u64,
        policy: ErrorPolicy,
    ) -> Result<Self, LoaderError> {
        let tries = match policy {
            ErrorPolicy::Raise => 1,
            _ => 16,
        };
        let mut first_error = None;
        let mut scratch = TailScratch::default();
        let mut buf = Vec::new();
        for index in 0..source.len().min(tries) {
            let path = || source.error_name(index);
            let bytes = match source.read(index, &mut buf) {
                Ok(bytes) => bytes,
                Err(source) => {
                    first_error.get_or_insert(LoaderError::Read {
                        index,
                        path: path(),
                        source,
                    });
                    continue;
                }
            };
            let key = SampleKey {
                seed,
                epoch: 0,
                index: index as u64,
                repeat: 0,
            };
            let mut hooks = LastOp::default();
            let probed = self
                .prefix_into(bytes, key, &mut scratch, &mut hooks)
                .and_then(|prefixed| {
                    self.locked_python(&mut hooks, |py, hooks| {
                        let array = self.run_ops(py, prefixed, key, hooks)?;
                        layout_of(&array).map_err(|e| external(py, "tail result", &e))
                    })
                });
            match probed {
                Ok(layout) => {
                    self.layout = Some(layout);
                    return Ok(self);
                }
                Err(source) => {
                    first_error.get_or_insert(LoaderError::Transform {
                        index,
                        path: path(),
                        op: hooks.failing_op(),
                        source,
                    });
                }
            }
        }
        Err(first_error.unwrap_or_else(|| LoaderError::InvalidOption {
            name: "dataset",
            reason: "is empty: the Python tail's output layout is found on the first sample"
                .to_owned(),
        }))
    }

    /// Runs the native prefix into the scratch (GIL released: the caller holds none).
    fn prefix_into<'a>(
        &self,
        bytes: &'a [u8],
        key: SampleKey,
        scratch: &'a mut TailScratch,
        hooks: &mut dyn OpHooks,
    ) -> Result<Prefixed<'a>, TransformError> {
        let Some(prefix) = &self.prefix else {
            return Ok(Prefixed::Bytes(bytes));
        };
        let layout = prefix.sample_layout();
        let len = prefix.pipeline().sample_len();
        match layout.dtype {
            DType::U8 => {
                scratch.u8s.resize(len, 0);
                prefix.process(
                    bytes,
                    key,
                    &mut scratch.native,
                    SlotMut::U8(&mut scratch.u8s),
                    hooks,
                )?;
                Ok(Prefixed::U8(&scratch.u8s, layout.shape))
            }
            DType::F32 => {
                scratch.f32s.resize(len, 0.0);
                prefix.process(
                    bytes,
                    key,
                    &mut scratch.native,
                    SlotMut::F32(&mut scratch.f32s),
                    hooks,
                )?;
                Ok(Prefixed::F32(&scratch.f32s, layout.shape))
            }
        }
    }

    /// Takes the tail lock, then the GIL, and runs `f` inside the [`TAIL_SPAN`] span.
    fn locked_python<T>(
        &self,
        hooks: &mut dyn OpHooks,
        f: impl FnOnce(Python<'_>, &mut dyn OpHooks) -> Result<T, TransformError>,
    ) -> Result<T, TransformError> {
        hooks.enter(Op::Custom(TAIL_SPAN));
        let result = {
            let _serial = tail_lock().lock().unwrap_or_else(PoisonError::into_inner);
            Python::attach(|py| f(py, &mut *hooks))
        };
        hooks.exit(Op::Custom(TAIL_SPAN));
        result
    }

    /// Seeds the Python generators, runs the ops on the prefix's output and returns their
    /// result as a contiguous float32 or uint8 array; the generators are restored whatever
    /// happens.
    fn run_ops<'py>(
        &self,
        py: Python<'py>,
        prefixed: Prefixed<'_>,
        key: SampleKey,
        hooks: &mut dyn OpHooks,
    ) -> Result<Bound<'py, PyAny>, TransformError> {
        let runner = self.runner.bind(py);
        let saved = runner
            .call_method1("enter", (tail_seed(key),))
            .map_err(|e| external(py, "seeding the tail", &e))?;
        let result = self.run_ops_seeded(py, runner, prefixed, hooks);
        let restored = runner.call_method1("exit", (saved,));
        let array = result?;
        restored.map_err(|e| external(py, "restoring the generators", &e))?;
        Ok(array)
    }

    fn run_ops_seeded<'py>(
        &self,
        py: Python<'py>,
        runner: &Bound<'py, PyAny>,
        prefixed: Prefixed<'_>,
        hooks: &mut dyn OpHooks,
    ) -> Result<Bound<'py, PyAny>, TransformError> {
        let data = match prefixed {
            Prefixed::Bytes(bytes) => Ok(PyBytes::new(py, bytes).into_any()),
            Prefixed::U8(values, shape) => PyArray1::from_slice(py, values)
                .reshape(shape)
                .map(Bound::into_any),
            Prefixed::F32(values, shape) => PyArray1::from_slice(py, values)
                .reshape(shape)
                .map(Bound::into_any),
        }
        .map_err(|e| external(py, "tail input", &e))?;
        let mut x = runner
            .call_method1("to_input", (data,))
            .map_err(|e| external(py, "tail input", &e))?;
        for op in &self.ops {
            hooks.enter(Op::Custom(op.span));
            let out = op.callable.bind(py).call1((x,));
            hooks.exit(Op::Custom(op.span));
            x = out.map_err(|e| external(py, &op.label, &e))?;
        }
        runner
            .call_method1("to_output", (x,))
            .map_err(|e| external(py, "tail result", &e))
    }

    fn process(
        &self,
        bytes: &[u8],
        key: SampleKey,
        scratch: &mut TailScratch,
        out: SlotMut<'_>,
        hooks: &mut dyn OpHooks,
    ) -> Result<(), TransformError> {
        let expected = self
            .layout
            .as_ref()
            .ok_or_else(|| TransformError::External {
                detail: "the Python tail ran before its layout was probed".to_owned(),
            })?;
        let prefixed = self.prefix_into(bytes, key, scratch, hooks)?;
        self.locked_python(hooks, |py, hooks| {
            let array = self.run_ops(py, prefixed, key, hooks)?;
            let got = layout_of(&array).map_err(|e| external(py, "tail result", &e))?;
            if got != *expected {
                return Err(TransformError::External {
                    detail: format!(
                        "the tail returned {}, but the first sample gave {} (every sample of \
                         a batch must have the same shape and dtype)",
                        describe(&got),
                        describe(expected)
                    ),
                });
            }
            copy_into(&array, out).map_err(|e| external(py, "tail result", &e))
        })
    }
}

/// `(3, 224, 224) float32`.
fn describe(layout: &TailLayout) -> String {
    let dtype = match layout.layout.dtype {
        DType::F32 => "float32",
        DType::U8 => "uint8",
    };
    let dims: Vec<String> = layout.shape.iter().map(usize::to_string).collect();
    let comma = if dims.len() == 1 { "," } else { "" };
    format!("({}{comma}) {dtype}", dims.join(", "))
}

/// The layout of a float32 or uint8 array of any shape (what `TailRunner.to_output` returns).
fn layout_of(array: &Bound<'_, PyAny>) -> PyResult<TailLayout> {
    let (dtype, shape) = if let Ok(a) = array.extract::<PyReadonlyArrayDyn<'_, f32>>() {
        (DType::F32, a.shape().to_vec())
    } else {
        let a = array.extract::<PyReadonlyArrayDyn<'_, u8>>()?;
        (DType::U8, a.shape().to_vec())
    };
    let [c, h, w] = held_as(&shape);
    Ok(TailLayout {
        layout: SampleLayout::chw(dtype, c, h, w),
        shape,
    })
}

/// `shape` as three dimensions: the leading ones multiplied into the first, 1 for any missing.
fn held_as(shape: &[usize]) -> [usize; 3] {
    let n = shape.len();
    let dim = |from_end: usize| {
        if n >= from_end {
            shape[n - from_end]
        } else {
            1
        }
    };
    let lead: usize = shape[..n.saturating_sub(2)].iter().product();
    [if n >= 3 { lead } else { dim(3) }, dim(2), dim(1)]
}

/// Copies a contiguous array of the slot's dtype and length into the slot.
fn copy_into(array: &Bound<'_, PyAny>, out: SlotMut<'_>) -> PyResult<()> {
    fn copy<T: numpy::Element + Copy>(array: &Bound<'_, PyAny>, dst: &mut [T]) -> PyResult<()> {
        let a = array.extract::<PyReadonlyArrayDyn<'_, T>>()?;
        let src = a.as_slice()?;
        if src.len() != dst.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "{} values for a slot of {}",
                src.len(),
                dst.len()
            )));
        }
        dst.copy_from_slice(src);
        Ok(())
    }
    match out {
        SlotMut::F32(dst) => copy(array, dst),
        SlotMut::U8(dst) => copy(array, dst),
    }
}

/// A Python exception as the transforms' error: `what` (the op or step), the exception's type
/// and message.
fn external(py: Python<'_>, what: &str, e: &PyErr) -> TransformError {
    let kind = e
        .get_type(py)
        .qualname()
        .map_or_else(|_| "Exception".to_owned(), |n| n.to_string());
    let message = e
        .value(py)
        .str()
        .map_or_else(|_| "<unprintable>".to_owned(), |s| s.to_string());
    TransformError::External {
        detail: format!("{what} raised {kind}: {message}"),
    }
}

/// Remembers the op to blame when the probe fails (the loader's own tracker is not public).
#[derive(Default)]
struct LastOp {
    open: Vec<Op>,
    last: Option<Op>,
}

impl LastOp {
    fn failing_op(&self) -> Op {
        self.open
            .last()
            .copied()
            .or(self.last)
            .unwrap_or(Op::Process)
    }
}

impl OpHooks for LastOp {
    fn enter(&mut self, op: Op) {
        self.open.push(op);
    }
    fn exit(&mut self, op: Op) {
        self.open.pop();
        self.last = Some(op);
    }
}

/// Per-worker state: the native prefix's context and the buffer it writes into, or the
/// views' state.
#[derive(Default)]
pub(crate) struct TailScratch {
    native: Option<PipelineContext>,
    u8s: Vec<u8>,
    f32s: Vec<f32>,
    views: ViewsScratch,
}

/// What the loader runs per sample.
#[derive(Debug)]
pub(crate) enum Processor {
    /// The whole transform runs natively.
    Native(ImagePipeline),
    /// A native prefix, then Python.
    WithTail(PythonTail),
    /// Several views of each image, each natively (`crate::views`).
    Views(Views),
}

impl Processor {
    /// The planned native pipeline (the prefix, with a tail).
    pub(crate) fn native(&self) -> Option<&ImagePipeline> {
        match self {
            Processor::Native(p) => Some(p),
            Processor::WithTail(t) => t.prefix(),
            Processor::Views(v) => Some(v.first()),
        }
    }

    /// The `Normalize` left for the consumer with uint8 output; never with a tail, whose
    /// result is the batch as it is.
    pub(crate) fn deferred_normalize(&self) -> Option<(&[f32], &[f32])> {
        match self {
            Processor::Native(p) => p.pipeline().deferred_normalize(),
            Processor::WithTail(_) | Processor::Views(_) => None,
        }
    }
}

impl SampleProcessor for Processor {
    type Scratch = TailScratch;

    fn new_scratch(&self) -> TailScratch {
        TailScratch::default()
    }

    fn scratch_bytes(&self, scratch: &TailScratch) -> usize {
        scratch
            .native
            .as_ref()
            .map_or(0, PipelineContext::retained_bytes)
            + scratch.u8s.capacity()
            + 4 * scratch.f32s.capacity()
            + scratch.views.retained_bytes()
    }

    fn sample_layout(&self) -> SampleLayout {
        match self {
            Processor::Native(p) => p.sample_layout(),
            // `PyLoader::new` probes before building the loader; an unprobed tail (a bug) gets
            // an empty layout, which the loader refuses.
            Processor::WithTail(t) => t
                .layout
                .as_ref()
                .map_or(SampleLayout::chw(DType::U8, 0, 0, 0), |l| l.layout),
            Processor::Views(v) => v.layout(),
        }
    }

    fn process(
        &self,
        bytes: &[u8],
        key: SampleKey,
        scratch: &mut TailScratch,
        out: SlotMut<'_>,
        hooks: &mut dyn OpHooks,
    ) -> Result<(), TransformError> {
        match self {
            Processor::Native(p) => p.process(bytes, key, &mut scratch.native, out, hooks),
            Processor::WithTail(t) => t.process(bytes, key, scratch, out, hooks),
            Processor::Views(_) => Err(TransformError::InvalidArgument {
                name: "views",
                reason: "views write one part each (process_parts)".to_owned(),
            }),
        }
    }

    fn sample_parts(&self) -> Vec<usize> {
        match self {
            Processor::Views(v) => v.parts(),
            Processor::Native(_) | Processor::WithTail(_) => Vec::new(),
        }
    }

    fn process_parts(
        &self,
        bytes: &[u8],
        key: SampleKey,
        scratch: &mut TailScratch,
        mut out: SlotParts<'_>,
        hooks: &mut dyn OpHooks,
    ) -> Result<(), TransformError> {
        if let Processor::Views(v) = self {
            return v.process(bytes, key, &mut scratch.views, out, hooks);
        }
        match out.part(0) {
            Some(slot) => self.process(bytes, key, scratch, slot, hooks),
            None => Err(TransformError::InvalidArgument {
                name: "sample_parts",
                reason: "a sample of no parts".to_owned(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_of_any_rank_are_held_in_three_dimensions() {
        assert_eq!(held_as(&[5, 3, 48, 40]), [15, 48, 40]);
        assert_eq!(held_as(&[2, 5, 3, 4, 6]), [30, 4, 6]);
        assert_eq!(held_as(&[3, 224, 224]), [3, 224, 224]);
        assert_eq!(held_as(&[8, 9]), [1, 8, 9]);
        assert_eq!(held_as(&[7]), [1, 1, 7]);
        assert_eq!(held_as(&[]), [1, 1, 1]);
        let layout = |shape: Vec<usize>| {
            let [c, h, w] = held_as(&shape);
            TailLayout {
                layout: SampleLayout::chw(DType::F32, c, h, w),
                shape,
            }
        };
        assert_eq!(
            describe(&layout(vec![5, 3, 48, 40])),
            "(5, 3, 48, 40) float32"
        );
        assert_eq!(describe(&layout(vec![7])), "(7,) float32");
        // Two shapes held alike are still two layouts: a sample of the other is an error.
        assert_ne!(layout(vec![15, 48, 40]), layout(vec![5, 3, 48, 40]));
    }

    #[test]
    fn tail_seed_depends_on_every_part_of_the_key() {
        let key = SampleKey {
            seed: 1,
            epoch: 2,
            index: 3,
            repeat: 0,
        };
        let base = tail_seed(key);
        assert!(base < 1 << 63);
        // Repeat 0 is the seed of before repeats were numbered (pinned), other repeats differ.
        assert_eq!(base, 0x6646_667f_7eec_e0b8);
        assert_ne!(base, tail_seed(SampleKey { repeat: 1, ..key }));
        assert_ne!(
            tail_seed(SampleKey { repeat: 1, ..key }),
            tail_seed(SampleKey { repeat: 2, ..key })
        );
        assert_ne!(base, tail_seed(SampleKey { seed: 0, ..key }));
        assert_ne!(base, tail_seed(SampleKey { epoch: 3, ..key }));
        assert_ne!(base, tail_seed(SampleKey { index: 4, ..key }));
        assert_ne!(
            tail_seed(SampleKey {
                seed: 1,
                epoch: 3,
                index: 2,
                repeat: 0,
            }),
            base
        );
    }

    #[test]
    fn one_tail_lock_per_generation() {
        let a = tail_lock();
        let b = std::thread::spawn(|| tail_lock() as *const Mutex<()> as usize)
            .join()
            .expect("thread");
        assert_eq!(a as *const Mutex<()> as usize, b);
        let held = a.lock().expect("lock");
        assert!(tail_lock().try_lock().is_err());
        drop(held);
    }

    #[test]
    fn intern_leaks_each_name_once() {
        let a = intern("python:Same".to_owned());
        let b = intern("python:Same".to_owned());
        assert!(std::ptr::eq(a, b));
        assert_eq!(a, "python:Same");
    }
}
