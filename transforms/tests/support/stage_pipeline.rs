//! What the stage-pipeline tests share (augment_pipeline, policy_pipeline, geometric_pipeline,
//! choice_pipeline): the decode corpus, the train pipeline's ops, a float32 run, and the pieces
//! of the by-hand reference (the uint8 image the stage ops see, then to-tensor + normalize).
//!
//! Each test file keeps its own output size and seed and passes them in.

#![allow(dead_code)] // each test file uses its own subset

use std::path::PathBuf;

use ferroloader_transforms::fused::OutputSlot;
use ferroloader_transforms::rng::{sample_rng, SampleRng};
use ferroloader_transforms::spec::{
    Execution, Layout, Op, OpObserver, OpSpec, OutputDtype, Pipeline, PipelineContext,
    PipelineSpec, Size, IMAGENET_MEAN, IMAGENET_STD,
};
use ferroloader_transforms::{tensor, Error, RgbImage};

use crate::fixtures;

/// Up to `count` decodable images of the decode corpus under a megapixel, by file name.
pub fn corpus(count: usize) -> Vec<(String, Vec<u8>)> {
    let dir: PathBuf = fixtures::fixture_dir("decode", "make fixtures");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).expect("manifest"))
            .expect("manifest is JSON");
    manifest["images"]
        .as_array()
        .expect("images list")
        .iter()
        .filter(|e| {
            e["width"].as_u64().unwrap_or(0) * e["height"].as_u64().unwrap_or(0) < 1_000_000
        })
        .take(count)
        .map(|e| {
            let file = e["file"].as_str().expect("file name");
            (
                file.to_string(),
                std::fs::read(dir.join(file)).expect("fixture readable"),
            )
        })
        .collect()
}

/// `RandomResizedCrop(size)` with torchvision's defaults.
pub fn rrc(size: u32) -> OpSpec {
    OpSpec::RandomResizedCrop {
        size: Size::Int(size),
        scale: [0.08, 1.0],
        ratio: [0.75, 4.0 / 3.0],
        interpolation: Default::default(),
        antialias: true,
    }
}

pub fn flip(p: f64) -> OpSpec {
    OpSpec::RandomHorizontalFlip { p }
}

pub fn normalize() -> OpSpec {
    OpSpec::Normalize {
        mean: IMAGENET_MEAN,
        std: IMAGENET_STD,
    }
}

/// `RandomResizedCrop(size)`, flip, `middle`, `ToTensor`, `Normalize`.
pub fn train_with(size: u32, middle: Vec<OpSpec>) -> Vec<OpSpec> {
    let mut ops = vec![rrc(size), flip(0.5)];
    ops.extend(middle);
    ops.extend([OpSpec::ToTensor, normalize()]);
    ops
}

pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// One float32 sample of `pipeline` for sample `index` of epoch 0 of `seed`, and the
/// generator after its draws.
pub fn try_run_f32(
    pipeline: &Pipeline,
    bytes: &[u8],
    seed: u64,
    index: u64,
) -> Result<(Vec<f32>, SampleRng), Error> {
    let mut ctx = pipeline.new_context().expect("context");
    let mut out = vec![0f32; pipeline.sample_len()];
    let mut rng = sample_rng(seed, 0, index);
    pipeline.run(
        bytes,
        &mut rng,
        &mut ctx,
        OutputSlot::F32(&mut out),
        &mut (),
    )?;
    Ok((out, rng))
}

/// [`try_run_f32`]'s sample, which must run.
pub fn run_f32(pipeline: &Pipeline, bytes: &[u8], seed: u64, index: u64) -> Vec<f32> {
    try_run_f32(pipeline, bytes, seed, index).expect("runs").0
}

/// The op-by-op, uint8 HWC run of `ops` (a geometry and flips, no stage op) on `rng`, as an
/// image: what the stage ops see. Leaves `rng` after those ops' draws.
pub fn stage_image(ops: Vec<OpSpec>, bytes: &[u8], rng: &mut SampleRng) -> RgbImage {
    let mut ops = ops;
    ops.push(OpSpec::PilToTensor);
    let pipeline = Pipeline::new(
        PipelineSpec::new(ops)
            .output(OutputDtype::Uint8)
            .layout(Layout::Hwc)
            .execution(Execution::OpByOp),
    )
    .expect("plans");
    let mut ctx = pipeline.new_context().expect("context");
    let mut out = vec![0u8; pipeline.sample_len()];
    pipeline
        .run(bytes, rng, &mut ctx, OutputSlot::U8(&mut out), &mut ())
        .expect("runs");
    let (h, w) = pipeline.output_size();
    RgbImage::from_raw(w, h, out).expect("image")
}

