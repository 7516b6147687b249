//! Writing a dataset as tar shards in the WebDataset layout, with an index that locates every
//! image inside its shard, so a cluster can stream the dataset from object storage.
//!
//! Layout (agreed with the shard reader): `DST/shard-000000.tar`, `shard-000001.tar`, ... are
//! POSIX tar files (ustar headers). Each sample is two adjacent members: `KEY.EXT`, the source
//! file's bytes unchanged (EXT: its extension, lowercased), then `KEY.cls`, the label in ASCII
//! decimal. KEY is the sample's position in the written order, zero-padded, then `_` and the
//! source's file stem with every character outside `[A-Za-z0-9_-]` replaced by `_`: a KEY has no
//! dot, since WebDataset splits key and extension at the first dot of a member's name.
//!
//! Samples go in the source's order (an [`ImageFolder`](crate::ImageFolder)'s is
//! torchvision's), or, with [`ShardOptions::shuffle`], in the order the loader's
//! [`Sampler`] gives epoch 0 with that seed. Shuffling once at write time matters for
//! streaming: a reader shuffles shards and then samples within a bounded buffer only, so
//! shards written in class order would hand it long runs of one class.
//!
//! A shard closes before the sample that would take it past [`ShardOptions::shard_size`] bytes
//! (headers, padding and the end-of-archive blocks counted) or past
//! [`ShardOptions::max_samples_per_shard`]; a sample larger than `shard_size` by itself gets a
//! shard of its own. Once every shard is written, `DST/index.json` (see [`INDEX`]) lists each
//! shard's samples with the offset and size of the image member's data inside the tar, so one
//! range request reads one sample; it is written through a temporary file and a rename.
//!
//! Resumable: a shard is written as `shard-N.tar.partial`, synced, renamed, and only then
//! recorded in `DST/shard-manifest.jsonl` (see [`MANIFEST`]: the settings and a hash of the
//! source list on the first line, then one line per finished shard with its samples and their
//! source files). A rerun with the same settings and source list keeps every recorded shard
//! whose file is still whole and writes the rest; other settings or another source list are
//! refused. Cancelling ([`JobProgress::cancel`]) stops between samples and leaves the shard in
//! progress as a `.partial` file, which the next run writes again.
//!
//! The bytes are copied, never decoded: a file that is not a valid image is found by whoever
//! decodes it. Must not change a source file, hold more than a bounded window of samples in
//! memory, or write an index unless every shard is finished.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::dataset::Source;
use crate::error::{LoaderError, Result};
use crate::progress::JobProgress;
use crate::sampler::Sampler;
use crate::shards::index::{SampleEntry, ShardEntry, ShardIndex, DEFAULT_INDEX_NAME};

/// The index's file name inside the destination (the reader's default).
pub const INDEX: &str = DEFAULT_INDEX_NAME;

/// The progress manifest's file name inside the destination.
pub const MANIFEST: &str = "shard-manifest.jsonl";

/// Version of the progress manifest's format, on its first line.
const MANIFEST_VERSION: u32 = 1;

/// A tar block: headers take one, data is padded to a whole number of them.
const BLOCK: u64 = 512;

/// The two zero blocks that end a tar archive.
const END_OF_ARCHIVE: u64 = 2 * BLOCK;

/// Longest source stem kept in a key, so that `KEY.EXT` always fits a ustar header's 100-byte
/// name field (no extension header, so the image data sits exactly one block after its header).
const MAX_STEM: usize = 64;

/// Longest accepted file extension, for the same reason.
const MAX_EXTENSION: usize = 10;

/// Samples read ahead per reading thread: enough to keep a cold disk or a network file system
/// busy, few enough to keep memory bounded.
const READ_AHEAD_PER_THREAD: usize = 4;

/// The file name of shard `number`.
pub fn shard_name(number: usize) -> String {
    format!("shard-{number:06}.tar")
}

/// How [`write_shards`] cuts and orders the shards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardOptions {
    /// Most bytes in one shard file, tar headers and padding included. Default 1 GB (10^9).
    pub shard_size: u64,
    /// Most samples in one shard; `None` (the default) for no limit but the size.
    pub max_samples_per_shard: Option<usize>,
    /// Write the samples in a seeded random order instead of the source's. Default false.
    pub shuffle: bool,
    /// The shuffle's seed. Default 0.
    pub seed: u64,
    /// Threads reading source files ahead of the writer; 0 (the default) uses every core.
    pub num_threads: usize,
    /// Recorded in the index ([`ShardIndex::exif_transpose`]): readers turn images upright per
    /// their EXIF orientation, as the source's own decoding did. Default false.
    pub exif_transpose: bool,
    /// Recorded in the index ([`ShardIndex::grayscale`]): readers decode images to one
    /// channel, as the source gave them. Default false.
    pub grayscale: bool,
}

impl Default for ShardOptions {
    fn default() -> Self {
        ShardOptions {
            shard_size: 1_000_000_000,
            max_samples_per_shard: None,
            shuffle: false,
            seed: 0,
            num_threads: 0,
            exif_transpose: false,
            grayscale: false,
        }
    }
}

impl ShardOptions {
    /// Sets [`Self::shard_size`].
    pub fn shard_size(mut self, bytes: u64) -> Self {
        self.shard_size = bytes;
        self
    }

    /// Sets [`Self::max_samples_per_shard`].
    pub fn max_samples_per_shard(mut self, samples: Option<usize>) -> Self {
        self.max_samples_per_shard = samples;
        self
    }

