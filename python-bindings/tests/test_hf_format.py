"""A Hugging Face ``datasets.Dataset`` with a format transform (``with_transform``,
``set_transform``) given to the loader with no ``transform=``, as Hugging Face's
image-classification scripts without the Trainer hand it to a DataLoader: read natively where
the function applies a torchvision transform to each row's image (``ferroloader._hfformat``).
The reference for every batch is that DataLoader, the same dataset and ``collate_fn``."""

from __future__ import annotations

import pickle
import warnings
from typing import Any, Callable, Dict, List

import datasets
import numpy as np
import pytest
import torch
from datasets import Dataset, Features, Image, Value
from torch.utils.data import DataLoader, Subset

import ferroloader as fl
from ferroloader._hfformat import UnkeptImage

from test_hf_datasets import EVAL, TRAIN, _decodable, _embedded, _oriented_jpegs, truncated_row_three  # noqa: E402
from batches import assert_same  # noqa: E402

datasets.disable_progress_bars()

Batch = Dict[str, List[Any]]


def _pixel_values(transform: Any) -> Callable[[Batch], Batch]:
    """``preprocess_train`` of transformers' run_image_classification_no_trainer.py."""

    def preprocess(example_batch: Batch) -> Batch:
        example_batch["pixel_values"] = [transform(image.convert("RGB")) for image in example_batch["image"]]
        return example_batch

    return preprocess


def _tutorial(examples: Batch) -> Batch:
    """transformers' image-classification tutorial's ``transforms``: the image column dropped."""
    examples["pixel_values"] = [EVAL(img.convert("RGB")) for img in examples["image"]]
    del examples["image"]
    return examples


def collate_fn(examples: List[Dict[str, Any]]) -> Dict[str, torch.Tensor]:
    """The no-Trainer script's ``collate_fn``."""
    pixel_values = torch.stack([example["pixel_values"] for example in examples])
    labels = torch.tensor([example["label"] for example in examples])
    return {"pixel_values": pixel_values, "labels": labels}


def _native(dataset: Any, **kwargs: Any) -> fl.Loader:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "runs in Python" warning
        loader = fl.Loader(dataset, **kwargs)
    assert loader.python_dataset_reason is None
    return loader


def test_the_no_trainer_scripts_dataset_and_collate_fn_equal_its_dataloader() -> None:
    dataset = _embedded(_decodable()).with_transform(_pixel_values(EVAL))
    loader = _native(dataset, batch_size=7, collate_fn=collate_fn, num_workers=2)
    assert_same(list(loader), list(DataLoader(dataset, batch_size=7, collate_fn=collate_fn)))


def test_the_tutorials_dataset_collates_as_dataloader_does_by_default() -> None:
    dataset = _embedded(_decodable()[:12])
    dataset.set_transform(_tutorial)
    got = list(_native(dataset, batch_size=5))
    assert set(got[0]) == {"label", "pixel_values"}
    assert_same(got, list(DataLoader(dataset, batch_size=5)))
    from transformers import DefaultDataCollator

    collator = DefaultDataCollator()
    got = list(_native(dataset, batch_size=5, collate_fn=collator))
    assert set(got[0]) == {"labels", "pixel_values"}
    assert_same(got, list(DataLoader(dataset, batch_size=5, collate_fn=collator)))


def test_the_functions_columns_and_the_columns_it_passes_on() -> None:
    files = _decodable()[:9]
    dataset = Dataset.from_dict(
        {
            "file": [p.name for p in files],
            "image": [{"bytes": p.read_bytes(), "path": None} for p in files],
            "label": list(range(9)),
            "score": [i / 4 for i in range(9)],
        },
        features=Features({"file": Value("string"), "image": Image(), "label": Value("int64"), "score": Value("float32")}),
    )

    def pop_image(batch: Batch) -> Batch:
        batch["pixel_values"] = [EVAL(image.convert("RGB")) for image in batch.pop("image")]
        return batch

    for made in (dataset.with_transform(pop_image), dataset.with_transform(pop_image, columns=["image", "score"])):
        got = list(_native(made, batch_size=4, num_workers=2))
        assert_same(got, list(DataLoader(made, batch_size=4)))
    assert set(got[0]) == {"score", "pixel_values"}


