"""The time budget: durations, shares, models stopping at their deadline, and the pipeline always submitting."""

from __future__ import annotations

import io
import math
import os
import time
from pathlib import Path

import numpy as np
import pytest

from competition.budget import TimeBudget, concurrent_slots, format_seconds, parse_duration
from competition.collections import Collection, Split, submission_id
from competition.dataroot import find_data_root, list_graphs
from competition.dataset import Dataset, open_collection
from competition.labels import load_labels
from competition.metrics import graph_score
from competition.protocol import ValidProtocol
from competition.reader import load_graph
from competition.submission_checks import validate_submission
from competition.submission_reading import read_submission
from fastslow.cli import main
from fastslow.pipeline import run_pipeline
from fastslow.progress import LineWriter, line_progress
from models.gbdt import GBDTModel
from models.gnn.model import GNNModel


def test_parse_duration():
    assert parse_duration("8h") == 8 * 3600
    assert parse_duration("90m") == 5400
    assert parse_duration("1h30m") == 5400
    assert parse_duration("45s") == 45 and parse_duration("3600") == 3600 and parse_duration("1.5h") == 5400
    for bad in ("", "h", "8x", "-1h", "0", "8h soon"):
        with pytest.raises(ValueError, match="time budget"):
            parse_duration(bad)
    assert format_seconds(7500) == "2h05m" and format_seconds(250) == "4m10s" and format_seconds(12) == "12s"


def test_shares_of_a_budget():
    b = TimeBudget(1000.0, started=time.monotonic())
    assert b.reserve() == 50.0  # 5%
    assert b.share(1.0, 4.0) == pytest.approx(950 / 4, rel=1e-3)
    assert b.share(0.0, 4.0) == 0.0
    assert math.isinf(TimeBudget().share(1.0, 4.0)) and TimeBudget().describe() == "no time budget"
    spent = TimeBudget(10.0, started=time.monotonic() - 60)
    assert spent.remaining() == 0.0 and spent.spendable() == 0.0


def test_gbdt_stops_boosting_at_its_deadline(tiny_world: Path):
    root = find_data_root(tiny_world)
    c = Collection.LAYOUT_XLA_RANDOM
    free = GBDTModel(n_estimators=40, early_stopping_rounds=0, n_jobs=1).fit(open_collection(root, c), progress=False)
    late = GBDTModel(n_estimators=40, early_stopping_rounds=0, n_jobs=1).fit(open_collection(root, c), progress=False,
                                                                             deadline=time.monotonic())
    assert free.best_iteration_ == 40 and late.best_iteration_ == 1
    graph = load_graph(list_graphs(root, c, Split.TEST)[0], c)
    assert late.predict(graph).shape == (graph.num_configs,)


def test_gnn_stops_at_its_deadline_and_still_predicts(tiny_world: Path, tmp_path: Path):
    root = find_data_root(tiny_world)
    c = Collection.LAYOUT_NLP_RANDOM
    model = GNNModel(epochs=50, hidden=8, runs_dir=None, cache_dir=str(tmp_path / "cache"))
    model.fit(open_collection(root, c), progress=False, deadline=time.monotonic())
    assert model.stopped_ == "time budget" and len(model.history_) == 0
    graph = load_graph(list_graphs(root, c, Split.TEST)[0], c)
    assert np.isfinite(model.predict(graph)).all()


def test_gnn_early_stopping_scores_the_valid_protocols_configs(tiny_world: Path, tmp_path: Path):
    root = find_data_root(tiny_world)
    c = Collection.LAYOUT_NLP_RANDOM
    protocol = ValidProtocol(20, seed=5)
    model = GNNModel(epochs=2, hidden=8, runs_dir=None, cache_dir=str(tmp_path / "cache"))
    model.fit(open_collection(root, c, protocol=protocol), progress=False)
    labels = load_labels(root, [c], Split.VALID, protocol)
    taus = []
    for path in list_graphs(root, c, Split.VALID):
        g = load_graph(path, c)
        sub = g.select_configs(protocol.configs(c, g.stem, g.num_configs))
        assert sub.num_configs == 20
        taus.append(graph_score(c, labels[submission_id(c, g.stem)].target(), scores=model.predict(sub)))
    assert model.best_metric_ == pytest.approx(float(np.mean(taus)), abs=1e-6)


