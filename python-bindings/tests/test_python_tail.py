"""Python tails: transforms with no native equivalent run in Python after the longest native
prefix, on what torchvision would hand them, and their result becomes the sample."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms.v2
from PIL import Image, ImageOps

import ferroloader as fl
from ferroloader import transforms as T

from conftest import IMAGENET_MEAN, IMAGENET_STD

tv = torchvision.transforms
Batches = List[Tuple[torch.Tensor, torch.Tensor]]


def run(loader: Any) -> Batches:
    return [(x.clone(), y.clone()) for x, y in loader]


def loader(folder: Path, transform: Any, **kw: Any) -> fl.Loader:
    kw.setdefault("batch_size", 4)
    kw.setdefault("num_workers", 2)
    kw.setdefault("python_tail", "allow")
    return fl.Loader(fl.ImageFolder(folder), transform=transform, **kw)


def first_error(ld: fl.Loader) -> str:
    """The message of the error an epoch raises. Kept as text: a kept exception would keep
    the epoch (through its traceback) and its thread alive for later tests."""
    try:
        run(ld)
    except RuntimeError as e:
        return str(e)
    raise AssertionError("the epoch raised nothing")


def torchvision_batches(folder: Path, transform: Any) -> Batches:
    dataset = torchvision.datasets.ImageFolder(str(folder), transform=transform)
    return run(torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=0))


def mirror_and_mark(im: Image.Image) -> Image.Image:
    """Deterministic and not native: mirror, then a pixel that says it ran."""
    out = ImageOps.mirror(im)
    out.putpixel((0, 0), (255, 0, 255))
    return out


def test_lambda_on_the_pil_image_matches_torchvision(folder: Path) -> None:
    transform = tv.Compose([tv.Resize(40), tv.CenterCrop(32), tv.Lambda(mirror_and_mark), tv.ToTensor()])
    got = run(loader(folder, transform))
    expected = torchvision_batches(folder, transform)
    assert len(got) == len(expected) == 5
    for (x, y), (u, v) in zip(got, expected):
        assert x.dtype == torch.float32 and x.shape[1:] == (3, 32, 32)
        assert torch.equal(y, v)
        assert torch.equal(x, u)  # same pixels: the prefix is Pillow-exact, the tail is Python's


def test_split_asks_the_planner(folder: Path) -> None:
    split = T.split_python_tail(
        tv.Compose([tv.Resize(40), tv.CenterCrop(32), tv.Lambda(mirror_and_mark), tv.ToTensor()])
    )
    assert [type(t).__name__ for t in split.prefix] == ["Resize", "CenterCrop"]
    assert [type(t).__name__ for t in split.tail] == ["Lambda", "ToTensor"]
    assert split.input_kind == "image"
    # Resize(int) alone, or a pixel op before any crop, keeps each image's own size (its aspect
    # ratio): before a tail, which may crop, that is no prefix; nothing runs natively.
    for ops in (
        [tv.Resize(40), tv.Lambda(mirror_and_mark), tv.CenterCrop(32)],
        [tv.ColorJitter(0.4), tv.Lambda(mirror_and_mark), tv.RandomResizedCrop(32), tv.ToTensor()],
    ):
        split = T.split_python_tail(tv.Compose(ops))
        assert split.spec is None and split.input_kind == "bytes" and len(split.tail) == len(ops)
        assert "must give every image one size" in split.reason
        # So a folder of images of many sizes runs (in Python) as it does with DataLoader.
        shapes = {tuple(x.shape[1:]) for x, _ in loader(folder, tv.Compose(ops))}
        assert len(shapes) == 1
    # Everything native: no tail.
    split = T.split_python_tail(tv.Compose([tv.CenterCrop(8), tv.ToTensor()]))
    assert split.tail == [] and split.input_kind == "float32"


def test_callable_on_the_normalized_tensor(folder: Path) -> None:
    native = [tv.Resize(40), tv.CenterCrop(32), tv.ToTensor(), tv.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    seen: List[Tuple[type, torch.dtype, Tuple[int, ...]]] = []

    def affine(t: torch.Tensor) -> torch.Tensor:
        seen.append((type(t), t.dtype, tuple(t.shape)))
        return t * 2 + 1

    got = run(loader(folder, tv.Compose(native + [affine])))
    plain = run(loader(folder, tv.Compose(native)))
    assert {s for s in seen} == {(torch.Tensor, torch.float32, (3, 32, 32))}
    for (x, y), (u, v) in zip(got, plain):
        assert torch.equal(x, u * 2 + 1) and torch.equal(y, v)
    for (x, _), (u, _) in zip(got, torchvision_batches(folder, tv.Compose(native + [affine]))):
        torch.testing.assert_close(x, u, atol=1e-5, rtol=0)


def test_v2_tail_gets_the_uint8_tensor(folder: Path) -> None:
    v2 = torchvision.transforms.v2
    keep = v2.Lambda(lambda t: t)
    head = [v2.ToImage(), v2.Resize(40), v2.CenterCrop(32)]
    tail_end = [v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    split = T.split_python_tail(v2.Compose(head + [keep] + tail_end))
    assert split.input_kind == "uint8" and split.tail[0] is keep
    got = run(loader(folder, v2.Compose(head + [keep] + tail_end)))
    plain = run(loader(folder, v2.Compose(head + tail_end)))
    for (x, _), (u, _) in zip(got, plain):
        assert torch.equal(x, u)  # torchvision's ToDtype in the tail, the native one without it


def test_a_tail_that_changes_the_shape_sets_the_layout(folder: Path) -> None:
    transform = tv.Compose([tv.Resize(40), tv.CenterCrop(32), tv.ToTensor(), lambda t: t[:2, ::2, 1::4]])
    ld = loader(folder, transform)
    assert ld.sample_shape == (2, 16, 8) and ld.dtype == "float32"
    batches = run(ld)
    assert all(x.shape[1:] == (2, 16, 8) for x, _ in batches)
    # A PIL image left at the end becomes what PILToTensor gives with output="uint8".
    pil_end = tv.Compose([tv.Resize(40), tv.CenterCrop(32), tv.Lambda(mirror_and_mark)])
    ld = loader(folder, pil_end, output="uint8")
    assert ld.sample_shape == (3, 32, 32) and ld.dtype == "uint8"
    x, _ = next(iter(ld))
    expected = tv.PILToTensor()(
        mirror_and_mark(tv.CenterCrop(32)(tv.Resize(40)(Image.open(sorted((folder / "ant").iterdir())[0]).convert("RGB"))))
    )
    assert torch.equal(x[0], expected)


def five_crops_to_tensor(crops: Any) -> torch.Tensor:
    return torch.stack([tv.ToTensor()(c) for c in crops])


def test_tail_results_of_any_rank_batch_as_dataloader_stacks_them(folder: Path) -> None:
    """FiveCrop's test-time augmentation: (5, 3, H, W) per sample, (B, 5, 3, H, W) per batch,
    as DataLoader's default collate stacks them; a 2-dimensional result likewise."""
    five = tv.Compose([tv.Resize(40), tv.FiveCrop(24), tv.Lambda(five_crops_to_tensor)])
    reference = torchvision.datasets.ImageFolder(str(folder), transform=five)
    ld = loader(folder, five, batch_size=4)
    assert ld.sample_shape == (5, 3, 24, 24)
    got = torch.cat([x for x, _ in ld])
    assert got.shape == (len(reference), 5, 3, 24, 24)
    assert torch.equal(got, torch.stack([reference[i][0] for i in range(len(reference))]))
    single, _ = next(iter(loader(folder, five, batch_size=None)))
    assert torch.equal(single, reference[0][0])
    plane = tv.Compose([tv.Resize((8, 6)), tv.PILToTensor(), tv.Lambda(lambda t: t[1])])
    ld = loader(folder, plane, output="uint8")
    assert ld.sample_shape == (8, 6)
    x, _ = next(iter(ld))
    assert x.shape == (4, 8, 6) and x.dtype == torch.uint8


