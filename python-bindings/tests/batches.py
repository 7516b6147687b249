"""Comparing what two loaders give: batches of tensors, nested in dicts, lists and tuples, the
loader's against its reference's (DataLoader's, the processor's)."""

from __future__ import annotations

from typing import Any, Optional

import torch


def difference(got: Any, want: Any, atol: float = 0.0, where: str = "") -> Optional[str]:
    """Where ``got`` first differs from ``want`` and how; ``None`` where they are the same:
    dicts key for key, lists and tuples item for item, tensors in type, dtype, shape and values
    (floats within ``atol``, else exactly), anything else by ``==``."""
    if isinstance(want, dict):
        if not isinstance(got, dict) or got.keys() != want.keys():
            return f"{where or 'the batch'}: keys {sorted(map(str, got))} against {sorted(map(str, want))}"
        found = (difference(got[k], want[k], atol, f"{where}[{k!r}]") for k in want)
        return next((d for d in found if d is not None), None)
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            return f"{where or 'the batches'}: {_shape(got)} against {_shape(want)}"
        found = (difference(g, w, atol, f"{where}[{i}]") for i, (g, w) in enumerate(zip(got, want)))
        return next((d for d in found if d is not None), None)
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor) or (got.dtype, got.shape) != (want.dtype, want.shape):
            return f"{where}: {_shape(got)} against {_shape(want)}"
        if atol and want.is_floating_point():
            off = float((got - want).abs().max()) if want.numel() else 0.0
            return None if off <= atol else f"{where}: off by {off} (> {atol})"
        if torch.equal(got, want):
            return None
        return f"{where}: off by {float((got.double() - want.double()).abs().max())}"
    return None if bool(got == want) else f"{where}: {got!r} against {want!r}"


def same(got: Any, want: Any, atol: float = 0.0) -> bool:
    """Whether ``got`` is ``want`` (:func:`difference`)."""
    return difference(got, want, atol) is None


def assert_same(got: Any, want: Any, atol: float = 0.0) -> None:
    """``got`` is ``want`` (:func:`difference`), and batches there are: an empty reference
    compares nothing."""
    assert not isinstance(want, (list, tuple)) or len(want) > 0, "no batches to compare"
    why = difference(got, want, atol)
    assert why is None, why


def _shape(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} {tuple(value.shape)}"
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__} of {len(value)}"
    return type(value).__name__
