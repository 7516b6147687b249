//! `AugMix` in planned pipelines on the decode corpus.
//!
//! The reference for every sample is built from independent parts: the op-by-op pipeline
//! without AugMix (uint8 HWC: crop, resize, flip), then AugMix's draw for the same sample
//! generator (continued in torchvision's order: crop, flip, then AugMix), carried out by
//! [`augmix`] with the tensor kernels, then `to_tensor` + `normalize`. The staged pipeline
//! and its op-by-op execution must equal it bit for bit, for v1 and v2, both interpolations,
//! with and without a fill. Also: the spans (`AugMix`, one `AugMix/<Op>` per chain op inside
//! it), no allocation once warm, the spec's names and defaults, and refusals naming the
//! argument. Fidelity to torchvision itself is python-bindings/tests/test_augmix.py's.

use std::collections::HashSet;

use ferroloader_transforms::augment::augmix::{augmix, AugMixScratch, TensorWarp};
use ferroloader_transforms::augment::geometry::Interpolation;
use ferroloader_transforms::augment::policy::{Api, AugMix, AugMixPlan, AugmentationSpace};
use ferroloader_transforms::fused::OutputSlot;
use ferroloader_transforms::rng::{sample_rng, SampleRng};
use ferroloader_transforms::spec::{Execution, Fill, OpSpec, Pipeline, PipelineSpec};
use ferroloader_transforms::RgbImage;

use crate::stage_pipeline;
use stage_pipeline::{allocations_over, bits, flip, to_normalized};

use crate::counting_alloc;
use counting_alloc::allocations;

const SIZE: u32 = 40;
const SEED: u64 = 21;
/// Samples per corpus image: enough that every op of the space runs somewhere.
const INDICES: u64 = 24;

fn corpus() -> Vec<(String, Vec<u8>)> {
    stage_pipeline::corpus(6)
}

fn train_with(middle: Vec<OpSpec>) -> Vec<OpSpec> {
    stage_pipeline::train_with(SIZE, middle)
}

fn stage_image(bytes: &[u8], rng: &mut SampleRng) -> RgbImage {
    stage_pipeline::stage_image(vec![stage_pipeline::rrc(SIZE), flip(0.5)], bytes, rng)
}

/// An AugMix spec and the same op as the draw and the kernels' settings.
struct Case {
    spec: OpSpec,
    augmix: AugMix,
    warp: TensorWarp,
}

#[allow(clippy::too_many_arguments)]
fn case(
    severity: u32,
    width: u32,
    depth: i32,
    all_ops: bool,
    interpolation: Interpolation,
    fill: Option<f64>,
    api: Api,
) -> Case {
    Case {
        spec: OpSpec::AugMix {
            severity: i64::from(severity),
            mixture_width: i64::from(width),
            chain_depth: i64::from(depth),
            alpha: 1.0,
            all_ops,
            interpolation,
            fill: fill.map(Fill::Number),
            api,
        },
        augmix: AugMix::new(severity, width, depth, 1.0, all_ops)
            .expect("valid")
            .with_api(api),
        warp: TensorWarp {
            interpolation,
            fill: fill.map(|v| [v as f32; 3]),
            api,
            one_channel: false,
        },
    }
}

fn cases() -> Vec<Case> {
    use Interpolation::{Bilinear, Nearest};
    vec![
        case(3, 3, -1, true, Bilinear, None, Api::V1),
        case(10, 2, 2, true, Nearest, Some(128.0), Api::V1),
        case(5, 3, -1, false, Bilinear, Some(30.0), Api::V2),
        case(3, 3, 3, true, Nearest, None, Api::V2),
    ]
}

fn reference(case: &Case, bytes: &[u8], index: u64) -> (Vec<f32>, AugMixPlan) {
    let mut rng = sample_rng(SEED, 0, index);
    let mut img = stage_image(bytes, &mut rng);
    let plan = case.augmix.draw(SIZE, SIZE, &mut rng);
    augmix(&plan, &mut img, &mut AugMixScratch::new(), &case.warp).expect("applies");
    (to_normalized(&img), plan)
}

fn run_f32(pipeline: &Pipeline, bytes: &[u8], index: u64) -> Vec<f32> {
    stage_pipeline::run_f32(pipeline, bytes, SEED, index)
}

#[test]
fn augmix_equals_the_stages_then_the_tensor_kernels_with_its_draws() {
    let corpus = corpus();
    for case in cases() {
        let staged =
            Pipeline::new(PipelineSpec::new(train_with(vec![case.spec.clone()]))).expect("plans");
        let op_by_op = Pipeline::new(
            PipelineSpec::new(train_with(vec![case.spec.clone()])).execution(Execution::OpByOp),
        )
        .expect("plans");
        let mut kinds = HashSet::new();
        for (name, bytes) in &corpus {
            for index in 0..INDICES {
                let (want, plan) = reference(&case, bytes, index);
                for chain in plan.chains() {
                    kinds.extend(chain.ops.as_slice().iter().map(|op| op.kind()));
                }
                let spec = &case.spec;
                assert!(
                    bits(&run_f32(&staged, bytes, index)) == bits(&want),
                    "{spec:?} on {name} #{index}: staged differs from the reference"
                );
                assert!(
                    bits(&run_f32(&op_by_op, bytes, index)) == bits(&want),
                    "{spec:?} on {name} #{index}: op-by-op differs from the reference"
                );
            }
        }
        let OpSpec::AugMix { all_ops, .. } = case.spec else {
            unreachable!("AugMix cases")
        };
        let space = AugmentationSpace::AugMix { all_ops };
        assert_eq!(kinds.len(), space.ops().len(), "{:?}: {kinds:?}", case.spec);
    }
}

