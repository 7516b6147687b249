"""AugMix (v1 ``torchvision.transforms`` and v2) run natively, against torchvision itself.

torchvision runs AugMix on a PIL image as a uint8 tensor: its chains' ops with the tensor
kernels, the mix in float32, truncated back. ferroloader's draws come from its own generator,
so torchvision's draws are injected: ``_native.augmix_apply`` applies a plan given outright
(weights, and per chain the ``(op, magnitude)`` pairs ``_apply_op`` receives), and torchvision
runs the same plan, either op by op (``_apply_op`` / v2's ``_apply_image_or_video_transform``
on the tensor) or through its own ``forward`` with ``torch.randint``/``torch.rand`` and
``_sample_dirichlet`` scripted. That the loader draws those plans (op choice, depth, bins,
signs, Dirichlet and Beta weights) as torchvision does is transforms/tests/policy_draws.rs's
(recorded runs and statistics); that the pipeline runs the kernels on its draws is
transforms/tests/augmix_pipeline.rs's. Here: the kernels and the mix against torchvision, the
loader's determinism across worker counts, conversion from torchvision and refusals.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as tvT
import torchvision.transforms.functional as tvF
import torchvision.transforms.v2 as v2
from PIL import Image
from torchvision.transforms.autoaugment import _apply_op

import ferroloader as fl
from ferroloader import _native
from ferroloader import transforms as T

SIZE = 40
Chain = Tuple[float, List[Tuple[str, float]]]



def images(folder: Path, count: int = 6) -> List[Image.Image]:
    prepare = tvT.Compose([tvT.Resize(56), tvT.CenterCrop(SIZE)])
    dataset = torchvision.datasets.ImageFolder(str(folder))
    out = []
    for path, _ in dataset.samples[:count]:
        with Image.open(path) as img:
            out.append(prepare(img.convert("RGB")))
    return out


def table(api: str, all_ops: bool = True) -> Dict[str, Tuple[Optional[torch.Tensor], bool]]:
    """AugMix's augmentation space for a SIZE x SIZE image, 10 bins, as torchvision builds it."""
    if api == "v1":
        return dict(tvT.AugMix(all_ops=all_ops)._augmentation_space(10, (SIZE, SIZE)))
    space = v2.AugMix._AUGMENTATION_SPACE if all_ops else v2.AugMix._PARTIAL_AUGMENTATION_SPACE
    return {name: (fn(10, SIZE, SIZE), signed) for name, (fn, signed) in space.items()}


def magnitude_for_ferroloader(api: str, op: str, magnitude: float) -> float:
    """What ``_apply_op`` hands the functional: v2 scales Solarize's table by 255 itself."""
    return 255 * magnitude if api == "v2" and op == "Solarize" else magnitude


def torchvision_op(api: str, interpolation: str, fill: Optional[List[float]]) -> Callable[[torch.Tensor, str, float], torch.Tensor]:
    mode = tvT.InterpolationMode(interpolation)
    if api == "v1":
        return lambda t, op, m: _apply_op(t, op, m, interpolation=mode, fill=fill)
    aug = v2.AugMix(interpolation=mode, fill=fill)
    return lambda t, op, m: aug._apply_image_or_video_transform(t, op, m, interpolation=mode, fill=aug._fill)


def ferroloader_mix(img: Image.Image, m0: float, chains: Sequence[Chain], api: str, interpolation: str, fill: Optional[List[float]]) -> np.ndarray:
    return _native.augmix_apply(
        np.asarray(img, dtype=np.uint8), m0, list(chains), interpolation=interpolation, fill=fill, api=api
    )


SETTINGS = [
    ("v1", "bilinear", None),
    ("v1", "nearest", None),
    ("v1", "bilinear", [200.0, 20.5, 90.0]),
    ("v2", "bilinear", None),
    ("v2", "nearest", [30.0]),
    ("v2", "bilinear", [127.5]),
]


@pytest.mark.parametrize("api,interpolation,fill", SETTINGS)
def test_each_op_equals_torchvisions_tensor_kernel(folder: Path, api: str, interpolation: str, fill: Optional[List[float]]) -> None:
    """Every op of the space at every bin and sign: one chain of weight 1 and an original of
    weight 0 leaves the op's output as is, compared with torchvision's op on the tensor. All are
    bit-exact: the integer ops, the float32 blends in torch's order (v2's fused), and the warps
    (torch's grid, and grid_sample's arithmetic with the multiply-adds its build fuses)."""
    apply = torchvision_op(api, interpolation, fill)
    worst: Dict[str, Tuple[int, int]] = {}
    for img in images(folder):
        tensor = tvF.pil_to_tensor(img).unsqueeze(0)
        for op, (mags, signed) in table(api).items():
            values = [0.0] if mags is None or mags.ndim == 0 else [float(v) for v in mags]
            for m in values + ([-v for v in values if v] if signed else []):
                want = apply(tensor, op, m)[0].permute(1, 2, 0).numpy()
                got = ferroloader_mix(img, 0.0, [(1.0, [(op, magnitude_for_ferroloader(api, op, m))])], api, interpolation, fill)
                diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
                seen = worst.get(op, (0, 0))
                worst[op] = (max(seen[0], int(diff.max())), seen[1] + int((diff != 0).sum()))
    for op, (max_diff, count) in worst.items():
        assert count == 0, f"{op}: {count} values differ, up to {max_diff}"
    assert set(worst) == set(table(api))


