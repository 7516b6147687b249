"""A transformers image processor preprocessing the images (``processor(images,
return_tensors="pt")``): in a Hugging Face ``with_transform`` function, as the ViT fine-tuning
examples write it, and in a dataset class of one's own; read natively where the processor is
a torchvision pipeline (``ferroloader._imageprocessor``). The reference is DataLoader over the
same dataset: the same pixels, the floats within a few units in the last place (the processor
fuses its rescale into the normalization)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

import datasets
import pytest
import torch
from PIL import Image as PILImage
from torch.utils.data import DataLoader, Dataset

import ferroloader as fl

from test_hf_datasets import _decodable, _embedded  # noqa: E402
from test_hf_format import _native  # noqa: E402
from batches import assert_same  # noqa: E402

transformers = pytest.importorskip("transformers")
from transformers import ConvNextImageProcessor, DeiTImageProcessor, ViTImageProcessor  # noqa: E402

datasets.disable_progress_bars()

Batch = Dict[str, List[Any]]

#: The processor's floats against the loader's: its normalization subtracts ``mean * 255`` and
#: divides by ``std * 255``, torchvision's scales to [0, 1] first.
ULPS = 1e-6


def _mode(path: Path) -> str:
    with PILImage.open(path) as image:
        return image.mode


def _size(path: Path) -> Tuple[int, int]:
    with PILImage.open(path) as image:
        return image.size


def collate_fn(batch: List[Dict[str, Any]]) -> Dict[str, torch.Tensor]:
    """The ViT fine-tuning examples' ``collate_fn``."""
    return {
        "pixel_values": torch.stack([x["pixel_values"] for x in batch]),
        "labels": torch.tensor([x["labels"] for x in batch]),
    }


def _reason(dataset: Any, **kwargs: Any) -> str:
    with pytest.warns(UserWarning):
        loader = fl.Loader(dataset, **kwargs)
    assert loader.python_dataset_reason is not None
    return loader.python_dataset_reason


def _with_processor(processor: Any, convert: bool) -> Any:
    def transform(example_batch: Batch) -> Any:
        images = [x.convert("RGB") if convert else x for x in example_batch["image"]]
        inputs = processor(images, return_tensors="pt")
        inputs["labels"] = example_batch["label"]
        return inputs

    return transform


@pytest.mark.parametrize("convert", [True, False], ids=["converted", "as opened"])
def test_the_vit_examples_with_transform_equals_its_dataloader(convert: bool) -> None:
    files = _decodable()
    if not convert:
        # As opened, the processor takes each file's own mode: RGB files alone decode alike.
        files = [p for p in files if _mode(p) == "RGB"]
    dataset = _embedded(files).with_transform(_with_processor(ViTImageProcessor(), convert))
    got = list(_native(dataset, batch_size=5, collate_fn=collate_fn, num_workers=2))
    assert_same(got, list(DataLoader(dataset, batch_size=5, collate_fn=collate_fn)), atol=ULPS)
    assert got[0]["pixel_values"].shape[1:] == (3, 224, 224)


def test_an_image_of_another_mode_as_opened_is_an_error_naming_it() -> None:
    files = [p for p in _decodable() if _mode(p) != "RGB"][:1]
    rgb = [p for p in _decodable() if _mode(p) == "RGB"][:2]
    dataset = _embedded(rgb + files).with_transform(_with_processor(ViTImageProcessor(), False))
    with pytest.raises(Exception, match=rf"dataset\[2\] \({re.escape(files[0].name)}\)"):
        list(_native(dataset, batch_size=3, collate_fn=collate_fn))


class Folder(Dataset):  # type: ignore[type-arg]
    """A dataset class of one's own preprocessing with the processor it holds."""

    def __init__(self, files: List[Path], processor: Any, squeeze: bool) -> None:
        self.files, self.processor, self.squeeze = files, processor, squeeze

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, int]:
        with PILImage.open(self.files[i]) as opened:
            image = opened.convert("RGB")
        pixels = self.processor(images=image, return_tensors="pt")["pixel_values"]
        return (pixels.squeeze(0) if self.squeeze else pixels[0]), i % 3


