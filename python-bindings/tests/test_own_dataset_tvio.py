"""A training script's own Dataset class reading its images with torchvision.io (PyTorch's data
tutorial's ``read_image``, ``decode_image``, ``read_file``): read natively where each file
decodes as the native RGB decode does (JPEG, 8-bit PNG, WebP in mode RGB; RGB files in mode
UNCHANGED), the transform run on the uint8 tensor as torchvision runs it; any other file is an
error naming it, and anything else done with the tensor keeps the class in Python."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, List

import pandas as pd
import pytest
import torch
import torchvision
import torchvision.transforms as tv
import torchvision.transforms.v2 as v2
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision.io import ImageReadMode, decode_image, read_file, read_image

import ferroloader as fl
import ferroloader.torch as flt
from conftest import oriented_photos
from ferroloader._getitem import loader_opens

# torchvision 0.29 deprecates its decoders (for TorchCodec) with a warning per call.
pytestmark = pytest.mark.filterwarnings("ignore:.*TorchCodec:DeprecationWarning")

DECODE = Path(__file__).resolve().parents[2] / "target" / "fixtures" / "decode"
TO_FLOAT = tv.ConvertImageDtype(torch.float)
#: Crops and flips only: the same pixels on a tensor as on the PIL image, bit for bit.
CROP = v2.Compose([v2.CenterCrop(24), v2.ToDtype(torch.float32, scale=True), v2.Normalize([0.5] * 3, [0.25] * 3)])
#: torchvision resizes a tensor with its own antialiasing: within a level of Pillow's.
RESIZE = tv.Compose([tv.Resize(40), tv.CenterCrop(32), tv.ConvertImageDtype(torch.float)])
TRAIN = v2.Compose(
    [v2.RandomResizedCrop(32), v2.RandomHorizontalFlip(), v2.TrivialAugmentWide(),
     v2.ToDtype(torch.float32, scale=True), v2.RandomErasing(0.5)]
)


class Tutorial(Dataset):  # type: ignore[type-arg]
    """PyTorch's data tutorial's ``CustomImageDataset``, as it is written there."""

    def __init__(self, frame: pd.DataFrame, img_dir: Any, transform: Any = None, target_transform: Any = None) -> None:
        self.img_labels = frame
        self.img_dir = img_dir
        self.transform = transform
        self.target_transform = target_transform

    def __len__(self) -> int:
        return len(self.img_labels)

    def __getitem__(self, idx: int) -> Any:
        img_path = os.path.join(self.img_dir, self.img_labels.iloc[idx, 0])
        image = read_image(img_path)
        label = self.img_labels.iloc[idx, 1]
        if self.transform:
            image = self.transform(image)
        if self.target_transform:
            label = self.target_transform(label)
        return image, label


class DecodeRgb(Tutorial):
    """The module's function by attribute, mode as a string."""

    def __getitem__(self, idx: int) -> Any:
        path = os.path.join(self.img_dir, self.img_labels.iloc[idx, 0])
        return self.transform(torchvision.io.decode_image(path, mode="RGB")), int(self.img_labels.iloc[idx, 1])


class BytesThenDecode(Tutorial):
    """The file's bytes read first, decoded from memory; a dict sample."""

    def __getitem__(self, idx: int) -> Any:
        data = read_file(os.path.join(self.img_dir, self.img_labels.iloc[idx, 0]))
        image = decode_image(data, ImageReadMode.RGB)
        return {"image": self.transform(image), "label": int(self.img_labels.iloc[idx, 1])}


class JpegBytes(Tutorial):
    """The JPEG decoder alone, on the file's bytes (scripts chasing speed)."""

    def __getitem__(self, idx: int) -> Any:
        data = torchvision.io.read_file(os.path.join(self.img_dir, self.img_labels.iloc[idx, 0]))
        return self.transform(torchvision.io.decode_jpeg(data, mode=ImageReadMode.RGB)), 0


class OnCuda(Tutorial):
    def __getitem__(self, idx: int) -> Any:
        data = read_file(os.path.join(self.img_dir, self.img_labels.iloc[idx, 0]))
        return self.transform(torchvision.io.decode_jpeg(data, device="cuda")), 0


