"""ferroloader.transforms: torchvision's names and arguments, and from_torchvision."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms as tvT
import torchvision.transforms.v2 as v2

from ferroloader import transforms as T

from conftest import IMAGENET_MEAN, IMAGENET_STD


def test_from_torchvision_train_and_eval() -> None:
    train = tvT.Compose(
        [
            tvT.RandomResizedCrop(224, scale=(0.25, 1.0)),
            tvT.RandomHorizontalFlip(p=0.3),
            tvT.ToTensor(),
            tvT.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )
    ours = T.from_torchvision(train)
    assert ours == T.Compose(
        [
            T.RandomResizedCrop([224, 224], scale=(0.25, 1.0)),
            T.RandomHorizontalFlip(0.3),
            T.ToTensor(),
            T.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )
    assert T.check(ours) == {"shape": (3, 224, 224), "dtype": "float32", "deferred_normalize": None}
    evaluation = T.from_torchvision(tvT.Compose([tvT.Resize(256), tvT.CenterCrop(224), tvT.PILToTensor()]))
    assert evaluation == T.Compose([T.Resize(256), T.CenterCrop([224, 224]), T.PILToTensor()])
    assert T.check(evaluation, output="uint8")["shape"] == (3, 224, 224)


def test_from_torchvision_v2() -> None:
    pipeline = v2.Compose(
        [
            v2.RandomResizedCrop(160),
            v2.RandomHorizontalFlip(),
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )
    ours = T.from_torchvision(pipeline)
    assert [type(t).__name__ for t in ours.transforms] == [
        "RandomResizedCrop",
        "RandomHorizontalFlip",
        "ToTensor",
        "Normalize",
    ]
    assert T.check(ours)["shape"] == (3, 160, 160)


def test_from_torchvision_names_what_it_cannot_convert() -> None:
    with pytest.raises(ValueError, match=r"transform #2 ColorJitter.*no ferroloader equivalent"):
        T.from_torchvision(tvT.Compose([tvT.RandomResizedCrop(8), tvT.RandomHorizontalFlip(), tvT.ColorJitter(0.4)]))
    with pytest.raises(ValueError, match=r"transform #0 Resize.*interpolation"):
        T.from_torchvision([tvT.Resize(8, interpolation=tvT.InterpolationMode.NEAREST)])
    with pytest.raises(ValueError, match=r"transform #1 .*Lambda"):
        T.from_torchvision(tvT.Compose([tvT.CenterCrop(8), tvT.Lambda(lambda x: x)]))
    with pytest.raises(ValueError, match="not a torchvision transform"):
        T.from_torchvision([object()])


def test_transform_specs_and_reprs() -> None:
    rrc = T.RandomResizedCrop(224)
    assert rrc.to_spec() == {"op": "RandomResizedCrop", "size": 224, "scale": [0.08, 1.0], "ratio": [0.75, 4.0 / 3.0]}
    assert T.Resize([256]).size == 256 and T.Resize((240, 320)).size == [240, 320]
    assert T.Normalize(0.5, [0.25]).mean == [0.5] * 3
    assert "RandomResizedCrop(size=224" in repr(T.Compose([rrc]))
    assert T.Resize(8, interpolation=tvT.InterpolationMode.BILINEAR).interpolation == "bilinear"
    with pytest.raises(ValueError, match="max_size"):
        T.Resize((8, 8), max_size=10)
