//! v2's `GaussianNoise` on the float32 slot, on the decode corpus.
//!
//! The reference for every sample is built from independent parts: the op-by-op pipeline
//! without the noise (and without `Normalize` when the noise is written before it), then the
//! normals (`fill_standard_normal`, continued on the same sample generator), torch's float32
//! arithmetic written out here, and `tensor::normalize` after it when the noise stands before
//! `Normalize`. Fused, staged and op-by-op runs must equal it bit for bit, with and without
//! `clip`, with an erasing beside it. Also: its span, no allocation once warm, refusals naming
//! the argument, and JSON names and defaults.

use ferroloader_transforms::augment::policy::draw_p_item;
use ferroloader_transforms::rng::{SampleRng, TorchDraws};
use ferroloader_transforms::spec::{
    apply_gaussian_noise, plan_gaussian_noise, Execution, Op, OpSpec, Pipeline, PipelineSpec,
    IMAGENET_MEAN, IMAGENET_STD,
};
use ferroloader_transforms::tensor;

use crate::stage_pipeline;
use stage_pipeline::{bits, flip, normalize, plan_error, steady_state_allocations};

use crate::counting_alloc;
use counting_alloc::allocations;

const SIZE: u32 = 40;
const SEED: u64 = 7;

fn corpus() -> Vec<(String, Vec<u8>)> {
    stage_pipeline::corpus(5)
}

fn rrc() -> OpSpec {
    stage_pipeline::rrc(SIZE)
}

fn noise(mean: f64, sigma: f64, clip: bool) -> OpSpec {
    OpSpec::GaussianNoise { mean, sigma, clip }
}

fn plan_with(ops: Vec<OpSpec>, execution: Execution) -> Pipeline {
    Pipeline::new(PipelineSpec::new(ops).execution(execution)).expect("plans")
}

fn run_f32_rng(pipeline: &Pipeline, bytes: &[u8], index: u64) -> (Vec<f32>, SampleRng) {
    stage_pipeline::try_run_f32(pipeline, bytes, SEED, index).expect("runs")
}

/// The reference of `[RandomResizedCrop, flip, ToTensor, (noise,) Normalize, (noise)]`.
fn reference(
    (mean, sigma, clip): (f32, f32, bool),
    before_normalize: bool,
    staged: bool,
    bytes: &[u8],
    index: u64,
) -> Vec<f32> {
    let ops = if before_normalize {
        vec![rrc(), flip(0.5), OpSpec::ToTensor]
    } else {
        vec![rrc(), flip(0.5), OpSpec::ToTensor, normalize()]
    };
    let (mut out, mut rng) = run_f32_rng(&plan_with(ops, Execution::OpByOp), bytes, index);
    if staged {
        // The coin of the staged pipelines' `RandomInvert(p=0)`, which changes no pixel.
        assert!(!draw_p_item(&mut rng, 0.0));
    }
    let mut z = vec![0f32; out.len()];
    rng.fill_standard_normal(&mut z);
    for (x, z) in out.iter_mut().zip(&z) {
        // torch: `noise = mean + randn_like(image) * sigma; out = image + noise`, then clamp.
        let noise = mean + z * sigma;
        let y = *x + noise;
        *x = if clip { y.clamp(0.0, 1.0) } else { y };
    }
    if before_normalize {
        tensor::normalize(&mut out, &IMAGENET_MEAN, &IMAGENET_STD).expect("normalize");
    }
    out
}

