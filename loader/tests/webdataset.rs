//! `WebDataset` end to end: shards written from the loader folder fixture (an ImageFolder) and
//! read from local disk, `file://`, a plain HTTP server and a real S3-compatible server
//! (s3s-fs, started per test on a free port): pixels equal to the folder loader's, two ranks
//! covering every sample once, the same batches whatever the worker count and after a resume
//! (whole shards and shards fetched as byte ranges alike), and the failure paths (server gone
//! mid-epoch, corrupt or truncated shards, a wrong `num_samples`) with the URL and member named.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use ferroloader_loader::shards::index::{ShardEntry, ShardIndex};
use ferroloader_loader::shards::members::{read_samples, LabelSource};
use ferroloader_loader::shards::store::{StoreOptions, Stores};
use ferroloader_loader::shards::{WebDataset, WebDatasetOptions};
use ferroloader_loader::transforms::spec::PipelineSpec;
use ferroloader_loader::{
    BatchImages, ErrorPolicy, ImageFolder, ImagePipeline, Loader, LoaderOptions, ResumePoint,
    Shard, Source,
};

use crate::fixtures;

const PER_CLASS: usize = 5;
const PER_SHARD: usize = 7;

/// A small ImageFolder: the first `PER_CLASS` images of each class of the loader folder fixture.
fn small_folder(dir: &Path) -> ImageFolder {
    let src = fixtures::fixture_dir(
        "folder",
        "make loader-bench (it writes target/fixtures/folder)",
    );
    let mut classes: Vec<PathBuf> = fs::read_dir(&src)
        .expect("list")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    classes.sort();
    for class in &classes {
        let mut files: Vec<PathBuf> = fs::read_dir(class)
            .expect("list")
            .map(|e| e.expect("entry").path())
            .collect();
        files.sort();
        let out = dir.join(class.file_name().expect("name"));
        fs::create_dir_all(&out).expect("mkdir");
        for f in files.iter().take(PER_CLASS) {
            fs::copy(f, out.join(f.file_name().expect("name"))).expect("copy");
        }
    }
    ImageFolder::new(dir).expect("folder")
}

/// `class/stem` of a folder sample: the key its shard member gets.
fn folder_key(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).expect("under root");
    let rel = rel.with_extension("");
    rel.to_string_lossy().into_owned()
}

/// Writes the folder's samples as shards of `PER_SHARD` (`KEY.jpg` + `KEY.cls`, folder order)
/// into `dir`, with `index.json`; returns the shard file names.
fn write_shards(folder: &ImageFolder, dir: &Path) -> Vec<String> {
    fs::create_dir_all(dir).expect("mkdir");
    let mut names = Vec::new();
    let mut entries = Vec::new();
    for (n, chunk) in folder.samples().chunks(PER_SHARD).enumerate() {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, label) in chunk {
            let key = folder_key(folder.root(), path);
            let ext = path
                .extension()
                .expect("ext")
                .to_string_lossy()
                .to_lowercase();
            append(
                &mut builder,
                &format!("{key}.{ext}"),
                &fs::read(path).expect("read"),
            );
            append(
                &mut builder,
                &format!("{key}.cls"),
                label.to_string().as_bytes(),
            );
        }
        let bytes = builder.into_inner().expect("in memory");
        let name = format!("shard-{n:06}.tar");
        fs::write(dir.join(&name), &bytes).expect("write");
        let samples = read_samples(&bytes, &LabelSource::Cls).expect("valid shard");
        entries.push(ShardEntry {
            url: name.clone(),
            num_samples: samples.len() as u64,
            bytes: bytes.len() as u64,
            samples,
        });
        names.push(name);
    }
    fs::write(dir.join("index.json"), ShardIndex::new(entries).to_json()).expect("write");
    names
}

fn append(builder: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) {
    let mut header = tar::Header::new_ustar();
    header.set_size(data.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    builder
        .append_data(&mut header, name, data)
        .expect("in memory");
}

fn pipeline() -> ImagePipeline {
    ImagePipeline::new(PipelineSpec::imagenet_eval(40, 32)).expect("plans")
}

/// Key -> (label, pixels) of every sample an epoch delivers; fails on a repeated key.
fn by_key<S: Source + 'static>(
    loader: &Loader<S, ImagePipeline>,
    epoch: u64,
    key: impl Fn(&S, usize) -> String,
) -> BTreeMap<String, (i64, Vec<f32>)> {
    let mut out = BTreeMap::new();
    for batch in loader.epoch(epoch) {
        let batch = batch.expect("batch");
        let BatchImages::F32(images) = batch.images() else {
            panic!("f32 output")
        };
        let per = images.len() / batch.len();
        for (slot, &index) in batch.indices().iter().enumerate() {
            let k = key(loader.source(), index);
            let pixels = images[slot * per..(slot + 1) * per].to_vec();
            let old = out.insert(k.clone(), (batch.labels()[slot], pixels));
            assert!(old.is_none(), "{k} delivered twice");
        }
    }
    out
}