def fails_on_small(im: Image.Image) -> Image.Image:
    if im.size == (160, 120):
        raise ZeroDivisionError("too small to divide")
    return im


def test_a_tail_that_raises_names_the_file_and_op(folder: Path) -> None:
    transform = tv.Compose([tv.Lambda(fails_on_small), tv.Resize(40), tv.CenterCrop(32), tv.ToTensor()])
    message = first_error(loader(folder, transform))
    assert "img_03" in message and "Lambda" in message and "ZeroDivisionError: too small to divide" in message
    ld = loader(folder, transform, on_error="skip")
    it = iter(ld)
    batches = [(x.clone(), y) for x, y in it]
    assert sum(len(y) for _, y in batches) == 18 - 3
    skipped = it.skipped
    assert sorted(Path(p).stem for _, p, _ in skipped) == ["img_03"] * 3
    assert all("ZeroDivisionError" in why for _, _, why in skipped)


def test_a_later_sample_of_another_shape_is_a_clear_error(folder: Path) -> None:
    # No fixed size anywhere: the first sample (320x240) sets (3, 24, 32).
    tenth = tv.Lambda(lambda im: im.resize((im.width // 10, im.height // 10)))
    ld = loader(folder, tv.Compose([tenth, tv.ToTensor()]))
    assert ld.sample_shape == (3, 24, 32)
    message = first_error(ld)
    assert re.search(r"img_01.*\(3, 33, 24\) float32.*\(3, 24, 32\) float32", message), message
    # Natively, a Resize(int) alone is sized by the first image the same way (a ValueError
    # naming the file, as any sample's bad input).
    ld = loader(folder, tv.Compose([tv.Resize(24), tv.ToTensor()]))
    assert ld.sample_shape == (3, 24, 32) and not ld.python_tail
    with pytest.raises(ValueError, match=r"img_01.*the image is 241x333, resized to 24x33, the pipeline's images to 32x24"):
        run(ld)


def random_pipeline() -> Any:
    return tv.Compose(
        [
            tv.RandomResizedCrop(32),
            tv.Lambda(lambda im: im.rotate(random.uniform(-30, 30))),
            tv.ToTensor(),
            tv.Lambda(lambda t: t + torch.rand(1) + float(np.random.rand())),
        ]
    )


def test_random_python_ops_are_the_same_whatever_num_workers(folder: Path) -> None:
    torch_state, random_state = torch.get_rng_state(), random.getstate()
    runs = [
        run(loader(folder, random_pipeline(), num_workers=n, shuffle=True, seed=11)) for n in (0, 1, 2)
    ]
    # In worker processes too: the native prefix draws with the sample's key, as the threads.
    runs.append(
        run(loader(folder, random_pipeline(), num_workers=2, shuffle=True, seed=11, python_tail_workers="processes"))
    )
    for other in runs[1:]:
        assert all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(runs[0], other))
    # The consumer's generators are where they were: each sample's seeding is undone.
    assert torch.equal(torch.get_rng_state(), torch_state) and random.getstate() == random_state
    # And the draws do vary: per sample, and per epoch.
    ld = loader(folder, random_pipeline(), shuffle=False)
    first, second = run(ld), run(ld)
    assert not torch.equal(first[0][0], second[0][0])
    assert not torch.equal(first[0][0][0], first[0][0][1])


def test_the_warning_and_python_tail_error(folder: Path) -> None:
    transform = tv.Compose([tv.CenterCrop(32), tv.Lambda(mirror_and_mark), tv.ToTensor()])
    with pytest.warns(UserWarning, match=r"Lambda, ToTensor run in Python.*GIL.*python_tail_workers='processes'"):
        fl.Loader(fl.ImageFolder(folder), 4, transform=transform, num_workers=2, python_tail_workers="threads")
    with pytest.warns(UserWarning, match=r"Lambda, ToTensor run in Python after the native ops, in worker processes"):
        fl.Loader(fl.ImageFolder(folder), 4, transform=transform, num_workers=2, python_tail_workers="processes")
    with pytest.raises(ValueError, match=r"python_tail_workers: expected one of"):
        fl.Loader(fl.ImageFolder(folder), 4, transform=transform, python_tail_workers="gpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^from_torchvision: transform #1 Lambda.*python_tail='error'"):
        fl.Loader(fl.ImageFolder(folder), 4, transform=transform, python_tail="error")
    # Convertible, but the planner refuses the order: its reason, and the op named.
    unplannable = tv.Compose([tv.CenterCrop(32), tv.ToTensor(), tv.Resize(20)])
    with pytest.raises(ValueError, match=r"Resize \(.*no native equivalent here: .*after ToTensor only Normalize"):
        fl.Loader(fl.ImageFolder(folder), 4, transform=unplannable, python_tail="error")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fl.Loader(fl.ImageFolder(folder), 4, transform=transform, python_tail="allow")
        fl.Loader(fl.ImageFolder(folder), 4, transform=tv.Compose([tv.CenterCrop(32), tv.ToTensor()]))
    with pytest.raises(ValueError, match="python_tail"):
        fl.Loader(fl.ImageFolder(folder), 4, transform=transform, python_tail="sometimes")  # type: ignore[arg-type]


def slow_identity(x: torch.Tensor) -> torch.Tensor:
    """A tail that holds the GIL far longer than the native ops take (another library's heavy
    augmentation)."""
    deadline = time.perf_counter() + 0.01
    while time.perf_counter() < deadline:
        pass
    return x


def test_auto_runs_a_tail_that_would_hold_the_gil_in_worker_processes(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ferroloader import loader as loader_module

    monkeypatch.setattr(loader_module, "_cores", lambda: 2)
    heavy = tv.Compose([tv.CenterCrop(32), tv.ToTensor(), tv.Lambda(slow_identity)])
    ld = loader(folder, heavy, num_workers=2, shuffle=True)
    assert ld.python_tail_where == "processes" and ld.python_tail_costs is not None
    assert ld.python_tail_costs.python > 0.01 > ld.python_tail_costs.prefix
    # One worker: no processes, whatever the tail costs; nothing timed.
    one = loader(folder, heavy, num_workers=1, shuffle=True)
    assert one.python_tail_where == "threads" and one.python_tail_costs is None
    got, want = run(ld), run(one)
    assert len(got) == len(want) == 5
    assert all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(got, want))


@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")  # 8 workers, 2 cores
@pytest.mark.parametrize(
    "prefix_ms, python_ms, workers, where",
    [
        (1.0, 0.2, 2, "threads"),  # 2 x 0.2 below 1.2: the GIL is free most of the time
        (1.0, 0.2, 8, "processes"),  # 8 threads would queue for it (on 8 cores)
        (0.4, 0.6, 2, "processes"),  # RandAugment after a crop
    ],
)
def test_auto_chooses_by_the_timed_costs(
    folder: Path, monkeypatch: pytest.MonkeyPatch, prefix_ms: float, python_ms: float, workers: int, where: str
) -> None:
    from ferroloader import _pydataset
    from ferroloader import loader as loader_module

    timed = _pydataset.TailCosts(prefix_ms / 1e3, python_ms / 1e3)
    monkeypatch.setattr(_pydataset.TailSamples, "costs", lambda self, count: timed)
    monkeypatch.setattr(loader_module, "_cores", lambda: 8)
    transform = tv.Compose([tv.CenterCrop(32), tv.Lambda(mirror_and_mark), tv.ToTensor()])
    ld = loader(folder, transform, num_workers=workers)
    assert ld.python_tail_where == where and ld.python_tail_costs == timed
    # Named explicitly, nothing is timed.
    fixed = loader(folder, transform, num_workers=workers, python_tail_workers="threads")
    assert fixed.python_tail_where == "threads" and fixed.python_tail_costs is None


class PresetTrain:
    """torchvision's reference ClassificationPresetTrain, as training scripts copy it: an
    object holding a Compose, called as a transform."""

    def __init__(self) -> None:
        self.transforms = tv.Compose([tv.RandomResizedCrop(32), tv.RandomHorizontalFlip(), tv.ToTensor()])

    def __call__(self, img: Image.Image) -> torch.Tensor:
        out: torch.Tensor = self.transforms(img)
        return out


class BarePresetEval:
    """The reference ClassificationPresetEval's form, untyped: ``return self.transforms(img)``."""

    def __init__(self) -> None:
        self.transforms = tv.Compose([tv.Resize(36), tv.CenterCrop(32), tv.ToTensor()])

    def __call__(self, img):  # type: ignore[no-untyped-def]
        return self.transforms(img)


class PresetThenMore(PresetTrain):
    """Calls the Compose it holds, then does more."""

    def __call__(self, img: Image.Image) -> torch.Tensor:
        return self.transforms(img).flip(-1)  # type: ignore[no-any-return]


def test_an_object_that_only_calls_the_compose_it_holds_runs_natively(folder: Path) -> None:
    # torchvision's reference presets, as training scripts copy them (typed or not).
    dataset = torchvision.datasets.ImageFolder(str(folder), transform=PresetTrain())
    ld = fl.Loader(dataset, 4, num_workers=2, shuffle=True, python_tail="error")
    assert ld.python_tail == [] and [type(t).__name__ for t in ld.transform.transforms] == [
        "RandomResizedCrop", "RandomHorizontalFlip", "ToTensor"
    ]
    plain = fl.Loader(torchvision.datasets.ImageFolder(str(folder), transform=PresetTrain().transforms), 4,
                      num_workers=2, shuffle=True)
    assert all(torch.equal(x, u) for (x, _), (u, _) in zip(ld, plain))
    evaluated = torchvision.datasets.ImageFolder(str(folder), transform=BarePresetEval())
    want = torch.utils.data.DataLoader(evaluated, 4)
    got = fl.Loader(evaluated, 4, num_workers=2, python_tail="error")
    assert all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(got, want))


def test_only_a_call_of_the_instances_compose_and_nothing_else_is_unwrapped() -> None:
    compose = tv.Compose([tv.CenterCrop(8), tv.ToTensor()])

    def holder(call: Any, **attrs: Any) -> Any:
        klass = type("Holder", (), {"__call__": call, **attrs})
        obj = klass()
        vars(obj)["transforms"] = compose
        return obj

    def bare(self, img):  # type: ignore[no-untyped-def]
        return self.transforms(img)

    def typed(self: Any, img: Any) -> Any:
        out = self.transforms(img)
        return out

    def twice(self, img):  # type: ignore[no-untyped-def]
        return self.transforms(self.transforms(img))

    def other(self, img):  # type: ignore[no-untyped-def]
        return self.transforms(img.copy())

    def extra_argument(self, img, flag=True):  # type: ignore[no-untyped-def]
        return self.transforms(img)

    def conditional(self, img):  # type: ignore[no-untyped-def]
        if img is None:
            return None
        return self.transforms(img)

    assert T.delegated_compose(holder(bare)) is compose
    assert T.delegated_compose(holder(typed)) is compose
    for call in (twice, other, extra_argument, conditional):
        assert T.delegated_compose(holder(call)) is None, call.__name__
    # A class-level `transforms` (a property, say) is not the instance's Compose.
    assert T.delegated_compose(holder(bare, transforms=property(lambda self: compose))) is None
    assert T.delegated_compose(compose) is None and T.delegated_compose(mirror_and_mark) is None


def test_an_object_that_does_more_than_call_its_compose_runs_as_given_with_a_hint(folder: Path) -> None:
    dataset = torchvision.datasets.ImageFolder(str(folder), transform=PresetThenMore())
    hint = r"PresetThenMore.transforms is a torchvision Compose that runs natively: if calling it is all PresetThenMore does, pass that Compose"
    with pytest.warns(UserWarning, match=r"PresetThenMore run in Python with no native op .*" + hint):
        ld = fl.Loader(dataset, 4, num_workers=2)
    assert ld.python_tail_where == "processes"
    with pytest.raises(ValueError, match=hint):
        fl.Loader(dataset, 4, num_workers=2, python_tail="error")
    # No hint where the Compose inside would not run natively, or there is none.
    odd = PresetThenMore()
    odd.transforms = tv.Compose([tv.Lambda(third_party_crop), tv.ToTensor()])
    for transform in (odd, mirror_and_mark):
        with pytest.raises(ValueError) as refused:
            fl.Loader(fl.ImageFolder(folder), 4, transform=transform, python_tail="error")
        assert "runs natively" not in str(refused.value)


def third_party_crop(im: Image.Image) -> Image.Image:
    """Stands for a transform of another library first (timm's RandomResizedCropAndInterpolation):
    nothing of the pipeline is native then."""
    return im.resize((40, 30)).crop((4, 2, 36, 26))


def test_a_transform_with_no_native_op_runs_in_worker_processes(folder: Path) -> None:
    transform = tv.Compose([tv.Lambda(third_party_crop), tv.RandomHorizontalFlip(), tv.ToTensor()])
    with pytest.warns(UserWarning, match=r"Lambda, RandomHorizontalFlip, ToTensor run in Python with no native op before them: in worker processes"):
        in_processes = fl.Loader(fl.ImageFolder(folder), 4, num_workers=2, shuffle=True, transform=transform)
    assert in_processes.sample_shape == (3, 24, 32) and in_processes.dtype == "float32"
    # The same draws as under the GIL in the native workers (one worker: no processes).
    under_gil = loader(folder, transform, num_workers=1, shuffle=True)
    got, want = run(in_processes), run(under_gil)
    assert len(got) == len(want) == 5
    assert all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(got, want))
    # A PIL image left at the end becomes the batch as PILToTensor makes it (output="uint8").
    pil = loader(folder, tv.Compose([tv.Lambda(third_party_crop)]), output="uint8")
    x, _ = next(iter(pil))
    assert x.dtype == torch.uint8 and x.shape == (4, 3, 24, 32)
    # Profiled: a span per sample and per op, in the worker processes.
    profiled = loader(folder, transform, profile="spans")
    run(profiled)
    (p,) = profiled.profile().to_dict()["pipelines"]
    ops = [s["op"] for s in p["spans"]]
    assert ops.count("process") == ops.count("Lambda") == ops.count("ToTensor") == 18


