"""Start a real local Flower deployment (one SuperLink, N SuperNodes) and run this app on it.

This is what ``tests/test_deployment.py`` and ``docs/deployment.md`` use. Everything runs on
127.0.0.1 in insecure mode; every port is chosen free by the caller's process; every process is
started here and stopped here by its process id, together with every subprocess Flower spawned
below it (:meth:`LocalDeployment.stop`).

Example::

    with LocalDeployment(num_supernodes=3, workdir=tmp) as dep:
        rc, log = dep.flwr_run(app_dir=".", run_config={"method": "fedavg", "num-clients": 3,
                                                        "num-server-rounds": 3, "out-dir": str(tmp / "out")})
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (sockets held open together so the OS cannot repeat one)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def run_config_arg(run_config: dict[str, Any]) -> str:
    """``{"lr": 0.1, "method": "fedavg"}`` -> ``'lr=0.1 method="fedavg"'`` for ``--run-config``."""
    return " ".join(f"{k}={_toml_value(v)}" for k, v in run_config.items())


def deployment_env(flwr_home: Path) -> dict[str, str]:
    """Environment for every Flower process of the deployment and for the ``flwr`` CLI."""
    env = os.environ.copy()
    env.update(
        {
            "FLWR_HOME": str(flwr_home),
            "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def _children_map() -> dict[int, list[int]]:
    """ppid -> child pids of every process (Linux ``/proc``)."""
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.setdefault(ppid, []).append(int(entry))
    return out


def _descendants(roots: set[int]) -> set[int]:
    children = _children_map()
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        pid = stack.pop()
        for child in children.get(pid, []):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return seen | set(roots)


def pid_alive(pid: int) -> bool:
    """True when ``pid`` is a live (not zombie) process."""
    return _alive(pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().decode(errors="replace").rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class LocalDeployment:
    """One ``flower-superlink --insecure`` and ``num_supernodes`` ``flower-supernode --insecure``.

    Parameters
    ----------
    num_supernodes : int
        Number of SuperNodes; SuperNode ``i`` gets ``--node-config "partition-id=i
        num-partitions=num_supernodes"``. Must be >= 1. Defaults to 3.
    workdir : Path
        Scratch folder for ``FLWR_HOME`` (its ``config.toml`` names this SuperLink as the default
        connection ``deploy``) and the process logs.
    startup_timeout : float
        Seconds to wait for the SuperLink's ``/health`` endpoint. Defaults to 60.
    """

    def __init__(self, num_supernodes: int = 3, workdir: Path | str = ".", startup_timeout: float = 60.0) -> None:
        if num_supernodes < 1:
            raise ValueError(f"num_supernodes must be >= 1, got {num_supernodes}")
        self.num_supernodes = num_supernodes
        self.workdir = Path(workdir).resolve()
        self.startup_timeout = startup_timeout
        self.flwr_home = self.workdir / "flwr_home"
        self.logs = self.workdir / "logs"
        ports = free_ports(1 + num_supernodes)
        self.superlink_port, self.supernode_ports = ports[0], ports[1:]
        self.address = f"{HOST}:{self.superlink_port}"
        self.env = deployment_env(self.flwr_home)
        self.procs: dict[str, subprocess.Popen] = {}
        self.stopped_pids: set[int] = set()

    # -- processes ---------------------------------------------------------------------------
    def _spawn(self, name: str, cmd: list[str]) -> subprocess.Popen:
        self.logs.mkdir(parents=True, exist_ok=True)
        out = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        self.procs[name] = proc
        return proc

    def write_config(self) -> Path:
        """Write ``$FLWR_HOME/config.toml`` with the connection ``deploy`` (the default)."""
        self.flwr_home.mkdir(parents=True, exist_ok=True)
        path = self.flwr_home / "config.toml"
        path.write_text(
            '[superlink]\ndefault = "deploy"\n\n'
            f'[superlink.deploy]\naddress = "{self.address}"\ninsecure = true\n'
        )
        return path

    def start(self) -> "LocalDeployment":
        """Start the SuperLink, wait until it answers, then start the SuperNodes."""
        self.write_config()
        self._spawn(
            "superlink",
            [
                "flower-superlink",
                "--insecure",
                "--isolation", "subprocess",
                "--disable-runtime-dependency-installation",
                "--host", HOST,
                "--port", str(self.superlink_port),
            ],
        )
        self.wait_superlink()
        for i, port in enumerate(self.supernode_ports):
            self._spawn(
                f"supernode-{i}",
                [
                    "flower-supernode",
                    "--insecure",
                    "--superlink", self.address,
                    "--node-config", f"partition-id={i} num-partitions={self.num_supernodes}",
                    "--host", HOST,
                    "--port", str(port),
                    "--max-wait-time", str(int(self.startup_timeout)),
                ],
            )
        return self

    def wait_superlink(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        url = f"http://{self.address}/health"
        while time.monotonic() < deadline:
            proc = self.procs["superlink"]
            if proc.poll() is not None:
                raise RuntimeError(f"flower-superlink exited with code {proc.returncode}:\n{self.log('superlink')}")
            try:
                with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 (local http)
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"flower-superlink did not answer {url} within {self.startup_timeout} s:\n{self.log('superlink')}")

    def log(self, name: str, tail: int = 4000) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def all_logs(self, tail: int = 3000) -> str:
        return "\n".join(f"===== {n} =====\n{self.log(n, tail)}" for n in self.procs)

    def descendants(self) -> set[int]:
        """Pids of every live process below the processes started here (app subprocesses, the
        SuperExec, which Flower starts in their own sessions, and their children)."""
        roots = {p.pid for p in self.procs.values()}
        return _descendants(roots) - roots

    def stop(self, grace: float = 5.0) -> None:
        """Stop every process started here and everything they spawned, by pid.

        Descendants are collected first (Flower detaches the SuperExec and the
        ``flwr-serverapp``/``flwr-clientapp`` subprocesses into their own sessions, so a signal
        to the process group does not reach them), then SIGTERM, then SIGKILL after ``grace`` s.
        """
        children = self.descendants()
        self.stopped_pids = {p.pid for p in self.procs.values()} | children
        for pid in [p.pid for p in self.procs.values() if p.poll() is None] + sorted(children):
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        while time.monotonic() < deadline and any(_alive(pid) for pid in children):
            time.sleep(0.1)
        late = self.descendants()
        self.stopped_pids |= late
        for pid in sorted(children | late):
            _signal(pid, signal.SIGKILL)
        for proc in self.procs.values():
            if proc.poll() is None:
                _signal(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)

    def __enter__(self) -> "LocalDeployment":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- the flwr CLI ------------------------------------------------------------------------
    def flwr(self, *args: str, timeout: float = 120.0, cwd: Path | str | None = None) -> subprocess.CompletedProcess:
        """Run ``flwr <args>`` against this deployment (its ``FLWR_HOME``), bounded in time."""
        return subprocess.run(
            ["flwr", *args], env=self.env, cwd=cwd, capture_output=True, text=True, timeout=timeout
        )

    def flwr_run(self, app_dir: Path | str, run_config: dict[str, Any], timeout: float = 300.0) -> subprocess.CompletedProcess:
        """``flwr run APP_DIR deploy --run-config ... --stream``: returns when the run has ended."""
        return self.flwr(
            "run", str(app_dir), "deploy", "--run-config", run_config_arg(run_config), "--stream",
            timeout=timeout, cwd=app_dir,
        )


def flower_cli_available() -> bool:
    """True when ``flower-superlink``, ``flower-supernode`` and ``flwr`` are on PATH."""
    return all(shutil.which(c) for c in ("flower-superlink", "flower-supernode", "flwr"))
