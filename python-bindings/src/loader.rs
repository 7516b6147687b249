//! The loader and its epoch iterator as Python objects.
//!
//! [`PyLoader`] wraps a `ferroloader_loader::Loader` over the dataset and the planned image
//! pipeline; [`PyEpochIter`] is one epoch, a `#[pyclass(frozen)]` whose `__next__` waits for the
//! next batch with the GIL released, in short slices so that Ctrl-C raises promptly.
//!
//! The loader's `EpochIter::next` blocks until a batch is complete and cannot be woken, so the
//! epoch runs on a *pump* thread that calls `next()` only when asked (no read-ahead beyond the
//! loader's own prefetch) and sends each result back over a channel; Python waits on the channel
//! in slices (see [`crate::detach`]). A `KeyboardInterrupt` leaves the request pending: the batch
//! is not lost, the next `__next__` returns it. Dropping the iterator asks the pump to stop; it
//! then ends the epoch (stopping and joining its workers) on its own thread, so Python never
//! blocks on that, except at interpreter exit, which waits for every pump ([`crate::at_exit`]).
//! Both objects are [`ForkLocal`]: unusable (and leaked, not destroyed) in a forked child. Must
//! not hold the GIL while waiting, nor keep a thread running once the iterator is gone and its
//! last `next()` has returned.

use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex, PoisonError, TryLockError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use ferroloader_loader::profiler::{Mode, Profiler, ProfilerConfig};
use ferroloader_loader::transforms::decode::DecodeContext;
use ferroloader_loader::transforms::spec::PipelineSpec;
use ferroloader_loader::{
    plan_repeats, Batch, BatchOps, DType, Delivery, EpochIter, ErrorPolicy, HostMemory,
    ImagePipeline, Loader, LoaderError, LoaderOptions, ResumePoint, Sampler, Shard, Source,
};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::at_exit;
use crate::batch::into_arrays;
use crate::batch_mix::{MixArg, PlannedMix};
use crate::cuda::CudaPageLock;
use crate::dataset::as_source;
use crate::detach::run_detached;
use crate::errors::{exact_text, os_str, transform_config_error, ToPyErr};
use crate::fork::ForkLocal;
use crate::profile::PyProfile;
use crate::tail::{Processor, PythonTail, TailInput};
use crate::views::Views;

type NativeLoader = Loader<Arc<dyn Source>, Processor>;
type NativeEpoch = EpochIter<Arc<dyn Source>, Processor>;

/// Parses the pipeline spec (JSON of `ferroloader_transforms::spec::PipelineSpec`).
pub(crate) fn parse_spec(spec: &str) -> PyResult<PipelineSpec> {
    serde_json::from_str(spec).map_err(|e| PyValueError::new_err(format!("transform: {e}")))
}

/// Plans a parsed pipeline spec.
pub(crate) fn plan_spec(spec: PipelineSpec) -> PyResult<ImagePipeline> {
    ImagePipeline::new(spec).map_err(|e| {
        let arg = match &e {
            ferroloader_loader::transforms::Error::InvalidArgument { name: "output", .. } => {
                "output"
            }
            _ => "transform",
        };
        transform_config_error(arg, &e)
    })
}

/// How many samples the loader tries, in dataset order, for the size of a pipeline that keeps
/// each image's own size (one that cannot be read is passed over, as the Python tail's probe
/// passes over bad samples).
const SIZE_PROBES: usize = 16;

/// Parses and plans `spec` for the samples of `source`: a pipeline with no crop or resize first
/// takes its images' size from the first sample whose header reads (found with the GIL
/// released: the source may read files, or take the GIL for `dataset[i]`).
fn plan_for_source(
    py: Python<'_>,
    spec: &str,
    source: &Arc<dyn Source>,
) -> PyResult<ImagePipeline> {
    let mut spec = parse_spec(spec)?;
    if spec.needs_image_size() && spec.image_size.is_none() {
        let (probe_spec, probe_source) = (spec.clone(), Arc::clone(source));
        let size = py
            .detach(move || first_image_size(&probe_spec, probe_source.as_ref()))
            .map_err(PyValueError::new_err)?;
        spec.image_size = Some(size);
    }
    plan_spec(spec)
}

