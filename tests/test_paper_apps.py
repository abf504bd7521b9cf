"""The paper apps (``simulations/apps/<method>``, issue 28): standalone Flower apps a user installs for
a paper. Each test builds the app's FAB with ``flwr build`` (Flower's format checks: format version 1,
license file, publisher) and runs the app unchanged under ``flwr run`` in Flower's simulation runtime,
on a CIFAR-shaped dataset the test writes as local parquet files (offline, through Flower Datasets'
``FederatedDataset`` as on a user's machine), and checks that it learns."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import tomllib
import zipfile
from pathlib import Path

import pytest

from flwr_simulation import CENTRAL, LocalSimulation

ROOT = Path(__file__).resolve().parents[1]
APPS = ROOT / "simulations" / "apps"


def _app_script(app: str, name: str):
    """A script of the app's folder as a module (the app's own data writer, so the test and the
    README's expected-results command run on the same data)."""
    spec = importlib.util.spec_from_file_location(f"{app}_{name}", APPS / app / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """scikit-learn's digits as CIFAR-shaped images (32x32 RGB, columns ``img``/``label``), ``train``
    and ``test`` parquet splits: the data of the dfedcata app's ``expected_results.py --digits``."""
    return _app_script("dfedcata", "expected_results").write_digits(tmp_path_factory.mktemp("data") / "digits")


@pytest.mark.parametrize("app", ["dfedcata"])
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


#: Reduced scale for the test: 4 SuperNodes on a ring, 2 rounds of 2 local epochs.
RUN_CONFIG = {"dfedcata": {"num-server-rounds": 2, "local-epochs": 2, "batch-size": 32, "topology": "ring"}}


@pytest.mark.parametrize("app", ["dfedcata"])
def test_app_runs_in_simulation_and_learns(app, dataset, tmp_path):
    sim = LocalSimulation(tmp_path)
    sim.env.update({"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home")})
    try:
        rc, log, wall = sim.run(APPS / app, 4, {**RUN_CONFIG[app], "dataset": str(dataset)}, timeout=300)
    finally:
        sim.close()
    acc = {int(r): float(a) for r, a, _ in CENTRAL.findall(log)}
    detail = f"rc={rc} after {wall:.0f}s, accuracy {acc}\n{log[-6000:]}"
    assert rc == 0 and "Traceback" not in log, detail
    assert sorted(acc) == [0, 1, 2], detail
    assert acc[2] >= acc[0] + 0.2, detail
