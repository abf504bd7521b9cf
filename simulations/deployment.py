"""Local Flower runtimes started and stopped here: a real deployment (one SuperLink, N SuperNodes)
and a private simulation SuperLink for ``flwr run`` (the ``ray`` backend).

- :class:`LocalDeployment`: ``flower-superlink`` plus ``num_supernodes`` ``flower-supernode``
  processes, each given its ``partition-id`` (``docs/deployment.md``).
- :class:`LocalSimulation`: one ``flower-superlink --simulation`` for ``flwr run`` with
  ``--federation-config "num-supernodes=N ..."`` (Flower's simulation runtime, Ray), as ``flwr run .``
  with its ``local`` connection, but with its own ``FLWR_HOME`` and free port, stopped when the run ends.

Everything runs on 127.0.0.1 in insecure mode, in the current environment (no runtime dependency
installation), on free ports; every process is stopped by its process id, with every subprocess
Flower spawned below it (:meth:`FlowerProcesses.stop`).

Example::

    with LocalDeployment(num_supernodes=3, workdir=tmp) as dep:
        res = dep.flwr_run(app_dir=".", run_config={"method": "fedavg", "num-clients": 3,
                                                    "num-server-rounds": 3, "out-dir": str(tmp / "out")})
    with LocalSimulation(workdir=tmp) as sim:
        res = sim.flwr_run(".", {"num-server-rounds": 3}, federation_config={"num-supernodes": 10})
        print(sim.run_status(sim.run_id(res)))   # "finished:completed"
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path
from typing import Any

from .results import OUTPUT_BASE_ENV

HOST = "127.0.0.1"


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (sockets held open together so the OS cannot repeat one)."""
    with contextlib.ExitStack() as held:  # every socket is closed on the way out
        socks = [held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(n)]
        for s in socks:
            s.bind((HOST, 0))
        return [int(s.getsockname()[1]) for s in socks]


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def run_config_arg(run_config: dict[str, Any]) -> str:
    """``{"lr": 0.1, "method": "fedavg"}`` -> ``'lr=0.1 method="fedavg"'`` for ``--run-config``."""
    return " ".join(f"{k}={_toml_value(v)}" for k, v in run_config.items())


FLOWER_CLI = ("flwr", "flower-superlink", "flower-supernode")


def interpreter_scripts() -> list[str]:
    """The folders where the running interpreter's packages put their command-line tools: the
    folder of ``sys.executable`` (a virtual environment's ``bin``) and ``sysconfig``'s scripts
    folder, without resolving symlinks (a venv's python links to the base interpreter)."""
    folders = (os.path.dirname(os.path.abspath(sys.executable)), sysconfig.get_path("scripts"))
    return list(dict.fromkeys(f for f in folders if f and os.path.isdir(f)))  # in order, each once


def tool_path(path: str | None = None) -> str:
    """``path`` (default: ``$PATH``) with :func:`interpreter_scripts` in front, so that the Flower
    CLI installed beside the running interpreter is found (and used) even when its environment was
    never activated, as when an IDE, a notebook or cron runs ``<venv>/bin/python -m ...``."""
    parts = [p for p in (os.environ.get("PATH", "") if path is None else path).split(os.pathsep) if p]
    front = interpreter_scripts()
    return os.pathsep.join(front + [p for p in parts if p not in front])


def deployment_env(flwr_home: Path) -> dict[str, str]:
    """Environment for every Flower process of the deployment and for the ``flwr`` CLI (``PATH``
    starts with the running interpreter's scripts folder: :func:`tool_path`)."""
    env = os.environ.copy()
    env.update({"PATH": tool_path(env.get("PATH", "")), "FLWR_HOME": str(flwr_home), "FLWR_TELEMETRY_ENABLED": "0",
                "FLWR_DISABLE_UPDATE_CHECK": "1", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
                "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"), "PYTHONUNBUFFERED": "1"})
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


def descendants_of(roots: set[int]) -> set[int]:
    """``roots`` and every process below them (read from ``/proc``)."""
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
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().decode(errors="replace").rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