def test_random_transforms_draw_per_sample_as_the_transform_given_to_the_loader() -> None:
    plain = _embedded(_decodable()[:16])
    dataset = plain.with_transform(_pixel_values(TRAIN))
    runs = [
        list(_native(dataset, batch_size=4, collate_fn=collate_fn, num_workers=workers, seed=3, shuffle=True))
        for workers in (0, 1, 2)
    ]
    assert_same(runs[0], runs[1])
    assert_same(runs[0], runs[2])
    given = list(fl.Loader(plain, transform=TRAIN, batch_size=4, num_workers=2, seed=3, shuffle=True))
    for batch, (images, labels) in zip(runs[0], given):
        assert torch.equal(batch["pixel_values"], images) and torch.equal(batch["labels"], labels)


def test_a_subset_and_the_images_turned_upright_as_datasets_turns_them() -> None:
    payloads = _oriented_jpegs(18)
    dataset = Dataset.from_dict(
        {"image": [{"bytes": b, "path": None} for b in payloads], "label": list(range(18))},
        features=Features({"image": Image(), "label": Value("int64")}),
    ).with_transform(_pixel_values(EVAL))
    assert_same(
        list(_native(dataset, batch_size=6, collate_fn=collate_fn)),
        list(DataLoader(dataset, batch_size=6, collate_fn=collate_fn)),
    )
    part = Subset(dataset, [17, 3, 8, 0, 11])
    assert_same(
        list(_native(part, batch_size=2, collate_fn=collate_fn)),
        list(DataLoader(part, batch_size=2, collate_fn=collate_fn)),
    )


def test_a_bad_row_is_named_and_can_be_skipped() -> None:
    dataset = truncated_row_three().with_transform(_pixel_values(EVAL))
    # Named as the row is with transform= given: its split, its position and its file.
    with pytest.raises(Exception, match=r"train\[3\] \(photo3\.jpg\): cannot decode image .*truncated"):
        list(_native(dataset, batch_size=2, collate_fn=collate_fn))
    iterator = iter(_native(dataset, batch_size=2, collate_fn=collate_fn, on_error="skip"))
    assert torch.cat([batch["labels"] for batch in iterator]).tolist() == [0, 1, 2, 4, 5]
    assert [(index, path) for index, path, _ in iterator.skipped] == [(3, "train[3] (photo3.jpg)")]
    # A Subset's row keeps the dataset's own position in its name.
    part = Subset(dataset, [5, 3, 0])
    with pytest.raises(Exception, match=r"train\[3\] \(photo3\.jpg\): cannot decode image"):
        list(_native(part, batch_size=3, collate_fn=collate_fn))


def _reads_the_image(examples: List[Dict[str, Any]]) -> Dict[str, Any]:
    return {"pixel_values": torch.stack([e["pixel_values"] for e in examples]), "sizes": [e["image"].size for e in examples]}


def _hands_on(examples: List[Dict[str, Any]]) -> Dict[str, Any]:
    return {k: [e[k] for e in examples] for k in examples[0]}


def _numpy_of_image(batch: Batch) -> Batch:
    batch["pixel_values"] = [EVAL(image.convert("RGB")) for image in batch["image"]]
    batch["mean"] = [np.asarray(image).mean() for image in batch["image"]]
    return batch


