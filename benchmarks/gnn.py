"""GNN benchmarks: ``python -m benchmarks.gnn [--quick] [--throughput] [--ablation] [--predict-scale]
[--train-scale] [--predict-quality]`` (parts 1 and 2 are part of ``make bench``; ``--throughput`` runs part 2 alone).

Every measurement runs in a fresh subprocess (:func:`benchmarks.measure.run_part`), so its peak resident memory is
its own. Six parts; parts 4 to 6 (``--predict-scale``, ``--train-scale``, ``--predict-quality``) are
:mod:`benchmarks.gnn_scale`'s, run from here or with ``python -m benchmarks.gnn_scale``:

1. **Graph Segment Training versus full-graph training** on whole (unpruned) synthetic ``xla`` layout graphs of
   growing size: peak memory and seconds per epoch side by side, with the ratio full / GST; then the valid
   Kendall tau both reach on a small generated world of such graphs (``GNNModel(hops="all")``). With
   ``--gst-study`` only (long), part 1c: that gap taken apart one cause at a time (:data:`GST_STUDY`).
2. **Throughput**: configs per second of training steps (forward, backward, optimiser) for the default layout model
   (hops 1, demo world) with and without cross-config attention and for tile, and of prediction
   (:func:`models.gnn.train.predict_scores`); layout training with attention also with the plain forward pass
   beside the deduplicating one (:func:`models.gnn.infer.dedup_scores`), and their ratio. Runs on CUDA when available (``resolve_device("auto")``).
3. **Ablation** (only with ``--ablation``; long): ``layout:xla:default`` with pruning depth hops 1, 3, 5, whole
   graph (all with -1 padding) and hops 1 without padding; valid Kendall tau, train seconds and mean nodes per
   graph after pruning, per seed.
4. **Prediction at full scale** (only with ``--predict-scale``): ``model.predict`` of ``gnn-attn`` and ``gnn`` on a
   layout graph the size of the largest real ones (``--predict-configs``, ``--before DIR``, ``--profile``).
6. **Training at full scale** (only with ``--train-scale``): training steps on the graph of part 4, deduplicated
   beside the plain forward pass.
5. **Prediction settings and quality** (only with ``--predict-quality``; long): ``gnn-attn`` on each layout
   collection of ``--data`` scored with several (``predict_batch``, ``tta``) pairs.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Literal

from benchmarks import gnn_scale
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

MODULE = "benchmarks.gnn"
GST_SEGMENT = 2000


def _opt(value: str) -> int | None:
    return None if value == "None" else int(value)


def _hops(value: str) -> int | Literal["all"]:
    return "all" if value == "all" else int(value)


# -- synthetic graphs -------------------------------------------------------------------------------------------


def _write_graph(path: Path, secret: Path, target: int, configs: int, seed: int) -> int:
    """One whole synthetic ``xla`` layout graph of about ``target`` nodes (world writer); returns its node count."""
    import numpy as np

    from competition.synthetic.programs import build_program
    from competition.synthetic.writers import write_layout_graph

    rng = np.random.default_rng([seed, target])
    module = build_program("xla", rng, target)
    write_layout_graph(path, secret, module, "random", configs, rng)
    return int(module.num_nodes)


def part_graphs(out: Path, configs: int, sizes: list[int]) -> dict:
    """Write one graph per size under ``out`` (``g<size>.npz``)."""
    out.mkdir(parents=True, exist_ok=True)
    nodes = {}
    for size in sizes:
        nodes[str(size)] = _write_graph(out / f"g{size}.npz", out / f"g{size}.secret.npz", size, configs, seed=0)
    return {"nodes": nodes}


def part_world(out: Path, train_sizes: list[int], valid_sizes: list[int], configs: int) -> dict:
    """A small ``layout:xla:random`` world of whole graphs (train and valid splits) in the Kaggle layout."""
    from competition.collections import Collection
    from competition.synthetic.writers import KAGGLE_SUBDIR, SECRET_SUBDIR

    rel = Path(Collection.LAYOUT_XLA_RANDOM.relpath)
    nodes: dict[str, list[int]] = {"train": [], "valid": []}
    for split, sizes in (("train", train_sizes), ("valid", valid_sizes)):
        for i, size in enumerate(sizes):
            stem = f"g{i}_{size}"
            path = out / KAGGLE_SUBDIR / rel / split / f"{stem}.npz"
            secret = out / SECRET_SUBDIR / rel / split / f"{stem}.npz"
            path.parent.mkdir(parents=True, exist_ok=True)
            secret.parent.mkdir(parents=True, exist_ok=True)
            nodes[split].append(_write_graph(path, secret, size, configs, seed=1 + (split == "valid")))
    return {"nodes": nodes}


# -- part 1: GST versus full graph --------------------------------------------------------------------------------


def part_gst(path: Path, segment_size: int | None, steps: int, configs: int, hidden: int, layers: int) -> dict:
    """Train on one whole graph, full-graph or GST, with the training loop's code path: one warm-up step, then a
    timed epoch of ``steps`` steps. Peak RSS over the whole process."""
    import numpy as np
    import torch

    from competition.collections import Collection
    from competition.reader import load_graph
    from features.data import graph_to_data
    from features.transforms import DropConstantColumns, Normalize
    from models.gnn.config import DEFAULTS
    from models.gnn.gst import HistoryTable
    from models.gnn.losses import get_loss
    from models.gnn.model import feature_pipeline
    from models.gnn.net import make_segments
    from models.gnn.steps import Item, Slot, resolve_device, seed_everything, training_step

    device = resolve_device("auto")
    graph = load_graph(path, Collection.LAYOUT_XLA_RANDOM)
    data = feature_pipeline("layout", "all", True, False)(graph_to_data(graph))
    columns = DropConstantColumns().fit([data])
    normalize = Normalize().fit([columns(data.clone())])
    data = normalize(columns(data))
    item = Item(path.stem, make_segments(data, segment_size), data.config_feat, data.y.double())
    del graph, data
    cfg = replace(DEFAULTS["layout"].with_(hidden=hidden, layers=layers, configs_per_graph=configs,
                                           segment_size=segment_size, backprop_segments=1, keep_prob=0.5),
                  num_features=int(item.segments[0].x.shape[1]))
    seed_everything(cfg.train.seed)
    net = cfg.make_net().to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    loss_fn = get_loss(cfg.train.loss)
    gen = torch.Generator().manual_seed(0)
    np_rng = np.random.default_rng(0)
    table = HistoryTable()
    segs = [s.to(device) for s in item.segments]
    on_device = Item(item.key, segs, item.config_feat, item.y)
    gc.collect()
    rss_before = rss_mib()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()

    def epoch(n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):  # the same step as models.gnn.train.train
            training_step(net, [Slot(0, on_device, gen, np_rng)], cfg, opt, loss_fn, table, device=device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    first = epoch(1)
    second = epoch(steps)
    return {"nodes": item.num_nodes, "segments": len(segs), "first_s": first, "epoch_s": second,
            "rss_before": rss_before, "peak_mib": peak_mib(), "table_kib": table.nbytes() / 1024,
            "cuda_peak_mib": torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None,
            "device": str(device)}


def part_quality(world: Path, cache: Path, segment_size: int | None, epochs: int, seed: int,
                 backprop_segments: int = 1, keep_prob: float = 0.5, gst_finetune_epochs: int = 0) -> dict:
    """Fit ``GNNModel(hops="all")`` full-graph or GST on the small world; valid Kendall tau two ways."""
    import numpy as np

    from competition.collections import Collection
    from competition.dataroot import find_data_root
    from competition.dataset import open_collection
    from models.gnn.model import GNNModel

    root = find_data_root(world)
    c = Collection.LAYOUT_XLA_RANDOM
    model = GNNModel(hops="all", segment_size=segment_size, hidden=32, layers=3, configs_per_graph=16,
                     steps_per_graph=2, epochs=epochs, patience=epochs, train_configs="all",
                     runs_dir=None, cache_dir=str(cache), seed=seed, backprop_segments=backprop_segments,
                     keep_prob=keep_prob, gst_finetune_epochs=gst_finetune_epochs,
                     refit=False)  # the valid tau is the early-stopped network's; a refit would only add time
    t0 = time.perf_counter()
    model.fit(open_collection(root, c), progress=False)
    seconds = time.perf_counter() - t0
    taus = _valid_taus(model, root, c)
    return {"best_metric": model.best_metric_, "best_epoch": model.best_epoch_, "rescored": float(np.mean(taus)),
            "seconds": seconds, "peak_mib": peak_mib()}


# -- part 2: throughput -------------------------------------------------------------------------------------------


def part_throughput(data: Path, collection: str, attention: bool, max_graphs: int, dedup: bool = True) -> dict:
    """Configs per second of training steps and of prediction for the default model of ``collection``; with
    ``dedup`` off, layout training steps take the plain forward pass (every config through every node) instead of
    :func:`models.gnn.infer.dedup_scores`, for the side-by-side ratio."""
    import torch
    from torch_geometric.transforms import Compose

    from competition.collections import Collection, Split
    from competition.dataroot import find_data_root
    from competition.dataset import open_split
    from features.cache import ProcessedGraphs
    from features.transforms import DedupConfigs, DropConstantColumns, Normalize
    from models.gnn.config import default_config
    from models.gnn.model import settings_pipeline
    from models.gnn.net import make_segments
    from models.gnn.steps import Item, predict_scores, resolve_device
    from models.gnn.train import train

    if not dedup:
        use_plain_forward()
    device = resolve_device("auto")
    c = Collection(collection)
    d = default_config(c)
    pipeline = settings_pipeline(d)
    ds = ProcessedGraphs(open_split(find_data_root(data), c, Split.TRAIN),
                         pre_transform=Compose([pipeline, DedupConfigs("min")]), cache_dir=BENCH_CACHE,
                         max_configs=d.max_train_configs, progress=False)
    ds.build()
    datas = [ds[i] for i in range(min(len(ds), max_graphs))]
    columns = DropConstantColumns().fit(datas)
    normalize = Normalize().fit(columns(x.clone()) for x in datas)
    items = []
    for x in datas:
        x = normalize(columns(x.clone()))
        items.append(Item(x.stem, make_segments(x, None), x.config_feat, x.y.double()))
    items = [it for it in items if it.num_configs >= 2]
    cfg = replace(d, num_features=int(items[0].segments[0].x.shape[1]), attention=attention, epochs=2,
                  steps_per_graph=1, patience=10)
    result = train(cfg, items, [], device=device, progress=False)
    # Epoch 2 alone (epoch 1 warms up); history seconds are cumulative.
    seconds = result.history[1]["seconds"] - result.history[0]["seconds"]
    net = cfg.make_net().to(device)
    net.load_state_dict(result.state)
    predicted = 0
    t0 = time.perf_counter()
    for it in items:
        segs = [s.to(device) for s in it.segments]
        predict_scores(net, segs, it.config_feat, batch=cfg.predict.predict_batch, orderings=1, device=device)
        predicted += it.num_configs
    if device.type == "cuda":
        torch.cuda.synchronize()
    predict_s = time.perf_counter() - t0
    return {"device": str(device), "graphs": len(items), "steps": len(items),
            "mean_nodes": sum(it.num_nodes for it in items) / len(items),
            "train_cps": sum(min(cfg.train.configs_per_graph, it.num_configs) for it in items) / seconds,
            "train_s": seconds,
            "predict_cps": predicted / predict_s, "predicted": predicted, "peak_mib": peak_mib(),
            "threads": torch.get_num_threads()}


def _valid_taus(model, root, collection) -> list[float]:
    """Kendall tau of ``model.predict`` over every config of each valid graph of a layout collection."""
    from competition.collections import Split
    from competition.dataroot import list_graphs
    from competition.metrics import kendall_tau
    from competition.reader import load_graph

    taus = []
    for p in list_graphs(root, collection, Split.VALID):
        g = load_graph(p, collection)
        taus.append(kendall_tau(model.predict(g), g.config_runtime))
    return taus


# -- part 3: ablation ---------------------------------------------------------------------------------------------


def part_ablation(data: Path, hops: int | Literal["all"], pad: bool, seed: int, epochs: int) -> dict:
    """``GNNModel`` on ``layout:xla:default`` with one pruning depth / padding; valid tau two ways."""
    import numpy as np
    from torch_geometric.transforms import Compose

    from competition.collections import Collection, Split
    from competition.dataroot import find_data_root
    from competition.dataset import open_collection, open_split
    from features.cache import ProcessedGraphs
    from features.transforms import DedupConfigs
    from models.gnn.config import DEFAULTS
    from models.gnn.model import GNNModel, feature_pipeline

    root = find_data_root(data)
    c = Collection.LAYOUT_XLA_DEFAULT
    model = GNNModel(hops=hops, pad=pad, epochs=epochs, patience=epochs, runs_dir=None, cache_dir=BENCH_CACHE,
                     seed=seed)
    t0 = time.perf_counter()
    model.fit(open_collection(root, c), progress=False)
    seconds = time.perf_counter() - t0
    taus = _valid_taus(model, root, c)
    ds = ProcessedGraphs(open_split(root, c, Split.TRAIN),
                         pre_transform=Compose([feature_pipeline("layout", hops, pad, False),
                                                DedupConfigs("min")]),
                         cache_dir=BENCH_CACHE, max_configs=DEFAULTS["layout"].max_train_configs, progress=False)
    stats = [g["stats"] for g in ds.manifest()["graphs"].values()]
    return {"best_metric": model.best_metric_, "best_epoch": model.best_epoch_, "rescored": float(np.mean(taus)),
            "fit_s": seconds, "train_s": model.history_[-1]["seconds"],
            "mean_nodes": float(np.mean([s["num_nodes"] for s in stats])),
            "mean_nodes_before": float(np.mean([s["num_nodes_before"] for s in stats])), "peak_mib": peak_mib()}


# -- main ---------------------------------------------------------------------------------------------------------


def _run_part(*args: object) -> dict:
    return run_part(MODULE, *(str(a) for a in args))


def _dispatch(part: list[str]) -> dict:
    name, *a = part
    if name == "graphs":
        return part_graphs(Path(a[0]), int(a[1]), [int(x) for x in a[2:]])
    if name == "world":
        split = a.index("valid")
        return part_world(Path(a[0]), [int(x) for x in a[2:split]], [int(x) for x in a[split + 1:]], int(a[1]))
    if name == "gst":
        return part_gst(Path(a[0]), _opt(a[1]), int(a[2]), int(a[3]), int(a[4]), int(a[5]))
    if name == "quality":
        extra = (int(a[5]), float(a[6]), int(a[7])) if len(a) > 5 else ()  # backprop, keep_prob, fine-tuning
        return part_quality(Path(a[0]), Path(a[1]), _opt(a[2]), int(a[3]), int(a[4]), *extra)
    if name == "throughput":
        return part_throughput(Path(a[0]), a[1], a[2] == "1", int(a[3]), a[4] == "1")
    if name == "ablation":
        return part_ablation(Path(a[0]), _hops(a[1]), a[2] == "1", int(a[3]), int(a[4]))
    raise SystemExit(f"unknown part {name!r}")


def bench_gst(work: Path, quick: bool) -> None:
    sizes = [2500, 10000] if quick else [5000, 10000, 20000, 40000]
    steps, configs, hidden, layers = (2, 16, 32, 3) if quick else (3, 16, 32, 3)
    g = _run_part("graphs", work / "graphs", 200, *sizes)
    print(f"\n1a. GST versus full-graph training: whole synthetic xla layout graphs (200 configs, not pruned), "
          f"hidden {hidden}, {layers} layers, {configs} configs/step, {steps} steps/epoch; GST: segments of "
          f"{GST_SEGMENT} nodes, 1 backpropagated, keep_prob 0.5. Epoch timed after one warm-up step. Peak = process "
          f"peak RSS; +train = peak minus RSS before training.")
    print(f"{'nodes':>7s} {'segs':>5s} | {'full peak':>9s} {'+train':>7s} {'s/epoch':>8s} | {'GST peak':>9s} "
          f"{'+train':>7s} {'s/epoch':>8s} {'1st step':>8s} | {'peak full/GST':>13s} {'+train full/GST':>15s} "
          f"{'time full/GST':>13s}")
    device = ""
    for size in sizes:
        path = work / "graphs" / f"g{size}.npz"
        full = _run_part("gst", path, None, steps, configs, hidden, layers)
        gst = _run_part("gst", path, GST_SEGMENT, steps, configs, hidden, layers)
        device = full["device"]
        ftrain, gtrain = full["peak_mib"] - full["rss_before"], gst["peak_mib"] - gst["rss_before"]
        print(f"{g['nodes'][str(size)]:7,d} {gst['segments']:5d} | {full['peak_mib']:7.0f}Mi {ftrain:5.0f}Mi "
              f"{full['epoch_s']:8.2f} | {gst['peak_mib']:7.0f}Mi {gtrain:5.0f}Mi {gst['epoch_s']:8.2f} "
              f"{gst['first_s']:8.2f} | {full['peak_mib'] / gst['peak_mib']:13.2f} "
              f"{ftrain / max(gtrain, 1.0):15.2f} {full['epoch_s'] / gst['epoch_s']:13.2f}", flush=True)
        if full["cuda_peak_mib"] is not None:
            print(f"{'':7s} CUDA peak allocated: full {full['cuda_peak_mib']:.0f} MiB, GST {gst['cuda_peak_mib']:.0f} MiB")
    print(f"(device: {device})")

    train_sizes = [2000, 2500, 3000, 3500] if quick else [5000, 5500, 6000, 6500, 7000, 8000]
    valid_sizes = [2500, 3000] if quick else [5000, 6500, 8000]
    epochs = 2 if quick else 4
    segment = 1000
    w = _run_part("world", work / "world", 200, *train_sizes, "valid", *valid_sizes)
    print(f"\n1b. Scores reached: GNNModel(hops='all', hidden=32, configs_per_graph=16, steps_per_graph=2, "
          f"epochs={epochs}, seed=0) on a layout:xla:random world of whole graphs "
          f"(train nodes {w['nodes']['train']}, valid nodes {w['nodes']['valid']}, 200 configs each)")
    print(f"{'training':>22s} {'best valid tau':>14s} {'(epoch)':>7s} {'re-scored tau':>13s} {'fit s':>7s} "
          f"{'peak':>8s}")
    for seg in (None, segment):
        q = _run_part("quality", work / "world", work / "cache", seg, epochs, 0)
        label = "full graph" if seg is None else f"GST segment {seg}"
        print(f"{label:>22s} {q['best_metric']:14.4f} {q['best_epoch']:7d} {q['rescored']:13.4f} "
              f"{q['seconds']:7.1f} {q['peak_mib']:6.0f}Mi", flush=True)


GST_STUDY = [
    ("full graph", None, 4, 1, 0.5, 0),
    ("GST (defaults)", 1000, 4, 1, 0.5, 0),
    ("segments, all trained", 1000, 4, 64, 0.5, 0),
    ("GST, no segment dropout", 1000, 4, 1, 1.0, 0),
    ("GST, 3 trained", 1000, 4, 3, 0.5, 0),
    ("GST, 8 epochs", 1000, 8, 1, 0.5, 0),
    ("GST, 16 epochs", 1000, 16, 1, 0.5, 0),
    ("GST, 3 trained, keep all", 1000, 4, 3, 1.0, 0),
    ("GST, keep all, 8 epochs", 1000, 8, 1, 1.0, 0),
    ("GST + head fine-tuning", 1000, 4, 1, 0.5, 2),
]
"""Part 1c's runs: (label, segment_size, epochs, backprop_segments, keep_prob, gst_finetune_epochs). "segments, all
trained" trains every segment every step (no history table, no dropout), so its gap to the full graph is the edges
cut between segments alone; "no segment dropout" keeps every stale embedding; the epoch rows give GST the steps its
4x faster epochs buy; "head fine-tuning" is the GST paper's "+EFD": the defaults, then 2 epochs training the head
alone on every segment's fresh embeddings (kept only when the valid tau does not drop)."""


