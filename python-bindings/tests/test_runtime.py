"""How the loader behaves inside a Python process: zero-copy batches, the GIL and Ctrl-C,
fork safety, the command line."""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator, List

import numpy as np
import pytest
import torch

import ferroloader as fl
from ferroloader import transforms as T


def small_transform() -> T.Compose:
    return T.Compose([T.RandomResizedCrop(24), T.ToTensor()])


def test_batches_are_not_copied(folder: Path) -> None:
    # numpy: the array's memory is the Rust batch buffer, and the batch is the array's base.
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=4, num_workers=2, transform=small_transform(), tensor_type="numpy")
    addresses = set()
    for images, labels in loader:
        memory = images.base
        assert isinstance(memory, fl._native.BatchMemory)
        assert images.ctypes.data == memory.images_address
        assert images.ctypes.data % 64 == 0
        assert images.flags.writeable and images.flags.c_contiguous
        assert labels.base is memory and labels.dtype == np.int64
        addresses.add(memory.images_address)
        del images, labels, memory
    # Buffers come back to the ring and are reused (2 in flight + 2 the consumer may hold).
    assert len(addresses) <= 4

    # torch: the tensor's data pointer is that same buffer (no copy in torch.from_numpy).
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=4, num_workers=2, transform=small_transform())
    it = iter(loader)
    images, labels = next(it)
    assert it.indices is not None
    memory = it.indices.base
    assert images.data_ptr() == memory.images_address
    assert labels.data_ptr() == labels.numpy().ctypes.data
    # The tensor keeps the buffer alive (and untouched) after the loader is gone.
    saved = images.clone()
    del it, loader, memory
    gc.collect()
    for _ in range(3):
        list(fl.Loader(fl.ImageFolder(folder), batch_size=4, num_workers=2, transform=small_transform()))
    assert torch.equal(images, saved)


def slow_loader(big_folder: Path, batch_size: int) -> fl.Loader:
    """Full decodes and resizes of 2400x1800 JPEGs on one worker: tens of ms per sample."""
    return fl.Loader(
        fl.ImageFolder(big_folder),
        batch_size=batch_size,
        num_workers=1,
        prefetch_batches=1,
        sampler=[0, 1] * 24,
        transform=T.Compose([T.Resize(1200), T.CenterCrop(1000), T.ToTensor()]),
    )


