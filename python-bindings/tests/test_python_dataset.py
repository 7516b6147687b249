"""A dataset that makes its own samples (the training script's own ``Dataset`` class) runs as
DataLoader runs it, in worker processes, with ferroloader's order, per-sample seeding, resume,
``on_error`` and profile on top; checked against DataLoader itself over the same object."""

from __future__ import annotations

import pickle
import random
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as tvT
from PIL import Image
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    IterableDataset,
    SequentialSampler,
    get_worker_info,
)

import ferroloader as fl

from batches import same  # noqa: E402

RANDOM = tvT.Compose([tvT.RandomResizedCrop(32), tvT.RandomHorizontalFlip(), tvT.ToTensor()])
FIXED = tvT.Compose([tvT.Resize(40), tvT.CenterCrop(32), tvT.ToTensor()])


class Photos(Dataset[Tuple[torch.Tensor, int]]):
    """A training script's dataset that crops each photo by a box before transforming it (as
    fine-grained datasets crop to the annotated bird): its own code, so it runs in Python (one
    that only opens, converts and transforms is read natively: test_own_dataset.py)."""

    def __init__(self, root: Path, transform: Any, fail_on: Tuple[int, ...] = ()) -> None:
        self.paths = sorted(p for p in root.rglob("*") if p.suffix in (".jpg", ".png"))
        self.transform = transform
        self.fail_on = fail_on
        self.tag = "unset"

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, int]:
        if i in self.fail_on:
            raise OSError(f"cannot read {self.paths[i].name}")
        with Image.open(self.paths[i]) as img:
            return self.transform(img.convert("RGB").crop((4, 2, 60, 50))), i % 3


class Noise(Dataset[Dict[str, Any]]):
    """Samples drawn from all three global generators, as a dict."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> Dict[str, Any]:
        return {
            "torch": torch.rand(2),
            "random": random.random(),
            "numpy": float(np.random.rand()),
            "index": i,
        }


class WorkerTagged(Photos):
    def __getitem__(self, i: int) -> Any:
        image, label = super().__getitem__(i)
        return image, label, self.tag


class Stream(IterableDataset[Tuple[torch.Tensor, int]]):
    """A stream that splits itself across workers, drawing from torch's generator."""

    def __init__(self, n: int = 22, noisy: bool = True) -> None:
        self.n = n
        self.noisy = noisy

    def __iter__(self) -> Any:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(worker, self.n, workers):
            yield (torch.rand(3) if self.noisy else torch.full((3,), float(i))), i


class SizedStream(Stream):
    def __len__(self) -> int:
        return self.n


def _tag_worker(worker_id: int) -> None:
    info = get_worker_info()
    assert info is not None
    info.dataset.tag = f"worker{worker_id}"


def _fail_if_called(worker_id: int) -> None:
    raise AssertionError(f"worker_init_fn called for native worker {worker_id}")


_WORKER_STATE = {"initialized": False}


def _initialize_worker(worker_id: int) -> None:
    assert get_worker_info() is not None
    _WORKER_STATE["initialized"] = True


def _initialized_in_this_process(image: torch.Tensor) -> torch.Tensor:
    """A tail op: ones where the worker_init_fn ran in this process, zeros elsewhere."""
    return torch.full_like(image, float(_WORKER_STATE["initialized"]))


def _loader(dataset: Any, **kwargs: Any) -> fl.Loader:
    kwargs.setdefault("python_dataset", "allow")
    return fl.Loader(dataset, **kwargs)


def test_a_training_scripts_dataset_gives_dataloaders_batches(folder: Path) -> None:
    dataset = Photos(folder, FIXED)
    with pytest.warns(UserWarning, match=r"Photos runs in Python, as DataLoader runs it \(Photos\.__getitem__ makes its samples: it uses the image's \.crop \(.*\)\): in 2 worker processes"):
        loader = fl.Loader(dataset, batch_size=4, num_workers=2)
    want = list(DataLoader(dataset, batch_size=4))
    got = list(loader)
    assert len(got) == len(want) == len(loader) == 5
    assert all(same(g, w) for g, w in zip(got, want))
    assert got[-1][0].shape == (2, 3, 32, 32)
    # Any structure the collate makes: a dict of batches.
    assert same(next(iter(_loader(Noise(), batch_size=10, num_workers=0)))["index"], torch.arange(10))
    with pytest.raises(ValueError, match=r"Photos would run in Python \(Photos\.__getitem__ makes its samples: it uses the image's \.crop .*\); python_dataset='error' refuses"):
        fl.Loader(dataset, python_dataset="error")