#[test]
fn noise_equals_the_normals_and_torchs_arithmetic_before_or_after_normalize() {
    let corpus = corpus();
    for (mean, sigma, clip) in [(0.0, 0.1, true), (0.1, 0.3, true), (-0.2, 0.25, false)] {
        for before_normalize in [false, true] {
            let op = noise(mean, sigma, clip);
            let mut ops = vec![rrc(), flip(0.5), OpSpec::ToTensor, normalize()];
            ops.insert(if before_normalize { 3 } else { 4 }, op);
            let mut staged_ops = ops.clone();
            staged_ops.insert(2, OpSpec::RandomInvert { p: 0.0 });
            let pipelines = [
                plan_with(ops.clone(), Execution::Fused),
                plan_with(staged_ops.clone(), Execution::Fused),
                plan_with(ops, Execution::OpByOp),
                plan_with(staged_ops, Execution::OpByOp),
            ];
            let args = (mean as f32, sigma as f32, clip);
            for (name, bytes) in &corpus {
                for index in 0..4 {
                    for (k, pipeline) in pipelines.iter().enumerate() {
                        let want = reference(args, before_normalize, k % 2 == 1, bytes, index);
                        let got = run_f32_rng(pipeline, bytes, index).0;
                        assert!(
                            bits(&got) == bits(&want),
                            "{args:?} before normalize {before_normalize}, pipeline {k}, \
                             {name} #{index}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn an_erasing_before_the_noise_keeps_its_place() {
    // RandomErasing, then the noise, both before Normalize: fused (the slot normalized after
    // them) and op by op agree.
    let erasing = OpSpec::RandomErasing {
        p: 1.0,
        scale: [0.1, 0.3],
        ratio: [0.5, 2.0],
        value: ferroloader_transforms::spec::EraseFill::Number(0.7),
        inplace: false,
    };
    let ops = vec![
        rrc(),
        flip(0.5),
        OpSpec::ToTensor,
        erasing.clone(),
        noise(0.0, 0.2, true),
        normalize(),
        erasing,
    ];
    let fused = plan_with(ops.clone(), Execution::Fused);
    let op_by_op = plan_with(ops, Execution::OpByOp);
    for (name, bytes) in &corpus() {
        for index in 0..4 {
            let got = run_f32_rng(&fused, bytes, index).0;
            let want = run_f32_rng(&op_by_op, bytes, index).0;
            assert!(bits(&got) == bits(&want), "{name} #{index}");
        }
    }
}

#[test]
fn the_hook_runs_what_the_pipeline_runs() {
    let (_, bytes) = corpus().into_iter().next().expect("corpus");
    let op = noise(0.05, 0.2, true);
    let planned = plan_gaussian_noise(&op).expect("valid").expect("a noise");
    let plain = plan_with(
        vec![rrc(), flip(0.5), OpSpec::ToTensor, normalize()],
        Execution::Fused,
    );
    let noisy = plan_with(
        vec![rrc(), flip(0.5), OpSpec::ToTensor, normalize(), op],
        Execution::Fused,
    );
    for index in 0..4 {
        let (mut out, mut rng) = run_f32_rng(&plain, &bytes, index);
        let mut values = Vec::new();
        apply_gaussian_noise(&planned, &mut out, &mut rng, &mut values);
        assert_eq!(values.len(), out.len());
        assert!(bits(&out) == bits(&run_f32_rng(&noisy, &bytes, index).0));
    }
}

#[test]
fn noise_has_its_span_and_allocates_nothing_once_warm() {
    let corpus = corpus();
    let ops = vec![
        rrc(),
        flip(0.5),
        OpSpec::ToTensor,
        noise(0.0, 0.1, true),
        normalize(),
    ];
    let got = stage_pipeline::spans(
        &plan_with(ops.clone(), Execution::Fused),
        &corpus[0].1,
        SEED,
    );
    assert_eq!(
        got[got.len() - 6..],
        [
            (true, Op::Fused),
            (false, Op::Fused),
            (true, Op::GaussianNoise),
            (false, Op::GaussianNoise),
            (true, Op::Normalize),
            (false, Op::Normalize),
        ]
    );
    for execution in [Execution::Fused, Execution::OpByOp] {
        let pipeline = plan_with(ops.clone(), execution);
        assert_eq!(
            steady_state_allocations(&pipeline, &corpus, SEED, allocations),
            0,
            "{execution:?}: steady state allocated"
        );
    }
}

#[test]
fn bad_noises_are_refused_naming_the_argument() {
    for (op, arg, reason) in [
        (noise(0.0, -0.1, true), "sigma", "shouldn't be negative"),
        (noise(f64::NAN, 0.1, true), "mean", "not a finite"),
        (noise(0.0, f64::INFINITY, true), "sigma", "not a finite"),
    ] {
        let msg = plan_error(PipelineSpec::new(vec![rrc(), OpSpec::ToTensor, op.clone()]));
        assert!(
            msg.contains(arg) && msg.contains(reason) && msg.contains("GaussianNoise"),
            "{op:?}: {msg}"
        );
    }
    // Only on the float tensor.
    let msg = plan_error(PipelineSpec::new(vec![rrc(), noise(0.0, 0.1, true)]));
    assert!(
        msg.contains("GaussianNoise") && msg.contains("ToTensor"),
        "{msg}"
    );
}

#[test]
fn specs_parse_with_torchvisions_names_and_defaults() {
    let ops: Vec<OpSpec> = serde_json::from_str(
        r#"[{"op": "GaussianNoise"}, {"op": "GaussianNoise", "mean": 0.5, "sigma": 0.2, "clip": false},
            {"op": "RGB"}, {"op": "RandomChannelPermutation"}, {"op": "RandomPhotometricDistort"}]"#,
    )
    .expect("parses");
    assert_eq!(
        ops,
        vec![
            noise(0.0, 0.1, true),
            noise(0.5, 0.2, false),
            OpSpec::Rgb,
            OpSpec::RandomChannelPermutation,
            OpSpec::RandomPhotometricDistort {
                brightness: [0.875, 1.125],
                contrast: [0.5, 1.5],
                saturation: [0.5, 1.5],
                hue: [-0.05, 0.05],
                p: 0.5
            }
        ]
    );
}
