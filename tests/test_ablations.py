"""The ablation harness: every variant is a valid setting of its model, and the table's figures by hand."""

from __future__ import annotations

import math

import pytest

from benchmarks.ablations import VARIANTS, format_table, parse_log
from competition.collections import Collection
from models.registry import MODELS, param_problem

XD, NR = Collection.LAYOUT_XLA_DEFAULT, Collection.LAYOUT_NLP_RANDOM


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_variant_is_a_valid_setting_of_its_model(name: str):
    v = VARIANTS[name]
    assert v.model in MODELS
    for key, value in v.params.items():
        assert param_problem(MODELS[v.model], key, value) is None, (name, key)


def test_table_gives_mean_spread_percent_and_paired_difference():
    scores = {"default": {XD: [0.4, 0.6], NR: [0.8, 0.9]}, "x": {XD: [0.5, 0.6], NR: [0.8, 1.0]}}
    oracles = {XD: [0.8, 0.75], NR: [1.0, 1.0]}
    lines = format_table(scores, oracles, "demo", [0, 1]).splitlines()
    row = next(line for line in lines if line.startswith("x ")).split()
    # xla:default: mean 0.55, sd 0.05*sqrt2 = 0.0707, % = mean(62.5, 80) = 71.25
    assert row[1:3] == ["0.5500±0.071", "71%"]
    # per world, the difference averaged over the collections: (0.1 + 0) / 2 = 0.05 and (0 + 0.1) / 2 = 0.05
    assert row[-1] == "+0.0500±0.0000"
    oracle = next(line for line in lines if line.startswith("oracle")).split()
    assert [float(x) for x in oracle[1:]] == [0.775, 1.0]
    assert not math.isnan(float(row[3].split("±")[0]))


def test_parse_log_reads_the_per_variant_lines():
    lines = [
        "gnn-attn layout:xla:default settings: attention=True",
        "[world 1/2 seed 0] default (1/2): layout:xla:default 0.5411, layout:nlp:random 0.8633  (184 s; 3.1 min so far)",
        "[world 2/2 seed 1] sib-ling (2/2): layout:xla:default 0.5771, layout:nlp:random 0.8709  (553 s; 28.9 min so "
        "far)",
        "[world 1/1 seed 1] default (1/3): layout:xla:default 0.5406, layout:nlp:random 0.8572  (291 s; 4.8 min so far)",
    ]
    found = parse_log(lines)
    assert found == {"default": {0: {XD: 0.5411, NR: 0.8633}, 1: {XD: 0.5406, NR: 0.8572}},
                     "sib-ling": {1: {XD: 0.5771, NR: 0.8709}}}


def test_without_default_fits_only_the_named_variants(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]):
    import benchmarks.ablations as ab
    import competition.synthetic.world as world

    fitted: list[str] = []

    class Report:
        def scores(self) -> dict[Collection, float]:
            return {XD: 0.5}

    monkeypatch.setattr(world, "generate_world", lambda *a, **k: None)
    monkeypatch.setattr(ab, "find_data_root", lambda path: path)
    monkeypatch.setattr(ab, "load_labels", lambda *a, **k: None)
    monkeypatch.setattr(ab, "oracle_scores", lambda labels: {XD: 0.8})
    monkeypatch.setattr(ab, "run_variant", lambda variant, *a, **k: fitted.append(variant.name))
    monkeypatch.setattr(ab, "score_predictions", lambda preds, labels: Report())
    argv = ["--world-seeds", "3", "--collections", XD.value, "--variants", "default", "margin"]
    assert ab.main([*argv, "--without-default"]) == 0
    out = capsys.readouterr().out
    assert fitted == ["margin"]
    assert "[world 1/1 seed 3] margin (1/1): layout:xla:default 0.5000" in out and "default (" not in out
    assert parse_log(out.splitlines()) == {"margin": {3: {XD: 0.5}}}
    fitted.clear()
    assert ab.main(argv) == 0  # without the flag the default is fitted first, and the table printed
    assert fitted == ["default", "margin"] and "vs default" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        ab.main(["--variants", "default", "--without-default"])


