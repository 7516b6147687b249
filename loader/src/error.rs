//! The one error type of the loader crate.
//!
//! Every failure that concerns a file keeps its path, I/O failures keep the `io::Error` itself (so
//! callers can match on its kind, as the Python side does to raise `FileNotFoundError`), and
//! transform failures keep the op that failed and the typed cause. Must not flatten a typed cause
//! into a string where the cause can be kept.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use crate::process::Op;

/// Everything that can go wrong while building a dataset or loading a sample.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoaderError {
    /// A file or directory could not be read while building a dataset (a missing root, an
    /// unreadable list file).
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// Reading one sample's bytes failed (missing file, permission denied, a directory, ...).
    #[error("sample {index} ({}): read failed: {source}", path.display())]
    Read {
        /// The sample's index in the dataset.
        index: usize,
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// An op of the sample processor failed on a sample.
    #[error("sample {index} ({}): {op} failed: {source}", path.display())]
    Transform {
        /// The sample's index in the dataset.
        index: usize,
        /// The file.
        path: PathBuf,
        /// The op that was running when the processor returned the error.
        op: Op,
        /// Why it failed.
        #[source]
        source: ferroloader_transforms::Error,
    },
    /// The processor (or the dataset) panicked on a sample. The panic was caught: the worker
    /// carries on with a fresh scratch state.
    #[error("sample {index} ({}): panicked during {op}: {message}", path.display())]
    Panic {
        /// The sample's index in the dataset.
        index: usize,
        /// The file.
        path: PathBuf,
        /// The op that was running when it panicked.
        op: Op,
        /// The panic message, when it was a string.
        message: String,
    },
    /// An image folder has no class subfolder (torchvision's message).
    #[error("Couldn't find any class folder in {}.", root.display())]
    NoClassFolders {
        /// The dataset root.
        root: PathBuf,
    },
    /// Some class folders hold no file with a supported extension (torchvision's message).
    #[error(
        "Found no valid file for the classes {}. Supported extensions are: {}",
        classes.iter().map(|c| c.to_string_lossy()).collect::<Vec<_>>().join(", "),
        extensions.join(", ")
    )]
    EmptyClasses {
        /// The dataset root.
        root: PathBuf,
        /// The empty classes, sorted.
        classes: Vec<OsString>,
        /// The extensions that were accepted.
        extensions: Vec<String>,
    },
    /// A line of a file list is malformed.
    #[error("{}:{line}: {reason}", path.display())]
    FileList {
        /// The list file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// An option or argument is out of range.
    #[error("invalid option `{name}`: {reason}")]
    InvalidOption {
        /// The option's name.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// Memory that the options ask for could not be allocated (or would exceed the machine's).
    #[error("{name}: cannot allocate {bytes} bytes for {what}")]
    OutOfMemory {
        /// The option that sizes the allocation.
        name: &'static str,
        /// What the memory was for.
        what: String,
        /// Bytes asked for.
        bytes: usize,
    },
    /// An explicit index sequence names a sample the dataset does not have.
    #[error("index {index} at position {position} is out of range for a dataset of {len} samples")]
    IndexOutOfRange {
        /// The offending index.
        index: usize,
        /// Where it is in the sequence.
        position: usize,
        /// The dataset's length.
        len: usize,
    },
    /// A worker thread failed outside any sample: it could not be started, or the loader itself
    /// (not the processor) panicked. The epoch cannot finish.
    #[error("worker failure: {message}")]
    Worker {
        /// What happened.
        message: String,
    },
}

impl LoaderError {
    /// The file the error is about, when there is one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            LoaderError::Io { path, .. }
            | LoaderError::Read { path, .. }
            | LoaderError::Transform { path, .. }
            | LoaderError::Panic { path, .. }
            | LoaderError::FileList { path, .. } => Some(path),
            LoaderError::NoClassFolders { root } | LoaderError::EmptyClasses { root, .. } => {
                Some(root)
            }
            LoaderError::InvalidOption { .. }
            | LoaderError::OutOfMemory { .. }
            | LoaderError::IndexOutOfRange { .. }
            | LoaderError::Worker { .. } => None,
        }
    }

    /// The op that failed, for errors about one sample (`Read` for read failures).
    pub fn op(&self) -> Option<Op> {
        match self {
            LoaderError::Read { .. } => Some(Op::Read),
            LoaderError::Transform { op, .. } | LoaderError::Panic { op, .. } => Some(*op),
            _ => None,
        }
    }

    /// The dataset index of the sample, for errors about one sample.
    pub fn sample_index(&self) -> Option<usize> {
        match self {
            LoaderError::Read { index, .. }
            | LoaderError::Transform { index, .. }
            | LoaderError::Panic { index, .. } => Some(*index),
            _ => None,
        }
    }

    pub(crate) fn invalid(name: &'static str, reason: impl Into<String>) -> Self {
        LoaderError::InvalidOption {
            name,
            reason: reason.into(),
        }
    }
}

/// Result with this crate's [`LoaderError`].
pub type Result<T, E = LoaderError> = std::result::Result<T, E>;