class Script:
    """torch's draws answered from a seeded Python generator and recorded in order."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.record: List[float] = []

    def randint(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        if "low" in kwargs:
            low, high, size = kwargs["low"], kwargs["high"], kwargs.get("size", ())
        elif len(args) >= 2 and not isinstance(args[1], (tuple, list)):
            low, high, size = args[0], args[1], args[2] if len(args) > 2 else kwargs.get("size", ())
        else:
            low, high, size = 0, args[0], args[1] if len(args) > 1 else kwargs.get("size", ())
        value = self.rng.randrange(low, high)
        self.record.append(value)
        return torch.full(tuple(size), value, dtype=kwargs.get("dtype", torch.int64))

    def rand(self, *size: Any, **kwargs: Any) -> torch.Tensor:
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)
        value = self.rng.random()
        self.record.append(value)
        return torch.full(shape, value, dtype=torch.float32)


def torchvision_augmix_with_plan(
    augmix: Any, api: str, img: Image.Image, seed: int, monkeypatch: pytest.MonkeyPatch
) -> Tuple[np.ndarray, float, List[Chain]]:
    """torchvision's AugMix on ``img`` with scripted draws, and the plan those draws make."""
    gen = np.random.default_rng(seed)
    alpha = float(augmix.alpha)
    m = torch.tensor(gen.dirichlet([alpha, alpha]), dtype=torch.float32)
    weights = torch.tensor(gen.dirichlet([alpha] * augmix.mixture_width), dtype=torch.float32)
    dirichlets = [m.unsqueeze(0), weights.unsqueeze(0)]
    script = Script(seed)
    with monkeypatch.context() as patch:
        patch.setattr(torch, "randint", script.randint)
        patch.setattr(torch, "rand", script.rand)
        patch.setattr(augmix, "_sample_dirichlet", lambda params: dirichlets.pop(0))
        out = np.asarray(augmix(img), dtype=np.uint8)
    space = table(api, augmix.all_ops)
    names = list(space)
    draws = list(script.record)
    combined = (weights * m[1]).tolist()
    chains: List[Chain] = []
    for i in range(augmix.mixture_width):
        depth = augmix.chain_depth if augmix.chain_depth > 0 else int(draws.pop(0))
        ops = []
        for _ in range(depth):
            op = names[int(draws.pop(0))]
            mags, signed = space[op]
            magnitude = 0.0
            if mags is not None and mags.ndim > 0:
                magnitude = float(mags[int(draws.pop(0))])
                if signed and (draws.pop(0) == 1 if api == "v1" else draws.pop(0) <= 0.5):
                    magnitude = -magnitude
            ops.append((op, magnitude_for_ferroloader(api, op, magnitude)))
        chains.append((combined[i], ops))
    assert not draws, "every draw torchvision made is in the plan"
    return out, float(m[0]), chains


AUGMIXES: Dict[str, Callable[[], Any]] = {
    "v1-default": lambda: tvT.AugMix(),
    "v1-severe-nearest-fill": lambda: tvT.AugMix(severity=10, mixture_width=4, chain_depth=3, alpha=0.5, interpolation=tvT.InterpolationMode.NEAREST, fill=[10, 200, 30]),
    "v1-partial": lambda: tvT.AugMix(severity=6, all_ops=False, fill=128),
    "v2-default": lambda: v2.AugMix(),
    "v2-severe-fill": lambda: v2.AugMix(severity=9, mixture_width=2, chain_depth=2, alpha=2.0, fill=[64.0]),
}


@pytest.mark.parametrize("which", list(AUGMIXES))
def test_augmix_equals_torchvision_with_the_same_draws(folder: Path, which: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """torchvision's whole AugMix forward (its own mix and casts) with injected draws, and
    ferroloader's with the plan those draws make: bit for bit."""
    augmix = AUGMIXES[which]()
    api = "v2" if which.startswith("v2") else "v1"
    interpolation = str(getattr(augmix.interpolation, "value", augmix.interpolation))
    fill = augmix.fill
    fill_list = None if fill is None else [float(v) for v in (fill if isinstance(fill, (list, tuple)) else [fill])]
    total = differing = 0
    worst = 0
    for k, img in enumerate(images(folder)):
        for seed in range(8):
            want, m0, chains = torchvision_augmix_with_plan(augmix, api, img, 1000 * k + seed, monkeypatch)
            got = ferroloader_mix(img, m0, chains, api, interpolation, fill_list)
            diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
            worst = max(worst, int(diff.max()))
            differing += int((diff != 0).sum())
            total += diff.size
    assert differing == 0, f"{which}: {differing} of {total} values differ, by up to {worst}"


def loader_run(folder: Path, augmix: Any, workers: int, seed: int = 5) -> torch.Tensor:
    transform = T.Compose([T.RandomResizedCrop(SIZE), T.RandomHorizontalFlip(), augmix, T.ToTensor()])
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=4, num_workers=workers, transform=transform, seed=seed, python_tail="error")
    return torch.cat([images.clone() for images, _ in loader])


