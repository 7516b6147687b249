"""An index a sampler yields several times in an epoch (``WeightedRandomSampler`` or
``RandomSampler`` with ``replacement=True``, torchvision's ``RASampler``, timm's
``RepeatAugSampler``) gets its own augmentation for each copy, as under DataLoader, where
every draw comes from a running generator: each sample's key ``(seed, epoch, index)`` gains the
copy's number in the epoch's plan (spread over the ranks of a user's distributed sampler, whose
copies of an index land on different ranks). The first copy keeps the key of a run without
repeats, and copies stay bit-identical whatever ``num_workers`` and across a resume."""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torchvision.transforms as tv
from torch.utils.data import Dataset, WeightedRandomSampler

import ferroloader as fl
from conftest import run_ranks
from ferroloader import _native
from ferroloader import transforms as T

pytestmark = [
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

#: 512 fixture photos (``make fixtures``): RASampler takes a multiple of 256 samples.
PHOTOS = Path(__file__).resolve().parents[2] / "target" / "fixtures" / "folder"

Sample = Tuple[int, str]
"""A delivered sample: its dataset index and a digest of its tensor."""


def random_transform() -> Any:
    return T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.ToTensor()])


def indexed(folder: Path, limit: int = 10**9) -> List[Tuple[str, int]]:
    """The folder's images, each labelled with its own index (a batch's labels are its indices)."""
    paths = sorted(str(p) for p in folder.rglob("*") if p.suffix in (".jpg", ".png"))[:limit]
    return [(p, i) for i, p in enumerate(paths)]


def digest(x: torch.Tensor) -> str:
    return hashlib.sha1(x.contiguous().numpy().tobytes()).hexdigest()


def samples(loader: Any) -> List[Sample]:
    """Every sample of one epoch, in order, of a loader whose labels are dataset indices."""
    return [(int(i), digest(x)) for xs, labels in loader for x, i in zip(xs, labels)]


def assert_copies_differ(got: List[Sample]) -> int:
    """Fails when two copies of an index are the same tensor; returns how many copies repeat."""
    copies: Dict[int, set[str]] = defaultdict(set)
    repeats = 0
    for index, d in got:
        assert d not in copies[index], f"two copies of index {index} drew the same augmentation"
        repeats += bool(copies[index])
        copies[index].add(d)
    return repeats


class Draws(Dataset[Tuple[torch.Tensor, int]]):
    """A dataset run in Python whose samples are draws of torch's global generator."""

    def __len__(self) -> int:
        return 6

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, int]:
        return torch.rand(3) + float(np.random.rand()) + random.random(), i


def python_loader(**kw: Any) -> fl.Loader:
    kw.setdefault("batch_size", 4)
    return fl.Loader(Draws(), python_dataset="allow", **kw)


def test_each_copy_of_an_index_gets_its_own_augmentation_natively(folder: Path) -> None:
    data = indexed(folder)
    x, labels = next(iter(fl.Loader(data, transform=random_transform(), batch_size=4, sampler=[0, 0, 1, 1])))
    assert labels.tolist() == [0, 0, 1, 1]
    assert not torch.equal(x[0], x[1]) and not torch.equal(x[2], x[3])
    # The first copy draws what a run without repeats draws (today's keys, unchanged).
    once, _ = next(iter(fl.Loader(data, transform=random_transform(), batch_size=2, sampler=[0, 1])))
    assert torch.equal(x[0], once[0]) and torch.equal(x[2], once[1])
    # And the repeat numbers the native loader used are those it reports.
    assert _native.repeat_numbers(len(data), indices=[0, 0, 1, 1]) == [0, 1, 0, 1]
    assert _native.repeat_numbers(len(data), indices=[0, 1]) == []