class ImportsInside(Tutorial):
    """torchvision.io imported in the method, as the module's attribute."""

    def __getitem__(self, idx: int) -> Any:
        import torchvision.io as tvio

        path = os.path.join(self.img_dir, self.img_labels.iloc[idx, 0])
        return self.transform(tvio.read_image(path, tvio.ImageReadMode.RGB)), int(self.img_labels.iloc[idx, 1])


class Upright(Tutorial):
    def __getitem__(self, idx: int) -> Any:
        path = os.path.join(self.img_dir, self.img_labels.iloc[idx, 0])
        return self.transform(read_image(path, ImageReadMode.RGB, apply_exif_orientation=True)), 0


def frame_of(paths: List[str]) -> pd.DataFrame:
    return pd.DataFrame({"file": paths, "label": [i % 3 for i in range(len(paths))]})


def files(*patterns: str) -> List[str]:
    found = sorted(str(p) for pattern in patterns for p in DECODE.glob(pattern) if "bad_" not in p.name)
    assert found, "the decode fixtures are missing: make fixtures"
    return found


def rgb_files(folder: Path) -> List[str]:
    """The folder's files Pillow opens as RGB (it holds a gray JPEG, which mode UNCHANGED
    decodes to one channel), relative to it."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*.jpg") if mode(p) == "RGB")


def mode(path: Any) -> str:
    with Image.open(path) as image:
        return image.mode


def native(dataset: Any, **kwargs: Any) -> fl.Loader:
    loader = fl.Loader(dataset, **kwargs)
    assert loader.python_dataset_reason is None, loader.python_dataset_reason
    return loader


def equal_batches(ours: Any, theirs: Any, levels: float = 0) -> None:
    """The same batches: images within ``levels`` 8-bit levels (uint8, or float in [0, 1]),
    the rest equal."""
    ours, theirs = list(ours), list(theirs)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        if isinstance(b, dict):
            a, b = [a["image"], a["label"]], [b["image"], b["label"]]
        assert a[0].dtype == b[0].dtype and a[0].shape == b[0].shape
        if levels:
            per_level = 1.0 if b[0].dtype == torch.uint8 else 1 / 255
            assert float((a[0].double() - b[0].double()).abs().max()) <= levels * per_level + 1e-6
        else:
            assert torch.equal(a[0], b[0])
        assert torch.equal(torch.as_tensor(a[1]), torch.as_tensor(b[1]))


def test_the_tutorials_class_is_read_natively(folder: Path) -> None:
    paths = rgb_files(folder)
    dataset = Tutorial(frame_of(paths), folder, CROP)
    equal_batches(native(dataset, batch_size=4, num_workers=2), DataLoader(dataset, batch_size=4))
    # v1 transforms on the tensor: torchvision's tensor resize, within a level of the native one.
    dataset = Tutorial(frame_of(paths), folder, RESIZE)
    equal_batches(native(dataset, batch_size=4), DataLoader(dataset, batch_size=4), levels=1)
    # No conversion: uint8 batches, as DataLoader collates them.
    dataset = Tutorial(frame_of(paths), folder, v2.CenterCrop(24))
    equal_batches(native(dataset, batch_size=4), DataLoader(dataset, batch_size=4))


@pytest.mark.parametrize("cls", [Tutorial, DecodeRgb, BytesThenDecode, ImportsInside, JpegBytes])
def test_the_decode_variety_bit_for_bit(cls: type) -> None:
    """Every sampling, progressive, restart-marker, tiny and odd-sized RGB JPEG in mode
    UNCHANGED; in mode RGB gray and CMYK JPEGs, 8-bit PNGs of every colour type (palette,
    alpha, gray, 1-bit) and WebP too: each sample as DataLoader hands it out."""
    rgb = [p for p in files("*.jpg") if "huge" not in p and mode(p) == "RGB"]
    more = files("jpeg_gray*.jpg", "jpeg_cmyk*.jpg", "jpeg_ycck*.jpg", "*.webp", "png_*.png")
    more = [p for p in more if "16" not in Path(p).name]
    if cls is JpegBytes:
        more = [p for p in more if p.endswith(".jpg")]
    for paths in ([rgb] if cls is Tutorial else [rgb, more]):
        # A crop larger than the tiny ones: padded alike.
        dataset = cls(frame_of(paths), "/", v2.Compose([v2.CenterCrop(64), TO_FLOAT]))
        equal_batches(native(dataset, batch_size=None, num_workers=2), DataLoader(dataset, batch_size=None))


@pytest.mark.parametrize(
    "name,why",
    [
        ("jpeg_gray.jpg", "opens in mode L, whose channels torchvision.io's mode UNCHANGED keeps"),
        ("png_rgba.png", "opens in mode RGBA"),
        ("png_rgb16.png", "is a 16-bit PNG"),
        ("bmp_rgb.bmp", "is BMP, which torchvision.io decodes otherwise"),
        ("gif_p.gif", "is GIF"),
    ],
)
def test_a_file_torchvision_decodes_otherwise_is_named(name: str, why: str) -> None:
    """DataLoader would hand the transform another tensor (one channel, alpha, uint16) or raise:
    the native loader says which file and why, in the sample's error."""
    paths = [str(DECODE / "jpeg_444_q95.jpg"), str(DECODE / name)]
    dataset = Tutorial(frame_of(paths), "/", v2.Compose([v2.Resize((8, 8)), TO_FLOAT]))
    with pytest.raises(OSError, match=rf"dataset\[1\]: TypeError: Tutorial.__getitem__ decodes '.*{name}' with torchvision.io, and it {why}"):
        list(native(dataset, batch_size=2))
    skipped = native(dataset, batch_size=2, on_error="skip")
    assert [len(b[1]) for b in skipped] == [1]