def test_a_budget_too_small_for_one_epoch_still_submits_the_fastest_model(
        tiny_world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    monkeypatch.chdir(tmp_path)
    res = run_pipeline(tiny_world, models=["gnn", "default-first"], out_dir=tmp_path, progress=False,
                       time_budget=1.0)
    out = capsys.readouterr().out
    assert "[budget] gnn: skipped, the time budget is spent" in out
    assert res.best_model == "default-first" and set(res.valid_reports) == {"default-first"}
    assert validate_submission(res.submission, find_data_root(tiny_world), Split.TEST) == []


def test_the_pipeline_scores_every_model_on_the_protocols_configs(
        tiny_world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    protocol = ValidProtocol(20, seed=1)
    res = run_pipeline(tiny_world, models=["default-first", "gbdt"], out_dir=tmp_path, progress=False,
                       protocol=protocol)
    root = find_data_root(tiny_world)
    labels = load_labels(root, list(Collection), Split.VALID, protocol).targets()
    for name in ("default-first", "gbdt", "ensemble"):
        orders = read_submission(tmp_path / f"valid-{name}.csv")
        for gid, order in orders.items():
            c, stem = gid.rsplit(":", 1)
            if Collection(c).is_layout:
                assert order.size == min(20, load_graph(root.collection_dir(Collection(c), Split.VALID)
                                                        / f"{stem}.npz").num_configs)
                assert labels[gid].size == order.size
        assert "20 fixed configs" in res.valid_reports[name].protocol
    assert validate_submission(res.submission, root, Split.TEST) == []


def test_submit_takes_time_budget_and_valid_configs(tiny_world: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]):
    monkeypatch.chdir(tmp_path)
    assert main(["submit", "--data", str(tiny_world), "--models", "default-first", "--out-dir", "subs",
                 "--no-progress", "--time-budget", "10m", "--valid-configs", "all"]) == 0
    out = capsys.readouterr().out
    assert "valid protocol: every config of every valid graph; 10m00s of 10m00s left" in out
    assert main(["submit", "--data", str(tiny_world), "--time-budget", "soon", "--no-progress"]) == 2
    assert "time budget: expected a positive duration" in capsys.readouterr().err


def test_concurrent_slots():
    # 2 workers hold 2,000 s: 3/4 of that is more than the run has, so the large part gets all 1,000 s, and the
    # other one the 1,000 s it leaves
    assert concurrent_slots(1000.0, {"a": 3.0, "b": 1.0}, 2) == {"a": 1000.0, "b": 1000.0}
    # a large part capped, the 1,000 s it leaves shared by the others in proportion
    assert concurrent_slots(1000.0, {"a": 8.0, "b": 1.0, "c": 3.0}, 2) == {"a": 1000.0, "b": 250.0, "c": 750.0}
    # capping one part can cap the next: 4 workers, 4,000 s; a then b take 1,000 s each, c and d share 2,000 s
    assert concurrent_slots(1000.0, {"a": 10.0, "b": 4.0, "c": 1.0, "d": 1.0}, 4) == {
        "a": 1000.0, "b": 1000.0, "c": 1000.0, "d": 1000.0}
    assert concurrent_slots(1000.0, {"a": 10.0, "b": 4.0, "c": 1.0, "d": 3.0}, 3) == {
        "a": 1000.0, "b": 1000.0, "c": 250.0, "d": 750.0}
    assert concurrent_slots(1000.0, {"a": 3.0, "b": 1.0}, 1) == {"a": 750.0, "b": 250.0}  # one at a time
    assert concurrent_slots(1000.0, {"a": 1.0, "b": 1.0, "c": 2.0}, 2) == {"a": 500.0, "b": 500.0, "c": 1000.0}
    assert concurrent_slots(900.0, {"a": 0.0, "b": 0.0, "c": 0.0}, 2) == {"a": 600.0, "b": 600.0, "c": 600.0}
    assert concurrent_slots(math.inf, {"a": 1.0}, 2) == {"a": math.inf}
    with pytest.raises(ValueError, match="jobs must be at least 1"):
        concurrent_slots(10.0, {"a": 1.0}, 0)


def _slots(out: str) -> dict[str, float]:
    """Each collection's slot in seconds, from the pipeline's ``[budget] gnn <collection>: 16m40s (...)`` lines."""
    from competition.budget import parse_duration

    return {line.split()[2].rstrip(":"): parse_duration(line.split(": ", 1)[1].split(" ", 1)[0])
            for line in out.splitlines() if line.startswith("[budget] gnn ")}


def test_concurrent_fits_share_the_budget_largest_first(tiny_world: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]):
    from fastslow.fitting import predict_split
    from models.registry import ModelParams

    monkeypatch.chdir(tmp_path)
    small, large = Collection.LAYOUT_XLA_DEFAULT, Collection.LAYOUT_NLP_RANDOM
    params = ModelParams(common={"epochs": 1, "hidden": 8, "runs_dir": None, "steps_per_graph": 8},
                         per_collection={small: {"seeds": 1}, large: {"seeds": 3}})
    predict_split("gnn", Dataset.open(find_data_root(tiny_world), [small, large]), params=params, progress=False,
                  seconds=1000.0, weights={small: 1.0, large: 1.0}, jobs=2)
    out = capsys.readouterr().out
    assert f"(largest first: {large.value}, {small.value})" in out
    # sizes 3 and 1 (3 networks against 1): two workers hold 2,000 s, of which 1,500 s is more than the run has:
    # the large part gets the run's 1,000 s, and the small one the 1,000 s it leaves, less the seconds between the
    # two starts (the first submit starts the fork server, which imports torch and the models first)
    assert f"[budget] gnn {large.value}: 16m40s (fit until at most 13m20s after it starts)" in out
    assert 880 <= _slots(out)[small.value] <= 1000, out  # the server starts in seconds (a busy CI: more)


