"""Regenerate the README's expected-results table: the app under ``flwr run`` (simulation) for several
seeds at reduced scale, then mean and spread of the final accuracy of the agents' average model,
bytes per round and wall time per round (both from the strategy's round records, which the
ServerApp prints), as a Markdown table.

    python expected_results.py --digits --seeds 0 1 2 --rounds 100 --nodes 4

``--digits`` writes scikit-learn's bundled digits as MNIST-shaped images (28x28 gray, columns
``image`` and ``label``, ``train``/``test`` parquet splits) to a temporary folder and runs on them,
offline; without it the run uses the ``dataset`` of the run config (MNIST from the Hugging Face Hub).
The seed fixes the initial model and the partition; the agents' coins, minibatches and noise come
from OS entropy (never from the server), so the spread also covers them. Needs the repository's
``simulations/apps/reduced_scale.py`` beside this app's folder.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from reduced_scale import run_seeds, table, write_digits  # noqa: E402

DIGITS_TRAIN = 1500  # the digits' train split, divided evenly among the agents


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--digits", action="store_true", help="run on scikit-learn's digits, offline")
    args = parser.parse_args()
    config = {"num-server-rounds": args.rounds, "lr": args.lr}
    with tempfile.TemporaryDirectory() as tmp:
        if args.digits:
            if DIGITS_TRAIN % args.nodes:
                sys.exit(f"--nodes must divide the {DIGITS_TRAIN} digits evenly (each agent's q is one number)")
            config.update(dataset=str(write_digits(Path(tmp) / "digits", "mnist")),
                          **{"local-dataset-size": DIGITS_TRAIN // args.nodes})
        results = run_seeds(HERE, args.nodes, config, args.seeds)
    label = "digits (28x28 gray)" if args.digits else "run config"
    print(table(f"{label}, lr {args.lr}", args.nodes, args.rounds, args.seeds, results))
    print("final test loss per seed: " + ", ".join(f"{s}: {r['loss']:.4f}" for s, r in zip(args.seeds, results)))
    spent = [re.search(r"PRIVACY epsilon=([0-9.]+) delta=(\S+)", r["log"]) for r in results]
    print("privacy spent per seed (the strategy's accountant): " + ", ".join(
        f"{s}: epsilon {m.group(1)} at delta {m.group(2)}" for s, m in zip(args.seeds, spent)))


if __name__ == "__main__":
    main()
