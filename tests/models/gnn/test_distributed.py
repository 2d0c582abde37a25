"""Data-parallel GNN training on 2 CPU processes (gloo) against 1 process over the same global batch, on the tiny
world: the same weights and predictions, rank 0 alone writing the run folder, resume under 2 processes, a rank that
dies, and the errors of a launch that cannot work."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.dataset import open_collection
from competition.reader import load_graph
from fastslow.cli import build_parser, main
from features.cache import ProcessedGraphs
from models.gnn import distributed
from models.gnn.model import GNNModel
from models.gnn.runs import CHECKPOINT, CURVES_CSV, CURVES_PNG, SETTINGS_FILE
from tests.models.gnn.test_model import interrupt_after_epoch_1

LAYOUT = Collection.LAYOUT_NLP_RANDOM
# Two train graphs: one per rank at graphs_per_step=2; steps_per_graph=2 makes two steps per epoch. Dropout on, so
# the per-slot seeding of the global RNG is part of what must agree.
DROPOUT = dict(hidden=16, layers=2, epochs=3, steps_per_graph=2, configs_per_graph=16, dropout=0.3,
               graphs_per_step=2, device="cpu", seed=0)
# GST with three graphs per step on two ranks: rank 0 accumulates two (no_sync), rank 1 one; the history table is
# gathered after every step.
GST = dict(DROPOUT, segment_size=50, hops="all", graphs_per_step=3, epochs=2)
gnn_train = importlib.import_module("models.gnn.train")
gnn_runs = importlib.import_module("models.gnn.runs")
gnn_callbacks = importlib.import_module("models.gnn.callbacks")


def _fit(root: Path, cache: str, runs: str | None, **params: Any) -> GNNModel:
    return GNNModel(**params, runs_dir=runs, cache_dir=cache).fit(open_collection(find_data_root(root), LAYOUT),
                                                                  progress=False)


def _valid_predictions(model: GNNModel, root: Path) -> dict[str, np.ndarray] | None:
    """Each rank scores its share of the valid graphs; rank 0 gets them all (``None`` on the others)."""
    paths = list_graphs(find_data_root(root), LAYOUT, Split.VALID)
    parts = distributed.gather_to_main({p.stem: model.predict(load_graph(p, LAYOUT)) for p in distributed.shard(paths)})
    return None if parts is None else {k: v for part in parts for k, v in part.items()}


def _worker(rank: int, port: int, tmp: str, world_dir: str, cache: str) -> None:
    """One of two ranks, in the environment torchrun would give it."""
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    out = Path(tmp)
    wrote: list[str] = []
    real_path, real_text, real_stream = gnn_runs.atomic_path, gnn_runs.atomic_write_text, gnn_callbacks.atomic_write_stream

    def spy_path(path, *args, **kwargs):
        wrote.append(Path(path).name)
        return real_path(path, *args, **kwargs)

    def spy_text(path, *args, **kwargs):
        wrote.append(Path(path).name)
        return real_text(path, *args, **kwargs)

    def spy_stream(path, *args, **kwargs):
        wrote.append(Path(path).name)
        return real_stream(path, *args, **kwargs)

    gnn_runs.atomic_path, gnn_runs.atomic_write_text = spy_path, spy_text
    gnn_callbacks.atomic_write_text, gnn_callbacks.atomic_write_stream = spy_text, spy_stream
    real_build = ProcessedGraphs.build

    def spy_build(self):
        wrote.append(f"build {self.split.value}")
        return real_build(self)

    ProcessedGraphs.build = spy_build  # type: ignore[method-assign]
    results: dict[str, Any] = {}
    with distributed.process_group(torch.device("cpu"), backend="gloo", timeout=60):
        model = _fit(Path(world_dir), cache, str(out / "two"), **DROPOUT)
        results["dropout"] = (model.weights_, model.history_)
        results["predictions"] = _valid_predictions(model, Path(world_dir))
        gst = _fit(Path(world_dir), cache, None, **GST)
        results["gst"] = (gst.weights_, gst.history_)
        resumed = _fit(Path(world_dir), cache, str(out / "resume"), **DROPOUT)  # from 1 process's epoch-1 checkpoint
        results["resumed"] = (resumed.weights_, resumed.history_)
        (out / f"wrote-{rank}.json").write_text(json.dumps(wrote))
        if rank == 0:
            torch.save(results, out / "results.pt")
        # Last, as it breaks the process group: rank 1 dies in epoch 2, after epoch 1's checkpoint.
        if rank == 1:
            calls = []
            real_step = gnn_train.training_step

            def dies(*args, **kwargs):
                calls.append(1)
                if len(calls) == 3:
                    os._exit(7)
                return real_step(*args, **kwargs)

            gnn_train.training_step = dies
        try:
            with distributed.collectives("training on layout:nlp:random"):
                _fit(Path(world_dir), cache, str(out / "dies"), **DROPOUT)
        except distributed.RankLostError as exc:
            (out / "lost.txt").write_text(str(exc))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _assert_close(mine: dict[str, np.ndarray], theirs: dict[str, np.ndarray], atol: float = 1e-6) -> None:
    assert mine.keys() == theirs.keys()
    for k in mine:
        np.testing.assert_allclose(mine[k], theirs[k], rtol=1e-5, atol=atol, err_msg=k)


def _assert_same_history(mine: list[dict], theirs: list[dict], rel: float = 1e-5, metric: float = 1e-6) -> None:
    assert [r["epoch"] for r in mine] == [r["epoch"] for r in theirs]
    for a, b in zip(mine, theirs, strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=rel)
        assert a["valid_metric"] == pytest.approx(b["valid_metric"], abs=metric)
        assert a["lr"] == b["lr"]


@pytest.mark.slow
def test_two_processes_train_and_predict_as_one(tiny_world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    cache = str(tmp_path / "cache")  # empty: rank 0 builds it while rank 1 waits
    one = _fit(tiny_world, str(tmp_path / "one-cache"), None, **DROPOUT)
    one_gst = _fit(tiny_world, str(tmp_path / "one-cache"), None, **GST)
    assert len(list_graphs(find_data_root(tiny_world), LAYOUT, Split.TRAIN)) == 2
    with monkeypatch.context() as m:  # 1 process stops after epoch 1's checkpoint: 2 processes resume it
        interrupt_after_epoch_1(m)
        with pytest.raises(KeyboardInterrupt):
            _fit(tiny_world, str(tmp_path / "one-cache"), str(tmp_path / "resume"), **DROPOUT)

    context = mp.start_processes(_worker, args=(_free_port(), str(tmp_path), str(tiny_world), cache), nprocs=2,
                                 join=False, start_method="spawn")
    for process in context.processes:
        process.join(120)
    codes = [p.exitcode for p in context.processes]
    assert codes == [0, 7], codes  # rank 1 died (os._exit(7)); rank 0 stopped with a message and exited

    results = torch.load(tmp_path / "results.pt", weights_only=False)
    weights, history = results["dropout"]
    _assert_close(weights, one.weights_)
    _assert_same_history(history, one.history_)
    gst_weights, gst_history = results["gst"]
    # Weighted 1/3 each on one process, 2/3 then halved by the all-reduce on two: 1/3 rounds, so the gradients
    # differ in their last bits, which AdamW's normalisation magnifies where a gradient is nearly zero.
    _assert_close(gst_weights, one_gst.weights_, atol=1e-4)
    # Kendall tau moves in steps: a pair of configs scored within rounding of each other may swap.
    _assert_same_history(gst_history, one_gst.history_, rel=1e-4, metric=1e-3)

    # Predictions: each rank scored one of the two valid graphs; together, those of the model of 1 process.
    predictions = results["predictions"]
    root = find_data_root(tiny_world)
    assert sorted(predictions) == sorted(p.stem for p in list_graphs(root, LAYOUT, Split.VALID))
    for path in list_graphs(root, LAYOUT, Split.VALID):
        np.testing.assert_allclose(predictions[path.stem], one.predict(load_graph(path, LAYOUT)), rtol=1e-4, atol=1e-5)

    # Rank 0 alone built the cache (rank 1 waited, then read it) and wrote the run folder.
    assert json.loads((tmp_path / "wrote-1.json").read_text()) == []
    assert set(json.loads((tmp_path / "wrote-0.json").read_text())) == {"build train", "build valid", SETTINGS_FILE,
                                                                         CHECKPOINT, CURVES_CSV, CURVES_PNG}
    run = tmp_path / "two" / "gnn" / LAYOUT.slug
    assert sorted(p.name for p in run.iterdir()) == sorted([CHECKPOINT, CURVES_CSV, CURVES_PNG, SETTINGS_FILE])
    assert torch.load(run / CHECKPOINT, weights_only=True)["epoch"] == 3

    # Resumed under 2 processes from 1 process's epoch-1 checkpoint: epoch 1 kept, the end as if never stopped.
    resumed_weights, resumed_history = results["resumed"]
    assert resumed_history[0] == torch.load(tmp_path / "resume" / "gnn" / LAYOUT.slug / CHECKPOINT,
                                            weights_only=True)["history"][0]
    _assert_close(resumed_weights, one.weights_)
    _assert_same_history(resumed_history, one.history_)

    # Rank 1 died in epoch 2: rank 0 said so in one line, and the run resumes from epoch 1's checkpoint.
    lost = (tmp_path / "lost.txt").read_text()
    assert lost.startswith("rank 0 of 2 lost the other ranks during training on layout:nlp:random (")
    assert lost.endswith("Re-run the same command: training resumes from the last checkpoint")
    dies = tmp_path / "dies" / "gnn" / LAYOUT.slug
    assert torch.load(dies / CHECKPOINT, weights_only=True)["epoch"] == 1
    again = _fit(tiny_world, cache, str(tmp_path / "dies"), **DROPOUT)  # re-run here, on 1 process
    _assert_close(again.weights_, one.weights_)
    _assert_same_history(again.history_, one.history_)


# -- what cannot work is refused in one line ----------------------------------------------------------------------


def test_more_processes_than_graphs_is_refused(tiny_world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]):
    args = ["train", "--data", str(tiny_world), "--collections", LAYOUT.value, "--runs-dir", str(tmp_path / "runs"),
            "--param", f"cache_dir='{tmp_path / 'cache'}'"]
    with pytest.raises(SystemExit) as exc:
        main([*args, "--nproc", "3"])
    assert exc.value.code == 2
    assert capsys.readouterr().err == (
        f"error: {LAYOUT.value}: 2 train graphs for 3 processes, each of which trains a graph of its own at every "
        f"step: launch at most 2, or leave {LAYOUT.value} out (--collections)\n")
    with pytest.raises(SystemExit):
        main([*args, "--nproc", "2", "--param", "graphs_per_step=1"])
    assert capsys.readouterr().err == (
        f"error: graphs_per_step=1 on {LAYOUT.value}: less than the 2 processes, each of which trains a graph of its "
        "own at every step; set it to 2 or more, or leave it out (it is then 2)\n")
    assert not (tmp_path / "runs").exists()  # refused before any process started

    # The model refuses it too (as every rank of a torchrun launch would find it).
    monkeypatch.setattr(distributed, "world_size", lambda: 3)
    with pytest.raises(distributed.DistributedSetupError, match=f"^gnn {LAYOUT.value}: 2 training graphs for 3 "
                                                                 "processes, each of which trains a graph of its own"):
        _fit(tiny_world, str(tmp_path / "cache"), None, **DROPOUT)


def test_an_unavailable_backend_is_refused(tiny_world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--data", str(tiny_world), "--collections", LAYOUT.value, "--nproc", "2", "--backend", "nccl",
              "--param", "device='cpu'", "--runs-dir", str(tmp_path / "runs")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: backend nccl is not available: ") and err.count("\n") == 1
    assert "use --backend gloo, or auto (nccl on GPUs, gloo on the CPU)" in err
    assert distributed.choose_backend("auto", torch.device("cpu")) == "gloo"
    # Inside a torchrun launch, before joining the others.
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(distributed.DistributedSetupError, match=r"\$RANK, \$LOCAL_RANK, \$MASTER_ADDR, \$MASTER_PORT "
                                                                "unset: launch with torchrun"):
        distributed.init(torch.device("cpu"))
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(distributed.DistributedSetupError, match=r"^\$WORLD_SIZE='two': expected an integer >= 1"):
        distributed.launched_world()


def test_nproc_relaunches_the_same_command(tiny_world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``--nproc 2`` hands torchrun the arguments that parse to the same command, less ``--nproc``."""
    launched: list[tuple[int, str, list[str]]] = []
    monkeypatch.setattr(distributed, "launch",
                        lambda n, module, argv, verbose=False: launched.append((n, module, list(argv))))
    given = ["train", "--data", str(tiny_world), "--collections", LAYOUT.value, "tile:xla", "--param", "epochs=2",
             "--param", "gnn.hidden=8", "--no-progress", "--runs-dir", str(tmp_path / "r"), "--valid-configs", "all",
             "--dist-timeout", "60"]
    assert main([*given, "--nproc", "2"]) == 0
    (n, module, argv), = launched
    assert n == 2 and module == "fastslow" and "--nproc" not in argv

    def parsed(words: list[str]) -> dict[str, Any]:
        return {k: v for k, v in vars(build_parser().parse_args(words)).items() if k not in ("nproc", "func")}

    assert parsed(argv) == parsed(given)
    assert parsed(["-v", *argv]) != parsed(argv)  # what is compared does tell commands apart
    assert isinstance(build_parser().parse_args(argv), argparse.Namespace)
