"""Random compositions (RandomApply, RandomChoice, RandomOrder, nested Compose) and
RandomErasing through the whole loader, against torchvision (v1 and v2) on PIL images.

torch's generator cannot be reproduced, so randomness is neutralised where pixels are compared:
p=1 or p=0, weights that leave one choice, a single item to order. Erasing's rectangle is read
back from the loader's own output (the loader without erasing, same seed, differs from it only
inside the rectangle), then torchvision's ``F.erase`` with that rectangle and value is applied
to torchvision's own pipeline and compared. The draws themselves are compared against
torchvision's draw for draw in the Rust tests (policy_draws.rs, choice_pipeline.rs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional, Tuple

import pytest
import torch
import torchvision
import torchvision.transforms as tvT
import torchvision.transforms.functional as F
import torchvision.transforms.v2 as v2

import ferroloader as fl
from ferroloader import transforms as T

from conftest import IMAGENET_MEAN, IMAGENET_STD

LEVEL = 1.0 / 255.0
EPS = 1e-6


def loader_images(folder: Path, transform: Any, *, workers: int = 2, output: str = "float32", seed: int = 3) -> torch.Tensor:
    loader = fl.Loader(
        fl.ImageFolder(folder), batch_size=5, num_workers=workers, transform=transform, output=output, seed=seed
    )
    return torch.cat([images.clone() for images, _ in loader])


def torchvision_images(folder: Path, transform: Any) -> torch.Tensor:
    reference = torchvision.datasets.ImageFolder(str(folder), transform=transform)
    return torch.stack([reference[i][0] for i in range(len(reference))])


def eval_head(api: Any) -> List[Any]:
    return [api.Resize(64), api.CenterCrop(48)]


# ---------------------------------------------------------------- compositions


@pytest.mark.parametrize("api", [tvT, v2], ids=["v1", "v2"])
def test_compositions_with_neutralised_draws_match_torchvision_exactly(folder: Path, api: Any) -> None:
    """RandomApply at p=1 is its ops, at p=0 nothing; RandomChoice with one non-zero weight is
    that choice; RandomOrder of one item is the item; nested Composes stand for their ops. Pixel
    ops are Pillow's integer arithmetic: uint8 pixels equal, not within a level."""
    jitter = api.ColorJitter(brightness=(1.3, 1.3))
    ops = [
        api.Compose(eval_head(api)),
        api.RandomApply([jitter, api.Compose([api.RandomInvert(p=1.0)])], p=1.0),
        api.RandomApply([api.RandomPosterize(2, p=1.0)], p=0.0),
        api.RandomChoice([api.RandomSolarize(200, p=1.0), api.RandomEqualize(p=1.0)], p=[0.0, 1.0]),
        api.RandomOrder([api.Compose([api.RandomAutocontrast(p=1.0), api.RandomHorizontalFlip(p=1.0)])]),
        api.PILToTensor(),
    ]
    tv = api.Compose(ops)
    ours = T.from_torchvision(tv)
    want = torchvision_images(folder, tv)
    got = loader_images(folder, ours, output="uint8")
    assert got.shape == want.shape
    assert int((got.to(torch.int16) - want.to(torch.int16)).abs().max()) == 0
    # And the inner ops did change the image: the identity would not match.
    plain = torchvision_images(folder, tvT.Compose([*eval_head(tvT), tvT.PILToTensor()]))
    assert not torch.equal(got, plain)


