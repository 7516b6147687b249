//! Shared helpers of the loader's integration tests: a deterministic test processor with random
//! per-sample delays and failure triggers, made-up datasets, and batch recording.
#![allow(dead_code)]

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use ferroloader_loader::transforms::Error as TransformError;
use ferroloader_loader::{
    Batch, DType, InMemory, LoaderError, Op, OpHooks, SampleKey, SampleLayout, SampleProcessor,
    SlotMut, TransformOp,
};
use rand::{Rng, SeedableRng};

/// First byte of a sample the processor fails on (every epoch).
pub const FAIL: u8 = 0xEE;
/// First byte of a sample the processor panics on.
pub const PANIC: u8 = 0xDD;
/// First byte of a sample the processor fails on in epoch 0 only.
pub const FAIL_EPOCH0: u8 = 0xCC;
/// First byte of an ordinary sample.
pub const OK: u8 = 0x01;

/// Writes, into each slot, the sample's dataset index (element 0, from the bytes), its first
/// payload byte (element 1) and then draws of a generator seeded by the sample's key; sleeps a
/// random time first (random per process run, so scheduling differs between runs while the
/// output must not).
pub struct TestProc {
    pub layout: SampleLayout,
    pub max_delay_us: u64,
    /// A fixed extra sleep per sample.
    pub sleep: Duration,
    delays: RandomState,
}

impl TestProc {
    pub fn new(dtype: DType, max_delay_us: u64) -> Self {
        TestProc {
            layout: SampleLayout::chw(dtype, 2, 3, 5),
            max_delay_us,
            sleep: Duration::ZERO,
            delays: RandomState::new(),
        }
    }

    pub fn f32() -> Self {
        Self::new(DType::F32, 0)
    }

    pub fn with_sleep(mut self, sleep: Duration) -> Self {
        self.sleep = sleep;
        self
    }
}

impl SampleProcessor for TestProc {
    /// Samples this worker has processed (checks that scratch state is carried along).
    type Scratch = u64;

    fn new_scratch(&self) -> u64 {
        0
    }

    fn sample_layout(&self) -> SampleLayout {
        self.layout
    }

    fn process(
        &self,
        bytes: &[u8],
        key: SampleKey,
        scratch: &mut u64,
        out: SlotMut<'_>,
        hooks: &mut dyn OpHooks,
    ) -> Result<(), TransformError> {
        *scratch += 1;
        hooks.enter(Op::Transform(TransformOp::Decode));
        if self.max_delay_us > 0 {
            let us = self.delays.hash_one((key.epoch, key.index)) % self.max_delay_us;
            thread::sleep(Duration::from_micros(us));
        }
        if !self.sleep.is_zero() {
            thread::sleep(self.sleep);
        }
        let tag = bytes[0];
        let index = u32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
        if tag == FAIL || (tag == FAIL_EPOCH0 && key.epoch == 0) {
            hooks.exit(Op::Transform(TransformOp::Decode));
            return Err(TransformError::Corrupt {
                format: "test",
                detail: format!("bad sample {index}"),
            });
        }
        if tag == PANIC {
            panic!("boom at {index}");
        }
        hooks.exit(Op::Transform(TransformOp::Decode));
        hooks.enter(Op::Transform(TransformOp::Normalize));
        let mut rng = rand_pcg::Pcg64::seed_from_u64(
            key.seed
                ^ key.epoch.wrapping_mul(0x9e37_79b9_7f4a_7c15)
                ^ key.index.rotate_left(32)
                ^ key.repeat.wrapping_mul(0xd1b5_4a32_d192_ed03),
        );
        match out {
            SlotMut::F32(out) => {
                out[0] = index as f32;
                out[1] = f32::from(bytes[5]);
                for v in &mut out[2..] {
                    *v = rng.random::<f32>();
                }
            }
            SlotMut::U8(out) => {
                out[0] = index as u8;
                out[1] = bytes[5];
                rng.fill(&mut out[2..]);
            }
        }
        hooks.exit(Op::Transform(TransformOp::Normalize));
        Ok(())
    }
}

/// `n` samples: `[tag, index (u32 le), payload]`, label `index % 7`; `special` sets tags.
pub fn dataset(n: usize, special: &[(usize, u8)]) -> InMemory {
    InMemory::from_samples((0..n).map(|i| {
        let tag = special
            .iter()
            .find(|(j, _)| *j == i)
            .map_or(OK, |(_, t)| *t);
        let mut bytes = vec![tag];
        bytes.extend_from_slice(&(i as u32).to_le_bytes());
        bytes.push((i * 31 % 251) as u8);
        (bytes, label_of(i))
    }))
}

pub fn label_of(index: usize) -> i64 {
    (index % 7) as i64
}

/// What a test keeps of a delivered batch.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub index: usize,
    pub indices: Vec<usize>,
    pub labels: Vec<i64>,
    pub bytes: Vec<u8>,
    pub out_of_order: bool,
    pub skipped: usize,
}

/// Checks that every slot of `batch` holds the sample its `indices()` entry names, with its label.
pub fn record(batch: &Batch) -> Record {
    assert_eq!(batch.indices().len(), batch.len());
    assert_eq!(batch.labels().len(), batch.len());
    for (slot, &index) in batch.indices().iter().enumerate() {
        assert_eq!(
            batch.labels()[slot],
            label_of(index),
            "label of slot {slot}"
        );
        let sample = batch.sample_bytes(slot);
        let first = match batch.layout().dtype {
            DType::F32 => f32::from_ne_bytes([sample[0], sample[1], sample[2], sample[3]]) as usize,
            DType::U8 => usize::from(sample[0]),
        };
        let want = match batch.layout().dtype {
            DType::F32 => index,
            DType::U8 => index % 256,
        };
        assert_eq!(first, want, "slot {slot} holds another sample");
    }
    Record {
        index: batch.index(),
        indices: batch.indices().to_vec(),
        labels: batch.labels().to_vec(),
        bytes: batch.image_bytes().to_vec(),
        out_of_order: batch.out_of_order(),
        skipped: batch.skipped(),
    }
}

/// Records every batch until the end or the first error.
pub fn drain(
    iter: impl IntoIterator<Item = Result<Batch, LoaderError>>,
) -> (Vec<Record>, Option<LoaderError>) {
    let mut out = Vec::new();
    for item in iter {
        match item {
            Ok(batch) => out.push(record(&batch)),
            Err(e) => return (out, Some(e)),
        }
    }
    (out, None)
}

/// Records every batch and fails the test on an error.
pub fn drain_ok(iter: impl IntoIterator<Item = Result<Batch, LoaderError>>) -> Vec<Record> {
    let (records, err) = drain(iter);
    if let Some(e) = err {
        panic!("unexpected error: {e}");
    }
    records
}

/// The dataset indices of all records, concatenated.
pub fn all_indices(records: &[Record]) -> Vec<usize> {
    records.iter().flat_map(|r| r.indices.clone()).collect()
}

/// Runs `f` on another thread and fails the test if it does not finish in `secs` (a hang).
pub fn with_timeout<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("did not finish in {secs} s: a hang"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the test body panicked"),
    }
}
