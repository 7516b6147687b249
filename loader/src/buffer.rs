//! Batch buffers and the ring they are recycled through.
//!
//! A batch's images live in one contiguous, 64-byte-aligned allocation. While the batch is being
//! filled, the allocation is split into one owned piece per sample (`BytesMut::split_to`), or
//! per part of a sample when samples are cut into parts (a block of each part's pieces after
//! another, see [`crate::SampleProcessor::sample_parts`]); a sample's pieces travel to
//! whichever worker processes that sample, and the pieces are joined back
//! without a copy (`try_unsplit`) once all have returned: workers write straight into the batch
//! with no shared mutable state and no `unsafe` here. Must not allocate in steady state: buffers
//! and their bookkeeping vectors go back to the pool and are reused as they are. With
//! [`HostMemory::PageLocked`], each buffer is locked once, when allocated, and unlocked before
//! it is freed; reuse keeps it locked.

use std::alloc::{self, Layout};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::{Buf, Bytes, BytesMut};

use crate::error::LoaderError;
use crate::host_memory::{HostMemory, LockedRegion};

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
    /// Written with another sample, `index`, after the failures of the samples tried before it
    /// (dataset index and error each; [`crate::ErrorPolicy::Replace`]).
    Replaced {
        index: usize,
        failures: Vec<(usize, LoaderError)>,
    },
}

/// One batch's storage and bookkeeping, reused from batch to batch.
#[derive(Debug, Default)]
pub(crate) struct BatchBuffer {
    /// Samples it holds when whole (its images are `capacity * sample_bytes` long).
    capacity: usize,
    /// The images' page lock, if any. Declared before `images`, so it is dropped (unlocked)
    /// before the memory can be freed.
    locked: Option<LockedRegion>,
    /// The whole buffer when idle or delivered; while split, only the unsplit tail.
    pub(crate) images: BytesMut,
    /// One piece per sample and part while the batch is in flight (`None` while a worker
    /// holds it), in address order: part `p` of slot `i` at `p * rows + i`.
    pub(crate) pieces: Vec<Option<BytesMut>>,
    /// Samples the buffer was last split for: each part's block holds that many.
    pub(crate) rows: usize,
    /// One outcome per sample while the batch is in flight.
    pub(crate) outcomes: Vec<Outcome>,
    /// Labels of the samples written so far, in slot order.
    pub(crate) labels: Vec<i64>,
    /// Dataset indices of the samples written so far, in slot order.
    pub(crate) indices: Vec<usize>,
    /// Never filled before: its pages are not mapped yet (see [`touch_pages`]). Cleared when
    /// the pieces of a batch are joined back.
    pub(crate) fresh: bool,
}

impl BatchBuffer {
    /// A zeroed buffer for `capacity` samples of `sample_bytes`, or `None` when the allocator
    /// refuses the memory (a size that follows from the user's options must not abort the
    /// process). The zeroed pages come from `calloc`, so nothing is touched (faulted in) until
    /// the workers write.
    fn try_new(capacity: usize, sample_bytes: usize) -> Option<Self> {
        let len = capacity.checked_mul(sample_bytes)?;
        let zeroed = Bytes::from(try_zeroed(len.checked_add(ALIGN - 1)?)?);
        // The only owner, so this takes the allocation over without a copy.
        let mut images = zeroed.try_into_mut().ok()?;
        let misalignment = images.as_ptr() as usize % ALIGN;
        images.advance((ALIGN - misalignment) % ALIGN);
        images.truncate(len);
        let mut pieces = Vec::new();
        let mut outcomes = Vec::new();
        let mut labels = Vec::new();
        let mut indices = Vec::new();
        pieces.try_reserve_exact(capacity).ok()?;
        outcomes.try_reserve_exact(capacity).ok()?;
        labels.try_reserve_exact(capacity).ok()?;
        indices.try_reserve_exact(capacity).ok()?;
        Some(BatchBuffer {
            capacity,
            locked: None,
            images,
            pieces,
            rows: 0,
            outcomes,
            labels,
            indices,
            fresh: true,
        })
    }

