"""The loader as a drop-in for torch's DataLoader: the datasets people have, DataLoader's
arguments (or a refusal that says why), and exact resume from a saved state."""

from __future__ import annotations

import itertools
import os
import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Callable, Iterator, List, Tuple

import numpy as np
import pytest
import torch
import torchvision
from torch.utils.data import BatchSampler, ConcatDataset, SequentialSampler, Subset, random_split

import ferroloader as fl
from ferroloader import transforms as T

from conftest import IMAGENET_MEAN, IMAGENET_STD


def tv_transform() -> Any:
    tv = torchvision.transforms
    return tv.Compose(
        [tv.RandomResizedCrop(24), tv.RandomHorizontalFlip(), tv.ToTensor(), tv.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    )


def fl_transform() -> T.Compose:
    return T.Compose(
        [T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    )


Batches = List[Tuple[torch.Tensor, torch.Tensor]]


def run(loader: Any) -> Batches:
    return [(x.clone(), y.clone()) for x, y in loader]


def same(a: Batches, b: Batches) -> bool:
    return len(a) == len(b) and all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(a, b))


def reference(folder: Path, **kw: Any) -> Batches:
    kw.setdefault("batch_size", 4)
    kw.setdefault("num_workers", 2)
    kw.setdefault("shuffle", True)
    return run(fl.Loader(fl.ImageFolder(folder), transform=fl_transform(), **kw))


class PathItems:
    """A map-style dataset from a 'manifest': items are (path, label)."""

    def __init__(self, samples: List[Tuple[str, int]]) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> Tuple[str, int]:
        return self.samples[i]


class BytesItems(PathItems):
    """Items are (encoded bytes, label), as from a database."""

    def __getitem__(self, i: int) -> Tuple[bytes, int]:  # type: ignore[override]
        path, label = self.samples[i]
        return Path(path).read_bytes(), label


def test_every_dataset_form_gives_the_imagefolder_batches(folder: Path) -> None:
    want = reference(folder)
    tv = torchvision.datasets.ImageFolder(str(folder))
    samples = [(p, int(c)) for p, c in tv.samples]
    forms: List[Any] = [
        tv,
        samples,
        [(Path(p), c) for p, c in samples],
        [(Path(p).read_bytes(), c) for p, c in samples],
        PathItems(samples),
        BytesItems(samples),
        Subset(tv, list(range(len(tv)))),
        ConcatDataset([Subset(tv, list(range(7))), Subset(tv, list(range(7, 18)))]),
        fl.PathList([p for p, _ in samples], [c for _, c in samples]),
    ]
    for form in forms:
        got = run(fl.Loader(form, batch_size=4, num_workers=2, shuffle=True, transform=fl_transform()))
        assert same(got, want), type(form).__name__
    # torchvision's transform on the dataset is used when the loader is given none.
    with_transform = torchvision.datasets.ImageFolder(str(folder), transform=tv_transform())
    assert same(run(fl.Loader(with_transform, batch_size=4, num_workers=2, shuffle=True)), want)
    assert same(
        run(fl.Loader(Subset(with_transform, list(range(18))), batch_size=4, num_workers=2, shuffle=True)), want
    )
    # A random_split selects the same samples as indexing the folder by its indices.
    part, _ = random_split(tv, [10, 8], generator=torch.Generator().manual_seed(0))
    picked = [samples[i] for i in part.indices]
    assert same(
        run(fl.Loader(part, batch_size=3, num_workers=1, transform=fl_transform())),
        run(fl.Loader(picked, batch_size=3, num_workers=1, transform=fl_transform())),
    )


def test_a_target_transform_maps_each_label_as_the_dataset_would(folder: Path) -> None:
    """The dataset's ``target_transform`` is called on each class index and the results
    collated as DataLoader collates them, wherever the images are made: natively, with a
    Python tail under the GIL or in worker processes; with a collate_fn, unbatched, as numpy."""
    tv = torchvision.transforms
    shift = torchvision.datasets.ImageFolder(str(folder), tv_transform(), target_transform=lambda y: y + 10)
    classes = len(shift.classes)

    def one_hot(y: int) -> torch.Tensor:
        return torch.nn.functional.one_hot(torch.tensor(y), classes).float()

    def keyed(y: int) -> Any:
        return {"label": y, "name": shift.classes[y]}

    plain = torchvision.datasets.ImageFolder(str(folder))
    labels = [label for _, label in plain.samples]
    want = torch.utils.data.default_collate
    order = reference(folder, shuffle=True, batch_size=5)
    shuffled = run(fl.Loader(shift, batch_size=5, num_workers=2, shuffle=True, python_dataset="error"))
    # The same images as without it, each label moved.
    assert same([(x, y + 10) for x, y in order], shuffled)
    for fn in (one_hot, keyed):
        dataset = torchvision.datasets.ImageFolder(str(folder), tv_transform(), target_transform=fn)
        batches = list(fl.Loader(dataset, batch_size=4, num_workers=2, python_dataset="error"))
        assert len(batches) == -(-len(labels) // 4)
        for k, (_, y) in enumerate(batches):
            expected = want([fn(label) for label in labels[4 * k : 4 * k + 4]])
            if fn is one_hot:
                assert torch.equal(y, expected)
            else:
                assert torch.equal(y["label"], expected["label"]) and y["name"] == expected["name"]
    dataset = torchvision.datasets.ImageFolder(str(folder), tv_transform(), target_transform=one_hot)
    x, y = next(iter(fl.Loader(dataset, batch_size=None)))
    assert x.shape == (3, 24, 24) and torch.equal(y, one_hot(labels[0]))
    got = next(iter(fl.Loader(shift, batch_size=3, collate_fn=lambda items: [t for _, t in items])))
    assert got == [label + 10 for label in labels[:3]]
    _, y = next(iter(fl.Loader(shift, batch_size=3, tensor_type="numpy")))
    assert isinstance(y, np.ndarray) and y.tolist() == [label + 10 for label in labels[:3]]
    # With a Python tail, in the threads and in worker processes.
    tail = tv.Compose([tv.RandomResizedCrop(24), tv.Lambda(lambda im: im), tv.ToTensor()])
    for where in ("threads", "processes"):
        dataset = torchvision.datasets.ImageFolder(str(folder), tail, target_transform=lambda y: -y)
        loader = fl.Loader(dataset, batch_size=4, num_workers=2, python_tail="allow", python_tail_workers=where)
        assert loader.python_tail_where == where
        assert [int(v) for _, y in loader for v in y] == [-label for label in labels]
    # Parts that map labels differently, or shards that would drop the mapping: refused.
    other = torchvision.datasets.ImageFolder(str(folder), shift.transform, target_transform=lambda y: y)
    with pytest.raises(ValueError, match="parts carry different target_transforms"):
        fl.Loader(ConcatDataset([shift, other]), batch_size=4, python_dataset="error")
    with pytest.raises(ValueError, match=r"src: ImageFolder\.target_transform is set"):
        fl.shard(shift, folder.parent / "shards-with-targets", shard_size=1 << 20)


def test_datasets_that_cannot_be_honoured_are_refused_with_the_reason(folder: Path) -> None:
    def custom_loader(path: str) -> Any:
        return torchvision.datasets.folder.pil_loader(path)

    custom = torchvision.datasets.ImageFolder(str(folder), loader=custom_loader)
    with pytest.raises(ValueError, match="^dataset: .*custom loader"):
        fl.Loader(custom, transform=fl_transform())
    both = torchvision.datasets.ImageFolder(str(folder), transform=tv_transform())
    with pytest.raises(ValueError, match="^transform: given both"):
        fl.Loader(both, transform=fl_transform())
    with pytest.raises(TypeError, match="^transform: required"):
        fl.Loader(fl.ImageFolder(folder))
    items = PathItems([("a.jpg", 0)])
    items.transform = tv_transform()  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="PathItems.transform is set"):
        fl.Loader(items, transform=fl_transform())
    with pytest.raises(TypeError, match=r"dataset\[1\]"):
        fl.Loader([("a.jpg", 0), (3, 1)], transform=fl_transform())


def test_protocol_items_that_break_it_are_errors_naming_the_item(folder: Path) -> None:
    class Broken(PathItems):
        def __getitem__(self, i: int) -> Any:
            return {"path": self.samples[i][0]} if i == 2 else self.samples[i]

    tv = torchvision.datasets.ImageFolder(str(folder))
    loader = fl.Loader(Broken([(p, c) for p, c in tv.samples]), batch_size=4, num_workers=1, transform=fl_transform())
    with pytest.raises(OSError, match=r"dataset\[2\].*expected \(path or bytes, label\)"):
        run(loader)
    skipping = fl.Loader(
        Broken([(p, c) for p, c in tv.samples]), batch_size=4, num_workers=2, on_error="skip", transform=fl_transform()
    )
    it = iter(skipping)
    assert sum(len(y) for _, y in it) == 17
    assert [i for i, _, _ in it.skipped] == [2]


def test_a_protocol_dataset_of_bytes_names_its_bad_item_as_it_says(folder: Path) -> None:
    class Records(PathItems):
        """Bytes from a store with keys of its own, item 3's cut short."""

        def __getitem__(self, i: int) -> Any:
            path, label = self.samples[i]
            data = Path(path).read_bytes()
            return (data[: len(data) // 3] if i == 3 else data), label

        def ferroloader_item_name(self, i: int) -> str:
            return f"records.db, key {1000 + i}"

    tv = torchvision.datasets.ImageFolder(str(folder))
    records = Records([(p, c) for p, c in tv.samples])
    with pytest.raises(fl.DecodeError, match=r"^records\.db, key 1003: "):
        run(fl.Loader(records, batch_size=4, num_workers=2, transform=fl_transform()))
    it = iter(fl.Loader(records, batch_size=4, on_error="skip", transform=fl_transform()))
    assert sum(len(y) for _, y in it) == 17
    assert [(i, name) for i, name, _ in it.skipped] == [(3, "records.db, key 1003")]
    # A name the dataset fails to give leaves the loader's own.
    del Records.ferroloader_item_name
    with pytest.raises(fl.DecodeError, match=r"^dataset\[3\]: "):
        run(fl.Loader(records, batch_size=4, transform=fl_transform()))


def test_file_list_columns_headers_and_class_names(folder: Path, tmp_path: Path) -> None:
    tv = torchvision.datasets.ImageFolder(str(folder))
    rows = [(os.path.relpath(p, folder), tv.classes[c]) for p, c in tv.samples]
    csv = tmp_path / "train.csv"
    csv.write_text("id,species,file,width\n" + "".join(f"{i},{c},{p},1\n" for i, (p, c) in enumerate(rows)))
    listing = fl.FileList(csv, root=folder, path_column="file", label_column="species")
    assert listing.classes == tv.classes and listing.class_to_idx == tv.class_to_idx
    assert listing.targets == tv.targets
    assert same(
        run(fl.Loader(listing, batch_size=4, num_workers=2, shuffle=True, transform=fl_transform())), reference(folder)
    )
    # By index, no header: every row is data.
    plain = tmp_path / "plain.tsv"
    plain.write_text("".join(f"x\t{p}\t{c}\n" for p, c in rows))
    assert fl.FileList(plain, root=folder, path_column=1, label_column=2).targets == tv.targets
    jsonl = tmp_path / "train.jsonl"
    jsonl.write_text("".join(f'{{"path": "{p}", "label": "{c}"}}\n' for p, c in rows))
    assert fl.FileList(jsonl, root=folder).targets == tv.targets
    # The row a guess used to drop silently: now an error naming the line (issue 23).
    guessed = tmp_path / "guessed.csv"
    guessed.write_text("file,class\n" + "".join(f"{p},{tv.class_to_idx[c]}\n" for p, c in rows))
    with pytest.raises(ValueError, match=r"guessed.csv:2: label \"0\" is an integer, but line 1's"):
        fl.FileList(guessed)
    assert len(fl.FileList(guessed, root=folder, has_header=True)) == 18
    with pytest.raises(ValueError, match='column "label" is not in the first row'):
        fl.FileList(guessed, label_column="label")
    # Pickles by its arguments.
    again = pickle.loads(pickle.dumps(listing))
    assert again.samples == listing.samples and again.classes == listing.classes


@pytest.fixture(scope="module")
def cifar_like(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 classes x 4 PNGs and JPEGs of one size (32x32), as CIFAR's images are."""
    from PIL import Image

    root = tmp_path_factory.mktemp("cifar_like")
    rng = np.random.default_rng(3)
    for c in range(3):
        (root / f"c{c}").mkdir()
        for i in range(4):
            pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / f"c{c}" / (f"{i}.png" if i % 2 else f"{i}.jpg"))
    return root


def test_transforms_with_no_crop_or_resize_run_natively_at_the_images_size(cifar_like: Path) -> None:
    """CIFAR's test transforms: the images keep their size (the first sample's), natively."""
    import torchvision.transforms.v2 as v2

    tv = torchvision.transforms
    mean, std = [0.49, 0.48, 0.45], [0.25, 0.24, 0.26]
    for transform in (
        tv.Compose([tv.ToTensor(), tv.Normalize(mean, std)]),
        v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std)]),
        tv.Compose([tv.RandomHorizontalFlip(p=1.0), tv.ColorJitter(brightness=(1.3, 1.3)), tv.PILToTensor()]),
    ):
        reference = torchvision.datasets.ImageFolder(str(cifar_like), transform=transform)
        output = "uint8" if "PILToTensor" in repr(transform) else "float32"
        loader = fl.Loader(
            reference, batch_size=5, num_workers=2, output=output, python_tail="error"  # type: ignore[arg-type]
        )
        assert loader.sample_shape == (3, 32, 32)
        got = torch.cat([x for x, _ in loader])
        want = torch.stack([reference[i][0] for i in range(len(reference))])
        assert got.dtype == want.dtype
        assert torch.equal(got, want), repr(transform)
    # Planned without a dataset, the size is the images' own: unknown until one is read.
    assert T.check(T.Compose([T.ToTensor()]))["shape"] == (3, None, None)
    assert T.check(T.Compose([T.ColorJitter(0.1), T.CenterCrop(8), T.ToTensor()]))["shape"] == (3, 8, 8)


