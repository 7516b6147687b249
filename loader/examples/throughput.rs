//! Loader throughput on an image folder, with a stand-in processor that checksums each file's
//! bytes into its slot (the real decode/crop/resize pipeline is plugged in later).
//!
//! ```text
//! cargo run --release -p ferroloader-loader --example throughput -- [ROOT] [--workers 1,2]
//!     [--batch 64] [--epochs 2] [--rounds 8] [--repeat 3] [--cache]
//! ```
//!
//! Without ROOT, a synthetic folder (8 classes x 128 files of ~110 KB) is made in a temporary
//! directory. `--rounds` is how many checksum passes each sample costs (8 passes over 110 KB is
//! about the CPU time of a JPEG decode); `--cache` loads from memory instead of files. Prints
//! samples/s and process CPU time per sample of a plain single-threaded loop (read + process, no
//! loader) and of the loader for each worker count, with ratios to the plain loop and the
//! consumer's mean wait per batch (medians of `--repeat` rounds, the configurations taking
//! turns). CPU per sample is the loader's overhead measure that other load on the machine
//! disturbs least.

use std::error::Error;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ferroloader_loader::transforms::Error as TransformError;
use ferroloader_loader::{
    DType, ImageFolder, InMemory, Loader, LoaderOptions, NoHooks, Op, OpHooks, SampleKey,
    SampleLayout, SampleProcessor, SlotMut, Source,
};

/// FNV-1a over the bytes, `rounds` times, then a xorshift stream from the hash and the sample's
/// key fills a `[3, 64, 64]` u8 slot.
struct Checksum {
    rounds: usize,
}

impl SampleProcessor for Checksum {
    type Scratch = ();

    fn new_scratch(&self) {}

    fn sample_layout(&self) -> SampleLayout {
        SampleLayout::chw(DType::U8, 3, 64, 64)
    }

    fn process(
        &self,
        bytes: &[u8],
        key: SampleKey,
        _scratch: &mut (),
        out: SlotMut<'_>,
        hooks: &mut dyn OpHooks,
    ) -> Result<(), TransformError> {
        hooks.enter(Op::Custom("checksum"));
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for round in 0..self.rounds {
            h ^= round as u64;
            for &b in bytes {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        let mut x = h ^ key.index.rotate_left(17) ^ key.epoch.rotate_left(41) ^ key.seed | 1;
        if let SlotMut::U8(out) = out {
            for v in out.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *v = x as u8;
            }
        }
        hooks.exit(Op::Custom("checksum"));
        Ok(())
    }
}

struct Args {
    root: Option<PathBuf>,
    workers: Vec<usize>,
    batch: usize,
    epochs: u64,
    rounds: usize,
    cache: bool,
    repeat: usize,
}

fn parse_args() -> Result<Args, Box<dyn Error>> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let mut args = Args {
        root: None,
        workers: (1..=cores).collect(),
        batch: 64,
        epochs: 2,
        rounds: 8,
        cache: false,
        repeat: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--workers" => {
                args.workers = value()?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?;
            }
            "--batch" => args.batch = value()?.parse()?,
            "--epochs" => args.epochs = value()?.parse()?,
            "--rounds" => args.rounds = value()?.parse()?,
            "--repeat" => args.repeat = value()?.parse::<usize>()?.max(1),
            "--cache" => args.cache = true,
            _ if !a.starts_with("--") && args.root.is_none() => args.root = Some(a.into()),
            _ => return Err(format!("unknown argument {a}").into()),
        }
    }
    Ok(args)
}

/// 8 classes x 128 files of pseudo-random bytes, ~110 KB each (an ImageNet-sized JPEG).
fn synthetic(dir: &std::path::Path) -> Result<(), Box<dyn Error>> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for class in 0..8 {
        let class_dir = dir.join(format!("class{class}"));
        fs::create_dir_all(&class_dir)?;
        for i in 0..128 {
            let len = 100_000 + (i * 1543) % 20_000;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            fs::write(class_dir.join(format!("{i:04}.jpg")), bytes)?;
        }
    }
    Ok(())
}

/// Samples per second and CPU time per sample of a plain loop: read and process each sample in
/// turn, one thread.
fn plain_loop<S: Source>(source: &S, proc_: &Checksum) -> Result<Measure, Box<dyn Error>> {
    let layout = proc_.sample_layout();
    let mut slot = vec![0u8; layout.byte_len().ok_or("layout")?];
    let mut buf = Vec::new();
    let key = |index: usize| SampleKey {
        seed: 0,
        epoch: 0,
        index: index as u64,
    };
    let start = Instant::now();
    let cpu = cpu_time();
    for i in 0..source.len() {
        let bytes = source.read(i, &mut buf)?;
        proc_.process(bytes, key(i), &mut (), SlotMut::U8(&mut slot), &mut NoHooks)?;
        // Keeps the compiler from dropping the work whose result nobody reads.
        std::hint::black_box(&mut slot);
    }
    Ok(Measure::since(start, cpu, source.len(), Duration::ZERO))
}

