"""Commands and their bounds (issue 50): worker counts capped by the work and the cores, the GNN memory estimate
over every setting that grows memory, the real-records benchmark's arguments checked before any work, ``report``
refusing what ``leaderboard`` refuses, and every suggested command quoted, complete and valid.

Each refusal is one line with exit 2, no traceback, nothing written and the inputs byte-identical; the runs that
could hang or take the machine's memory run in a process of their own under an address-space limit and a timeout.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from competition.collections import Collection, Split
from competition.dataroot import find_data_root
from competition.errors import EXIT_ERROR, printable, suggested_command
from competition.workers import WORKERS_RULE, usable_cores, worker_count
from fastslow.cli import build_parser
from tests.reliability.helpers import limited, one_line, run, snapshot
from tests.reliability.test_input_limits import GNN_MAXIMA, _params

REPO = Path(__file__).resolve().parents[2]
HOSTILE = ["My Data/bad sub;touch PWNED.csv", "it's \"quoted\" $(touch x) `y` & z", "-starts-with-dash",
           "tab\there", "new\nline \x1b[2J \u202e"]
"""Names a suggested command must carry through a shell unchanged: spaces, ``;``, quotes, ``$``, backticks, a
leading dash, and control and format characters."""


# -- worker counts ---------------------------------------------------------------------------------------------


def test_every_worker_count_is_capped_by_the_work_and_the_cores():
    cores = usable_cores()
    assert worker_count(None, 1000) == cores
    assert worker_count(100_000, 1000) == cores
    assert worker_count(100_000, 1) == 1 and worker_count(None, 0) == 1
    assert worker_count(1, 1000) == 1
    # The cap is said where the counts are asked for.
    parser = build_parser()
    helps = {}
    for command in (["data", "synth"], ["submit"], ["evaluate"]):
        sub = parser
        for name in command:
            sub = next(a for a in sub._actions if a.__class__.__name__ == "_SubParsersAction").choices[name]
        flag = "--workers" if command[0] == "data" else "--jobs"
        helps[" ".join(command)] = next(a.help for a in sub._actions if flag in a.option_strings)
    assert all(WORKERS_RULE in text for text in helps.values()), helps


def test_synth_starts_no_more_workers_than_the_cores_whatever_is_asked(tmp_path: Path, capsys):
    """``--workers 100000`` forked until the machine stopped answering, and 300 started 303 processes for 60
    graphs: the pool now has at most one worker per usable core (and per job). Asked here for 64, a count that
    would not take the machine down if the cap were lost."""
    code, _, err = run(["data", "synth", "--scale", "tiny", "--out", tmp_path / "w0", "--workers", "0"], capsys)
    assert code == EXIT_ERROR and one_line(err) == "error: --workers: expected a whole number of at least 1; found '0'"
    assert not (tmp_path / "w0").exists()

    out = tmp_path / "world"
    limit = 2 * 2**30

    def cap() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    proc = subprocess.Popen([sys.executable, "-m", "fastslow", "data", "synth", "--scale", "tiny", "--limit", "1",
                             "--workers", "64", "--out", str(out), "--no-progress"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=cap)
    parent = psutil.Process(proc.pid)
    most = 0
    deadline = time.monotonic() + 60
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                # The pool's workers; a resource tracker may stand beside them.
                most = max(most, sum(1 for c in parent.children() if "resource_tracker" not in " ".join(c.cmdline())))
            except psutil.Error:
                pass
            time.sleep(0.02)
        assert proc.poll() is not None, "data synth --workers 64 ran past 60 s"
    finally:
        if proc.poll() is None:
            proc.kill()
        _, stderr = proc.communicate()
    assert proc.returncode == 0, stderr
    assert 1 <= most <= usable_cores(), most
    assert (out / "sample_submission.csv").is_file()


# -- the GNN memory estimate -----------------------------------------------------------------------------------


def test_every_gnn_maximum_of_the_default_model_is_refused_on_a_24_gib_machine(tiny_world: Path, tmp_path: Path):
    """Every maximum with ``gnn`` (the default model) took 2.6 GB and ran on past 120 s: 100,000 epochs kept for
    weight averaging, 16 networks, and a model written as JSON at about 160 bytes a weight were not counted."""
    runs, before = tmp_path / "runs", snapshot(tiny_world)
    started = time.monotonic()
    done = limited(["train", "--data", tiny_world, "--model", "gnn", "--runs-dir", runs, "--no-progress",
                    "--collections", "tile:xla", *_params(GNN_MAXIMA, "gnn")], memory=24, timeout=120, cwd=tmp_path)
    assert done.returncode == EXIT_ERROR, done.stderr
    line = one_line(done.stderr)
    assert line.startswith("error: gnn tile:xla: these settings need about "), line
    assert "(100,000 epochs' copies for weight averaging (train.swa_epochs), 15 other networks' copies " \
           "(run.seeds), 53,895,425 weights" in line
    assert "this process can still use: lower train.swa_epochs, run.seeds, network.hidden, network.layers" in line
    assert time.monotonic() - started < 60
    assert not list(runs.rglob("model.json")) and snapshot(tiny_world) == before


def test_a_wide_network_under_3_gb_is_refused_before_fitting(tiny_world: Path, tmp_path: Path):
    """``network.hidden=1024`` under a 3 GB limit failed after its fit, writing the model, with a generic
    out-of-memory line: the model written as JSON is counted now."""
    runs, before = tmp_path / "runs", snapshot(tiny_world)
    done = limited(["train", "--data", tiny_world, "--model", "gnn", "--runs-dir", runs, "--no-progress",
                    "--collections", "tile:xla", "--param", "network.hidden=1024"], memory=3, timeout=60,
                   cwd=tmp_path)
    assert done.returncode == EXIT_ERROR, done.stderr
    line = one_line(done.stderr)
    assert line.startswith("error: gnn tile:xla: these settings need about "), line
    assert "(the fitted model written as JSON: 12,686,225 weights (network.hidden, network.layers) x 2 networks " \
           "(run.seeds) at about 164 bytes a weight)" in line
    assert line.endswith("this process can still use: lower network.hidden, network.layers or run.seeds"), line
    assert not list(runs.rglob("model.json")) and snapshot(tiny_world) == before


@pytest.mark.parametrize(("kind", "setting", "value", "base"), [
    ("layout", "hidden", 256, {}), ("layout", "layers", 12, {}), ("tile", "opcode_dim", 256, {}),
    ("layout", "configs_per_graph", 1000, {}), ("layout", "predict_batch", 10_000, {"attention": True}),
    ("layout", "seeds", 16, {}), ("layout", "swa_epochs", 50, {"epochs": 100}), ("layout", "refit", True, {}),
    ("layout", "attention", True, {}),
    # Prediction's parts count where prediction is the largest phase: a training step of two configs.
    ("layout", "tta", 64, {"attention": True, "predict_batch": 16, "configs_per_graph": 2}),
    ("layout", "reference_configs", 4000, {"attention": True, "predict_batch": 16, "tta": 8,
                                           "configs_per_graph": 2}),
    # Graph Segment Training's parts count where training is the largest phase: a prediction batch of one config.
    ("layout", "segment_size", 2_000, {"segment_size": 100, "predict_batch": 1}),
    ("layout", "backprop_segments", 20, {"segment_size": 100, "predict_batch": 1}),
    ("layout", "graphs_per_step", 1_000, {"segment_size": 100, "predict_batch": 1}),
])
def test_every_setting_that_grows_memory_grows_the_estimate(kind: str, setting: str, value: object,
                                                            base: dict[str, object]):
    from models.gnn import footprint
    from models.gnn.config import default_config

    graph = SimpleNamespace(key="g", num_configs=5000, num_nodes=4000)
    cfg = default_config(kind).with_(**base)
    before, _ = footprint.fit_bytes(cfg, [graph], [graph])
    after, _ = footprint.fit_bytes(cfg.with_(**{setting: value}), [graph], [graph])
    assert after > before, (setting, before, after)


def test_the_graph_sizes_grow_the_estimate():
    """``features.hops='all'`` and ``features.train_configs='all'`` count through the graphs they give."""
    from models.gnn import footprint
    from models.gnn.config import default_config

    cfg = default_config("layout")
    pruned = SimpleNamespace(key="g", num_configs=1000, num_nodes=500)
    whole = SimpleNamespace(key="g", num_configs=1000, num_nodes=40_000)
    assert footprint.fit_bytes(cfg, [whole])[0] > 10 * footprint.fit_bytes(cfg, [pruned])[0]


def test_the_maxima_together_are_refused_in_process_at_24_gib(monkeypatch: pytest.MonkeyPatch):
    """The same refusal without a subprocess: the settings of every maximum, a graph of the tiny world's size."""
    import ast

    from models.gnn import footprint
    from models.gnn.config import default_config

    values = {}
    for item in GNN_MAXIMA:
        key, _, text = item.partition("=")
        values[key] = ast.literal_eval(text)
    cfg = default_config("tile").with_(**{k.rsplit(".", 1)[1]: v for k, v in values.items()})
    graph = SimpleNamespace(key="g", num_configs=50, num_nodes=10)
    monkeypatch.setattr(footprint, "memory_available", lambda: 24 * 2**30)
    with pytest.raises(ValueError, match=r"^gnn: these settings need about [\d,.]+ GB of memory \(100,000 epochs' "
                                         r"copies for weight averaging \(train\.swa_epochs\)"):
        footprint.check_fit_memory(cfg, [graph], [graph], name="gnn")