    /// Sets [`Self::shuffle`] and [`Self::seed`].
    pub fn shuffle(mut self, shuffle: bool, seed: u64) -> Self {
        self.shuffle = shuffle;
        self.seed = seed;
        self
    }

    /// Sets [`Self::num_threads`].
    pub fn num_threads(mut self, num_threads: usize) -> Self {
        self.num_threads = num_threads;
        self
    }

    /// Sets [`Self::exif_transpose`].
    pub fn exif_transpose(mut self, exif_transpose: bool) -> Self {
        self.exif_transpose = exif_transpose;
        self
    }

    /// Sets [`Self::grayscale`].
    pub fn grayscale(mut self, grayscale: bool) -> Self {
        self.grayscale = grayscale;
        self
    }
}

/// What [`write_shards`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardReport {
    /// Finished shards in the destination (reused and written).
    pub shards: usize,
    /// Samples in those shards.
    pub samples: usize,
    /// Shards an earlier run had finished, kept as they were.
    pub reused_shards: usize,
    /// Source bytes this run copied into shards (a cancelled shard's included).
    pub bytes_read: u64,
    /// Bytes of the shards this run finished.
    pub bytes_written: u64,
    /// The index, once every shard is finished; `None` after a cancel.
    pub index: Option<PathBuf>,
    /// Whether the run stopped early on [`JobProgress::cancel`].
    pub cancelled: bool,
}

/// The manifest's first line: what must not change between a run and its resumption.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Settings {
    ferroloader_shard: u32,
    shard_size: u64,
    max_samples_per_shard: Option<usize>,
    shuffle: bool,
    seed: u64,
    num_samples: usize,
    /// BLAKE3 of every sample's path and label in source order, and of the class names.
    sources_blake3: String,
}

/// One manifest line per finished shard: its index entry and each sample's source file (lossy
/// UTF-8, compared with the plan's when resuming).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct ManifestShard {
    #[serde(flatten)]
    shard: ShardEntry,
    sources: Vec<String>,
}

/// Writes `source` into `dst` (created if missing) as tar shards and their index; see the module
/// doc. `classes` (class names in label order) goes into the index as it is.
///
/// Errors: an option out of range, a source with no samples or with a file whose name has no
/// usable extension ([`LoaderError::InvalidOption`], before anything is written), a source
/// file that cannot be read ([`LoaderError::Read`], naming it; no index is written), the
/// destination cannot be written ([`LoaderError::Io`]), or `dst` was started with other
/// settings or another source list ([`LoaderError::InvalidOption`]).
pub fn write_shards<S: Source + ?Sized>(
    source: &S,
    classes: Option<&[String]>,
    dst: &Path,
    options: &ShardOptions,
    progress: &JobProgress,
) -> Result<ShardReport> {
    let plan = Plan::new(source, options)?;
    progress.set_total(plan.order.len());
    let settings = Settings {
        ferroloader_shard: MANIFEST_VERSION,
        shard_size: options.shard_size,
        max_samples_per_shard: options.max_samples_per_shard,
        shuffle: options.shuffle,
        seed: options.seed,
        num_samples: plan.order.len(),
        sources_blake3: source_list_hash(source, classes),
    };
    fs::create_dir_all(dst).map_err(|e| io_error(dst, e))?;
    let manifest_path = dst.join(MANIFEST);
    let recorded = read_manifest(&manifest_path, &settings)?;
    let kept = plan.finished_prefix(dst, recorded, source);
    // Rewritten whole, so that lines past a torn shard (or a torn line) never reach the index.
    rewrite_manifest(&manifest_path, &settings, &kept)?;
    let mut manifest = OpenOptions::new()
        .append(true)
        .open(&manifest_path)
        .map_err(|e| io_error(&manifest_path, e))?;

    let mut report = ShardReport {
        reused_shards: kept.len(),
        ..ShardReport::default()
    };
    let mut position: usize = kept.iter().map(|m| m.sources.len()).sum();
    if position < plan.order.len() {
        // An index left by an earlier run would describe shards about to be written again.
        let index = dst.join(INDEX);
        if let Err(e) = fs::remove_file(&index) {
            if e.kind() != io::ErrorKind::NotFound {
                return Err(io_error(&index, e));
            }
        }
    }
    progress.set_done(position);
    let mut shards: Vec<ShardEntry> = kept.into_iter().map(|m| m.shard).collect();

    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(options.num_threads)
        .build()
        .map_err(|e| invalid("num_threads", e.to_string()))?;
    let window = READ_AHEAD_PER_THREAD * pool.current_num_threads().max(1);
    let mut slots: Vec<Vec<u8>> = vec![Vec::new(); window];
    let mut open: Option<OpenShard> = None;
    'windows: while position < plan.order.len() {
        if progress.cancelled() {
            break;
        }
        let end = (position + window).min(plan.order.len());
        let chunk = &plan.order[position..end];
        pool.install(|| {
            slots[..chunk.len()]
                .par_iter_mut()
                .zip(chunk.par_iter())
                .try_for_each_init(Vec::new, |scratch, (slot, &index)| {
                    let bytes = source.read(index, scratch).map_err(|e| LoaderError::Read {
                        index,
                        path: source.path(index).into_owned(),
                        source: e,
                    })?;
                    slot.clear();
                    slot.extend_from_slice(bytes);
                    Ok::<(), LoaderError>(())
                })
        })?;
        for (slot, &index) in slots.iter().zip(chunk) {
            if progress.cancelled() {
                break 'windows;
            }
            let member = plan.member(source, position, index)?;
            let label = source.label(index).to_string();
            let sample_bytes = member_bytes(slot.len() as u64) + member_bytes(label.len() as u64);
            if let Some(shard) = open.take_if(|s| !s.has_room(sample_bytes, options)) {
                let finished = shard.finish(dst, &mut manifest, &manifest_path)?;
                report.bytes_written += finished.bytes;
                shards.push(finished);
            }
            let shard = match &mut open {
                Some(shard) => shard,
                None => open.insert(OpenShard::create(dst, shards.len())?),
            };
            shard.append_sample(
                &member,
                slot,
                &label,
                source.label(index),
                &plan.source_name(source, index),
            )?;
            report.bytes_read += slot.len() as u64;
            position += 1;
            progress.set_done(position);
        }
    }
    report.cancelled = progress.cancelled() && position < plan.order.len();
    if let Some(shard) = open.take() {
        if !report.cancelled {
            let finished = shard.finish(dst, &mut manifest, &manifest_path)?;
            report.bytes_written += finished.bytes;
            shards.push(finished);
        }
        // A cancelled shard stays behind as its `.partial` file, for the next run to redo.
    }
    report.shards = shards.len();
    report.samples = shards.iter().map(|s| s.samples.len()).sum();
    if !report.cancelled {
        let index = ShardIndex {
            classes: classes.map(<[String]>::to_vec),
            exif_transpose: options.exif_transpose,
            grayscale: options.grayscale,
            ..ShardIndex::new(shards)
        };
        let path = dst.join(INDEX);
        write_json_atomically(&path, &index)?;
        report.index = Some(path);
    }
    Ok(report)
}

