"""Two ways to execute an experiment, with one semantics.

- ``inprocess``: everything in this process, no Flower transport. The method's
  framework-neutral core runs on :class:`~.driver.CoreDriver`: the core and the clients are called
  directly, with the same arrays, configs and validation as the Flower adapters, so the numbers are
  theirs bit for bit. Every client call is bounded by
  ``client_timeout``; a client that raises or hangs is a failed client. For tests, quick runs and
  many-round workloads.
- ``ray``: Flower's simulation runtime, the non-deprecated way: ``flwr run`` of the project's
  Message-API app (:mod:`.app`) against a private local ``flower-superlink --simulation`` with one
  SuperNode per client (:class:`~.deployment.LocalSimulation`). Per-client CPU/GPU resources are
  settable; a run that fails (a ServerApp error, a dead client actor) raises.

Both set one torch thread per client, sample by partition id with the core's seeded generator and
aggregate replies in partition order, so the same seed gives the same per-round numbers.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.common import (Context, DisconnectRes, EvaluateIns, EvaluateRes, FitIns, FitRes, GetParametersIns,
    GetParametersRes, GetPropertiesIns, GetPropertiesRes, ReconnectIns)
from flwr.server.client_proxy import ClientProxy

import flwr_strategies

from .driver import CoreDriver, PartitionContexts
from .experiment import ExperimentConfig, get_experiment
from .results import OUTPUT_BASE_ENV
from .settings import simulated_nodes_env
from .timeouts import BoundedCaller

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")


@dataclass
class RunOutcome:
    """What a backend hands back: the per-round records and the final model.

    ``rounds`` and ``failure_log`` have the keys of
    :class:`~flwr_strategies.adapters.recorder.RoundRecorder` (the results.json format);
    ``final_arrays`` is the global model after the last round; ``state`` the core's
    ``state_dict()`` when the core ran in this process (None otherwise); ``path`` names what ran.
    """

    rounds: list[dict[str, Any]]
    failure_log: list[dict[str, Any]]
    final_arrays: list[np.ndarray] | None = None
    state: dict[str, Any] | None = None
    path: str = ""
    contexts: list[Context] | None = None  # in process: the clients' Contexts (their context.state)


class InProcessClientProxy(ClientProxy):
    """A ``ClientProxy`` that calls a client built by ``client_fn`` in this process (Flower's
    ``Server`` driving a legacy-API strategy in this process).

    It keeps one Flower ``Context`` per partition for the whole run, so ``context.state``
    persists across rounds exactly as in Flower's simulation runtime. ``fit`` and ``evaluate``
    are bounded by ``caller`` (a :class:`~.timeouts.BoundedCaller`; default: no limit).
    """

    def __init__(self, partition_id: int, num_partitions: int, client_fn: Any, run_config: dict | None = None,
                 caller: BoundedCaller | None = None) -> None:
        super().__init__(cid=str(partition_id))
        self.node_id = partition_id
        self.client_fn = client_fn
        self.caller = caller or BoundedCaller(None)
        self.context = PartitionContexts(num_partitions, run_config)[partition_id]

    def get_properties(self, ins: GetPropertiesIns, timeout: float | None, group_id: int | None) -> GetPropertiesRes:
        return self.client_fn(self.context).get_properties(ins)

    def get_parameters(self, ins: GetParametersIns, timeout: float | None, group_id: int | None) -> GetParametersRes:
        return self.client_fn(self.context).get_parameters(ins)

    def fit(self, ins: FitIns, timeout: float | None, group_id: int | None) -> FitRes:
        return self.caller(lambda: self.client_fn(self.context).fit(ins), f"partition {self.node_id} fit")

    def evaluate(self, ins: EvaluateIns, timeout: float | None, group_id: int | None) -> EvaluateRes:
        return self.caller(lambda: self.client_fn(self.context).evaluate(ins), f"partition {self.node_id} evaluate")

    def reconnect(self, ins: ReconnectIns, timeout: float | None, group_id: int | None) -> DisconnectRes:
        return DisconnectRes(reason="")


def _quiet_flower(verbose: bool) -> None:
    level = logging.INFO if verbose else logging.WARNING
    logger = logging.getLogger("flwr")
    if logger.level != level:  # setLevel clears every logger's cache: not on every run
        logger.setLevel(level)


def run_driver(cfg: ExperimentConfig, on_round_end=None, state: dict | None = None) -> RunOutcome:
    """Run ``cfg``'s core and clients directly in this process (:class:`~.driver.CoreDriver`)."""
    exp = get_experiment(cfg)
    cfg = exp.cfg  # resolved: every setting filled in
    driver = CoreDriver(exp.build_core(), exp.client_fit, PartitionContexts(cfg.num_clients),
                        evaluate_fn=exp.evaluate_fn, client_timeout=cfg.client_timeout,
                        max_num_examples=exp.spec.max_num_examples(exp.server_setup()), on_round_end=on_round_end)
    rounds = driver.run(cfg.rounds, state=state)
    return RunOutcome(rounds, driver.failure_log, driver.global_arrays(), driver.core.state_dict(), "inprocess driver",
                      driver.contexts.values())