def test_images_of_another_size_are_errors_when_nothing_crops_or_resizes(folder: Path) -> None:
    """torch's collate would fail on such a batch; ferroloader names the file and both sizes,
    and under on_error="skip" leaves those samples out."""
    transform = torchvision.transforms.ToTensor()
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=2, num_workers=0, transform=transform)
    with pytest.raises(ValueError, match=r"img_\d+\.(jpg|png).*the image is \d+x\d+, the pipeline's images \d+x\d+"):
        for _ in loader:
            pass
    skipping = fl.Loader(fl.ImageFolder(folder), batch_size=2, transform=transform, on_error="skip")
    epoch = iter(skipping)
    shapes = {tuple(x.shape[1:]) for x, _ in epoch}
    assert shapes == {skipping.sample_shape}
    assert len(epoch.skipped) > 0  # type: ignore[attr-defined]


def test_num_workers_zero_unbatched_and_the_collate_hooks(folder: Path) -> None:
    want = reference(folder)
    assert same(reference(folder, num_workers=0), want)
    assert same(reference(folder, num_workers=0, in_order=False), want)
    singles = list(fl.Loader(fl.ImageFolder(folder), batch_size=None, shuffle=True, num_workers=0, transform=fl_transform()))
    assert len(singles) == 18 and singles[0][0].shape == (3, 24, 24)
    assert all(type(y) is int for _, y in singles)  # as DataLoader's batch_size=None gives them
    stacked = torch.stack([x for x, _ in singles])
    assert torch.equal(stacked, torch.cat([x for x, _ in want]))
    # A custom collate_fn gets the samples DataLoader would give it.
    seen: List[Any] = []

    def collate(batch: List[Tuple[torch.Tensor, int]]) -> Tuple[torch.Tensor, torch.Tensor]:
        seen.append(batch)
        return torch.utils.data.default_collate(batch)  # type: ignore[no-any-return]

    collated = run(fl.Loader(fl.ImageFolder(folder), 4, True, collate_fn=collate, transform=fl_transform()))
    assert same(collated, want) and len(seen) == 5 and isinstance(seen[0][0][1], int)
    plain = fl.Loader(
        fl.ImageFolder(folder), 4, True, collate_fn=torch.utils.data.default_collate, transform=fl_transform()
    )
    assert plain.collate_fn is None and same(run(plain), want)
    doubled = fl.Loader(
        fl.ImageFolder(folder), 4, True, batch_transform=lambda x, y: (2 * x, y + 1), transform=fl_transform()
    )
    assert all(torch.equal(x, 2 * u) and torch.equal(y, v + 1) for (x, y), (u, v) in zip(run(doubled), want))


