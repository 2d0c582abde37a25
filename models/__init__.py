"""Models that score configurations: baselines, GBDT, GNNs, and the ensembler."""