def test_a_file_the_jpeg_decoder_refuses_is_named() -> None:
    paths = [str(DECODE / "jpeg_444_q95.jpg"), str(DECODE / "png_rgb.png")]
    dataset = JpegBytes(frame_of(paths), "/", v2.Compose([v2.Resize((8, 8)), TO_FLOAT]))
    with pytest.raises(OSError, match=r"dataset\[1\]: TypeError: JpegBytes.__getitem__ decodes '.*png_rgb.png' with torchvision.io, and it is PNG, which torchvision.io.decode_jpeg refuses"):
        list(native(dataset, batch_size=2))


def test_mode_rgb_reads_what_unchanged_refuses() -> None:
    paths = files("jpeg_gray.jpg", "png_rgba.png", "png_p.png")
    dataset = DecodeRgb(frame_of(paths), "/", v2.Compose([v2.Resize((8, 8)), TO_FLOAT]))
    equal_batches(native(dataset, batch_size=3), DataLoader(dataset, batch_size=3), levels=1)


def test_a_leading_to_pil_image_makes_it_the_pil_pipeline(folder: Path) -> None:
    """Older scripts: ``ToPILImage()`` first, then PIL transforms: the RGB image again, bit
    for bit (Pillow's resize on both sides)."""
    pil = tv.Compose([tv.ToPILImage(), tv.Resize(40), tv.CenterCrop(32), tv.ToTensor(), tv.Normalize([0.5] * 3, [0.25] * 3)])
    paths = rgb_files(folder)
    dataset = Tutorial(frame_of(paths), folder, pil)
    equal_batches(native(dataset, batch_size=4, num_workers=2), DataLoader(dataset, batch_size=4))


def test_random_transforms_are_the_same_whatever_the_workers(folder: Path) -> None:
    paths = rgb_files(folder)
    dataset = Tutorial(frame_of(paths), folder, TRAIN)
    runs = [list(native(dataset, batch_size=4, num_workers=w, seed=3)) for w in (0, 1, 2)]
    for other in runs[1:]:
        equal_batches(other, runs[0])
    # The same draws as the same files listed, the transform after torchvision.io's uint8 tensor.
    listed = fl.Loader(
        [(str(folder / p), i % 3) for i, p in enumerate(paths)], transform=v2.Compose([v2.PILToTensor(), TRAIN]),
        batch_size=4, seed=3,
    )
    equal_batches(runs[0], listed)


def test_exif_orientation_applied_by_torchvision(tmp_path: Path) -> None:
    dataset = Upright(frame_of(oriented_photos(tmp_path)), tmp_path, v2.Compose([v2.CenterCrop(24), TO_FLOAT]))
    loader = native(dataset, batch_size=4)
    assert loader.exif_transpose
    equal_batches(loader, DataLoader(dataset, batch_size=4))


class AsFloat(Tutorial):
    def __getitem__(self, idx: int) -> Any:
        image = read_image(os.path.join(self.img_dir, self.img_labels.iloc[idx, 0])).float() / 255
        return self.transform(image), 0


