"""The project's Flower app (``[tool.flwr.app.components]``): ``flwr run .``, the ``ray`` backend
and real deployments all run these two objects (``docs/deployment.md`` describes their run config).

**ServerApp** (``@app.main()``, the Message API): learns which node holds which partition
(:func:`identify_nodes`), then runs the method's Message-API strategy through Flower's
``strategy.start(...)`` with central evaluation. With ``out-dir`` it writes ``results.json`` after every
round (its ``status``: :func:`~.results.finished_status`) and ``final.npz`` at the end, atomically, in a
folder confined to ``FLWR_STRATEGIES_OUTPUT_BASE`` and held for the run (:func:`output_folder`). A
ServerApp that fails raises (Flower marks the run ``finished:failed``); a dead Ray client actor stops
the run (:class:`ActorDied`).

**ClientApp**: train/evaluate run the method's client on a pooled model, ``query.partition`` answers
the partition query, and a legacy-API ServerApp's messages reach the same clients
(:class:`ProjectClientApp`).

**Run config**: the runner's experiment keys (:func:`config_from_run_config`) plus ``out-dir``,
``overwrite``, ``resume`` (true: continue from ``<out-dir>/checkpoint.npz``, the strategy's checkpoint a
run with ``out-dir`` writes after every round; the nodes restore their clients' state,
:mod:`flwr_strategies.clients.store`), ``experiment`` (a whole config as JSON) and ``node-order``.
A client's secrets stay on its node: a client seed in the run config is refused; a SuperNode's own
``--node-config`` gives its DO-ADP seed, consent and privacy budget (:func:`adopt_node_settings`).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from logging import INFO, WARNING
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common import log
from flwr.serverapp import Grid, ServerApp

from flwr_strategies.adapters.message import NodeDirectory
from flwr_strategies.clients.app import PARTITION_KEY, message_config, partition_query, train_reply
from flwr_strategies.clients.store import client_state_mod
from flwr_strategies.core.messages import numeric_metrics
from flwr_strategies.core.state import atomic_write, load_state, save_state
from flwr_strategies.setup import SettingError

from .settings import SIMULATED_NODES_ENV, ExperimentConfig, seed_in_run_config_error, simulated_node_config
from .settings import config_from_run_config as settings_from_run_config
from .results import OutputFolder, confined_out_dir, finished_status, summarize, write_json

if TYPE_CHECKING:
    from .experiment import Experiment

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

#: Error texts of a Ray client actor that died (Flower's simulation runtime does not replace it).
ACTOR_DEATH_MARKERS = ("ActorDiedError", "RayActorError", "actor died", "ActorUnavailableError")


class ActorDied(RuntimeError):
    """A Ray client actor died during the run; the run stops instead of degrading silently."""


# ------------------------------------------------------------------------------ run config
#: Run-config keys that belong to the app, not to the experiment's settings.
APP_KEYS = ("out-dir", "overwrite", "experiment", "node-order", "resume")
#: The strategy's checkpoint in ``out-dir``, written after every round; ``resume = true`` continues from it.
CHECKPOINT_FILE = "checkpoint.npz"


def requested_clients(run_config: dict[str, Any]) -> int:
    """The client count a run config asks for; 0 (also for an absent or empty ``num-clients``)
    means one client per SuperNode."""
    rc = dict(run_config)
    if str(rc.get("experiment", "") or ""):
        return int(json.loads(rc["experiment"]).get("num_clients") or 0)
    raw = rc.get("num-clients", 0)
    return 0 if raw in ("", None) else int(raw)


def config_from_run_config(run_config: dict[str, Any], num_partitions: int | None = None) -> ExperimentConfig:
    """The resolved, validated :class:`ExperimentConfig` of a Flower run config.

    The experiment's keys are the runner's (:func:`~.settings.config_from_run_config`: the CLI flags
    without dashes, ``num-server-rounds``, ``set``...; an empty value leaves a setting to the
    method's paper default), or ``experiment``, a whole config as JSON (the ``ray`` backend's way).
    ``num-clients = 0`` (or absent or empty) means one client per SuperNode: ``num_partitions``, the
    federation's size as the nodes report it. A non-zero ``num-clients`` must equal
    ``num_partitions`` when that is known; otherwise a ``ValueError`` names both numbers. A client
    seed in the run config is refused (:func:`~.settings.seed_in_run_config_error`).
    """
    rc = dict(run_config)
    wanted = requested_clients(rc)
    if num_partitions is not None and wanted and wanted != num_partitions:
        raise ValueError(
            f"the run config has num-clients={wanted} but the federation has {num_partitions} "
            f"SuperNodes (num-partitions={num_partitions}): set num-clients={num_partitions} or 0 (one client "
            f"per SuperNode), or run with --federation-config \"num-supernodes={wanted}\""
        )
    if not wanted and num_partitions is None:
        raise ValueError("num-clients = 0 (one per SuperNode) needs the federation's size, which is not known here")
    n = wanted or int(num_partitions)
    if str(rc.get("experiment", "") or ""):
        given = json.loads(rc["experiment"])
        if given.get("client_seed") is not None:
            raise seed_in_run_config_error("experiment' -> 'client_seed", given["client_seed"])
        cfg = ExperimentConfig.from_dict({**given, "num_clients": n})
        return replace(cfg, out=None, progress=False).validate()
    return settings_from_run_config({**rc, "num-clients": n}, ignore=APP_KEYS)


# ------------------------------------------------------------------------------ results file
class RunReport:
    """Writes ``<out_dir>/results.json`` as the run goes (and the final model at the end), and
    stops the run when a Ray client actor died.

    Parameters
    ----------
    cfg : ExperimentConfig
        The run's settings (written into the file).
    out_dir : OutputFolder | None
        The folder for ``results.json`` and ``final.npz``, held by this run; None writes nothing.
    chance : float | None (default: None)
        The task's chance-level loss (a classifier's ``ln(num_classes)``), for the divergence rule
        (:func:`~.results.divergence`).
    """

    def __init__(self, cfg: ExperimentConfig, out_dir: OutputFolder | None, chance: float | None = None) -> None:
        self.cfg = cfg
        self.chance = chance
        self.out_dir = None if out_dir is None else out_dir.path
        self.source: Any = None  # the strategy's RoundRecorder
        self._t0 = time.perf_counter()
        self.path = ""
        self.final: list[np.ndarray] | None = None
        self.strategy: Any = None  # the strategy whose checkpoint is written after every round

    def records(self) -> list[dict[str, Any]]:
        return [] if self.source is None else [dict(r) for r in self.source.snapshot()]

    def write(self, status: str = "running", error: str | None = None) -> None:
        if self.out_dir is None:
            return
        rounds = self.records()
        data = {"method": self.cfg.method, "label": self.cfg.method, "seed": self.cfg.seed, "config": self.cfg.to_dict(),
                "runtime": f"flwr run (ServerApp, {self.path})", "status": status,
                "timing": {"wall_s": time.perf_counter() - self._t0}, "summary": summarize(rounds, chance=self.chance),
                "failure_log": list(getattr(self.source, "failure_log", [])), "rounds": rounds}
        if error:
            data["error"] = error
        write_json(self.out_dir / "results.json", data)  # atomic: readers never see a half-written file

    def write_final(self, arrays: list[np.ndarray] | None) -> None:
        if self.out_dir is not None and arrays is not None:
            atomic_write(self.out_dir / "final.npz", lambda fh: np.savez(fh, *arrays))

    def write_checkpoint(self) -> None:
        """``<out_dir>/checkpoint.npz``: the strategy's state after its last completed round (atomic)."""
        if self.out_dir is not None and self.strategy is not None and self.strategy.core is not None:
            save_state(self.out_dir / CHECKPOINT_FILE, self.strategy.state_dict())

    def __call__(self, record: dict[str, Any]) -> None:  # on_round_end
        """Write the checkpoint and the file, then stop the run when a Ray client actor died or a reply
        claims another partition."""
        self.write_checkpoint()
        self.write()
        server_round = int(record["round"])
        errors = [e["error"] for e in getattr(self.source, "failure_log", []) if e["round"] == server_round]
        for error in errors:
            if any(m in error for m in ACTOR_DEATH_MARKERS):
                raise ActorDied(f"round {server_round}: a Ray client actor died ({error[:300]}). Flower's simulation "
                                "runtime does not replace dead actors, so the remaining rounds would run with clients "
                                "failing; the run stops here.")
        for error in errors:
            if "claims partition" in error:
                raise RuntimeError(f"round {server_round}: a node's reply names another partition than the one it was "
                                   f"addressed as ({error}); the node order is wrong, stopping the run")