def test_a_concurrent_fit_that_ends_early_leaves_its_time_to_the_next(tiny_world: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]):
    from fastslow.fitting import predict_split
    from models.registry import ModelParams

    monkeypatch.chdir(tmp_path)
    a, b, c = Collection.LAYOUT_XLA_DEFAULT, Collection.LAYOUT_NLP_DEFAULT, Collection.LAYOUT_NLP_RANDOM
    params = ModelParams(common={"epochs": 1, "hidden": 8, "runs_dir": None, "steps_per_graph": 1, "seeds": 1})
    predict_split("gnn", Dataset.open(find_data_root(tiny_world), [a, b, c]), params=params, progress=False,
                  seconds=3000.0, weights={a: 1.0, b: 1.0, c: 1.0}, jobs=2)
    out = capsys.readouterr().out
    slots = _slots(out)
    assert set(slots) == {a.value, b.value, c.value}
    # Two workers hold 6,000 s: the first two fits get a third each, 2,000 s = 33m20s, when they start (the second
    # a few seconds less: the first submit starts the fork server, which imports torch and the models first); the
    # third starts when one of them ends (seconds in) and gets what is left of both workers less what the other
    # still holds, about 6,000 - 2,000 s, capped at the run's end: about 3,000 s, not the 2,000 s shared out in
    # advance.
    first, second, third = sorted(slots.values())
    assert 1880 <= first <= 2000 and 1880 <= second <= 2000, slots
    assert 45 * 60 <= third <= 3000, slots  # 3,000 s less the seconds the first fit took


def test_line_progress_wraps_a_terminal_too(monkeypatch: pytest.MonkeyPatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setenv("TQDM_MININTERVAL", "")  # so that monkeypatch restores what was there before
    monkeypatch.delenv("TQDM_MININTERVAL")
    from fastslow.progress import line_progress_when_logged

    assert not line_progress_when_logged()  # a terminal redraws bars in place
    assert line_progress() and not line_progress()  # forced once; wrapped already the second time
    import sys

    assert isinstance(sys.stderr, LineWriter) and sys.stderr.stream is terminal
    assert os.environ["TQDM_MININTERVAL"] == "5"


def test_progress_lines_in_a_log():
    sink = io.StringIO()
    w = LineWriter(sink)
    w.write("plain text\n")
    w.write("\rbar  10%|#")
    w.write("\rbar  50%|#####")
    w.write("\r          \r")  # a bar clearing itself
    w.write("\n")
    w.write("done\n")
    assert sink.getvalue() == "plain text\nbar  10%|#\nbar  50%|#####\ndone\n"


def test_work_factors_of_the_gnn_settings():
    from models.gnn.config import default_config

    c = Collection.LAYOUT_NLP_RANDOM
    assert GNNModel().work_factor(c) == 1.0 and GBDTModel().work_factor(c) == 1.0
    assert GNNModel(seeds=3).work_factor(c) == 3.0
    assert GNNModel(seeds=2, steps_per_graph=16, refit=True).work_factor(c) == 2 * 2 * 2
    assert GNNModel(epochs=5).work_factor(Collection.TILE_XLA) == 5 / 12
    # A collection's own defaults count against its kind's: xla:random's networks x steps.
    xr = default_config(Collection.LAYOUT_XLA_RANDOM)
    assert GNNModel().work_factor(Collection.LAYOUT_XLA_RANDOM) == xr.run.seeds * xr.train.steps_per_graph / 8


def test_a_models_time_is_shared_by_collection_size_times_its_work(tiny_world: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]):
    from fastslow.fitting import predict_split
    from models.registry import ModelParams

    first, second = Collection.LAYOUT_XLA_DEFAULT, Collection.LAYOUT_NLP_RANDOM
    params = ModelParams(common={"epochs": 1, "hidden": 8, "runs_dir": None, "cache_dir": str(tmp_path / "c"),
                                 "steps_per_graph": 8},
                         per_collection={first: {"seeds": 3}, second: {"seeds": 1}})
    predict_split("gnn", Dataset.open(find_data_root(tiny_world), [first, second]), params=params,
                  progress=False, seconds=1000.0, weights={first: 1.0, second: 1.0})
    out = capsys.readouterr().out
    # 3 networks against 1 on graphs of the same size measure: the first gets 3/4 of the 1,000 s.
    assert f"[budget] gnn {first.value}: 12m30s (fit until 10m00s)" in out


