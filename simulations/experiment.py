"""One federated experiment: configuration, and everything built from it once per process.

:class:`ExperimentConfig` is plain data (JSON-serialisable, picklable). :func:`get_experiment`
builds, and caches per process, the :class:`Experiment`: dataset and partition, model factory,
initial weights, central evaluation, the method's strategy and clients. The backends and the
``flwr run`` app all go through it, so every execution path builds the same thing.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np
import torch
from collections.abc import Iterator
from contextlib import contextmanager

from flwr.client import Client
from flwr.common import (
    Context,
    EvaluateIns,
    EvaluateRes,
    FitIns,
    FitRes,
    GetParametersIns,
    GetParametersRes,
    GetPropertiesIns,
    GetPropertiesRes,
)

from flwr_strategies.clients.training import get_weights, set_weights
from flwr_strategies.registry import MethodSpec, get_method, resolve_params
from flwr_strategies.setup import ClientSetup, ServerSetup, TrainConfig

from .tasks import Task, build_task

BACKENDS = ("inprocess", "ray")


@dataclass
class ExperimentConfig:
    """Settings of one run (CLI flags map one to one onto these fields).

    ``params`` holds the method's hyperparameters (``--set key=value``); ``fail`` lists injected
    client failures as ``"round:partition"`` (``"*:p"`` for every round) to exercise failure paths.
    """

    method: str = "fedavg"
    dataset: str = "digits"
    data_dir: str | None = None
    num_clients: int = 10
    rounds: int = 20
    seed: int = 0
    data_seed: int | None = None
    partition: str | None = None
    alpha: float = 0.5
    classes_per_client: int = 2
    fraction_fit: float = 1.0
    lr: float = 0.1
    local_epochs: int | None = 1
    local_steps: int | None = None
    batch_size: int = 32
    weight_decay: float = 0.0
    momentum: float = 0.0
    lr_decay: float = 1.0
    grad_clip: float | None = None
    model: str | None = None
    synthetic_alpha: float = 1.0
    synthetic_beta: float = 1.0
    synthetic_mean_samples: float = 4.0
    backend: str = "inprocess"
    device: str = "cpu"
    client_cpus: float = 1.0
    client_gpus: float = 0.0
    client_threads: int = 1
    client_timeout: float | None = 3600.0
    params: dict[str, Any] = field(default_factory=dict)
    fail: list[str] = field(default_factory=list)
    out: str | None = None
    progress: bool = True

    def validate(self) -> None:
        """Raise ``ValueError``/``KeyError`` for settings that cannot run."""
        if self.num_clients < 1:
            raise ValueError(f"num_clients must be >= 1, got {self.num_clients}")
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")
        if not 0.0 < self.fraction_fit <= 1.0:
            raise ValueError(f"fraction_fit must be in (0, 1], got {self.fraction_fit}")
        if self.backend not in BACKENDS:
            raise KeyError(f"unknown backend '{self.backend}'; valid backends: {', '.join(BACKENDS)}")
        if self.client_gpus < 0 or self.client_cpus <= 0:
            raise ValueError("client_cpus must be > 0 and client_gpus >= 0")
        if self.client_timeout is not None and not (
            isinstance(self.client_timeout, (int, float)) and math.isfinite(self.client_timeout) and self.client_timeout > 0
        ):
            raise ValueError(f"client_timeout must be a number of seconds > 0 (or None for no limit), got {self.client_timeout!r}")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"--device {self.device} requested but CUDA is not available on this machine")
        self.train_config()  # validates lr, epochs, steps, batch size
        resolve_params(get_method(self.method), self.params)
        _parse_failures(self.fail)

    def train_config(self) -> TrainConfig:
        return TrainConfig(
            lr=self.lr,
            local_epochs=self.local_epochs,
            local_steps=self.local_steps,
            batch_size=self.batch_size,
            weight_decay=self.weight_decay,
            momentum=self.momentum,
            lr_decay=self.lr_decay,
            grad_clip=self.grad_clip,
        )

    def key(self) -> str:
        """Identity of what gets built (output and execution settings excluded)."""
        d = asdict(self)
        for k in ("out", "progress", "backend", "client_cpus", "client_gpus", "client_timeout"):
            d.pop(k)
        return json.dumps(d, sort_keys=True, default=str)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ExperimentConfig":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise KeyError(f"unknown experiment settings: {', '.join(sorted(unknown))}")
        return cls(**d)


def _parse_failures(specs: list[str]) -> set[tuple[int | None, int]]:
    out: set[tuple[int | None, int]] = set()
    for s in specs:
        try:
            r, p = str(s).split(":")
            out.add((None if r.strip() == "*" else int(r), int(p)))
        except ValueError:
            raise ValueError(f"bad failure spec '{s}': use ROUND:PARTITION or *:PARTITION") from None
    return out


class InjectedFailure(RuntimeError):
    """Raised by a client that the experiment was told to fail (``--fail``)."""


class Experiment:
    """Everything built from one :class:`ExperimentConfig` (data, model, method), per process."""

    def __init__(self, cfg: ExperimentConfig) -> None:
        cfg.validate()
        self.cfg = cfg
        self.spec: MethodSpec = get_method(cfg.method)
        self.params = resolve_params(self.spec, cfg.params)
        self.train = cfg.train_config()
        self.task: Task = build_task(self.spec.task, cfg)
        self.device = torch.device(cfg.device)
        torch.manual_seed(cfg.seed)
        init_model = self.task.model_fn()
        self.initial_parameters = get_weights(init_model)
        self._pool: list[torch.nn.Module] = []
        self._pool_lock = threading.Lock()
        self._data_cache: dict[int, Any] = {}
        self._eval_lock = threading.Lock()
        self._eval_model = init_model
        self._failures = _parse_failures(cfg.fail)

    # -- server side -----------------------------------------------------------------------
    def model_fn(self) -> torch.nn.Module:
        return self.task.model_fn()

    def evaluate_fn(self, server_round: int, arrays: list[np.ndarray], config: dict) -> tuple[float, dict]:
        """Central evaluation of ``arrays`` on the task's test set."""
        with self._eval_lock:
            set_weights(self._eval_model, arrays)
            return self.task.evaluate(self._eval_model)

    def fit_config(self, server_round: int) -> dict[str, Any]:
        """The standard per-round client config."""
        return {
            "server_round": int(server_round),
            "lr": self.train.lr_at(server_round),
            "local_epochs": int(self.train.local_epochs or 0),
            "local_steps": int(self.train.local_steps or 0),
            "batch_size": int(self.train.batch_size),
            "seed": int(self.cfg.seed),
        }

    def server_setup(self) -> ServerSetup:
        return ServerSetup(
            initial_parameters=[a.copy() for a in self.initial_parameters],
            evaluate_fn=self.evaluate_fn,
            num_clients=self.cfg.num_clients,
            fraction_fit=self.cfg.fraction_fit,
            num_rounds=self.cfg.rounds,
            seed=self.cfg.seed,
            train=self.train,
            model_fn=self.model_fn,
            fit_config=self.fit_config,
            num_examples=self.task.num_examples(),
        )

    def build_strategy(self):
        return self.spec.build_strategy(self.server_setup(), dict(self.params))

    # -- client side -----------------------------------------------------------------------
    @contextmanager
    def borrowed_model(self) -> Iterator[torch.nn.Module]:
        """A client model from a per-process pool (models are reused, never rebuilt per round)."""
        with self._pool_lock:
            model = self._pool.pop() if self._pool else None
        if model is None:
            model = self.task.model_fn()
        try:
            yield model
        finally:
            with self._pool_lock:
                self._pool.append(model)

    def client_setup(self, partition_id: int, state: Any, model: torch.nn.Module) -> ClientSetup:
        if not 0 <= partition_id < self.cfg.num_clients:
            raise ValueError(f"partition id {partition_id} outside 0..{self.cfg.num_clients - 1}")
        with self._pool_lock:
            if partition_id not in self._data_cache:
                self._data_cache[partition_id] = self.task.client_data(partition_id)
            train_data, test_data = self._data_cache[partition_id]
        return ClientSetup(
            partition_id=partition_id,
            num_partitions=self.cfg.num_clients,
            model=model,
            train_data=train_data,
            test_data=test_data,
            train=self.train,
            device=self.device,
            seed=self.cfg.seed,
            state=state,
        )

    def build_client(self, context: Context, model: torch.nn.Module) -> Any:
        """The method's ``NumPyClient`` for ``context``'s partition, using ``model``."""
        pid = int(context.node_config["partition-id"])
        client = self.spec.build_client(self.client_setup(pid, context.state, model), dict(self.params))
        if any(p == pid for _, p in self._failures):
            _inject_failure(client, pid, self._failures)
        return client

    def client_fit(self, context: Context, arrays: list[np.ndarray], config: dict[str, Any]) -> tuple[list[np.ndarray], int, dict]:
        """One local round of ``context``'s client on ``arrays`` (the in-process driver's call):
        the method's ``NumPyClient.fit`` around a pooled model, with no Flower conversion."""
        with self.borrowed_model() as model:
            return self.build_client(context, model).fit(arrays, config)

    def client_evaluate(self, context: Context, arrays: list[np.ndarray], config: dict[str, Any]) -> tuple[float, int, dict]:
        """``context``'s client's ``NumPyClient.evaluate`` on ``arrays`` around a pooled model."""
        with self.borrowed_model() as model:
            return self.build_client(context, model).evaluate(arrays, config)

    def make_client(self, context: Context) -> Client:
        torch.set_num_threads(max(1, int(self.cfg.client_threads)))
        return PooledClient(self, context)


