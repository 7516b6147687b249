//! Where batch buffers live: plain (pageable) memory, or memory a device runtime page-locks so
//! that copies from a delivered batch to the device run asynchronously, by DMA, straight from
//! the buffer the workers wrote (torch's `pin_memory`, without its copy into a pinned buffer).
//!
//! The loader only calls the hook ([`PageLock`]) when it allocates and frees a buffer. It must
//! not know any device API, and it must not decide when a device has finished reading a
//! delivered batch: whoever hands the batch to the device (the Python wrapper, which knows the
//! streams) keeps the batch alive until then, since dropping it returns its buffer to the ring.

use std::fmt;
use std::sync::Arc;

/// Locks and unlocks regions of host memory for a device runtime (CUDA's `cudaHostRegister` and
/// `cudaHostUnregister`).
///
/// Addresses, not references: an implementation hands them to the runtime and never reads or
/// writes the memory itself.
pub trait PageLock: Send + Sync + fmt::Debug {
    /// Locks the `len` bytes at `address`: a live allocation of the loader that stays allocated,
    /// and locked at most once, until [`PageLock::unlock`] is called with the same address. The
    /// error says why it failed, for the user (the loader adds what the memory was for).
    fn lock(&self, address: usize, len: usize) -> Result<(), String>;

    /// Unlocks what [`PageLock::lock`] locked at `address`, before the memory is freed.
    /// Failures are ignored (at process exit the runtime may be gone before the loader).
    fn unlock(&self, address: usize);
}

/// The memory of a loader's batch buffers ([`crate::LoaderOptions::host_memory`]).
#[derive(Clone, Debug, Default)]
pub enum HostMemory {
    /// Ordinary memory.
    #[default]
    Pageable,
    /// Locked through the hook as each buffer is allocated, unlocked before it is freed.
    PageLocked(Arc<dyn PageLock>),
}

impl HostMemory {
    /// Batch buffers the ring keeps beyond the prefetched ones and the two the consumer holds:
    /// a page-locked batch is held on until the device has read it, a batch or two later, and
    /// a buffer freed in between would be locked again (milliseconds per megabyte) when the
    /// ring next runs short.
    pub(crate) fn held_for_device(&self) -> usize {
        match self {
            HostMemory::Pageable => 0,
            HostMemory::PageLocked(_) => 2,
        }
    }
}

impl PartialEq for HostMemory {
    /// Equal when both are pageable or both lock through the same hook.
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (HostMemory::Pageable, HostMemory::Pageable) => true,
            (HostMemory::PageLocked(a), HostMemory::PageLocked(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for HostMemory {}

/// A region locked through a [`PageLock`]; unlocks it when dropped.
#[derive(Debug)]
pub(crate) struct LockedRegion {
    lock: Arc<dyn PageLock>,
    address: usize,
}

impl LockedRegion {
    /// Locks the `len` bytes at `address` (see [`PageLock::lock`] for what the caller promises).
    pub(crate) fn new(
        lock: &Arc<dyn PageLock>,
        address: usize,
        len: usize,
    ) -> Result<Self, String> {
        lock.lock(address, len)?;
        Ok(LockedRegion {
            lock: Arc::clone(lock),
            address,
        })
    }
}

impl Drop for LockedRegion {
    fn drop(&mut self) {
        self.lock.unlock(self.address);
    }
}
