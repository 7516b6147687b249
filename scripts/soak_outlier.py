#!/usr/bin/env python3
"""Soak: many epochs over a folder with one huge outlier image and bad files, on_error="skip".

Usage: soak_outlier.py [--epochs 50] [--workers 2] [--outlier 13000] [--dir DIR]

Builds (once, in DIR, default a temporary folder) 3 classes of ordinary photos-like JPEGs, one
OUTLIER x OUTLIER JPEG (under the default pixel limit), a truncated JPEG, a file that is not an
image and an empty file; then runs EPOCHS epochs of RandomResizedCrop(224) + flip + normalize
and prints, per epoch, the process's resident memory (VmRSS) after the epoch, the samples
delivered and the samples skipped. A worker keeps at most `scratch_limit` (64 MiB) of scratch
after a sample, so RSS must come back down after each pass over the outlier instead of keeping
its ~500 MB per worker. Exits non-zero when RSS grows past what it was before the first epoch by
more than the scratch limit per worker, when a sample is lost, or when a bad file is not reported. Not part of `make test`
(minutes, and half a gigabyte per worker at the outlier).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

import ferroloader as fl
from ferroloader import transforms as T

Image.MAX_IMAGE_PIXELS = None  # the outlier is made on purpose


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def build(root: Path, outlier: int) -> tuple[int, int]:
    """Writes the folder; returns (good samples, bad samples)."""
    rng = np.random.default_rng(0)
    good = 0
    for c in ("a", "b", "c"):
        (root / c).mkdir(parents=True, exist_ok=True)
        for i in range(12):
            w, h = int(rng.integers(200, 640)), int(rng.integers(200, 640))
            y, x = np.mgrid[0:h, 0:w]
            img = np.stack([(x * 255 // w), (y * 255 // h), ((x + y) % 256)], axis=-1).astype(np.uint8)
            Image.fromarray(img).save(root / c / f"{i:02d}.jpg", quality=90)
            good += 1
    # The outlier: a smooth gradient compresses well, so the file is small and the decode huge.
    row = np.linspace(0, 255, outlier, dtype=np.uint8)
    big = np.empty((outlier, outlier, 3), dtype=np.uint8)
    big[...] = row[None, :, None]
    Image.fromarray(big).save(root / "a" / "zz_outlier.jpg", quality=80)
    del big
    good += 1
    data = (root / "b" / "00.jpg").read_bytes()
    (root / "b" / "zz_truncated.jpg").write_bytes(data[: len(data) // 3])
    (root / "c" / "zz_not_an_image.jpg").write_bytes(b"<html>404</html>")
    (root / "c" / "zz_empty.jpg").write_bytes(b"")
    return good, 3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--outlier", type=int, default=13000)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--decoder", choices=("turbo", "zune"), default="turbo",
                        help="zune decodes the whole image (no region or DCT scaling)")
    parser.add_argument("--scratch-limit", type=int, default=64 << 20,
                        help="bytes of scratch a worker keeps (a huge value shows the old behaviour)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.dir or Path(tmp) / "soak"
        t = time.monotonic()
        good, bad = build(root, args.outlier)
        print(f"folder: {good} good and {bad} bad files, outlier {args.outlier}x{args.outlier} "
              f"({(root / 'a' / 'zz_outlier.jpg').stat().st_size / 2**20:.1f} MiB), built in "
              f"{time.monotonic() - t:.0f} s")
        transform = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                               T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
        loader = fl.Loader(fl.ImageFolder(root), batch_size=16, shuffle=True, num_workers=args.workers,
                           on_error="skip", transform=transform, decoder=args.decoder,
                           scratch_limit=args.scratch_limit)
        base = rss_mib()
        failures = []
        print(f"rss before the first epoch: {base:.0f} MiB")
        print("epoch  rss_mib  samples  skipped  seconds")
        for epoch in range(args.epochs):
            t = time.monotonic()
            it = iter(loader)
            samples = sum(int(labels.shape[0]) for _, labels in it)
            skipped = len(it.skipped)
            del it
            rss = rss_mib()
            print(f"{epoch:5d}  {rss:7.0f}  {samples:7d}  {skipped:7d}  {time.monotonic() - t:7.1f}", flush=True)
            if samples != good or skipped != bad:
                failures.append(f"epoch {epoch}: {samples} samples and {skipped} skipped, want {good} and {bad}")
            limit = args.scratch_limit / 2**20 * args.workers
            if rss > base + limit:
                failures.append(f"epoch {epoch}: RSS {rss:.0f} MiB, more than before the first epoch ({base:.0f}) "
                                f"+ the scratch limit per worker")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
