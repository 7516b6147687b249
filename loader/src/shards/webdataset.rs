//! [`WebDataset`]: tar shards as a [`Source`], with a read-ahead fetcher.
//!
//! At construction the samples are listed, from the index or by reading every shard once.
//! Each epoch's order comes from [`order::epoch_order`]; when the loader announces the reads
//! of an epoch ([`Source::epoch_plan`]), fetcher threads fetch shards in the order the plan
//! first needs them, at most `read_ahead_shards` shards ahead of the reads (a shard is ahead
//! until the plan's first read of it) while all the shards held stay within
//! `read_ahead_bytes`, and a shard's bytes are freed once the plan's last read of it is done.
//! A shuffle buffer reads a shard's last samples thousands of reads after its first: the
//! shards those samples hold count in bytes only, or they would keep the next shards from
//! being fetched ahead. A worker that needs a shard nobody is fetching yet starts its fetch
//! itself (so the read-ahead bound can never stall the epoch) and waits only for the piece it
//! reads, and a read outside the plan is one range request for that sample alone.
//!
//! A remote shard larger than `range_bytes` is fetched as several byte ranges (pieces) at
//! once, cut between samples so each sample lies in exactly one piece, with at most
//! `max_requests` requests in flight over all shards; a sample is served as soon as its piece
//! has arrived, a failed piece fails exactly its samples, and a piece is freed after the
//! plan's last read of it. Local shards, shards the cache holds and shards of one piece are
//! read whole (one request).
//!
//! Must not decode images or hold more than the read-ahead window plus the shards still
//! being read.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use ferroloader_profiler::{now_ns, OpId, Profiler};
use tokio::sync::Semaphore;

use super::cache::ShardCache;
use super::index::{SampleEntry, ShardEntry, ShardIndex, DEFAULT_INDEX_NAME};
use super::members::{read_samples, LabelSource};
use super::order::{epoch_order, OrderParams};
use super::store::{Chunks, StoreOptions, Stores};
use super::url::{expand_braces, join, Location};
use crate::dataset::Source;
use crate::error::{LoaderError, Result};
use crate::sampler::Sampler;

/// The op name of a shard request in profiles.
pub const SHARD_READ: &str = "shard_read";

/// How a [`WebDataset`] finds, orders and fetches its shards.
#[derive(Clone, Debug)]
pub struct WebDatasetOptions {
    /// The index's URL. Default: `index.json` next to the first shard when it exists; without
    /// one the shards are read once at construction to list their samples.
    pub index: Option<String>,
    /// The number of samples, checked against the index or the shards (a mismatch is an
    /// error). Default: not checked.
    pub num_samples: Option<usize>,
    /// Where labels come from when shards are read without an index: `"cls"` (the `.cls`
    /// member), `"json"` (the `label` field of the `.json` member) or `"json.FIELD"`.
    /// Default: `"cls"`.
    pub label_key: String,
    /// Samples held by the shuffle buffer of a shuffled epoch. Default: 1000.
    pub shuffle_buffer: usize,
    /// Samples the shuffle buffer holds before it yields its first one (clamped to
    /// `1..=shuffle_buffer`); it grows to `shuffle_buffer` as it goes
    /// ([`OrderParams::shuffle_initial`]), so the first batch of an epoch waits for fewer
    /// samples. Default: 100, as WebDataset's `shuffle`.
    pub shuffle_initial: usize,
    /// Shards fetched ahead of the reads, each counted until the plan's first read of it
    /// (also the number of fetcher threads, up to 8). Default: 4.
    pub read_ahead_shards: usize,
    /// Bytes of shards held (fetched ahead, or still read by samples in the shuffle buffer)
    /// past which nothing more is fetched ahead; when nothing is held, one shard is always
    /// fetched. Default: 1 GiB.
    pub read_ahead_bytes: u64,
    /// The most bytes one range request of a remote shard asks for: a larger shard is fetched
    /// as several concurrent requests, cut between samples (a single sample larger than this
    /// is one piece of its own). 0 reads every shard whole. Default: 8 MiB.
    pub range_bytes: u64,
    /// Range requests in flight at once, over all shards. Default: 8.
    pub max_requests: usize,
    /// A folder that keeps fetched remote shards, so later epochs read them from disk.
    /// Default: none (local shards are never cached).
    pub cache_dir: Option<PathBuf>,
    /// The cache's size limit in bytes, least recently used shards evicted first. Default:
    /// no limit.
    pub cache_limit_bytes: Option<u64>,
    /// Store configuration and retries.
    pub store: StoreOptions,
}

impl Default for WebDatasetOptions {
    fn default() -> Self {
        WebDatasetOptions {
            index: None,
            num_samples: None,
            label_key: "cls".to_owned(),
            shuffle_buffer: 1000,
            shuffle_initial: 100,
            read_ahead_shards: 4,
            read_ahead_bytes: 1 << 30,
            range_bytes: 8 << 20,
            max_requests: 8,
            cache_dir: None,
            cache_limit_bytes: None,
            store: StoreOptions::default(),
        }
    }
}

