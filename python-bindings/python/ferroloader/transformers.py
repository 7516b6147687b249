"""Hugging Face transformers' ``Trainer`` loading through a :class:`ferroloader.Loader`.

The Trainer builds its own torch DataLoaders (``get_train_dataloader``,
``get_eval_dataloader``, ``get_test_dataloader``); :class:`Trainer` here builds loaders
instead, from the same ``TrainingArguments``, over the Hugging Face ``datasets.Dataset`` read
natively (its ``Image()`` column decoded by the workers, see ``docs/data.md``) and transformed by
the torchvision transform given:

>>> from ferroloader.transformers import Trainer  # was: from transformers import Trainer
>>> trainer = Trainer(model, args, train_dataset=ds["train"], eval_dataset=ds["validation"],
...                   data_collator=collate_fn,
...                   train_transform=train_transforms, eval_transform=val_transforms)

Each loader is made with the Trainer's batch size (``per_device_*_batch_size``, times the GPUs
of a DataParallel run for training), ``dataloader_num_workers`` (worker threads),
``dataloader_pin_memory``, ``dataloader_drop_last``, ``dataloader_persistent_workers``,
``dataloader_prefetch_factor``, ``dataloader_in_order``, and ``data_seed`` (else ``seed``) as its
seed; training shuffles (``train_sampling_strategy="sequential"`` does not), evaluation does
not. Its batches are the dict the model takes, ``{model.main_input_name: images,
label_names[0]: labels}``, as the image-classification example's ``collate_fn`` builds them
(:class:`ModelInputs`; the ``data_collator`` is not called), handed out by
:class:`~ferroloader.accelerate.AcceleratedLoader` on the Trainer's accelerator (the device,
the epoch's end for ``batch_eval_metrics``, ``gather_for_metrics``'s padding), as the
Trainer's ``accelerator.prepare`` does for its DataLoaders.

Without a transform for it (``train_transform``/``eval_transform`` left ``None``), a dataset
whose ``set_transform``/``with_transform`` function applies a torchvision transform to each
image, as the example's do, is read natively all the same: the function traced
(``ferroloader._hfformat``), the ``data_collator`` called on each batch's samples as the
Trainer's DataLoader calls it (the columns the Trainer removes removed first). Any other
dataset's loader is the Trainer's own DataLoader, untouched (a warning names why where the
function did not trace).

Resuming from a checkpoint mid-epoch (``train(resume_from_checkpoint=...)``): the Trainer
skips the resumed epoch's first ``(global_step % steps_per_epoch) *
gradient_accumulation_steps`` batches with Accelerate's ``skip_first_batches``, which given
anything but a DataLoader makes a DataLoader of its ``.dataset`` (the raw rows, none of the
transform). For the duration of ``train()`` that name, in ``transformers.trainer`` alone, is
one that starts the loader's epoch at that batch instead
(:meth:`AcceleratedLoader.skip_first_batches`: nothing is decoded for the skipped batches), and
hands anything else to Accelerate's. The loader's order and draws follow from ``(seed, epoch,
index)`` alone, so the resumed run gets the uninterrupted run's batches; a loader for which a
batch count does not say where an epoch stands (``in_order=False``, ``on_error="skip"``) is
refused there, naming why.

This module must not change what the loader loads or in what order; it imports transformers
(and torch) only when :class:`Trainer` is first asked for, so ``ferroloader`` never needs them.
"""

from __future__ import annotations

import threading
import warnings
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Optional

from ferroloader.accelerate import AcceleratedLoader
from ferroloader.datasets import python_reason
from ferroloader.loader import Loader

if TYPE_CHECKING:
    import torch

__all__ = ["LoaderTrainerMixin", "ModelInputs", "Trainer"]

#: Loader arguments the Trainer integration sets itself: a ``loader_kwargs`` entry for one is
#: refused (the batches must stay the dict the model takes).
_OWN = ("dataset", "transform", "batch_transform", "collate_fn")


class ModelInputs:
    """``batch_transform`` making each ``(images, labels)`` batch the dict the model's
    ``forward`` takes: ``{input_name: images, label_name: labels}``, what the
    image-classification example's ``collate_fn`` returns (``torch.stack`` of the samples'
    ``pixel_values``, ``torch.tensor`` of their labels), with no copy. A class, so the loader
    pickles."""

    def __init__(self, input_name: str, label_name: str) -> None:
        self.input_name = input_name
        self.label_name = label_name

    def __call__(self, images: "torch.Tensor", labels: "torch.Tensor") -> Dict[str, "torch.Tensor"]:
        return {self.input_name: images, self.label_name: labels}

    def __repr__(self) -> str:
        return f"ModelInputs({self.input_name!r}, {self.label_name!r})"