class FlowerProcesses:
    """Processes of one local Flower runtime (a SuperLink and whatever else a subclass starts),
    their logs, the ``flwr`` CLI pointed at them, and their shutdown by pid.

    Parameters
    ----------
    workdir : Path
        Scratch folder for ``FLWR_HOME`` (its ``config.toml`` names this SuperLink as the default
        connection ``CONNECTION``) and the process logs.
    startup_timeout : float
        Seconds to wait for the SuperLink's ``/health`` endpoint. Defaults to 60.
    num_ports : int
        Free ports to reserve: the SuperLink's first, then the subclass's.
    env : dict | None
        Extra environment variables for every process (e.g. ``PYTHONPATH``). The ServerApp's
        ``out-dir`` must lie in ``FLWR_STRATEGIES_OUTPUT_BASE``: this environment's, else ``workdir``.
    """

    CONNECTION = "deploy"

    def __init__(self, workdir: Path | str = ".", startup_timeout: float = 60.0, num_ports: int = 1,
                 env: dict[str, str] | None = None) -> None:
        self.workdir = Path(workdir).resolve()
        self.startup_timeout = startup_timeout
        self.flwr_home = self.workdir / "flwr_home"
        self.logs = self.workdir / "logs"
        ports = free_ports(num_ports)
        self.superlink_port, self.other_ports = ports[0], ports[1:]
        self.address = f"{HOST}:{self.superlink_port}"
        self.env = deployment_env(self.flwr_home)
        self.env.setdefault(OUTPUT_BASE_ENV, str(self.workdir))  # the ServerApp's out-dir stays in here
        self.env.update(env or {})
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
        """Write ``$FLWR_HOME/config.toml`` with the connection ``CONNECTION`` (the default)."""
        self.flwr_home.mkdir(parents=True, exist_ok=True)
        path = self.flwr_home / "config.toml"
        path.write_text(f'[superlink]\ndefault = "{self.CONNECTION}"\n\n'
                        f'[superlink.{self.CONNECTION}]\naddress = "{self.address}"\ninsecure = true\n')
        return path

    def superlink_command(self) -> list[str]:
        return ["flower-superlink", "--insecure", "--isolation", "subprocess", "--disable-runtime-dependency-installation",
                "--host", HOST, "--port", str(self.superlink_port)]

    def start(self):
        """Start the SuperLink and wait until it answers."""
        self.write_config()
        self._spawn("superlink", self.superlink_command())
        self.wait_superlink()
        return self

    def wait_superlink(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        url = f"http://{self.address}/health"
        while time.monotonic() < deadline:
            proc = self.procs["superlink"]
            if proc.poll() is not None:
                raise RuntimeError(f"flower-superlink exited with code {proc.returncode}:\n{self.log('superlink')}")
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 (local http)
                if r.status == 200:
                    return
            time.sleep(0.3)
        raise TimeoutError(f"flower-superlink did not answer {url} within {self.startup_timeout} s:\n{self.log('superlink')}")

    def log(self, name: str, tail: int = 4000) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def all_logs(self, tail: int = 3000) -> str:
        return "\n".join(f"===== {n} =====\n{self.log(n, tail)}" for n in self.procs)

    def descendants(self) -> set[int]:
        """Pids of every live process below the processes started here (app subprocesses, the
        SuperExec, which Flower starts in their own sessions, Ray, and their children)."""
        roots = {p.pid for p in self.procs.values()}
        return descendants_of(roots) - roots

    def stop(self, grace: float = 5.0) -> None:
        """Stop every process started here and everything they spawned, by pid.

        Descendants are collected first (Flower detaches the SuperExec and the
        ``flwr-serverapp``/``flwr-clientapp``/``flwr-simulation`` subprocesses into their own
        sessions, so a signal to the process group does not reach them), then SIGTERM, then
        SIGKILL after ``grace`` s; returns once they are gone (or after 10 s more).
        """
        children = self.descendants()
        self.stopped_pids = {p.pid for p in self.procs.values()} | children
        for pid in [p.pid for p in self.procs.values() if p.poll() is None] + sorted(children):
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        while time.monotonic() < deadline and any(pid_alive(pid) for pid in children):
            time.sleep(0.1)
        late = self.descendants()
        self.stopped_pids |= late
        for pid in sorted(children | late):
            _signal(pid, signal.SIGKILL)
        for proc in self.procs.values():
            if proc.poll() is None:
                _signal(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        # a SIGKILLed process that is not our child is reaped by another: return once they are gone
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and any(pid_alive(pid) for pid in children | late):
            time.sleep(0.05)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- the flwr CLI ------------------------------------------------------------------------
    def flwr(self, *args: str, timeout: float = 120.0, cwd: Path | str | None = None) -> subprocess.CompletedProcess:
        """Run ``flwr <args>`` against this runtime (its ``FLWR_HOME``), bounded in time."""
        return subprocess.run(["flwr", *args], env=self.env, cwd=cwd, capture_output=True, text=True, timeout=timeout)

    def flwr_run_args(self, app_dir: Path | str, run_config: dict[str, Any]) -> list[str]:
        """Arguments of ``flwr run APP_DIR CONNECTION --run-config ... --stream``. The run config
        goes through a TOML file when a value holds quotes (Flower's ``k=v`` parser cannot)."""
        args = ["run", str(app_dir), self.CONNECTION, "--stream"]
        if run_config:
            if any(isinstance(v, str) and ('"' in v or "'" in v) for v in run_config.values()):
                self.workdir.mkdir(parents=True, exist_ok=True)
                path = self.workdir / f"run-config-{len(list(self.workdir.glob('run-config-*.toml')))}.toml"
                path.write_text("".join(f"{k} = {_toml_value(v)}\n" for k, v in run_config.items()))
                args += ["--run-config", str(path)]
            else:
                args += ["--run-config", run_config_arg(run_config)]
        return args

    def flwr_run(self, app_dir: Path | str, run_config: dict[str, Any], timeout: float = 300.0) -> subprocess.CompletedProcess:
        """``flwr run APP_DIR CONNECTION --run-config ... --stream``: returns when the run has ended."""
        return self.flwr(*self.flwr_run_args(app_dir, run_config), timeout=timeout, cwd=app_dir)

    @staticmethod
    def run_id(res: subprocess.CompletedProcess | str) -> int:
        """The run id ``flwr run`` printed ("Successfully started run N")."""
        text = res if isinstance(res, str) else f"{res.stdout}\n{res.stderr}"
        match = re.search(r"started run (\d+)", text)
        if match is None:
            raise RuntimeError(f"flwr run did not start a run:\n{text[-3000:]}")
        return int(match.group(1))

    def run_status(self, run_id: int, wait: float = 30.0) -> str:
        """The run's status from ``flwr ls`` (e.g. ``finished:completed``, ``finished:failed``),
        waiting up to ``wait`` s for it to finish."""
        deadline = time.monotonic() + wait
        while True:
            ls = self.flwr("ls", self.CONNECTION, "--run-id", str(run_id), "--format", "json", timeout=60)
            try:
                runs = json.loads(ls.stdout[ls.stdout.index("{"):])["runs"]
                status = str(runs[0]["status"])
            except (ValueError, KeyError, IndexError):
                status = "unknown"
            if status.startswith("finished") or time.monotonic() > deadline:
                return status
            time.sleep(0.5)


class LocalDeployment(FlowerProcesses):
    """One ``flower-superlink --insecure`` and ``num_supernodes`` ``flower-supernode --insecure``.

    Parameters
    ----------
    num_supernodes : int
        Number of SuperNodes; SuperNode ``i`` gets ``--node-config "partition-id=i
        num-partitions=num_supernodes"``. Must be >= 1. Defaults to 3.
    workdir, startup_timeout
        As for :class:`FlowerProcesses` (connection ``deploy``).
    """

    def __init__(self, num_supernodes: int = 3, workdir: Path | str = ".", startup_timeout: float = 60.0) -> None:
        if num_supernodes < 1:
            raise ValueError(f"num_supernodes must be >= 1, got {num_supernodes}")
        super().__init__(workdir, startup_timeout, num_ports=1 + num_supernodes)
        self.num_supernodes = num_supernodes
        self.supernode_ports = self.other_ports

    def start(self) -> "LocalDeployment":
        """Start the SuperLink, wait until it answers, then start the SuperNodes."""
        super().start()
        for i, port in enumerate(self.supernode_ports):
            self._spawn(f"supernode-{i}", ["flower-supernode", "--insecure", "--superlink", self.address, "--node-config",
                                           f"partition-id={i} num-partitions={self.num_supernodes}", "--host", HOST,
                                           "--port", str(port), "--max-wait-time", str(int(self.startup_timeout))])
        return self


class LocalSimulation(FlowerProcesses):
    """A private ``flower-superlink --simulation``: ``flwr run`` against it runs the app in Flower's
    simulation runtime (a ``flwr-simulation`` process with Ray), as ``flwr run .`` does with its
    default local connection.

    Parameters
    ----------
    workdir, startup_timeout, env
        As for :class:`FlowerProcesses` (connection ``local-sim``); ``env`` can give ``PYTHONPATH``, so
        that the ``flwr-simulation`` process and its Ray workers import the same package as the caller.
    """

    CONNECTION = "local-sim"

    def __init__(self, workdir: Path | str = ".", startup_timeout: float = 60.0, env: dict[str, str] | None = None) -> None:
        # RAY_ADDRESS=local: a Ray instance of its own. Without it ray.init() joins a cluster that
        # another process on the machine started (/tmp/ray/ray_current_cluster) and the runs mix.
        super().__init__(workdir, startup_timeout, num_ports=1,
                         env={"RAY_ADDRESS": "local", "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0", **(env or {})})

    def superlink_command(self) -> list[str]:
        return [*super().superlink_command(), "--simulation"]

    def flwr_run_args(self, app_dir: Path | str, run_config: dict[str, Any],
                      federation_config: dict[str, Any] | None = None) -> list[str]:
        """``flwr run`` arguments plus ``--federation-config`` (``num-supernodes``,
        ``client-resources-num-cpus`` (int >= 1), ``client-resources-num-gpus``, ``init-args-*``)."""
        args = super().flwr_run_args(app_dir, run_config)
        if federation_config:
            args += ["--federation-config", run_config_arg(federation_config)]
        return args

    def flwr_run(self, app_dir: Path | str, run_config: dict[str, Any], timeout: float = 600.0,
                 federation_config: dict[str, Any] | None = None) -> subprocess.CompletedProcess:
        """``flwr run`` in simulation: returns when the run has ended (``--stream``)."""
        return self.flwr(*self.flwr_run_args(app_dir, run_config, federation_config), timeout=timeout, cwd=app_dir)


def flower_cli_available() -> bool:
    """True when ``flower-superlink``, ``flower-supernode`` and ``flwr`` are found beside the
    running interpreter or on ``PATH`` (:func:`tool_path`)."""
    return all(shutil.which(c, path=tool_path()) for c in FLOWER_CLI)
