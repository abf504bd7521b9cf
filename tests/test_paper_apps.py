"""The paper apps (``simulations/apps/<method>``, issue 28): standalone Flower apps a user installs for
a paper. Each test builds the app's FAB with ``flwr build`` (Flower's format checks: format version 1,
license file, publisher) and runs the app unchanged under ``flwr run`` in Flower's simulation runtime
for 2 rounds, on data the test writes as local parquet files (offline, through Flower Datasets'
``FederatedDataset`` as on a user's machine): scikit-learn's digits in the paper dataset's image
layout, or generated instructions in Dolly's columns with a tiny local causal LM for FedMeZO. Each
run must do what its method does in 2 rounds (learn; for DO-ADP, spend a privacy budget it reports).
One app (FedLi-LS) also runs unchanged against a local SuperLink with SuperNodes and must print the
simulation's numbers."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import tomllib
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from flwr_strategies.simulations.deployment import LocalDeployment, LocalSimulation

#: the paper apps' per-round line: the global model's accuracy and loss on the central test set
CENTRAL = re.compile(r"CENTRAL round=(\d+) accuracy=([0-9.]+) loss=([0-9.naninf]+)")

ROOT = Path(__file__).resolve().parents[1]
APPS = ROOT / "simulations" / "apps"
ALL_APPS = ["dfedcata", "fedli", "doadp", "fedmezo", "fedmud"]
OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
PRIVACY = re.compile(r"PRIVACY epsilon=([0-9.]+) delta=([0-9.e-]+) rounds=(\d+)")


def _app_script(app: str, name: str):
    """A script of the apps' folder as a module (the data writers the README's expected-results
    commands use, so the tests and the tables run on the same data)."""
    path = APPS / app / f"{name}.py" if app else APPS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{app}_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Every app's offline data: digits as CIFAR-shaped (32x32 RGB, ``img``) and MNIST-shaped (28x28
    gray, ``image``) images, generated Dolly-style instructions, and the tiny local causal LM."""
    folder = tmp_path_factory.mktemp("data")
    reduced = _app_script("", "reduced_scale")
    mezo = _app_script("fedmezo", "expected_results")
    return {"cifar": str(reduced.write_digits(folder / "cifar", "cifar")),
            "mnist": str(reduced.write_digits(folder / "mnist", "mnist")),
            "instructions": str(mezo.write_instructions(folder / "instructions", n=200)),
            "tiny-lm": str(mezo.tiny_model())}


@pytest.mark.parametrize("app", ALL_APPS)
def test_flwr_build_makes_a_hub_ready_fab(app, tmp_path):
    folder = APPS / app
    res = subprocess.run(["flwr", "build", "--app", str(folder)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "FLWR_TELEMETRY_ENABLED": "0"})
    assert res.returncode == 0, res.stdout + res.stderr
    (fab,) = tmp_path.glob("*.fab")
    names = set(zipfile.ZipFile(fab).namelist())
    code = {str(p.relative_to(folder)) for p in folder.rglob("*.py") if "__pycache__" not in p.parts}
    assert {"LICENSE", "pyproject.toml", "README.md"} <= names and code <= names, sorted(names)
    assert "Apache License" in zipfile.ZipFile(fab).read("LICENSE").decode()
    meta = tomllib.loads(zipfile.ZipFile(fab).read("pyproject.toml").decode())["tool"]["flwr"]["app"]
    assert meta["publisher"] and meta["fab-format-version"] == 1, meta


#: Reduced scale for the tests: (SuperNodes, run config, dataset key). 2 rounds each; the others run
#: 2 SuperNodes that train every round.
RUNS = {
    "dfedcata": (4, {"local-epochs": 2, "batch-size": 32, "topology": "ring"}, "cifar"),
    "fedli": (2, {"fraction-train": 1.0, "model": "cnn"}, "cifar"),
    "fedmud": (2, {"fraction-train": 1.0, "local-epochs": 1}, "mnist"),
    # 1,500 digits split evenly: q = 750 per agent, what the noise is calibrated for
    "doadp": (2, {"local-dataset-size": 750}, "mnist"),
    "fedmezo": (2, {"local-steps": 10, "batch-size": 4, "lr": 0.01, "lora-r": 8, "lora-alpha": 16,
                    "test-fraction": 0.1, "max-length": 320}, "instructions"),
}


def run_config(app: str, data: dict) -> dict:
    _, config, key = RUNS[app]
    config = {"num-server-rounds": 2, **config, "dataset": data[key]}
    if app == "fedmezo":
        config["model"] = data["tiny-lm"]
    return config


