"""A Hugging Face ``datasets.Dataset`` with a format transform (``with_transform`` or
``set_transform``), given to the loader with no ``transform=``, read natively when its function
does what Hugging Face's image-classification examples (the no-Trainer script, the docs'
tutorial) write: a torchvision transform on each row's decoded image, ``.convert("RGB")`` first
or not, the result under a key (``pixel_values``), the other columns passed on or dropped.

The function is the user's, so it is traced as a script's own ``Dataset`` class is
(``ferroloader._getitem``): :class:`FormattedRows` is the map-style dataset ``dataset[i]`` is
(the row's columns as a batch of one, its image opened as ``datasets`` decodes it, the function,
the batch unnested), written so that every image op goes through an attribute the trace stands
in for. The row's image bytes are read per sample under the GIL (``Dataset.__getitem__`` without
decoding), the decode and the transform are native.

What the function leaves of the decoded image (the ``image`` column, passed on untouched) is not
decoded a second time: the sample holds an :class:`UnkeptImage` there, which says so wherever it
is used. A ``collate_fn`` that reads that column keeps the dataset in Python
(:func:`collate_reason`).

What this module must not do: decode an image, or change the user's dataset or its format.
"""

from __future__ import annotations

import io
import sys
from typing import Any, Dict, Optional, Union

from ferroloader._getitem import is_stand_in

__all__ = ["FormattedRows", "UnkeptImage", "collate_reason", "formatted_rows", "unkept_column"]