#[test]
fn the_mix_changes_the_image_and_keeps_its_size() {
    let (_, bytes) = corpus().into_iter().next().expect("corpus");
    let plain = Pipeline::new(PipelineSpec::new(train_with(vec![]))).expect("plans");
    let mixed =
        Pipeline::new(PipelineSpec::new(train_with(vec![cases().remove(0).spec]))).expect("plans");
    assert_eq!(plain.output_size(), mixed.output_size());
    let changed = (0..INDICES)
        .filter(|&i| bits(&run_f32(&plain, &bytes, i)) != bits(&run_f32(&mixed, &bytes, i)))
        .count();
    assert!(
        changed as u64 >= INDICES - 1,
        "only {changed} samples changed"
    );
}

#[test]
fn augmix_has_its_span_and_each_chain_op_a_nested_named_one() {
    let (_, bytes) = corpus().into_iter().next().expect("corpus");
    let case = cases().remove(0);
    for execution in [Execution::Fused, Execution::OpByOp] {
        let pipeline = Pipeline::new(
            PipelineSpec::new(train_with(vec![case.spec.clone()])).execution(execution),
        )
        .expect("plans");
        for index in 0..4 {
            let mut obs = stage_pipeline::NamedSpans::default();
            let mut ctx = pipeline.new_context().expect("context");
            let mut out = vec![0f32; pipeline.sample_len()];
            pipeline
                .run(
                    &bytes,
                    &mut sample_rng(SEED, 0, index),
                    &mut ctx,
                    OutputSlot::F32(&mut out),
                    &mut obs,
                )
                .expect("runs");
            let (_, plan) = reference(&case, &bytes, index);
            let mut want = vec![(true, "AugMix".to_string())];
            for chain in plan.chains() {
                for op in &chain.ops {
                    let name = format!("AugMix/{}", op.kind().name());
                    want.extend([(true, name.clone()), (false, name)]);
                }
            }
            want.push((false, "AugMix".to_string()));
            let start = obs
                .0
                .iter()
                .position(|s| *s == (true, "AugMix".to_string()))
                .expect("AugMix span");
            assert_eq!(
                obs.0[start..start + want.len()],
                want[..],
                "{execution:?} #{index}"
            );
        }
    }
}

#[test]
fn staged_augmix_allocates_nothing_once_warm() {
    let corpus = corpus();
    let ops: Vec<OpSpec> = cases().into_iter().map(|c| c.spec).collect();
    for execution in [Execution::Fused, Execution::OpByOp] {
        let pipeline =
            Pipeline::new(PipelineSpec::new(train_with(ops.clone())).execution(execution))
                .expect("plans");
        let mut ctx = pipeline.new_context().expect("context");
        let mut out = vec![0f32; pipeline.sample_len()];
        let mut pass = || {
            allocations_over(
                &pipeline,
                &mut ctx,
                &mut out,
                &corpus,
                SEED,
                0..3,
                allocations,
            )
        };
        pass();
        assert_eq!(pass(), 0, "{execution:?}: steady state allocated");
    }
}

fn plan_error(op: OpSpec) -> String {
    stage_pipeline::plan_error(PipelineSpec::new(train_with(vec![op])))
}

fn spec_json(json: &str) -> OpSpec {
    serde_json::from_str(json).expect("parses")
}

#[test]
fn invalid_augmix_is_refused_naming_the_argument() {
    for (json, argument) in [
        (r#"{"op": "AugMix", "severity": 0}"#, "severity"),
        (r#"{"op": "AugMix", "severity": 11}"#, "severity"),
        (r#"{"op": "AugMix", "mixture_width": 0}"#, "mixture_width"),
        (r#"{"op": "AugMix", "mixture_width": 9}"#, "mixture_width"),
        (r#"{"op": "AugMix", "chain_depth": 9}"#, "chain_depth"),
        (r#"{"op": "AugMix", "alpha": 0.0}"#, "alpha"),
        (r#"{"op": "AugMix", "fill": 256}"#, "fill"),
        (r#"{"op": "AugMix", "fill": [1, 2]}"#, "fill"),
    ] {
        let err = plan_error(spec_json(json));
        assert!(
            err.contains(&format!("`{argument}`")) && err.contains("AugMix"),
            "{json}: {err}"
        );
    }
}

#[test]
fn augmix_spec_parses_with_torchvision_names_and_defaults() {
    assert_eq!(
        spec_json(r#"{"op": "AugMix"}"#),
        OpSpec::AugMix {
            severity: 3,
            mixture_width: 3,
            chain_depth: -1,
            alpha: 1.0,
            all_ops: true,
            interpolation: Interpolation::Bilinear,
            fill: None,
            api: Api::V1,
        }
    );
}
