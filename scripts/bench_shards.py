#!/usr/bin/env python3
"""Loader throughput on the same images as an ImageFolder, as local tar shards and as shards
served by a local S3-compatible server (s3s-fs), read whole (one GET per shard) and as
concurrent byte ranges, in alternating rounds; prints medians and the ratios to the folder
(absolute times wander on these machines, ratios within a run hold): of the whole epoch of a new
loader, and of its steady state after the first batch (a long epoch is mostly steady state; a
short benchmark epoch is dominated by the wait for the first shard); and the CPU time per image
of this process (the loader) and of the server, which says what reading shards costs the loader
where the server shares its cores.

Not a test: a benchmark for the note. Usage:
    bench_shards.py [FOLDER] [--rounds N] [--workers N] [--per-shard N] [--shuffle-buffer N]
                    [--range-bytes N] [--max-requests N] [--read-ahead-shards N]
                    [--server-cpus LIST] [--copy]
FOLDER defaults to target/fixtures/folder (`make loader-bench` writes it); the s3s-fs binary is
target/tools/bin/s3s-fs or $FERROLOADER_S3S_FS (`make s3-server`). `--server-cpus 12-15` runs
the server under `taskset -c 12-15` and keeps this process (and its loader threads) off those
CPUs, so the server does not compete with the loader, as a remote store would not; on a 2-core
machine, `--workers 1 --server-cpus 1` is the same setup scaled down.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import hmac
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Optional, Set

import ferroloader as fl
from ferroloader import transforms as T

REPO = Path(__file__).resolve().parents[1]


def write_shards(folder: Path, out: Path, per_shard: int) -> List[str]:
    """The folder as tar shards of ``per_shard`` samples and their index.json (``fl.shard``);
    returns the shard file names."""
    report = fl.shard(folder, out, shard_size="1TB", max_samples_per_shard=per_shard)
    assert report.index is not None, "not cancelled"
    return [s["url"] for s in json.loads(Path(report.index).read_text())["shards"]]


def start_s3s(root: Path, cpus: Optional[str]) -> tuple[subprocess.Popen[bytes], int]:
    binary = Path(os.environ.get("FERROLOADER_S3S_FS", REPO / "target/tools/bin/s3s-fs"))
    if not binary.is_file():
        raise SystemExit(f"no s3s-fs at {binary}: run `make s3-server`")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pin = ["taskset", "-c", cpus] if cpus else []
    proc = subprocess.Popen(
        pin + [str(binary), "--host", "127.0.0.1", "--port", str(port), "--access-key", "AK",
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


def cpu_set(spec: str) -> Set[int]:
    """A taskset CPU list (``0-3,8``) as a set."""
    cpus: Set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def put_object(port: int, bucket: str, name: str, data: bytes) -> None:
    """A SigV4-signed PUT (keys AK/SK, us-east-1): s3s-fs then stores the object's ETag, as a
    real store keeps it; a file copied into its folder has none, and s3s-fs hashes the whole
    file on every GET of it, ranges included, which is no store's real cost."""
    now = datetime.datetime.now(datetime.timezone.utc)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    host, path, payload = f"127.0.0.1:{port}", f"/{bucket}/{name}", hashlib.sha256(data).hexdigest()
    signed = "host;x-amz-content-sha256;x-amz-date"
    canonical = (f"PUT\n{path}\n\nhost:{host}\nx-amz-content-sha256:{payload}\n"
                 f"x-amz-date:{stamp}\n\n{signed}\n{payload}")
    scope = f"{day}/us-east-1/s3/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    key = b"AWS4SK"
    for part in (day, "us-east-1", "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("PUT", path, body=data, headers={
        "x-amz-date": stamp, "x-amz-content-sha256": payload,
        "Authorization": f"AWS4-HMAC-SHA256 Credential=AK/{scope}, SignedHeaders={signed}, "
                         f"Signature={signature}"})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    if response.status != 200:
        raise SystemExit(f"PUT {path}: HTTP {response.status}: {body[:300]!r}")


