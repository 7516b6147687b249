//! Reading whole shards and byte ranges from local disk or object storage.
//!
//! Local paths and `file://` URLs are read with plain file I/O; everything else goes through
//! the `object_store` crate on a small tokio runtime owned here, one store per bucket (or
//! host), built from the environment the way the cloud SDKs read it (`AWS_ENDPOINT_URL`,
//! `AWS_ACCESS_KEY_ID`, `GOOGLE_SERVICE_ACCOUNT`, `AZURE_STORAGE_ACCOUNT_NAME`, ..., and for
//! S3 the AWS profile's files below those variables) with explicit options on top. Must not
//! cache, parse or order anything: it only moves bytes, and retries what may succeed when
//! tried again.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::http::HttpBuilder;
use object_store::path::Path as StorePath;
use object_store::{
    BackoffConfig, ClientConfigKey, GetOptions, ObjectStore, ObjectStoreExt, RetryConfig,
};
use tokio::sync::Semaphore;

use ferroloader_profiler::now_ns;
use futures_util::stream::{FuturesUnordered, StreamExt, TryStreamExt};

use super::aws_profile;
use super::url::Location;

/// How stores are reached and how hard to try.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Store configuration on top of the environment's (for S3, the AWS profile's below the
    /// `AWS_*` variables: [`aws_profile`]), by `object_store`'s key names (`aws_endpoint`,
    /// `aws_access_key_id`, `aws_allow_http`, `google_service_account`, ...). Default: none.
    pub storage_options: Vec<(String, String)>,
    /// Retries of a failed request (connection refused, a 5xx, a body cut short) before the
    /// error is final. Default: 5.
    pub retries: usize,
    /// The first retry's wait; each further one doubles it, up to 10 s. Default: 200 ms.
    pub retry_backoff: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            storage_options: Vec::new(),
            retries: 5,
            retry_backoff: Duration::from_millis(200),
        }
    }
}

const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Bytes as a response delivered them: its body's chunks, kept apart. Joined into one buffer,
/// every byte would be copied once more (into a fresh buffer the kernel faults in page by
/// page); a reader copies the range it needs out of the chunks instead.
#[derive(Debug, Default)]
pub struct Chunks {
    parts: Vec<Bytes>,
    /// `ends[i]`: the offset just past part `i` (strictly increasing: no part is empty).
    ends: Vec<usize>,
}