# -- the real-records benchmark --------------------------------------------------------------------------------


def _bench(argv: list[object], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    from benchmarks import real_records

    code = real_records.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, err


@pytest.mark.parametrize("case", ["work-file", "work-under-file", "work-read-only", "json-folder", "data-missing",
                                  "seed-negative", "seed-huge", "seed-twice", "data-twice", "seeds-with-data",
                                  "min-configs", "own-configs", "unknown-model", "unknown-option"])
def test_the_benchmark_refuses_its_arguments_before_any_work(case: str, tiny_world: Path, tmp_path: Path,
                                                             read_only: Path, capsys: pytest.CaptureFixture[str]):
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    folder = tmp_path / "out.json"
    folder.mkdir()
    work = tmp_path / "work"
    huge = "1" + "0" * 400
    argv, expected = {
        "work-file": (["--work-dir", a_file], f"--work-dir {a_file}: expected a folder; found a file"),
        "work-under-file": (["--work-dir", a_file / "w"], f"--work-dir {a_file / 'w'}: {a_file} is a file, not a "
                                                           "folder"),
        "work-read-only": (["--work-dir", read_only / "w"], f"--work-dir {read_only / 'w'}: cannot write into "
                                                            f"{read_only} (permission denied)"),
        "json-folder": (["--json", folder], f"--json {folder}: expected a file; found a folder"),
        "data-missing": (["--data", tmp_path / "nope"], f"--data {tmp_path / 'nope'}: data root {tmp_path / 'nope'}: "
                                                        "expected a folder holding npz_all/npz/"),
        "seed-negative": (["--world-seeds", "-5"], "--world-seeds: expected a whole number from 0 to 2,147,483,647; "
                                                   "found '-5'"),
        "seed-huge": (["--world-seeds", huge], "--world-seeds: expected a whole number from 0 to 2,147,483,647; "
                                               "found '1000"),
        "seed-twice": (["--world-seeds", "0", "0"], "--world-seeds: 0 given more than once; each seed is one world, "
                                                    "fitted and counted in the mean once"),
        "data-twice": (["--data", tiny_world, tiny_world], f"--data {tiny_world}: {tiny_world} given more than "
                                                           "once"),
        "seeds-with-data": (["--data", tiny_world, "--world-seeds", "1"], "--world-seeds: not with --data"),
        "min-configs": (["--min-configs", "0"], "--min-configs: expected a whole number of at least 1; found '0'"),
        "own-configs": (["--own-configs", "-3"], "--own-configs: expected a whole number of at least 1; found '-3'"),
        "unknown-model": (["--models", "nope\x1b[2J"], "python -m benchmarks.real_records: --models: unknown "
                                                       "model(s) nope\\x1b[2J; registered: "),
        "unknown-option": (["--bogus"], "python -m benchmarks.real_records: unrecognized arguments: --bogus"),
    }[case]
    if "--work-dir" not in argv:
        argv = [*argv, "--work-dir", work]
    before = sorted(p.name for p in tmp_path.iterdir())
    code, err = _bench(argv, capsys)
    assert code == EXIT_ERROR
    assert one_line(err).startswith(f"error: {expected}"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no work folder, no world, no records
    assert a_file.read_text() == "mine" and list(read_only.iterdir()) == [] and list(folder.iterdir()) == []


def test_two_benchmark_runs_never_share_a_work_folder(tiny_world: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]):
    """The second run sharing a work folder ended in a FolderBusy traceback: it is refused in one line, naming the
    run that holds it, and the first run's files are untouched."""
    work = tmp_path / "work"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from competition.runlock import hold_run_folder\n"
                               "with hold_run_folder(sys.argv[1]):\n    print('held', flush=True); time.sleep(60)",
         str(work)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        (work / "theirs.txt").write_text("the first run's")
        before = snapshot(work)
        code, err = _bench(["--data", tiny_world, "--models", "gbdt", "--work-dir", work], capsys)
        assert code == EXIT_ERROR
        line = one_line(err)
        assert line.startswith(f"error: --work-dir {work}: in use by another run (process {holder.pid} "), line
        assert line.endswith("; wait for it to end, or choose another --work-dir"), line
        assert snapshot(work) == before
    finally:
        holder.kill()
        holder.wait()


# -- report and leaderboard ------------------------------------------------------------------------------------


def test_report_refuses_a_missing_submission_and_a_garbage_leaderboard_as_leaderboard_does(
        tiny_world: Path, perfect: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """Both exited 0 with the problem only in the page (a NUL byte of the file copied into it)."""
    out, runs = tmp_path / "report", tmp_path / "none"
    garbage = tmp_path / "lb.csv"
    garbage.write_bytes(b"garb\x00age,\x1b[31mx\nmore\n")
    before = snapshot(tiny_world)

    code, _, err = run(["leaderboard", "--leaderboard", garbage, "--plot", tmp_path / "lb.png"], capsys)
    assert code == EXIT_ERROR
    refused = one_line(err)
    assert refused.startswith(f"error: {garbage}: expected leaderboard columns ") and "found garb\\x00age, " \
           "\\x1b[31mx (missing " in refused
    assert "\x00" not in err and "\x1b" not in err

    code, _, err = run(["report", "--data", tiny_world, "--leaderboard", garbage, "--out", out, "--runs", runs,
                        "--no-progress"], capsys)
    assert code == EXIT_ERROR and one_line(err) == refused

    missing = tmp_path / "no such.csv"
    code, _, err = run(["report", "--data", tiny_world, "--submission", missing, "--out", out, "--runs", runs,
                        "--no-progress"], capsys)
    assert code == EXIT_ERROR and one_line(err) == f"error: --submission {missing}: no such file"

    bad = tmp_path / "bad\x1bsub.csv"
    bad.write_text("".join(perfect.read_text().splitlines(keepends=True)[:-1]))  # one test graph left out
    code, _, err = run(["report", "--data", tiny_world, "--split", "test", "--submission", bad, "--out", out,
                        "--runs", runs, "--no-progress"], capsys)
    assert code == EXIT_ERROR
    line = one_line(err)
    assert line.startswith(f"error: --submission {printable(bad)}: cannot be scored on the test split of "
                           f"{tiny_world}: 1 problem(s), the first: "), line
    assert line.endswith(f"(`fastslow validate $'{printable(bad)}' --data {tiny_world} --split test` lists them "
                         "all)"), line
    assert not out.exists() and snapshot(tiny_world) == before and garbage.read_bytes().startswith(b"garb\x00")


# -- suggested commands ----------------------------------------------------------------------------------------


def _check_suggestion(argv: tuple[object, ...], command: str) -> None:
    """``command`` is one line, parses with the real parser, and gives back ``argv`` when a shell reads it."""
    assert "\n" not in command and all(c.isprintable() for c in command), command
    words = ["fastslow", *(f"./{a}" if isinstance(a, os.PathLike) and str(a).startswith("-") else str(a)
                           for a in argv)]
    if all(c.isprintable() for w in words for c in w):
        assert shlex.split(command) == words
        build_parser().parse_args(shlex.split(command)[1:])
    bash = shutil.which("bash")
    if bash is not None:  # ANSI-C quoting ($'...') included: what a user's shell reads
        script = "fastslow() { printf '%s\\0' \"$@\"; }; " + command
        read = subprocess.run([bash, "-c", script], capture_output=True, check=True).stdout
        assert read.split(b"\0")[:-1] == [os.fsencode(w) for w in words[1:]], command


@pytest.mark.parametrize("name", HOSTILE)
def test_a_suggested_command_round_trips_through_a_shell(name: str):
    argv = ("validate", Path(name), "--data", Path(f"/tmp/{name}"), "--split", "valid", "--valid-configs", "all")
    _check_suggestion(argv, suggested_command(*argv))


def test_every_suggested_command_is_quoted_complete_and_valid(tiny_world: Path, perfect: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]):
    """Each path that prints a ``fastslow ...`` command, with a data root and files whose names a shell would split
    or run: every command printed is recorded from the one builder, and must parse with the real parser and give
    back its words. ``score`` printed ``fastslow validate My Data/bad sub;touch PWNED.csv`` (pasting it ran the
    ``touch``) without ``--data`` and ``--split``; submit's check suggested ``fastslow data validate ROOT``, which
    ``data validate`` refuses."""
    import competition.errors as errors
    from benchmarks import real_records
    from competition.protocol import EvalIndices, ValidProtocol
    from fastslow.commands.scoring import validate_command

    said: list[tuple[tuple[object, ...], str]] = []
    real = errors.suggested_command

    def recorded(*argv: object) -> str:
        command = real(*argv)
        said.append((argv, command))
        return command

    monkeypatch.setattr(errors, "suggested_command", recorded)
    monkeypatch.chdir(tmp_path)
    odd = tmp_path / "My Data;it's"
    world = Path(shutil.copytree(tiny_world, odd / "world"))
    board = odd / "lb $(x).csv"
    lines = perfect.read_text().splitlines(keepends=True)
    bad = odd / "bad sub;touch PWNED.csv"
    bad.write_text("".join(lines[:-1]))
    tile_only = odd / "tile only.csv"
    tile_only.write_text("".join(line for line in lines if not line.startswith("layout:")))
    expected: dict[str, str] = {}

    # score: a file validate rejects, then a partial one.
    code, _, err = run(["score", bad, "--data", world, "--split", "test", "--leaderboard", board], capsys)
    assert code == 1 and f"not scored: `{real('validate', bad, '--data', world, '--split', 'test')}` lists" in err
    code, out, _ = run(["score", tile_only, "--data", world, "--split", "test", "--leaderboard", board,
                        "--partial"], capsys)
    assert code == 0 and f"(see `{real('validate', tile_only, '--data', world, '--split', 'test')}`)" in out
    expected["score"] = "validate"
    # leaderboard: none yet.
    code, out, _ = run(["leaderboard", "--leaderboard", odd / "empty.csv"], capsys)
    assert code == 0 and real("score", "FILE", "--leaderboard", odd / "empty.csv") in out
    # report: no leaderboard (the page), and a submission it cannot score.
    code, _, _ = run(["report", "--data", world, "--leaderboard", odd / "none.csv", "--out", odd / "report",
                      "--runs", odd / "runs", "--graphs", "0", "--no-progress"], capsys)
    assert code == 0
    code, _, err = run(["report", "--data", world, "--split", "test", "--submission", bad, "--out",
                        odd / "report", "--runs", odd / "runs", "--no-progress"], capsys)
    assert code == EXIT_ERROR and real("validate", bad, "--data", world, "--split", "test") in err
    # submit: a data root with a missing split, refused before any fitting.
    shutil.rmtree(find_data_root(world).collection_dir(Collection.TILE_XLA, Split.TEST))
    code, _, err = run(["submit", "--data", world, "--out-dir", odd / "subs", "--models", "random",
                        "--no-progress"], capsys)
    assert code == EXIT_ERROR and f"(`{real('data', 'validate', '--data', world)}` lists them all)" in err
    # predict: no saved run.
    tile_file = next((tiny_world / "npz_all" / "npz" / "tile" / "xla" / "test").glob("*.npz"))
    runs = odd / "runs `x`"
    for models in (["gbdt"], []):
        code, _, err = run(["predict", tile_file, "--runs-dir", runs, "--out", odd / "p.csv", "--no-progress",
                            *(["--models", *models] if models else ["--submissions", odd])], capsys)
        assert code == EXIT_ERROR and real("submit", "--runs-dir", runs) in err, err
    # The valid split's protocol goes with the validate command.
    indices = EvalIndices.load("official")
    for protocol in (ValidProtocol.parse("all"), ValidProtocol(500, indices=indices, unmatched_ok=True)):
        validate_command(bad, world, "valid", protocol)
    # The benchmark's world: a failed synth names the command it ran.
    with monkeypatch.context() as patched:
        patched.setattr(subprocess, "run", lambda cmd: subprocess.CompletedProcess(cmd, 1))
        with pytest.raises(real_records.BenchmarkRefused, match="failed with exit 1"):
            real_records.make_worlds("tiny", [3], odd / "worlds")

    assert {argv[0] for argv, _ in said} >= {"validate", "score", "submit", "train", "data"}
    assert any("--valid-indices" in map(str, argv) and "--force" in argv for argv, _ in said)
    for argv, command in said:
        _check_suggestion(argv, command)
    assert not (tmp_path / "PWNED.csv").exists() and not (tmp_path / "x").exists()
