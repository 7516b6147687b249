"""``ferroloader.torch.profile`` on timm's ``ImageDataset`` (what ``timm.data.create_dataset``
gives for a folder or a tar): the instrumented copy times ``read``, ``decode`` and each op of
timm's transform, and its batches are timm's own loader's, bit for bit, a bad file skipped to
the next index as timm does. The reference is timm's stock ``create_loader`` on the CPU."""

from __future__ import annotations

import logging
import random
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import torch
from timm.data.dataset_factory import create_dataset
from timm.data.loader import create_loader

import ferroloader as fl

pytestmark = [
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

CPU = torch.device("cpu")
SIZE = (3, 32, 32)
Batches = List[Tuple[torch.Tensor, torch.Tensor]]


def run(loader: Any) -> Batches:
    return [(x.clone(), y.clone()) for x, y in loader]


def spans(profiled: Any) -> List[Dict[str, Any]]:
    spans: List[Dict[str, Any]] = profiled.profile().to_dict()["pipelines"][0]["spans"]
    return spans


def per_sample(found: List[Dict[str, Any]], op: str) -> Counter[Any]:
    return Counter(s["sample"] for s in found if s["op"] == op)


def seed(value: int) -> None:
    torch.manual_seed(value)
    random.seed(value)


def same(got: Batches, want: Batches) -> None:
    assert len(got) == len(want)
    for (x, y), (u, v) in zip(got, want):
        assert torch.equal(y, v)
        assert torch.equal(x, u), (x.float() - u.float()).abs().max()


@pytest.mark.parametrize("workers", [0, 2])
def test_an_eval_loader_is_timed_per_step_and_yields_timms_batches(folder: Path, workers: int) -> None:
    stock = create_loader(
        create_dataset("", root=str(folder)), SIZE, 4, is_training=False, num_workers=workers,
        device=CPU, crop_pct=0.8,
    )
    with fl.torch.profile(stock) as profiled:
        got = run(profiled)
    same(got, run(stock))
    found = spans(profiled)
    ops = {s["op"] for s in found}
    assert {"read", "decode", "Resize", "CenterCrop", "MaybePILToTensor", "process", "collate"} <= ops
    assert "__getitem__" not in ops  # timm's loading is split, not one opaque span
    for op in ("process", "read", "decode", "Resize", "CenterCrop", "MaybePILToTensor"):
        assert per_sample(found, op) == Counter(range(18)), op
    by_sample = {(s["op"], s.get("sample")): s for s in found}
    for i in range(18):
        # read, then decode, then the first transform, each inside the sample's process span
        read, decode, resize = (by_sample[(op, i)] for op in ("read", "decode", "Resize"))
        assert read["end_ns"] <= decode["start_ns"] and decode["end_ns"] <= resize["start_ns"]
        assert by_sample[("process", i)]["start_ns"] <= read["start_ns"]
    meta = profiled.profile().to_dict()["pipelines"][0]["meta"]
    assert meta["dataset"] == "ImageDataset" and meta["dataset_root"] == str(folder)
    assert meta["instrumented"].startswith("read/decode")


def test_a_training_loader_without_augmentation_yields_timms_batches(folder: Path) -> None:
    stock = create_loader(
        create_dataset("", root=str(folder)), SIZE, 4, is_training=True, no_aug=True,
        num_workers=2, device=CPU, use_prefetcher=False,
    )
    torch.manual_seed(3)  # the shuffle
    with fl.torch.profile(stock) as profiled:
        got = run(profiled)
    torch.manual_seed(3)
    same(got, run(stock))
    assert {"read", "decode", "Resize", "CenterCrop", "MaybeToTensor", "Normalize"} <= {s["op"] for s in spans(profiled)}


def test_a_seeded_random_training_loader_makes_timms_draws(folder: Path) -> None:
    # RandAugment and the random crop draw from each worker's generators, which timm seeds
    # from torch's default generator: the same seed gives the same batches only if the
    # instrumented copy draws exactly what timm's __getitem__ draws. The prefetcher's random
    # erasing draws from Python's random in this process, seeded too.
    stock = create_loader(
        create_dataset("", root=str(folder)), SIZE, 4, is_training=True,
        auto_augment="rand-m9-inc1", re_prob=0.5, num_workers=2, device=CPU,
    )
    seed(5)
    with fl.torch.profile(stock) as profiled:
        got = run(profiled)
    seed(5)
    want = run(stock)
    same(got, want)
    seed(6)
    assert not torch.equal(run(stock)[0][0], want[0][0])  # the seed matters: draws are compared
    ops = {s["op"] for s in spans(profiled)}
    assert {"read", "decode", "RandomResizedCropAndInterpolation", "RandAugment"} <= ops


def test_a_tar_of_images_is_timed_as_the_folder_is(folder: Path, tmp_path: Path) -> None:
    tar = tmp_path / "images.tar"
    with tarfile.open(tar, "w") as tf:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            tf.add(path, arcname=str(path.relative_to(folder)))
    stock = create_loader(
        create_dataset("", root=str(tar)), SIZE, 4, is_training=False, num_workers=2,
        device=CPU, crop_pct=0.8,
    )
    assert type(stock.loader.dataset.reader).__name__ == "ReaderImageInTar"
    with fl.torch.profile(stock) as profiled:
        got = run(profiled)
    same(got, run(stock))
    found = spans(profiled)
    assert per_sample(found, "read") == per_sample(found, "decode") == Counter(range(18))


def test_a_bad_file_is_skipped_to_the_next_index_as_timm_does(
    corrupt_folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kw: Any = dict(is_training=False, num_workers=0, device=CPU, crop_pct=0.8, use_prefetcher=False)
    stock = create_loader(create_dataset("", root=str(corrupt_folder)), SIZE, 2, **kw)
    with caplog.at_level(logging.WARNING, logger="timm.data.dataset"):
        with fl.torch.profile(stock) as profiled:
            got = run(profiled)
    skipped = [r.getMessage() for r in caplog.records if "Skipped sample" in r.getMessage()]
    assert len(skipped) == 2  # timm's own warning, once per bad file
    same(got, run(stock))
    profile = profiled.profile().to_dict()["pipelines"][0]
    assert not profile.get("failures")  # recovered by timm: not a failed sample
    found = profile["spans"]
    assert len(per_sample(found, "process")) == 6
    # A bad file's sample decodes twice (its own file failing, then the next index's).
    assert sum(per_sample(found, "decode").values()) == 6 + 2


def test_spawned_workers_load_the_instrumented_dataset(folder: Path) -> None:
    # The wrapped reader travels to a spawned worker by pickle, with the session's recorder.
    from timm.data.transforms_factory import create_transform

    dataset = create_dataset("", root=str(folder))
    dataset.transform = create_transform((3, 32, 32))
    dl: Any = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=1, multiprocessing_context="spawn")
    with fl.torch.profile(dl) as profiled:
        got = run(profiled)
    same(got, run(dl))
    assert per_sample(spans(profiled), "decode") == Counter(range(18))


def test_consecutive_bad_files_are_each_a_span_and_giving_up_names_decode(corrupt_folder: Path) -> None:
    (corrupt_folder / "a" / "2.jpg").write_bytes(b"not a jpeg")  # right after the truncated a/1
    kw: Any = dict(is_training=False, num_workers=0, device=CPU, crop_pct=0.8, use_prefetcher=False)
    dataset = create_dataset("", root=str(corrupt_folder))
    stock = create_loader(dataset, SIZE, 2, **kw)
    with fl.torch.profile(stock) as profiled:
        got = run(profiled)
    same(got, run(stock))
    found = spans(profiled)
    # sample 1: a/1 and a/2 fail, then b/0 loads: each attempt's decode is a span
    assert per_sample(found, "decode")[1] == 3
    dataset._max_retries = 2  # timm gives up after a/1 and a/2
    with fl.torch.profile(create_loader(dataset, SIZE, 2, **kw)) as profiled:
        with pytest.raises(RuntimeError, match="Failed to load 2 consecutive samples"):
            run(profiled)
    failures = profiled.profile().to_dict()["pipelines"][0]["failures"]
    assert [(f["sample"], f["op"]) for f in failures] == [(1, "decode")]
    assert "1.jpg" in failures[0]["cause"]  # the sample's own file, as timm's index names it
