"""Run one experiment end to end: backend, progress bar, ``results.json``."""

from __future__ import annotations

import time
from typing import Any

from flwr_strategies.adapters.recorder import NoProgressError
from flwr_strategies.setup import SettingError

from .backends import RayRunError, RunOutcome, run_backend
from .experiment import ExperimentConfig, _preserved_rng, get_experiment
from .results import OutputFolder, chance_loss, package_versions, run_status, summarize, write_json


class _Progress:
    """A tqdm bar over rounds showing accuracy and elapsed time."""

    def __init__(self, cfg: ExperimentConfig, label: str | None = None) -> None:
        self.bar = None
        if cfg.progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=cfg.rounds, desc=label or cfg.method, unit="round", leave=True)

    def __call__(self, rec: dict[str, Any]) -> None:
        if self.bar is None or rec["round"] == 0:
            return
        post = {"round": rec["round"]}
        if rec.get("accuracy") is not None:
            post["acc"] = f"{rec['accuracy']:.4f}"
        if rec.get("failures"):
            post["failed"] = rec["failures"]
        self.bar.set_postfix(post)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def check_faults_can_fire(exp) -> None:
    """Raise :class:`~flwr_strategies.setup.SettingError` (``--fail``) for an injected failure
    that the run's sampling would never trigger: ``ROUND:PARTITION`` when the partition is not
    sampled in that round, ``*:PARTITION`` when it is sampled in no round. The sampling is the
    core's own seeded draw (the same on every backend), replayed on a scratch core."""
    cfg = exp.cfg
    faults = cfg.failures()
    if not faults:
        return
    with _preserved_rng():
        core = exp.build_core()
        sampled = {r: set(core.select(r, range(cfg.num_clients))) for r in range(1, cfg.rounds + 1)}
    for r, p in sorted(faults, key=lambda t: (t[0] or 0, t[1])):
        if r is not None and p not in sampled[r]:
            raise SettingError("fail", f"{r}:{p}", f"a failure that can happen: partition {p} is not sampled in round {r} "
                                                  f"(sampled: {sorted(sampled[r])[:20]})")
        if r is None and not any(p in s for s in sampled.values()):
            raise SettingError("fail", f"*:{p}", f"a failure that can happen: partition {p} is sampled in none of the "
                                                 f"{cfg.rounds} rounds")


def task_chance_loss(task: Any) -> float | None:
    """The chance-level loss of ``task`` when it is a classifier (``ln(num_classes)``), else None."""
    return chance_loss(getattr(getattr(task, "bundle", None), "num_classes", None))


def run_experiment(cfg: ExperimentConfig, *, label: str | None = None, target: float | None = None, verbose: bool = False) -> dict[str, Any]:
    """Run ``cfg`` on its backend and return (and write to ``cfg.out``) the results dict.

    Before the first round, in this order: every setting is resolved (caller > method's paper
    defaults > project defaults) and checked, the output folder is created, the data are loaded
    and checked, and the method's server core and one client are built (so a method setting it
    rejects fails here). Each raises naming the setting or file and the value.

    ``results["status"]`` is ``"ok"``, ``"degraded: ..."`` (the run finished, but see
    :func:`~.results.run_status`: a diverged loss names the rule it broke) or ``"failed: ..."``
    (no client update aggregated in any round, or the ray backend's run failed or did not return;
    the rounds it recorded are kept); a run that trained nothing in two consecutive rounds writes
    ``"failed: NoProgressError: ..."`` and then raises the
    :class:`~flwr_strategies.adapters.recorder.NoProgressError`;
    ``results["provenance"]`` gives the source of every setting. ``results.json`` is written
    atomically, into a folder this run holds from before the first round to the end (another run
    cannot write there meanwhile) and that held no other run's results unless ``cfg.overwrite``.
    """
    cfg = cfg.validate()  # resolved
    # held now: a bad --out, or one another run holds, fails before training rather than losing results after it
    out = OutputFolder(cfg.out, overwrite=cfg.overwrite) if cfg.out else None
    try:
        return _run(cfg, out, label, target, verbose)
    finally:
        if out is not None:
            out.release()


def _run(cfg: ExperimentConfig, out: OutputFolder | None, label: str | None, target: float | None,
         verbose: bool) -> dict[str, Any]:
    t0 = time.perf_counter()
    exp = get_experiment(cfg)
    exp.preflight()
    check_faults_can_fire(exp)
    progress = _Progress(cfg, label)
    error = stopped = None
    try:
        strategy, timing = run_backend(cfg, on_round_end=progress, verbose=verbose)
    except RayRunError as err:  # Flower's run failed or did not return: keep what it recorded
        error = str(err).split("\n", 1)[0]
        strategy = RunOutcome(err.results.get("rounds", []), err.results.get("failure_log", []))
        timing = {}
    except NoProgressError as err:  # the run trained nothing: keep its records, write them, then raise
        error, stopped = f"{type(err).__name__}: {err}", err
        strategy, timing = RunOutcome(err.rounds, err.failure_log), {}
    finally:
        progress.close()
    rounds = strategy.rounds
    summary = summarize(rounds, target, chance=task_chance_loss(exp.task))
    results = {"method": cfg.method, "label": label or cfg.method,
               "status": f"failed: {error}" if error else run_status(summary), "seed": cfg.seed,
               "config": {k: v for k, v in cfg.to_dict().items() if k != "provenance"}, "provenance": cfg.sources(),
               "params": exp.params, "paper": exp.spec.paper, "data_notes": list(getattr(exp.task, "notes", [])),
               "versions": package_versions(), "timing": {**timing, "wall_s": time.perf_counter() - t0},
               "summary": summary, "failure_log": strategy.failure_log, "rounds": rounds}
    if out is not None:
        write_json(out.path / "results.json", results)
    if stopped is not None:
        raise stopped
    return results
