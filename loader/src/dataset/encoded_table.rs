//! Encoded images as byte ranges of shared buffers, with labels: what an Arrow table's binary
//! column comes down to (a Hugging Face dataset's `Image()` column: each row's `bytes`, or a
//! `path` to read where it has none).
//!
//! Must not copy the buffers (a memory-mapped table may be larger than memory), decode, or
//! read a file before a worker asks for that sample. Every range is checked against its buffer
//! when the table is made, so reads cannot go out of bounds.

use std::borrow::Cow;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{read_file_into, Source};
use crate::error::{LoaderError, Result};

/// An immutable buffer the rows' bytes lie in, shared with whoever made it (an Arrow buffer,
/// a memory map, a `Vec<u8>`). Its bytes must not change while the table holds it.
pub type SharedBytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

fn bytes_of(buffer: &SharedBytes) -> &[u8] {
    (**buffer).as_ref()
}

/// Where one row's value lies: `len` bytes from `start` in buffer `buffer`, or nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cell {
    /// [`Cell::NULL`] for a row without a value.
    buffer: u32,
    len: u32,
    start: u64,
}

impl Cell {
    const NULL: u32 = u32::MAX;
}

/// A column of byte strings: each row a range of one of `buffers`, or null.
#[derive(Clone, Default)]
pub struct ByteColumn {
    buffers: Vec<SharedBytes>,
    cells: Vec<Cell>,
}

impl fmt::Debug for ByteColumn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ByteColumn")
            .field("buffers", &self.buffers.len())
            .field("rows", &self.cells.len())
            .finish()
    }
}

impl ByteColumn {
    /// Row `i` is `buffers[buffer[i]][start[i]..start[i] + len[i]]`, or null where `buffer[i]`
    /// is `u32::MAX`. The three slices must be as long, and every non-null range must lie in
    /// its buffer (`name` says which column is wrong in the error).
    pub fn new(
        name: &'static str,
        buffers: Vec<SharedBytes>,
        buffer: &[u32],
        start: &[u64],
        len: &[u64],
    ) -> Result<Self> {
        if start.len() != buffer.len() || len.len() != buffer.len() {
            return Err(LoaderError::invalid(
                name,
                format!(
                    "{} buffer indices, {} starts and {} lengths: one each per row",
                    buffer.len(),
                    start.len(),
                    len.len()
                ),
            ));
        }
        let mut cells = Vec::with_capacity(buffer.len());
        for (row, ((&b, &s), &l)) in buffer.iter().zip(start).zip(len).enumerate() {
            if b == Cell::NULL {
                cells.push(Cell {
                    buffer: b,
                    len: 0,
                    start: 0,
                });
                continue;
            }
            let size = buffers.get(b as usize).map(|buf| bytes_of(buf).len());
            let end = s.checked_add(l);
            let fits = matches!((size, end), (Some(size), Some(end)) if end <= size as u64);
            let len32 = u32::try_from(l);
            match (fits, len32) {
                (true, Ok(len)) => cells.push(Cell {
                    buffer: b,
                    len,
                    start: s,
                }),
                (true, Err(_)) => {
                    return Err(LoaderError::invalid(
                        name,
                        format!("row {row}: {l} bytes, more than one sample may hold (4 GiB)"),
                    ))
                }
                (false, _) => {
                    return Err(LoaderError::invalid(
                        name,
                        format!(
                            "row {row}: bytes {s}..{s}+{l} of buffer {b}, which {}",
                            size.map_or_else(
                                || format!("does not exist ({} buffers)", buffers.len()),
                                |size| format!("holds {size} bytes")
                            )
                        ),
                    ))
                }
            }
        }
        Ok(ByteColumn { buffers, cells })
    }

