"""Run several methods on the same partition and seed; write a markdown table and a plot."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

from flwr_strategies.setup import SettingError

from .experiment import ExperimentConfig
from .presets import Preset, PresetContext, RunEntry
from .results import OutputFolder, figure, write_json, write_png, write_text
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


def markdown_table(results: list[dict[str, Any]], target: float | None) -> str:
    """One row per run: final accuracy (the last evaluated round, named), best accuracy, rounds to
    target, bytes per round, failures, wall time. A run that failed says so in its row."""
    head = ["method", "final acc (round)", "best acc"]
    if target is not None:
        head.append(f"rounds to {target:.2f}")
    head += ["up / round", "down / round", "failures", "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        if "summary" not in r:  # the run raised
            cell = str(r["status"]).replace("|", "/").replace("\n", " ")[:300]  # fits in one table cell
            row = [r["label"], f"**failed**: {cell}"] + [""] * (len(head) - 2)
            lines.append("| " + " | ".join(row) + " |")
            continue
        s = r["summary"]
        final = "-" if s.get("final_accuracy") is None else f"{s['final_accuracy']:.4f} ({s['final_accuracy_round']})"
        best = "-" if s.get("best_accuracy") is None else f"{s['best_accuracy']:.4f}"
        status = r.get("status", "ok")
        if status != "ok":
            final = f"**{status.split(':')[0]}** ({final})"
        row = [r["label"], final, best]
        if target is not None:
            row.append(str(s.get("rounds_to_target") or f"> {s['rounds']}"))
        row += [_fmt_bytes(s["bytes_up_per_round"]), _fmt_bytes(s["bytes_down_per_round"]), str(s["failures"]), f"{r['timing']['wall_s']:.1f}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def plot_accuracy(results: list[dict[str, Any]], path: Path, title: str = "") -> Path:
    """Accuracy vs round, one line per run."""
    fig, ax = figure(figsize=(6.4, 4.0), dpi=120)
    for r in results:
        pts = [(x["round"], x["accuracy"]) for x in r.get("rounds", []) if x.get("accuracy") is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=r["label"], linewidth=1.6)
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    write_png(path, fig)
    return path


def slug(label: str) -> str:
    """``label`` as a folder name: characters other than letters, digits, ``-``, ``_`` and ``.`` become ``_``."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)


def entry_config(entry: RunEntry, base: dict[str, Any], overrides: dict[str, Any], out_dir: Path) -> ExperimentConfig:
    """The config of one comparison entry: ``base`` and the entry's overrides (labelled
    ``"preset"`` in the provenance), then the user's ``overrides`` (``"user"``)."""
    conf = merge_config(base, {"method": entry.method}, entry.overrides, overrides)
    conf["out"] = str(Path(out_dir) / slug(entry.label))
    preset_keys = (set(base) | set(entry.overrides)) - set(overrides) - {"method", "params"}
    provenance: dict[str, Any] = {k: "preset" for k in preset_keys}
    preset_params = {**base.get("params", {}), **entry.overrides.get("params", {})}
    user_params = overrides.get("params", {})
    provenance["params"] = {k: "preset" for k in preset_params if k not in user_params}
    conf["provenance"] = {**provenance, **conf.get("provenance", {})}
    return ExperimentConfig.from_dict(conf)


def run_entries(entries: list[RunEntry], base: dict[str, Any], overrides: dict[str, Any], out_dir: Path, *,
                target: float | None = None, title: str = "") -> list[dict[str, Any]]:
    """Run each entry (same partition and seed) and write summary.md, accuracy.png, summary.json.

    Every entry's settings are checked before the first one trains. An entry whose run raises, or
    in which every client failed, is reported as failed (in the table, summary.json and on
    stderr) and the comparison goes on with the others; ``results[i]["status"]`` says which.
    ``out_dir`` is held for the comparison (:class:`~.results.OutputFolder`): a folder holding an
    earlier comparison's summary.json is refused unless ``overrides["overwrite"]``.
    """
    out_dir = Path(out_dir)
    with OutputFolder(out_dir, overwrite=bool(overrides.get("overwrite", False))):
        configs = []
        for entry in entries:
            cfg = entry_config(entry, base, overrides, out_dir)
            try:
                configs.append(cfg.validate())
            except SettingError as err:
                err.entry = entry.label  # named by the CLI's error line
                raise
            except (KeyError, ValueError) as err:
                msg = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
                raise type(err)(f"compare entry '{entry.label}': {msg}") from err
        results = []
        for entry, cfg in zip(entries, configs):
            try:
                res = run_experiment(cfg, label=entry.label, target=target)
            except Exception as err:  # noqa: BLE001 - one method failing must not stop the comparison
                res = {"label": entry.label, "method": entry.method, "status": f"failed: {type(err).__name__}: {err}"}
            if res.get("status", "ok") != "ok":
                print(f"compare: {entry.label} {res['status']}", file=sys.stderr)
            results.append(res)
        table = markdown_table(results, target)
        ran = [r for r in results if "summary" in r]
        notes = ran[0]["data_notes"] if ran else []
        seed = ran[0]["seed"] if ran else None
        text = f"# {title}\n\n" if title else ""
        text += table + "\n" + "".join(f"- {n}\n" for n in notes) + f"- seed {seed}\n"
        text += "- final acc is the last evaluated round's accuracy; the round is in brackets\n"
        failed = [r for r in results if r.get("status", "ok") != "ok"]
        text += "".join(f"- {r['label']}: {r['status']}\n" for r in failed)
        write_text(out_dir / "summary.md", text)
        plot_accuracy(ran, out_dir / "accuracy.png", title)
        write_json(out_dir / "summary.json", {"title": title, "runs": [
            {"label": r["label"], "method": r["method"], "status": r.get("status", "ok"), **r.get("summary", {})} for r in results]})
        print(table)
        print(f"wrote {out_dir / 'summary.md'}, {out_dir / 'accuracy.png'}")
        return results


def run_preset(preset: Preset, overrides: dict[str, Any], out_dir: Path) -> Any:
    """Run ``preset`` (its custom runner when it has one, holding ``out_dir`` as
    :func:`run_entries` does)."""
    if preset.custom is not None:
        with OutputFolder(out_dir, overwrite=bool(overrides.get("overwrite", False))):
            return preset.custom(PresetContext(preset, overrides, Path(out_dir)))
    return run_entries(preset.entries, preset.base, overrides, Path(out_dir), target=preset.target_accuracy, title=f"preset {preset.name}")
