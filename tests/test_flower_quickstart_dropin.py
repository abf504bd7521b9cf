"""The README's drop-in diffs on Flower's own quickstart-pytorch, under the optimizer settings of Flower apps.

Issue 19, done-when 1 and 3. ``tests/fixtures`` holds Flower's example as Flower ships it (Message API,
and the legacy API at v1.15.2); ``simulations/quickstart_pytorch{,_legacy}/switch/*.diff`` are the
README's diffs. Every diff must apply with ``patch -p1`` to the example as shipped. The switched apps
then run in this process with only the data loading swapped for local data (digits as 3x32x32
images): the user's own CNN (Flower's ``Net``), its own DataLoader and its own ``train()`` with
``torch.optim.SGD(momentum=0.9)`` at learning rates 0.01 and 0.05, 4 nodes, 4 rounds of 3 local
epochs. Each method learns, or says why it cannot:

- DO-ADP's local step is one private iteration per round (its step size replaces the user's lr; it
  does not use the user's optimizer): at epsilon 1 it moves little in 4 rounds, so it must run every
  round and stay at or below its initial loss (the README's former step size 0.5 diverges here);
- FedLi-LU's server step is capped by the clients' displacement: with momentum 0.9 at lr 0.05 its
  DFW step takes gamma < 1 from round 1, which the server says in a warning (the README gives the
  range where FedLi-LU is FedAvg);
- FedLMT (weights W = U V, factors averaged directly) and SCAFFOLD (with momentum) refuse an SGD step
  lr / (1 - momentum) above their measured limits at the first optimizer step, naming the setting
  and the range that works.

The ``flwr run`` path of the same apps is ``tests/test_dropin_apps.py``.
"""

from __future__ import annotations

import logging
import math
import shutil

import pytest

from quickstart_fixture import APPS, FIXTURES, apply_diff, run_config, run_legacy_app, run_message_app, swap_data_loading, switched_app

NODES = 4
MATRIX = ["dfedcata", "fedli-ls", "fedli-lu", "doadp", "fedmud", "scaffold", "fedexp", "dfedavg", "fedlmt"]
LEARNING_RATES = [0.01, 0.05]
#: (method, lr) refused at the first optimizer step: what the error must say
REFUSED = {("fedlmt", 0.05): ("FedLMT refuses SGD(lr=0.05, momentum=0.9", "lr <= 0.03 with momentum 0.9"),
           ("scaffold", 0.05): ("SCAFFOLD refuses SGD(lr=0.05, momentum=0.9)", "lr <= 0.02 with momentum 0.9")}


def _diffs(api: str) -> list[str]:
    return sorted(d.stem for d in (APPS[api] / "switch").glob("*.diff"))


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_every_diff_applies_with_patch_to_flowers_example(api, tmp_path):
    assert {"fedavg", *MATRIX} <= set(_diffs(api))
    for method in _diffs(api):
        app = tmp_path / method
        shutil.copytree(FIXTURES[api], app)
        apply_diff(app, APPS[api] / "switch" / f"{method}.diff")
        assert (app / "pytorchexample" / "client_app.py").read_text() != (FIXTURES[api] / "pytorchexample" / "client_app.py").read_text()


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_project_apps_are_flowers_example_with_only_the_data_loading_swapped(api):
    for name in ("__init__.py", "client_app.py", "server_app.py", "task.py"):
        shipped = (FIXTURES[api] / "pytorchexample" / name).read_text()
        expected = swap_data_loading(shipped) if name == "task.py" else shipped
        assert (APPS[api] / "pytorchexample" / name).read_text() == expected, name
    shipped = run_config(FIXTURES[api])
    assert run_config(APPS[api]) == shipped  # the same run config as Flower's (learning-rate 0.1, ...)


