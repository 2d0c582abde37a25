"""``fastslow train``, ``evaluate`` and ``submit``: models fitted, scored, and made into a submission."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import typing
from dataclasses import replace

from competition.collections import Split
from competition.errors import EXIT_ERROR, UsageError
from competition.limits import MAX_DIST_TIMEOUT
from fastslow.commands.common import (
    COLLECTIONS_HELP,
    add_data_arg,
    add_jobs_arg,
    collections_of,
    protocol_of,
    seconds_arg,
    seed_arg,
    verbose_everywhere,
)
from fastslow.commands.params import add_param_args, model_params

if typing.TYPE_CHECKING:
    from competition.dataroot import DataRoot
    from models.registry import ModelParams

log = logging.getLogger("fastslow")


def add_evaluate_parser(sub: argparse._SubParsersAction) -> None:
    """``fastslow evaluate``."""
    from competition.protocol import add_valid_configs_arg

    evaluate = sub.add_parser(
        "evaluate", help="compare models side by side per collection, with the oracle ceiling",
        description="Fit each model on the train split and print, per collection and combined, the score of every "
                    "model and (synthetic data) the oracle ceiling, on the valid split and on the synthetic test "
                    "split. Writes each model's predictions as submissions/<split>-<model>.csv. With --world-seeds, "
                    "the same on one synthetic world per seed, then the mean, the spread (standard deviation over "
                    "the worlds) and the percentage of the oracle per collection.",
    )
    add_data_arg(evaluate)
    evaluate.add_argument("--world-seeds", nargs="+", type=seed_arg("--world-seeds"), metavar="SEED", default=None,
                          help="evaluate on one synthetic world per seed (generated once under "
                               "data/synthetic-<scale>[-seed<k>], reused after) and summarise over them, instead of "
                               "one data root; not with --data")
    evaluate.add_argument("--scale", default="bench", choices=["tiny", "demo", "bench", "full"],
                          help="scale of the --world-seeds worlds (default: %(default)s, the quality table's)")
    evaluate.add_argument("--models", nargs="+", metavar="NAME", default=None,
                          help="models to compare (default: random default-first gbdt gnn-attn)")
    evaluate.add_argument("--out-dir", default="submissions", metavar="DIR",
                          help="where the per-model prediction files go (default: %(default)s)")
    add_param_args(evaluate)
    add_jobs_arg(evaluate)
    evaluate.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_valid_configs_arg(evaluate)
    evaluate.set_defaults(func=_cmd_evaluate, outputs={"out_dir": "folder"})


def add_submit_parser(sub: argparse._SubParsersAction) -> None:
    """``fastslow submit``."""
    from competition.protocol import add_valid_configs_arg

    submit = sub.add_parser(
        "submit", help="run the whole pipeline: data, models, submission, validation, offline score",
        description="What `make submit` runs: use real data if found (else generate the synthetic demo world), fit "
                    "every model on train, pick the best on valid, write submissions/submission.csv, validate it "
                    "and print the offline score tables. submission.csv (with submission.json: its valid scores and "
                    "settings) is only replaced by a submission at least as good on the same valid protocol and "
                    "data; a worse one is written as submission.new.csv, and one whose score is unknown is kept as "
                    "submission.prev.csv.",
    )
    add_data_arg(submit)
    submit.add_argument("--models", nargs="+", metavar="NAME", default=None,
                        help="models to try, ensembled when 2 or more (default: random default-first gbdt gnn-attn)")
    submit.add_argument("--out-dir", default="submissions", metavar="DIR",
                        help="where submission files and the leaderboard go (default: %(default)s)")
    submit.add_argument("--synth-dir", default="data/synthetic-demo", metavar="DIR",
                        help="where the synthetic demo world is generated when no real data is found "
                             "(default: %(default)s)")
    submit.add_argument("--synth-scale", choices=["tiny", "demo", "bench", "full"], default="demo",
                        help="scale of that synthetic world (default: %(default)s)")
    submit.add_argument("--runs-dir", default=None, metavar="DIR",
                        help="where each model's fit is saved per collection (<model>/<collection>/model.json, the "
                             "GNN's run folders too), and a finished run with the same settings and data reused "
                             "instead of fitted again; `fastslow predict` ranks with them (default: runs)")
    submit.add_argument("--time-budget", metavar="DURATION", default=None,
                        help="wall-clock budget for the whole run, e.g. 8h, 90m, 1h30m or seconds: models run "
                             "cheapest first, each gets a share by its cost, stops at it keeping its best weights, "
                             "and the run's best so far is written after every model (default: no limit)")
    add_param_args(submit)
    add_jobs_arg(submit)
    submit.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_valid_configs_arg(submit)
    submit.set_defaults(func=_cmd_submit, outputs={"out_dir": "folder", "runs_dir": "folder"})


def add_train_parser(sub: argparse._SubParsersAction) -> None:
    from competition.protocol import add_valid_configs_arg

    trainp = sub.add_parser(
        "train", help="fit a model per collection and save it (GNN runs keep checkpoints and learning curves)",
        description="Fit a registered model on the train split of each collection (early stopping on valid where "
                    "the model supports it), save it as runs/<model>/<collection>/model.json, and print the "
                    "valid score per collection. A GNN run keeps checkpoint.pt, curves.csv and curves.png in the "
                    "same folder; re-running with the same settings resumes an interrupted run. The GNN models also "
                    "train on several processes (--nproc N, or `torchrun --nproc-per-node N -m fastslow train "
                    "...`, on one machine or several: docs/distributed.md).",
    )
    add_data_arg(trainp)
    trainp.add_argument("--model", default="gnn", metavar="NAME",
                        help="registered model name: gnn, gnn-attn, gbdt, default-first, random "
                             "(default: %(default)s)")
    trainp.add_argument("--collections", nargs="+", metavar="C", help=COLLECTIONS_HELP)
    trainp.add_argument("--runs-dir", default="runs", metavar="DIR",
                        help="where runs and saved models go (default: %(default)s)")
    trainp.add_argument("--init-from", default=None, metavar="RUN",
                        help="GNN models: start each network from the weights of a saved GNN run and fine-tune it "
                             "on this data with this run's settings (e.g. a lower --param train.lr): its folder "
                             "(runs/gnn/layout-xla-default), its model.json, or a folder of runs (runs/gnn) holding "
                             "each collection's; its column selection and normalisation are reused, and its network "
                             "settings must be this run's. Sets train.init_from (default: from scratch)")
    add_param_args(trainp)
    trainp.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_valid_configs_arg(trainp)
    trainp.add_argument("--nproc", type=int, default=1, metavar="N",
                        help="GNN models: train on N processes of this machine, through `torchrun --nproc-per-node N "
                             "-m fastslow train` with the other arguments as given. Each process trains its "
                             "share of every optimiser step's graphs (graphs_per_step, at least N) on a GPU of its "
                             "own, or on the CPU's cores split between them, and scores its share of the valid "
                             "graphs; the first writes the run folder and prints (default: %(default)s)")
    trainp.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto",
                        help="how several processes exchange gradients and scores (torch.distributed): auto is "
                             "nccl when they train on CUDA, gloo on the CPU (default: %(default)s)")
    trainp.add_argument("--dist-timeout", type=seconds_arg("--dist-timeout", MAX_DIST_TIMEOUT), default=1800.0,
                        metavar="SECONDS",
                        help="on several processes: how long each waits for the others at an exchange before "
                             "stopping with an error (a process that hangs; one that dies is noticed at once); "
                             f"above 0 and at most {MAX_DIST_TIMEOUT:,} (a week) (default: %(default)s)")
    trainp.set_defaults(func=_cmd_train, outputs={"runs_dir": "folder"})


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from fastslow.pipeline import evaluate_models
    from models.registry import default_models

    params = model_params(args, args.models or default_models(), **_fitted(args))
    if args.world_seeds is not None:
        from fastslow.worlds import check_seeds, evaluate_worlds

        if args.data is not None:
            raise UsageError("--world-seeds generates its own worlds: give it or --data, not both")
        try:
            check_seeds(args.world_seeds)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        evaluate_worlds(args.world_seeds, scale=args.scale, models=args.models, out_dir=args.out_dir,
                        progress=not args.no_progress, protocol=protocol_of(args), params=params, jobs=args.jobs)
        return 0
    evaluate_models(args.data, models=args.models, out_dir=args.out_dir, progress=not args.no_progress,
                    protocol=protocol_of(args), params=params, jobs=args.jobs)
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from competition.dataroot import find_data_root, validate_root
    from competition.dataset import Dataset
    from fastslow.fitting import train_collections
    from fastslow.pipeline import check_writable, model_folders
    from models.gnn.launch_env import launched_world
    from models.registry import make_model

    gnn = args.model.startswith("gnn")
    if gnn:  # torch and PyTorch Geometric: the other models train without them
        from models.gnn import distributed
        from models.gnn.model import GNNModel
        from models.gnn.steps import resolve_device

    launched = launched_world()  # above 1 in a process that torchrun started
    world = launched if launched > 1 else args.nproc

    def refuse(message: str) -> SystemExit:
        # Every process of a launch finds the same problem: the first says it, the others stop without a word.
        return UsageError(message) if os.environ.get("RANK", "0") == "0" else SystemExit(EXIT_ERROR)

    def relaunched() -> list[str]:
        """The arguments that parse to ``args``, less --nproc: what each process that torchrun starts runs."""
        parser = argparse.ArgumentParser(prog="fastslow")
        add_train_parser(parser.add_subparsers(dest="command"))
        verbose_everywhere(parser)
        subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        out = ["train"]
        for action in subs.choices["train"]._actions:
            value = getattr(args, action.dest, None)
            if (not action.option_strings or action.dest in ("help", "nproc") or value is None
                    or value == action.default):
                continue
            flag = action.option_strings[-1]
            if action.nargs == 0:
                out += [flag] if value is True else []
            elif isinstance(value, list):
                out += [flag, *map(str, value)] if action.nargs in ("+", "*") else [x for v in value for x in (flag, v)]
            else:
                out += [flag, str(value)]
        return out

    if args.nproc < 1:
        raise refuse(f"--nproc {args.nproc}: expected 1 or more processes")
    if args.nproc > 1 and launched > 1:
        raise refuse(f"--nproc {args.nproc}: this process is already one of {launched} that torchrun started; leave "
                     "out --nproc")
    root = find_data_root(args.data)
    protocol = protocol_of(args)
    params = model_params(args, [args.model], **_fitted(args, root))[args.model]
    if gnn and "runs_dir" not in params.common:
        params = replace(params, common={**params.common, "runs_dir": args.runs_dir})
    if args.init_from is not None:
        if not gnn:
            raise refuse(f"--init-from: only the GNN models (gnn, gnn-attn) start from saved weights; --model "
                         f"{args.model} does not")
        params = replace(params, common={**params.common, "train.init_from": args.init_from})
    asked = collections_of(args.collections)
    # A collection whose train split is missing would otherwise be passed over without a word (exit 0).
    missing = validate_root(root, asked, [Split.TRAIN])
    if missing:
        raise missing[0]
    dataset = Dataset.open(root, asked, eval_split=Split.VALID, protocol=protocol)
    collections = dataset.collections
    absent = [c.value for c in asked if c not in collections]
    if args.collections and absent:  # named on the command line, but the data has none of them
        raise UsageError(f"--collections: {root.root} holds no graphs of {', '.join(absent)}")
    check_writable(model_folders([args.model], {args.model: params}, collections))
    for c in collections:  # a warm start's source refused before any collection is fitted (each fit checks again)
        model = make_model(args.model, **params.for_collection(c))
        if not gnn or not isinstance(model, GNNModel):
            break
        try:
            model.warm_start(c)
        except ValueError as exc:
            raise refuse(f"{args.model} {c.value}: {exc}") from None
    device = resolve_device(params.common.get("device", "auto")) if gnn else None
    if world > 1:  # what would stop every process, found before any starts
        if not gnn:
            raise refuse(f"--model {args.model} trains in one process; only the GNN models (gnn, gnn-attn) train "
                         "on several")
        for c in collections:
            graphs = len(dataset[c].train)
            if graphs < world:
                raise refuse(f"{c.value}: {graphs} train graphs for {world} processes, each of which trains a graph "
                             f"of its own at every step: launch at most {graphs}, or leave {c.value} out "
                             "(--collections)")
            per_step = params.for_collection(c).get("train.graphs_per_step")
            if isinstance(per_step, int) and per_step < world:
                raise refuse(f"graphs_per_step={per_step} on {c.value}: less than the {world} processes, each of "
                             f"which trains a graph of its own at every step; set it to {world} or more, or leave "
                             f"it out (it is then {world})")
        try:
            distributed.choose_backend(args.backend, device)
        except distributed.DistributedSetupError as exc:
            raise refuse(str(exc)) from None
    if args.nproc > 1:  # only a GNN gets here (the others are refused above)
        try:
            distributed.launch(args.nproc, "fastslow", relaunched(), verbose=args.verbose)
        except distributed.LaunchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return exc.exit_code
        return 0

    def fit_and_print(params: ModelParams, *, main: bool = True, **launch: typing.Any) -> None:
        say = print if main else (lambda *_, **__: None)
        say(f"{'collection':20s} {'valid':>8s} {'graphs':>7s} {'seconds':>8s}  saved", flush=True)
        for row in train_collections(args.model, dataset, params=params, runs_dir=args.runs_dir,
                                     progress=not args.no_progress, say=lambda line: say(line, flush=True),
                                     main=main, **launch):
            valid = f"{row.valid:8.4f}" if row.valid is not None else f"{'-':>8s}"
            print(f"{row.collection.value:20s} {valid} {row.graphs:7d} {row.seconds:8.1f}  {row.saved}", flush=True)
        say(f"valid scored on {protocol.describe()}")

    if not gnn:  # one process, no launch: every valid graph predicted here
        fit_and_print(params)
        return 0
    with distributed.process_group(device, backend=args.backend, timeout=args.dist_timeout) as device:
        if distributed.active() and device.type == "cuda":  # this process's own GPU
            params = replace(params, common={**params.common, "device": str(device)})
        # Each process predicts its share of the valid graphs; the first gathers them.
        fit_and_print(params, main=distributed.is_main(),
                      watch=lambda c: distributed.collectives(f"{args.model} on {c.value}"),
                      shard=distributed.shard, gather=distributed.gather_to_main)
    return 0


def _cmd_submit(args: argparse.Namespace) -> int:
    from competition.budget import parse_duration
    from fastslow.pipeline import DEFAULT_RUNS_DIR, ENSEMBLE, run_pipeline
    from models.registry import default_models

    budget = None if args.time_budget is None else parse_duration(args.time_budget)
    params = model_params(args, args.models or default_models(), ensemble=True, **_fitted(args))
    ensemble_params = dict(params.pop(ENSEMBLE).common)
    run_pipeline(args.data, models=args.models, out_dir=args.out_dir, synth_dir=args.synth_dir,
                 synth_scale=args.synth_scale, progress=not args.no_progress, protocol=protocol_of(args),
                 time_budget=budget, params=params, ensemble_params=ensemble_params or None, jobs=args.jobs,
                 runs_dir=args.runs_dir or DEFAULT_RUNS_DIR)
    return 0


def _fitted(args: argparse.Namespace, root: DataRoot | None = None) -> dict[str, typing.Any]:
    """What :func:`~fastslow.commands.params.model_params` needs to refuse a setting scoped to a collection the run
    does not fit: ``collections`` (those asked with ``--collections``, where the command has it, that the data
    holds train graphs of) and ``fits`` (what decided them). The data is only listed: a root that cannot be found
    or listed is left to the command, which says why; a synthetic world the command generates holds all five."""
    from competition.collections import Collection
    from competition.dataroot import collections_with_graphs, find_data_root
    from competition.errors import DataFileError, DataRootNotFound

    asked = collections_of(getattr(args, "collections", None))
    if getattr(args, "world_seeds", None) is not None:
        return {"collections": asked, "fits": "the synthetic worlds hold all five"}
    try:
        root = root if root is not None else find_data_root(args.data)
        held = set(collections_with_graphs(root, Split.TRAIN))
    except (DataRootNotFound, DataFileError, OSError):
        if args.data is None and args.command == "submit":  # the synthetic demo world it generates holds all five
            return {"collections": list(Collection), "fits": "the synthetic demo world holds all five"}
        return {"collections": asked, "fits": "--collections" if getattr(args, "collections", None) else ""}
    fitted = [c for c in asked if c in held]
    named = "--collections and " if getattr(args, "collections", None) else ""
    return {"collections": fitted, "fits": f"{named}the train graphs of {root.root}"}
