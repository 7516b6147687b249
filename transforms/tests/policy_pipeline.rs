//! The augmentation policies in planned pipelines (`TrivialAugmentWide`, `RandAugment`,
//! `AutoAugment`) on the decode corpus.
//!
//! The reference for every sample is built from independent parts: the op-by-op pipeline
//! without the policy (uint8 HWC: crop, resize, flip), then the policy's draw for the same
//! sample generator (continued in torchvision's order: crop, flip, then the policy), each drawn
//! op carried out here by calling the colour and geometry kernels by hand with torchvision's
//! `_apply_op` arguments, then `to_tensor` + `normalize`. The staged pipeline and its op-by-op
//! execution must equal it bit for bit. Also: the spans (the policy's, and one named span per
//! chosen op inside it), no allocation once warm, the specs' names and defaults, and refusals
//! naming the op and the argument.

use std::collections::HashSet;

use ferroloader_transforms::augment::color::{self, ColorScratch};
use ferroloader_transforms::augment::geometry::{AffineWarp, Interpolation};
use ferroloader_transforms::augment::policy::{
    Api, AugmentationSpace, AutoAugment, AutoAugmentPolicy, OpKind, PixelOp, RandAugment,
    TrivialAugmentWide,
};
use ferroloader_transforms::fused::OutputSlot;
use ferroloader_transforms::rng::{sample_rng, SampleRng};
use ferroloader_transforms::spec::{Execution, Fill, OpSpec, Pipeline, PipelineSpec};
use ferroloader_transforms::RgbImage;

use crate::stage_pipeline;
use stage_pipeline::{allocations_over, bits, flip, to_normalized};

use crate::counting_alloc;
use counting_alloc::allocations;

// ---------------------------------------------------------------- corpus and helpers

const SIZE: u32 = 48;
const SEED: u64 = 20;

fn corpus() -> Vec<(String, Vec<u8>)> {
    stage_pipeline::corpus(10)
}

fn rrc() -> OpSpec {
    stage_pipeline::rrc(SIZE)
}

fn train_with(middle: Vec<OpSpec>) -> Vec<OpSpec> {
    stage_pipeline::train_with(SIZE, middle)
}

fn run_f32(pipeline: &Pipeline, bytes: &[u8], index: u64) -> Vec<f32> {
    stage_pipeline::run_f32(pipeline, bytes, SEED, index)
}

/// The op-by-op uint8 HWC run of `[RandomResizedCrop, flip(0.5)]` on `rng`: what the stage ops
/// see. Leaves `rng` after the crop and flip draws.
fn stage_image(bytes: &[u8], rng: &mut SampleRng) -> RgbImage {
    stage_pipeline::stage_image(vec![rrc(), flip(0.5)], bytes, rng)
}
/// Samples per corpus image: enough that every op of a policy's space is drawn somewhere.
const INDICES: u64 = 40;

/// torchvision's `_apply_op(img, op, magnitude, interpolation, fill)` on a PIL image, written
/// out with the kernels: `F.affine` (shears about `center=[0, 0]`, translations about the
/// image centre), `F.rotate` (Pillow's `rotate`, no expand), the `F.adjust_*` and `ImageOps`.
fn apply_by_hand(
    op: PixelOp,
    img: &RgbImage,
    interpolation: Interpolation,
    fill: [u8; 3],
) -> RgbImage {
    let mut out = img.clone();
    let mut warp = AffineWarp::new();
    let affine = |warp: &mut AffineWarp, out: &mut RgbImage, translate, shear, center| {
        warp.affine(
            img.view(),
            0.0,
            translate,
            1.0,
            shear,
            center,
            interpolation,
            fill,
            out,
        )
        .expect("affine")
    };
    match op {
        PixelOp::Identity => {}
        PixelOp::ShearX { degrees } => affine(
            &mut warp,
            &mut out,
            [0.0, 0.0],
            [degrees, 0.0],
            Some([0.0, 0.0]),
        ),
        PixelOp::ShearY { degrees } => affine(
            &mut warp,
            &mut out,
            [0.0, 0.0],
            [0.0, degrees],
            Some([0.0, 0.0]),
        ),
        PixelOp::TranslateX { pixels } => affine(
            &mut warp,
            &mut out,
            [f64::from(pixels), 0.0],
            [0.0, 0.0],
            None,
        ),
        PixelOp::TranslateY { pixels } => affine(
            &mut warp,
            &mut out,
            [0.0, f64::from(pixels)],
            [0.0, 0.0],
            None,
        ),
        PixelOp::Rotate { degrees } => warp
            .rotate(
                img.view(),
                degrees,
                None,
                false,
                interpolation,
                fill,
                &mut out,
            )
            .expect("rotate"),
        PixelOp::Brightness { factor } => color::adjust_brightness(&mut out, factor).expect("b"),
        PixelOp::Color { factor } => color::adjust_saturation(&mut out, factor).expect("c"),
        PixelOp::Contrast { factor } => color::adjust_contrast(&mut out, factor).expect("c"),
        PixelOp::Sharpness { factor } => {
            color::adjust_sharpness(&mut out, factor, &mut ColorScratch::new()).expect("s")
        }
        PixelOp::Posterize { bits } => color::posterize(&mut out, bits).expect("posterize"),
        PixelOp::Solarize { threshold } => color::solarize(&mut out, threshold),
        PixelOp::AutoContrast => color::autocontrast(&mut out),
        PixelOp::Equalize => color::equalize(&mut out),
        PixelOp::Invert => color::invert(&mut out),
    }
    out
}

