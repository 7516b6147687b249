//! The native prefix of a Python tail, one sample at a time, for a tail that runs in
//! DataLoader's worker processes (`ferroloader._pydataset.TailSamples`): each process plans the
//! prefix once and runs it on the bytes it read, with the sample's key, so the native draws are
//! those the native workers would make. Returns the prefix's output as a numpy array and the
//! spans of its ops, for the process's profile.
//!
//! Must not hold the GIL while processing, keep anything of a sample after returning it, or
//! be shared between processes (each makes its own: a forked copy of another's scratch is not
//! used, as the scratch is made on first use).

use std::sync::Mutex;

use ferroloader_loader::profiler::now_ns;
use ferroloader_loader::transforms::decode::DecodeContext;
use ferroloader_loader::transforms::image::RgbImage;
use ferroloader_loader::transforms::Error as TransformError;
use ferroloader_loader::{DType, ImagePipeline, Op, OpHooks, SampleKey, SampleProcessor, SlotMut};
use numpy::ndarray::{self, ArrayD, IxDyn};
use numpy::IntoPyArray;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::detach::run_detached;
use crate::loader::{parse_spec, plan_spec};

/// A span of one native op: `(name, start_ns, end_ns, depth)`, depth 0 for the outermost.
type OpSpan = (&'static str, u64, u64, u32);

/// A planned native prefix and the scratch it reuses between samples.
#[pyclass(frozen, module = "ferroloader._native", name = "Prefix")]
pub(crate) struct PyPrefix {
    pipeline: ImagePipeline,
    scratch: Mutex<Option<<ImagePipeline as SampleProcessor>::Scratch>>,
    /// [`PyPrefix::decode_pnm`]'s decoder and image, made on first use.
    decoded: Mutex<Option<(DecodeContext, RgbImage)>>,
}

/// Records each op's span, nested as the ops are.
#[derive(Default)]
struct SpanHooks {
    open: Vec<u64>,
    spans: Vec<OpSpan>,
}

impl OpHooks for SpanHooks {
    fn enter(&mut self, _op: Op) {
        self.open.push(now_ns());
    }

    fn exit(&mut self, op: Op) {
        let end = now_ns();
        let start = self.open.pop().unwrap_or(end);
        let depth = u32::try_from(self.open.len()).unwrap_or(u32::MAX);
        self.spans.push((op.name(), start, end, depth));
    }
}

#[pymethods]
impl PyPrefix {
    /// `spec`: the prefix's pipeline spec (JSON, as `ferroloader.transforms` writes it);
    /// `image_size`: `(height, width)` to plan a pipeline that keeps each image's size with
    /// (the first image's, as the native loader plans it).
    #[new]
    #[pyo3(signature = (spec, image_size = None))]
    fn new(spec: &str, image_size: Option<(u32, u32)>) -> PyResult<Self> {
        let mut spec = parse_spec(spec)?;
        if spec.needs_image_size() && spec.image_size.is_none() {
            spec.image_size = image_size.map(|(h, w)| [h, w]);
        }
        Ok(PyPrefix {
            pipeline: plan_spec(spec)?,
            scratch: Mutex::new(None),
            decoded: Mutex::new(None),
        })
    }

    /// The whole image of `data` decoded as the prefix's decode step decodes it (its decoder,
    /// pixel limit and EXIF transposition, Pillow's conversion to RGB), as binary PNM (`P6`,
    /// the image's width and height, 255): what several views of one image read instead of
    /// each decoding the file (`ferroloader._pydataset.ViewSamples`). A PNM has no orientation
    /// and decodes to exactly these pixels, and a region decode of the file is exact, so a
    /// prefix run on it makes the sample it makes from `data` (unless it scales in the DCT
    /// domain, `dct_scaling`, which the caller checks). Raises `ValueError` as `run` does for
    /// a file that does not decode.
    fn decode_pnm<'py>(&self, py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
        let options = self.pipeline.pipeline().spec().decode_options();
        let mut pnm = Vec::new();
        run_detached(py, |_| {
            let mut held = self
                .decoded
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let decoded = match held.as_mut() {
                Some(decoded) => Ok(decoded),
                None => DecodeContext::new(options)
                    .map(|context| held.insert((context, RgbImage::new()))),
            };
            Some(decoded.and_then(|(context, image)| {
                context.decode(data, image)?;
                let header = format!("P6\n{} {}\n255\n", image.width(), image.height());
                pnm.reserve_exact(header.len() + image.as_raw().len());
                pnm.extend_from_slice(header.as_bytes());
                pnm.extend_from_slice(image.as_raw());
                Ok::<_, TransformError>(())
            }))
        })?;
        Ok(PyBytes::new(py, &pnm))
    }

    /// Runs the prefix on one sample's encoded bytes with its key `(seed, epoch, index,
    /// repeat)` (`repeat`: which copy of the index in the epoch, 0 for the first):
    /// `(array, spans)`, the array shaped as the prefix's sample (`[H, W, C]` uint8 before a
    /// tensor conversion, else `[C, H, W]`), the spans as `(op, start_ns, end_ns, depth)`.
    /// Raises `ValueError` with the op's error (a file that does not decode, ...).
    #[pyo3(signature = (data, seed, epoch, index, repeat = 0))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        data: &[u8],
        seed: u64,
        epoch: u64,
        index: u64,
        repeat: u64,
    ) -> PyResult<(Bound<'py, PyAny>, Vec<OpSpan>)> {
        let key = SampleKey {
            seed,
            epoch,
            index,
            repeat,
        };
        let layout = self.pipeline.sample_layout();
        let shape = IxDyn(&layout.shape);
        let len = layout.shape.iter().product();
        let mut hooks = SpanHooks::default();
        let mut run = |slot: SlotMut<'_>| -> Result<(), TransformError> {
            let mut scratch = self
                .scratch
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let scratch = scratch.get_or_insert_with(|| self.pipeline.new_scratch());
            self.pipeline.process(data, key, scratch, slot, &mut hooks)
        };
        let shaped = |e: ndarray::ShapeError| PyValueError::new_err(format!("prefix: {e}"));
        let array = match layout.dtype {
            DType::U8 => {
                let mut out = vec![0u8; len];
                run_detached(py, |_| Some(run(SlotMut::U8(&mut out))))?;
                let array = ArrayD::from_shape_vec(shape, out).map_err(shaped)?;
                array.into_pyarray(py).into_any()
            }
            DType::F32 => {
                let mut out = vec![0f32; len];
                run_detached(py, |_| Some(run(SlotMut::F32(&mut out))))?;
                let array = ArrayD::from_shape_vec(shape, out).map_err(shaped)?;
                array.into_pyarray(py).into_any()
            }
        };
        Ok((array, hooks.spans))
    }
}
