"""A Hugging Face ``datasets.Dataset`` given to the loader with ``transform=``: its ``Image()``
column read natively from the Arrow buffers. The reference for every batch is what a
DataLoader user runs today: a ``DataLoader`` over the same dataset with the same torchvision
transform applied to each decoded image (``dataset.with_transform``), as Hugging Face's own
image-classification examples write it."""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any, Dict, List, Optional

import datasets
import numpy as np
import pyarrow as pa
import pytest
import torch
import torchvision.transforms as tvT
from datasets import ClassLabel, Dataset, Features, Image, Value
from PIL import Image as PILImage
from torch.utils.data import DataLoader, Subset

import ferroloader as fl

from batches import assert_same  # noqa: E402

datasets.disable_progress_bars()

FIXTURES = Path(__file__).resolve().parents[2] / "target" / "fixtures" / "decode"

#: Deterministic, so every pixel can be compared with torchvision's.
EVAL = tvT.Compose(
    [tvT.Resize(40), tvT.CenterCrop(32), tvT.ToTensor(), tvT.Normalize([0.5, 0.4, 0.3], [0.2, 0.3, 0.25])]
)
TRAIN = tvT.Compose([tvT.RandomResizedCrop(32), tvT.RandomHorizontalFlip(), tvT.ToTensor()])


def _decodable() -> List[Path]:
    """The decode fixtures Pillow reads (every JPEG sampling, progressive, grayscale, CMYK,
    restart markers, PNG, GIF, BMP, WebP...), not the deliberately broken ones."""
    files = []
    for path in sorted(FIXTURES.iterdir()):
        if path.suffix == ".rgb" or path.name.startswith("bad_"):
            continue
        try:
            with PILImage.open(path) as image:
                image.convert("RGB")
        except Exception:
            continue
        files.append(path)
    assert len(files) > 20, "the decode fixtures are missing: make fixtures"
    return files


def _embedded(files: List[Path], labels: Optional[List[int]] = None) -> Dataset:
    """A dataset whose images are embedded bytes, as the Hub's are, with each file's name."""
    labels = list(range(len(files))) if labels is None else labels
    return Dataset.from_dict(
        {"image": [{"bytes": p.read_bytes(), "path": p.name} for p in files], "label": labels},
        features=Features({"image": Image(), "label": Value("int64")}),
    )


def _reference(dataset: Any, transform: Any, batch_size: int) -> List[Any]:
    """The batches of a DataLoader over ``dataset`` (a Hugging Face Dataset or a Subset of
    one) with ``transform`` on each decoded image."""

    def apply(batch: Dict[str, List[Any]]) -> Dict[str, List[Any]]:
        batch["image"] = [transform(image.convert("RGB")) for image in batch["image"]]
        return batch

    def collate(items: List[Dict[str, Any]]) -> Any:
        return torch.stack([i["image"] for i in items]), torch.tensor([i["label"] for i in items])

    inner = dataset.dataset if isinstance(dataset, Subset) else dataset
    transformed = inner.with_transform(apply)
    if isinstance(dataset, Subset):
        transformed = Subset(transformed, dataset.indices)
    return list(DataLoader(transformed, batch_size=batch_size, collate_fn=collate))


def test_embedded_images_equal_a_dataloader_over_the_dataset() -> None:
    dataset = _embedded(_decodable())
    loader = fl.Loader(dataset, transform=EVAL, batch_size=7, num_workers=2)
    assert_same(list(loader), _reference(dataset, EVAL, 7))


# datasets opens a multi-frame GIF by its path and leaves the file to the garbage collector.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_rows_stored_as_local_paths_are_read_from_their_files() -> None:
    files = _decodable()
    dataset = Dataset.from_dict(
        {"image": [str(p) for p in files], "label": list(range(len(files)))},
        features=Features({"image": Image(), "label": Value("int64")}),
    )
    assert dataset.data.table.column("image").chunks[0][0]["bytes"].as_py() is None
    loader = fl.Loader(dataset, transform=EVAL, batch_size=8, num_workers=2)
    assert_same(list(loader), _reference(dataset, EVAL, 8))


