"""EXIF orientation: ``Loader(..., exif_transpose=True)`` against ``PIL.ImageOps.exif_transpose``
(what Hugging Face ``datasets`` applies on decode) followed by the same torchvision ops.

Every file format the native decoders take that carries an orientation (JPEG 4:2:0, 4:4:4
progressive, 4:2:2 with a big-endian EXIF block, PNG, WebP; TIFF, which Pillow transposes
itself on load), each orientation 1 to 8, odd sizes so a swapped width and height shows.
Outputs equal torchvision's bit for bit (``torch.equal``); where the pipeline resamples, the
transposition is also checked on its own against the same pipeline run on the transposed pixels
saved losslessly.
"""

from __future__ import annotations

import io
import struct
import warnings
import zlib
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import numpy as np
import pytest
import torch
import torchvision.transforms as tvT
import torchvision.transforms.functional as F
from PIL import Image, ImageOps

import ferroloader as fl
from ferroloader import _native
from ferroloader import transforms as T

from conftest import natural_image

ORIENTATIONS = range(1, 9)


def exif_block(k: int, big_endian: bool = False) -> bytes:
    """An APP1-ready EXIF block with IFD0 holding Orientation ``k`` (Pillow writes "II" only)."""
    if not big_endian:
        exif = Image.Exif()
        exif[0x0112] = k
        return exif.tobytes()
    ifd = struct.pack(">2sHLH", b"MM", 42, 8, 1) + struct.pack(">HHLHH", 274, 3, 1, k, 0)
    return b"Exif\0\0" + ifd + struct.pack(">L", 0)


def _save(pixels: np.ndarray, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, fmt, **kw)
    return buf.getvalue()


#: name -> encoder of (pixels, orientation) into a file's bytes.
ENCODERS: Dict[str, Callable[[np.ndarray, int], bytes]] = {
    "jpeg420": lambda p, k: _save(p, "JPEG", quality=90, subsampling=2, exif=exif_block(k)),
    "jpeg444prog": lambda p, k: _save(
        p, "JPEG", quality=95, subsampling=0, progressive=True, exif=exif_block(k)
    ),
    "jpeg422be": lambda p, k: _save(p, "JPEG", quality=85, subsampling=1, exif=exif_block(k, True)),
    "png": lambda p, k: _save(p, "PNG", exif=exif_block(k)),
    "webp": lambda p, k: _save(p, "WEBP", lossless=True, exif=exif_block(k)),
    "tiff": lambda p, k: _save(p, "TIFF", tiffinfo={274: k}),
}


def pil_upright(data: bytes) -> Image.Image:
    """Hugging Face's decode: open, load, exif_transpose where the tag is; then RGB. (Pillow
    warns about the malformed blocks the fuzz makes, and goes on.)"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            if img.getexif().get(0x0112) is not None:
                return ImageOps.exif_transpose(img).convert("RGB")
            return img.convert("RGB")


#: exif_transpose's own table (PIL/ImageOps.py).
TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


def pil_upright_pixels(data: bytes) -> Tuple[Image.Image, bool]:
    """:func:`pil_upright`, and whether exif_transpose raised: after transposing, it writes
    the EXIF block back without the tag (``exif.tobytes()``), which fails (``struct.error``)
    (or ``TypeError``...) on a block whose types were garbled. The pixels it had made by then are the transposition
    of its own lookup, which is what the native decode gives."""
    try:
        return pil_upright(data), False
    except (struct.error, TypeError, ValueError, OverflowError):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data)) as img:
                method = TRANSPOSE.get(img.getexif().get(0x0112))
                rgb = img.convert("RGB")
        return (rgb if method is None else rgb.transpose(method)), True


def pil_as_stored(data: bytes) -> Image.Image:
    """torchvision's pil_loader: open, convert("RGB")."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Image.open(io.BytesIO(data)) as img:
            return img.convert("RGB")


def lossless(image: Image.Image) -> bytes:
    """``image``'s pixels in a PNG with no orientation: what the transposed decode must equal."""
    buf = io.BytesIO()
    image.save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def files() -> List[Tuple[str, int, bytes]]:
    """(format, orientation, bytes) for every format and orientation, 37x23 pixels."""
    rng = np.random.default_rng(7)
    pixels = natural_image(rng, 37, 23)
    return [(name, k, enc(pixels, k)) for name, enc in ENCODERS.items() for k in ORIENTATIONS]


