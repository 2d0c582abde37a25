"""``fastslow predict``: rank configs with saved runs, without fitting.

The runs are those ``fastslow train`` and ``fastslow submit`` save (:mod:`fastslow.saved_runs`:
``<runs dir>/<model>/<collection slug>/model.json``). What is ranked is either npz files given by name (a data root's,
or ``fastslow featurize``'s), or one split of a data root. Which models rank them, and how they are combined:

* ``--models NAME ...``: those models; two or more are combined as ``fastslow submit`` combines them (the learned ones
  only when two or more of them are named: :func:`models.registry.ensemble_members`), by the ensemble ``submit``
  fitted (``ensemble.json`` in the submissions folder) when it combines exactly these models and holds weights for
  every collection ranked, else by a plain mean of their rank-normalised scores, which is said;
* without ``--models``: as the submission in the submissions folder was made (its ``submission.json`` names the model
  or the ensemble, whose ``ensemble.json`` lies beside it); without a submission, every model with a saved run for
  each collection ranked, combined as above.

Output: the test split of a data root is written as a Kaggle submission
(:func:`competition.submission_format.submission_text`, validated against the test split as ``submit`` validates its
own before writing it); anything else as one CSV with a row per graph, ``ID,Ranking``: the graph's submission ID
(``<collection>:<file stem>``) and every config index, fastest predicted first, joined by ``;`` (ties by index, as a
submission orders them). Either is written as ``submit`` writes its submission (:func:`fastslow.promotion.promote`),
with a record beside it (``<stem>.json``) that has no valid score: it never replaces a scored submission (it goes
beside it as ``<stem>.new.csv``). ``--out`` never names one of the command's inputs, a file inside the data root or
the runs folder (refused with or without ``--force``), nor a file no record says fastslow wrote (refused unless
``--force``, which keeps it as ``<stem>.prev.csv``); the check is made again, under a lock, when the file is
written.

What cannot be used is refused before anything is predicted, in one line naming the run or the file: a missing run, a
run the loader refuses (another format version, a GNN trained with an option this version no longer has), a run fitted
on other feature columns than this version computes from the files, an npz file the reader refuses.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from competition.collections import Collection, Split, submission_id

if TYPE_CHECKING:
    from competition.dataroot import DataRoot
    from competition.reader import LayoutGraph, TileGraph
    from models.base import RankingModel
    from models.ensemble import Ensemble

RANKING_HEADER = ("ID", "Ranking")
DEFAULT_OUT = "predicted.csv"


class PredictRefused(ValueError):
    """What ``fastslow predict`` cannot use as given (a run, a file, an argument): one line, exit 2."""


@dataclass(frozen=True)
class Target:
    """One graph to rank: its submission ID, file and collection."""

    sid: str
    path: Path
    collection: Collection


@dataclass(frozen=True)
class Combination:
    """Which models rank the graphs and how their scores are combined.

    Attributes:
        members: the models, in the order the ensemble lists them.
        ensemble: the fitted ensemble that combines them (``None``: one model, or a plain mean of rank-normalised
            scores).
        said: how they were chosen, one line.
    """

    members: list[str]
    ensemble: Ensemble | None
    said: str

    def needed(self, collection: Collection) -> list[str]:
        """The members whose scores ``collection``'s graphs need: those the ensemble weighs there (all of them
        without an ensemble)."""
        if self.ensemble is None:
            return list(self.members)
        weights = self.ensemble.collections_[collection.value]["weights"]
        return [m for m, w in zip(self.ensemble.models_, weights, strict=True) if w != 0.0]

    def combine(self, scores: dict[str, dict[str, npt.NDArray[np.float64]]]) -> dict[str, npt.NDArray[np.float64]]:
        """One score vector per graph from the members' ``{model: {ID: scores}}``."""
        from models.ensemble import combine, normalize_scores

        if self.ensemble is not None:
            return self.ensemble.predict(scores)
        if len(self.members) == 1:
            return dict(scores[self.members[0]])
        weights = np.full(len(self.members), 1.0 / len(self.members))
        ids = sorted(scores[self.members[0]])
        return {sid: combine(weights, [normalize_scores(scores[m][sid]) for m in self.members]) for sid in ids}


