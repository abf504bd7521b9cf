"""``results.json``: configuration, versions and per-round numbers of one run; the run's output folder.

:class:`OutputFolder` holds a run's folder while the run writes there: an exclusive lock
(``fcntl``, on ``.lock`` inside it), so two runs never write into one folder at once, and a refusal
of a folder that already holds another run's results unless the caller asked to overwrite them
(``--overwrite``, run config ``overwrite = true``). :func:`confined_out_dir` keeps a ServerApp's
``out-dir`` (a run config, which the run's submitter sets) inside the folder the node operator
named in :data:`OUTPUT_BASE_ENV`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import platform
from importlib import metadata
from itertools import takewhile
from pathlib import Path
from typing import Any

from flwr_strategies.core.state import atomic_write
from flwr_strategies.setup import SettingError

PACKAGES = ("flwr", "torch", "torchvision", "numpy", "ray", "flwr-datasets", "scikit-learn", "transformers", "peft", "dp-accounting")


def package_versions() -> dict[str, str]:
    """Installed versions of the packages that shape the numbers."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    import flwr  # Flower's own version, also when it is installed as flwr-nightly

    out["flwr"] = flwr.__version__
    return out


#: a run has diverged when its final loss is more than this many times its initial loss (and, for a
#: classifier, above the chance-level loss ln(num_classes))...
DIVERGENCE_FACTOR = 2.0
#: ... or when its loss rose in each of this many last evaluated rounds, to above the initial loss
DIVERGENCE_TREND_ROUNDS = 5


def chance_loss(num_classes: int | None) -> float | None:
    """The cross-entropy of a classifier that knows nothing, ``ln(num_classes)`` (None: not a classifier)."""
    return math.log(num_classes) if num_classes is not None and num_classes >= 2 else None


