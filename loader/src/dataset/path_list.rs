//! Files with labels, given as lists: what torchvision's `ImageFolder.samples`, a list of
//! `(path, label)` pairs, a `Subset` or a `ConcatDataset` of them come down to.
//!
//! Holds the listing only; must not read the files until a worker asks, nor check that they
//! exist (a missing file is that sample's read error).

use std::borrow::Cow;
use std::io;
use std::path::{Path, PathBuf};

use super::{read_file_into, Source};
use crate::error::{LoaderError, Result};

/// Files and their labels, in index order.
#[derive(Clone, Debug, Default)]
pub struct PathList {
    paths: Vec<PathBuf>,
    labels: Vec<i64>,
}

impl PathList {
    /// Sample `i` is `paths[i]` with `labels[i]`; both must be as long.
    pub fn new(paths: Vec<PathBuf>, labels: Vec<i64>) -> Result<Self> {
        if paths.len() != labels.len() {
            return Err(LoaderError::invalid(
                "labels",
                format!("{} labels for {} paths", labels.len(), paths.len()),
            ));
        }
        Ok(PathList { paths, labels })
    }

    /// Every sample's path, in index order.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Every sample's label, in index order.
    pub fn labels(&self) -> &[i64] {
        &self.labels
    }
}

impl Source for PathList {
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