impl Chunks {
    /// The number of bytes.
    pub fn len(&self) -> usize {
        self.ends.last().copied().unwrap_or(0)
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    fn push(&mut self, part: Bytes) {
        if !part.is_empty() {
            self.ends.push(self.len() + part.len());
            self.parts.push(part);
        }
    }

    /// Appends bytes `range` to `out`; false, with `out` unchanged, when the range does not
    /// lie within these bytes.
    pub fn copy_range_to(&self, range: Range<usize>, out: &mut Vec<u8>) -> bool {
        if range.start > range.end || range.end > self.len() {
            return false;
        }
        out.reserve(range.len());
        let mut part = self.ends.partition_point(|&end| end <= range.start);
        let mut at = range.start;
        while at < range.end {
            let bytes = &self.parts[part];
            let part_start = self.ends[part] - bytes.len();
            let until = (range.end - part_start).min(bytes.len());
            out.extend_from_slice(&bytes[at - part_start..until]);
            at = part_start + until;
            part += 1;
        }
        true
    }

    /// The bytes in one buffer (without a copy when they came as one part that nothing else
    /// shares).
    pub fn into_vec(self) -> Vec<u8> {
        if self.parts.len() == 1 {
            return self
                .parts
                .into_iter()
                .map(Vec::from)
                .next()
                .unwrap_or_default();
        }
        let mut out = Vec::new();
        self.copy_range_to(0..self.len(), &mut out);
        out
    }
}

impl From<Vec<u8>> for Chunks {
    fn from(bytes: Vec<u8>) -> Self {
        let mut chunks = Chunks::default();
        chunks.push(Bytes::from(bytes));
        chunks
    }
}

/// A URL resolved: a local file, or a path in an object store.
enum Target {
    Local(std::path::PathBuf),
    Remote(Arc<dyn ObjectStore>, StorePath),
}

/// Reads shards wherever they live; shared by the fetcher threads and the workers.
pub struct Stores {
    options: StoreOptions,
    runtime: OnceLock<io::Result<tokio::runtime::Runtime>>,
    stores: Mutex<HashMap<(String, String), Arc<dyn ObjectStore>>>,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Stores {
    /// Stores configured by `options`; nothing is connected until the first read.
    pub fn new(options: StoreOptions) -> Self {
        Stores {
            options,
            runtime: OnceLock::new(),
            stores: Mutex::new(HashMap::new()),
        }
    }

    /// The whole object at `url`. Errors keep their kind (a missing object is `NotFound`) and
    /// leave naming the URL to the caller.
    pub fn get(&self, url: &str) -> io::Result<Vec<u8>> {
        self.fetch(url, None).map(Chunks::into_vec)
    }

    /// The whole object at `url` as it arrived, like [`Stores::get`].
    pub fn get_chunks(&self, url: &str) -> io::Result<Chunks> {
        self.fetch(url, None)
    }

    /// Bytes `range` of the object at `url`.
    pub fn get_range(&self, url: &str, range: Range<u64>) -> io::Result<Vec<u8>> {
        self.fetch(url, Some(range)).map(Chunks::into_vec)
    }

    /// Fetches `ranges` of the object at `url` concurrently, each as its own request (retried
    /// like [`Stores::get`]), with at most `limit`'s permits in flight (a limit shared by every
    /// caller that passes the same semaphore). `done(i, result, started_ns)` is called on this
    /// thread as each range `i` arrives or fails, in completion order; `started_ns` is when its
    /// request started ([`now_ns`]'s clock, after waiting for a permit). A range that comes
    /// back shorter than asked is an `UnexpectedEof` error. Returns when every range is done;
    /// fails without calling `done` only when the URL or its store cannot be set up. A local
    /// file's ranges are read one after another.
    pub fn get_ranges_each(
        &self,
        url: &str,
        ranges: &[Range<u64>],
        limit: &Semaphore,
        mut done: impl FnMut(usize, io::Result<Chunks>, u64),
    ) -> io::Result<()> {
        let (store, path) = match self.target(url)? {
            Target::Local(path) => {
                for (i, r) in ranges.iter().enumerate() {
                    let start = now_ns();
                    done(
                        i,
                        read_local(&path, Some(r.clone())).map(Chunks::from),
                        start,
                    );
                }
                return Ok(());
            }
            Target::Remote(store, path) => (store, path),
        };
        let runtime = self.runtime()?;
        runtime.block_on(async {
            let mut pending: FuturesUnordered<_> = ranges
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let (store, path) = (&store, &path);
                    async move {
                        // A closed semaphore cannot happen (nobody closes it); fetching without
                        // a permit would then be the only sensible reading of it anyway.
                        let _permit = limit.acquire().await.ok();
                        let start = now_ns();
                        let result = self.get_task(store, path, Some(r.clone())).await;
                        (i, result, start)
                    }
                })
                .collect();
            while let Some((i, result, start)) = pending.next().await {
                done(i, result, start);
            }
        });
        Ok(())
    }

    /// [`get_with_retries`] as a task of the runtime: the body then streams on the runtime's
    /// threads, beside the connection's task, and only the whole body crosses to the caller's
    /// thread (awaited on the caller's thread, every chunk of it would wake that thread).
    async fn get_task(
        &self,
        store: &Arc<dyn ObjectStore>,
        path: &StorePath,
        range: Option<Range<u64>>,
    ) -> io::Result<Chunks> {
        let task = get_with_retries(
            Arc::clone(store),
            path.clone(),
            range,
            self.options.retries,
            self.options.retry_backoff,
        );
        tokio::spawn(task)
            .await
            .unwrap_or_else(|e| Err(io::Error::other(format!("the request's task failed: {e}"))))
    }