@pytest.mark.parametrize(
    ("function", "kwargs", "message"),
    [
        (_pixel_values(EVAL), {"collate_fn": _reads_the_image}, "the collate_fn uses the 'image' column's decoded images"),
        (_pixel_values(EVAL), {"collate_fn": _hands_on}, "the collate_fn's batch holds the 'image' column's decoded images"),
        (_pixel_values(EVAL), {}, "keep the 'image' column's decoded images, which DataLoader's default collate_fn"),
        (_pixel_values(EVAL), {"batch_size": None}, r"handed out as they are \(batch_size=None\)"),
        (_numpy_of_image, {"collate_fn": collate_fn}, "with_transform function makes its samples: it"),
    ],
)
def test_what_needs_the_decoded_image_runs_in_python_with_the_reason(
    function: Callable[[Batch], Batch], kwargs: Dict[str, Any], message: str
) -> None:
    dataset = _embedded(_decodable()[:6]).with_transform(function)
    args: Dict[str, Any] = {"batch_size": 3, **kwargs}
    with pytest.warns(UserWarning, match=message):
        loader = fl.Loader(dataset, num_workers=1, **args)
    assert loader.python_dataset_reason is not None
    if "collate_fn" in kwargs and function is not _numpy_of_image:
        got, want = list(loader), list(DataLoader(dataset, **args))
        assert len(got) == len(want) == 2
        images = [torch.stack(list(batch["pixel_values"])) for batch in (got[0], want[0])]
        assert torch.equal(*images)


def test_output_all_columns_runs_in_python() -> None:
    dataset = _embedded(_decodable()[:4]).with_format("custom", columns=["image"], output_all_columns=True,
                                                      transform=_pixel_values(EVAL))
    with pytest.warns(UserWarning, match="output_all_columns=True"):
        fl.Loader(dataset, batch_size=2, collate_fn=collate_fn, num_workers=1)


def test_the_unkept_image_says_what_to_do_wherever_it_is_used() -> None:
    unkept = UnkeptImage("image")
    assert repr(unkept) == "<'image': not decoded again by ferroloader>"
    assert pickle.loads(pickle.dumps(unkept)) == unkept
    with pytest.raises(TypeError, match=r"batch.pop\('image'\)"):
        unkept.size


def test_a_column_not_decoded_is_handed_to_the_function_as_its_bytes() -> None:
    """``Image(decode=False)``: the function opens each row's bytes itself (not turned upright,
    as datasets would not turn them)."""
    import io

    from PIL import Image as PILImage

    payloads = _oriented_jpegs(9)
    dataset = Dataset.from_dict(
        {"image": [{"bytes": b, "path": None} for b in payloads], "label": list(range(9)), "note": [None] * 9},
        features=Features({"image": Image(decode=False), "label": Value("int64"), "note": Value("string")}),
    )

    def opens(batch: Batch) -> Batch:
        batch["pixel_values"] = [EVAL(PILImage.open(io.BytesIO(cell["bytes"])).convert("RGB")) for cell in batch.pop("image")]
        return batch

    def notes(examples: List[Dict[str, Any]]) -> Dict[str, Any]:
        return {"pixel_values": torch.stack([e["pixel_values"] for e in examples]), "notes": [e["note"] for e in examples]}

    made = dataset.with_transform(opens)
    got = list(_native(made, batch_size=4, collate_fn=notes))
    assert_same(got, list(DataLoader(made, batch_size=4, collate_fn=notes)))
    assert got[0]["notes"] == [None] * 4


def test_a_subset_whose_first_row_is_made_otherwise_runs_in_python() -> None:
    def unlike_row_three(batch: Batch) -> Batch:
        if batch["label"][0] == 3:
            batch["mean"] = [np.asarray(image).mean() for image in batch["image"]]
        batch["pixel_values"] = [EVAL(image.convert("RGB")) for image in batch.pop("image")]
        return batch

    dataset = _embedded(_decodable()[:6]).with_transform(unlike_row_three)
    assert _native(dataset, batch_size=2) is not None  # row 0 traces
    with pytest.warns(UserWarning, match=r"uses the opened image's \.__array"):
        loader = fl.Loader(Subset(dataset, [3, 0, 1]), batch_size=2, num_workers=1)
    assert loader.python_dataset_reason is not None