/// Tar shards in the WebDataset layout (`KEY.jpg` + `KEY.cls` per sample) as a [`Source`].
///
/// Sample indices run through the shards in the order given, and through each shard in tar
/// order. The loader's epochs follow [`order::epoch_order`](super::order::epoch_order):
/// shuffled shards, contiguous equal shares per rank, a shuffle buffer.
pub struct WebDataset {
    shared: Arc<Shared>,
    fetchers: Vec<JoinHandle<()>>,
}

/// How the index says its images are to be decoded (both false for shards listed by scanning).
#[derive(Clone, Copy, Default)]
struct Decoding {
    exif_transpose: bool,
    grayscale: bool,
}

impl Decoding {
    fn of(index: &ShardIndex) -> Self {
        Decoding {
            exif_transpose: index.exif_transpose,
            grayscale: index.grayscale,
        }
    }
}

/// What the workers and the fetcher threads share.
struct Shared {
    urls: Vec<String>,
    /// Shard `i` holds samples `starts[i]..starts[i + 1]`.
    starts: Vec<usize>,
    /// Each shard's size in bytes.
    shard_bytes: Vec<u64>,
    /// Where each shard's pieces start ([`split_points`]): `[0]` for a shard read whole.
    pieces: Vec<Vec<u64>>,
    samples: Vec<SampleEntry>,
    /// The index's [`ShardIndex::exif_transpose`] (false for shards listed by scanning).
    exif_transpose: bool,
    /// The index's [`ShardIndex::grayscale`] (false for shards listed by scanning).
    grayscale: bool,
    shuffle_buffer: usize,
    shuffle_initial: usize,
    read_ahead_shards: usize,
    read_ahead_bytes: u64,
    /// Permits for range requests in flight, shared by every shard's fetch.
    requests: Semaphore,
    stores: Stores,
    cache: Option<ShardCache>,
    state: Mutex<FetchState>,
    changed: Condvar,
    /// The loader's profiler and the id of the `shard_read` op, once attached.
    profiler: Mutex<Option<(Profiler, OpId)>>,
}

#[derive(Default)]
struct FetchState {
    /// Shards to fetch ahead, in the order the plan first needs them.
    queue: VecDeque<usize>,
    /// Reads of each shard the current plan still has to make.
    remaining: Vec<usize>,
    /// Reads of each shard the current plan makes in all: a shard is ahead of the reads (in
    /// the read-ahead window) while none of them is done.
    planned: Vec<usize>,
    /// Reads of each piece of a shard of several pieces the current plan still has to make
    /// (empty for a shard read whole): a piece's bytes are freed after its last read.
    piece_reads: Vec<Vec<usize>>,
    slots: HashMap<usize, Slot>,
    /// Bytes of shards loading or loaded.
    held_bytes: u64,
    /// Numbers the ranged fetches, so a piece that arrives after its shard was dropped (and
    /// perhaps fetched again) is not taken for a piece of the newer fetch.
    fetches: u64,
    shutdown: bool,
}

/// A shard loading or loaded.
enum Slot {
    /// Fetched whole, not there yet.
    Loading,
    /// The whole shard.
    Ready(Arc<Chunks>),
    Failed(io::ErrorKind, Arc<str>),
    /// Fetched as ranges ([`Shared::pieces`]), each usable as soon as it is there and freed
    /// after the plan's last read of it; `held` bytes of the shard are not freed.
    Ranged {
        fetch: u64,
        pieces: Vec<Piece>,
        held: u64,
    },
}

enum Piece {
    Loading,
    Ready(Arc<Chunks>),
    Failed(io::ErrorKind, Arc<str>),
    /// Read as often as the plan said, and freed.
    Freed,
}

/// How a fetch that was just registered in a [`Slot`] is to be made.
#[derive(Clone, Copy)]
enum Fetch {
    Whole,
    Ranged(u64),
}

impl WebDataset {
    /// The shards matching `urls` (each a URL, a path or a brace pattern), listed from the
    /// index or by reading them. Fails on a bad URL, an unreadable index or shard, a shard
    /// missing from the index, a corrupt shard (naming the URL and member), or a
    /// `num_samples` that does not match.
    pub fn new<I, U>(urls: I, options: WebDatasetOptions) -> Result<Self>
    where
        I: IntoIterator<Item = U>,
        U: AsRef<str>,
    {
        let mut expanded = Vec::new();
        for u in urls {
            expanded
                .extend(expand_braces(u.as_ref()).map_err(|e| LoaderError::invalid("urls", e))?);
        }
        if expanded.is_empty() {
            return Err(LoaderError::invalid("urls", "no shard URLs given"));
        }
        for u in &expanded {
            Location::parse(u).map_err(|e| LoaderError::invalid("urls", e))?;
        }
        let labels = LabelSource::parse(&options.label_key)
            .map_err(|e| LoaderError::invalid("label_key", e))?;
        check_options(&options)?;
        let stores = Stores::new(options.store.clone());
        let cache = open_cache(&options)?;
        let (entries, decoding) = match read_index(&stores, &expanded, options.index.as_deref())? {
            Some(index) => {
                let decoding = Decoding::of(&index);
                let entries = shards_from_index(&expanded, index, options.index.as_deref())?;
                (entries, decoding)
            }
            None => (
                scan(&stores, cache.as_ref(), &expanded, &labels)?,
                Decoding::default(),
            ),
        };
        Self::assemble(entries, decoding, stores, cache, &options)
    }