/// `[height, width]` of the first of the first [`SIZE_PROBES`] samples whose header reads.
fn first_image_size(spec: &PipelineSpec, source: &dyn Source) -> Result<[u32; 2], String> {
    let options = spec.decode_options();
    let mut decode = DecodeContext::new(options).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let mut first_error = None;
    for index in 0..source.len().min(SIZE_PROBES) {
        let read = source
            .read(index, &mut buf)
            .map_err(|e| e.to_string())
            .and_then(|bytes| decode.info(bytes).map_err(|e| e.to_string()));
        match read {
            Ok(info) => return Ok([info.height, info.width]),
            Err(why) => {
                first_error.get_or_insert_with(|| {
                    format!("{}: {why}", source.error_name(index).display())
                });
            }
        }
    }
    Err(match first_error {
        Some(why) => format!(
            "transform: the pipeline keeps each image's size (no crop or resize first), and no \
             sample among the first {SIZE_PROBES} could be read to learn it; the first: {why}"
        ),
        None => "transform: the pipeline keeps each image's size (no crop or resize first), \
                 and the dataset is empty"
            .to_owned(),
    })
}

/// A loader over an `ImageFolder` or `FileList` with an image pipeline.
#[pyclass(frozen, module = "ferroloader._native", name = "Loader")]
#[derive(Debug)]
pub(crate) struct PyLoader {
    inner: ForkLocal<NativeLoader>,
    /// The pump threads of this loader's epochs, so `profile()` can wait for the epochs the
    /// consumer has finished or dropped to flush their workers' spans.
    pumps: ForkLocal<Mutex<Vec<PumpThread>>>,
}

