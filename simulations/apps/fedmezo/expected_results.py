"""Regenerate the README's expected-results table: the app under ``flwr run`` (simulation) for several
seeds at reduced scale, then mean and spread of the final test loss (and next-token accuracy),
bytes per round and wall time per round (both from the strategy's round records, which the
ServerApp prints), as a Markdown table.

    python expected_results.py --tiny --seeds 0 1 2 --rounds 10 --nodes 3

``--tiny`` runs offline: a tiny LLaMA-architecture model (hidden size 64, 2 layers, byte-level
tokenizer, briefly pre-trained; flwr-strategies' ``simulations.lm`` builds it once and caches it)
and generated instruction records in Dolly's columns (``instruction``, ``context``, ``response``,
``category``, 8 task categories) written as a parquet folder; LoRA rank 8. Without it the run uses the
run config's model and dataset (OpenLLaMA-3B v2 and Dolly from the Hugging Face Hub: a GPU
machine). Needs the repository's ``simulations/apps/reduced_scale.py`` beside this app's folder.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from reduced_scale import run_seeds, table  # noqa: E402


def write_instructions(folder: Path, n: int = 600, seed: int = 0) -> Path:
    """``n`` generated instruction records in Dolly's columns, one ``train`` parquet split."""
    from datasets import Dataset
    from flwr_strategies.simulations.lm.data import generate_instructions

    records = generate_instructions(n, seed=seed)
    (folder / "data").mkdir(parents=True, exist_ok=True)
    Dataset.from_dict({"instruction": [r["instruction"] for r in records], "context": [r["input"] for r in records],
                       "response": [r["output"] for r in records], "category": [r["category"] for r in records]}
                      ).to_parquet(str(folder / "data" / "train-00000-of-00001.parquet"))
    return folder


def tiny_model() -> Path:
    """The tiny pre-trained LLaMA-architecture model folder (built on first use, then cached)."""
    from flwr_strategies.simulations.lm.model import ensure_tiny_base

    return ensure_tiny_base()


#: The reduced scale of ``--tiny``: LoRA rank 8 on the tiny model, a 10% test split, a larger step.
TINY = {"lora-r": 8, "lora-alpha": 16, "test-fraction": 0.1, "max-length": 320, "eval-every": 5}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--local-steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--tiny", action="store_true", help="a tiny local model and generated data, offline")
    args = parser.parse_args()
    config = {"num-server-rounds": args.rounds, "local-steps": args.local_steps, "batch-size": args.batch_size,
              "lr": args.lr}
    with tempfile.TemporaryDirectory() as tmp:
        if args.tiny:
            config.update(TINY, model=str(tiny_model()), dataset=str(write_instructions(Path(tmp) / "instructions")))
        results = run_seeds(HERE, args.nodes, config, args.seeds)
    label = "tiny LLaMA, generated instructions" if args.tiny else "run config"
    print(table(f"{label}, lr {args.lr}, H {args.local_steps}, batch {args.batch_size}", args.nodes, args.rounds,
                args.seeds, results, metric="loss"))
    print("next-token accuracy per seed: " + ", ".join(f"{s}: {r['accuracy']:.4f}" for s, r in zip(args.seeds, results)))


if __name__ == "__main__":
    main()