/// `ToTensor` + `Normalize` of `img`, op by op.
pub fn to_normalized(img: &RgbImage) -> Vec<f32> {
    let mut out = vec![0f32; 3 * (img.width() * img.height()) as usize];
    tensor::to_tensor(img.view(), &mut out).expect("to_tensor");
    tensor::normalize(&mut out, &IMAGENET_MEAN, &IMAGENET_STD).expect("normalize");
    out
}

/// Every op boundary a sample crosses: `(true, op)` on entry, `(false, op)` on exit.
#[derive(Default)]
pub struct Spans(pub Vec<(bool, Op)>);

impl OpObserver for Spans {
    fn enter(&mut self, op: Op) {
        self.0.push((true, op));
    }
    fn exit(&mut self, op: Op) {
        self.0.push((false, op));
    }
}

/// Every span boundary a sample crosses, by name: an op's, and the nested ones a policy names
/// (`TrivialAugmentWide/Rotate`, through `enter_named`).
#[derive(Default)]
pub struct NamedSpans(pub Vec<(bool, String)>);

impl OpObserver for NamedSpans {
    fn enter(&mut self, op: Op) {
        self.0.push((true, op.name().to_string()));
    }
    fn exit(&mut self, op: Op) {
        self.0.push((false, op.name().to_string()));
    }
    fn enter_named(&mut self, name: &'static str) {
        self.0.push((true, name.to_string()));
    }
    fn exit_named(&mut self, name: &'static str) {
        self.0.push((false, name.to_string()));
    }
}

/// The op boundaries of sample 0 of epoch 0 of `seed`, run as float32.
pub fn spans(pipeline: &Pipeline, bytes: &[u8], seed: u64) -> Vec<(bool, Op)> {
    let mut obs = Spans::default();
    let mut ctx = pipeline.new_context().expect("context");
    let mut out = vec![0f32; pipeline.sample_len()];
    pipeline
        .run(
            bytes,
            &mut sample_rng(seed, 0, 0),
            &mut ctx,
            OutputSlot::F32(&mut out),
            &mut obs,
        )
        .expect("runs");
    obs.0
}

/// Allocations counted by `allocations` while `pipeline` runs every corpus image at each of
/// `indices` (samples of epoch 0 under `seed`) with one context and output buffer: run it once
/// to warm them, then a second call must count 0. The counter comes from the calling test's
/// allocator (`support/counting_alloc.rs`), which this module does not install.
/// The allocations `pipeline` makes over samples 10..13 of `corpus`, once samples 0..13 have
/// warmed a fresh context and slot: a steady state allocates none.
pub fn steady_state_allocations(
    pipeline: &Pipeline,
    corpus: &[(String, Vec<u8>)],
    seed: u64,
    allocations: fn() -> u64,
) -> u64 {
    let mut ctx = pipeline.new_context().expect("context");
    let mut out = vec![0f32; pipeline.sample_len()];
    let mut pass = |indices: std::ops::Range<u64>| {
        allocations_over(
            pipeline,
            &mut ctx,
            &mut out,
            corpus,
            seed,
            indices,
            allocations,
        )
    };
    pass(0..13);
    pass(10..13)
}

pub fn allocations_over(
    pipeline: &Pipeline,
    ctx: &mut PipelineContext,
    out: &mut [f32],
    corpus: &[(String, Vec<u8>)],
    seed: u64,
    indices: std::ops::Range<u64>,
    allocations: fn() -> u64,
) -> u64 {
    let before = allocations();
    for (_, bytes) in corpus {
        for index in indices.clone() {
            pipeline
                .run(
                    bytes,
                    &mut sample_rng(seed, 0, index),
                    ctx,
                    OutputSlot::F32(out),
                    &mut (),
                )
                .expect("runs");
        }
    }
    allocations() - before
}

/// The message of the `InvalidArgument` error planning `spec` must fail with.
pub fn plan_error(spec: PipelineSpec) -> String {
    match Pipeline::new(spec) {
        Err(err @ Error::InvalidArgument { .. }) => err.to_string(),
        Err(other) => panic!("wrong error kind: {other}"),
        Ok(_) => panic!("planned"),
    }
}
