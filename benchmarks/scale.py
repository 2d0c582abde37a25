"""The scale benchmark: ``make bench-scale`` (``python -m benchmarks.scale``).

Measures every stage of ``fastslow submit`` on a part of the full-scale synthetic world (``--limit`` graphs per
layout collection and split, ``--tile-limit`` tile kernels per split, drawn from the real size distributions), per
graph and per config, each stage in a fresh process so that its peak memory is its own:

* **read**: every config of every graph streamed from its file (what any pass over a file costs);
* **cache**: the GNN feature pipeline's disk cache of the train and valid splits;
* per model: **fit** (GBDT features and boosting; GNN training, ``--gnn-epochs`` epochs measured and scaled to the
  default), **predict valid** (the valid protocol's configs), **predict test**, **score** (writing and scoring the
  valid file);
* **ensemble**: fitting the ensemble on the models' valid predictions and predicting test.

Then it projects the total for the real data's graph counts (``SCALES["full"]``, the real counts) with the default
settings: a stage's time per graph (averaged over graphs drawn from the real distributions of nodes and configs)
times the real number of graphs, and prints the projection stage by stage with each stage's peak memory.

The GNN fits are measured ``--jobs`` at a time (each with the usable cores over ``--jobs`` torch threads), as
``fastslow submit`` fits them, and the total is projected both one stage at a time and as the pipeline runs it: the
other stages one after the other, and the GNN collections' fits and predictions put on ``--jobs`` slots, largest
first, each to the slot that frees first. The target is the real counts in 3 hours on 2 cores at a peak of 5.6 GiB
per fit.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from benchmarks.measure import peak_mib, run_part

DEFAULT_WORLD = Path("bench-out") / "scale-world"
TARGET_HOURS = 3.0
TARGET_CORES = 2
TARGET_PEAK_GIB = 5.6
MODEL_NAMES = ("default-first", "gbdt", "gnn-attn")


def _root(world: str):
    from competition.dataroot import find_data_root

    return find_data_root(world)


def _threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)


# -- parts (each in its own process) ----------------------------------------------------------------------------


def part_read(world: str, collection: str) -> dict:
    from competition.collections import Collection, Split
    from competition.dataroot import list_graphs
    from competition.reader import LayoutGraph, load_graph

    root, c = _root(world), Collection(collection)
    out: dict = {}
    for split in Split:
        t0 = time.perf_counter()
        graphs = configs = 0
        for path in list_graphs(root, c, split):
            g = load_graph(path, c)
            if isinstance(g, LayoutGraph):
                for _, block in g.iter_config_blocks():
                    configs += block.shape[0]
            else:
                configs += g.num_configs
            graphs += 1
        out[split.value] = {"seconds": time.perf_counter() - t0, "graphs": graphs, "configs": configs}
    out["peak_mib"] = peak_mib()
    return out


def part_cache(world: str, collection: str, cache: str) -> dict:
    from torch_geometric.transforms import Compose

    from competition.collections import Collection, Split
    from competition.dataset import open_split
    from competition.protocol import DEFAULT_PROTOCOL
    from features.cache import ProcessedGraphs
    from features.transforms import DedupConfigs
    from models.gnn.config import default_config
    from models.gnn.model import settings_pipeline

    root, c = _root(world), Collection(collection)
    d = default_config(c)
    pipeline = settings_pipeline(d)
    out: dict = {}
    for split, kw in ((Split.TRAIN, {"pre_transform": Compose([pipeline, DedupConfigs("min")]),
                                     "max_configs": d.max_train_configs}),
                      (Split.VALID, {"pre_transform": pipeline, "protocol": DEFAULT_PROTOCOL})):
        t0 = time.perf_counter()
        ds = ProcessedGraphs(open_split(root, c, split), cache_dir=cache, workers=1, progress=False, **kw)
        ds.build()
        out[split.value] = {"seconds": time.perf_counter() - t0, "graphs": len(ds)}
    out["peak_mib"] = peak_mib()
    # This collection's cached graphs only: the cache folder holds every collection's until the run ends.
    out["disk_mib"] = sum(p.stat().st_size for p in (Path(cache) / c.slug).rglob("*.pt")) / 2**20
    return out


def part_model(world: str, collection: str, model: str, cache: str, work: str, gnn_epochs: int,
               threads: int, device: str = "cpu") -> dict:
    from competition.collections import Collection, Split, submission_id
    from competition.dataroot import list_graphs
    from competition.dataset import open_collection
    from competition.labels import load_labels
    from competition.protocol import DEFAULT_PROTOCOL
    from competition.reader import load_graph
    from competition.submission_format import write_submission
    from competition.submission_scoring import score_predictions
    from models.registry import make_model

    _threads(threads)
    root, c = _root(world), Collection(collection)
    params: dict = {}
    if model.startswith("gnn"):
        params = {"epochs": gnn_epochs, "patience": gnn_epochs, "cache_dir": cache, "runs_dir": None,
                  "device": device}
    out: dict = {}
    t0 = time.perf_counter()
    fitted = make_model(model, **params).fit(open_collection(root, c), progress=False)
    out["fit"] = {"seconds": time.perf_counter() - t0, "graphs": len(list_graphs(root, c, Split.TRAIN))}
    if model.startswith("gnn"):
        out["fit"]["epochs_run"] = len(fitted.history_)
        out["fit"]["default_epochs"] = make_model(model).train_config(c).train.epochs
        # Each epoch ends with the valid split scored: that part grows with the valid graphs, not the train ones.
        # A seed ensemble's every network trains and validates its epochs.
        histories = fitted.histories()
        out["fit"]["networks"] = len(histories)
        out["fit"]["valid_seconds"] = sum(r["valid_seconds"] for h in histories for r in h)
        out["fit"]["valid_graphs"] = len(list_graphs(root, c, Split.VALID))
    preds: dict[str, dict[str, np.ndarray]] = {}
    for split in (Split.VALID, Split.TEST):
        t0 = time.perf_counter()
        paths = list_graphs(root, c, split)
        configs = 0
        preds[split.value] = {}
        for path, gid in zip(paths, (submission_id(c, p.stem) for p in paths), strict=True):
            g = DEFAULT_PROTOCOL.select(load_graph(path, c), c, split)
            preds[split.value][gid] = fitted.predict(g)
            configs += g.num_configs
        out[f"predict_{split.value}"] = {"seconds": time.perf_counter() - t0, "graphs": len(paths),
                                         "configs": configs}
    t0 = time.perf_counter()
    labels = load_labels(root, [c], Split.VALID)
    write_submission(Path(work) / f"valid-{model}-{c.value.replace(':', '-')}.csv", preds["valid"], labels.rows())
    report = score_predictions(preds["valid"], labels)
    out["score"] = {"seconds": time.perf_counter() - t0, "graphs": len(labels), "value": report.scores()[c]}
    np.savez(Path(work) / f"preds-{model}-{c.value.replace(':', '-')}.npz",
             **{f"{s}|{gid}": v for s, d in preds.items() for gid, v in d.items()})
    out["peak_mib"] = peak_mib()
    return out


def part_ensemble(world: str, collection: str, work: str, models: str) -> dict:
    from competition.collections import Collection, Split
    from competition.labels import load_labels
    from models.ensemble import PIPELINE_PARAMS, Ensemble

    root, c = _root(world), Collection(collection)
    valid: dict[str, dict[str, np.ndarray]] = {}
    test: dict[str, dict[str, np.ndarray]] = {}
    for m in models.split(","):
        with np.load(Path(work) / f"preds-{m}-{c.value.replace(':', '-')}.npz") as z:
            for key in z.files:
                split, gid = key.split("|", 1)
                (valid if split == "valid" else test).setdefault(m, {})[gid] = z[key]
    t0 = time.perf_counter()
    labels = load_labels(root, [c], Split.VALID).targets()
    ens = Ensemble(**PIPELINE_PARAMS).fit(valid, labels)
    ens.cross_val_predict(valid, labels)
    ens.predict(test)
    return {"ensemble": {"seconds": time.perf_counter() - t0, "graphs": len(labels)}, "peak_mib": peak_mib()}


# -- the run and the projection ----------------------------------------------------------------------------------


def _real_counts() -> dict[str, tuple[int, int, int]]:
    from competition.collections import Collection
    from competition.synthetic.scales import SCALES

    full = SCALES["full"]
    return {c.value: (full.tile_counts if c.is_tile else full.layout_counts[c.value]) for c in Collection}


def project(results: dict) -> list[dict]:
    """Rows ``stage, collection, graphs measured, seconds measured, real graphs, projected seconds, peak MiB``."""
    real = _real_counts()
    split_index = {"train": 0, "valid": 1, "test": 2}
    rows = []
    for c, res in results.items():
        counts = real[c]
        read = res["read"]
        for split, i in split_index.items():
            m = read[split]
            if m["graphs"]:
                rows.append(_row(f"read {split}", c, m, counts[i], read["peak_mib"]))
        cache = res["cache"]
        for split in ("train", "valid"):
            rows.append(_row(f"cache {split} (GNN features)", c, cache[split], counts[split_index[split]], cache["peak_mib"]))
        for model, mres in res["models"].items():
            fit = mres["fit"]
            epochs = fit["default_epochs"] / fit["epochs_run"] if fit.get("epochs_run") else 1.0
            rows.append(_fit_row(f"{model} fit", c, fit, counts, mres["peak_mib"], scale=epochs))
            if model.startswith("gnn") and cache.get("disk_mib"):
                # The GNN holds every processed train graph in memory (about its cached size), so its peak grows
                # with the number of train graphs: add the real count's extra graphs at the measured size.
                per_graph = cache["disk_mib"] / max(1, cache["train"]["graphs"] + cache["valid"]["graphs"])
                rows[-1]["peak_projected_mib"] = mres["peak_mib"] + per_graph * max(0, counts[0] - fit["graphs"])
            rows.append(_row(f"{model} predict valid", c, mres["predict_valid"], counts[1], mres["peak_mib"]))
            rows.append(_row(f"{model} predict test", c, mres["predict_test"], counts[2], mres["peak_mib"]))
            rows.append(_row(f"{model} score valid", c, mres["score"], counts[1], mres["peak_mib"]))
            gres = res.get("gpu", {}).get(model)
            if gres is not None:  # the same stages on the GPU, in a column of their own
                gfit = gres["fit"]
                gscale = gfit["default_epochs"] / gfit["epochs_run"] if gfit.get("epochs_run") else 1.0
                rows[-4]["gpu_projected"] = _fit_projection(gfit, counts, gscale)
                for r, g, n in ((rows[-3], gres["predict_valid"], counts[1]), (rows[-2], gres["predict_test"],
                                                                                  counts[2])):
                    r["gpu_projected"] = g["seconds"] / max(g["graphs"], 1) * n
        if "ensemble" in res:
            rows.append(_row("ensemble", c, res["ensemble"]["ensemble"], counts[1], res["ensemble"]["peak_mib"]))
    return rows


def _row(stage: str, collection: str, m: dict, real_graphs: int, peak: float, scale: float = 1.0) -> dict:
    """``scale``: what the measured run stands for (GNN fits run fewer epochs than the default: default / run)."""
    per_graph = scale * m["seconds"] / m["graphs"] if m["graphs"] else 0.0
    out = {"stage": stage, "collection": collection, "graphs": m["graphs"], "seconds": m["seconds"],
           "per_graph": per_graph, "real_graphs": real_graphs, "projected": per_graph * real_graphs,
           "peak_mib": peak}
    if m.get("configs"):
        out["configs_per_s"] = m["configs"] / max(m["seconds"], 1e-9)
    return out


def _fit_projection(m: dict, counts: tuple[int, int, int], scale: float) -> float:
    """A fit's projected seconds: a GNN fit's training steps by the train graphs and its per-epoch validation
    (``valid_seconds``) by the valid graphs, both scaled to the default epochs; any other fit by the train graphs."""
    if "valid_seconds" not in m or not m["graphs"]:
        return scale * m["seconds"] / m["graphs"] * counts[0] if m["graphs"] else 0.0
    train = scale * (m["seconds"] - m["valid_seconds"]) / m["graphs"] * counts[0]
    return train + scale * m["valid_seconds"] / max(m["valid_graphs"], 1) * counts[1]


def _fit_row(stage: str, collection: str, m: dict, counts: tuple[int, int, int], peak: float, scale: float) -> dict:
    """A fit's row (:func:`_row`), projected by :func:`_fit_projection`."""
    out = _row(stage, collection, m, counts[0], peak, scale=scale)
    out["projected"] = _fit_projection(m, counts, scale)
    out["per_graph"] = out["projected"] / max(counts[0], 1)
    if "valid_seconds" in m:
        out["valid_share"] = m["valid_seconds"] / max(m["seconds"], 1e-9)
    return out


