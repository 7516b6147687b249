//! timm's `RandAugment` (`TimmRandAugment`) in planned pipelines on the decode corpus.
//!
//! The reference for every sample is built from independent parts: the op-by-op pipeline
//! without the policy (uint8 HWC: crop, flip), then the policy's plan drawn from the same
//! sample generator continued (`plan_timm_rand_augment`, `TimmRandAugment::draw`), each
//! applied step carried out by `apply_timm_op` (timm's op with its argument; its pixels are
//! checked against timm's own functions in python-bindings/tests/test_timm_randaugment.py),
//! then `to_tensor` + `normalize`. The staged pipeline, fused and op by op, must equal it bit
//! for bit. Also: the policy's span with one named span per op applied, no allocation once
//! warm, and refusals naming the op and the argument.

use ferroloader_transforms::augment::policy::TimmRandAugment;
use ferroloader_transforms::fused::OutputSlot;
use ferroloader_transforms::rng::sample_rng;
use ferroloader_transforms::spec::{
    apply_timm_op, plan_timm_rand_augment, Execution, OpSpec, Pipeline, PipelineSpec,
};

use crate::stage_pipeline;
use stage_pipeline::{allocations_over, bits, flip, to_normalized};

use crate::counting_alloc;
use counting_alloc::allocations;

const SIZE: u32 = 48;
const SEED: u64 = 31;
const INDICES: u64 = 12;

/// timm's `rand-m9-mstd0.5-inc1` with `create_transform`'s hparams, and a weighted variant
/// with uniform magnitude noise, the random filter pair and a raised magnitude bound.
fn specs() -> Vec<OpSpec> {
    let increasing = [
        "AutoContrast",
        "Equalize",
        "Invert",
        "Rotate",
        "PosterizeIncreasing",
        "SolarizeIncreasing",
        "SolarizeAdd",
        "ColorIncreasing",
        "ContrastIncreasing",
        "BrightnessIncreasing",
        "SharpnessIncreasing",
        "ShearX",
        "ShearY",
        "TranslateXRel",
        "TranslateYRel",
    ];
    let recipe: Vec<serde_json::Value> = increasing
        .iter()
        .map(|name| {
            serde_json::json!({"name": name, "magnitude": 9, "magnitude_std": 0.5,
                "translate_const": 21, "fill": [124, 116, 104], "interpolation": "bicubic"})
        })
        .collect();
    let others = [
        "Posterize",
        "PosterizeOriginal",
        "Solarize",
        "Color",
        "Contrast",
        "Brightness",
        "Sharpness",
        "TranslateX",
        "TranslateY",
        "Desaturate",
        "Rotate",
        "GaussianBlur",
        "GaussianBlurRand",
    ];
    let weighted: Vec<serde_json::Value> = others
        .iter()
        .map(|name| {
            serde_json::json!({"name": name, "prob": 0.8, "magnitude": 12, "magnitude_std": "inf",
                "magnitude_max": 15, "translate_const": 21, "fill": [9, 200, 30]})
        })
        .collect();
    let weights: Vec<f64> = (1..=others.len()).map(|w| w as f64).collect();
    [
        serde_json::json!({"op": "TimmRandAugment", "ops": recipe}),
        serde_json::json!({"op": "TimmRandAugment", "ops": weighted, "num_layers": 3,
            "choice_weights": weights}),
    ]
    .into_iter()
    .map(|v| serde_json::from_value(v).expect("a TimmRandAugment spec"))
    .collect()
}

fn policy(spec: &OpSpec) -> TimmRandAugment {
    plan_timm_rand_augment(spec)
        .expect("valid")
        .expect("a TimmRandAugment")
}

#[test]
fn staged_pipeline_equals_the_policy_applied_by_hand() {
    let corpus = stage_pipeline::corpus(10);
    let mut applied = 0;
    for spec in specs() {
        let policy = policy(&spec);
        for execution in [Execution::Fused, Execution::OpByOp] {
            let pipeline = Pipeline::new(
                PipelineSpec::new(stage_pipeline::train_with(SIZE, vec![spec.clone()]))
                    .execution(execution),
            )
            .expect("plans");
            for (name, bytes) in &corpus {
                for index in 0..INDICES {
                    let got = stage_pipeline::run_f32(&pipeline, bytes, SEED, index);
                    let mut rng = sample_rng(SEED, 0, index);
                    let mut img = stage_pipeline::stage_image(
                        vec![stage_pipeline::rrc(SIZE), flip(0.5)],
                        bytes,
                        &mut rng,
                    );
                    for step in policy.draw(&mut rng).steps().filter(|s| s.applied) {
                        apply_timm_op(step.kind, step.arg, step.interpolation, step.fill, &mut img)
                            .expect("applies");
                        applied += 1;
                    }
                    assert!(
                        bits(&got) == bits(&to_normalized(&img)),
                        "{execution:?}: {name} #{index}"
                    );
                }
            }
        }
    }
    assert!(applied > 200, "{applied} ops applied");
}

