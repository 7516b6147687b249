//! Batch buffers and the ring they are recycled through.
//!
//! A batch's images live in one contiguous, 64-byte-aligned allocation. While the batch is being
//! filled, the allocation is split into one owned piece per sample (`BytesMut::split_to`), each
//! piece travels to whichever worker processes that sample, and the pieces are joined back
//! without a copy (`try_unsplit`) once all have returned: workers write straight into the batch
//! with no shared mutable state and no `unsafe` here. Must not allocate in steady state: buffers
//! and their bookkeeping vectors go back to the pool and are reused as they are.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::{Buf, BytesMut};

use crate::error::LoaderError;

/// Alignment of every batch buffer: a cache line, and more than `f32` needs.
pub(crate) const ALIGN: usize = 64;

/// What became of one sample of a batch in flight.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Not processed yet.
    Pending,
    /// Written into its piece.
    Done,
    /// Failed; the piece holds garbage.
    Failed(LoaderError),
}

/// One batch's storage and bookkeeping, reused from batch to batch.
#[derive(Debug, Default)]
pub(crate) struct BatchBuffer {
    /// The whole buffer when idle or delivered; while split, only the unsplit tail.
    pub(crate) images: BytesMut,
    /// One piece per sample while the batch is in flight (`None` while a worker holds it).
    pub(crate) pieces: Vec<Option<BytesMut>>,
    /// One outcome per sample while the batch is in flight.
    pub(crate) outcomes: Vec<Outcome>,
    /// Labels of the samples written so far, in slot order.
    pub(crate) labels: Vec<i64>,
    /// Dataset indices of the samples written so far, in slot order.
    pub(crate) indices: Vec<usize>,
    /// Never filled before: its pages are not mapped yet (see [`touch_pages`]).
    pub(crate) fresh: bool,
}

impl BatchBuffer {
    /// A zeroed buffer for `batch_size` samples of `sample_bytes`. The zeroed pages come from
    /// `calloc`, so nothing is touched (faulted in) until the workers write.
    fn new(batch_size: usize, sample_bytes: usize) -> Self {
        let len = batch_size * sample_bytes;
        let mut images = BytesMut::zeroed(len + ALIGN - 1);
        let misalignment = images.as_ptr() as usize % ALIGN;
        images.advance((ALIGN - misalignment) % ALIGN);
        images.truncate(len);
        BatchBuffer {
            images,
            pieces: Vec::with_capacity(batch_size),
            outcomes: Vec::with_capacity(batch_size),
            labels: Vec::with_capacity(batch_size),
            indices: Vec::with_capacity(batch_size),
            fresh: true,
        }
    }

    /// Splits the first `n` samples off into pieces and resets the bookkeeping.
    pub(crate) fn split(&mut self, n: usize, sample_bytes: usize) {
        self.pieces.clear();
        for _ in 0..n {
            self.pieces.push(Some(self.images.split_to(sample_bytes)));
        }
        self.outcomes.clear();
        self.outcomes.resize_with(n, || Outcome::Pending);
        self.labels.clear();
        self.indices.clear();
    }

    /// Joins the pieces and the tail back into one buffer, in place. Returns false when that is
    /// impossible (a piece was lost), leaving the buffer unusable (the pool then drops it).
    pub(crate) fn join(&mut self) -> bool {
        let mut whole: Option<BytesMut> = None;
        for piece in self.pieces.drain(..) {
            let Some(piece) = piece else {
                return false;
            };
            match whole.as_mut() {
                None => whole = Some(piece),
                Some(w) => {
                    if w.try_unsplit(piece).is_err() {
                        return false;
                    }
                }
            }
        }
        if let Some(mut w) = whole {
            let tail = std::mem::take(&mut self.images);
            if w.try_unsplit(tail).is_err() {
                return false;
            }
            self.images = w;
        }
        true
    }

    /// Copies the sample in slot `from` over slot `to` (`to < from`) of the same batch.
    pub(crate) fn move_piece(&mut self, from: usize, to: usize) {
        let (low, high) = self.pieces.split_at_mut(from);
        if let (Some(Some(dst)), Some(Some(src))) = (low.get_mut(to), high.first()) {
            dst.copy_from_slice(src);
        }
    }

    /// Copies slot `from` of `src` into slot `to` of `self`.
    pub(crate) fn copy_piece_from(&mut self, to: usize, src: &BatchBuffer, from: usize) {
        if let (Some(Some(dst)), Some(Some(src))) = (self.pieces.get_mut(to), src.pieces.get(from))
        {
            dst.copy_from_slice(src);
        }
    }
}

