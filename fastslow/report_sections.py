"""The sections of ``fastslow report``: each one's table (:func:`html_table`) and plot, from the leaderboard, a
submission's scores, the data and the runs' learning curves; a section whose inputs are missing says why."""

from __future__ import annotations

import csv
import html
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from competition.collections import Collection, Split
from competition.dataroot import DataRoot
from competition.dataset import SplitGraphs, open_split
from competition.errors import printable
from competition.labels import SplitLabels
from fastslow.display import plot_label

PRUNING_MAX_GRAPHS = 64  # per collection: larger collections are measured on an evenly spread sample


CURVE_PANELS_PER_IMAGE = 12


CURVE_COLUMNS = ("epoch", "train_loss", "valid_metric")


SCATTER_MAX_POINTS = 20_000  # per graph: real layout graphs hold up to ~100k configs


SHORT_NAMES = {"tile:xla": "tile", "layout:xla:default": "xla-default", "layout:xla:random": "xla-random",
               "layout:nlp:default": "nlp-default", "layout:nlp:random": "nlp-random"}


def page_text(text: object) -> str:
    """Text from inputs (paths, names, messages) as the page shows it: control characters escaped
    (:func:`competition.errors.printable`), then HTML-escaped."""
    return html.escape(printable(text))


@dataclass
class Section:
    """One section of the page.

    Attributes:
        anchor: the HTML id of the section.
        title: its heading.
        explain: one sentence for a newcomer.
        body: HTML fragments (already escaped), in order.
    """

    anchor: str
    title: str
    explain: str
    body: list[str] = field(default_factory=list)

    def missing(self, why: str) -> None:
        """Say why the section has no content."""
        self.body.append(f'<p class="missing">{page_text(why)}</p>')

    def note(self, text: str) -> None:
        """Add a small note under the section."""
        self.body.append(f'<p class="note">{page_text(text)}</p>')

    def image(self, name: str, alt: str) -> None:
        """Link a PNG written beside ``index.html``."""
        self.body.append(f'<img src="{html.escape(name)}" alt="{html.escape(alt)}">')

    def table(self, header: Sequence[str], rows: Iterable[Sequence[object]], *, table_id: str) -> None:
        """Add a table; floats are written with 4 decimals (``-`` for NaN or ``None``)."""
        self.body.append(html_table(header, rows, table_id=table_id))

    def to_html(self) -> str:
        return (f'<section id="{html.escape(self.anchor)}">\n<h2>{html.escape(self.title)}</h2>\n'
                f'<p class="explain">{html.escape(self.explain)}</p>\n' + "\n".join(self.body) + "\n</section>")


def _cell(value: object) -> tuple[str, bool]:
    """The text of a table cell and whether it is numeric."""
    if value is None:
        return "-", True
    if isinstance(value, bool):
        return str(value).lower(), False
    if isinstance(value, float | np.floating):
        return ("-" if math.isnan(value) else f"{value:.4f}"), True
    if isinstance(value, int | np.integer):
        return f"{int(value):d}", True
    return str(value), False