def test_dataloader_arguments_keep_their_meaning(folder: Path) -> None:
    want = reference(folder)
    # DataLoader's positional order: dataset, batch_size, shuffle, sampler, batch_sampler, num_workers.
    assert same(run(fl.Loader(fl.ImageFolder(folder), 4, True, None, None, 2, transform=fl_transform())), want)
    loader = fl.Loader(fl.ImageFolder(folder), transform=fl_transform())
    assert loader.batch_size == 1 and len(loader) == 18
    # prefetch_factor is per worker.
    assert fl.Loader(fl.ImageFolder(folder), num_workers=3, prefetch_factor=4, transform=fl_transform()).prefetch_batches == 12
    assert reference(folder, persistent_workers=True, multiprocessing_context="spawn", prefetch_factor=1)[0][0].shape[0] == 4
    # The seed drawn from a generator: the same generator state, the same batches.
    a = reference(folder, generator=torch.Generator().manual_seed(5))
    assert same(a, reference(folder, generator=torch.Generator().manual_seed(5)))
    assert not same(a, reference(folder, generator=torch.Generator().manual_seed(6)))
    given = torch.Generator().manual_seed(5)
    assert fl.Loader(fl.ImageFolder(folder), generator=given, transform=fl_transform()).generator is given
    # A batch sampler's batches, in its order.
    batch_sampler = BatchSampler(SequentialSampler(range(18)), batch_size=5, drop_last=False)
    bs = fl.Loader(fl.ImageFolder(folder), batch_sampler=batch_sampler, transform=fl_transform())
    assert len(bs) == 4
    it = iter(bs)
    sizes = []
    for x, _ in it:
        sizes.append(x.shape[0])
    assert sizes == [5, 5, 5, 3]
    with pytest.raises(TypeError, match="batch_sampler: needs a batch_size"):
        fl.Loader(fl.ImageFolder(folder), batch_sampler=[[0, 1], [2]], transform=fl_transform())


