//! Offline preparation of an [`ImageFolder`]: every image larger than needed re-encoded once at
//! a shorter side (PRESTO's "offline" step), so each epoch decodes and resizes fewer pixels.
//!
//! The destination is an `ImageFolder` with the same classes (every class folder is made, empty
//! ones too, so class indices stay equal) and one file per source file: re-encoded as JPEG when
//! its shorter side exceeds the target (Pillow-exact resize, then libjpeg-turbo at the chosen
//! quality), otherwise copied byte for byte; a file that does not decode is copied too, so the
//! loader reports it on the prepared folder as it would on the source. A non-JPEG re-encoded
//! keeps its name with `.jpg` appended (`a.png` -> `a.png.jpg`), which no other source can have.
//!
//! Resumable: each finished file is written under a temporary name, renamed, then appended to
//! `DST/prepare-manifest.jsonl` (settings on the first line, then one line per source: its path,
//! BLAKE3 hash and what was done). A second run with the same settings skips every source whose
//! hash and output match the manifest; other settings are refused. Cancelling
//! ([`JobProgress::cancel`]) stops between files and leaves a consistent manifest.
//!
//! Must not hold a whole dataset in memory, or change a source file.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use std::sync::{Mutex, PoisonError};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::dataset::{read_file_into, ImageFolder, ImageFolderOptions};
use crate::error::{LoaderError, Result};
use crate::progress::JobProgress;
use crate::transforms::crop::resize_shorter_side;
use crate::transforms::decode::{DecodeContext, DecodeOptions};
use crate::transforms::encode::JpegEncoder;
use crate::transforms::resize::Resizer;
use crate::transforms::RgbImage;

/// The manifest's file name inside the destination.
pub const MANIFEST: &str = "prepare-manifest.jsonl";

/// Version of the manifest's format, on its first line.
const MANIFEST_VERSION: u32 = 1;

/// How [`prepare`] re-encodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareOptions {
    /// Images whose shorter side is longer are resized to it (aspect ratio kept, as
    /// torchvision's `Resize(int)`); smaller ones are copied. Required, at least 1.
    pub shorter_side: u32,
    /// JPEG quality of re-encoded images, 1 to 100. Default 90.
    pub quality: u8,
    /// Worker threads; 0 (the default) uses every core.
    pub num_threads: usize,
    /// Decode-bomb limit in pixels. Default: the decoder's (Pillow's).
    pub max_pixels: u64,
}

impl PrepareOptions {
    /// Options with this shorter side and every other field at its default.
    pub fn new(shorter_side: u32) -> Self {
        PrepareOptions {
            shorter_side,
            quality: 90,
            num_threads: 0,
            max_pixels: DecodeOptions::default().max_pixels,
        }
    }

    /// Sets [`Self::quality`].
    pub fn quality(mut self, quality: u8) -> Self {
        self.quality = quality;
        self
    }

    /// Sets [`Self::num_threads`].
    pub fn num_threads(mut self, num_threads: usize) -> Self {
        self.num_threads = num_threads;
        self
    }
}

/// What happened to one source file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Decoded, resized to the shorter side and encoded as JPEG.
    Resized,
    /// Already small enough: copied byte for byte.
    Copied,
    /// Does not decode: copied byte for byte (the loader reports it on the prepared folder).
    Unreadable,
}

/// What [`prepare`] did, summed over the run (files found done by an earlier run included in
/// [`Self::reused`] only).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrepareReport {
    /// Files re-encoded by this run.
    pub resized: usize,
    /// Files copied by this run because they were small enough.
    pub copied: usize,
    /// Files an earlier run had finished, with an unchanged source.
    pub reused: usize,
    /// Files that do not decode (copied as they are), with the decoder's reason.
    pub unreadable: Vec<(PathBuf, String)>,
    /// Bytes read from the sources this run handled.
    pub bytes_in: u64,
    /// Bytes written for them.
    pub bytes_out: u64,
    /// Whether the run stopped early on [`JobProgress::cancel`].
    pub cancelled: bool,
}

/// The manifest's first line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Settings {
    ferroloader_prepare: u32,
    shorter_side: u32,
    quality: u8,
}

/// One manifest line per finished source file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Entry {
    /// The source's path under the source root (lossy UTF-8: manifest keys only).
    source: String,
    blake3: String,
    /// The output's path under the destination root.
    output: String,
    action: Action,
    bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