@pytest.mark.parametrize(
    "processor",
    [
        ViTImageProcessor(size={"shortest_edge": 48}, resample=3, image_mean=0.5, image_std=0.25),
        ViTImageProcessor(size=40, do_normalize=False),
        ViTImageProcessor(size={"height": 30, "width": 52}),
        DeiTImageProcessor(size={"height": 40, "width": 37}, crop_size={"height": 32, "width": 32}),
    ],
    ids=["shortest edge, bicubic", "rescale alone", "height and width", "deit's center crop"],
)
@pytest.mark.parametrize("squeeze", [True, False], ids=["squeeze", "[0]"])
def test_a_dataset_class_holding_a_processor_equals_its_dataloader(processor: Any, squeeze: bool) -> None:
    files = _decodable()
    if processor.size.get("shortest_edge"):
        # It keeps each image's aspect: the files of the first one's size, to batch.
        size = _size(files[0])
        files = [p for p in files if _size(p) == size]
        assert len(files) >= 4
    dataset = Folder(files, processor, squeeze)
    assert_same(list(_native(dataset, batch_size=2)), list(DataLoader(dataset, batch_size=2)), atol=ULPS)


@pytest.mark.parametrize(
    "processor, why",
    [
        (ViTImageProcessor(size={"shortest_edge": 40}, do_center_crop=True, crop_size=32),
         "center crop of images of their own sizes, which it places at int"),
        (DeiTImageProcessor(size={"height": 40, "width": 35}, crop_size={"height": 32, "width": 32}),
         "center crop of 32 from 35, which it places at int"),
        (ConvNextImageProcessor(), "preprocesses its own way (_preprocess, resize)"),
        (ViTImageProcessor(resample=0), "resample=0"),
        (ViTImageProcessor(do_rescale=False), "do_rescale=False"),
        (ViTImageProcessor(size={"shortest_edge": 32, "longest_edge": 64}), "size="),
        (ViTImageProcessor(do_convert_rgb=True), "do_convert_rgb=True, which composites alpha"),
    ],
    ids=["center crop of any size", "center crop a pixel apart", "own class", "nearest", "no rescale", "longest edge", "converts to rgb"],
)
def test_a_processor_that_is_no_torchvision_pipeline_runs_in_python_with_why(processor: Any, why: str) -> None:
    files = _decodable()[:4]
    dataset = Folder(files, processor, True)
    assert why in _reason(dataset, batch_size=2)
    # And gives DataLoader's batches there.
    assert_same(list(fl.Loader(dataset, batch_size=1, python_dataset="allow")), list(DataLoader(dataset, batch_size=1)), atol=ULPS)


def test_calls_the_trace_cannot_follow_run_in_python_with_why() -> None:
    files = _decodable()[:4]
    processor = ViTImageProcessor()

    def resized(example_batch: Batch) -> Any:
        return processor([x.convert("RGB") for x in example_batch["image"]], size={"height": 32, "width": 32},
                         return_tensors="pt")

    def made_in_the_function(example_batch: Batch) -> Any:
        return ViTImageProcessor()(example_batch["image"], return_tensors="pt")

    def pixel_values_used(example_batch: Batch) -> Any:
        inputs = processor([x.convert("RGB") for x in example_batch["image"]], return_tensors="pt")
        inputs["pixel_values"] = inputs["pixel_values"].float()
        return inputs

    for function, why in [
        (resized, "arguments besides the images"),
        (made_in_the_function, "raises TypeError when traced"),
        (pixel_values_used, "pixel_values' .float"),
    ]:
        dataset = _embedded(files).with_transform(function)
        assert why in _reason(dataset, batch_size=2, collate_fn=lambda b: b), why


def test_the_processor_changed_after_the_loader_is_made_is_an_error_not_a_stale_pipeline() -> None:
    files = [p for p in _decodable() if _mode(p) == "RGB"][:4]
    processor = ViTImageProcessor(size={"height": 32, "width": 32})
    dataset = Folder(files, processor, True)
    loader = _native(dataset, batch_size=2)
    processor.size = {"height": 16, "width": 16}
    with pytest.raises(Exception, match="not the transform the loader converted"):
        list(loader)