def bench_gst_study(work: Path, seeds: list[int], rows: list[str] | None = None) -> None:
    """Part 1c: where GST's gap to full-graph training comes from, one cause at a time, on part 1b's world
    (``rows``: the labels of the :data:`GST_STUDY` rows to run, all by default)."""
    import numpy as np

    w = _run_part("world", work / "world", 200, 5000, 5500, 6000, 6500, 7000, 8000, "valid", 5000, 6500, 8000)
    print(f"\n1c. Where GST's gap comes from: part 1b's world (train nodes {w['nodes']['train']}, valid nodes "
          f"{w['nodes']['valid']}), GNNModel(hops='all', hidden=32, configs_per_graph=16, steps_per_graph=2), "
          f"segments of 1,000 nodes; valid Kendall tau over every config, mean over seeds {seeds} (± half range)")
    print(f"{'training':>26s} {'epochs':>6s} {'trained':>7s} {'keep':>5s} {'head ft':>7s} {'valid tau':>16s} "
          f"{'fit s':>7s} {'peak':>8s}")
    for label, seg, epochs, backprop, keep, finetune in GST_STUDY:
        if rows and label not in rows:
            continue
        rs = [_run_part("quality", work / "world", work / "cache", seg, epochs, seed, backprop, keep, finetune)
              for seed in seeds]
        taus = np.array([r["rescored"] for r in rs])
        print(f"{label:>26s} {epochs:6d} {backprop if seg else '-':>7} {keep if seg else '-':>5} "
              f"{finetune if seg else '-':>7} {taus.mean():8.4f} ± {np.ptp(taus) / 2:.4f} "
              f"{np.mean([r['seconds'] for r in rs]):7.1f} {max(r['peak_mib'] for r in rs):6.0f}Mi", flush=True)