    /// Splits the first `n` samples off into pieces, `part_bytes` each (one entry: whole
    /// samples), block by block, and resets the bookkeeping.
    pub(crate) fn split(&mut self, n: usize, part_bytes: &[usize]) {
        self.pieces.clear();
        for &bytes in part_bytes {
            for _ in 0..n {
                self.pieces.push(Some(self.images.split_to(bytes)));
            }
        }
        self.rows = n;
        self.outcomes.clear();
        self.outcomes.resize_with(n, || Outcome::Pending);
        self.labels.clear();
        self.indices.clear();
    }

    /// Parts each sample is split into.
    pub(crate) fn parts(&self) -> usize {
        self.pieces.len().checked_div(self.rows).unwrap_or(0)
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
        // Its pages have been written: mapped from now on.
        self.fresh = false;
        true
    }

    /// Copies the sample in slot `from` over slot `to` (`to < from`) of the same batch.
    pub(crate) fn move_piece(&mut self, from: usize, to: usize) {
        for part in 0..self.parts() {
            let (low, high) = self.pieces.split_at_mut(part * self.rows + from);
            if let (Some(Some(dst)), Some(Some(src))) =
                (low.get_mut(part * self.rows + to), high.first())
            {
                dst.copy_from_slice(src);
            }
        }
    }

    /// Copies slot `from` of `src` into slot `to` of `self` (split into the same parts).
    pub(crate) fn copy_piece_from(&mut self, to: usize, src: &BatchBuffer, from: usize) {
        for part in 0..self.parts() {
            let dst = self.pieces.get_mut(part * self.rows + to);
            let src = src.pieces.get(part * src.rows + from);
            if let (Some(Some(dst)), Some(Some(src))) = (dst, src) {
                dst.copy_from_slice(src);
            }
        }
    }
}

/// `len` zeroed bytes from the allocator's zeroing path (`calloc`: fresh pages are not touched),
/// or `None` when it refuses them.
fn try_zeroed(len: usize) -> Option<Vec<u8>> {
    if len == 0 {
        return Some(Vec::new());
    }
    let layout = Layout::array::<u8>(len).ok()?;
    // SAFETY: `layout` has a non-zero size (checked above).
    let ptr = unsafe { alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return None;
    }
    // SAFETY: `ptr` was just allocated by the global allocator with the layout of `[u8; len]`
    // (alignment 1, size `len`, which is the capacity given), and all `len` bytes are
    // initialized (zeroed).
    Some(unsafe { Vec::from_raw_parts(ptr, len, len) })
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
///
/// Buffers are sized by the epoch that asks (its batch size, or its whole plan when that is
/// shorter: a batch size far above the dataset's length must not allocate for samples that do
/// not exist); an idle buffer serves any epoch whose batches fit in it.
#[derive(Debug)]
pub(crate) struct BufferPool {
    free: Mutex<Vec<BatchBuffer>>,
    /// Most idle buffers kept; more are freed (a consumer that held many batches at once
    /// does not pin that memory for ever).
    keep: usize,
    sample_bytes: usize,
    memory: HostMemory,
}

/// A batch buffer that could not be had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TakeFailed {
    /// The allocator refused its `bytes` bytes of images.
    Alloc {
        /// Bytes of the buffer's images.
        bytes: usize,
    },
    /// The [`HostMemory::PageLocked`] hook refused to lock them.
    Lock {
        /// Bytes of the buffer's images.
        bytes: usize,
        /// The hook's reason.
        why: String,
    },
}

/// The error for a batch buffer of `samples` samples of `sample_bytes` that cannot be had.
pub(crate) fn buffer_error(samples: usize, sample_bytes: usize, failed: TakeFailed) -> LoaderError {
    let what = format!("a batch buffer of {samples} samples of {sample_bytes} bytes");
    match failed {
        TakeFailed::Alloc { bytes } => LoaderError::OutOfMemory {
            name: "batch_size",
            what,
            bytes,
        },
        TakeFailed::Lock { bytes, why } => LoaderError::OutOfMemory {
            name: "pin_memory",
            what: format!("{what}, page-locked ({why})"),
            bytes,
        },
    }
}

impl BufferPool {
    pub(crate) fn new(sample_bytes: usize, keep: usize, memory: HostMemory) -> Arc<Self> {
        Arc::new(BufferPool {
            free: Mutex::new(Vec::new()),
            keep,
            sample_bytes,
            memory,
        })
    }