def test_row_selections_are_the_datasets_own() -> None:
    files = _decodable()
    dataset = _embedded(files)
    selections = {
        "shuffle+select": dataset.shuffle(seed=3).select(range(9)),
        "filter": dataset.filter(lambda row: row["label"] % 3 == 1),
        # Contiguous rows are a slice of the table (arrays with an offset), not an indices map.
        "contiguous": dataset.select(range(3, 11)),
        "shard": dataset.shard(num_shards=3, index=1, contiguous=True),
        "sliced twice": dataset.select(range(2, 20)).select(range(5, 12)),
        "train_test_split": dataset.train_test_split(test_size=0.3, seed=1)["test"],
        "subset": Subset(dataset.shuffle(seed=5), [4, 0, 9, 7]),
        "random_split": torch.utils.data.random_split(
            dataset, [0.5, 0.5], generator=torch.Generator().manual_seed(2)
        )[1],
    }
    for name, selected in selections.items():
        got = list(fl.Loader(selected, transform=EVAL, batch_size=5))
        assert_same(got, _reference(selected, EVAL, 5))
        labels = torch.cat([labels for _, labels in got]).tolist()
        rows = [selected[i]["label"] for i in range(len(selected))]
        assert labels == rows, name


def test_memory_mapped_shards_and_concatenations(tmp_path: Path) -> None:
    files = _decodable()
    dataset = _embedded(files)
    dataset.save_to_disk(str(tmp_path / "saved"), num_shards=3)
    mapped = datasets.load_from_disk(str(tmp_path / "saved"))
    assert len(mapped.cache_files) == 3
    assert mapped.data.table.column("image").num_chunks >= 3
    joined = datasets.concatenate_datasets([mapped.select(range(5)), dataset.shuffle(seed=9)])
    for case in (mapped, joined.shuffle(seed=4)):
        assert_same(list(fl.Loader(case, transform=EVAL, batch_size=6)), _reference(case, EVAL, 6))


def test_random_augmentations_give_the_same_batches_as_the_same_files_listed(tmp_path: Path) -> None:
    files = [p for p in _decodable() if p.suffix == ".jpg"]
    labels = [i % 4 for i in range(len(files))]
    dataset = Dataset.from_dict(
        {"image": [{"bytes": p.read_bytes(), "path": None} for p in files], "label": labels},
        features=Features({"image": Image(), "label": ClassLabel(num_classes=4)}),
    )
    listed = list(zip([str(p) for p in files], labels))
    want = list(fl.Loader(listed, transform=TRAIN, batch_size=4, shuffle=True, seed=11, num_workers=2))
    for workers in (0, 1, 3):
        got = list(fl.Loader(dataset, transform=TRAIN, batch_size=4, shuffle=True, seed=11, num_workers=workers))
        assert_same(got, want)


def test_columns_are_found_by_their_features() -> None:
    files = _decodable()[:6]
    rows = {
        "caption": ["x"] * 6,
        "img": [{"bytes": p.read_bytes(), "path": None} for p in files],
        "id": list(range(100, 106)),
        "labels": [5, 4, 3, 2, 1, 0],
    }
    dataset = Dataset.from_dict(
        rows,
        features=Features({"caption": Value("string"), "img": Image(), "id": Value("int64"), "labels": Value("int32")}),
    )
    _, labels = next(iter(fl.Loader(dataset, transform=EVAL, batch_size=6)))
    assert labels.tolist() == [5, 4, 3, 2, 1, 0]
    two_classes = dataset.cast_column("id", ClassLabel(num_classes=200)).cast_column("labels", ClassLabel(num_classes=6))
    _, labels = next(iter(fl.Loader(two_classes, transform=EVAL, batch_size=6)))
    assert labels.tolist() == [5, 4, 3, 2, 1, 0], "the ClassLabel named labels"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.remove_columns("label"), "no ClassLabel column"),
        (
            lambda d: d.cast_column("label", Value("string")).rename_column("label", "caption"),
            "no ClassLabel column (nor a 'label' or 'labels' column)",
        ),
        (
            lambda d: datasets.concatenate_datasets(
                [d, d.rename_column("image", "other").select_columns(["other"])], axis=1
            ),
            "several Image() columns",
        ),
        (lambda d: d.remove_columns("image"), "no Image() column"),
        (lambda d: d.cast_column("image", Image(mode="L")), "Image(mode='L')"),
        (lambda d: d.with_transform(lambda b: b), "set_transform"),
    ],
)
def test_what_cannot_be_read_natively_is_refused_with_the_reason(change: Any, message: str) -> None:
    dataset = _embedded(_decodable()[:4])
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        fl.Loader(change(dataset), transform=EVAL, batch_size=2)