    /// A dataset over the shards `index` describes (absolute URLs, as [`WebDataset::index`]
    /// gives them), without reading anything: how a process that has the listing already
    /// (a forked child) gets fetchers and an I/O runtime of its own. `options.index` and
    /// `label_key` play no part; `num_samples` is still checked.
    pub fn from_index(index: ShardIndex, options: WebDatasetOptions) -> Result<Self> {
        check_options(&options)?;
        index
            .check()
            .map_err(|e| LoaderError::invalid("index", e))?;
        if index.shards.is_empty() {
            return Err(LoaderError::invalid("index", "no shards listed"));
        }
        for s in &index.shards {
            Location::parse(&s.url).map_err(|e| LoaderError::invalid("index", e))?;
        }
        let stores = Stores::new(options.store.clone());
        let cache = open_cache(&options)?;
        let decoding = Decoding::of(&index);
        Self::assemble(index.shards, decoding, stores, cache, &options)
    }

    /// The dataset over `entries`, its fetcher threads started.
    fn assemble(
        entries: Vec<ShardEntry>,
        decoding: Decoding,
        stores: Stores,
        cache: Option<ShardCache>,
        options: &WebDatasetOptions,
    ) -> Result<Self> {
        let mut urls = Vec::with_capacity(entries.len());
        let mut starts = vec![0];
        let mut samples = Vec::new();
        let mut shard_bytes = Vec::new();
        let mut pieces = Vec::new();
        for entry in entries {
            let remote = matches!(Location::parse(&entry.url), Ok(Location::Remote { .. }));
            pieces.push(if remote {
                split_points(&entry.samples, options.range_bytes)
            } else {
                vec![0]
            });
            urls.push(entry.url);
            shard_bytes.push(entry.bytes);
            samples.extend(entry.samples);
            starts.push(samples.len());
        }
        if let Some(n) = options.num_samples {
            if n != samples.len() {
                return Err(LoaderError::invalid(
                    "num_samples",
                    format!(
                        "{n} given, but the {} shards hold {} samples",
                        urls.len(),
                        samples.len()
                    ),
                ));
            }
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(FetchState {
                remaining: vec![0; urls.len()],
                planned: vec![0; urls.len()],
                ..FetchState::default()
            }),
            urls,
            starts,
            shard_bytes,
            pieces,
            samples,
            exif_transpose: decoding.exif_transpose,
            grayscale: decoding.grayscale,
            shuffle_buffer: options.shuffle_buffer,
            shuffle_initial: options.shuffle_initial,
            read_ahead_shards: options.read_ahead_shards,
            read_ahead_bytes: options.read_ahead_bytes,
            requests: Semaphore::new(options.max_requests),
            stores,
            cache,
            changed: Condvar::new(),
            profiler: Mutex::new(None),
        });
        let threads = options.read_ahead_shards.min(8);
        let mut fetchers = Vec::with_capacity(threads);
        for i in 0..threads {
            let shared = Arc::clone(&shared);
            let handle = std::thread::Builder::new()
                .name(format!("ferroloader-fetch-{i}"))
                .spawn(move || shared.fetch_ahead())
                .map_err(|e| LoaderError::Io {
                    path: PathBuf::from("<fetcher thread>"),
                    source: e,
                })?;
            fetchers.push(handle);
        }
        Ok(WebDataset { shared, fetchers })
    }

    /// The shard URLs, braces expanded, in dataset order.
    pub fn urls(&self) -> &[String] {
        &self.shared.urls
    }

    /// Samples per shard, in dataset order.
    pub fn shard_sizes(&self) -> Vec<usize> {
        self.shared.starts.windows(2).map(|w| w[1] - w[0]).collect()
    }

    /// The WebDataset key of sample `index`.
    pub fn key(&self, index: usize) -> &str {
        &self.shared.samples[index].key
    }

    /// Whether the index says images are to be turned upright per their EXIF orientation
    /// ([`ShardIndex::exif_transpose`]).
    pub fn exif_transpose(&self) -> bool {
        self.shared.exif_transpose
    }

    /// Whether the index says images are decoded to one channel ([`ShardIndex::grayscale`]).
    pub fn grayscale(&self) -> bool {
        self.shared.grayscale
    }

    /// The shard index describing these shards (what the index file would hold for them).
    pub fn index(&self) -> ShardIndex {
        let s = &self.shared;
        let index = ShardIndex::new(
            (0..s.urls.len())
                .map(|i| ShardEntry {
                    url: s.urls[i].clone(),
                    num_samples: (s.starts[i + 1] - s.starts[i]) as u64,
                    bytes: s.shard_bytes[i],
                    samples: s.samples[s.starts[i]..s.starts[i + 1]].to_vec(),
                })
                .collect(),
        );
        ShardIndex {
            exif_transpose: s.exif_transpose,
            grayscale: s.grayscale,
            ..index
        }
    }

    fn shard_of(&self, index: usize) -> usize {
        // starts[0] = 0 <= index: the partition point is at least 1.
        self.shared.starts.partition_point(|&s| s <= index) - 1
    }
}