#[pymethods]
impl PyLoader {
    /// `spec` is the pipeline as JSON (what `ferroloader.transforms` produces); with a Python
    /// tail, the native prefix's (`None`: no prefix, the tail decodes with Pillow), `tail` the
    /// `(callable, name)` ops after it and `tail_runner` a `ferroloader._tail.TailRunner`
    /// whose `input_kind` says what the first op gets; `page_lock` the path of the CUDA runtime
    /// that locks the batch buffers (`pin_memory`). The other arguments are the loader
    /// options, checked by the Python wrapper first; `sampler_rank` is `(rank, world_size)`
    /// of the distributed job whose sampler gives `iter_indices`' indices
    /// (`LoaderOptions::indices_rank`).
    #[new]
    #[pyo3(signature = (
        dataset, spec, *, batch_size, shuffle, drop_last, seed, num_workers, prefetch_batches,
        in_order, on_error, rank = None, world_size = None, profile_mode = "off", scratch_limit = None,
        tail = None, tail_runner = None, page_lock = None, replace_retries = 10, sampler_rank = None,
        views = None, shared_decode = false
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        dataset: &Bound<'_, PyAny>,
        spec: Option<&str>,
        batch_size: usize,
        shuffle: bool,
        drop_last: bool,
        seed: u64,
        num_workers: Option<usize>,
        prefetch_batches: usize,
        in_order: bool,
        on_error: &str,
        rank: Option<usize>,
        world_size: Option<usize>,
        profile_mode: &str,
        scratch_limit: Option<usize>,
        tail: Option<Vec<(Py<PyAny>, String)>>,
        tail_runner: Option<Bound<'_, PyAny>>,
        page_lock: Option<&str>,
        replace_retries: u32,
        sampler_rank: Option<(usize, usize)>,
        views: Option<Vec<String>>,
        shared_decode: bool,
    ) -> PyResult<Self> {
        let source = as_source(dataset)?;
        let planned_views = views
            .as_deref()
            .map(|specs| {
                let pipelines = specs
                    .iter()
                    .map(|spec| plan_for_source(py, spec, &source))
                    .collect::<PyResult<Vec<_>>>()?;
                Views::new(pipelines, shared_decode).map_err(PyValueError::new_err)
            })
            .transpose()?;
        let pipeline = spec
            .map(|spec| plan_for_source(py, spec, &source))
            .transpose()?;
        let policy = match on_error {
            "raise" => ErrorPolicy::Raise,
            "skip" => ErrorPolicy::Skip,
            "replace" => ErrorPolicy::Replace {
                retries: replace_retries,
            },
            other => {
                return Err(PyValueError::new_err(format!(
                    "on_error: expected 'raise', 'skip' or 'replace', got {other:?}"
                )))
            }
        };
        let processor = match (pipeline, tail, tail_runner) {
            (None, None, None) if planned_views.is_some() => {
                Processor::Views(planned_views.ok_or_else(|| PyValueError::new_err("views"))?)
            }
            (Some(pipeline), None, None) if planned_views.is_none() => Processor::Native(pipeline),
            (prefix, Some(ops), Some(runner)) => {
                let input: String = runner.getattr("input_kind")?.extract()?;
                let tail =
                    PythonTail::new(prefix, TailInput::parse(&input)?, ops, runner.unbind())?;
                let probe_source = Arc::clone(&source);
                let tail = py
                    .detach(move || tail.probe(probe_source.as_ref(), seed, policy))
                    .map_err(|e| e.to_py_err(py))?;
                Processor::WithTail(tail)
            }
            _ => {
                return Err(PyValueError::new_err(
                    "transform: a spec, or tail and tail_runner (and a spec for any native \
                     prefix), or views alone",
                ))
            }
        };
        let mut options = LoaderOptions::default()
            .batch_size(batch_size)
            .shuffle(shuffle)
            .drop_last(drop_last)
            .seed(seed)
            .prefetch_batches(prefetch_batches)
            .delivery(if in_order {
                Delivery::InOrder
            } else {
                Delivery::CompletionOrder
            })
            .on_error(policy);
        if let Some(n) = num_workers {
            options = options.num_workers(n);
        }
        if let Some((rank, world_size)) = sampler_rank {
            options = options.indices_rank(rank, world_size); // checked by Loader::new
        }
        if let Some(bytes) = scratch_limit {
            options = options.scratch_limit(bytes);
        }
        if let Some(runtime) = page_lock {
            let lock = CudaPageLock::open(runtime)
                .map_err(|e| PyRuntimeError::new_err(format!("pin_memory: {e}")))?;
            options = options.host_memory(HostMemory::PageLocked(Arc::new(lock)));
        }
        match (rank, world_size) {
            (None, None) => {}
            (Some(rank), Some(world_size)) => options = options.shard(Shard::new(rank, world_size)),
            _ => {
                return Err(PyValueError::new_err(
                    "rank: rank and world_size must be given together",
                ))
            }
        }
        let mode: Mode = profile_mode
            .parse()
            .map_err(|e| PyValueError::new_err(format!("profile: {e}")))?;
        // The spec goes into the profile so a report can say what pipeline ran.
        let mut profiler = ProfilerConfig::new(mode).label("native").meta(
            "decoder",
            processor.native().map_or_else(
                || "pillow".to_owned(),
                |p| format!("{:?}", p.pipeline().spec().decoder).to_lowercase(),
            ),
        );
        if let Some(spec) = spec {
            profiler = profiler.meta("pipeline", spec);
        }
        if let Some(specs) = &views {
            // A JSON array of the views' specs, in order.
            profiler = profiler.meta("views", format!("[{}]", specs.join(", ")));
        }
        if let Processor::WithTail(tail) = &processor {
            profiler = profiler.meta("python_tail", tail.spans().join(", "));
        }
        let loader = Loader::new(source, processor, options)
            .map_err(|e| e.to_py_err(dataset.py()))?
            .with_profiler(profiler);
        Ok(PyLoader {
            inner: ForkLocal::new(loader),
            pumps: ForkLocal::new(Mutex::new(Vec::new())),
        })
    }

    /// Everything recorded since the loader was made or last taken from (empty with
    /// `profile="off"`); epochs still running are included up to their workers' last hand-off.
    fn profile(&self, py: Python<'_>) -> PyResult<PyProfile> {
        let loader = self.inner.get("loader")?;
        self.settle_released_epochs(py)?;
        Ok(PyProfile::new(py.detach(|| loader.profile())))
    }

    /// Like `profile`, then forgets it: the next profile starts from here.
    fn take_profile(&self, py: Python<'_>) -> PyResult<PyProfile> {
        let loader = self.inner.get("loader")?;
        self.settle_released_epochs(py)?;
        Ok(PyProfile::new(py.detach(|| loader.take_profile())))
    }

    /// Starts the next epoch (the one `set_epoch` chose, then the following ones).
    fn iter(&self) -> PyResult<PyEpochIter> {
        let loader = self.inner.get("loader")?;
        self.start(loader.iter())
    }

    /// Starts the next epoch over the dataset indices given, in that order (a user sampler's
    /// output); moves the epoch counter on like `iter`.
    fn iter_indices(&self, py: Python<'_>, indices: Vec<i64>) -> PyResult<PyEpochIter> {
        let loader = self.inner.get("loader")?;
        let plan = sampler_plan(&indices)?;
        let epoch = loader.next_epoch();
        let iter = loader
            .epoch_with_indices(epoch, plan)
            .map_err(|e| e.to_py_err(py))?;
        loader.set_epoch(epoch.wrapping_add(1));
        self.start(iter)
    }

    /// Starts epoch `epoch` where an earlier run of it stood (`EpochIter.resume_state`), over
    /// the indices given when that run had them; the epoch counter moves on past it.
    #[pyo3(signature = (epoch, position, batches, delivered, indices = None))]
    fn iter_resume(
        &self,
        py: Python<'_>,
        epoch: u64,
        position: usize,
        batches: usize,
        delivered: Vec<usize>,
        indices: Option<Vec<i64>>,
    ) -> PyResult<PyEpochIter> {
        let loader = self.inner.get("loader")?;
        let plan = indices.as_deref().map(sampler_plan).transpose()?;
        let point = ResumePoint {
            batches,
            position,
            delivered,
        };
        let iter = loader
            .resume(epoch, plan, point)
            .map_err(|e| e.to_py_err(py))?;
        loader.set_epoch(epoch.wrapping_add(1));
        self.start(iter)
    }

    /// A checksum of the dataset's length and sample names, to tell a saved state from
    /// another dataset's.
    fn dataset_fingerprint(&self, py: Python<'_>) -> PyResult<u32> {
        let loader = self.inner.get("loader")?;
        Ok(py.detach(|| {
            let source = loader.source();
            let mut hasher = crc32fast::Hasher::new();
            hasher.update(&(source.len() as u64).to_le_bytes());
            for i in 0..source.len() {
                hasher.update(source.path(i).as_os_str().as_encoded_bytes());
                hasher.update(&[0]);
            }
            hasher.finalize()
        }))
    }

    /// Sets the epoch the next `iter` runs (it seeds the shuffle and every sample's draws).
    fn set_epoch(&self, epoch: u64) -> PyResult<()> {
        self.inner.get("loader")?.set_epoch(epoch);
        Ok(())
    }

    /// The dataset indices epoch `epoch` visits, in order (this rank's share): the source's own
    /// order (tar shards read one after another) or the sampler's (shuffled from `(seed,
    /// epoch)`). What `iter` runs for that epoch when no indices are given.
    fn epoch_order(&self, epoch: u64) -> PyResult<Vec<usize>> {
        Ok(self.inner.get("loader")?.epoch_order(epoch))
    }

    /// The epoch the next `iter` runs. Readable in a forked child too (to rebuild the loader
    /// there with the same counter).
    #[getter]
    fn next_epoch(&self) -> u64 {
        self.inner.peek().map_or(0, Loader::next_epoch)
    }

    /// Batches per epoch when no sample is skipped.
    #[getter]
    fn num_batches(&self) -> PyResult<usize> {
        Ok(self.inner.get("loader")?.num_batches())
    }

    /// Samples per epoch (this rank's share when sharded).
    #[getter]
    fn num_samples(&self) -> PyResult<usize> {
        Ok(self.inner.get("loader")?.num_samples())
    }

    /// Shape of one sample, e.g. `(3, 224, 224)`; a Python tail's result may have any number
    /// of dimensions (`FiveCrop`'s `(5, 3, H, W)`), which the batch arrays are held in three
    /// of (see `held_shape`).
    #[getter]
    fn sample_shape(&self) -> PyResult<Vec<usize>> {
        let loader = self.inner.get("loader")?;
        Ok(match loader.processor() {
            Processor::WithTail(tail) => tail.sample_shape().map(<[usize]>::to_vec),
            Processor::Native(_) | Processor::Views(_) => None,
        }
        .unwrap_or_else(|| loader.layout().shape.to_vec()))
    }

    /// Each view's sample shape, in order, for a loader of views (`None` otherwise): a
    /// sample holds them one after the other (`sample_shape` is `(1, 1, total)`).
    #[getter]
    fn view_shapes(&self) -> PyResult<Option<Vec<(usize, usize, usize)>>> {
        Ok(match self.inner.get("loader")?.processor() {
            Processor::Views(views) => Some(
                views
                    .shapes()
                    .into_iter()
                    .map(|[a, b, c]| (a, b, c))
                    .collect(),
            ),
            _ => None,
        })
    }

    /// Shape of one sample as the batch arrays hold it: always three dimensions.
    #[getter]
    fn held_shape(&self) -> PyResult<(usize, usize, usize)> {
        let [a, b, c] = self.inner.get("loader")?.layout().shape;
        Ok((a, b, c))
    }

    /// Element type of the images: `"float32"` or `"uint8"`.
    #[getter]
    fn dtype(&self) -> PyResult<&'static str> {
        Ok(match self.inner.get("loader")?.layout().dtype {
            DType::F32 => "float32",
            DType::U8 => "uint8",
        })
    }

    /// With `uint8` output, the `Normalize(mean, std)` of the transform left for the consumer
    /// (`(x / 255 - mean) / std`); `None` otherwise.
    #[getter]
    #[allow(clippy::type_complexity)]
    fn deferred_normalize(&self) -> PyResult<Option<(Vec<f32>, Vec<f32>)>> {
        Ok(self
            .inner
            .get("loader")?
            .processor()
            .deferred_normalize()
            .map(|(mean, std)| (mean.to_vec(), std.to_vec())))
    }

    /// Whether this object was inherited through `fork()` (and must be rebuilt).
    #[getter]
    fn inherited(&self) -> bool {
        self.inner.inherited()
    }

    fn __repr__(&self) -> String {
        match self.inner.get("loader") {
            Ok(l) => format!("{l:?}"),
            Err(_) => "Loader(<inherited through fork>)".to_owned(),
        }
    }
}