def run_loader(items: List[bytes], transform: object, **kw: object) -> torch.Tensor:
    loader = fl.Loader(
        [(data, 0) for data in items], batch_size=len(items), num_workers=1, transform=transform, **kw
    )
    (images, _labels), = list(loader)
    return images


def test_the_files_carry_what_they_claim(files: List[Tuple[str, int, bytes]]) -> None:
    for name, k, data in files:
        upright = pil_upright(data)
        swapped = k >= 5
        assert upright.size == ((23, 37) if swapped else (37, 23)), (name, k)
        stored = pil_as_stored(data)
        # Pillow transposes a TIFF on load; every other format opens as stored.
        assert stored.size == (upright.size if name == "tiff" else (37, 23)), (name, k)


@pytest.mark.parametrize("output", ["float32", "uint8"])
def test_to_tensor_is_pillows_exif_transpose_exactly(
    files: List[Tuple[str, int, bytes]], output: str
) -> None:
    convert = T.ToTensor() if output == "float32" else T.PILToTensor()
    for name, k, data in files:
        ours = run_loader([data], T.Compose([convert]), exif_transpose=True, output=output)[0]
        upright = pil_upright(data)
        ref = F.to_tensor(upright) if output == "float32" else F.pil_to_tensor(upright)
        assert torch.equal(ours, ref), (name, k)


def test_off_by_default_the_pixels_as_stored(files: List[Tuple[str, int, bytes]]) -> None:
    for name, k, data in files:
        ours = run_loader([data], T.Compose([T.PILToTensor()]), output="uint8")[0]
        assert torch.equal(ours, F.pil_to_tensor(pil_as_stored(data))), (name, k)


def test_resize_center_crop_and_normalize(files: List[Tuple[str, int, bytes]]) -> None:
    tv = tvT.Compose(
        [tvT.Resize(29), tvT.CenterCrop(19), tvT.ToTensor(), tvT.Normalize([0.4, 0.5, 0.6], [0.2, 0.3, 0.25])]
    )
    transform = T.from_torchvision(tv)
    items = [data for _name, _k, data in files]
    ours = run_loader(items, transform, exif_transpose=True)
    # The same pipeline on the transposed pixels, stored losslessly: exactly equal.
    same = run_loader([lossless(pil_upright(d)) for d in items], transform)
    assert torch.equal(ours, same)
    # And torchvision's own result, bit for bit (Pillow's resize and crop, then ToTensor and
    # Normalize: the same arithmetic here).
    refs = torch.stack([tv(pil_upright(d)) for d in items])
    assert torch.equal(ours, refs)
    # The crop comes from the transposed image: orientations 5-8 differ from 1-4.
    stored = run_loader(items, transform)
    assert not torch.equal(ours, stored)


def test_random_resized_crop_with_injected_crops(files: List[Tuple[str, int, bytes]]) -> None:
    """The loader's drawn crops (drawn on the transposed size) injected into torchvision on
    the transposed image, and into the native kernel on the transposed pixels stored
    losslessly; the region decode of a JPEG maps the crop back to the stored image."""
    rrc = T.RandomResizedCrop((11, 13), scale=(0.2, 1.0))
    transform = T.Compose([rrc, T.ToTensor()])
    for name, k, data in files:
        items = [data] * 6
        loader = fl.Loader(
            [(d, 0) for d in items],
            batch_size=len(items),
            num_workers=1,
            seed=5,
            transform=transform,
            exif_transpose=True,
        )
        (images, _), = list(loader)
        upright = pil_upright(data)
        width, height = upright.size
        params = rrc.draw_params(width, height, range(len(items)), seed=5, epoch=0)
        flat = lossless(upright)
        for i, (top, left, h, w, _flip) in enumerate(params.tolist()):
            exact = _native.resized_crop(flat, top, left, h, w, (11, 13))
            assert torch.equal(images[i], torch.from_numpy(exact)), (name, k, i)
            ref = F.to_tensor(F.resized_crop(upright, top, left, h, w, [11, 13], antialias=True))
            assert torch.equal(images[i], ref), (name, k, i)


