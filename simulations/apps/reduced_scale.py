"""What the paper apps' ``expected_results.py`` scripts share: offline data in the layout of the
papers' datasets, and the seeds loop that runs an app under ``flwr run`` (simulation) and turns its
printed lines into the README's expected-results table.

Each app's ServerApp prints, per round, ``CENTRAL round=R accuracy=A loss=L`` (its central
evaluation) and ``ROUND round=R bytes_up=U bytes_down=D wall_s=W`` (the strategy's round record:
the array payloads actually sent and received, and the round's wall time), so every number of the
table is one the run measured.
"""

from __future__ import annotations

import re
import statistics
import sys
import tempfile
from pathlib import Path

CENTRAL = re.compile(r"CENTRAL round=(\d+) accuracy=([0-9.]+) loss=([0-9.naninf]+)")
ROUND = re.compile(r"ROUND round=(\d+) bytes_up=(\d+) bytes_down=(\d+) wall_s=([0-9.]+)")

#: Image layouts: CIFAR-10 (``img``, 32x32 RGB) and MNIST / Fashion-MNIST (``image``, 28x28 gray).
LAYOUTS = {"cifar": ("img", 32, "RGB"), "mnist": ("image", 28, "L")}


def write_digits(folder: Path, layout: str = "cifar") -> Path:
    """scikit-learn's bundled digits (1,797 8x8 images) resized to the paper dataset's image layout,
    as a Flower Datasets folder of ``train`` (1,500) and ``test`` (297) parquet splits."""
    import numpy as np
    from datasets import ClassLabel, Dataset, Features, Image
    from PIL import Image as PILImage
    from sklearn.datasets import load_digits

    key, size, mode = LAYOUTS[layout]
    digits = load_digits()
    gray = [PILImage.fromarray((img * 255 / 16).astype(np.uint8)).resize((size, size), PILImage.NEAREST)
            for img in digits.images]
    images = [g.convert(mode) for g in gray]
    order = np.random.default_rng(0).permutation(len(images))
    features = Features({key: Image(), "label": ClassLabel(num_classes=10)})
    (folder / "data").mkdir(parents=True, exist_ok=True)
    for split, idx in (("train", order[297:]), ("test", order[:297])):
        Dataset.from_dict({key: [images[i] for i in idx], "label": digits.target[idx].tolist()}, features=features
                          ).to_parquet(str(folder / "data" / f"{split}-00000-of-00001.parquet"))
    return folder


def run_seeds(app_dir: Path, nodes: int, config: dict, seeds: list[int], timeout: float = 3600) -> list[dict]:
    """One ``flwr run`` per seed in Flower's simulation runtime, on a private local SuperLink
    (flwr-strategies' ``LocalSimulation``: its own ``FLWR_HOME`` and ports, stopped at the end).
    Per seed: the final round's central accuracy and loss, the per-round means of bytes (sent +
    received) and wall seconds from the strategy's round records, and the run's output."""
    from flwr_strategies.simulations.deployment import LocalSimulation

    out = []
    with tempfile.TemporaryDirectory() as tmp, LocalSimulation(tmp) as sim:
        for seed in seeds:
            res = sim.flwr_run(app_dir, {**config, "seed": seed}, timeout=timeout,
                               federation_config={"num-supernodes": nodes})
            log = res.stdout + res.stderr
            central: dict[int, tuple[float, float]] = {}
            for m in CENTRAL.finditer(log):
                central.setdefault(int(m.group(1)), (float(m.group(2)), float(m.group(3))))
            rounds = {int(m.group(1)): (int(m.group(2)) + int(m.group(3)), float(m.group(4)))
                      for m in ROUND.finditer(log) if int(m.group(1)) >= 1}  # round 0: evaluation only
            last = int(config["num-server-rounds"])
            if res.returncode != 0 or last not in central or not rounds:
                sys.exit(f"seed {seed}: flwr run failed (rc={res.returncode})\n{log[-4000:]}\n{sim.all_logs()}")
            out.append({"accuracy": central[last][0], "loss": central[last][1],
                        "bytes": statistics.mean(b for b, _ in rounds.values()),
                        "wall": statistics.mean(w for _, w in rounds.values()), "log": log})
    return out


def table(label: str, nodes: int, rounds: int, seeds: list[int], results: list[dict], metric: str = "accuracy") -> str:
    """The README's Markdown table: mean ± sd over the seeds of the final ``metric``, bytes and wall
    seconds per round (means over rounds and seeds), and the per-seed values."""
    values = [r[metric] for r in results]
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    rows = [f"| data | nodes | rounds | seeds | final {metric} (mean ± sd) | bytes per round | wall s per round |",
            "|---|---|---|---|---|---|---|",
            f"| {label} | {nodes} | {rounds} | {' '.join(map(str, seeds))} | {statistics.mean(values):.3f} ± "
            f"{spread:.3f} | {round(statistics.mean(r['bytes'] for r in results)):,} | "
            f"{statistics.mean(r['wall'] for r in results):.2f} |",
            "per seed: " + ", ".join(f"{s}: {v:.4f}" for s, v in zip(seeds, values))]
    return "\n".join(rows)