def test_the_batches_dtype_is_the_transforms_as_with_dataloader(folder: Path) -> None:
    # A transform ending in PILToTensor makes uint8 batches (for a GPU-side normalize), natively.
    tv = torchvision.transforms
    import torchvision.transforms.v2 as v2
    to_uint8 = tv.Compose([tv.Resize(28), tv.CenterCrop(24), tv.PILToTensor()])
    dataset = torchvision.datasets.ImageFolder(str(folder), transform=to_uint8)
    loader = fl.Loader(dataset, 4, num_workers=2, python_tail="error")
    assert loader.output == "uint8" and loader.dtype == "uint8"
    assert same(run(loader), run(torch.utils.data.DataLoader(dataset, 4)))
    tensor_first = v2.Compose([v2.ToImage(), v2.RandomResizedCrop(24), v2.RandomHorizontalFlip()])
    batch = next(iter(fl.Loader(torchvision.datasets.ImageFolder(str(folder), transform=tensor_first), 4, python_tail="error")))
    assert batch[0].dtype == torch.uint8 and batch[0].shape == (4, 3, 24, 24)
    assert fl.Loader(fl.ImageFolder(folder), transform=fl_transform()).output == "float32"
    # output="uint8" asked for with a float transform: Normalize left for the consumer.
    deferred = fl.Loader(fl.ImageFolder(folder), transform=fl_transform(), output="uint8")
    assert deferred.output == "uint8" and np.allclose(deferred.deferred_normalize, (IMAGENET_MEAN, IMAGENET_STD))
    # Unpickled, a loader whose transform is the dataset's is the same loader.
    again = pickle.loads(pickle.dumps(loader))
    assert again.output == "uint8" and again._transform_arg is None


