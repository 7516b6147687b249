//! Single ops of the transforms crate, exposed for checking ferroloader against torchvision:
//! the crop rectangles (and flips) the loader draws for a sample, one sample run through the
//! loader's own decode and fused kernel with a given crop, planning a spec without a
//! dataset, AugMix's chains and mix with injected draws, and timm's RandAugment's plans and
//! ops (its draws per sample, one op with its argument given), and timm's RandomErasing on a
//! given sample with the draws it made, and ElasticTransform's displacement field and warp.
//!
//! Only calls into the transforms crate (the same functions the loader's pipeline runs, in the
//! same order); must not reimplement any op.

use ferroloader_loader::transforms::augment::geometry::Interpolation;
use ferroloader_loader::transforms::augment::policy::Api;
use ferroloader_loader::transforms::crop::{FilterChoice, RandomResizedCrop};
use ferroloader_loader::transforms::decode::{DecodeContext, DecodeOptions, Decoder};
use ferroloader_loader::transforms::fused::{FusedKernel, OutputKind, OutputSlot};
use ferroloader_loader::transforms::resize::Filter;
use ferroloader_loader::transforms::rng::{sample_rng, sample_rng_repeat};
use ferroloader_loader::transforms::tensor::{draw_flip, Scaling};
use ferroloader_loader::transforms::{CropRect, Error as TransformError, RgbImage};
use ferroloader_loader::SampleProcessor;
use numpy::ndarray::{Array2, Array3};
use numpy::IntoPyArray;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::detach::run_detached;
use crate::errors::transform_config_error;
use crate::loader::{parse_spec, plan_spec};

/// The crops (and flips) the loader draws for samples `indices` of epoch `epoch` of a run
/// seeded with `seed`, for an image of `width` x `height`: an int64 array `[n, 5]` of
/// `(top, left, height, width, flipped)`, exactly as the pipeline draws them (torchvision's
/// `RandomResizedCrop.get_params` over the sample's generator, then the flip coin when
/// `flip_p > 0`). With `interpolation` (the filter names of timm's
/// `RandomResizedCropAndInterpolation`), `[n, 6]` of `(top, left, height, width, filter,
/// flipped)`: `filter` the index into it of the filter drawn right after the crop.
/// `repeats`, one per index, are the samples' copy numbers (`SampleKey::repeat`; none: all 0,
/// each index's first copy in its epoch).
#[pyfunction]
#[pyo3(signature = (
    width, height, indices, *, seed = 0, epoch = 0, scale = (0.08, 1.0),
    ratio = (3.0 / 4.0, 4.0 / 3.0), flip_p = 0.0, interpolation = None, repeats = None
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn random_resized_crop_params<'py>(
    py: Python<'py>,
    width: u32,
    height: u32,
    indices: Vec<u64>,
    seed: u64,
    epoch: u64,
    scale: (f64, f64),
    ratio: (f64, f64),
    flip_p: f64,
    interpolation: Option<Vec<String>>,
    repeats: Option<Vec<u64>>,
) -> PyResult<Bound<'py, PyAny>> {
    let repeats = repeats_for(&indices, repeats)?;
    let rrc = RandomResizedCrop::new((1, 1), scale, ratio)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    if !(0.0..=1.0).contains(&flip_p) {
        return Err(PyValueError::new_err(format!(
            "flip_p: {flip_p} is not a probability in [0, 1]"
        )));
    }
    let filters = interpolation
        .as_deref()
        .map(|names| {
            let filters = names
                .iter()
                .map(|name| filter_named(name))
                .collect::<PyResult<Vec<_>>>()?;
            FilterChoice::new(&filters).map_err(|e| PyValueError::new_err(e.to_string()))
        })
        .transpose()?;
    let columns = if filters.is_some() { 6 } else { 5 };
    let mut out = Array2::<i64>::zeros((indices.len(), columns));
    for ((row, &index), &repeat) in out.rows_mut().into_iter().zip(&indices).zip(&repeats) {
        let mut rng = sample_rng_repeat(seed, epoch, index, repeat);
        let crop = rrc.get_params(width, height, &mut rng);
        let filter = filters.map(|f| f.draw_index(&mut rng) as i64);
        let flipped = flip_p > 0.0 && draw_flip(&mut rng, flip_p);
        let values = [crop.top, crop.left, crop.height, crop.width]
            .map(i64::from)
            .into_iter()
            .chain(filter)
            .chain([i64::from(flipped)]);
        for (cell, v) in row.into_iter().zip(values) {
            *cell = v;
        }
    }
    Ok(out.into_pyarray(py).into_any())
}

/// The copy numbers of `indices` (all 0 when none are given); refuses a list of another length.
fn repeats_for(indices: &[u64], repeats: Option<Vec<u64>>) -> PyResult<Vec<u64>> {
    match repeats {
        None => Ok(vec![0; indices.len()]),
        Some(r) if r.len() == indices.len() => Ok(r),
        Some(r) => Err(PyValueError::new_err(format!(
            "repeats: {} numbers for {} indices",
            r.len(),
            indices.len()
        ))),
    }
}

