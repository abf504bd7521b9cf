"""Run a Flower app with ``flwr run`` on a private local simulation SuperLink (tests only).

Each :class:`LocalSimulation` has its own ``FLWR_HOME`` and free ports, so it never meets another
SuperLink on the machine; :meth:`LocalSimulation.close` stops every process started under that
``FLWR_HOME`` (the SuperLink ``flwr run`` starts lazily, and the SuperExec and app processes it
detaches).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from flwr_strategies.simulations.deployment import free_ports, run_config_arg

CENTRAL = re.compile(r"CENTRAL round=(\d+) accuracy=([0-9.]+) loss=([0-9.naninf]+)")


def _pids_under(marker: str) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            env = (entry / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if marker in cmd or marker in env:
            out.append(int(entry.name))
    return [p for p in out if p != os.getpid()]


class LocalSimulation:
    """A private ``flwr run`` target: the local simulation federation of its own ``FLWR_HOME``."""

    def __init__(self, workdir: Path) -> None:
        self.home = Path(workdir) / "flwr_home"
        self.home.mkdir(parents=True, exist_ok=True)
        http, control = free_ports(2)
        self.env = os.environ.copy()
        self.env.pop("PYTHONPATH", None)
        self.env.update({
            "FLWR_HOME": str(self.home),
            "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(http),
            "FLWR_LOCAL_CONTROL_API_PORT": str(control),
            "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "OMP_NUM_THREADS": "1",
            "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
            # a Ray instance of its own: without this, ray.init() joins any cluster another process
            # on the machine started (/tmp/ray/ray_current_cluster), and the two runs mix
            "RAY_ADDRESS": "local",
        })

    def run(self, app_dir: Path, num_supernodes: int, run_config: dict | None = None, timeout: int = 420):
        """``flwr run APP --stream`` on ``num_supernodes`` simulated nodes; returns (returncode, log)."""
        cmd = ["flwr", "run", str(app_dir), "--stream", "--federation-config", f"num-supernodes={num_supernodes}"]
        if run_config:
            cmd += ["--run-config", run_config_arg(run_config)]
        t0 = time.perf_counter()
        res = subprocess.run(cmd, cwd=app_dir, env=self.env, capture_output=True, text=True, timeout=timeout)
        log = res.stdout + res.stderr
        superlink_log = self.home / "local-superlink" / "superlink.log"
        if superlink_log.exists():
            log += "\n--- superlink.log ---\n" + superlink_log.read_text(errors="replace")[-4000:]
        return res.returncode, log, time.perf_counter() - t0

    def close(self) -> None:
        """Stop every process started under this ``FLWR_HOME``."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = _pids_under(str(self.home))
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            if not pids:
                break
            time.sleep(1.0)
        shutil.rmtree(self.home, ignore_errors=True)


def central_accuracies(log: str) -> dict[int, float]:
    """``{round: accuracy}`` from the app's ``CENTRAL round=.. accuracy=..`` lines (the first line of
    each round: the global model; a decentralized strategy may evaluate the peers' models after it)."""
    out: dict[int, float] = {}
    for m in CENTRAL.finditer(log):
        out.setdefault(int(m.group(1)), float(m.group(2)))
    return out
