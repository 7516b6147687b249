//! Datasets: where a sample's bytes and label come from.
//!
//! A [`Source`] only reads bytes and reports labels and names; it must not decode, transform or
//! cache on its own (caching is an explicit [`InMemory`] copy), and it must be safe to read from
//! many worker threads at once.

mod encoded_table;
mod file_list;
mod image_array;
mod image_folder;
mod in_memory;
mod path_list;

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferroloader_profiler::Profiler;

use crate::sampler::Sampler;

pub use encoded_table::{ByteColumn, EncodedTable, SharedBytes};
pub use file_list::{Column, FileList, FileListOptions, ListFormat};
pub use image_array::ImageArray;
pub use image_folder::{ImageFolder, ImageFolderOptions, IMG_EXTENSIONS};
pub use in_memory::InMemory;
pub use path_list::PathList;

/// A dataset of encoded samples with integer labels, read concurrently by the workers.
///
/// Indices are `0..len()`; the loader never passes anything else, so implementations may panic
/// on an index out of range.
pub trait Source: Send + Sync {
    /// Number of samples.
    fn len(&self) -> usize;

    /// Whether there are no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of sample `index`: read into `buf` (cleared first, its allocation reused, so a
    /// worker's steady state allocates nothing) or borrowed from the source itself when it holds
    /// them already.
    fn read<'a>(&'a self, index: usize, buf: &'a mut Vec<u8>) -> io::Result<&'a [u8]>;

    /// The label of sample `index`.
    fn label(&self, index: usize) -> i64;

    /// The file (or a made-up name) of sample `index`: its name in error messages and in the
    /// dataset's fingerprint, so a pure function of the source. Not on the hot path.
    fn path(&self, index: usize) -> Cow<'_, Path>;

    /// What an error about sample `index` names: [`path`](Source::path) unless the source can
    /// say more once the sample has failed (a Python dataset's item, asked for again, names its
    /// file). Called only on a failure.
    fn error_name(&self, index: usize) -> PathBuf {
        self.path(index).into_owned()
    }

    /// The order epoch `epoch` visits the samples in, when the source knows a better one than
    /// `sampler`'s (shards read one after another instead of samples scattered over them).
    /// `None`, the default, keeps the sampler's. When given, it must be a pure function of the
    /// source, `epoch` and the sampler's settings, and hold `sampler.num_samples()` indices, so
    /// that reruns, resumes and every worker count see the same order.
    fn epoch_order(&self, _epoch: u64, _sampler: &Sampler) -> Option<Vec<usize>> {
        None
    }

    /// Told, as an epoch starts, the reads it will make, in order (what is left of the plan
    /// when resuming), so a source that fetches ahead knows what to fetch and when its data
    /// can be freed. Reads outside the latest plan must still succeed. Default: ignored.
    fn epoch_plan(&self, _plan: &[usize]) {}

    /// The loader's profiler, handed over when the loader is made (and again when it is
    /// replaced), for a source that does I/O of its own to record it (as
    /// [`Profiler::io_span`]s). Default: ignored.
    fn attach_profiler(&self, _profiler: &Profiler) {}
}

macro_rules! forward_source {
    ($ty:ty) => {
        impl<S: Source + ?Sized> Source for $ty {
            fn len(&self) -> usize {
                (**self).len()
            }
            fn read<'a>(&'a self, index: usize, buf: &'a mut Vec<u8>) -> io::Result<&'a [u8]> {
                (**self).read(index, buf)
            }
            fn label(&self, index: usize) -> i64 {
                (**self).label(index)
            }
            fn path(&self, index: usize) -> Cow<'_, Path> {
                (**self).path(index)
            }
            fn error_name(&self, index: usize) -> PathBuf {
                (**self).error_name(index)
            }
            fn epoch_order(&self, epoch: u64, sampler: &Sampler) -> Option<Vec<usize>> {
                (**self).epoch_order(epoch, sampler)
            }
            fn epoch_plan(&self, plan: &[usize]) {
                (**self).epoch_plan(plan)
            }
            fn attach_profiler(&self, profiler: &Profiler) {
                (**self).attach_profiler(profiler)
            }
        }
    };
}

forward_source!(Arc<S>);
forward_source!(Box<S>);
forward_source!(&S);

/// Reads a whole file into `buf`, reusing its allocation (`read_to_end` sizes it from the
/// file's length, so there is one read call and no regrowth once `buf` is large enough).
pub fn read_file_into<'a>(path: &Path, buf: &'a mut Vec<u8>) -> io::Result<&'a [u8]> {
    buf.clear();
    File::open(path)?.read_to_end(buf)?;
    Ok(buf)
}