impl PyLoader {
    /// Runs `iter` on a pump thread this loader keeps track of.
    fn start(&self, iter: NativeEpoch) -> PyResult<PyEpochIter> {
        let (epoch, num_batches) = (iter.epoch(), iter.num_batches());
        let planning = Planning {
            ops: iter.batch_ops(),
            batches: iter.planned_batches(),
        };
        let (pump, thread) = Pump::start(iter)?;
        let mut pumps = self
            .pumps
            .get("loader")?
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        pumps.retain(|p| !p.handle.is_finished());
        pumps.push(thread);
        let profiler = self.inner.get("loader")?.profiler().clone();
        Ok(PyEpochIter::new(
            pump,
            epoch,
            num_batches,
            profiler,
            planning,
        ))
    }

    /// Waits (GIL released) for the pumps of epochs the consumer has ended or dropped, so that
    /// their workers have been joined and every span they recorded is in the profile. A user
    /// who breaks out of a loop and asks for the profile at once would otherwise race the pump
    /// ending the epoch on its own thread.
    fn settle_released_epochs(&self, py: Python<'_>) -> PyResult<()> {
        let mut pumps = self
            .pumps
            .get("loader")?
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (released, live): (Vec<_>, Vec<_>) = std::mem::take(&mut *pumps)
            .into_iter()
            .partition(|p| p.released.load(Ordering::Acquire));
        *pumps = live;
        py.detach(|| {
            for pump in released {
                // A pump that panicked has nothing more to flush.
                let _ = pump.handle.join();
            }
        });
        Ok(())
    }
}