def test_batch_sampler_with_uneven_batches_is_refused_when_drawn(folder: Path) -> None:
    class Uneven:
        batch_size = 2

        def __iter__(self) -> Any:
            return iter([[0, 1], [2], [3, 4]])

        def __len__(self) -> int:
            return 3

    loader = fl.Loader(fl.ImageFolder(folder), batch_sampler=Uneven(), transform=fl_transform())
    with pytest.raises(ValueError, match="batch_sampler: batch 1 has 1 indices"):
        next(iter(loader))


def test_pin_memory_without_an_accelerator_warns_once_and_loads(folder: Path) -> None:
    if torch.cuda.is_available():
        loader = fl.Loader(fl.ImageFolder(folder), 4, pin_memory=True, transform=fl_transform())
        assert all(x.is_pinned() for x, _ in loader)
        return
    with pytest.warns(UserWarning, match="pin_memory"):
        loader = fl.Loader(fl.ImageFolder(folder), 4, pin_memory=True, transform=fl_transform())
    assert len(run(loader)) == 5


def test_timeout_raises_like_dataloader_and_keeps_the_batch(folder: Path) -> None:
    class Slow(PathItems):
        def __getitem__(self, i: int) -> Tuple[str, int]:
            time.sleep(0.4)
            return self.samples[i]

    tv = torchvision.datasets.ImageFolder(str(folder))
    loader = fl.Loader(Slow(tv.samples[:2]), batch_size=2, num_workers=1, timeout=0.1, transform=fl_transform())
    it = iter(loader)
    with pytest.raises(RuntimeError, match=r"DataLoader timed out after 0.1 seconds"):
        next(it)
    time.sleep(1.0)
    x, y = next(it)
    assert x.shape[0] == 2 and y.tolist() == [0, 0]