def test_the_profile_has_the_tail_spans(folder: Path) -> None:
    transform = tv.Compose([tv.Resize(40), tv.CenterCrop(32), tv.Lambda(mirror_and_mark), tv.ToTensor()])
    # In worker processes: the native ops' spans inside native_prefix, then each tail op's.
    ld = loader(folder, transform, profile="spans", python_tail_workers="processes")
    run(ld)
    (p,) = ld.profile().to_dict()["pipelines"]
    ops = [s["op"] for s in p["spans"]]
    assert ops.count("native_prefix") == ops.count("Lambda") == ops.count("ToTensor") == 18
    assert ops.count("decode") == 18 and p["label"] == "python"
    prefix = {(s["batch"], s["sample"]): s for s in p["spans"] if s["op"] == "native_prefix"}
    for s in p["spans"]:
        if s["op"] == "decode":
            outer = prefix[(s["batch"], s["sample"])]
            assert outer["start_ns"] <= s["start_ns"] <= s["end_ns"] <= outer["end_ns"]
            assert s["depth"] == outer["depth"] + 1
    # Under the GIL in the native workers: python_tail spans in the native profile.
    ld = loader(folder, transform, profile="spans", python_tail_workers="threads")
    run(ld)
    spans = ld.profile().pipeline("native")["spans"]
    tails = [s for s in spans if s["op"] == "python_tail"]
    lambdas = [s for s in spans if s["op"] == "python:Lambda"]
    assert len(tails) == len(lambdas) == 18
    assert len([s for s in spans if s["op"] == "python:ToTensor"]) == 18
    by_sample = {(s["batch"], s["sample"]): s for s in tails}
    for s in lambdas:
        outer = by_sample[(s["batch"], s["sample"])]
        assert outer["start_ns"] <= s["start_ns"] <= s["end_ns"] <= outer["end_ns"]
        assert s["depth"] == outer["depth"] + 1