/// Bytes between two writes of [`touch_pages`]: the smallest page size of the platforms the
/// loader runs on (a larger page is touched more than once, which costs nothing more).
const PAGE: usize = 4096;

/// Writes into every page `piece` spans, so that the kernel maps them now (a page fault each)
/// rather than in the first op that writes the slot. The bytes written are zeros, into memory
/// that `calloc` zeroed, and the slot is overwritten whole by the processor anyway.
pub(crate) fn touch_pages(piece: &mut [u8]) {
    for byte in piece.iter_mut().step_by(PAGE) {
        // Opaque to the optimizer, which could otherwise drop stores of zero into memory it
        // can prove is zero.
        *byte = std::hint::black_box(0);
    }
    if let Some(last) = piece.last_mut() {
        *last = std::hint::black_box(0);
    }
}

/// Idle batch buffers of one loader, shared by its epochs and the batches it has delivered.
#[derive(Debug)]
pub(crate) struct BufferPool {
    free: Mutex<Vec<BatchBuffer>>,
    /// Most idle buffers kept; more are freed (a consumer that held many batches at once
    /// does not pin that memory for ever).
    keep: usize,
    batch_size: usize,
    sample_bytes: usize,
}

impl BufferPool {
    pub(crate) fn new(batch_size: usize, sample_bytes: usize, keep: usize) -> Arc<Self> {
        Arc::new(BufferPool {
            free: Mutex::new(Vec::with_capacity(keep)),
            keep,
            batch_size,
            sample_bytes,
        })
    }

    fn free(&self) -> MutexGuard<'_, Vec<BatchBuffer>> {
        self.free.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An idle buffer, or a new one when none is idle.
    pub(crate) fn take(&self) -> BatchBuffer {
        let reused = self.free().pop();
        reused.unwrap_or_else(|| BatchBuffer::new(self.batch_size, self.sample_bytes))
    }

    /// Returns a buffer; one that is not whole (or one too many) is freed instead.
    pub(crate) fn put(&self, mut buffer: BatchBuffer) {
        let whole =
            buffer.pieces.is_empty() && buffer.images.len() == self.batch_size * self.sample_bytes;
        if !whole {
            return;
        }
        buffer.outcomes.clear();
        buffer.fresh = false;
        // A buffer not kept is freed after the guard is gone (locals drop in reverse order).
        let mut free = self.free();
        if free.len() < self.keep {
            free.push(buffer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_and_join_round_trip_without_copy() {
        let pool = BufferPool::new(4, 12, 2);
        let mut buf = pool.take();
        assert!(buf.fresh);
        let base = buf.images.as_ptr() as usize;
        assert_eq!(base % ALIGN, 0);
        assert_eq!(buf.images.len(), 48);
        buf.split(3, 12);
        for (i, piece) in buf.pieces.iter_mut().enumerate() {
            let piece = piece.as_mut().expect("just split");
            assert_eq!(piece.as_ptr() as usize, base + 12 * i);
            piece.fill(i as u8 + 1);
        }
        buf.move_piece(2, 0);
        assert!(buf.join());
        assert_eq!(buf.images.as_ptr() as usize, base, "joined in place");
        assert_eq!(&buf.images[..12], &[3; 12]);
        assert_eq!(&buf.images[12..36], &[[2; 12], [3; 12]].concat()[..]);
        pool.put(buf);
        let again = pool.take();
        assert_eq!(again.images.as_ptr() as usize, base, "recycled");
        assert!(!again.fresh, "a recycled buffer's pages are mapped already");
        assert!(pool.take().fresh, "a new one's are not");
    }

    #[test]
    fn a_lost_piece_makes_the_buffer_unusable_not_wrong() {
        let pool = BufferPool::new(2, 8, 2);
        let mut buf = pool.take();
        buf.split(2, 8);
        buf.pieces[1] = None;
        assert!(!buf.join());
        pool.put(buf);
        assert!(pool.free().is_empty());
    }

    #[test]
    fn touching_writes_one_zero_per_page_and_the_last_byte() {
        for len in [0, 1, PAGE - 1, PAGE, PAGE + 1, 3 * PAGE + 17] {
            let mut piece = vec![1u8; len];
            touch_pages(&mut piece);
            let zeros: Vec<usize> = (0..len).filter(|&i| piece[i] == 0).collect();
            let mut want: Vec<usize> = (0..len).step_by(PAGE).collect();
            if len > 0 && (len - 1) % PAGE != 0 {
                want.push(len - 1);
            }
            assert_eq!(zeros, want, "len {len}");
        }
    }
}
