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
//! (RandomResizedCrop 224, flip, to-tensor, normalize to f32) fused after a full decode (once
//! per kernel set the CPU runs: 512-bit, 256-bit AVX-512, AVX2; the default one, which depends
//! on the CPU (see `fused::default_simd`), is marked),
//! fused after a region-of-interest decode, and op by op. For the fused variants, the median
//! share of the kernel (the pipeline's `Fused` op, timed through its observer hooks) and of
//! the rest (decode, crop draw) are printed as ratios to the bare decode too: the rest above
//! 1.0 is what the kernel costs the decode that follows it. One more variant decodes and then
//! only fills a float32 sample slot (timed as its kernel): the memory cost of the output alone,
//! which no kernel goes below. Without `--bench` (as `cargo test --benches` runs it) it does
//! one round, as a smoke test.
//!
//! What it showed, and the choices that rest on it:
//! - `fused::default_simd`: on this project's Ice Lake Xeon the 512-bit kernels made every
//!   sample slower (three alternating pairs: fused + ROI decode 1181-1280 us per image with
//!   AVX2 against 1346-1464 us with AVX-512; later, 30 paired rounds: the 512-bit kernel 1.23x
//!   slower than the 256-bit one and the decode after it 1.13x); the 256-bit AVX-512 kernels
//!   left the next decode's speed alone and cut the kernel's time after a full decode by
//!   16-26% against AVX2. On a Zen 4 EPYC the kernel column was 0.084-0.098 of a decode with
//!   the 512-bit kernels against 0.096-0.106 with the 256-bit ones (three runs of 61 rounds),
//!   and the decode after either ran at the speed of the bare decode.
//! - The float conversion under `Avx512Ymm` runs the AVX2 kernel: a 256-bit form of the
//!   AVX-512 one (a masked load and one `vpermb` per channel) was 0.9-1.0x as fast, and the
//!   decode that followed ran 6-9% slower in three runs of 61 alternating rounds (against
//!   0-1.5% for AVX2), for a reason not found: no clock drop showed in a probe.
//! - The float kernel stores plainly: non-temporal stores (`vmovntps`, 64-byte aligned slot)
//!   took 0.20 against 0.16 of a decode here (in-process toggle, 3 runs), and in a probe (a
//!   330x300 crop after 3 MB of other writes) about 2x as long, still 1.1-1.3x when each
//!   plane's cache line was written in one go; alone, filling a slot, they took 26-39 us
//!   against 59 us. `prefetchw` of the next row's lines was 6% slower in the probe.

use std::hint::black_box;
use std::time::{Duration, Instant};

use ferroloader::transforms::decode::{DecodeContext, DecodeOptions};
use ferroloader::transforms::fused::{default_simd, OutputSlot};
use ferroloader::transforms::resize::SimdLevel;
use ferroloader::transforms::rng::sample_rng;
use ferroloader::transforms::spec::{
    Execution, Op, OpObserver, Pipeline, PipelineContext, PipelineSpec,
};
use ferroloader::transforms::RgbImage;

#[path = "../tests/support/fixtures.rs"]
mod fixtures;

/// Time spent inside the fused kernel (the pipeline's `Fused` op), through the pipeline's own
/// observer hooks: the rest of a sample is the decode (and drawing the crop).
#[derive(Default)]
struct KernelTime {
    entered: Option<Instant>,
    total: Duration,
}

impl OpObserver for KernelTime {
    fn enter(&mut self, op: Op) {
        if op == Op::Fused {
            self.entered = Some(Instant::now());
        }
    }

    fn exit(&mut self, op: Op) {
        if let (Op::Fused, Some(t)) = (op, self.entered.take()) {
            self.total += t.elapsed();
        }
    }
}

/// One round's time for a variant, and the part of it in the fused kernel.
struct Timing {
    total: Duration,
    kernel: Duration,
}

/// One way of processing the corpus, timed over all of it.
enum Variant {
    BareDecode {
        ctx: DecodeContext,
        img: RgbImage,
    },
    /// The bare decode, then a plain fill of a sample's float32 slot: what writing the output
    /// alone costs after a decode (its time goes in the kernel column), the floor under the
    /// fused kernel's share.
    DecodeThenFill {
        ctx: DecodeContext,
        img: RgbImage,
        slot: Vec<f32>,
    },
    Pipeline {
        pipeline: Box<Pipeline>,
        ctx: Box<PipelineContext>,
        slot: Vec<f32>,
    },
}

impl Variant {
    fn pipeline(spec: PipelineSpec) -> Variant {
        Variant::pipeline_at(spec, default_simd())
    }

    /// The pipeline with its kernels limited to `simd`.
    fn pipeline_at(spec: PipelineSpec, simd: SimdLevel) -> Variant {
        let pipeline = Box::new(Pipeline::new(spec).expect("valid spec"));
        let mut ctx = Box::new(pipeline.new_context().expect("context"));
        ctx.set_simd_limit(simd);
        let slot = vec![0f32; pipeline.sample_len()];
        Variant::Pipeline {
            pipeline,
            ctx,
            slot,
        }
    }