# --------------------------------------------------------------------------------------------------------------
# What is ranked
# --------------------------------------------------------------------------------------------------------------


def file_targets(paths: Sequence[str | Path], collection: Collection | None = None) -> list[Target]:
    """The graphs of npz files given by name, each file's collection read from its path (``.../tile/xla/...``,
    ``.../layout/nlp/random/...``), else from its members (a tile file), else ``collection``.

    Raises:
        PredictRefused: a file whose collection cannot be told, or that contradicts ``collection``; two files of one
            graph ID.
        DataFileError: a file the reader refuses (read only where its path does not tell its collection).
    """
    from competition.graphfile import infer_collection_split
    from competition.reader import load_graph

    out: list[Target] = []
    seen: dict[str, Path] = {}
    for given in paths:
        path = Path(given)
        inferred = infer_collection_split(path)[0]
        if inferred is not None and collection is not None and inferred != collection:
            raise PredictRefused(f"{path}: its path says {inferred.value}, --collection says {collection.value}")
        found = inferred or collection
        if found is None:
            found = load_graph(path).collection
        if found is None:
            raise PredictRefused(f"{path}: a layout file whose path does not say its collection "
                                 "(.../layout/<xla|nlp>/<default|random>/...): give --collection")
        sid = submission_id(found, path.stem)
        if sid in seen:
            raise PredictRefused(f"{seen[sid]} and {path} are both graph {sid}: a ranking names each graph once")
        seen[sid] = path
        out.append(Target(sid, path, found))
    return out


def split_targets(root: DataRoot, split: Split) -> list[Target]:
    """Every graph of ``split`` in ``root``, collection by collection."""
    from competition.dataset import open_split

    return [Target(submission_id(c, p.stem), p, c) for c in Collection for p in open_split(root, c, split).paths]


# --------------------------------------------------------------------------------------------------------------
# Which runs rank them
# --------------------------------------------------------------------------------------------------------------


def choose_models(models: Sequence[str] | None, collections: Sequence[Collection], runs_dir: Path,
                  submissions: Path) -> Combination:
    """Which models rank ``collections`` and how they are combined (see the module's docstring).

    Raises:
        PredictRefused: an unknown model; no model given and none with saved runs; an ensemble file the loader
            refuses.
    """
    from fastslow.pipeline import ENSEMBLE
    from fastslow.promotion import ENSEMBLE_FILE, RECORD, SUBMISSION, read_record
    from models.base import MODEL_FILE, run_folder
    from models.registry import MODELS, ensemble_members

    if models:
        unknown = [m for m in models if m not in MODELS]
        if unknown:
            raise PredictRefused(f"--models: unknown model {unknown[0]!r}; expected one of {', '.join(sorted(MODELS))}")
        members = ensemble_members(list(dict.fromkeys(models)))
        said = f"models named: {', '.join(members)}"
    else:
        record = read_record(submissions / RECORD)
        if record is not None and record.producer == ENSEMBLE:
            ensemble = _load_ensemble(submissions / ENSEMBLE_FILE)
            members = list(ensemble.models_)
            said = f"as {submissions / SUBMISSION} was made: the ensemble of {', '.join(members)}"
            return _with_ensemble(members, ensemble, submissions / ENSEMBLE_FILE, collections, said)
        if record is not None and record.producer in MODELS:
            return Combination([record.producer], None, f"as {submissions / SUBMISSION} was made: {record.producer}")
        found = [m for m in MODELS if all((run_folder(runs_dir, m, c) / MODEL_FILE).is_file() for c in collections)]
        if not found:
            from competition.errors import suggested_command

            raise PredictRefused(
                f"no model has a saved run in {runs_dir} for {', '.join(c.value for c in collections)}, and no "
                f"{submissions / RECORD} says which made a submission: fit them with "
                f"`{suggested_command('submit', '--runs-dir', runs_dir)}` or "
                f"`{suggested_command('train', '--runs-dir', runs_dir)}`, or give --runs-dir (and --models)")
        members = ensemble_members(found)
        said = f"no {submissions / RECORD}: the models with saved runs in {runs_dir}: {', '.join(members)}"
    if len(members) == 1:
        return Combination(members, None, said)
    path = submissions / ENSEMBLE_FILE
    ensemble = _load_ensemble(path) if path.is_file() else None
    return _with_ensemble(members, ensemble, path, collections, said)


