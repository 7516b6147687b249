"""The loader under torch.distributed (gloo, two processes on CPU): made with no sampler and no
rank/world_size, it cuts the dataset as DistributedSampler does (rank and world size read when
it is made), since nothing injects a DistributedSampler into a loader that is not a DataLoader;
a DistributedSampler given as sampler= is followed, set_epoch included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler

import ferroloader as fl
from conftest import run_ranks
from ferroloader import transforms as T

# 17 samples over 2 ranks: DistributedSampler pads the epoch to 18 with its first index.
SAMPLES = 17
WORLD = 2


def items(folder: Path) -> List[Tuple[str, int]]:
    """The folder's first samples, each labelled with its own index (so a batch's labels are its
    dataset indices)."""
    paths = sorted(str(p) for p in folder.rglob("*.jpg"))[:SAMPLES]
    assert len(paths) == SAMPLES
    return [(p, i) for i, p in enumerate(paths)]


def make(data: List[Tuple[str, int]], **kw: Any) -> fl.Loader:
    return fl.Loader(
        data,
        batch_size=4,
        num_workers=1,
        transform=T.Compose([T.Resize(8), T.CenterCrop(8), T.ToTensor()]),
        **kw,
    )


def epoch_labels(loader: fl.Loader, epoch: int) -> List[int]:
    loader.set_epoch(epoch)
    return [int(i) for _, labels in loader for i in labels]


def run_rank(rank: int, init: str, folder: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=WORLD)
    try:
        data = items(Path(folder))
        result: Dict[str, Any] = {}
        auto = make(data, shuffle=True, seed=7)
        result["cut"] = [auto.rank, auto.world_size, len(auto)]
        result["auto"] = [epoch_labels(auto, e) for e in (0, 1)]
        ordered = make(data)
        result["ordered"] = epoch_labels(ordered, 0)
        result["distributed_sampler_ordered"] = list(DistributedSampler(data, shuffle=False))
        sampler: DistributedSampler[Any] = DistributedSampler(data, shuffle=True, seed=3)
        given = make(data, sampler=sampler)
        result["given_cut"] = [given.rank, given.world_size, len(given)]
        result["given"] = []
        result["sampler"] = []
        for epoch in (0, 1):
            # As Lightning does it: the sampler's set_epoch, then iter().
            sampler.set_epoch(epoch)
            result["sampler"].append(list(sampler))
            result["given"].append([int(i) for _, labels in given for i in labels])
        everything = make(data, rank=0, world_size=1)
        result["everything"] = epoch_labels(everything, 0)
        gathered: List[Any] = [None] * WORLD
        dist.all_gather_object(gathered, result["auto"])
        result["gathered"] = gathered
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def test_two_ranks_cut_the_dataset_as_distributed_sampler_does(folder: Path, tmp_path: Path) -> None:
    results = run_ranks(run_rank, (str(tmp_path / "init"), str(folder), str(tmp_path)), tmp_path, WORLD)
    per_rank = -(-SAMPLES // WORLD)
    for rank, result in enumerate(results):
        assert result["cut"] == [rank, WORLD, -(-per_rank // 4)]
        # In order, each rank's samples are DistributedSampler's, padding included.
        assert result["ordered"] == result["distributed_sampler_ordered"]
        # A DistributedSampler given is followed, its set_epoch included; the loader does not
        # cut again.
        assert result["given_cut"][:2] == [None, None] and result["given_cut"][2] == 3
        assert result["given"] == result["sampler"]
        assert result["given"][0] != result["given"][1]
        assert sorted(result["everything"]) == list(range(SAMPLES))
    assert results[0]["gathered"] == results[1]["gathered"] == [r["auto"] for r in results]
    for epoch in (0, 1):
        # Together the ranks see every sample once an epoch, plus DistributedSampler's one pad.
        shards = [r["auto"][epoch] for r in results]
        assert all(len(s) == per_rank for s in shards)
        together = shards[0] + shards[1]
        assert set(together) == set(range(SAMPLES)) and len(together) == SAMPLES + 1
    assert results[0]["auto"][0] != results[0]["auto"][1]


def test_without_a_process_group_nothing_is_cut(folder: Path) -> None:
    assert not dist.is_initialized()
    loader = make(items(folder), shuffle=True)
    assert (loader.rank, loader.world_size) == (None, None) and len(loader) == 5
    assert torch.equal(torch.tensor(sorted(epoch_labels(loader, 0))), torch.arange(SAMPLES))


def test_a_state_saved_by_rank_0_resumes_every_rank(folder: Path) -> None:
    # A DDP checkpoint holds rank 0's loader state only (Lightning hands it to every rank): in
    # order with no skip, its batch count is every rank's point.
    data = items(folder)
    ranks = [make(data, shuffle=True, seed=4, rank=r, world_size=WORLD) for r in range(WORLD)]
    rests, states = [], []
    for loader in ranks:
        it = iter(loader)
        next(it)
        next(it)
        states.append(loader.state_dict())
        rests.append([labels.tolist() for _, labels in it])
    state = states[0]
    assert states[1] == {**state, "rank": 1}
    for rank in range(WORLD):
        resumed = make(data, shuffle=True, seed=4, rank=rank, world_size=WORLD)
        resumed.load_state_dict(state)
        assert resumed.state_dict()["rank"] == rank
        assert [labels.tolist() for _, labels in resumed] == rests[rank]
    for refused in ({"in_order": False}, {"on_error": "skip"}):
        other = make(data, shuffle=True, seed=4, rank=1, world_size=WORLD, **refused)
        with pytest.raises(ValueError, match="saved by rank 0, this loader is rank 1.*each rank's own state_dict"):
            other.load_state_dict({**state, "in_order": other.in_order})
    with pytest.raises(ValueError, match="saved with world_size=2, this loader has world_size=3"):
        make(data, shuffle=True, seed=4, rank=1, world_size=3).load_state_dict(state)
    # A rank 0 that skipped a sample (its position past its batches) says nothing of rank 1.
    with pytest.raises(ValueError, match="saved by rank 0"):
        make(data, shuffle=True, seed=4, rank=1, world_size=WORLD).load_state_dict({**state, "position": 7})
