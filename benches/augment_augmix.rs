//! AugMix in the pipeline: `CenterCrop(224)`, `AugMix`, `ToTensor` on the decode corpus'
//! ImageNet-like JPEG (500x375, `make fixtures`), single thread. Only the time inside the
//! `AugMix` span counts (its draws, the chains with torch's tensor kernels and the float32
//! mix on the 224x224 staging image, measured through the pipeline's observer), so the
//! decode around it adds no noise. Each iteration runs `SAMPLES` sample indices, so the draws
//! spread over the ops and depths. Variants: torchvision's defaults (v1, BILINEAR, no fill),
//! NEAREST with a fill, and v2's kernels.
//!
//! Compare ratios within one run, not absolute times (shared 2-core machines).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferroloader::transforms::augment::geometry::Interpolation;
use ferroloader::transforms::augment::policy::Api;
use ferroloader::transforms::fused::OutputSlot;
use ferroloader::transforms::rng::sample_rng;
use ferroloader::transforms::spec::{Fill, Op, OpObserver, OpSpec, Pipeline, PipelineSpec, Size};

#[path = "../tests/support/fixtures.rs"]
mod fixtures;

const SAMPLES: u64 = 16;

fn pipeline(augmix: OpSpec) -> Pipeline {
    let ops = vec![
        OpSpec::CenterCrop {
            size: Size::Int(224),
        },
        augmix,
        OpSpec::ToTensor,
    ];
    Pipeline::new(PipelineSpec::new(ops)).expect("valid spec")
}

/// Sums the time spent inside `AugMix` spans.
#[derive(Default)]
struct SpanTimer {
    started: Option<Instant>,
    total: Duration,
}

impl OpObserver for SpanTimer {
    fn enter(&mut self, op: Op) {
        if op == Op::AugMix {
            self.started = Some(Instant::now());
        }
    }
    fn exit(&mut self, op: Op) {
        if op == Op::AugMix {
            if let Some(start) = self.started.take() {
                self.total += start.elapsed();
            }
        }
    }
}

fn augmix(interpolation: Interpolation, fill: Option<Fill>, api: Api) -> OpSpec {
    OpSpec::AugMix {
        severity: 3,
        mixture_width: 3,
        chain_depth: -1,
        alpha: 1.0,
        all_ops: true,
        interpolation,
        fill,
        api,
    }
}

fn bench_augmix(c: &mut Criterion) {
    let dir = fixtures::fixture_dir("decode", "make fixtures");
    let bytes = std::fs::read(dir.join("jpeg_imagenet_like.jpg")).expect("corpus JPEG");
    let mut g = c.benchmark_group("augment_augmix");
    g.throughput(Throughput::Elements(SAMPLES));
    let variants = [
        ("augmix_v1", augmix(Interpolation::Bilinear, None, Api::V1)),
        (
            "augmix_v1_nearest_fill",
            augmix(Interpolation::Nearest, Some(Fill::Number(128.0)), Api::V1),
        ),
        ("augmix_v2", augmix(Interpolation::Bilinear, None, Api::V2)),
    ];
    for (name, spec) in variants {
        let pipeline = pipeline(spec);
        let mut ctx = pipeline.new_context().expect("ctx");
        let mut slot = vec![0f32; pipeline.sample_len()];
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut timer = SpanTimer::default();
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
    config = Criterion::default().sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    targets = bench_augmix
}
criterion_main!(benches);
