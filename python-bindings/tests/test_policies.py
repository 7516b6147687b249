"""torchvision's augmentation policies (TrivialAugmentWide, RandAugment, AutoAugment) through
the whole loader against torchvision's own classes on PIL images.

torch's generator cannot be reproduced, so torchvision is run with a scripted one: every draw
its ``forward`` makes (``torch.randint``, ``torch.rand``) is answered from a script, and every
script is tried (each op, bin, sign and coin), giving the set of all outputs the policy can
produce on an image. Each loader sample must be one of them, bit for bit (the kernels are
Pillow's integer arithmetic and Pillow's affine engines), and over the samples the policy must
have chosen many different ops. Which op a sample draws is checked draw for draw against
recorded torchvision runs in the Rust tests (transforms/tests/policy_draws.rs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Set, Tuple

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as tvT
import torchvision.transforms.v2 as v2
from PIL import Image

import ferroloader as fl
from ferroloader import _native
from ferroloader import transforms as T

SIZE = 40


class Script:
    """Answers torch's draws from a list of choices; past its end, the first option of each
    draw, recording how many options that draw had (so every path can be enumerated)."""

    def __init__(self, prefix: List[int]) -> None:
        self.prefix = prefix
        self.options: List[int] = []

    def _choice(self, n: int) -> int:
        k = len(self.options)
        self.options.append(n)
        return self.prefix[k] if k < len(self.prefix) else 0

    def randint(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        low, high, size = (0, args[0], args[1]) if len(args) == 2 else args
        shape = tuple(size)
        values = [low + self._choice(high - low) for _ in range(int(np.prod(shape, dtype=np.int64)))]
        return torch.tensor(values, dtype=kwargs.get("dtype", torch.int64)).reshape(shape)

    def rand(self, *size: Any, **kwargs: Any) -> torch.Tensor:
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)
        # 0.0 passes every `rand <= p` test, 0.99999 fails them (and v2's sign `<= 0.5`).
        values = [(0.0, 0.99999)[self._choice(2)] for _ in range(int(np.prod(shape, dtype=np.int64)))]
        return torch.tensor(values, dtype=torch.float32).reshape(shape)


def every_output(policy: Callable[[Image.Image], Image.Image], img: Image.Image, monkeypatch: pytest.MonkeyPatch) -> Set[bytes]:
    """The pixels of ``policy(img)`` for every script of its draws."""
    outputs: Set[bytes] = set()
    stack: List[List[int]] = [[]]
    with monkeypatch.context() as m:
        while stack:
            prefix = stack.pop()
            script = Script(prefix)
            m.setattr(torch, "randint", script.randint)
            m.setattr(torch, "rand", script.rand)
            out = policy(img)
            m.undo()
            outputs.add(np.asarray(out, dtype=np.uint8).tobytes())
            for k in range(len(prefix), len(script.options)):
                for alt in range(1, script.options[k]):
                    stack.append(prefix + [0] * (k - len(prefix)) + [alt])
    return outputs


def geometry() -> List[Any]:
    return [tvT.Resize(56), tvT.CenterCrop(SIZE)]


def loader_samples(folder: Path, policy: Any, seeds: Tuple[int, ...], workers: int = 2) -> List[Tuple[int, np.ndarray]]:
    """(dataset index, HWC uint8 sample) of the loader running geometry + ``policy``."""
    transform = T.from_torchvision(tvT.Compose([*geometry(), policy, tvT.PILToTensor()]))
    out = []
    for seed in seeds:
        loader = fl.Loader(fl.ImageFolder(folder), batch_size=4, num_workers=workers, transform=transform, output="uint8", seed=seed)
        index = 0
        for images, _ in loader:
            for k in range(images.shape[0]):
                out.append((index, images[k].permute(1, 2, 0).contiguous().numpy()))
                index += 1
    return out


POLICIES: Dict[str, Callable[[], Any]] = {
    "TrivialAugmentWide": lambda: tvT.TrivialAugmentWide(),
    "TrivialAugmentWide-bilinear-fill": lambda: tvT.TrivialAugmentWide(
        num_magnitude_bins=8, interpolation=tvT.InterpolationMode.BILINEAR, fill=[255, 20, 100]
    ),
    "TrivialAugmentWide-v2": lambda: v2.TrivialAugmentWide(fill=90),
    "RandAugment": lambda: tvT.RandAugment(),
    "RandAugment-bilinear-v2": lambda: v2.RandAugment(num_ops=1, magnitude=14, num_magnitude_bins=15, interpolation=v2.InterpolationMode.BILINEAR, fill=[30]),
    "AutoAugment-imagenet": lambda: tvT.AutoAugment(),
    "AutoAugment-cifar10": lambda: tvT.AutoAugment(tvT.AutoAugmentPolicy.CIFAR10, fill=[0, 128, 255]),
    "AutoAugment-svhn-v2": lambda: v2.AutoAugment(v2.AutoAugmentPolicy.SVHN, interpolation=v2.InterpolationMode.BILINEAR),
    # BICUBIC, as torchvision's reference recipes pass `--interpolation bicubic` to the policies.
    "TrivialAugmentWide-bicubic-fill": lambda: tvT.TrivialAugmentWide(
        num_magnitude_bins=8, interpolation=tvT.InterpolationMode.BICUBIC, fill=[255, 20, 100]
    ),
    "RandAugment-bicubic-v2": lambda: v2.RandAugment(num_ops=1, magnitude=11, num_magnitude_bins=15, interpolation=v2.InterpolationMode.BICUBIC),
    "AutoAugment-imagenet-bicubic": lambda: tvT.AutoAugment(interpolation=tvT.InterpolationMode.BICUBIC, fill=[9]),
}


@pytest.mark.parametrize("which", list(POLICIES))
def test_policy_samples_are_torchvision_outputs_exactly(folder: Path, which: str, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = POLICIES[which]()
    prepare = tvT.Compose(geometry())
    dataset = torchvision.datasets.ImageFolder(str(folder))
    candidates: Dict[int, Set[bytes]] = {}
    for i, (path, _) in enumerate(dataset.samples):
        with Image.open(path) as img:
            candidates[i] = every_output(policy, prepare(img.convert("RGB")), monkeypatch)
    plain: Dict[int, bytes] = {}
    for i, (path, _) in enumerate(dataset.samples):
        with Image.open(path) as img:
            plain[i] = np.asarray(prepare(img.convert("RGB")), dtype=np.uint8).tobytes()
    changed = 0
    distinct: Set[bytes] = set()
    samples = loader_samples(folder, policy, seeds=(0, 1, 2))
    for index, sample in samples:
        got = sample.tobytes()
        assert got in candidates[index], f"{which}: sample of image {index} is no output of torchvision's policy"
        changed += got != plain[index]
        distinct.add(got)
    assert len(samples) == 3 * len(dataset)
    # The draws decide: most samples changed, and differently (not one op every time).
    assert changed > len(samples) // 2, f"{which}: only {changed} of {len(samples)} samples changed"
    assert len(distinct) > len(samples) * 3 // 4


@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
def test_bicubic_policies_run_natively(folder: Path, tv: Any) -> None:
    """The policies with BICUBIC (a reference recipe's ``--interpolation bicubic``) plan with no
    Python tail, in the loader and in ``split_python_tail``."""
    bicubic = tvT.InterpolationMode.BICUBIC
    for policy in (
        tv.TrivialAugmentWide(interpolation=bicubic),
        tv.RandAugment(interpolation=bicubic),
        tv.AutoAugment(interpolation=bicubic),
    ):
        transform = tv.Compose([tv.RandomResizedCrop(32), policy, tv.PILToTensor()])
        assert T.split_python_tail(transform, output="uint8").tail == []
        loader = fl.Loader(fl.ImageFolder(folder), batch_size=4, num_workers=1, transform=transform, output="uint8",
                           python_tail="error")
        images, _ = next(iter(loader))
        assert tuple(images.shape) == (4, 3, 32, 32)


def test_policies_are_identical_whatever_the_worker_count(folder: Path) -> None:
    ops = [
        T.RandomResizedCrop(40),
        T.RandomHorizontalFlip(),
        T.TrivialAugmentWide(),
        T.RandAugment(interpolation="bilinear", fill=[10, 20, 30]),
        T.AutoAugment("svhn", api="v2"),
        T.TrivialAugmentWide(interpolation="bicubic", fill=[1, 2, 3], api="v2"),
        T.ToTensor(),
    ]

    def run(workers: int) -> torch.Tensor:
        loader = fl.Loader(fl.ImageFolder(folder), batch_size=3, num_workers=workers, transform=T.Compose(ops), seed=11)
        return torch.cat([images.clone() for images, _ in loader])

    zero = run(0)
    assert torch.equal(zero, run(1))
    assert torch.equal(zero, run(2))


def test_from_torchvision_keeps_names_parameters_and_api() -> None:
    got = T.from_torchvision(
        tvT.Compose(
            [
                tvT.CenterCrop(32),
                tvT.TrivialAugmentWide(),
                v2.RandAugment(num_ops=3, magnitude=5, num_magnitude_bins=11, interpolation=v2.InterpolationMode.BILINEAR, fill=7),
                tvT.AutoAugment(tvT.AutoAugmentPolicy.CIFAR10, fill=[1, 2, 3]),
                tvT.ToTensor(),
            ]
        )
    ).to_spec()
    assert got[1] == {"op": "TrivialAugmentWide", "num_magnitude_bins": 31, "interpolation": "nearest", "fill": None, "api": "v1"}  # black on a PIL image
    assert got[2] == {
        "op": "RandAugment",
        "num_ops": 3,
        "magnitude": 5,
        "num_magnitude_bins": 11,
        "interpolation": "bilinear",
        "fill": 7.0,
        "api": "v2",
    }
    assert got[3] == {"op": "AutoAugment", "policy": "cifar10", "interpolation": "nearest", "fill": [1.0, 2.0, 3.0], "api": "v1"}
    assert tuple(T.check(T.Compose([T.CenterCrop(32), T.TrivialAugmentWide(), T.ToTensor()]))["shape"]) == (3, 32, 32)


def test_unsupported_policy_arguments_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="TrivialAugmentWide: interpolation"):
        T.from_torchvision(tvT.TrivialAugmentWide(interpolation=tvT.InterpolationMode.LANCZOS))
    with pytest.raises(ValueError, match="RandAugment: interpolation 'box'"):
        T.RandAugment(interpolation="box")
    # BICUBIC converts on a PIL image; after ToImage torchvision's tensor kernels refuse it, and
    # so does the conversion, with torchvision's message.
    bicubic = v2.InterpolationMode.BICUBIC
    assert T.from_torchvision(v2.AutoAugment(interpolation=bicubic)).to_spec()[0]["interpolation"] == "bicubic"
    refusal = "Interpolation mode 'bicubic' is unsupported with Tensor input"
    after = v2.Compose([v2.ToImage(), v2.CenterCrop(32), v2.TrivialAugmentWide(interpolation=bicubic)])
    with pytest.raises(ValueError, match=rf"TrivialAugmentWide.*{refusal}"):
        T.from_torchvision(after)
    on_tensor = v2.RandAugment(num_ops=1, interpolation=bicubic)
    with pytest.raises(ValueError, match=refusal), torch.random.fork_rng():
        # torchvision's own refusal, at the first warp (5 of its 14 ops) the draws come to.
        for _ in range(200):
            on_tensor(torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8))
    with pytest.raises(ValueError, match="RandAugment: magnitude"):
        T.RandAugment(magnitude=31)
    with pytest.raises(ValueError, match="RandAugment: num_ops"):
        T.RandAugment(num_ops=17)
    with pytest.raises(ValueError, match="TrivialAugmentWide: num_magnitude_bins"):
        T.TrivialAugmentWide(num_magnitude_bins=1)
    with pytest.raises(ValueError, match="AutoAugment: fill"):
        T.AutoAugment(fill=[1, 2])
    with pytest.raises(ValueError, match="AutoAugment: policy"):
        T.AutoAugment("mnist")
    with pytest.raises(ValueError, match="AutoAugment: api"):
        T.AutoAugment(api="v3")
    with pytest.raises(ValueError, match="per-type fill"):
        T.from_torchvision(v2.TrivialAugmentWide(fill={Image.Image: 3}))
    # AugMix plans natively (with torch's tensor kernels: test_augmix.py).
    planned = _native.check_pipeline(
        '{"ops": [{"op": "CenterCrop", "size": 8}, {"op": "AugMix"}, {"op": "ToTensor"}]}'
    )
    assert tuple(planned["shape"]) == (3, 8, 8)