fn options() -> LoaderOptions {
    LoaderOptions::default().batch_size(4).num_workers(2)
}

#[test]
fn local_shards_in_two_ranks_equal_the_folder_pixel_for_pixel() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let folder = small_folder(&tmp.path().join("folder"));
    let root = folder.root().to_owned();
    let names = write_shards(&folder, &tmp.path().join("shards"));
    assert!(names.len() >= 5);
    let want = by_key(
        &Loader::new(folder, pipeline(), options()).expect("loader"),
        0,
        |s: &ImageFolder, i| folder_key(&root, &s.samples()[i].0),
    );
    let pattern = format!(
        "{}/shard-{{000000..{:06}}}.tar",
        tmp.path().join("shards").display(),
        names.len() - 1
    );
    let mut got = BTreeMap::new();
    for rank in 0..2 {
        let data = WebDataset::new([&pattern], WebDatasetOptions::default()).expect("dataset");
        let opts = options().shuffle(true).seed(5).shard(Shard::new(rank, 2));
        let loader = Loader::new(data, pipeline(), opts).expect("loader");
        let part = by_key(&loader, 3, |s: &WebDataset, i| s.key(i).to_owned());
        for (k, v) in part {
            assert!(got.insert(k.clone(), v).is_none(), "{k} read by both ranks");
        }
    }
    assert_eq!(got.len(), want.len(), "every sample once across the ranks");
    for (k, (label, pixels)) in &want {
        let (l, p) = &got[k];
        assert_eq!(l, label, "label of {k}");
        assert!(p == pixels, "pixels of {k} differ from the folder's");
    }
}

/// Every batch of an epoch: (indices, pixels).
fn batches(loader: &Loader<WebDataset, ImagePipeline>, epoch: u64) -> Vec<(Vec<usize>, Vec<u8>)> {
    loader
        .epoch(epoch)
        .map(|b| {
            let b = b.expect("batch");
            (b.indices().to_vec(), b.image_bytes().to_vec())
        })
        .collect()
}

#[test]
fn order_is_the_same_whatever_the_workers_and_after_a_resume() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let folder = small_folder(&tmp.path().join("folder"));
    let names = write_shards(&folder, &tmp.path().join("shards"));
    let urls: Vec<String> = names
        .iter()
        .map(|n| format!("file://{}", tmp.path().join("shards").join(n).display()))
        .collect();
    check_order(&urls, WebDatasetOptions::default());
}

#[test]
fn order_is_the_same_whatever_the_workers_and_after_a_resume_with_ranges() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_, names, server) = s3_fixture(tmp.path());
    let opts = WebDatasetOptions {
        store: server.store_options(2),
        range_bytes: 1,
        max_requests: 3,
        ..WebDatasetOptions::default()
    };
    check_order(&s3_urls(&names), opts);
}

/// Same batches with 0, 1 and 2 workers; a resume yields exactly the rest.
fn check_order(urls: &[String], base: WebDatasetOptions) {
    let make = |workers: usize| {
        let opts = WebDatasetOptions {
            shuffle_buffer: 6,
            read_ahead_shards: 2,
            ..base.clone()
        };
        let data = WebDataset::new(urls, opts).expect("dataset");
        let lo = options().num_workers(workers).shuffle(true).seed(11);
        Loader::new(data, pipeline(), lo.shard(Shard::new(1, 2))).expect("loader")
    };
    let reference = batches(&make(0), 2);
    assert!(reference.len() >= 4);
    for workers in [1, 2] {
        assert_eq!(batches(&make(workers), 2), reference, "{workers} workers");
    }
    // A resume from the middle yields exactly the rest.
    let loader = make(2);
    let mut iter = loader.epoch(2);
    for _ in 0..2 {
        iter.next().expect("a batch").expect("ok");
    }
    let point: ResumePoint = iter.resume_point().clone();
    drop(iter);
    let rest: Vec<(Vec<usize>, Vec<u8>)> = loader
        .resume(2, None, point)
        .expect("resume")
        .map(|b| {
            let b = b.expect("batch");
            (b.indices().to_vec(), b.image_bytes().to_vec())
        })
        .collect();
    assert_eq!(rest, reference[2..]);
    // Another epoch shuffles differently.
    assert_ne!(batches(&loader, 3), reference);
}

/// Called with (file, first byte asked for) before a request is answered: a test delays or
/// holds chosen requests with it.
type Hook = Arc<dyn Fn(&str, u64) + Send + Sync>;