@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_a_child_forked_while_a_tail_runs_can_run_tails(folder: Path) -> None:
    """The parent's worker holds the tail lock (sleeping in its tail) at the fork: the child,
    where that thread does not exist, still runs tails of its own."""
    in_tail = threading.Event()

    def slow(im: Image.Image) -> Image.Image:
        in_tail.set()
        time.sleep(0.5)  # releases the GIL, keeps the tail lock
        return im

    ld = loader(folder, tv.Compose([tv.CenterCrop(32), tv.Lambda(slow), tv.ToTensor()]), num_workers=1)
    in_tail.clear()  # set by the probe
    it = iter(ld)
    consumer = threading.Thread(target=lambda: next(it))
    consumer.start()
    assert in_tail.wait(10)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        status = 1
        try:
            os.close(read)
            # A hang kills the child (pytest-timeout's SIGALRM handler is Python: it would
            # never run while the child waits in native code).
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.alarm(30)
            child = loader(folder, tv.Compose([tv.CenterCrop(32), tv.Lambda(mirror_and_mark), tv.ToTensor()]))
            x, _ = next(iter(child))
            assert x.shape == (4, 3, 32, 32)
            os.write(write, b"ok")
            status = 0
        except BaseException as e:  # report anything to the parent
            os.write(write, repr(e).encode()[:500])
        finally:
            os._exit(status)
    os.close(write)
    deadline = time.monotonic() + 60
    done, status = os.waitpid(pid, os.WNOHANG)
    while done == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
        done, status = os.waitpid(pid, os.WNOHANG)
    if done == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    message = os.read(read, 1000).decode()
    os.close(read)
    consumer.join()
    del it
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (status, message)
    assert message == "ok"


