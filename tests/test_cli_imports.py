"""The command line's cheap paths, and the project's ClientApp answering a partition query, start
without torch or SciPy.

Each command runs in a fresh interpreter with ``-X importtime``, which writes one line per module
imported to stderr; the test fails if ``torch`` or ``scipy`` is among them. Loading the datasets
module (its names are used to check settings and by ``list``) must not import torch either: the
loaders import it when they build tensors.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "scipy")


def imported_modules(args: list[str]) -> set[str]:
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0"}
    proc = subprocess.run([sys.executable, "-X", "importtime", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = {m.group(1) for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)$", proc.stderr, re.M)}
    assert "flwr_strategies" in names, "importtime output not parsed"
    return names


@pytest.mark.parametrize("args", [
    ["-m", "flwr_strategies.simulations", "--help"],
    ["-m", "flwr_strategies.simulations", "run", "--help"],
    ["-m", "flwr_strategies.simulations", "list"],
    ["-c", "from flwr_strategies.registry import list_methods; assert len(list_methods()) >= 30"],
    ["-c", "import flwr_strategies.simulations.datasets as d; assert 'mnist' in d.DATASETS"],
    # the project's ClientApp answering the ServerApp's partition query (a flwr-clientapp process per message)
    ["-c", "from flwr_strategies.simulations import app; from flwr_strategies.simulations.inprocess_grid import "
           "InProcessGrid; assert app.identify_nodes(InProcessGrid(app.client_app, 3, run_config={}), 'query', "
           "3).num_partitions == 3"],
])
def test_no_torch_or_scipy(args: list[str]) -> None:
    names = imported_modules(args)
    assert not [h for h in HEAVY if h in names], f"{' '.join(args)} imported {[h for h in HEAVY if h in names]}"


#: The methods whose ``defaults`` import torch: their default ``lr`` is ``auto``, a step derived from the
#: data and the calibrated noise, so ``defaults`` loads the data and builds the core to print it.
DERIVED_FROM_DATA = {"cpgt", "doadp", "dp-dda", "dpdo"}

WALK = """
import contextlib, io, sys
from flwr_strategies.registry import list_methods
from flwr_strategies.setup import AUTO_LR
from flwr_strategies.simulations.cli import main
from flwr_strategies.simulations.settings import ExperimentConfig

derived = []
for method in list_methods():
    if ExperimentConfig(method=method).validate().lr == AUTO_LR:
        derived.append(method)
        continue
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["defaults", method]) == 0, method
    assert out.getvalue().startswith(method + ": "), out.getvalue()[:200]
    assert "torch" not in sys.modules, f"defaults {method} imported torch"
print(" ".join(derived))
"""


def test_defaults_reads_every_class_without_torch() -> None:
    """``defaults METHOD`` reads the strategy class's declaration and checks the settings (task names,
    device) without importing torch, for every registered method in one interpreter: a core whose
    module imports torch (FedMUD's, FedLi's, FedMeZO's) is imported when a run builds it. The methods
    whose step is derived from the data (``lr`` auto) are the only ones left out, and they are named."""
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0"}
    proc = subprocess.run([sys.executable, "-c", WALK], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert set(proc.stdout.split()) == DERIVED_FROM_DATA


def test_digits_load_without_scikit_learn_and_equal_its_loader() -> None:
    """The digits that every deployed client's process loads (a process per message) come from
    scikit-learn's bundled file, read without importing scikit-learn (SciPy's statistics among its
    imports), and equal ``sklearn.datasets.load_digits`` exactly."""
    names = imported_modules(["-c", "from flwr_strategies.simulations.datasets import load_dataset; "
                                    "assert len(load_dataset('digits').train) == 1438"])
    assert "sklearn" not in names and "scipy" not in names
    from sklearn.datasets import load_digits

    from flwr_strategies.simulations.datasets import sklearn_digits

    images, target = sklearn_digits()
    raw = load_digits()
    assert images.dtype == raw.images.dtype and np.array_equal(images, raw.images)
    assert target.dtype == raw.target.dtype and np.array_equal(target, raw.target)