def test_null_labels_and_remote_files_are_refused() -> None:
    files = _decodable()[:3]
    nulls = Dataset.from_dict(
        {"image": [{"bytes": p.read_bytes(), "path": None} for p in files], "label": [0, None, 1]},
        features=Features({"image": Image(), "label": Value("int64")}),
    )
    with pytest.raises(ValueError, match="1 null labels"):
        fl.Loader(nulls, transform=EVAL, batch_size=2)
    table = pa.table(
        {
            "image": pa.array(
                [{"bytes": files[0].read_bytes(), "path": None}, {"bytes": None, "path": "hf://datasets/x/y.jpg"}],
                type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
            ),
            "label": pa.array([0, 1], type=pa.int64()),
        }
    )
    remote = Dataset(
        datasets.table.InMemoryTable(table),
        info=datasets.DatasetInfo(features=Features({"image": Image(), "label": Value("int64")})),
    )
    with pytest.raises(ValueError, match="row 1 of column 'image' is a remote file"):
        fl.Loader(remote, transform=EVAL, batch_size=2)
    # Not selected, not refused.
    assert len(fl.Loader(remote.select([0]), transform=EVAL, batch_size=1)) == 1


def test_grayscale_images_come_out_with_one_channel_as_torchvision_makes_them() -> None:
    rng = np.random.default_rng(0)
    pngs = []
    for _ in range(10):
        buf = io.BytesIO()
        PILImage.fromarray(rng.integers(0, 256, (28, 28), dtype=np.uint8), mode="L").save(buf, "PNG")
        pngs.append(buf.getvalue())
    dataset = Dataset.from_dict(
        {"image": [{"bytes": b, "path": None} for b in pngs], "label": list(range(10))},
        features=Features({"image": Image(), "label": ClassLabel(num_classes=10)}),
    )
    transform = tvT.Compose([tvT.ToTensor(), tvT.Normalize([0.1307], [0.3081])])
    got = list(fl.Loader(dataset, transform=transform, batch_size=5))
    assert got[0][0].shape == (5, 1, 28, 28)

    def apply(batch: Dict[str, List[Any]]) -> Dict[str, List[Any]]:
        batch["image"] = [transform(image) for image in batch["image"]]
        return batch

    want = list(
        DataLoader(
            dataset.with_transform(apply),
            batch_size=5,
            collate_fn=lambda items: (torch.stack([i["image"] for i in items]), torch.tensor([i["label"] for i in items])),
        )
    )
    assert_same(got, want)


