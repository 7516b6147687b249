//! Random compositions, `RandomErasing` and timm's (`TimmRandomErasing`, each mode, one block
//! and 1 to 3), v2's `GaussianNoise` (after and before `Normalize`), `RandomChannelPermutation`,
//! `RandomPhotometricDistort` and `Identity` + `RGB` in the pipeline, single thread: one 500x375 JPEG,
//! `CenterCrop(224)`, the op, `ToTensor`, `Normalize`, so every op sees a 224x224 sample. The
//! `baseline` (no op: the single fused pass) runs in the same group; an op's cost is its time
//! minus the baseline's. Compare within one run, not across runs.
//!
//! `standard_normals` times `fill_standard_normal` alone on one image's 150528 values: the
//! sample generator's fast Box-Muller, the scalar libm path it replaced, and what the PCG's own
//! draws would cost the fast path (75264, one per pair, without the transform), which is why it
//! hashes a counter instead.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use ferroloader::transforms::fused::OutputSlot;
use ferroloader::transforms::rng::{fill_standard_normal_scalar, sample_rng, TorchDraws};
use ferroloader::transforms::spec::{
    EraseFill, Execution, OpSpec, Pipeline, PipelineSpec, Size, TimmEraseModeSpec, IMAGENET_MEAN,
    IMAGENET_STD,
};

#[path = "../tests/support/fixtures.rs"]
mod fixtures;

fn pipeline(middle: Vec<OpSpec>, tail: Vec<OpSpec>) -> Pipeline {
    let mut ops = vec![OpSpec::CenterCrop {
        size: Size::Int(224),
    }];
    ops.extend(middle);
    ops.extend([
        OpSpec::ToTensor,
        OpSpec::Normalize {
            mean: IMAGENET_MEAN,
            std: IMAGENET_STD,
        },
    ]);
    ops.extend(tail);
    Pipeline::new(PipelineSpec::new(ops).execution(Execution::Fused)).expect("valid spec")
}

fn erasing(value: EraseFill) -> OpSpec {
    OpSpec::RandomErasing {
        p: 1.0,
        scale: [0.02, 0.33],
        ratio: [0.3, 3.3],
        value,
        inplace: false,
    }
}

/// timm's `RandomErasing(probability=1, mode=mode, max_count=max_count)`, its other arguments
/// `create_transform`'s.
fn timm_erasing(mode: TimmEraseModeSpec, max_count: i64) -> OpSpec {
    OpSpec::TimmRandomErasing {
        probability: 1.0,
        min_area: 0.02,
        max_area: 1.0 / 3.0,
        min_aspect: 0.3,
        max_aspect: None,
        mode,
        min_count: 1,
        max_count: Some(max_count),
    }
}

/// v2's `GaussianNoise()` with its defaults.
fn noise() -> OpSpec {
    OpSpec::GaussianNoise {
        mean: 0.0,
        sigma: 0.1,
        clip: true,
    }
}

/// v2's `RandomPhotometricDistort(p=p)` with its default ranges.
fn distort(p: f64) -> OpSpec {
    OpSpec::RandomPhotometricDistort {
        brightness: [0.875, 1.125],
        contrast: [0.5, 1.5],
        saturation: [0.5, 1.5],
        hue: [-0.05, 0.05],
        p,
    }
}