    /// Processes every file once; returns the time it took.
    fn run(&mut self, files: &[Vec<u8>]) -> Timing {
        let mut kernel = KernelTime::default();
        let start = Instant::now();
        match self {
            Variant::BareDecode { ctx, img } => {
                for f in files {
                    ctx.decode(black_box(f), img).expect("the corpus decodes");
                }
            }
            Variant::DecodeThenFill { ctx, img, slot } => {
                for f in files {
                    ctx.decode(black_box(f), img).expect("the corpus decodes");
                    let filling = Instant::now();
                    slot.fill(black_box(0.5));
                    black_box(&slot);
                    kernel.total += filling.elapsed();
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
                        .run(
                            black_box(f),
                            &mut rng,
                            ctx,
                            OutputSlot::F32(slot),
                            &mut kernel,
                        )
                        .expect("the corpus runs");
                }
            }
        }
        black_box(&*self);
        Timing {
            total: start.elapsed(),
            kernel: kernel.total,
        }
    }
}

/// The values fractions `qs` of the way through `v` sorted (0.5: the median), sorting once.
fn quantiles<const N: usize>(mut v: Vec<f64>, qs: [f64; N]) -> [f64; N] {
    v.sort_by(f64::total_cmp);
    qs.map(|q| v[((v.len() - 1) as f64 * q).round() as usize])
}

fn median(v: Vec<f64>) -> f64 {
    let [m] = quantiles(v, [0.5]);
    m
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
    let train = Pipeline::new(PipelineSpec::imagenet_train(224)).expect("valid spec");
    let mut variants: Vec<(String, Variant)> = vec![
        (
            "bare full decode".into(),
            Variant::BareDecode {
                ctx: DecodeContext::new(DecodeOptions::default()).expect("decoder"),
                img: RgbImage::new(),
            },
        ),
        (
            "decode, fill f32 slot".into(),
            Variant::DecodeThenFill {
                ctx: DecodeContext::new(DecodeOptions::default()).expect("decoder"),
                img: RgbImage::new(),
                slot: vec![0f32; train.sample_len()],
            },
        ),
    ];
    // After a full decode, one row per kernel set this CPU runs (a limit above what it has would
    // run the same kernels under another name); the default one (it depends on the CPU, see
    // `fused::default_simd`) is marked rather than run a second time.
    let default = default_simd().min(SimdLevel::detected());
    for level in SimdLevel::kernel_sets().into_iter().rev() {
        let label = match level {
            SimdLevel::Avx512 => "512-bit",
            SimdLevel::Avx512Ymm => "256-bit",
            SimdLevel::Avx2 => "AVX2 only",
            SimdLevel::Portable => "portable",
        };
        let mark = if level == default { " (default)" } else { "" };
        variants.push((
            format!("fused, full, {label}{mark}"),
            Variant::pipeline_at(PipelineSpec::imagenet_train(224).roi_decode(false), level),
        ));
    }
    variants.extend([
        (
            "fused, ROI decode".into(),
            Variant::pipeline(PipelineSpec::imagenet_train(224)),
        ),
        (
            "op by op, ROI decode".into(),
            Variant::pipeline(PipelineSpec::imagenet_train(224).execution(Execution::OpByOp)),
        ),
    ]);
    // Warm-up: buffers sized, code and corpus in cache.
    for (_, v) in &mut variants {
        v.run(&files);
    }
    let n = variants.len();
    let mut times: Vec<Vec<Timing>> = (0..n).map(|_| Vec::with_capacity(rounds)).collect();
    for round in 0..rounds {
        for k in 0..n {
            let i = (round + k) % n;
            times[i].push(variants[i].1.run(&files));
        }
    }
    println!(
        "{} JPEGs, single thread, {rounds} round(s), each variant once per round in rotating order",
        files.len()
    );
    // The fused variants' time split: inside the kernel, and the rest (decode, crop draw).
    println!(
        "{:<32} {:>10} {:>14} {:>8} {:>8} {:>8} {:>8}",
        "variant", "us/image", "x bare decode", "p25", "p75", "kernel", "rest"
    );
    let per_image = |t: f64| t / files.len() as f64 * 1e6;
    let bare: Vec<f64> = times[0].iter().map(|t| t.total.as_secs_f64()).collect();
    // Per round, a part of each variant's time over that round's bare decode.
    let ratios = |i: usize, part: &dyn Fn(&Timing) -> Duration| -> Vec<f64> {
        times[i]
            .iter()
            .zip(&bare)
            .map(|(t, b)| part(t).as_secs_f64() / b)
            .collect()
    };
    for (i, (name, _)) in variants.iter().enumerate() {
        let total = ratios(i, &|t| t.total);
        // The middle half of the rounds: on a shared machine the extremes are its neighbours.
        let [lo, mid, hi] = quantiles(total, [0.25, 0.5, 0.75]);
        let split = if times[i].iter().any(|t| !t.kernel.is_zero()) {
            let kernel = median(ratios(i, &|t| t.kernel));
            let rest = median(ratios(i, &|t| t.total - t.kernel));
            format!("{kernel:>8.3} {rest:>8.3}")
        } else {
            format!("{:>8} {:>8}", "-", "-")
        };
        let us = per_image(median(
            times[i].iter().map(|t| t.total.as_secs_f64()).collect(),
        ));
        println!("{name:<32} {us:>10.1} {mid:>14.3} {lo:>8.3} {hi:>8.3} {split}");
    }
}