def _load_ensemble(path: Path) -> Ensemble:
    from models.ensemble import Ensemble

    try:
        return Ensemble.load(path)
    except ValueError as exc:
        raise PredictRefused(f"{exc}; give --submissions another folder, or name --models") from None


def _with_ensemble(members: list[str], ensemble: Ensemble | None, path: Path, collections: Sequence[Collection],
                   said: str) -> Combination:
    """``members`` combined by ``ensemble`` (saved in ``path``) when it combines exactly them and has weights for
    every collection, else by a plain mean, saying why."""
    mean = "combined by a plain mean of their rank-normalised scores"
    if ensemble is None:
        return Combination(members, None, f"{said}; no {path}: {mean}")
    if set(ensemble.models_) != set(members):
        return Combination(members, None, f"{said}; {path} combines {', '.join(ensemble.models_)}, not these: {mean}")
    lacking = [c.value for c in collections if c.value not in ensemble.collections_]
    if lacking:
        return Combination(members, None, f"{said}; {path} has no weights for {', '.join(lacking)}: {mean}")
    return Combination(list(ensemble.models_), ensemble, f"{said}; combined by {path} ({ensemble.describe()})")


def load_run(runs_dir: Path, name: str, collection: Collection) -> RankingModel:
    """The model ``name`` saved for ``collection`` in ``runs_dir``.

    Raises:
        PredictRefused: no saved model there; one the loader refuses; one of another model or collection.
    """
    from models.base import MODEL_FILE, load_model, run_folder

    folder = run_folder(runs_dir, name, collection)
    path = folder / MODEL_FILE
    from competition.errors import suggested_command

    train = suggested_command("train", "--model", name, "--collections", collection.value, "--runs-dir", runs_dir)
    again = f"`{train}`"
    if not path.is_file():
        held = ""
        if folder.is_dir():  # the GNN's run files (its module imports torch) only where there is a folder
            from models.gnn.runs import CHECKPOINT

            if (folder / CHECKPOINT).is_file():
                held = " (the folder holds a training run without a saved model: a run saves it when its fit ends)"
        raise PredictRefused(f"no saved run of {name} for {collection.value}: no {path}{held}; fit one with {again} "
                             f"or `{suggested_command('submit', '--runs-dir', runs_dir)}`, or give --runs-dir")
    try:
        model = load_model(path)
    except ValueError as exc:
        raise PredictRefused(f"{name} on {collection.value}: {exc} (this fastslow cannot use it: {again} fits it "
                             "again)") from None
    fitted_on = getattr(model, "collection_", None)
    if model.name != name or (fitted_on is not None and Collection(fitted_on) != collection):
        raise PredictRefused(f"{path}: expected a {name} model fitted on {collection.value}; found a {model.name} "
                             f"model fitted on {fitted_on}")
    return model


# --------------------------------------------------------------------------------------------------------------
# Ranking
# --------------------------------------------------------------------------------------------------------------