# ------------------------------------------------------------------------------ server side
NODE_ORDERS = ("query", "registration")


def identify_nodes(grid: Grid, order: str = "query", num_nodes: int = 0, timeout: float = 600.0) -> NodeDirectory:
    """Learn which node holds which partition; returns a :class:`NodeDirectory` with
    ``node_of_partition``, ``partition_of_node`` and ``num_partitions``.

    ``order="query"`` (default; any runtime): ask every node (``query.partition``) and wait until
    every partition ``0..num-partitions-1`` is connected. ``order="registration"`` (Flower's
    simulation runtime only, ``num_nodes`` required): the runtime registers its SuperNodes in
    partition order (``flwr.server.superlink.fleet.vce.vce_api._register_nodes``), so partition
    ``i`` is the ``i``-th node by registration time. This avoids 10,000 query messages, which Flower's
    in-memory state delivers in time proportional to nodes x pending messages. Every training
    reply's ``partition-id`` then confirms the order; a mismatch stops the run
    (:class:`RunReport`).
    """
    if order not in NODE_ORDERS:
        raise ValueError(f"node-order must be one of {NODE_ORDERS}, got {order!r}")
    probe = NodeDirectory(min_available_nodes=1, wait_timeout=timeout)
    if order == "query":
        probe.identify(grid)
        return probe
    if num_nodes < 1:
        raise ValueError("node-order = 'registration' needs num-clients > 0 (the number of simulated SuperNodes)")
    deadline = time.monotonic() + timeout
    while True:
        nodes = list(grid.get_nodes())
        if len(nodes) >= num_nodes:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"after {timeout:.0f}s: {len(nodes)} of {num_nodes} SuperNodes registered")
        time.sleep(0.2)
    if len(nodes) != num_nodes:
        raise ValueError(f"the federation has {len(nodes)} SuperNodes but the run config has num-clients={num_nodes}")
    stamps = [str(n.registered_at) for n in nodes]
    if len(set(stamps)) != len(stamps):
        log(INFO, "flwr-strategies: SuperNode registration times tie; asking every node for its partition instead")
        probe.identify(grid)
        return probe
    for pid, node in enumerate(sorted(nodes, key=lambda n: str(n.registered_at))):
        probe.partition_of_node[int(node.node_id)] = pid
        probe.node_of_partition[pid] = int(node.node_id)
    probe.num_partitions = num_nodes
    return probe


