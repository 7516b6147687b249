#!/usr/bin/env python3
"""Decode test corpus: photo-like images in every format and flavour we decode, with Pillow's pixels.

Usage: fixtures_decode.py OUTDIR   (the Makefile runs it as `make fixtures`)

Writes OUTDIR/NAME.{jpg,png,...}, the reference `Image.open(f).convert("RGB")` bytes as NAME.rgb
(or, for the one huge image, one FNV-1a 64 hash per row as NAME.rowfnv, to keep the corpus small),
bad inputs with the error kind we expect, and OUTDIR/manifest.json describing all of it.

Deterministic: fixed seeds, no timestamps; the same Pillow gives the same bytes. Pillow is the
reference, so where Pillow's behaviour matters (truncation, corrupt data, 16-bit PNG) the script
records what Pillow actually did rather than what we assume it does.
"""

from __future__ import annotations

import io
import json
import re
import struct
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import PIL
from PIL import Image, ImageDraw, ImageFilter, features

FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)


# --------------------------------------------------------------------------------------------
# Photo-like content: smooth gradients, shapes with soft edges, a textured patch, mild noise.
# Pure noise would make every JPEG look like its worst case and hide upsampling/edge bugs.
# --------------------------------------------------------------------------------------------


def photo(width: int, height: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    # Smooth background computed at low resolution and upscaled: cheap even for 6000x4000.
    lw, lh = max(2, min(width, 256)), max(2, min(height, 256))
    y, x = np.mgrid[0:lh, 0:lw].astype(np.float32)
    xn, yn = x / lw, y / lh
    base = np.zeros((lh, lw, 3), np.float32)
    for c in range(3):
        v = np.full((lh, lw), rng.uniform(70, 180), np.float32)
        for _ in range(3):
            fx, fy = rng.uniform(0.3, 2.5, 2)
            phase = rng.uniform(0, 2 * np.pi)
            v += rng.uniform(15, 45) * np.sin(2 * np.pi * (fx * xn + fy * yn) + phase)
        base[..., c] = v
    img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8)).resize(
        (width, height), Image.Resampling.BICUBIC
    )

    draw = ImageDraw.Draw(img)
    n_shapes = 4 + int(rng.integers(0, 8))
    for _ in range(n_shapes):
        x0, x1 = sorted(rng.uniform(-0.2, 1.2, 2) * width)
        y0, y1 = sorted(rng.uniform(-0.2, 1.2, 2) * height)
        color = tuple(int(v) for v in rng.integers(0, 256, 3))
        kind = int(rng.integers(0, 3))
        if kind == 0:
            draw.ellipse([x0, y0, x1, y1], fill=color)
        elif kind == 1:
            draw.rectangle([x0, y0, x1, y1], fill=color)
        else:
            pts = [(float(rng.uniform(0, width)), float(rng.uniform(0, height))) for _ in range(3)]
            draw.polygon(pts, fill=color)
    # A few thin lines: sharp edges are where chroma upsampling differences show.
    for _ in range(3):
        pts = [(float(rng.uniform(0, width)), float(rng.uniform(0, height))) for _ in range(2)]
        draw.line(pts, fill=tuple(int(v) for v in rng.integers(0, 256, 3)), width=1)
    if min(width, height) >= 8:
        img = img.filter(ImageFilter.GaussianBlur(0.8))

    arr = np.asarray(img).astype(np.int16)
    # Texture patch: fine stripes, like fabric or foliage.
    if width >= 16 and height >= 16:
        tw, th = max(8, width // 4), max(8, height // 4)
        tx, ty = int(rng.integers(0, width - tw + 1)), int(rng.integers(0, height - th + 1))
        yy, xx = np.mgrid[0:th, 0:tw]
        stripes = (40 * np.sin(xx * 1.3 + yy * 0.7)).astype(np.int16)
        arr[ty : ty + th, tx : tx + tw] += stripes[..., None]
    # Sensor-like noise.
    arr += rng.integers(-5, 6, arr.shape, dtype=np.int16)
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def encode(img: Image.Image, fmt: str, **params) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **params)
    return buf.getvalue()