# -- resume ----------------------------------------------------------------------------------


def make_resumable(folder: Path, **kw: Any) -> fl.Loader:
    kw.setdefault("batch_size", 4)
    kw.setdefault("shuffle", True)
    kw.setdefault("seed", 3)
    return fl.Loader(fl.ImageFolder(folder), transform=fl_transform(), **kw)


@pytest.mark.parametrize("in_order", [True, False])
def test_resume_continues_bit_identically_for_any_worker_count(folder: Path, in_order: bool) -> None:
    def key(batches: Batches) -> Batches:
        # In completion order the batches' order is scheduling; their contents are not.
        return batches if in_order else sorted(batches, key=lambda b: b[0].sum().item())

    full = make_resumable(folder, num_workers=2, in_order=in_order)
    full.set_epoch(4)
    want = run(full)
    for stop in (0, 1, 3, 5):
        for first_workers, then_workers in ((0, 2), (1, 0), (2, 1)):
            first = make_resumable(folder, num_workers=first_workers, in_order=in_order)
            first.set_epoch(4)
            it = iter(first)
            head = [(x.clone(), y.clone()) for x, y in itertools.islice(it, stop)]
            state = pickle.loads(pickle.dumps(first.state_dict()))
            assert state["epoch"] == 4 and state["batches"] == stop
            del it
            again = make_resumable(folder, num_workers=then_workers, in_order=in_order)
            again.load_state_dict(state)
            assert again.epoch == 4
            tail = run(again)
            assert same(key(head + tail), key(want)), (stop, first_workers, then_workers)
            # The epoch after the resumed one is the ordinary next epoch.
            full.set_epoch(5)
            assert same(key(run(again)), key(run(full)))


def test_resume_per_rank_with_skips_and_an_explicit_sampler(folder: Path, corrupt_folder: Path) -> None:
    for rank in (0, 1):
        full = run(make_resumable(folder, num_workers=2, rank=rank, world_size=2, batch_size=3))
        first = make_resumable(folder, num_workers=1, rank=rank, world_size=2, batch_size=3)
        it = iter(first)
        head = [next(it) for _ in range(1)]
        again = make_resumable(folder, num_workers=0, rank=rank, world_size=2, batch_size=3)
        again.load_state_dict(first.state_dict())
        assert same(head + run(again), full)
        # Another rank takes it as its own point (a DDP checkpoint holds rank 0's state only;
        # test_distributed.py checks the batches and what is refused).
        other = make_resumable(folder, rank=1 - rank, world_size=2, batch_size=3)
        other.load_state_dict(first.state_dict())
        assert other.state_dict() == {**first.state_dict(), "rank": 1 - rank}
        with pytest.raises(ValueError, match="state: saved with world_size=2"):
            make_resumable(folder, rank=rank, world_size=3, batch_size=3).load_state_dict(first.state_dict())
    # Skipped samples count in the position: the next batch starts where the first run's would.
    def skipping(workers: int) -> fl.Loader:
        return fl.Loader(
            fl.ImageFolder(corrupt_folder), batch_size=2, num_workers=workers, on_error="skip", transform=fl_transform()
        )

    full_skip = run(skipping(2))
    first = skipping(1)
    it = iter(first)
    head = [next(it)]
    again = skipping(0)
    again.load_state_dict(first.state_dict())
    assert same(head + run(again), full_skip)
    # A sampler's epoch is drawn again on resume.
    first = make_resumable(folder, shuffle=False, sampler=[5, 3, 8, 1, 0, 17, 2], num_workers=1)
    it = iter(first)
    head = [next(it)]
    again = make_resumable(folder, shuffle=False, sampler=[5, 3, 8, 1, 0, 17, 2], num_workers=2)
    again.load_state_dict(first.state_dict())
    assert same(head + run(again), run(make_resumable(folder, shuffle=False, sampler=[5, 3, 8, 1, 0, 17, 2])))


