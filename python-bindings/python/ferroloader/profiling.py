"""``ferroloader.Profile`` and ``ferroloader.Summary``: what a profiled run recorded.

A profile holds one or more *pipelines* (``"native"`` from ``Loader(profile=...)``,
``"torchvision"`` from ``ferroloader.torch.profile``) in the versioned ``ferroloader.profile``
schema (see ``profiler/src/schema.rs``): op spans per sample and worker, batch events, failed
samples and which CPU counters were available. Profiles merge, so a native and a torchvision run
land in one trace, one summary and one report.

This module must not compute anything from a profile itself: the summary and the trace come from
the native profiler crate, so both pipelines are measured by the same code. It must not import
the report (``ferroloader.cli.report``), which imports it: the report is a tool behind the
``cli`` extra, and a profile is recorded and saved without it.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping, Union

from ferroloader import _native

__all__ = ["Profile", "Summary"]

StrPath = Union[str, "os.PathLike[str]"]


class Summary:
    """Per pipeline: throughput, the consumer's waits, per-op time per image, counters.

    ``str(summary)`` is a text table; ``to_dict()`` the JSON form (what ``save_json`` writes).
    """

    def __init__(self, native: _native.Summary) -> None:
        self._native = native

    def to_dict(self) -> Dict[str, Any]:
        """The summary as plain Python data."""
        data: Dict[str, Any] = json.loads(self._native.to_json())
        return data

    def to_json(self) -> str:
        """The summary as JSON text."""
        return self._native.to_json()

    def to_csv(self) -> str:
        """One CSV row per pipeline and op."""
        return self._native.to_csv()

    def save_json(self, path: StrPath) -> None:
        """Writes the JSON form to ``path``."""
        self._native.save_json(os.fspath(path))

    def save_csv(self, path: StrPath) -> None:
        """Writes the CSV form to ``path``."""
        self._native.save_csv(os.fspath(path))

    def table(self) -> str:
        """The text table."""
        return self._native.table()

    def __str__(self) -> str:
        return self._native.table()

    def __repr__(self) -> str:
        return f"Summary(pipelines={[p['label'] for p in self.to_dict()['pipelines']]!r})"


class Profile:
    """A recorded profile: ``summary()``, ``save(path)``, ``save_trace(path)``; ``merge`` puts
    pipelines side by side. The HTML report of one is ``ferroloader.report.write_html(profile,
    path)`` (the ``cli`` extra), which builds on this class, never the reverse."""

    def __init__(self, native: _native.Profile) -> None:
        self._native = native

    @classmethod
    def load(cls, path: StrPath) -> "Profile":
        """Reads a profile file (``FileNotFoundError``; ``ValueError`` if it is not one)."""
        return cls(_native.Profile.load(os.fspath(path)))

    @classmethod
    def from_json(cls, text: str) -> "Profile":
        """Parses profile JSON; ``ValueError`` naming what is wrong."""
        return cls(_native.Profile.loads(text))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Profile":
        """A profile from plain data in the schema (what the Python instrumentation builds)."""
        return cls.from_json(json.dumps(data))

    def to_dict(self) -> Dict[str, Any]:
        """The profile as plain Python data."""
        data: Dict[str, Any] = json.loads(self._native.to_json())
        return data

    def to_json(self) -> str:
        """The profile as JSON text."""
        return self._native.to_json()

    def save(self, path: StrPath) -> None:
        """Writes the profile as JSON (read it back with ``Profile.load``)."""
        self._native.save(os.fspath(path))

    def save_trace(self, path: StrPath, *, align: bool = False) -> None:
        """Writes a Chrome trace for Perfetto (https://ui.perfetto.dev) or chrome://tracing: a
        process per pipeline, a track per worker. ``align=True`` starts every pipeline at 0."""
        self._native.save_trace(os.fspath(path), align=align)

    def summary(self) -> Summary:
        """Throughput, waits and per-op statistics of each pipeline."""
        return Summary(self._native.summary())

    def merge(self, other: "Profile") -> "Profile":
        """This profile's pipelines followed by ``other``'s (a repeated label gets ``#2``)."""
        return Profile(self._native.merge(other._native))

    @property
    def labels(self) -> List[str]:
        """The pipelines' labels."""
        return self._native.labels

    def pipeline(self, label: str) -> Dict[str, Any]:
        """The pipeline labelled ``label``, as plain data (``KeyError`` if absent)."""
        for pipeline in self.to_dict()["pipelines"]:
            if pipeline["label"] == label:
                found: Dict[str, Any] = pipeline
                return found
        raise KeyError(f"no pipeline labelled {label!r}; have {self.labels}")

    def __len__(self) -> int:
        return len(self._native)

    def __repr__(self) -> str:
        return repr(self._native)
