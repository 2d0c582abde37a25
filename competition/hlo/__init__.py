"""From an XLA program to TpuGraphs npz files, in pure Python.

The modules, in the order data flows through them:

- :mod:`competition.hlo.ir`: the program objects (modules, computations, instructions, shapes), which the
  synthetic world builds its programs in too, and the errors;
- :mod:`competition.hlo.text`: HLO text as XLA prints it, parsed into a module;
- :mod:`competition.hlo.wire`: a small protobuf wire-format reader and writer driven by field tables;
- :mod:`competition.hlo.proto`: a serialized ``HloModuleProto`` read into a module, and a module written as one;
- :mod:`competition.hlo.records`: tuning records (``tuning.proto`` of the TpuGraphs repository), read and written;
- :mod:`competition.hlo.features`: the feature writer, a module turned into the graph arrays of the format (the
  one both real programs and the synthetic world go through);
- :mod:`competition.hlo.featurize`: modules and records turned into layout and tile npz files;
- :mod:`competition.hlo.export`: programs and records written as npz files (what ``fastslow featurize`` runs).

Nothing here imports jax: the tests lower their JAX programs themselves.
"""
