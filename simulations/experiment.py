"""One federated experiment: everything built from its configuration, once per process.

:class:`ExperimentConfig` (defined in :mod:`.settings`: settings, paper defaults, provenance and
checks) is plain data (JSON-serialisable, picklable). :func:`get_experiment` builds, and caches per
process, the :class:`Experiment` of its resolved settings: dataset and partition, model factory,
initial weights, central evaluation, the method's strategy and clients. The backends and the
``flwr run`` app all go through it, so every execution path builds the same thing.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import numpy as np
import torch
from collections.abc import Iterator
from contextlib import contextmanager

from flwr.client import Client
from flwr.common import (Context, EvaluateIns, EvaluateRes, FitIns, FitRes, GetParametersIns, GetParametersRes,
    GetPropertiesIns, GetPropertiesRes)

from flwr_strategies.clients.training import get_weights, set_weights
from flwr_strategies.registry import MethodSpec, get_method
from flwr_strategies.setup import AUTO_LR, ClientSetup, ServerSetup

from .settings import ExperimentConfig, experiment_budget, simulated_node_config
from .tasks import Task, build_task

__all__ = ["ExperimentConfig", "Experiment", "InjectedFailure", "MethodSettingsError", "get_experiment", "ClientFactory"]


class MethodSettingsError(ValueError):
    """The method rejected its settings when its server core or a client was built (before training)."""


class InjectedFailure(RuntimeError):
    """Raised by a client that the experiment was told to fail (``--fail``)."""


class Experiment:
    """Everything built from one :class:`ExperimentConfig` (data, model, method), per process."""

    def __init__(self, cfg: ExperimentConfig) -> None:
        cfg = cfg.validate()  # resolved: every value filled in, provenance recorded
        self.cfg = cfg
        self.spec: MethodSpec = get_method(cfg.method)
        self.params = dict(cfg.params)
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
        self._failures = cfg.failures()

    # -- server side -----------------------------------------------------------------------
    def model_fn(self) -> torch.nn.Module:
        return self.task.model_fn()

    def evaluate_fn(self, server_round: int, arrays: list[np.ndarray], config: dict) -> tuple[float, dict]:
        """Central evaluation of ``arrays`` on the task's test set."""
        with self._eval_lock:
            set_weights(self._eval_model, arrays)
            return self.task.evaluate(self._eval_model)

    def fit_config(self, server_round: int) -> dict[str, Any]:
        """The standard per-round client config (the strategy adds the round, ``server-round``)."""
        lr = {} if self.train.lr == AUTO_LR else {"lr": self.train.lr_at(server_round)}  # "auto": the core's own
        return {**lr, "local_epochs": int(self.train.local_epochs or 0),
                "local_steps": int(self.train.local_steps or 0), "batch_size": int(self.train.batch_size),
                "seed": int(self.cfg.seed)}

    def server_setup(self) -> ServerSetup:
        return ServerSetup(initial_parameters=[a.copy() for a in self.initial_parameters], evaluate_fn=self.evaluate_fn,
                           num_clients=self.cfg.num_clients, fraction_fit=self.cfg.fraction_fit,
                           num_rounds=self.cfg.rounds, seed=self.cfg.seed, train=self.train, model_fn=self.model_fn,
                           fit_config=self.fit_config, num_examples=self.task.num_examples())

    def build_strategy(self):
        return self.spec.legacy_strategy(self.server_setup(), dict(self.params))

    def build_core(self):
        """A fresh server core of the method."""
        return self.spec.build_core(self.server_setup(), dict(self.params))

    def preflight(self) -> None:
        """Build the method's server core and one client
        now and discard them, so that a setting the method rejects fails before the first round.

        Random states (torch, NumPy, Python) are restored afterwards: a run gives the same numbers
        with or without this check. Raises :class:`MethodSettingsError` naming the method and the
        method's own message (which names the setting and the value).
        """
        from flwr.common import RecordDict

        with _preserved_rng():
            try:
                self.build_core()
                self.spec.build_client(self.client_setup(0, RecordDict(), self.task.model_fn()), dict(self.params))
            except (ValueError, TypeError, KeyError) as err:
                msg = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
                given = ", ".join(f"{k}={v}" for k, v in self.cfg.params.items() if self.cfg.sources()["params"].get(k) in ("user", "preset", "run config"))
                raise MethodSettingsError(
                    f"method '{self.cfg.method}' rejected its settings before training"
                    f"{f' (--set {given})' if given else ''}: {msg}"
                ) from err

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
        return ClientSetup(partition_id=partition_id, num_partitions=self.cfg.num_clients, model=model,
                           train_data=train_data, test_data=test_data, train=self.train, device=self.device,
                           seed=self.cfg.seed, state=state)

    def build_client(self, context: Context, model: torch.nn.Module) -> Any:
        """The method's ``NumPyClient`` for ``context``'s partition, using ``model``."""
        pid = int(context.node_config["partition-id"])
        _simulated_node(context, self.cfg.client_seed, bool(self.params.get("evaluate_private", False)), pid,
                        experiment_budget(self.params, self.cfg.rounds))
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


def _simulated_node(context: Context, client_seed: int | None, allow_private_eval: bool, pid: int,
                    budget: dict[str, Any] | None) -> None:
    """Simulation only: the node-side settings the experimenter gives a simulated node
    (:func:`~.settings.simulated_node_config`: its secret seed from ``--client-seed``, its consent to
    private-model evaluation, its privacy budget), written into its ``context.state`` where the node
    has none of its own (the project's app writes a SuperNode's own node config there first, and
    records a node without a budget as such; the strategy never sees it)."""
    from flwr_strategies.clients.doadp import (BUDGET_STATE_KEY, CONSENT_KEY, PRIVATE_EVAL_KEY, SECRET_KEY, SEED_KEY,
        allow_private_eval as consent, client_budget_of, set_client_budget, set_client_seed)

    node = simulated_node_config(client_seed, allow_private_eval, pid, budget)
    if SEED_KEY in node and SECRET_KEY not in context.state:
        set_client_seed(context.state, node[SEED_KEY])
    if PRIVATE_EVAL_KEY in node and CONSENT_KEY not in context.state:
        consent(context.state, True)
    if budget is not None and BUDGET_STATE_KEY not in context.state:
        set_client_budget(context.state, client_budget_of(None, node))


def _inject_failure(client: Any, pid: int, failures: set[tuple[int | None, int]]) -> None:
    """Make ``client.fit`` raise :class:`InjectedFailure` in the listed rounds (any method's client:
    a ``NumPyClient`` gets ``fit(parameters, config)``, a Flower ``Client`` gets ``fit(FitIns)``)."""
    original = client.fit

    def fit(*args, **kwargs):
        ins = args[0] if len(args) == 1 and not kwargs else None
        config = getattr(ins, "config", None) if ins is not None else (args[1] if len(args) > 1 else kwargs.get("config", {}))
        rnd = int((config or {}).get("server-round", 0))
        if (None, pid) in failures or (rnd, pid) in failures:
            raise InjectedFailure(f"injected failure of partition {pid} in round {rnd}")
        return original(*args, **kwargs)

    client.fit = fit


@contextmanager
def _preserved_rng() -> Iterator[None]:
    """Restore torch's, NumPy's and Python's global random states on exit."""
    torch_state = torch.random.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    np_state = np.random.get_state()
    py_state = random.getstate()
    try:
        yield
    finally:
        torch.random.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
        np.random.set_state(np_state)
        random.setstate(py_state)


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
        self.cfg = cfg.resolve()

    def __call__(self, context: Context) -> Client:
        return get_experiment(self.cfg).make_client(context)
