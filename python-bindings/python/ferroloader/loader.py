"""``ferroloader.Loader``: a PyTorch-compatible iterable of ``(images, labels)`` batches.

The work happens in native worker threads (``ferroloader._native``); this module checks the
arguments (``TypeError``/``ValueError`` naming the argument), keeps the configuration (so a
loader pickles by its configuration and rebuilds itself in a forked child), and turns each
batch's numpy arrays into torch tensors without a copy (``torch.from_numpy``).
"""

from __future__ import annotations

import numbers
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

import numpy as np

from ferroloader import _native
from ferroloader._native import FileList, ImageFolder
from ferroloader.profiling import Profile
from ferroloader.transforms import Compose, as_compose, pipeline_spec

__all__ = ["Loader", "LoaderIterator"]

Dataset = Union[ImageFolder, FileList]

_OUTPUTS = ("float32", "uint8")
_DECODERS = ("turbo", "zune")
_ON_ERROR = ("raise", "skip")
_PROFILE = ("off", "spans", "counters")
_TENSOR_TYPES = ("torch", "numpy")


def _check_int(name: str, value: object, minimum: int, maximum: Optional[int] = None) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name}: must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name}: must be at most {maximum}, got {value}")
    return value


def _check_bool(name: str, value: object) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name}: expected a bool, got {type(value).__name__} {value!r}")


