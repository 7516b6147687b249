//! The augmentation policies in the pipeline: `CenterCrop(224)`, the policy, `ToTensor` on the
//! decode corpus' ImageNet-like JPEG (500x375, `make fixtures`), single thread. Only the time
//! inside the policy's span counts (its draws and the chosen ops on the 224x224 staging image,
//! measured through the pipeline's observer), so the decode around it adds no noise. Each
//! iteration runs `SAMPLES` sample indices, so the draws spread over the policy's ops.
//!
//! `timm_rand_augment_m9_mstd05_inc1` is timm's `RandAugment` as
//! `create_transform(224, auto_augment="rand-m9-mstd0.5-inc1", interpolation="bicubic")`
//! builds it (the DeiT/ViT recipes'), in its own `TimmRandAugment` span;
//! `timm_auto_augment_original` timm's `AutoAugment` (`auto_augment="original"`), and
//! `timm_augmix_m3_w3` / `timm_augmix_m3_w3_b1` timm's `AugMixAugment` (`"augmix-m3-w3"`, basic
//! and blended mixing), each in its own span. `timm_auto_augment_3a` is DeiT III's 3-Augment
//! (`auto_augment="3a"`: one of Solarize, Desaturate, GaussianBlurRand per sample) and
//! `timm_gaussian_blur_rand_m10` its Pillow GaussianBlur alone (radius uniform in [0.1, 2]).
//!
//! Compare ratios within one run, not absolute times (shared 2-core machines).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferroloader::transforms::augment::geometry::Interpolation;
use ferroloader::transforms::augment::policy::{Api, AutoAugmentPolicy};
use ferroloader::transforms::fused::OutputSlot;
use ferroloader::transforms::rng::sample_rng;
use ferroloader::transforms::spec::{Op, OpObserver, OpSpec, Pipeline, PipelineSpec, Size};

#[path = "../tests/support/fixtures.rs"]
mod fixtures;

const SAMPLES: u64 = 32;

fn pipeline(policy: Option<OpSpec>) -> Pipeline {
    let mut ops = vec![OpSpec::CenterCrop {
        size: Size::Int(224),
    }];
    ops.extend(policy);
    ops.push(OpSpec::ToTensor);
    Pipeline::new(PipelineSpec::new(ops)).expect("valid spec")
}

/// Sums the time spent inside spans of `op`.
struct SpanTimer {
    op: Op,
    started: Option<Instant>,
    total: Duration,
}

impl OpObserver for SpanTimer {
    fn enter(&mut self, op: Op) {
        if op == self.op {
            self.started = Some(Instant::now());
        }
    }
    fn exit(&mut self, op: Op) {
        if op == self.op {
            if let Some(start) = self.started.take() {
                self.total += start.elapsed();
            }
        }
    }
}