def html_table(header: Sequence[str], rows: Iterable[Sequence[object]], *, table_id: str) -> str:
    """An HTML table, every cell escaped.

    Args:
        header: column titles.
        rows: cell values; floats are written with 4 decimals, NaN and ``None`` as ``-``.
        table_id: the table's HTML id.

    Returns:
        The ``<table>`` element.
    """
    out = [f'<table id="{html.escape(table_id)}">', "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header)
           + "</tr>"]
    for row in rows:
        cells = []
        for v in row:
            text, numeric = _cell(v)
            cls = ' class="num"' if numeric else ""
            cells.append(f"<td{cls}>{page_text(text)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> None:
    """Save a figure as PNG and close it."""
    plt = _pyplot()
    try:
        fig.savefig(path, dpi=100, format="png", bbox_inches="tight")
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------------------------


def _same_path(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def _float(text: str) -> float:
    return float(text) if text else math.nan


def _combined(row: dict[str, str]) -> float:
    v = _float(row["combined"])
    return -math.inf if math.isnan(v) else v


def leaderboard_rows(rows: Sequence[dict[str, str]], split: Split, root: DataRoot
                     ) -> tuple[list[dict[str, str]], bool]:
    """The rows of one split, restricted to this data root when any row was scored on it.

    Args:
        rows: leaderboard rows (:func:`fastslow.board.read_rows`).
        split: the split.
        root: the data root of the report.

    Returns:
        ``(rows, matched)``: the rows kept, and whether they were restricted to ``root``.
    """
    of_split = [r for r in rows if r["split"] == Split(split).value]
    here = [r for r in of_split if _same_path(r["data"], root.root)]
    return (here, True) if here else (of_split, False)


def best_per_producer(rows: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """The best row (highest combined score; the latest on a tie) of every producer, best first.

    Args:
        rows: leaderboard rows of one split.

    Returns:
        One row per producer, highest combined score first.
    """
    best: dict[str, dict[str, str]] = {}
    for r in rows:
        old = best.get(r["producer"])
        if old is None or _combined(r) >= _combined(old):
            best[r["producer"]] = r
    return sorted(best.values(), key=_combined, reverse=True)


def _existing_file(name: str, leaderboard: Path) -> Path | None:
    for candidate in (Path(name), leaderboard.parent / Path(name).name):
        if candidate.is_file():
            return candidate
    return None


def default_submission(rows: Sequence[dict[str, str]], leaderboard: Path, split: Split) -> tuple[Path | None, str]:
    """The submission to study when none is given.

    The best leaderboard row of the split whose file still exists; else the first ``<split>-*.csv`` beside the
    leaderboard.

    Args:
        rows: leaderboard rows of the split (already restricted to the data root where possible).
        leaderboard: the leaderboard CSV (its folder is searched when no row names an existing file).
        split: the split.

    Returns:
        ``(path or None, how it was chosen)``.
    """
    for r in sorted(rows, key=_combined, reverse=True):
        path = _existing_file(r["file"], leaderboard)
        if path is not None:
            return path, (f"the best {Split(split).value} submission on the leaderboard "
                          f"(producer {r['producer']}, combined {_combined(r):.4f})")
    found = sorted(leaderboard.parent.glob(f"{Split(split).value}-*.csv"))
    if found:
        return found[0], (f"no leaderboard row names an existing {Split(split).value} submission; using "
                          f"{found[0].name}, the first of {len(found)} {Split(split).value}-*.csv in "
                          f"{leaderboard.parent}")
    return None, (f"no submission given, none on the leaderboard {leaderboard} for the {Split(split).value} split, "
                  f"and no {Split(split).value}-*.csv in {leaderboard.parent}")


def read_curves(path: Path) -> dict[str, npt.NDArray[np.float64]]:
    """Read one ``curves.csv`` (``epoch,train_loss,valid_metric,lr,seconds``; empty cells are NaN).

    Args:
        path: the CSV.

    Returns:
        Column name -> float64 values, for every column of the file.

    Raises:
        ValueError: a required column is missing, a cell is not a number, or the file has no rows.
    """
    try:
        return _read_curves(path)
    except (csv.Error, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a readable curves CSV ({type(exc).__name__}: {exc})") from None


def _read_curves(path: Path) -> dict[str, npt.NDArray[np.float64]]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        names = [n.strip() for n in reader.fieldnames or ()]
        missing = [c for c in CURVE_COLUMNS if c not in names]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (found {', '.join(names) or 'none'})")
        cols: dict[str, list[float]] = {n: [] for n in names}
        for n, rec in enumerate(reader, start=2):
            for key, value in rec.items():
                if key is None:
                    raise ValueError(f"{path}: line {n} has more cells than the header")
                text = (value or "").strip()
                try:
                    cols[key.strip()].append(float(text) if text else math.nan)
                except ValueError:
                    raise ValueError(f"{path}: line {n}, column {key}: {text!r} is not a number") from None
    if not cols["epoch"]:
        raise ValueError(f"{path}: no rows")
    return {k: np.asarray(v, dtype=np.float64) for k, v in cols.items()}


# --------------------------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------------------------


def scores_section(out: Path, rows: list[dict[str, str]], matched: bool, root: DataRoot, split: Split,
                    oracle: dict[Collection, float] | None, leaderboard: Path) -> Section:
    sec = Section("scores", "1. Scores per collection, with the oracle ceiling",
                  "Each bar is the best offline score a producer (model) reached on one collection; the black "
                  "mark is the oracle, the score of the true noiseless runtimes, which no model can beat.")
    if not leaderboard.is_file():
        from competition.errors import suggested_command

        score = suggested_command("score", "FILE", "--data", root.root, "--split", split.value, "--leaderboard",
                                  leaderboard)
        sec.missing(f"No leaderboard at {leaderboard}: run `{suggested_command('submit', '--data', root.root)}` or "
                    f"`{score}` first.")
        return sec
    if not rows:
        sec.missing(f"The leaderboard {leaderboard} holds no scoring of the {split.value} split.")
        return sec
    if not matched:
        sec.note(f"No leaderboard row was scored on {root.root}: showing the {split.value} rows of every data root.")
    best = best_per_producer(rows)
    cols = [c for c in Collection if any(r[c.value] for r in best)]
    names = [c.value for c in cols] + ["combined"]

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(7.0, 1.5 * len(names) + 2), 4.5))
    width = 0.8 / len(best)
    x = np.arange(len(names))
    for i, r in enumerate(best):
        y = np.array([_float(r[n]) for n in names])
        ax.bar(x - 0.4 + width * (i + 0.5), np.nan_to_num(y), width, label=plot_label(r["producer"], 30))
    if oracle:
        present = [oracle[c] for c in cols if c in oracle]
        ys = [oracle.get(c, math.nan) for c in cols]
        ys.append(float(np.mean(present)) if len(present) == len(cols) else math.nan)
        ax.hlines(ys, x - 0.45, x + 0.45, colors="black", linewidths=2.5, label="oracle ceiling")
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xticks(x, [SHORT_NAMES.get(n, n) for n in names])
    ax.set_ylabel("score (tile: 2 - slowdown; layout: Kendall tau)")
    ax.set_title(f"best score per producer, {split.value} split")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _save(fig, out / "scores.png")
    sec.image("scores.png", "grouped bar chart of the best score per producer and collection")

    table_rows: list[list[object]] = [[r["producer"], *(_float(r[n]) for n in names), r["split"], Path(r["file"]).name,
                                       r["time"]] for r in best]
    if oracle:
        present = [oracle[c] for c in cols if c in oracle]
        table_rows.append(["oracle ceiling", *(oracle.get(c) for c in cols),
                           float(np.mean(present)) if len(present) == len(cols) else None, split.value, "", ""])
    else:
        sec.note("No oracle ceiling: this data root has no noiseless runtimes (real data).")
    sec.table(["producer", *names, "split", "file", "time"], table_rows, table_id="scores-table")
    return sec


def tau_section(out: Path, report: Any | None, why: str) -> Section:
    sec = Section("per-graph", "2. Per-graph score distribution",
                  "A collection's score is the mean over its graphs, so this shows whether a few bad graphs drag it "
                  "down (layout: Kendall tau of the whole ranking; tile: 2 - slowdown of the best of the first 5).")
    if report is None:
        sec.missing(why)
        return sec
    sec.note(why)
    results = [(c, r) for c, r in report.collections.items() if r.graphs]
    if not results:
        sec.missing("The submission scored no graph.")
        return sec
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(results) + 2), 4.5))
    rng = np.random.default_rng(0)
    data = [np.array([g.score for g in r.graphs]) for _, r in results]
    ax.boxplot(data, positions=np.arange(len(data)), widths=0.5, showfliers=False,
               medianprops={"color": "black"})
    for i, v in enumerate(data):
        ax.scatter(i + rng.uniform(-0.15, 0.15, v.size), v, s=14, alpha=0.6, zorder=3)
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xticks(np.arange(len(data)), [SHORT_NAMES.get(c.value, c.value) for c, _ in results])
    ax.set_ylabel("per-graph score (tile: 2 - slowdown; layout: tau)")
    ax.set_title("per-graph scores: one dot per graph, box = quartiles")
    ax.grid(axis="y", alpha=0.3)
    _save(fig, out / "per-graph.png")
    sec.image("per-graph.png", "strip plot of per-graph scores per collection")
    sec.table(["collection", "metric", "graphs", "mean", "median", "min", "max"],
              [[c.value, "tile score" if c.is_tile else "Kendall tau", len(v), float(v.mean()), float(np.median(v)),
                float(v.min()), float(v.max())] for (c, _), v in zip(results, data, strict=True)],
              table_id="per-graph-table")
    return sec


