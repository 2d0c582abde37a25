"""Rank the memory layouts of your own JAX program with a saved fastslow model, end to end:
lower it to HLO, featurize it (`fastslow featurize`), check the files (`fastslow data validate --deep`), and rank
every sampled layout (`fastslow predict`) with the runs `fastslow train` (or `make submit`) saved.

    python examples/rank_a_jax_program.py --runs-dir runs --models gbdt --out rankings.csv

Replace ``program`` below with your own function and example inputs.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path


def program():
    """The function to rank layouts for, and example inputs (shapes and dtypes are what matter)."""
    import jax
    import jax.numpy as jnp

    def mlp(x, w1, w2):
        return jnp.tanh(jax.nn.relu(x @ w1) @ w2).sum()

    return mlp, (jnp.zeros((64, 128)), jnp.zeros((128, 256)), jnp.zeros((256, 32)))


def fastslow(*args: str) -> None:
    print("$ fastslow", " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "fastslow.cli", *args], check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs-dir", default="runs", help="where the saved runs are (default: %(default)s)")
    parser.add_argument("--models", nargs="+", default=["gbdt"], help="saved models to rank with")
    parser.add_argument("--sample", type=int, default=50, help="layouts sampled beside the default one")
    parser.add_argument("--out", default="rankings.csv", help="the ranking CSV (ID,Ranking)")
    args = parser.parse_args()

    import jax

    f, inputs = program()
    with tempfile.TemporaryDirectory() as tmp:
        hlo = Path(tmp) / "my_program.hlo"
        hlo.write_text(jax.jit(f).lower(*inputs).as_text(dialect="hlo"))
        root = Path(tmp) / "root"
        fastslow("featurize", str(hlo), "--out", str(root), "--what", "layout", "--sample", str(args.sample))
        fastslow("data", "validate", "--data", str(root), "--splits", "test", "--deep", "--no-progress")
        files = sorted(str(p) for p in root.rglob("*.npz"))
        fastslow("predict", *files, "--runs-dir", args.runs_dir, "--models", *args.models, "--out", args.out,
                 "--no-progress")
    print(f"rankings written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
