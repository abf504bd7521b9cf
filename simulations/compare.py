"""Run several methods on the same partition and seed; write a markdown table and a plot."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from .experiment import ExperimentConfig
from .presets import Preset, PresetContext, RunEntry
from .results import write_json
from .runner import run_experiment


def merge_config(base: dict[str, Any], *overrides: dict[str, Any]) -> dict[str, Any]:
    """``base`` updated by each override in turn; ``params`` dicts are merged, not replaced."""
    out = copy.deepcopy(base)
    for ov in overrides:
        for k, v in (ov or {}).items():
            if k == "params":
                out["params"] = {**out.get("params", {}), **v}
            else:
                out[k] = v
    return out


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n}"


def markdown_table(results: list[dict[str, Any]], target: float | None) -> str:
    """One row per run: final and best accuracy, rounds to target, bytes per round, wall time."""
    head = ["method", "final acc", "best acc"]
    if target is not None:
        head.append(f"rounds to {target:.2f}")
    head += ["up / round", "down / round", "failures", "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        s = r["summary"]
        row = [r["label"], f"{s['final_accuracy']:.4f}", f"{s['best_accuracy']:.4f}"]
        if target is not None:
            row.append(str(s.get("rounds_to_target") or f"> {s['rounds']}"))
        row += [_fmt_bytes(s["bytes_up_per_round"]), _fmt_bytes(s["bytes_down_per_round"]), str(s["failures"]), f"{r['timing']['wall_s']:.1f}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def plot_accuracy(results: list[dict[str, Any]], path: Path, title: str = "") -> Path:
    """Accuracy vs round, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for r in results:
        pts = [(x["round"], x["accuracy"]) for x in r["rounds"] if x.get("accuracy") is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=r["label"], linewidth=1.6)
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)


def run_entries(
    entries: list[RunEntry],
    base: dict[str, Any],
    overrides: dict[str, Any],
    out_dir: Path,
    *,
    target: float | None = None,
    title: str = "",
) -> list[dict[str, Any]]:
    """Run each entry (same partition and seed) and write summary.md, accuracy.png, summary.json."""
    out_dir = Path(out_dir)
    results = []
    for entry in entries:
        conf = merge_config(base, {"method": entry.method}, entry.overrides, overrides)
        conf["out"] = str(out_dir / _slug(entry.label))
        cfg = ExperimentConfig.from_dict(conf)
        results.append(run_experiment(cfg, label=entry.label, target=target))
    table = markdown_table(results, target)
    notes = results[0]["data_notes"] if results else []
    seed = results[0]["seed"] if results else None
    text = f"# {title}\n\n" if title else ""
    text += table + "\n" + "".join(f"- {n}\n" for n in notes) + f"- seed {seed}\n"
    (out_dir / "summary.md").write_text(text)
    plot_accuracy(results, out_dir / "accuracy.png", title)
    write_json(out_dir / "summary.json", {"title": title, "runs": [{"label": r["label"], "method": r["method"], **r["summary"]} for r in results]})
    print(table)
    print(f"wrote {out_dir / 'summary.md'}, {out_dir / 'accuracy.png'}")
    return results


def run_preset(preset: Preset, overrides: dict[str, Any], out_dir: Path, backend: str = "inprocess") -> Any:
    """Run ``preset`` (its custom runner when it has one)."""
    if preset.custom is not None:
        return preset.custom(PresetContext(preset, overrides, Path(out_dir), backend))
    return run_entries(preset.entries, preset.base, overrides, Path(out_dir), target=preset.target_accuracy, title=f"preset {preset.name}")