impl Drop for WebDataset {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.changed.notify_all();
        for handle in self.fetchers.drain(..) {
            // A fetcher that panicked has nothing left to clean up.
            let _ = handle.join();
        }
    }
}

impl std::fmt::Debug for WebDataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebDataset")
            .field("shards", &self.shared.urls.len())
            .field("samples", &self.shared.samples.len())
            .finish_non_exhaustive()
    }
}

impl Source for WebDataset {
    fn len(&self) -> usize {
        self.shared.samples.len()
    }

    fn read<'a>(&'a self, index: usize, buf: &'a mut Vec<u8>) -> io::Result<&'a [u8]> {
        let shard = self.shard_of(index);
        let sample = &self.shared.samples[index];
        let url = &self.shared.urls[shard];
        buf.clear();
        match self.shared.bytes_for_read(shard, index)? {
            Some((bytes, base)) => {
                if !copy_member(&bytes, base, sample, buf) {
                    return Err(truncated(sample, base, bytes.len()));
                }
            }
            None => {
                let data = self
                    .shared
                    .stores
                    .get_range(url, sample.offset..sample.offset + sample.size)?;
                if data.len() as u64 != sample.size {
                    return Err(truncated(sample, sample.offset, data.len()));
                }
                buf.extend_from_slice(&data);
            }
        }
        Ok(buf)
    }

    fn label(&self, index: usize) -> i64 {
        self.shared.samples[index].label
    }

