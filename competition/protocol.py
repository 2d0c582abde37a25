"""The valid protocol: which configs of a valid layout graph are scored.

Real nlp valid graphs hold 25,000 to 100,000 configs each (about 1.4 million per collection). The official
evaluation scores 1,000 fixed configs per valid layout graph; by default fastslow does the same: a fixed, seeded
subset of at most :data:`DEFAULT_VALID_CONFIGS` configs per valid layout graph, drawn from the graph's ID and config
count only, so every consumer (early stopping, model choice, the ensemble, the leaderboard, the report) draws the
same subset without being told it. ``ValidProtocol(None)`` (``--valid-configs all``) scores every config.

Tile graphs are always scored on every config: the tile metric is the best of the first five among all configs, and
tile kernels hold at most about 10,000 configs.

A valid submission row for a layout graph lists the subset's config indices (original indices into the graph's
configs), fastest first; a full permutation of ``range(C)`` is accepted too, and is then scored on the subset in
its own order.
"""

from __future__ import annotations

import argparse
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from competition.collections import Collection, Split

if TYPE_CHECKING:
    from competition.reader import LayoutGraph, TileGraph

    GraphT = TypeVar("GraphT", LayoutGraph, TileGraph)

DEFAULT_VALID_CONFIGS = 1000
"""Configs scored per valid layout graph by default (as in the official evaluation files)."""
ALL = "all"


@dataclass(frozen=True)
class ValidProtocol:
    """Which configs of each valid layout graph are predicted and scored.

    Args:
        max_configs: at most this many configs per valid layout graph; ``None`` for every config.
        seed: seeds the subsets (together with each graph's collection and stem).
    """

    max_configs: int | None = DEFAULT_VALID_CONFIGS
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_configs is not None and self.max_configs < 2:
            raise ValueError(f"valid configs per graph must be at least 2 (or {ALL!r}); got {self.max_configs}")

    @classmethod
    def parse(cls, text: str | int | None, seed: int = 0) -> ValidProtocol:
        """From a CLI value: ``all`` or a positive count (``None`` gives the default)."""
        if text is None:
            return cls(seed=seed)
        if isinstance(text, str) and text.strip().lower() == ALL:
            return cls(None, seed)
        try:
            n = int(text)
        except ValueError:
            raise ValueError(f"valid configs: expected {ALL!r} or a count of at least 2; found {text!r}") from None
        return cls(n, seed)

    @property
    def is_all(self) -> bool:
        return self.max_configs is None

    def configs(self, collection: Collection, stem: str, num_configs: int,
                split: Split = Split.VALID) -> npt.NDArray[np.int64] | None:
        """The configs scored of one graph: ascending int64 indices, or ``None`` for every config.

        Only valid layout graphs with more than ``max_configs`` configs are subset; the same graph (collection,
        stem, config count) always gets the same subset for the same seed.
        """
        collection = Collection(collection)
        if (self.max_configs is None or Split(split) != Split.VALID or collection.is_tile
                or num_configs <= self.max_configs):
            return None
        key = f"{self.seed}/{collection.value}/{stem}/{num_configs}".encode()
        words = np.frombuffer(hashlib.sha256(key).digest()[:16], dtype=np.uint32).tolist()
        rng = np.random.default_rng(np.random.SeedSequence(words))
        return np.sort(rng.choice(num_configs, self.max_configs, replace=False)).astype(np.int64)

    def select(self, graph: GraphT, collection: Collection, split: Split = Split.VALID) -> GraphT:
        """``graph`` restricted to the configs this protocol scores (itself when that is every config)."""
        return graph.select_configs(self.configs(collection, graph.stem, graph.num_configs, split))

    def describe(self) -> str:
        """One line naming the protocol, printed above every valid table and stored in the leaderboard."""
        if self.max_configs is None:
            return "every config of every valid graph"
        return f"at most {self.max_configs:,} fixed configs per valid layout graph (seed {self.seed})"

    @property
    def tag(self) -> str:
        """Short form for tables and the leaderboard: ``all`` or ``1000@0``."""
        return ALL if self.max_configs is None else f"{self.max_configs}@{self.seed}"


DEFAULT_PROTOCOL = ValidProtocol()


def add_valid_configs_arg(parser: argparse.ArgumentParser) -> None:
    """The ``--valid-configs N|all`` option, shared by every command that predicts or scores the valid split."""
    parser.add_argument(
        "--valid-configs", metavar="N|all", default=str(DEFAULT_VALID_CONFIGS),
        help="valid protocol: score at most N fixed, seeded configs per valid layout graph (as the official "
             "evaluation does), or 'all' for every config; tile graphs are always scored whole. Every model, early "
             "stopping, the ensemble and the leaderboard use the same configs (default: %(default)s)",
    )


def protocol_from_args(args: argparse.Namespace) -> ValidProtocol:
    """The protocol chosen by :func:`add_valid_configs_arg`'s option (a bad value is a ``ValueError``)."""
    return ValidProtocol.parse(args.valid_configs)
