"""``fl.WebDataset``: tar shards (written here with ``tarfile``, index by the agreed schema)
read from local paths, plain HTTP and a real S3-compatible server (s3s-fs, ``make
s3-server``), through ``fl.Loader`` as a folder is: the same pixels per file, every sample once
across two ranks, ``state_dict`` resume, the cache with the server stopped, byte-range reads
equal to whole-shard reads, a forked child reading what the parent reads, and the errors."""

from __future__ import annotations

import functools
import http.server
import io
import json
import multiprocessing
import os
import pickle
import shutil
import socket
import subprocess
import tarfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import numpy as np
import pytest

import ferroloader as fl
from ferroloader import transforms as T

PER_SHARD = 5
REPO = Path(__file__).resolve().parents[2]


def eval_transform() -> T.Compose:
    return T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])


def key_of(root: Path, path: str) -> str:
    rel = Path(path).relative_to(root)
    return str(rel.with_suffix(""))


def write_shards(folder: Path, out: Path) -> List[str]:
    """The folder's samples as tar shards of ``PER_SHARD`` plus ``index.json``."""
    out.mkdir(parents=True, exist_ok=True)
    samples = fl.ImageFolder(folder).samples
    names: List[str] = []
    shards = []
    for n in range(0, len(samples), PER_SHARD):
        name = f"shard-{n // PER_SHARD:06d}.tar"
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for path, label in samples[n : n + PER_SHARD]:
                key = key_of(folder, path)
                image = Path(path).read_bytes()
                for member, payload in ((key + Path(path).suffix.lower(), image), (key + ".cls", str(label).encode())):
                    info = tarfile.TarInfo(member)
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
        raw = buf.getvalue()
        entries = []
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            members = tar.getmembers()
            for image_member, cls_member in zip(members[::2], members[1::2]):
                label_file = tar.extractfile(cls_member)
                assert label_file is not None
                entries.append(
                    {
                        "key": image_member.name.rsplit(".", 1)[0],
                        "offset": image_member.offset_data,
                        "size": image_member.size,
                        "label": int(label_file.read()),
                    }
                )
        (out / name).write_bytes(raw)
        shards.append({"url": name, "num_samples": len(entries), "bytes": len(raw), "samples": entries})
        names.append(name)
    index = {
        "format": "ferroloader-shards",
        "version": 1,
        "shards": shards,
        "num_samples": sum(s["num_samples"] for s in shards),
    }
    (out / "index.json").write_text(json.dumps(index))
    return names


@pytest.fixture()
def shards(folder: Path, tmp_path: Path) -> Tuple[Path, List[str]]:
    out = tmp_path / "shards"
    return out, write_shards(folder, out)


def by_key(loader: fl.Loader, key) -> Dict[str, Tuple[int, np.ndarray]]:  # type: ignore[no-untyped-def]
    got: Dict[str, Tuple[int, np.ndarray]] = {}
    it = iter(loader)
    for images, labels in it:
        assert it.indices is not None
        for slot, index in enumerate(it.indices.tolist()):
            k = key(index)
            assert k not in got, f"{k} delivered twice"
            got[k] = (int(labels[slot]), images[slot].numpy().copy())
    return got


def test_two_ranks_cover_the_folder_with_its_pixels(folder: Path, shards: Tuple[Path, List[str]]) -> None:
    out, names = shards
    ref_ds = fl.ImageFolder(folder)
    ref = by_key(
        fl.Loader(ref_ds, batch_size=4, transform=eval_transform()),
        lambda i: key_of(folder, ref_ds.samples[i][0]),
    )
    pattern = str(out / f"shard-{{000000..{len(names) - 1:06d}}}.tar")
    got: Dict[str, Tuple[int, np.ndarray]] = {}
    for rank in range(2):
        ds = fl.WebDataset(pattern, shuffle_buffer=4)
        assert len(ds) == len(ref_ds)
        loader = fl.Loader(ds, batch_size=4, shuffle=True, seed=3, rank=rank, world_size=2, transform=eval_transform())
        part = by_key(loader, ds.key)
        assert not set(part) & set(got), "a sample read by both ranks"
        got.update(part)
    assert sorted(got) == sorted(ref)
    for k, (label, pixels) in ref.items():
        assert got[k][0] == label
        np.testing.assert_array_equal(got[k][1], pixels, err_msg=k)


