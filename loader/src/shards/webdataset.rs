//! [`WebDataset`]: tar shards as a [`Source`], with a read-ahead fetcher.
//!
//! At construction the samples are listed, from the index or by reading every shard once.
//! Each epoch's order comes from [`order::epoch_order`]; when the loader announces the reads
//! of an epoch ([`Source::epoch_plan`]), fetcher threads fetch whole shards in the order the
//! plan first needs them, at most `read_ahead_shards` shards and `read_ahead_bytes` bytes
//! ahead, and a shard's bytes are freed once the plan's last read of it is done. A worker that
//! needs a shard nobody is fetching yet fetches it itself (so the read-ahead bound can never
//! stall the epoch), and a read outside the plan is one range request for that sample alone.
//! Must not decode images or hold more than the read-ahead window plus the shards still
//! being read.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use ferroloader_profiler::{now_ns, OpId, Profiler};

use super::cache::ShardCache;
use super::index::{SampleEntry, ShardEntry, ShardIndex, DEFAULT_INDEX_NAME};
use super::members::{read_samples, LabelSource};
use super::order::{epoch_order, OrderParams};
use super::store::{StoreOptions, Stores};
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
    /// Shards fetched ahead of the one being read (also the number of fetcher threads, up to
    /// 8). Default: 4.
    pub read_ahead_shards: usize,
    /// Bytes of shards fetched ahead; one shard is always allowed. Default: 1 GiB.
    pub read_ahead_bytes: u64,
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
            read_ahead_shards: 4,
            read_ahead_bytes: 1 << 30,
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

/// What the workers and the fetcher threads share.
struct Shared {
    urls: Vec<String>,
    /// Shard `i` holds samples `starts[i]..starts[i + 1]`.
    starts: Vec<usize>,
    /// Each shard's size in bytes.
    shard_bytes: Vec<u64>,
    samples: Vec<SampleEntry>,
    shuffle_buffer: usize,
    read_ahead_shards: usize,
    read_ahead_bytes: u64,
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
    slots: HashMap<usize, Slot>,
    /// Bytes of shards loading or loaded.
    held_bytes: u64,
    shutdown: bool,
}

