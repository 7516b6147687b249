//! Errors of the profiler crate. Recording never fails (it drops and counts instead); only
//! setup (registering too many ops, naming a mode) and profile files can.

use std::path::{Path, PathBuf};

/// What went wrong in the profiler.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfilerError {
    /// More than 65536 distinct op names were registered.
    #[error("too many distinct op names (65536 at most); registering {name:?}")]
    TooManyOps {
        /// The name that did not fit.
        name: String,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A profile or summary could not be encoded or decoded as JSON.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The file is JSON but not a ferroloader profile.
    #[error("not a ferroloader profile: schema is {found:?}, expected \"ferroloader.profile\"")]
    WrongSchema {
        /// The schema name the file declares.
        found: String,
    },
    /// A record given to the [`ProfileBuilder`](crate::ProfileBuilder) contradicts the schema
    /// or the records before it.
    #[error("invalid profile record: {0}")]
    InvalidRecord(String),
    /// A profiler mode name that is none of [`Mode`](crate::Mode)'s.
    #[error("expected 'off', 'spans' or 'counters', got {found:?}")]
    UnknownMode {
        /// The name given.
        found: String,
    },
    /// The profile was written by a newer version of the schema than this crate reads.
    #[error("profile schema version {found} is newer than the supported version {supported}")]
    UnsupportedVersion {
        /// The version the file declares.
        found: u32,
        /// The newest version this crate reads.
        supported: u32,
    },
}

impl ProfilerError {
    /// Maps an I/O error on `path` to [`ProfilerError::Io`].
    pub(crate) fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| ProfilerError::Io {
            path: path.into(),
            source,
        }
    }
}

/// Writes `value` as compact JSON to `path` through a buffer; errors name the file.
pub(crate) fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<(), ProfilerError> {
    let file = std::fs::File::create(path).map_err(ProfilerError::io_at(path))?;
    let mut w = std::io::BufWriter::new(file);
    serde_json::to_writer(&mut w, value)?;
    std::io::Write::flush(&mut w).map_err(ProfilerError::io_at(path))
}