def _pick_layout_graphs(report: Any, n: int) -> list[Any]:
    """Up to ``n`` layout graph results, taken in turn from each layout collection."""
    queues = [list(r.graphs) for c, r in report.collections.items() if c.is_layout and r.graphs]
    picked: list[Any] = []
    while len(picked) < n and any(queues):
        for q in queues:
            if q and len(picked) < n:
                picked.append(q.pop(0))
    return picked


def rank_section(out: Path, report: Any | None, orders: dict[str, np.ndarray] | None, labels: SplitLabels | None,
                  n: int, why: str) -> Section:
    from scipy.stats import rankdata

    from competition.metrics import order_to_ranks

    sec = Section("ranks", "3. Predicted versus true rank",
                  "Each dot is one configuration of a layout graph: its position in the submitted order against its "
                  "position when sorted by measured runtime; a perfect ranking lies on the diagonal.")
    if report is None or orders is None or labels is None:
        sec.missing(why)
        return sec
    if n <= 0:
        sec.missing("No graph asked for (--graphs 0).")
        return sec
    picked = _pick_layout_graphs(report, n)
    if not picked:
        sec.missing("The submission holds no layout graph.")
        return sec
    plt = _pyplot()
    ncols = min(len(picked), 2)
    nrows = math.ceil(len(picked) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 4.6 * nrows), squeeze=False)
    rng = np.random.default_rng(0)
    table = []
    for ax, g in zip(axes.flat, picked, strict=False):
        lab = labels[g.id]
        order, runtimes = lab.local_order(orders[g.id]), lab.target()  # the scored configs only
        pred = order_to_ranks(order)
        true = rankdata(runtimes, method="average") - 1.0
        shown = np.arange(pred.size)
        if pred.size > SCATTER_MAX_POINTS:
            shown = np.sort(rng.choice(pred.size, SCATTER_MAX_POINTS, replace=False))
        ax.scatter(pred[shown], true[shown], s=6 if pred.size > 500 else 14, alpha=0.5, rasterized=True)
        ax.plot([0, pred.size - 1], [0, pred.size - 1], color="black", lw=0.8, ls="--", label="perfect")
        ax.set_xlabel("predicted rank (0 = predicted fastest)")
        ax.set_ylabel("true rank (0 = fastest)")
        stem = g.stem if len(g.stem) <= 28 else g.stem[:25] + "..."
        ax.set_title(f"{SHORT_NAMES[g.collection.value]}: {plot_label(stem)}\ntau = {g.score:.4f}, {g.num_configs} configs",
                     fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(alpha=0.3)
        table.append([g.id, g.num_configs, g.score, g.opa, g.top1_err])
    for ax in list(axes.flat)[len(picked):]:
        ax.set_visible(False)
    fig.tight_layout()
    _save(fig, out / "ranks.png")
    sec.image("ranks.png", "scatter plots of predicted against true rank")
    if any(g.num_configs > SCATTER_MAX_POINTS for g in picked):
        sec.note(f"Graphs with more than {SCATTER_MAX_POINTS:,} configs show a random sample of that many dots.")
    sec.table(["graph", "configs", "Kendall tau", "OPA", "top-1 error"], table, table_id="ranks-table")
    return sec


def _sampled(graphs: SplitGraphs, limit: int) -> SplitGraphs:
    """At most ``limit`` evenly spread graphs of ``graphs``."""
    if len(graphs) <= limit:
        return graphs
    return graphs.subset(np.linspace(0, len(graphs) - 1, limit).round().astype(int).tolist())


def pruning_section(out: Path, root: DataRoot, collections: Sequence[Collection], progress: bool,
                     max_graphs: int) -> Section:
    sec = Section("pruning", "4. Pruning statistics",
                  "Models see only the configurable nodes of a layout graph and their 1-hop neighbours; this is how "
                  "many nodes and edges that keeps (tile graphs are kept whole).")
    split = Split.TRAIN
    opened = [open_split(root, c, split) for c in collections]
    present = [graphs for graphs in opened if len(graphs)]
    if not present:
        sec.missing(f"No {split.value} graphs under {root.npz_dir}.")
        return sec
    try:
        from features.prune_stats import pruning_stats
        from features.transforms import PruneToConfigurable
    except ImportError as exc:
        sec.missing(f"The feature pipelines cannot be imported ({exc}); install the project with its extras.")
        return sec
    transform = PruneToConfigurable(hops=1, direction="both")
    chosen = [_sampled(graphs, max_graphs) for graphs in present]
    rows = pruning_stats(chosen, transform, progress=progress)
    sampled = {a.collection: (len(a), len(b)) for a, b in zip(chosen, present, strict=True) if len(a) < len(b)}
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    x = np.arange(len(rows))
    labels = [SHORT_NAMES[r.collection.value] for r in rows]
    for ax, what in zip(axes, ("nodes", "edges"), strict=True):
        before = np.array([getattr(r, f"{what}_before") / max(r.graphs, 1) for r in rows])
        after = np.array([getattr(r, f"{what}_after") / max(r.graphs, 1) for r in rows])
        ax.bar(x - 0.2, before, 0.4, label="before pruning")
        ax.bar(x + 0.2, after, 0.4, label="after pruning")
        for xi, b, a in zip(x, before, after, strict=True):
            ax.annotate(f"{a / b:.0%} kept" if b else "-", (xi + 0.2, a), xytext=(0, 3),
                        textcoords="offset points", ha="center", fontsize=7)
        ax.set_ylim(0, 1.25 * max(float(before.max()), 1.0))
        ax.set_xticks(x, labels, rotation=20, ha="right")
        ax.set_ylabel(f"{what} per graph (mean)")
        ax.set_title(f"{what} per graph, {split.value} split")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="upper center", ncol=2)
    fig.tight_layout()
    _save(fig, out / "pruning.png")
    sec.image("pruning.png", "bar charts of nodes and edges per graph before and after pruning")
    sec.note(f"Transform: {transform!r}, applied to the {split.value} split.")
    if sampled:
        sec.note("Measured on a sample of graphs (evenly spread over the file list) to keep the report fast: "
                 + "; ".join(f"{c.value} {n} of {total}" for c, (n, total) in sampled.items()) + ".")
    sec.table(["collection", "graphs", "nodes before", "nodes after", "nodes kept", "edges before", "edges after",
               "edges kept", "transform seconds"],
              [[r.collection.value, r.graphs, r.nodes_before, r.nodes_after,
                f"{r.nodes_after / r.nodes_before:.1%}" if r.nodes_before else "-", r.edges_before, r.edges_after,
                f"{r.edges_after / r.edges_before:.1%}" if r.edges_before else "-", float(r.seconds)] for r in rows],
              table_id="pruning-table")
    return sec


