"""GNN benchmarks at full scale: ``python -m benchmarks.gnn_scale [--predict-scale] [--train-scale]
[--predict-quality]`` (also run by ``python -m benchmarks.gnn`` with the same flags), parts 4 to 6 of the GNN
benchmarks (parts 1 to 3 are in :mod:`benchmarks.gnn`).

Every measurement runs in a fresh subprocess (:func:`benchmarks.measure.run_part`), so its peak resident memory is
its own. Three parts, one per run:

4. **Prediction at full scale** (``--predict-scale``): ``model.predict`` of ``gnn-attn`` and ``gnn`` with
   the default settings (initialised, not trained) on the first ``--predict-configs`` configs of a layout graph the
   size of the largest real ones (:func:`benchmarks.data_layer.part_big`: about 40,000 nodes, 2,000 configurable
   nodes, 20,000 configs), reading from the file included: configs/s, CPU seconds and peak memory. With
   ``--before DIR`` the same on another ``models`` package (e.g. HEAD's) side by side, and the largest difference
   between their scores on the same configs. ``--profile`` adds cProfile's top functions.
6. **Training at full scale** (``--train-scale``): training steps of the default ``gnn-attn`` layout
   network on the graph of part 4, deduplicated (:func:`models.gnn.infer.dedup_scores`) beside the plain forward
   pass: seconds per step, rows run through the layers, peak memory, one process each.
5. **Prediction settings and quality** (``--predict-quality``; long): ``gnn-attn`` fitted on each layout
   collection of ``--data``, every config of its valid and test graphs scored with several (``predict_batch``,
   ``tta``) pairs: mean Kendall tau and CPU cost of each.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.measure import (
    BENCH_CACHE,
    THREADS_ENV,
    part_threads,
    peak_mib,
    print_total,
    rss_mib,
    run_part,
    scratch,
    use_plain_forward,
)

MODULE = "benchmarks.gnn_scale"


# -- part 4: prediction at full scale -----------------------------------------------------------------------------


def part_big_graph(out: Path) -> dict:
    """The layout graph of :func:`benchmarks.data_layer.part_big` (about 40,000 nodes, 2,000 configurable nodes,
    20,000 configs), written under ``out`` unless already there."""
    path = out / "npz" / "layout" / "nlp" / "random" / "train" / "big.npz"
    if path.exists():
        return {"path": str(path), "reused": True}
    from benchmarks.data_layer import part_big

    return {**part_big(out), "reused": False}


def _initialised_model(graph, attention: bool):
    """A ``GNNAttentionModel`` / ``GNNModel`` with the default settings, initialised (seed 0) instead of trained:
    the column selection and normalisation are fitted on ``graph`` itself, the weights are the network's initial
    ones. Prediction costs the same as with trained weights."""
    from dataclasses import asdict

    import numpy as np
    import torch

    from features.data import graph_to_data
    from features.transforms import DropConstantColumns, Normalize
    from models.gnn.model import GNNAttentionModel, GNNModel, settings_pipeline

    model = (GNNAttentionModel if attention else GNNModel)(runs_dir=None)
    settings = model.train_config("layout")
    data = settings_pipeline(settings)(
        graph_to_data(graph, np.arange(min(64, graph.num_configs))))
    columns = DropConstantColumns().fit([data])
    normalize = Normalize().fit([columns(data.clone())])
    num_features = int(normalize(columns(data.clone())).x.shape[1])
    cfg = replace(settings, num_features=num_features)
    torch.manual_seed(0)
    net = cfg.make_net()
    model.collection_ = graph.collection
    model.settings_ = asdict(cfg)
    model.weights_ = {k: v.numpy() for k, v in net.state_dict().items()}
    model.columns_ = columns.state_dict()
    model.normalize_ = normalize.state_dict()
    return model, int(data.num_nodes)


def part_train_scale(path: Path, dedup: bool, steps: int) -> dict:
    """Training steps of the default ``gnn-attn`` layout network (initialised) on the full-scale graph of
    :func:`part_big_graph`, as :func:`models.gnn.train.training_step` takes them: 64 of its first 1,000 configs
    (the default ``train_configs``) per step; with ``dedup`` off, the plain forward pass (every config through every
    node). Seconds per step (after one warm-up step), rows the deduplicated pass runs, peak memory."""
    import numpy as np
    import torch

    from competition.collections import Collection
    from competition.reader import load_graph
    from features.data import graph_to_data
    from models.gnn.gst import HistoryTable
    from models.gnn.infer import LayoutStructure, layout_codes
    from models.gnn.losses import get_loss
    from models.gnn.net import make_segments
    from models.gnn.steps import Item, Slot, training_step

    if not dedup:
        use_plain_forward()
    graph = load_graph(path, Collection("layout:nlp:random"))
    model, _ = _initialised_model(graph, True)
    rows = np.arange(min(1000, graph.num_configs))
    data = model.prepare(graph)
    full = model._pipeline()(graph_to_data(graph, rows))
    item = Item("big", make_segments(data), full.config_feat.to(torch.int8), full.y.double())
    net = model.network()
    net.train()
    cfg = replace(model.train_config("layout"), num_features=int(data.x.shape[1]))
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.train.lr)
    loss_fn = get_loss(cfg.train.loss)
    gen, np_rng = torch.Generator().manual_seed(0), np.random.default_rng(0)
    table = HistoryTable()
    structure = LayoutStructure(item.segments, bidirectional=True)
    pos = torch.randperm(item.num_configs, generator=torch.Generator().manual_seed(0))[:cfg.train.configs_per_graph]
    by_slot = layout_codes(item.config_feat[pos].float()).t().contiguous()
    ids, distinct = structure.keys(by_slot, 0, structure.num_components)
    sizes = structure.comp_nodes[1:] - structure.comp_nodes[:-1]
    device = torch.device("cpu")
    training_step(net, [Slot(0, item, gen, np_rng)], cfg, opt, loss_fn, table, device=device)  # warm-up
    t0 = time.perf_counter()
    for k in range(steps):
        training_step(net, [Slot(k, item, gen, np_rng)], cfg, opt, loss_fn, table, device=device)
    seconds = (time.perf_counter() - t0) / steps
    return {"nodes": int(graph.num_nodes), "pruned_nodes": item.num_nodes, "slots": int(item.config_feat.shape[1]),
            "components": structure.num_components, "rows_plain": item.num_nodes * cfg.train.configs_per_graph,
            "rows_dedup": int((sizes * distinct).sum()) + int(structure.static.numel()),
            "s_per_step": seconds, "peak_mib": peak_mib(), "threads": torch.get_num_threads()}


def bench_train_scale(work: Path, steps: int) -> None:
    g = _run_part("big_graph", work / "big")
    print(f"\n6. Training steps at full scale: the default gnn-attn layout network (initialised) on {g['path']} "
          f"(a graph the size of the largest real ones), 64 configs per step, {steps} steps timed after one; each "
          f"mode in its own process")
    print(f"{'forward pass':14s} {'nodes':>7s} {'pruned':>7s} {'rows':>9s} {'s/step':>8s} {'peak':>8s}")
    plain = None
    for dedup in (False, True):
        r = _run_part("train_scale", g["path"], int(dedup), steps)
        rows = r["rows_dedup"] if dedup else r["rows_plain"]
        print(f"{'deduplicated' if dedup else 'plain':14s} {r['nodes']:7d} {r['pruned_nodes']:7d} {rows:9d} "
              f"{r['s_per_step']:8.3f} {r['peak_mib']:6.0f}Mi", flush=True)
        if plain is None:
            plain = r
        else:
            print(f"ratio plain / deduplicated: {plain['s_per_step'] / r['s_per_step']:.2f}x time per step, "
                  f"{r['rows_plain'] / max(r['rows_dedup'], 1):.1f}x rows; {r['components']} components, "
                  f"{r['slots']} slots ({r['threads']} torch threads)")


def part_predict_scale(path: Path, attention: bool, configs: int, save: str, profile: bool,
                       context: str = "batches", tta: int | None = None) -> dict:
    """Time ``model.predict`` on the first ``configs`` configs of the big graph with the default settings
    (whichever ``models`` package is first on the path: this tree's, or an older one for the "before" figure).
    Writes the scores to ``save`` (``.npy``) unless it is ``-``."""
    import cProfile
    import io
    import pstats

    import numpy as np
    import torch

    from competition.collections import Collection
    from competition.reader import load_graph
    from models.gnn.steps import resolve_device

    graph = load_graph(path, Collection.LAYOUT_NLP_RANDOM)
    model, pruned = _initialised_model(graph, attention)
    if hasattr(model, "train_config"):  # this tree's model predicts with its run's settings
        model.settings_["predict_context"] = context
    elif hasattr(model, "predict_context"):  # absent from an older tree's model ("before")
        model.predict_context = context
    if tta is not None:
        model.tta = tta
    sub = graph.select_configs(np.arange(min(configs, graph.num_configs)))
    gc.collect()
    rss_before = rss_mib()
    prof = cProfile.Profile() if profile else None
    cpu0, t0 = time.process_time(), time.perf_counter()
    if prof is not None:
        prof.enable()
    scores = model.predict(sub)
    if prof is not None:
        prof.disable()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if save != "-":
        np.save(save, scores)
    top = ""
    if prof is not None:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
        top = buf.getvalue()
    return {"configs": sub.num_configs, "seconds": seconds, "cpu_s": cpu, "cps": sub.num_configs / seconds,
            "nodes": graph.num_nodes, "config_nodes": graph.num_config_nodes, "pruned_nodes": pruned,
            "rss_before": rss_before, "peak_mib": peak_mib(), "tta": model.tta,
            "batch": model.settings_["predict_batch"],
            "device": str(resolve_device(model.device)), "threads": torch.get_num_threads(), "profile": top,
            "context": model.settings_.get("predict_context", getattr(model, "predict_context", "batches"))}


# -- part 5: prediction settings and quality ----------------------------------------------------------------------

PREDICT_GRID = [("batches", 128, 1, None), ("batches", 128, 4, None), ("batches", 128, 8, None),
                ("reference", 128, 1, None), ("reference", 128, 4, None), ("reference", 128, 1, 1024),
                ("reference", 128, 4, 1024)]
"""(predict_context, predict_batch, tta, reference_configs) scored by part 5, labelled ``b128x4`` (batches) or
``r128x1`` (reference), ``r128x1/508`` with 508 reference configs; :data:`PREDICT_BASELINE` is what the others are
compared with."""
PREDICT_BASELINE = "b128x4"  # the default before the reference context


def _grid_label(context: str, batch: int, tta: int, reference: int | None) -> str:
    return f"{context[0]}{batch}x{tta}" + (f"/{reference}" if reference else "")


def part_predict_quality(data: Path, collection: str, seed: int) -> dict:
    """Fit ``GNNAttentionModel`` (defaults) on ``collection``, then score every config of each valid and test graph
    (test runtimes from the world's ``secret/`` tree) with each setting of :data:`PREDICT_GRID`."""
    from competition.collections import Collection, Split
    from competition.dataroot import find_data_root, list_graphs, load_secret_runtime
    from competition.dataset import open_collection
    from competition.metrics import kendall_tau
    from competition.reader import load_graph
    from models.gnn.model import GNNAttentionModel

    root = find_data_root(data)
    c = Collection(collection)
    model = GNNAttentionModel(runs_dir=None, cache_dir=BENCH_CACHE, seed=seed)
    t0 = time.perf_counter()
    model.fit(open_collection(root, c), progress=False)
    rows = []
    for split in (Split.VALID, Split.TEST):
        for path in list_graphs(root, c, split):
            graph = load_graph(path, c)
            y = graph.config_runtime if split == Split.VALID else load_secret_runtime(root, c, path).config_runtime
            row: dict[str, object] = {"graph": path.stem, "split": split.value, "configs": graph.num_configs}
            for context, batch, tta, reference in PREDICT_GRID:
                # Prediction follows the run's settings: these are changed there, without refitting.
                model.settings_.update(predict_context=context, predict_batch=batch,
                                       reference_configs=reference or batch - 1)
                model.tta = tta
                label = _grid_label(context, batch, tta, reference)
                cpu = time.process_time()
                row[f"tau {label}"] = kendall_tau(model.predict(graph), y)
                row[f"cpu {label}"] = time.process_time() - cpu
            rows.append(row)
    return {"fit_s": time.perf_counter() - t0, "rows": rows}



# -- parts 4 and 5: the runs --------------------------------------------------------------------------------------


def _run_part_in(tree: Path, *args: object) -> dict:
    """:func:`_run_part` with the ``models`` package of ``tree`` (a folder holding ``models/``) instead of this
    tree's: the child runs in ``tree``, which comes first on its path, with this tree after it."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    res = subprocess.run([sys.executable, "-m", MODULE, "--part", *(str(a) for a in args)], check=True,
                         capture_output=True, text=True, cwd=tree, env=env)
    return json.loads(res.stdout.strip().splitlines()[-1])


PREDICT_SCALE_VARIANTS = [("gnn-attn", True, "reference", None), ("gnn-attn", True, "batches", 4),
                          ("gnn", False, "reference", None)]
"""Part 4's runs: (model, attention, predict_context, tta or ``None`` for the model's default); the first is the
default, the second the default before the reference context (random batches, four orderings)."""


def bench_predict_scale(work: Path, configs: int, before: Path | None, before_configs: int, profile: bool) -> None:
    import numpy as np

    from models.gnn.config import DEFAULTS

    g = _run_part("big_graph", work / "big")
    d = DEFAULTS["layout"]
    print(f"\n4. Prediction at full scale: GNNAttentionModel / GNNModel with the default settings (layout hidden "
          f"{d.hidden}, {d.layers} layers, hops {d.hops}; initialised with seed 0, not trained) scoring the "
          f"first configs of {g['path']}, model.predict from the file (reading included). Peak = process peak RSS; "
          f"+predict = peak minus RSS before predict.", flush=True)
    print(f"{'model':10s} {'context':9s} {'code':7s} {'configs':>7s} {'tta':>3s} {'batch':>5s} {'seconds':>8s} "
          f"{'cpu s':>7s} {'configs/s':>9s} {'peak':>8s} {'+predict':>8s}")
    device = graph = ""
    for label, attention, context, tta in PREDICT_SCALE_VARIANTS:
        runs = [("after", work, configs, _run_part)]
        compare = before is not None and tta is None
        if compare:
            runs = [("before", before, before_configs, lambda *a: _run_part_in(before, *a)),
                    ("after", work, before_configs, _run_part), *runs]
        saved = {}
        for code, _, n, run in runs:
            out = work / f"{code}_{label}_{context}_{n}.npy"
            r = run("predict_scale", g["path"], int(attention), n, out, int(profile and code == "after"), context,
                    *([] if tta is None else [tta]))
            saved[(code, n)] = out
            device = f"{r['device']} ({r['threads']} torch threads)"
            graph = (f"{r['nodes']:,} nodes, {r['config_nodes']:,} configurable, {r['pruned_nodes']:,} after "
                     f"pruning")
            shown = context if attention else "-"
            print(f"{label:10s} {shown:9s} {code:7s} {r['configs']:7d} {r['tta']:3d} {r['batch']:5d} "
                  f"{r['seconds']:8.1f} {r['cpu_s']:7.1f} {r['cps']:9.1f} {r['peak_mib']:6.0f}Mi "
                  f"{r['peak_mib'] - r['rss_before']:6.0f}Mi", flush=True)
            if r["profile"]:
                print(r["profile"])
        if compare:
            a, b = np.load(saved[("before", before_configs)]), np.load(saved[("after", before_configs)])
            print(f"{'':10s} before/after scores on the same {before_configs} configs: max |difference| "
                  f"{np.abs(a - b).max():.2e} (scores up to {np.abs(a).max():.2f})", flush=True)
    print(f"(graph: {graph}; device: {device})")



def bench_predict_quality(data: Path, seed: int) -> None:
    import numpy as np

    layouts = ["layout:nlp:random", "layout:xla:random", "layout:nlp:default", "layout:xla:default"]
    grid = [_grid_label(*g) for g in PREDICT_GRID]
    print(f"\n5. Prediction settings (b = random batches, r = one reference set per draw; predict_batch x tta) and "
          f"quality: GNNAttentionModel (defaults, seed {seed}) fitted "
          f"on each layout collection of {data}, then every config of each valid and test graph scored with each "
          f"setting; mean Kendall tau (test runtimes from secret/).", flush=True)
    print(f"{'collection':20s} {'graphs':>6s} " + " ".join(f"{g:>10s}" for g in grid))
    taus: dict[str, list[float]] = {g: [] for g in grid}
    cpu: dict[str, float] = dict.fromkeys(grid, 0.0)
    configs = 0
    for collection in layouts:
        r = _run_part("predict_quality", data, collection, seed)
        for g in grid:
            taus[g] += [row[f"tau {g}"] for row in r["rows"]]
            cpu[g] += sum(row[f"cpu {g}"] for row in r["rows"])
        configs += sum(row["configs"] for row in r["rows"])
        print(f"{collection:20s} {len(r['rows']):6d} "
              + " ".join(f"{np.mean([row[f'tau {g}'] for row in r['rows']]):10.4f}" for g in grid), flush=True)
    print(f"{'all':20s} {len(taus[grid[0]]):6d} " + " ".join(f"{np.mean(taus[g]):10.4f}" for g in grid))
    ref = np.array(taus[PREDICT_BASELINE])
    for g in grid:
        d = np.array(taus[g]) - ref
        print(f"  {g:>10s} - {PREDICT_BASELINE}: {d.mean():+.4f} (standard error {d.std(ddof=1) / np.sqrt(len(d)):.4f}), higher "
              f"on {(d > 0).sum()} of {len(d)} graphs; {configs / max(cpu[g], 1e-9):7.0f} configs per CPU second")



# -- main ---------------------------------------------------------------------------------------------------------


def _run_part(*args: object) -> dict:
    return run_part(MODULE, *(str(a) for a in args))


def _dispatch(part: list[str]) -> dict:
    name, *a = part
    if name == "big_graph":
        return part_big_graph(Path(a[0]))
    if name == "train_scale":
        return part_train_scale(Path(a[0]), a[1] == "1", int(a[2]))
    if name == "predict_quality":
        return part_predict_quality(Path(a[0]), a[1], int(a[2]))
    if name == "predict_scale":
        return part_predict_scale(Path(a[0]), a[1] == "1", int(a[2]), a[3], a[4] == "1", *a[5:6],
                                  *(int(t) for t in a[6:7]))
    raise SystemExit(f"unknown part {name!r}")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of parts 4 to 6, on this module's parser and on :mod:`benchmarks.gnn`'s; :func:`run` also reads
    ``--data``, ``--seeds`` and ``--workdir``, which each parser defines."""
    ap.add_argument("--train-scale", action="store_true",
                    help="part 6 only: training steps on a graph the size of the largest real ones, deduplicated "
                         "beside the plain forward pass (seconds per step, peak memory)")
    ap.add_argument("--predict-scale", action="store_true",
                    help="run only part 4: model.predict on a layout graph the size of the largest real ones")
    ap.add_argument("--predict-configs", type=int, default=4096, help="configs scored in part 4 (default 4096)")
    ap.add_argument("--before", default=None,
                    help="part 4: also time the models package of this folder (e.g. HEAD's: see docs/benchmarks.md) on "
                         "--before-configs configs, and compare its scores with this tree's")
    ap.add_argument("--before-configs", type=int, default=256, help="configs for --before (default 256)")
    ap.add_argument("--profile", action="store_true", help="part 4: print cProfile's top functions")
    ap.add_argument("--predict-quality", action="store_true",
                    help="run only part 5: gnn-attn quality per (predict_batch, tta) on the --data world (long)")


def run(args: argparse.Namespace) -> bool:
    """Run the part of 4 to 6 that ``args`` (:func:`add_arguments`) choose, if any; whether one was."""
    if args.predict_quality:
        bench_predict_quality(Path(args.data), args.seeds[0])
    elif args.train_scale:
        with scratch(args.workdir, "fastslow-bench-train-") as work:
            bench_train_scale(work, 5)
    elif args.predict_scale:
        with scratch(args.workdir, "fastslow-bench-predict-") as work:
            bench_predict_scale(work, args.predict_configs, Path(args.before).resolve() if args.before else None,
                                args.before_configs, args.profile)
    else:
        return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", nargs="+", help=argparse.SUPPRESS)
    add_arguments(ap)
    ap.add_argument("--data", default="data/synthetic-demo", help="part 5: the world to fit and score")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="part 5: its seed, the first (default 0)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads in every part (default: torch's)")
    ap.add_argument("--workdir", default=None,
                    help="parts 4 and 6: scratch folder kept between runs (default: temporary)")
    args = ap.parse_args()
    if args.part:
        part_threads()
        print(json.dumps(_dispatch(args.part)))
        return
    if not (args.predict_scale or args.train_scale or args.predict_quality):
        ap.error("choose a part: --predict-scale, --train-scale or --predict-quality")
    if args.threads:
        os.environ[THREADS_ENV] = str(args.threads)
    t0 = time.perf_counter()
    run(args)
    print_total(t0)


if __name__ == "__main__":
    main()