def predict_targets(targets: Sequence[Target], combination: Combination, runs_dir: Path, *, progress: bool = True,
                    say: Any = print) -> dict[str, npt.NDArray[np.float64]]:
    """Score every graph of ``targets`` with the saved runs of ``combination`` (lower = predicted faster).

    Every run is loaded, and checked against the first graph of its collection, before any graph is scored.

    Returns:
        ``{ID: scores}``, IDs sorted.

    Raises:
        PredictRefused: a run that cannot be used (see :func:`load_run`, :func:`fastslow.saved_runs.feature_problem`).
        DataFileError: a file the reader refuses.
    """
    from tqdm.auto import tqdm

    from competition.reader import load_graph
    from competition.submission_format import finite_scores
    from fastslow.saved_runs import feature_problem
    from models.base import MODEL_FILE, run_folder

    collections = list(dict.fromkeys(t.collection for t in targets))
    needed = {c: combination.needed(c) for c in collections}
    runs: dict[tuple[str, Collection], RankingModel] = {}
    for c in collections:
        for name in needed[c]:
            runs[name, c] = load_run(runs_dir, name, c)
            say(f"{name} {c.value}: {run_folder(runs_dir, name, c) / MODEL_FILE}")
    firsts: dict[str, TileGraph | LayoutGraph] = {}  # each collection's first graph, read once for both uses
    for c in collections:
        first = next(t for t in targets if t.collection == c)
        graph = firsts[first.sid] = load_graph(first.path, c)
        for name in needed[c]:
            problem = feature_problem(runs[name, c], graph)
            if problem is not None:
                raise PredictRefused(f"{name} on {c.value}: {run_folder(runs_dir, name, c) / MODEL_FILE} {problem}: "
                                     "fit it again on data of this format")
    scores: dict[str, dict[str, npt.NDArray[np.float64]]] = {m: {} for m in combination.members}
    for t in tqdm(targets, disable=not progress, unit="graph", desc="predict", leave=False):
        graph = firsts.pop(t.sid, None) or load_graph(t.path, t.collection)
        for name in needed[t.collection]:
            scores[name][t.sid] = finite_scores(runs[name, t.collection].predict(graph),
                                                f"{name} on {t.collection.value}: "
                                                f"{run_folder(runs_dir, name, t.collection) / MODEL_FILE} gave graph "
                                                f"{t.sid}")
    return combination.combine({m: s for m, s in scores.items() if s})


def ranking_text(scores: dict[str, npt.NDArray[np.float64]]) -> str:
    """The ranking CSV of ``scores``: ``ID,Ranking``, a row per graph sorted by ID, every config index fastest
    first (ties by index) joined by ``;``."""
    from competition.metrics import predicted_order
    from competition.submission_format import finite_scores, format_order

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(RANKING_HEADER)
    writer.writerows((sid, format_order(predicted_order(finite_scores(scores[sid], f"ID {sid}"))))
                     for sid in sorted(scores))
    return buf.getvalue()