/// Serves the files of `root` over HTTP/1.1 (GET, whole files or one byte range, one request
/// per connection) until dropped.
struct HttpServer {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl HttpServer {
    fn start(root: PathBuf) -> Self {
        Self::with_hook(root, Arc::new(|_: &str, _: u64| {}))
    }

    fn with_hook(root: PathBuf, hook: Hook) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (root, hook) = (root.clone(), Arc::clone(&hook));
                        thread::spawn(move || serve(stream, &root, &*hook));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        HttpServer { port, stop }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(stream: TcpStream, root: &Path, hook: &dyn Fn(&str, u64)) {
    stream.set_nonblocking(false).expect("blocking");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut request = String::new();
    if reader.read_line(&mut request).is_err() {
        return;
    }
    // `Range: bytes=FIRST-LAST` (inclusive), the only form object_store sends.
    let mut range: Option<(u64, u64)> = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).map_or(true, |n| n == 0) || line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(spec) = lower.trim().strip_prefix("range: bytes=") {
            let (first, last) = spec.split_once('-').expect("first-last");
            range = Some((first.parse().expect("first"), last.parse().expect("last")));
        }
    }
    let path = request
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .trim_start_matches('/')
        .to_owned();
    hook(&path, range.map_or(0, |r| r.0));
    let mut stream = stream;
    let _ = match (fs::read(root.join(&path)), range) {
        (Ok(body), None) => stream
            .write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                )
                .as_bytes(),
            )
            .and_then(|()| stream.write_all(&body)),
        (Ok(body), Some((first, last))) => {
            let part = &body[first as usize..=(last as usize).min(body.len() - 1)];
            stream
                .write_all(
                    format!(
                        "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\n\
                         Content-Range: bytes {first}-{}/{}\r\nConnection: close\r\n\r\n",
                        part.len(),
                        first + part.len() as u64 - 1,
                        body.len()
                    )
                    .as_bytes(),
                )
                .and_then(|()| stream.write_all(part))
        }
        (Err(_), _) => stream
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
    };
}

/// Every sample's bytes through `Source::read` in index order, announced as an epoch plan (so
/// through the read-ahead fetcher).
fn all_bytes(data: &WebDataset) -> Vec<Vec<u8>> {
    let plan: Vec<usize> = (0..data.len()).collect();
    data.epoch_plan(&plan);
    let mut buf = Vec::new();
    plan.iter()
        .map(|&i| data.read(i, &mut buf).expect("read").to_vec())
        .collect()
}

/// The folder's file bytes by key.
fn folder_bytes(folder: &ImageFolder) -> HashMap<String, Vec<u8>> {
    folder
        .samples()
        .iter()
        .map(|(p, _)| (folder_key(folder.root(), p), fs::read(p).expect("read")))
        .collect()
}

#[test]
fn file_urls_and_http_read_the_same_bytes_as_the_files() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let folder = small_folder(&tmp.path().join("folder"));
    let shards = tmp.path().join("shards");
    let names = write_shards(&folder, &shards);
    let want = folder_bytes(&folder);
    let server = HttpServer::start(shards.clone());
    let url_sets = [
        names
            .iter()
            .map(|n| format!("file://{}", shards.join(n).display()))
            .collect::<Vec<_>>(),
        names
            .iter()
            .map(|n| format!("http://127.0.0.1:{}/{n}", server.port))
            .collect(),
    ];
    for urls in url_sets {
        let data = WebDataset::new(&urls, WebDatasetOptions::default()).expect("dataset");
        assert_eq!(data.len(), want.len());
        for (i, bytes) in all_bytes(&data).iter().enumerate() {
            assert!(
                bytes == &want[data.key(i)],
                "{}: bytes of {}",
                urls[0],
                data.key(i)
            );
        }
        // Outside a plan a sample is read alone (a range request).
        let mut buf = Vec::new();
        let last = data.len() - 1;
        assert!(data.read(last, &mut buf).expect("read") == want[data.key(last)]);
    }
}

/// s3s-fs serving a temporary folder on a free port, stopped when dropped.
struct S3Server {
    child: Child,
    root: tempfile::TempDir,
    port: u16,
}

const BUCKET: &str = "shards";

