"""Run one experiment end to end: backend, progress bar, ``results.json``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .backends import run_backend
from .experiment import ExperimentConfig, get_experiment
from .results import package_versions, summarize, write_json


class _Progress:
    """A tqdm bar over rounds showing accuracy and elapsed time."""

    def __init__(self, cfg: ExperimentConfig, label: str | None = None) -> None:
        self.bar = None
        if cfg.progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=cfg.rounds, desc=label or cfg.method, unit="round", leave=True)

    def __call__(self, rec: dict[str, Any]) -> None:
        if self.bar is None or rec["round"] == 0:
            return
        post = {"round": rec["round"]}
        if rec.get("accuracy") is not None:
            post["acc"] = f"{rec['accuracy']:.4f}"
        if rec.get("failures"):
            post["failed"] = rec["failures"]
        self.bar.set_postfix(post)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_experiment(cfg: ExperimentConfig, *, label: str | None = None, target: float | None = None, verbose: bool = False) -> dict[str, Any]:
    """Run ``cfg`` on its backend and return (and write to ``cfg.out``) the results dict."""
    cfg.validate()
    t0 = time.perf_counter()
    exp = get_experiment(cfg)
    progress = _Progress(cfg, label)
    try:
        strategy, timing = run_backend(cfg, on_round_end=progress, verbose=verbose)
    finally:
        progress.close()
    rounds = strategy.rounds
    results = {
        "method": cfg.method,
        "label": label or cfg.method,
        "seed": cfg.seed,
        "config": cfg.to_dict(),
        "params": exp.params,
        "paper": exp.spec.paper,
        "data_notes": list(getattr(exp.task, "notes", [])),
        "versions": package_versions(),
        "timing": {**timing, "wall_s": time.perf_counter() - t0},
        "summary": summarize(rounds, target),
        "failure_log": strategy.failure_log,
        "rounds": rounds,
    }
    if cfg.out:
        write_json(Path(cfg.out) / "results.json", results)
    return results