def test_samples_are_seeded_per_sample_whatever_the_workers(folder: Path) -> None:
    dataset = Photos(folder, RANDOM)
    runs = [
        list(_loader(dataset, batch_size=5, shuffle=True, seed=7, num_workers=n)) for n in (0, 1, 2)
    ]
    assert all(same(run, runs[0]) for run in runs[1:])
    # Another seed draws other crops; the next epoch too.
    other = list(_loader(dataset, batch_size=5, shuffle=True, seed=8, num_workers=0))
    assert not same(other, runs[0])
    # The consumer's own generators are where they were (num_workers=0 loads in this process).
    torch.manual_seed(3), random.seed(3), np.random.seed(3)
    list(_loader(Noise(), batch_size=4, num_workers=0))
    after = (torch.rand(1), random.random(), np.random.rand())
    torch.manual_seed(3), random.seed(3), np.random.seed(3)
    assert same(after, (torch.rand(1), random.random(), np.random.rand()))
    # All three generators are seeded: every sample draws its own values.
    batch = next(iter(_loader(Noise(), batch_size=10, num_workers=2)))
    for key in ("random", "numpy"):
        assert len(set(batch[key].tolist())) == 10
    assert len({tuple(r) for r in batch["torch"].tolist()}) == 10


def test_the_order_is_the_native_loaders(folder: Path) -> None:
    dataset = Photos(folder, FIXED)
    listed = [(str(p), i % 3) for i, p in enumerate(dataset.paths)]
    kwargs: Dict[str, Any] = dict(batch_size=4, shuffle=True, seed=11, num_workers=0)
    for extra in ({}, {"rank": 1, "world_size": 3}):
        native = fl.Loader(listed, transform=FIXED, **kwargs, **extra)
        python = _loader(dataset, **kwargs, **extra)
        native.set_epoch(2), python.set_epoch(2)
        native_it, python_it = iter(native), iter(python)
        for _ in range(len(native)):
            next(native_it), next(python_it)
            assert native_it.indices is not None and python_it.indices is not None
            assert python_it.indices.tolist() == native_it.indices.tolist()
        assert len(python) == len(native)
        # `loader.sampler` (DataLoader's attribute) shows that order, the same for both.
        for loader in (native, python):
            assert loader.sampler is not None and loader.batch_sampler is not None
            loader.sampler.set_epoch(2)  # type: ignore[attr-defined]
        assert list(python.sampler) == list(native.sampler)  # type: ignore[arg-type]
        assert len(python.sampler) == len(native.sampler) == len(list(native.sampler))  # type: ignore[arg-type]
        order = list(python.sampler)  # type: ignore[arg-type]
        python_it = iter(python)
        next(python_it)
        assert python_it.indices is not None and python_it.indices.tolist() == order[:4]


def test_resuming_mid_epoch_yields_the_rest_of_the_first_run(folder: Path) -> None:
    dataset = Photos(folder, RANDOM)
    for in_order in (True, False):
        kwargs: Dict[str, Any] = dict(batch_size=3, shuffle=True, seed=5, num_workers=2, in_order=in_order)
        first = _loader(dataset, **kwargs)
        first.set_epoch(4)
        it = iter(first)
        seen = [next(it) for _ in range(2)]
        state = pickle.loads(pickle.dumps(first.state_dict()))
        rest = list(it)
        resumed = _loader(dataset, **kwargs)
        resumed.load_state_dict(state)
        assert resumed.epoch == 4
        again = list(resumed)
        key = lambda batch: batch[1].tolist() + batch[0].flatten()[:8].tolist()  # noqa: E731
        assert sorted(map(key, again)) == sorted(map(key, rest))
        assert len(seen) + len(again) == len(first)
        assert resumed.epoch == 5
    with pytest.raises(ValueError, match=r"state: saved for another dataset"):
        _loader(Noise(), batch_size=3).load_state_dict(state)


