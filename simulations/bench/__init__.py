"""Benchmarks: ``python -m simulations bench NAME [args]`` runs ``simulations.bench.NAME.main(args)``.

The helpers below are shared by the benchmarks (this package's modules are the benchmarks' names)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: The folder holding the imported top-level package (a checkout or site-packages), for child processes.
ROOT = Path(sys.modules[__name__.split(".")[0]].__file__).resolve().parents[1]


def proc_kib(path: str, field: str) -> int:
    """The KiB figure of ``field`` in a ``/proc`` file (``VmRSS`` in ``/proc/PID/status``,
    ``MemAvailable`` in ``/proc/meminfo``); 0 when the file or the field is not there."""
    with contextlib.suppress(OSError), open(path, "rb") as fh:
        return next((int(line.split()[1]) for line in fh if line.startswith(field.encode() + b":")), 0)
    return 0


def rss_kib(pid: int | str = "self") -> int:
    """Resident set size of process ``pid`` in KiB (``VmRSS`` of ``/proc/PID/status``); 0 when it is gone."""
    return proc_kib(f"/proc/{pid}/status", "VmRSS")


def child_env(**extra: str) -> dict[str, str]:
    """This environment with :data:`ROOT` first on ``PYTHONPATH`` and ``OMP_NUM_THREADS`` 1 unless set."""
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_child(args: list[str], what: str, *, env: dict[str, str] | None = None, cwd: Path | None = None,
              timeout: float | None = None, marker: str = "") -> dict[str, Any]:
    """``python -m flwr_strategies.simulations bench ARGS`` in a fresh process (its peak memory is its
    own) with ``env`` (default: this one); returns the JSON of its last stdout line that starts with
    ``marker``. A failure raises ``SystemExit`` naming ``what``, the exit code and the output's tail."""
    done = subprocess.run([sys.executable, "-m", "flwr_strategies.simulations", "bench", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=timeout)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(marker) and ln.strip()]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{what} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len(marker):])


def options(parser, **defaults: Any) -> None:
    """Add ``--NAME`` (underscores become dashes) for each keyword, typed like its default (an int, a
    float or a string; None: a string that defaults to None)."""
    for name, default in defaults.items():
        parser.add_argument("--" + name.replace("_", "-"), default=default,
                            type=str if default is None else type(default))


def write_out(path: str | None, data: Any, indent: int = 1) -> None:
    """Write ``data`` as JSON to ``path`` (``--out``; nothing when None), creating its folder."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(data, indent=indent))


def timed(call) -> tuple[Any, float, float]:
    """``call()``'s result, wall seconds and CPU seconds of this process (after a garbage collection)."""
    import gc

    gc.collect()
    w0, c0 = time.perf_counter(), time.process_time()
    out = call()
    return out, time.perf_counter() - w0, time.process_time() - c0


def max_diff(a, b) -> float:
    """Largest absolute difference between two lists of arrays (in float64)."""
    import numpy as np

    return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)))) for x, y in zip(a, b))
