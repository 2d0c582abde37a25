"""benchmarks/speed.py: the ratios of the previous defaults to the current, from the runs' medians."""

from __future__ import annotations


def _run(train: float, valid: float, configs: int, predict: float, networks: int = 1) -> dict:
    return {"fit": train + valid, "networks": networks, "train": train, "valid": valid, "metric": 0.9, "predict_configs": configs,
            "predict": predict, "graphs": 100, "peak_mib": 500.0}


def test_the_table_prints_the_medians_and_their_ratios():
    from benchmarks.speed import format_table

    results = {"tile:xla": {"previous": [_run(10.0, 40.0, 1000, 2.0), _run(12.0, 44.0, 1000, 2.0),
                                         _run(11.0, 42.0, 1000, 4.0)],
                            "current": [_run(10.0, 8.0, 1000, 1.0), _run(10.0, 9.0, 1000, 1.0),
                                        _run(12.0, 10.0, 1000, 1.0)]}}
    text = format_table(results)
    row = next(line for line in text.splitlines() if line.startswith("tile:xla"))
    # medians: train 11 / 10 (1.10), valid 42 / 9 (4.67), epoch 53 / 19 (2.79); predict 500 / 1000 configs/s (2.00)
    assert row.split() == ["tile:xla", "100", "1/1", "11.0/", "10.0", "1.10", "42.0/", "9.0", "4.67", "2.79", "500/",
                           "1000", "2.00"]
    assert "previous defaults: tile:xla: train.valid_configs=None" in text


def test_a_network_count_that_changed_is_shown_and_every_network_is_timed(monkeypatch, tmp_path):
    """A fit of a seed ensemble times one epoch of each network: the part's train and valid seconds are the sums
    over the networks' epochs, and the table shows the networks before and after."""
    import numpy as np

    import benchmarks.speed as speed
    from competition.collections import Collection, Split
    from models.gnn.model import GNNModel

    results = {"layout:xla:random": {"previous": [_run(30.0, 6.0, 100, 1.0, networks=3)],
                                     "current": [_run(20.0, 4.0, 100, 1.0, networks=2)]}}
    row = next(line for line in speed.format_table(results).splitlines() if line.startswith("layout:xla:random"))
    assert row.split()[2:6] == ["3/2", "30.0/", "20.0", "1.50"]

    class Fitted:
        history_ = [{"seconds": 9.0, "valid_seconds": 9.0}, {"seconds": 5.0, "valid_seconds": 2.0, "valid_metric": 0.5}]
        members_ = [{"history": [{"seconds": 7.0, "valid_seconds": 3.0, "valid_metric": 0.4}]}]
        histories = GNNModel.histories  # the real model's accessor over this fake's state

        def __init__(self, **params):
            self.params = params

        def fit(self, data, progress=False):
            return self

        def predict(self, graph):
            return np.zeros(3)

    class Graphs(list):
        stems = ["a", "b"]
        split = Split.VALID

    class Data:
        collection = Collection.LAYOUT_XLA_RANDOM
        valid = Graphs([object(), object()])
        train = [object()]

        class protocol:  # noqa: N801
            @staticmethod
            def select(g, c, split):
                return g

    made: list[dict] = []
    monkeypatch.setattr("models.registry.make_model", lambda name, **params: made.append(params) or Fitted(**params))
    monkeypatch.setattr("competition.dataset.open_collection", lambda root, c: Data())
    monkeypatch.setattr("competition.dataroot.find_data_root", lambda world: world)
    monkeypatch.setattr(speed, "head", lambda data, n: data)
    part = speed.part_fit(str(tmp_path), "layout:xla:random", "previous", 1, 1, str(tmp_path))
    assert (part["networks"], part["train"], part["valid"], part["metric"]) == (2, 3.0 + 4.0, 2.0 + 3.0, 0.5)
    assert part["predict_configs"] == 6
    # the previous defaults' ensemble size; nothing forces one network
    assert made[-1]["run.seeds"] == 3 and "seeds" not in made[-1] and made[-1]["epochs"] == 1