    /// Writes `data` to `url` (used by tests and tools that upload shards).
    pub fn put(&self, url: &str, data: Vec<u8>) -> io::Result<()> {
        match self.target(url)? {
            Target::Local(path) => std::fs::write(path, data),
            Target::Remote(store, path) => self
                .runtime()?
                .block_on(store.put(&path, data.into()))
                .map(|_| ())
                .map_err(io::Error::from),
        }
    }

    fn fetch(&self, url: &str, range: Option<Range<u64>>) -> io::Result<Chunks> {
        match self.target(url)? {
            Target::Local(path) => read_local(&path, range).map(Chunks::from),
            Target::Remote(store, path) => self
                .runtime()?
                .block_on(self.get_task(&store, &path, range)),
        }
    }

    /// Where `url` is read from: a local file, or a path in its (cached) store.
    fn target(&self, url: &str) -> io::Result<Target> {
        Ok(match parse(url)? {
            Location::Local(path) => Target::Local(path),
            Location::Remote {
                scheme,
                authority,
                path,
            } => Target::Remote(
                self.store(&scheme, &authority)?,
                StorePath::from(path.as_str()),
            ),
        })
    }

    fn runtime(&self) -> io::Result<&tokio::runtime::Runtime> {
        let runtime = self.runtime.get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("ferroloader-io")
                .enable_all()
                .build()
        });
        runtime
            .as_ref()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot start the I/O runtime: {e}")))
    }

    fn store(&self, scheme: &str, authority: &str) -> io::Result<Arc<dyn ObjectStore>> {
        let key = (scheme.to_owned(), authority.to_owned());
        let mut stores = self.stores.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(store) = stores.get(&key) {
            return Ok(Arc::clone(store));
        }
        let store = self.build(scheme, authority).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{scheme}://{authority}: cannot set up the store: {e}"),
            )
        })?;
        stores.insert(key, Arc::clone(&store));
        Ok(store)
    }

    fn build(&self, scheme: &str, authority: &str) -> object_store::Result<Arc<dyn ObjectStore>> {
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: self.options.retry_backoff,
                max_backoff: MAX_BACKOFF,
                base: 2.0,
            },
            max_retries: self.options.retries,
            retry_timeout: Duration::from_secs(120),
        };
        let options = &self.options.storage_options;
        let bad_key = |k: &str, e: object_store::Error| object_store::Error::Generic {
            store: "options",
            source: format!("storage option {k:?}: {e}").into(),
        };
        Ok(match scheme {
            "s3" => {
                let mut b = AmazonS3Builder::from_env().with_bucket_name(authority);
                // Keys of the caller's own: a profile's are not wanted, nor an error about them.
                let own_keys = options.iter().any(|(k, _)| {
                    matches!(
                        k.parse(),
                        Ok(object_store::aws::AmazonS3ConfigKey::AccessKeyId)
                    )
                });
                let env = |var: &str| std::env::var(var).ok();
                let profile = aws_profile::s3_settings(&env, own_keys).map_err(|e| {
                    object_store::Error::Generic {
                        store: "S3",
                        source: e.into(),
                    }
                })?;
                for (k, v) in profile.iter().chain(options) {
                    b = b.with_config(k.parse().map_err(|e| bad_key(k, e))?, v);
                }
                Arc::new(b.with_retry(retry).build()?)
            }
            "gs" => {
                let mut b = GoogleCloudStorageBuilder::from_env().with_bucket_name(authority);
                for (k, v) in options {
                    b = b.with_config(k.parse().map_err(|e| bad_key(k, e))?, v);
                }
                Arc::new(b.with_retry(retry).build()?)
            }
            "az" => {
                let mut b = MicrosoftAzureBuilder::from_env().with_container_name(authority);
                for (k, v) in options {
                    b = b.with_config(k.parse().map_err(|e| bad_key(k, e))?, v);
                }
                Arc::new(b.with_retry(retry).build()?)
            }
            _ => {
                // http(s): only the client options apply (timeouts, proxies, ...); an
                // http:// URL is its own permission to use plain HTTP.
                let mut b = HttpBuilder::new()
                    .with_url(format!("{scheme}://{authority}"))
                    .with_config(ClientConfigKey::AllowHttp, (scheme == "http").to_string());
                for (k, v) in options {
                    if let Ok(key) = k.parse() {
                        b = b.with_config(key, v);
                    }
                }
                Arc::new(b.with_retry(retry).build()?)
            }
        })
    }
}

