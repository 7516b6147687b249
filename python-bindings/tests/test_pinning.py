"""``pin_memory=True`` with a page-locked ring, on machines without a GPU: a stand-in CUDA
runtime (fake_cudart.c, built here) records what the loader locks, and torch's CUDA events are
replaced by ones the test completes by hand. test_pinning_cuda.py runs the real thing."""

from __future__ import annotations

import ctypes
import gc
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator, List, Tuple

import numpy as np
import pytest
import torch

import ferroloader as fl
import ferroloader.loader as fl_loader
from ferroloader import _native
from ferroloader import transforms as T
from ferroloader._pinning import DeviceReadHold, cuda_runtime_path
from ferroloader.transforms import pipeline_spec

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def fake_runtime(tmp_path_factory: pytest.TempPathFactory) -> Tuple[str, ctypes.CDLL]:
    """The stand-in runtime's path and the library itself (the loader opens the same copy)."""
    out = tmp_path_factory.mktemp("cudart") / "libfakecudart.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-O1", "-o", str(out), str(HERE / "fake_cudart.c")], check=True
    )
    lib = ctypes.CDLL(str(out))
    lib.fake_start.restype = ctypes.c_size_t
    lib.fake_length.restype = ctypes.c_size_t
    return str(out), lib


def regions(lib: ctypes.CDLL) -> List[Tuple[int, int, bool]]:
    """Every range registered so far: (start, length, still registered)."""
    return [
        (lib.fake_start(i), lib.fake_length(i), bool(lib.fake_live(i)))
        for i in range(lib.fake_regions())
    ]


def transform() -> T.Compose:
    return T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])


SAMPLE_BYTES = 3 * 32 * 32 * 4


def native_loader(folder: Path, page_lock: str, **kw: Any) -> _native.Loader:
    return _native.Loader(
        fl.ImageFolder(str(folder)),
        pipeline_spec(transform()),
        batch_size=4,
        shuffle=False,
        drop_last=False,
        seed=0,
        num_workers=2,
        prefetch_batches=2,
        in_order=True,
        on_error="raise",
        page_lock=page_lock,
        **kw,
    )


def test_the_ring_is_locked_where_the_workers_write_and_unlocked_when_freed(
    folder: Path, fake_runtime: Tuple[str, ctypes.CDLL]
) -> None:
    path, lib = fake_runtime
    before = lib.fake_regions()
    loader = native_loader(folder, path)
    first = regions(lib)[before:]
    assert [(length, live) for _, length, live in first] == [(4 * SAMPLE_BYTES, True)]
    addresses = []
    for images, labels, indices in loader.iter():
        start = images.__array_interface__["data"][0]
        addresses.append(start)
        assert images.base.images_address == start
        assert any(
            s <= start and start + images.nbytes <= s + n and live
            for s, n, live in regions(lib)[before:]
        ), "every batch's images lie in a locked range"
    assert len(addresses) == 5
    mine = regions(lib)[before:]
    assert all(n == 4 * SAMPLE_BYTES for _, n, _ in mine)
    assert len(mine) <= 2 + 2 + 2, "prefetched, held by the consumer and for the device: no more"
    del loader, images, labels, indices
    gc.collect()
    # The epoch's pump thread lets go of the ring as it winds down.
    deadline = time.monotonic() + 10
    while any(live for _, _, live in regions(lib)[before:]) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(live for _, _, live in regions(lib)[before:]), "all unlocked once freed"


def test_a_refused_lock_names_pin_memory_and_the_runtime_error(
    folder: Path, fake_runtime: Tuple[str, ctypes.CDLL]
) -> None:
    path, lib = fake_runtime
    lib.fake_refuse(1)
    try:
        with pytest.raises(MemoryError) as e:
            native_loader(folder, path)
    finally:
        lib.fake_refuse(0)
    assert str(e.value) == (
        f"pin_memory: cannot allocate {4 * SAMPLE_BYTES} bytes for a batch buffer of 4 samples "
        f"of {SAMPLE_BYTES} bytes, page-locked (cudaHostRegister: cudaErrorMemoryAllocation (2))"
    )


def test_a_library_that_is_not_the_cuda_runtime_is_refused(folder: Path) -> None:
    with pytest.raises(RuntimeError, match=r"^pin_memory: libc\.so\.6: no cudaHostRegister"):
        native_loader(folder, "libc.so.6")


def test_the_runtime_is_found_in_the_process_maps(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r--p 00000000 00:00 1   /usr/lib/libc.so.6\n"
        "7f02-7f03 r-xp 00000000 00:00 2   /opt/torch/nvidia/cu13/lib/libcudart.so.13\n"
        "7f04-7f05 rw-p 00000000 00:00 0\n"
    )
    assert cuda_runtime_path(str(maps)) == "/opt/torch/nvidia/cu13/lib/libcudart.so.13"
    maps.write_text("7f00-7f01 r--p 00000000 00:00 1   /usr/lib/libcudart_static_notes.txt\n")
    assert cuda_runtime_path(str(maps)) is None
    assert cuda_runtime_path(str(tmp_path / "absent")) is None


class FakeEvent:
    """A CUDA event that passes when the test says the device is done."""

    device_done = False
    recorded: List[Any] = []

    def record(self, stream: Any) -> None:
        FakeEvent.recorded.append(stream)

    def query(self) -> bool:
        return FakeEvent.device_done

    def synchronize(self) -> None:
        FakeEvent.device_done = True