def test_an_iterator_never_advanced_starts_no_workers_and_uses_up_no_epoch(folder: Path) -> None:
    # As the native loader's (test_loader.py): Lightning's iter() probe costs nothing.
    loader = _loader(Photos(folder, RANDOM), batch_size=4, shuffle=True, seed=5, num_workers=2)
    probe = iter(loader)
    assert not probe.finished and probe.indices is None
    del probe
    assert loader.epoch == 0
    it = iter(loader)
    loader.set_epoch(2)
    assert len(it) == 5 and it.epoch == 2
    assert sum(len(batch[1]) for batch in it) == 18
    assert it.finished and loader.epoch == 3


def test_a_failing_sample_is_raised_with_its_index_or_skipped_and_reported(folder: Path) -> None:
    dataset = Photos(folder, FIXED, fail_on=(5,))
    with pytest.raises(OSError, match=r"cannot read") as caught:
        list(_loader(dataset, batch_size=4, num_workers=2))
    assert "dataset[5]" in str(caught.value)
    it = iter(_loader(dataset, batch_size=4, num_workers=2, on_error="skip"))
    batches = list(it)
    assert [len(labels) for _, labels in batches] == [4, 3, 4, 4, 2]
    assert [index for index, _, _ in it.skipped] == [5]
    assert "OSError: cannot read" in it.skipped[0][2]
    # A batch none of whose samples loaded is not yielded.
    empty = Photos(folder, FIXED, fail_on=(0, 1))
    it = iter(_loader(empty, batch_size=2, num_workers=0, on_error="skip"))
    assert len(list(it)) == 8 and len(it.skipped) == 2


def test_dataloaders_arguments_hold(folder: Path) -> None:
    dataset = Photos(folder, FIXED)
    # worker_init_fn runs in each worker process, and configures the dataset that loads.
    tagged = WorkerTagged(folder, FIXED)
    tags = {t for _, _, ts in _loader(tagged, batch_size=3, num_workers=2, worker_init_fn=_tag_worker) for t in ts}
    assert tags == {"worker0", "worker1"}
    # Native threads do not call it (as DataLoader with num_workers=0 does not); a Python
    # tail's worker processes do.
    listed = [(str(p), 0) for p in dataset.paths]
    native = fl.Loader(listed, transform=FIXED, batch_size=4, num_workers=2, worker_init_fn=_fail_if_called)
    assert len(list(native)) == len(native)
    tail = tvT.Compose([*FIXED.transforms, tvT.Lambda(_initialized_in_this_process)])
    in_processes = fl.Loader(
        listed, transform=tail, batch_size=4, num_workers=2, python_tail="allow",
        python_tail_workers="processes", worker_init_fn=_initialize_worker,
    )
    assert all(bool((images == 1.0).all()) for images, _ in in_processes)
    # batch_size=None: samples one by one; a sampler, a batch sampler, a collate_fn, drop_last.
    image, label = next(iter(_loader(dataset, batch_size=None, num_workers=0)))
    assert image.shape == (3, 32, 32) and label == 0
    got = [labels.tolist() for _, labels in _loader(dataset, sampler=[4, 2, 0], batch_size=2, num_workers=0)]
    assert got == [[1, 2], [0]]
    batches = BatchSampler(SequentialSampler(range(7)), batch_size=3, drop_last=True)
    assert len(list(_loader(dataset, batch_sampler=batches, num_workers=0))) == 2
    count = _loader(dataset, batch_size=4, num_workers=0, collate_fn=len, drop_last=True)
    assert list(count) == [4, 4, 4, 4]
    mixed = _loader(dataset, batch_size=4, num_workers=0, batch_transform=lambda x, y: (x * 0, y))
    assert all(float(x.abs().sum()) == 0 for x, _ in mixed)
    for arg in ({"output": "uint8"}, {"tensor_type": "numpy"}, {"decoder": "zune"}):
        with pytest.raises(ValueError, match=r"has no effect on a dataset that makes its own samples"):
            _loader(dataset, **arg)
    with pytest.raises(TypeError, match=r"sample_shape: the dataset makes its own samples"):
        _loader(dataset).sample_shape