#[test]
fn the_policy_has_its_span_and_each_op_applied_a_nested_named_one() {
    let (_, bytes) = stage_pipeline::corpus(1)
        .into_iter()
        .next()
        .expect("corpus");
    let spec = specs().remove(0);
    let policy = policy(&spec);
    let pipeline = Pipeline::new(PipelineSpec::new(stage_pipeline::train_with(
        SIZE,
        vec![spec],
    )))
    .expect("plans");
    let mut nested = 0;
    for index in 0..INDICES {
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
        let mut rng = sample_rng(SEED, 0, index);
        let _ = stage_pipeline::stage_image(
            vec![stage_pipeline::rrc(SIZE), flip(0.5)],
            &bytes,
            &mut rng,
        );
        let mut want = vec![(true, "TimmRandAugment".to_string())];
        for step in policy.draw(&mut rng).steps().filter(|s| s.applied) {
            let name = format!("TimmRandAugment/{}", step.kind.name());
            want.extend([(true, name.clone()), (false, name)]);
            nested += 1;
        }
        want.push((false, "TimmRandAugment".to_string()));
        let start = obs
            .0
            .iter()
            .position(|s| s.0 && s.1 == "TimmRandAugment")
            .expect("policy span");
        assert_eq!(obs.0[start..start + want.len()], want[..], "#{index}");
    }
    assert!(nested > 0);
}

#[test]
fn the_policy_allocates_nothing_once_warm() {
    let corpus = stage_pipeline::corpus(10);
    for execution in [Execution::Fused, Execution::OpByOp] {
        let pipeline = Pipeline::new(
            PipelineSpec::new(stage_pipeline::train_with(SIZE, specs())).execution(execution),
        )
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
                0..4,
                allocations,
            )
        };
        // Two passes to warm: with this seed the AVX-512 resize's horizontal plan
        // (`resize::avx512::HorizontalPlan::expand`) grows once more on the second pass, with or
        // without a stage op (seen with `Grayscale` alone); the policy itself is warm after one.
        pass();
        pass();
        assert_eq!(pass(), 0, "{execution:?}: steady state allocated");
    }
}

#[test]
fn invalid_specs_are_refused_naming_op_and_argument() {
    let error = |json: serde_json::Value| {
        let op: OpSpec = serde_json::from_value(json).expect("parses");
        stage_pipeline::plan_error(PipelineSpec::new(stage_pipeline::train_with(
            SIZE,
            vec![op],
        )))
    };
    let cases = [
        (
            serde_json::json!({"op": "TimmRandAugment", "ops": [{"name": "Cutout"}]}),
            "`name`: TimmRandAugment: ops[0] (Cutout): \"Cutout\" is not one of timm's",
        ),
        (
            serde_json::json!({"op": "TimmRandAugment", "ops": [{"name": "Rotate", "prob": 2}]}),
            "`prob`: TimmRandAugment: ops[0] (Rotate): 2 is not a probability",
        ),
        (
            serde_json::json!({"op": "TimmRandAugment",
                "ops": [{"name": "Invert"}, {"name": "ShearX", "interpolation": ["bilinear", "lanczos"]}]}),
            "`interpolation`: TimmRandAugment: ops[1] (ShearX): \"lanczos\"",
        ),
        (
            serde_json::json!({"op": "TimmRandAugment", "ops": [{"name": "Invert", "magnitude_std": "nan"}]}),
            "`magnitude_std`: TimmRandAugment: ops[0] (Invert): \"nan\"",
        ),
        (
            serde_json::json!({"op": "TimmRandAugment", "ops": [{"name": "Invert", "fill": [1, 2]}]}),
            "`fill`: TimmRandAugment: ops[0] (Invert): 2 values",
        ),
        (
            serde_json::json!({"op": "TimmRandAugment", "ops": [{"name": "Invert"}], "num_layers": 17}),
            "`num_layers`: TimmRandAugment: 17 is not in [0, 16]",
        ),
        (
            serde_json::json!({"op": "TimmRandAugment", "ops": [{"name": "Invert"}, {"name": "Equalize"}],
                "num_layers": 2, "choice_weights": [1.0, 0.0]}),
            "`choice_weights`: TimmRandAugment: 1 positive weights for 2 layers",
        ),
        (
            serde_json::json!({"op": "TimmRandAugment", "ops": []}),
            "`ops`: TimmRandAugment: 0 ops",
        ),
    ];
    for (json, want) in cases {
        let got = error(json.clone());
        assert!(got.contains(want), "{json}: {got}");
    }
}

#[test]
fn after_to_image_it_is_refused_as_timm_fails_on_a_tensor() {
    let spec = specs().remove(0);
    let mut ops =
        vec![serde_json::from_value(serde_json::json!({"op": "ToImage"})).expect("parses")];
    ops.extend(stage_pipeline::train_with(SIZE, vec![spec.clone()]));
    let got = stage_pipeline::plan_error(PipelineSpec::new(ops));
    assert!(
        got.contains("timm's RandAugment takes a PIL image"),
        "{got}"
    );
    // Before it (a ToImage after the policy), the same op plans.
    let mut ops = stage_pipeline::train_with(SIZE, vec![spec]);
    ops.insert(
        3,
        serde_json::from_value(serde_json::json!({"op": "ToImage"})).expect("parses"),
    );
    Pipeline::new(PipelineSpec::new(ops)).expect("plans");
}