/// What the loader draws for samples `indices` of a `width` x `height` image through timm's
/// `ResizeKeepRatio` (`resize`: the JSON of one such op; none: the image keeps its size), then
/// a `RandomCropOrPad` of `crop_size` = `(h, w)` (none: no crop draw, as `CenterCropOrPad`),
/// then the flip coin when `flip_p > 0`: an int64 array `[n, 6]` of `(height, width, filter,
/// top, left, flipped)`, the resized size (timm's `get_params`), the index of the filter drawn
/// in the op's list (0 with one), and timm's signed offsets (`get_params` of
/// `RandomCropOrPad`; 0 without one). The pipeline's draws in its order, with its functions.
/// `repeats` as [`random_resized_crop_params`]'s.
#[pyfunction]
#[pyo3(signature = (
    width, height, indices, *, seed = 0, epoch = 0, resize = None, crop_size = None,
    flip_p = 0.0, repeats = None
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn resize_keep_ratio_params<'py>(
    py: Python<'py>,
    width: u32,
    height: u32,
    indices: Vec<u64>,
    seed: u64,
    epoch: u64,
    resize: Option<&str>,
    crop_size: Option<(u32, u32)>,
    flip_p: f64,
    repeats: Option<Vec<u64>>,
) -> PyResult<Bound<'py, PyAny>> {
    let repeats = repeats_for(&indices, repeats)?;
    use ferroloader_loader::transforms::crop::random_crop_or_pad_offsets;
    use ferroloader_loader::transforms::spec::{plan_resize_keep_ratio, OpSpec};

    let keep = resize
        .map(|json| {
            let op: OpSpec = serde_json::from_str(json)
                .map_err(|e| PyValueError::new_err(format!("resize: {e}")))?;
            plan_resize_keep_ratio(&op)
                .map_err(|e| transform_config_error("resize", &e))?
                .ok_or_else(|| PyValueError::new_err("resize: not a ResizeKeepRatio op"))
        })
        .transpose()?;
    if !(0.0..=1.0).contains(&flip_p) {
        return Err(PyValueError::new_err(format!(
            "flip_p: {flip_p} is not a probability in [0, 1]"
        )));
    }
    if crop_size.is_some_and(|(h, w)| h == 0 || w == 0) {
        return Err(PyValueError::new_err(
            "crop_size: both sides must be positive",
        ));
    }
    let mut out = Array2::<i64>::zeros((indices.len(), 6));
    for ((row, &index), &repeat) in out.rows_mut().into_iter().zip(&indices).zip(&repeats) {
        let mut rng = sample_rng_repeat(seed, epoch, index, repeat);
        let ((h, w), filter) = match &keep {
            Some(keep) => keep.draw(width, height, &mut rng),
            None => ((u64::from(height), u64::from(width)), 0),
        };
        let (top, left) = match crop_size {
            Some((ch, cw)) => {
                let side = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
                random_crop_or_pad_offsets(side(w), side(h), ch, cw, &mut rng)
            }
            None => (0, 0),
        };
        let flipped = flip_p > 0.0 && draw_flip(&mut rng, flip_p);
        let side = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let values = [
            side(h),
            side(w),
            filter as i64,
            top,
            left,
            i64::from(flipped),
        ];
        for (cell, v) in row.into_iter().zip(values) {
            *cell = v;
        }
    }
    Ok(out.into_pyarray(py).into_any())
}

/// The resize filter `name` names, or a `ValueError` naming `interpolation`.
fn filter_named(name: &str) -> PyResult<Filter> {
    Filter::ALL
        .into_iter()
        .find(|f| f.name() == name)
        .ok_or_else(|| {
            let names: Vec<&str> = Filter::ALL.iter().map(|f| f.name()).collect();
            PyValueError::new_err(format!(
                "interpolation: expected one of {names:?}, got {name:?}"
            ))
        })
}

