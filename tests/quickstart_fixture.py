"""Flower's own quickstart-pytorch (tests/fixtures), switched by the README's diffs, run in this process.

- :func:`switched_app` copies the example as Flower ships it, applies ``switch/<method>.diff`` with
  ``patch -p1`` and swaps only its data loading (``load_data`` / ``load_centralized_dataset``) for
  local data: scikit-learn's bundled digits, upsampled to the 3x32x32 images the example's CNN
  expects (Flower's example downloads CIFAR-10 from the Hugging Face Hub, unreachable here).
- :func:`run_message_app` runs a Message-API app's ``ServerApp`` main on an in-process grid;
  :func:`run_legacy_app` runs a legacy app's ``server_fn`` with Flower's ``start_grid``.

``simulations/quickstart_pytorch{,_legacy}`` hold the same apps with the same swap (checked by
``tests/test_flower_quickstart_dropin.py``); their ``switch/`` folders hold the diffs.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = {"message": ROOT / "tests" / "fixtures" / "quickstart-pytorch",
            "legacy": ROOT / "tests" / "fixtures" / "quickstart-pytorch-legacy"}
APPS = {"message": ROOT / "simulations" / "quickstart_pytorch", "legacy": ROOT / "simulations" / "quickstart_pytorch_legacy"}

#: The local data loading that replaces the example's Hugging Face download (same names, same
#: signatures, same batch format: dicts of ``img`` 3x32x32 in [-1, 1] and ``label``).
LOCAL_DATA = {
    "load_data": '''
def load_data(partition_id: int, num_partitions: int, batch_size: int):
    """Load an IID partition of scikit-learn's bundled digits (local, no download) as 3x32x32 images."""
    import numpy as np
    from sklearn.datasets import load_digits

    class Digits(torch.utils.data.Dataset):
        def __init__(self, x, y):
            self.x, self.y = x, y

        def __len__(self):
            return len(self.y)

        def __getitem__(self, i):
            return {"img": self.x[i], "label": self.y[i]}

    global digits
    if digits is None:  # load once per process, as the example caches its FederatedDataset
        data = load_digits()
        images = np.kron(data.images / 16.0, np.ones((4, 4))).astype(np.float32)  # 8x8 -> 32x32
        digits = torch.from_numpy((images[:, None].repeat(3, axis=1) - 0.5) / 0.5), torch.from_numpy(data.target).long()
    x, y = digits
    order = np.random.default_rng(0).permutation(len(y))
    test, pool = order[:297], order[297:]
    if partition_id < 0:
        return DataLoader(Digits(x[test], y[test]), batch_size=batch_size)
    part = np.array_split(pool, num_partitions)[partition_id]
    split = int(0.8 * len(part))
    train, val = part[:split], part[split:]
    trainloader = DataLoader(Digits(x[train], y[train]), batch_size=batch_size, shuffle=True,
                             generator=torch.Generator().manual_seed(partition_id))
    return trainloader, DataLoader(Digits(x[val], y[val]), batch_size=batch_size)
''',
    "load_centralized_dataset": '''
def load_centralized_dataset():
    """Load the held-out digits (297 images) and return dataloader."""
    return load_data(-1, 1, 128)