/// A policy's draw for a `width` x `height` image.
type Draw = Box<dyn Fn(u32, u32, &mut SampleRng) -> Vec<PixelOp>>;

/// A policy spec and the same policy as the draws module builds it, with its warp settings.
struct Case {
    spec: OpSpec,
    draw: Draw,
    interpolation: Interpolation,
    fill: [u8; 3],
}

fn trivial(api: Api, interpolation: Interpolation, fill: Option<Fill>, rgb: [u8; 3]) -> Case {
    let policy = TrivialAugmentWide::new(31).expect("policy").with_api(api);
    Case {
        spec: OpSpec::TrivialAugmentWide {
            num_magnitude_bins: 31,
            interpolation,
            fill,
            api,
        },
        draw: Box::new(move |_, _, rng| vec![policy.draw(rng)]),
        interpolation,
        fill: rgb,
    }
}

fn rand_augment(num_ops: u32, magnitude: u32, bins: u32, api: Api) -> Case {
    let policy = RandAugment::new(num_ops, magnitude, bins)
        .expect("policy")
        .with_api(api);
    Case {
        spec: OpSpec::RandAugment {
            num_ops: i64::from(num_ops),
            magnitude: i64::from(magnitude),
            num_magnitude_bins: i64::from(bins),
            interpolation: Interpolation::Bilinear,
            fill: Some(Fill::PerChannel(vec![10.0, 200.9, 300.0])),
            api,
        },
        draw: Box::new(move |w, h, rng| policy.draw(w, h, rng).as_slice().to_vec()),
        interpolation: Interpolation::Bilinear,
        fill: [10, 200, 255],
    }
}

fn auto_augment(policy: AutoAugmentPolicy, api: Api) -> Case {
    let draws = AutoAugment::new(policy).with_api(api);
    Case {
        spec: OpSpec::AutoAugment {
            policy,
            interpolation: Interpolation::Nearest,
            fill: Some(Fill::Number(128.0)),
            api,
        },
        draw: Box::new(move |w, h, rng| draws.draw(w, h, rng).as_slice().to_vec()),
        interpolation: Interpolation::Nearest,
        fill: [128; 3],
    }
}

fn cases() -> Vec<Case> {
    vec![
        trivial(Api::V1, Interpolation::Nearest, None, [0; 3]),
        trivial(
            Api::V2,
            Interpolation::Bilinear,
            Some(Fill::PerChannel(vec![77.0])),
            [77; 3],
        ),
        trivial(
            Api::V1,
            Interpolation::Bicubic,
            Some(Fill::PerChannel(vec![1.0, 2.0, 3.0])),
            [1, 2, 3],
        ),
        trivial(Api::V2, Interpolation::Bicubic, None, [0; 3]),
        rand_augment(2, 9, 31, Api::V1),
        rand_augment(3, 20, 25, Api::V2),
        auto_augment(AutoAugmentPolicy::ImageNet, Api::V1),
        auto_augment(AutoAugmentPolicy::Cifar10, Api::V1),
        auto_augment(AutoAugmentPolicy::Svhn, Api::V2),
    ]
}

/// The reference sample of `[RandomResizedCrop, flip(0.5), policy, ToTensor, Normalize]` and
/// the ops the policy drew.
fn reference(case: &Case, bytes: &[u8], index: u64) -> (Vec<f32>, Vec<PixelOp>) {
    let mut rng = sample_rng(SEED, 0, index);
    let mut img = stage_image(bytes, &mut rng);
    let ops = (case.draw)(SIZE, SIZE, &mut rng);
    for &op in &ops {
        img = apply_by_hand(op, &img, case.interpolation, case.fill);
    }
    (to_normalized(&img), ops)
}

// ---------------------------------------------------------------- tests