/// What one run measured.
#[derive(Clone, Copy)]
struct Measure {
    /// Samples per second of wall time.
    rate: f64,
    /// CPU time of the whole process per sample: unlike the rate, barely affected by other
    /// processes competing for the cores.
    cpu_per_sample: Duration,
    /// Mean time the consumer waited per batch.
    wait: Duration,
}

impl Measure {
    fn since(start: Instant, cpu: Option<Duration>, samples: usize, wait: Duration) -> Self {
        let n = samples.max(1) as u32;
        Measure {
            rate: samples as f64 / start.elapsed().as_secs_f64(),
            cpu_per_sample: match (cpu, cpu_time()) {
                (Some(a), Some(b)) => (b - a) / n,
                _ => Duration::ZERO,
            },
            wait,
        }
    }
}

/// User + system CPU time of the process so far (Linux; `None` elsewhere). Assumes the usual
/// 100 clock ticks per second.
fn cpu_time() -> Option<Duration> {
    let stat = fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = parse_args()?;
    let tmp;
    let root = match &args.root {
        Some(root) => root.clone(),
        None => {
            tmp = tempfile::tempdir()?;
            synthetic(tmp.path())?;
            tmp.path().to_path_buf()
        }
    };
    let folder = ImageFolder::new(&root)?;
    let cached = if args.cache {
        Some(InMemory::cache(&folder)?)
    } else {
        None
    };
    let proc_ = Checksum {
        rounds: args.rounds,
    };
    println!(
        "{} samples in {} classes from {}{}, batch {}, {} checksum rounds",
        folder.len(),
        folder.classes().len(),
        root.display(),
        if args.cache {
            " (cached in memory)"
        } else {
            ""
        },
        args.batch,
        args.rounds
    );
    // A first pass warms the page cache so that every run reads from memory alike.
    plain_loop(&folder, &proc_)?;
    // Every configuration runs once per round, round after round, and reports its median: the
    // machine's background load then weighs on all of them alike.
    let mut plain = Vec::new();
    let mut loaded: Vec<Vec<Measure>> = vec![Vec::new(); args.workers.len()];
    for _ in 0..args.repeat {
        plain.push(match &cached {
            Some(c) => plain_loop(c, &proc_)?,
            None => plain_loop(&folder, &proc_)?,
        });
        for (k, &workers) in args.workers.iter().enumerate() {
            let options = LoaderOptions::default()
                .batch_size(args.batch)
                .num_workers(workers)
                .shuffle(true);
            let proc_ = Checksum {
                rounds: args.rounds,
            };
            loaded[k].push(match &cached {
                Some(c) => run(Loader::new(c.clone(), proc_, options)?, args.epochs)?,
                None => run(Loader::new(folder.clone(), proc_, options)?, args.epochs)?,
            });
        }
    }
    let plain = median(plain);
    println!(
        "plain loop, 1 thread: {:8.0} samples/s, {:6.1} us CPU/sample (medians of {})",
        plain.rate,
        us(plain.cpu_per_sample),
        args.repeat
    );
    for (&workers, results) in args.workers.iter().zip(loaded) {
        let m = median(results);
        println!(
            "loader, {workers} worker(s): {:8.0} samples/s = {:.2}x the plain loop, \
             {:6.1} us CPU/sample = {:.2}x, mean consumer wait {:.2} ms/batch",
            m.rate,
            m.rate / plain.rate,
            us(m.cpu_per_sample),
            m.cpu_per_sample.as_secs_f64() / plain.cpu_per_sample.as_secs_f64(),
            m.wait.as_secs_f64() * 1e3
        );
    }
    Ok(())
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
    loader: Loader<S, Checksum>,
    epochs: u64,
) -> Result<Measure, Box<dyn Error>> {
    let mut samples = 0;
    let mut batches = 0u32;
    let mut wait = Duration::ZERO;
    let start = Instant::now();
    let cpu = cpu_time();
    for _ in 0..epochs {
        for batch in loader.iter() {
            let batch = batch?;
            samples += batch.len();
            batches += 1;
            wait += batch.wait();
        }
    }
    Ok(Measure::since(start, cpu, samples, wait / batches.max(1)))
}