/// Decodes `data` with the loader's decoder and runs the loader's fused kernel on it with the
/// crop given: crop `(top, left, height, width)`, resize to `size` = `(h, w)` (Pillow's
/// `interpolation`: antialiased "bilinear" or "bicubic", or "nearest"), mirror if `flip`, then `ToTensor` (+ `Normalize(mean, std)`) for
/// `float32` (with `scaling="reciprocal"`, v2's `ToDtype(torch.float32, scale=True)`'s
/// arithmetic instead of `ToTensor`'s `"divide"`), or `PILToTensor` for `uint8`. Returns a `[3, h, w]` array. The region-of-interest
/// decode is used when `roi` (as the loader does for `RandomResizedCrop`).
#[pyfunction]
#[pyo3(signature = (
    data, top, left, height, width, size, *, flip = false, mean = None, std = None,
    output = "float32", decoder = "turbo", roi = true, interpolation = "bilinear",
    scaling = "divide"
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn resized_crop<'py>(
    py: Python<'py>,
    data: &[u8],
    top: u32,
    left: u32,
    height: u32,
    width: u32,
    size: (u32, u32),
    flip: bool,
    mean: Option<[f32; 3]>,
    std: Option<[f32; 3]>,
    output: &str,
    decoder: &str,
    roi: bool,
    interpolation: &str,
    scaling: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let filter = filter_named(interpolation)?;
    let scaling = match scaling {
        "divide" => Scaling::Divide,
        "reciprocal" => Scaling::Reciprocal,
        other => {
            return Err(PyValueError::new_err(format!(
                "scaling: expected 'divide' or 'reciprocal', got {other:?}"
            )))
        }
    };
    let decoder = match decoder {
        "turbo" => Decoder::Turbo,
        "zune" => Decoder::Zune,
        other => {
            return Err(PyValueError::new_err(format!(
                "decoder: expected 'turbo' or 'zune', got {other:?}"
            )))
        }
    };
    let kind = match (output, mean, std) {
        ("float32", Some(mean), Some(std)) => OutputKind::F32Chw { mean, std, scaling },
        ("float32", None, None) => OutputKind::F32ChwUnnormalized { scaling },
        ("uint8", None, None) => OutputKind::U8Chw,
        ("float32" | "uint8", _, _) => {
            return Err(PyValueError::new_err(
                "mean: give both mean and std, and only with output='float32'",
            ))
        }
        (other, _, _) => {
            return Err(PyValueError::new_err(format!(
                "output: expected 'float32' or 'uint8', got {other:?}"
            )))
        }
    };
    kind.validate()
        .map_err(|e| transform_config_error("std", &e))?;
    let (h, w) = size;
    let crop = CropRect {
        top,
        left,
        height,
        width,
    };
    let n = kind.elements_per_sample(h, w);
    let shape = (3, h as usize, w as usize);
    let run = |slot: OutputSlot<'_>| -> Result<(), TransformError> {
        let mut ctx = DecodeContext::new(DecodeOptions::default().decoder(decoder))?;
        let mut image = RgbImage::new();
        let inner = if roi {
            ctx.decode_region(data, crop, &mut image)?
        } else {
            ctx.decode(data, &mut image)?;
            crop
        };
        let mut kernel = FusedKernel::new();
        kernel.set_filter(filter);
        kernel.run(image.view(), inner, size, flip, &kind, slot)
    };
    if kind.is_f32() {
        let mut out = vec![0f32; n];
        run_detached(py, |_| Some(run(OutputSlot::F32(&mut out))))?;
        let array = Array3::from_shape_vec(shape, out)
            .map_err(|e| PyValueError::new_err(format!("size: {e}")))?;
        Ok(array.into_pyarray(py).into_any())
    } else {
        let mut out = vec![0u8; n];
        run_detached(py, |_| Some(run(OutputSlot::U8(&mut out))))?;
        let array = Array3::from_shape_vec(shape, out)
            .map_err(|e| PyValueError::new_err(format!("size: {e}")))?;
        Ok(array.into_pyarray(py).into_any())
    }
}

/// Two `[height, width]` image sizes a pipeline whose size follows the images' is planned for
/// when no dataset says which: large, so that later crops fit, below the pixel limit, and one
/// landscape and one portrait, so that a `Resize(int)` alone leaves neither side known.
const UNKNOWN_SIZES: [[u32; 2]; 2] = [[8192, 12000], [12001, 8193]];

/// Plans a pipeline spec (JSON) without a dataset: raises what the loader would raise for it,
/// and returns `{"shape": (c, h, w), "dtype": ..., "deferred_normalize": (mean, std) | None}`;
/// `h` and `w` are None where they are each image's own (no crop or resize fixes them).
#[pyfunction]
pub(crate) fn check_pipeline<'py>(py: Python<'py>, spec: &str) -> PyResult<Bound<'py, PyDict>> {
    let spec = parse_spec(spec)?;
    let (pipeline, shape) = if spec.needs_image_size() && spec.image_size.is_none() {
        // The images' own size comes from the dataset. Planned for two sizes, the sample's
        // dimensions that do not follow it (a crop later on) are known; the others are None.
        let planned = |size: [u32; 2]| {
            let mut spec = spec.clone();
            spec.image_size = Some(size);
            plan_spec(spec)
        };
        let (a, b) = (planned(UNKNOWN_SIZES[0])?, planned(UNKNOWN_SIZES[1])?);
        let known = |x: usize, y: usize| (x == y).then_some(x);
        let (sa, sb) = (a.sample_layout().shape, b.sample_layout().shape);
        // Whatever the layout (CHW, or HWC for a tail's input), the channels agree.
        let shape = (
            known(sa[0], sb[0]),
            known(sa[1], sb[1]),
            known(sa[2], sb[2]),
        );
        (a, shape)
    } else {
        let pipeline = plan_spec(spec)?;
        let [c, h, w] = pipeline.sample_layout().shape;
        (pipeline, (Some(c), Some(h), Some(w)))
    };
    let layout = pipeline.sample_layout();
    let out = PyDict::new(py);
    out.set_item("shape", shape)?;
    out.set_item(
        "dtype",
        match layout.dtype {
            ferroloader_loader::DType::F32 => "float32",
            ferroloader_loader::DType::U8 => "uint8",
        },
    )?;
    out.set_item(
        "deferred_normalize",
        pipeline.pipeline().deferred_normalize(),
    )?;
    Ok(out)
}

