"""benchmarks/speed.py: the ratios of the previous defaults to the current, from the runs' medians."""

from __future__ import annotations


def _run(train: float, valid: float, configs: int, predict: float) -> dict:
    return {"fit": train + valid, "train": train, "valid": valid, "metric": 0.9, "predict_configs": configs,
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
    assert row.split() == ["tile:xla", "100", "11.0/", "10.0", "1.10", "42.0/", "9.0", "4.67", "2.79", "500/",
                           "1000", "2.00"]
    assert "previous defaults: tile:xla: train.valid_configs=None" in text