impl S3Server {
    fn start() -> Self {
        let binary = std::env::var_os("FERROLOADER_S3S_FS")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools/bin/s3s-fs")
            });
        assert!(
            binary.is_file(),
            "no S3 test server at {}: run `make s3-server` (or set FERROLOADER_S3S_FS)",
            binary.display()
        );
        let root = tempfile::tempdir().expect("tempdir");
        fs::create_dir_all(root.path().join(BUCKET)).expect("bucket");
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        let child = Command::new(&binary)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", "AKTEST", "--secret-key", "SKTEST"])
            .arg(root.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start s3s-fs");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "s3s-fs did not listen on {port}");
            thread::sleep(Duration::from_millis(20));
        }
        S3Server { child, root, port }
    }

    fn store_options(&self, retries: usize) -> StoreOptions {
        StoreOptions {
            storage_options: vec![
                (
                    "aws_endpoint".into(),
                    format!("http://127.0.0.1:{}", self.port),
                ),
                ("aws_access_key_id".into(), "AKTEST".into()),
                ("aws_secret_access_key".into(), "SKTEST".into()),
                ("aws_region".into(), "us-east-1".into()),
                ("aws_allow_http".into(), "true".into()),
            ],
            retries,
            retry_backoff: Duration::from_millis(20),
        }
    }

    /// Uploads the shards and the index: the first shard with a real PUT through
    /// object_store, the rest by copying into the bucket's folder (s3s-fs serves files).
    fn upload(&self, shards: &Path, names: &[String]) {
        let stores = Stores::new(self.store_options(2));
        for (i, name) in names
            .iter()
            .chain(["index.json".to_owned()].iter())
            .enumerate()
        {
            let bytes = fs::read(shards.join(name)).expect("read");
            if i == 0 || name == "index.json" {
                stores
                    .put(&format!("s3://{BUCKET}/{name}"), bytes)
                    .expect("PUT to s3s-fs");
            } else {
                fs::write(self.root.path().join(BUCKET).join(name), bytes).expect("copy");
            }
        }
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn s3_urls(names: &[String]) -> Vec<String> {
    names.iter().map(|n| format!("s3://{BUCKET}/{n}")).collect()
}

/// Folder, shards on disk and the s3s-fs server holding them.
fn s3_fixture(tmp: &Path) -> (ImageFolder, Vec<String>, S3Server) {
    let folder = small_folder(&tmp.join("folder"));
    let shards = tmp.join("shards");
    let names = write_shards(&folder, &shards);
    let server = S3Server::start();
    server.upload(&shards, &names);
    (folder, names, server)
}

#[test]
fn s3_two_ranks_read_every_sample_once_with_the_files_bytes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (folder, names, server) = s3_fixture(tmp.path());
    let want = folder_bytes(&folder);
    let mut seen = HashMap::new();
    for rank in 0..2 {
        let opts = WebDatasetOptions {
            store: server.store_options(2),
            ..WebDatasetOptions::default()
        };
        let data = WebDataset::new(s3_urls(&names), opts).expect("dataset from s3");
        let lo = options().shuffle(true).seed(1).shard(Shard::new(rank, 2));
        let loader = Loader::new(data, pipeline(), lo).expect("loader");
        let order = loader.epoch_order(0);
        loader.source().epoch_plan(&order);
        let mut buf = Vec::new();
        for &i in &order {
            let key = loader.source().key(i).to_owned();
            let bytes = loader.source().read(i, &mut buf).expect("read");
            assert!(bytes == want[&key], "bytes of {key}");
            *seen.entry(key).or_insert(0) += 1;
        }
        // And through the loader's workers.
        assert_eq!(
            loader
                .epoch(0)
                .map(|b| b.expect("batch").len())
                .sum::<usize>(),
            order.len()
        );
    }
    assert_eq!(seen.len(), want.len());
    assert!(
        seen.values().all(|&n| n == 1),
        "a sample read twice: {seen:?}"
    );
}

#[test]
fn server_gone_mid_epoch_gives_an_error_naming_the_url_and_skip_reports_the_lost() {
    server_gone_mid_epoch(0);
}

#[test]
fn server_gone_mid_epoch_with_ranges() {
    server_gone_mid_epoch(1);
}

fn server_gone_mid_epoch(range_bytes: u64) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_, names, mut server) = s3_fixture(tmp.path());
    let make = |policy: ErrorPolicy, server: &S3Server| {
        let opts = WebDatasetOptions {
            store: server.store_options(1),
            read_ahead_shards: 1,
            read_ahead_bytes: 1,
            range_bytes,
            max_requests: 2,
            ..WebDatasetOptions::default()
        };
        let data = WebDataset::new(s3_urls(&names), opts).expect("dataset");
        let lo = LoaderOptions::default()
            .batch_size(PER_SHARD)
            .num_workers(1)
            .prefetch_batches(1)
            .on_error(policy);
        Loader::new(data, pipeline(), lo).expect("loader")
    };
    let raise = make(ErrorPolicy::Raise, &server);
    let skip = make(ErrorPolicy::Skip, &server);
    let mut iter = raise.epoch(0);
    iter.next().expect("first batch").expect("served");
    let mut skip_iter = skip.epoch(0);
    let first = skip_iter.next().expect("first batch").expect("served");
    assert_eq!(first.skipped(), 0);
    drop(first);
    server.stop();
    let err = iter
        .find_map(Result::err)
        .expect("an error once the server is gone");
    let msg = err.to_string();
    assert!(msg.contains(&format!("s3://{BUCKET}/shard-")), "{msg}");
    let delivered: usize = skip_iter
        .by_ref()
        .map(|b| b.expect("skip mode").len())
        .sum();
    let lost = skip_iter.skipped();
    assert!(!lost.is_empty(), "samples lost with the server");
    assert_eq!(delivered + lost.len() + PER_SHARD, skip.num_samples());
    for s in lost {
        let m = s.error.to_string();
        assert!(
            m.contains(&format!("s3://{BUCKET}/shard-")) && m.contains('#'),
            "{m}"
        );
    }
}