_EXIT_SCRIPT = """
import sys, time
import torchvision.transforms as tv
import ferroloader as fl

class Dataset:
    # Read through the dataset[i] protocol: workers take the GIL for each sample too.
    def __init__(self, files):
        self.files = files
    def __len__(self):
        return len(self.files)
    def __getitem__(self, i):
        return self.files[i], 0

def slow(img):
    time.sleep(0.02)  # releases the GIL and takes it back, as Pillow's C calls do
    return img

files = sys.argv[1:]
dataset = Dataset(files) if len(files) > 1 else fl.ImageFolder(files[0])
transform = tv.Compose([tv.Resize((32, 32)), tv.Lambda(slow), tv.ToTensor()])
loader = fl.Loader(dataset, batch_size=2, num_workers=2, transform=transform, python_tail="allow")
it = iter(loader)
next(it)
if len(files) > 1:
    del it
raise SystemExit("left mid-epoch")
"""


@pytest.mark.parametrize("dataset", ["folder, iterator alive", "dataset[i], iterator dropped"])
def test_leaving_mid_epoch_exits_cleanly_while_workers_run_python(folder: Path, dataset: str) -> None:
    """Interpreter exit waits for the workers: one that took the GIL back during finalization
    used to abort the process ("terminate called without an active exception", status 134)."""
    files = [str(folder)] if dataset.startswith("folder") else [str(p) for p in sorted(folder.rglob("*.jpg"))]
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _EXIT_SCRIPT, *files], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 1, out.stderr
    assert out.stderr.strip().splitlines()[-1] == "left mid-epoch", out.stderr