/// timm's `rand-m9-mstd0.5-inc1` with create_transform(224)'s hparams and BICUBIC warps.
fn timm_recipe() -> OpSpec {
    let names = [
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
    let ops: Vec<serde_json::Value> = names
        .iter()
        .map(|name| {
            serde_json::json!({
                "name": name, "prob": 0.5, "magnitude": 9, "magnitude_std": 0.5,
                "translate_const": 100, "fill": [124, 116, 104], "interpolation": "bicubic",
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({"op": "TimmRandAugment", "ops": ops}))
        .expect("a TimmRandAugment spec")
}

/// timm's `AutoAugment("original")` as `create_transform(224, auto_augment="original",
/// interpolation="bicubic")` builds it.
fn timm_auto_original() -> OpSpec {
    let policy = [
        [("PosterizeOriginal", 0.4, 8), ("Rotate", 0.6, 9)],
        [("Solarize", 0.6, 5), ("AutoContrast", 0.6, 5)],
        [("Equalize", 0.8, 8), ("Equalize", 0.6, 3)],
        [("PosterizeOriginal", 0.6, 7), ("PosterizeOriginal", 0.6, 6)],
        [("Equalize", 0.4, 7), ("Solarize", 0.2, 4)],
        [("Equalize", 0.4, 4), ("Rotate", 0.8, 8)],
        [("Solarize", 0.6, 3), ("Equalize", 0.6, 7)],
        [("PosterizeOriginal", 0.8, 5), ("Equalize", 1.0, 2)],
        [("Rotate", 0.2, 3), ("Solarize", 0.6, 8)],
        [("Equalize", 0.6, 8), ("PosterizeOriginal", 0.4, 6)],
        [("Rotate", 0.8, 8), ("Color", 0.4, 0)],
        [("Rotate", 0.4, 9), ("Equalize", 0.6, 2)],
        [("Equalize", 0.0, 7), ("Equalize", 0.8, 8)],
        [("Invert", 0.6, 4), ("Equalize", 1.0, 8)],
        [("Color", 0.6, 4), ("Contrast", 1.0, 8)],
        [("Rotate", 0.8, 8), ("Color", 1.0, 2)],
        [("Color", 0.8, 8), ("Solarize", 0.8, 7)],
        [("Sharpness", 0.4, 7), ("Invert", 0.6, 8)],
        [("ShearX", 0.6, 5), ("Equalize", 1.0, 9)],
        [("Color", 0.4, 0), ("Equalize", 0.6, 3)],
        [("Equalize", 0.4, 7), ("Solarize", 0.2, 4)],
        [("Solarize", 0.6, 5), ("AutoContrast", 0.6, 5)],
        [("Invert", 0.6, 4), ("Equalize", 1.0, 8)],
        [("Color", 0.6, 4), ("Contrast", 1.0, 8)],
        [("Equalize", 0.8, 8), ("Equalize", 0.6, 3)],
    ];
    let policy: Vec<Vec<serde_json::Value>> = policy
        .iter()
        .map(|sub| {
            sub.iter()
                .map(|(name, prob, magnitude)| {
                    serde_json::json!({
                        "name": name, "prob": prob, "magnitude": magnitude,
                        "translate_const": 100, "fill": [124, 116, 104],
                        "interpolation": "bicubic",
                    })
                })
                .collect()
        })
        .collect();
    serde_json::from_value(serde_json::json!({"op": "TimmAutoAugment", "policy": policy}))
        .expect("a TimmAutoAugment spec")
}

/// A `TimmAutoAugment` of one-op sub-policies `(name, prob, magnitude)` with
/// `create_transform(224)`'s hparams.
fn timm_auto(policy: &[(&str, f64, u32)]) -> OpSpec {
    let policy: Vec<Vec<serde_json::Value>> = policy
        .iter()
        .map(|(name, prob, magnitude)| {
            vec![serde_json::json!({
                "name": name, "prob": prob, "magnitude": magnitude,
                "translate_const": 100, "fill": [124, 116, 104],
                "interpolation": "bicubic",
            })]
        })
        .collect();
    serde_json::from_value(serde_json::json!({"op": "TimmAutoAugment", "policy": policy}))
        .expect("a TimmAutoAugment spec")
}

/// timm's `AugMixAugment` as `create_transform(224, auto_augment="augmix-m3-w3",
/// interpolation="bilinear")` builds it (`blended`: `"augmix-m3-w3-b1"`).
fn timm_augmix(blended: bool) -> OpSpec {
    let names = [
        "AutoContrast",
        "ColorIncreasing",
        "ContrastIncreasing",
        "BrightnessIncreasing",
        "SharpnessIncreasing",
        "Equalize",
        "Rotate",
        "PosterizeIncreasing",
        "SolarizeIncreasing",
        "ShearX",
        "ShearY",
        "TranslateXRel",
        "TranslateYRel",
    ];
    let ops: Vec<serde_json::Value> = names
        .iter()
        .map(|name| {
            serde_json::json!({
                "name": name, "prob": 1.0, "magnitude": 3, "magnitude_std": "inf",
                "translate_const": 100, "translate_pct": 0.3, "fill": [124, 116, 104],
                "interpolation": "bilinear",
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "op": "TimmAugMix", "ops": ops, "alpha": 1.0, "width": 3, "depth": -1,
        "blended": blended,
    }))
    .expect("a TimmAugMix spec")
}

fn bench_policies(c: &mut Criterion) {
    let dir = fixtures::fixture_dir("decode", "make fixtures");
    let bytes = std::fs::read(dir.join("jpeg_imagenet_like.jpg")).expect("corpus JPEG");
    let mut g = c.benchmark_group("augment_policy");
    g.throughput(Throughput::Elements(SAMPLES));
    let variants = [
        (
            "trivial_augment_wide",
            Op::TrivialAugmentWide,
            Some(OpSpec::TrivialAugmentWide {
                num_magnitude_bins: 31,
                interpolation: Interpolation::Nearest,
                fill: None,
                api: Api::V1,
            }),
        ),
        (
            "rand_augment_2_9",
            Op::RandAugment,
            Some(OpSpec::RandAugment {
                num_ops: 2,
                magnitude: 9,
                num_magnitude_bins: 31,
                interpolation: Interpolation::Nearest,
                fill: None,
                api: Api::V1,
            }),
        ),
        (
            "rand_augment_2_9_bilinear",
            Op::RandAugment,
            Some(OpSpec::RandAugment {
                num_ops: 2,
                magnitude: 9,
                num_magnitude_bins: 31,
                interpolation: Interpolation::Bilinear,
                fill: None,
                api: Api::V1,
            }),
        ),
        (
            "auto_augment_imagenet",
            Op::AutoAugment,
            Some(OpSpec::AutoAugment {
                policy: AutoAugmentPolicy::ImageNet,
                interpolation: Interpolation::Nearest,
                fill: None,
                api: Api::V1,
            }),
        ),
        (
            "timm_rand_augment_m9_mstd05_inc1",
            Op::TimmRandAugment,
            Some(timm_recipe()),
        ),
        (
            "timm_auto_augment_original",
            Op::TimmAutoAugment,
            Some(timm_auto_original()),
        ),
        (
            "timm_auto_augment_3a",
            Op::TimmAutoAugment,
            Some(timm_auto(&[
                ("Solarize", 1.0, 5),
                ("Desaturate", 1.0, 10),
                ("GaussianBlurRand", 1.0, 10),
            ])),
        ),
        (
            "timm_gaussian_blur_rand_m10",
            Op::TimmAutoAugment,
            Some(timm_auto(&[("GaussianBlurRand", 1.0, 10)])),
        ),
        (
            "timm_augmix_m3_w3",
            Op::TimmAugMix,
            Some(timm_augmix(false)),
        ),
        (
            "timm_augmix_m3_w3_b1",
            Op::TimmAugMix,
            Some(timm_augmix(true)),
        ),
    ];
    for (name, span, policy) in variants {
        let pipeline = pipeline(policy);
        let mut ctx = pipeline.new_context().expect("ctx");
        let mut slot = vec![0f32; pipeline.sample_len()];
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut timer = SpanTimer {
                    op: span,
                    started: None,
                    total: Duration::ZERO,
                };
                for _ in 0..iters {
                    for index in 0..SAMPLES {
                        pipeline
                            .run(
                                black_box(&bytes),
                                &mut sample_rng(0, 0, index),
                                &mut ctx,
                                OutputSlot::F32(&mut slot),
                                &mut timer,
                            )
                            .expect("runs");
                    }
                }
                timer.total
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    targets = bench_policies
}
criterion_main!(benches);