def run_inprocess(cfg: ExperimentConfig, on_round_end=None, verbose: bool = False) -> tuple[RunOutcome, dict]:
    """Run ``cfg`` in this process on the direct driver. Client calls are bounded by
    ``cfg.client_timeout``."""
    _quiet_flower(verbose)
    torch.set_num_threads(max(1, int(cfg.client_threads)))
    t0 = time.perf_counter()
    cfg = get_experiment(cfg).cfg  # resolved
    setup_s = time.perf_counter() - t0
    outcome = run_driver(cfg, on_round_end)
    return outcome, {"setup_s": setup_s}


# -- Ray: Flower's simulation runtime through `flwr run` ------------------------------------------
APP_COMPONENTS = {"serverapp": "flwr_strategies.simulations.app:server_app",
                  "clientapp": "flwr_strategies.simulations.app:client_app"}

_APP_PYPROJECT = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "flwr-strategies-run"
version = "1.0.0"
description = "One run of flwr-strategies in Flower's simulation runtime"
license = "Apache-2.0"
dependencies = []

[tool.flwr.app]
publisher = "flwr-strategies"

[tool.flwr.app.components]
serverapp = "{serverapp}"
clientapp = "{clientapp}"

[tool.flwr.app.config]
experiment = ""
out-dir = ""
node-order = "query"
"""


def write_app_dir(folder: Path | str, *, serverapp: str | None = None, clientapp: str | None = None) -> Path:
    """Write a minimal Flower app folder (a ``pyproject.toml``) whose components are the project's
    app (or the given ``module:attribute`` paths) and whose run config takes ``experiment`` (an
    :class:`ExperimentConfig` as JSON) and ``out-dir``. ``flwr run`` builds it into a small FAB;
    the code itself is imported from the environment."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(_APP_PYPROJECT.format(
        serverapp=serverapp or APP_COMPONENTS["serverapp"], clientapp=clientapp or APP_COMPONENTS["clientapp"]))
    return folder


def federation_config(cfg: ExperimentConfig, verbose: bool = False) -> dict[str, Any]:
    """``flwr run --federation-config`` for ``cfg``: one SuperNode per client, the per-client Ray
    resources (Flower's CLI takes whole CPUs: ``client_cpus`` is rounded up), Ray's logging."""
    return {"num-supernodes": int(cfg.num_clients), "client-resources-num-cpus": max(1, math.ceil(cfg.client_cpus)),
            "client-resources-num-gpus": float(cfg.client_gpus),
            "init-args-logging-level": "INFO" if verbose else "ERROR", "init-args-log-to-driver": bool(verbose)}


