"""``results.json``: configuration, versions and per-round numbers of one run."""

from __future__ import annotations

import json
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("flwr", "torch", "torchvision", "numpy", "ray", "flwr-datasets", "scikit-learn", "transformers", "peft", "dp-accounting")


def package_versions() -> dict[str, str]:
    """Installed versions of the packages that shape the numbers."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def summarize(rounds: list[dict[str, Any]], target: float | None = None) -> dict[str, Any]:
    """Final/best accuracy, rounds to ``target``, bytes per round and wall time of a run."""
    trained = [r for r in rounds if r["round"] > 0]
    accs = [(r["round"], r["accuracy"]) for r in rounds if r.get("accuracy") is not None]
    out: dict[str, Any] = {
        "final_accuracy": accs[-1][1] if accs else None,
        "best_accuracy": max(a for _, a in accs) if accs else None,
        "final_loss": rounds[-1].get("loss") if rounds else None,
        "rounds": len(trained),
        "bytes_up_per_round": (sum(r["bytes_up"] for r in trained) / len(trained)) if trained else 0,
        "bytes_down_per_round": (sum(r["bytes_down"] for r in trained) / len(trained)) if trained else 0,
        "bytes_up_total": sum(r["bytes_up"] for r in trained),
        "bytes_down_total": sum(r["bytes_down"] for r in trained),
        "failures": sum(r.get("failures", 0) for r in trained),
        "rounds_wall_s": sum(r.get("wall_s", 0.0) for r in trained),
    }
    if target is not None:
        hit = [rnd for rnd, a in accs if rnd > 0 and a >= target]
        out["target_accuracy"] = target
        out["rounds_to_target"] = hit[0] if hit else None
    return out


def write_json(path: str | Path, data: dict[str, Any]) -> Path:
    """Write ``data`` as indented JSON, creating parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=_default))
    return path


def _default(o: Any) -> Any:
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:
        pass
    return str(o)