    fn path(&self, index: usize) -> Cow<'_, Path> {
        let shard = self.shard_of(index);
        Cow::Owned(PathBuf::from(format!(
            "{}#{}",
            self.shared.urls[shard], self.shared.samples[index].key
        )))
    }

    fn epoch_order(&self, epoch: u64, sampler: &Sampler) -> Option<Vec<usize>> {
        Some(epoch_order(
            &self.shared.starts,
            OrderParams {
                shuffle: sampler.shuffle(),
                seed: sampler.seed(),
                epoch,
                shard: sampler.shard(),
                shuffle_buffer: self.shared.shuffle_buffer,
                shuffle_initial: self.shared.shuffle_initial,
            },
        ))
    }

    fn attach_profiler(&self, profiler: &Profiler) {
        let id = profiler.register_op(SHARD_READ).ok();
        let mut slot = self
            .shared
            .profiler
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *slot = id.map(|id| (profiler.clone(), id));
    }

    fn epoch_plan(&self, plan: &[usize]) {
        let shards = self.shared.urls.len();
        let mut remaining = vec![0usize; shards];
        let mut queue = VecDeque::new();
        for &index in plan {
            let shard = self.shard_of(index);
            if remaining[shard] == 0 {
                queue.push_back(shard);
            }
            remaining[shard] += 1;
        }
        let mut piece_reads: Vec<Vec<usize>> = self
            .shared
            .pieces
            .iter()
            .map(|p| {
                if p.len() > 1 {
                    vec![0; p.len()]
                } else {
                    Vec::new()
                }
            })
            .collect();
        for &index in plan {
            let shard = self.shard_of(index);
            if let Some(count) = piece_reads[shard].get_mut(self.shared.piece_of(shard, index)) {
                *count += 1;
            }
        }
        let mut state = self.shared.lock();
        state.planned.clone_from(&remaining);
        state.remaining = remaining;
        state.piece_reads = piece_reads;
        state.queue = queue;
        // Shards loaded for an earlier plan stay only if this one reads them.
        let stale: Vec<usize> = state
            .slots
            .iter()
            .filter(|(s, slot)| state.remaining[**s] == 0 && !matches!(slot, Slot::Loading))
            .map(|(s, _)| *s)
            .collect();
        for s in stale {
            self.shared.release(&mut state, s);
        }
        drop(state);
        self.shared.changed.notify_all();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, FetchState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The fetcher threads' loop: the next shard of the queue whenever the window has room.
    fn fetch_ahead(&self) {
        let mut state = self.lock();
        loop {
            if state.shutdown {
                return;
            }
            let Some((shard, fetch)) = self.next_to_fetch(&mut state) else {
                state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
                continue;
            };
            drop(state);
            self.run_fetch(shard, fetch);
            state = self.lock();
        }
    }

    /// Pops the queue's next shard when the window has room for it, and registers its fetch.
    fn next_to_fetch(&self, state: &mut FetchState) -> Option<(usize, Fetch)> {
        while let Some(&shard) = state.queue.front() {
            if state.slots.contains_key(&shard) || state.remaining[shard] == 0 {
                state.queue.pop_front();
                continue;
            }
            let size = self.shard_bytes[shard];
            // Shards no read has used yet: those kept by samples lingering in the shuffle
            // buffer count in `held_bytes` only (see the module doc).
            let ahead = state
                .slots
                .keys()
                .filter(|&&s| state.remaining[s] == state.planned[s])
                .count();
            let fits = ahead < self.read_ahead_shards
                && state.held_bytes.saturating_add(size) <= self.read_ahead_bytes;
            if !fits && !state.slots.is_empty() {
                return None;
            }
            state.queue.pop_front();
            return Some((shard, self.start_fetch(state, shard)));
        }
        None
    }

    /// Registers a fetch of `shard` (which has no slot): ranged when it has several pieces
    /// and the cache does not hold it, whole otherwise.
    fn start_fetch(&self, state: &mut FetchState, shard: usize) -> Fetch {
        state.held_bytes += self.shard_bytes[shard];
        let pieces = self.pieces[shard].len();
        let cached = || {
            self.cache
                .as_ref()
                .is_some_and(|c| c.contains(&self.urls[shard]))
        };
        if pieces < 2 || cached() {
            state.slots.insert(shard, Slot::Loading);
            return Fetch::Whole;
        }
        state.fetches += 1;
        let fetch = state.fetches;
        let pieces = (0..pieces).map(|_| Piece::Loading).collect();
        let held = self.shard_bytes[shard];
        state.slots.insert(
            shard,
            Slot::Ranged {
                fetch,
                pieces,
                held,
            },
        );
        Fetch::Ranged(fetch)
    }

    /// Makes a fetch that [`Shared::start_fetch`] registered and records its outcome.
    fn run_fetch(&self, shard: usize, fetch: Fetch) {
        match fetch {
            Fetch::Whole => {
                let result = self.fetch_shard(shard);
                let mut state = self.lock();
                self.settle(&mut state, shard, result);
            }
            Fetch::Ranged(id) => self.fetch_pieces(shard, id),
        }
    }

    /// Makes a fetch a reader had to start: a ranged one in the background (falling back to
    /// this thread when no thread can be started), a whole one here.
    fn run_fetch_for_reader(self: &Arc<Self>, shard: usize, fetch: Fetch) {
        if let Fetch::Ranged(_) = fetch {
            let shared = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name("ferroloader-fetch-now".to_owned())
                .spawn(move || shared.run_fetch(shard, fetch));
            if spawned.is_ok() {
                return;
            }
        }
        self.run_fetch(shard, fetch);
    }

    /// Records a finished whole-shard fetch and wakes whoever waits for it.
    fn settle(&self, state: &mut FetchState, shard: usize, result: io::Result<Chunks>) {
        let slot = match result {
            Ok(bytes) if bytes.len() as u64 == self.shard_bytes[shard] => {
                Slot::Ready(Arc::new(bytes))
            }
            Ok(bytes) => Slot::Failed(
                io::ErrorKind::InvalidData,
                format!(
                    "the shard has {} bytes, its index says {} (truncated or replaced since \
                     the index was written)",
                    bytes.len(),
                    self.shard_bytes[shard]
                )
                .into(),
            ),
            Err(e) => Slot::Failed(e.kind(), e.to_string().into()),
        };
        if state.remaining[shard] == 0 {
            // Nobody in the current plan reads it any more.
            self.release(state, shard);
        } else {
            state.slots.insert(shard, slot);
        }
        self.changed.notify_all();
    }

    /// Drops shard `shard`'s slot and its share of the window.
    fn release(&self, state: &mut FetchState, shard: usize) {
        let held = match state.slots.remove(&shard) {
            Some(Slot::Ranged { held, .. }) => held,
            Some(_) => self.shard_bytes[shard],
            None => 0,
        };
        state.held_bytes = state.held_bytes.saturating_sub(held);
    }

    /// The piece of shard `shard` holding sample `index`.
    fn piece_of(&self, shard: usize, index: usize) -> usize {
        let offset = self.samples[index].offset;
        // pieces[shard][0] is 0 <= offset: the partition point is at least 1.
        self.pieces[shard].partition_point(|&start| start <= offset) - 1
    }

    /// The loader's profiler and the `shard_read` op, when attached and recording.
    fn profiler(&self) -> Option<(Profiler, OpId)> {
        self.profiler
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .filter(|(p, _)| p.is_enabled())
    }

    /// The whole shard, recorded as a `shard_read` span with its bytes when profiling.
    fn fetch_shard(&self, shard: usize) -> io::Result<Chunks> {
        let profiler = self.profiler();
        let start = now_ns();
        let result = self.fetch_shard_bytes(shard);
        if let Some((profiler, op)) = profiler {
            let bytes = result.as_ref().map_or(0, |b| b.len() as u64);
            profiler.io_span(op, start, now_ns(), bytes);
        }
        result
    }

    /// The whole shard, from the cache when it holds it; a fetched remote shard is cached.
    fn fetch_shard_bytes(&self, shard: usize) -> io::Result<Chunks> {
        let url = &self.urls[shard];
        let cacheable = matches!(Location::parse(url), Ok(Location::Remote { .. }));
        if let (Some(cache), true) = (&self.cache, cacheable) {
            if let Some(bytes) = cache.get(url) {
                if bytes.len() as u64 == self.shard_bytes[shard] {
                    return Ok(Chunks::from(bytes));
                }
            }
            let bytes = self.stores.get(url)?;
            if bytes.len() as u64 == self.shard_bytes[shard] {
                // A cache that cannot be written only costs a fetch next epoch.
                let _ = cache.put(url, &bytes);
            }
            return Ok(Chunks::from(bytes));
        }
        self.stores.get_chunks(url)
    }

    /// Byte range of piece `piece` of shard `shard`.
    fn piece_range(&self, shard: usize, piece: usize) -> Range<u64> {
        let starts = &self.pieces[shard];
        let end = starts
            .get(piece + 1)
            .copied()
            .unwrap_or(self.shard_bytes[shard]);
        starts[piece]..end
    }

    /// Fetches the pieces of ranged fetch `id` of shard `shard` concurrently, each settled
    /// (and its waiters woken) as it arrives, one `shard_read` span per request. With a
    /// cache, a shard whose pieces all arrived is cached whole.
    fn fetch_pieces(&self, shard: usize, id: u64) {
        let url = &self.urls[shard];
        let ranges: Vec<Range<u64>> = (0..self.pieces[shard].len())
            .map(|p| self.piece_range(shard, p))
            .collect();
        let profiler = self.profiler();
        let mut kept: Option<Vec<Option<Arc<Chunks>>>> =
            self.cache.as_ref().map(|_| vec![None; ranges.len()]);
        let fetched =
            self.stores
                .get_ranges_each(url, &ranges, &self.requests, |p, result, start| {
                    if let Some((profiler, op)) = &profiler {
                        let bytes = result.as_ref().map_or(0, |b| b.len() as u64);
                        profiler.io_span(*op, start, now_ns(), bytes);
                    }
                    let piece = match result {
                        Ok(bytes) => {
                            let bytes = Arc::new(bytes);
                            if let Some(kept) = &mut kept {
                                kept[p] = Some(Arc::clone(&bytes));
                            }
                            Piece::Ready(bytes)
                        }
                        Err(e) => Piece::Failed(e.kind(), piece_error(&ranges[p], &e).into()),
                    };
                    self.settle_piece(shard, id, p, piece);
                });
        if let Err(e) = fetched {
            for (p, range) in ranges.iter().enumerate() {
                let piece = Piece::Failed(e.kind(), piece_error(range, &e).into());
                self.settle_piece(shard, id, p, piece);
            }
        }
        if let (Some(cache), Some(kept)) = (&self.cache, kept) {
            if let Some(parts) = kept.into_iter().collect::<Option<Vec<_>>>() {
                let mut whole = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
                for part in &parts {
                    part.copy_range_to(0..part.len(), &mut whole);
                }
                // A cache that cannot be written only costs a fetch next epoch.
                let _ = cache.put(url, &whole);
            }
        }
        let mut state = self.lock();
        let ours =
            matches!(state.slots.get(&shard), Some(Slot::Ranged { fetch, .. }) if *fetch == id);
        if ours && state.remaining[shard] == 0 {
            // Nobody in the current plan reads it any more.
            self.release(&mut state, shard);
            drop(state);
            self.changed.notify_all();
        }
    }

    /// Records piece `piece` of ranged fetch `id` (unless the shard was dropped since) and
    /// wakes whoever waits for it.
    fn settle_piece(&self, shard: usize, id: u64, piece: usize, outcome: Piece) {
        let mut state = self.lock();
        if let Some(Slot::Ranged { fetch, pieces, .. }) = state.slots.get_mut(&shard) {
            if *fetch == id && matches!(pieces[piece], Piece::Loading) {
                pieces[piece] = outcome;
            }
        }
        drop(state);
        self.changed.notify_all();
    }

    /// The bytes holding sample `index` of shard `shard` for one read of the current plan,
    /// with the shard offset where they begin (the whole shard, or the piece holding the
    /// sample): waiting for them, or starting the shard's fetch when no fetcher has (a whole
    /// shard is fetched here; a ranged one on a thread of its own, so this read waits for its
    /// piece only). `None` when the plan does not read this shard, or its piece was freed
    /// after the reads the plan announced (the caller reads the sample alone).
    fn bytes_for_read(
        self: &Arc<Self>,
        shard: usize,
        index: usize,
    ) -> io::Result<Option<(Arc<Chunks>, u64)>> {
        let piece = self.piece_of(shard, index);
        let mut state = self.lock();
        let outcome = loop {
            match state.slots.get(&shard) {
                Some(Slot::Ready(bytes)) => break Ok(Some((Arc::clone(bytes), 0))),
                Some(Slot::Failed(kind, message)) => {
                    break Err(io::Error::new(*kind, message.to_string()))
                }
                Some(Slot::Ranged { pieces, .. }) => match &pieces[piece] {
                    Piece::Ready(bytes) => {
                        break Ok(Some((Arc::clone(bytes), self.pieces[shard][piece])))
                    }
                    Piece::Freed => break Ok(None),
                    Piece::Failed(kind, message) => {
                        break Err(io::Error::new(*kind, message.to_string()))
                    }
                    Piece::Loading => {
                        state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
                    }
                },
                Some(Slot::Loading) => {
                    state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
                }
                None if state.remaining[shard] == 0 => return Ok(None),
                None => {
                    let fetch = self.start_fetch(&mut state, shard);
                    drop(state);
                    self.run_fetch_for_reader(shard, fetch);
                    state = self.lock();
                }
            }
        };
        // The shard's first read takes it out of the read-ahead window.
        let first_read = state.remaining[shard] == state.planned[shard];
        state.remaining[shard] = state.remaining[shard].saturating_sub(1);
        if state.remaining[shard] == 0 {
            // Pieces still in flight find no slot and are dropped when they arrive.
            self.release(&mut state, shard);
            drop(state);
            self.changed.notify_all();
        } else if self.count_piece_read(&mut state, shard, piece) || first_read {
            drop(state);
            self.changed.notify_all();
        }
        outcome
    }

    /// Counts one read of piece `piece` of a ranged shard and frees the piece after the
    /// plan's last read of it; true when that made room in the window.
    fn count_piece_read(&self, state: &mut FetchState, shard: usize, piece: usize) -> bool {
        let FetchState {
            piece_reads,
            slots,
            held_bytes,
            ..
        } = state;
        let Some(count) = piece_reads.get_mut(shard).and_then(|p| p.get_mut(piece)) else {
            return false;
        };
        *count = count.saturating_sub(1);
        if *count > 0 {
            return false;
        }
        let Some(Slot::Ranged { pieces, held, .. }) = slots.get_mut(&shard) else {
            return false;
        };
        if !matches!(pieces[piece], Piece::Ready(_) | Piece::Failed(..)) {
            return false;
        }
        pieces[piece] = Piece::Freed;
        let range = self.piece_range(shard, piece);
        let size = range.end - range.start;
        *held = held.saturating_sub(size);
        *held_bytes = held_bytes.saturating_sub(size);
        true
    }
}