class LoaderTrainerMixin:
    """What :class:`Trainer` adds to ``transformers.Trainer``, for a Trainer subclass of your
    own (put it first: ``class MyTrainer(LoaderTrainerMixin, MyBaseTrainer)``).

    ``train_transform``/``eval_transform``: the torchvision (or ``ferroloader.transforms``)
    transforms for the training and for the evaluation/test datasets, run natively on each
    image; ``None``: the dataset's own format function, traced, else the Trainer's own
    DataLoader. ``loader_kwargs``: further
    :class:`~ferroloader.Loader` arguments for every loader made here (``decoder``,
    ``on_error``, ``profile``, ``num_workers`` over ``dataloader_num_workers``...), but
    ``dataset``, ``transform``, ``batch_transform`` and ``collate_fn``, which it sets.
    """

    args: Any
    accelerator: Any
    model: Any
    label_names: Any
    train_dataset: Any
    eval_dataset: Any
    data_collator: Any
    _remove_unused_columns: Callable[..., Any]

    def __init__(
        self,
        *args: Any,
        train_transform: Any = None,
        eval_transform: Any = None,
        loader_kwargs: Optional[Dict[str, Any]] = None,
        **kwargs: Any,
    ) -> None:
        loader_kwargs = dict(loader_kwargs or {})
        for name in _OWN:
            if name in loader_kwargs:
                raise ValueError(
                    f"loader_kwargs: {name!r} is the Trainer's to set (its datasets, "
                    "train_transform/eval_transform, and the dict batches the model takes); "
                    "override make_loader to change it"
                )
        self.train_transform = train_transform
        self.eval_transform = eval_transform
        self.loader_kwargs: Dict[str, Any] = loader_kwargs
        #: The training loader last made (``None`` before ``train()``, or where it is the
        #: Trainer's DataLoader).
        self.train_loader: Optional[AcceleratedLoader] = None
        super().__init__(*args, **kwargs)

    # -- the loaders ---------------------------------------------------------------------------

    def get_train_dataloader(self) -> Any:
        if self.train_dataset is None:  # the Trainer's own says so
            return super().get_train_dataloader()  # type: ignore[misc]
        batch_size = getattr(self, "_train_batch_size", None) or self.args.train_batch_size
        loader = self._loader(self.train_dataset, self.train_transform, batch_size, True, "training")
        if loader is None:
            return super().get_train_dataloader()  # type: ignore[misc]
        self.train_loader = loader
        return loader

    def get_eval_dataloader(self, eval_dataset: Any = None) -> Any:
        if eval_dataset is None and self.eval_dataset is None:  # the Trainer's own says so
            return super().get_eval_dataloader(eval_dataset)  # type: ignore[misc]
        # As the Trainer keeps its eval DataLoaders with persistent workers: by key.
        key = eval_dataset if isinstance(eval_dataset, str) else "eval"
        persistent = bool(self.args.dataloader_persistent_workers)
        kept: Dict[str, Any] = getattr(self, "_eval_dataloaders", None) or {}
        if persistent and key in kept:
            return kept[key]
        if isinstance(eval_dataset, str):
            dataset = self.eval_dataset[eval_dataset]
        else:
            dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        loader = self._loader(dataset, self.eval_transform, self.args.eval_batch_size, False, "evaluation")
        if loader is None:
            return super().get_eval_dataloader(eval_dataset)  # type: ignore[misc]
        if persistent:
            kept[key] = loader
            self._eval_dataloaders = kept
        return loader

    def get_test_dataloader(self, test_dataset: Any) -> Any:
        loader = self._loader(test_dataset, self.eval_transform, self.args.eval_batch_size, False, "test")
        return super().get_test_dataloader(test_dataset) if loader is None else loader  # type: ignore[misc]

    def _loader(
        self, dataset: Any, transform: Any, batch_size: int, train: bool, description: str
    ) -> Optional[AcceleratedLoader]:
        """:meth:`make_loader`'s loader; with no transform given, the loader of a dataset whose
        ``set_transform`` function the loader traces (``docs/data.md``) with the Trainer's
        ``data_collator``, the dataset's columns as the Trainer leaves them; ``None`` (the
        Trainer's own DataLoader) for any other, with a warning naming why where the function
        did not trace."""
        if transform is not None:
            return self.make_loader(dataset, transform, batch_size, train)
        if not _format_transform(dataset):
            return None
        dataset = self._remove_unused_columns(dataset, description=description)
        reason = python_reason(dataset, self.data_collator)
        if reason is not None:
            warnings.warn(
                f"ferroloader.transformers: the {description} dataset is loaded by the Trainer's "
                f"own DataLoader: {reason} (give {'train' if train else 'eval'}_transform= to run "
                "the transform natively)",
                stacklevel=3,
            )
            return None
        return self.make_loader(dataset, None, batch_size, train)

    def make_loader(self, dataset: Any, transform: Any, batch_size: int, train: bool) -> AcceleratedLoader:
        """The loader for ``dataset``, made from the Trainer's arguments (see the module's
        doc), on the Trainer's accelerator. ``transform`` ``None``: the dataset's own
        ``set_transform`` function makes the samples (traced) and the Trainer's
        ``data_collator`` the batches. Override to change how."""
        args = self.args
        strategy = getattr(args, "train_sampling_strategy", "random")
        if getattr(args, "group_by_length", False):
            strategy = "group_by_length"  # transformers 4.x's flag for it
        if train and strategy not in ("random", "sequential"):
            raise ValueError(
                f"train_sampling_strategy: {strategy!r} groups samples by a length column "
                "(token counts); ferroloader's loader takes 'random' or 'sequential'"
            )
        if transform is not None and _format_transform(dataset):
            # The dataset's set_transform function is the DataLoader's way of transforming;
            # the loader decodes the Image() column natively and runs `transform` instead.
            dataset = dataset.with_format(None)
        seed = args.data_seed if getattr(args, "data_seed", None) is not None else args.seed
        kwargs: Dict[str, Any] = dict(
            batch_size=batch_size,
            shuffle=train and strategy == "random",
            num_workers=args.dataloader_num_workers,
            pin_memory=bool(args.dataloader_pin_memory),
            drop_last=bool(args.dataloader_drop_last),
            persistent_workers=bool(getattr(args, "dataloader_persistent_workers", False)),
            prefetch_factor=getattr(args, "dataloader_prefetch_factor", None),
            multiprocessing_context=getattr(args, "dataloader_multiprocessing_context", None),
            in_order=bool(getattr(args, "dataloader_in_order", True)),
            seed=seed,
        )
        kwargs.update(self.loader_kwargs)
        if transform is None:
            loader = Loader(dataset, collate_fn=self.data_collator, **kwargs)
        else:
            loader = Loader(dataset, transform=transform, batch_transform=self.model_inputs(), **kwargs)
        return AcceleratedLoader(loader, self.accelerator)

    def model_inputs(self) -> ModelInputs:
        """The batches' keys: the model's ``main_input_name`` (``pixel_values`` for the vision
        models; that too for a model without one) and the Trainer's one label name."""
        model = self.model
        unwrapped = getattr(self.accelerator, "unwrap_model", lambda m: m)(model) if model is not None else None
        input_name = getattr(unwrapped, "main_input_name", None) or "pixel_values"
        labels = list(self.label_names or ["labels"])
        if len(labels) != 1:
            raise ValueError(
                f"label_names: {labels}: the loader hands out one label per image (a batch of "
                "class indices); give one name"
            )
        return ModelInputs(input_name, labels[0])

    # -- resuming ------------------------------------------------------------------------------

    def train(self, *args: Any, **kwargs: Any) -> Any:
        with _skipping_natively():
            return super().train(*args, **kwargs)  # type: ignore[misc]