def test_a_file_the_native_prefix_cannot_read_in_a_worker_process_is_named(corrupt_folder: Path) -> None:
    transform = tv.Compose([tv.RandomResizedCrop(32), tv.Lambda(mirror_and_mark), tv.ToTensor()])
    kw: Dict[str, Any] = dict(num_workers=2, batch_size=2, python_tail_workers="processes")
    message = first_error(loader(corrupt_folder, transform, **kw))
    assert re.search(r"a/1\.jpg \(sample 1\): DecodeError: .*", message), message
    it = iter(loader(corrupt_folder, transform, on_error="skip", **kw))
    assert sum(len(y) for _, y in it) == 4
    assert sorted(Path(p).name for _, p, _ in it.skipped) == ["1.jpg", "2.jpg"]
    assert all("DecodeError" in why for _, _, why in it.skipped)


class Compose:
    """Another library's Compose (MONAI's, mmcv's): its own ``__call__`` does more than call
    its ``transforms`` one after another, so the tail calls it whole, not its items."""

    def __init__(self, transforms: List[Any]) -> None:
        self.transforms = transforms

    def __call__(self, image: Any) -> Any:
        for t in self.transforms:
            image = t(image)
        return image * 2  # what unpacking the items would miss


def test_another_librarys_compose_is_called_whole(folder: Path) -> None:
    tv = torchvision.transforms
    theirs = Compose([tv.Resize(16), tv.CenterCrop(16), tv.ToTensor()])
    with pytest.raises(ValueError, match="not a torchvision transform"):
        T.from_torchvision(theirs)
    loader = fl.Loader(fl.ImageFolder(folder), transform=theirs, batch_size=3, python_tail="allow")
    images, _ = next(iter(loader))
    path = fl.ImageFolder(folder).samples[0][0]
    with Image.open(path) as opened:
        assert torch.equal(images[0], theirs(opened.convert("RGB")))


def test_an_albumentations_transform_is_refused_with_the_way_through(folder: Path) -> None:
    albumentations_like = type("Compose", (), {"__module__": "albumentations.core.composition", "__call__": lambda self, **kw: kw})
    with pytest.raises(TypeError, match=r"albumentations'.*named array.*lambda image: compose\(image=np.asarray"):
        fl.Loader(fl.ImageFolder(folder), transform=albumentations_like(), batch_size=2)
