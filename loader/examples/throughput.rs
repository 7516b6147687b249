//! Loader throughput on an ImageFolder with the real train pipeline (decode, RandomResizedCrop,
//! flip, to-tensor, normalize, fused), against the same pipeline in a plain single-threaded loop.
//!
//! ```text
//! make loader-bench        # generates an ImageNet-like folder, then runs this
//! cargo run --release -p ferroloader-loader --example throughput -- ROOT [--workers 1,2]
//!     [--batch 64] [--epochs 1] [--repeat 3] [--cache]
//! ```
//!
//! Prints samples/s and process CPU time per sample of the plain loop and of the loader for each
//! worker count, as ratios to the plain loop, plus the time to the first batch (warm page
//! cache). Every configuration runs once per round, round after round, and reports its median,
//! so the machine's background load weighs on all of them alike: quote the ratios.

use std::error::Error;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use ferroloader_loader::transforms::spec::PipelineSpec;
use ferroloader_loader::{
    ImageFolder, ImagePipeline, InMemory, Loader, LoaderOptions, NoHooks, SampleKey,
    SampleProcessor, SlotMut, Source,
};

#[derive(Parser)]
#[command(about = "ferroloader loader throughput vs a plain loop, on an ImageFolder")]
struct Args {
    /// ImageFolder root (class subfolders of JPEGs).
    root: PathBuf,
    /// Worker counts to measure, comma separated; default 1..=cores.
    #[arg(long, value_delimiter = ',')]
    workers: Vec<usize>,
    /// Batch size.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Epochs per measurement.
    #[arg(long, default_value_t = 1)]
    epochs: u64,
    /// Rounds; each figure is the median over rounds.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Load the files into memory first (measures the pipeline without file reads).
    #[arg(long)]
    cache: bool,
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = Args::parse();
    if args.workers.is_empty() {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        args.workers = (1..=cores).collect();
    }
    let folder = ImageFolder::new(&args.root)?;
    let spec = PipelineSpec::imagenet_train(224);
    let proc_ = ImagePipeline::new(spec.clone())?;
    println!(
        "{} samples in {} classes from {}{}, batch {}, train pipeline (RRC 224, flip, normalize, f32)",
        folder.len(),
        folder.classes().len(),
        args.root.display(),
        if args.cache { " (cached in memory)" } else { "" },
        args.batch,
    );
    let cached = if args.cache {
        Some(InMemory::cache(&folder)?)
    } else {
        None
    };
    // A first pass warms the page cache so that every run reads from memory alike.
    plain_loop(&folder, &proc_)?;
    let mut plain = Vec::new();
    let mut loaded: Vec<Vec<Measure>> = vec![Vec::new(); args.workers.len()];
    for _ in 0..args.repeat.max(1) {
        plain.push(match &cached {
            Some(c) => plain_loop(c, &proc_)?,
            None => plain_loop(&folder, &proc_)?,
        });
        for (k, &workers) in args.workers.iter().enumerate() {
            let options = LoaderOptions::default()
                .batch_size(args.batch)
                .num_workers(workers)
                .shuffle(true);
            let proc_ = ImagePipeline::new(spec.clone())?;
            loaded[k].push(match &cached {
                Some(c) => run(Loader::new(c.clone(), proc_, options)?, args.epochs)?,
                None => run(Loader::new(folder.clone(), proc_, options)?, args.epochs)?,
            });
        }
    }
    let plain = median(plain);
    println!(
        "plain loop, 1 thread: {:8.0} samples/s, {:7.1} us CPU/sample",
        plain.rate,
        us(plain.cpu_per_sample),
    );
    let one_worker = args.workers.iter().position(|&w| w == 1);
    let mut medians = Vec::new();
    for (&workers, results) in args.workers.iter().zip(loaded) {
        let m = median(results);
        println!(
            "loader, {workers} worker(s): {:8.0} samples/s = {:.3}x the plain loop, \
             {:7.1} us CPU/sample = {:.3}x, first batch after {:.1} ms, mean wait {:.2} ms/batch",
            m.rate,
            m.rate / plain.rate,
            us(m.cpu_per_sample),
            m.cpu_per_sample.as_secs_f64() / plain.cpu_per_sample.as_secs_f64(),
            m.first_batch.as_secs_f64() * 1e3,
            m.wait.as_secs_f64() * 1e3
        );
        medians.push((workers, m));
    }
    if let Some(k) = one_worker {
        let base = medians[k].1.rate;
        for (workers, m) in &medians {
            println!(
                "scaling: {workers} worker(s) = {:.2}x 1 worker",
                m.rate / base
            );
        }
    }
    Ok(())
}