#[test]
fn corrupt_shards_name_the_url_and_member() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let folder = small_folder(&tmp.path().join("folder"));
    let shards = tmp.path().join("shards");
    let names = write_shards(&folder, &shards);
    let victim = shards.join(&names[1]);
    let bytes = fs::read(&victim).expect("read");
    // Cut inside the third image's data.
    let third = &read_samples(&bytes, &LabelSource::Cls).expect("intact")[2];
    let cut = third.offset as usize + 10;
    fs::write(&victim, &bytes[..cut]).expect("truncate");
    // Without the index the shard is read at construction: the member is named.
    let opts = WebDatasetOptions {
        index: None,
        ..WebDatasetOptions::default()
    };
    fs::rename(shards.join("index.json"), shards.join("saved.json")).expect("move");
    let err = WebDataset::new([victim.to_string_lossy()], opts).expect_err("corrupt");
    let msg = err.to_string();
    let member = format!("{}.jpg", third.key);
    assert!(msg.contains(&names[1]) && msg.contains(&member), "{msg}");
    // With the index the read fails, naming the URL and the sample.
    let opts = WebDatasetOptions {
        index: Some(shards.join("saved.json").to_string_lossy().into_owned()),
        ..WebDatasetOptions::default()
    };
    let urls: Vec<String> = names
        .iter()
        .map(|n| shards.join(n).to_string_lossy().into_owned())
        .collect();
    let data = WebDataset::new(&urls, opts).expect("index read");
    let loader = Loader::new(data, pipeline(), options()).expect("loader");
    let err = loader
        .epoch(0)
        .find_map(Result::err)
        .expect("the truncated shard fails");
    let msg = err.to_string();
    assert!(msg.contains(&names[1]) && msg.contains("bytes"), "{msg}");
}

#[test]
fn the_cache_serves_later_epochs_with_the_server_stopped() {
    cache_serves_later_epochs(WebDatasetOptions::default().range_bytes);
}

#[test]
fn the_cache_keeps_shards_fetched_as_ranges() {
    cache_serves_later_epochs(1);
}

fn cache_serves_later_epochs(range_bytes: u64) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (folder, names, mut server) = s3_fixture(tmp.path());
    let cache = tmp.path().join("cache");
    let opts = WebDatasetOptions {
        store: server.store_options(0),
        range_bytes,
        cache_dir: Some(cache.clone()),
        ..WebDatasetOptions::default()
    };
    let data = WebDataset::new(s3_urls(&names), opts).expect("dataset");
    let loader = Loader::new(data, pipeline(), options().shuffle(true)).expect("loader");
    let first: usize = loader.epoch(0).map(|b| b.expect("epoch 0").len()).sum();
    assert_eq!(first, folder.len());
    // A shard fetched as ranges is written to the cache once its last piece has been handed
    // to the samples that wait for it, so the epoch may end while the last write is under way
    // (a temporary file): wait for every shard to be in place before stopping the server.
    let cached = || {
        fs::read_dir(&cache)
            .expect("cache")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tar"))
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while cached() < names.len() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(cached(), names.len());
    server.stop();
    let second: usize = loader
        .epoch(1)
        .map(|b| b.expect("epoch 1 from the cache").len())
        .sum();
    assert_eq!(second, folder.len());
}