/// One GET of `range` (the whole object when `None`). object_store retries the request
/// itself; this adds retries of failures while the body streams (a connection cut
/// mid-shard). A range that comes back shorter than asked is an `UnexpectedEof` error.
async fn get_with_retries(
    store: Arc<dyn ObjectStore>,
    path: StorePath,
    range: Option<Range<u64>>,
    retries: usize,
    backoff: Duration,
) -> io::Result<Chunks> {
    let mut wait = backoff;
    let mut attempt = 0;
    loop {
        let options = GetOptions::default().with_range(range.clone());
        let result = match store.get_opts(&path, options).await {
            Ok(got) => got
                .into_stream()
                .try_fold(Chunks::default(), |mut chunks, part| async move {
                    chunks.push(part);
                    Ok(chunks)
                })
                .await
                .map_err(Outcome::Body),
            Err(e) => Err(Outcome::Request(e)),
        };
        match result {
            Ok(bytes) => match &range {
                Some(r) if bytes.len() as u64 != r.end - r.start => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "bytes {}..{} came back as {} bytes",
                            r.start,
                            r.end,
                            bytes.len()
                        ),
                    ))
                }
                _ => return Ok(bytes),
            },
            Err(Outcome::Body(_)) if attempt < retries => {
                attempt += 1;
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(MAX_BACKOFF);
            }
            Err(Outcome::Body(e) | Outcome::Request(e)) => return Err(e.into()),
        }
    }
}

enum Outcome {
    Request(object_store::Error),
    Body(object_store::Error),
}

fn parse(url: &str) -> io::Result<Location> {
    Location::parse(url).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

fn read_local(path: &std::path::Path, range: Option<Range<u64>>) -> io::Result<Vec<u8>> {
    let mut file = File::open(path)?;
    match range {
        None => {
            let mut out = Vec::new();
            file.read_to_end(&mut out)?;
            Ok(out)
        }
        Some(r) => {
            let len = usize::try_from(r.end.saturating_sub(r.start))
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "range too large"))?;
            let mut out = vec![0; len];
            file.seek(SeekFrom::Start(r.start))?;
            file.read_exact(&mut out)?;
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(parts: &[&[u8]]) -> Chunks {
        let mut chunks = Chunks::default();
        for part in parts {
            chunks.push(Bytes::copy_from_slice(part));
        }
        chunks
    }

    #[test]
    fn a_range_is_copied_across_the_parts_it_spans() {
        let c = chunks(&[b"abc", b"", b"defg", b"h", b"ijk"]);
        let whole = b"abcdefghijk";
        assert_eq!(c.len(), whole.len());
        for start in 0..=whole.len() {
            for end in start..=whole.len() {
                let mut out = b"<".to_vec();
                assert!(c.copy_range_to(start..end, &mut out), "{start}..{end}");
                assert_eq!(&out[1..], &whole[start..end], "{start}..{end}");
            }
        }
        assert_eq!(c.into_vec(), whole);
    }

    #[test]
    fn a_range_outside_the_bytes_is_refused_and_copies_nothing() {
        let c = chunks(&[b"abc", b"de"]);
        let mut out = Vec::new();
        assert!(!c.copy_range_to(3..6, &mut out));
        assert!(!c.copy_range_to(6..6, &mut out));
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = 4..2;
        assert!(!c.copy_range_to(backwards, &mut out));
        assert!(out.is_empty());
        let empty = Chunks::default();
        assert!(empty.is_empty() && empty.copy_range_to(0..0, &mut out));
        assert!(empty.into_vec().is_empty());
    }

    #[test]
    fn one_part_becomes_a_vec_without_a_copy() {
        let bytes = vec![7u8; 1000];
        let at = bytes.as_ptr();
        let v = Chunks::from(bytes).into_vec();
        assert_eq!(v.as_ptr(), at);
    }
}
