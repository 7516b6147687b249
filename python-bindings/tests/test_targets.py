"""Targets that are not class indices (multi-label multi-hot tensors, regression floats, tuples,
strings, lists): the loader hands out what the dataset gave, collated as DataLoader's default
collation does, for a list of ``(path, target)``, a dataset read through the protocol, a
``Subset``/``ConcatDataset`` of them and a Hugging Face label column; the pixels are those of the
same listing with class indices. Where the targets go wrong (each sample's target is looked up by
its position), these tests fail: a target from the wrong sample, the wrong collation."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, List, Sequence, Tuple

import pytest
import torch
import torchvision.transforms as tvT
from torch.utils.data import ConcatDataset, DataLoader, Subset, default_collate

import ferroloader as fl
from conftest import labelled_by_index

COUNT = 12


def transform() -> Any:
    return tvT.Compose([tvT.RandomResizedCrop(16), tvT.RandomHorizontalFlip(), tvT.ToTensor()])


def multi_hot(i: int) -> torch.Tensor:
    return torch.tensor([i % 2, i % 3 == 0, 1, i / 10], dtype=torch.float32)


def run(dataset: Any, **kw: Any) -> Tuple[List[torch.Tensor], List[Any], List[List[int]]]:
    """Every batch's images, targets and dataset indices."""
    kw = {"batch_size": 4, "shuffle": True, "seed": 3, "num_workers": 2, "transform": transform(), **kw}
    it = iter(fl.Loader(dataset, **kw))
    images, targets, indices = [], [], []
    for x, y in it:
        assert it.indices is not None
        images.append(x)
        targets.append(y)
        indices.append(it.indices.tolist())
    return images, targets, indices


def assert_collated(got: Any, want: Any) -> None:
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == want.dtype and torch.equal(got, want)
    elif isinstance(want, dict):
        assert got.keys() == want.keys()
        for key in want:
            assert_collated(got[key], want[key])
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_collated(g, w)
    else:
        assert got == want


def check_targets(
    folder: Path,
    target_of: Callable[[int], Any],
    make: Callable[[List[Tuple[Any, Any]]], Any],
    origin: Sequence[int] = range(COUNT),
    **kw: Any,
) -> None:
    """The loader over ``make(items)`` (items with ``target_of(i)`` targets) hands out the
    class-index run's images, and each batch's targets collated from its own samples' (sample
    ``k`` of ``make(items)`` is ``items[origin[k]]``)."""
    labelled = labelled_by_index(folder, COUNT)
    reference, _, reference_indices = run(make(labelled), **kw)
    images, targets, indices = run(make([(p, target_of(i)) for p, i in labelled]), **kw)
    assert indices == reference_indices
    assert all(torch.equal(a, b) for a, b in zip(images, reference))
    for batch, got in zip(indices, targets):
        # DataLoader collates the targets of its (image, target) samples as the tuple its
        # transposition makes (strings stay in it).
        assert_collated(got, default_collate(tuple(target_of(origin[k]) for k in batch)))


@pytest.mark.parametrize(
    "target_of",
    [
        multi_hot,
        lambda i: i / 4,  # regression: float64, as DataLoader collates Python floats
        lambda i: (i, torch.tensor([i, -i])),
        lambda i: {"class": i % 3, "box": torch.tensor([i, i + 1.0])},
        lambda i: f"sample-{i}",
    ],
    ids=["multi-hot", "float", "tuple", "dict", "str"],
)
def test_a_list_of_paths_and_targets(folder: Path, target_of: Callable[[int], Any]) -> None:
    check_targets(folder, target_of, list)


