//! The loader end to end on in-memory data: coverage, determinism, ordering, error policies,
//! hooks and lifecycle.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;
use ferroloader_loader::{
    BatchImages, BatchImagesMut, BatchOp, DType, Delivery, ErrorPolicy, Instrument, Loader,
    LoaderError, LoaderOptions, Op, OpHooks, ResumePoint, SampleContext, SampleKey, SampleLayout,
    SampleProcessor, Sampler, Shard, SlotMut, SlotParts, TransformOp, MAX_NUM_WORKERS,
    MAX_PREFETCH_BATCHES,
};

fn opts(batch: usize, workers: usize) -> LoaderOptions {
    LoaderOptions::default()
        .batch_size(batch)
        .num_workers(workers)
        .prefetch_batches(3)
}

#[test]
fn every_sample_exactly_once_per_epoch() {
    let n = 103;
    for shuffle in [false, true] {
        for drop_last in [false, true] {
            let options = opts(8, 3).shuffle(shuffle).drop_last(drop_last).seed(11);
            let loader = Loader::new(dataset(n, &[]), TestProc::new(DType::F32, 200), options)
                .expect("valid");
            let records = drain_ok(loader.epoch(2));
            let sizes: Vec<usize> = records.iter().map(|r| r.indices.len()).collect();
            let full = if drop_last { 12 } else { 13 };
            assert_eq!(records.len(), full);
            assert_eq!(loader.num_batches(), full);
            assert!(sizes[..12].iter().all(|&s| s == 8));
            if !drop_last {
                assert_eq!(sizes[12], 7, "short last batch");
            }
            let got = all_indices(&records);
            let mut want = Sampler::new(n, shuffle, 11, None)
                .expect("valid")
                .indices(2);
            want.truncate(got.len());
            assert_eq!(got, want, "shuffle={shuffle} drop_last={drop_last}");
            let distinct: HashSet<usize> = got.iter().copied().collect();
            assert_eq!(distinct.len(), got.len(), "no sample twice");
            if !shuffle {
                assert_eq!(got, (0..got.len()).collect::<Vec<_>>());
            }
            if !drop_last {
                assert_eq!(distinct.len(), n, "every sample");
            }
            for (k, r) in records.iter().enumerate() {
                assert_eq!(r.index, k);
                assert!(!r.out_of_order);
            }
        }
    }
}

#[test]
fn sharded_ranks_are_disjoint_covering_and_padded_like_distributed_sampler() {
    let (n, world) = (50, 4);
    let perm = Sampler::new(n, true, 3, None).expect("valid").indices(5);
    for drop_last in [false, true] {
        let mut per_rank = Vec::new();
        for rank in 0..world {
            let options = opts(5, 2)
                .shuffle(true)
                .seed(3)
                .shard(Shard::new(rank, world).drop_last(drop_last));
            let loader = Loader::new(dataset(n, &[]), TestProc::f32(), options).expect("valid");
            let got = all_indices(&drain_ok(loader.epoch(5)));
            assert_eq!(got.len(), loader.num_samples());
            per_rank.push(got);
        }
        let per = if drop_last { 12 } else { 13 };
        assert!(per_rank.iter().all(|r| r.len() == per));
        // Interleaving the ranks gives back the shuffled list, padded with its own head
        // (or cut) to a multiple of the world size.
        let mut interleaved = Vec::new();
        for k in 0..per {
            for r in &per_rank {
                interleaved.push(r[k]);
            }
        }
        let want: Vec<usize> = (0..per * world).map(|i| perm[i % n]).collect();
        assert_eq!(interleaved, want, "drop_last={drop_last}");
        let distinct: HashSet<usize> = interleaved.iter().copied().collect();
        if drop_last {
            assert_eq!(distinct.len(), 48, "disjoint ranks");
        } else {
            assert_eq!(distinct.len(), n, "ranks cover the dataset");
        }
    }
}

#[test]
fn output_is_bit_identical_whatever_the_number_of_workers() {
    for dtype in [DType::F32, DType::U8] {
        let run = |workers: usize, seed: u64, epoch: u64| {
            let options = opts(8, workers).shuffle(true).seed(seed);
            let loader =
                Loader::new(dataset(90, &[]), TestProc::new(dtype, 300), options).expect("valid");
            drain_ok(loader.epoch(epoch))
        };
        let one = run(1, 5, 3);
        assert_eq!(one.len(), 12);
        for workers in [0, 2, 4] {
            assert_eq!(run(workers, 5, 3), one, "{workers} workers, {dtype:?}");
        }
        let other_seed = run(2, 6, 3);
        let other_epoch = run(2, 5, 4);
        assert_ne!(other_seed[0].bytes, one[0].bytes);
        assert_ne!(other_epoch[0].bytes, one[0].bytes);
        // The same samples in another order still get their own key's draws: the sample
        // content differs between epochs even where the index is the same.
        let sample = |records: &[Record], index: usize| {
            let sample_len = one[0].bytes.len() / 8;
            records
                .iter()
                .find_map(|r| {
                    r.indices
                        .iter()
                        .position(|&i| i == index)
                        .map(|slot| r.bytes[slot * sample_len..(slot + 1) * sample_len].to_vec())
                })
                .expect("every sample is there")
        };
        assert_ne!(sample(&one, 17), sample(&other_epoch, 17));
    }
}

#[test]
fn completion_order_delivers_every_batch_once_and_flags_overtakers() {
    let n = 97;
    let options = opts(4, 4)
        .prefetch_batches(6)
        .delivery(Delivery::CompletionOrder);
    let loader =
        Loader::new(dataset(n, &[]), TestProc::new(DType::F32, 2000), options).expect("valid");
    let records = with_timeout(60, move || drain_ok(loader.epoch(0)));
    assert_eq!(records.len(), 25);
    let mut seen = HashSet::new();
    for r in &records {
        // A batch is its planned run of samples, whatever order it arrives in.
        let want: Vec<usize> = (r.index * 4..(r.index * 4 + 4).min(n)).collect();
        assert_eq!(r.indices, want);
        let overtook = (0..r.index).any(|b| !seen.contains(&b));
        assert_eq!(r.out_of_order, overtook, "batch {}", r.index);
        assert!(seen.insert(r.index), "batch {} twice", r.index);
    }
    assert_eq!(seen.len(), 25);
}