/// Prepares `src` (an ImageFolder) into `dst` (created if missing). See the module doc.
///
/// Errors: the source cannot be listed, the destination cannot be written, or `dst` holds a
/// manifest with other settings ([`LoaderError::InvalidOption`]). A source file that does not
/// decode is not an error: it is copied and listed in [`PrepareReport::unreadable`].
pub fn prepare(
    src: &Path,
    dst: &Path,
    options: &PrepareOptions,
    progress: &JobProgress,
) -> Result<PrepareReport> {
    if options.shorter_side == 0 {
        return Err(invalid("shorter_side", "must be at least 1".into()));
    }
    JpegEncoder::new(options.quality).map_err(|e| invalid("quality", e.to_string()))?;
    let folder = ImageFolder::with_options(src, &ImageFolderOptions::default().allow_empty(true))?;
    progress.set_total(folder.samples().len());
    fs::create_dir_all(dst).map_err(|e| io_error(dst, e))?;
    for class in folder.classes() {
        let dir = dst.join(class);
        fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
    }
    let settings = Settings {
        ferroloader_prepare: MANIFEST_VERSION,
        shorter_side: options.shorter_side,
        quality: options.quality,
    };
    let manifest_path = dst.join(MANIFEST);
    let done = read_manifest(&manifest_path, &settings)?;
    let manifest = Mutex::new(open_manifest(&manifest_path, &settings, done.is_none())?);
    let done = done.unwrap_or_default();

    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(options.num_threads)
        .build()
        .map_err(|e| invalid("num_threads", e.to_string()))?;
    let outcomes: Vec<Outcome> = pool.install(|| {
        folder
            .samples()
            .par_iter()
            // Each rayon job makes its own decoder, resizer and encoder: jobs of at least 16
            // files keep that a small share of the work.
            .with_min_len(16)
            .map_init(
                || Worker::new(options),
                |worker, (path, _)| {
                    if progress.cancelled() {
                        return Ok(Outcome::Skipped);
                    }
                    let outcome = worker
                        .as_mut()
                        .map_err(|e| invalid("quality", e.to_string()));
                    let outcome = outcome.and_then(|w| {
                        w.prepare_one(src, dst, path, &done, &manifest, options.shorter_side)
                    });
                    progress.add_done(1);
                    outcome
                },
            )
            .collect::<Result<Vec<_>>>()
    })?;

    let mut report = PrepareReport {
        cancelled: progress.cancelled(),
        ..PrepareReport::default()
    };
    for outcome in outcomes {
        match outcome {
            Outcome::Skipped => {}
            Outcome::Reused => report.reused += 1,
            Outcome::Done {
                action,
                bytes_in,
                bytes_out,
                path,
                reason,
            } => {
                report.bytes_in += bytes_in;
                report.bytes_out += bytes_out;
                match action {
                    Action::Resized => report.resized += 1,
                    Action::Copied => report.copied += 1,
                    Action::Unreadable => {
                        report.unreadable.push((path, reason.unwrap_or_default()))
                    }
                }
            }
        }
    }
    Ok(report)
}

enum Outcome {
    /// Cancelled before it started.
    Skipped,
    Reused,
    Done {
        action: Action,
        bytes_in: u64,
        bytes_out: u64,
        path: PathBuf,
        reason: Option<String>,
    },
}

/// One rayon job's file buffer and codec (reused across its files).
struct Worker {
    file: Vec<u8>,
    codec: Codec,
}

/// Decoder, resizer, encoder and their images.
struct Codec {
    decode: DecodeContext,
    resizer: Resizer,
    encoder: JpegEncoder,
    decoded: RgbImage,
    resized: RgbImage,
    jpeg: Vec<u8>,
}

impl Worker {
    fn new(options: &PrepareOptions) -> crate::transforms::Result<Self> {
        Ok(Worker {
            file: Vec::new(),
            codec: Codec {
                decode: DecodeContext::new(
                    DecodeOptions::default().max_pixels(options.max_pixels),
                )?,
                resizer: Resizer::new(),
                encoder: JpegEncoder::new(options.quality)?,
                decoded: RgbImage::new(),
                resized: RgbImage::new(),
                jpeg: Vec::new(),
            },
        })
    }