def test_the_draw_helpers_take_each_copys_number() -> None:
    rrc = T.RandomResizedCrop(16)
    params = rrc.draw_params(256, 256, [0, 0, 0], seed=5, repeats=[0, 1, 2])
    assert len({tuple(p) for p in params.tolist()}) == 3
    assert params[0].tolist() == rrc.draw_params(256, 256, [0], seed=5)[0].tolist()
    with pytest.raises(ValueError, match="repeats: 2 numbers for 3 indices"):
        rrc.draw_params(256, 256, [0, 0, 0], repeats=[0, 1])
    # The timm policies' draw helpers too.
    from timm.data.auto_augment import rand_augment_transform

    policy = T.from_torchvision([rand_augment_transform("rand-m9-n3-mstd0.5", {})]).transforms[0]
    spec = json.dumps(policy.to_spec())
    plans = _native.timm_rand_augment_draws(spec, [0] * 6, seed=5, repeats=range(6))
    assert plans[0] == _native.timm_rand_augment_draws(spec, [0], seed=5)[0]
    assert len({repr(p) for p in plans}) == 6


def test_each_copy_draws_apart_in_a_dataset_run_in_python() -> None:
    x, labels = next(iter(python_loader(sampler=[0, 0, 1, 1], num_workers=0)))
    assert labels.tolist() == [0, 0, 1, 1]
    assert not torch.equal(x[0], x[1]) and not torch.equal(x[2], x[3])
    once, _ = next(iter(python_loader(sampler=[0, 1], num_workers=0, batch_size=2)))
    assert torch.equal(x[0], once[0]) and torch.equal(x[2], once[1])
    # The same seeds in worker processes, and a resumed epoch numbers the copies as the whole.
    plan = [3, 3, 1, 3, 1, 5, 0, 5]
    full = samples(python_loader(sampler=plan, num_workers=0))
    assert assert_copies_differ(full) == 4
    for workers in (1, 2):
        assert samples(python_loader(sampler=plan, num_workers=workers)) == full
    first = python_loader(sampler=plan, num_workers=0)
    it = iter(first)
    xs, labels = next(it)
    head = [(int(i), digest(x)) for x, i in zip(xs, labels)]
    state = first.state_dict()
    resumed = python_loader(sampler=plan, num_workers=2)
    resumed.load_state_dict(state)
    assert head + samples(resumed) == full


def test_a_weighted_sampler_with_replacement_gives_every_duplicate_its_own_draw(folder: Path) -> None:
    data = indexed(folder)
    weights = [5.0 if i < 3 else 1.0 for i in range(len(data))]
    sampler = WeightedRandomSampler(weights, 24, replacement=True, generator=torch.Generator().manual_seed(0))
    got = samples(fl.Loader(data, transform=random_transform(), batch_size=6, sampler=sampler, num_workers=2))
    assert assert_copies_differ(got) >= 5


def native_run(folder: Path, plan: List[int], **kw: Any) -> fl.Loader:
    kw.setdefault("batch_size", 3)
    return fl.Loader(indexed(folder), transform=random_transform(), sampler=plan, **kw)


def test_copies_are_bit_identical_whatever_num_workers_and_across_a_resume(folder: Path) -> None:
    plan = [4, 4, 7, 4, 7, 2, 2, 9, 4, 7, 1]
    full = samples(native_run(folder, plan, num_workers=2))
    assert assert_copies_differ(full) == 6
    for workers in (0, 1):
        assert samples(native_run(folder, plan, num_workers=workers)) == full
    for in_order in (True, False):
        first = native_run(folder, plan, num_workers=1, in_order=in_order)
        it = iter(first)
        xs, labels = next(it)
        head = [(int(i), digest(x)) for x, i in zip(xs, labels)]
        state = first.state_dict()
        resumed = native_run(folder, plan, num_workers=2, in_order=in_order)
        resumed.load_state_dict(state)
        rest = samples(resumed)
        if in_order:
            assert head + rest == full
        else:
            assert sorted(head + rest) == sorted(full)


def test_a_process_tail_keys_the_copies_as_a_thread_tail(folder: Path) -> None:
    def pipeline() -> Any:
        return tv.Compose(
            [tv.RandomResizedCrop(16), tv.ToTensor(), tv.Lambda(lambda t: t + torch.rand(1))]
        )

    plan = [0, 0, 1, 1, 0, 2]
    runs = [
        samples(fl.Loader(indexed(folder), transform=pipeline(), batch_size=3, sampler=plan,
                          python_tail="allow", num_workers=2, python_tail_workers=where))
        for where in ("threads", "processes")
    ]
    assert runs[0] == runs[1]
    assert assert_copies_differ(runs[0]) == 3