#[test]
fn without_an_index_the_shards_are_scanned_and_num_samples_checked() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let folder = small_folder(&tmp.path().join("folder"));
    let shards = tmp.path().join("shards");
    let names = write_shards(&folder, &shards);
    let with_index = WebDataset::new(
        [shards.join("shard-{000000..000005}.tar").to_string_lossy()],
        WebDatasetOptions::default(),
    );
    let with_index = with_index.expect("dataset");
    fs::remove_file(shards.join("index.json")).expect("remove");
    let urls: Vec<String> = names
        .iter()
        .map(|n| shards.join(n).to_string_lossy().into_owned())
        .collect();
    let scanned = WebDataset::new(&urls, WebDatasetOptions::default()).expect("scanned");
    assert_eq!(scanned.len(), folder.len());
    assert_eq!(
        scanned.index().shards[0].samples,
        with_index.index().shards[0].samples
    );
    let opts = WebDatasetOptions {
        num_samples: Some(folder.len() + 1),
        ..WebDatasetOptions::default()
    };
    let err = WebDataset::new(&urls, opts).expect_err("mismatch");
    let msg = err.to_string();
    assert!(
        msg.contains("num_samples") && msg.contains(&folder.len().to_string()),
        "{msg}"
    );
    let opts = WebDatasetOptions {
        num_samples: Some(folder.len()),
        ..WebDatasetOptions::default()
    };
    assert!(WebDataset::new(&urls, opts).is_ok());
}

#[test]
fn each_shard_request_is_an_io_span_with_its_bytes() {
    use ferroloader_loader::profiler::{Mode, Summary, IO};
    let tmp = tempfile::tempdir().expect("tempdir");
    let folder = small_folder(&tmp.path().join("folder"));
    let shards = tmp.path().join("shards");
    let names = write_shards(&folder, &shards);
    let urls: Vec<String> = names
        .iter()
        .map(|n| shards.join(n).to_string_lossy().into_owned())
        .collect();
    let data = WebDataset::new(&urls, WebDatasetOptions::default()).expect("dataset");
    let loader =
        Loader::new(data, pipeline(), options().profile_mode(Mode::Spans)).expect("loader");
    let delivered: usize = loader.epoch(0).map(|b| b.expect("batch").len()).sum();
    assert_eq!(delivered, folder.len());
    let profile = loader.profile();
    let reads: Vec<_> = profile.pipelines[0]
        .spans
        .iter()
        .filter(|s| s.op == "shard_read")
        .collect();
    assert_eq!(reads.len(), names.len(), "one span per shard request");
    let sizes: u64 = names
        .iter()
        .map(|n| fs::metadata(shards.join(n)).expect("size").len())
        .sum();
    assert!(reads.iter().all(|s| s.worker == IO && s.bytes.is_some()));
    assert_eq!(reads.iter().filter_map(|s| s.bytes).sum::<u64>(), sizes);
    let summary = Summary::from_profile(&profile);
    assert_eq!(summary.pipelines[0].io_bytes, sizes);
    assert!(
        summary.pipelines[0].op("shard_read").is_none(),
        "not counted as worker time"
    );
}

/// Pixels of every sample read from S3 as byte ranges (several pieces per shard, a few
/// requests in flight) equal those of whole-shard reads, and each range request is one
/// `shard_read` span whose bytes add up to the shards'.
#[test]
fn s3_ranges_give_the_same_pixels_as_whole_shards_one_span_per_request() {
    use ferroloader_loader::profiler::Mode;
    let tmp = tempfile::tempdir().expect("tempdir");
    let (folder, names, server) = s3_fixture(tmp.path());
    let make = |range_bytes: u64| {
        let opts = WebDatasetOptions {
            store: server.store_options(2),
            range_bytes,
            max_requests: 4,
            ..WebDatasetOptions::default()
        };
        let data = WebDataset::new(s3_urls(&names), opts).expect("dataset");
        let lo = options().shuffle(true).seed(3).profile_mode(Mode::Spans);
        Loader::new(data, pipeline(), lo).expect("loader")
    };
    let whole = make(0);
    let want = by_key(&whole, 1, |s: &WebDataset, i| s.key(i).to_owned());
    assert_eq!(want.len(), folder.len());
    let spans = |loader: &Loader<WebDataset, ImagePipeline>| -> Vec<u64> {
        let profile = loader.profile();
        profile.pipelines[0]
            .spans
            .iter()
            .filter(|s| s.op == "shard_read")
            .map(|s| s.bytes.expect("bytes"))
            .collect()
    };
    assert_eq!(spans(&whole).len(), names.len(), "one GET per shard");
    let shard_sizes: u64 = names
        .iter()
        .map(|n| {
            fs::metadata(tmp.path().join("shards").join(n))
                .expect("size")
                .len()
        })
        .sum();
    // About 3 samples a piece; 1 byte: every sample a piece of its own.
    let average = shard_sizes / folder.len() as u64;
    for range_bytes in [3 * average, 1] {
        let ranged = make(range_bytes);
        let got = by_key(&ranged, 1, |s: &WebDataset, i| s.key(i).to_owned());
        assert!(got == want, "pixels differ with range_bytes={range_bytes}");
        let reads = spans(&ranged);
        assert!(
            reads.len() > names.len(),
            "{} requests for {} shards with range_bytes={range_bytes}",
            reads.len(),
            names.len()
        );
        assert_eq!(
            reads.iter().sum::<u64>(),
            shard_sizes,
            "pieces cover the shards"
        );
        if range_bytes == 1 {
            assert_eq!(reads.len(), folder.len(), "one request per sample");
        }
    }
}