#[test]
fn skip_fills_batches_from_the_next_samples_deterministically() {
    let n = 60;
    // Two neighbours, a whole planned batch (40..48) and the very last sample.
    let mut bad: Vec<usize> = vec![3, 4, 17, 59];
    bad.extend(40..48);
    let special: Vec<(usize, u8)> = bad.iter().map(|&i| (i, FAIL)).collect();
    for shuffle in [false, true] {
        let run = |workers: usize, prefetch: usize| {
            let options = opts(8, workers)
                .prefetch_batches(prefetch)
                .shuffle(shuffle)
                .seed(9)
                .on_error(ErrorPolicy::Skip);
            let loader = Loader::new(
                dataset(n, &special),
                TestProc::new(DType::F32, 300),
                options,
            )
            .expect("valid");
            let mut iter = loader.epoch(1);
            let records = drain_ok(&mut iter);
            let skipped: Vec<(usize, Option<Op>)> = iter
                .skipped()
                .iter()
                .map(|s| (s.index, s.error.op()))
                .collect();
            let first_error = iter.skipped()[0].error.to_string();
            (records, skipped, first_error)
        };
        // One batch in flight at a time: filling a batch from the next one must not deadlock.
        let (records, skipped, first_error) = run(1, 1);
        let plan = Sampler::new(n, shuffle, 9, None).expect("valid").indices(1);
        let good: Vec<usize> = plan.iter().copied().filter(|i| !bad.contains(i)).collect();
        assert_eq!(all_indices(&records), good);
        let sizes: Vec<usize> = records.iter().map(|r| r.indices.len()).collect();
        assert_eq!(sizes, vec![8, 8, 8, 8, 8, 8]);
        // Each batch counts the skips since the previous one; skips after the last good sample
        // belong to no batch.
        let last_good = plan
            .iter()
            .rposition(|i| !bad.contains(i))
            .expect("some good");
        let attributed = plan[..last_good].iter().filter(|i| bad.contains(i)).count();
        assert_eq!(records.iter().map(|r| r.skipped).sum::<usize>(), attributed);
        let in_plan_order: Vec<usize> = plan.iter().copied().filter(|i| bad.contains(i)).collect();
        assert_eq!(
            skipped,
            in_plan_order
                .iter()
                .map(|&i| (i, Some(Op::Transform(TransformOp::Decode))))
                .collect::<Vec<_>>()
        );
        assert!(first_error.contains("<memory>/"), "{first_error}");
        assert!(first_error.contains("decode failed"), "{first_error}");
        assert!(first_error.contains("bad sample"), "{first_error}");
        for (workers, prefetch) in [(0, 1), (0, 3), (2, 1), (2, 3), (4, 2)] {
            assert_eq!(
                run(workers, prefetch).0,
                records,
                "{workers} workers, prefetch {prefetch}, shuffle={shuffle}"
            );
        }
    }
}

#[test]
fn skip_leaves_a_short_last_batch_and_handles_drop_last_and_completion_order() {
    let n = 30;
    let bad = [2usize, 9, 10, 11, 12, 13, 14, 15, 16, 25];
    let special: Vec<(usize, u8)> = bad.iter().map(|&i| (i, FAIL)).collect();
    let good = |limit: usize| -> Vec<usize> { (0..limit).filter(|i| !bad.contains(i)).collect() };

    let options = opts(8, 3).on_error(ErrorPolicy::Skip);
    let loader = Loader::new(
        dataset(n, &special),
        TestProc::new(DType::U8, 300),
        options.clone(),
    )
    .expect("valid");
    let records = drain_ok(loader.epoch(0));
    assert_eq!(all_indices(&records), good(n));
    let sizes: Vec<usize> = records.iter().map(|r| r.indices.len()).collect();
    assert_eq!(sizes, vec![8, 8, 4]);
    assert_eq!(records.iter().map(|r| r.skipped).sum::<usize>(), bad.len());

    // drop_last cuts the plan to 24 samples first; failures then shorten the last batch.
    let loader = Loader::new(
        dataset(n, &special),
        TestProc::new(DType::U8, 300),
        options.clone().drop_last(true),
    )
    .expect("valid");
    let records = drain_ok(loader.epoch(0));
    assert_eq!(all_indices(&records), good(24));
    let sizes: Vec<usize> = records.iter().map(|r| r.indices.len()).collect();
    assert_eq!(sizes, vec![8, 7]);

    // In completion order each planned batch just loses its failed samples.
    let loader = Loader::new(
        dataset(n, &special),
        TestProc::new(DType::U8, 300),
        options.delivery(Delivery::CompletionOrder),
    )
    .expect("valid");
    let mut records = drain_ok(loader.epoch(0));
    records.sort_by_key(|r| r.index);
    let chunks: Vec<Vec<usize>> = records.iter().map(|r| r.indices.clone()).collect();
    assert_eq!(
        chunks,
        vec![
            vec![0, 1, 3, 4, 5, 6, 7],
            vec![8],
            vec![17, 18, 19, 20, 21, 22, 23],
            vec![24, 26, 27, 28, 29]
        ]
    );
}