def bench_throughput(data: Path, quick: bool) -> None:
    layout_graphs, tile_graphs = (4, 32) if quick else (10, 128)
    rows = [("layout:xla:random", False, True, "layout (hops 1)", layout_graphs),
            ("layout:xla:random", True, True, "layout + attention", layout_graphs),
            ("layout:xla:random", True, False, "  plain forward", layout_graphs),
            ("layout:nlp:random", True, True, "nlp + attention", layout_graphs),
            ("layout:nlp:random", True, False, "  plain forward", layout_graphs),
            ("tile:xla", False, True, "tile", tile_graphs)]
    from models.gnn.config import DEFAULTS

    lay, til = DEFAULTS["layout"], DEFAULTS["tile"]
    print(f"\n2. Throughput: default models (layout hidden {lay.hidden}, tile hidden {til.hidden}, "
          f"{lay.layers} layers, {lay.configs_per_graph} layout / {til.configs_per_graph} tile configs per step) on "
          f"{data} (train split, first {layout_graphs} layout / {tile_graphs} tile graphs, one step per graph; epoch "
          f"2 timed). Layout training steps run each component once per distinct key of the batch "
          f"(dedup_scores); 'plain forward' rows run every config through every node, the ratio is plain / dedup "
          f"training time. Prediction: predict_scores, batch 128, one ordering.")
    print(f"{'model':20s} {'graphs':>6s} {'mean nodes':>10s} {'train cfg/s':>11s} {'ratio':>6s} "
          f"{'predict cfg/s':>13s} {'peak':>8s}")
    device = ""
    dedup_cps = 0.0
    for collection, attention, dedup, label, max_graphs in rows:
        r = _run_part("throughput", data, collection, int(attention), max_graphs, int(dedup))
        device = f"{r['device']} ({r['threads']} torch threads)"
        ratio = f"{dedup_cps / r['train_cps']:6.2f}" if not dedup else f"{'':6s}"
        dedup_cps = r["train_cps"]
        print(f"{label:20s} {r['graphs']:6d} {r['mean_nodes']:10.0f} {r['train_cps']:11.0f} {ratio} "
              f"{r['predict_cps']:13.0f} {r['peak_mib']:6.0f}Mi", flush=True)
    print(f"(device: {device})")