enum Slot {
    Loading,
    Ready(Arc<Vec<u8>>),
    Failed(io::ErrorKind, Arc<str>),
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
        if options.read_ahead_shards == 0 {
            return Err(LoaderError::invalid(
                "read_ahead_shards",
                "must be at least 1",
            ));
        }
        let stores = Stores::new(options.store.clone());
        let cache = match &options.cache_dir {
            Some(dir) => Some(
                ShardCache::open(dir, options.cache_limit_bytes).map_err(|e| LoaderError::Io {
                    path: dir.clone(),
                    source: e,
                })?,
            ),
            None => None,
        };
        let entries = match read_index(&stores, &expanded, options.index.as_deref())? {
            Some(index) => shards_from_index(&expanded, index, options.index.as_deref())?,
            None => scan(&stores, cache.as_ref(), &expanded, &labels)?,
        };
        let mut starts = vec![0];
        let mut samples = Vec::new();
        let mut shard_bytes = Vec::new();
        for entry in entries {
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
                        expanded.len(),
                        samples.len()
                    ),
                ));
            }
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(FetchState {
                remaining: vec![0; expanded.len()],
                ..FetchState::default()
            }),
            urls: expanded,
            starts,
            shard_bytes,
            samples,
            shuffle_buffer: options.shuffle_buffer,
            read_ahead_shards: options.read_ahead_shards,
            read_ahead_bytes: options.read_ahead_bytes,
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

    /// The shard index describing these shards (what the index file would hold for them).
    pub fn index(&self) -> ShardIndex {
        let s = &self.shared;
        ShardIndex::new(
            (0..s.urls.len())
                .map(|i| ShardEntry {
                    url: s.urls[i].clone(),
                    num_samples: (s.starts[i + 1] - s.starts[i]) as u64,
                    bytes: s.shard_bytes[i],
                    samples: s.samples[s.starts[i]..s.starts[i + 1]].to_vec(),
                })
                .collect(),
        )
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
        match self.shared.shard_bytes_for_read(shard)? {
            Some(bytes) => {
                let data = member(&bytes, sample).ok_or_else(|| truncated(sample, bytes.len()))?;
                buf.extend_from_slice(data);
            }
            None => {
                let data = self
                    .shared
                    .stores
                    .get_range(url, sample.offset..sample.offset + sample.size)?;
                if data.len() as u64 != sample.size {
                    return Err(truncated(sample, data.len()));
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
        let mut state = self.shared.lock();
        state.remaining = remaining;
        state.queue = queue;
        // Shards loaded for an earlier plan stay only if this one reads them.
        let stale: Vec<usize> = state
            .slots
            .iter()
            .filter(|(s, slot)| state.remaining[**s] == 0 && !matches!(slot, Slot::Loading))
            .map(|(s, _)| *s)
            .collect();
        for s in stale {
            state.slots.remove(&s);
            state.held_bytes = state.held_bytes.saturating_sub(self.shared.shard_bytes[s]);
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
            let Some(shard) = self.next_to_fetch(&mut state) else {
                state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
                continue;
            };
            drop(state);
            let result = self.fetch_shard(shard);
            state = self.lock();
            self.settle(&mut state, shard, result);
        }
    }

    /// Pops the queue's next shard when the window has room for it, and marks it loading.
    fn next_to_fetch(&self, state: &mut FetchState) -> Option<usize> {
        while let Some(&shard) = state.queue.front() {
            if state.slots.contains_key(&shard) || state.remaining[shard] == 0 {
                state.queue.pop_front();
                continue;
            }
            let size = self.shard_bytes[shard];
            let held = state.slots.len();
            let fits = held < self.read_ahead_shards
                && state.held_bytes.saturating_add(size) <= self.read_ahead_bytes;
            if !fits && held > 0 {
                return None;
            }
            state.queue.pop_front();
            state.slots.insert(shard, Slot::Loading);
            state.held_bytes += size;
            return Some(shard);
        }
        None
    }

    /// Records a finished fetch and wakes whoever waits for it.
    fn settle(&self, state: &mut FetchState, shard: usize, result: io::Result<Vec<u8>>) {
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
            state.slots.remove(&shard);
            state.held_bytes = state.held_bytes.saturating_sub(self.shard_bytes[shard]);
        } else {
            state.slots.insert(shard, slot);
        }
        self.changed.notify_all();
    }

    /// The whole shard, recorded as a `shard_read` span with its bytes when profiling.
    fn fetch_shard(&self, shard: usize) -> io::Result<Vec<u8>> {
        let profiler = self
            .profiler
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .filter(|(p, _)| p.is_enabled());
        let start = now_ns();
        let result = self.fetch_shard_bytes(shard);
        if let Some((profiler, op)) = profiler {
            let bytes = result.as_ref().map_or(0, |b| b.len() as u64);
            profiler.io_span(op, start, now_ns(), bytes);
        }
        result
    }

    /// The whole shard, from the cache when it holds it; a fetched remote shard is cached.
    fn fetch_shard_bytes(&self, shard: usize) -> io::Result<Vec<u8>> {
        let url = &self.urls[shard];
        let cacheable = matches!(Location::parse(url), Ok(Location::Remote { .. }));
        if let (Some(cache), true) = (&self.cache, cacheable) {
            if let Some(bytes) = cache.get(url) {
                if bytes.len() as u64 == self.shard_bytes[shard] {
                    return Ok(bytes);
                }
            }
            let bytes = self.stores.get(url)?;
            if bytes.len() as u64 == self.shard_bytes[shard] {
                // A cache that cannot be written only costs a fetch next epoch.
                let _ = cache.put(url, &bytes);
            }
            return Ok(bytes);
        }
        self.stores.get(url)
    }

    /// The bytes of shard `shard` for one read of the current plan (waiting for them, or
    /// fetching them here when no fetcher has started on them), or `None` when the plan does
    /// not read this shard (the caller reads the sample alone).
    fn shard_bytes_for_read(&self, shard: usize) -> io::Result<Option<Arc<Vec<u8>>>> {
        let mut state = self.lock();
        let outcome = loop {
            match state.slots.get(&shard) {
                Some(Slot::Ready(bytes)) => break Ok(Arc::clone(bytes)),
                Some(Slot::Failed(kind, message)) => {
                    break Err(io::Error::new(*kind, message.to_string()))
                }
                Some(Slot::Loading) => {
                    state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
                }
                None if state.remaining[shard] == 0 => return Ok(None),
                None => {
                    state.slots.insert(shard, Slot::Loading);
                    state.held_bytes += self.shard_bytes[shard];
                    drop(state);
                    let result = self.fetch_shard(shard);
                    state = self.lock();
                    self.settle(&mut state, shard, result);
                }
            }
        };
        state.remaining[shard] = state.remaining[shard].saturating_sub(1);
        if state.remaining[shard] == 0 {
            state.slots.remove(&shard);
            state.held_bytes = state.held_bytes.saturating_sub(self.shard_bytes[shard]);
            drop(state);
            self.changed.notify_all();
        }
        outcome.map(Some)
    }
}

/// The image member's bytes inside a shard.
fn member<'a>(shard: &'a [u8], sample: &SampleEntry) -> Option<&'a [u8]> {
    let start = usize::try_from(sample.offset).ok()?;
    let end = start.checked_add(usize::try_from(sample.size).ok()?)?;
    shard.get(start..end)
}

fn truncated(sample: &SampleEntry, have: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "the image member of sample {:?} ({} bytes at offset {}) is cut short: the shard \
             has {have} bytes",
            sample.key, sample.size, sample.offset
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

/// The index's entries for `urls`, in that order.
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
            by_url.remove(u).ok_or_else(|| {
                LoaderError::invalid("index", format!("{index_url} does not list the shard {u}"))
            })
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