def _evaluate_fn(exp: Experiment):
    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        res = exp.evaluate_fn(server_round, arrays.to_numpy_ndarrays(), {})
        if res is None:
            return None
        loss, metrics = res
        return MetricRecord({**numeric_metrics(metrics), "loss": float(loss)})

    return evaluate


def run_message_strategy(grid: Grid, exp: Experiment, probe: NodeDirectory, report: RunReport,
                         resume: dict[str, Any] | None = None) -> list[np.ndarray]:
    """Run ``exp``'s method on its Message-API strategy (Flower's ``start()``); returns the final
    model. ``resume``: a checkpoint (``state_dict()``) to continue from, for the remaining rounds."""
    from .backends import round_timeout

    cfg = exp.cfg
    strategy = exp.spec.message_strategy(exp.server_setup(), dict(exp.params), on_round_end=report)
    strategy.nodes = probe  # the partitions are known already: no second query
    report.source, report.path, report.strategy = strategy.history, "Message API strategy", strategy
    done = 0
    if resume is not None:
        strategy.load_state_dict(resume)
        done = int(resume["server_round"])
        log(INFO, "flwr-strategies: resuming %s after round %d of %d", cfg.method, done, cfg.rounds)
    per_round = round_timeout(cfg)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord([a.copy() for a in exp.initial_parameters]),
                            num_rounds=cfg.rounds - done, timeout=per_round,
                            evaluate_fn=strategy.central_evaluation(_evaluate_fn(exp)))
    strategy.history.finalize()
    return result.arrays.to_numpy_ndarrays()