/// torchvision's `AugMix` with its draws given: `image` (`[h, w, 3]` uint8, the PIL image as
/// an array) mixed as `original_weight * image + sum(weight * chain(image))` in float32 and
/// truncated, each chain `(weight, [(op_name, magnitude), ...])` applied with torch's tensor
/// kernels exactly as `_apply_op(img, op_name, magnitude, interpolation, fill)` receives them
/// (v2's Solarize magnitude already times 255). `interpolation` is "nearest" or "bilinear";
/// `fill` None, one or three floats; `api` "v1" or "v2". Returns `[h, w, 3]` uint8.
#[pyfunction]
#[pyo3(signature = (
    image, original_weight, chains, *, interpolation = "bilinear", fill = None, api = "v1"
))]
#[allow(clippy::type_complexity)]
pub(crate) fn augmix_apply<'py>(
    py: Python<'py>,
    image: numpy::PyReadonlyArray3<'py, u8>,
    original_weight: f32,
    chains: Vec<(f32, Vec<(String, f64)>)>,
    interpolation: &str,
    fill: Option<Vec<f32>>,
    api: &str,
) -> PyResult<Bound<'py, PyAny>> {
    use ferroloader_loader::transforms::augment::augmix::{augmix, AugMixScratch, TensorWarp};
    use ferroloader_loader::transforms::augment::policy::{AugMixPlan, OpKind, PixelOp};

    let value_error = |e: TransformError| PyValueError::new_err(e.to_string());
    let (interpolation, fill, api) = (
        warp_interpolation(interpolation)?,
        warp_fill(fill)?,
        warp_api(api)?,
    );
    let mut img = rgb_image(&image)?;
    let mut ops: Vec<(f32, Vec<PixelOp>)> = Vec::with_capacity(chains.len());
    for (weight, chain) in &chains {
        let mut chain_ops = Vec::with_capacity(chain.len());
        for (name, magnitude) in chain {
            let kind = OpKind::from_name(name).ok_or_else(|| {
                PyValueError::new_err(format!("chains: {name:?} is not an AugMix op"))
            })?;
            chain_ops.push(PixelOp::from_magnitude(kind, *magnitude));
        }
        ops.push((*weight, chain_ops));
    }
    let chains: Vec<(f32, &[PixelOp])> = ops.iter().map(|(w, o)| (*w, o.as_slice())).collect();
    let plan = AugMixPlan::new(original_weight, &chains).map_err(value_error)?;
    let warp = TensorWarp {
        interpolation,
        fill,
        api,
        one_channel: false,
    };
    augmix(&plan, &mut img, &mut AugMixScratch::new(), &warp).map_err(value_error)?;
    rgb_array(py, img)
}

/// A debug hook's tensor-warp `interpolation`: "nearest", "bilinear" or "bicubic" (which
/// the kernels refuse with torchvision's message).
fn warp_interpolation(name: &str) -> PyResult<Interpolation> {
    match name {
        "nearest" => Ok(Interpolation::Nearest),
        "bilinear" => Ok(Interpolation::Bilinear),
        "bicubic" => Ok(Interpolation::Bicubic),
        other => Err(PyValueError::new_err(format!(
            "interpolation: expected 'nearest', 'bilinear' or 'bicubic', got {other:?}"
        ))),
    }
}

/// A debug hook's `api`: "v1" or "v2".
fn warp_api(name: &str) -> PyResult<Api> {
    match name {
        "v1" => Ok(Api::V1),
        "v2" => Ok(Api::V2),
        other => Err(PyValueError::new_err(format!(
            "api: expected 'v1' or 'v2', got {other:?}"
        ))),
    }
}

/// A debug hook's tensor `fill`: None, one or three floats.
fn warp_fill(fill: Option<Vec<f32>>) -> PyResult<Option<[f32; 3]>> {
    match fill.as_deref() {
        None => Ok(None),
        Some(&[v]) => Ok(Some([v; 3])),
        Some(&[r, g, b]) => Ok(Some([r, g, b])),
        Some(other) => Err(PyValueError::new_err(format!(
            "fill: {} values, expected 1 or 3",
            other.len()
        ))),
    }
}