''',
}


DIGITS_CACHE = "digits = None  # Cache the local data (scikit-learn's digits)\n\n\n"


def swap_data_loading(source: str) -> str:
    """``source`` (a ``task.py``) with its top-level ``load_data`` / ``load_centralized_dataset``
    replaced by :data:`LOCAL_DATA`; nothing else changes."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in LOCAL_DATA]
    if "load_data" not in {n.name for n in nodes}:
        raise ValueError("task.py has no top-level load_data to swap")
    spans = [(n.lineno - 1, n.end_lineno, (DIGITS_CACHE if n.name == "load_data" else "")
              + LOCAL_DATA[n.name].strip("\n") + "\n") for n in nodes]
    for start, end, text in sorted(spans, reverse=True):
        lines[start:end] = [text]
    return "".join(lines)


def apply_diff(app: Path, diff: Path) -> None:
    """``patch -p1`` ``diff`` onto ``app`` (fails the caller's test with patch's output)."""
    res = subprocess.run(["patch", "-p1", "--forward", "--no-backup-if-mismatch", "-i", str(diff)], cwd=app,
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise AssertionError(f"{diff.name} does not apply with patch -p1 to {app.name}:\n{res.stdout}{res.stderr}")


def switched_app(api: str, method: str, dest: Path, *, base: Path | None = None) -> Path:
    """A copy of Flower's example (``base``: default the fixture) with ``switch/<method>.diff`` applied
    and the data loading swapped."""
    app = dest / f"{api}-{method}"
    shutil.copytree(base or FIXTURES[api], app, ignore=shutil.ignore_patterns("__pycache__", "switch", "*.pt"))
    if method != "flower":
        apply_diff(app, APPS[api] / "switch" / f"{method}.diff")
    task = app / "pytorchexample" / "task.py"
    task.write_text(swap_data_loading(task.read_text()))
    return app


@contextlib.contextmanager
def imported(app: Path):
    """Import ``app``'s ``pytorchexample`` package (fresh), run from ``app`` as the working directory."""
    saved_cwd, saved_path = os.getcwd(), list(sys.path)
    for name in [m for m in sys.modules if m == "pytorchexample" or m.startswith("pytorchexample.")]:
        del sys.modules[name]
    sys.path.insert(0, str(app))
    os.chdir(app)
    try:
        yield lambda name: importlib.import_module(f"pytorchexample.{name}")
    finally:
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
        for name in [m for m in sys.modules if m == "pytorchexample" or m.startswith("pytorchexample.")]:
            del sys.modules[name]


def run_config(app: Path, **overrides: Any) -> dict[str, Any]:
    """The app's ``[tool.flwr.app.config]`` with ``overrides`` (``num_server_rounds=`` for ``num-server-rounds``)."""
    import tomllib

    cfg = dict(tomllib.loads((app / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"])
    cfg.update({k.replace("_", "-"): v for k, v in overrides.items()})
    return cfg


class _Grid:
    """An in-process grid that also keeps the reasons of the ClientApps' error replies."""

    def __new__(cls, client_app, nodes, run_config):
        from flwr_strategies.simulations.inprocess_grid import InProcessGrid

        class Recording(InProcessGrid):
            def __init__(self) -> None:
                super().__init__(client_app, nodes, run_config=run_config)
                self.errors: list[str] = []

            def pull_messages(self, message_ids):
                replies = list(super().pull_messages(message_ids))
                self.errors += [m.error.reason for m in replies if m.has_error()]
                return replies

        return Recording()


def run_message_app(app: Path, nodes: int, config: dict[str, Any], seed: int = 0
                    ) -> tuple[dict[int, tuple[float, float]], list[str]]:
    """Run the Message-API app in process (its model initialised after ``torch.manual_seed(seed)``);
    returns ``{round: (accuracy, loss)}`` of the app's own central evaluation (round 0: the initial
    model) and the reasons of the ClientApps' error replies."""
    import torch
    from flwr.app import Context, RecordDict

    with imported(app) as module:
        client_app, server_app = module("client_app"), module("server_app")
        accs: dict[int, tuple[float, float]] = {}
        evaluate = server_app.global_evaluate

        def recording(server_round, arrays):
            metrics = evaluate(server_round, arrays)
            accs[int(server_round)] = (float(metrics["accuracy"]), float(metrics["loss"]))
            return metrics

        server_app.global_evaluate = recording
        torch.manual_seed(seed)
        grid = _Grid(client_app.app, nodes, config)
        context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=config)
        try:
            server_app.main(grid, context)
        except Exception as err:  # a run that stops says why; keep what the clients said too
            raise RuntimeError(f"{type(err).__name__}: {err}; client errors: {grid.errors[:2]}") from err
    return accs, grid.errors


def _RegisteringClientManager():
    """Flower's ``SimpleClientManager`` whose ``wait_for`` first registers the grid's nodes.

    ``start_grid`` registers nodes when ``num_available``/``all``/``sample`` are called, or every 5 s;
    a strategy that calls ``wait_for`` first (this library's legacy strategies, before round 1) would
    otherwise wait for that tick on every run (5 s per in-process run)."""
    from flwr.server.client_manager import SimpleClientManager

    class Registering(SimpleClientManager):
        def wait_for(self, num_clients: int, timeout: int = 86400) -> bool:
            self.num_available()  # wrapped by start_grid: registers the grid's nodes now
            return super().wait_for(num_clients, timeout)

    return Registering()


def run_legacy_app(app: Path, nodes: int, config: dict[str, Any]):
    """Run the legacy app (``server_fn`` + Flower's ``start_grid``) in process; returns Flower's
    ``History``, the app's strategy and the reasons of the ClientApps' error replies."""
    import torch
    from flwr.app import Context, RecordDict
    from flwr.server.compat import start_grid

    from flwr_strategies.simulations.inprocess_grid import InProcessGrid

    with imported(app) as module:
        client_app, server_app = module("client_app"), module("server_app")
        torch.manual_seed(0)
        context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=config)
        components = server_app.server_fn(context)
        grid = _Grid(client_app.app, nodes, config)
        history = start_grid(grid=grid, strategy=components.strategy, config=components.config,
                             client_manager=_RegisteringClientManager())
        components.strategy.history.finalize()  # closes the last round's record
        return history, components.strategy, grid.errors