def serve(grid: Grid, context: Context) -> RunReport:
    """The ServerApp's body: identify the nodes, build the experiment, run, report."""
    rc = dict(context.run_config)
    wanted = requested_clients(rc)
    # a bad method or setting fails now, before waiting for the nodes (any client count will do here)
    config_from_run_config(rc, num_partitions=wanted or 10**6)
    out = output_folder(rc)
    try:
        return _serve(grid, rc, wanted, out)
    finally:
        if out is not None:
            out.release()


def output_folder(run_config: dict[str, Any]) -> OutputFolder | None:
    """The run config's ``out-dir``, confined to the node operator's folder
    (:func:`~.results.confined_out_dir`) and held for the run (:class:`~.results.OutputFolder`:
    refused when another run writes there, or when it holds another run's results and the run
    config's ``overwrite`` is not true); None when ``out-dir`` is empty."""
    out_dir = str(run_config.get("out-dir", "") or "")
    if not out_dir:
        return None
    overwrite = run_config.get("overwrite", False)
    if not isinstance(overwrite, bool):
        raise SettingError("run config overwrite", overwrite, "true or false")
    # a resumed run continues the results of the run it resumes, in the same folder
    return OutputFolder(confined_out_dir(out_dir), overwrite=overwrite or resuming(run_config),
                        setting="run config out-dir",
                        how="set overwrite = true in the run config")


def resuming(run_config: dict[str, Any]) -> bool:
    """The run config's ``resume``: continue from ``<out-dir>/checkpoint.npz`` (needs ``out-dir``)."""
    value = run_config.get("resume", False)
    if not isinstance(value, bool):
        raise SettingError("run config resume", value, "true or false")
    if value and not str(run_config.get("out-dir", "") or ""):
        raise SettingError("run config resume", value, f"false, or true with out-dir set (the folder holding "
                                                       f"{CHECKPOINT_FILE})")
    return value


def resume_checkpoint(out: OutputFolder | None, rc: dict[str, Any], rounds: int) -> dict[str, Any] | None:
    """The checkpoint a ``resume = true`` run continues from (None otherwise), checked before any
    round: it must exist in ``out-dir`` and stop before the run's last round."""
    if out is None or not resuming(rc):
        return None
    path = out.path / CHECKPOINT_FILE
    if not path.is_file():
        raise SettingError("run config resume", True, f"a run whose out-dir holds {CHECKPOINT_FILE} ({path} does "
                                                      "not exist: no round of the run to resume had finished)")
    state = load_state(path)
    done = state.get("server_round")
    if not isinstance(done, int) or not 0 <= done < rounds:
        raise ValueError(f"{path}: checkpoint server_round = {done!r}, but the run has num-server-rounds={rounds}: "
                         "nothing is left to run (or the checkpoint is of another run)")
    return state


def _serve(grid: Grid, rc: dict[str, Any], wanted: int, out: OutputFolder | None) -> RunReport:
    import torch

    from .experiment import get_experiment
    from .runner import task_chance_loss

    probe = identify_nodes(grid, str(rc.get("node-order", "query") or "query"), wanted)
    cfg = config_from_run_config(rc, num_partitions=probe.num_partitions)
    resume = resume_checkpoint(out, rc, cfg.rounds)
    torch.set_num_threads(max(1, int(cfg.client_threads)))
    exp = get_experiment(cfg)
    report = RunReport(cfg, out, chance=task_chance_loss(exp.task))
    log(INFO, "flwr-strategies: %s on %d clients, %d rounds", cfg.method, cfg.num_clients, cfg.rounds)
    try:
        final = run_message_strategy(grid, exp, probe, report, resume)
    except BaseException as err:
        report.write("failed", f"{type(err).__name__}: {err}")
        raise
    report.final = final
    report.write_final(final)
    status = finished_status(summarize(report.records(), chance=report.chance))
    if status != "completed":  # the run ended, but not as a plain success: say why in the run's log
        log(WARNING, "flwr-strategies: %s %s", cfg.method, status)
    report.write(status)
    return report


server_app = ServerApp()


@server_app.main()
def _main(grid: Grid, context: Context) -> None:
    serve(grid, context)


# ------------------------------------------------------------------------------ client side
_CONFIGS: dict[tuple[str, int], ExperimentConfig] = {}