/// A shard truncated on the server after the index was written: with one piece per sample,
/// the samples whose bytes are gone fail, naming `url#key` (and are what skip mode reports),
/// while the samples before the cut are served.
#[test]
fn a_truncated_object_fails_exactly_the_samples_of_the_lost_ranges() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_, names, server) = s3_fixture(tmp.path());
    let stored = server.root.path().join(BUCKET).join(&names[1]);
    let bytes = fs::read(&stored).expect("read");
    let samples = read_samples(&bytes, &LabelSource::Cls).expect("intact");
    let cut = samples[4].offset as usize + 10;
    fs::write(&stored, &bytes[..cut]).expect("truncate");
    let lost_keys: Vec<&str> = samples[4..].iter().map(|s| s.key.as_str()).collect();
    let make = |policy: ErrorPolicy| {
        let opts = WebDatasetOptions {
            store: server.store_options(1),
            range_bytes: 1,
            ..WebDatasetOptions::default()
        };
        let data = WebDataset::new(s3_urls(&names), opts).expect("dataset");
        let lo = options().on_error(policy);
        Loader::new(data, pipeline(), lo).expect("loader")
    };
    let skip = make(ErrorPolicy::Skip);
    let mut iter = skip.epoch(0);
    let delivered: usize = iter.by_ref().map(|b| b.expect("skip mode").len()).sum();
    let mut lost: Vec<String> = iter
        .skipped()
        .iter()
        .map(|s| {
            let key = skip.source().key(s.index).to_owned();
            let m = s.error.to_string();
            let named = format!("s3://{BUCKET}/{}#{key}", names[1]);
            assert!(m.contains(&named) && m.contains("bytes"), "{m}");
            key
        })
        .collect();
    lost.sort();
    let mut want: Vec<String> = lost_keys.iter().map(|k| (*k).to_owned()).collect();
    want.sort();
    assert_eq!(lost, want, "exactly the samples past the cut");
    assert_eq!(delivered + lost.len(), skip.num_samples());
    // Raise mode: the first error names the shard and a lost sample.
    let raise = make(ErrorPolicy::Raise);
    let err = raise
        .epoch(0)
        .find_map(Result::err)
        .expect("the truncated shard fails");
    let msg = err.to_string();
    assert!(
        lost_keys
            .iter()
            .any(|k| msg.contains(&format!("{}#{k}", names[1]))),
        "{msg}"
    );
}

/// With ranges, a piece is freed after the plan's last read of it (so samples lingering in
/// the shuffle buffer do not hold their whole shard); a read the plan did not announce still
/// gets the right bytes, as a request of its own.
#[test]
fn a_read_of_a_freed_piece_fetches_the_sample_alone() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (folder, names, server) = s3_fixture(tmp.path());
    let want = folder_bytes(&folder);
    let opts = WebDatasetOptions {
        store: server.store_options(1),
        range_bytes: 1,
        read_ahead_shards: 1,
        ..WebDatasetOptions::default()
    };
    let data = WebDataset::new(s3_urls(&names), opts).expect("dataset");
    // Two shards' samples: the first shard's slot stays while the second is read, its
    // pieces freed one by one.
    let plan: Vec<usize> = (0..PER_SHARD - 1)
        .chain(PER_SHARD..PER_SHARD + 3)
        .chain([PER_SHARD - 1])
        .collect();
    data.epoch_plan(&plan);
    let mut buf = Vec::new();
    for (n, &i) in plan.iter().enumerate() {
        if n == PER_SHARD - 1 {
            // Sample 0 again, unannounced: its piece was freed, its shard is still held for
            // the plan's last read of it.
            assert!(data.read(0, &mut buf).expect("read again") == want[data.key(0)]);
        }
        assert!(data.read(i, &mut buf).expect("read") == want[data.key(i)]);
    }
    for i in [0, 1, PER_SHARD - 1, PER_SHARD, 2 * PER_SHARD] {
        assert!(
            data.read(i, &mut buf).expect("read outside the plan") == want[data.key(i)],
            "sample {i}"
        );
    }
}

/// Shards on a plain HTTP server (`hook` runs before each answer), the folder's bytes by key,
/// and the shard names, in a temporary folder.
fn http_fixture(
    tmp: &Path,
    hook: impl Fn(&[String], &str, u64) + Send + Sync + 'static,
) -> (HashMap<String, Vec<u8>>, Vec<String>, HttpServer) {
    let folder = small_folder(&tmp.join("folder"));
    let shards = tmp.join("shards");
    let names = write_shards(&folder, &shards);
    let hook_names = names.clone();
    let server = HttpServer::with_hook(
        shards,
        Arc::new(move |path: &str, first: u64| hook(&hook_names, path, first)),
    );
    (folder_bytes(&folder), names, server)
}

