"""From an XLA program to TpuGraphs npz files, in pure Python.

The modules, in the order data flows through them:

- :mod:`competition.hlo.ir`: the program objects (those of :mod:`competition.synthetic.hlo`) and the errors;
- :mod:`competition.hlo.text`: HLO text as XLA prints it, parsed into a module;
- :mod:`competition.hlo.wire`: a small protobuf wire-format reader and writer driven by field tables;
- :mod:`competition.hlo.proto`: a serialized ``HloModuleProto`` read into a module, and a module written as one;
- :mod:`competition.hlo.records`: tuning records (``tuning.proto`` of the TpuGraphs repository), read and written;
- :mod:`competition.hlo.featurize`: modules and records turned into layout and tile npz files, with the feature
  writer the synthetic world uses (:func:`competition.synthetic.featurize.featurize`);
- :mod:`competition.hlo.cli`: the ``fastslow featurize`` command.

Nothing here imports jax: the tests lower their JAX programs themselves.
"""
