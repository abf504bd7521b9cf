"""The drop-in, as a user meets it (issue 12, done-when 3).

A Flower app in the shape of Flower's quickstart-pytorch (its own CNN, flwr-datasets partitions,
DataLoader and ``train()``), in both APIs: ``simulations/quickstart_pytorch`` (Message API) and
``simulations/quickstart_pytorch_legacy`` (legacy API). ``switch/<method>.diff`` is the exact change
that moves it to a method of this library (the README shows the same diffs). Each test copies the
app, applies the diff with ``git apply`` and runs it with ``flwr run`` in Flower's simulation
runtime (a private local SuperLink), then checks that the global model learned.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from flwr_simulation import LocalSimulation, central_accuracies

ROOT = Path(__file__).resolve().parents[1]
APPS = {"message": ROOT / "simulations" / "quickstart_pytorch", "legacy": ROOT / "simulations" / "quickstart_pytorch_legacy"}
NODES = 4
ROUNDS = 5


def _cases() -> list:
    out = []
    for api, app in APPS.items():
        for diff in sorted((app / "switch").glob("*.diff")):
            out.append(pytest.param(api, diff.stem, id=f"{api}-{diff.stem}"))
    return out


@pytest.fixture
def simulation(tmp_path_factory):
    # one SuperLink per run: a local SuperLink that already ran an app of the same name and version
    # ran the earlier app's code again (seen with flwr 1.41), and every switched app shares its name
    sim = LocalSimulation(tmp_path_factory.mktemp("flwr"))
    yield sim
    sim.close()


def switched_app(api: str, method: str, dest: Path) -> Path:
    """A copy of the ``api`` app with ``switch/<method>.diff`` applied."""
    app = dest / f"{api}-{method}"
    shutil.copytree(APPS[api], app, ignore=shutil.ignore_patterns("switch", "__pycache__", "*.pt"))
    diff = APPS[api] / "switch" / f"{method}.diff"
    res = subprocess.run(["git", "apply", "--verbose", str(diff)], cwd=app, capture_output=True, text=True)
    assert res.returncode == 0, f"{diff.name} does not apply to the {api} app:\n{res.stderr}"
    return app


@pytest.mark.parametrize("api,method", _cases())
def test_quickstart_app_switched_to_method_learns(simulation, api, method, tmp_path):
    app = switched_app(api, method, tmp_path)
    rc, log, wall = simulation.run(app, NODES, {"num-server-rounds": ROUNDS})
    acc = central_accuracies(log)
    detail = f"flwr run rc={rc} after {wall:.0f}s\n{log[-6000:]}"
    assert rc == 0, detail
    assert sorted(acc) == list(range(ROUNDS + 1)), detail
    assert acc[ROUNDS] >= acc[0] + 0.25, detail


def test_diffs_are_small_and_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    for api, app in APPS.items():
        for diff in sorted((app / "switch").glob("*.diff")):
            text = diff.read_text()
            changed = [line for line in text.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
            added = [line for line in changed if line.startswith("+")]
            assert len(added) <= 12, f"{diff}: {len(added)} added lines"
            body = "\n".join(line for line in text.splitlines() if not line.startswith(("+++", "---", "@@")))
            assert body.strip() in readme or all(line in readme for line in changed), f"{diff} is not shown in README.md"
