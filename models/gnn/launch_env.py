"""What torchrun tells each process it starts, read from the environment without importing torch: a command that
trains no GNN (``fastslow train --model gbdt``) checks whether it is one process of a launch with this alone, and
:mod:`models.gnn.distributed` (which needs torch) builds on it."""

from __future__ import annotations

import os


class DistributedSetupError(ValueError):
    """A launch that cannot work as asked (a backend not available here, more processes than GPUs or than
    graphs, a broken torchrun environment); the message says what to change."""


def launched_world() -> int:
    """``WORLD_SIZE`` as torchrun set it for this process (1 when it was not launched by torchrun).

    Raises:
        DistributedSetupError: it is not a positive integer.
    """
    return env_int("WORLD_SIZE", 1, minimum=1)


def env_int(name: str, default: int, *, minimum: int) -> int:
    """The integer in the environment variable ``name`` (``default`` when unset or empty).

    Raises:
        DistributedSetupError: it is not an integer, or below ``minimum``.
    """
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise DistributedSetupError(f"${name}={text!r}: expected an integer >= {minimum} (torchrun sets it; do not "
                                    "set it by hand)")
    return value