#[test]
fn each_policy_equals_the_stages_then_the_kernels_with_its_draws() {
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
                let (want, ops) = reference(&case, bytes, index);
                kinds.extend(ops.iter().map(PixelOp::kind));
                let spec = &case.spec;
                assert!(
                    bits(&run_f32(&staged, bytes, index)) == bits(&want),
                    "{spec:?} on {name} #{index} ({ops:?}): staged differs from the reference"
                );
                assert!(
                    bits(&run_f32(&op_by_op, bytes, index)) == bits(&want),
                    "{spec:?} on {name} #{index} ({ops:?}): op-by-op differs from the reference"
                );
            }
        }
        // TrivialAugmentWide and RandAugment draw from 14 ops: all of them ran somewhere.
        if !matches!(case.spec, OpSpec::AutoAugment { .. }) {
            assert_eq!(kinds.len(), 14, "{:?}: only {kinds:?} drawn", case.spec);
        } else {
            assert!(kinds.len() >= 8, "{:?}: only {kinds:?} drawn", case.spec);
        }
    }
}

#[test]
fn warps_use_the_interpolation_and_the_fill() {
    // The same sample with the fill changed differs exactly where a warp uncovered pixels: a
    // sample whose draw is a translation shows the fill along an edge.
    let (_, bytes) = corpus().into_iter().next().expect("corpus");
    let spec = |fill: f64| OpSpec::RandAugment {
        num_ops: 1,
        magnitude: 30,
        num_magnitude_bins: 31,
        interpolation: Interpolation::Nearest,
        fill: Some(Fill::Number(fill)),
        api: Api::V1,
    };
    let translate = (0..200)
        .find(|&index| {
            let mut rng = sample_rng(SEED, 0, index);
            let _ = stage_image(&bytes, &mut rng);
            let ops = RandAugment::new(1, 30, 31)
                .expect("policy")
                .draw(SIZE, SIZE, &mut rng);
            matches!(ops.as_slice(), [PixelOp::TranslateX { .. }])
        })
        .expect("a sample draws TranslateX");
    let black = run_f32(
        &Pipeline::new(PipelineSpec::new(train_with(vec![spec(0.0)]))).expect("plans"),
        &bytes,
        translate,
    );
    let white = run_f32(
        &Pipeline::new(PipelineSpec::new(train_with(vec![spec(255.0)]))).expect("plans"),
        &bytes,
        translate,
    );
    let differing = black.iter().zip(&white).filter(|(a, b)| a != b).count();
    // 150/331 of the side, 21 of 48 columns, in 3 channels.
    assert_eq!(differing, 3 * 21 * SIZE as usize);
}

#[test]
fn each_policy_has_its_span_and_each_chosen_op_a_nested_named_one() {
    let (_, bytes) = corpus().into_iter().next().expect("corpus");
    for case in cases() {
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
                let (_, ops) = reference(&case, &bytes, index);
                let space = match case.spec {
                    OpSpec::TrivialAugmentWide { .. } => AugmentationSpace::TrivialAugmentWide,
                    OpSpec::RandAugment { .. } => AugmentationSpace::RandAugment,
                    _ => AugmentationSpace::AutoAugment,
                };
                let policy = space.policy_name().to_string();
                let mut want = vec![(true, policy.clone())];
                for op in &ops {
                    let name = format!("{policy}/{}", op.kind().name());
                    want.extend([(true, name.clone()), (false, name)]);
                }
                want.push((false, policy.clone()));
                let start = obs
                    .0
                    .iter()
                    .position(|s| *s == (true, policy.clone()))
                    .expect("policy span");
                assert_eq!(
                    obs.0[start..start + want.len()],
                    want[..],
                    "{execution:?} #{index}"
                );
            }
        }
    }
    assert_eq!(
        AugmentationSpace::RandAugment.span_name(OpKind::Rotate),
        "RandAugment/Rotate"
    );
}

