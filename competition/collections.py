"""The five TpuGraphs collections and the three splits."""

from __future__ import annotations

from enum import StrEnum
from pathlib import PurePosixPath
from typing import Literal

Kind = Literal["tile", "layout"]


class Collection(StrEnum):
    """A TpuGraphs collection, valued as its submission ID prefix (``layout:xla:random``)."""

    TILE_XLA = "tile:xla"
    LAYOUT_XLA_DEFAULT = "layout:xla:default"
    LAYOUT_XLA_RANDOM = "layout:xla:random"
    LAYOUT_NLP_DEFAULT = "layout:nlp:default"
    LAYOUT_NLP_RANDOM = "layout:nlp:random"

    @property
    def is_tile(self) -> bool:
        return self is Collection.TILE_XLA

    @property
    def is_layout(self) -> bool:
        return not self.is_tile

    @property
    def kind(self) -> Kind:
        """``tile`` or ``layout``: what the graph files hold and how a graph is scored."""
        return "tile" if self.is_tile else "layout"

    @property
    def slug(self) -> str:
        """A folder name for the collection: ``layout:xla:random`` -> ``layout-xla-random``."""
        return self.value.replace(":", "-")

    @property
    def source(self) -> str:
        """``xla`` or ``nlp``: the family of programs the graphs come from."""
        return self.value.split(":")[1]

    @property
    def search(self) -> str | None:
        """``default`` or ``random`` for layout collections, ``None`` for tile."""
        parts = self.value.split(":")
        return parts[2] if len(parts) == 3 else None

    @property
    def relpath(self) -> PurePosixPath:
        """Path of the collection below ``npz/``: ``tile/xla`` or ``layout/xla/random``."""
        return PurePosixPath(*self.value.split(":"))

    @classmethod
    def parse(cls, text: str) -> Collection:
        """Accept ``layout:xla:random``, ``layout/xla/random`` or ``layout-xla-random``."""
        norm = text.strip().replace("/", ":").replace("-", ":").replace("_", ":").lower()
        try:
            return cls(norm)
        except ValueError:
            known = ", ".join(c.value for c in cls)
            raise ValueError(f"unknown collection {text!r}; expected one of {known}") from None


class Split(StrEnum):
    """A data split. Test files carry all-zero runtimes (hidden labels)."""

    TRAIN = "train"
    VALID = "valid"
    TEST = "test"


TILE_COLLECTIONS = (Collection.TILE_XLA,)
LAYOUT_COLLECTIONS = tuple(c for c in Collection if c.is_layout)


def submission_id(collection: Collection, stem: str) -> str:
    """The submission ID of a graph, ``<collection>:<stem>``, e.g. ``tile:xla:abc``."""
    return f"{Collection(collection).value}:{stem}"
