//! A delivered batch: images `[B, sample...]`, labels `[B]` and what the consumer may want to
//! know about how it was made (wait, ordering, skipped samples, timestamps).
//!
//! The batch owns a ring buffer and gives it back to the loader when dropped; it must never copy
//! the images (the Python side hands them to torch without a copy).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::buffer::{BatchBuffer, BufferPool};
use crate::process::{DType, SampleLayout};

/// The images of a batch, typed.
#[derive(Clone, Copy, Debug)]
pub enum BatchImages<'a> {
    /// Float samples.
    F32(&'a [f32]),
    /// Byte samples.
    U8(&'a [u8]),
}

/// The images of a batch, typed and writable (see [`Batch::parts_mut`]).
#[derive(Debug)]
pub enum BatchImagesMut<'a> {
    /// Float samples.
    F32(&'a mut [f32]),
    /// Byte samples.
    U8(&'a mut [u8]),
}

/// When things happened to a batch: `CLOCK_MONOTONIC` nanoseconds, read with
/// [`ferroloader_profiler::now_ns`], the clock of profiles and of Python's `time.monotonic_ns()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchTiming {
    /// Its buffer was taken from the ring and its samples offered to the workers.
    pub planned_ns: u64,
    /// A worker started its first sample.
    pub started_ns: Option<u64>,
    /// Its last sample finished.
    pub completed_ns: Option<u64>,
    /// It was handed to the consumer.
    pub delivered_ns: Option<u64>,
}

impl BatchTiming {
    pub(crate) fn planned_at(planned_ns: u64) -> Self {
        BatchTiming {
            planned_ns,
            started_ns: None,
            completed_ns: None,
            delivered_ns: None,
        }
    }
}

/// One batch of processed samples; its buffer returns to the loader's ring when dropped.
pub struct Batch {
    pub(crate) buffer: BatchBuffer,
    pub(crate) pool: Arc<BufferPool>,
    pub(crate) len: usize,
    pub(crate) layout: SampleLayout,
    pub(crate) sample_bytes: usize,
    /// Bytes of each part of a sample (one entry, `sample_bytes`, when samples are not cut).
    pub(crate) part_bytes: Arc<[usize]>,
    /// Samples each part's block was laid out for: `len`, or more when skipped samples left
    /// the batch short (its samples are then the first `len` of each block).
    pub(crate) rows: usize,
    pub(crate) index: usize,
    pub(crate) epoch: u64,
    pub(crate) out_of_order: bool,
    pub(crate) skipped: usize,
    pub(crate) wait: Duration,
    pub(crate) timing: BatchTiming,
    /// The loader-wide number of the planned batch whose buffer this is (the profile's batch).
    pub(crate) batch_id: u64,
    /// Samples planned for that batch (differs from `len` after skips).
    pub(crate) planned_len: usize,
    /// It completed while an earlier batch of the epoch was still being made.
    pub(crate) completed_early: bool,
    /// The batch op a worker ran on it ([`crate::BatchOps`]).
    pub(crate) applied: Option<&'static str>,
}

impl Batch {
    /// Samples in the batch (the batch size, or fewer for the epoch's last batch).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the batch has no samples (never the case for a delivered batch).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Which batch of the epoch this is: its place in delivery order when delivered in order,
    /// its planned place when delivered in completion order.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The epoch it belongs to.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The layout of one sample.
    pub fn layout(&self) -> SampleLayout {
        self.layout
    }

    /// The images' shape: `[len, sample shape...]` (with samples cut into parts, each part's
    /// `[len, part]` run lies at [`Batch::part_range`]).
    pub fn shape(&self) -> [usize; 4] {
        let [a, b, c] = self.layout.shape;
        [self.len, a, b, c]
    }

    /// The images as raw bytes (native-endian elements), `len * sample bytes` long,
    /// 64-byte aligned. With samples cut into parts, the blocks of every part (see
    /// [`Batch::part`]), `rows * sample bytes` long.
    pub fn image_bytes(&self) -> &[u8] {
        &self.buffer.images[..self.block_rows() * self.sample_bytes]
    }

    /// Samples each part's block holds room for.
    fn block_rows(&self) -> usize {
        if self.part_bytes.len() > 1 {
            self.rows
        } else {
            self.len
        }
    }

    /// Parts each sample is cut into ([`crate::SampleProcessor::sample_parts`]; 1 when not).
    pub fn parts(&self) -> usize {
        self.part_bytes.len()
    }

    /// Bytes of part `part` of one sample.
    pub fn part_len(&self, part: usize) -> Option<usize> {
        self.part_bytes.get(part).copied()
    }

    /// Where part `part` of the batch's samples lies in [`Batch::image_bytes`]: the bytes of
    /// `len` samples' part, one after the other, so a contiguous `[len, part]` run.
    pub fn part_range(&self, part: usize) -> Option<std::ops::Range<usize>> {
        let bytes = self.part_bytes.get(part)?;
        let start = self.block_rows() * self.part_bytes[..part].iter().sum::<usize>();
        Some(start..start + self.len * bytes)
    }

    /// The images, typed.
    pub fn images(&self) -> BatchImages<'_> {
        let bytes = self.image_bytes();
        match self.layout.dtype {
            DType::U8 => BatchImages::U8(bytes),
            // Cannot panic: the buffer starts 64-byte aligned (see `BatchBuffer::new`) and its
            // length is a whole number of f32 samples.
            DType::F32 => BatchImages::F32(bytemuck::cast_slice(bytes)),
        }
    }

    /// The images, labels and dataset indices, writable, all at once (disjoint borrows). For
    /// consumers that transform a batch in place, and for handing the buffer to code that may
    /// write into it (numpy arrays are writable): the batch owns its buffer until it drops, and
    /// the loader overwrites all of it before delivering it again.
    pub fn parts_mut(&mut self) -> (BatchImagesMut<'_>, &mut [i64], &mut [usize]) {
        let len = self.block_rows() * self.sample_bytes;
        let bytes = &mut self.buffer.images[..len];
        let images = match self.layout.dtype {
            DType::U8 => BatchImagesMut::U8(bytes),
            // Cannot panic: as in `images`.
            DType::F32 => BatchImagesMut::F32(bytemuck::cast_slice_mut(bytes)),
        };
        (images, &mut self.buffer.labels, &mut self.buffer.indices)
    }

    /// The raw bytes of sample `i` of a batch whose samples are not cut into parts (with parts,
    /// a sample's bytes lie in each part's block: [`Batch::part_range`]).
    pub fn sample_bytes(&self, i: usize) -> &[u8] {
        &self.image_bytes()[i * self.sample_bytes..(i + 1) * self.sample_bytes]
    }

    /// Labels, one per sample.
    pub fn labels(&self) -> &[i64] {
        &self.buffer.labels
    }

    /// Dataset indices of the samples, in slot order.
    pub fn indices(&self) -> &[usize] {
        &self.buffer.indices
    }

    /// Whether an earlier batch of the epoch had not been delivered yet when this one was
    /// (only ever true with [`crate::Delivery::CompletionOrder`]).
    pub fn out_of_order(&self) -> bool {
        self.out_of_order
    }

    /// Samples skipped (under [`crate::ErrorPolicy::Skip`]) since the previous batch was
    /// delivered.
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// How long the consumer's `next()` took to return this batch (its wait for data).
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// The name of the batch op a worker ran on the batch before delivering it
    /// ([`crate::BatchOps::plan`]); `None` when none ran (none planned, or the consumer's to
    /// run).
    pub fn applied(&self) -> Option<&'static str> {
        self.applied
    }

    /// When the batch was planned, started, completed and delivered.
    pub fn timing(&self) -> BatchTiming {
        self.timing
    }

    /// The batch's number in the loader's profile: unique across all epochs of the loader
    /// (planned batches are numbered in order as epochs start). After skips, this is the
    /// number of the planned batch whose buffer the batch was assembled in.
    pub fn batch_id(&self) -> u64 {
        self.batch_id
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.pool.put(std::mem::take(&mut self.buffer));
    }
}

impl fmt::Debug for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("epoch", &self.epoch)
            .field("index", &self.index)
            .field("shape", &self.shape())
            .field("dtype", &self.layout.dtype)
            .field("out_of_order", &self.out_of_order)
            .field("skipped", &self.skipped)
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}