def test_from_torchvision_converts_compositions_in_both_apis() -> None:
    want = T.Compose(
        [
            T.RandomResizedCrop([32, 32]),
            T.RandomApply([T.ColorJitter([0.6, 1.4], [0.6, 1.4], 0, 0), T.RandomGrayscale(0.2)], p=0.8),
            T.RandomChoice([T.RandomInvert(1.0), T.Compose([T.RandomEqualize(1.0), T.RandomSolarize(128, 1.0)])]),
            T.RandomOrder([T.RandomHorizontalFlip(1.0), T.RandomPosterize(4, 0.5)]),
            T.ToTensor(),
            T.Normalize(IMAGENET_MEAN, IMAGENET_STD),
            T.RandomErasing(p=0.25, value="random"),
        ]
    )
    for api in (tvT, v2):
        head: List[Any] = [api.ToImage()] if api is v2 else []
        to_float: List[Any] = (
            [api.ToDtype(torch.float32, scale=True)] if api is v2 else [api.ToTensor()]
        )
        tv = api.Compose(
            [
                *head,
                api.Compose([api.RandomResizedCrop(32)]),
                api.RandomApply([api.ColorJitter(0.4, 0.4), api.RandomGrayscale(0.2)], p=0.8),
                api.RandomChoice(
                    [api.RandomInvert(1.0), api.Compose([api.RandomEqualize(1.0), api.RandomSolarize(128, 1.0)])]
                ),
                api.RandomOrder([api.RandomHorizontalFlip(1.0), api.RandomPosterize(4, 0.5)]),
                *to_float,
                api.Normalize(IMAGENET_MEAN, IMAGENET_STD),
                api.RandomErasing(p=0.25, value="random"),
                *([api.ToPureTensor()] if api is v2 else []),
            ]
        )
        got = T.from_torchvision(tv)
        spec = got.to_spec()
        # v2's colour ops run on the tensor ToImage made: a marker first, then the same ops.
        if api is v2:
            assert spec.pop(0) == {"op": "ToImage", "api": "v2"}
        # v2 normalizes RandomChoice's weights to [0.5, 0.5]; v1 keeps None (uniform either way).
        if api is v2:
            assert spec[2]["p"] == [0.5, 0.5]
            spec[2]["p"] = None
            # v2's ToDtype multiplies by float32(1 / 255) where ToTensor divides by 255.
            assert spec[4] == {"op": "ToDtype"}
            spec[4] = {"op": "ToTensor"}
        assert spec == want.to_spec(), api.__name__
        assert T.check(got)["shape"] == (3, 32, 32)


def test_compositions_refuse_what_cannot_run_inside_them() -> None:
    converted = T.from_torchvision(tvT.Compose([tvT.CenterCrop(8), tvT.RandomApply([tvT.ToTensor()]), tvT.ToTensor()]))
    with pytest.raises(ValueError, match=r"RandomApply: transforms\[0\] is ToTensor"):
        T.check(converted)
    with pytest.raises(ValueError, match=r"(?s)RandomOrder.*transforms\[0\].*no ferroloader equivalent"):
        T.from_torchvision(tvT.Compose([tvT.CenterCrop(8), tvT.RandomOrder([tvT.Lambda(abs)]), tvT.ToTensor()]))
    with pytest.raises(ValueError, match=r"transforms\[0\] is Normalize"):
        T.check(T.Compose([T.CenterCrop(8), T.RandomChoice([T.Normalize(0.5, 0.5)]), T.ToTensor()]))
    # A resize runs inside one, as long as every outcome leaves the same size.
    assert T.check(T.Compose([T.CenterCrop(8), T.RandomChoice([T.RandomResizedCrop(6), T.Resize((6, 6))]), T.ToTensor()]))["shape"] == (3, 6, 6)
    with pytest.raises(ValueError, match=r"RandomChoice: .* leave 6x6 and 8x8"):
        T.check(T.Compose([T.CenterCrop(8), T.RandomChoice([T.RandomResizedCrop(6), T.RandomInvert()]), T.ToTensor()]))
    with pytest.raises(ValueError, match="length of p"):
        T.RandomChoice([T.RandomInvert()], p=[0.5, 0.5])
    with pytest.raises(ValueError, match="p must be a probability"):
        T.RandomApply([T.RandomInvert()], p=1.5)
    with pytest.raises(TypeError, match=r"RandomOrder: transforms\[1\]"):
        T.RandomOrder([T.RandomInvert(), tvT.RandomInvert()])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="at least one"):
        T.RandomChoice([])


# ---------------------------------------------------------------- erasing


def erased_rectangle(erased: torch.Tensor, plain: torch.Tensor) -> Optional[Tuple[int, int, int, int]]:
    """(i, j, h, w) of the one rectangle where ``erased`` differs from ``plain`` (CHW), checking
    nothing outside it changed; None when nothing did."""
    changed = (erased != plain).any(dim=0)
    if not bool(changed.any()):
        return None
    rows = changed.any(dim=1).nonzero().flatten()
    cols = changed.any(dim=0).nonzero().flatten()
    i, j = int(rows[0]), int(cols[0])
    h, w = int(rows[-1]) - i + 1, int(cols[-1]) - j + 1
    outside = torch.ones_like(changed)
    outside[i : i + h, j : j + w] = False
    assert not bool(changed[outside].any()), "erasing changed pixels outside one rectangle"
    return i, j, h, w