def summarize(rounds: list[dict[str, Any]], target: float | None = None, chance: float | None = None) -> dict[str, Any]:
    """Final/best accuracy, rounds to ``target``, bytes per round, failures and wall time of a run.

    "Final" means the last *evaluated* round: ``final_accuracy`` and ``final_loss`` come from the
    last round that has them, and ``final_accuracy_round`` / ``final_loss_round`` say which round
    that is (a method that evaluates every k rounds may end on an unevaluated round; round 0 is the
    initial model). ``client_updates`` counts the client replies that were aggregated (sampled
    clients minus failures, which include rejections); 0 means every client failed in every round.

    What makes a run degraded (:func:`run_status`) is listed too: ``rounds_without_updates``
    (rounds in which no reply was aggregated, a rejected round included), ``rejected_rounds``
    (rounds whose aggregate was not finite), ``lost_partitions`` (partitions whose last two or more
    sampled rounds all failed, or that failed every round they were sampled in) and ``diverged``
    (with ``divergence``, the reason: :func:`divergence`; ``chance`` is the chance-level loss of a
    classifier, :func:`chance_loss`).
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
        "rejected_rounds": [r["round"] for r in trained if r.get("fit_round_rejected")],
        "lost_partitions": lost_partitions(trained),
        "diverged": False,
        "divergence": divergence(losses, chance),
        "rounds_wall_s": sum(r.get("wall_s", 0.0) for r in trained),
    }
    out["diverged"] = out["divergence"] is not None
    if target is not None:
        hit = [rnd for rnd, a in accs if rnd > 0 and a >= target]
        out["target_accuracy"] = target
        out["rounds_to_target"] = hit[0] if hit else None
    return out


def client_updates(record: dict[str, Any]) -> int:
    """Client replies aggregated in one round: sampled clients minus failures (a rejected reply
    counts as a failure too, so rejections are not subtracted twice)."""
    if "fit_sampled_partitions" in record and "fit_failed_partitions" in record:
        return len(set(record["fit_sampled_partitions"]) - set(record["fit_failed_partitions"]))
    return max(0, int(record.get("clients", 0)) - int(record.get("failures", 0) or 0))


def lost_partitions(trained: list[dict[str, Any]]) -> dict[int, int]:
    """``{partition: first round of its final run of failures}`` for every partition whose last
    two or more sampled rounds all failed, or that failed in every round it was sampled in."""
    history: dict[int, list[tuple[int, bool]]] = {}
    for rec in trained:
        failed = set(rec.get("fit_failed_partitions") or ())
        for pid in rec.get("fit_sampled_partitions") or ():
            history.setdefault(int(pid), []).append((int(rec["round"]), pid in failed))
    out: dict[int, int] = {}
    for pid, rows in sorted(history.items()):
        trailing = len(list(takewhile(lambda row: row[1], reversed(rows))))
        if trailing >= 2 or (trailing and trailing == len(rows)):
            out[pid] = rows[len(rows) - trailing][0]
    return out


def divergence(losses: list[tuple[int, float]], chance: float | None = None) -> str | None:
    """Why the run's loss diverged, or None. ``losses`` are ``(round, loss)`` of the evaluated
    rounds (the first normally the initial model's, round 0). The loss diverged when

    - the final loss is not finite;
    - the final loss is above :data:`DIVERGENCE_FACTOR` (2) times the initial one and, for a
      classifier (``chance`` given), above the chance-level loss ``ln(num_classes)``: the model is
      worse than it started and worse than guessing;
    - or the loss rose in each of the last :data:`DIVERGENCE_TREND_ROUNDS` (5) evaluated rounds and
      ends above the initial one: it is running away.

    A noisy run that learns (a differentially private one) stays below its initial loss and trips none."""
    if not losses:
        return None
    (r0, first), (rn, last) = (losses[0][0], float(losses[0][1])), (losses[-1][0], float(losses[-1][1]))
    if not math.isfinite(last):
        return f"the final loss is {last!r} (round {rn})"
    if len(losses) < 2 or not math.isfinite(first) or first <= 0:
        return None
    if last > DIVERGENCE_FACTOR * first and (chance is None or last > chance):
        above = f" and above the chance-level loss {chance:.4g}" if chance is not None else ""
        return (f"the final loss {last:.4g} (round {rn}) is {last / first:.3g} times the initial loss {first:.4g} "
                f"(round {r0}){above}")
    tail = losses[-DIVERGENCE_TREND_ROUNDS - 1:]
    if (len(tail) == DIVERGENCE_TREND_ROUNDS + 1 and last > first
            and all(float(b) > float(a) for (_, a), (_, b) in zip(tail, tail[1:]))):
        return (f"the loss rose in each of the last {DIVERGENCE_TREND_ROUNDS} evaluated rounds (rounds {tail[0][0]} to "
                f"{rn}: {', '.join(f'{float(v):.4g}' for _, v in tail)}) to above the initial loss {first:.4g}")
    return None


def run_status(summary: dict[str, Any]) -> str:
    """``"ok"``; ``"failed: ..."`` when no client update was aggregated in any round; or
    ``"degraded: ..."`` naming what went wrong (rounds without any update, rejected rounds, lost
    partitions, divergence) for a run that finished but must not count as a plain success."""
    if summary["rounds"] > 0 and summary["client_updates"] == 0:
        return f"failed: every client failed in every round ({summary['failures']} failures, see failure_log)"
    reasons = []
    if summary.get("rounds_without_updates"):
        reasons.append(f"no client update was aggregated in rounds {_rounds(summary['rounds_without_updates'])}")
    if summary.get("rejected_rounds"):
        reasons.append(f"the aggregate was not finite in rounds {_rounds(summary['rejected_rounds'])}")
    lost = summary.get("lost_partitions") or {}
    if lost:
        reasons.append("partitions " + ", ".join(f"{p} (from round {r})" for p, r in sorted(lost.items(), key=lambda t: int(t[0])))
                       + " failed in every round they were sampled in, to the end of the run")
    if summary.get("diverged"):
        reasons.append(f"the loss diverged: {summary.get('divergence') or 'final loss ' + repr(summary['final_loss'])}")
    return "degraded: " + "; ".join(reasons) if reasons else "ok"


def finished_status(summary: dict[str, Any]) -> str:
    """The ``status`` a ServerApp writes when its run has ended without an exception:
    ``"completed"``, or :func:`run_status`'s ``"degraded: ..."`` / ``"failed: ..."``."""
    status = run_status(summary)
    return "completed" if status == "ok" else status


def _rounds(values: list[int]) -> str:
    return ", ".join(str(v) for v in values[:10]) + (f" and {len(values) - 10} more" if len(values) > 10 else "")


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


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`~flwr_strategies.core.state.atomic_write`),
    creating parent folders."""
    return atomic_write(path, lambda fh: fh.write(text.encode()))


def figure(*args: Any, **kwargs: Any) -> Any:
    """``matplotlib.pyplot.subplots(*args, **kwargs)`` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)


