"""The competition itself: collections, reading the data, the synthetic world, and the command line."""

from competition.collections import LAYOUT_COLLECTIONS, TILE_COLLECTIONS, Collection, Split
from competition.errors import DataFileError, DataRootNotFound

__all__ = ["Collection", "Split", "TILE_COLLECTIONS", "LAYOUT_COLLECTIONS", "DataFileError", "DataRootNotFound"]