def test_python_tail_without_a_native_prefix_gets_the_transposed_image(
    files: List[Tuple[str, int, bytes]]
) -> None:
    sizes: List[Tuple[int, int]] = []

    def record(img: Image.Image) -> Image.Image:
        sizes.append(img.size)
        return img

    for name, k, data in files:
        if name not in ("jpeg420", "png"):
            continue
        for on in (True, False):
            sizes.clear()
            transform = tvT.Compose([tvT.Lambda(record), tvT.PILToTensor()])
            ours = run_loader(
                [data],
                transform,
                exif_transpose=on,
                output="uint8",
                python_tail="allow",
                python_tail_workers="threads",
            )[0]
            want = pil_upright(data) if on else pil_as_stored(data)
            assert torch.equal(ours, F.pil_to_tensor(want)), (name, k, on)
            assert want.size in sizes


def test_a_prefix_before_the_tail_hands_transposed_pixels(files: List[Tuple[str, int, bytes]]) -> None:
    """A native prefix ending before ToTensor gives the tail a PIL image of its (transposed)
    pixels; the tail does not transpose again."""
    for name, k, data in files:
        if name != "jpeg444prog":
            continue
        transform = tvT.Compose([tvT.CenterCrop(21), tvT.Lambda(lambda im: im), tvT.PILToTensor()])
        ours = run_loader(
            [data],
            transform,
            exif_transpose=True,
            output="uint8",
            python_tail="allow",
            python_tail_workers="threads",
        )[0]
        assert torch.equal(ours, F.pil_to_tensor(F.center_crop(pil_upright(data), [21, 21]))), k


def _jpeg_with_app1(payload: bytes, pixels: np.ndarray) -> bytes:
    jpeg = _save(pixels, "JPEG", quality=100, subsampling=0)
    return jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + jpeg[2:]


def test_mutated_exif_blocks_as_pillow_reads_them() -> None:
    """Differential fuzz: random byte edits of EXIF blocks (orientation entries of every
    type, out-of-line data, other tags before it) in a square JPEG, so every transposition
    keeps the batch's size; each sample against Pillow's exif_transpose of the same file."""
    rng = np.random.default_rng(11)
    pixels = rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)
    seeds = []
    for little in (True, False):
        e = "<" if little else ">"
        head = (b"II*\0" if little else b"MM\0*") + struct.pack(e + "L", 8)
        for typ, field in [(3, struct.pack(e + "HH", 6, 0)), (4, struct.pack(e + "L", 8)),
                           (11, struct.pack(e + "f", 5.0)), (9, struct.pack(e + "l", 7))]:
            entries = [(270, 2, 12, struct.pack(e + "L", 8 + 2 + 3 * 12 + 4)),
                       (271, 7, 3, b"abc\0"), (274, typ, 1, field)]
            body = struct.pack(e + "H", len(entries))
            for tag, t, count, f in entries:
                body += struct.pack(e + "HHL", tag, t, count) + f
            seeds.append(b"Exif\0\0" + head + body + struct.pack(e + "L", 0) + b"hello world\0")
        rational = struct.pack(e + "H", 1) + struct.pack(e + "HHLL", 274, 5, 1, 26)
        seeds.append(b"Exif\0\0" + head + rational + struct.pack(e + "L", 0) + struct.pack(e + "LL", 24, 3))
    blobs = []
    for _ in range(400):
        blob = bytearray(seeds[int(rng.integers(len(seeds)))])
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(6, len(blob)))
            choice = int(rng.integers(3))
            if choice == 0:
                blob[at] = int(rng.integers(256))
            elif choice == 1:
                blob[at] = int(rng.choice([0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 16, 255]))
            else:
                del blob[at:]
                break
        blobs.append(_jpeg_with_app1(bytes(blob), pixels))
    ours = run_loader(blobs, T.Compose([T.PILToTensor()]), exif_transpose=True, output="uint8")
    differing = raised = 0
    for i, data in enumerate(blobs):
        upright, failed = pil_upright_pixels(data)
        ref = F.pil_to_tensor(upright)
        assert torch.equal(ours[i], ref), f"blob {i}: {data[:80]!r}"
        differing += int(not torch.equal(ref, F.pil_to_tensor(pil_as_stored(data))))
        raised += int(failed)
    # The mutations leave many orientations in force and break many others.
    assert 50 < differing < len(blobs) - 50
    assert raised < len(blobs) // 4