/// The loader's handle on an epoch's pump thread.
#[derive(Debug)]
struct PumpThread {
    handle: JoinHandle<()>,
    /// The consumer has seen the epoch end or dropped its iterator: the pump is ending it.
    released: Arc<AtomicBool>,
}

/// What the pump sends back for one request.
struct Reply {
    item: Option<Result<Batch, LoaderError>>,
    /// Samples skipped since the previous reply.
    skipped: Vec<Skipped>,
    /// Where the epoch stands once the consumer has this reply's batch.
    resume: ResumePoint,
}

/// `(dataset index, path, why)` of a skipped sample, as Python gets it.
type SkippedRow<'py> = (usize, Bound<'py, PyAny>, Bound<'py, PyAny>);

/// A sample skipped under `on_error="skip"`, as the pump reports it.
#[derive(Clone, Debug)]
struct Skipped {
    index: usize,
    /// The file, as the OS names it.
    path: OsString,
    /// The error's message (the path in it lossy until it reaches Python).
    why: String,
}

/// What the consumer (or interpreter exit) asks of the pump.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Request {
    /// The next batch.
    Next,
    /// End the epoch: the consumer is gone, or the interpreter is exiting.
    Stop,
}

/// The consumer's end of an epoch running on its pump thread.
struct Pump {
    requests: Sender<Request>,
    replies: Receiver<Reply>,
    /// A request was sent and its reply not received yet (after a `KeyboardInterrupt`).
    pending: bool,
    ended: bool,
    skipped: Vec<Skipped>,
    /// Where the epoch stands for the consumer: updated with each batch it receives.
    resume: ResumePoint,
    /// Longest wait for one batch (`timeout` of torch's DataLoader); `None`: forever.
    timeout: Option<Duration>,
    /// Shared with the loader's [`PumpThread`]; set once this side is done with the epoch.
    released: Arc<AtomicBool>,
}

impl Drop for Pump {
    fn drop(&mut self) {
        // The exit registry holds a sender too, so the channel stays open: say it.
        let _ = self.requests.send(Request::Stop);
        self.released.store(true, Ordering::Release);
    }
}

impl Pump {
    fn start(iter: NativeEpoch) -> PyResult<(Self, PumpThread)> {
        let (requests, request_rx) = mpsc::channel::<Request>();
        // Capacity 1: the pump never runs ahead of the consumer by more than the batch asked for.
        let (reply_tx, replies) = mpsc::sync_channel::<Reply>(1);
        // Never sent on: dropped when the thread ends, after the epoch (and its workers).
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let handle = thread::Builder::new()
            .name("ferroloader-pump".to_owned())
            .spawn(move || {
                pump_main(iter, &request_rx, &reply_tx);
                drop(done_tx);
            })
            .map_err(|e| PyRuntimeError::new_err(format!("cannot start the epoch thread: {e}")))?;
        let stop = Mutex::new(requests.clone());
        at_exit::register(
            move || {
                let _ = stop
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .send(Request::Stop);
            },
            done_rx,
        );
        let released = Arc::new(AtomicBool::new(false));
        let pump = Pump {
            requests,
            replies,
            pending: false,
            ended: false,
            skipped: Vec::new(),
            resume: ResumePoint::default(),
            timeout: None,
            released: Arc::clone(&released),
        };
        Ok((pump, PumpThread { handle, released }))
    }