def test_a_loader_of_a_python_dataset_pickles_by_configuration(folder: Path) -> None:
    dataset = Photos(folder, RANDOM)
    loader = _loader(dataset, batch_size=6, shuffle=True, seed=3, num_workers=0, prefetch_factor=None)
    loader.set_epoch(2)
    again = pickle.loads(pickle.dumps(loader))
    assert again.epoch == 2 and again.python_dataset_mode == "allow"
    assert same(list(again), list(loader))


def test_the_profile_times_getitem_and_each_transform_in_the_workers(folder: Path) -> None:
    dataset = Photos(folder, FIXED)
    loader = _loader(dataset, batch_size=4, num_workers=2, profile="spans")
    assert sum(len(y) for _, y in loader) == 18
    (profile,) = loader.profile().to_dict()["pipelines"]
    assert profile["label"] == "python" and profile["batch_size"] == 4
    assert profile["num_workers"] == 2 and len(profile["batches"]) == 5
    assert profile["meta"]["dataset"] == "Photos" and "Resize" in profile["meta"]["transform"]
    (summary,) = loader.profile().summary().to_dict()["pipelines"]
    ops = {row["op"] for row in summary["ops"]}
    assert {"process", "__getitem__", "Resize", "CenterCrop", "ToTensor", "collate"} <= ops
    assert summary["images"] == 18
    # Each sample's spans: its process span holds __getitem__, which holds the transforms.
    spans = profile["spans"]
    assert sorted(s["sample"] for s in spans if s["op"] == "process") == list(range(18))
    # take_profile forgets what it returned.
    loader.take_profile()
    assert loader.profile().to_dict()["pipelines"][0]["batches"] == []