@pytest.mark.parametrize("value", [0, (0.5, -1.0, 2.0), "random"], ids=["zero", "per-channel", "random"])
def test_random_erasing_after_normalize_is_torchvisions_erase_of_the_rectangle(folder: Path, value: Any) -> None:
    tail = [tvT.ToTensor(), tvT.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    plain_tv = tvT.Compose([*eval_head(tvT), *tail])
    with_erasing = T.from_torchvision(tvT.Compose([*eval_head(tvT), *tail, tvT.RandomErasing(p=1.0, value=value)]))
    erased = loader_images(folder, with_erasing)
    plain = loader_images(folder, T.from_torchvision(plain_tv))
    reference = torchvision_images(folder, plain_tv)
    area = 48 * 48
    rects = 0
    random_values: List[torch.Tensor] = []
    for k in range(erased.shape[0]):
        rect = erased_rectangle(erased[k], plain[k])
        if rect is None:
            continue
        rects += 1
        i, j, h, w = rect
        # torchvision's rectangle rule: area within scale (up to rounding of h and w), aspect
        # h / w within ratio (likewise).
        assert (h - 0.5) * (w - 0.5) <= 0.33 * area and (h + 0.5) * (w + 0.5) >= 0.02 * area, rect
        assert (h - 0.5) / (w + 0.5) <= 3.3 and (h + 0.5) / (w - 0.5) >= 0.3, rect
        region = erased[k][:, i : i + h, j : j + w]
        if value == "random":
            random_values.append(region.flatten())
            v = region
        else:
            v = torch.tensor(value, dtype=torch.float32).reshape(-1, 1, 1)
            assert torch.equal(region, v.expand_as(region))
        want = F.erase(reference[k], i, j, h, w, v)
        assert float((erased[k] - want).abs().max()) <= LEVEL / min(IMAGENET_STD) + EPS
    # p=1: every sample erased unless all 10 attempts failed (rare at 48x48).
    assert rects >= erased.shape[0] - 2
    if value == "random":
        pooled = torch.cat(random_values)
        assert pooled.numel() > 1000
        assert abs(float(pooled.mean())) < 0.1 and abs(float(pooled.std()) - 1.0) < 0.1


def test_random_erasing_before_normalize_fills_the_normalized_value(folder: Path) -> None:
    """Written between ToTensor and Normalize (v2: ToDtype, RandomErasing, Normalize), the fill
    goes through Normalize as in torchvision: (value - mean) / std in float32."""
    tv = v2.Compose(
        [
            v2.ToImage(),
            *eval_head(v2),
            v2.ToDtype(torch.float32, scale=True),
            v2.RandomErasing(p=1.0, value=[0.25, 0.5, 1.0]),
            v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
            v2.ToPureTensor(),
        ]
    )
    ours = T.from_torchvision(tv)
    assert [s["op"] for s in ours.to_spec()][-3:] == ["ToDtype", "RandomErasing", "Normalize"]
    erased = loader_images(folder, ours)
    # The same pipeline without the erasing (ToImage first: the resize is torch's on both).
    unerased = [t for t in tv.transforms if not isinstance(t, v2.RandomErasing)]
    plain = loader_images(folder, T.from_torchvision(v2.Compose(unerased)))
    fill = (torch.tensor([0.25, 0.5, 1.0]) - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD)
    rects = 0
    for k in range(erased.shape[0]):
        rect = erased_rectangle(erased[k], plain[k])
        if rect is None:
            continue
        rects += 1
        i, j, h, w = rect
        region = erased[k][:, i : i + h, j : j + w]
        assert torch.equal(region, fill.reshape(3, 1, 1).expand_as(region))
    assert rects >= erased.shape[0] - 2


def test_random_erasing_is_refused_with_uint8_output() -> None:
    pipeline = T.Compose([T.CenterCrop(8), T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD), T.RandomErasing()])
    with pytest.raises(ValueError, match="uint8"):
        T.check(pipeline, output="uint8")
    with pytest.raises(ValueError, match="'random'"):
        T.RandomErasing(value="noise")
    with pytest.raises(ValueError, match="scale"):
        T.RandomErasing(scale=(0.5, 1.5))


# ---------------------------------------------------------------- determinism


def test_random_compositions_and_erasing_are_identical_whatever_the_worker_count(folder: Path) -> None:
    ops = [
        T.RandomResizedCrop(40),
        T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomHorizontalFlip()], p=0.5),
        T.RandomChoice([T.RandomInvert(), T.Compose([T.RandomSolarize(128), T.RandomEqualize()])], p=[1, 2]),
        T.RandomOrder([T.RandomPosterize(3), T.RandomAutocontrast(), T.RandomHorizontalFlip()]),
        T.ToTensor(),
        T.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        T.RandomErasing(value="random"),
        T.RandomErasing(p=0.5, value=(1, 2, 3)),
    ]
    runs = [loader_images(folder, T.Compose(ops), workers=w, seed=11) for w in (0, 1, 2)]
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])
    plain = loader_images(folder, T.Compose([ops[0], *ops[4:6]]), workers=1, seed=11)
    assert not torch.equal(runs[0], plain)
