"""``pin_memory=True``: batch buffers the CUDA runtime has page-locked, and the hold on each
delivered batch until the device has read it.

The loader's ring of batch buffers is locked where it is allocated (``cudaHostRegister``, through
the CUDA runtime torch loaded), so a batch's images are pinned where the workers wrote them: no
copy into a pinned buffer, as DataLoader's pinning thread makes. A ring buffer is reused once its
batch is dropped, and a copy to the device made with ``non_blocking=True`` may still be reading it
then; so when the images' last tensor is freed, an event is recorded on the current CUDA stream
(the copy's stream, in the usual patterns: the default stream, or the side stream a prefetcher is
in when it drops the CPU batch), and the buffer goes back to the ring only once the event has
passed. This module must not touch a batch's pixels.
"""

import collections
import re
import weakref
from typing import Any, Deque, Optional, Tuple

import numpy as np

_CUDART = re.compile(r"/libcudart\.so(\.\d+)*$")


def cuda_runtime_path(maps_file: str = "/proc/self/maps") -> Optional[str]:
    """The file of the CUDA runtime mapped into this process (torch's), read from
    ``maps_file``; ``None`` when none is (not Linux, or a runtime linked statically into torch)."""
    try:
        with open(maps_file, encoding="utf-8") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and _CUDART.search(fields[5].rstrip("\n")):
                    return fields[5].rstrip("\n")
    except OSError:
        return None
    return None


class DeviceReadHold:
    """Holds delivered batches of a page-locked ring until the device work queued before their
    images were freed has finished (see the module's doc)."""

    def __init__(self, device: str) -> None:
        import torch

        self._torch = torch
        self._device = torch.device(device)
        self._held: Deque[Tuple[Any, object]] = collections.deque()

    def watch(self, images: np.ndarray) -> None:
        """Holds ``images``' batch (its ``base``) from the moment ``images`` is freed."""
        memory = images.base
        finalizer = weakref.finalize(images, self._hold, memory)
        # At interpreter exit the ring is freed with the process: nothing to wait for.
        finalizer.atexit = False

    def _hold(self, memory: object) -> None:
        try:
            event = self._torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record(self._torch.cuda.current_stream(self._device))
        except RuntimeError:
            # CUDA is unusable here (torch shut down at exit, a forked child): no copy from
            # this process can be running, so the batch goes back at once.
            return
        self._held.append((event, memory))

    def release_finished(self) -> None:
        """Gives back, oldest first, the batches whose device work has finished."""
        while self._held and self._held[0][0].query():
            self._held.popleft()

    def __len__(self) -> int:
        return len(self._held)

    def __del__(self) -> None:
        # Buffers must not be reused or freed under a copy still running.
        for event, _ in self._held:
            event.synchronize()