def test_states_from_elsewhere_are_refused(folder: Path, corrupt_folder: Path) -> None:
    loader = make_resumable(folder)
    state = loader.state_dict()
    assert state["version"] == fl.STATE_VERSION and state["position"] == 0
    assert len(pickle.dumps(state)) < 1000
    for change, message in (
        ({"version": 99}, "version"),
        ({"seed": 4}, "seed"),
        ({"batch_size": 8}, "batch_size"),
        ({"dataset_fingerprint": 1}, "another dataset"),
    ):
        with pytest.raises(ValueError, match=f"^state: .*{message}"):
            make_resumable(folder).load_state_dict({**state, **change})
    with pytest.raises(ValueError, match="another dataset"):
        fl.Loader(fl.ImageFolder(corrupt_folder), batch_size=4, shuffle=True, seed=3, transform=fl_transform()).load_state_dict(state)
    # A state loaded for one epoch is dropped when the script moves to another.
    loader.load_state_dict({**state, "epoch": 2, "position": 4, "batches": 1})
    loader.set_epoch(3)
    assert loader.state_dict()["position"] == 0 and len(run(loader)) == 5


TRAIN_SCRIPT = """
def train(make_loader, epochs=2):
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 24 * 24, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = make_loader()
    losses = []
    for epoch in range(epochs):
        for images, labels in loader:
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses
"""


def test_a_dataloader_training_script_runs_with_only_the_construction_changed(folder: Path) -> None:
    namespace: dict = {}
    exec(TRAIN_SCRIPT, namespace)
    train = namespace["train"]
    dataset = torchvision.datasets.ImageFolder(str(folder), transform=tv_transform())
    torch_losses = train(lambda: torch.utils.data.DataLoader(dataset, batch_size=6, shuffle=True, num_workers=0))
    ours = train(lambda: fl.Loader(dataset, batch_size=6, shuffle=True, num_workers=0))
    assert len(ours) == len(torch_losses) == 6 and all(np.isfinite(ours))


def test_mypy_flags_a_bad_option_literal(tmp_path: Path) -> None:
    snippet = tmp_path / "use.py"
    snippet.write_text(
        textwrap.dedent(
            """
            import ferroloader as fl
            from ferroloader import transforms as T
            t = T.Compose([T.Resize(8), T.CenterCrop(8), T.ToTensor(), T.Normalize(0.5, 0.5)])
            fl.Loader([("a.jpg", 0)], 2, transform=t, profile="spanz")
            """
        )
    )
    # ferroloader's own types are what is checked; torch's and the other libraries' are skipped
    # (analysing torch took 40 of the test's 45 s on a busy 2-core runner).
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nfollow_imports = skip\n[mypy-ferroloader,ferroloader.*]\nfollow_imports = silent\n")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--config-file", str(config), str(snippet)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert 'Argument "profile" to "Loader" has incompatible type "Literal[\'spanz\']"' in result.stdout, result.stdout
    assert result.stdout.count("error:") == 1, result.stdout


def test_the_readme_quickstart_runs_with_dataloader_and_with_ferroloader(folder: Path) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    quickstart = readme[readme.index("## Python quickstart") :]
    snippet = quickstart[quickstart.index("```python\n") + 10 :]
    snippet = snippet[: snippet.index("```")].replace('"/data/train"', repr(str(folder)))
    snippet = snippet.replace("num_workers=8", "num_workers=0")
    torch_line = next(line for line in snippet.splitlines() if line.startswith("# loader = torch"))
    ours_line = next(line for line in snippet.splitlines() if line.startswith("loader = fl.Loader"))
    as_torch = snippet.replace(ours_line, torch_line[2:]).replace(torch_line, "")
    for code in (snippet, as_torch):
        seen: List[int] = []
        body = code.replace("        ...", "        seen.append(len(labels))")
        namespace = {"train_transform": tv_transform(), "epochs": 2, "start_epoch": 0, "seen": seen, "torch": torch}
        exec(body, namespace)
        assert seen == [18, 18], code
        assert isinstance(namespace["loader"], fl.Loader) == (code is snippet)


