"""Targets that are not class indices (a multi-hot tensor, a float, a tuple, a string), which
the native loader cannot carry: each sample's native label is its position (a row, an index),
and :class:`TargetTable` gives the target back where a ``target_transform`` is called. Must not
read the dataset: whoever lists it fills the table."""

from __future__ import annotations

from typing import Any, List


class TargetTable:
    """The targets of a dataset whose targets are not class indices: each sample's native
    label is its position in the dataset, and the table gives back the target the dataset
    holds for it (called where a ``target_transform`` would be). Picklable, so worker
    processes running a Python tail get it with the samples."""

    def __init__(self, targets: List[Any]) -> None:
        #: Indexed by position; shared with ``datasets.RecordedTargets``, which fills it.
        self.targets = targets

    def __call__(self, position: int) -> Any:
        return self.targets[position]

    def first(self) -> Any:
        """A target, for messages (``None`` before any is known)."""
        return next((t for t in self.targets if t is not None), None)