class Epoch(NamedTuple):
    """One epoch of a new loader: its wall time, the wait for its first batch, the rate after
    that batch (the steady state a long epoch is made of), and the CPU seconds it took in this
    process (the loader's threads: fetching, parsing HTTP, decoding) and in the server."""

    seconds: float
    first_batch: float
    steady_images_per_s: float
    loader_cpu: float
    server_cpu: float


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far, from /proc (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_epoch(make: Callable[[], fl.Loader], server_pid: int) -> Epoch:
    loader = make()
    cpu, server_cpu = time.process_time(), process_cpu_seconds(server_pid)
    start = time.perf_counter()
    first_at = 0.0
    first_size = n = 0
    for _, labels in loader:
        n += len(labels)
        if not first_at:
            first_at, first_size = time.perf_counter(), n
    end = time.perf_counter()
    steady = (n - first_size) / (end - first_at) if end > first_at else float("nan")
    return Epoch(end - start, first_at - start, steady, time.process_time() - cpu,
                 process_cpu_seconds(server_pid) - server_cpu)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", nargs="?", default=str(REPO / "target/fixtures/folder"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--per-shard", type=int, default=64)
    # The library's default, so that the benchmark measures what users get.
    ap.add_argument("--shuffle-buffer", type=int, default=1000)
    # The library's default. Smaller pieces split small test shards as 8 MiB pieces split real
    # ones, but each request costs s3s-fs more than its bytes: 1 MiB pieces read at 0.35x the
    # folder where 8 MiB ones read at 0.81x (16-core machine, server on cores of its own).
    ap.add_argument("--range-bytes", type=int, default=8 << 20)
    ap.add_argument("--max-requests", type=int, default=8)
    ap.add_argument("--read-ahead-shards", type=int, default=4)
    ap.add_argument("--server-cpus", default=None, help="taskset CPU list for s3s-fs, e.g. 12-15")
    ap.add_argument("--copy", action="store_true",
                    help="copy the shards into s3s-fs's folder instead of PUT (no stored ETag: "
                         "s3s-fs then hashes the whole shard on every request)")
    args = ap.parse_args()
    if args.server_cpus:
        server = cpu_set(args.server_cpus)
        rest = os.sched_getaffinity(0) - server
        if not rest:
            raise SystemExit(f"--server-cpus {args.server_cpus} leaves no CPU for the loader")
        os.sched_setaffinity(0, rest)
    folder = Path(args.folder)
    transform = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                           T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "shards").mkdir()
        names = write_shards(folder, tmp / "shards", args.per_shard)
        (tmp / "s3" / "bucket").mkdir(parents=True)
        if args.copy:
            for name in names + ["index.json"]:
                shutil.copy(tmp / "shards" / name, tmp / "s3" / "bucket" / name)
        proc, port = start_s3s(tmp / "s3", args.server_cpus)
        if not args.copy:
            for name in names + ["index.json"]:
                put_object(port, "bucket", name, (tmp / "shards" / name).read_bytes())
        storage = {"aws_endpoint": f"http://127.0.0.1:{port}", "aws_access_key_id": "AK",
                   "aws_secret_access_key": "SK", "aws_region": "us-east-1", "aws_allow_http": "true"}
        common = dict(batch_size=64, shuffle=True, num_workers=args.workers, transform=transform)
        local = fl.WebDataset([str(tmp / "shards" / n) for n in names], shuffle_buffer=args.shuffle_buffer)
        s3_urls = [f"s3://bucket/{n}" for n in names]
        ahead = args.read_ahead_shards
        whole = fl.WebDataset(s3_urls, storage_options=storage, shuffle_buffer=args.shuffle_buffer,
                              range_bytes=0, read_ahead_shards=ahead)
        ranged = fl.WebDataset(s3_urls, storage_options=storage, shuffle_buffer=args.shuffle_buffer,
                               range_bytes=args.range_bytes, max_requests=args.max_requests,
                               read_ahead_shards=ahead)
        folder_ds = fl.ImageFolder(folder)
        setups: Dict[str, Callable[[], fl.Loader]] = {
            "folder": lambda: fl.Loader(folder_ds, **common),
            "local shards": lambda: fl.Loader(local, **common),
            "s3s-fs whole": lambda: fl.Loader(whole, **common),
            "s3s-fs ranges": lambda: fl.Loader(ranged, **common),
        }
        try:
            for make in setups.values():
                run_epoch(make, proc.pid)  # warm-up: page cache, first connections
            epochs: Dict[str, List[Epoch]] = {k: [] for k in setups}
            for _ in range(args.rounds):
                for name, make in setups.items():
                    epochs[name].append(run_epoch(make, proc.pid))
        finally:
            proc.kill()
            proc.wait()
    images = len(folder_ds)
    base = statistics.median(e.seconds for e in epochs["folder"])
    base_steady = statistics.median(e.steady_images_per_s for e in epochs["folder"])
    print(f"{images} images, {len(names)} shards of {args.per_shard}, shuffle buffer "
          f"{args.shuffle_buffer}, {args.workers} workers, {args.rounds} rounds (median); ranges of "
          f"{args.range_bytes} bytes, {args.max_requests} in flight, {args.read_ahead_shards} shards "
          f"ahead; server CPUs "
          f"{args.server_cpus or 'shared'}, loader CPUs {sorted(os.sched_getaffinity(0))}; shards "
          f"{'copied' if args.copy else 'PUT'}")
    # CPU per image says what wall-clock ratios cannot on a machine whose cores the loader
    # already fills: what reading shards costs the loader's process beyond the folder's reads,
    # and what the server would need cores for.
    base_cpu = statistics.median(e.loader_cpu for e in epochs["folder"])
    print(f"{'source':16} {'s/epoch':>8} {'img/s':>8} {'vs folder':>10} {'1st batch s':>12} "
          f"{'steady img/s':>13} {'vs folder':>10} {'loader CPU ms/img':>18} {'vs folder':>10} "
          f"{'server CPU ms/img':>18}")
    for name, runs in epochs.items():
        med = statistics.median(e.seconds for e in runs)
        first = statistics.median(e.first_batch for e in runs)
        steady = statistics.median(e.steady_images_per_s for e in runs)
        cpu = statistics.median(e.loader_cpu for e in runs)
        server_cpu = statistics.median(e.server_cpu for e in runs)
        print(f"{name:16} {med:8.3f} {images / med:8.1f} {base / med:10.3f} {first:12.3f} "
              f"{steady:13.1f} {steady / base_steady:10.3f} {1e3 * cpu / images:18.3f} "
              f"{cpu / base_cpu:10.3f} {1e3 * server_cpu / images:18.3f}")


if __name__ == "__main__":
    main()
