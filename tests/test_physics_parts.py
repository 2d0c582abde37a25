"""Which terms of the layout physics decide a graph's order (benchmarks/physics_parts.py), on the tiny world."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.physics_parts import PARTS, format_parts, graph_parts, main
from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.labels import load_labels
from competition.stats import graph_oracle
from tests.conftest import TINY_SEED

XD = Collection.LAYOUT_XLA_DEFAULT


@pytest.mark.parametrize("split", [Split.TRAIN, Split.TEST])
def test_parts_of_every_graph_read_back_from_its_file(tiny_world: Path, split: Split):
    root = find_data_root(tiny_world)
    paths = list_graphs(root, XD, split)
    rows = [graph_parts(root, "tiny", TINY_SEED, XD, split, i) for i in range(len(paths))]
    assert sorted(r.stem for r in rows) == sorted(p.stem for p in paths)
    split_labels = load_labels(root, [XD], split)
    labels = {split_labels[sid].stem: split_labels[sid] for sid in split_labels}
    for r in rows:
        assert set(r.tau) == set(PARTS) and all(-1 <= t <= 1 for t in r.tau.values())
        # the oracle is the world's noiseless order against the measured runtimes, as everywhere else
        assert r.oracle == pytest.approx(graph_oracle(labels[r.stem]))
        assert r.configs == labels[r.stem].num_configs and r.nodes > 0
        assert all(s >= 0 for s in r.spread.values())
    text = format_parts(rows).splitlines()
    assert len(text) == 2 + len(rows) + 1 and text[-1].startswith("mean")
    assert text[-1].split()[1] == f"{np.mean([r.oracle for r in rows]):.3f}"


def test_another_worlds_program_is_refused(tiny_world: Path, monkeypatch):
    """A file whose configs are not the program's choices (another seed's program under the same stem) is named."""
    import competition.synthetic.world_programs as world_programs

    root = find_data_root(tiny_world)
    real = world_programs.layout_module

    def other(scale, seed, source, split, index):
        module, stem = real(scale, seed, source, split, 1 - index)
        return module, real(scale, seed, source, split, index)[1]

    monkeypatch.setattr(world_programs, "layout_module", other)
    with pytest.raises(ValueError):
        graph_parts(root, "tiny", TINY_SEED, XD, Split.TRAIN, 0)


def test_main_prints_the_table(tmp_path: Path, capsys):
    assert main(["--scale", "tiny", "--world-seed", str(TINY_SEED), "--worlds-dir", str(tmp_path),
                 "--collection", XD.value, "--split", "valid"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("mean")


def test_main_reads_a_world_part_named_by_data(tiny_world: Path, capsys):
    """--data: a part of a world (here two graphs per split) read with its own scale and seed, nothing generated."""
    from competition.synthetic.world import read_world_config

    cfg = read_world_config(tiny_world)
    assert (cfg.scale, cfg.seed, cfg.limit) == ("tiny", TINY_SEED, 2)
    assert main(["--data", str(tiny_world), "--collection", XD.value, "--split", "train"]) == 0
    root = find_data_root(tiny_world)
    rows = [graph_parts(root, "tiny", TINY_SEED, XD, Split.TRAIN, i)
            for i in range(len(list_graphs(root, XD, Split.TRAIN)))]
    assert capsys.readouterr().out.splitlines() == format_parts(rows).splitlines()


@pytest.mark.parametrize("manifest", [None, "{not json", '{"config": {"scale": "tiny"}}'])
def test_data_without_a_world_manifest_is_named(tmp_path: Path, capsys, manifest: str | None):
    if manifest is not None:
        (tmp_path / "world.json").write_text(manifest)
    with pytest.raises(SystemExit) as exc:
        main(["--data", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "world.json") in err and "Traceback" not in err