    fn prepare_one(
        &mut self,
        src: &Path,
        dst: &Path,
        path: &Path,
        done: &HashMap<String, Entry>,
        manifest: &Mutex<File>,
        shorter_side: u32,
    ) -> Result<Outcome> {
        let rel = path.strip_prefix(src).unwrap_or(path).to_path_buf();
        let bytes = read_file_into(path, &mut self.file).map_err(|e| io_error(path, e))?;
        let hash = blake3::hash(bytes).to_hex().to_string();
        let key = rel.to_string_lossy().into_owned();
        if let Some(entry) = done.get(&key) {
            let output_ok = fs::metadata(dst.join(&entry.output))
                .is_ok_and(|m| m.is_file() && m.len() == entry.bytes);
            if entry.blake3 == hash && output_ok {
                return Ok(Outcome::Reused);
            }
        }
        let (action, reason) = match self.codec.resize(bytes, shorter_side) {
            Ok(true) => (Action::Resized, None),
            Ok(false) => (Action::Copied, None),
            Err(e) => (Action::Unreadable, Some(e.to_string())),
        };
        let out_rel = match action {
            Action::Resized if !is_jpeg_name(&rel) => {
                let mut name = OsString::from(rel.as_os_str());
                name.push(".jpg");
                PathBuf::from(name)
            }
            _ => rel.clone(),
        };
        let written: &[u8] = match action {
            Action::Resized => &self.codec.jpeg,
            Action::Copied | Action::Unreadable => bytes,
        };
        let out_path = dst.join(&out_rel);
        write_atomically(&out_path, written)?;
        let entry = Entry {
            source: key,
            blake3: hash,
            output: out_rel.to_string_lossy().into_owned(),
            action,
            bytes: written.len() as u64,
            reason: reason.clone(),
        };
        append_entry(manifest, &entry, &dst.join(MANIFEST))?;
        Ok(Outcome::Done {
            action,
            bytes_in: bytes.len() as u64,
            bytes_out: written.len() as u64,
            path: path.to_path_buf(),
            reason,
        })
    }
}

impl Codec {
    /// Re-encodes `bytes` into `self.jpeg` when the image's shorter side exceeds `shorter_side`;
    /// `Ok(false)`: small enough, to be copied.
    fn resize(&mut self, bytes: &[u8], shorter_side: u32) -> crate::transforms::Result<bool> {
        let info = self.decode.info(bytes)?;
        if info.width.min(info.height) <= shorter_side {
            return Ok(false);
        }
        self.decode.decode(bytes, &mut self.decoded)?;
        let (height, width) = resize_shorter_side(info.width, info.height, shorter_side, None)?;
        self.resizer
            .resize(self.decoded.view(), height, width, &mut self.resized)?;
        self.encoder.encode(&self.resized, &mut self.jpeg)?;
        Ok(true)
    }
}

fn is_jpeg_name(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("jpg") || e.eq_ignore_ascii_case("jpeg"))
}

/// Writes `bytes` to `path` through a temporary file in the same folder and a rename, so a
/// file at `path` is always whole.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut tmp = OsString::from(path.as_os_str());
    tmp.push(".prepare-tmp");
    let tmp = PathBuf::from(tmp);
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    }
    fs::write(&tmp, bytes).map_err(|e| io_error(&tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| io_error(path, e))
}

/// The finished entries of an existing manifest (the last line per source wins; a torn last
/// line from an interrupted run is ignored); `None` when there is no manifest yet.
fn read_manifest(path: &Path, settings: &Settings) -> Result<Option<HashMap<String, Entry>>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(path, e)),
    };
    let mut lines = BufReader::new(file).lines();
    let first = match lines.next() {
        Some(line) => line.map_err(|e| io_error(path, e))?,
        None => return Ok(None),
    };
    let found: Settings = serde_json::from_str(&first).map_err(|e| {
        invalid(
            "dst",
            format!("{} is not a prepare manifest: {e}", path.display()),
        )
    })?;
    if &found != settings {
        return Err(invalid(
            "dst",
            format!(
                "{} was prepared with shorter_side={}, quality={} (format {}); these settings \
                 are shorter_side={}, quality={}: use another destination or remove it",
                path.parent().unwrap_or(path).display(),
                found.shorter_side,
                found.quality,
                found.ferroloader_prepare,
                settings.shorter_side,
                settings.quality
            ),
        ));
    }
    let mut done = HashMap::new();
    for line in lines {
        let line = line.map_err(|e| io_error(path, e))?;
        if let Ok(entry) = serde_json::from_str::<Entry>(&line) {
            done.insert(entry.source.clone(), entry);
        }
    }
    Ok(Some(done))
}