/// Where the pieces of a shard with `samples` start when no piece should exceed `range_bytes`:
/// at sample offsets that no sample's bytes straddle, so each sample lies in exactly one piece
/// (whatever order the samples are listed in). Always starts with 0; `[0]` alone when
/// `range_bytes` is 0 or the shard fits in one piece.
fn split_points(samples: &[SampleEntry], range_bytes: u64) -> Vec<u64> {
    let mut starts = vec![0];
    if range_bytes == 0 {
        return starts;
    }
    let mut spans: Vec<(u64, u64)> = samples
        .iter()
        .map(|s| (s.offset, s.offset.saturating_add(s.size)))
        .collect();
    spans.sort_unstable();
    // The furthest any sample seen so far reaches: a cut before it would split that sample.
    let mut reach = 0;
    let mut piece_start = 0;
    // A cut before the first sample would make a piece of headers alone: a wasted request.
    let mut piece_empty = true;
    for (offset, end) in spans {
        if !piece_empty && end - piece_start > range_bytes && offset >= reach {
            starts.push(offset);
            piece_start = offset;
        }
        piece_empty = false;
        reach = reach.max(end);
    }
    starts
}

fn piece_error(range: &Range<u64>, e: &io::Error) -> String {
    format!("bytes {}..{} of the shard: {e}", range.start, range.end)
}

