"""Regenerate the README's expected-results table: the app under ``flwr run`` (simulation) for several
seeds at reduced scale, then mean and spread of the final accuracy, bytes per round and wall time per
round (both from the strategy's round records, which the ServerApp prints), as a Markdown table.

    python expected_results.py --digits --seeds 0 1 2 --rounds 5 --nodes 4 --local-epochs 1

``--digits`` writes scikit-learn's bundled digits as FMNIST-shaped images (28x28 gray, columns ``image``
and ``label``, ``train``/``test`` parquet splits) to a temporary folder and runs on them, offline;
without it the run uses the ``dataset`` of the run config (Fashion-MNIST from the Hugging Face Hub).
Needs the repository's ``simulations/apps/reduced_scale.py`` beside this app's folder.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from reduced_scale import run_seeds, table, write_digits  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--fraction-train", type=float, default=0.5)
    parser.add_argument("--local-epochs", type=int, default=1)
    parser.add_argument("--digits", action="store_true", help="run on scikit-learn's digits, offline")
    args = parser.parse_args()
    config = {"num-server-rounds": args.rounds, "fraction-train": args.fraction_train, "local-epochs": args.local_epochs}
    with tempfile.TemporaryDirectory() as tmp:
        if args.digits:
            config["dataset"] = str(write_digits(Path(tmp) / "digits", "mnist"))
        results = run_seeds(HERE, args.nodes, config, args.seeds)
    label = "digits (28x28 gray)" if args.digits else "run config"
    print(table(f"{label}, {args.local_epochs} local epochs, fraction {args.fraction_train}", args.nodes, args.rounds, args.seeds, results))


if __name__ == "__main__":
    main()