#[test]
fn raise_names_the_file_the_op_and_the_cause_and_the_next_epoch_runs() {
    let loader = Loader::new(
        dataset(40, &[(20, FAIL_EPOCH0)]),
        TestProc::new(DType::F32, 300),
        opts(8, 3),
    )
    .expect("valid");
    let mut iter = loader.epoch(0);
    let (records, err) = drain(&mut iter);
    assert_eq!(
        records.len(),
        2,
        "the batches before the failing one arrive"
    );
    let err = err.expect("sample 20 fails");
    assert!(matches!(
        err,
        LoaderError::Transform {
            index: 20,
            op: Op::Transform(TransformOp::Decode),
            ..
        }
    ));
    assert_eq!(err.path().and_then(|p| p.to_str()), Some("<memory>/20"));
    let msg = err.to_string();
    assert!(
        msg.contains("<memory>/20") && msg.contains("decode") && msg.contains("bad sample 20"),
        "{msg}"
    );
    assert!(
        std::error::Error::source(&err).is_some(),
        "the cause is kept"
    );
    assert!(iter.next().is_none(), "the epoch ends after the error");
    drop(iter);
    let records = drain_ok(loader.epoch(1));
    assert_eq!(all_indices(&records), (0..40).collect::<Vec<_>>());
}

#[test]
fn a_panicking_processor_becomes_an_error_never_an_abort_or_a_hang() {
    let special = [(13usize, PANIC), (14, PANIC), (30, PANIC)];
    let raised = with_timeout(60, move || {
        let loader = Loader::new(
            dataset(40, &special),
            TestProc::new(DType::F32, 200),
            opts(8, 3),
        )
        .expect("valid");
        drain(loader.epoch(0))
    });
    assert_eq!(raised.0.len(), 1);
    match raised.1 {
        Some(LoaderError::Panic {
            index, op, message, ..
        }) => {
            assert_eq!(index, 13);
            assert_eq!(op, Op::Transform(TransformOp::Decode));
            assert_eq!(message, "boom at 13");
        }
        other => panic!("expected a panic error, got {other:?}"),
    }

    let run = |workers: usize| {
        with_timeout(60, move || {
            let options = opts(8, workers).on_error(ErrorPolicy::Skip);
            let loader = Loader::new(
                dataset(40, &special),
                TestProc::new(DType::F32, 200),
                options,
            )
            .expect("valid");
            let mut iter = loader.epoch(0);
            let records = drain_ok(&mut iter);
            let causes: Vec<String> = iter.skipped().iter().map(|s| s.error.to_string()).collect();
            (records, causes)
        })
    };
    let (records, causes) = run(1);
    assert_eq!(all_indices(&records).len(), 37);
    assert_eq!(causes.len(), 3);
    assert!(
        causes[0].contains("panicked during decode: boom at 13"),
        "{}",
        causes[0]
    );
    assert_eq!(run(4).0, records);
}

#[test]
fn the_consumer_may_hold_every_batch_at_once() {
    let loader = Loader::new(
        dataset(50, &[]),
        TestProc::new(DType::F32, 100),
        opts(4, 2).prefetch_batches(1),
    )
    .expect("valid");
    let batches = with_timeout(60, move || {
        loader
            .epoch(0)
            .collect::<Result<Vec<_>, _>>()
            .expect("no failures")
    });
    assert_eq!(batches.len(), 13);
    let records: Vec<Record> = batches.iter().map(record).collect();
    assert_eq!(all_indices(&records), (0..50).collect::<Vec<_>>());
}

#[test]
fn two_loaders_run_at_the_same_time() {
    let a =
        Loader::new(dataset(64, &[]), TestProc::new(DType::F32, 200), opts(8, 2)).expect("valid");
    let b = Loader::new(
        dataset(40, &[]),
        TestProc::new(DType::U8, 200),
        opts(5, 2).shuffle(true),
    )
    .expect("valid");
    let (mut ia, mut ib) = (a.epoch(0), b.epoch(0));
    let (mut ra, mut rb) = (Vec::new(), Vec::new());
    loop {
        let na = ia.next().map(|r| record(&r.expect("ok")));
        let nb = ib.next().map(|r| record(&r.expect("ok")));
        if na.is_none() && nb.is_none() {
            break;
        }
        ra.extend(na);
        rb.extend(nb);
    }
    assert_eq!(all_indices(&ra), (0..64).collect::<Vec<_>>());
    let mut got_b = all_indices(&rb);
    got_b.sort_unstable();
    assert_eq!(got_b, (0..40).collect::<Vec<_>>());

    // ... and from two threads, the same loader running two epochs at once.
    let a = Arc::new(a);
    let handles: Vec<_> = (0..2u64)
        .map(|e| {
            let a = Arc::clone(&a);
            thread::spawn(move || all_indices(&drain_ok(a.epoch(e))))
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().expect("no panic"), (0..64).collect::<Vec<_>>());
    }
}

#[test]
fn explicit_indices_are_loaded_in_the_order_given() {
    let loader = Loader::new(dataset(10, &[]), TestProc::f32(), opts(3, 2)).expect("valid");
    let records = drain_ok(
        loader
            .epoch_with_indices(0, vec![5, 5, 1, 9])
            .expect("in range"),
    );
    let chunks: Vec<Vec<usize>> = records.iter().map(|r| r.indices.clone()).collect();
    assert_eq!(chunks, vec![vec![5, 5, 1], vec![9]]);
    assert!(matches!(
        loader.epoch_with_indices(0, vec![1, 10]),
        Err(LoaderError::IndexOutOfRange {
            index: 10,
            position: 1,
            len: 10
        })
    ));
}

#[test]
fn iter_moves_the_epoch_on_and_set_epoch_goes_back() {
    let loader =
        Loader::new(dataset(30, &[]), TestProc::f32(), opts(30, 2).shuffle(true)).expect("valid");
    let sampler = *loader.sampler();
    let first = all_indices(&drain_ok(loader.iter()));
    let second = all_indices(&drain_ok(&loader));
    assert_eq!(first, sampler.indices(0));
    assert_eq!(second, sampler.indices(1));
    assert_ne!(first, second);
    assert_eq!(loader.next_epoch(), 2);
    loader.set_epoch(0);
    assert_eq!(all_indices(&drain_ok(loader.iter())), first);
}