/// Opens the manifest for appending, writing the settings line when it is new. A torn last
/// line is ended first, so the next entry starts on a line of its own.
fn open_manifest(path: &Path, settings: &Settings, new: bool) -> Result<File> {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| io_error(path, e))?;
    if new {
        let mut line =
            serde_json::to_string(settings).map_err(|e| invalid("dst", e.to_string()))?;
        line.push('\n');
        file.write_all(line.as_bytes())
            .map_err(|e| io_error(path, e))?;
    } else if !ends_with_newline(path).map_err(|e| io_error(path, e))? {
        file.write_all(b"\n").map_err(|e| io_error(path, e))?;
    }
    Ok(file)
}

/// Whether the file's last byte is a newline, read alone (a manifest of a million files
/// need not be read twice).
fn ends_with_newline(path: &Path) -> io::Result<bool> {
    let mut file = File::open(path)?;
    if file.metadata()?.len() == 0 {
        return Ok(false);
    }
    file.seek(SeekFrom::End(-1))?;
    let mut last = [0u8; 1];
    file.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

/// Appends one line (one `write` of the whole line, after the output file is in place).
fn append_entry(manifest: &Mutex<File>, entry: &Entry, path: &Path) -> Result<()> {
    let mut line = serde_json::to_string(entry).map_err(|e| invalid("dst", e.to_string()))?;
    line.push('\n');
    manifest
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .write_all(line.as_bytes())
        .map_err(|e| io_error(path, e))
}

fn io_error(path: &Path, source: io::Error) -> LoaderError {
    LoaderError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn invalid(name: &'static str, reason: String) -> LoaderError {
    LoaderError::InvalidOption { name, reason }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transforms::decode::DecodeContext;

    /// A JPEG of `w` x `h` made by the encoder under test's sibling (quality 95).
    fn jpeg(w: u32, h: u32) -> Vec<u8> {
        let data = (0..h)
            .flat_map(|y| (0..w).map(move |x| (x, y)))
            .flat_map(|(x, y)| [(x % 256) as u8, (y % 256) as u8, ((x + y) % 256) as u8])
            .collect();
        let img = RgbImage::from_raw(w, h, data).expect("sized");
        let mut out = Vec::new();
        JpegEncoder::new(95)
            .expect("encoder")
            .encode(&img, &mut out)
            .expect("encode");
        out
    }

    fn folder() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for class in ["a", "b", "empty"] {
            fs::create_dir_all(root.join(class)).expect("mkdir");
        }
        fs::write(root.join("a/big.jpg"), jpeg(640, 400)).expect("write");
        fs::write(root.join("a/small.jpg"), jpeg(100, 90)).expect("write");
        fs::create_dir_all(root.join("b/nested")).expect("mkdir");
        fs::write(root.join("b/nested/tall.jpeg"), jpeg(300, 900)).expect("write");
        fs::write(root.join("b/broken.jpg"), b"<html>not an image</html>").expect("write");
        dir
    }

    fn size_of(path: &Path) -> (u32, u32) {
        let bytes = fs::read(path).expect("read");
        let info = DecodeContext::new(DecodeOptions::default())
            .expect("ctx")
            .info(&bytes)
            .expect("info");
        (info.width, info.height)
    }

    #[test]
    fn prepares_resizes_copies_and_reports() {
        let src = folder();
        let dst = tempfile::tempdir().expect("tempdir");
        let progress = JobProgress::new();
        let report =
            prepare(src.path(), dst.path(), &PrepareOptions::new(256), &progress).expect("prepare");
        assert_eq!((report.resized, report.copied, report.reused), (2, 1, 0));
        assert_eq!(report.unreadable.len(), 1);
        assert!(report.unreadable[0].0.ends_with("b/broken.jpg"));
        assert_eq!((progress.done(), progress.total()), (4, 4));
        // Shorter side 256, aspect ratio kept as Resize(int) keeps it.
        assert_eq!(size_of(&dst.path().join("a/big.jpg")), (409, 256));
        assert_eq!(size_of(&dst.path().join("b/nested/tall.jpeg")), (256, 768));
        assert_eq!(
            fs::read(dst.path().join("a/small.jpg")).expect("copy"),
            fs::read(src.path().join("a/small.jpg")).expect("source")
        );
        assert!(dst.path().join("b/broken.jpg").is_file());
        assert!(dst.path().join("empty").is_dir());
        // The destination lists as the source does: same classes, same sample names.
        let a =
            ImageFolder::with_options(src.path(), &ImageFolderOptions::default().allow_empty(true))
                .expect("src");
        let b =
            ImageFolder::with_options(dst.path(), &ImageFolderOptions::default().allow_empty(true))
                .expect("dst");
        assert_eq!(a.classes(), b.classes());
        let names = |f: &ImageFolder, root: &Path| {
            f.samples()
                .iter()
                .map(|(p, c)| (p.strip_prefix(root).expect("under root").to_path_buf(), *c))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&a, src.path()), names(&b, dst.path()));
    }

    #[test]
    fn resumes_and_redoes_changed_sources() {
        let src = folder();
        let dst = tempfile::tempdir().expect("tempdir");
        let options = PrepareOptions::new(256).num_threads(2);
        prepare(src.path(), dst.path(), &options, &JobProgress::new()).expect("first");
        let again = prepare(src.path(), dst.path(), &options, &JobProgress::new()).expect("second");
        assert_eq!((again.reused, again.resized, again.copied), (4, 0, 0));
        // A changed source and a removed output are done again; the rest is reused.
        fs::write(src.path().join("a/small.jpg"), jpeg(120, 90)).expect("write");
        fs::remove_file(dst.path().join("a/big.jpg")).expect("rm");
        let third = prepare(src.path(), dst.path(), &options, &JobProgress::new()).expect("third");
        assert_eq!((third.reused, third.resized, third.copied), (2, 1, 1));
        assert_eq!(size_of(&dst.path().join("a/small.jpg")), (120, 90));
    }

    #[test]
    fn interrupted_runs_resume_and_other_settings_are_refused() {
        let src = folder();
        let dst = tempfile::tempdir().expect("tempdir");
        let progress = JobProgress::new();
        progress.cancel();
        let report = prepare(src.path(), dst.path(), &PrepareOptions::new(256), &progress)
            .expect("cancelled run");
        assert!(report.cancelled);
        assert_eq!(report.resized + report.copied + report.reused, 0);
        // A torn line, as a kill in the middle of a write leaves.
        let manifest = dst.path().join(MANIFEST);
        let mut file = OpenOptions::new()
            .append(true)
            .open(&manifest)
            .expect("open");
        file.write_all(b"{\"source\": \"a/bi").expect("write");
        let report = prepare(
            src.path(),
            dst.path(),
            &PrepareOptions::new(256),
            &JobProgress::new(),
        )
        .expect("resumed");
        assert_eq!(report.resized, 2);
        let err = prepare(
            src.path(),
            dst.path(),
            &PrepareOptions::new(320),
            &JobProgress::new(),
        )
        .expect_err("other settings");
        assert!(err.to_string().contains("shorter_side=256"), "{err}");
        let err = prepare(
            src.path(),
            dst.path(),
            &PrepareOptions::new(256).quality(0),
            &JobProgress::new(),
        )
        .expect_err("quality");
        assert!(err.to_string().contains("quality"), "{err}");
    }

    #[test]
    fn non_jpeg_sources_get_a_jpg_suffix_when_reencoded() {
        let src = tempfile::tempdir().expect("tempdir");
        fs::create_dir_all(src.path().join("c")).expect("mkdir");
        let img = RgbImage::from_raw(400, 300, vec![77; 400 * 300 * 3]).expect("sized");
        let png = {
            use image::ImageEncoder;
            let mut out = Vec::new();
            image::codecs::png::PngEncoder::new(&mut out)
                .write_image(img.as_raw(), 400, 300, image::ExtendedColorType::Rgb8)
                .expect("png");
            out
        };
        fs::write(src.path().join("c/x.png"), png).expect("write");
        let dst = tempfile::tempdir().expect("tempdir");
        let report = prepare(
            src.path(),
            dst.path(),
            &PrepareOptions::new(150),
            &JobProgress::new(),
        )
        .expect("prepare");
        assert_eq!(report.resized, 1);
        assert_eq!(size_of(&dst.path().join("c/x.png.jpg")), (200, 150));
    }
}
