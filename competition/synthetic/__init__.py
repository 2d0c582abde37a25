"""The synthetic TpuGraphs world: HLO-like programs, their featurization, runtime physics, and the writer."""