#[test]
fn staged_policies_allocate_nothing_once_warm() {
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

#[test]
fn invalid_policies_are_refused_naming_op_and_argument() {
    let ta = |bins: i64, fill: Option<Fill>| OpSpec::TrivialAugmentWide {
        num_magnitude_bins: bins,
        interpolation: Interpolation::Nearest,
        fill,
        api: Api::V1,
    };
    let ra = |num_ops: i64, magnitude: i64, bins: i64| OpSpec::RandAugment {
        num_ops,
        magnitude,
        num_magnitude_bins: bins,
        interpolation: Interpolation::Nearest,
        fill: None,
        api: Api::V1,
    };
    let cases: Vec<(OpSpec, &str, &str)> = vec![
        (ta(1, None), "TrivialAugmentWide", "num_magnitude_bins"),
        (ta(-3, None), "TrivialAugmentWide", "num_magnitude_bins"),
        (
            ta(31, Some(Fill::PerChannel(vec![1.0, 2.0]))),
            "TrivialAugmentWide",
            "fill",
        ),
        (
            ta(31, Some(Fill::Number(f64::NAN))),
            "TrivialAugmentWide",
            "fill",
        ),
        (ra(17, 9, 31), "RandAugment", "num_ops"),
        (ra(-1, 9, 31), "RandAugment", "num_ops"),
        (ra(2, 31, 31), "RandAugment", "magnitude"),
        (ra(2, -1, 31), "RandAugment", "magnitude"),
        (ra(2, 0, 1), "RandAugment", "num_magnitude_bins"),
        (
            OpSpec::AutoAugment {
                policy: AutoAugmentPolicy::Svhn,
                interpolation: Interpolation::Bilinear,
                fill: Some(Fill::PerChannel(vec![])),
                api: Api::V2,
            },
            "AutoAugment",
            "fill",
        ),
    ];
    for (op, name, arg) in cases {
        let msg = plan_error(op.clone());
        assert!(
            msg.contains(name) && msg.contains(arg),
            "{op:?}: {msg} should name {name} and {arg}"
        );
    }
    // AugMix plans now (with torch's tensor kernels): tests/augmix_pipeline.rs.
    let augmix: OpSpec = serde_json::from_str(r#"{"op": "AugMix"}"#).expect("parses");
    assert!(Pipeline::new(PipelineSpec::new(train_with(vec![augmix]))).is_ok());
    // But not with BICUBIC, which torchvision's tensor kernels refuse (its message kept).
    let bicubic: OpSpec =
        serde_json::from_str(r#"{"op": "AugMix", "interpolation": "bicubic"}"#).expect("parses");
    let msg = plan_error(bicubic);
    assert!(
        msg.contains("AugMix")
            && msg.contains("interpolation")
            && msg.contains("Interpolation mode 'bicubic' is unsupported with Tensor input"),
        "{msg}"
    );
}

#[test]
fn policy_specs_parse_with_torchvision_names_and_defaults() {
    let parse = |json: &str| serde_json::from_str::<OpSpec>(json).expect(json);
    assert_eq!(
        parse(r#"{"op": "TrivialAugmentWide"}"#),
        OpSpec::TrivialAugmentWide {
            num_magnitude_bins: 31,
            interpolation: Interpolation::Nearest,
            fill: None,
            api: Api::V1,
        }
    );
    assert_eq!(
        parse(r#"{"op": "RandAugment"}"#),
        OpSpec::RandAugment {
            num_ops: 2,
            magnitude: 9,
            num_magnitude_bins: 31,
            interpolation: Interpolation::Nearest,
            fill: None,
            api: Api::V1,
        }
    );
    assert_eq!(
        parse(r#"{"op": "AutoAugment"}"#),
        OpSpec::AutoAugment {
            policy: AutoAugmentPolicy::ImageNet,
            interpolation: Interpolation::Nearest,
            fill: None,
            api: Api::V1,
        }
    );
    assert_eq!(
        parse(r#"{"op": "AugMix"}"#),
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
    let svhn = parse(
        r#"{"op": "AutoAugment", "policy": "svhn", "interpolation": "bilinear",
            "fill": [1, 2, 3], "api": "v2"}"#,
    );
    assert_eq!(
        svhn,
        OpSpec::AutoAugment {
            policy: AutoAugmentPolicy::Svhn,
            interpolation: Interpolation::Bilinear,
            fill: Some(Fill::PerChannel(vec![1.0, 2.0, 3.0])),
            api: Api::V2,
        }
    );
    assert_eq!(
        parse(r#"{"op": "RandAugment", "fill": 7}"#),
        OpSpec::RandAugment {
            num_ops: 2,
            magnitude: 9,
            num_magnitude_bins: 31,
            interpolation: Interpolation::Nearest,
            fill: Some(Fill::Number(7.0)),
            api: Api::V1,
        }
    );
    let cifar = parse(r#"{"op": "AutoAugment", "policy": "cifar10"}"#);
    let round: OpSpec =
        serde_json::from_str(&serde_json::to_string(&cifar).expect("serializes")).expect("parses");
    assert_eq!(round, cifar);
    for bad in [
        r#"{"op": "TrivialAugmentWide", "interpolation": "lanczos"}"#,
        r#"{"op": "AutoAugment", "policy": "IMAGENET"}"#,
        r#"{"op": "RandAugment", "api": "v3"}"#,
        r#"{"op": "RandAugment", "magnitudes": 9}"#,
    ] {
        assert!(serde_json::from_str::<OpSpec>(bad).is_err(), "{bad} parsed");
    }
}
