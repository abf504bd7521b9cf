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
    import flwr  # Flower's own version, also when it is installed as flwr-nightly

    out["flwr"] = flwr.__version__
    return out


def summarize(rounds: list[dict[str, Any]], target: float | None = None) -> dict[str, Any]:
    """Final/best accuracy, rounds to ``target``, bytes per round, failures and wall time of a run.

    "Final" means the last *evaluated* round: ``final_accuracy`` and ``final_loss`` come from the
    last round that has them, and ``final_accuracy_round`` / ``final_loss_round`` say which round
    that is (a method that evaluates every k rounds may end on an unevaluated round; round 0 is the
    initial model). ``client_updates`` counts the client replies that were aggregated (sampled
    clients minus failures and rejections); 0 means every client failed in every round.
    """
    trained = [r for r in rounds if r["round"] > 0]
    accs = [(r["round"], r["accuracy"]) for r in rounds if r.get("accuracy") is not None]
    losses = [(r["round"], r["loss"]) for r in rounds if r.get("loss") is not None]
    best = max(accs, key=lambda t: t[1]) if accs else None
    out: dict[str, Any] = {
        "final_accuracy": accs[-1][1] if accs else None,
        "final_accuracy_round": accs[-1][0] if accs else None,
        "best_accuracy": best[1] if best else None,
        "best_accuracy_round": best[0] if best else None,
        "final_loss": losses[-1][1] if losses else None,
        "final_loss_round": losses[-1][0] if losses else None,
        "rounds": len(trained),
        "last_round": rounds[-1]["round"] if rounds else 0,
        "bytes_up_per_round": (sum(r["bytes_up"] for r in trained) / len(trained)) if trained else 0,
        "bytes_down_per_round": (sum(r["bytes_down"] for r in trained) / len(trained)) if trained else 0,
        "bytes_up_total": sum(r["bytes_up"] for r in trained),
        "bytes_down_total": sum(r["bytes_down"] for r in trained),
        "failures": sum(r.get("failures", 0) for r in trained),
        "client_updates": sum(client_updates(r) for r in trained),
        "rounds_without_updates": [r["round"] for r in trained if client_updates(r) == 0],
        "rounds_wall_s": sum(r.get("wall_s", 0.0) for r in trained),
    }
    if target is not None:
        hit = [rnd for rnd, a in accs if rnd > 0 and a >= target]
        out["target_accuracy"] = target
        out["rounds_to_target"] = hit[0] if hit else None
    return out


def client_updates(record: dict[str, Any]) -> int:
    """Client replies aggregated in one round: sampled clients minus failures and rejections."""
    rejected = record.get("rejected", record.get("fit_rejected", 0)) or 0
    return max(0, int(record.get("clients", 0)) - int(record.get("failures", 0) or 0) - int(rejected))


def run_status(summary: dict[str, Any]) -> str:
    """``"ok"``, or why the run counts as failed (no client update was aggregated in any round)."""
    if summary["rounds"] > 0 and summary["client_updates"] == 0:
        return f"failed: every client failed in every round ({summary['failures']} failures, see failure_log)"
    return "ok"


def final_text(summary: dict[str, Any]) -> str:
    """One line naming the final numbers and the round they come from."""
    last = summary.get("last_round")
    if summary.get("final_accuracy") is not None:
        rnd = summary["final_accuracy_round"]
        text = f"final accuracy {summary['final_accuracy']:.4f} (last evaluated round {rnd}"
        text += f" of {last})" if rnd != last else ")"
        text += f", best {summary['best_accuracy']:.4f} (round {summary['best_accuracy_round']})"
        return text
    if summary.get("final_loss") is not None:
        rnd = summary["final_loss_round"]
        return f"final loss {summary['final_loss']:.4f} (last evaluated round {rnd}" + (f" of {last})" if rnd != last else ")")
    return "no evaluated round"


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