/// Reads and runs every sample in turn on this thread: what the loader's machinery is measured
/// against.
fn plain_loop<S: Source>(source: &S, proc_: &ImagePipeline) -> Result<Measure, Box<dyn Error>> {
    let layout = proc_.sample_layout();
    let mut slot = vec![0f32; layout.numel().ok_or("layout")?];
    let mut buf = Vec::new();
    let mut scratch = proc_.new_scratch();
    let start = Instant::now();
    let cpu = cpu_time();
    for i in 0..source.len() {
        let bytes = source.read(i, &mut buf)?;
        let key = SampleKey {
            seed: 0,
            epoch: 0,
            index: i as u64,
            repeat: 0,
        };
        proc_.process(
            bytes,
            key,
            &mut scratch,
            SlotMut::F32(&mut slot),
            &mut NoHooks,
        )?;
        std::hint::black_box(&mut slot);
    }
    Ok(Measure::since(
        start,
        cpu,
        source.len(),
        Duration::ZERO,
        Duration::ZERO,
    ))
}

/// What one run measured.
#[derive(Clone, Copy)]
struct Measure {
    /// Samples per second of wall time.
    rate: f64,
    /// CPU time of the whole process per sample: barely affected by other processes.
    cpu_per_sample: Duration,
    /// Mean time the consumer waited per batch.
    wait: Duration,
    /// From `iter()` to the first batch in hand.
    first_batch: Duration,
}

impl Measure {
    fn since(
        start: Instant,
        cpu: Option<Duration>,
        samples: usize,
        wait: Duration,
        first_batch: Duration,
    ) -> Self {
        let n = samples.max(1) as u32;
        Measure {
            rate: samples as f64 / start.elapsed().as_secs_f64(),
            cpu_per_sample: match (cpu, cpu_time()) {
                (Some(a), Some(b)) => (b - a) / n,
                _ => Duration::ZERO,
            },
            wait,
            first_batch,
        }
    }
}

/// User + system CPU time of the process so far (Linux; `None` elsewhere), assuming the usual
/// 100 clock ticks per second.
fn cpu_time() -> Option<Duration> {
    let stat = fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The run with the median rate.
fn median(mut v: Vec<Measure>) -> Measure {
    v.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    v[v.len() / 2]
}

/// Runs `epochs` epochs of `loader`.
fn run<S: Source + 'static>(
    loader: Loader<S, ImagePipeline>,
    epochs: u64,
) -> Result<Measure, Box<dyn Error>> {
    let mut samples = 0;
    let mut batches = 0u32;
    let mut wait = Duration::ZERO;
    let mut first_batch = Duration::ZERO;
    let start = Instant::now();
    let cpu = cpu_time();
    for epoch in 0..epochs {
        let epoch_start = Instant::now();
        for batch in loader.iter() {
            let batch = batch?;
            if epoch == 0 && batches == 0 {
                first_batch = epoch_start.elapsed();
            }
            samples += batch.len();
            batches += 1;
            wait += batch.wait();
        }
    }
    Ok(Measure::since(
        start,
        cpu,
        samples,
        wait / batches.max(1),
        first_batch,
    ))
}
