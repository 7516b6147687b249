//! What the profiler costs the loader: the real train pipeline (RandomResizedCrop 224, flip,
//! to-tensor, normalize, f32) over an ImageNet-like corpus held in memory, with the loader's
//! profiler `off`, recording `spans`, and recording `counters` (spans plus a counter group read
//! at every op boundary; software counters where the machine has no PMU).
//!
//! ```text
//! make bench                                   # generates target/fixtures/bench
//! cargo bench --bench loader_profile
//! FERROLOADER_BENCH_CORPUS=DIR FERROLOADER_BENCH_ROUNDS=21 FERROLOADER_BENCH_REPEAT=16 \
//!     FERROLOADER_BENCH_EPOCHS=1 FERROLOADER_BENCH_WORKERS=2 cargo bench --bench loader_profile
//! ```
//!
//! The dataset is the corpus repeated `FERROLOADER_BENCH_REPEAT` times (default 16: 768 samples
//! from the 48 files of `make bench`), so that an epoch is long enough for the per-epoch costs
//! (starting worker threads, their recorders, the first and last batch) to weigh as little as
//! they do on a real dataset; `FERROLOADER_BENCH_REPEAT=1` measures short epochs instead. One
//! loader per mode, built and warmed up first; then every round runs each mode once
//! (`FERROLOADER_BENCH_EPOCHS` epochs, default 1), rotating which mode goes first, so drift and
//! background load weigh on all three alike. Prints each mode's median wall time, throughput and
//! process CPU time per image, and the cost of `spans` and `counters` against `off`: as the ratio
//! of the medians and as the median of the per-round ratios, for wall time and for CPU time. On a
//! quiet machine the wall time ratio is the throughput cost; on a shared one (other jobs on the
//! same cores) wall time wanders, and the CPU time ratio, what the profiler adds to every image,
//! is the steadier figure.
//! The profile recorded in a run is dropped (`take_profile`) outside the timed region. Without
//! `--bench` (as `cargo test --benches` runs it) it does one short round, as a smoke test.

use std::hint::black_box;
use std::time::Instant;

use ferroloader::loader::transforms::spec::PipelineSpec;
use ferroloader::loader::{BatchImages, ImagePipeline, InMemory, Loader, LoaderOptions, Source};
use ferroloader::profiler::{Mode, Summary};

const MODES: [Mode; 3] = [Mode::Off, Mode::Spans, Mode::Counters];
const BATCH: usize = 16;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&v| v > 0)
        .unwrap_or(default)
}

#[path = "../tests/support/fixtures.rs"]
mod fixtures;

/// The corpus' files, repeated `repeat` times.
fn corpus(repeat: usize) -> InMemory {
    let files = fixtures::bench_corpus();
    InMemory::from_samples(
        (0..repeat)
            .flat_map(|_| files.iter())
            .enumerate()
            .map(|(i, f)| (f, (i % 10) as i64)),
    )
}

type TrainLoader = Loader<InMemory, ImagePipeline>;

/// CPU time of the whole process (every thread, those that ended included), seconds.
fn process_cpu_s() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// Wall and process CPU seconds of one run.
#[derive(Clone, Copy)]
struct Run {
    wall: f64,
    cpu: f64,
}

/// Runs `epochs` epochs, touching every batch as a consumer would.
fn run(loader: &TrainLoader, epochs: usize) -> Run {
    let c0 = process_cpu_s();
    let t0 = Instant::now();
    let mut sum = 0f32;
    for _ in 0..epochs {
        for batch in loader.iter() {
            let batch = batch.expect("the corpus loads");
            if let BatchImages::F32(images) = batch.images() {
                sum += images.first().copied().unwrap_or(0.0);
            }
        }
    }
    black_box(sum);
    Run {
        wall: t0.elapsed().as_secs_f64(),
        cpu: process_cpu_s() - c0,
    }
}

