//! An index visited several times in an epoch (a sampler with replacement, repeated
//! augmentation) draws differently for each copy, and still the same whatever the workers or a
//! resume; copies on different ranks of a user's distributed sampler, or in the padding of the
//! loader's own cut, draw apart too.

use crate::common;

use std::collections::HashMap;

use common::*;
use ferroloader_loader::{DType, Delivery, Loader, LoaderError, LoaderOptions, Shard};

fn opts(batch: usize, workers: usize) -> LoaderOptions {
    LoaderOptions::default()
        .batch_size(batch)
        .num_workers(workers)
        .prefetch_batches(3)
}

/// Bytes per sample of [`TestProc::f32`]'s layout (2 x 3 x 5 float32).
const SAMPLE: usize = 2 * 3 * 5 * 4;

/// `(dataset index, the sample's drawn values)` per delivered slot, in order.
fn samples(records: &[Record]) -> Vec<(usize, Vec<u8>)> {
    records
        .iter()
        .flat_map(|r| {
            r.indices
                .iter()
                .copied()
                .zip(r.bytes.chunks(SAMPLE).map(|s| s[8..].to_vec()))
        })
        .collect()
}

#[test]
fn each_copy_of_an_index_draws_apart_and_the_first_as_without_repeats() {
    let plan = vec![0, 0, 1, 1, 2, 0, 3, 1];
    let run = |workers: usize, plan: Vec<usize>| {
        let loader = Loader::new(dataset(6, &[]), TestProc::f32(), opts(3, workers)).expect("ok");
        samples(&drain_ok(
            loader.epoch_with_indices(4, plan).expect("in range"),
        ))
    };
    let got = run(2, plan.clone());
    let mut copies: HashMap<usize, Vec<Vec<u8>>> = HashMap::new();
    for (index, draws) in &got {
        let seen = copies.entry(*index).or_default();
        assert!(
            !seen.contains(draws),
            "a copy of {index} repeats another's draws"
        );
        seen.push(draws.clone());
    }
    // The first copy of each index draws exactly as a plan without repeats does.
    let once = run(2, vec![0, 1, 2, 3]);
    for (index, draws) in once {
        assert_eq!(copies[&index][0], draws, "first copy of {index}");
    }
    for workers in [0, 1] {
        assert_eq!(run(workers, plan.clone()), got, "{workers} workers");
    }
}

#[test]
fn a_resumed_epoch_numbers_the_copies_as_the_whole_plan_did() {
    let plan = vec![5, 5, 2, 5, 2, 7, 7, 5, 2, 1];
    for delivery in [Delivery::InOrder, Delivery::CompletionOrder] {
        let make = |workers| {
            Loader::new(
                dataset(8, &[]),
                TestProc::f32(),
                opts(3, workers).delivery(delivery),
            )
            .expect("ok")
        };
        let mut full = drain_ok(make(2).epoch_with_indices(1, plan.clone()).expect("ok"));
        full.sort_by_key(|r| r.index);
        for k in [1, 2] {
            let first = make(1);
            let mut iter = first.epoch_with_indices(1, plan.clone()).expect("ok");
            let mut all: Vec<Record> = (&mut iter)
                .take(k)
                .map(|b| record(&b.expect("ok")))
                .collect();
            let point = iter.resume_point().clone();
            drop(iter);
            let again = make(0);
            all.extend(drain_ok(
                again.resume(1, Some(plan.clone()), point).expect("fits"),
            ));
            all.sort_by_key(|r| r.index);
            let strip = |rs: &[Record]| samples(rs);
            assert_eq!(strip(&all), strip(&full), "{delivery:?} after {k}");
        }
    }
}

#[test]
fn the_ranks_of_a_users_sampler_draw_apart_and_rank_0_as_undistributed() {
    // RASampler-style: every rank gets the same index (its own copy of it).
    let plan = vec![3, 4];
    let run = |rank: Option<(usize, usize)>| {
        let mut options = opts(2, 1);
        if let Some((rank, world)) = rank {
            options = options.indices_rank(rank, world);
        }
        let loader = Loader::new(dataset(6, &[]), TestProc::f32(), options).expect("ok");
        samples(&drain_ok(
            loader.epoch_with_indices(0, plan.clone()).expect("ok"),
        ))
    };
    let refused = Loader::new(
        dataset(6, &[]),
        TestProc::f32(),
        opts(2, 1).indices_rank(3, 3),
    );
    assert!(matches!(
        refused.map(|_| ()),
        Err(LoaderError::InvalidOption {
            name: "indices_rank",
            ..
        })
    ));
    let alone = run(None);
    assert_eq!(run(Some((0, 3))), alone);
    let ranks: Vec<_> = (0..3).map(|r| run(Some((r, 3)))).collect();
    for a in 0..3 {
        for b in a + 1..3 {
            for (slot, (x, y)) in ranks[a].iter().zip(&ranks[b]).enumerate() {
                assert_ne!(x, y, "ranks {a} and {b}, slot {slot}");
            }
        }
    }
}

#[test]
fn the_padding_of_the_loaders_own_cut_draws_apart_from_its_original() {
    // 5 samples over 3 ranks, unshuffled: rank 2 gets [2, 0] (position 5 pads with index 0),
    // rank 0 gets [0, 3].
    let rank = |r| {
        let options = opts(2, 1).shard(Shard::new(r, 3));
        let loader =
            Loader::new(dataset(5, &[]), TestProc::new(DType::F32, 0), options).expect("ok");
        samples(&drain_ok(loader.epoch(0)))
    };
    let (zero, two) = (rank(0), rank(2));
    assert_eq!((zero[0].0, two[1].0), (0, 0));
    assert_ne!(
        zero[0].1, two[1].1,
        "the padding copy of 0 repeats rank 0's draws"
    );
    // The originals keep the keys of an unsharded run.
    let whole = Loader::new(dataset(5, &[]), TestProc::f32(), opts(5, 1)).expect("ok");
    let whole = samples(&drain_ok(whole.epoch(0)));
    assert_eq!(zero[0], whole[0]);
    assert_eq!(two[0], whole[2]);
}
