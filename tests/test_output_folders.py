"""Runs never overwrite each other's results, and a ServerApp writes only inside the operator's folder.

Before issue 29 two CLI runs with the same ``--out`` both exited 0 and printed "wrote results.json";
only the second's survived. The ServerApp wrote ``results.json`` and ``final.npz`` (the latter with a
plain ``np.savez``) wherever the run config's ``out-dir`` pointed (``../..``, absolute paths). Now a
run holds its folder (an ``fcntl`` lock) from before training to the end, refuses a folder holding
another run's results unless told to overwrite, writes every file atomically, and the ServerApp's
``out-dir`` cannot leave ``FLWR_STRATEGIES_OUTPUT_BASE``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from flwr.app import Context, RecordDict

from flwr_strategies.setup import SettingError
from flwr_strategies.simulations import app as project_app
from flwr_strategies.simulations.cli import main
from flwr_strategies.simulations.compare import run_entries
from flwr_strategies.simulations.experiment import ExperimentConfig
from flwr_strategies.simulations.inprocess_grid import InProcessGrid
from flwr_strategies.simulations.presets import RunEntry
from flwr_strategies.simulations.results import OUTPUT_BASE_ENV, OutputFolder, confined_out_dir

RUN = ["--dataset", "digits", "--num-clients", "2", "--rounds", "1", "--quiet"]


def _cli(capsys, out, *extra):
    code = main(["run", "--method", "fedavg", *RUN, "--out", str(out), *extra])
    return code, capsys.readouterr()


def test_a_second_cli_run_on_the_same_out_is_refused_and_the_first_results_kept(tmp_path, capsys):
    out = tmp_path / "run"
    code, _ = _cli(capsys, out, "--seed", "1")
    first = (out / "results.json").read_bytes()
    assert code == 0 and json.loads(first)["seed"] == 1
    code, printed = _cli(capsys, out, "--seed", "2")
    assert code == 2
    assert f"--out {out}: must be a folder without another run's results (it holds results.json" in printed.err
    assert "--overwrite" in printed.err and "wrote" not in printed.out
    assert (out / "results.json").read_bytes() == first  # the first run's results survive
    code, printed = _cli(capsys, out, "--seed", "2", "--overwrite")
    assert code == 0 and json.loads((out / "results.json").read_text())["seed"] == 2


_HOLD = """
import sys
from flwr_strategies.setup import SettingError
from flwr_strategies.simulations.results import OutputFolder
try:
    folder = OutputFolder(sys.argv[1], overwrite=True)
except SettingError as err:
    print(err, flush=True)
    sys.exit(0)
print("held", flush=True)
sys.stdin.read()  # until the test closes stdin
"""


def _other_process(folder):
    """A second process that holds ``folder`` until its stdin is closed (or reports why it cannot)."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(folder)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


def _end(proc):
    proc.stdin.close()
    proc.wait(timeout=60)


def test_a_folder_another_run_is_writing_to_is_refused_even_with_overwrite(tmp_path, capsys):
    out = tmp_path / "run"
    proc, said = _other_process(out)
    try:
        assert said == "held"
        code, printed = _cli(capsys, out, "--overwrite")
        assert code == 2 and "must be a folder no other run is writing to" in printed.err
        assert not (out / "results.json").exists()
    finally:
        _end(proc)
    assert _cli(capsys, out)[0] == 0  # released: the folder is free again


def test_a_folder_is_held_until_its_outermost_holder_releases_it(tmp_path):
    out = tmp_path / "preset"
    outer = OutputFolder(out)
    OutputFolder(out).release()  # a comparison inside a preset's folder, in the same process
    proc, said = _other_process(out)
    _end(proc)
    assert said.startswith("out must be a folder no other run is writing to")
    outer.release()
    proc, said = _other_process(out)
    _end(proc)
    assert said == "held"