def simulate(app: str, data: dict, workdir: Path) -> tuple[int, str, str]:
    """The app's 2-round run under ``flwr run`` on a private simulation SuperLink: (returncode, log,
    failure detail). The SuperLink is started and awaited first (``flwr run`` would start one lazily,
    but gives it only 15 s, too little on a loaded machine)."""
    sim = LocalSimulation(workdir, env={**OFFLINE, "HF_HOME": str(workdir / "hf_home")})
    with sim:
        res = sim.flwr_run(APPS / app, run_config(app, data), timeout=600,
                           federation_config={"num-supernodes": RUNS[app][0]})
        log = res.stdout + res.stderr
        return res.returncode, log, f"rc={res.returncode}, central {CENTRAL.findall(log)}\n{log[-6000:]}\n{sim.all_logs()}"


def deploy(app: str, data: dict, workdir: Path, rounds: int) -> tuple[str, str, str]:
    """The app unchanged on a local SuperLink with one SuperNode per partition (``partition-id`` and
    ``num-partitions`` in each node's config): (run status, output, failure detail)."""
    dep = LocalDeployment(num_supernodes=RUNS[app][0], workdir=workdir)
    dep.env.update({**OFFLINE, "HF_HOME": str(workdir / "hf_home")})
    with dep:
        res = dep.flwr_run(APPS / app, {**run_config(app, data), "num-server-rounds": rounds}, timeout=600)
        status = dep.run_status(dep.run_id(res))
        out = res.stdout + res.stderr
        return status, out, f"status {status}\n{out[-4000:]}\n{dep.all_logs(1500)}"


#: Rounds of the deployment run (each message starts a ClientApp process there: the slow part).
DEPLOYED_ROUNDS = 1


@pytest.fixture(scope="module")
def runs(data, tmp_path_factory):
    """Every app's simulation and the FedLi deployment, run at the same time (each on its own
    SuperLink; at most 3 at once): most of a run's time is process start-up, not computation."""
    with ThreadPoolExecutor(max_workers=3) as pool:  # the longest first
        jobs = {"deployed": pool.submit(deploy, "fedli", data, tmp_path_factory.mktemp("deploy"), DEPLOYED_ROUNDS)}
        for app in ("fedmezo", "fedmud", "doadp", "fedli", "dfedcata"):
            jobs[app] = pool.submit(simulate, app, data, tmp_path_factory.mktemp(f"sim-{app}"))
        return {name: job.result() for name, job in jobs.items()}


@pytest.mark.parametrize("app", ALL_APPS)
def test_app_runs_in_simulation(app, runs):
    rc, log, detail = runs[app]
    assert rc == 0 and "Traceback" not in log, detail
    central = {int(r): (float(a), float(loss)) for r, a, loss in CENTRAL.findall(log)}
    # FedMeZO evaluates every eval-every (10) rounds and after the last one
    assert sorted(central) == ([0, 2] if app == "fedmezo" else [0, 1, 2]), detail
    (acc0, loss0), (acc2, loss2) = central[0], central[2]
    if app == "doadp":
        # 2 private iterations do not train a CNN; the run must end with the budget it spent
        # counted: > 0, within the agents' epsilon = 1 for the whole run
        (spent,) = PRIVACY.findall(log)
        assert 0.0 < float(spent[0]) <= 1.0 and int(spent[2]) == 2, detail
    elif app == "fedmezo":
        assert loss2 < loss0, detail  # zeroth-order steps lower the test loss
    else:
        assert acc2 >= acc0 + 0.2, detail


def test_fedli_app_runs_unchanged_in_a_local_deployment(runs):
    """The FedLi-LS app against a SuperLink with 2 SuperNodes prints the simulation's numbers: every
    seed (model, partition, shuffling, line search) comes from the run config, so both runtimes
    compute the same rounds (the deployment runs the first ``DEPLOYED_ROUNDS`` of them)."""
    rc, log, sim_detail = runs["fedli"]
    assert rc == 0, sim_detail
    status, out, detail = runs["deployed"]
    assert status == "finished:completed", detail
    deployed, simulated = CENTRAL.findall(out), CENTRAL.findall(log)[: DEPLOYED_ROUNDS + 1]
    assert deployed == simulated and len(deployed) == DEPLOYED_ROUNDS + 1, \
        f"simulation {simulated}\ndeployment {deployed}\n{detail}"
    assert float(deployed[-1][1]) > float(deployed[0][1]), detail  # it trained
