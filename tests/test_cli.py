"""The fastslow command line: help texts, and the data commands run on a tiny world."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from competition.collections import Collection
from fastslow.cli import build_parser, main


def _subparsers(parser):
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            yield from action.choices.items()


def test_every_option_has_help():
    def walk(parser, path):
        for action in parser._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"{path} {action.option_strings} has no help"
        for name, sub in _subparsers(parser):
            assert sub.description, f"{path} {name} has no description"
            walk(sub, f"{path} {name}")

    walk(build_parser(), "fastslow")


def test_module_entry_point_prints_help():
    res = subprocess.run([sys.executable, "-m", "fastslow", "data", "synth", "--help"],
                         capture_output=True, text=True, check=True)
    for opt in ("--scale", "--out", "--seed", "--collections", "--limit", "--force"):
        assert opt in res.stdout


def test_stats_prints_every_collection_with_oracle(tiny_world: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["data", "stats", str(tiny_world), "--no-progress"]) == 0
    out = capsys.readouterr().out
    for c in Collection:
        assert f"== {c.value} ==" in out
    assert out.count("oracle score (test ") == 5
    assert "files (train/valid/test): 2 / 2 / 2" in out
    assert "duplicated configs" in out


def test_where_and_validate(tiny_world: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["data", "where", "--data", str(tiny_world)]) == 0
    out = capsys.readouterr().out
    assert "layout:nlp:random" in out and "kaggle" in out
    assert main(["data", "validate", "--data", str(tiny_world), "--deep", "--no-progress"]) == 0
    assert "30 files checked, 0 with problems" in capsys.readouterr().out


def test_missing_data_root_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["data", "where", "--data", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "nowhere" in err and err.startswith("error:")


def test_stats_names_a_corrupt_file_or_skips_it(tiny_world: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]):
    import shutil

    world = tmp_path / "w"
    shutil.copytree(tiny_world, world)
    victim = sorted((world / "npz_all" / "npz" / "tile" / "xla" / "train").glob("*.npz"))[0]
    victim.write_bytes(victim.read_bytes()[:100])
    assert main(["data", "stats", str(world), "--collections", "tile:xla", "--no-progress"]) == 2
    assert victim.name in capsys.readouterr().err
    assert main(["data", "stats", str(world), "--collections", "tile:xla", "--no-progress", "--skip-bad"]) == 0
    out = capsys.readouterr().out
    assert "skipped (unreadable): 1 file(s)" in out and "files (train/valid/test): 2 / 2 / 2" in out


def test_prune_stats_reports_every_collection(tiny_world: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["features", "prune-stats", "--data", str(tiny_world), "--hops", "1", "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "pipeline: PruneToConfigurable(hops=1, direction='both')"
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert set(rows) == {c.value for c in Collection}
    tile = rows["tile:xla"]
    assert tile[2] == tile[3], "tile graphs are not pruned"
    for c in Collection:
        if c.is_layout:
            before, after = (int(x.replace(",", "")) for x in rows[c.value][2:4])
            assert 0 < after < before


def test_train_fits_saves_and_reports_each_collection(tiny_world, tmp_path, capsys):
    runs = tmp_path / "runs"
    assert main(["train", "--data", str(tiny_world), "--model", "gnn", "--collections", "layout:nlp:random",
                 "--runs-dir", str(runs), "--param", "epochs=1", "--param", "hidden=8",
                 "--param", f"cache_dir='{tmp_path / 'cache'}'", "--no-progress"]) == 0
    out = capsys.readouterr().out
    run = runs / "gnn" / "layout-nlp-random"
    assert {p.name for p in run.iterdir()} >= {"model.json", "checkpoint.pt", "curves.csv", "curves.png"}
    row = next(line for line in out.splitlines() if line.startswith("layout:nlp:random"))
    assert str(run / "model.json") in row
    from models.base import load_model

    model = load_model(run / "model.json")
    assert model.settings_["network"]["hidden"] == 8 and model.settings_["train"]["epochs"] == 1


def test_train_rejects_unknown_params(tiny_world, tmp_path):
    with pytest.raises(SystemExit, match="bogus"):
        main(["train", "--data", str(tiny_world), "--model", "gbdt", "--param", "bogus=1",
              "--runs-dir", str(tmp_path)])