def row_fnv1a64(rgb: np.ndarray) -> bytes:
    """FNV-1a 64 of each row's bytes, little-endian u64 per row (vectorised over rows)."""
    rows = rgb.reshape(rgb.shape[0], -1)
    h = np.full(rows.shape[0], FNV_OFFSET, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(rows.shape[1]):
            h ^= rows[:, j].astype(np.uint64)
            h *= FNV_PRIME
    return h.astype("<u8").tobytes()


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def raw_png(samples: np.ndarray, color_type: int, bit_depth: int, interlace: bool = False) -> bytes:
    """A PNG written by hand, for what Pillow cannot write (16-bit RGB/RGBA/LA, Adam7)."""
    h, w = samples.shape[:2]
    if bit_depth == 16:
        data = samples.astype(">u2")
    else:
        data = samples.astype(np.uint8)
    data = data.reshape(h, w, -1)

    def scanlines(a: np.ndarray) -> bytes:
        return b"".join(b"\x00" + a[r].tobytes() for r in range(a.shape[0]))

    if interlace:
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
        raw = b""
        for x0, y0, dx, dy in passes:
            sub = data[y0::dy, x0::dx]
            if sub.shape[0] and sub.shape[1]:
                raw += scanlines(sub)
    else:
        raw = scanlines(data)
    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, 1 if interlace else 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", ihdr)
        + png_chunk(b"IDAT", zlib.compress(raw, 6))
        + png_chunk(b"IEND", b"")
    )


def plain_pnm(magic: str, samples: np.ndarray, maxval: int = 255, newline: str = "\n") -> bytes:
    """A plain (ASCII) PBM/PGM/PPM written by hand (Pillow writes only the binary kinds), with a
    comment line in the header as real files have. `samples`: HxW bits (1 = black) for P1, HxW
    gray or HxWx3 RGB values for P2/P3. Lines stay within netpbm's 70 characters; P1 bits are
    written without separators, which the format allows."""
    h, w = samples.shape[:2]
    header = [magic, "# written by scripts/fixtures_decode.py", f"{w} {h}"]
    if magic != "P1":
        header.append(str(maxval))
    tokens = [str(int(v)) for v in samples.reshape(-1)]
    sep = "" if magic == "P1" else " "
    lines, line = [], ""
    for t in tokens:
        if line and len(line) + len(sep) + len(t) > 70:
            lines.append(line)
            line = ""
        line = t if not line else line + sep + t
    lines.append(line)
    return (newline.join(header + lines) + newline).encode("ascii")


def jpeg_segments(data: bytes):
    """(marker, start, end) of each marker segment up to and including the first SOS header."""
    pos = 2
    while pos + 4 <= len(data):
        marker = data[pos + 1]
        length = struct.unpack(">H", data[pos + 2 : pos + 4])[0]
        yield marker, pos, pos + 2 + length
        if marker == 0xDA:
            return
        pos += 2 + length


def sos_data_start(data: bytes) -> int:
    for marker, _, end in jpeg_segments(data):
        if marker == 0xDA:
            return end
    raise ValueError("no SOS")


def patch_sof_size(data: bytes, width: int, height: int) -> bytes:
    out = bytearray(data)
    for marker, start, _ in jpeg_segments(data):
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            out[start + 5 : start + 9] = struct.pack(">HH", height, width)
            return bytes(out)
    raise ValueError("no SOF")


def patch_adobe_transform(data: bytes, transform: int) -> bytes:
    i = data.find(b"Adobe")
    if i < 0:
        raise ValueError("no Adobe segment")
    out = bytearray(data)
    out[i + 11] = transform
    return bytes(out)


def jfif_to_adobe_rgb(data: bytes) -> bytes:
    """Replace the JFIF APP0 with an Adobe APP14 saying transform=0: libjpeg then reads the three
    components as RGB, not YCbCr (a valid, if unusual, file)."""
    for marker, start, end in jpeg_segments(data):
        if marker == 0xE0:
            adobe = b"\xff\xee" + struct.pack(">H", 14) + b"Adobe" + struct.pack(">HHHB", 100, 0, 0, 0)
            return data[:start] + adobe + data[end:]
    raise ValueError("no APP0")