def _read_results(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class RayRunError(RuntimeError):
    """A run in Flower's simulation runtime did not complete (the message has the status and log).

    ``results`` holds what the ServerApp wrote to ``results.json`` before that (maybe empty).
    """

    def __init__(self, message: str, results: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.results = dict(results or {})


#: Flower's own per-round limit (``Strategy.start(timeout=3600)``), used with ``client_timeout="auto"``
FLOWER_ROUND_TIMEOUT_S = 3600.0
#: seconds allowed for start-up (SuperLink, Ray, the nodes answering) in the ray backend's overall limit
RAY_STARTUP_S = 600.0
#: seconds ``flwr run`` may take to return after the ServerApp has written its final status
RAY_FINISH_GRACE_S = 60.0


def round_timeout(cfg: ExperimentConfig) -> float:
    """Seconds the ServerApp waits for one round's replies: ``client_timeout`` per client
    (``num_clients`` of them, in case they run one after another), or Flower's own 3,600 s per
    round with ``client_timeout`` ``"auto"`` or None."""
    t = cfg.client_timeout
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        return float(t) * max(1, int(cfg.num_clients))
    return FLOWER_ROUND_TIMEOUT_S


def ray_timeout(cfg: ExperimentConfig) -> float:
    """The ray backend's overall limit: start-up plus two exchanges (train, evaluate) per round,
    each bounded by :func:`round_timeout`."""
    return RAY_STARTUP_S + 2 * int(cfg.rounds) * round_timeout(cfg)


def run_ray(cfg: ExperimentConfig, on_round_end=None, verbose: bool = False, *, app_dir: Path | str | None = None,
            workdir: Path | str | None = None, timeout: float | None = None) -> tuple[RunOutcome, dict]:
    """Run ``cfg`` in Flower's simulation runtime (Ray): ``flwr run`` of the project's Message-API
    app against a private local simulation SuperLink with ``num-supernodes = cfg.num_clients``.

    Round records come from the ServerApp's ``results.json`` (same keys and, on the same seed,
    the same numbers as the in-process backend). :class:`RayRunError` (with the run's status, error
    and log tail) is raised when Flower does not report ``finished:completed``, when the ServerApp
    failed, when the whole run takes longer than ``timeout`` seconds (default
    :func:`ray_timeout`), and when ``flwr run`` has not returned :data:`RAY_FINISH_GRACE_S`
    seconds after the ServerApp wrote its final status (a ClientApp that never returns keeps
    Flower's run open). A run that finished degraded is returned; its records say why.
    ``app_dir`` replaces the generated app folder (tests use it to run a different ClientApp).
    """
    from .deployment import LocalSimulation, flower_cli_available

    if not flower_cli_available():
        from .deployment import interpreter_scripts

        raise FileNotFoundError("the ray backend runs `flwr run` against `flower-superlink --simulation`, but the Flower "
                           f"CLI (flwr, flower-superlink) is neither beside {sys.executable} "
                           f"({', '.join(interpreter_scripts())}) nor on PATH; install flwr[simulation] in this "
                           "environment")
    _quiet_flower(verbose)
    cfg = cfg.validate()  # resolved: the ServerApp and the clients rebuild exactly this
    t0 = time.perf_counter()
    own_dir = workdir is None
    work = Path(workdir or tempfile.mkdtemp(prefix="flwr-strategies-ray-"))
    out_dir = work / "out"
    app = Path(app_dir) if app_dir is not None else write_app_dir(work / "app")
    package_root = Path(flwr_strategies.__file__).resolve().parents[1]  # a checkout or site-packages
    pythonpath = os.pathsep.join(p for p in (str(package_root), os.environ.get("PYTHONPATH", "")) if p)
    env = {"PYTHONPATH": pythonpath, "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0", "RAY_DEDUP_LOGS": "0",
           OUTPUT_BASE_ENV: str(work),  # the ServerApp writes into this run's own folder, nowhere else
           **simulated_nodes_env(cfg)}  # the simulated SuperNodes' own settings, never in the run config
    # Flower's simulation runtime registers SuperNodes in partition order: the ServerApp reads the
    # order instead of querying every node (checked against every reply; see app.identify_nodes)
    run_config = {"experiment": json.dumps({**cfg.to_dict(), "client_seed": None}, default=str),
                  "out-dir": str(out_dir), "node-order": "registration"}
    results_path = out_dir / "results.json"
    timeout = ray_timeout(cfg) if timeout is None else float(timeout)
    seen = 0
    stuck: str | None = None
    try:
        with LocalSimulation(work, env=env) as sim:
            ready = time.perf_counter()
            log_path = work / "logs" / "flwr-run.log"
            with open(log_path, "wb") as log_file:
                proc = subprocess.Popen(["flwr", *sim.flwr_run_args(app, run_config, federation_config(cfg, verbose))],
                                        env=sim.env, cwd=app, stdout=log_file, stderr=subprocess.STDOUT)
                finished_at: float | None = None
                try:
                    while proc.poll() is None:
                        now = time.perf_counter()
                        if now - t0 > timeout:
                            stuck = f"the run did not finish within the ray backend's limit of {timeout:g} s"
                            break
                        if finished_at is None and (_read_results(results_path) or {}).get("status", "running") != "running":
                            finished_at = now  # the ServerApp has written its final status
                        if finished_at is not None and now - finished_at > RAY_FINISH_GRACE_S:
                            stuck = (f"the ServerApp finished, but `flwr run` had not returned {RAY_FINISH_GRACE_S:g} s "
                                     "later (a ClientApp that never returns keeps Flower's run open)")
                            break
                        if on_round_end is not None:
                            seen = _report_new_rounds(results_path, seen, on_round_end)
                        time.sleep(0.2)
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
            cli_log = log_path.read_text(errors="replace")
            status = sim.run_status(sim.run_id(cli_log), wait=5.0 if stuck else 30.0) if "started run" in cli_log \
                else "not started"
            server_log = sim.all_logs(3000)
        total = time.perf_counter() - t0
        results = _read_results(results_path) or {}
        if on_round_end is not None:
            _report_new_rounds(results_path, seen, on_round_end)
        ended = results.get("status", "running")
        if stuck or status != "finished:completed" or ended in ("running", "failed"):
            error = results.get("error") or "(no error recorded by the ServerApp)"
            what = stuck or "the run in Flower's simulation runtime did not complete"
            raise RayRunError(
                f"{what}; Flower's status {status!r}, "
                f"the ServerApp's {ended!r}: {error}\n--- flwr run ---\n{cli_log[-4000:]}\n{server_log}", results)
        rounds = results["rounds"]
        final_path = out_dir / "final.npz"
        final = None
        if final_path.exists():
            with np.load(final_path) as npz:
                final = [npz[f"arr_{i}"] for i in range(len(npz.files))]
        round_time = sum(r.get("wall_s", 0.0) for r in rounds if r["round"] > 0)
        timing = {"total_s": total, "superlink_start_s": ready - t0, "startup_s": max(0.0, total - round_time),
                  "rounds_s": round_time}
        return RunOutcome(rounds, results.get("failure_log", []), final, None, results.get("runtime", "flwr run")), timing
    finally:
        if own_dir:
            shutil.rmtree(work, ignore_errors=True)


def _report_new_rounds(path: Path, seen: int, on_round_end) -> int:
    results = _read_results(path)
    if not results:
        return seen
    done = [r for r in results.get("rounds", []) if "wall_s" in r]
    for rec in done[seen:]:
        on_round_end(rec)
    return max(seen, len(done))


def run_backend(cfg: ExperimentConfig, on_round_end=None, verbose: bool = False) -> tuple[RunOutcome, dict]:
    """Run ``cfg`` on the backend it names."""
    if cfg.backend == "inprocess":
        return run_inprocess(cfg, on_round_end, verbose)
    if cfg.backend == "ray":
        return run_ray(cfg, on_round_end, verbose)
    raise KeyError(f"unknown backend '{cfg.backend}'; valid backends: inprocess, ray")