def test_xmp_orientation_when_exif_has_none() -> None:
    rng = np.random.default_rng(3)
    pixels = rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)
    xmp = b'http://ns.adobe.com/xap/1.0/\0<x:xmpmeta><rdf:Description tiff:Orientation="8"/>'
    with_xmp = _jpeg_with_app1(xmp, pixels)
    # An EXIF block without tag 274 leaves XMP in force; one with 274 = 1 overrides it.
    exif_other = Image.Exif()
    exif_other[0x010F] = "maker"

    def with_exif(block: bytes) -> bytes:
        return with_xmp[:2] + b"\xff\xe1" + struct.pack(">H", len(block) + 2) + block + with_xmp[2:]

    blobs = [with_xmp, with_exif(exif_other.tobytes()), with_exif(exif_block(1))]
    ours = run_loader(blobs, T.Compose([T.PILToTensor()]), exif_transpose=True, output="uint8")
    for i, data in enumerate(blobs):
        assert torch.equal(ours[i], F.pil_to_tensor(pil_upright(data))), i
    assert not torch.equal(ours[0], F.pil_to_tensor(pil_as_stored(blobs[0])))
    assert not torch.equal(ours[1], F.pil_to_tensor(pil_as_stored(blobs[1])))
    assert torch.equal(ours[2], F.pil_to_tensor(pil_as_stored(blobs[2])))


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def test_container_rules_as_pillow_reads_them() -> None:
    """Where each container's orientation counts: a PNG's last eXIf chunk (after the image data
    too), a PNG's iTXt XMP, a WebP's EXIF chunk only with its VP8X flag set, a later XMP
    chunk where the EXIF one has no flag."""
    rng = np.random.default_rng(5)
    pixels = rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)
    png = _save(pixels, "PNG")
    ihdr_end = 8 + 25
    iend = png[-12:]

    def tiff_block(k: int) -> bytes:
        return exif_block(k)[6:]

    blobs = [
        png[:ihdr_end] + _png_chunk(b"eXIf", tiff_block(6)) + png[ihdr_end:],
        png[:-12] + _png_chunk(b"eXIf", tiff_block(8)) + iend,
        png[:ihdr_end] + _png_chunk(b"eXIf", tiff_block(6)) + png[ihdr_end:-12]
        + _png_chunk(b"eXIf", tiff_block(2)) + iend,
        png[:ihdr_end]
        + _png_chunk(b"iTXt", b'XML:com.adobe.xmp\0\0\0\0\0<x tiff:Orientation="5"/>')
        + png[ihdr_end:],
    ]
    webp = bytearray(_save(pixels, "WEBP", lossless=True, exif=exif_block(6)))
    assert webp[12:16] == b"VP8X" and webp[20] & 0x08
    blobs.append(bytes(webp))
    unflagged = bytearray(webp)
    unflagged[20] &= ~0x08
    blobs.append(bytes(unflagged))
    xmp_webp = bytearray(_save(pixels, "WEBP", lossless=True, xmp=b'<x tiff:Orientation="7"/>'))
    blobs.append(bytes(xmp_webp))
    ours = run_loader(blobs, T.Compose([T.PILToTensor()]), exif_transpose=True, output="uint8")
    for i, data in enumerate(blobs):
        assert torch.equal(ours[i], F.pil_to_tensor(pil_upright(data))), i
    # Each case but the unflagged WebP moves pixels.
    moved = [not torch.equal(ours[i], F.pil_to_tensor(pil_as_stored(d))) for i, d in enumerate(blobs)]
    assert moved == [True, True, True, True, True, False, True]


def test_the_option_is_checked_and_pickled(tmp_path: Path) -> None:
    data = ENCODERS["jpeg420"](natural_image(np.random.default_rng(0), 37, 23), 6)
    with pytest.raises(TypeError, match="exif_transpose"):
        fl.Loader([(data, 0)], transform=T.Compose([T.ToTensor()]), exif_transpose="yes")  # type: ignore[arg-type]
    loader = fl.Loader([(data, 0)], batch_size=1, transform=T.Compose([T.ToTensor()]), exif_transpose=True)
    import pickle

    again = pickle.loads(pickle.dumps(loader))
    assert again.exif_transpose is True
    (images, _), = list(again)
    assert images.shape == (1, 3, 37, 23)