fn check_options(options: &WebDatasetOptions) -> Result<()> {
    if options.read_ahead_shards == 0 {
        return Err(LoaderError::invalid(
            "read_ahead_shards",
            "must be at least 1",
        ));
    }
    if options.max_requests == 0 {
        return Err(LoaderError::invalid("max_requests", "must be at least 1"));
    }
    Ok(())
}

fn open_cache(options: &WebDatasetOptions) -> Result<Option<ShardCache>> {
    match &options.cache_dir {
        Some(dir) => ShardCache::open(dir, options.cache_limit_bytes)
            .map(Some)
            .map_err(|e| LoaderError::Io {
                path: dir.clone(),
                source: e,
            }),
        None => Ok(None),
    }
}

/// Appends the image member's bytes to `out` from `bytes`, which hold the shard from offset
/// `base` on; false when they do not hold all of it.
fn copy_member(bytes: &Chunks, base: u64, sample: &SampleEntry, out: &mut Vec<u8>) -> bool {
    member_range(base, sample).is_some_and(|range| bytes.copy_range_to(range, out))
}

/// Where the image member lies in bytes that hold the shard from offset `base` on.
fn member_range(base: u64, sample: &SampleEntry) -> Option<Range<usize>> {
    let start = usize::try_from(sample.offset.checked_sub(base)?).ok()?;
    Some(start..start.checked_add(usize::try_from(sample.size).ok()?)?)
}

/// `have` bytes from shard offset `base` on do not hold the sample's member.
fn truncated(sample: &SampleEntry, base: u64, have: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "the image member of sample {:?} ({} bytes at offset {}) is cut short: the shard \
             has {} bytes",
            sample.key,
            sample.size,
            sample.offset,
            base + have as u64
        ),
    )
}

fn url_error(url: &str, source: io::Error) -> LoaderError {
    LoaderError::Io {
        path: PathBuf::from(url),
        source,
    }
}

/// The index named by `index`, or the default one next to the first shard when it exists.
fn read_index(stores: &Stores, urls: &[String], index: Option<&str>) -> Result<Option<ShardIndex>> {
    let (url, explicit) = match index {
        Some(u) => (u.to_owned(), true),
        None => (join(&urls[0], DEFAULT_INDEX_NAME), false),
    };
    let text = match stores.get(&url) {
        Ok(text) => text,
        Err(e) if !explicit && e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(url_error(&url, e)),
    };
    ShardIndex::from_json(&text)
        .map(Some)
        .map_err(|e| url_error(&url, io::Error::new(io::ErrorKind::InvalidData, e)))
}