def curves_section(out: Path, runs_dir: Path) -> Section:
    sec = Section("curves", "5. Learning curves",
                  "Each panel is one training run: the training loss (left axis) should fall and the validation "
                  "metric (right axis, higher is better) should rise; a gap that widens means overfitting.")
    from models.gnn.runs import moved_aside

    # The current runs only: a run that one with other settings moved aside is no part of any model now.
    found = runs_dir.rglob("curves.csv") if runs_dir.is_dir() else ()
    files = sorted(f for f in found if not moved_aside(f.relative_to(runs_dir)))
    if not files:
        sec.missing(f"No training runs found under {runs_dir}/ (a GNN training writes "
                    f"{runs_dir}/<model>/<collection>/curves.csv).")
        return sec
    runs: list[tuple[str, dict[str, npt.NDArray[np.float64]]]] = []
    for f in files:
        name = f.parent.relative_to(runs_dir).as_posix() or "."
        try:
            runs.append((name, read_curves(f)))
        except (OSError, ValueError) as exc:
            sec.note(f"Skipped {name}: {exc}")
    if not runs:
        sec.missing(f"None of the {len(files)} curves.csv under {runs_dir}/ could be read.")
        return sec
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    for k in range(0, len(runs), CURVE_PANELS_PER_IMAGE):
        chunk = runs[k:k + CURVE_PANELS_PER_IMAGE]
        ncols = min(len(chunk), 3)
        nrows = math.ceil(len(chunk) / ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(5.0 * ncols, 3.8 * nrows), squeeze=False)
        for ax, (name, cols) in zip(axes.flat, chunk, strict=False):
            ep = cols["epoch"]
            lines = ax.plot(ep, cols["train_loss"], color="C0", marker="o", ms=3, label="train_loss")
            ax.set_xlabel("epoch")
            ax.set_ylabel("train_loss", color="C0")
            ax2 = ax.twinx()
            vm = cols["valid_metric"]
            ok = ~np.isnan(vm)
            lines += ax2.plot(ep[ok], vm[ok], color="C1", marker="s", ms=3, label="valid_metric")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax2.set_ylabel("valid_metric", color="C1")
            shown = plot_label(name)
            ax.set_title(shown if len(shown) <= 45 else "..." + shown[-42:], fontsize=9)
            ax.grid(alpha=0.3)
            for a in (ax, ax2):  # headroom for the legend above the curves
                lo, hi = a.get_ylim()
                a.set_ylim(lo, hi + 0.3 * (hi - lo))
            ax.legend(lines, [ln.get_label() for ln in lines], fontsize=7, loc="upper center", ncol=2)
        for ax in list(axes.flat)[len(chunk):]:
            ax.set_visible(False)
        fig.tight_layout()
        png = "curves.png" if len(runs) <= CURVE_PANELS_PER_IMAGE else f"curves-{k // CURVE_PANELS_PER_IMAGE + 1}.png"
        _save(fig, out / png)
        sec.image(png, "learning curves: train_loss and valid_metric against epoch")

    def _epoch(v: float) -> int | float:
        return int(v) if float(v).is_integer() else float(v)

    def _last(v: npt.NDArray[np.float64]) -> float:
        ok = v[~np.isnan(v)]
        return float(ok[-1]) if ok.size else math.nan

    table = []
    for name, cols in runs:
        vm = cols["valid_metric"]
        best = int(np.nanargmax(vm)) if np.isfinite(vm).any() else None
        seconds = cols.get("seconds")
        table.append([name, int(cols["epoch"].size), _last(cols["train_loss"]), _last(vm),
                      float(vm[best]) if best is not None else None,
                      _epoch(cols["epoch"][best]) if best is not None else None,
                      f"{_last(cols['lr']):.3g}" if "lr" in cols else None,
                      float(np.nansum(seconds)) if seconds is not None else None])
    sec.table(["run", "epochs", "last train_loss", "last valid_metric", "best valid_metric", "at epoch", "last lr",
               "seconds"], table, table_id="curves-table")
    return sec


# --------------------------------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------------------------------