fn http_urls(server: &HttpServer, names: &[String]) -> Vec<String> {
    names
        .iter()
        .map(|n| format!("http://127.0.0.1:{}/{n}", server.port))
        .collect()
}

/// A reader that must start a ranged shard's fetch itself (the read-ahead window is full) gets
/// its sample when that sample's piece arrives, not after the shard's last piece.
#[test]
fn a_reader_starting_a_ranged_fetch_waits_for_its_own_piece_only() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // The second shard's pieces after its first are held until the gate opens.
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let hold = Arc::clone(&gate);
    let (want, names, server) = http_fixture(tmp.path(), move |names, path, first| {
        if path == names[1] && first > 0 {
            let (open, opened) = &*hold;
            let guard = open.lock().expect("gate");
            drop(opened.wait_while(guard, |open| !*open).expect("gate"));
        }
    });
    // A one-byte window: the fetcher fetches a shard only while nothing is held.
    let opts = WebDatasetOptions {
        range_bytes: 1,
        read_ahead_bytes: 1,
        ..WebDatasetOptions::default()
    };
    let data = Arc::new(WebDataset::new(http_urls(&server, &names), opts).expect("dataset"));
    // The first shard is held until the plan's last read of it, which comes after a read of
    // the second shard's first sample: that read starts the second shard.
    let plan: Vec<usize> = [0, PER_SHARD]
        .into_iter()
        .chain(1..PER_SHARD)
        .chain(PER_SHARD + 1..2 * PER_SHARD)
        .collect();
    data.epoch_plan(&plan);
    let (send, receive) = std::sync::mpsc::channel();
    let reader = Arc::clone(&data);
    let reads = thread::spawn(move || {
        let mut buf = Vec::new();
        for &i in &plan {
            let bytes = reader.read(i, &mut buf).map(<[u8]>::to_vec);
            if send.send((i, bytes)).is_err() {
                return;
            }
        }
    });
    let mut got = Vec::new();
    let mut timed_out = false;
    while got.len() < 2 {
        match receive.recv_timeout(Duration::from_secs(20)) {
            Ok(read) => got.push(read),
            Err(_) => {
                timed_out = true;
                break;
            }
        }
    }
    // Open the gate whatever happened, so the reader thread ends.
    *gate.0.lock().expect("gate") = true;
    gate.1.notify_all();
    assert!(
        !timed_out,
        "the read of the second shard's first sample waited for the held pieces"
    );
    got.extend(receive.iter());
    reads.join().expect("reader");
    assert_eq!(got.len(), 2 * PER_SHARD);
    for (i, bytes) in got {
        assert!(bytes.expect("read") == want[data.key(i)], "bytes of {i}");
    }
}

/// A shuffle buffer reads a shard's last samples long after its first: the shard (or the
/// pieces) those samples hold must not keep the next shards from being fetched ahead.
#[test]
fn shards_held_by_lingering_samples_leave_the_read_ahead_alone() {
    for range_bytes in [0, 1] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let requested = Arc::new(Mutex::new(HashSet::<String>::new()));
        let seen = Arc::clone(&requested);
        let (want, names, server) = http_fixture(tmp.path(), move |_, path, _| {
            seen.lock().expect("requests").insert(path.to_owned());
        });
        let opts = WebDatasetOptions {
            range_bytes,
            read_ahead_shards: 2,
            ..WebDatasetOptions::default()
        };
        let data = WebDataset::new(http_urls(&server, &names), opts).expect("dataset");
        // The first shard but its last sample, the next two shards, that last sample.
        let plan: Vec<usize> = (0..PER_SHARD - 1)
            .chain(PER_SHARD..3 * PER_SHARD)
            .chain([PER_SHARD - 1])
            .collect();
        data.epoch_plan(&plan);
        let mut buf = Vec::new();
        let (lingering, rest) = plan.split_at(PER_SHARD - 1);
        for &i in lingering {
            assert!(data.read(i, &mut buf).expect("read") == want[data.key(i)]);
        }
        // Two shards ahead of the reads: the second and the third, with the first still held.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let seen = requested.lock().expect("requests").clone();
            if seen.contains(&names[1]) && seen.contains(&names[2]) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "range_bytes {range_bytes}: only {seen:?} requested"
            );
            thread::sleep(Duration::from_millis(10));
        }
        for &i in rest {
            assert!(data.read(i, &mut buf).expect("read") == want[data.key(i)]);
        }
    }
}