/// The index's entries for `urls`, in that order, with those URLs.
fn shards_from_index(
    urls: &[String],
    index: ShardIndex,
    index_url: Option<&str>,
) -> Result<Vec<ShardEntry>> {
    let index_url = index_url.map_or_else(|| join(&urls[0], DEFAULT_INDEX_NAME), str::to_owned);
    let mut by_url: HashMap<String, ShardEntry> = index
        .shards
        .into_iter()
        .map(|s| (join(&index_url, &s.url), s))
        .collect();
    urls.iter()
        .map(|u| {
            let mut entry = by_url.remove(u).ok_or_else(|| {
                LoaderError::invalid("index", format!("{index_url} does not list the shard {u}"))
            })?;
            // As given (the index's may be relative to it).
            entry.url.clone_from(u);
            Ok(entry)
        })
        .collect()
}

/// Reads every shard once to list its samples (and fills the cache on the way).
fn scan(
    stores: &Stores,
    cache: Option<&ShardCache>,
    urls: &[String],
    labels: &LabelSource,
) -> Result<Vec<ShardEntry>> {
    urls.iter()
        .map(|url| {
            let remote = matches!(Location::parse(url), Ok(Location::Remote { .. }));
            let cached = cache.filter(|_| remote).and_then(|c| c.get(url));
            let bytes = match cached {
                Some(bytes) => bytes,
                None => {
                    let bytes = stores.get(url).map_err(|e| url_error(url, e))?;
                    if let (Some(cache), true) = (cache, remote) {
                        let _ = cache.put(url, &bytes);
                    }
                    bytes
                }
            };
            let samples = read_samples(&bytes, labels).map_err(|e| url_error(url, e))?;
            Ok(ShardEntry {
                url: url.clone(),
                num_samples: samples.len() as u64,
                bytes: bytes.len() as u64,
                samples,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(offset: u64, size: u64) -> SampleEntry {
        SampleEntry {
            key: format!("k{offset}"),
            offset,
            size,
            label: 0,
        }
    }

    /// Every sample lies inside one piece, and a piece exceeds `limit` only when it holds a
    /// single sample that does.
    fn check(samples: &[SampleEntry], limit: u64, bytes: u64) -> Vec<u64> {
        let starts = split_points(samples, limit);
        check_sizes(samples, &starts, limit, bytes);
        starts
    }

    fn check_sizes(samples: &[SampleEntry], starts: &[u64], limit: u64, bytes: u64) {
        assert_eq!(starts[0], 0);
        assert!(starts.windows(2).all(|w| w[0] < w[1]), "{starts:?}");
        check_whole(samples, starts);
        for (p, &start) in starts.iter().enumerate() {
            let end = starts.get(p + 1).copied().unwrap_or(bytes);
            let inside: Vec<_> = samples
                .iter()
                .filter(|s| s.offset >= start && s.offset < end)
                .collect();
            let data_end = inside
                .iter()
                .map(|s| s.offset + s.size)
                .max()
                .unwrap_or(start);
            assert!(
                limit == 0 || data_end - start <= limit || inside.len() == 1,
                "piece {p} of {starts:?} holds {} bytes of samples",
                data_end - start
            );
        }
    }

    /// Each sample lies inside one piece.
    fn check_whole(samples: &[SampleEntry], starts: &[u64]) {
        let piece_of = |at: u64| starts.partition_point(|&s| s <= at) - 1;
        for s in samples {
            let last = s.offset + s.size.max(1) - 1;
            assert_eq!(piece_of(s.offset), piece_of(last), "{s:?} in {starts:?}");
        }
    }

    #[test]
    fn pieces_are_cut_between_samples_within_the_limit() {
        // Tar-like: 512-byte headers before each member.
        let samples: Vec<_> = (0..10).map(|i| sample(512 + i * 1536, 1000)).collect();
        let bytes = 512 + 10 * 1536;
        assert_eq!(check(&samples, 0, bytes), vec![0]);
        assert_eq!(check(&samples, 1 << 20, bytes), vec![0]);
        let starts = check(&samples, 4000, bytes);
        assert_eq!(
            starts,
            vec![
                0,
                512 + 2 * 1536,
                512 + 4 * 1536,
                512 + 6 * 1536,
                512 + 8 * 1536
            ]
        );
        // A sample larger than the limit is a piece of its own.
        let big = vec![sample(512, 100), sample(1024, 10_000), sample(11_264, 100)];
        assert_eq!(check(&big, 4000, 12_000), vec![0, 1024, 11_264]);
        // Listed out of order, or overlapping (a corrupt index): still never split.
        let odd = vec![
            sample(5000, 100),
            sample(512, 6000),
            sample(9000, 100),
            sample(2000, 10),
        ];
        let starts = split_points(&odd, 1000);
        check_whole(&odd, &starts);
        // The sample at 512 overlaps those at 2000 and 5000: no cut between them.
        assert_eq!(starts, vec![0, 9000]);
    }
}
