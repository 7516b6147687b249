"""timm's ``RandomErasing`` (``timm.data.random_erasing``, what ``create_transform(re_prob=,
re_mode=, re_count=)`` appends) run natively as ``TimmRandomErasing``, in every mode and with
several blocks.

Samples: the draws the native op makes (``_native.timm_random_erasing_apply`` records them as
Python's ``random`` would be asked for them, with each block's fill) are replayed into timm's own
``_erase`` (its module's ``random`` and ``_get_pixels`` stubbed), which must then compute the
native sample bit for bit: the area and aspect arithmetic, the rounding, the fit test, the
offsets and the fill are timm's. Loader samples equal the hook's. Draws: Python's global
``random`` cannot be reproduced, so the distributions (skip rate, count, blocks, sizes,
positions, fill values) are compared with timm's own object's over many calls.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any, Iterator, List, NamedTuple, Optional, Tuple

import numpy as np
import pytest
import torch
import torchvision

import ferroloader as fl
from ferroloader import _native
from ferroloader import transforms as T

timm_data = pytest.importorskip("timm.data")
from timm.data import random_erasing as re_module  # noqa: E402
from timm.data.random_erasing import RandomErasing as TimmErasing  # noqa: E402

MEAN, STD = timm_data.IMAGENET_DEFAULT_MEAN, timm_data.IMAGENET_DEFAULT_STD
MODES = ("const", "rand", "pixel")


def ours(timm: TimmErasing) -> T.TimmRandomErasing:
    converted = T.from_torchvision([timm]).transforms
    assert len(converted) == 1 and isinstance(converted[0], T.TimmRandomErasing)
    return converted[0]


def spec_of(timm: TimmErasing) -> str:
    return json.dumps(ours(timm).to_spec())


class Replay(random.Random):
    """Python's ``random`` answering with the draws the native op made: ``random()`` values in
    order, ``randint(a, b)`` as ``a`` plus the native ``randint(b - a + 1)`` (checked to be
    asked for the same range); ``uniform`` is CPython's own, on the replayed ``random()``."""

    def __init__(self, randoms: List[float], randints: List[Tuple[int, int]]) -> None:
        super().__init__(0)
        self.randoms = list(randoms)
        self.randints = list(randints)

    def random(self) -> float:
        return self.randoms.pop(0)

    def randint(self, a: int, b: int) -> int:
        high, value = self.randints.pop(0)
        assert high == b - a + 1, f"randint({a}, {b}) replayed from randint({high})"
        return a + value


def replay(
    monkeypatch: pytest.MonkeyPatch,
    timm: TimmErasing,
    sample: torch.Tensor,
    draws: Tuple[Any, List[float], List[Tuple[int, int]], List[Any]],
) -> torch.Tensor:
    """timm's ``timm(sample)`` with the native draws and fills injected."""
    _, randoms, randints, blocks = draws
    source = Replay(randoms, randints)
    fills = [torch.from_numpy(np.array(fill)) for *_, fill in blocks]
    real = re_module._get_pixels

    def get_pixels(per_pixel: bool, rand_color: bool, patch_size: Any, dtype: Any = None, device: Any = None) -> torch.Tensor:
        fill = fills.pop(0)
        if not (per_pixel or rand_color):
            assert fill.numel() == 0, "a const block reported a fill"
            return real(per_pixel, rand_color, patch_size, dtype=dtype, device=device)
        shape = tuple(patch_size) if per_pixel else (patch_size[0], 1, 1)
        assert fill.numel() == math.prod(shape), (fill.shape, shape)
        return fill.reshape(shape).to(dtype)

    with monkeypatch.context() as m:
        m.setattr(re_module, "random", source)
        m.setattr(re_module, "_get_pixels", get_pixels)
        out = timm(sample.clone())
    assert source.randoms == [] and source.randints == [] and fills == [], "draws left over"
    return out