@pytest.fixture()
def sigint_raises() -> Iterator[None]:
    """Python's KeyboardInterrupt handler for the test's duration: Python installs it only when
    SIGINT was not ignored at start-up, and a shell ignores SIGINT in the commands it starts in
    the background (`make test &`)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("sigint_raises")
def test_ctrl_c_interrupts_a_wait_promptly(big_folder: Path) -> None:
    loader = slow_loader(big_folder, batch_size=48)
    it = iter(loader)
    sent: List[float] = []

    def interrupt() -> None:
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(0.2, interrupt)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        next(it)
    raised = time.monotonic()
    timer.join()
    assert sent, "the timer did not fire"
    assert raised - sent[0] < 0.5, f"KeyboardInterrupt took {raised - sent[0]:.2f}s"
    images, _ = next(it)  # the interrupted request is still pending: the batch is not lost
    ready = time.monotonic()
    assert images.shape == (48, 3, 1000, 1000)
    assert it.indices is not None and it.indices.tolist() == [0, 1] * 24
    # The batch was far from ready when Ctrl-C came: the interrupt did not wait for it.
    assert ready - sent[0] > 2 * (raised - sent[0])
    del it  # stops the epoch without waiting for it


def test_gil_is_released_while_waiting(big_folder: Path) -> None:
    loader = slow_loader(big_folder, batch_size=12)
    ticks = 0
    stop = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.001)

    counter = threading.Thread(target=count)
    counter.start()
    it = iter(loader)
    start = time.monotonic()
    next(it)
    waited = time.monotonic() - start
    stop.set()
    counter.join()
    # The Python thread ran all along (at ~1 tick per ms, minus scheduling noise); with the
    # GIL held during the wait it would barely have ticked.
    assert waited > 0.1 and ticks > waited * 1000 * 0.3, (waited, ticks)
    del it


def _native_threads() -> int:
    """Threads of this process named by ferroloader (workers and epoch threads)."""
    count = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                count += f.read().startswith("ferroloader")
        # The thread ended after the listing: opening its comm fails with ENOENT, or reading
        # an already open one with ESRCH.
        except (FileNotFoundError, ProcessLookupError):
            pass
    return count


def _wait_for_native_threads(n: int, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while _native_threads() != n and time.monotonic() < deadline:
        time.sleep(0.01)
    return _native_threads()


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_no_thread_outlives_its_epoch(folder: Path) -> None:
    # Epochs abandoned by earlier tests finish their current batch, then end.
    assert _wait_for_native_threads(0) == 0
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=2, num_workers=2, transform=small_transform())
    list(loader)  # a finished epoch leaves nothing behind (its thread ends right after)
    assert _wait_for_native_threads(0, timeout=5.0) == 0
    it = iter(loader)
    next(it)  # an abandoned one: 2 workers and the epoch thread are running
    # (the second worker may still be starting: the first can make the first batch alone;
    # none can end, 2 batches of prefetch hold them)
    assert _wait_for_native_threads(3, timeout=5.0) == 3
    del it
    assert _wait_for_native_threads(0, timeout=5.0) == 0


def _child_iterates(folder: str, queue: Any) -> None:
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=6, num_workers=2, transform=small_transform())
    queue.put([tuple(images.shape) for images, _ in loader])


@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_multiprocessing_fork_child_can_use_ferroloader(folder: Path) -> None:
    # The parent has run loaders (threads existed) before forking.
    list(fl.Loader(fl.ImageFolder(folder), batch_size=6, num_workers=2, transform=small_transform()))
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_iterates, args=(str(folder), queue))
    child.start()
    shapes = queue.get(timeout=60)
    child.join(timeout=60)
    assert child.exitcode == 0
    assert shapes == [(6, 3, 24, 24)] * 3


@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_fork_while_an_epoch_is_running(folder: Path) -> None:
    """The child inherits a loader mid-epoch: the inherited iterator refuses to run (its
    threads do not exist there), the loader rebuilds itself and loads; the parent's epoch
    goes on."""
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=3, num_workers=2, shuffle=True, transform=small_transform())
    it = iter(loader)
    first, _ = next(it)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        status = 1
        try:
            os.close(read)
            try:
                next(it)
            except RuntimeError as e:
                assert "fork" in str(e)
            else:
                raise AssertionError("the inherited iterator ran")
            del it
            sizes = [images.shape[0] for images, _ in loader]
            assert sizes == [3] * 6, sizes
            assert loader.epoch == 2
            os.write(write, b"ok")
            status = 0
        except BaseException as e:  # report anything to the parent
            os.write(write, repr(e).encode()[:500])
        finally:
            os._exit(status)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    message = os.read(read, 1000).decode()
    os.close(read)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, message
    assert message == "ok"
    rest = [images.shape[0] for images, _ in it]
    assert rest == [3] * 5 and first.shape[0] == 3


class _OneBatchPerItem(torch.utils.data.Dataset):  # type: ignore[misc]
    """A torch dataset whose items are ferroloader batches: runs in DataLoader workers."""

    def __init__(self, loader: fl.Loader) -> None:
        self.loader = loader

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> torch.Tensor:
        self.loader.set_epoch(i)
        _, labels = next(iter(self.loader))
        return labels


@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_inside_torch_dataloader_fork_workers(folder: Path) -> None:
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=18, num_workers=2, transform=small_transform())
    next(iter(loader))  # used in the parent first
    dl = torch.utils.data.DataLoader(
        _OneBatchPerItem(loader), batch_size=None, num_workers=2, multiprocessing_context="fork"
    )
    got = [labels.tolist() for labels in dl]
    expected = fl.ImageFolder(folder).targets
    assert got == [expected, expected]


def test_command_line_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ferroloader", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"ferroloader {fl.__version__}"