class PooledClient(Client):
    """A Flower ``Client`` that builds the method's client around a pooled model for each call."""

    def __init__(self, experiment: Experiment, context: Context) -> None:
        self.experiment = experiment
        self.ctx = context

    def _call(self, name: str, ins: Any) -> Any:
        with self.experiment.borrowed_model() as model:
            return getattr(self.experiment.build_client(self.ctx, model).to_client(), name)(ins)

    def get_properties(self, ins: GetPropertiesIns) -> GetPropertiesRes:
        return self._call("get_properties", ins)

    def get_parameters(self, ins: GetParametersIns) -> GetParametersRes:
        return self._call("get_parameters", ins)

    def fit(self, ins: FitIns) -> FitRes:
        return self._call("fit", ins)

    def evaluate(self, ins: EvaluateIns) -> EvaluateRes:
        return self._call("evaluate", ins)


def _inject_failure(client: Any, pid: int, failures: set[tuple[int | None, int]]) -> None:
    original = client.fit

    def fit(parameters, config):
        rnd = int(config.get("server_round", 0))
        if (None, pid) in failures or (rnd, pid) in failures:
            raise InjectedFailure(f"injected failure of partition {pid} in round {rnd}")
        return original(parameters, config)

    client.fit = fit


_EXPERIMENTS: dict[str, Experiment] = {}
_BUILD_LOCK = threading.Lock()


def get_experiment(cfg: ExperimentConfig) -> Experiment:
    """The process-wide :class:`Experiment` for ``cfg`` (built on first use)."""
    key = cfg.key()
    with _BUILD_LOCK:
        if key not in _EXPERIMENTS:
            _EXPERIMENTS.clear()  # one experiment at a time per process keeps memory flat
            _EXPERIMENTS[key] = Experiment(cfg)
        return _EXPERIMENTS[key]


class ClientFactory:
    """Picklable ``client_fn(context)`` for Flower: builds the method's client for a partition."""

    def __init__(self, cfg: ExperimentConfig) -> None:
        self.cfg = cfg

    def __call__(self, context: Context) -> Client:
        return get_experiment(self.cfg).make_client(context)