def test_the_shuffle_buffer_yields_from_shuffle_initial_samples_on(shards: Tuple[Path, List[str]]) -> None:
    out, names = shards
    urls = [str(out / n) for n in names]

    def epoch(**options: int) -> List[int]:
        ds = fl.WebDataset(urls, **options)
        it = iter(fl.Loader(ds, batch_size=4, shuffle=True, seed=5, transform=eval_transform()))
        order: List[int] = []
        for _ in it:
            assert it.indices is not None
            order += it.indices.tolist()
        return order

    # Shards shuffle the same whatever the buffer: where each sample stands before it.
    position = {index: p for p, index in enumerate(epoch(shuffle_buffer=1))}
    early = epoch(shuffle_buffer=16, shuffle_initial=2)
    full_first = epoch(shuffle_buffer=16, shuffle_initial=16)
    assert sorted(early) == sorted(full_first) == sorted(position)
    # Sample k goes out when input 2 + 2k + 1 comes in: the first batch needs 9 samples read,
    # not the 16 + 4 a buffer filled before its first sample needs.
    assert max(position[i] for i in early[:4]) < 2 + 2 * 3 + 1
    assert early != full_first
    assert epoch(shuffle_buffer=16) == full_first, "the default (100) is clamped to the buffer"
    ds = fl.WebDataset(urls, shuffle_buffer=16, shuffle_initial=2)
    assert pickle.loads(pickle.dumps(ds)).__reduce__()[1] == ds.__reduce__()[1]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture()