def _fmt_h(seconds: float) -> str:
    return f"{seconds / 3600:6.2f} h" if seconds >= 360 else f"{seconds / 60:6.1f} m"


def format_projection(rows: list[dict], jobs: int = 1) -> str:
    gpu = any("gpu_projected" in r for r in rows)
    lines = [f"{'stage':26s} {'collection':20s} {'graphs':>6s} {'measured':>9s} {'s/graph':>8s} {'configs/s':>10s} "
             f"{'real':>5s} {'projected':>9s} {'peak MiB':>9s}" + (f" {'GPU proj.':>9s}" if gpu else "")]
    for r in rows:
        cps = f"{r['configs_per_s']:10.0f}" if "configs_per_s" in r else f"{'':>10s}"
        on_gpu = (f" {_fmt_h(r['gpu_projected']):>9s}" if "gpu_projected" in r else f" {'':>9s}") if gpu else ""
        lines.append(f"{r['stage']:26s} {r['collection']:20s} {r['graphs']:6d} {r['seconds']:8.1f}s "
                     f"{r['per_graph']:8.2f} {cps} {r['real_graphs']:5d} {_fmt_h(r['projected']):>9s} "
                     f"{r['peak_mib']:9.0f}{on_gpu}")
    by_stage: dict[str, float] = {}
    for r in rows:
        key = r["stage"].split(" ")[0] if not r["stage"].startswith("read") else "read (one pass)"
        by_stage[key] = by_stage.get(key, 0.0) + r["projected"]
    lines.append("(measured: the run on the world part; GNN fits ran --gnn-epochs epochs, and s/graph and the projection "
                 "scale them to the default epochs; a GNN fit's training is projected by the train graphs and its "
                 "per-epoch validation by the valid graphs, s/graph being their sum per real train graph)")
    lines.append("")
    lines.append("projected for the real counts, by stage (reading is included in the stages that read):")
    for k, v in by_stage.items():
        lines.append(f"  {k:22s} {_fmt_h(v)}")
    total = sum(v for k, v in by_stage.items() if not k.startswith("read"))
    peak = max(r.get("peak_projected_mib", r["peak_mib"]) for r in rows) / 1024
    worst = max(rows, key=lambda r: r.get("peak_projected_mib", r["peak_mib"]))
    lines.append(f"  peak memory projected for the real counts: {peak:.1f} GiB ({worst['stage']}, "
                 f"{worst['collection']}: measured {worst['peak_mib'] / 1024:.1f} GiB on {worst['graphs']} graphs)")
    lines.append(f"  {'total, one at a time':22s} {_fmt_h(total)}")
    slots, gnn = schedule(rows, jobs)
    if jobs > 1 and gnn:
        lines.append(f"  the GNN collections (cache, fit, predictions, scoring) {jobs} at a time, largest first, as the "
                     "pipeline runs them:")
        for i, slot in enumerate(slots, 1):
            lines.append(f"    slot {i}: " + " + ".join(f"{c} {_fmt_h(v).strip()}" for c, v in slot) +
                         f" = {_fmt_h(sum(v for _, v in slot)).strip()}")
        total = total - sum(gnn.values()) + max(sum(v for _, v in slot) for slot in slots)
    lines.append(f"  {f'total ({jobs} fits at once)' if jobs > 1 else 'total (pipeline)':22s} {_fmt_h(total)}   "
                 f"target <= {TARGET_HOURS:.0f} h on {TARGET_CORES} cores: "
                 f"{'PASS' if total <= TARGET_HOURS * 3600 else 'OVER'}; peak {peak:.1f} GiB per fit, target <= "
                 f"{TARGET_PEAK_GIB:.1f} GiB: {'PASS' if peak <= TARGET_PEAK_GIB else 'OVER'}")
    return "\n".join(lines)