def test_torchvisions_datasets_without_a_transform_run_as_dataloader_runs_them(folder: Path) -> None:
    # A custom loader: refused natively before, now torchvision's own __getitem__ runs.
    rotated = torchvision.datasets.ImageFolder(
        str(folder), transform=FIXED, loader=lambda p: Image.open(p).convert("RGB").rotate(90)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = list(fl.Loader(rotated, batch_size=5, num_workers=0))
    want = list(DataLoader(rotated, batch_size=5))
    assert same(got, want)
    # A transform given to the loader still means "read natively": the refusal stands.
    with pytest.raises(ValueError, match=r"has a custom loader"):
        fl.Loader(rotated, transform=FIXED)
    # A list of (tensor, label) pairs is a dataset to DataLoader too.
    pairs: List[Tuple[torch.Tensor, int]] = [(torch.full((2,), float(i)), i) for i in range(5)]
    x, y = next(iter(_loader(pairs, batch_size=5, num_workers=0)))
    assert y.tolist() == [0, 1, 2, 3, 4] and x[:, 0].tolist() == [0, 1, 2, 3, 4]


def test_an_iterable_dataset_streams_as_dataloader_streams_it() -> None:
    fixed = SizedStream(noisy=False)
    with pytest.warns(UserWarning, match=r"SizedStream is an IterableDataset: its own iterator makes the samples"):
        loader = fl.Loader(fixed, batch_size=4, num_workers=2)
    assert len(loader) == 6
    assert loader.sampler is None and loader.batch_sampler is None  # no indices to show
    assert same(list(loader), list(DataLoader(fixed, batch_size=4, num_workers=2)))
    assert same(list(_loader(fixed, batch_size=4, num_workers=0, drop_last=True)), list(DataLoader(fixed, batch_size=4, drop_last=True)))
    with pytest.raises(TypeError, match=r"Stream is an IterableDataset without len\(\)"):
        len(_loader(Stream(), batch_size=4))
    for arg in ({"shuffle": True}, {"sampler": [0, 1]}, {"rank": 0, "world_size": 2}):
        with pytest.raises(ValueError, match=r"is an IterableDataset, which yields its samples in its own order"):
            _loader(Stream(), **arg)
    with pytest.raises(ValueError, match=r"on_error: Stream is an IterableDataset: an exception ends its iterator"):
        _loader(Stream(), on_error="skip")


def test_an_iterable_datasets_workers_are_seeded_per_epoch_and_resume_by_replaying() -> None:
    def run(workers: int, epoch: int = 0, seed: int = 0) -> List[Any]:
        loader = _loader(Stream(), batch_size=4, num_workers=workers, seed=seed)
        loader.set_epoch(epoch)
        return list(loader)

    # 0 and 1 workers: one stream, one seed; 2 workers: each its own, the same every run.
    assert same(run(0), run(1)) and same(run(2), run(2))
    assert not same(run(2), run(2, epoch=1)) and not same(run(2), run(2, seed=1))
    # The consumer's generators do not move with num_workers=0 (the stream's are swapped in).
    torch.manual_seed(5)
    list(_loader(Stream(), batch_size=4, num_workers=0))
    after = torch.rand(1)
    torch.manual_seed(5)
    assert torch.equal(after, torch.rand(1))
    # Resume: the state holds the batches delivered; the resumed epoch replays and drops them.
    first = _loader(Stream(), batch_size=4, num_workers=2)
    it = iter(first)
    [next(it) for _ in range(2)]
    state = first.state_dict()
    rest = list(it)
    resumed = _loader(Stream(), batch_size=4, num_workers=2)
    resumed.load_state_dict(state)
    assert same(list(resumed), rest) and len(rest) == 4
    with pytest.raises(ValueError, match=r"state: saved with num_workers=2, this loader has num_workers=1"):
        _loader(Stream(), batch_size=4, num_workers=1).load_state_dict(state)
    unordered = _loader(Stream(), batch_size=4, num_workers=2, in_order=False)
    it = iter(unordered)
    next(it)
    with pytest.raises(ValueError, match=r"with in_order=False its workers' batches come in no set order"):
        unordered.state_dict()
    # Profiled: a process span per sample, numbered in the epoch's stream.
    profiled = _loader(Stream(), batch_size=4, num_workers=2, profile="spans")
    list(profiled)
    (profile,) = profiled.profile().to_dict()["pipelines"]
    process = sorted(s["sample"] for s in profile["spans"] if s["op"] == "process")
    assert process == list(range(22)) and len(profile["batches"]) == 6


def test_spawned_persistent_workers_give_the_same_batches(folder: Path) -> None:
    dataset = Photos(folder, RANDOM)
    kwargs: Dict[str, Any] = dict(batch_size=5, shuffle=True, seed=2)
    spawned = _loader(
        dataset, num_workers=2, multiprocessing_context="spawn", persistent_workers=True,
        profile="spans", **kwargs,
    )
    first, second = list(spawned), list(spawned)
    assert same(first, list(_loader(dataset, num_workers=0, **kwargs)))
    reference = _loader(dataset, num_workers=0, **kwargs)
    reference.set_epoch(1)
    assert same(second, list(reference))
    (profile,) = spawned.profile().to_dict()["pipelines"]
    assert profile["meta"]["start_method"] == "spawn" and len(profile["batches"]) == 8


def test_a_failed_epoch_leaves_no_workers_for_the_next_loaders_to_inherit(folder: Path) -> None:
    """A failed epoch's DataLoader iterator, left to the garbage collector, was inherited by the
    next loader's forked workers, which then printed DataLoader's __del__ failing ("can only
    test a child process"); run in a fresh interpreter, which sees the workers' stderr."""
    script = f"""
import warnings, torchvision, ferroloader as fl
warnings.simplefilter("ignore")
try:
    next(iter(fl.Loader(torchvision.datasets.ImageFolder({str(folder)!r}), batch_size=4, num_workers=1)))
except TypeError:
    pass  # PIL images: the default collation fails, as DataLoader's does
batch = next(iter(fl.Loader(torchvision.datasets.ImageFolder({str(folder)!r}), batch_size=4, num_workers=1, collate_fn=lambda b: b)))
print(len(batch))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "4"
    assert "can only test a child process" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