def http_root(shards: Tuple[Path, List[str]]) -> Iterator[str]:
    out, _ = shards
    handler = functools.partial(_Quiet, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_http_shards_resume_from_state_dict_whatever_the_workers(
    http_root: str, shards: Tuple[Path, List[str]]
) -> None:
    _, names = shards
    urls = [f"{http_root}/{n}" for n in names]

    def make(workers: int) -> fl.Loader:
        ds = fl.WebDataset(urls, shuffle_buffer=3, read_ahead_shards=2)
        return fl.Loader(ds, batch_size=4, shuffle=True, seed=9, num_workers=workers, transform=eval_transform())

    def run(loader: fl.Loader, limit: int = 1000) -> List[Tuple[List[int], np.ndarray]]:
        out = []
        it = iter(loader)
        for images, _ in it:
            assert it.indices is not None
            out.append((it.indices.tolist(), images.numpy().copy()))
            if len(out) == limit:
                break
        return out

    reference = run(make(0))
    assert len(reference) >= 4
    for workers in (1, 2):
        again = run(make(workers))
        assert [i for i, _ in again] == [i for i, _ in reference]
        for (_, a), (_, b) in zip(again, reference):
            np.testing.assert_array_equal(a, b)
    first = make(2)
    head = run(first, limit=2)
    state = first.state_dict()
    resumed = make(1)
    resumed.load_state_dict(state)
    rest = run(resumed)
    assert [i for i, _ in head + rest] == [i for i, _ in reference]


def s3s_fs_binary() -> Path:
    path = Path(os.environ.get("FERROLOADER_S3S_FS", REPO / "target" / "tools" / "bin" / "s3s-fs"))
    if not path.is_file():
        pytest.fail(f"no S3 test server at {path}: run `make s3-server` (or set FERROLOADER_S3S_FS)")
    return path


class S3Server:
    """s3s-fs over a temporary folder (a bucket is a subfolder) on a free port."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "bucket").mkdir(parents=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen(
            [str(s3s_fs_binary()), "--host", "127.0.0.1", "--port", str(self.port),
             "--access-key", "AK", "--secret-key", "SK", str(root)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "s3s-fs did not start"
                time.sleep(0.05)

    def options(self) -> Dict[str, str]:
        return {
            "aws_endpoint": f"http://127.0.0.1:{self.port}",
            "aws_access_key_id": "AK",
            "aws_secret_access_key": "SK",
            "aws_region": "us-east-1",
            "aws_allow_http": "true",
        }

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture()
def s3(shards: Tuple[Path, List[str]], tmp_path: Path) -> Iterator[S3Server]:
    out, names = shards
    server = S3Server(tmp_path / "s3")
    for name in names + ["index.json"]:
        shutil.copy(out / name, server.root / "bucket" / name)
    yield server
    server.stop()


def test_s3_cache_serves_the_next_epoch_with_the_server_stopped(
    s3: S3Server, shards: Tuple[Path, List[str]], tmp_path: Path
) -> None:
    _, names = shards
    urls = [f"s3://bucket/{n}" for n in names]
    ds = fl.WebDataset(urls, cache_dir=tmp_path / "cache", storage_options=s3.options(), retries=0)
    loader = fl.Loader(ds, batch_size=4, shuffle=True, transform=eval_transform())
    first = sum(len(labels) for _, labels in loader)
    assert first == len(ds)
    s3.stop()
    second = sum(len(labels) for _, labels in loader)
    assert second == len(ds)


def test_s3_server_gone_names_the_url_and_skip_reports_the_samples(
    s3: S3Server, shards: Tuple[Path, List[str]]
) -> None:
    _, names = shards
    urls = [f"s3://bucket/{n}" for n in names]
    ds = fl.WebDataset(urls, storage_options=s3.options(), retries=1, retry_backoff=0.01)
    s3.stop()
    with pytest.raises(OSError, match=r"s3://bucket/shard-0000\d\d\.tar"):
        for _ in fl.Loader(ds, batch_size=4, transform=eval_transform()):
            pass
    loader = fl.Loader(ds, batch_size=4, on_error="skip", transform=eval_transform())
    it = iter(loader)
    assert sum(len(labels) for _, labels in it) == 0
    lost = it.skipped
    assert len(lost) == len(ds)
    assert all("s3://bucket/shard-" in path for _, path, _ in lost)


def aws_profile_env(monkeypatch: pytest.MonkeyPatch, home: Path, credentials: str, config: str) -> None:
    """``credentials`` and ``config`` as ``HOME/.aws`` holds them, and no ``AWS_*`` variables."""
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text(credentials)
    (home / ".aws" / "config").write_text(config)
    for var in [v for v in os.environ if v.startswith("AWS_")]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(home))


def test_s3_credentials_region_and_endpoint_come_from_an_aws_profile(
    s3: S3Server, shards: Tuple[Path, List[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Set up as ``aws configure`` leaves it, no variables and no storage_options: the profile's
    keys, region and http:// endpoint reach the server (s3s-fs refuses unsigned requests)."""
    _, names = shards
    aws_profile_env(
        monkeypatch,
        tmp_path / "home",
        "[train]\naws_access_key_id = AK\naws_secret_access_key = SK\n",
        f"[profile train]\nregion = us-east-1\nendpoint_url = http://127.0.0.1:{s3.port}\n",
    )
    monkeypatch.setenv("AWS_PROFILE", "train")
    ds = fl.WebDataset([f"s3://bucket/{n}" for n in names], retries=0)
    loader = fl.Loader(ds, batch_size=4, transform=eval_transform())
    assert sum(len(labels) for _, labels in loader) == len(ds)
    # Wrong keys in the profile: the server refuses, and the error names the URL.
    (tmp_path / "home" / ".aws" / "credentials").write_text(
        "[train]\naws_access_key_id = AK\naws_secret_access_key = wrong\n")
    with pytest.raises(OSError, match=r"s3://bucket/"):
        fl.WebDataset([f"s3://bucket/{n}" for n in names], retries=0)


def test_an_aws_profile_that_fetches_its_credentials_says_how_to_export_them(
    shards: Tuple[Path, List[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    aws_profile_env(monkeypatch, tmp_path / "home", "",
                    "[default]\nsso_session = corp\nregion = eu-west-1\n")
    with pytest.raises(OSError, match=r"sso_session.*export-credentials"):
        fl.WebDataset(["s3://bucket/shard-000000.tar"], retries=0)
    monkeypatch.setenv("AWS_PROFILE", "missing")
    with pytest.raises(OSError, match=r"AWS_PROFILE=missing: no such profile"):
        fl.WebDataset(["s3://bucket/shard-000000.tar"], retries=0)


def test_without_index_shards_are_scanned_and_num_samples_checked(shards: Tuple[Path, List[str]]) -> None:
    out, names = shards
    (out / "index.json").unlink()
    urls = [str(out / n) for n in names]
    ds = fl.WebDataset(urls)
    assert len(ds) == sum(ds.shard_sizes)
    with pytest.raises(ValueError, match="num_samples"):
        fl.WebDataset(urls, num_samples=len(ds) + 1)
    again = pickle.loads(pickle.dumps(ds))
    assert len(again) == len(ds) and again.urls == ds.urls
    index = json.loads(ds.index_json())
    assert index["format"] == "ferroloader-shards" and index["num_samples"] == len(ds)


def test_a_corrupt_shard_names_the_url_and_member(shards: Tuple[Path, List[str]]) -> None:
    out, names = shards
    (out / "index.json").unlink()
    victim = out / names[0]
    data = victim.read_bytes()
    with tarfile.open(victim) as tar:
        first_cls = next(m for m in tar.getmembers() if m.name.endswith(".cls"))
    # The label member's data replaced by a non-number.
    patched = bytearray(data)
    patched[first_cls.offset_data] = ord("x")
    victim.write_bytes(bytes(patched))
    with pytest.raises(OSError, match=rf"{names[0]}.*{first_cls.name}"):
        fl.WebDataset([str(victim)])


def test_shards_written_by_fl_shard_read_back_as_the_folder(folder: Path, tmp_path: Path) -> None:
    """The user's path: `ferroloader shard` writes, `fl.WebDataset` reads (two ranks), and the
    samples are the folder's, pixels and labels (matched as a multiset: the writer's keys are
    sample numbers, not paths)."""
    import hashlib

    written = fl.shard(folder, tmp_path / "out", shard_size="64KB", shuffle=True, seed=1)
    assert written.shards >= 3

    def fingerprints(loader: fl.Loader) -> List[Tuple[int, str]]:
        return [
            (int(label), hashlib.sha256(image.numpy().tobytes()).hexdigest())
            for images, labels in loader
            for image, label in zip(images, labels)
        ]

    reference = sorted(fingerprints(fl.Loader(fl.ImageFolder(folder), batch_size=4, transform=eval_transform())))
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    urls = [str(tmp_path / "out" / s["url"]) for s in index["shards"]]
    assert index["classes"] == fl.ImageFolder(folder).classes
    got: List[Tuple[int, str]] = []
    for rank in range(2):
        ds = fl.WebDataset(urls, shuffle_buffer=8)
        got += fingerprints(fl.Loader(ds, batch_size=4, shuffle=True, seed=2, rank=rank, world_size=2,
                                      drop_last=False, transform=eval_transform()))
    # Two ranks pad to an even split as DistributedSampler does: at most one sample repeated.
    assert len(got) - len(reference) in (0, 1)
    assert set(got) == set(reference)


def test_shard_requests_are_io_spans_and_the_report_weighs_them_against_decode(
    shards: Tuple[Path, List[str]], tmp_path: Path
) -> None:
    out, names = shards
    ds = fl.WebDataset([str(out / n) for n in names], shuffle_buffer=4)
    loader = fl.Loader(ds, batch_size=4, shuffle=True, transform=eval_transform(), profile="spans")
    for _ in loader:
        pass
    profile = loader.profile()
    pipeline = profile.pipelines[0]
    io_spans = [s for s in pipeline.spans if s.worker == fl._native.IO]
    assert sorted(s.op for s in io_spans) == ["shard_read"] * len(names)
    shard_bytes = sum((out / n).stat().st_size for n in names)
    assert sum(s.bytes or 0 for s in io_spans) == shard_bytes
    summary = profile.summary().pipelines[0]
    assert summary.io_bytes == shard_bytes and summary.io_seconds > 0
    page = tmp_path / "report.html"
    fl.report.write_html(profile, page)
    html = page.read_text()
    assert '<section id="io">' in html
    section = html.split('<section id="io">', 1)[1].split("</section>", 1)[0]
    assert f"<td class=\"num\">{len(names)}</td>" in section and "decode s" in section


def epoch_of(loader: fl.Loader) -> List[Tuple[List[int], np.ndarray]]:
    """Every batch of the loader's next epoch: (indices, pixels)."""
    out = []
    it = iter(loader)
    for images, _ in it:
        assert it.indices is not None
        out.append((it.indices.tolist(), images.numpy().copy()))
    return out


def same_epochs(a: List[Tuple[List[int], np.ndarray]], b: List[Tuple[List[int], np.ndarray]]) -> None:
    assert [i for i, _ in a] == [i for i, _ in b]
    for (_, x), (_, y) in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_s3_byte_ranges_read_the_same_samples_as_whole_shards(
    s3: S3Server, shards: Tuple[Path, List[str]]
) -> None:
    _, names = shards
    urls = [f"s3://bucket/{n}" for n in names]

    def make(range_bytes: int, workers: int) -> fl.Loader:
        ds = fl.WebDataset(
            urls, storage_options=s3.options(), range_bytes=range_bytes, max_requests=3, shuffle_buffer=4
        )
        return fl.Loader(ds, batch_size=4, shuffle=True, seed=2, num_workers=workers, transform=eval_transform())

    whole = epoch_of(make(0, 2))
    assert len(whole) >= 4
    for workers in (0, 1, 2):
        # 1 byte: every sample a range request of its own.
        same_epochs(epoch_of(make(1, workers)), whole)
    ds = fl.WebDataset(urls, storage_options=s3.options(), range_bytes=1, max_requests=3)
    again = pickle.loads(pickle.dumps(ds))
    assert again.__reduce__()[1] == ds.__reduce__()[1]
    with pytest.raises(ValueError, match="max_requests"):
        fl.WebDataset(urls, storage_options=s3.options(), max_requests=0)


def test_s3_truncated_object_fails_the_samples_of_the_lost_ranges(
    s3: S3Server, shards: Tuple[Path, List[str]]
) -> None:
    _, names = shards
    urls = [f"s3://bucket/{n}" for n in names]
    ds = fl.WebDataset(urls, storage_options=s3.options(), retries=1, retry_backoff=0.01, range_bytes=1)
    index = json.loads(ds.index_json())
    victim = index["shards"][1]
    cut = victim["samples"][2]["offset"] + 10
    stored = s3.root / "bucket" / names[1]
    stored.write_bytes(stored.read_bytes()[:cut])
    want = sorted(f"{urls[1]}#{s['key']}" for s in victim["samples"][2:])
    loader = fl.Loader(ds, batch_size=4, on_error="skip", transform=eval_transform())
    it = iter(loader)
    delivered = sum(len(labels) for _, labels in it)
    assert sorted(path for _, path, _ in it.skipped) == want
    assert delivered == len(ds) - len(want)
    with pytest.raises(OSError, match=r"s3://bucket/shard-000001\.tar#"):
        for _ in fl.Loader(ds, batch_size=4, transform=eval_transform()):
            pass


def _child_reads(loader: fl.Loader, ds: fl.WebDataset, queue: Any) -> None:
    try:
        inherited = ds.inherited
        fresh = fl.Loader(ds, batch_size=4, shuffle=True, seed=5, transform=eval_transform())
        queue.put((inherited, epoch_of(loader), epoch_of(fresh)))  # epochs 2 and 0
    except BaseException as e:  # report anything to the parent
        queue.put(repr(e))


@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
@pytest.mark.parametrize("range_bytes", [0, 1])
def test_a_forked_child_reads_what_the_parent_reads(
    s3: S3Server, shards: Tuple[Path, List[str]], range_bytes: int
) -> None:
    """The child is forked mid-epoch (the parent's fetchers and I/O runtime running): its
    loaders get a dataset rebuilt there and read the same samples and pixels as the parent."""
    _, names = shards
    urls = [f"s3://bucket/{n}" for n in names]
    ds = fl.WebDataset(urls, storage_options=s3.options(), range_bytes=range_bytes, read_ahead_shards=2)
    loader = fl.Loader(ds, batch_size=4, shuffle=True, seed=5, num_workers=2, transform=eval_transform())
    epoch0 = epoch_of(loader)
    it = iter(loader)  # epoch 1, running while the child is forked
    next(it)
    assert not ds.inherited
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_reads, args=(loader, ds, queue))
    child.start()
    got = queue.get(timeout=120)
    child.join(timeout=60)
    assert not isinstance(got, str), got
    assert child.exitcode == 0
    inherited, child_epoch2, child_epoch0 = got
    assert inherited
    assert sum(1 for _ in it) + 1 == len(epoch0), "the parent's epoch goes on"
    same_epochs(child_epoch0, epoch0)
    # The inherited loader went on with the epoch after the running one, as the parent does.
    same_epochs(child_epoch2, epoch_of(loader))
