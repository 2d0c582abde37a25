"""The package's modules import each other without circles: every import, at the top or inside a function, counts
(a lazy import only hides a circle); imports under ``if TYPE_CHECKING:`` do not run and are left out."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fastslow", "competition", "features", "models")


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (``from a.b import c`` counts as ``a.b``, or ``a.b.c`` when that
    is a module)."""
    files = {_module(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom) or _type_checking_only(node, parents):
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif node.module is not None and node.level == 0:
                names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module
                         for a in node.names]
            else:
                continue
            graph[mod] |= {n for n in names if n in files and n != mod}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycles_are_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_import_circles():
    graph = import_graph()
    assert "competition.reader" in graph and "competition.labels" in graph["fastslow.pipeline"] | {
        "competition.labels"}
    assert cycles(graph) == []


def test_the_import_layers_hold():
    """import-linter's contracts (pyproject.toml): the app over models over features over the competition, and
    inside the competition the synthetic world over the real programs over the format."""
    import subprocess
    import sys

    linter = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(linter), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "2 kept, 0 broken" in result.stdout


# What the tabular models' commands import: neither torch nor PyTorch Geometric (seconds of CPU in every process),
# and random or default-first not LightGBM either. Run in a process of its own, which imports only what it runs.
_TABULAR_RUN = r"""
import sys

def loaded():
    return sorted(m for m in ("lightgbm", "torch", "torch_geometric") if m in sys.modules)

import features.tabular_layout, features.tabular_tile, models.baselines, models.registry
from models.registry import MODELS, available_models
assert "gbdt" in MODELS and len(MODELS) == 5 and available_models() == sorted(MODELS), available_models()
assert loaded() == [], loaded()

from fastslow.cli import main

world, runs, out = sys.argv[1:]
assert main(["data", "synth", "--scale", "tiny", "--out", world, "--collections", "tile:xla", "--no-progress"]) == 0
for model in ("random", "default-first"):
    try:
        main(["train", "--model", model, "--data", world, "--runs-dir", runs, "--param", f"{model}.nope=1"])
    except SystemExit as exc:
        assert exc.code == 2, exc.code
    else:
        raise AssertionError("an unknown setting was taken")
    assert main(["train", "--model", model, "--data", world, "--runs-dir", runs, "--no-progress"]) == 0
assert loaded() == [], loaded()
try:
    main(["train", "--model", "gbdt", "--data", world + "-missing"])
except SystemExit as exc:
    assert exc.code == 2, exc.code
assert main(["train", "--model", "gbdt", "--data", world, "--runs-dir", runs, "--no-progress"]) == 0
assert main(["submit", "--models", "random", "default-first", "gbdt", "--data", world, "--runs-dir", runs,
             "--out-dir", out, "--no-progress"]) == 0
assert main(["predict", "--data", world, "--models", "gbdt", "--runs-dir", runs, "--submissions", out,
             "--split", "valid", "--out", out + "/valid.csv", "--no-progress"]) == 0
assert loaded() == ["lightgbm"], loaded()
print("ok")
"""


def test_tabular_models_run_without_torch(tmp_path: Path):
    """``fastslow train``, ``submit`` and ``predict`` with the tabular models (a tiny world's real fits, and their
    refusals), and importing their modules, load neither torch nor PyTorch Geometric; random and default-first not
    LightGBM either."""
    import subprocess
    import sys

    args = [str(tmp_path / "world"), str(tmp_path / "runs"), str(tmp_path / "out")]
    result = subprocess.run([sys.executable, "-c", _TABULAR_RUN, *args], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.endswith("ok\n")


def test_lazy_packages_export_every_name():
    """``features``, ``models`` and ``models.gnn`` import their names on first use (PEP 562): each of ``__all__``
    is there, a name outside it is an ``AttributeError``, and the registry's classes are registered by their
    names."""
    import importlib

    import pytest

    for name in ("features", "models", "models.gnn"):
        package = importlib.import_module(name)
        for export in package.__all__:
            assert getattr(package, export) is not None, (name, export)
            assert export in dir(package)
        with pytest.raises(AttributeError, match="has no attribute 'nope'"):
            package.nope  # noqa: B018
    from models.base import registered_names
    from models.registry import MODELS

    assert list(MODELS) == ["random", "default-first", "gbdt", "gnn", "gnn-attn"]
    assert registered_names() == sorted(MODELS)
    assert all(MODELS[name].name == name for name in MODELS)
    with pytest.raises(KeyError):
        MODELS["nope"]