def test_compare_refuses_a_folder_with_an_earlier_comparison_and_writes_each_run(tmp_path):
    entries = [RunEntry("fedavg", "fedavg"), RunEntry("fedprox", "fedprox")]
    base = {"dataset": "digits", "num_clients": 2, "rounds": 1, "progress": False}
    results = run_entries(entries, base, {}, tmp_path / "cmp")
    assert [r["status"] for r in results] == ["ok", "ok"]
    for label in ("fedavg", "fedprox"):
        assert json.loads((tmp_path / "cmp" / label / "results.json").read_text())["label"] == label
    summary = (tmp_path / "cmp" / "summary.json").read_bytes()
    with pytest.raises(SettingError, match="holds summary.json"):
        run_entries(entries, base, {}, tmp_path / "cmp")
    assert (tmp_path / "cmp" / "summary.json").read_bytes() == summary
    again = run_entries(entries[:1], base, {"overwrite": True}, tmp_path / "cmp")
    assert again[0]["status"] == "ok"
    assert [r["label"] for r in json.loads((tmp_path / "cmp" / "summary.json").read_text())["runs"]] == ["fedavg"]


# -- the ServerApp's out-dir -----------------------------------------------------------------------
@pytest.fixture
def base(tmp_path, monkeypatch):
    folder = tmp_path / "operator"
    folder.mkdir()
    monkeypatch.setenv(OUTPUT_BASE_ENV, str(folder))
    return folder


@pytest.mark.parametrize("out_dir", ["../escaped", "a/../../escaped", "/tmp/elsewhere", "link/inside"])
def test_an_out_dir_outside_the_operators_folder_is_refused(base, out_dir):
    (base.parent / "outside").mkdir()
    (base / "link").symlink_to(base.parent / "outside")
    rc = {"method": "fedavg", "num-server-rounds": 1, "out-dir": out_dir}
    with pytest.raises(SettingError, match="run config out-dir must be a folder inside the node operator's output folder"):
        project_app.output_folder(rc)
    assert sorted(p.name for p in base.parent.iterdir()) == ["operator", "outside"]
    assert not any((base.parent / "outside").iterdir())


def test_an_out_dir_inside_the_operators_folder_is_taken_from_it(base, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative out-dir is the operator's, not the working directory's
    assert confined_out_dir("runs/a") == base.resolve() / "runs" / "a"
    assert confined_out_dir(str(base / "b")) == base.resolve() / "b"
    monkeypatch.delenv(OUTPUT_BASE_ENV)
    assert confined_out_dir("runs/a") == tmp_path.resolve() / "runs" / "a"
    with pytest.raises(SettingError):
        confined_out_dir("../a")


def _serve(run_config: dict, num_nodes: int):
    grid = InProcessGrid(project_app.client_app, num_nodes, run_config=run_config)
    ctx = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run_config)
    return project_app.serve(grid, ctx)


def test_a_second_serverapp_run_on_the_same_out_dir_is_refused(base):
    cfg = ExperimentConfig(method="fedavg", dataset="digits", num_clients=2, rounds=1, seed=1, progress=False)
    rc = {"experiment": json.dumps(cfg.to_dict()), "out-dir": "run"}
    _serve(rc, 2)
    results, final = (base / "run" / "results.json").read_bytes(), (base / "run" / "final.npz").read_bytes()
    assert json.loads(results)["status"] == "completed"
    with pytest.raises(SettingError, match="run config out-dir must be a folder without another run's results"):
        _serve(rc, 2)
    assert (base / "run" / "results.json").read_bytes() == results and (base / "run" / "final.npz").read_bytes() == final
    with pytest.raises(SettingError, match="run config overwrite must be true or false"):
        _serve({**rc, "overwrite": "yes"}, 2)
    _serve({**rc, "overwrite": True}, 2)
    assert json.loads((base / "run" / "results.json").read_text())["status"] == "completed"


def test_final_npz_is_written_atomically(base, monkeypatch):
    out = OutputFolder(base / "run")
    report = project_app.RunReport(ExperimentConfig(method="fedavg"), out)
    report.write_final([np.arange(3.0)])
    good = (base / "run" / "final.npz").read_bytes()

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        report.write_final([np.arange(1000.0)])
    assert (base / "run" / "final.npz").read_bytes() == good
    assert sorted(p.name for p in (base / "run").iterdir()) == [".lock", "final.npz"]
    out.release()