def corrupt_entropy(data: bytes, seed: int) -> bytes:
    """Overwrite a few bytes in the middle of the entropy-coded data (never with 0xFF, so no
    marker is created and the damage stays inside the scan)."""
    rng = np.random.default_rng(seed)
    start = sos_data_start(data)
    end = len(data) - 2
    out = bytearray(data)
    for pos in rng.integers(start + (end - start) // 3, start + 2 * (end - start) // 3, 24):
        if out[pos] != 0xFF and out[pos - 1] != 0xFF:
            out[pos] = int(rng.integers(0, 0xFF))
    return bytes(out)


def corrupt_dht(data: bytes) -> bytes:
    """Make the first Huffman table claim more codes than the code space holds."""
    out = bytearray(data)
    for marker, start, _ in jpeg_segments(data):
        if marker == 0xC4:
            # counts of codes of length 1..16 start after length (2) and Tc/Th (1)
            for k in range(16):
                out[start + 5 + k] = 0xFF
            return bytes(out)
    raise ValueError("no DHT")


# --------------------------------------------------------------------------------------------
# The corpus
# --------------------------------------------------------------------------------------------


class Corpus:
    def __init__(self, outdir: Path):
        self.outdir = outdir
        self.images: list[dict] = []
        self.bad: list[dict] = []
        self.bytes_written = 0

    def _write(self, name: str, data: bytes) -> None:
        (self.outdir / name).write_bytes(data)
        self.bytes_written += len(data)

    def add(self, name: str, ext: str, data: bytes, fmt: str, hashed: bool = False, **meta) -> None:
        """Stores an image and Pillow's `convert("RGB")` of it as the reference."""
        fname = f"{name}.{ext}"
        self._write(fname, data)
        with Image.open(io.BytesIO(data)) as im:
            mode = im.mode
            rgb = np.asarray(im.convert("RGB"))
        h, w = rgb.shape[:2]
        entry = {
            "name": name,
            "file": fname,
            "format": fmt,
            "width": int(w),
            "height": int(h),
            "pillow_mode": mode,
        }
        reference = f"{name}.rowfnv" if hashed else f"{name}.rgb"
        entry["reference"] = reference
        entry["reference_kind"] = "row_fnv1a64" if hashed else "raw"
        self._write(reference, row_fnv1a64(rgb) if hashed else rgb.tobytes())
        entry.update(meta)
        self.images.append(entry)

    def add_jpeg(self, name: str, img: Image.Image, hashed: bool = False, **params) -> bytes:
        data = encode(img, "JPEG", **params)
        meta = {
            "subsampling": {0: "4:4:4", 1: "4:2:2", 2: "4:2:0"}.get(params.get("subsampling", -1), "4:2:0")
            if img.mode in ("RGB",)
            else img.mode,
            "quality": params.get("quality", 75),
            "progressive": bool(params.get("progressive", False)),
            "optimize": bool(params.get("optimize", False)),
            "restart": bool(params.get("restart_marker_blocks") or params.get("restart_marker_rows")),
        }
        self.add(name, "jpg", data, "jpeg", hashed=hashed, **meta)
        return data

    def add_bad(self, name: str, ext: str, data: bytes, expect: str, note: str) -> None:
        """Stores a bad input with the error kind our decoder must give, and what Pillow said."""
        fname = f"{name}.{ext}"
        self._write(fname, data)
        try:
            with Image.open(io.BytesIO(data)) as im:
                im.convert("RGB")
            pillow = "decoded without error"
        except Exception as e:  # noqa: BLE001 - recording whatever Pillow raised is the point
            # Drop object addresses ("<_io.BytesIO object at 0x...>") to keep the manifest stable.
            pillow = re.sub(r"<[^>]* at 0x[0-9a-f]+>", "<bytes>", f"{type(e).__name__}: {e}")
        self.bad.append({"name": name, "file": fname, "expect": expect, "pillow": pillow, "note": note})

    def pillow_fails(self, data: bytes) -> bool:
        try:
            with Image.open(io.BytesIO(data)) as im:
                im.convert("RGB")
            return False
        except Exception:  # noqa: BLE001
            return True


def build(outdir: Path) -> Corpus:
    c = Corpus(outdir)

    # ---- JPEG -------------------------------------------------------------------------------
    imnet = photo(500, 375, 1)
    for sub, tag in ((2, "420"), (1, "422"), (0, "444")):
        for q in (75, 95):
            c.add_jpeg(f"jpeg_{tag}_q{q}", imnet, quality=q, subsampling=sub)
    c.add_jpeg("jpeg_imagenet_like", photo(500, 375, 2), quality=90)
    odd = photo(333, 77, 3)
    for sub, tag in ((2, "420"), (1, "422"), (0, "444")):
        c.add_jpeg(f"jpeg_{tag}_333x77", odd, quality=85, subsampling=sub)
    c.add_jpeg("jpeg_420_77x333", photo(77, 333, 4), quality=85, subsampling=2)
    prog = photo(321, 241, 5)
    c.add_jpeg("jpeg_progressive_420", prog, quality=85, progressive=True, subsampling=2)
    c.add_jpeg("jpeg_progressive_444", prog, quality=92, progressive=True, subsampling=0)
    c.add_jpeg("jpeg_progressive_422", prog, quality=80, progressive=True, subsampling=1)
    c.add_jpeg("jpeg_optimized_420", photo(299, 203, 6), quality=80, optimize=True, subsampling=2)
    gray = photo(255, 170, 7).convert("L")
    c.add_jpeg("jpeg_gray", gray, quality=90)
    c.add_jpeg("jpeg_gray_progressive", gray, quality=80, progressive=True)
    c.add_jpeg("jpeg_gray_7x5", photo(7, 5, 8).convert("L"), quality=90)
    cmyk = photo(203, 151, 9).convert("CMYK")
    cmyk_data = c.add_jpeg("jpeg_cmyk", cmyk, quality=90)
    # Pillow writes Adobe transform 0 (plain CMYK); flip it to 2 so libjpeg reads the same
    # components as YCCK: a valid YCCK file with odd colours, exercising the YCCK->CMYK path.
    c.add("jpeg_ycck_patched", "jpg", patch_adobe_transform(cmyk_data, 2), "jpeg", subsampling="YCCK")
    c.add_jpeg("jpeg_cmyk_progressive", photo(97, 131, 10).convert("CMYK"), quality=85, progressive=True)
    rgb3 = encode(photo(150, 100, 11), "JPEG", quality=90, subsampling=0)
    c.add("jpeg_adobe_rgb_patched", "jpg", jfif_to_adobe_rgb(rgb3), "jpeg", subsampling="RGB")
    rst = photo(259, 187, 12)
    c.add_jpeg("jpeg_restart_blocks_420", rst, quality=85, subsampling=2, restart_marker_blocks=7)
    c.add_jpeg("jpeg_restart_rows_422", rst, quality=85, subsampling=1, restart_marker_rows=1)
    c.add_jpeg("jpeg_restart_rows_444", rst, quality=85, subsampling=0, restart_marker_rows=2)
    c.add_jpeg(
        "jpeg_restart_progressive_420", rst, quality=85, subsampling=2, progressive=True, restart_marker_blocks=5
    )
    for (w, h), sub in (((1, 1), 2), ((2, 3), 2), ((7, 5), 1), ((17, 9), 2), ((9, 17), 0), ((16, 16), 2), ((33, 31), 1)):
        tag = {0: "444", 1: "422", 2: "420"}[sub]
        c.add_jpeg(f"jpeg_tiny_{w}x{h}_{tag}", photo(w, h, 100 + w * 7 + h), quality=90, subsampling=sub)
    c.add_jpeg("jpeg_wide_3000x16", photo(3000, 16, 13), quality=85, subsampling=2)
    c.add_jpeg("jpeg_tall_16x2000", photo(16, 2000, 14), quality=85, subsampling=1)
    c.add_jpeg("jpeg_huge_6000x4000", photo(6000, 4000, 15), hashed=True, quality=85, subsampling=2)
    base = encode(photo(120, 90, 16), "JPEG", quality=85)
    c.add("jpeg_trailing_garbage", "jpg", base + b"\x00garbage after EOI\xff\xd9junk" * 20, "jpeg", subsampling="4:2:0")

    # Corrupt entropy data: libjpeg only warns and goes on, and so does Pillow (it ignores
    # warnings). If Pillow decodes it, we must give the same pixels; if not, the same failure.
    victim = encode(photo(240, 160, 17), "JPEG", quality=85)
    bad_scan = corrupt_entropy(victim, 18)
    if c.pillow_fails(bad_scan):
        c.add_bad("bad_jpeg_corrupt_entropy", "jpg", bad_scan, "corrupt", "entropy data overwritten")
    else:
        c.add("jpeg_corrupt_entropy", "jpg", bad_scan, "jpeg", subsampling="4:2:0", corrupt=True)

    # ---- PNG --------------------------------------------------------------------------------
    pic = photo(211, 143, 20)
    c.add("png_rgb", "png", encode(pic, "PNG"), "png")
    rgba = pic.copy()
    rgba.putalpha(photo(211, 143, 21).convert("L"))
    c.add("png_rgba", "png", encode(rgba, "PNG"), "png")
    c.add("png_l", "png", encode(pic.convert("L"), "PNG"), "png")
    la = pic.convert("LA")
    c.add("png_la", "png", encode(la, "PNG"), "png")
    pal = pic.quantize(64, dither=Image.Dither.FLOYDSTEINBERG)
    c.add("png_p", "png", encode(pal, "PNG"), "png")
    c.add("png_p_trns", "png", encode(pal, "PNG", transparency=3), "png")
    c.add("png_p_4bit", "png", encode(pic.quantize(16), "PNG", bits=4), "png")
    c.add("png_1bit", "png", encode(pic.convert("1"), "PNG"), "png")
    rng = np.random.default_rng(22)
    ramp = (np.linspace(0, 65535, 97 * 61).reshape(61, 97)).astype(np.uint16)
    gray16 = Image.fromarray(ramp)  # mode I;16; Pillow writes a 16-bit grayscale PNG
    c.add("png_gray16", "png", encode(gray16, "PNG"), "png", note="Pillow clips I;16 to 255 when converting to RGB")
    small16 = (np.asarray(pic.convert("L")).astype(np.uint16)).copy()  # values < 256: the usual trap
    c.add("png_gray16_small_values", "png", encode(Image.fromarray(small16), "PNG"), "png")
    rgb16 = np.asarray(pic).astype(np.uint16) * 257 + rng.integers(0, 257, (143, 211, 3)).astype(np.uint16)
    c.add("png_rgb16", "png", raw_png(rgb16, 2, 16), "png")
    rgba16 = np.concatenate([rgb16, (ramp[:1, :1] * 0 + 40000).repeat(143, 0).repeat(211, 1)[..., None]], axis=2)
    c.add("png_rgba16", "png", raw_png(rgba16, 6, 16), "png")
    la16 = np.stack([rgb16[..., 0], rgb16[..., 1]], axis=2)
    c.add("png_la16", "png", raw_png(la16, 4, 16), "png")
    c.add("png_rgb_interlaced", "png", raw_png(np.asarray(pic), 2, 8, interlace=True), "png")

    # ---- BMP / GIF / WebP / TIFF ------------------------------------------------------------
    bpic = photo(131, 97, 30)
    c.add("bmp_rgb", "bmp", encode(bpic, "BMP"), "bmp")
    c.add("bmp_p", "bmp", encode(bpic.quantize(100), "BMP"), "bmp")
    c.add("bmp_l", "bmp", encode(bpic.convert("L"), "BMP"), "bmp")
    c.add("bmp_1bit", "bmp", encode(bpic.convert("1"), "BMP"), "bmp")
    gpic = photo(163, 109, 31)
    c.add("gif_p", "gif", encode(gpic.quantize(200), "GIF"), "gif")
    c.add("gif_l", "gif", encode(gpic.convert("L"), "GIF"), "gif")
    c.add("gif_transparency", "gif", encode(gpic.quantize(50), "GIF", transparency=7), "gif")
    frames = [gpic.quantize(64), photo(163, 109, 32).quantize(64)]
    c.add(
        "gif_animated",
        "gif",
        encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100),
        "gif",
        note="first frame",
    )
    if features.check("webp"):
        wpic = photo(177, 119, 40)
        c.add("webp_lossless", "webp", encode(wpic, "WEBP", lossless=True), "webp", lossy=False)
        wrgba = wpic.copy()
        wrgba.putalpha(128)
        c.add("webp_lossless_rgba", "webp", encode(wrgba, "WEBP", lossless=True), "webp", lossy=False)
        c.add("webp_lossy", "webp", encode(wpic, "WEBP", quality=80), "webp", lossy=True)
        c.add("webp_lossy_rgba", "webp", encode(wrgba, "WEBP", quality=80), "webp", lossy=True)
    tpic = photo(149, 113, 50)
    c.add("tiff_rgb", "tif", encode(tpic, "TIFF"), "tiff")
    c.add("tiff_rgb_lzw", "tif", encode(tpic, "TIFF", compression="tiff_lzw"), "tiff")
    c.add("tiff_l_deflate", "tif", encode(tpic.convert("L"), "TIFF", compression="tiff_adobe_deflate"), "tiff")
    trgba = tpic.copy()
    trgba.putalpha(200)
    c.add("tiff_rgba", "tif", encode(trgba, "TIFF"), "tiff")

    # ---- PNM (PBM / PGM / PPM) --------------------------------------------------------------
    # Binary as Pillow writes them (maxval 255; PBM rows padded to whole bytes: 143 is 8*17+7),
    # plain ones by hand (CRLF line ends in one). Only maxval 255 and bitmaps decode natively;
    # other maxvals are bad inputs below.
    npic = photo(143, 101, 70)
    c.add("pnm_p6", "ppm", encode(npic, "PPM"), "pnm")
    c.add("pnm_p5", "pgm", encode(npic.convert("L"), "PPM"), "pnm")
    c.add("pnm_p4", "pbm", encode(npic.convert("1"), "PPM"), "pnm")
    tiny = photo(3, 2, 71)
    c.add("pnm_p6_3x2", "ppm", encode(tiny, "PPM"), "pnm")
    c.add("pnm_p5_3x2", "pgm", encode(tiny.convert("L"), "PPM"), "pnm")
    c.add("pnm_p4_9x2", "pbm", encode(photo(9, 2, 72).convert("1"), "PPM"), "pnm")
    plain = photo(29, 17, 73)
    c.add("pnm_p3", "ppm", plain_pnm("P3", np.asarray(plain)), "pnm")
    c.add("pnm_p2_crlf", "pgm", plain_pnm("P2", np.asarray(plain.convert("L")), newline="\r\n"), "pnm")
    c.add("pnm_p1", "pbm", plain_pnm("P1", ~np.asarray(plain.convert("1"))), "pnm")
    c.add("pnm_p3_3x2", "ppm", plain_pnm("P3", np.asarray(tiny)), "pnm")

    # ---- Bad inputs -------------------------------------------------------------------------
    good = encode(photo(200, 150, 60), "JPEG", quality=85)
    header_end = sos_data_start(good)
    c.add_bad("bad_empty", "jpg", b"", "unknown_format", "empty file")
    c.add_bad(
        "bad_html",
        "jpg",
        b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head><body>Not Found</body></html>\n",
        "unknown_format",
        "an HTML error page saved as an image",
    )
    c.add_bad("bad_random", "jpg", np.random.default_rng(61).integers(0, 256, 4096, dtype=np.uint8).tobytes(), "unknown_format", "random bytes")
    c.add_bad("bad_jpeg_soi_only", "jpg", good[:3], "truncated", "just the SOI and one byte")
    c.add_bad("bad_jpeg_truncated_in_header", "jpg", good[: header_end // 2], "truncated", "cut inside the tables")
    c.add_bad("bad_jpeg_truncated_after_header", "jpg", good[:header_end], "truncated", "cut right after the SOS header")
    c.add_bad("bad_jpeg_truncated_half", "jpg", good[: len(good) // 2], "truncated", "cut at 50%")
    c.add_bad("bad_jpeg_no_eoi", "jpg", good[:-2], "truncated", "all scan data, EOI missing: Pillow calls it truncated")
    prog_good = encode(photo(200, 150, 62), "JPEG", quality=85, progressive=True)
    c.add_bad("bad_jpeg_progressive_truncated", "jpg", prog_good[: len(prog_good) * 2 // 3], "truncated", "progressive, cut at 2/3")
    c.add_bad("bad_jpeg_corrupt_dht", "jpg", corrupt_dht(good), "corrupt", "Huffman table overflows the code space")
    c.add_bad("bad_jpeg_huge_sof", "jpg", patch_sof_size(good, 30000, 30000), "too_large", "SOF claims 30000x30000")
    c.add_bad("bad_jpeg_zero_width", "jpg", patch_sof_size(good, 0, 150), "corrupt", "SOF claims width 0")
    png_good = encode(photo(200, 150, 63), "PNG")
    c.add_bad("bad_png_truncated", "png", png_good[: len(png_good) // 2], "truncated", "cut at 50%")
    bad_crc = bytearray(png_good)
    bad_crc[len(png_good) // 2] ^= 0x55
    c.add_bad("bad_png_corrupt", "png", bytes(bad_crc), "corrupt", "one IDAT byte flipped (CRC mismatch)")
    gif_good = encode(photo(120, 80, 64).quantize(64), "GIF")
    c.add_bad("bad_gif_truncated", "gif", gif_good[: len(gif_good) // 2], "truncated", "cut at 50%")
    ppm_good = encode(photo(60, 40, 65), "PPM")
    c.add_bad("bad_pnm_p6_truncated", "ppm", ppm_good[: len(ppm_good) // 2], "truncated", "binary PPM cut at 50%")
    pbm_good = encode(photo(60, 40, 66).convert("1"), "PPM")
    c.add_bad("bad_pnm_p4_truncated", "pbm", pbm_good[:-1], "truncated", "binary PBM missing its last byte")
    plain_good = plain_pnm("P3", np.asarray(photo(20, 10, 67)))
    c.add_bad("bad_pnm_p3_truncated", "ppm", plain_good[: len(plain_good) // 2], "truncated", "plain PPM cut at 50%")
    c.add_bad("bad_pnm_huge", "ppm", b"P6\n30000 30000\n255\n" + bytes(64), "too_large", "PPM header claims 30000x30000")
    gray10 = np.arange(12 * 8, dtype=np.uint16).reshape(8, 12) * 10
    c.add_bad(
        "bad_pnm_p5_maxval_1023",
        "pgm",
        b"P5\n12 8\n1023\n" + gray10.astype(">u2").tobytes(),
        "unsupported",
        "16-bit PGM: Pillow opens it as mode I with rescaled samples",
    )
    c.add_bad(
        "bad_pnm_p5_maxval_65535",
        "pgm",
        encode(Image.fromarray(gray10 * 60), "PPM"),
        "unsupported",
        "16-bit PGM as Pillow saves mode I;16: Pillow opens it as mode I",
    )
    c.add_bad(
        "bad_pnm_p3_maxval_15",
        "ppm",
        plain_pnm("P3", np.asarray(photo(5, 4, 68)) // 17, maxval=15),
        "unsupported",
        "plain PPM with maxval 15: Pillow rescales to 0..255",
    )
    c.add_bad(
        "bad_pam_p7",
        "pam",
        b"P7\nWIDTH 2\nHEIGHT 1\nDEPTH 3\nMAXVAL 255\nTUPLTYPE RGB\nENDHDR\n" + bytes(range(6)),
        "unknown_format",
        "PAM: neither Pillow nor we open it",
    )
    return c


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    outdir = Path(sys.argv[1])
    outdir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    corpus = build(outdir)
    manifest = {
        "version": 1,
        "generator": "scripts/fixtures_decode.py",
        "pillow": PIL.__version__,
        "libjpeg": features.version("jpg"),
        "images": corpus.images,
        "bad": corpus.bad,
    }
    (outdir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(
        f"fixtures_decode: {len(corpus.images)} images, {len(corpus.bad)} bad inputs, "
        f"{corpus.bytes_written / 1e6:.1f} MB in {time.monotonic() - t0:.1f} s -> {outdir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