    /// Marks the epoch over on this side: no more requests, and the loader may wait for the
    /// pump to finish it.
    fn end(&mut self) {
        self.ended = true;
        self.released.store(true, Ordering::Release);
    }

    /// The next batch, `None` at the end of the epoch. Waits with the GIL released; a
    /// `KeyboardInterrupt` while waiting keeps the request pending.
    fn next(&mut self, py: Python<'_>) -> PyResult<Option<Batch>> {
        if self.ended {
            return Ok(None);
        }
        if !self.pending {
            if self.requests.send(Request::Next).is_err() {
                self.end();
                return Err(PyRuntimeError::new_err(
                    "the epoch thread ended unexpectedly",
                ));
            }
            self.pending = true;
        }
        let replies = &mut self.replies;
        let deadline = self.timeout.map(|t| (t, Instant::now() + t));
        let waited = run_detached(py, move |slice| {
            let slice = match deadline {
                Some((_, at)) => match at.checked_duration_since(Instant::now()) {
                    Some(left) => slice.min(left),
                    None => return Some(Ok::<_, LoaderError>(Waited::TimedOut)),
                },
                None => slice,
            };
            match replies.recv_timeout(slice) {
                Ok(reply) => Some(Ok(Waited::Reply(Box::new(reply)))),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => Some(Ok(Waited::Gone)),
            }
        })?;
        let reply = match waited {
            Waited::Reply(reply) => *reply,
            // The request stays pending: the batch is not lost, a later `next()` gets it.
            Waited::TimedOut => {
                let secs = deadline.map_or(0.0, |(t, _)| t.as_secs_f64());
                return Err(PyRuntimeError::new_err(format!(
                    "DataLoader timed out after {secs} seconds"
                )));
            }
            Waited::Gone => {
                self.pending = false;
                self.end();
                return Err(PyRuntimeError::new_err(
                    "the epoch thread ended unexpectedly",
                ));
            }
        };
        self.pending = false;
        self.skipped.extend(reply.skipped);
        if matches!(reply.item, Some(Ok(_))) {
            self.resume = reply.resume;
        }
        match reply.item {
            Some(Ok(batch)) => Ok(Some(batch)),
            Some(Err(e)) => {
                // The loader ends an epoch after an error.
                self.end();
                Err(e.to_py_err(py))
            }
            None => {
                self.end();
                Ok(None)
            }
        }
    }
}

/// The seed view `view` of a sample draws from, for a loader seeded `seed` (see
/// `ferroloader._views.view_seed`).
#[pyfunction]
pub(crate) fn view_seed(seed: u64, view: u64) -> u64 {
    crate::views::view_seed(seed, view)
}

/// The dataset indices of epoch `epoch`, in visiting order, as the native loader visits them
/// (shuffled from `(seed, epoch)`, cut to one rank's share): the order a dataset run in Python
/// (`ferroloader._pydataset`) batches, so both kinds of loader agree sample for sample.
#[pyfunction]
#[pyo3(signature = (len, *, shuffle, seed, epoch, rank = None, world_size = None))]
pub(crate) fn epoch_indices(
    len: usize,
    shuffle: bool,
    seed: u64,
    epoch: u64,
    rank: Option<usize>,
    world_size: Option<usize>,
) -> PyResult<Vec<usize>> {
    let shard = match (rank, world_size) {
        (None, None) => None,
        (Some(rank), Some(world_size)) => Some(Shard::new(rank, world_size)),
        _ => {
            return Err(PyValueError::new_err(
                "rank: rank and world_size must be given together",
            ))
        }
    };
    let sampler = Sampler::new(len, shuffle, seed, shard)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(sampler.indices(epoch))
}