#[test]
fn invalid_options_are_rejected() {
    let make = |o: LoaderOptions| Loader::new(dataset(4, &[]), TestProc::f32(), o).map(|_| ());
    assert!(matches!(
        make(opts(0, 1)),
        Err(LoaderError::InvalidOption {
            name: "batch_size",
            ..
        })
    ));
    assert!(make(opts(2, 1).prefetch_batches(0)).is_err());
    // Limits that turn a typo into an error rather than an abort.
    for (options, name) in [
        (opts(2, MAX_NUM_WORKERS + 1), "num_workers"),
        (
            opts(2, 1).prefetch_batches(MAX_PREFETCH_BATCHES + 1),
            "prefetch_batches",
        ),
        (opts(2, 1).prefetch_batches(usize::MAX), "prefetch_batches"),
    ] {
        match make(options) {
            Err(LoaderError::InvalidOption { name: got, reason }) => {
                assert_eq!(got, name);
                assert!(reason.starts_with("must be at most"), "{reason}");
            }
            other => panic!("{name}: expected an invalid option, got {other:?}"),
        }
    }
    assert!(make(opts(2, 1).shard(Shard::new(2, 2))).is_err());
    let mut empty = TestProc::f32();
    empty.layout.shape = [3, 0, 2];
    assert!(Loader::new(dataset(4, &[]), empty, opts(2, 1)).is_err());
    // An empty dataset is fine: no batches.
    let loader = Loader::new(dataset(0, &[]), TestProc::f32(), opts(2, 1)).expect("valid");
    assert_eq!(loader.iter().count(), 0);
}

#[test]
fn batch_buffers_are_sized_by_what_an_epoch_can_fill() {
    // Batch sizes far beyond the dataset (DataLoader gives one batch of everything): no
    // allocation for samples that do not exist.
    for batch in [50_000, 1 << 40, usize::MAX] {
        let loader = Loader::new(dataset(8, &[]), TestProc::f32(), opts(batch, 2)).expect("valid");
        let records = drain_ok(loader.iter());
        assert_eq!(records.len(), 1, "batch {batch}");
        assert_eq!(records[0].indices, (0..8).collect::<Vec<_>>());
    }
    // Explicit indices longer than the dataset get buffers of their own size.
    let loader = Loader::new(dataset(3, &[]), TestProc::f32(), opts(1 << 40, 1)).expect("valid");
    let records = drain_ok(
        loader
            .epoch_with_indices(0, vec![0, 1, 2, 2, 1, 0, 0])
            .expect("in range"),
    );
    assert_eq!(records[0].indices, [0, 1, 2, 2, 1, 0, 0]);
}

#[test]
fn memory_beyond_the_machine_is_an_error_naming_the_option_not_an_abort() {
    // 10^12 samples of 120 bytes: no allocator grants that.
    let big = Loader::new(dataset(4, &[]), TestProc::f32(), opts(1_000_000, 1)).map(|_| ());
    assert!(big.is_ok(), "sized by the 4 samples there are: {big:?}");
    let mut wide = TestProc::f32();
    wide.layout.shape = [1 << 20, 1 << 20, 1 << 10];
    match Loader::new(dataset(4, &[]), wide, opts(2, 1)) {
        Err(LoaderError::OutOfMemory { name, bytes, .. }) => {
            assert_eq!(name, "batch_size");
            assert!(bytes > 1 << 50, "{bytes}");
        }
        other => panic!("expected out of memory, got {other:?}"),
    }
    // Each 4 GiB buffer fits, 1026 of them do not: the option to blame is prefetch_batches.
    let mut tall = TestProc::f32();
    tall.layout.shape = [1, 1 << 14, 1 << 14];
    match Loader::new(
        dataset(64, &[]),
        tall,
        opts(4, 1).prefetch_batches(MAX_PREFETCH_BATCHES),
    ) {
        Err(LoaderError::OutOfMemory { name, .. }) => assert_eq!(name, "prefetch_batches"),
        other => panic!("expected out of memory, got {other:?}"),
    }
}

#[test]
fn with_no_workers_next_processes_the_samples_itself() {
    let counts = Arc::new(Counts::default());
    let options = opts(4, 0).shuffle(true).seed(2);
    let loader = Loader::with_instrument(
        dataset(10, &[]),
        TestProc::f32(),
        CountingInstrument(Arc::clone(&counts)),
        options.clone(),
    )
    .expect("valid");
    let mut iter = loader.epoch(0);
    // Nothing is processed before it is asked for.
    thread::sleep(Duration::from_millis(20));
    assert_eq!(counts.starts.load(Ordering::Relaxed), 0);
    let first = iter.next().expect("a batch").expect("ok");
    assert_eq!(first.len(), 4);
    assert_eq!(counts.starts.load(Ordering::Relaxed), 4);
    drop(first);
    let rest = drain_ok(&mut iter);
    assert_eq!(rest.len(), 2);
    assert_eq!(counts.ends.load(Ordering::Relaxed), 10);
    assert_eq!(counts.bad_worker.load(Ordering::Relaxed), 0);
    // Completion order and the raise policy behave as with workers.
    let special = [(5, FAIL)];
    let raise = Loader::new(dataset(10, &special), TestProc::f32(), opts(4, 0)).expect("valid");
    let results: Vec<_> = raise.epoch(0).collect();
    assert_eq!(results.len(), 2);
    assert!(results[1].is_err());
    let any_order = Loader::new(
        dataset(10, &[]),
        TestProc::f32(),
        options.delivery(Delivery::CompletionOrder),
    )
    .expect("valid");
    let records = drain_ok(any_order.epoch(0));
    let mut seen = all_indices(&records);
    seen.sort_unstable();
    assert_eq!(seen, (0..10).collect::<Vec<_>>());
}

