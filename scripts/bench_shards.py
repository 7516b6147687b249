#!/usr/bin/env python3
"""Loader throughput on the same images as an ImageFolder, as local tar shards and as shards
served by a local S3-compatible server (s3s-fs), in alternating rounds; prints medians and the
ratios to the folder (absolute times wander on these machines, ratios within a run hold).

Not a test: a benchmark for the note. Usage:
    bench_shards.py [FOLDER] [--rounds N] [--workers N] [--per-shard N]
FOLDER defaults to target/fixtures/folder (`make loader-bench` writes it); the s3s-fs binary is
target/tools/bin/s3s-fs or $FERROLOADER_S3S_FS (`make s3-server`).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import socket
import statistics
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import ferroloader as fl
from ferroloader import transforms as T

REPO = Path(__file__).resolve().parents[1]


def write_shards(folder: Path, out: Path, per_shard: int) -> List[str]:
    """The folder as tar shards (KEY.ext + KEY.cls) and index.json, by the agreed layout."""
    samples = fl.ImageFolder(folder).samples
    names: List[str] = []
    shards: List[Dict[str, Any]] = []
    for n in range(0, len(samples), per_shard):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for path, label in samples[n : n + per_shard]:
                key = str(Path(path).relative_to(folder).with_suffix(""))
                for member, payload in (
                    (key + Path(path).suffix.lower(), Path(path).read_bytes()),
                    (key + ".cls", str(label).encode()),
                ):
                    info = tarfile.TarInfo(member)
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
        raw = buf.getvalue()
        entries = []
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            members = tar.getmembers()
            for image, cls in zip(members[::2], members[1::2]):
                f = tar.extractfile(cls)
                assert f is not None
                entries.append(
                    {"key": image.name.rsplit(".", 1)[0], "offset": image.offset_data,
                     "size": image.size, "label": int(f.read())}
                )
        name = f"shard-{n // per_shard:06d}.tar"
        (out / name).write_bytes(raw)
        shards.append({"url": name, "num_samples": len(entries), "bytes": len(raw), "samples": entries})
        names.append(name)
    index = {"format": "ferroloader-shards", "version": 1, "shards": shards,
             "num_samples": sum(s["num_samples"] for s in shards)}
    (out / "index.json").write_text(json.dumps(index))
    return names


def start_s3s(root: Path) -> tuple[subprocess.Popen[bytes], int]:
    binary = Path(os.environ.get("FERROLOADER_S3S_FS", REPO / "target/tools/bin/s3s-fs"))
    if not binary.is_file():
        raise SystemExit(f"no s3s-fs at {binary}: run `make s3-server`")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [str(binary), "--host", "127.0.0.1", "--port", str(port), "--access-key", "AK",
         "--secret-key", "SK", str(root)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    for _ in range(400):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("s3s-fs did not start")


def epoch_seconds(make: Callable[[], fl.Loader]) -> float:
    loader = make()
    start = time.perf_counter()
    n = 0
    for _, labels in loader:
        n += len(labels)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", nargs="?", default=str(REPO / "target/fixtures/folder"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--per-shard", type=int, default=64)
    # A buffer as large as the epoch makes the first batch wait for every shard; real datasets
    # have far more samples per rank than the buffer holds, so the default is one shard's worth.
    ap.add_argument("--shuffle-buffer", type=int, default=64)
    args = ap.parse_args()
    folder = Path(args.folder)
    transform = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                           T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "shards").mkdir()
        names = write_shards(folder, tmp / "shards", args.per_shard)
        (tmp / "s3" / "bucket").mkdir(parents=True)
        for name in names + ["index.json"]:
            shutil.copy(tmp / "shards" / name, tmp / "s3" / "bucket" / name)
        proc, port = start_s3s(tmp / "s3")
        storage = {"aws_endpoint": f"http://127.0.0.1:{port}", "aws_access_key_id": "AK",
                   "aws_secret_access_key": "SK", "aws_region": "us-east-1", "aws_allow_http": "true"}
        common = dict(batch_size=64, shuffle=True, num_workers=args.workers, transform=transform)
        local = fl.WebDataset([str(tmp / "shards" / n) for n in names], shuffle_buffer=args.shuffle_buffer)
        remote = fl.WebDataset([f"s3://bucket/{n}" for n in names], storage_options=storage,
                               shuffle_buffer=args.shuffle_buffer)
        folder_ds = fl.ImageFolder(folder)
        setups: Dict[str, Callable[[], fl.Loader]] = {
            "folder": lambda: fl.Loader(folder_ds, **common),
            "local shards": lambda: fl.Loader(local, **common),
            "s3s-fs shards": lambda: fl.Loader(remote, **common),
        }
        try:
            for make in setups.values():
                epoch_seconds(make)  # warm-up: page cache, first connections
            times: Dict[str, List[float]] = {k: [] for k in setups}
            for _ in range(args.rounds):
                for name, make in setups.items():
                    times[name].append(epoch_seconds(make))
        finally:
            proc.kill()
            proc.wait()
    images = len(folder_ds)
    base = statistics.median(times["folder"])
    print(f"{images} images, {len(names)} shards of {args.per_shard}, shuffle buffer "
          f"{args.shuffle_buffer}, {args.workers} workers, {args.rounds} rounds (median)")
    print(f"{'source':16} {'s/epoch':>8} {'img/s':>8} {'vs folder':>10}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:16} {med:8.3f} {images / med:8.1f} {base / med:10.3f}")


if __name__ == "__main__":
    main()