/// The order samples are written in, and how their member names are made.
struct Plan {
    /// Dataset indices in writing order.
    order: Vec<usize>,
    /// Digits of a key's position field.
    width: usize,
}

/// A member name pair for one sample.
struct Member {
    key: String,
    extension: String,
}

impl Plan {
    /// Checks the options and every source file's extension, and orders the samples.
    fn new<S: Source + ?Sized>(source: &S, options: &ShardOptions) -> Result<Self> {
        if options.shard_size == 0 {
            return Err(invalid("shard_size", "must be at least 1 byte".into()));
        }
        if options.max_samples_per_shard == Some(0) {
            return Err(invalid(
                "max_samples_per_shard",
                "must be at least 1 (or unset)".into(),
            ));
        }
        let len = source.len();
        if len == 0 {
            return Err(invalid("src", "the source has no samples".into()));
        }
        // Every name is checked before anything is written: a bad one fails now, not hours in.
        for index in 0..len {
            image_extension(&source.path(index))?;
        }
        let order = Sampler::new(len, options.shuffle, options.seed, None)?.indices(0);
        let width = (len - 1).to_string().len().max(6);
        Ok(Plan { order, width })
    }

    /// The member names of the sample at `position` of the order (dataset index `index`).
    fn member<S: Source + ?Sized>(
        &self,
        source: &S,
        position: usize,
        index: usize,
    ) -> Result<Member> {
        let path = source.path(index);
        Ok(Member {
            key: sample_key(position, self.width, &path),
            extension: image_extension(&path)?,
        })
    }

    /// The source file's name as the manifest records it.
    fn source_name<S: Source + ?Sized>(&self, source: &S, index: usize) -> String {
        source.path(index).to_string_lossy().into_owned()
    }

    /// The recorded shards that can be kept: the longest run from shard 0 on whose files are
    /// whole and whose samples are the plan's, in the plan's order.
    fn finished_prefix<S: Source + ?Sized>(
        &self,
        dst: &Path,
        recorded: Vec<ManifestShard>,
        source: &S,
    ) -> Vec<ManifestShard> {
        let mut kept = Vec::new();
        let mut position = 0;
        for (number, entry) in recorded.into_iter().enumerate() {
            let shard = &entry.shard;
            let len = entry.sources.len();
            let consistent = shard.url == shard_name(number)
                && shard.samples.len() == len
                && shard.num_samples == len as u64
                && position + len <= self.order.len();
            if !consistent {
                break;
            }
            let same_samples = self.order[position..position + len]
                .iter()
                .zip(&entry.sources)
                .zip(&shard.samples)
                .enumerate()
                .all(|(j, ((&index, name), sample))| {
                    *name == self.source_name(source, index)
                        && sample.label == source.label(index)
                        && self
                            .member(source, position + j, index)
                            .is_ok_and(|m| m.key == sample.key)
                });
            let whole = fs::metadata(dst.join(&shard.url))
                .is_ok_and(|m| m.is_file() && m.len() == shard.bytes);
            if !(same_samples && whole) {
                break;
            }
            position += len;
            kept.push(entry);
        }
        kept
    }
}

/// `POSITION_STEM`: the position zero-padded to `width` digits, the stem sanitised and cut.
fn sample_key(position: usize, width: usize, path: &Path) -> String {
    let mut key = format!("{position:0width$}");
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy())
        .unwrap_or_default();
    let stem: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_STEM)
        .collect();
    if !stem.is_empty() {
        key.push('_');
        key.push_str(&stem);
    }
    key
}