class UnkeptImage:
    """Where a sample of :class:`FormattedRows` holds the ``Image()`` column's decoded image as
    the format function passed it on: the loader decodes each image once, for the transform, and
    keeps no PIL image. Any use names the column and what to do."""

    __slots__ = ("column",)

    def __init__(self, column: str) -> None:
        self.column = column

    def __repr__(self) -> str:
        return f"<{self.column!r}: not decoded again by ferroloader>"

    def __reduce__(self) -> Any:
        return (UnkeptImage, (self.column,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnkeptImage) and other.column == self.column

    def __hash__(self) -> int:
        return hash(self.column)

    def __getattr__(self, name: str) -> Any:
        raise TypeError(
            f"the {self.column!r} column's decoded image is not kept: ferroloader decodes each "
            "image once, natively, for the dataset's with_transform function's transform; drop "
            f"the column in that function (batch.pop({self.column!r})), or load this dataset "
            "with torch.utils.data.DataLoader to use the image itself"
        )


class FormattedRows:
    """``dataset[i]`` of a Hugging Face ``Dataset`` with a format transform, as ``datasets``
    makes it: the row's columns (the format's ``columns``, else all) as a batch of one, the
    ``Image()`` column's image opened from its bytes (or its path), turned upright per its EXIF
    orientation and converted to the feature's ``mode`` where it sets one (with
    ``Image(decode=False)``, left as the row's ``{"bytes", "path"}``), the function applied,
    each value of its batch unnested. The image ops go through attributes (``open``,
    ``upright``) and the function is one (``function``), so that a traced copy
    (``_getitem._traced_copy``) records them; the function's image passed on untouched becomes an
    :class:`UnkeptImage`."""

    def __init__(self, dataset: Any) -> None:
        hf = sys.modules["datasets"]
        from PIL import Image, ImageOps

        from ferroloader._hfdatasets import image_column, split_name

        form = dataset.format
        self.function = form["format_kwargs"]["transform"]
        self.image_column = image_column(dataset)
        feature = dataset.features[self.image_column]
        self.mode: Optional[str] = feature.mode
        #: Whether ``datasets`` decodes the column (``Image(decode=False)``: the function gets
        #: each row's ``{"bytes", "path"}`` and opens it itself, if at all).
        self.decode: bool = feature.decode
        rows = dataset.with_format(None)
        if form["columns"] is not None:
            rows = rows.select_columns(list(form["columns"]))
        if self.decode and self.image_column in rows.column_names:
            rows = rows.cast_column(self.image_column, hf.Image(decode=False))
        self.rows = rows
        self.name = split_name(dataset)
        self.open = Image.open
        self.upright = ImageOps.exif_transpose

    def __len__(self) -> int:
        return len(self.rows)

    def ferroloader_item_name(self, index: int) -> str:
        """Row ``index`` as the loader names it in an error, as it names a row of the dataset
        read with ``transform=``: ``train[3] (photo3.jpg)`` for bytes stored with their file's
        name, the file for a row read from one, ``train[3]`` otherwise."""
        cell = self.rows[index].get(self.image_column) if self.decode else None
        if not isinstance(cell, dict) or cell.get("path") is None:
            return f"{self.name}[{index}]"
        return f"{self.name}[{index}] ({cell['path']})" if cell.get("bytes") is not None else str(cell["path"])

    def __getitem__(self, index: int) -> Dict[str, Any]:
        row = self.rows[index]
        batch = {name: [value] for name, value in row.items()}
        image = None
        cell = row.get(self.image_column)
        if cell is not None and self.decode:
            data = cell["bytes"]
            image = self.upright(self.open(io.BytesIO(data)) if data is not None else self.open(cell["path"]))
            if self.mode is not None:
                image = image.convert(self.mode)
            batch[self.image_column] = [image]
        out = self.function(batch)
        unkept = UnkeptImage(self.image_column)
        # In a trace the image is a stand-in, whatever the function did to it besides.
        return {
            name: unkept if (image is not None and values[0] is image) or is_stand_in(values[0]) else values[0]
            for name, values in out.items()
        }


def formatted_rows(dataset: Any) -> Union[FormattedRows, str]:
    """:class:`FormattedRows` of ``dataset``, or why its format cannot be traced (``""``: it has
    no format transform)."""
    form = dataset.format
    if form.get("type") != "custom" or "transform" not in form.get("format_kwargs", {}):
        return ""
    if form.get("output_all_columns"):
        return "adds the columns its with_transform function is not given (output_all_columns=True)"
    try:
        return FormattedRows(dataset)
    except ValueError as e:
        return str(e).removeprefix("dataset: ")


class _Probe:
    """The decoded image a ``collate_fn`` is handed in :func:`collate_reason`: records any use."""

    def __init__(self) -> None:
        self.used = False

    def __getattr__(self, name: str) -> Any:
        self.used = True
        raise TypeError("a decoded image probe")


def collate_reason(collate_fn: Any, sample: Dict[str, Any], image_key: Any, column: str) -> Optional[str]:
    """Why ``collate_fn`` cannot get samples whose ``column`` holds an :class:`UnkeptImage`
    (``None``: it can): it uses that column's images, or hands them on in its batch. Learnt by
    calling it on two copies of ``sample`` (the first one traced, its image a small tensor)."""
    import torch

    probe = _Probe()
    made = dict(sample, **{column: probe})
    made[image_key] = torch.zeros(3, 2, 2)
    try:
        out = collate_fn([made, dict(made)])
    except Exception as e:
        if probe.used:
            return f"the collate_fn uses the {column!r} column's decoded images"
        return f"the collate_fn raises {type(e).__name__} on its samples: {e}"
    if probe.used:
        return f"the collate_fn uses the {column!r} column's decoded images"
    if _holds(out, probe):
        return f"the collate_fn's batch holds the {column!r} column's decoded images"
    return None


def _holds(value: Any, probe: _Probe) -> bool:
    if value is probe:
        return True
    if isinstance(value, dict):
        return any(_holds(v, probe) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds(v, probe) for v in value)
    return False


def unkept_column(sample: Dict[str, Any]) -> Optional[str]:
    """The column ``sample`` holds an :class:`UnkeptImage` under, if any."""
    for name, value in sample.items():
        if isinstance(value, UnkeptImage):
            return str(name)
    return None
