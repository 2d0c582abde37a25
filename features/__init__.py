"""Feature pipelines shared by every model (transforms, tabular features, the processed-graph cache)."""