#[test]
fn resume_yields_exactly_the_batches_that_would_have_followed() {
    let n = 45;
    let special: Vec<(usize, u8)> = [3usize, 4, 17, 30, 31, 44]
        .iter()
        .map(|&i| (i, FAIL))
        .collect();
    for delivery in [Delivery::InOrder, Delivery::CompletionOrder] {
        for drop_last in [false, true] {
            let make = |workers: usize| {
                let options = opts(4, workers)
                    .shuffle(true)
                    .seed(11)
                    .drop_last(drop_last)
                    .delivery(delivery)
                    .on_error(ErrorPolicy::Skip);
                Loader::new(
                    dataset(n, &special),
                    TestProc::new(DType::F32, 200),
                    options,
                )
                .expect("valid")
            };
            let sorted = |mut records: Vec<Record>| {
                // Which batch overtook which, and so which one counts a skip, is scheduling.
                records.iter_mut().for_each(|r| r.out_of_order = false);
                if delivery == Delivery::CompletionOrder {
                    records.iter_mut().for_each(|r| r.skipped = 0);
                    records.sort_by_key(|r| r.index);
                }
                records
            };
            let full = drain_ok(make(2).epoch(3));
            for k in [0, 1, 4, full.len() - 1, full.len()] {
                let first = make(1);
                let mut iter = first.epoch(3);
                let head: Vec<Record> = (&mut iter)
                    .take(k)
                    .map(|b| record(&b.expect("skipped")))
                    .collect();
                let point = iter.resume_point().clone();
                drop(iter);
                for workers in [0, 3] {
                    let again = make(workers);
                    let tail = drain_ok(again.resume(3, None, point.clone()).expect("fits"));
                    let mut all = head.clone();
                    all.extend(tail);
                    assert_eq!(
                        sorted(all),
                        sorted(full.clone()),
                        "{delivery:?}, drop_last={drop_last}, after {k}, {workers} workers"
                    );
                }
            }
        }
    }
    // Explicit indices resume the same way; a point past the plan is refused.
    let loader = Loader::new(dataset(10, &[]), TestProc::f32(), opts(3, 2)).expect("valid");
    let plan = vec![9, 1, 8, 2, 7, 3, 6];
    let full = drain_ok(
        loader
            .epoch_with_indices(0, plan.clone())
            .expect("in range"),
    );
    let mut iter = loader
        .epoch_with_indices(0, plan.clone())
        .expect("in range");
    let first = record(&iter.next().expect("one").expect("ok"));
    let point = iter.resume_point().clone();
    drop(iter);
    assert_eq!(point.position, 3);
    let rest = drain_ok(loader.resume(0, Some(plan.clone()), point).expect("fits"));
    assert_eq!([vec![first], rest].concat(), full);
    let past = ResumePoint {
        position: 8,
        ..ResumePoint::default()
    };
    assert!(matches!(
        loader.resume(0, Some(plan), past),
        Err(LoaderError::InvalidOption { name: "state", .. })
    ));
}

/// Grows its scratch to the sample's second byte in KiB, and notes the scratch it was handed.
struct Growing(Arc<std::sync::Mutex<Vec<(usize, usize)>>>);

impl SampleProcessor for Growing {
    type Scratch = Vec<u8>;
    fn new_scratch(&self) -> Vec<u8> {
        Vec::new()
    }
    fn scratch_bytes(&self, scratch: &Vec<u8>) -> usize {
        scratch.capacity()
    }
    fn sample_layout(&self) -> ferroloader_loader::SampleLayout {
        ferroloader_loader::SampleLayout::chw(DType::U8, 1, 1, 1)
    }
    fn process(
        &self,
        bytes: &[u8],
        key: ferroloader_loader::SampleKey,
        scratch: &mut Vec<u8>,
        _out: ferroloader_loader::SlotMut<'_>,
        _hooks: &mut dyn OpHooks,
    ) -> Result<(), ferroloader_loader::transforms::Error> {
        self.0
            .lock()
            .expect("not poisoned")
            .push((key.index as usize, scratch.capacity()));
        let want = usize::from(bytes[1]) << 10;
        if scratch.len() < want {
            scratch.resize(want, 0);
        }
        Ok(())
    }
}

#[test]
fn a_scratch_an_outlier_grew_is_freed_and_a_typical_one_kept() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    // Samples of 1 KiB, one of 200 KiB at index 3; the limit is 64 KiB.
    let data = ferroloader_loader::InMemory::from_samples(
        (0..8u8).map(|i| (vec![i, if i == 3 { 200 } else { 1 }], 0)),
    );
    let options = opts(2, 1).scratch_limit(64 << 10);
    let loader = Loader::new(data, Growing(Arc::clone(&seen)), options).expect("valid");
    for batch in loader.iter() {
        batch.expect("no failure");
    }
    let seen = seen.lock().expect("not poisoned").clone();
    let capacity = |index: usize| seen.iter().find(|(i, _)| *i == index).map(|(_, c)| *c);
    assert_eq!(capacity(0), Some(0), "a fresh scratch first");
    assert!(capacity(3) >= Some(1 << 10), "a 1 KiB scratch is kept");
    assert_eq!(capacity(4), Some(0), "the outlier's 200 KiB were freed");
    assert!(capacity(5) >= Some(1 << 10));
}

/// Counts what the hooks see, across all workers.
#[derive(Default)]
struct Counts {
    starts: AtomicUsize,
    ends: AtomicUsize,
    failed: AtomicUsize,
    reads: AtomicUsize,
    touches: AtomicUsize,
    enters: AtomicUsize,
    exits: AtomicUsize,
    bad_worker: AtomicUsize,
}

struct Counting(Arc<Counts>, usize);