def _format_transform(dataset: Any) -> bool:
    """Whether ``dataset`` is a ``datasets.Dataset`` with a ``set_transform``/``with_transform``
    function set (its format ``"custom"``)."""
    fmt = getattr(dataset, "format", None)
    return isinstance(fmt, dict) and fmt.get("type") == "custom" and hasattr(dataset, "with_format")


_patch_lock = threading.Lock()
_patch_depth = 0
_accelerate_skip: Optional[Callable[..., Any]] = None


def _skip_first_batches(dataloader: Any, num_batches: int = 0) -> Any:
    """``transformers.trainer.skip_first_batches`` while a :class:`Trainer` trains: a
    :class:`AcceleratedLoader` skips natively, anything else goes to Accelerate's."""
    if isinstance(dataloader, AcceleratedLoader):
        return dataloader.skip_first_batches(num_batches)
    assert _accelerate_skip is not None
    return _accelerate_skip(dataloader, num_batches)


def _trainer_module() -> Any:
    """``transformers.trainer``, whose ``skip_first_batches`` (Accelerate's, imported there) the
    Trainer calls by that name."""
    import transformers.trainer

    return transformers.trainer


class _skipping_natively:
    """Puts :func:`_skip_first_batches` in ``transformers.trainer`` for a ``train()`` (nested
    and concurrent ones share it; the last to leave puts Accelerate's back). The Trainer calls
    that module-level name and has no other hook on where the resumed epoch starts."""

    def __enter__(self) -> None:
        global _patch_depth, _accelerate_skip
        module = _trainer_module()
        with _patch_lock:
            if _patch_depth == 0:
                _accelerate_skip = module.skip_first_batches
                module.skip_first_batches = _skip_first_batches
            _patch_depth += 1

    def __exit__(self, *exc: Any) -> None:
        global _patch_depth, _accelerate_skip
        module = _trainer_module()
        with _patch_lock:
            _patch_depth -= 1
            if _patch_depth == 0:
                module.skip_first_batches = _accelerate_skip
                _accelerate_skip = None


_trainer: Any = None


def __getattr__(name: str) -> Any:
    # `Trainer` subclasses transformers.Trainer, made on first use so that importing this
    # module needs neither transformers nor torch.
    global _trainer
    if name != "Trainer":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _trainer is None:
        try:
            import transformers
        except ImportError as e:
            raise ImportError(
                "ferroloader.transformers.Trainer needs transformers (pip install transformers)"
            ) from e
        _trainer = type(
            "Trainer",
            (LoaderTrainerMixin, transformers.Trainer),
            {
                "__module__": __name__,
                "__doc__": "transformers' ``Trainer`` loading through ferroloader: see "
                "ferroloader.transformers and :class:`LoaderTrainerMixin`.",
            },
        )
    return _trainer