def truncated_row_three() -> Dataset:
    """Six JPEG rows (``photo{i}.jpg``), the split ``train``, row 3 cut to a third."""
    files = [p for p in _decodable() if p.suffix == ".jpg"][:6]
    payloads = [p.read_bytes() for p in files]
    payloads[3] = payloads[3][: len(payloads[3]) // 3]
    return Dataset.from_dict(
        {"image": [{"bytes": b, "path": f"photo{i}.jpg"} for i, b in enumerate(payloads)], "label": list(range(6))},
        features=Features({"image": Image(), "label": Value("int64")}),
        split=datasets.Split.TRAIN,
    )


def test_a_bad_row_is_named_and_can_be_skipped() -> None:
    dataset = truncated_row_three()
    with pytest.raises(Exception, match=r"train\[3\] \(photo3\.jpg\)"):
        list(fl.Loader(dataset, transform=EVAL, batch_size=2))
    iterator = iter(fl.Loader(dataset, transform=EVAL, batch_size=2, on_error="skip"))
    labels = torch.cat([labels for _, labels in iterator]).tolist()
    assert labels == [0, 1, 2, 4, 5]
    assert [(index, path) for index, path, _ in iterator.skipped] == [(3, "train[3] (photo3.jpg)")]


def test_the_loader_pickles_and_resumes_by_its_dataset(tmp_path: Path) -> None:
    files = _decodable()[:12]
    _embedded(files).save_to_disk(str(tmp_path / "saved"))
    dataset = datasets.load_from_disk(str(tmp_path / "saved")).shuffle(seed=1)
    loader = fl.Loader(dataset, transform=TRAIN, batch_size=3, shuffle=True, seed=4)
    copy = pickle.loads(pickle.dumps(loader))
    want = list(loader)
    assert_same(list(copy), want)

    first = fl.Loader(dataset, transform=TRAIN, batch_size=3, shuffle=True, seed=4)
    iterator = iter(first)
    next(iterator)
    state = first.state_dict()
    resumed = fl.Loader(dataset, transform=TRAIN, batch_size=3, shuffle=True, seed=4)
    resumed.load_state_dict(state)
    assert_same(list(resumed), want[1:])
    other = fl.Loader(dataset.select(range(11)), transform=TRAIN, batch_size=3)
    with pytest.raises(ValueError, match="dataset"):
        other.load_state_dict(state)


def test_without_a_transform_the_dataset_runs_in_python_as_with_dataloader() -> None:
    """Where its with_transform function does what the trace cannot follow (test_hf_format.py:
    the functions it does follow)."""
    dataset = _embedded(_decodable()[:8])

    def apply(batch: Dict[str, List[Any]]) -> Dict[str, List[Any]]:
        batch["pixel_values"] = [EVAL(PILImage.fromarray(np.asarray(image.convert("RGB")))) for image in batch.pop("image")]
        return batch

    def collate(items: List[Dict[str, Any]]) -> Dict[str, torch.Tensor]:
        return {
            "pixel_values": torch.stack([i["pixel_values"] for i in items]),
            "labels": torch.tensor([i["label"] for i in items]),
        }

    transformed = dataset.with_transform(apply)
    want = list(DataLoader(transformed, batch_size=4, collate_fn=collate))
    with pytest.warns(UserWarning, match="with_transform function makes its samples: it"):
        loader = fl.Loader(transformed, batch_size=4, collate_fn=collate, num_workers=2)
    got = list(loader)
    for a, b in zip(got, want):
        assert torch.equal(a["pixel_values"], b["pixel_values"]) and torch.equal(a["labels"], b["labels"])


@pytest.mark.parametrize("where", ["threads", "processes"])
def test_a_python_tail_gets_the_rows_bytes(where: str) -> None:
    dataset = _embedded(_decodable()[:6])
    shift = tvT.Lambda(lambda t: t + 1.0)
    transform = tvT.Compose([*EVAL.transforms, shift])
    loader = fl.Loader(
        dataset, transform=transform, batch_size=3, python_tail="allow", num_workers=2, python_tail_workers=where
    )
    got = list(loader)
    assert_same(got, _reference(dataset, transform, 3))


def test_the_native_table_holds_only_buffers_that_cannot_change() -> None:
    data = b"xxABCyy"
    column = ([data], np.array([0, 0xFFFF_FFFF], np.uint32), np.array([2, 0], np.uint64), np.array([3, 0], np.uint64))
    table = fl._native.EncodedTable(column, None, np.array([7, 8], np.int64), "t")
    assert table[0] == (b"ABC", 7) and table.describe(1) == "t[1]"
    with pytest.raises(OSError, match=r"t\[1\]: the row has no image"):
        table[1]
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(table)
    arrow = pa.array([b"ABC"]).buffers()[2]
    from_start = ([arrow], column[1], np.zeros(2, np.uint64), column[3])
    assert fl._native.EncodedTable(from_start, None, np.array([7, 8], np.int64))[0][0] == b"ABC"
    resizable = pa.allocate_buffer(8, resizable=True)
    for buffer, error in ((bytearray(data), TypeError), (resizable, TypeError), (memoryview(data), TypeError)):
        with pytest.raises(error, match="expected bytes or a pyarrow.Buffer"):
            fl._native.EncodedTable(([buffer], *column[1:]), None, np.array([7, 8], np.int64))
    past_the_end = ([data], column[1], np.array([5, 0], np.uint64), column[3])
    with pytest.raises(ValueError, match="row 0: bytes 5..5\\+3 of buffer 0, which holds 7 bytes"):
        fl._native.EncodedTable(past_the_end, None, np.array([7, 8], np.int64))


def test_an_imagefolder_loaded_with_load_dataset(folder: Path, tmp_path: Path) -> None:
    train = datasets.load_dataset("imagefolder", data_dir=str(folder), split="train", cache_dir=str(tmp_path))
    assert isinstance(train.features["label"], ClassLabel) and len(train) == 18
    loader = fl.Loader(train, transform=EVAL, batch_size=5, num_workers=2)
    assert_same(list(loader), _reference(train, EVAL, 5))


class _ApplyEval:
    """``with_transform``'s function (a class, so DataLoader's workers can pickle it)."""

    def __call__(self, batch: Dict[str, List[Any]]) -> Dict[str, List[Any]]:
        batch["image"] = [EVAL(image.convert("RGB")) for image in batch["image"]]
        return batch


def _collate_rows(items: List[Dict[str, Any]]) -> Any:
    return torch.stack([i["image"] for i in items]), torch.tensor([i["label"] for i in items])


def test_profiling_a_dataloader_over_the_dataset_times_decode_and_its_transform() -> None:
    import ferroloader.torch as flt

    dataset = _embedded(_decodable()[:12]).with_transform(_ApplyEval())
    for workers in (0, 2):
        plain = list(DataLoader(dataset, batch_size=4, num_workers=workers, collate_fn=_collate_rows))
        with flt.profile(DataLoader(dataset, batch_size=4, num_workers=workers, collate_fn=_collate_rows)) as pdl:
            profiled = list(pdl)
        assert_same(profiled, plain)
        (pipeline,) = pdl.profile_dict()["pipelines"]
        spans = [s for s in pipeline["spans"] if "sample" in s]
        for sample in range(12):
            ops = [s["op"] for s in sorted(spans, key=lambda s: s["start_ns"]) if s["sample"] == sample]
            assert ops == ["process", "decode", "_ApplyEval"], (workers, sample, ops)
        assert "decode" in pipeline["meta"]["instrumented"]


def test_a_dataset_run_in_python_is_profiled_in_its_steps() -> None:
    dataset = _embedded(_decodable()[:8]).with_transform(_ApplyEval())
    loader = fl.Loader(
        dataset, batch_size=4, collate_fn=_collate_rows, num_workers=2, profile="spans", python_dataset="allow"
    )
    got = list(loader)
    assert_same(got, list(DataLoader(dataset, batch_size=4, collate_fn=_collate_rows)))
    summary = str(loader.profile().summary())
    assert "decode" in summary and "_ApplyEval" in summary and "__getitem__" not in summary


def test_a_dict_of_splits_is_refused_naming_them() -> None:
    dataset = _embedded(_decodable()[:2])
    splits = datasets.DatasetDict({"train": dataset, "validation": dataset})
    for transform in (EVAL, None):
        with pytest.raises(TypeError, match=r"splits \['train', 'validation'\]; pass one of them"):
            fl.Loader(splits, transform=transform, batch_size=2)


def test_a_streaming_dataset_runs_in_python_and_is_refused_natively() -> None:
    stream = _embedded(_decodable()[:4]).to_iterable_dataset()
    with pytest.raises(TypeError, match="streaming datasets.IterableDataset"):
        fl.Loader(stream, transform=EVAL, batch_size=2)

    def apply(row: Dict[str, Any]) -> Dict[str, Any]:
        return {"image": EVAL(row["image"].convert("RGB")), "label": row["label"]}

    with pytest.warns(UserWarning, match="IterableDataset"):
        loader = fl.Loader(stream.map(apply), batch_size=2, num_workers=0, collate_fn=_collate_rows)
    assert_same(list(loader), list(DataLoader(stream.map(apply), batch_size=2, collate_fn=_collate_rows)))


def test_a_parquet_file_of_image_bytes(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    files = _decodable()
    rows = pa.table(
        {
            "image": [{"bytes": p.read_bytes(), "path": p.name} for p in files],
            "label": list(range(len(files))),
        }
    )
    pq.write_table(rows, tmp_path / "train.parquet", row_group_size=7)
    loaded = datasets.load_dataset(
        "parquet", data_files=str(tmp_path / "train.parquet"), split="train", cache_dir=str(tmp_path / "cache")
    )
    with pytest.raises(ValueError, match=r"no Image\(\) column .*cast_column"):
        fl.Loader(loaded, transform=EVAL, batch_size=5)
    dataset = loaded.cast_column("image", Image())
    assert dataset.data.table.column("image").num_chunks > 1
    assert_same(list(fl.Loader(dataset, transform=EVAL, batch_size=5)), _reference(dataset, EVAL, 5))


def _oriented_jpegs(count: int) -> List[bytes]:
    """JPEGs of odd sizes, each with an EXIF Orientation of 1 to 8 (cycling), some none."""
    rng = np.random.default_rng(5)
    out = []
    for i in range(count):
        buf = io.BytesIO()
        image = PILImage.fromarray(rng.integers(0, 256, (23 + i, 37, 3), dtype=np.uint8))
        if i % 9 == 8:
            image.save(buf, "JPEG", quality=90)
        else:
            exif = PILImage.Exif()
            exif[0x0112] = i % 9 + 1
            image.save(buf, "JPEG", quality=90, exif=exif.tobytes())
        out.append(buf.getvalue())
    return out


def test_images_are_turned_upright_as_datasets_decodes_them() -> None:
    payloads = _oriented_jpegs(18)
    dataset = Dataset.from_dict(
        {"image": [{"bytes": b, "path": None} for b in payloads], "label": list(range(18))},
        features=Features({"image": Image(), "label": Value("int64")}),
    )
    to_tensor = tvT.Compose([tvT.PILToTensor()])
    for i in range(18):
        # datasets' own decode transposes: a non-square image comes out with the axes swapped.
        upright = to_tensor(dataset[i]["image"].convert("RGB"))
        got, _ = fl.Loader(dataset.select([i]), transform=to_tensor, batch_size=1, output="uint8").__iter__().__next__()
        assert torch.equal(got[0], upright), i
    transform = tvT.Compose([tvT.Resize(30), tvT.CenterCrop(20), tvT.ToTensor()])
    loader = fl.Loader(dataset, transform=transform, batch_size=6, num_workers=2)
    assert loader.exif_transpose
    assert_same(list(loader), _reference(dataset, transform, 6))
    # As stored, when asked.
    stored = fl.Loader(dataset.select([5]), transform=to_tensor, batch_size=1, output="uint8", exif_transpose=False)
    raw = to_tensor(PILImage.open(io.BytesIO(payloads[5])).convert("RGB"))
    assert torch.equal(next(iter(stored))[0][0], raw)


def test_a_collate_fn_for_dicts_gets_a_note_naming_the_tuples() -> None:
    """Hugging Face's image-classification example's collate_fn, kept when the transform moves
    to the loader: it indexes dicts; the error it raises says what the samples are."""

    def collate_fn(examples: List[Any]) -> Dict[str, Any]:
        pixel_values = torch.stack([example["pixel_values"] for example in examples])
        return {"pixel_values": pixel_values, "labels": torch.tensor([example["label"] for example in examples])}

    dataset = _embedded(_decodable()[:4])
    with pytest.raises(TypeError) as info:
        next(iter(fl.Loader(dataset, transform=EVAL, batch_size=2, collate_fn=collate_fn)))
    notes = getattr(info.value, "__notes__", [])
    assert len(notes) == 1 and "(image, target) samples" in notes[0] and "batch_transform" in notes[0]
    loader = fl.Loader(
        dataset, transform=EVAL, batch_size=2,
        batch_transform=lambda images, labels: {"pixel_values": images, "labels": labels},
    )
    assert set(next(iter(loader))) == {"pixel_values", "labels"}
