"""Errors by kind: FileNotFoundError for missing files, TypeError/ValueError naming the argument,
DecodeError (an OSError) naming the file and the cause."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import ferroloader as fl
from ferroloader import transforms as T


def transform() -> T.Compose:
    return T.Compose([T.RandomResizedCrop(16), T.ToTensor()])


def test_missing_paths(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        fl.ImageFolder(tmp_path / "nope")
    assert info.value.filename == str(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="class folder"):
        fl.ImageFolder(tmp_path)
    (tmp_path / "empty_class").mkdir()
    with pytest.raises(FileNotFoundError, match="empty_class"):
        fl.ImageFolder(tmp_path)
    assert len(fl.ImageFolder(tmp_path, allow_empty=True)) == 0
    with pytest.raises(FileNotFoundError):
        fl.FileList(tmp_path / "missing.csv")


def test_missing_image_is_file_not_found(folder: Path, tmp_path: Path) -> None:
    listing = tmp_path / "list.csv"
    good = fl.ImageFolder(folder).samples[0][0]
    listing.write_text(f"{good},0\n{tmp_path / 'gone.jpg'},1\n")
    loader = fl.Loader(fl.FileList(listing), batch_size=2, num_workers=1, transform=transform())
    with pytest.raises(FileNotFoundError) as info:
        list(loader)
    assert info.value.filename == str(tmp_path / "gone.jpg")
    assert "sample 1" in str(info.value)


def test_bad_file_list(tmp_path: Path) -> None:
    listing = tmp_path / "list.csv"
    listing.write_text("a.jpg,0\nb.jpg,zero\n")
    with pytest.raises(ValueError, match=r"list.csv:2"):
        fl.FileList(listing)
    with pytest.raises(ValueError, match="delimiter"):
        fl.FileList(listing, delimiter=";;")


def test_decode_error_names_the_file_and_cause(corrupt_folder: Path) -> None:
    assert issubclass(fl.DecodeError, OSError)
    loader = fl.Loader(fl.ImageFolder(corrupt_folder), batch_size=2, num_workers=2, transform=transform())
    with pytest.raises(fl.DecodeError) as info:
        list(loader)
    err = info.value
    assert err.path == str(corrupt_folder / "a" / "1.jpg")
    assert str(corrupt_folder / "a" / "1.jpg") in str(err)
    assert err.reason == "truncated" and err.index == 1 and err.op == "decode"
    # The loader can run another epoch after an error; with the HTML file first, it is
    # reported as not an image.
    order = fl.Loader(
        fl.ImageFolder(corrupt_folder), batch_size=1, num_workers=1, transform=transform(), sampler=[5, 0]
    )
    with pytest.raises(fl.DecodeError, match="not a supported image") as info2:
        list(order)
    assert info2.value.reason == "unknown_format" and info2.value.path.endswith("2.jpg")


def test_replace_fills_a_failed_slot_with_the_next_sample_and_reports_the_failure(
    corrupt_folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def loader(**kw: Any) -> fl.Loader:
        return fl.Loader(fl.ImageFolder(corrupt_folder), batch_size=2, num_workers=2, transform=transform(), **kw)

    reference = loader(sampler=[0, 2, 2, 3, 4, 0])  # what the replacement makes, read directly
    want = [(x.clone(), y.clone()) for x, y in reference]
    replacing = loader(on_error="replace")
    with caplog.at_level("WARNING", logger="ferroloader"):
        it = iter(replacing)
        got = []
        for x, y in it:
            got.append((x.clone(), y.clone(), it.indices.tolist()))  # type: ignore[union-attr]
    # Sample 1 (truncated) is replaced by 2, sample 5 (not an image) by 0, wrapping around;
    # the batches keep their size, and each draws from its own slot's key.
    assert [g[2] for g in got] == [[0, 2], [2, 3], [4, 0]]
    assert all(torch.equal(y, v) for (_, y, _), (_, v) in zip(got, want))
    assert torch.equal(got[0][0][0], want[0][0][0])
    assert not torch.equal(got[0][0][1], got[1][0][0])  # sample 2 in 1's slot draws from 1's key
    assert [(i, Path(p).name) for i, p, _ in it.skipped] == [(1, "1.jpg"), (5, "2.jpg")]
    assert "truncated" in it.skipped[0][2]
    assert [r.getMessage().split(",")[0] for r in caplog.records] == ["Replaced sample (index 1", "Replaced sample (index 5"]
    # Past replace_retries failures in a row: raised, as timm raises.
    with pytest.raises(fl.DecodeError):
        list(loader(on_error="replace", replace_retries=0))
    with pytest.raises(ValueError, match="replace_retries"):
        loader(on_error="replace", replace_retries=-1)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_replace_in_a_dataset_run_in_python_takes_the_next_sample(
    num_workers: int, caplog: pytest.LogCaptureFixture
) -> None:
    class Tensors(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __init__(self, bad: bool) -> None:
            self.bad = bad

        def __len__(self) -> int:
            return 6

        def __getitem__(self, i: int) -> Any:
            noise = torch.rand(2)  # from the generator seeded for this slot
            if i in (1, 5):
                if self.bad:
                    raise OSError(f"bad file {i}")
                i = (i + 1) % 6  # what the replacement should be: the next sample, this seed
            return torch.full((2,), float(i)) + noise, i

    def loader(bad: bool = True, **kw: Any) -> fl.Loader:
        return fl.Loader(Tensors(bad), batch_size=2, num_workers=num_workers, python_dataset="allow", **kw)

    replacing = loader(on_error="replace")
    with caplog.at_level("WARNING", logger="ferroloader"):
        it = iter(replacing)
        got = [(x.clone(), y.clone(), it.indices.tolist()) for x, y in it]  # type: ignore[union-attr]
    assert [g[2] for g in got] == [[0, 2], [2, 3], [4, 0]]
    assert [g[1].tolist() for g in got] == [[0, 2], [2, 3], [4, 0]]
    # The replacement in slot 1 draws from sample 1's seed (afresh), not a copy of sample 2's.
    want = [x for x, _ in loader(bad=False)]
    assert all(torch.equal(x, w) for (x, _, _), w in zip(got, want))
    assert not torch.equal(got[0][0][1], got[1][0][0])
    assert [(i, why) for i, _, why in it.skipped] == [(1, "OSError: bad file 1"), (5, "OSError: bad file 5")]
    assert sum("Replaced sample (index 1" in r.getMessage() for r in caplog.records) == 1
    with pytest.raises(OSError, match="bad file"):
        list(loader(on_error="replace", replace_retries=0))


@pytest.mark.parametrize(
    ("kwargs", "error", "argument"),
    [
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"batch_size": "8"}, TypeError, "batch_size"),
        ({"batch_size": 2.0}, TypeError, "batch_size"),
        ({"num_workers": -1}, ValueError, "num_workers"),
        ({"num_workers": 5000}, ValueError, "num_workers"),
        ({"prefetch_batches": 2**64 - 1}, ValueError, "prefetch_batches"),
        ({"prefetch_batches": 10**9}, ValueError, "prefetch_batches"),
        ({"worker_init_fn": 3}, TypeError, "worker_init_fn"),
        ({"timeout": -1}, ValueError, "timeout"),
        ({"num_workers": 0, "prefetch_factor": 2}, ValueError, "prefetch_factor"),
        ({"num_workers": 0, "persistent_workers": True}, ValueError, "persistent_workers"),
        ({"seed": 1, "generator": torch.Generator()}, ValueError, "generator"),
        ({"batch_size": None, "drop_last": True}, ValueError, "batch_size"),
        ({"collate_fn": 3}, TypeError, "collate_fn"),
        ({"batch_transform": 3}, TypeError, "batch_transform"),
        ({"batch_sampler": [[0, 1]], "batch_size": 1}, TypeError, "batch_sampler"),
        ({"batch_sampler": [[0, 1]], "batch_size": 1, "shuffle": True}, ValueError, "batch_sampler"),
        ({"num_workers": -1}, ValueError, "num_workers"),
        ({"prefetch_batches": 0}, ValueError, "prefetch_batches"),
        ({"shuffle": "yes"}, TypeError, "shuffle"),
        ({"seed": -1}, ValueError, "seed"),
        ({"output": "float16"}, ValueError, "output"),
        ({"output": 32}, TypeError, "output"),
        ({"decoder": "pil"}, ValueError, "decoder"),
        ({"on_error": "ignore"}, ValueError, "on_error"),
        ({"profile": "all"}, ValueError, "profile"),
        ({"profile": 3}, TypeError, "profile"),
        ({"rank": 2, "world_size": 2}, ValueError, "rank"),
        ({"rank": 0}, ValueError, "rank"),
        ({"world_size": 2}, ValueError, "rank"),
        ({"rank": -1, "world_size": 2}, ValueError, "rank"),
        ({"world_size": 0, "rank": 0}, ValueError, "world_size"),
        ({"sampler": 5}, TypeError, "sampler"),
        ({"tensor_type": "jax"}, ValueError, "tensor_type"),
        ({"transform": "RandomResizedCrop"}, TypeError, "transform"),
        ({"transform": T.Compose([T.ToTensor(), T.RandomResizedCrop(8)])}, ValueError, "transform"),
        ({"transform": T.Compose([T.RandomResizedCrop(8), T.ToTensor(), T.RandomHorizontalFlip()])}, ValueError, "transform"),
        ({"transform": T.Compose([T.RandomResizedCrop(8), T.PILToTensor()]), "output": "float32"}, ValueError, "output"),
    ],
)
def test_bad_arguments_name_the_argument(folder: Path, kwargs: Any, error: type, argument: str) -> None:
    args = {"batch_size": 2, "num_workers": 1, "transform": transform()}
    args.update(kwargs)
    with pytest.raises(error, match=rf"^{argument}\b"):
        fl.Loader(fl.ImageFolder(folder), **args)


def test_bad_dataset_and_transform_arguments(folder: Path) -> None:
    with pytest.raises(TypeError, match="^dataset"):
        fl.Loader(str(folder), transform=transform())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="root"):
        fl.ImageFolder(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="RandomResizedCrop: size"):
        T.RandomResizedCrop("224")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="RandomResizedCrop: size"):
        T.RandomResizedCrop(0)
    with pytest.raises(ValueError, match="RandomResizedCrop: scale"):
        T.RandomResizedCrop(8, scale=(0.5, 0.1))
    with pytest.raises(ValueError, match="Resize: interpolation"):
        T.Resize(8, interpolation="nearest-exact")
    with pytest.raises(ValueError, match="Resize: antialias"):
        T.Resize(8, antialias=False)
    with pytest.raises(ValueError, match="Normalize: std"):
        T.Normalize([0.5] * 3, [0.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="Normalize: mean"):
        T.Normalize([0.5, 0.5], [1.0] * 3)
    with pytest.raises(ValueError, match="RandomHorizontalFlip: p"):
        T.RandomHorizontalFlip(1.5)
    with pytest.raises(TypeError, match=r"Compose: transforms\[1\]"):
        T.Compose([T.ToTensor(), "flip"])  # type: ignore[list-item]


def test_op_functions_map_errors(folder: Path) -> None:
    from ferroloader import _native

    with pytest.raises(fl.DecodeError, match="not a supported image") as info:
        _native.resized_crop(b"<html></html>", 0, 0, 1, 1, (1, 1))
    assert info.value.reason == "unknown_format" and info.value.index is None
    data = Path(fl.ImageFolder(folder).samples[0][0]).read_bytes()
    with pytest.raises(ValueError, match="does not fit"):
        _native.resized_crop(data, 0, 0, 10_000, 1, (1, 1))
    with pytest.raises(ValueError, match="^decoder"):
        _native.resized_crop(data, 0, 0, 1, 1, (1, 1), decoder="pil")


def test_a_truncated_file_under_load_truncated_images_says_the_flag_is_not_honoured(
    corrupt_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from PIL import ImageFile

    def first_error() -> fl.DecodeError:
        loader = fl.Loader(fl.ImageFolder(corrupt_folder), batch_size=1, num_workers=1, transform=transform(), sampler=[1])
        with pytest.raises(fl.DecodeError) as info:
            list(loader)
        assert info.value.reason == "truncated"
        return info.value

    assert not getattr(first_error(), "__notes__", None)
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    notes = getattr(first_error(), "__notes__", [])
    assert len(notes) == 1 and "LOAD_TRUNCATED_IMAGES is set" in notes[0] and "on_error='skip'" in notes[0]