# -- distributed: the copies of an index go to different ranks ---------------------------------

WORLD = 2


class RASampler(torch.utils.data.Sampler[int]):
    """torchvision's references/classification/sampler.py ``RASampler`` (repeated
    augmentation, DeiT): each index repeated, then the ranks take every ``world``-th."""

    def __init__(self, dataset: Any, shuffle: bool = True, seed: int = 0, repetitions: int = 3) -> None:
        self.num_replicas, self.rank = dist.get_world_size(), dist.get_rank()
        self.dataset, self.shuffle, self.seed, self.repetitions, self.epoch = dataset, shuffle, seed, repetitions, 0
        self.num_samples = int(math.ceil(len(dataset) * float(repetitions) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas
        self.num_selected_samples = int(math.floor(len(dataset) // 256 * 256 / self.num_replicas))

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        n = len(self.dataset)
        indices = torch.randperm(n, generator=g).tolist() if self.shuffle else list(range(n))
        indices = [ele for ele in indices for _ in range(self.repetitions)]
        indices += indices[: (self.total_size - len(indices))]
        indices = indices[self.rank : self.total_size : self.num_replicas]
        return iter(indices[: self.num_selected_samples])

    def __len__(self) -> int:
        return self.num_selected_samples

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


def run_rank(rank: int, init: str, big: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=WORLD)
    try:
        from timm.data import create_dataset
        from timm.data.distributed_sampler import RepeatAugSampler

        from ferroloader.timm import create_loader

        result: Dict[str, Any] = {}
        data = indexed(Path(big), 256)
        for name, sampler in (("ra", RASampler(data)), ("repeat_aug", RepeatAugSampler(data, num_repeats=3))):
            loader = fl.Loader(data, transform=random_transform(), batch_size=8, sampler=sampler, num_workers=2)
            result[name] = samples(loader)
        timm_loader = create_loader(
            # The photos: timm's RepeatAugSampler selects a multiple of 256 samples (1.0.29's
            # create_loader leaves it so), which the 18 of conftest's folder would round to none.
            create_dataset("", root=big, split="train"), (3, 16, 16), 16, is_training=True,
            distributed=True, num_aug_repeats=3, num_workers=2, device=torch.device("cpu"),
        )
        plan = list(timm_loader.sampler)
        rows = [digest(x) for xs, _ in timm_loader for x in xs]
        result["timm"] = list(zip(plan, rows))
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def test_repeated_augmentation_samplers_give_each_copy_its_own_draw_across_ranks(tmp_path: Path) -> None:
    big = PHOTOS
    assert len(indexed(big, 256)) == 256, "the fixture photos are missing: make fixtures"
    results = run_ranks(run_rank, (str(tmp_path / "init"), str(big), str(tmp_path)), tmp_path, WORLD)
    for name in ("ra", "repeat_aug", "timm"):
        per_rank = [[(int(i), d) for i, d in r[name]] for r in results]
        assert all(per_rank), name
        ranks_of: Dict[int, set[int]] = defaultdict(set)
        for rank, got in enumerate(per_rank):
            for index, _ in got:
                ranks_of[index].add(rank)
        # The samplers do send copies of one index to both ranks, and twice to one rank.
        assert any(len(r) == 2 for r in ranks_of.values()), name
        assert any(assert_copies_differ(got) for got in per_rank), name
        assert_copies_differ(per_rank[0] + per_rank[1])


def test_a_replaced_copy_draws_from_its_own_slots_key(corrupt_folder: Path) -> None:
    data = indexed(corrupt_folder)
    replaced = 0
    for k in range(len(data)):
        loader = fl.Loader(data, transform=random_transform(), batch_size=2, sampler=[k, k], on_error="replace")
        x, labels = next(iter(loader))
        if labels.tolist() != [k, k]:
            # Both copies failed and were replaced by the same next sample: each replacement
            # draws from its failed slot's key, so the two still differ.
            replaced += 1
            assert labels[0] == labels[1] and not torch.equal(x[0], x[1])
    assert replaced == 2