/// torchvision's `elastic(image, displacement, interpolation, fill)` on a uint8 tensor (v2's
/// `elastic_image`, v1's `F_t.elastic_transform`; `api` picks the fill blend) with the
/// displacement given: `image` `[h, w, 3]` uint8, `displacement` `[h, w, 2]` float32
/// (torchvision's `displacement[0]`), through the stage op's sampler. Returns `[h, w, 3]`
/// uint8.
#[pyfunction]
#[pyo3(signature = (image, displacement, *, interpolation = "bilinear", fill = None, api = "v2"))]
pub(crate) fn elastic_apply<'py>(
    py: Python<'py>,
    image: numpy::PyReadonlyArray3<'py, u8>,
    displacement: numpy::PyReadonlyArray3<'py, f32>,
    interpolation: &str,
    fill: Option<Vec<f32>>,
    api: &str,
) -> PyResult<Bound<'py, PyAny>> {
    use ferroloader_loader::transforms::augment::elastic::ElasticField;
    use ferroloader_loader::transforms::augment::grid_sample::GridSampler;
    use numpy::PyUntypedArrayMethods;

    let value_error = |e: TransformError| PyValueError::new_err(e.to_string());
    let (interpolation, fill, api) = (
        warp_interpolation(interpolation)?,
        warp_fill(fill)?,
        warp_api(api)?,
    );
    let img = rgb_image(&image)?;
    let (w, h) = (img.width(), img.height());
    let shape = displacement.shape();
    if shape != [h as usize, w as usize, 2] {
        return Err(PyValueError::new_err(format!(
            "displacement: shape {shape:?} is not [{h}, {w}, 2]"
        )));
    }
    let values: Vec<f32> = displacement.as_array().iter().copied().collect();
    let mut field = ElasticField::new();
    field.set(w, h, &values).map_err(value_error)?;
    let mut out = RgbImage::new();
    GridSampler::new()
        .elastic(&img, &field, interpolation, fill, api, &mut out)
        .map_err(value_error)?;
    rgb_array(py, out)
}

/// `[h, w, 2]` float32 (x then y) of a displacement field as `ElasticTransform(alpha, sigma)`
/// makes it. With `uniforms` (`[2, h, w]` float32: the two `torch.rand(..) * 2 - 1` fields),
/// those blurred and scaled (torchvision's `get_params`/`make_params` after its draws);
/// without, drawn from the generator of sample `index` of epoch 0 of a run seeded with `seed`
/// (as the stage draws it when the op stands first), `height` x `width`.
#[pyfunction]
#[pyo3(signature = (
    height, width, *, alpha = (50.0, 50.0), sigma = (5.0, 5.0), api = "v1", uniforms = None,
    seed = 0, index = 0
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn elastic_displacement<'py>(
    py: Python<'py>,
    height: u32,
    width: u32,
    alpha: (f64, f64),
    sigma: (f64, f64),
    api: &str,
    uniforms: Option<numpy::PyReadonlyArray3<'py, f32>>,
    seed: u64,
    index: u64,
) -> PyResult<Bound<'py, PyAny>> {
    use ferroloader_loader::transforms::augment::elastic::{Elastic, ElasticField};
    use numpy::PyUntypedArrayMethods;

    let value_error = |e: TransformError| PyValueError::new_err(e.to_string());
    let params = Elastic::new([alpha.0, alpha.1], [sigma.0, sigma.1], warp_api(api)?)
        .map_err(value_error)?;
    let mut field = ElasticField::new();
    let n = height as usize * width as usize;
    match uniforms {
        Some(u) => {
            let shape = u.shape();
            if shape != [2, height as usize, width as usize] {
                return Err(PyValueError::new_err(format!(
                    "uniforms: shape {shape:?} is not [2, {height}, {width}]"
                )));
            }
            let values: Vec<f32> = u.as_array().iter().copied().collect();
            let (ux, uy) = values.split_at(n);
            field
                .from_uniform(&params, width, height, ux, uy)
                .map_err(value_error)?;
        }
        None => {
            let mut rng = sample_rng(seed, 0, index);
            field
                .draw(&params, width, height, &mut rng)
                .map_err(value_error)?;
        }
    }
    let mut out = Vec::with_capacity(2 * n);
    for (x, y) in field.dx()[..n].iter().zip(&field.dy()[..n]) {
        out.push(*x);
        out.push(*y);
    }
    let out = Array3::from_shape_vec((height as usize, width as usize, 2), out)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(out.into_pyarray(py).into_any())
}

/// One step of a timm `RandAugment` plan as Python sees it: `(op name, applied, magnitude,
/// level argument or None, filter name or None)`.
type TimmStepTuple = (&'static str, bool, f64, Option<f64>, Option<&'static str>);

/// The plans timm's `RandAugment` (`spec`: the JSON of one `TimmRandAugment` op) draws for
/// samples `indices` of epoch `epoch` of a run seeded with `seed`, each from the sample's
/// generator as the stage draws it when the op stands first: per sample the chosen layers in
/// order, skipped ones included (`applied` False, magnitude 0, no argument). `repeats` as
/// [`random_resized_crop_params`]'s.
#[pyfunction]
#[pyo3(signature = (spec, indices, *, seed = 0, epoch = 0, repeats = None))]
pub(crate) fn timm_rand_augment_draws(
    spec: &str,
    indices: Vec<u64>,
    seed: u64,
    epoch: u64,
    repeats: Option<Vec<u64>>,
) -> PyResult<Vec<Vec<TimmStepTuple>>> {
    use ferroloader_loader::transforms::spec::{plan_timm_rand_augment, OpSpec};

    let op: OpSpec =
        serde_json::from_str(spec).map_err(|e| PyValueError::new_err(format!("spec: {e}")))?;
    let policy = plan_timm_rand_augment(&op)
        .map_err(|e| transform_config_error("spec", &e))?
        .ok_or_else(|| PyValueError::new_err("spec: not a TimmRandAugment op"))?;
    let repeats = repeats_for(&indices, repeats)?;
    Ok(indices
        .iter()
        .zip(repeats)
        .map(|(&index, repeat)| {
            step_tuples(&policy.draw(&mut sample_rng_repeat(seed, epoch, index, repeat)))
        })
        .collect())
}