/// The copy number (`SampleKey::repeat`) of each position of an epoch's plan, as the native
/// loader numbers them, for a dataset run in Python (`ferroloader._pydataset`) to key its
/// samples alike: with `indices` (a sampler's plan over `len` samples) the earlier visits of
/// each index, spread over the ranks by `rank`/`world_size` (the sampler's job); without, the
/// padding numbers of the loader's own cut of `len` samples into `rank`'s share. Empty when
/// every number is 0.
#[pyfunction]
#[pyo3(signature = (len, *, indices = None, rank = None, world_size = None))]
pub(crate) fn repeat_numbers(
    len: usize,
    indices: Option<Vec<i64>>,
    rank: Option<usize>,
    world_size: Option<usize>,
) -> PyResult<Vec<u64>> {
    let pair = match (rank, world_size) {
        (None, None) => None,
        (Some(rank), Some(world_size)) if rank < world_size => Some((rank, world_size)),
        (Some(rank), Some(world_size)) => {
            return Err(PyValueError::new_err(format!(
                "rank: {rank} is not below world_size {world_size}"
            )))
        }
        _ => {
            return Err(PyValueError::new_err(
                "rank: rank and world_size must be given together",
            ))
        }
    };
    match indices {
        Some(indices) => Ok(plan_repeats(&sampler_plan(&indices)?, len, pair)),
        None => {
            let shard = pair.map(|(rank, world_size)| Shard::new(rank, world_size));
            let sampler = Sampler::new(len, false, 0, shard)
                .map_err(|e| PyValueError::new_err(e.to_string()))?;
            Ok(sampler.repeats())
        }
    }
}

/// A sampler's output as dataset indices.
fn sampler_plan(indices: &[i64]) -> PyResult<Vec<usize>> {
    indices
        .iter()
        .enumerate()
        .map(|(position, &index)| {
            usize::try_from(index).map_err(|_| {
                pyo3::exceptions::PyIndexError::new_err(format!(
                    "sampler: index {index} at position {position} is negative"
                ))
            })
        })
        .collect()
}

/// How a wait for the pump's reply ended.
enum Waited {
    Reply(Box<Reply>),
    TimedOut,
    /// The pump thread is gone.
    Gone,
}

/// The pump thread: one `next()` per request, until the epoch ends or the consumer is gone;
/// the epoch (and its workers) ends here when `iter` drops.
fn pump_main(mut iter: NativeEpoch, requests: &Receiver<Request>, replies: &SyncSender<Reply>) {
    let mut forwarded = 0;
    while requests.recv() == Ok(Request::Next) {
        let item = iter.next();
        let skipped = iter
            .skipped()
            .get(forwarded..)
            .unwrap_or_default()
            .iter()
            .map(|s| {
                let path = s
                    .error
                    .path()
                    .map(|p| p.as_os_str().to_owned())
                    .unwrap_or_default();
                Skipped {
                    index: s.index,
                    path,
                    why: s.error.to_string(),
                }
            })
            .collect();
        forwarded = iter.skipped().len();
        let end = item.is_none();
        let resume = iter.resume_point().clone();
        let reply = Reply {
            item,
            skipped,
            resume,
        };
        if replies.send(reply).is_err() || end {
            break;
        }
    }
}

/// What the consumer plans the workers' batch mixing with ([`PyEpochIter::plan_mix`]).
struct Planning {
    ops: Arc<BatchOps>,
    /// The epoch's planned batches: `(number, samples)`.
    batches: Vec<(usize, usize)>,
}

/// One epoch of a loader: yields `(images, labels, indices)` numpy arrays viewing the batch
/// buffer (see `BatchMemory`).
#[pyclass(frozen, module = "ferroloader._native", name = "EpochIter")]
pub(crate) struct PyEpochIter {
    pump: ForkLocal<Mutex<Pump>>,
    epoch: u64,
    num_batches: usize,
    /// The loader's, for the consumer's own steps on a batch ([`PyEpochIter::consumer_span`]).
    profiler: ForkLocal<Profiler>,
    /// Profile id of the batch last returned; `u64::MAX` before the first.
    last_batch: AtomicU64,
    planning: Planning,
    /// Whether a worker mixed the batch last returned.
    last_mixed: AtomicBool,
}

impl std::fmt::Debug for PyEpochIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpochIter")
            .field("epoch", &self.epoch)
            .field("num_batches", &self.num_batches)
            .finish_non_exhaustive()
    }
}

type Arrays<'py> = (Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>);

impl PyEpochIter {
    fn new(
        pump: Pump,
        epoch: u64,
        num_batches: usize,
        profiler: Profiler,
        planning: Planning,
    ) -> Self {
        PyEpochIter {
            pump: ForkLocal::new(Mutex::new(pump)),
            epoch,
            num_batches,
            profiler: ForkLocal::new(profiler),
            last_batch: AtomicU64::new(u64::MAX),
            planning,
            last_mixed: AtomicBool::new(false),
        }
    }

    /// Runs `f` on the pump, which one thread at a time may use.
    fn with_pump<T>(&self, f: impl FnOnce(&mut Pump) -> PyResult<T>) -> PyResult<T> {
        let mutex = self.pump.get("iterator")?;
        let mut guard = match mutex.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                return Err(PyRuntimeError::new_err(
                    "this iterator is being advanced by another thread",
                ))
            }
        };
        f(&mut guard)
    }
}

