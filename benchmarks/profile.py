"""Where a GNN fit's time goes: ``python -m benchmarks.profile`` (``make bench-profile``).

Fits the default model of one collection on a world part (``--graphs`` train and valid graphs, ``--epochs``
epochs) under ``cProfile`` and prints the fit's wall time split into stages, each the cumulative time of the
functions that do it:

* **prepare**: the processed-graph cache read or built, column selection, normalisation, segments;
* **train forward**, **loss**, **backward**, **optimiser** (with gradient clipping and the schedule): the training
  steps, summed over steps;
* **validate**: the per-epoch valid passes (the scores of every valid config, and the metric);
* **checkpoint**: the run folder's checkpoints and curves;

then the torch operators that take the most time in a few training steps and one valid pass
(``torch.profiler``), so that a change can be aimed at what costs.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from pathlib import Path

STAGES: dict[str, tuple[tuple[str, str], ...]] = {
    # stage: (file suffix, function name) pairs whose cumulative time is the stage's
    "prepare (cache, columns, normalise, segments)": (("models/gnn/model.py", "_built"),
                                                       ("models/gnn/model.py", "item"),
                                                       ("features/transforms.py", "fit")),
    "train forward": (("models/gnn/steps.py", "forward"),),
    "loss": (("models/gnn/losses.py", "list_mle"), ("models/gnn/losses.py", "pairwise_hinge"),
             ("models/gnn/losses.py", "margin_ranking")),
    "backward": (("torch/_tensor.py", "backward"),),
    "optimiser (clip, step, schedule)": (("torch/nn/utils/clip_grad.py", "clip_grad_norm_"),
                                         ("torch/optim/optimizer.py", "wrapper"),
                                         ("torch/optim/lr_scheduler.py", "step")),
    "validate": (("models/gnn/steps.py", "evaluate"),),
    "checkpoint and curves": (("models/gnn/callbacks.py", "on_save"),),
}


SUMMED = {"prepare (cache, columns, normalise, segments)"}
"""Stages whose functions run one after the other (their times add up); the others' nest."""


def stage_table(stats: pstats.Stats, total: float) -> list[tuple[str, float]]:
    """Each stage's seconds, and the rest of ``total`` as ``other``: the cumulative times of its functions, summed
    for the stages in :data:`SUMMED` (their functions run one after the other), else the largest (they nest)."""
    raw = stats.stats  # type: ignore[attr-defined]
    rows = []
    for stage, funcs in STAGES.items():
        times = [ct for (path, _line, name), (_cc, _nc, _tt, ct, _callers) in raw.items()
                 if any(name == fn and path.replace("\\", "/").endswith(suffix) for suffix, fn in funcs)]
        rows.append((stage, sum(times) if stage in SUMMED else max(times, default=0.0)))
    rows.append(("other (reading, setup, the rest)", max(0.0, total - sum(s for _, s in rows))))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", default="bench-out/scale-world", metavar="DIR",
                    help="a world (full-scale part) to fit on (default: %(default)s)")
    ap.add_argument("--collection", default="tile:xla", help="the collection (default: %(default)s)")
    ap.add_argument("--model", default="gnn-attn", help="the GNN model (default: %(default)s)")
    ap.add_argument("--graphs", type=int, default=None, metavar="N",
                    help="train and valid graphs used (default: all of the world's)")
    ap.add_argument("--epochs", type=int, default=1, help="epochs fitted (default: %(default)s)")
    ap.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                    help="a setting of the model, as `fastslow train --param` takes it (repeatable)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    ap.add_argument("--ops", type=int, default=12, help="torch operators listed (default: %(default)s)")
    ap.add_argument("--cache-dir", default="bench-out/profile-cache", metavar="DIR",
                    help="the processed-graph cache (default: %(default)s)")
    ap.add_argument("--pstats", default="bench-out/profile.pstats", metavar="FILE",
                    help="where the fit's cProfile statistics are saved, for `python -m pstats` (default: %(default)s)")
    ap.add_argument("--no-ops", action="store_true", help="skip the torch operator table")
    args = ap.parse_args()

    import torch

    from benchmarks.measure import head
    from competition.collections import Collection
    from competition.dataroot import find_data_root
    from competition.dataset import open_collection
    from fastslow.commands.params import literal as _literal
    from models.registry import make_model

    torch.set_num_threads(args.threads)
    c = Collection.parse(args.collection)
    data = open_collection(find_data_root(args.world), c)
    if args.graphs is not None:
        data = head(data, args.graphs)
    params = {"epochs": args.epochs, "patience": args.epochs, "runs_dir": None, "cache_dir": args.cache_dir,
              **{name: _literal(value) for name, _, value in (p.partition("=") for p in args.param)}}
    # The cache is built once before the profile: what a fit costs without it.
    make_model(args.model, **{**params, "epochs": 1, "seeds": 1, "max_seconds": 0.0}).fit(data, progress=False)

    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    model = make_model(args.model, **params).fit(data, progress=False)
    prof.disable()
    total = time.perf_counter() - t0
    stats = pstats.Stats(prof)
    Path(args.pstats).parent.mkdir(parents=True, exist_ok=True)
    stats.dump_stats(args.pstats)
    print(f"{args.model} {c.value}: {len(data.train)} train and {len(data.eval or [])} valid graphs, "
          f"{args.epochs} epoch(s), {model.num_networks} network(s), torch threads {args.threads}: "
          f"{total:.1f} s ({len(model.history_)} epochs recorded)")
    print(f"{'stage':48s} {'seconds':>9s} {'share':>7s}")
    for stage, seconds in stage_table(stats, total):
        print(f"{stage:48s} {seconds:9.2f} {seconds / total:7.1%}")

    if args.no_ops:
        return
    # The operators, over a short fit of the same settings.
    from torch.profiler import ProfilerActivity, profile
    short = head(data, 8)
    with profile(activities=[ProfilerActivity.CPU]) as p:
        make_model(args.model, **{**params, "epochs": 1, "seeds": 1}).fit(short, progress=False)
    print()
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.ops))


if __name__ == "__main__":
    main()