fn bench_choice(c: &mut Criterion) {
    let bytes = fixtures::read_fixture("decode", "jpeg_imagenet_like.jpg");
    let invert = OpSpec::RandomInvert { p: 1.0 };
    let equalize = OpSpec::RandomEqualize { p: 1.0 };
    let variants: Vec<(&str, Pipeline)> = vec![
        ("baseline", pipeline(vec![], vec![])),
        ("invert_alone", pipeline(vec![invert.clone()], vec![])),
        (
            "random_apply_invert_p1",
            pipeline(
                vec![OpSpec::RandomApply {
                    transforms: vec![invert.clone()],
                    p: 1.0,
                }],
                vec![],
            ),
        ),
        (
            "random_choice_invert_equalize",
            pipeline(
                vec![OpSpec::RandomChoice {
                    transforms: vec![invert.clone(), equalize.clone()],
                    p: None,
                }],
                vec![],
            ),
        ),
        (
            "random_order_invert_equalize",
            pipeline(
                vec![OpSpec::RandomOrder {
                    transforms: vec![invert, equalize],
                }],
                vec![],
            ),
        ),
        (
            "random_erasing_zero_p1",
            pipeline(vec![], vec![erasing(EraseFill::Number(0.0))]),
        ),
        (
            "random_erasing_random_p1",
            pipeline(vec![], vec![erasing(EraseFill::Word("random".into()))]),
        ),
        (
            "timm_erasing_const_p1",
            pipeline(vec![], vec![timm_erasing(TimmEraseModeSpec::Const, 1)]),
        ),
        (
            "timm_erasing_rand_p1",
            pipeline(vec![], vec![timm_erasing(TimmEraseModeSpec::Rand, 1)]),
        ),
        (
            "timm_erasing_pixel_p1",
            pipeline(vec![], vec![timm_erasing(TimmEraseModeSpec::Pixel, 1)]),
        ),
        (
            "timm_erasing_pixel_p1_count3",
            pipeline(vec![], vec![timm_erasing(TimmEraseModeSpec::Pixel, 3)]),
        ),
        // v2's GaussianNoise after Normalize, and before it (the slot normalized after it).
        ("gaussian_noise", pipeline(vec![], vec![noise()])),
        (
            "gaussian_noise_before_normalize",
            Pipeline::new(
                PipelineSpec::new(vec![
                    OpSpec::CenterCrop {
                        size: Size::Int(224),
                    },
                    OpSpec::ToTensor,
                    noise(),
                    OpSpec::Normalize {
                        mean: IMAGENET_MEAN,
                        std: IMAGENET_STD,
                    },
                ])
                .execution(Execution::Fused),
            )
            .expect("valid spec"),
        ),
        // v2's RandomChannelPermutation (staged), and Identity + RGB (nothing: the baseline).
        (
            "channel_permutation",
            pipeline(vec![OpSpec::RandomChannelPermutation], vec![]),
        ),
        // v2's RandomPhotometricDistort with its ranges, every step on (p = 1) and at p = 0.5.
        (
            "photometric_distort_p1",
            pipeline(vec![distort(1.0)], vec![]),
        ),
        (
            "photometric_distort_p05",
            pipeline(vec![distort(0.5)], vec![]),
        ),
        (
            "identity_rgb",
            pipeline(
                vec![OpSpec::Compose { transforms: vec![] }, OpSpec::Rgb],
                vec![],
            ),
        ),
    ];
    let mut g = c.benchmark_group("augment_choice");
    for (name, pipeline) in &variants {
        let mut ctx = pipeline.new_context().expect("ctx");
        let mut slot = vec![0f32; pipeline.sample_len()];
        let mut index = 0u64;
        g.bench_function(*name, |b| {
            b.iter(|| {
                index += 1;
                pipeline
                    .run(
                        black_box(&bytes),
                        &mut sample_rng(0, 0, index),
                        &mut ctx,
                        OutputSlot::F32(&mut slot),
                        &mut (),
                    )
                    .expect("runs");
            })
        });
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

fn bench_standard_normals(c: &mut Criterion) {
    let mut values = vec![0f32; 3 * 224 * 224];
    let mut g = c.benchmark_group("standard_normals");
    let mut rng = sample_rng(0, 0, 0);
    g.bench_function("fast_150528", |b| {
        b.iter(|| rng.fill_standard_normal(black_box(&mut values)))
    });
    g.bench_function("scalar_libm_150528", |b| {
        b.iter(|| fill_standard_normal_scalar(&mut rng, black_box(&mut values)))
    });
    // One draw per pair: what the fast path spends in the generator.
    g.bench_function("generator_only_75264_draws", |b| {
        b.iter(|| {
            let mut acc = 0f32;
            for _ in 0..values.len() / 2 {
                acc += rng.uniform_f32(0.0, 1.0);
            }
            black_box(acc)
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_choice, bench_standard_normals
}
criterion_main!(benches);
