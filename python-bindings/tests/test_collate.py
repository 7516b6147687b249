"""A ``collate_fn`` that stacks the samples' images gets the batch the loader made, not a copy
of it (``ferroloader._collate``); any other stack is torch's. The batches equal DataLoader's
over the same dataset and function either way."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import pytest
import torch
import torchvision
import torchvision.transforms as tvT
from torch import stack
from torch.utils.data import DataLoader

import ferroloader as fl
from ferroloader._collate import Collate

from batches import same  # noqa: E402

TRANSFORM = tvT.Compose([tvT.Resize(20), tvT.CenterCrop(16), tvT.ToTensor()])

Sample = Tuple[torch.Tensor, int]


def by_module(samples: List[Sample]) -> Dict[str, torch.Tensor]:
    return {"pixel_values": torch.stack([s[0] for s in samples]), "labels": torch.tensor([s[1] for s in samples])}


def by_name(samples: List[Sample]) -> Tuple[torch.Tensor, torch.Tensor]:
    return stack([image for image, _ in samples]), torch.tensor([label for _, label in samples])


def _closure() -> Callable[[List[Sample]], Any]:
    th = torch

    def collate(samples: List[Sample]) -> Any:
        return th.stack([s[0] for s in samples], dim=0), [s[1] for s in samples]

    return collate


def imports_inside(samples: List[Sample]) -> Any:
    from torch import stack as stacked

    import torch as th

    return stacked([s[0] for s in samples]), th.tensor([s[1] for s in samples])


def reversed_order(samples: List[Sample]) -> torch.Tensor:
    return torch.stack([s[0] for s in samples[::-1]])


def along_channels(samples: List[Sample]) -> torch.Tensor:
    return torch.stack([s[0] for s in samples], 1)


def all_but_one(samples: List[Sample]) -> torch.Tensor:
    return torch.stack([s[0] for s in samples[1:]])


def _images(batch: Any) -> torch.Tensor:
    return batch["pixel_values"] if isinstance(batch, dict) else batch[0] if isinstance(batch, tuple) else batch


@pytest.mark.parametrize(
    "collate_fn", [by_module, by_name, _closure(), imports_inside], ids=["torch.stack", "stack", "closure", "import"]
)
def test_a_stack_of_the_batchs_images_is_the_batch_itself(folder: Path, collate_fn: Callable[..., Any]) -> None:
    dataset = torchvision.datasets.ImageFolder(str(folder), transform=TRANSFORM)
    held = list(fl.Loader(dataset, batch_size=5, collate_fn=collate_fn, num_workers=2))
    # Every batch kept till the end: none is refilled while held.
    assert same(held, list(DataLoader(dataset, batch_size=5, collate_fn=collate_fn)))

    def and_first_view(samples: List[Sample]) -> Tuple[Any, torch.Tensor]:
        return collate_fn(samples), samples[0][0]

    for batch, first in fl.Loader(dataset, batch_size=5, collate_fn=and_first_view, num_workers=2):
        assert _images(batch).data_ptr() == first.data_ptr()  # no copy: the views' own memory


@pytest.mark.parametrize("collate_fn", [reversed_order, along_channels, all_but_one])
def test_any_other_stack_is_torchs(folder: Path, collate_fn: Callable[..., Any]) -> None:
    dataset = torchvision.datasets.ImageFolder(str(folder), transform=TRANSFORM)
    got = list(fl.Loader(dataset, batch_size=5, collate_fn=collate_fn, num_workers=2))
    assert same(got, list(DataLoader(dataset, batch_size=5, collate_fn=collate_fn)))


def test_the_users_function_and_torch_are_left_as_they_are() -> None:
    views = [torch.zeros(2), torch.ones(2)]
    batch = torch.stack(views)
    collate = Collate(by_module)
    out = collate([(v, 0) for v in views], views, batch)
    assert out["pixel_values"] is batch
    assert by_module.__globals__["torch"] is torch and torch.stack is stack
    # Outside a batch's call, and for a function that names no stack, nothing stands in.
    again = by_module([(v, 0) for v in views])["pixel_values"]
    assert again is not batch and torch.equal(again, batch)
    assert Collate(torch.utils.data.default_collate)._remade is None
    assert Collate(lambda samples: samples)._remade is None


def test_transformers_default_collators_stack_no_copy() -> None:
    from transformers import DefaultDataCollator, default_data_collator

    views = [torch.full((3, 2, 2), float(i)) for i in range(3)]
    batch = torch.stack(views)
    samples = [{"pixel_values": v, "label": i} for i, v in enumerate(views)]
    for collator in (DefaultDataCollator(), default_data_collator):
        out = Collate(collator)(samples, views, batch)
        assert out["pixel_values"] is batch and out["labels"].tolist() == [0, 1, 2]
        assert same(out, collator(samples))
    assert Collate(DefaultDataCollator(return_tensors="np"))._remade is None