    fn free(&self) -> MutexGuard<'_, Vec<BatchBuffer>> {
        self.free.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An idle buffer holding at least `samples` samples, or a new one of exactly `samples`
    /// (page-locked when the pool's memory is).
    pub(crate) fn take(&self, samples: usize) -> Result<BatchBuffer, TakeFailed> {
        let reused = {
            let mut free = self.free();
            let fits = free.iter().rposition(|b| b.capacity >= samples);
            fits.map(|i| free.swap_remove(i))
        };
        if let Some(buffer) = reused {
            return Ok(buffer);
        }
        let bytes = samples.saturating_mul(self.sample_bytes);
        let mut buffer =
            BatchBuffer::try_new(samples, self.sample_bytes).ok_or(TakeFailed::Alloc { bytes })?;
        if let HostMemory::PageLocked(lock) = &self.memory {
            let address = buffer.images.as_ptr() as usize;
            let region = LockedRegion::new(lock, address, buffer.images.len())
                .map_err(|why| TakeFailed::Lock { bytes, why })?;
            buffer.locked = Some(region);
        }
        Ok(buffer)
    }

    /// Returns a buffer; one that is not whole (or one too many) is freed instead.
    pub(crate) fn put(&self, mut buffer: BatchBuffer) {
        let whole =
            buffer.pieces.is_empty() && buffer.images.len() == buffer.capacity * self.sample_bytes;
        if !whole {
            return;
        }
        buffer.outcomes.clear();
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
    use crate::host_memory::PageLock;

    #[test]
    fn split_and_join_round_trip_without_copy() {
        let pool = BufferPool::new(12, 2, HostMemory::Pageable);
        let mut buf = pool.take(4).expect("small");
        assert!(buf.fresh);
        let base = buf.images.as_ptr() as usize;
        assert_eq!(base % ALIGN, 0);
        assert_eq!(buf.images.len(), 48);
        buf.split(3, &[12]);
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
        let again = pool.take(3).expect("small");
        assert_eq!(
            again.images.as_ptr() as usize,
            base,
            "recycled for a smaller batch"
        );
        assert!(!again.fresh, "a recycled buffer's pages are mapped already");
        assert!(pool.take(4).expect("small").fresh, "a new one's are not");
    }

    #[test]
    fn parts_are_split_block_by_block_and_moved_part_by_part() {
        let pool = BufferPool::new(6, 2, HostMemory::Pageable);
        let mut buf = pool.take(4).expect("small");
        let base = buf.images.as_ptr() as usize;
        // Samples of a 2-byte part and a 4-byte part, laid out for 3 samples.
        buf.split(3, &[2, 4]);
        assert_eq!((buf.rows, buf.parts(), buf.pieces.len()), (3, 2, 6));
        let starts = [0, 2, 4, 6, 10, 14];
        for (i, piece) in buf.pieces.iter_mut().enumerate() {
            let piece = piece.as_mut().expect("just split");
            assert_eq!(piece.as_ptr() as usize, base + starts[i]);
            piece.fill(i as u8 + 1);
        }
        let mut other = pool.take(4).expect("small");
        other.split(2, &[2, 4]);
        for piece in other.pieces.iter_mut() {
            piece.as_mut().expect("just split").fill(9);
        }
        buf.move_piece(2, 0);
        buf.copy_piece_from(1, &other, 1);
        assert!(buf.join());
        assert_eq!(buf.images.as_ptr() as usize, base, "joined in place");
        assert_eq!(
            &buf.images[..18],
            &[3, 3, 9, 9, 3, 3, 6, 6, 6, 6, 9, 9, 9, 9, 6, 6, 6, 6]
        );
        // Split again for whole samples: the bookkeeping is the new split's.
        buf.split(4, &[6]);
        assert_eq!((buf.rows, buf.parts()), (4, 1));
    }

    #[test]
    fn a_lost_piece_makes_the_buffer_unusable_not_wrong() {
        let pool = BufferPool::new(8, 2, HostMemory::Pageable);
        let mut buf = pool.take(2).expect("small");
        buf.split(2, &[8]);
        buf.pieces[1] = None;
        assert!(!buf.join());
        pool.put(buf);
        assert!(pool.free().is_empty());
    }

    #[test]
    fn a_buffer_too_small_is_not_reused_and_a_refused_one_is_an_error() {
        let pool = BufferPool::new(8, 2, HostMemory::Pageable);
        let small = pool.take(2).expect("small");
        let base = small.images.as_ptr() as usize;
        pool.put(small);
        let big = pool.take(5).expect("small");
        assert_eq!(big.capacity, 5);
        assert_ne!(big.images.as_ptr() as usize, base);
        // More than any address space: the allocator refuses, nothing aborts.
        let huge = usize::MAX / 16;
        assert_eq!(
            pool.take(huge).map(|b| b.capacity),
            Err(TakeFailed::Alloc {
                bytes: huge.saturating_mul(8)
            })
        );
        // black_box: an allocation nothing reads may be elided (and then "succeeds") under
        // optimization, which `cargo test --release` does.
        assert!(std::hint::black_box(try_zeroed(isize::MAX as usize)).is_none());
        let big = BatchBuffer::try_new(1 << 10, 1 << 10).expect("1 MiB");
        assert_eq!(big.images.len(), 1 << 20);
        assert_eq!(big.images.as_ptr() as usize % ALIGN, 0);
        let zeroed = try_zeroed(3 * PAGE + 5).expect("small");
        assert_eq!(zeroed.len(), 3 * PAGE + 5);
        assert!(zeroed.iter().all(|&b| b == 0));
        assert!(try_zeroed(0).expect("empty").is_empty());
    }

    /// Records every lock and unlock; refuses locks past `limit` bytes in total.
    #[derive(Debug, Default)]
    struct RecordingLock {
        limit: usize,
        events: Mutex<Vec<(&'static str, usize, usize)>>,
    }

    impl PageLock for RecordingLock {
        fn lock(&self, address: usize, len: usize) -> Result<(), String> {
            let mut events = self.events.lock().expect("not poisoned");
            let locked: usize = events
                .iter()
                .map(|e| if e.0 == "lock" { e.2 } else { 0 })
                .sum();
            if locked + len > self.limit {
                return Err("over the test's limit".into());
            }
            events.push(("lock", address, len));
            Ok(())
        }

        fn unlock(&self, address: usize) {
            self.events
                .lock()
                .expect("not poisoned")
                .push(("unlock", address, 0));
        }
    }

    #[test]
    fn page_locked_buffers_are_locked_once_and_unlocked_when_freed() {
        let lock = Arc::new(RecordingLock {
            limit: 100,
            ..RecordingLock::default()
        });
        let events = || lock.events.lock().expect("not poisoned").clone();
        let pool = BufferPool::new(8, 1, HostMemory::PageLocked(lock.clone()));
        let a = pool.take(4).expect("small");
        let a_at = a.images.as_ptr() as usize;
        assert_eq!(
            events(),
            [("lock", a_at, 32)],
            "the images, aligned, exactly"
        );
        pool.put(a);
        let a = pool.take(4).expect("reused");
        assert_eq!(events().len(), 1, "a reused buffer is not locked again");
        let b = pool.take(4).expect("new");
        let b_at = b.images.as_ptr() as usize;
        pool.put(a);
        pool.put(b); // one more than `keep`: freed
        assert_eq!(events()[1..], [("lock", b_at, 32), ("unlock", b_at, 0)]);
        // 32 + 32 locked so far, 32 of them unlocked: 64 more would pass 100.
        assert_eq!(
            pool.take(8).map(|b| b.capacity),
            Err(TakeFailed::Lock {
                bytes: 64,
                why: "over the test's limit".into()
            })
        );
        let error = buffer_error(
            8,
            8,
            TakeFailed::Lock {
                bytes: 64,
                why: "cudaErrorMemoryAllocation".into(),
            },
        );
        assert!(
            error
                .to_string()
                .starts_with("pin_memory: cannot allocate 64 bytes"),
            "{error}"
        );
        assert!(
            error
                .to_string()
                .contains("page-locked (cudaErrorMemoryAllocation)"),
            "{error}"
        );
        drop(pool);
        assert_eq!(
            events().last(),
            Some(&("unlock", a_at, 0)),
            "the pool's last buffer too"
        );
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
