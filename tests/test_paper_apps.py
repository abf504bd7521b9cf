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
from pathlib import Path

import pytest

from flwr_simulation import CENTRAL, LocalSimulation, central_accuracies
from flwr_strategies.simulations.deployment import LocalDeployment

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


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """One private simulation SuperLink for the module's runs."""
    sim = LocalSimulation(tmp_path_factory.mktemp("sim"))
    sim.env.update({**OFFLINE, "HF_HOME": str(sim.home / "hf_home")})
    yield sim
    sim.close()


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


@pytest.fixture(scope="module")
def simulated(data, sim):
    """``app -> (returncode, log, detail)`` of the app's 2-round simulation, run once per module."""
    done = {}

    def run(app: str):
        if app not in done:
            rc, log, wall = sim.run(APPS / app, RUNS[app][0], run_config(app, data), timeout=400)
            done[app] = rc, log, f"rc={rc} after {wall:.0f}s, central {CENTRAL.findall(log)}\n{log[-6000:]}"
        return done[app]

    return run


@pytest.mark.parametrize("app", ALL_APPS)
def test_app_runs_in_simulation(app, simulated):
    rc, log, detail = simulated(app)
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


def test_fedli_app_runs_unchanged_in_a_local_deployment(data, simulated, tmp_path):
    """The FedLi-LS app against a SuperLink with 2 SuperNodes (``partition-id`` from each node's
    config) prints the simulation's numbers: every seed (model, partition, shuffling, line search)
    comes from the run config, so the two runtimes compute the same rounds."""
    rc, log, detail = simulated("fedli")
    assert rc == 0, detail
    in_simulation = CENTRAL.findall(log)
    dep = LocalDeployment(num_supernodes=RUNS["fedli"][0], workdir=tmp_path)
    dep.env.update({**OFFLINE, "HF_HOME": str(tmp_path / "hf_home")})
    with dep:
        res = dep.flwr_run(APPS / "fedli", run_config("fedli", data), timeout=400)
        status = dep.run_status(dep.run_id(res))
        detail = f"status {status}\n{res.stdout[-4000:]}\n{res.stderr[-2000:]}\n{dep.all_logs(1500)}"
    deployed = CENTRAL.findall(res.stdout + res.stderr)
    assert status == "finished:completed", detail
    assert deployed == in_simulation and len(deployed) == 3, f"simulation {in_simulation}\ndeployment {deployed}\n{detail}"
    accuracy = central_accuracies(res.stdout + res.stderr)
    assert accuracy[2] >= accuracy[0] + 0.2, detail
