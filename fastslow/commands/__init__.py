"""The ``fastslow`` commands, one module per command group; :mod:`fastslow.cli` assembles them."""