class Gray(Tutorial):
    def __getitem__(self, idx: int) -> Any:
        return self.transform(read_image(os.path.join(self.img_dir, self.img_labels.iloc[idx, 0]), ImageReadMode.GRAY)), 0


@pytest.mark.parametrize(
    "cls,transform,why",
    [
        (AsFloat, CROP, "uses the decoded image tensor's .float"),
        (Gray, CROP, "decodes the image with torchvision.io in mode GRAY"),
        (OnCuda, CROP, "decodes with torchvision.io.decode_jpeg on cuda"),
        (Tutorial, tv.Compose([tv.CenterCrop(24), tv.ToTensor()]), "applies ToTensor to the tensor torchvision.io decodes"),
        (Tutorial, tv.Compose([tv.CenterCrop(24), tv.PILToTensor()]), "applies PILToTensor"),
        (Tutorial, tv.Compose([tv.CenterCrop(24), tv.ToPILImage(), tv.ToTensor()]), "applies ToPILImage"),
    ],
)
def test_anything_else_keeps_the_class_in_python(folder: Path, cls: type, transform: Any, why: str) -> None:
    paths = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.jpg"))
    with pytest.warns(UserWarning, match=why):
        loader = fl.Loader(cls(frame_of(paths), folder, transform), batch_size=4)
    assert why in str(loader.python_dataset_reason)


def test_an_imagefolder_reading_with_torchvision_io_stays_in_python(folder: Path) -> None:
    """Its files are listed once, not asked for one by one: no file's decode could be checked."""
    assert "decodes with torchvision.io" in str(loader_opens(read_image))
    dataset = torchvision.datasets.ImageFolder(str(folder), transform=CROP, loader=read_image)
    with pytest.warns(UserWarning, match="decodes with torchvision.io"):
        loader = fl.Loader(dataset, batch_size=4)
    equal_batches(loader, DataLoader(dataset, batch_size=4))


@pytest.mark.parametrize("cls", [Tutorial, JpegBytes])
def test_the_profile_of_dataloaders_run_splits_read_and_decode(folder: Path, cls: type) -> None:
    paths = rgb_files(folder)[:8]
    dataset = cls(frame_of(paths), folder, CROP)
    loader = DataLoader(dataset, batch_size=4)
    with flt.profile(loader) as pdl:
        got = list(pdl)
        profile = pdl.profile_dict()
    equal_batches(got, DataLoader(dataset, batch_size=4))
    spans = [s for p in profile["pipelines"] for s in p["spans"] if s.get("sample") == 3]
    ops = [s["op"] for s in spans]
    assert {"read", "decode", "CenterCrop", "ToDtype", "Normalize"} <= set(ops), ops
    by_op = {s["op"]: s for s in spans}
    assert by_op["read"]["end_ns"] <= by_op["decode"]["start_ns"] <= by_op["decode"]["end_ns"] <= by_op["CenterCrop"]["start_ns"]


def test_file_headers_read_as_pillow_opens_them(tmp_path: Path) -> None:
    """The per-file check reads a JPEG's frame header and a PNG's IHDR itself (Pillow's open
    costs tens of microseconds under the GIL): the format and mode Pillow opens each fixture
    in, from a path and from bytes, past large APP segments too."""
    from ferroloader._getitem import _header, _jpeg_frame

    # Segments breaking off stop the search (a large corrupt file is not read on to its end);
    # data ending inside an APP segment asks for more.
    assert _jpeg_frame(b"\xff\xd8" + bytes(100)) == (0, 0)
    assert _jpeg_frame(b"\xff\xd8\xff\xe1\x40\x00" + bytes(100)) is None

    big_app = tmp_path / "icc.jpg"
    Image.new("RGB", (9, 7), (1, 2, 3)).save(big_app, icc_profile=bytes(range(256)) * 80)
    assert big_app.stat().st_size > 20000
    paths = [p for p in DECODE.iterdir() if p.suffix not in (".rgb", ".rowfnv", ".json")] + [big_app]
    checked = 0
    for path in paths:
        try:
            with Image.open(path) as image:
                want = (image.format, image.mode)
        except Exception:
            continue
        assert _header(str(path))[:2] == want, path
        assert _header(path.read_bytes())[:2] == want, path
        checked += 1
    assert checked > 60
