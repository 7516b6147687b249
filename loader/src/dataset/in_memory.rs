//! Encoded samples held in memory: a cache of another dataset, or made-up data for tests.
//!
//! All bytes live in one allocation and reads borrow them (no copy). Must not grow while it is
//! being read: it is built first, then shared with the loader.

use std::borrow::Cow;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::Source;
use crate::error::{LoaderError, Result};

/// Samples' bytes and labels in memory.
#[derive(Clone, Debug, Default)]
pub struct InMemory {
    data: Vec<u8>,
    /// `ends[i]` is one past the last byte of sample `i`.
    ends: Vec<usize>,
    labels: Vec<i64>,
    /// The names samples had where they came from (empty when made up).
    names: Vec<PathBuf>,
}

impl InMemory {
    /// An empty dataset.
    pub fn new() -> Self {
        Self::default()
    }

    /// A dataset of `(bytes, label)` pairs, in order.
    pub fn from_samples<I, B>(samples: I) -> Self
    where
        I: IntoIterator<Item = (B, i64)>,
        B: AsRef<[u8]>,
    {
        let mut out = Self::new();
        for (bytes, label) in samples {
            out.push(bytes.as_ref(), label);
        }
        out
    }

    /// Reads every sample of `source` once and keeps the bytes, labels and names.
    pub fn cache<S: Source + ?Sized>(source: &S) -> Result<Self> {
        let mut out = Self::new();
        let mut buf = Vec::new();
        for index in 0..source.len() {
            let bytes = source
                .read(index, &mut buf)
                .map_err(|e| LoaderError::Read {
                    index,
                    path: source.path(index).into_owned(),
                    source: e,
                })?;
            out.data.extend_from_slice(bytes);
            out.ends.push(out.data.len());
            out.labels.push(source.label(index));
            out.names.push(source.path(index).into_owned());
        }
        Ok(out)
    }

    /// Appends a sample.
    pub fn push(&mut self, bytes: &[u8], label: i64) {
        self.data.extend_from_slice(bytes);
        self.ends.push(self.data.len());
        self.labels.push(label);
    }

    /// The bytes of sample `index`.
    pub fn bytes(&self, index: usize) -> &[u8] {
        &self.data[self.range(index)]
    }

    /// Total bytes held.
    pub fn total_bytes(&self) -> usize {
        self.data.len()
    }

    fn range(&self, index: usize) -> Range<usize> {
        let start = if index == 0 { 0 } else { self.ends[index - 1] };
        start..self.ends[index]
    }
}

impl Source for InMemory {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn read<'a>(&'a self, index: usize, _buf: &'a mut Vec<u8>) -> io::Result<&'a [u8]> {
        Ok(self.bytes(index))
    }

    fn label(&self, index: usize) -> i64 {
        self.labels[index]
    }

    fn path(&self, index: usize) -> Cow<'_, Path> {
        match self.names.get(index) {
            Some(name) => Cow::Borrowed(name),
            None => Cow::Owned(PathBuf::from(format!("<memory>/{index}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_borrow_the_stored_bytes() {
        let ds = InMemory::from_samples([(&b"ab"[..], 3), (&b""[..], 4), (&b"xyz"[..], 5)]);
        assert_eq!(ds.len(), 3);
        let mut buf = Vec::new();
        assert_eq!(ds.read(0, &mut buf).expect("in memory"), b"ab");
        assert_eq!(ds.read(1, &mut buf).expect("in memory"), b"");
        assert_eq!(ds.read(2, &mut buf).expect("in memory"), b"xyz");
        assert_eq!(buf.capacity(), 0, "no copy into the buffer");
        assert_eq!(ds.label(2), 5);
        assert_eq!(ds.path(1).to_str(), Some("<memory>/1"));

        let copy = InMemory::cache(&ds).expect("in memory");
        assert_eq!(copy.bytes(2), b"xyz");
        assert_eq!(copy.label(0), 3);
        assert_eq!(copy.path(1).to_str(), Some("<memory>/1"));
        assert_eq!(copy.total_bytes(), 5);
    }
}