/// The lowercased extension of a source file, which names its image member. Refused: none,
/// one that is not 1 to [`MAX_EXTENSION`] ASCII letters and digits, and `cls` (the label's).
fn image_extension(path: &Path) -> Result<String> {
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .filter(|e| {
            !e.is_empty()
                && e.len() <= MAX_EXTENSION
                && e.bytes().all(|b| b.is_ascii_alphanumeric())
                && e != "cls"
        });
    extension.ok_or_else(|| {
        invalid(
            "src",
            format!(
                "{}: the image member of a shard is named KEY.EXT after the file's \
                 extension, and this file has none usable (1 to {MAX_EXTENSION} ASCII letters \
                 or digits, not `cls`)",
                path.display()
            ),
        )
    })
}

/// Bytes a member of `len` data bytes takes in a tar: its header and its padded data.
fn member_bytes(len: u64) -> u64 {
    BLOCK + len.div_ceil(BLOCK) * BLOCK
}

/// BLAKE3 of the source list (path, label) in source order and the class names, so that a rerun
/// on a changed listing is refused rather than mixed into the finished shards.
fn source_list_hash<S: Source + ?Sized>(source: &S, classes: Option<&[String]>) -> String {
    let mut hasher = blake3::Hasher::new();
    for index in 0..source.len() {
        let path = source.path(index);
        let bytes = path.as_os_str().as_encoded_bytes();
        hasher.update(&(bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
        hasher.update(&source.label(index).to_le_bytes());
    }
    for class in classes.unwrap_or_default() {
        hasher.update(&(class.len() as u64).to_le_bytes());
        hasher.update(class.as_bytes());
    }
    hasher.finalize().to_hex().to_string()
}

/// Counts the bytes written through it: the tar's current length, where the next header goes.
struct Counting<W> {
    inner: W,
    written: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The shard being written.
struct OpenShard {
    number: usize,
    partial: PathBuf,
    builder: tar::Builder<Counting<BufWriter<File>>>,
    samples: Vec<SampleEntry>,
    sources: Vec<String>,
}

impl OpenShard {
    fn create(dst: &Path, number: usize) -> Result<Self> {
        let partial = with_suffix(&dst.join(shard_name(number)), ".partial");
        let file = File::create(&partial).map_err(|e| io_error(&partial, e))?;
        let writer = Counting {
            inner: BufWriter::with_capacity(1 << 20, file),
            written: 0,
        };
        Ok(OpenShard {
            number,
            partial,
            builder: tar::Builder::new(writer),
            samples: Vec::new(),
            sources: Vec::new(),
        })
    }

    /// Whether a sample taking `sample_bytes` still fits; an empty shard always takes one.
    fn has_room(&self, sample_bytes: u64, options: &ShardOptions) -> bool {
        if self.samples.is_empty() {
            return true;
        }
        let full = options
            .max_samples_per_shard
            .is_some_and(|max| self.samples.len() >= max);
        let length = self.builder.get_ref().written;
        !full && length + sample_bytes + END_OF_ARCHIVE <= options.shard_size
    }

    fn append_sample(
        &mut self,
        member: &Member,
        image: &[u8],
        label_text: &str,
        label: i64,
        source_name: &str,
    ) -> Result<()> {
        let image_name = format!("{}.{}", member.key, member.extension);
        let offset = self.append(&image_name, image)?;
        self.append(&format!("{}.cls", member.key), label_text.as_bytes())?;
        self.samples.push(SampleEntry {
            key: member.key.clone(),
            offset,
            size: image.len() as u64,
            label,
        });
        self.sources.push(source_name.to_owned());
        Ok(())
    }

    /// Appends one regular-file member; returns where its data starts.
    fn append(&mut self, name: &str, data: &[u8]) -> Result<u64> {
        let start = self.builder.get_ref().written;
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_uid(0);
        header.set_gid(0);
        // A fixed time: the same source and settings give the same bytes, run after run.
        header.set_mtime(0);
        self.builder
            .append_data(&mut header, name, data)
            .map_err(|e| io_error(&self.partial, e))?;
        let taken = self.builder.get_ref().written - start;
        if taken != member_bytes(data.len() as u64) {
            // Only an extension header (a long name) would do this, and names are kept short.
            return Err(io_error(
                &self.partial,
                io::Error::other(format!(
                    "tar member {name} took {taken} bytes, not the {} its offset assumes",
                    member_bytes(data.len() as u64)
                )),
            ));
        }
        Ok(start + BLOCK)
    }

    /// Ends the archive, syncs it, renames it into place and records it in the manifest.
    fn finish(self, dst: &Path, manifest: &mut File, manifest_path: &Path) -> Result<ShardEntry> {
        let partial = self.partial;
        let counting = self
            .builder
            .into_inner()
            .map_err(|e| io_error(&partial, e))?;
        let bytes = counting.written;
        let file = counting
            .inner
            .into_inner()
            .map_err(|e| io_error(&partial, e.into_error()))?;
        file.sync_all().map_err(|e| io_error(&partial, e))?;
        drop(file);
        let url = shard_name(self.number);
        let path = dst.join(&url);
        fs::rename(&partial, &path).map_err(|e| io_error(&path, e))?;
        let entry = ManifestShard {
            shard: ShardEntry {
                url,
                num_samples: self.samples.len() as u64,
                bytes,
                samples: self.samples,
            },
            sources: self.sources,
        };
        let mut line = serde_json::to_string(&entry).map_err(|e| json_error(manifest_path, e))?;
        line.push('\n');
        manifest
            .write_all(line.as_bytes())
            .map_err(|e| io_error(manifest_path, e))?;
        Ok(entry.shard)
    }
}

/// The finished shards an existing manifest records, in file order (a torn last line from an
/// interrupted run is ignored); none when there is no manifest yet. Other settings are refused.
fn read_manifest(path: &Path, settings: &Settings) -> Result<Vec<ManifestShard>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(path, e)),
    };
    let mut lines = BufReader::new(file).lines();
    let first = match lines.next() {
        Some(line) => line.map_err(|e| io_error(path, e))?,
        None => return Ok(Vec::new()),
    };
    let found: Settings = serde_json::from_str(&first).map_err(|e| {
        invalid(
            "dst",
            format!("{} is not a shard manifest: {e}", path.display()),
        )
    })?;
    if &found != settings {
        return Err(invalid("dst", settings_mismatch(path, &found, settings)));
    }
    let mut shards = Vec::new();
    for line in lines {
        let line = line.map_err(|e| io_error(path, e))?;
        match serde_json::from_str::<ManifestShard>(&line) {
            Ok(shard) => shards.push(shard),
            // Only the last line can be torn; nothing after it is trusted.
            Err(_) => break,
        }
    }
    Ok(shards)
}

