"""Shared test settings: no telemetry, one torch thread, paths to the shared data; the tests run
against this checkout's own install (``pip install -e .``)."""

import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _check_this_checkout_is_installed() -> None:
    """The tests import ``flwr_strategies`` as installed: ``pip install -e .`` maps the repository's
    ``flwr_strategies/``, ``clients/`` and ``simulations/`` folders to ``flwr_strategies``,
    ``flwr_strategies.clients`` and ``flwr_strategies.simulations``. Stop before collecting when the
    interpreter's install is another checkout (or a wheel), instead of testing a mix of two trees."""
    for name, folder in (("flwr_strategies", "flwr_strategies"), ("flwr_strategies.clients", "clients"),
                         ("flwr_strategies.simulations", "simulations")):
        spec = importlib.util.find_spec(name)
        found = Path(spec.origin).resolve().parent if spec is not None and spec.origin else None
        if found != ROOT / folder:
            raise RuntimeError(f"{name} imports from {found}, not from this checkout's {ROOT / folder}: "
                               f"run `pip install -e .` in {ROOT} with this interpreter ({sys.executable})")


_check_this_checkout_is_installed()

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


def mnist_dir() -> Path:
    """The official MNIST test set shipped beside the repository (../shared/data/mnist)."""
    path = Path(os.environ.get("FLWR_STRATEGIES_MNIST_DIR", ROOT.parent / "shared" / "data" / "mnist"))
    if not (path / "t10k-images-idx3-ubyte.gz").exists():
        raise FileNotFoundError(f"MNIST test files not found in {path}; set FLWR_STRATEGIES_MNIST_DIR")
    return path


@pytest.fixture
def mnist_path() -> Path:
    return mnist_dir()
