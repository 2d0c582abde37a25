"""The zoo of real JAX programs as a source of the synthetic world: each model lowers and reads into a Module with
its kind of ops, a jax world is deterministic and valid, and a generator world is what it was."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from competition import Collection, Split
from competition.dataroot import find_data_root, list_graphs, validate_root
from competition.graphfile import validate_file
from competition.hlo.features import featurize
from competition.synthetic.layout_physics import LayoutProblem
from competition.synthetic.world import generate_world

if importlib.util.find_spec("jax") is None:  # looked for, not imported: jax runs only in processes of its own
    pytest.skip("could not import 'jax'", allow_module_level=True)

# jax starts threads when imported, and a process that forks after that may deadlock (the world's worker pool
# forks): the programs are lowered, and jax worlds generated, in processes of their own.
LOWER = """
import pathlib, sys
from competition.synthetic.jax_programs import lower_text, zoo_examples
out = pathlib.Path(sys.argv[1])
for name, (spec, depth) in zoo_examples().items():
    (out / f"{name}.hlo").write_text(lower_text(spec, depth))
    (out / f"{name}.name").write_text(spec.name(depth))
"""

SYNTH = ["--scale", "tiny", "--collections", "layout:xla:random", "layout:nlp:default", "tile:xla",
         "--limit", "1", "--tile-limit", "8", "--workers", "1", "--no-progress"]


def _synth(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fastslow", "data", "synth", "--out", str(out), *SYNTH, *extra],
                          capture_output=True, text=True, timeout=300)


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    from competition.hlo.text import parse_hlo_text

    folder = tmp_path_factory.mktemp("zoo")
    subprocess.run([sys.executable, "-c", LOWER, str(folder)], check=True, timeout=300)
    return {p.stem: parse_hlo_text(p.read_text(), source=p.name) for p in sorted(folder.glob("*.hlo"))}


def _ops(module) -> Counter:
    return Counter(ins.opcode for ins in module.instructions())


@pytest.mark.parametrize(("name", "wanted"), [
    ("mlp", {"dot", "reshape", "broadcast", "maximum", "sqrt"}),
    ("resnet", {"convolution", "reduce-window", "reshape", "maximum", "convert"}),
    ("transformer", {"dot", "reshape", "transpose", "gather", "exponential", "tanh"}),
    ("unet", {"convolution", "concatenate", "reduce-window", "reshape"}),
    ("mlp_train", {"dot", "transpose", "select", "compare", "tuple"}),
    ("resnet_train_loop", {"while", "convolution", "select-and-scatter", "reverse", "get-tuple-element"}),
])
def test_each_model_reads_into_a_module_with_its_ops(zoo, name, wanted):
    module = zoo[name]
    assert wanted <= set(_ops(module)), wanted - set(_ops(module))
    graph = featurize(module)
    assert graph.node_feat.shape == (module.num_nodes, 140)
    problem = LayoutProblem.from_module(module)
    assert problem.node_config_ids.size > 0  # convolution, dot or reshape nodes to configure


def test_training_steps_hold_the_gradients(zoo):
    # The backward pass adds a dot per forward dot and weight gradient; a convolution's gradients are
    # convolutions too, and the step loops in a while whose body is a computation of its own.
    assert _ops(zoo["mlp_train"])["dot"] >= 2 * _ops(zoo["mlp"])["dot"]
    assert _ops(zoo["resnet_train_loop"])["convolution"] >= 2 * _ops(zoo["resnet"])["convolution"]
    assert len(zoo["resnet_train_loop"].computations) > len(zoo["resnet"].computations) + 1


@pytest.fixture(scope="module")
def jax_worlds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("jaxworlds")
    for k in (1, 2):
        done = _synth(base / f"w{k}", "--programs", "jax", "--seed", "5")
        assert done.returncode == 0, done.stderr
    return base / "w1", base / "w2"


@pytest.mark.slow
def test_a_jax_world_is_deterministic_and_valid(jax_worlds):
    a, b = jax_worlds
    assert _digest(a) == _digest(b)
    assert json.loads((a / "world.json").read_text())["config"]["programs"] == "jax"
    root = find_data_root(a)
    cols = [Collection.LAYOUT_XLA_RANDOM, Collection.LAYOUT_NLP_DEFAULT, Collection.TILE_XLA]
    assert validate_root(root, cols, list(Split)) == []
    stems = []
    for c in cols:
        for s in Split:
            paths = list_graphs(root, c, s)
            assert paths, (c, s)
            stems += [p.stem for p in paths if s != Split.TEST]
            for p in paths:
                assert validate_file(p, c, deep=True) == []
    assert all(s.startswith("jax_") for s in stems), stems


def test_the_generator_world_is_unchanged_by_the_option(tmp_path):
    plain = generate_world(tmp_path / "plain", scale="tiny", seed=2, collections=["layout:xla:random", "tile:xla"],
                           limit=1, tile_limit=8, workers=1, progress=False)
    named = generate_world(tmp_path / "named", scale="tiny", seed=2, collections=["layout:xla:random", "tile:xla"],
                           limit=1, tile_limit=8, workers=1, progress=False, programs="generator")
    assert _digest(plain) == _digest(named)
    # world.json names no program source for the generator's worlds: the keys of a generator world, no more.
    config = json.loads((plain / "world.json").read_text())["config"]
    assert sorted(config) == ["collections", "generator", "limit", "scale", "seed", "tile_limit"]


def test_unknown_program_source_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown program source"):
        generate_world(tmp_path / "w", scale="tiny", programs="tf", progress=False)


def test_missing_jax_is_one_line(tmp_path):
    code = ("import sys, importlib.util; real = importlib.util.find_spec\n"
            "importlib.util.find_spec = lambda n, *a: None if n == 'jax' else real(n, *a)\n"
            "from fastslow.cli import main; sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", code, "data", "synth", "--out", str(tmp_path / "w"), *SYNTH,
                           "--programs", "jax"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "jax is not installed" in done.stderr, done.stderr
    assert not (tmp_path / "w").exists()
