//! The geometric stage ops in a planned pipeline, one sample per iteration, single thread:
//! `CenterCrop(224)` of a 500x375 JPEG of the corpus, then the op, then `ToTensor`, against the
//! same pipeline without the op (the decode and conversion every variant pays). An op's cost is
//! its median minus the baseline's; compare within one run, not across machines.
//!
//! Also `RandomCrop(224, padding=4)` as the first op (padded window into the staging image)
//! against `CenterCrop(224)` first (a plain crop in the fused pass); and timm's keep-ratio
//! geometries (`create_transform`'s `rkrc`, `rkrr` and `border` pipelines, to a 224x224 float
//! sample, normalized) against torchvision's `Resize(256), CenterCrop(224)`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use ferroloader::transforms::fused::OutputSlot;
use ferroloader::transforms::rng::sample_rng;
use ferroloader::transforms::spec::{
    Fill, KernelSize, NumberOrRange, OpSpec, PadMode, PaddingArg, Pipeline, PipelineSpec, Shear,
    Size, WarpInterpolation, IMAGENET_MEAN, IMAGENET_STD,
};

#[path = "../tests/support/fixtures.rs"]
mod fixtures;

const SIZE: u32 = 224;

fn center_crop() -> OpSpec {
    OpSpec::CenterCrop {
        size: Size::Int(SIZE),
    }
}

fn random_crop(size: u32, padding: Option<i64>) -> OpSpec {
    OpSpec::RandomCrop {
        size: Size::Int(size),
        padding: padding.map(PaddingArg::Int),
        pad_if_needed: false,
        fill: Fill::Number(0.0),
        padding_mode: PadMode::Constant,
    }
}

fn ops() -> Vec<(&'static str, Option<OpSpec>)> {
    vec![
        ("baseline", None),
        (
            "RandomVerticalFlip",
            Some(OpSpec::RandomVerticalFlip { p: 1.0 }),
        ),
        (
            "RandomRotation_nearest",
            Some(OpSpec::RandomRotation {
                degrees: NumberOrRange::Number(30.0),
                interpolation: WarpInterpolation::Nearest,
                expand: false,
                center: None,
                fill: Fill::Number(0.0),
            }),
        ),
        (
            "RandomRotation_bilinear",
            Some(OpSpec::RandomRotation {
                degrees: NumberOrRange::Number(30.0),
                interpolation: WarpInterpolation::Bilinear,
                expand: false,
                center: None,
                fill: Fill::Number(0.0),
            }),
        ),
        (
            "RandomAffine",
            Some(OpSpec::RandomAffine {
                degrees: NumberOrRange::Number(15.0),
                translate: Some([0.1, 0.1]),
                scale: Some([0.9, 1.1]),
                shear: Some(Shear::Number(5.0)),
                interpolation: WarpInterpolation::Nearest,
                fill: Fill::Number(0.0),
                center: None,
            }),
        ),
        (
            "GaussianBlur_k23",
            Some(OpSpec::GaussianBlur {
                kernel_size: KernelSize::Int(23),
                sigma: NumberOrRange::Range([0.1, 2.0]),
            }),
        ),
        (
            "Pad_4_reflect",
            Some(OpSpec::Pad {
                padding: PaddingArg::Int(4),
                fill: Fill::Number(0.0),
                padding_mode: PadMode::Reflect,
            }),
        ),
        ("RandomCrop_200", Some(random_crop(200, Some(4)))),
        (
            "CenterCrop_200",
            Some(OpSpec::CenterCrop {
                size: Size::Int(200),
            }),
        ),
    ]
}

fn run(c: &mut Criterion, group: &str, name: &str, ops: Vec<OpSpec>, bytes: &[u8]) {
    let pipeline = Pipeline::new(PipelineSpec::new(ops)).expect("plans");
    let mut ctx = pipeline.new_context().expect("context");
    let mut out = vec![0f32; pipeline.sample_len()];
    let mut index = 0u64;
    c.benchmark_group(group).bench_function(name, |b| {
        b.iter(|| {
            index += 1;
            pipeline
                .run(
                    black_box(bytes),
                    &mut sample_rng(1, 0, index),
                    &mut ctx,
                    OutputSlot::F32(&mut out),
                    &mut (),
                )
                .expect("runs");
            black_box(&out);
        })
    });
}