#[pymethods]
impl PyEpochIter {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Arrays<'py>>> {
        let batch = self.with_pump(|pump| pump.next(py))?;
        if let Some(b) = &batch {
            self.last_batch.store(b.batch_id(), Ordering::Relaxed);
            self.last_mixed
                .store(b.applied().is_some(), Ordering::Relaxed);
        }
        batch.map(|b| into_arrays(py, b)).transpose()
    }

    /// Records `op`, a step the consumer ran on the batch last returned (torchvision's
    /// `MixUp` run on it, say), from `start_ns` to `end_ns` (`now_ns()` times), as a span of
    /// the consumer thread in the loader's profile; nothing with `profile="off"` or before the
    /// first batch.
    fn consumer_span(&self, op: &str, start_ns: u64, end_ns: u64) -> PyResult<()> {
        let profiler = self.profiler.get("iterator")?;
        let batch = self.last_batch.load(Ordering::Relaxed);
        if batch == u64::MAX || !profiler.is_enabled() {
            return Ok(());
        }
        let id = profiler
            .register_op(op)
            .map_err(|e| PyValueError::new_err(format!("op: {e}")))?;
        profiler.consumer_span(id, batch, start_ns, end_ns);
        Ok(())
    }

    /// The epoch's planned batches, in the order the workers make them: `(number, samples)`,
    /// the number each is delivered as when no sample is skipped (`resume_state`'s count in
    /// order, the planned batch in completion order).
    #[getter]
    fn planned_batches(&self) -> Vec<(usize, usize)> {
        self.planning.batches.clone()
    }

    /// Plans the mix of batch `number` for the worker that completes it: `lam` as `mix_batch`
    /// (MixUp), `box` as `mix_batch` (CutMix) or `mixes` as `fast_collate_mix`, named `name` in
    /// the profile. False when the workers mix nothing this epoch (`on_error="skip"`); a batch
    /// that completes before its plan is delivered unmixed (`last_mixed`).
    #[pyo3(signature = (number, name, *, lam = None, r#box = None, mixes = None))]
    fn plan_mix(
        &self,
        number: usize,
        name: &str,
        lam: Option<f64>,
        r#box: Option<(usize, usize, usize, usize)>,
        mixes: Option<Vec<Option<MixArg>>>,
    ) -> PyResult<bool> {
        let mix = PlannedMix::new(name, lam, r#box, mixes)?;
        Ok(self.planning.ops.plan(number, Box::new(mix)))
    }

    /// Forgets batch `number`'s plan if no worker took it (the batch came unmixed).
    fn discard_mix(&self, number: usize) {
        self.planning.ops.discard(number);
    }

    /// Whether a worker mixed the batch last returned, as planned with `plan_mix`.
    #[getter]
    fn last_mixed(&self) -> bool {
        self.last_mixed.load(Ordering::Relaxed)
    }

    /// Batches planned for the epoch.
    fn __len__(&self) -> usize {
        self.num_batches
    }

    /// The epoch number.
    #[getter]
    fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Where the epoch stands after the batches returned so far: `(position, batches,
    /// delivered)` for `Loader.iter_resume`.
    #[getter]
    fn resume_state(&self) -> PyResult<(usize, usize, Vec<usize>)> {
        self.with_pump(|pump| {
            let r = &pump.resume;
            Ok((r.position, r.batches, r.delivered.clone()))
        })
    }

    /// Sets the longest wait for one batch, in seconds (`None` or 0: no limit); past it,
    /// `__next__` raises `RuntimeError` and the batch stays pending.
    fn set_timeout(&self, seconds: Option<f64>) -> PyResult<()> {
        let timeout = match seconds {
            None | Some(0.0) => None,
            Some(s) => Some(Duration::try_from_secs_f64(s).map_err(|_| {
                PyValueError::new_err(format!("timeout: expected seconds >= 0, got {s}"))
            })?),
        };
        self.with_pump(|pump| {
            pump.timeout = timeout;
            Ok(())
        })
    }

    /// Samples skipped so far (with `on_error="skip"`): `(dataset index, path, why)`, the
    /// path as `os.fsdecode` gives it.
    #[getter]
    fn skipped<'py>(&self, py: Python<'py>) -> PyResult<Vec<SkippedRow<'py>>> {
        let skipped = self.with_pump(|pump| Ok(pump.skipped.clone()))?;
        skipped
            .iter()
            .map(|s| {
                let why = exact_text(py, &s.why, &[&s.path])?;
                Ok((s.index, os_str(py, &s.path), why))
            })
            .collect()
    }
}