def bench_ablation(data: Path, seeds: list[int], epochs: int) -> None:
    variants = [(1, True), (1, False), (3, True), (5, True), ("all", True)]
    from competition.protocol import DEFAULT_PROTOCOL
    from models.gnn.config import DEFAULTS

    d = DEFAULTS["layout"]
    print(f"\n3. Ablation on layout:xla:default of {data}: GNNModel layout defaults (hidden {d.hidden}, "
          f"{d.layers} layers, lr {d.lr}, {d.loss}, {d.configs_per_graph} configs/step, "
          f"{d.steps_per_graph} steps/graph, {d.train_configs} train configs, valid protocol {DEFAULT_PROTOCOL.tag}), "
          f"epochs={epochs}, patience={epochs}.")
    print(f"{'hops':>5s} {'pad':>4s} {'seed':>4s} {'mean nodes':>10s} {'best tau':>9s} {'(ep)':>4s} "
          f"{'re-scored':>9s} {'train s':>8s} {'fit s':>7s} {'peak':>8s}", flush=True)
    results: dict[tuple, list[dict]] = {}
    for seed in seeds:
        for hops, pad in variants:
            r = _run_part("ablation", data, hops, int(pad), seed, epochs)
            results.setdefault((hops, pad), []).append(r)
            print(f"{hops!s:>5s} {'-1' if pad else 'no':>4s} {seed:4d} {r['mean_nodes']:10.0f} "
                  f"{r['best_metric']:9.4f} {r['best_epoch']:4d} {r['rescored']:9.4f} {r['train_s']:8.1f} "
                  f"{r['fit_s']:7.1f} {r['peak_mib']:6.0f}Mi", flush=True)
    if len(seeds) > 1:
        print(f"\nmean ± half-range over seeds {seeds}")
        print(f"{'hops':>5s} {'pad':>4s} {'best tau':>16s} {'re-scored':>16s} {'train s':>8s}")
        def ms(rs: list[dict], key: str) -> str:
            v = [r[key] for r in rs]
            return f"{sum(v) / len(v):7.4f} ± {(max(v) - min(v)) / 2:.4f}"

        for (hops, pad), rs in results.items():
            print(f"{hops!s:>5s} {'-1' if pad else 'no':>4s} {ms(rs, 'best_metric'):>16s} {ms(rs, 'rescored'):>16s} "
                  f"{sum(r['train_s'] for r in rs) / len(rs):8.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="smaller graphs and fewer steps (under 2 minutes)")
    ap.add_argument("--data", default="data/synthetic-demo", help="world for the throughput part")
    ap.add_argument("--ablation", action="store_true", help="run only the (long) ablation")
    ap.add_argument("--throughput", action="store_true", help="run only part 2 (training and prediction throughput, "
                    "deduplicated layout steps beside the plain forward pass)")
    ap.add_argument("--ablation-data", default="data/synthetic-bench", help="world for the ablation")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="ablation seeds (default 0)")
    ap.add_argument("--epochs", type=int, default=3, help="ablation epochs (default 3)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads in every part (default: torch's)")
    ap.add_argument("--workdir", default=None, help="part 4: scratch folder kept between runs (default: temporary)")
    ap.add_argument("--gst-study", action="store_true",
                    help="run only part 1c: GST against full-graph training, one cause of the gap at a time "
                         "(cut edges, stale or dropped segments, steps), over --seeds (long)")
    ap.add_argument("--gst-rows", nargs="+", default=None, metavar="LABEL", choices=[r[0] for r in GST_STUDY],
                    help="with --gst-study, run only these rows (their labels, quoted): "
                         + "; ".join(r[0] for r in GST_STUDY))
    gnn_scale.add_arguments(ap)  # parts 4 to 6
    args = ap.parse_args()
    if args.part:
        part_threads()
        print(json.dumps(_dispatch(args.part)))
        return
    if args.threads:
        os.environ[THREADS_ENV] = str(args.threads)
    t0 = time.perf_counter()
    if args.ablation:
        bench_ablation(Path(args.ablation_data), args.seeds, args.epochs)
    elif args.gst_study and not args.predict_quality:  # --predict-quality wins over --gst-study
        with scratch(args.workdir, "fastslow-bench-gst-") as work:
            bench_gst_study(work, args.seeds, args.gst_rows)
    elif not gnn_scale.run(args):
        data = Path(args.data)
        if not (data / "world.json").exists():
            from fastslow.pipeline import resolve_data

            resolve_data(None, data, progress=False)
        with scratch(None, "fastslow-bench-gnn-") as work:
            if not args.throughput:
                bench_gst(work, args.quick)
            bench_throughput(data, args.quick)
    print_total(t0)


if __name__ == "__main__":
    main()