/// Says what differs between the settings `dst` was started with and these.
fn settings_mismatch(path: &Path, found: &Settings, wanted: &Settings) -> String {
    let dst = path.parent().unwrap_or(path).display();
    if found.sources_blake3 != wanted.sources_blake3 || found.num_samples != wanted.num_samples {
        return format!(
            "{dst} was started from another source list ({} samples then, {} now, or other \
             paths, labels or classes): use another destination or remove it",
            found.num_samples, wanted.num_samples
        );
    }
    let describe = |s: &Settings| {
        let max = s
            .max_samples_per_shard
            .map_or_else(|| "none".to_owned(), |m| m.to_string());
        format!(
            "shard_size={}, max_samples_per_shard={max}, shuffle={}, seed={} (format {})",
            s.shard_size, s.shuffle, s.seed, s.ferroloader_shard
        )
    };
    format!(
        "{dst} was started with {}; these settings are {}: use another destination or \
         remove it",
        describe(found),
        describe(wanted)
    )
}

/// Writes the settings line and the kept shards' lines, through a temporary file and a rename.
fn rewrite_manifest(path: &Path, settings: &Settings, kept: &[ManifestShard]) -> Result<()> {
    let tmp = with_suffix(path, ".tmp");
    let file = File::create(&tmp).map_err(|e| io_error(&tmp, e))?;
    let mut out = BufWriter::new(file);
    write_line(&mut out, settings, &tmp)?;
    for shard in kept {
        write_line(&mut out, shard, &tmp)?;
    }
    let file = out
        .into_inner()
        .map_err(|e| io_error(&tmp, e.into_error()))?;
    file.sync_all().map_err(|e| io_error(&tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| io_error(path, e))
}

/// Writes `value` as one line of JSON.
fn write_line<T: Serialize>(out: &mut impl Write, value: &T, path: &Path) -> Result<()> {
    serde_json::to_writer(&mut *out, value).map_err(|e| json_error(path, e))?;
    out.write_all(b"\n").map_err(|e| io_error(path, e))
}

/// Writes `value` as JSON to `path` through a temporary file and a rename, so a file at `path`
/// is always whole.
fn write_json_atomically<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let tmp = with_suffix(path, ".tmp");
    let file = File::create(&tmp).map_err(|e| io_error(&tmp, e))?;
    let mut out = BufWriter::new(file);
    write_line(&mut out, value, &tmp)?;
    let file = out
        .into_inner()
        .map_err(|e| io_error(&tmp, e.into_error()))?;
    file.sync_all().map_err(|e| io_error(&tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| io_error(path, e))
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(suffix);
    PathBuf::from(name)
}

fn io_error(path: &Path, source: io::Error) -> LoaderError {
    LoaderError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn json_error(path: &Path, e: serde_json::Error) -> LoaderError {
    io_error(path, io::Error::other(e))
}

fn invalid(name: &'static str, reason: String) -> LoaderError {
    LoaderError::InvalidOption { name, reason }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::dataset::{ImageFolder, PathList};

    /// Deterministic filler bytes of length `len` (not images: bytes are copied, not decoded).
    fn payload(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// An ImageFolder of 3 classes whose files have assorted sizes (one over 4 KiB, one of
    /// exactly a block) and names (dots and spaces in the stem, an upper-case extension).
    fn folder() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let files: [(&str, usize); 8] = [
            ("ant/a.jpg", 700),
            ("ant/b.v2 copy.JPEG", 512),
            ("ant/c.png", 5000),
            ("bee/d.jpg", 1),
            ("bee/sub/e.webp", 1300),
            ("cat/f.jpg", 2100),
            ("cat/g.jpg", 900),
            ("cat/h.bmp", 3000),
        ];
        for (i, (name, len)) in files.iter().enumerate() {
            let path = dir.path().join(name);
            fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            fs::write(&path, payload(*len, i as u8)).expect("write");
        }
        dir
    }

    fn class_names(folder: &ImageFolder) -> Vec<String> {
        folder
            .classes()
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect()
    }

    fn run(
        source: &dyn Source,
        classes: Option<&[String]>,
        dst: &Path,
        options: &ShardOptions,
    ) -> Result<ShardReport> {
        write_shards(source, classes, dst, options, &JobProgress::new())
    }

    fn read_index(dst: &Path) -> ShardIndex {
        serde_json::from_slice(&fs::read(dst.join(INDEX)).expect("index")).expect("parse")
    }

    /// Every member of a shard as (name, data), read with the tar crate's own reader.
    fn members(path: &Path) -> Vec<(String, Vec<u8>)> {
        let mut archive = tar::Archive::new(File::open(path).expect("open"));
        archive
            .entries()
            .expect("entries")
            .map(|entry| {
                let mut entry = entry.expect("entry");
                let name = entry.path().expect("path").to_string_lossy().into_owned();
                let mut data = Vec::new();
                entry.read_to_end(&mut data).expect("data");
                (name, data)
            })
            .collect()
    }

    /// Every shard file's bytes, by name.
    fn shard_files(dst: &Path) -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<_> = fs::read_dir(dst)
            .expect("read_dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "tar"))
            .map(|p| {
                let name = p.file_name().expect("name").to_string_lossy().into_owned();
                (name, fs::read(&p).expect("read"))
            })
            .collect();
        files.sort();
        files
    }

    #[test]
    fn writes_the_agreed_layout_with_exact_offsets() {
        let src = folder();
        let dst = tempfile::tempdir().expect("tempdir");
        let folder = ImageFolder::new(src.path()).expect("folder");
        let classes = class_names(&folder);
        let options = ShardOptions::default().shard_size(8192);
        let report = run(&folder, Some(&classes), dst.path(), &options).expect("shard");
        assert_eq!(report.samples, 8);
        assert_eq!(report.reused_shards, 0);
        assert!(!report.cancelled);
        let index = read_index(dst.path());
        assert_eq!(index.format, "ferroloader-shards");
        assert_eq!(index.version, 1);
        assert_eq!(index.num_samples, 8);
        assert_eq!(index.classes.as_deref(), Some(&classes[..]));
        assert_eq!(index.shards.len(), report.shards);
        assert!(report.shards > 1, "8 KB shards hold this folder in several");

        let mut position = 0;
        for (number, shard) in index.shards.iter().enumerate() {
            assert_eq!(shard.url, shard_name(number));
            let bytes = fs::read(dst.path().join(&shard.url)).expect("shard");
            assert_eq!(bytes.len() as u64, shard.bytes);
            assert_eq!(shard.num_samples as usize, shard.samples.len());
            let found = members(&dst.path().join(&shard.url));
            assert_eq!(found.len(), 2 * shard.samples.len());
            for (j, sample) in shard.samples.iter().enumerate() {
                let (path, label) = &folder.samples()[position];
                let source_bytes = fs::read(path).expect("source");
                let ext = path
                    .extension()
                    .expect("ext")
                    .to_string_lossy()
                    .to_lowercase();
                // Adjacent members KEY.EXT then KEY.cls, the key without a dot.
                assert!(!sample.key.contains('.'), "{}", sample.key);
                assert!(sample.key.starts_with(&format!("{position:06}_")));
                assert_eq!(found[2 * j].0, format!("{}.{ext}", sample.key));
                assert_eq!(found[2 * j].1, source_bytes);
                assert_eq!(found[2 * j + 1].0, format!("{}.cls", sample.key));
                assert_eq!(found[2 * j + 1].1, label.to_string().into_bytes());
                // offset/size locate exactly the image's bytes in the tar.
                let range = sample.offset as usize..(sample.offset + sample.size) as usize;
                assert_eq!(&bytes[range], &source_bytes[..]);
                assert_eq!(sample.label, *label as i64);
                position += 1;
            }
        }
        assert_eq!(position, 8);
        let keys: Vec<&str> = index
            .shards
            .iter()
            .flat_map(|s| s.samples.iter().map(|x| x.key.as_str()))
            .collect();
        assert_eq!(keys[1], "000001_b_v2_copy");
        assert!(!dst
            .path()
            .join(format!("{}.partial", shard_name(0)))
            .exists());
    }

    #[test]
    fn the_index_records_that_readers_turn_images_upright() {
        use crate::shards::{WebDataset, WebDatasetOptions};

        let src = folder();
        let folder = ImageFolder::new(src.path()).expect("folder");
        for turn in [false, true] {
            let dst = tempfile::tempdir().expect("tempdir");
            let options = ShardOptions::default()
                .exif_transpose(turn)
                .grayscale(!turn);
            let report = run(&folder, None, dst.path(), &options).expect("shard");
            assert_eq!(read_index(dst.path()).exif_transpose, turn);
            assert_eq!(read_index(dst.path()).grayscale, !turn);
            // Absent when false: indexes written before the fields read the same.
            let text = fs::read_to_string(dst.path().join(INDEX)).expect("index");
            assert_eq!(text.contains("exif_transpose"), turn);
            assert_eq!(text.contains("grayscale"), !turn);
            let urls: Vec<String> = (0..report.shards)
                .map(|i| {
                    dst.path()
                        .join(shard_name(i))
                        .to_string_lossy()
                        .into_owned()
                })
                .collect();
            let shards = WebDataset::new(&urls, WebDatasetOptions::default()).expect("read");
            assert_eq!(shards.exif_transpose(), turn);
            assert_eq!(shards.grayscale(), !turn);
            // What a forked child rebuilds the dataset from keeps them.
            assert_eq!(shards.index().exif_transpose, turn);
            assert_eq!(shards.index().grayscale, !turn);
        }
    }

    #[test]
    fn shards_close_before_the_size_or_count_limit() {
        let src = folder();
        let folder = ImageFolder::new(src.path()).expect("folder");
        let sizes: Vec<u64> = folder
            .samples()
            .iter()
            .map(|(p, l)| {
                let len = fs::metadata(p).expect("meta").len();
                member_bytes(len) + member_bytes(l.to_string().len() as u64)
            })
            .collect();
        for limit in [3000u64, 4096, 7000, 20_000] {
            let dst = tempfile::tempdir().expect("tempdir");
            let options = ShardOptions::default().shard_size(limit);
            run(&folder, None, dst.path(), &options).expect("shard");
            let index = read_index(dst.path());
            let mut position = 0;
            for (number, shard) in index.shards.iter().enumerate() {
                let n = shard.samples.len();
                let expected: u64 = sizes[position..position + n].iter().sum::<u64>() + 1024;
                assert_eq!(shard.bytes, expected);
                // Within the limit unless a single sample is larger by itself...
                assert!(
                    shard.bytes <= limit || n == 1,
                    "limit {limit}: {}",
                    shard.bytes
                );
                // ...and closed only because the next sample would not have fitted.
                if number + 1 < index.shards.len() {
                    assert!(shard.bytes + sizes[position + n] > limit, "limit {limit}");
                }
                position += n;
            }
            assert_eq!(position, 8);
        }
        let dst = tempfile::tempdir().expect("tempdir");
        let options = ShardOptions::default().max_samples_per_shard(Some(3));
        run(&folder, None, dst.path(), &options).expect("shard");
        let counts: Vec<u64> = read_index(dst.path())
            .shards
            .iter()
            .map(|s| s.num_samples)
            .collect();
        assert_eq!(counts, [3, 3, 2]);
    }

    #[test]
    fn shuffles_deterministically_by_seed() {
        let src = folder();
        let folder = ImageFolder::new(src.path()).expect("folder");
        let order = |seed: u64| {
            let dst = tempfile::tempdir().expect("tempdir");
            let options = ShardOptions::default().shuffle(true, seed);
            run(&folder, None, dst.path(), &options).expect("shard");
            let files = shard_files(dst.path());
            let index = read_index(dst.path());
            let stems: Vec<String> = index.shards[0]
                .samples
                .iter()
                .map(|s| s.key[7..].to_owned())
                .collect();
            (stems, files)
        };
        let (a, a_files) = order(7);
        let (b, b_files) = order(7);
        let (c, _) = order(8);
        assert_eq!(a, b);
        // The same source and settings give the same bytes.
        assert_eq!(a_files, b_files);
        assert_ne!(a, c);
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, ["a", "b_v2_copy", "c", "d", "e", "f", "g", "h"]);
        assert_ne!(a, sorted, "seed 7 leaves the order as it was");
        // The keys' positions still count up in the written order.
        let expected: Vec<usize> = Sampler::new(8, true, 7, None).expect("sampler").indices(0);
        let names: Vec<String> = expected
            .iter()
            .map(|&i| {
                let path = &folder.samples()[i].0;
                sample_key(0, 6, path)[7..].to_owned()
            })
            .collect();
        assert_eq!(a, names);
    }

    /// A source that cancels the run when sample `at` is read: an interrupt mid-shard.
    struct CancelAt<'a> {
        inner: &'a ImageFolder,
        progress: &'a JobProgress,
        at: usize,
    }

    impl Source for CancelAt<'_> {
        fn len(&self) -> usize {
            self.inner.len()
        }
        fn read<'a>(&'a self, index: usize, buf: &'a mut Vec<u8>) -> io::Result<&'a [u8]> {
            if index == self.at {
                self.progress.cancel();
            }
            self.inner.read(index, buf)
        }
        fn label(&self, index: usize) -> i64 {
            self.inner.label(index)
        }
        fn path(&self, index: usize) -> std::borrow::Cow<'_, Path> {
            self.inner.path(index)
        }
    }

    #[test]
    fn resumes_after_an_interrupt_and_a_torn_shard() {
        let src = folder();
        let folder = ImageFolder::new(src.path()).expect("folder");
        let options = ShardOptions::default()
            .num_threads(1)
            .max_samples_per_shard(Some(2));
        let whole = tempfile::tempdir().expect("tempdir");
        run(&folder, None, whole.path(), &options).expect("uninterrupted");
        let want = shard_files(whole.path());
        let want_index = read_index(whole.path());

        let dst = tempfile::tempdir().expect("tempdir");
        let progress = JobProgress::new();
        let cancelling = CancelAt {
            inner: &folder,
            progress: &progress,
            at: 5,
        };
        let report =
            write_shards(&cancelling, None, dst.path(), &options, &progress).expect("cancelled");
        assert!(report.cancelled);
        assert_eq!(report.index, None);
        assert!(!dst.path().join(INDEX).exists());
        // The read-ahead window (4 samples with one thread) of samples 4-7 was read before the
        // cancel was seen, so none of it was written: shard 0 is finished, shard 1 (samples 2
        // and 3) was waiting for the next sample to close and stays behind, torn.
        assert_eq!((report.shards, progress.done()), (1, 4));
        assert!(dst
            .path()
            .join(format!("{}.partial", shard_name(1)))
            .exists());
        let progress = JobProgress::new();
        let report = write_shards(&folder, None, dst.path(), &options, &progress).expect("resume");
        assert_eq!(report.reused_shards, 1);
        assert_eq!((progress.done(), progress.total()), (8, 8));
        assert_eq!(shard_files(dst.path()), want);
        assert_eq!(read_index(dst.path()), want_index);
        let leftovers: Vec<_> = fs::read_dir(dst.path())
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".partial") || n.ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");

        // A torn shard: shard 2's file cut short, as a copy of DST stopped midway leaves it.
        // Until it is whole again, no index describes it.
        let torn = dst.path().join(shard_name(2));
        let bytes = fs::read(&torn).expect("read");
        fs::write(&torn, &bytes[..bytes.len() / 2]).expect("truncate");
        let progress = JobProgress::new();
        progress.cancel();
        let report = write_shards(&folder, None, dst.path(), &options, &progress).expect("cancel");
        assert!(report.cancelled && !dst.path().join(INDEX).exists());
        let report = run(&folder, None, dst.path(), &options).expect("resume torn");
        assert_eq!(report.reused_shards, 2);
        assert_eq!(shard_files(dst.path()), want);

        // Nothing left to do: every shard is kept, the index written again the same.
        let again = run(&folder, None, dst.path(), &options).expect("again");
        assert_eq!((again.reused_shards, again.bytes_read), (4, 0));
        assert_eq!(read_index(dst.path()), want_index);

        // A torn manifest line is ignored, and so is every shard after it.
        let manifest = dst.path().join(MANIFEST);
        let text = fs::read_to_string(&manifest).expect("manifest");
        let mut lines: Vec<&str> = text.lines().collect();
        let cut = &lines[2][..lines[2].len() / 2];
        lines[2] = cut;
        fs::write(&manifest, lines.join("\n")).expect("write");
        let report = run(&folder, None, dst.path(), &options).expect("resume torn line");
        assert_eq!(report.reused_shards, 1);
        assert_eq!(shard_files(dst.path()), want);
    }

    #[test]
    fn refuses_other_settings_and_another_source_list() {
        let src = folder();
        let folder = ImageFolder::new(src.path()).expect("folder");
        let dst = tempfile::tempdir().expect("tempdir");
        let options = ShardOptions::default().shard_size(4096);
        run(&folder, None, dst.path(), &options).expect("first");
        let err = run(
            &folder,
            None,
            dst.path(),
            &ShardOptions::default().shard_size(8192),
        )
        .expect_err("other size");
        assert!(err.to_string().contains("shard_size=4096"), "{err}");
        let err = run(&folder, None, dst.path(), &options.clone().shuffle(true, 1))
            .expect_err("shuffled");
        assert!(err.to_string().contains("shuffle=false"), "{err}");
        fs::write(src.path().join("cat/i.jpg"), b"new").expect("write");
        let grown = ImageFolder::new(src.path()).expect("folder");
        let err = run(&grown, None, dst.path(), &options).expect_err("new file");
        assert!(err.to_string().contains("another source list"), "{err}");
        let err = run(&folder, Some(&["x".to_owned()]), dst.path(), &options).expect_err("classes");
        assert!(err.to_string().contains("another source list"), "{err}");
    }

    #[test]
    fn bad_sources_fail_naming_the_file_and_write_no_index() {
        let src = folder();
        let dst = tempfile::tempdir().expect("tempdir");
        let good = src.path().join("ant/a.jpg");
        let missing = src.path().join("ant/missing.jpg");
        let list = PathList::new(
            vec![good.clone(), missing.clone(), good.clone()],
            vec![0, 1, 0],
        )
        .expect("list");
        let err = run(&list, None, dst.path(), &ShardOptions::default()).expect_err("missing");
        match &err {
            LoaderError::Read {
                index,
                path,
                source,
            } => {
                assert_eq!((*index, path), (1, &missing));
                assert_eq!(source.kind(), io::ErrorKind::NotFound);
            }
            other => panic!("expected a read error, got {other}"),
        }
        assert!(!dst.path().join(INDEX).exists());

        let no_extension = src.path().join("ant/README");
        fs::write(&no_extension, b"x").expect("write");
        let other = tempfile::tempdir().expect("tempdir");
        for bad in [
            no_extension,
            src.path().join("ant/x.cls"),
            src.path().join("ant/x.j-g"),
        ] {
            let list = PathList::new(vec![good.clone(), bad.clone()], vec![0, 0]).expect("list");
            let err = run(&list, None, other.path(), &ShardOptions::default()).expect_err("name");
            assert!(err.to_string().contains(&*bad.to_string_lossy()), "{err}");
            assert!(fs::read_dir(other.path()).expect("dir").next().is_none());
        }
        let list = PathList::new(vec![good.clone()], vec![0]).expect("list");
        for options in [
            ShardOptions::default().shard_size(0),
            ShardOptions::default().max_samples_per_shard(Some(0)),
        ] {
            let err = run(&list, None, other.path(), &options).expect_err("options");
            assert!(matches!(err, LoaderError::InvalidOption { .. }), "{err}");
        }
    }

    #[test]
    fn keys_are_sanitised_and_bounded() {
        let key = sample_key(12, 6, Path::new("/x/y/n01440764_10026.JPEG"));
        assert_eq!(key, "000012_n01440764_10026");
        let key = sample_key(3, 7, Path::new("a.b c/é-x.tar.gz"));
        assert_eq!(key, "0000003_é-x_tar".replace('é', "_"));
        let long = format!("{}.jpg", "z".repeat(300));
        let key = sample_key(0, 6, Path::new(&long));
        assert_eq!(key.len(), 6 + 1 + MAX_STEM);
        assert_eq!(sample_key(5, 6, Path::new(".jpg")), "000005__jpg");
        assert_eq!(image_extension(Path::new("a.JPEG")).expect("ext"), "jpeg");
    }
}