CONFIGS = [
    dict(probability=0.7, mode="const"),
    dict(probability=0.7, mode="rand", max_count=3),
    dict(probability=0.7, mode="pixel", min_count=2, max_count=4),
    dict(probability=1.0, mode="pixel", min_area=0.1, max_area=0.6, min_aspect=2.0),
    dict(probability=0.9, mode="rand", min_count=3, min_aspect=0.5, max_aspect=1.5),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_samples_are_timms_erase_with_the_native_draws(monkeypatch: pytest.MonkeyPatch, config: Any) -> None:
    timm = TimmErasing(**config, device="cpu")
    spec = spec_of(timm)
    gen = torch.Generator().manual_seed(3)
    erased = blocks = multi = 0
    for index in range(150):
        # Odd, non-square sizes: height and width must not be swapped anywhere.
        sample = torch.randn(3, 37, 53, generator=gen)
        draws = _native.timm_random_erasing_apply(spec, sample.numpy(), index, seed=11)
        got = torch.from_numpy(draws[0])
        want = replay(monkeypatch, timm, sample, draws)
        assert torch.equal(got, want), f"index {index}: {draws[3]}"
        erased += not torch.equal(got, sample)
        blocks += len(draws[3])
        multi += len(draws[3]) > 1
    assert erased > 50 and blocks >= erased
    if timm.max_count > 1:
        assert multi > 10


def test_a_block_as_tall_as_the_image_never_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every attempt failing (ten per block) draws and erases as timm: nothing."""
    timm = TimmErasing(1.0, min_area=0.95, max_area=1.0, min_aspect=1.0, max_aspect=1.0, device="cpu")
    spec = spec_of(timm)
    sample = torch.randn(3, 8, 8)
    draws = _native.timm_random_erasing_apply(spec, sample.numpy(), 0)
    assert len(draws[1]) == 1 + 2 * 10 and draws[2] == [] and draws[3] == []
    assert torch.equal(replay(monkeypatch, timm, sample, draws), sample)


# --------------------------------------------------------------------- distributions


class Call(NamedTuple):
    """One call's draws: skipped, the block count (None when skipped), the blocks erased as
    ``(top, left, height, width)``, and their fill values."""

    skipped: bool
    count: Optional[int]
    blocks: List[Tuple[int, int, int, int]]
    fills: List[np.ndarray]


class Recording(random.Random):
    """Python's ``random``, recording what timm asks of it."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.randoms: List[float] = []
        self.randints: List[int] = []

    def random(self) -> float:
        value = super().random()
        self.randoms.append(value)
        return value

    def randint(self, a: int, b: int) -> int:
        value = super().randint(a, b)
        self.randints.append(value)
        return value


def timm_calls(monkeypatch: pytest.MonkeyPatch, timm: TimmErasing, shape: Tuple[int, int, int], n: int) -> Iterator[Call]:
    source = Recording(1)
    patches: List[Tuple[Tuple[int, ...], torch.Tensor]] = []
    real = re_module._get_pixels

    def get_pixels(*args: Any, **kwargs: Any) -> torch.Tensor:
        out: torch.Tensor = real(*args, **kwargs)
        patches.append((tuple(args[2]), out.clone()))
        return out

    torch.manual_seed(1)
    with monkeypatch.context() as m:
        m.setattr(re_module, "random", source)
        m.setattr(re_module, "_get_pixels", get_pixels)
        for _ in range(n):
            source.randoms.clear()
            source.randints.clear()
            patches.clear()
            timm(torch.zeros(shape))
            skipped = len(source.randoms) == 1
            ints = list(source.randints)
            count = None if skipped else (ints.pop(0) if timm.min_count != timm.max_count else timm.min_count)
            blocks = [(ints[2 * i], ints[2 * i + 1], size[1], size[2]) for i, (size, _) in enumerate(patches)]
            yield Call(skipped, count, blocks, [p.flatten().numpy() for _, p in patches])


def native_calls(timm: TimmErasing, shape: Tuple[int, int, int], n: int) -> Iterator[Call]:
    spec = spec_of(timm)
    zeros = np.zeros(shape, dtype=np.float32)
    for index in range(n):
        _, randoms, randints, blocks = _native.timm_random_erasing_apply(spec, zeros, index, seed=5)
        skipped = len(randoms) == 1
        count = None if skipped else (timm.min_count + randints[0][1] if timm.min_count != timm.max_count else timm.min_count)
        yield Call(skipped, count, [b[:4] for b in blocks], [np.asarray(b[4]) for b in blocks])


def close(name: str, a: np.ndarray, b: np.ndarray) -> None:
    """Means within 4.5 standard errors of their difference."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    error = math.sqrt(a.var() / len(a) + b.var() / len(b)) or 1e-12
    assert abs(a.mean() - b.mean()) < 4.5 * error, f"{name}: {a.mean():.4f} vs {b.mean():.4f} (se {error:.4f})"


@pytest.mark.parametrize(
    "config",
    [
        dict(probability=0.6, mode="const", max_count=3),
        dict(probability=0.4, mode="rand", min_count=1, max_count=2),
        dict(probability=0.8, mode="pixel", min_aspect=0.5, min_area=0.05, max_area=0.5),
    ],
    ids=["const-1to3", "rand-1to2", "pixel"],
)
def test_draws_follow_timms_distributions(monkeypatch: pytest.MonkeyPatch, config: Any) -> None:
    timm = TimmErasing(**config, device="cpu")
    shape, n = (3, 40, 60), 3000
    theirs = list(timm_calls(monkeypatch, timm, shape, n))
    mine = list(native_calls(timm, shape, n))
    for name, pick in [
        ("skip rate", lambda c: [c.skipped]),
        ("count", lambda c: [] if c.skipped else [c.count]),
        ("blocks per call", lambda c: [] if c.skipped else [len(c.blocks)]),
        ("top", lambda c: [b[0] for b in c.blocks]),
        ("left", lambda c: [b[1] for b in c.blocks]),
        ("height", lambda c: [b[2] for b in c.blocks]),
        ("width", lambda c: [b[3] for b in c.blocks]),
        ("area", lambda c: [b[2] * b[3] for b in c.blocks]),
        ("bottom", lambda c: [b[0] + b[2] for b in c.blocks]),
        ("right", lambda c: [b[1] + b[3] for b in c.blocks]),
    ]:
        a = np.array([v for c in theirs for v in pick(c)], dtype=np.float64)
        b = np.array([v for c in mine for v in pick(c)], dtype=np.float64)
        assert len(a) > 100 and len(b) > 100, name
        close(name, a, b)
    # Every count in range occurs, on both sides.
    counts = {c.count for c in mine if not c.skipped}
    assert counts == {c.count for c in theirs if not c.skipped}
    assert counts == set(range(timm.min_count, timm.max_count + 1))
    if timm.mode == "const":
        assert all(f.size == 0 for c in mine for f in c.fills)
        return
    a = np.concatenate([f for c in theirs for f in c.fills])
    b = np.concatenate([f for c in mine for f in c.fills])
    if timm.mode == "rand":
        assert all(f.size == 3 for c in mine for f in c.fills)
    close("fill mean", a, b)
    close("fill square", a**2, b**2)
    assert abs(b.mean()) < 0.05 and abs(b.std() - 1.0) < 0.05


# --------------------------------------------------------------------- conversion and loader


@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("mode", MODES)
def test_create_transform_converts_and_runs_natively(folder: Path, mode: str, count: int) -> None:
    train = timm_data.create_transform(224, is_training=True, re_prob=0.25, re_mode=mode, re_count=count)
    split = T.split_python_tail(train)
    assert split.tail == []
    names = [type(t).__name__ for t in split.prefix.transforms]
    assert names[-3:] == ["ToTensor", "Normalize", "TimmRandomErasing"]
    erasing = split.prefix.transforms[-1]
    spec = erasing.to_spec()
    low, high = train.transforms[-1].log_aspect_ratio
    # The ratios come back with the logs timm keeps, exactly.
    assert math.log(spec.pop("min_aspect")) == low and math.log(spec.pop("max_aspect")) == high
    assert spec == {
        "op": "TimmRandomErasing",
        "probability": 0.25,
        "min_area": 0.02,
        "max_area": 1 / 3,
        "mode": mode,
        "min_count": 1,
        "max_count": count,
    }
    loader = fl.Loader(
        torchvision.datasets.ImageFolder(str(folder), transform=train),
        6,
        num_workers=1,
        python_tail="error",
        profile="spans",
    )
    shapes = {tuple(x.shape[1:]) for x, _ in loader}
    assert shapes == {(3, 224, 224)}
    ops = {span["op"] for span in loader.profile().pipeline("native")["spans"]}
    assert "TimmRandomErasing" in ops


@pytest.mark.parametrize("mode", MODES)
def test_loader_samples_are_the_hooks_and_timms(folder: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """The erasing stands last after a crop that draws nothing: the loader's sample is the
    hook's erasing of the sample without it (the same generator), which is timm's."""
    timm = TimmErasing(0.8, mode=mode, max_count=2, device="cpu")
    erasing = ours(timm)
    spec = json.dumps(erasing.to_spec())
    head = [T.Resize(40), T.CenterCrop((36, 44)), T.ToTensor(), T.Normalize(MEAN, STD)]

    def samples(transform: T.Compose) -> torch.Tensor:
        loader = fl.Loader(fl.ImageFolder(folder), batch_size=4, num_workers=2, transform=transform, seed=9)
        return torch.cat([images.clone() for images, _ in loader])

    plain = samples(T.Compose(head))
    erased = samples(T.Compose([*head, erasing]))
    changed = 0
    for index in range(len(plain)):
        draws = _native.timm_random_erasing_apply(spec, plain[index].numpy(), index, seed=9)
        assert torch.equal(erased[index], torch.from_numpy(draws[0])), f"image {index}"
        assert torch.equal(erased[index], replay(monkeypatch, timm, plain[index], draws)), f"image {index}"
        changed += not torch.equal(erased[index], plain[index])
    assert changed > len(plain) // 3


def test_identical_whatever_the_worker_count(folder: Path) -> None:
    train = timm_data.create_transform(48, is_training=True, re_prob=0.5, re_mode="rand", re_count=3)
    dataset = torchvision.datasets.ImageFolder(str(folder), transform=train)

    def run(workers: int) -> torch.Tensor:
        loader = fl.Loader(dataset, batch_size=4, num_workers=workers, seed=21, python_tail="error")
        return torch.cat([images.clone() for images, _ in loader])

    zero = run(0)
    assert torch.equal(zero, run(1)) and torch.equal(zero, run(2))


def test_bad_arguments_are_refused_by_name() -> None:
    on_gpu = TimmErasing(0.5, mode="rand", device="cuda")
    with pytest.raises(ValueError, match=r"RandomErasing.*device='cuda'"):
        T.from_torchvision([torchvision.transforms.ToTensor(), on_gpu])
    # (In a loader it runs as the Python tail, on its device: see test_timm.py for the tail.)

    class Changed(TimmErasing):  # type: ignore[misc]
        """Looks like timm's class by name and module, erases otherwise."""

        def _erase(self, *args: Any) -> None:
            pass

    Changed.__module__, Changed.__name__ = re_module.__name__, "RandomErasing"
    with pytest.raises(ValueError, match=r"_erase is not timm's"):
        T.from_torchvision([Changed(device="cpu")])
    for kwargs, name in [
        (dict(device="cuda"), "device"),
        (dict(mode="noise"), "mode"),
        (dict(probability=1.5), "probability"),
        (dict(max_count=65), "max_count"),
        (dict(min_count=3, max_count=2), "min_count"),
        (dict(min_aspect=0.0), "min_aspect"),
        (dict(min_area=-0.1), "min_area"),
    ]:
        with pytest.raises(ValueError, match=rf"TimmRandomErasing: {name}"):
            T.TimmRandomErasing(**kwargs)  # type: ignore[arg-type]
    # timm's `or` defaults; an empty mode is 'const'.
    assert T.TimmRandomErasing(min_aspect=0.5, max_aspect=0, max_count=0, mode="").to_spec() == {
        "op": "TimmRandomErasing",
        "probability": 0.5,
        "min_area": 0.02,
        "max_area": 1 / 3,
        "min_aspect": 0.5,
        "max_aspect": 2.0,
        "mode": "const",
        "min_count": 1,
        "max_count": 1,
    }
    with pytest.raises(ValueError, match=r"TimmRandomErasing work on the float tensor"):
        T.check(T.Compose([T.CenterCrop(32), T.PILToTensor(), T.TimmRandomErasing()]), output="uint8")
    with pytest.raises(ValueError, match=r"`output`.*uint8"):
        T.check(T.Compose([T.CenterCrop(32), T.ToTensor(), T.TimmRandomErasing()]), output="uint8")