def experiment_for(context: Context) -> Experiment:
    """The experiment a node's client belongs to (from the run config and the node's
    ``num-partitions``), cached per process. The model's modules (torch) are imported here, so a
    node answering only the partition query does not load them."""
    import torch

    from .experiment import get_experiment

    n = int(context.node_config.get("num-partitions", 0) or 0) or None
    key = (json.dumps(dict(context.run_config), sort_keys=True, default=str), n or 0)
    cfg = _CONFIGS.get(key)
    if cfg is None:
        cfg = config_from_run_config(context.run_config, num_partitions=n)
        _CONFIGS.clear()
        _CONFIGS[key] = cfg
    torch.set_num_threads(max(1, int(cfg.client_threads)))
    return get_experiment(cfg)


def adopt_node_settings(context: Context) -> None:
    """Write the node's own DO-ADP settings into its ``context.state``, where the project's clients
    read them: ``doadp-client-seed``, ``doadp-allow-private-eval`` and the privacy budget
    (``doadp-epsilon``, ``doadp-rounds``, ``doadp-delta``, ``doadp-clip``) from the SuperNode's node config,
    or, in the project's ``--backend ray`` simulation, from :data:`~.settings.SIMULATED_NODES_ENV`
    (its own node config wins). The consent is always written, so no server setting stands in for it."""
    from flwr_strategies.clients.doadp import (SEED_KEY, allow_private_eval, client_budget_of, client_seed_of,
                                               private_eval_allowed, set_client_budget, set_client_seed)

    node_config = dict(context.node_config)
    simulated = os.environ.get(SIMULATED_NODES_ENV, "")
    sim_node: dict = {}
    if simulated:
        sim = json.loads(simulated)
        sim_node = simulated_node_config(sim.get("client_seed"), bool(sim.get("allow_private_eval")),
                                         int(node_config[PARTITION_KEY]), sim.get("budget"))
    seed = client_seed_of(None, node_config)  # the SuperNode's own: a secret of at least 128 bits
    if seed is None and SEED_KEY in sim_node:
        seed = sim_node[SEED_KEY]  # the experimenter's simulated node: derived from --client-seed
    if seed is not None:
        set_client_seed(context.state, seed)
    node_config = {**sim_node, **node_config}
    allow_private_eval(context.state, private_eval_allowed(None, node_config))
    set_client_budget(context.state, client_budget_of(None, node_config))  # None: the node has none


def _train(msg: Message, context: Context) -> Message:
    adopt_node_settings(context)
    exp = experiment_for(context)
    weights, n, metrics = exp.client_fit(context, msg.content["arrays"].to_numpy_ndarrays(), message_config(msg))
    return train_reply(msg, context, weights, n, metrics)


def _evaluate(msg: Message, context: Context) -> Message:
    adopt_node_settings(context)
    exp = experiment_for(context)
    loss, n, metrics = exp.client_evaluate(context, msg.content["arrays"].to_numpy_ndarrays(), message_config(msg))
    out = {**numeric_metrics(metrics), "loss": float(loss), "num-examples": int(n)}
    return Message(RecordDict({"metrics": MetricRecord(out)}), reply_to=msg)


def _legacy_client_fn(context: Context):
    adopt_node_settings(context)
    return experiment_for(context).make_client(context)


_LEGACY_TYPES = ("get_properties", "get_parameters", "reconnect")


class ProjectClientApp(ClientApp):
    """A ``ClientApp`` answering both the Message-API strategies (``train``, ``evaluate``,
    ``query.partition``) and the legacy strategies' messages (``fitins``/``evaluateins`` records,
    ``get_properties``), with the same clients; on both, the node keeps its clients' state across
    Flower runs (:mod:`flwr_strategies.clients.store`)."""

    def __init__(self) -> None:
        super().__init__()
        self.train(mods=[client_state_mod])(_train)
        self.evaluate()(_evaluate)
        self.query("partition")(partition_query)
        self._legacy = ClientApp(client_fn=_legacy_client_fn, mods=[client_state_mod])  # the node keeps its state

    def __call__(self, message: Message, context: Context) -> Message:
        mtype = message.metadata.message_type
        records = message.content.array_records if mtype in ("train", "evaluate") else {}
        if mtype in _LEGACY_TYPES or "fitins.parameters" in records or "evaluateins.parameters" in records:
            return self._legacy(message, context)
        return super().__call__(message, context)


client_app = ProjectClientApp()