@pytest.mark.parametrize("augmix", [T.AugMix(), T.AugMix(severity=7, chain_depth=2, interpolation="nearest", fill=[1, 2, 3], api="v2")], ids=["v1", "v2"])
def test_augmix_is_identical_whatever_the_worker_count(folder: Path, augmix: T.AugMix) -> None:
    zero = loader_run(folder, augmix, 0)
    assert torch.equal(zero, loader_run(folder, augmix, 1))
    assert torch.equal(zero, loader_run(folder, augmix, 2))
    plain = loader_run(folder, T.RandomHorizontalFlip(0.0), 0)
    changed = sum(not torch.equal(a, b) for a, b in zip(zero, plain))
    assert changed >= len(zero) - 1, f"AugMix changed only {changed} of {len(zero)} samples"
    assert not torch.equal(zero, loader_run(folder, augmix, 0, seed=6))


def test_from_torchvision_plans_augmix_natively_with_its_parameters() -> None:
    got = T.from_torchvision(tvT.Compose([tvT.CenterCrop(32), tvT.AugMix(severity=5, mixture_width=2, chain_depth=3, alpha=0.5, all_ops=False, interpolation=tvT.InterpolationMode.NEAREST, fill=[1, 2, 3]), tvT.ToTensor()]))
    spec = got.transforms[1].to_spec()
    assert spec == {
        "op": "AugMix", "severity": 5, "mixture_width": 2, "chain_depth": 3, "alpha": 0.5,
        "all_ops": False, "interpolation": "nearest", "fill": [1.0, 2.0, 3.0], "api": "v1",
    }
    spec = T.from_torchvision(v2.AugMix()).transforms[0].to_spec()
    assert spec["api"] == "v2" and spec["fill"] is None and spec["interpolation"] == "bilinear"
    assert T.check(T.Compose([T.CenterCrop(32), T.AugMix(), T.ToTensor()]))["shape"] == (3, 32, 32)


def test_what_augmix_cannot_do_is_refused_by_parameter() -> None:
    with pytest.raises(ValueError, match="AugMix: mixture_width"):
        T.from_torchvision(tvT.AugMix(mixture_width=9))
    with pytest.raises(ValueError, match="AugMix: chain_depth"):
        T.from_torchvision(tvT.AugMix(chain_depth=9))
    with pytest.raises(ValueError, match="AugMix: severity"):
        T.AugMix(severity=11)
    with pytest.raises(ValueError, match="AugMix: alpha"):
        T.AugMix(alpha=0.0)
    with pytest.raises(ValueError, match="AugMix: fill"):
        T.from_torchvision(tvT.AugMix(fill=300))
    with pytest.raises(ValueError, match="AugMix: fill"):
        T.AugMix(fill=[1, 2])
    # AugMix warps a uint8 tensor, whose kernels refuse BICUBIC: torchvision's message.
    refusal = "Interpolation mode 'bicubic' is unsupported with Tensor input"
    with pytest.raises(ValueError, match=f"AugMix: interpolation.*{refusal}"):
        T.from_torchvision(tvT.AugMix(interpolation=tvT.InterpolationMode.BICUBIC))
    with pytest.raises(ValueError, match=f"AugMix: interpolation.*{refusal}"):
        T.AugMix(interpolation="bicubic", api="v2")
    with pytest.raises(ValueError, match=refusal), torch.random.fork_rng():
        for _ in range(20):  # torchvision's own, at the first warp drawn
            v2.AugMix(interpolation=tvT.InterpolationMode.BICUBIC)(torch.zeros(3, 8, 8, dtype=torch.uint8))
    with pytest.raises(ValueError, match=rf"interpolation.*{refusal}"):
        _native.check_pipeline(
            '{"ops": [{"op": "CenterCrop", "size": 8}, {"op": "AugMix", "interpolation": "bicubic"}, {"op": "ToTensor"}]}'
        )
    with pytest.raises(ValueError, match="per-type fill"):
        T.from_torchvision(v2.AugMix(fill={Image.Image: 3}))
    with pytest.raises(TypeError, match="AugMix: all_ops"):
        T.AugMix(all_ops=1)  # type: ignore[arg-type]
    # The planner checks a hand-written spec the same way, naming the argument.
    with pytest.raises(ValueError, match="fill"):
        _native.check_pipeline('{"ops": [{"op": "CenterCrop", "size": 8}, {"op": "AugMix", "fill": 256}, {"op": "ToTensor"}]}')
