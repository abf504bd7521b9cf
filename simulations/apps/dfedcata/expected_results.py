"""Regenerate the README's expected-results table: the app under ``flwr run`` (simulation) for several
seeds at reduced scale, then mean and spread of the final accuracy, bytes per round and wall time per
round, printed as a Markdown table.

    python expected_results.py --digits --seeds 0 1 2 --rounds 5 --nodes 4

``--digits`` writes scikit-learn's bundled digits as CIFAR-shaped images (32x32 RGB, columns ``img``
and ``label``, ``train``/``test`` parquet splits) to a temporary folder and runs on them, offline;
without it the run uses the ``dataset`` of the run config (CIFAR-10 from the Hugging Face Hub).
Bytes per round count what the peers exchange with the ServerApp: each of the ``--nodes`` peers
receives its start point and sends its model, one float32 model each way.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CENTRAL = re.compile(r"CENTRAL round=(\d+) accuracy=([0-9.]+)")


def write_digits(folder: Path) -> Path:
    """scikit-learn's digits (8x8, upscaled x4 to 32x32, gray to RGB) as a parquet dataset folder."""
    import numpy as np
    from datasets import ClassLabel, Dataset, Features, Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    gray = np.kron(digits.images / 16.0, np.ones((4, 4))) * 255
    images = np.repeat(gray[..., None], 3, axis=-1).astype(np.uint8)
    order = np.random.default_rng(0).permutation(len(images))
    features = Features({"img": Image(), "label": ClassLabel(num_classes=10)})
    (folder / "data").mkdir(parents=True, exist_ok=True)
    for split, idx in (("train", order[297:]), ("test", order[:297])):
        Dataset.from_dict({"img": list(images[idx]), "label": digits.target[idx].tolist()}, features=features
                          ).to_parquet(str(folder / "data" / f"{split}-00000-of-00001.parquet"))
    return folder


def run_once(seed: int, args, dataset: str | None) -> tuple[float, float]:
    """One ``flwr run``: (final accuracy, wall seconds per round between the first and last evaluation)."""
    config = (f"num-server-rounds={args.rounds} local-epochs={args.local_epochs} batch-size={args.batch_size} "
              f'topology="{args.topology}" seed={seed}' + (f' dataset="{dataset}"' if dataset else ""))
    cmd = ["flwr", "run", ".", "--stream", "--federation-config", f"num-supernodes={args.nodes}", "--run-config", config]
    proc = subprocess.Popen(cmd, cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: dict[int, tuple[float, float]] = {}
    log = []
    for line in proc.stdout:
        log.append(line)
        match = CENTRAL.search(line)
        if match:
            seen[int(match.group(1))] = (float(match.group(2)), time.perf_counter())
    if proc.wait() != 0 or args.rounds not in seen or 0 not in seen:
        sys.exit(f"seed {seed}: flwr run failed (rc={proc.returncode})\n{''.join(log[-40:])}")
    return seen[args.rounds][0], (seen[args.rounds][1] - seen[0][1]) / args.rounds


def model_bytes() -> int:
    sys.path.insert(0, str(HERE))
    from dfedcata_app.task import Net

    return sum(p.numel() * p.element_size() for p in Net().state_dict().values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--local-epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--topology", default="ring")
    parser.add_argument("--digits", action="store_true", help="run on scikit-learn's digits, offline")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dataset = str(write_digits(Path(tmp) / "digits")) if args.digits else None
        results = [run_once(seed, args, dataset) for seed in args.seeds]
    accs = [a for a, _ in results]
    walls = [w for _, w in results]
    spread = statistics.stdev(accs) if len(accs) > 1 else 0.0
    print(f"| data | nodes | rounds | seeds | final accuracy (mean ± sd) | bytes per round | wall s per round |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {'digits (32x32 RGB)' if args.digits else 'run config'} | {args.nodes} | {args.rounds} | "
          f"{' '.join(map(str, args.seeds))} | {statistics.mean(accs):.3f} ± {spread:.3f} | "
          f"{2 * args.nodes * model_bytes():,} | {statistics.mean(walls):.2f} |")
    print("per seed:", ", ".join(f"{s}: {a:.4f}" for s, a in zip(args.seeds, accs)))


if __name__ == "__main__":
    main()