class Listing(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """A map-style dataset of the protocol (a manifest or a database), not a list."""

    def __init__(self, items: Sequence[Tuple[Any, Any]], as_bytes: bool = False) -> None:
        self.items = items
        self.as_bytes = as_bytes

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Tuple[Any, Any]:
        path, target = self.items[i]
        return (Path(path).read_bytes() if self.as_bytes else path), target


@pytest.mark.parametrize("num_workers", [0, 1, 2])
@pytest.mark.parametrize("as_bytes", [False, True])
def test_a_protocol_dataset_whatever_the_workers(folder: Path, as_bytes: bool, num_workers: int) -> None:
    check_targets(folder, multi_hot, lambda items: Listing(items, as_bytes), num_workers=num_workers)


def test_a_list_of_bytes_and_targets(folder: Path) -> None:
    check_targets(folder, multi_hot, lambda items: [(Path(p).read_bytes(), t) for p, t in items])


def test_subsets_and_concatenations(folder: Path) -> None:
    picked = [5, 0, 7, 3, 11, 2]
    check_targets(folder, multi_hot, lambda items: Subset(items, picked), picked)
    check_targets(
        folder,
        multi_hot,
        lambda items: ConcatDataset([items[6:], Subset(items, [1, 4, 0])]),
        [*range(6, COUNT), 1, 4, 0],
    )
    # Class indices in one part, targets in the other: as DataLoader, each sample's own.
    check_targets(
        folder,
        lambda i: i if i < 6 else i / 2,
        lambda items: ConcatDataset([items[:6], items[6:]]),
        batch_size=1,
    )


def test_a_python_tail_in_worker_processes(folder: Path) -> None:
    heavy = tvT.Compose([tvT.RandomResizedCrop(16), tvT.ToTensor(), tvT.Lambda(lambda x: x * 2)])
    for make in (list, Listing):
        check_targets(
            folder, multi_hot, make, transform=heavy, python_tail="allow", python_tail_workers="processes"
        )


def test_resumed_mid_epoch(folder: Path) -> None:
    items = Listing([(p, multi_hot(i)) for p, i in labelled_by_index(folder, COUNT)])
    whole = fl.Loader(items, batch_size=4, shuffle=True, seed=2, num_workers=2, transform=transform())
    it = iter(whole)
    next(it)
    state = whole.state_dict()
    rest = [y for _, y in it]
    resumed = fl.Loader(Listing(items.items), batch_size=4, shuffle=True, seed=2, num_workers=2, transform=transform())
    resumed.load_state_dict(state)
    got = [y for _, y in resumed]
    assert len(got) == len(rest) == 2 and all(torch.equal(a, b) for a, b in zip(got, rest))


def test_a_replaced_sample_brings_its_own_target(corrupt_folder: Path) -> None:
    paths = sorted(str(p) for p in corrupt_folder.rglob("*.jpg"))  # a/1.jpg truncated, b/2.jpg HTML
    items = Listing([(p, multi_hot(i)) for i, p in enumerate(paths)])
    it = iter(fl.Loader(items, batch_size=2, num_workers=2, transform=transform(), on_error="replace"))
    got = [(y, it.indices.tolist()) for _, y in it]  # type: ignore[union-attr]
    assert [indices for _, indices in got] == [[0, 2], [2, 3], [4, 0]]
    for y, indices in got:
        assert torch.equal(y, torch.stack([multi_hot(i) for i in indices]))


def test_a_collate_fn_gets_each_samples_target(folder: Path) -> None:
    items = [(p, multi_hot(i)) for p, i in labelled_by_index(folder, COUNT)]
    seen: List[List[torch.Tensor]] = []

    def collate(samples: List[Tuple[torch.Tensor, torch.Tensor]]) -> Any:
        seen.append([t for _, t in samples])
        return default_collate(samples)

    it = iter(fl.Loader(items, batch_size=4, num_workers=2, transform=transform(), collate_fn=collate))
    for _, y in it:
        assert torch.equal(y, torch.stack([multi_hot(i) for i in it.indices.tolist()]))  # type: ignore[union-attr]
    assert len(seen) == 3 and all(len(s) == 4 for s in seen)


def test_batch_mixing_gets_the_targets_not_positions(folder: Path) -> None:
    """v2's MixUp takes class indices: given float targets, it raises its own error, as with
    DataLoader, rather than mixing positions taken for classes."""
    from torchvision.transforms import v2

    items = [(p, float(i)) for p, i in labelled_by_index(folder, COUNT)]
    mix = v2.MixUp(alpha=0.2, num_classes=COUNT)
    loader = fl.Loader(items, batch_size=4, num_workers=2, transform=transform(), batch_transform=mix)
    assert loader.batch_mix is None
    stock = DataLoader([(torch.zeros(3, 4, 4), float(i)) for i in range(4)], batch_size=4)
    with pytest.raises(RuntimeError) as theirs:
        mix(*next(iter(stock)))
    with pytest.raises(RuntimeError) as ours:
        next(iter(loader))
    assert str(ours.value) == str(theirs.value) and "one_hot" in str(ours.value)
    # Multi-hot targets it mixes as they are, in the consuming thread.
    hot = [(p, multi_hot(i)) for p, i in labelled_by_index(folder, COUNT)]
    plain = next(iter(fl.Loader(hot, batch_size=4, num_workers=2, transform=transform())))
    mix = v2.MixUp(alpha=0.2)  # num_classes read from the targets
    mixing = fl.Loader(hot, batch_size=4, num_workers=2, transform=transform(), batch_transform=mix)
    assert mixing.batch_mix is None
    torch.manual_seed(5)
    images, targets = next(iter(mixing))
    torch.manual_seed(5)
    want = mix(*plain)
    assert torch.equal(images, want[0]) and torch.equal(targets, want[1])


def test_the_first_target_decides_and_a_later_mismatch_is_named(folder: Path) -> None:
    labelled = labelled_by_index(folder, COUNT)
    odd = Listing([(p, i if i != 5 else multi_hot(i)) for p, i in labelled])
    with pytest.raises(OSError, match=r"dataset\[5\]: the target tensor\(.*is not a class index"):
        list(fl.Loader(odd, batch_size=4, num_workers=1, transform=transform()))


def test_shards_refuse_targets_that_are_not_classes(folder: Path, tmp_path: Path) -> None:
    items = [(p, multi_hot(i)) for p, i in labelled_by_index(folder, COUNT)]
    with pytest.raises(ValueError, match="not class indices.*one class index per file"):
        fl.shard(items, tmp_path / "out")


def test_hugging_face_label_columns_of_any_type(folder: Path) -> None:
    datasets = pytest.importorskip("datasets")
    labelled = labelled_by_index(folder, COUNT)
    paths = [p for p, _ in labelled]

    def table(labels: Any, feature: Any) -> Any:
        features = datasets.Features({"image": datasets.Image(), "labels": feature})
        images = [{"bytes": Path(p).read_bytes(), "path": None} for p in paths]
        return datasets.Dataset.from_dict({"image": images, "labels": labels}, features=features)

    reference, _, reference_indices = run(table(list(range(COUNT)), datasets.Value("int64")))
    multi = datasets.Sequence(datasets.ClassLabel(num_classes=3))
    for labels, feature in [
        ([[i % 3, (i + 1) % 3] for i in range(COUNT)], multi),
        ([i / 4 for i in range(COUNT)], datasets.Value("float32")),
        ([f"s{i}" for i in range(COUNT)], datasets.Value("string")),
    ]:
        dataset = table(labels, feature)
        images, targets, indices = run(dataset)
        assert indices == reference_indices
        assert all(torch.equal(a, b) for a, b in zip(images, reference))
        for batch, got in zip(indices, targets):
            assert_collated(got, default_collate([dataset[i]["labels"] for i in batch]))
    # A Subset of the dataset shuffled by Hugging Face: rows are the table's, targets follow them.
    shuffled = table([i / 4 for i in range(COUNT)], datasets.Value("float32")).shuffle(seed=1)
    part = Subset(shuffled, [3, 0, 9, 4])
    _, targets, indices = run(part, shuffle=False)
    assert_collated(targets[0], default_collate([shuffled[i]["labels"] for i in [3, 0, 9, 4]]))


def test_pickled_loader_keeps_the_targets(folder: Path) -> None:
    import pickle

    items = [(p, multi_hot(i)) for p, i in labelled_by_index(folder, COUNT)]
    loader = fl.Loader(items, batch_size=4, num_workers=1, transform=tvT.Compose([tvT.Resize(8), tvT.CenterCrop(8), tvT.ToTensor()]))
    copy = pickle.loads(pickle.dumps(loader))
    for (x, y), (cx, cy) in zip(loader, copy):
        assert torch.equal(x, cx) and torch.equal(y, cy)
