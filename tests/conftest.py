"""Shared test settings: no telemetry, one torch thread, paths to the shared data."""

import os
import sys
from pathlib import Path

# Import the package from this checkout (not from another installed copy), whatever the cwd.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]


def mnist_dir() -> Path:
    """The official MNIST test set shipped beside the repository (../shared/data/mnist)."""
    path = Path(os.environ.get("FLWR_STRATEGIES_MNIST_DIR", ROOT.parent / "shared" / "data" / "mnist"))
    if not (path / "t10k-images-idx3-ubyte.gz").exists():
        raise FileNotFoundError(f"MNIST test files not found in {path}; set FLWR_STRATEGIES_MNIST_DIR")
    return path


@pytest.fixture
def mnist_path() -> Path:
    return mnist_dir()