@pytest.mark.parametrize("lr", LEARNING_RATES)
@pytest.mark.parametrize("method", MATRIX)
def test_switched_app_under_sgd_momentum(method, lr, tmp_path, caplog):
    app = switched_app("message", method, tmp_path)
    config = run_config(app, num_server_rounds=4, local_epochs=3, learning_rate=lr, fraction_evaluate=0.0)
    with caplog.at_level(logging.WARNING):
        try:
            record, errors = run_message_app(app, NODES, config)
        except RuntimeError as err:  # a run that stops (every reply failed) says why
            record, errors = {}, [str(err)]
    detail = f"{method} at lr {lr}: {record} {errors[:2]}"
    print(f"\nmatrix {detail}")  # docs/switch.md's table of working ranges quotes these lines (pytest -s)
    if (method, lr) in REFUSED:  # refused at the first optimizer step of every client
        setting, working = REFUSED[method, lr]
        assert errors and all(setting in e for e in errors) and working in errors[0], detail
        return
    assert not errors, detail
    (acc0, loss0), (acc, loss) = record[0], record[4]
    assert math.isfinite(loss), detail
    if method == "doadp":
        assert {0, 4} <= set(record) and loss <= loss0 + 0.1, detail  # runs every round, its loss does not grow
    elif method == "fedli-lu" and lr == 0.05:
        warned = [r.getMessage() for r in caplog.records if "FedLi-LU round 1" in r.getMessage()]
        assert warned and "gamma=" in warned[0] and "momentum" in warned[0], (detail, caplog.text[-2000:])
    else:
        assert acc0 < 0.25 and acc >= acc0 + 0.25, detail


@pytest.mark.parametrize("method", ["fedavg", *MATRIX])
def test_switched_legacy_app_runs_and_learns(method, tmp_path):
    app = switched_app("legacy", method, tmp_path)
    lr = 0.02 if method in ("scaffold", "fedlmt") else 0.05  # within their momentum limits (the table)
    config = run_config(app, num_server_rounds=3, local_epochs=2, learning_rate=lr, fraction_evaluate=1.0)
    history, strategy, errors = run_legacy_app(app, NODES, config)
    accs = dict(history.metrics_distributed.get("accuracy", []))
    rounds = [r for r in strategy.history.rounds if r["round"] > 0]
    detail = f"{method}: {accs} {errors[:2]} {rounds}"
    assert len(rounds) == 3 and all(r["failures"] == 0 and r["rejected"] == 0 for r in rounds), detail
    if method == "doadp":  # DO-ADP refuses federated evaluation; the v1.15.2 example has no central one
        return
    assert sorted(accs) == [1, 2, 3], detail  # every round evaluated on the nodes
    if method != "fedli-lu":  # above chance after 3 rounds, or still climbing fast (FedLMT's slow start)
        assert accs[3] >= 0.5 or accs[3] >= accs[1] + 0.25, detail


def measure(method: str, settings: list[str], rounds: int = 4, epochs: int = 3, seeds: tuple[int, ...] = (0,)) -> None:
    """Print the central accuracy per round of the switched Message-API app for each ``momentum:lr``
    (the example's ``train()`` with ``torch.optim.SGD(momentum=...)``; ``adam:lr`` uses Adam) and
    each seed of the initial model."""
    import tempfile
    from pathlib import Path

    for setting in settings:
        momentum, lr = setting.split(":")
        app = switched_app("message", method, Path(tempfile.mkdtemp()))
        task = app / "pytorchexample" / "task.py"
        optimizer = "torch.optim.Adam(net.parameters(), lr=lr)" if momentum == "adam" else \
            f"torch.optim.SGD(net.parameters(), lr=lr, momentum={momentum})"
        task.write_text(task.read_text().replace("torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)", optimizer))
        config = run_config(app, num_server_rounds=rounds, local_epochs=epochs, learning_rate=float(lr), fraction_evaluate=0.0)
        for seed in seeds:
            try:
                record, errors = run_message_app(app, NODES, config, seed=seed)
                print(method, setting, f"seed {seed}", {r: round(a, 3) for r, (a, _) in record.items()}, errors[:1],
                      flush=True)
            except RuntimeError as err:
                print(method, setting, f"seed {seed}", "stopped:", str(err)[:300], flush=True)


if __name__ == "__main__":
    # python tests/test_flower_quickstart_dropin.py fedlmt 0.9:0.02 0.9:0.03 0:0.1 [--rounds 4 --epochs 3 --seeds 0]
    import argparse

    ap = argparse.ArgumentParser(description=measure.__doc__)
    ap.add_argument("method")
    ap.add_argument("settings", nargs="+")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seeds", default="0")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    measure(args.method, args.settings, args.rounds, args.epochs, tuple(int(s) for s in args.seeds.split(",")))