/// The median of the per-round ratios `t[m] / t[0]`, and a 95% confidence interval for it
/// (distribution-free: order statistics `n/2 -+ 0.98 sqrt(n)`).
fn paired_ratio(t: &[Vec<f64>], m: usize) -> (f64, f64, f64) {
    let mut r: Vec<f64> = t[m].iter().zip(&t[0]).map(|(a, off)| a / off).collect();
    r.sort_by(f64::total_cmp);
    let n = r.len() as f64;
    let half = 0.98 * n.sqrt();
    let last = r.len().saturating_sub(1);
    let lo = ((n / 2.0 - half).floor().max(0.0) as usize).min(last);
    let hi = ((n / 2.0 + half).ceil() as usize).min(last);
    (median(&r), r[lo], r[hi])
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let rounds = if full {
        env_usize("FERROLOADER_BENCH_ROUNDS", 15)
    } else {
        1
    };
    let epochs = env_usize("FERROLOADER_BENCH_EPOCHS", 1);
    let repeat = if full {
        env_usize("FERROLOADER_BENCH_REPEAT", 16)
    } else {
        1
    };
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let workers = env_usize("FERROLOADER_BENCH_WORKERS", cores);
    let data = corpus(repeat);
    let images = data.len() * epochs;
    let spec = PipelineSpec::imagenet_train(224);
    let loaders: Vec<TrainLoader> = MODES
        .iter()
        .map(|&mode| {
            let options = LoaderOptions::default()
                .batch_size(BATCH)
                .num_workers(workers)
                .shuffle(true)
                .seed(1)
                .profile_mode(mode);
            Loader::new(
                data.clone(),
                ImagePipeline::new(spec.clone()).expect("train pipeline plans"),
                options,
            )
            .expect("loader")
        })
        .collect();
    println!(
        "loader + train pipeline (RandomResizedCrop 224, flip, normalize, f32): {} samples in \
         memory (corpus x {repeat}), {workers} workers, batch {BATCH}, {epochs} epoch(s) per run, \
         {rounds} round(s)",
        data.len()
    );

    // Warm up (scratch states, buffer rings, page cache of the corpus), and show what each mode
    // records.
    for (loader, mode) in loaders.iter().zip(MODES) {
        run(loader, 1);
        let profile = loader.take_profile();
        let p = &profile.pipelines[0];
        let samples = p.spans.iter().filter(|s| s.op == "process").count();
        let per_sample = if samples > 0 {
            p.spans.len() as f64 / samples as f64
        } else {
            0.0
        };
        println!(
            "  {:<8} records {} spans ({per_sample:.1} per sample), {} batch records",
            mode.name(),
            p.spans.len(),
            p.batches.len()
        );
        if mode == Mode::Counters {
            let c = &p.counters;
            println!(
                "  counters: hardware {} ({}), software {} ({})",
                c.hardware.available,
                c.hardware.reason.as_deref().unwrap_or("ok"),
                c.software.available,
                c.software.reason.as_deref().unwrap_or("ok")
            );
            if !full {
                println!("{}", Summary::from_profile(&profile).render_table());
            }
        }
    }

    let mut runs: Vec<Vec<Run>> = vec![Vec::with_capacity(rounds); MODES.len()];
    for round in 0..rounds {
        for k in 0..MODES.len() {
            let m = (round + k) % MODES.len();
            runs[m].push(run(&loaders[m], epochs));
            // Drop what was recorded, outside the timed region.
            drop(loaders[m].take_profile());
        }
    }

    let wall: Vec<Vec<f64>> = runs
        .iter()
        .map(|r| r.iter().map(|x| x.wall).collect())
        .collect();
    let cpu: Vec<Vec<f64>> = runs
        .iter()
        .map(|r| r.iter().map(|x| x.cpu).collect())
        .collect();
    let med_wall: Vec<f64> = wall.iter().map(|t| median(t)).collect();
    let med_cpu: Vec<f64> = cpu.iter().map(|t| median(t)).collect();
    println!(
        "{:<9} {:>9} {:>8} {:>8} {:>11} {:>9} {:>25} {:>9} {:>25}",
        "mode",
        "wall ms",
        "min ms",
        "img/s",
        "CPU us/img",
        "wall/off",
        "paired wall [95% CI]",
        "CPU/off",
        "paired CPU [95% CI]"
    );
    for (m, mode) in MODES.iter().enumerate() {
        let min = wall[m].iter().copied().fold(f64::INFINITY, f64::min);
        let (pw, pw_lo, pw_hi) = paired_ratio(&wall, m);
        let (pc, pc_lo, pc_hi) = paired_ratio(&cpu, m);
        println!(
            "{:<9} {:>9.2} {:>8.2} {:>8.1} {:>11.1} {:>9.4} {:>8.4} [{:.4}, {:.4}] {:>9.4} {:>8.4} [{:.4}, {:.4}]",
            mode.name(),
            med_wall[m] * 1e3,
            min * 1e3,
            images as f64 / med_wall[m],
            med_cpu[m] / images as f64 * 1e6,
            med_wall[m] / med_wall[0],
            pw,
            pw_lo,
            pw_hi,
            med_cpu[m] / med_cpu[0],
            pc,
            pc_lo,
            pc_hi
        );
    }
    let cost = |med: &[f64], m: usize| (1.0 - med[0] / med[m]) * 100.0;
    println!(
        "throughput cost vs off (wall medians): spans {:+.2}%, counters {:+.2}%",
        cost(&med_wall, 1),
        cost(&med_wall, 2)
    );
    println!(
        "CPU per image vs off (medians):        spans {:+.2}%, counters {:+.2}%  \
         (goals: spans <= 1%, counters <= 3%)",
        (med_cpu[1] / med_cpu[0] - 1.0) * 100.0,
        (med_cpu[2] / med_cpu[0] - 1.0) * 100.0
    );
}
