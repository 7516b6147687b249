//! The train pipeline's cost as a ratio to the bare full decode of the same images, single
//! thread, measured the way a noisy machine allows: every round times each variant once over
//! the whole corpus, rotating which goes first, and the figure is the median of the per-round
//! ratios (criterion's separate runs of each bench drift apart by more than the 5-15% asked
//! about here).
//!
//! ```text
//! make bench                                   # generates target/fixtures/bench, runs this too
//! cargo bench --bench train_ratio
//! FERROLOADER_BENCH_ROUNDS=51 FERROLOADER_BENCH_CORPUS=DIR cargo bench --bench train_ratio
//! ```
//!
//! Variants: the bare full decode (libjpeg-turbo into a reused image), and the train pipeline
//! (RandomResizedCrop 224, flip, to-tensor, normalize to f32) fused after a full decode, fused
//! after a region-of-interest decode, and op by op. Without `--bench` (as `cargo test --benches`
//! runs it) it does one round, as a smoke test.

use std::hint::black_box;
use std::time::{Duration, Instant};

use ferroloader::transforms::decode::{DecodeContext, DecodeOptions};
use ferroloader::transforms::fused::OutputSlot;
use ferroloader::transforms::rng::sample_rng;
use ferroloader::transforms::spec::{Execution, Pipeline, PipelineContext, PipelineSpec};
use ferroloader::transforms::RgbImage;

#[path = "../tests/support/fixtures.rs"]
mod fixtures;

/// One way of processing the corpus, timed over all of it.
enum Variant {
    BareDecode {
        ctx: DecodeContext,
        img: RgbImage,
    },
    Pipeline {
        pipeline: Pipeline,
        ctx: Box<PipelineContext>,
        slot: Vec<f32>,
    },
}

impl Variant {
    fn pipeline(spec: PipelineSpec) -> Variant {
        let pipeline = Pipeline::new(spec).expect("valid spec");
        let ctx = Box::new(pipeline.new_context().expect("context"));
        let slot = vec![0f32; pipeline.sample_len()];
        Variant::Pipeline {
            pipeline,
            ctx,
            slot,
        }
    }

    /// Processes every file once; returns the time it took.
    fn run(&mut self, files: &[Vec<u8>]) -> Duration {
        let start = Instant::now();
        match self {
            Variant::BareDecode { ctx, img } => {
                for f in files {
                    ctx.decode(black_box(f), img).expect("the corpus decodes");
                }
            }
            Variant::Pipeline {
                pipeline,
                ctx,
                slot,
            } => {
                for (i, f) in files.iter().enumerate() {
                    let mut rng = sample_rng(0, 0, i as u64);
                    pipeline
                        .run(black_box(f), &mut rng, ctx, OutputSlot::F32(slot), &mut ())
                        .expect("the corpus runs");
                }
            }
        }
        black_box(&*self);
        start.elapsed()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let rounds = if bench {
        std::env::var("FERROLOADER_BENCH_ROUNDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n: &usize| n > 0)
            .unwrap_or(31)
    } else {
        1
    };
    let files = fixtures::bench_corpus();
    let mut variants = [
        (
            "bare full decode",
            Variant::BareDecode {
                ctx: DecodeContext::new(DecodeOptions::default()).expect("decoder"),
                img: RgbImage::new(),
            },
        ),
        (
            "fused, full decode",
            Variant::pipeline(PipelineSpec::imagenet_train(224).roi_decode(false)),
        ),
        (
            "fused, ROI decode",
            Variant::pipeline(PipelineSpec::imagenet_train(224)),
        ),
        (
            "op by op, ROI decode",
            Variant::pipeline(PipelineSpec::imagenet_train(224).execution(Execution::OpByOp)),
        ),
    ];
    // Warm-up: buffers sized, code and corpus in cache.
    for (_, v) in &mut variants {
        v.run(&files);
    }
    let n = variants.len();
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); n];
    for round in 0..rounds {
        for k in 0..n {
            let i = (round + k) % n;
            times[i].push(variants[i].1.run(&files).as_secs_f64());
        }
    }
    println!(
        "{} JPEGs, single thread, {rounds} round(s), each variant once per round in rotating order",
        files.len()
    );
    println!(
        "{:<24} {:>10} {:>14} {:>10} {:>10}",
        "variant", "us/image", "x bare decode", "min", "max"
    );
    let per_image = |t: f64| t / files.len() as f64 * 1e6;
    for (i, (name, _)) in variants.iter().enumerate() {
        let ratios: Vec<f64> = times[i].iter().zip(&times[0]).map(|(t, b)| t / b).collect();
        let (lo, hi) = ratios
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &r| (lo.min(r), hi.max(r)));
        println!(
            "{name:<24} {:>10.1} {:>14.3} {lo:>10.3} {hi:>10.3}",
            per_image(median(times[i].clone())),
            median(ratios),
        );
    }
}