/// A plan's steps as [`TimmStepTuple`]s.
fn step_tuples(
    plan: &ferroloader_loader::transforms::augment::policy::TimmPlan,
) -> Vec<TimmStepTuple> {
    use ferroloader_loader::transforms::augment::geometry::Interpolation;
    let filter = |i: Interpolation| match i {
        Interpolation::Nearest => "nearest",
        Interpolation::Bilinear => "bilinear",
        Interpolation::Bicubic => "bicubic",
    };
    plan.steps()
        .map(|s| {
            let interpolation = s.interpolation.map(filter);
            (s.kind.name(), s.applied, s.magnitude, s.arg, interpolation)
        })
        .collect()
}

/// The draws timm's `AutoAugment` (`spec`: the JSON of one `TimmAutoAugment` op) makes for
/// samples `indices`, as [`timm_rand_augment_draws`]: per sample the index of the sub-policy
/// chosen and its ops' steps, skipped ones included.
#[pyfunction]
#[pyo3(signature = (spec, indices, *, seed = 0, epoch = 0, repeats = None))]
pub(crate) fn timm_auto_augment_draws(
    spec: &str,
    indices: Vec<u64>,
    seed: u64,
    epoch: u64,
    repeats: Option<Vec<u64>>,
) -> PyResult<Vec<(usize, Vec<TimmStepTuple>)>> {
    use ferroloader_loader::transforms::spec::{plan_timm_auto_augment, OpSpec};

    let op: OpSpec =
        serde_json::from_str(spec).map_err(|e| PyValueError::new_err(format!("spec: {e}")))?;
    let policy = plan_timm_auto_augment(&op)
        .map_err(|e| transform_config_error("spec", &e))?
        .ok_or_else(|| PyValueError::new_err("spec: not a TimmAutoAugment op"))?;
    let repeats = repeats_for(&indices, repeats)?;
    Ok(indices
        .iter()
        .zip(repeats)
        .map(|(&index, repeat)| {
            let plan = policy.draw(&mut sample_rng_repeat(seed, epoch, index, repeat));
            (plan.sub_policy, step_tuples(&plan.steps))
        })
        .collect())
}

/// One sample's AugMix draws: the float32 mixing weights, the Beta draw `m`, and per chain
/// its ops' steps.
type TimmAugMixDraws = (Vec<f32>, f32, Vec<Vec<TimmStepTuple>>);

/// The draws timm's `AugMixAugment` (`spec`: the JSON of one `TimmAugMix` op) makes for
/// samples `indices`, as [`timm_rand_augment_draws`]: per sample `(mixing_weights, m,
/// chains)`, each chain its ops' steps in order.
#[pyfunction]
#[pyo3(signature = (spec, indices, *, seed = 0, epoch = 0, repeats = None))]
pub(crate) fn timm_augmix_draws(
    spec: &str,
    indices: Vec<u64>,
    seed: u64,
    epoch: u64,
    repeats: Option<Vec<u64>>,
) -> PyResult<Vec<TimmAugMixDraws>> {
    use ferroloader_loader::transforms::spec::{plan_timm_augmix, OpSpec};

    let op: OpSpec =
        serde_json::from_str(spec).map_err(|e| PyValueError::new_err(format!("spec: {e}")))?;
    let policy = plan_timm_augmix(&op)
        .map_err(|e| transform_config_error("spec", &e))?
        .ok_or_else(|| PyValueError::new_err("spec: not a TimmAugMix op"))?;
    let repeats = repeats_for(&indices, repeats)?;
    Ok(indices
        .iter()
        .zip(repeats)
        .map(|(&index, repeat)| {
            let plan = policy.draw(&mut sample_rng_repeat(seed, epoch, index, repeat));
            let chains = plan.chains().iter().map(step_tuples).collect();
            (plan.mixing_weights().to_vec(), plan.m(), chains)
        })
        .collect())
}