def test_tables_from_logs_merge_runs_split_by_collection(monkeypatch: pytest.MonkeyPatch, tmp_path,
                                                          capsys: pytest.CaptureFixture[str]):
    """One run fitted default and 'x' on xla:default, another default on nlp:random (same world): the default's
    line holds both collections, and 'x' gets a table of the collection it shares with the default."""
    import benchmarks.ablations as ab

    monkeypatch.setattr(ab, "find_data_root", lambda path: path)
    monkeypatch.setattr(ab, "load_labels", lambda *a, **k: None)
    monkeypatch.setattr(ab, "oracle_scores", lambda labels: {XD: 0.8, NR: 1.0})
    (tmp_path / "a.log").write_text(
        "[world 1/1 seed 0] default (1/2): layout:xla:default 0.5000  (1 s; 0.0 min so far)\n"
        "[world 1/1 seed 0] x (2/2): layout:xla:default 0.6000  (1 s; 0.0 min so far)\n")
    (tmp_path / "b.log").write_text(
        "[world 1/1 seed 0] default (1/1): layout:nlp:random 0.9000  (1 s; 0.0 min so far)\n")
    assert ab._table_from_logs([str(tmp_path / "a.log"), str(tmp_path / "b.log")], "demo", "data") == 0
    tables = [t.strip() for t in capsys.readouterr().out.split("\n\n") if t.strip()]
    assert len(tables) == 2
    both = tables[0].splitlines()
    assert XD.value in both[1] and NR.value in both[1]
    assert next(line for line in both if line.startswith("default")).split()[1:5] == \
        ["0.5000±nan", "62%", "0.9000±nan", "90%"]
    one = tables[1].splitlines()
    assert NR.value not in one[1]
    assert next(line for line in one if line.startswith("x ")).split()[-1] == "+0.1000±nan"


def test_help_lists_every_variant(capsys):
    """--help prints every variant's name (a variant's help is formatted by argparse: a bare '%' would break it)."""
    import benchmarks.ablations as ab

    with pytest.raises(SystemExit) as exit_:
        ab.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in VARIANTS)


def test_tables_from_logs_compare_with_the_named_baseline(monkeypatch: pytest.MonkeyPatch, tmp_path,
                                                          capsys: pytest.CaptureFixture[str]):
    """--baseline seeds-1: one-network screens are compared with the one-network line, not with 'default' (which
    the logs need not hold); a baseline the logs lack is named."""
    import benchmarks.ablations as ab

    monkeypatch.setattr(ab, "find_data_root", lambda path: path)
    monkeypatch.setattr(ab, "load_labels", lambda *a, **k: None)
    monkeypatch.setattr(ab, "oracle_scores", lambda labels: {XD: 0.8})
    log = tmp_path / "a.log"
    log.write_text("[world 1/2 seed 0] seeds-1 (1/1): layout:xla:default 0.5000  (1 s; 0.0 min so far)\n"
                   "[world 2/2 seed 1] seeds-1 (1/1): layout:xla:default 0.7000  (1 s; 0.0 min so far)\n"
                   "[world 1/2 seed 0] x-one-net (1/1): layout:xla:default 0.5500  (1 s; 0.0 min so far)\n"
                   "[world 2/2 seed 1] x-one-net (1/1): layout:xla:default 0.6500  (1 s; 0.0 min so far)\n")
    assert ab.main(["--scale", "demo", "--from-logs", str(log), "--baseline", "seeds-1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "vs seeds-1" in next(line for line in lines if line.startswith("variant"))
    assert next(line for line in lines if line.startswith("seeds-1")).split()[1:3] == ["0.6000±0.141", "75%"]
    assert next(line for line in lines if line.startswith("x-one-net")).split()[-1] == "+0.0000±0.0707"
    with pytest.raises(SystemExit, match="no 'default' lines"):
        ab.main(["--scale", "demo", "--from-logs", str(log)])