impl OpHooks for Counting {
    fn sample_start(&mut self, ctx: &SampleContext) {
        self.0.starts.fetch_add(1, Ordering::Relaxed);
        if ctx.worker != self.1 || ctx.position / 4 != ctx.batch || ctx.position % 4 != ctx.slot {
            self.0.bad_worker.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn enter(&mut self, op: Op) {
        self.0.enters.fetch_add(1, Ordering::Relaxed);
        if op == Op::Read {
            self.0.reads.fetch_add(1, Ordering::Relaxed);
        }
        if op == Op::FirstTouch {
            self.0.touches.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn exit(&mut self, _op: Op) {
        self.0.exits.fetch_add(1, Ordering::Relaxed);
    }
    fn sample_end(&mut self, _ctx: &SampleContext, ok: bool) {
        self.0.ends.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.0.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

struct CountingInstrument(Arc<Counts>);

impl Instrument for CountingInstrument {
    type Hooks = Counting;
    fn worker_hooks(&self, worker: usize) -> Counting {
        Counting(Arc::clone(&self.0), worker)
    }
}

#[test]
fn hooks_see_every_sample_read_and_op() {
    let counts = Arc::new(Counts::default());
    let loader = Loader::with_instrument(
        dataset(42, &[(7, FAIL)]),
        TestProc::new(DType::F32, 100),
        CountingInstrument(Arc::clone(&counts)),
        opts(4, 3).on_error(ErrorPolicy::Skip),
    )
    .expect("valid");
    assert_eq!(all_indices(&drain_ok(loader.epoch(0))).len(), 41);
    let get = |a: &AtomicUsize| a.load(Ordering::Relaxed);
    assert_eq!(get(&counts.starts), 42);
    assert_eq!(get(&counts.ends), 42);
    assert_eq!(get(&counts.failed), 1);
    assert_eq!(get(&counts.reads), 42);
    // The pieces of new buffers only: the first batch's, and at most those of the 3 batches in
    // flight and the 2 the consumer may hold (each batch is dropped before the next here).
    let touches = get(&counts.touches);
    assert!((4..=5 * 4).contains(&touches), "{touches} first touches");
    // read + decode for all, normalize for the 41 good ones, and the first touches.
    assert_eq!(get(&counts.enters), 42 * 2 + 41 + touches);
    assert_eq!(get(&counts.exits), get(&counts.enters));
    assert_eq!(get(&counts.bad_worker), 0);
    // Later epochs reuse the buffers: each is touched once in its life, however many epochs
    // run (the ring never holds more than those 5).
    for epoch in 1..4 {
        assert_eq!(all_indices(&drain_ok(loader.epoch(epoch))).len(), 41);
    }
    let touches = get(&counts.touches);
    assert!(touches <= 5 * 4, "{touches} first touches in 4 epochs");
}

#[test]
fn consumer_wait_and_batch_timing_are_recorded() {
    // One worker at 3 ms a sample: the first batch of 4 makes the consumer wait at least 12 ms;
    // after the consumer has been busy for long enough, the next one is already there.
    let proc_ = TestProc::f32().with_sleep(Duration::from_millis(3));
    let loader =
        Loader::new(dataset(12, &[]), proc_, opts(4, 1).prefetch_batches(2)).expect("valid");
    let mut iter = loader.epoch(0);
    let first = iter.next().expect("a batch").expect("ok");
    assert!(
        first.wait() >= Duration::from_millis(12),
        "{:?}",
        first.wait()
    );
    let t = first.timing();
    let started = t.started_ns.expect("started");
    let completed = t.completed_ns.expect("completed");
    let delivered = t.delivered_ns.expect("delivered");
    assert!(t.planned_ns <= started && started <= completed && completed <= delivered);
    // The profiler's clock (CLOCK_MONOTONIC), so loader timings and profiles line up.
    let now = ferroloader_loader::profiler::now_ns();
    assert!(delivered <= now && now - delivered < 60_000_000_000);
    assert!(completed - started >= 12_000_000, "4 samples of 3 ms");
    drop(first);
    thread::sleep(Duration::from_millis(300));
    // Generous bound: the second batch (12 ms of work) was made during the 300 ms pause.
    let second = iter.next().expect("a batch").expect("ok");
    assert!(
        second.wait() < Duration::from_millis(100),
        "{:?}",
        second.wait()
    );
}

/// Hooks that panic when a given sample starts: outside the processor, so outside the sample's
/// panic guard, which kills the worker thread.
struct PanickyHooks;

impl OpHooks for PanickyHooks {
    fn sample_start(&mut self, ctx: &SampleContext) {
        if ctx.index == 9 {
            panic!("hook bug");
        }
    }
}

struct Panicky;

impl Instrument for Panicky {
    type Hooks = PanickyHooks;
    fn worker_hooks(&self, _worker: usize) -> PanickyHooks {
        PanickyHooks
    }
}

#[test]
fn a_worker_dying_outside_a_sample_ends_the_epoch_with_an_error_not_a_hang() {
    let (records, err) = with_timeout(60, || {
        let loader = Loader::with_instrument(
            dataset(40, &[]),
            TestProc::new(DType::F32, 200),
            Panicky,
            opts(4, 2),
        )
        .expect("valid");
        drain(loader.epoch(0))
    });
    assert_eq!(
        records.len(),
        2,
        "the batches before the lost sample arrive"
    );
    match err {
        Some(LoaderError::Worker { message }) => assert!(message.contains("panicked"), "{message}"),
        other => panic!("expected a worker error, got {other:?}"),
    }
}

#[test]
fn loaders_iterators_and_batches_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Loader<ferroloader_loader::ImageFolder, TestProc>>();
    send::<ferroloader_loader::EpochIter<ferroloader_loader::InMemory, TestProc>>();
    send_sync::<ferroloader_loader::Batch>();
    send_sync::<LoaderError>();
}

#[test]
fn a_batch_written_in_place_is_rewritten_whole_before_it_is_delivered_again() {
    // One buffer in flight plus the two the consumer may hold: the ring has 3 buffers, so the
    // 5 batches of the epoch reuse the ones scribbled on.
    let loader = Loader::new(
        dataset(20, &[]),
        TestProc::f32(),
        opts(4, 2).prefetch_batches(1),
    )
    .expect("valid");
    let records = with_timeout(60, move || {
        let mut records = Vec::new();
        for batch in loader.epoch(0) {
            let mut batch = batch.expect("no failures");
            let clean = record(&batch);
            let (images, labels, indices) = batch.parts_mut();
            match images {
                BatchImagesMut::F32(values) => values.fill(f32::NAN),
                BatchImagesMut::U8(_) => panic!("f32 layout"),
            }
            labels.fill(-1);
            indices.fill(usize::MAX);
            assert!(batch.labels().iter().all(|&l| l == -1));
            match batch.images() {
                BatchImages::F32(values) => assert!(values.iter().all(|v| v.is_nan())),
                BatchImages::U8(_) => panic!("f32 layout"),
            }
            records.push(clean);
        }
        records
    });
    assert_eq!(records.len(), 5);
    assert_eq!(all_indices(&records), (0..20).collect::<Vec<_>>());
}

/// Adds `add` to every value of each sample past its first two (which `record` checks), or
/// fails when `add` is NaN.
struct AddToDraws {
    add: f32,
}

impl BatchOp for AddToDraws {
    fn name(&self) -> &'static str {
        "AddToDraws"
    }

    fn apply(
        &self,
        images: BatchImagesMut<'_>,
        samples: usize,
        layout: SampleLayout,
    ) -> Result<(), String> {
        if self.add.is_nan() {
            return Err("NaN".to_owned());
        }
        let BatchImagesMut::F32(values) = images else {
            return Err("not f32".to_owned());
        };
        let n = layout.shape.iter().product::<usize>();
        assert_eq!(values.len(), samples * n);
        for sample in values.chunks_exact_mut(n) {
            for v in &mut sample[2..] {
                *v += self.add;
            }
        }
        Ok(())
    }
}

fn plain_values(record: &Record) -> Vec<f32> {
    bytemuck::pod_collect_to_vec(&record.bytes)
}

#[test]
fn batch_ops_planned_ahead_run_on_the_worker_completing_the_batch() {
    let n = 40;
    let options = opts(4, 2).seed(3);
    let make = || {
        Loader::new(
            dataset(n, &[]),
            TestProc::f32().with_sleep(Duration::from_millis(5)),
            options.clone(),
        )
        .expect("valid")
    };
    let want = drain_ok(make().epoch(0));
    let loader = make();
    let iter = loader.epoch(0);
    let ops = iter.batch_ops();
    assert!(ops.enabled());
    let planned = iter.planned_batches();
    assert_eq!(planned, (0..10).map(|b| (b, 4)).collect::<Vec<_>>());
    for &(number, _) in &planned {
        // Batch 7's op fails: the batch is delivered as the workers made it.
        let add = if number == 7 { f32::NAN } else { 1000.0 };
        assert!(ops.plan(number, Box::new(AddToDraws { add })));
    }
    let mut applied = 0;
    for (batch, plain) in iter.zip(&want) {
        let batch = batch.expect("no error");
        let got = record(&batch);
        assert_eq!((got.index, &got.indices), (plain.index, &plain.indices));
        let mut expected = plain_values(plain);
        if batch.applied().is_some() {
            assert_eq!(batch.applied(), Some("AddToDraws"));
            for sample in expected.chunks_exact_mut(30) {
                sample[2..].iter_mut().for_each(|v| *v += 1000.0);
            }
            applied += 1;
        }
        assert_eq!(plain_values(&got), expected, "batch {}", got.index);
        if got.index == 7 {
            assert_eq!(batch.applied(), None);
        }
    }
    // 5 ms a sample: batches 1.. cannot complete before the plans made at the start.
    assert!(applied >= 8, "{applied} of 9 ran on the workers");
}

#[test]
fn batch_ops_are_numbered_as_delivered_on_resume_and_left_to_the_consumer_under_skip() {
    let loader = Loader::new(dataset(40, &[]), TestProc::f32(), opts(4, 2)).expect("valid");
    let point = ResumePoint {
        batches: 3,
        position: 12,
        delivered: Vec::new(),
    };
    let resumed = loader.resume(0, None, point).expect("fits");
    assert_eq!(resumed.planned_batches()[0], (3, 4));
    assert_eq!(resumed.planned_batches().len(), 7);
    drop(resumed);
    let skipping = Loader::new(
        dataset(40, &[]),
        TestProc::f32(),
        opts(4, 2).on_error(ErrorPolicy::Skip),
    )
    .expect("valid");
    let iter = skipping.epoch(0);
    assert!(!iter.batch_ops().enabled());
    assert!(!iter.batch_ops().plan(0, Box::new(AddToDraws { add: 1.0 })));
    assert!(drain_ok(iter).iter().all(|r| !r.bytes.is_empty()));
}

#[test]
fn replace_fills_a_failed_slot_with_the_next_samples_and_reports_each_failure() {
    let special = [(3, FAIL), (4, FAIL), (9, FAIL), (11, FAIL)];
    let options = opts(4, 3).on_error(ErrorPolicy::Replace { retries: 2 });
    let loader = Loader::new(dataset(12, &special), TestProc::f32(), options).expect("valid");
    let mut iter = loader.epoch(0);
    let records = drain_ok(&mut iter);
    // `record` checks each slot holds the sample its index names, with that sample's label.
    let indices: Vec<Vec<usize>> = records.iter().map(|r| r.indices.clone()).collect();
    assert_eq!(
        indices,
        vec![vec![0, 1, 2, 5], vec![5, 5, 6, 7], vec![8, 10, 10, 0]]
    );
    let skipped: Vec<(usize, usize)> = iter
        .skipped()
        .iter()
        .map(|s| (s.index, s.position))
        .collect();
    assert_eq!(skipped, vec![(3, 3), (4, 3), (4, 4), (9, 9), (11, 11)]);
    assert!(records.iter().all(|r| r.skipped == 0));
    assert_eq!(iter.resume_point().position, 12, "every position used once");
    // Three failures in a row with two retries: the epoch raises, naming the last one.
    let strict = Loader::new(
        dataset(12, &[(3, FAIL), (4, FAIL), (5, FAIL)]),
        TestProc::f32(),
        opts(4, 2).on_error(ErrorPolicy::Replace { retries: 2 }),
    )
    .expect("valid");
    let (got, err) = drain(strict.epoch(0));
    assert_eq!(got.len(), 0);
    assert!(err.expect("raised").to_string().contains("bad sample 5"));
}

/// [`TestProc`]'s samples cut in two parts, its first 7 elements and the other 23 (the parts
/// it says it has: `PARTS` unless another is given).
struct Parted(TestProc, Vec<usize>);

impl Parted {
    fn new() -> Self {
        Parted(TestProc::f32(), PARTS.to_vec())
    }
}

const PARTS: [usize; 2] = [7, 23];

impl SampleProcessor for Parted {
    type Scratch = (u64, Vec<f32>);

    fn new_scratch(&self) -> Self::Scratch {
        (0, vec![0.0; 30])
    }

    fn sample_layout(&self) -> SampleLayout {
        self.0.sample_layout()
    }

    fn sample_parts(&self) -> Vec<usize> {
        self.1.clone()
    }

    fn process(
        &self,
        _: &[u8],
        _: SampleKey,
        _: &mut Self::Scratch,
        _: SlotMut<'_>,
        _: &mut dyn OpHooks,
    ) -> Result<(), ferroloader_loader::transforms::Error> {
        unreachable!("the loader writes parted samples with process_parts")
    }

    fn process_parts(
        &self,
        bytes: &[u8],
        key: SampleKey,
        (count, whole): &mut Self::Scratch,
        mut out: SlotParts<'_>,
        hooks: &mut dyn OpHooks,
    ) -> Result<(), ferroloader_loader::transforms::Error> {
        assert_eq!(out.len(), 2);
        self.0
            .process(bytes, key, count, SlotMut::F32(whole), hooks)?;
        let (first, rest) = whole.split_at(PARTS[0]);
        for (p, values) in [first, rest].into_iter().enumerate() {
            match out.part(p) {
                Some(SlotMut::F32(slot)) => slot.copy_from_slice(values),
                other => panic!("part {p}: {other:?}"),
            }
        }
        assert!(out.part(2).is_none());
        Ok(())
    }
}

#[test]
fn samples_cut_into_parts_lay_each_part_of_a_batch_out_as_one_block() {
    let n = 29;
    // Skips that compact batches (3, 4), empty one planned batch (16..24) and leave the last
    // batch short of its planned rows (26).
    let mut bad = vec![3, 4, 26];
    bad.extend(16..24);
    let special: Vec<(usize, u8)> = bad.iter().map(|&i| (i, FAIL)).collect();
    for (policy, delivery) in [
        (ErrorPolicy::Skip, Delivery::InOrder),
        (ErrorPolicy::Skip, Delivery::CompletionOrder),
        (ErrorPolicy::Replace { retries: 10 }, Delivery::InOrder),
    ] {
        let options = |workers| opts(8, workers).seed(5).on_error(policy).delivery(delivery);
        let whole = Loader::new(dataset(n, &special), TestProc::f32(), options(0)).expect("valid");
        let mut want = HashMap::new();
        for batch in whole.epoch(2) {
            let batch = batch.expect("skipped or replaced");
            want.insert(
                batch.index(),
                (batch.indices().to_vec(), batch.image_bytes().to_vec()),
            );
        }
        for workers in [0, 1, 3] {
            let parted =
                Loader::new(dataset(n, &special), Parted::new(), options(workers)).expect("valid");
            let (mut seen, mut short_of_rows) = (0, false);
            for batch in parted.epoch(2) {
                let batch = batch.expect("skipped or replaced");
                let (indices, bytes) = &want[&batch.index()];
                assert_eq!(batch.indices(), &indices[..]);
                assert_eq!(batch.parts(), 2);
                let len = batch.len();
                let images = batch.image_bytes();
                // Part 0 of every sample from the start, then part 1 of every sample after
                // the rows part 0's block has room for (its planned samples).
                let first = batch.part_range(0).expect("part 0");
                let second = batch.part_range(1).expect("part 1");
                assert_eq!(first, 0..len * 28);
                assert_eq!(second.len(), len * 92);
                assert!(second.start >= first.end && second.start % 28 == 0);
                assert_eq!(second.start / 28, images.len() / 120, "rows of the blocks");
                short_of_rows |= images.len() / 120 > len;
                assert!(batch.part_range(2).is_none());
                for slot in 0..len {
                    let sample = &bytes[slot * 120..(slot + 1) * 120];
                    assert_eq!(
                        images[first.start + slot * 28..][..28],
                        sample[..28],
                        "{policy:?} {delivery:?} {workers} workers, part 0 of slot {slot}"
                    );
                    assert_eq!(images[second.start + slot * 92..][..92], sample[28..]);
                }
                seen += 1;
            }
            assert_eq!(seen, want.len());
            assert_eq!(short_of_rows, policy == ErrorPolicy::Skip);
        }
    }
    for parts in [vec![7, 22], vec![0, 30], vec![usize::MAX, 31]] {
        let refused = Loader::new(dataset(4, &[]), Parted(TestProc::f32(), parts), opts(2, 0));
        let error = refused
            .map(|_| ())
            .expect_err("parts that do not cut the sample");
        assert!(error.to_string().contains("sample_parts"), "{error}");
    }
}