/// timm's op `name` (a key of `NAME_TO_OP`) with its level argument `arg` on `image` (`[h, w,
/// 3]` uint8, the PIL image as an array), as `NAME_TO_OP[name](img, arg, fillcolor=fill,
/// resample=interpolation)` computes it, with the kernels the loader runs. Returns `[h, w,
/// 3]` uint8.
#[pyfunction]
#[pyo3(signature = (image, name, arg = None, *, interpolation = "bicubic", fill = (128, 128, 128)))]
pub(crate) fn timm_rand_augment_apply<'py>(
    py: Python<'py>,
    image: numpy::PyReadonlyArray3<'py, u8>,
    name: &str,
    arg: Option<f64>,
    interpolation: &str,
    fill: (u8, u8, u8),
) -> PyResult<Bound<'py, PyAny>> {
    use ferroloader_loader::transforms::augment::geometry::Interpolation;
    use ferroloader_loader::transforms::augment::policy::TimmOpKind;
    use ferroloader_loader::transforms::spec::apply_timm_op;

    let value_error = |e: TransformError| PyValueError::new_err(e.to_string());
    let kind = TimmOpKind::from_name(name).map_err(value_error)?;
    let interpolation = match interpolation {
        "nearest" => Interpolation::Nearest,
        "bilinear" => Interpolation::Bilinear,
        "bicubic" => Interpolation::Bicubic,
        other => {
            return Err(PyValueError::new_err(format!(
                "interpolation: expected 'nearest', 'bilinear' or 'bicubic', got {other:?}"
            )))
        }
    };
    let mut img = rgb_image(&image)?;
    let fill = [fill.0, fill.1, fill.2];
    apply_timm_op(kind, arg, Some(interpolation), fill, &mut img).map_err(value_error)?;
    rgb_array(py, img)
}

/// Pillow's `img.filter(ImageFilter.GaussianBlur(radius))` on `image` (`[h, w, 3]` uint8, the
/// PIL RGB image as an array) with the loader's kernel, for parity tests. Returns `[h, w, 3]`
/// uint8.
#[pyfunction]
pub(crate) fn pillow_gaussian_blur<'py>(
    py: Python<'py>,
    image: numpy::PyReadonlyArray3<'py, u8>,
    radius: f64,
) -> PyResult<Bound<'py, PyAny>> {
    use ferroloader_loader::transforms::augment::box_blur::PillowGaussianBlur;

    let value_error = |e: TransformError| PyValueError::new_err(e.to_string());
    let mut img = rgb_image(&image)?;
    PillowGaussianBlur::new()
        .apply(&mut img, radius)
        .map_err(value_error)?;
    rgb_array(py, img)
}

/// One block timm's `RandomErasing` erased, as Python sees it: `(top, left, height, width,
/// fill)`, the fill `[c]` float32 for `rand`, `[c, h, w]` for `pixel`, empty for `const`.
type TimmEraseBlock<'py> = (u32, u32, u32, u32, Bound<'py, PyAny>);

/// What [`timm_random_erasing_apply`] gives back: the erased sample, the `random()` draws in
/// order, the `randint(n)` draws as `(n, value)` in order, and the blocks.
type TimmEraseRun<'py> = (
    Bound<'py, PyAny>,
    Vec<f64>,
    Vec<(u32, u32)>,
    Vec<TimmEraseBlock<'py>>,
);

/// The sample's generator, recording the draws timm's `RandomErasing` makes from Python's
/// `random`: each `random()` and each `randint(n)` (the normals pass through unrecorded; the
/// blocks report their fills).
struct RecordedDraws<'a> {
    rng: &'a mut ferroloader_loader::transforms::rng::SampleRng,
    randoms: Vec<f64>,
    randints: Vec<(u32, u32)>,
}

impl ferroloader_loader::transforms::rng::TorchDraws for RecordedDraws<'_> {
    fn uniform_f32(&mut self, from: f32, to: f32) -> f32 {
        self.rng.uniform_f32(from, to)
    }

    fn randint(&mut self, high: u32) -> u32 {
        let v = self.rng.randint(high);
        self.randints.push((high, v));
        v
    }

    fn py_random(&mut self) -> f64 {
        let v = self.rng.py_random();
        self.randoms.push(v);
        v
    }

    fn standard_normal(&mut self) -> f32 {
        self.rng.standard_normal()
    }

    fn fill_standard_normal(&mut self, out: &mut [f32]) {
        self.rng.fill_standard_normal(out)
    }
}

