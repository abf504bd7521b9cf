"""Two ways to execute an experiment, with one semantics.

- ``inprocess``: Flower's own legacy ``Server`` with a seeded
  :class:`~flwr_strategies.sampling.PartitionClientManager` driving in-process client proxies that
  call the clients directly (no Ray, no serialisation beyond Flower's own ``NumPyClient``
  conversion). For tests, quick runs and many-round workloads.
- ``ray``: Flower's Ray simulation (``flwr.simulation.run_simulation``) of the same ``ServerApp``
  and ``ClientApp`` that ``flwr run`` uses; per-client CPU/GPU resources are settable (fractional
  GPUs included).

Both set one torch thread per client and in the driver, sample through the same seeded client
manager and sort results by partition id, so the same seed gives the same per-round numbers.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from flwr.common import (
    Code,
    Context,
    DisconnectRes,
    EvaluateIns,
    EvaluateRes,
    FitIns,
    FitRes,
    GetParametersIns,
    GetParametersRes,
    GetPropertiesIns,
    GetPropertiesRes,
    ReconnectIns,
    RecordDict,
    parameters_to_ndarrays,
)
from flwr.server import Server, ServerAppComponents, ServerConfig
from flwr.server.client_proxy import ClientProxy

from flwr_strategies.metering import MeteredStrategy
from flwr_strategies.sampling import PartitionClientManager

from .driver import CoreDriver, PartitionContexts
from .experiment import ClientFactory, ExperimentConfig, get_experiment
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


class InProcessClientProxy(ClientProxy):
    """A ``ClientProxy`` that calls a client built by ``client_fn`` in this process (legacy-API
    strategies without a core: Flower's ``Server`` drives them).

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
        self.context = Context(
            run_id=0,
            node_id=partition_id,
            node_config={"partition-id": partition_id, "num-partitions": num_partitions},
            state=RecordDict(),
            run_config=dict(run_config or {}),
        )

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


def metered_strategy(cfg: ExperimentConfig, on_round_end=None) -> MeteredStrategy:
    """The method's legacy strategy for ``cfg``, wrapped in a :class:`MeteredStrategy` (methods
    registered with a legacy ``build_strategy`` and no core)."""
    return MeteredStrategy(get_experiment(cfg).build_strategy(), on_round_end=on_round_end)


def _quiet_flower(verbose: bool) -> None:
    level = logging.INFO if verbose else logging.WARNING
    logging.getLogger("flwr").setLevel(level)


def has_core(cfg: ExperimentConfig) -> bool:
    """True when ``cfg``'s method is registered with a framework-neutral core (``build_core``)."""
    return get_experiment(cfg).spec.build_core is not None


def build_core(cfg: ExperimentConfig):
    """A fresh server core of ``cfg``'s method, built from the cached experiment."""
    exp = get_experiment(cfg)
    return exp.spec.build_core(exp.server_setup(), dict(exp.params))


def run_driver(cfg: ExperimentConfig, on_round_end=None, state: dict | None = None) -> RunOutcome:
    """Run ``cfg``'s core and clients directly in this process (:class:`~.driver.CoreDriver`)."""
    exp = get_experiment(cfg)
    driver = CoreDriver(
        build_core(cfg),
        exp.client_fit,
        PartitionContexts(cfg.num_clients),
        evaluate_fn=exp.evaluate_fn,
        client_timeout=cfg.client_timeout,
        on_round_end=on_round_end,
    )
    rounds = driver.run(cfg.rounds, state=state)
    return RunOutcome(rounds, driver.failure_log, driver.global_arrays(), driver.core.state_dict(), "inprocess driver")


def run_flower_server(cfg: ExperimentConfig, on_round_end=None) -> RunOutcome:
    """Run ``cfg``'s legacy strategy with Flower's ``Server`` and in-process client proxies."""
    strategy = metered_strategy(cfg, on_round_end)
    manager = PartitionClientManager(cfg.num_clients, seed=cfg.seed)
    factory = ClientFactory(cfg)
    caller = BoundedCaller(cfg.client_timeout)
    for pid in range(cfg.num_clients):
        manager.register(InProcessClientProxy(pid, cfg.num_clients, factory, caller=caller))
    server = Server(client_manager=manager, strategy=strategy)
    server.set_max_workers(1)
    try:
        server.fit(num_rounds=cfg.rounds, timeout=None)
    finally:
        caller.close()
    rounds = strategy.finalize()
    final = parameters_to_ndarrays(strategy.latest_parameters) if strategy.latest_parameters is not None else None
    return RunOutcome(rounds, strategy.failure_log, final, None, "flower server (legacy strategy)")


def run_inprocess(cfg: ExperimentConfig, on_round_end=None, verbose: bool = False) -> tuple[RunOutcome, dict]:
    """Run ``cfg`` in this process: the direct driver for methods with a core, Flower's ``Server``
    with in-process proxies for legacy-only methods. Client calls are bounded by
    ``cfg.client_timeout``."""
    _quiet_flower(verbose)
    torch.set_num_threads(max(1, int(cfg.client_threads)))
    t0 = time.perf_counter()
    get_experiment(cfg)
    setup_s = time.perf_counter() - t0
    outcome = run_driver(cfg, on_round_end) if has_core(cfg) else run_flower_server(cfg, on_round_end)
    return outcome, {"setup_s": setup_s}


# -- Ray ---------------------------------------------------------------------------------------
_SERVER_STRATEGIES: dict[str, MeteredStrategy] = {}
_LOCK = threading.Lock()


class ServerFactory:
    """``server_fn(context)`` for a legacy-API ``ServerApp``: strategy, rounds and client manager."""

    def __init__(self, cfg: ExperimentConfig, token: str | None = None, on_round_end=None) -> None:
        self.cfg = cfg
        self.token = token
        self.on_round_end = on_round_end

    def __call__(self, context: Context) -> ServerAppComponents:
        torch.set_num_threads(max(1, int(self.cfg.client_threads)))
        strategy = metered_strategy(self.cfg, self.on_round_end)
        if self.token is not None:
            with _LOCK:
                _SERVER_STRATEGIES[self.token] = strategy
        return ServerAppComponents(
            strategy=strategy,
            config=ServerConfig(num_rounds=self.cfg.rounds),
            client_manager=PartitionClientManager(self.cfg.num_clients, seed=self.cfg.seed),
        )


def ray_backend_config(cfg: ExperimentConfig) -> dict[str, Any]:
    """``run_simulation`` backend config: per-client resources and Ray init arguments."""
    resources: dict[str, float] = {"num_cpus": cfg.client_cpus, "num_gpus": cfg.client_gpus}
    return {
        "client_resources": resources,
        "init_args": {"logging_level": "ERROR", "log_to_driver": False, "include_dashboard": False},
    }


def run_ray(cfg: ExperimentConfig, on_round_end=None, verbose: bool = False) -> tuple[MeteredStrategy, dict]:
    """Run ``cfg`` on Flower's Ray simulation runtime."""
    from flwr.client import ClientApp
    from flwr.server import ServerApp
    from flwr.simulation import run_simulation

    _quiet_flower(verbose)
    torch.set_num_threads(max(1, int(cfg.client_threads)))
    token = uuid.uuid4().hex
    get_experiment(cfg)  # build data and model once in the driver before Ray starts
    server_app = ServerApp(server_fn=ServerFactory(cfg, token, on_round_end))
    client_app = ClientApp(client_fn=ClientFactory(cfg))
    t0 = time.perf_counter()
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=cfg.num_clients,
        backend_config=ray_backend_config(cfg),
        verbose_logging=verbose,
    )
    total = time.perf_counter() - t0
    _quiet_flower(verbose)
    with _LOCK:
        strategy = _SERVER_STRATEGIES.pop(token, None)
    if strategy is None:
        raise RuntimeError("the Ray simulation ended before the server app started (see the log above)")
    rounds = strategy.finalize()
    if not rounds or rounds[-1]["round"] != cfg.rounds:
        done = rounds[-1]["round"] if rounds else 0
        raise RuntimeError(f"the Ray simulation stopped after {done} of {cfg.rounds} rounds (see the log above)")
    round_time = sum(r["wall_s"] for r in rounds if r["round"] > 0)
    return strategy, {"total_s": total, "startup_s": max(0.0, total - round_time), "rounds_s": round_time}


def run_backend(cfg: ExperimentConfig, on_round_end=None, verbose: bool = False) -> tuple[MeteredStrategy, dict]:
    """Run ``cfg`` on the backend it names."""
    if cfg.backend == "inprocess":
        return run_inprocess(cfg, on_round_end, verbose)
    if cfg.backend == "ray":
        return run_ray(cfg, on_round_end, verbose)
    raise KeyError(f"unknown backend '{cfg.backend}'; valid backends: inprocess, ray")