fn bench(c: &mut Criterion) {
    let dir = fixtures::fixture_dir("decode", "make fixtures");
    let bytes = std::fs::read(dir.join("jpeg_imagenet_like.jpg")).expect("fixture");
    for (name, op) in ops() {
        let mut spec = vec![center_crop()];
        spec.extend(op);
        spec.push(OpSpec::ToTensor);
        run(c, "geometric_stage_224", name, spec, &bytes);
    }
    for (name, first) in [
        ("CenterCrop_first", center_crop()),
        ("RandomCrop_first_padding4", random_crop(SIZE, Some(4))),
        ("RandomCrop_first_plain", random_crop(SIZE, None)),
    ] {
        run(
            c,
            "geometric_first_224",
            name,
            vec![first, OpSpec::ToTensor],
            &bytes,
        );
    }
}

/// `create_transform(224, ...)`'s geometries as specs, then `ToTensor`, `Normalize`: the
/// torchvision eval baseline, `train_crop_mode="rkrc"`/`"rkrr"` (interpolation `"random"`,
/// timm's scale and ratio defaults for them) and `crop_mode="border"` (256 for 224, the mean fill).
fn keep_ratio_pipelines() -> Vec<(&'static str, Vec<OpSpec>)> {
    let parse = |v: serde_json::Value| -> OpSpec { serde_json::from_value(v).expect("an op") };
    let rkr = || {
        parse(
            serde_json::json!({"op": "ResizeKeepRatio", "size": [224, 224],
            "interpolation": "random", "random_scale_prob": 0.5, "random_scale_range": [0.8, 1.0],
            "random_scale_area": true, "random_aspect_prob": 0.5,
            "random_aspect_range": [0.9, 1.0 / 0.9]}),
        )
    };
    let tail = || {
        vec![
            OpSpec::ToTensor,
            OpSpec::Normalize {
                mean: IMAGENET_MEAN,
                std: IMAGENET_STD,
            },
        ]
    };
    let with_tail = |mut ops: Vec<OpSpec>| {
        ops.extend(tail());
        ops
    };
    vec![
        (
            "Resize256_CenterCrop224",
            with_tail(vec![
                parse(serde_json::json!({"op": "Resize", "size": 256})),
                center_crop(),
            ]),
        ),
        (
            "rkrc",
            with_tail(vec![
                rkr(),
                parse(serde_json::json!({"op": "CenterCropOrPad", "size": 224,
                    "padding_mode": "reflect"})),
                OpSpec::RandomHorizontalFlip { p: 0.5 },
            ]),
        ),
        (
            "rkrr",
            with_tail(vec![
                rkr(),
                parse(serde_json::json!({"op": "RandomCropOrPad", "size": 224,
                    "padding_mode": "reflect"})),
                OpSpec::RandomHorizontalFlip { p: 0.5 },
            ]),
        ),
        (
            "border",
            with_tail(vec![
                parse(
                    serde_json::json!({"op": "ResizeKeepRatio", "size": [256, 256],
                    "longest": 1.0}),
                ),
                parse(serde_json::json!({"op": "CenterCropOrPad", "size": 224,
                    "fill": [124, 116, 104]})),
            ]),
        ),
    ]
}

fn bench_keep_ratio(c: &mut Criterion) {
    let dir = fixtures::fixture_dir("decode", "make fixtures");
    let bytes = std::fs::read(dir.join("jpeg_imagenet_like.jpg")).expect("fixture");
    for (name, ops) in keep_ratio_pipelines() {
        run(c, "timm_keep_ratio_224", name, ops, &bytes);
    }
}

criterion_group!(benches, bench, bench_keep_ratio);
criterion_main!(benches);
