//! Memory: the steady state allocates nothing per sample or per batch, and resident memory stays
//! flat over many epochs.
//!
//! One test only, with a counting global allocator: allocation counts are process-wide, so no
//! other test may run beside it.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::fs;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use ferroloader_loader::{DType, EpochIter, InMemory, Loader, LoaderOptions, SampleLayout};

/// The system allocator, counting allocation calls.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract holds exactly as it does for `System`.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; `ptr` was allocated by `System` through this allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged; `ptr` was allocated by `System` through this allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn resident_bytes() -> usize {
    let statm = fs::read_to_string("/proc/self/statm").expect("procfs");
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .expect("resident pages");
    pages * 4096
}

/// Starts an epoch and runs it to the end, dropping each batch at once; returns (samples,
/// allocations made from the start of the epoch to the end of its threads).
fn run(start: impl FnOnce() -> EpochIter<InMemory, TestProc>) -> (usize, usize) {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let mut samples = 0;
    for batch in start() {
        samples += batch.expect("no failures").len();
    }
    (samples, ALLOCATIONS.load(Ordering::Relaxed) - before)
}

#[test]
fn steady_state_allocates_nothing_per_sample_and_memory_stays_flat() {
    let mut proc_ = TestProc::f32();
    // 48 KiB samples, 768 KiB batches: one batch lost per epoch would show clearly.
    proc_.layout = SampleLayout::chw(DType::F32, 3, 64, 64);
    let options = LoaderOptions::default()
        .batch_size(16)
        .num_workers(2)
        .prefetch_batches(2)
        .shuffle(true);
    let loader = Loader::new(dataset(640, &[]), proc_, options).expect("valid");

    // Warm up: the ring, the workers' scratch and read buffers reach their sizes. Holding the
    // first batch while the workers fill the prefetch window makes the ring reach its largest
    // steady-state size (window + the batch in the consumer's hands) now, not at some later
    // moment that depends on timing.
    let mut iter = loader.epoch(0);
    let held = iter.next().expect("a batch").expect("ok");
    std::thread::sleep(std::time::Duration::from_millis(100));
    drop(held);
    assert_eq!(iter.map(|b| b.expect("ok").len()).sum::<usize>(), 640 - 16);
    assert_eq!(run(|| loader.epoch(1)).0, 640);
    let small_plan: Vec<usize> = (0..64).collect();
    let (n_small, small) = run(|| loader.epoch_with_indices(2, small_plan).expect("in range"));
    let (n_big, big) = run(|| loader.epoch(3));
    assert_eq!((n_small, n_big), (64, 640));
    // 36 more batches and 576 more samples cost (almost) nothing more: what an epoch allocates
    // is its plan and its threads. One allocation per batch or per sample would add >= 36.
    assert!(
        big <= small + 4,
        "an epoch of 640 samples made {big} allocations, one of 64 made {small}"
    );
    assert!(small < 200, "{small} allocations to run a 4-batch epoch");

    // Resident memory after 20 more epochs is where it was after the warm-up.
    let start = resident_bytes();
    for epoch in 4..24 {
        assert_eq!(run(|| loader.epoch(epoch)).0, 640);
    }
    // Less than one batch (768 KiB): no buffer was added or lost and refaulted.
    let grown = resident_bytes().saturating_sub(start);
    assert!(
        grown < 512 << 10,
        "resident memory grew by {} KiB over 20 epochs",
        grown >> 10
    );
}
