"""Shared test settings: no telemetry, one torch thread, the MNIST files (official or a stand-in); the tests run
against this checkout's own install (``pip install -e .``)."""

import atexit
import gzip
import importlib.util
import os
import shutil
import struct
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

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


MNIST_ENV = "FLWR_STRATEGIES_MNIST_DIR"
_MNIST_FILES = ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


def _official_mnist() -> Path | None:
    """The official MNIST test set: ``$FLWR_STRATEGIES_MNIST_DIR``, else ``../shared/data/mnist`` beside
    the repository (CI has it); None where neither holds it, or where the variable is set empty (a bare
    clone's run: ``tests/test_repository_hygiene.py`` runs the MNIST tests that way)."""
    if os.environ.get(MNIST_ENV) == "":
        return None
    path = Path(os.environ.get(MNIST_ENV, ROOT.parent / "shared" / "data" / "mnist"))
    if all((path / name).exists() for name in _MNIST_FILES):
        return path
    if MNIST_ENV in os.environ:
        raise FileNotFoundError(f"{MNIST_ENV}={path}: MNIST test files {_MNIST_FILES} not found there")
    return None


def _write_idx(path: Path, array: np.ndarray) -> None:
    head = bytes([0, 0, 0x08, array.ndim]) + b"".join(struct.pack(">I", n) for n in array.shape)
    with gzip.open(path, "wb") as fh:
        fh.write(head + array.astype(np.uint8).tobytes())


def write_mnist_standin(folder: Path, num_images: int = 10_000, seed: int = 0) -> Path:
    """An MNIST-format stand-in for the official test set, written as idx files: scikit-learn's bundled
    8x8 digits (BSD-3-Clause, UCI optical recognition of handwritten digits), scaled 3x to 24x24,
    centred in a 28x28 canvas with a little pixel noise, ``num_images`` of them with their labels. Same file names, header, dtype and size as MNIST's t10k files, so every loader path runs."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(digits.target), size=num_images)
    small = digits.images[pick] * (255.0 / 16.0)
    big = np.kron(small, np.ones((1, 3, 3)))
    images = np.zeros((num_images, 28, 28))
    images[:, 2:26, 2:26] = big
    images = np.clip(images + rng.normal(0.0, 4.0, images.shape), 0, 255)
    folder.mkdir(parents=True, exist_ok=True)
    _write_idx(folder / _MNIST_FILES[0], images.round())
    _write_idx(folder / _MNIST_FILES[1], digits.target[pick])
    return folder


_STANDIN: Path | None = None


def mnist_dir() -> Path:
    """The MNIST test-set folder the tests read: the official files where they exist (CI:
    ``../shared/data/mnist``, or ``$FLWR_STRATEGIES_MNIST_DIR``), else a stand-in written once per session
    (:func:`write_mnist_standin`). ``pytest``'s header says which ran."""
    global _STANDIN
    official = _official_mnist()
    if official is not None:
        return official
    if _STANDIN is None:
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="mnist-standin-"))
        atexit.register(shutil.rmtree, folder, True)
        _STANDIN = write_mnist_standin(folder)
    return _STANDIN


def _mnist_line() -> str:
    official = _official_mnist()
    if official is not None:
        return f"MNIST: the official test set in {official}"
    return (f"MNIST: no official files beside the repository ({MNIST_ENV} unset): MNIST tests run on a stand-in "
            "written from scikit-learn's digits in MNIST's idx format")


#: The files that take longest (summed setup+call+teardown of their tests in a full `-n 4 --dist loadfile
#: --durations=0` run on 2 cores: 651, 461, 371, 344, 292, 149, 148, 130, 129, 92, 86, 82, 69, 54, 53, 52 s), most
#: of them waiting on real Flower processes (deployments, `flwr run`, Ray): collected first, longest first,
#: so that with the README's `-n 4 --dist loadfile` (one file per worker at a time) the workers start them
#: together and fill the rest of their time with the short files, instead of ending the run on them.
SLOWEST_FIRST = ("test_resume_deployment.py", "test_resume_serverapp_killed.py", "test_deployment_faults.py", "test_privacy_doadp_deployment.py",
                 "test_privacy_doadp_accountant.py", "test_flower_quickstart_dropin.py",
                 "test_packaging.py", "test_paper_apps.py", "test_foundation_runs.py", "test_defaults_learn.py",
                 "test_dropin_apps.py", "test_ray_backend.py", "test_regen.py", "test_dfedcata_e2e.py",
                 "test_run_status_flwr.py", "test_reply_names_and_weight_cap.py")


def pytest_configure(config) -> None:
    """Keep :data:`SLOWEST_FIRST`'s order under ``--dist loadfile``: pytest-xdist otherwise reorders the files by
    their number of tests (``--loadscope-reorder``, its default), which puts these files, of 2 to 55 tests
    each, last, and the run ends waiting on them (20 min instead of 17 on 2 cores)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items) -> None:
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its order


def pytest_report_header(config) -> str:
    return _mnist_line()


def pytest_terminal_summary(terminalreporter) -> None:
    """Say at the end of every run (``-q`` included) which MNIST files the MNIST tests read."""
    terminalreporter.write_line(_mnist_line())


@pytest.fixture
def mnist_path() -> Path:
    return mnist_dir()


@pytest.fixture(scope="session", autouse=True)
def output_base(tmp_path_factory):
    """The node operator's output folder (``FLWR_STRATEGIES_OUTPUT_BASE``) of every ServerApp the
    tests start, in process or in a deployment: the session's temporary folder, where each test's
    ``out-dir`` lies."""
    from flwr_strategies.simulations.results import OUTPUT_BASE_ENV

    before = os.environ.get(OUTPUT_BASE_ENV)
    base = tmp_path_factory.getbasetemp()
    os.environ[OUTPUT_BASE_ENV] = str(base)
    yield base
    if before is None:
        os.environ.pop(OUTPUT_BASE_ENV, None)
    else:
        os.environ[OUTPUT_BASE_ENV] = before