def test_sampler_and_batch_sampler_are_the_loaders_order_as_dataloaders_are(folder: Path) -> None:
    """`loader.sampler`/`loader.batch_sampler` exist as DataLoader's do (never None for a
    map-style dataset): len, set_epoch, and the indices the next epoch's batches hold."""
    tv = torchvision.datasets.ImageFolder(str(folder))
    by_index = PathItems([(p, i) for i, (p, _) in enumerate(tv.samples)])  # label = index
    for kw in ({"shuffle": True}, {"shuffle": False}, {"shuffle": True, "drop_last": True},
               {"shuffle": True, "rank": 1, "world_size": 2}):
        loader = fl.Loader(by_index, batch_size=4, num_workers=2, transform=fl_transform(), **kw)
        dl = torch.utils.data.DataLoader(by_index, batch_size=4, shuffle=kw["shuffle"], drop_last=kw.get("drop_last", False))
        sampler, batch_sampler = loader.sampler, loader.batch_sampler
        assert sampler is not None and batch_sampler is not None
        n = 9 if "rank" in kw else 18
        assert len(sampler) == n and len(batch_sampler) == len(loader)
        if "rank" not in kw:
            assert len(sampler) == len(dl.sampler) and len(batch_sampler) == len(dl.batch_sampler)
        for epoch in (0, 3):
            sampler.set_epoch(epoch)  # a DistributedSampler training loop's call
            assert loader.epoch == epoch
            order = list(sampler)
            batches = list(batch_sampler)
            assert [i for b in batches for i in b] == order[: len(batches) * 4 if kw.get("drop_last") else None]
            assert sorted(order) == (sorted(order) if "rank" in kw else list(range(18)))
            got = [y.tolist() for _, y in loader]  # labels are the indices
            assert got == batches
            assert loader.epoch == epoch + 1
        assert (order == sorted(order)) == (not kw["shuffle"])
    # Given ones are returned as they are; with batch_size=None there is no batch sampler.
    given = SequentialSampler(range(18))
    assert fl.Loader(by_index, sampler=given, transform=fl_transform()).sampler is given
    bs = BatchSampler(given, batch_size=5, drop_last=False)
    with_bs = fl.Loader(by_index, batch_sampler=bs, transform=fl_transform())
    assert with_bs.batch_sampler is bs and with_bs.sampler is given
    assert fl.Loader(by_index, batch_size=None, transform=fl_transform()).batch_sampler is None


def test_an_endless_sampler_is_an_error_not_a_hang(folder: Path) -> None:
    class Endless(torch.utils.data.Sampler):  # type: ignore[type-arg]
        def __iter__(self) -> Iterator[int]:
            while True:
                yield from range(18)

    class EndlessBatches(Endless):
        def __iter__(self) -> Iterator[List[int]]:  # type: ignore[override]
            while True:
                yield [0, 1]

    with pytest.raises(ValueError, match=r"sampler: yielded more than 288 items.*no len\(\).*endless"):
        next(iter(fl.Loader(fl.ImageFolder(folder), batch_size=4, sampler=Endless(), transform=fl_transform())))
    batch_sampler = EndlessBatches()
    batch_sampler.batch_size = 2  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"batch_sampler: yielded more than 144 items"):
        next(iter(fl.Loader(fl.ImageFolder(folder), batch_sampler=batch_sampler, transform=fl_transform())))
    # A sampler with replacement yielding several times the dataset, as its len() says, is read.
    heavy = torch.utils.data.RandomSampler(range(18), replacement=True, num_samples=18 * 20)
    assert len(list(fl.Loader(fl.ImageFolder(folder), batch_size=40, sampler=heavy, transform=fl_transform()))) == 9


def test_an_iterable_dataset_with_a_transform_is_refused_naming_the_ways_through(folder: Path) -> None:
    class PathStream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
        def __iter__(self) -> Iterator[Tuple[str, int]]:
            yield from ((str(p), 0) for p in sorted(folder.rglob("*.jpg")))

    with pytest.raises(TypeError, match=r"PathStream is an IterableDataset.*as a list.*fl.WebDataset"):
        fl.Loader(PathStream(), batch_size=4, transform=fl_transform())