@pytest.fixture()
def fake_cuda(
    monkeypatch: pytest.MonkeyPatch, fake_runtime: Tuple[str, ctypes.CDLL]
) -> Iterator[ctypes.CDLL]:
    """torch believing CUDA is there: the stand-in runtime, hand-completed events, and a labels
    `pin_memory` that only marks the tensor."""
    path, lib = fake_runtime
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: f"stream of {device}")
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, device=None: self.clone())
    monkeypatch.setattr(fl_loader, "cuda_runtime_path", lambda: path)
    FakeEvent.device_done = False
    FakeEvent.recorded = []
    yield lib


def test_batches_stay_held_until_the_device_has_read_them(
    folder: Path, fake_cuda: ctypes.CDLL
) -> None:
    lib = fake_cuda
    plain = [(x.clone(), y.clone()) for x, y in fl.Loader(fl.ImageFolder(folder), 4, transform=transform())]
    loader = fl.Loader(fl.ImageFolder(folder), 4, pin_memory=True, transform=transform())
    assert loader.pinning == "ring"
    hold = loader._device_hold
    assert isinstance(hold, DeviceReadHold)
    before = lib.fake_regions()
    held_at: List[int] = []
    got = []
    for images, labels in loader:
        at = images.data_ptr()
        assert at not in held_at, "a buffer the device may still read is never refilled"
        held_at.append(at)
        got.append((images.clone(), labels.clone()))
        del images
    assert len(hold) == 5 and len(FakeEvent.recorded) == 5, "each batch held from its release"
    assert FakeEvent.recorded[0] == "stream of cuda"
    for (x, y), (px, py) in zip(got, plain):
        assert torch.equal(x, px) and torch.equal(y, py)
    grown = lib.fake_regions() - before
    # The device finishes: the next epoch gives the held buffers back first and reuses them.
    FakeEvent.device_done = True
    for images, _ in loader:
        assert any(images.data_ptr() == a for a in held_at), "reused, not newly allocated"
        del images
    assert lib.fake_regions() - before == grown, "no buffer locked in the second epoch"
    assert len(hold) == 0, "all given back by the call that ends the epoch"


def test_without_a_runtime_to_lock_with_batches_are_copied_pinned(
    folder: Path, fake_cuda: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fl_loader, "cuda_runtime_path", lambda: None)
    loader = fl.Loader(fl.ImageFolder(folder), 4, pin_memory=True, transform=transform())
    assert loader.pinning == "copy" and loader._device_hold is None
    plain = list(fl.Loader(fl.ImageFolder(folder), 4, transform=transform()))
    for (x, y), (px, py) in zip(loader, plain):
        assert torch.equal(x, px) and torch.equal(y, py)


def test_an_unpinned_loader_says_so(folder: Path) -> None:
    assert fl.Loader(fl.ImageFolder(folder), 4, transform=transform()).pinning is None
    assert np.dtype("float32").itemsize * 3 * 32 * 32 == SAMPLE_BYTES


def test_where_cuda_is_unusable_a_batch_is_not_held() -> None:
    """At interpreter exit or in a forked child no copy can be running: nothing to wait for."""
    if torch.cuda.is_available():
        pytest.skip("needs a process where CUDA cannot record events")
    hold = DeviceReadHold("cuda")
    images = np.ones(6, np.float32).reshape(2, 3)  # a view: its base is what the hold keeps
    hold.watch(images)
    del images
    assert len(hold) == 0


class TwoViews:
    """Two deterministic views of each image, of different sizes (a batch of views)."""

    def __init__(self) -> None:
        import torchvision.transforms as tv

        self.large = tv.Compose([tv.Resize(40), tv.CenterCrop(32), tv.ToTensor()])
        self.small = tv.Compose([tv.Resize(20), tv.CenterCrop(16), tv.ToTensor()])

    def __call__(self, img: Any) -> List[Any]:
        return [self.large(img), self.small(img)]


def test_every_view_of_a_batch_is_held_until_the_device_has_read_it(
    folder: Path, fake_cuda: ctypes.CDLL
) -> None:
    from torchvision.datasets import ImageFolder

    ds = ImageFolder(str(folder), TwoViews())
    plain = [([v.clone() for v in x], y.clone()) for x, y in fl.Loader(ds, 4)]
    loader = fl.Loader(ds, 4, pin_memory=True)
    assert loader.pinning == "ring" and loader.views is not None
    hold = loader._device_hold
    assert isinstance(hold, DeviceReadHold)
    held_at: List[int] = []
    for (views, labels), (want, want_labels) in zip(loader, plain):
        # The views lie in the page-locked ring (view 0 at the buffer's start), never in a
        # buffer the device may still read.
        at = views[0].data_ptr()
        assert at not in held_at, "a buffer the device may still read is never refilled"
        assert views[1].data_ptr() == at + len(labels) * views[0][0].nbytes
        held_at.append(at)
        assert all(torch.equal(v, w) for v, w in zip(views, want)) and torch.equal(labels, want_labels)
        first = len(FakeEvent.recorded)
        del views[0]
        assert len(FakeEvent.recorded) == first + 1, "each view held from its own release"
        del views
    assert len(hold) == 2 * 5, "both views of every batch held"
    FakeEvent.device_done = True
    for views, _ in loader:
        assert any(views[0].data_ptr() == a for a in held_at), "reused, not newly allocated"
        del views
    assert len(hold) == 0
