"""The synthetic TpuGraphs world: programs (in :mod:`competition.hlo.ir`), runtime physics, and the writer."""
