"""The loader as a torch user sees it: datasets, shapes, dtypes, labels, the iterator protocol,
epochs, drop_last, sharding, samplers, error policies, pickling and a short training loop."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, List

import numpy as np
import pytest
import torch
import torchvision

import ferroloader as fl
from ferroloader import transforms as T

from conftest import IMAGENET_MEAN, IMAGENET_STD


def train_transform(size: int = 32) -> T.Compose:
    return T.Compose(
        [T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    )


def make(folder: Path, **kw: Any) -> fl.Loader:
    kw.setdefault("batch_size", 4)
    kw.setdefault("num_workers", 2)
    kw.setdefault("transform", train_transform())
    return fl.Loader(fl.ImageFolder(folder), **kw)


def epoch_indices(loader: fl.Loader) -> List[int]:
    it = iter(loader)
    out: List[int] = []
    for _ in it:
        assert it.indices is not None
        out.extend(it.indices.tolist())
    return out


def test_image_folder_matches_torchvision(folder: Path) -> None:
    ours = fl.ImageFolder(folder)
    theirs = torchvision.datasets.ImageFolder(str(folder))
    assert ours.classes == theirs.classes
    assert ours.class_to_idx == theirs.class_to_idx
    assert ours.samples == theirs.samples
    assert ours.targets == theirs.targets
    assert len(ours) == len(theirs) == 18
    assert ours[-1] == theirs.samples[-1]
    with pytest.raises(IndexError):
        ours[18]


def test_file_list(folder: Path, tmp_path: Path) -> None:
    ds = fl.ImageFolder(folder)
    rows = [(str(Path(p).relative_to(folder)), label * 10) for p, label in ds.samples]
    listing = tmp_path / "train.csv"
    listing.write_text("path,label\n" + "".join(f"{p},{l}\n" for p, l in rows))
    fl_list = fl.FileList(listing, root=folder)
    assert len(fl_list) == 18
    assert fl_list.targets == [l for _, l in rows]
    assert fl_list.paths == [p for p, _ in ds.samples]
    loader = fl.Loader(fl_list, batch_size=6, num_workers=1, transform=train_transform())
    labels = torch.cat([lab for _, lab in loader])
    assert labels.tolist() == [l for _, l in rows]
    # Relative to the list's folder by default.
    (tmp_path / "rel.tsv").write_text(f"{Path(rows[0][0]).name}\t5\n")
    assert fl.FileList(tmp_path / "rel.tsv").paths == [str(tmp_path / Path(rows[0][0]).name)]


def test_shapes_dtypes_and_labels(folder: Path) -> None:
    reference = torchvision.datasets.ImageFolder(str(folder))
    loader = make(folder, batch_size=5)
    assert len(loader) == 4
    seen = 0
    for images, labels in loader:
        n = images.shape[0]
        assert images.dtype == torch.float32 and images.shape == (n, 3, 32, 32)
        assert labels.dtype == torch.int64 and labels.shape == (n,)
        assert labels.tolist() == reference.targets[seen : seen + n]
        assert torch.isfinite(images).all()
        seen += n
    assert seen == 18

    u8 = make(folder, batch_size=18, output="uint8", transform=T.Compose([T.CenterCrop(64), T.PILToTensor()]))
    images, labels = next(iter(u8))
    assert images.dtype == torch.uint8 and images.shape == (18, 3, 64, 64)
    assert u8.deferred_normalize is None
    # uint8 output of a float pipeline: the normalization is left to the consumer.
    deferred = make(folder, output="uint8")
    assert deferred.dtype == "uint8"
    mean, std = deferred.deferred_normalize
    assert np.allclose(mean, IMAGENET_MEAN) and np.allclose(std, IMAGENET_STD)


def test_an_iterator_starts_its_epoch_at_its_first_batch(folder: Path) -> None:
    # Lightning calls iter() once on a loader that is not a DataLoader to check that it can, and
    # calls the sampler's set_epoch after the iter() that runs the first epoch: an iterator
    # never advanced uses up no epoch (and no loaded state), and one takes the epoch set before
    # its first next().
    loader = make(folder, shuffle=True, seed=3)
    probe = iter(loader)
    del probe
    assert loader.epoch == 0
    assert epoch_indices(loader) == loader._order(0)
    first = iter(loader)
    loader.set_epoch(5)
    next(first)
    assert first.epoch == 5 and loader.epoch == 6
    state = loader.state_dict()
    resumed = make(folder, shuffle=True, seed=3)
    resumed.load_state_dict(state)
    iter(resumed)
    rest = iter(resumed)
    assert resumed.state_dict() == state
    assert len(list(rest)) == 4 and rest.epoch == 5


def test_iterator_protocol_and_epochs(folder: Path) -> None:
    loader = make(folder, shuffle=True, seed=3)
    assert loader.epoch == 0
    it = iter(loader)
    assert iter(it) is it and len(it) == 5 and it.epoch == 0
    batches = list(it)
    assert len(batches) == 5 and [b[0].shape[0] for b in batches] == [4, 4, 4, 4, 2]
    with pytest.raises(StopIteration):
        next(it)
    # Each iter() is the next epoch, shuffled differently; set_epoch replays one.
    e1 = epoch_indices(loader)
    assert loader.epoch == 2
    loader.set_epoch(0)
    e0 = epoch_indices(loader)
    loader.set_epoch(1)
    assert epoch_indices(loader) == e1
    assert e0 != e1 and sorted(e0) == sorted(e1) == list(range(18))
    # Not shuffled: dataset order.
    assert epoch_indices(make(folder)) == list(range(18))


def test_same_batches_whatever_the_workers(folder: Path) -> None:
    def run(workers: int, in_order: bool) -> torch.Tensor:
        loader = make(folder, shuffle=True, seed=9, num_workers=workers, in_order=in_order, prefetch_batches=3)
        loader.set_epoch(4)
        images = {}
        it = iter(loader)
        for batch, _ in it:
            assert it.indices is not None
            for k, index in enumerate(it.indices.tolist()):
                images[index] = batch[k].clone()
        return torch.stack([images[i] for i in range(18)])

    one = run(1, True)
    assert torch.equal(one, run(2, True))
    assert torch.equal(one, run(2, False))


def test_drop_last(folder: Path) -> None:
    loader = make(folder, batch_size=5, drop_last=True)
    assert len(loader) == 3
    sizes = [images.shape[0] for images, _ in loader]
    assert sizes == [5, 5, 5]
    assert len(make(folder, batch_size=5)) == 4


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_sharding_is_disjoint_and_covering(folder: Path, world_size: int) -> None:
    shards = []
    for rank in range(world_size):
        loader = make(folder, shuffle=True, seed=5, rank=rank, world_size=world_size)
        loader.set_epoch(2)
        shards.append(epoch_indices(loader))
    per_rank = -(-18 // world_size)
    assert all(len(s) == per_rank for s in shards)
    everything = [i for s in shards for i in s]
    assert set(everything) == set(range(18))
    # Only DistributedSampler's padding repeats samples.
    assert len(everything) - len(set(everything)) == per_rank * world_size - 18
    if world_size in (2, 3):
        assert len(set(everything)) == len(everything)


def test_sampler(folder: Path) -> None:
    class EvenFirst:
        def __init__(self) -> None:
            self.epoch = 0

        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter([i for i in range(18) if i % 2 == 0] + [1, 3])

        def __len__(self) -> int:
            return 11

        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch

    sampler = EvenFirst()
    loader = make(folder, sampler=sampler, batch_size=4)
    assert len(loader) == 3
    assert epoch_indices(loader) == list(range(0, 18, 2)) + [1, 3]
    loader.set_epoch(7)
    assert sampler.epoch == 7 and loader.epoch == 7
    with pytest.raises(IndexError, match="sampler"):
        next(iter(make(folder, sampler=[0, 99])))
    with pytest.raises(ValueError, match="sampler"):
        make(folder, sampler=[0], shuffle=True)
    with pytest.raises(ValueError, match="sampler"):
        make(folder, sampler=[0], rank=0, world_size=2)
    # A torch sampler works as it is.
    torch_sampler = torch.utils.data.SubsetRandomSampler([5, 6, 7], generator=torch.Generator().manual_seed(0))
    assert sorted(epoch_indices(make(folder, sampler=torch_sampler))) == [5, 6, 7]


def test_skip_policy(corrupt_folder: Path) -> None:
    loader = fl.Loader(
        fl.ImageFolder(corrupt_folder), batch_size=2, num_workers=2, on_error="skip", transform=train_transform(16)
    )
    it = iter(loader)
    sizes = [images.shape[0] for images, _ in it]
    assert sum(sizes) == 4 and sizes == [2, 2]
    skipped = sorted(it.skipped)
    assert [Path(p).name for _, p, _ in skipped] == ["1.jpg", "2.jpg"]
    assert "truncated" in skipped[0][2] or "corrupt" in skipped[0][2]


def test_pickle_round_trip(folder: Path) -> None:
    ds = fl.ImageFolder(folder)
    ds2 = pickle.loads(pickle.dumps(ds))
    assert ds2.samples == ds.samples and ds2.classes == ds.classes
    transform = train_transform()
    assert pickle.loads(pickle.dumps(transform)) == transform
    loader = fl.Loader(ds, batch_size=4, shuffle=True, seed=2, num_workers=2, transform=transform, drop_last=True)
    loader.set_epoch(5)
    clone = pickle.loads(pickle.dumps(loader))
    assert clone.epoch == 5 and clone.batch_size == 4 and clone.drop_last and clone.transform == transform
    assert isinstance(clone.dataset, fl.ImageFolder) and clone.dataset.samples == ds.samples
    a = [x for x, _ in loader]
    b = [x for x, _ in clone]
    assert len(a) == len(b) == 4 and all(torch.equal(x, y) for x, y in zip(a, b))


def test_short_training_loop(folder: Path) -> None:
    torch.manual_seed(0)
    loader = make(folder, batch_size=6, shuffle=True, drop_last=True)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, len(loader.dataset.classes)),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        for images, labels in loader:
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert len(losses) == 6 and all(np.isfinite(losses))
