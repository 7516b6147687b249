//! A dataset listed in a CSV or TSV file of `path,label` rows, the paths relative to a root.
//!
//! Parsing is strict and every complaint names the list file and the line. Must not touch the
//! listed files while parsing: a missing image is a read error of that sample, reported (or
//! skipped) by the loader like any other.

use std::borrow::Cow;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{read_file_into, Source};
use crate::error::{LoaderError, Result};

/// How a [`FileList`] is parsed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileListOptions {
    /// Field delimiter. Default: `None`, a tab if the first line has one, else a comma.
    pub delimiter: Option<u8>,
    /// Whether the first row is a header. Default: `None`, a header exactly when its label
    /// field is not an integer.
    pub has_header: Option<bool>,
}

impl FileListOptions {
    /// Sets [`Self::delimiter`].
    pub fn delimiter(mut self, delimiter: u8) -> Self {
        self.delimiter = Some(delimiter);
        self
    }

    /// Sets [`Self::has_header`].
    pub fn has_header(mut self, has_header: bool) -> Self {
        self.has_header = Some(has_header);
        self
    }
}

/// Files named in a list, with the labels given there, in the list's order.
#[derive(Clone, Debug)]
pub struct FileList {
    list: PathBuf,
    root: PathBuf,
    paths: Vec<PathBuf>,
    labels: Vec<i64>,
}

impl FileList {
    /// Reads the list file `list`; its paths are relative to `root` (absolute ones stay as they
    /// are).
    pub fn new(list: impl AsRef<Path>, root: impl AsRef<Path>) -> Result<Self> {
        Self::with_options(list, root, &FileListOptions::default())
    }

    /// [`Self::new`] with explicit parsing options.
    pub fn with_options(
        list: impl AsRef<Path>,
        root: impl AsRef<Path>,
        options: &FileListOptions,
    ) -> Result<Self> {
        let list = list.as_ref();
        let data = fs::read(list).map_err(|source| LoaderError::Io {
            path: list.to_path_buf(),
            source,
        })?;
        Self::from_bytes(&data, list, root, options)
    }

    /// Parses a list already in memory; `list` only names it in errors.
    pub fn from_bytes(
        data: &[u8],
        list: impl AsRef<Path>,
        root: impl AsRef<Path>,
        options: &FileListOptions,
    ) -> Result<Self> {
        let list = list.as_ref().to_path_buf();
        let root = root.as_ref().to_path_buf();
        let fail = |line: u64, reason: String| LoaderError::FileList {
            path: list.clone(),
            line,
            reason,
        };
        let delimiter = options.delimiter.unwrap_or_else(|| sniff_delimiter(data));
        let mut reader = csv::ReaderBuilder::new()
            .delimiter(delimiter)
            .has_headers(false)
            .flexible(true)
            .trim(csv::Trim::All)
            .from_reader(data);
        let mut record = csv::StringRecord::new();
        let mut paths = Vec::new();
        let mut labels = Vec::new();
        let mut first = true;
        let mut last_line = 0;
        loop {
            match reader.read_record(&mut record) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    let line = e.position().map_or(last_line + 1, csv::Position::line);
                    return Err(fail(line, e.to_string()));
                }
            }
            let line = record.position().map_or(last_line + 1, csv::Position::line);
            last_line = line;
            if record.iter().all(str::is_empty) {
                continue;
            }
            if record.len() != 2 {
                return Err(fail(
                    line,
                    format!(
                        "expected 2 fields (path, label), found {} in {:?}",
                        record.len(),
                        record.iter().collect::<Vec<_>>()
                    ),
                ));
            }
            let label = record[1].parse::<i64>();
            if first {
                first = false;
                if options.has_header.unwrap_or(label.is_err()) {
                    continue;
                }
            }
            let label = label.map_err(|_| {
                fail(
                    line,
                    format!("label {:?} is not an integer", record[1].to_owned()),
                )
            })?;
            if record[0].is_empty() {
                return Err(fail(line, "empty path".to_owned()));
            }
            paths.push(root.join(&record[0]));
            labels.push(label);
        }
        if paths.is_empty() {
            return Err(fail(last_line.max(1), "the list has no samples".to_owned()));
        }
        Ok(FileList {
            list,
            root,
            paths,
            labels,
        })
    }

    /// The list file.
    pub fn list_path(&self) -> &Path {
        &self.list
    }

    /// The root the paths are relative to.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every sample's path (root joined), in list order.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Every sample's label, in list order.
    pub fn labels(&self) -> &[i64] {
        &self.labels
    }
}

impl Source for FileList {
    fn len(&self) -> usize {
        self.paths.len()
    }

    fn read<'a>(&'a self, index: usize, buf: &'a mut Vec<u8>) -> io::Result<&'a [u8]> {
        read_file_into(&self.paths[index], buf)
    }

    fn label(&self, index: usize) -> i64 {
        self.labels[index]
    }

    fn path(&self, index: usize) -> Cow<'_, Path> {
        Cow::Borrowed(&self.paths[index])
    }
}

/// A tab when the first non-empty line has one, else a comma.
fn sniff_delimiter(data: &[u8]) -> u8 {
    let first = data
        .split(|&b| b == b'\n')
        .find(|line| line.iter().any(|b| !b.is_ascii_whitespace()))
        .unwrap_or(&[]);
    if first.contains(&b'\t') {
        b'\t'
    } else {
        b','
    }
}