    /// A column of `rows` nulls.
    pub fn nulls(rows: usize) -> Self {
        ByteColumn {
            buffers: Vec::new(),
            cells: vec![
                Cell {
                    buffer: Cell::NULL,
                    len: 0,
                    start: 0,
                };
                rows
            ],
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.cells.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// Row `row`'s bytes, `None` where it is null.
    pub fn get(&self, row: usize) -> Option<&[u8]> {
        let cell = self.cells[row];
        if cell.buffer == Cell::NULL {
            return None;
        }
        let bytes = bytes_of(&self.buffers[cell.buffer as usize]);
        // In range and within usize: checked against this buffer in `new`.
        let start = cell.start as usize;
        Some(&bytes[start..start + cell.len as usize])
    }
}

/// Encoded images with labels: row `i`'s image is its `images` bytes, or, where those are null,
/// the file its `paths` value names (read as a [`PathList`](super::PathList) reads one).
#[derive(Clone, Debug)]
pub struct EncodedTable {
    images: ByteColumn,
    paths: ByteColumn,
    labels: Vec<i64>,
    name: String,
}

impl EncodedTable {
    /// A table of `labels.len()` rows; `images` and `paths` must have as many. `name` is what
    /// errors call a row without a path (`name[index]`).
    pub fn new(
        images: ByteColumn,
        paths: ByteColumn,
        labels: Vec<i64>,
        name: impl Into<String>,
    ) -> Result<Self> {
        if images.len() != labels.len() || paths.len() != labels.len() {
            return Err(LoaderError::invalid(
                "labels",
                format!(
                    "{} labels for {} images and {} paths",
                    labels.len(),
                    images.len(),
                    paths.len()
                ),
            ));
        }
        Ok(EncodedTable {
            images,
            paths,
            labels,
            name: name.into(),
        })
    }

    /// Every row's label, in index order.
    pub fn labels(&self) -> &[i64] {
        &self.labels
    }

    /// Row `index`'s path value as a path (bytes taken as UTF-8, Arrow's string encoding).
    fn stored_path(&self, index: usize) -> Option<&Path> {
        let bytes = self.paths.get(index)?;
        std::str::from_utf8(bytes).ok().map(Path::new)
    }
}

impl Source for EncodedTable {
    fn len(&self) -> usize {
        self.labels.len()
    }

    fn read<'a>(&'a self, index: usize, buf: &'a mut Vec<u8>) -> io::Result<&'a [u8]> {
        if let Some(bytes) = self.images.get(index) {
            return Ok(bytes);
        }
        match self.stored_path(index) {
            Some(path) => read_file_into(path, buf),
            None if self.paths.get(index).is_some() => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the row's path is not valid UTF-8",
            )),
            None => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the row has no image: both its bytes and its path are null",
            )),
        }
    }

    fn label(&self, index: usize) -> i64 {
        self.labels[index]
    }

    /// The file a row is read from; for a row with bytes, `name[index]` and the file it was
    /// made from, where the table says.
    fn path(&self, index: usize) -> Cow<'_, Path> {
        let stored = self.stored_path(index);
        match (self.images.get(index).is_some(), stored) {
            (false, Some(path)) => Cow::Borrowed(path),
            (true, Some(path)) => Cow::Owned(PathBuf::from(format!(
                "{}[{index}] ({})",
                self.name,
                path.display()
            ))),
            (_, None) => Cow::Owned(PathBuf::from(format!("{}[{index}]", self.name))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(bytes: &[u8]) -> SharedBytes {
        Arc::new(bytes.to_vec())
    }

    #[test]
    fn rows_borrow_their_buffer_or_read_their_file() {
        let dir = std::env::temp_dir().join(format!("fl-encoded-table-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("two.bin");
        std::fs::write(&file, b"from a file").expect("write");
        let file_name = file.to_str().expect("utf-8 temp dir").as_bytes().to_vec();
        let names = [b"a.jpg".as_slice(), &file_name].concat();

        let images = ByteColumn::new(
            "images",
            vec![shared(b"xxabc"), shared(b"de")],
            &[0, 1, u32::MAX, u32::MAX],
            &[2, 0, 0, 0],
            &[3, 2, 0, 0],
        )
        .expect("in range");
        let paths = ByteColumn::new(
            "paths",
            vec![Arc::new(names)],
            &[0, u32::MAX, 0, u32::MAX],
            &[0, 0, 5, 0],
            &[5, 0, file_name.len() as u64, 0],
        )
        .expect("in range");
        let table = EncodedTable::new(images, paths, vec![7, 8, 9, 10], "train").expect("rows");

        let mut buf = Vec::new();
        assert_eq!(table.read(0, &mut buf).expect("bytes"), b"abc");
        assert_eq!(table.read(1, &mut buf).expect("bytes"), b"de");
        assert_eq!(buf.capacity(), 0, "bytes are borrowed, not copied");
        assert_eq!(table.read(2, &mut buf).expect("file"), b"from a file");
        let missing = table.read(3, &mut buf).expect_err("no image");
        assert!(missing
            .to_string()
            .contains("both its bytes and its path are null"));

        assert_eq!(table.path(0).to_str(), Some("train[0] (a.jpg)"));
        assert_eq!(table.path(1).to_str(), Some("train[1]"));
        assert_eq!(table.path(2), file.as_path());
        assert_eq!(table.label(3), 10);
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn ranges_outside_their_buffer_are_refused() {
        let out_of_range = ByteColumn::new("images", vec![shared(b"abc")], &[0], &[2], &[2]);
        let err = out_of_range.expect_err("past the end").to_string();
        assert!(err.contains("images") && err.contains("row 0") && err.contains("holds 3 bytes"));

        let overflow = ByteColumn::new("images", vec![shared(b"abc")], &[0], &[u64::MAX], &[2]);
        assert!(overflow.is_err());

        let no_buffer = ByteColumn::new("images", vec![shared(b"abc")], &[1], &[0], &[1]);
        let err = no_buffer.expect_err("no buffer 1").to_string();
        assert!(err.contains("does not exist (1 buffers)"), "{err}");

        let ragged = ByteColumn::new("images", vec![], &[0, 1], &[0], &[0, 0]);
        assert!(ragged.is_err());

        let rows = EncodedTable::new(ByteColumn::nulls(2), ByteColumn::nulls(1), vec![0, 1], "t");
        assert!(rows.is_err());
    }

    #[test]
    fn a_path_that_is_not_utf8_is_that_rows_error() {
        let paths = ByteColumn::new("paths", vec![shared(&[0xff, 0xfe])], &[0], &[0], &[2])
            .expect("in range");
        let table = EncodedTable::new(ByteColumn::nulls(1), paths, vec![0], "t").expect("rows");
        let err = table.read(0, &mut Vec::new()).expect_err("not UTF-8");
        assert!(err.to_string().contains("not valid UTF-8"));
        assert_eq!(table.path(0).to_str(), Some("t[0]"));
    }
}