def schedule(rows: list[dict], jobs: int) -> tuple[list[list[tuple[str, float]]], dict[str, float]]:
    """The GNN collections' projected seconds (the feature cache, then the fit, predictions and scoring of every GNN
    model) put on ``jobs``
    slots largest first, each to the slot that frees first (as ``fastslow submit --jobs`` starts them): the slots,
    and each collection's seconds."""
    gnn: dict[str, float] = {}
    for r in rows:
        if r["stage"].startswith("gnn"):
            gnn[r["collection"]] = gnn.get(r["collection"], 0.0) + r["projected"]
    for r in rows:  # the GNN feature cache is built by the collection's first GNN fit, in its slot
        if r["stage"].startswith("cache") and r["collection"] in gnn:
            gnn[r["collection"]] += r["projected"]
    slots: list[list[tuple[str, float]]] = [[] for _ in range(max(1, jobs))]
    for c, v in sorted(gnn.items(), key=lambda kv: -kv[1]):
        min(slots, key=lambda slot: sum(t for _, t in slot)).append((c, v))
    return slots, gnn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--world", default=str(DEFAULT_WORLD), metavar="DIR",
                    help="the full-scale world part to measure on, generated there if missing (default: %(default)s)")
    ap.add_argument("--limit", type=int, default=12, metavar="N",
                    help="layout graphs per collection and split when generating (default: %(default)s)")
    ap.add_argument("--tile-limit", type=int, default=600, metavar="N",
                    help="tile kernels per split when generating (default: %(default)s)")
    ap.add_argument("--collections", nargs="+", default=None, metavar="C", help="collections (default: all five)")
    ap.add_argument("--models", nargs="+", default=list(MODEL_NAMES), metavar="NAME",
                    help="models to measure (default: %(default)s)")
    ap.add_argument("--gnn-epochs", type=int, default=1, metavar="N",
                    help="GNN epochs actually run; the projection scales them to the default (default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=None, metavar="N",
                    help="GNN fits measured at once, and the projection's concurrent fits, as `fastslow submit "
                         "--jobs N` runs them (default: the pipeline's, one per usable core, at most 4)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads of each GNN fit (default: the usable cores over --jobs, as the pipeline)")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="where the model parts run: cpu; cuda (the GNNs on the GPU only, the other models on the CPU; "
                         "the table's figures are then the GPU's); auto: the CPU, and the GNNs again on the GPU in a "
                         "column of their own when one is present (default: %(default)s)")
    ap.add_argument("--out", default="bench-out/scale.json", metavar="JSON",
                    help="where the measurements and the projection are saved (default: %(default)s)")
    args = ap.parse_args()
    if args.part:
        name, *rest = args.part
        fns = {"read": part_read, "cache": part_cache, "ensemble": part_ensemble,
               "model": lambda w, c, m, ca, wo, e, t, d="cpu": part_model(w, c, m, ca, wo, int(e), int(t), d)}
        print(json.dumps(fns[name](*rest)))
        return

    import torch

    from competition.collections import Collection
    from competition.synthetic.world import generate_world
    from competition.workers import default_jobs, usable_cores

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device here (use --device cpu or auto)")
    collections = [Collection.parse(c) for c in args.collections] if args.collections else list(Collection)
    world = Path(args.world)
    if not (world / "world.json").exists():
        t0 = time.perf_counter()
        generate_world(world, scale="full", seed=0, collections=[c.value for c in collections], limit=args.limit,
                       tile_limit=args.tile_limit, progress=True)
        print(f"generated the full-scale world part in {time.perf_counter() - t0:.0f} s: {world}")
    work = Path("bench-out") / "scale-work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    gpu = args.device == "auto" and torch.cuda.is_available()
    jobs = args.jobs if args.jobs is not None else default_jobs()
    threads = args.threads if args.threads is not None else max(1, usable_cores() // jobs)
    cache = str(work / "cache")
    results: dict = {c.value: {"models": {}} for c in collections}
    side_by_side: list[tuple[str, str]] = []  # the GNN parts, measured `jobs` at a time as the pipeline fits them
    for c in collections:
        res = results[c.value]
        print(f"{c.value}: read", flush=True)
        res["read"] = run_part("benchmarks.scale", "read", str(world), c.value)
        print(f"{c.value}: cache", flush=True)
        res["cache"] = run_part("benchmarks.scale", "cache", str(world), c.value, cache)
        for m in args.models:
            if m.startswith("gnn") and args.device != "cuda":
                side_by_side.append((c.value, m))
                continue
            print(f"{c.value}: {m}", flush=True)
            device = "cuda" if args.device == "cuda" and m.startswith("gnn") else "cpu"
            res["models"][m] = run_part("benchmarks.scale", "model", str(world), c.value, m, cache, str(work),
                                        str(args.gnn_epochs), str(threads if m.startswith("gnn") else 1), device)
    if side_by_side:
        print(f"the GNN fits: {jobs} at a time, {threads} torch thread{'s' * (threads > 1)} each, as `fastslow "
              f"submit --jobs {jobs}` runs them", flush=True)

        def gnn_part(job: tuple[str, str]) -> dict:
            c, m = job
            print(f"{c}: {m}", flush=True)
            return run_part("benchmarks.scale", "model", str(world), c, m, cache, str(work), str(args.gnn_epochs),
                            str(threads), "cpu")

        with ThreadPoolExecutor(jobs) as pool:
            for (c, m), out in zip(side_by_side, pool.map(gnn_part, side_by_side), strict=True):
                results[c]["models"][m] = out
        if gpu:
            for c, m in side_by_side:
                print(f"{c}: {m} on the GPU", flush=True)
                results[c].setdefault("gpu", {})[m] = run_part("benchmarks.scale", "model", str(world), c, m, cache,
                                                               str(work), str(args.gnn_epochs), str(threads), "cuda")
    if len(args.models) >= 2:
        for c in collections:
            results[c.value]["ensemble"] = run_part("benchmarks.scale", "ensemble", str(world), c.value, str(work),
                                                    ",".join(args.models))
    shutil.rmtree(cache, ignore_errors=True)
    rows = project(results)
    where = "the GNNs on the GPU, " if args.device == "cuda" else ""
    print(f"\nmeasured on {world} ({where}{usable_cores()} cores, the GNN fits {jobs} at a time with {threads} torch "
          f"thread{'s' * (threads > 1)} each); projected for the real graph counts with the default settings")
    print(format_projection(rows, jobs=1 if args.device == "cuda" else jobs))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"results": results, "projection": rows, "jobs": jobs,
                                          "threads": threads}, indent=1) + "\n")
    print(f"saved: {args.out}")
    if any(math.isnan(r["seconds"]) for r in rows):
        raise SystemExit("a stage measured NaN seconds")


if __name__ == "__main__":
    main()