def _check_choice(name: str, value: object, choices: Tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected one of {choices}, got {type(value).__name__} {value!r}")
    if value not in choices:
        raise ValueError(f"{name}: expected one of {choices}, got {value!r}")
    return value


class Loader:
    """Loads batches of ``dataset`` through ``transform`` with native worker threads.

    Iterating yields ``(images, labels)``: ``torch.float32 [B, 3, H, W]`` (or ``torch.uint8``
    with ``output="uint8"``) and ``torch.int64 [B]``, handed over without a copy. Each
    ``iter(loader)`` is one epoch; epochs count up from 0 (``set_epoch`` sets the next one, as
    with torch's ``DistributedSampler``), and the epoch, ``seed`` and sample index alone decide
    the shuffle and every random crop and flip, whatever ``num_workers``.

    Arguments not in torch's ``DataLoader``:

    - ``prefetch_batches``: batches prepared ahead of the consumer (bounds memory).
    - ``in_order=False``: deliver batches as they complete (torch's ``in_order``).
    - ``output``: ``"float32"`` (the transform's tensors) or ``"uint8"`` (pixels, 4x less
      memory; apply ``deferred_normalize`` on the GPU).
    - ``decoder``: ``"turbo"`` (libjpeg-turbo, Pillow-exact) or ``"zune"`` (pure Rust).
    - ``on_error``: ``"raise"`` (the first bad sample ends the epoch with its error) or
      ``"skip"`` (bad samples are dropped; see ``LoaderIterator.skipped``).
    - ``profile``: ``"off"``, ``"spans"`` (a span per op per sample, batch events) or
      ``"counters"`` (spans with CPU counter deltas); read it with ``loader.profile()``.
    - ``rank``/``world_size``: this process's share, cut as ``DistributedSampler`` cuts it; or
      ``sampler``: any iterable of dataset indices, iterated once per epoch.
    - ``tensor_type``: ``"torch"`` (default) or ``"numpy"`` arrays (no torch needed).
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int = 32,
        shuffle: bool = False,
        drop_last: bool = False,
        seed: int = 0,
        num_workers: Optional[int] = None,
        prefetch_batches: int = 2,
        in_order: bool = True,
        *,
        transform: Any,
        output: str = "float32",
        decoder: str = "turbo",
        on_error: str = "raise",
        profile: str = "off",
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        sampler: Optional[Iterable[int]] = None,
        tensor_type: str = "torch",
    ) -> None:
        if not isinstance(dataset, (ImageFolder, FileList)):
            hint = ""
            if hasattr(dataset, "root") and hasattr(dataset, "classes"):
                hint = " (for a torchvision ImageFolder, use ferroloader.ImageFolder(dataset.root))"
            raise TypeError(
                "dataset: expected a ferroloader.ImageFolder or ferroloader.FileList, got "
                f"{type(dataset).__name__}{hint}"
            )
        self.dataset = dataset
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.shuffle = _check_bool("shuffle", shuffle)
        self.drop_last = _check_bool("drop_last", drop_last)
        self.seed = _check_int("seed", seed, 0, 2**64 - 1)
        self.num_workers = None if num_workers is None else _check_int("num_workers", num_workers, 1)
        self.prefetch_batches = _check_int("prefetch_batches", prefetch_batches, 1)
        self.in_order = _check_bool("in_order", in_order)
        self.transform: Compose = as_compose(transform)
        self.output = _check_choice("output", output, _OUTPUTS)
        self.decoder = _check_choice("decoder", decoder, _DECODERS)
        self.on_error = _check_choice("on_error", on_error, _ON_ERROR)
        self.profile_mode = _check_choice("profile", profile, _PROFILE)
        self.tensor_type = _check_choice("tensor_type", tensor_type, _TENSOR_TYPES)
        if (rank is None) != (world_size is None):
            raise ValueError("rank: rank and world_size must be given together")
        if world_size is not None:
            self.world_size: Optional[int] = _check_int("world_size", world_size, 1)
            self.rank: Optional[int] = _check_int("rank", rank, 0, self.world_size - 1)
        else:
            self.world_size = self.rank = None
        if sampler is not None:
            if not hasattr(sampler, "__iter__"):
                raise TypeError(
                    f"sampler: expected an iterable of dataset indices, got {type(sampler).__name__}"
                )
            if self.shuffle:
                raise ValueError("sampler: sampler option is mutually exclusive with shuffle")
            if self.world_size is not None:
                raise ValueError("sampler: give either a sampler or rank/world_size, not both")
        self.sampler = sampler
        if self.tensor_type == "torch":
            try:
                import torch
            except ImportError as e:
                raise ImportError(
                    "tensor_type: 'torch' needs PyTorch (pip install torch), or use "
                    "tensor_type='numpy'"
                ) from e
            self._from_numpy: Any = torch.from_numpy
        else:
            self._from_numpy = None
        self._native = self._build()

    # -- native loader ------------------------------------------------------------------------

    def _build(self) -> _native.Loader:
        spec = pipeline_spec(self.transform, output=self.output, decoder=self.decoder)
        return _native.Loader(
            self.dataset,
            spec,
            batch_size=self.batch_size,
            shuffle=self.shuffle,
            drop_last=self.drop_last,
            seed=self.seed,
            num_workers=self.num_workers,
            prefetch_batches=self.prefetch_batches,
            in_order=self.in_order,
            on_error=self.on_error,
            rank=self.rank,
            world_size=self.world_size,
            profile=self.profile_mode,
        )

    def _loader(self) -> _native.Loader:
        """The native loader; rebuilt (same configuration and epoch) in a forked child, where
        the parent's one is unusable."""
        if self._native.inherited:
            epoch = self._native.next_epoch
            self._native = self._build()
            self._native.set_epoch(epoch)
        return self._native

    # -- iteration ----------------------------------------------------------------------------

    def __iter__(self) -> "LoaderIterator":
        native = self._loader()
        if self.sampler is None:
            it = native.iter()
        else:
            it = native.iter_indices(list(self.sampler))
        return LoaderIterator(it, self._from_numpy)

    def __len__(self) -> int:
        """Batches per epoch (when no sample is skipped)."""
        if self.sampler is None:
            return self._loader().num_batches
        try:
            n = len(self.sampler)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError("len(loader): the sampler has no len()") from None
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch the next ``iter(loader)`` runs (and the sampler's, if it has
        ``set_epoch``)."""
        epoch = _check_int("epoch", epoch, 0, 2**64 - 1)
        self._loader().set_epoch(epoch)
        if self.sampler is not None and hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        """The epoch the next ``iter(loader)`` runs."""
        return self._loader().next_epoch

    @property
    def sample_shape(self) -> Tuple[int, int, int]:
        """Shape of one sample, e.g. ``(3, 224, 224)``."""
        return self._loader().sample_shape

    @property
    def dtype(self) -> str:
        """``"float32"`` or ``"uint8"``."""
        return self._loader().dtype

    @property
    def deferred_normalize(self) -> Optional[Tuple[List[float], List[float]]]:
        """With ``output="uint8"``, the transform's ``Normalize(mean, std)`` left for the
        consumer to apply as ``(x / 255 - mean) / std``; else ``None``."""
        return self._loader().deferred_normalize

    def profile(self) -> Profile:
        """Everything recorded since the loader was made (or since ``take_profile``), as one
        pipeline labelled ``"native"``: empty unless made with ``profile="spans"`` or
        ``"counters"``. An epoch still running is included up to its workers' last hand-off;
        finish or drop its iterator first for all of it."""
        return Profile(self._loader().profile())

    def take_profile(self) -> Profile:
        """Like ``profile()``, then forgets it (bounds memory over long runs)."""
        return Profile(self._loader().take_profile())

    # -- pickling: by configuration ----------------------------------------------------------

    def _config(self) -> Dict[str, Any]:
        return {
            "dataset": self.dataset,
            "batch_size": self.batch_size,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "seed": self.seed,
            "num_workers": self.num_workers,
            "prefetch_batches": self.prefetch_batches,
            "in_order": self.in_order,
            "transform": self.transform,
            "output": self.output,
            "decoder": self.decoder,
            "on_error": self.on_error,
            "profile": self.profile_mode,
            "rank": self.rank,
            "world_size": self.world_size,
            "sampler": self.sampler,
            "tensor_type": self.tensor_type,
        }

    def __getstate__(self) -> Dict[str, Any]:
        return {"config": self._config(), "epoch": self._native.next_epoch}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        config = dict(state["config"])
        dataset = config.pop("dataset")
        self.__init__(dataset, **config)  # type: ignore[misc]
        self._native.set_epoch(state["epoch"])

    def __repr__(self) -> str:
        return (
            f"Loader(dataset={self.dataset!r}, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle}, num_workers={self.num_workers}, "
            f"output={self.output!r}, transform={self.transform!r})"
        )


class LoaderIterator:
    """One epoch: yields ``(images, labels)`` until the epoch ends.

    Waiting for a batch releases the GIL and answers Ctrl-C (``KeyboardInterrupt``; the batch
    is not lost, the next ``next()`` returns it). Dropping the iterator stops the epoch.
    """

    def __init__(self, native: _native.EpochIter, from_numpy: Any) -> None:
        self._it = native
        self._from_numpy = from_numpy
        self.indices: Optional[np.ndarray] = None
        """Dataset indices of the last batch's samples."""

    def __iter__(self) -> "LoaderIterator":
        return self

    def __next__(self) -> Tuple[Any, Any]:
        images, labels, indices = next(self._it)
        self.indices = indices
        if self._from_numpy is None:
            return images, labels
        return self._from_numpy(images), self._from_numpy(labels)

    def __len__(self) -> int:
        return len(self._it)

    @property
    def epoch(self) -> int:
        """The epoch being loaded."""
        return self._it.epoch

    @property
    def skipped(self) -> List[Tuple[int, str, str]]:
        """Samples skipped so far (``on_error="skip"``): ``(index, path, why)``."""
        return self._it.skipped