def write_png(path: str | Path, fig: Any, **kwargs: Any) -> Path:
    """Lay ``fig`` out, write it as PNG to ``path`` atomically (``kwargs`` go to ``savefig``) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    out = atomic_write(path, lambda fh: fig.savefig(fh, format="png", **kwargs))
    plt.close(fig)
    return out


def write_json(path: str | Path, data: dict[str, Any]) -> Path:
    """Write ``data`` as indented JSON, creating parent folders, atomically: the text goes to a
    temporary file beside ``path`` (flushed to disk) that then replaces ``path``, so a disk that
    fills up or a crash leaves the previous file (or none), never a truncated one."""
    return write_text(path, json.dumps(data, indent=2, default=_default))


def _default(o: Any) -> Any:
    import numpy as np

    return o.item() if isinstance(o, np.generic) else o.tolist() if isinstance(o, np.ndarray) else str(o)


# ------------------------------------------------------------------------------ output folders
#: Files a run or a comparison writes into its output folder (a folder holding one holds another
#: run's results).
RUN_FILES = ("results.json", "final.npz", "summary.json", "summary.md")
#: The folders this process holds: ``[holders, lock file descriptor]`` (nested holders share the lock).
_HELD: dict[Path, list[int]] = {}
#: Environment variable of the ServerApp's process naming the folder its ``out-dir`` must stay in
#: (the node operator's); unset, the process's working directory.
OUTPUT_BASE_ENV = "FLWR_STRATEGIES_OUTPUT_BASE"


class OutputFolder:
    """A run's output folder, created and held (an exclusive ``fcntl`` lock on ``<path>/.lock``)
    from now until :meth:`release` (or the end of a ``with`` block, or the process). A folder this
    process already holds is held again without a check (a preset that writes its own report
    around a comparison in the same folder); the lock goes with the outermost holder.

    Raises :class:`~flwr_strategies.setup.SettingError` naming ``setting`` and the folder when
    another run holds the folder, or when it already holds a run's results (:data:`RUN_FILES`) and
    ``overwrite`` is false; the folder is then left as it was.

    Parameters
    ----------
    path : str | Path
        The folder (created with its parents).
    overwrite : bool (default: False)
        Whether the results of an earlier run in the folder may be replaced.
    setting : str (default: "out")
        The setting that named the folder, for the error (``"out"``: ``--out``).
    how : str (default: "--overwrite")
        How the caller asks to overwrite, for the error.
    """

    def __init__(self, path: str | Path, *, overwrite: bool = False, setting: str = "out",
                 how: str = "--overwrite") -> None:
        self.path = Path(path)
        self._key: Path | None = None
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            key = self.path.resolve()
            if key in _HELD:
                _HELD[key][0] += 1
                self._key = key
                return
            fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise SettingError(setting, str(path), f"a folder where results can be written ({err.strerror or err})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise SettingError(setting, str(path), "a folder no other run is writing to (another run holds its "
                                                   "lock, .lock)") from None
        _HELD[key] = [1, fd]
        self._key = key
        held = [name for name in RUN_FILES if (self.path / name).exists()]
        if held and not overwrite:
            self.release()
            raise SettingError(setting, str(path), f"a folder without another run's results (it holds "
                                                   f"{', '.join(held)}; choose another folder, or {how} to replace them)")

    def release(self) -> None:
        """Let other runs use the folder (when this is its outermost holder)."""
        if self._key is None:
            return
        entry = _HELD[self._key]
        entry[0] -= 1
        if not entry[0]:
            del _HELD[self._key]
            os.close(entry[1])  # closing the descriptor releases the lock
        self._key = None

    def __enter__(self) -> "OutputFolder":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def confined_out_dir(out_dir: str, setting: str = "run config out-dir") -> Path:
    """``out_dir`` (a ServerApp's run config) as a folder inside the node operator's base folder:
    :data:`OUTPUT_BASE_ENV` of this process, or its working directory when unset. A relative
    ``out_dir`` is taken from the base; one that leaves it (``..``, an absolute path elsewhere, a
    symbolic link out of it) raises :class:`~flwr_strategies.setup.SettingError`."""
    base = Path(os.environ.get(OUTPUT_BASE_ENV) or os.getcwd()).resolve()
    target = (base / out_dir).resolve()
    if not target.is_relative_to(base):
        raise SettingError(setting, out_dir, f"a folder inside the node operator's output folder ({OUTPUT_BASE_ENV} "
                                             "where the ServerApp runs, else its working directory)")
    return target