/// timm's `RandomErasing` (`spec`: the JSON of one `TimmRandomErasing` op) on `sample` (`[3,
/// h, w]` float32, the normalized tensor), drawn from the generator of sample `index` of
/// epoch `epoch` of a run seeded with `seed` as the pipeline draws it when it is the only op
/// that draws (after a `CenterCrop`, no flip). Returns the erased copy, the draws made as
/// Python's `random` would be asked for them (`random()` values; `randint(a, b)` as `(b - a +
/// 1, value - a)`), and the blocks with their fills: what replaying into timm's `_erase`
/// needs.
/// `repeat`: the sample's copy number in its epoch (`SampleKey::repeat`, 0 for the first).
#[pyfunction]
#[pyo3(signature = (spec, sample, index, *, seed = 0, epoch = 0, repeat = 0))]
pub(crate) fn timm_random_erasing_apply<'py>(
    py: Python<'py>,
    spec: &str,
    sample: numpy::PyReadonlyArray3<'py, f32>,
    index: u64,
    seed: u64,
    epoch: u64,
    repeat: u64,
) -> PyResult<TimmEraseRun<'py>> {
    use ferroloader_loader::transforms::spec::{
        apply_timm_random_erasing, plan_timm_random_erasing, OpSpec,
    };
    use numpy::PyUntypedArrayMethods;

    let op: OpSpec =
        serde_json::from_str(spec).map_err(|e| PyValueError::new_err(format!("spec: {e}")))?;
    let erasing = plan_timm_random_erasing(&op)
        .map_err(|e| transform_config_error("spec", &e))?
        .ok_or_else(|| PyValueError::new_err("spec: not a TimmRandomErasing op"))?;
    let shape = sample.shape();
    if shape[0] != 3 {
        return Err(PyValueError::new_err(format!(
            "sample: shape {shape:?} is not [3, h, w]"
        )));
    }
    let (h, w) = (shape[1], shape[2]);
    let side = |n: usize| {
        u32::try_from(n).map_err(|_| PyValueError::new_err(format!("sample: side {n} too large")))
    };
    let size = (side(h)?, side(w)?);
    let mut slot: Vec<f32> = sample.as_array().iter().copied().collect();
    let mut rng = sample_rng_repeat(seed, epoch, index, repeat);
    let mut draws = RecordedDraws {
        rng: &mut rng,
        randoms: Vec::new(),
        randints: Vec::new(),
    };
    let mut blocks = Vec::new();
    let mut values = Vec::new();
    apply_timm_random_erasing(
        &erasing,
        &mut slot,
        size,
        &mut draws,
        &mut values,
        &mut |rect, fill| blocks.push((rect, fill.to_vec())),
    )
    .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let erased = Array3::from_shape_vec((3, h, w), slot)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let blocks = blocks
        .into_iter()
        .map(|(rect, fill)| {
            let fill = numpy::ndarray::Array1::from_vec(fill)
                .into_pyarray(py)
                .into_any();
            (rect.top, rect.left, rect.height, rect.width, fill)
        })
        .collect();
    Ok((
        erased.into_pyarray(py).into_any(),
        draws.randoms,
        draws.randints,
        blocks,
    ))
}

/// v2's `GaussianNoise` (`spec`: the JSON of one `GaussianNoise` op) on `sample` (`[c, h, w]`
/// float32), its normals drawn from the generator of sample `index` of epoch `epoch` of a run
/// seeded with `seed`, as the pipeline draws them when it is the only op that draws. Returns
/// the noisy copy and the normals (one per element, in the sample's order): what replaying
/// torchvision's arithmetic with the same noise needs.
/// `repeat` as [`timm_random_erasing_apply`]'s.
#[pyfunction]
#[pyo3(signature = (spec, sample, index, *, seed = 0, epoch = 0, repeat = 0))]
pub(crate) fn gaussian_noise_apply<'py>(
    py: Python<'py>,
    spec: &str,
    sample: numpy::PyReadonlyArray3<'py, f32>,
    index: u64,
    seed: u64,
    epoch: u64,
    repeat: u64,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    use ferroloader_loader::transforms::spec::{apply_gaussian_noise, plan_gaussian_noise, OpSpec};
    use numpy::PyUntypedArrayMethods;

    let op: OpSpec =
        serde_json::from_str(spec).map_err(|e| PyValueError::new_err(format!("spec: {e}")))?;
    let noise = plan_gaussian_noise(&op)
        .map_err(|e| transform_config_error("spec", &e))?
        .ok_or_else(|| PyValueError::new_err("spec: not a GaussianNoise op"))?;
    let shape = sample.shape();
    let (c, h, w) = (shape[0], shape[1], shape[2]);
    let mut slot: Vec<f32> = sample.as_array().iter().copied().collect();
    let mut normals = Vec::new();
    apply_gaussian_noise(
        &noise,
        &mut slot,
        &mut sample_rng_repeat(seed, epoch, index, repeat),
        &mut normals,
    );
    let noisy = Array3::from_shape_vec((c, h, w), slot)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let normals = Array3::from_shape_vec((c, h, w), normals)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((
        noisy.into_pyarray(py).into_any(),
        normals.into_pyarray(py).into_any(),
    ))
}

/// A debug hook's `[h, w, 3]` uint8 image as an [`RgbImage`] (copied).
fn rgb_image(image: &numpy::PyReadonlyArray3<'_, u8>) -> PyResult<RgbImage> {
    use numpy::PyUntypedArrayMethods;

    let shape = image.shape();
    if shape[2] != 3 {
        return Err(PyValueError::new_err(format!(
            "image: shape {shape:?} is not [h, w, 3]"
        )));
    }
    let size = |n: usize| {
        u32::try_from(n).map_err(|_| PyValueError::new_err(format!("image: side {n} too large")))
    };
    RgbImage::from_raw(
        size(shape[1])?,
        size(shape[0])?,
        image.as_array().iter().copied().collect(),
    )
    .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// `img` back as a debug hook's `[h, w, 3]` uint8 array.
fn rgb_array(py: Python<'_>, img: RgbImage) -> PyResult<Bound<'_, PyAny>> {
    let (h, w) = (img.height() as usize, img.width() as usize);
    let out = Array3::from_shape_vec((h, w, 3), img.into_raw())
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(out.into_pyarray(py).into_any())
}