def test_prediction_factor_counts_the_configs_predicted(tiny_world: Path):
    from models.gnn.model import PREDICT_OVERHEAD, prediction_factor

    root = find_data_root(tiny_world)
    c = Collection.LAYOUT_NLP_RANDOM
    protocol = ValidProtocol(20, seed=5)
    valid = [load_graph(p, c).num_configs for p in list_graphs(root, c, Split.VALID)]
    test = [load_graph(p, c).num_configs for p in list_graphs(root, c, Split.TEST)]
    assert max(valid) > 20  # the protocol subsets some
    predicted = sum(min(n, 20) for n in valid) + sum(test)
    assert prediction_factor(open_collection(root, c, protocol=protocol), 50, tta=2) == pytest.approx(
        PREDICT_OVERHEAD * 2 * predicted / 50)
    everything = sum(valid) + sum(test)
    assert prediction_factor(open_collection(root, c, protocol=ValidProtocol(None)), 50, tta=1) == pytest.approx(
        PREDICT_OVERHEAD * everything / 50)
    # The graphs predicted are the dataset's, whatever the graphs early stopping scores.
    assert prediction_factor(open_collection(root, c, eval_split=None, protocol=protocol), 50, tta=2) == (
        prediction_factor(open_collection(root, c, protocol=protocol), 50, tta=2))


def test_gnn_fit_keeps_its_prediction_time_free(tiny_world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """With ``predict_by`` each network trains until then less the larger of the time after the fit deadline and its
    forecast prediction time (linear in the validation pass's seconds, for every network trained so far)."""
    import models.gnn.model as gnn_model

    calls: list[dict] = []
    real = gnn_model.train

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(gnn_model, "train", spy)
    root = find_data_root(tiny_world)
    c = Collection.LAYOUT_NLP_RANDOM
    model = GNNModel(epochs=1, hidden=8, seeds=2, runs_dir=None, cache_dir=str(tmp_path / "cache"))
    now = time.monotonic()
    model.fit(open_collection(root, c), progress=False, deadline=now + 800, predict_by=now + 1000)
    assert len(calls) == 2
    first, second = calls
    assert 990 < first["max_seconds"] <= 1000
    assert 190 < first["keep_free"](0.0) <= 200.5  # before a pass is measured: the time after the deadline
    per_second = first["keep_free"](1e5) / 1e5  # the forecast, past that
    assert per_second > 0 and first["keep_free"](2e5) == pytest.approx(2 * first["keep_free"](1e5))
    assert second["keep_free"](1e5) == pytest.approx(2 * first["keep_free"](1e5), rel=1e-6)  # two networks
    # Without predict_by, the fit deadline alone, as before.
    calls.clear()
    GNNModel(epochs=1, hidden=8, runs_dir=None, cache_dir=str(tmp_path / "cache")).fit(
        open_collection(root, c), progress=False, deadline=time.monotonic() + 800)
    assert 790 < calls[0]["max_seconds"] <= 800 and calls[0]["keep_free"] is None


def test_concurrent_slots_less_what_running_parts_hold():
    # 2 workers and 1,000 s: 2,000 s, of which a running part still holds 600 s; b and c share 1,400 s as 3 to 1
    assert concurrent_slots(1000.0, {"b": 3.0, "c": 1.0}, 2, committed=600.0) == {"b": 1000.0, "c": 400.0}
    assert concurrent_slots(1000.0, {"b": 1.0, "c": 1.0}, 2, committed=600.0) == {"b": 700.0, "c": 700.0}
    assert concurrent_slots(1000.0, {"b": 1.0}, 2, committed=2500.0) == {"b": 0.0}  # nothing left
    assert concurrent_slots(math.inf, {"b": 1.0}, 2, committed=600.0) == {"b": math.inf}
