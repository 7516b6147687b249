"""Hugging Face Accelerate with a :class:`ferroloader.Loader`: what ``accelerator.prepare``
does for a DataLoader, which it does not do for a loader that is not one (it returns it
untouched).

>>> from ferroloader.accelerate import AcceleratedLoader
>>> model, optimizer = accelerator.prepare(model, optimizer)
>>> loader = AcceleratedLoader(fl.Loader(...), accelerator)  # was: accelerator.prepare(DataLoader(...))
>>> accelerator.register_for_checkpointing(loader)            # save_state/load_state resume mid-epoch

:class:`AcceleratedLoader` iterates the loader and, as Accelerate's ``DataLoaderShard`` does
for a DataLoader:

- moves each batch to ``accelerator.device`` (unless the Accelerator was made with
  ``device_placement=False``), with ``non_blocking=True`` when the loader pins its batches
  (``pin_memory=True``) or the Accelerator's ``dataloader_config`` asks for it;
- tells Accelerate's ``GradientState`` which batch ends the epoch before that batch is handed
  out, so ``accelerator.accumulate(model)`` steps the optimizer at the end of every epoch (not
  only every ``gradient_accumulation_steps`` batches: otherwise the gradients of an epoch's last
  batches would be added to the next epoch's first), and ``gather_for_metrics`` drops the
  samples the distributed cut repeats where it can tell which they are (:meth:`remainder`).

It fetches no batch ahead (it knows the last batch from the iterator's ``len()``), so the
loader's ``state_dict()`` is always after exactly the batches handed out. Everything else
(``len()``, ``set_epoch``, ``epoch``, ``state_dict``/``load_state_dict``, ``sampler``...) is
the loader's own. The cut across processes is the loader's (as ``DistributedSampler``'s, read
from the process group Accelerate started), not Accelerate's ``BatchSamplerShard``; a loader
made before the ``Accelerator`` (so not cut) is refused in more than one process.

This module must not change what the loader loads or in what order; it imports Accelerate and
torch only when iterated, so ``ferroloader`` itself never needs them.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Optional, Tuple

from ferroloader.loader import Loader

__all__ = ["AcceleratedLoader"]


class AcceleratedLoader:
    """``loader``'s batches on ``accelerator``'s device, with the end of each epoch told to
    Accelerate's ``GradientState`` (see the module's doc).

    Invariant: ``end_of_dataloader`` is ``True`` exactly while the epoch's last batch is the
    one handed out last, and ``remainder`` is what ``gather_for_metrics`` may keep of that
    batch gathered from every process (``-1``: everything), as on Accelerate's
    ``DataLoaderStateMixin`` (``GradientState`` reads both from the loader it is in). While a
    skip is pending (:meth:`skip_first_batches` called, the epoch not started), the loader holds
    the state of that many batches into the epoch it runs next, whatever ``set_epoch`` is
    called before ``iter()``.
    """

    def __init__(self, loader: Loader, accelerator: Any, non_blocking: Optional[bool] = None) -> None:
        if not isinstance(loader, Loader):
            raise TypeError(
                f"loader: expected a ferroloader.Loader, got {type(loader).__name__} "
                "(a DataLoader goes to accelerator.prepare)"
            )
        processes = int(getattr(accelerator, "num_processes", 1))
        if (
            processes > 1
            and loader.world_size is None
            and loader._sampler is None
            and loader._batch_sampler is None
            and loader.sampler is not None  # None: an IterableDataset, which splits itself
        ):
            # Where accelerator.prepare would have cut a DataLoader: every process would load
            # the whole dataset each epoch, with nothing said.
            raise ValueError(
                f"loader: not cut across the {processes} processes (it was made before the "
                "process group was started): make it after Accelerator(), or give it "
                "rank=accelerator.process_index, world_size=accelerator.num_processes "
                "(rank=0, world_size=1 to load every sample in every process)"
            )
        self.loader = loader
        self.accelerator = accelerator
        self.device: Any = accelerator.device if getattr(accelerator, "device_placement", True) else None
        if non_blocking is None:
            config = getattr(accelerator, "dataloader_config", None)
            non_blocking = bool(loader.pin_memory or getattr(config, "non_blocking", False))
        self.non_blocking: bool = non_blocking
        self.end_of_dataloader = False
        self.remainder = -1
        #: Batches :meth:`skip_first_batches` skips of the next epoch (0: none pending).
        self._skip = 0

    def skip_first_batches(self, num_batches: int) -> "AcceleratedLoader":
        """This loader, its next epoch started after its first ``num_batches`` batches, none of
        them loaded: what ``accelerator.skip_first_batches(dataloader, num_batches)`` gives for
        a DataLoader (given this loader, Accelerate's makes a DataLoader of the raw dataset, none
        of the transform). ``ValueError`` where a batch count does not say where an epoch
        stands (``in_order=False``, ``on_error="skip"``)."""
        self._skip = int(num_batches)
        if self._skip:
            self.loader.load_state_dict(self.loader._state_after(self.loader.epoch, self._skip))
        return self

    def __iter__(self) -> Iterator[Any]:
        from accelerate.state import GradientState  # type: ignore[import-untyped]
        from accelerate.utils import send_to_device  # type: ignore[import-untyped]

        self._skip = 0
        it = iter(self.loader)
        # The batches left in this epoch (fewer after a resumed state), read at the first batch,
        # when the iterator starts the epoch: the last one is known without fetching ahead.
        left: Optional[int] = None
        gradient_state = GradientState()
        self.end_of_dataloader = False
        self.remainder = self._remainder()
        # What DataLoaderStateMixin.begin/end do: GradientState reads end_of_dataloader and
        # remainder from the innermost loader being iterated.
        gradient_state._add_dataloader(self)
        try:
            while True:
                batch = next(it, _END)
                if batch is _END:
                    return
                if left is None:
                    left = len(it)
                left -= 1
                self.end_of_dataloader = left == 0
                if self.device is not None:
                    batch = send_to_device(batch, self.device, non_blocking=self.non_blocking)
                yield batch
        finally:
            gradient_state._remove_dataloader(self)

    def _remainder(self) -> int:
        """How many samples of the epoch's last batch, gathered from every process (rank 0's
        first), are not repeats of the distributed cut's padding: ``gather_for_metrics`` keeps
        that many from the front. ``-1`` (keep all) where the repeats are not at the end.

        The cut pads the epoch's order to ``world_size * m`` with its first ``p`` indices and
        deals it out round-robin, so the repeats are the last sample of ranks ``world_size - p``
        to ``world_size - 1``: at the end of the gathered batch only when ``p <= 1`` or each
        rank's last batch holds one sample."""
        loader = self.loader
        if loader.drop_last or loader._batch_sampler is not None:
            return -1
        processes = int(getattr(self.accelerator, "num_processes", 1))
        cut = _cut(loader)
        if cut is None:
            if processes != 1:
                return -1  # every rank loads every sample: nothing to drop by a count
            try:
                n = len(loader.dataset)
            except TypeError:
                return -1
            return n % loader.batch_size if loader.batch_size else -1
        n, world = cut
        if world != processes or not loader.batch_size:
            return -1
        per_rank = -(-n // world)
        pad = per_rank * world - n
        last = per_rank - (len(loader) - 1) * loader.batch_size
        if pad > 1 and last > 1:
            return -1
        return world * last - pad

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        if self._skip:
            # A skip holds for the epoch the loader runs next, whether it is set after the skip
            # (transformers 5's Trainer) or before (4.x).
            self.loader.load_state_dict(self.loader._state_after(epoch, self._skip))
        else:
            self.loader.set_epoch(epoch)

    def state_dict(self) -> Dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.loader.load_state_dict(state)

    def __getattr__(self, name: str) -> Any:
        # The loader's other attributes (epoch, sampler, batch_size, dataset...), as a prepared
        # DataLoader answers for the one it wraps.
        if name.startswith("__") or name in ("loader", "accelerator"):
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __repr__(self) -> str:
        return f"AcceleratedLoader(<{type(self.loader).__name__} of {len(self.loader)} batches>, device={self.device})"


_END = object()


def _cut(loader: Loader) -> Optional[Tuple[int, int]]:
    """``(samples, world_size)`` of a cut dealt out as ``DistributedSampler`` deals it: the
    loader's own, or a ``DistributedSampler`` given as ``sampler`` that pads; else ``None``."""
    if loader.world_size is not None and loader.world_size > 1:
        return len(loader.dataset), loader.world_size
    sampler = loader._sampler
    if sampler is None:
        return None
    from torch.utils.data import DistributedSampler

    if isinstance(sampler, DistributedSampler) and not sampler.drop_last and sampler.num_replicas > 1:
        return len(sampler.dataset), sampler.num_replicas  # type: ignore[arg-type]
    return None
