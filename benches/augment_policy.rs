//! The augmentation policies in the pipeline: `CenterCrop(224)`, the policy, `ToTensor` on the
//! decode corpus' ImageNet-like JPEG (500x375, `make fixtures`), single thread, against the
//! same pipeline without a policy (the floor: decode, crop, conversion). Each iteration runs
//! `SAMPLES` sample indices, so the policy's draws spread over its ops; the policy's cost per
//! sample is (its median - the floor's) / `SAMPLES`.
//!
//! Compare ratios within one run, not absolute times (shared 2-core machines).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferroloader::transforms::augment::geometry::Interpolation;
use ferroloader::transforms::augment::policy::{Api, AutoAugmentPolicy};
use ferroloader::transforms::fused::OutputSlot;
use ferroloader::transforms::rng::sample_rng;
use ferroloader::transforms::spec::{OpSpec, Pipeline, PipelineSpec, Size};

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

fn bench_policies(c: &mut Criterion) {
    let dir = fixtures::fixture_dir("decode", "make fixtures");
    let bytes = std::fs::read(dir.join("jpeg_imagenet_like.jpg")).expect("corpus JPEG");
    let mut g = c.benchmark_group("augment_policy");
    g.throughput(Throughput::Elements(SAMPLES));
    let variants = [
        ("floor_no_policy", None),
        (
            "trivial_augment_wide",
            Some(OpSpec::TrivialAugmentWide {
                num_magnitude_bins: 31,
                interpolation: Interpolation::Nearest,
                fill: None,
                api: Api::V1,
            }),
        ),
        (
            "rand_augment_2_9",
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
            Some(OpSpec::AutoAugment {
                policy: AutoAugmentPolicy::ImageNet,
                interpolation: Interpolation::Nearest,
                fill: None,
                api: Api::V1,
            }),
        ),
    ];
    for (name, policy) in variants {
        let pipeline = pipeline(policy);
        let mut ctx = pipeline.new_context().expect("ctx");
        let mut slot = vec![0f32; pipeline.sample_len()];
        g.bench_function(name, |b| {
            b.iter(|| {
                for index in 0..SAMPLES {
                    pipeline
                        .run(
                            black_box(&bytes),
                            &mut sample_rng(0, 0, index),
                            &mut ctx,
                            OutputSlot::F32(&mut slot),
                            &mut (),
                        )
                        .expect("runs");
                }
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