# --------------------------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``fastslow predict`` to the command line."""
    from competition.dataroot import DATA_ROOT_HELP

    p = subparsers.add_parser(
        "predict", help="rank configs with saved runs, without fitting: a submission, or rankings of npz files",
        description="Rank every config of npz files, or of one split of a data root, with the models `fastslow "
                    "train` and `fastslow submit` saved (RUNS/<model>/<collection>/model.json), without fitting "
                    "anything. Two models or more are combined as `submit` combines them: by the ensemble it "
                    "fitted when that combines exactly these models, else by a plain mean of their "
                    "rank-normalised scores (said). The test split of a data root is written as a Kaggle submission, "
                    "checked as `submit` checks its own; anything else as a CSV of rows ID,Ranking: the graph's ID "
                    "(<collection>:<file stem>) and every config index, fastest predicted first, joined by ';'. A run "
                    "that is missing, saved by a fastslow whose format this one refuses, or fitted on other feature "
                    "columns than the files give is refused before anything is predicted.",
    )
    p.add_argument("files", nargs="*", metavar="FILE",
                   help="npz files to rank (TpuGraphs format: a data root's, or `fastslow featurize`'s); each file's "
                        "collection is read from its path (.../layout/xla/default/...), a tile file's from its "
                        "members, else from --collection. Without FILEs, a split of the data root is ranked")
    p.add_argument("--data", metavar="DIR", default=None, help=DATA_ROOT_HELP + "; without FILEs only")
    p.add_argument("--split", choices=[s.value for s in Split], default=None,
                   help="the split of the data root to rank; test (the default) is written as a Kaggle submission, "
                        "valid and train as rankings")
    p.add_argument("--collection", metavar="C", default=None,
                   help="the collection of FILEs whose path does not say it (a layout file outside a "
                        ".../layout/<xla|nlp>/<default|random>/ folder)")
    p.add_argument("--models", nargs="+", metavar="NAME", default=None,
                   help="the models whose saved runs rank the graphs, combined when two or more (the learned ones "
                        "only, when two or more are named), as `submit` combines them (default: as the submission in "
                        "--submissions was made; without one, every model with saved runs for these collections)")
    p.add_argument("--runs-dir", metavar="DIR", default=None,
                   help="where the runs are: the --runs-dir of `fastslow train` and `fastslow submit` (default: runs)")
    p.add_argument("--submissions", metavar="DIR", default=None,
                   help="the folder `fastslow submit` wrote (its --out-dir): its submission.json says which model or "
                        "ensemble made the submission, its ensemble.json holds the ensemble's weights "
                        "(default: submissions)")
    p.add_argument("--out", metavar="FILE", default=DEFAULT_OUT,
                   help="the CSV to write (a name ending in .csv): a Kaggle submission for the test split of a data "
                        "root, else the rankings, with its record beside it (<stem>.json), written as `submit` writes "
                        "its submission: never over a scored submission (then beside it as <stem>.new.csv); never "
                        "one of the command's inputs, nor inside the data root or the runs folder "
                        "(default: %(default)s)")
    p.add_argument("--force", action="store_true",
                   help="write --out over a file that no record says fastslow wrote; it is kept as <stem>.prev.csv "
                        "(default: refuse, naming it)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=cmd_predict, outputs={"out": "file"})


def output_problem(out: Path, *, reads: Sequence[tuple[Path, str]], folders: Sequence[tuple[Path, str]],
                   force: bool) -> str | None:
    """Why ``fastslow predict`` may not write ``out``, or ``None``.

    Args:
        out: the ``--out`` file.
        reads: the files the command reads, each with what it is: never written over.
        folders: folders never written into (the data roots, the runs folder), each with what it is.
        force: write over a file no record says fastslow wrote (it is kept aside).
    """
    from fastslow.promotion import settled_foreign_problem

    if os.path.lexists(out):
        for path, what in reads:
            try:
                same = os.path.samefile(out, path)
            except OSError:
                same = False
            if same:
                return f"is {what}, which this command reads: predict never writes over its inputs"
    real = Path(os.path.realpath(out))
    for folder, what in folders:
        if real.is_relative_to(os.path.realpath(folder)):
            return f"is inside {what} {folder}: predict never writes there"
    if out.suffix != ".csv" or not out.stem:
        return "expected a CSV file name ending in .csv (its record is written beside it as <stem>.json)"
    problem = settled_foreign_problem(out)
    if problem is not None and not force:
        return _foreign(out, problem)
    return None


def _foreign(out: Path, problem: str) -> str:
    return (f"{problem}: give another --out, or --force to keep what is there aside ({out.stem}.prev.csv, "
            f"{out.stem}.prev.json) and write there")


def _inputs(targets: Sequence[Target], combination: Combination, runs_dir: Path, submissions: Path,
            root: DataRoot | None) -> tuple[list[tuple[Path, str]], list[tuple[Path, str]]]:
    """What ``--out`` may never be: the files read (the npz files, the saved runs, the submissions folder's record
    and ensemble) and the folders never written into (the data roots, the runs folder)."""
    from competition.dataroot import data_root_of
    from fastslow.promotion import ENSEMBLE_FILE, RECORD
    from models.base import MODEL_FILE, run_folder

    reads = [(t.path, f"the input file of {t.sid}") for t in targets]
    reads += [(run_folder(runs_dir, m, c) / MODEL_FILE, f"the saved run of {m} for {c.value}")
              for c in dict.fromkeys(t.collection for t in targets) for m in combination.needed(c)]
    reads += [(submissions / RECORD, "the record of the submission"), (submissions / ENSEMBLE_FILE, "the ensemble")]
    roots = {root.root: None} if root is not None else {}
    for t in targets:
        found = data_root_of(t.path)
        if found is not None:
            roots.setdefault(found.root, None)
    folders = [(r, "the data root") for r in roots] + [(runs_dir, "the runs folder")]
    return reads, folders


def cmd_predict(args: argparse.Namespace) -> int:
    """``fastslow predict`` (see :func:`add_parser`)."""
    from competition.dataroot import find_data_root
    from competition.submission_checks import validate_submission
    from competition.submission_format import submission_text
    from fastslow.pipeline import DEFAULT_OUT_DIR, DEFAULT_RUNS_DIR, ENSEMBLE, _problems
    from fastslow.promotion import Names, OutputRefused, SubmissionRecord, new_run_id, promote

    started = time.perf_counter()
    runs_dir = Path(args.runs_dir) if args.runs_dir is not None else DEFAULT_RUNS_DIR
    submissions = Path(args.submissions) if args.submissions is not None else DEFAULT_OUT_DIR
    try:
        collection = None if args.collection is None else Collection.parse(args.collection)
    except ValueError as exc:
        raise PredictRefused(f"--collection: {exc}") from None
    root = None
    if args.files:
        given = [f for f, v in (("--data", args.data), ("--split", args.split)) if v is not None]
        if given:
            raise PredictRefused(f"{' and '.join(given)}: rank npz FILEs or a split of a data root, not both")
        targets = file_targets(args.files, collection)
        split = None
    else:
        if collection is not None:
            raise PredictRefused("--collection: it names the collection of FILEs; none were given")
        root = find_data_root(args.data)
        split = Split(args.split or Split.TEST.value)
        targets = split_targets(root, split)
        if not targets:
            raise PredictRefused(f"{root.root}: no graphs in the {split.value} split")
    collections = list(dict.fromkeys(t.collection for t in targets))
    combination = choose_models(args.models, collections, runs_dir, submissions)
    out = Path(args.out)
    reads, folders = _inputs(targets, combination, runs_dir, submissions, root)
    problem = output_problem(out, reads=reads, folders=folders, force=args.force)
    if problem is not None:
        raise PredictRefused(f"--out {out}: {problem}")
    print(combination.said, flush=True)
    scores = predict_targets(targets, combination, runs_dir, progress=not args.no_progress,
                             say=lambda line: print(line, flush=True))
    seconds = time.perf_counter() - started
    submission = root is not None and split == Split.TEST
    ensemble = combination.ensemble.document() if combination.ensemble is not None else None
    producer = (ENSEMBLE if ensemble is not None else combination.members[0] if len(combination.members) == 1
                else "+".join(combination.members))
    record = SubmissionRecord(
        run=new_run_id(), producer=producer, combined=None, scores={}, protocol="",
        data=str(Path(root.root).absolute()) if root is not None else "",
        settings={"predict": {"what": "submission" if submission else "ranking", "models": combination.members,
                              "combined": combination.said, "runs_dir": str(runs_dir.absolute())},
                  **({"ensemble": ensemble} if ensemble is not None else {})})
    text = submission_text(scores) if submission else ranking_text(scores)

    def validate(tmp: Path) -> str | None:
        if submission:
            assert root is not None
            problems = validate_submission(tmp, root, Split.TEST)
            return _problems(problems, Split.TEST, root) if problems else None
        return None if tmp.read_bytes() == text.encode("utf-8") else "its bytes are not the rankings written"

    try:
        done = promote(out.parent, text, record, validate=validate, name=out.name,
                       ensemble=ensemble if Names.of(out).has_ensemble else None,
                       foreign="aside" if args.force else "refuse")
    except OutputRefused as exc:
        raise PredictRefused(f"--out {out}: {_foreign(out, exc.problem)}") from None
    for line in done.said:
        print(line)
    if submission:
        assert root is not None
        print(f"wrote {done.path}: a submission of {len(scores)} test graphs, valid against "
              f"{root.sample_submission or 'the test files'} ({seconds:.1f} s)")
        return 0
    where = f"the {split.value} split of {root.root}" if root is not None and split is not None else "the files given"
    print(f"wrote {done.path}: the ranking of every config of {len(scores)} graphs of {where}, fastest first "
          f"({seconds:.1f} s)")
    return 0
