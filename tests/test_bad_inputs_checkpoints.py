"""Bad checkpoints are refused before anything changes, naming the entry and the value (or the file).

Before issue 18 each row here was accepted or failed without saying what: a FedAvg state with 5 of
its 6 arrays, a truncated array, NaN or float16 arrays, NaN tables of DFedCata and DO-ADP, a round
of -5 or 999; truncated, empty or random files raised ``BadZipFile``/``EOFError`` without the path,
and an emptied state a bare ``KeyError 'current'``. Every row checks that the core is unchanged
after the refusal, and a last test that a valid checkpoint still resumes to the same numbers.
"""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest

from flwr_strategies.core.state import load_state, save_state
from flwr_strategies.simulations.backends import run_driver
from flwr_strategies.simulations.experiment import ExperimentConfig, get_experiment

RUN = dict(num_clients=4, rounds=2, seed=0, progress=False, client_seed=3)


def _exp(method: str):
    return get_experiment(ExperimentConfig(method=method, **RUN))


_STATES: dict[str, dict] = {}


def _state(method: str) -> dict:
    """The state after the 2-round run (computed once per method)."""
    if method not in _STATES:
        _STATES[method] = run_driver(_exp(method).cfg).state
    return copy.deepcopy(_STATES[method])


def _fresh(method: str):
    exp = _exp(method)
    return exp.spec.build_core(exp.server_setup(), dict(exp.params))


def _drop_last_array(s):
    s["method"]["current"] = s["method"]["current"][:5]


def _truncate_array(s):
    s["method"]["current"][0] = s["method"]["current"][0][:-1]


def _nan_array(s):
    s["method"]["current"][2][0, 0] = np.nan


def _float16(s):
    s["method"]["current"] = [a.astype(np.float16) for a in s["method"]["current"]]


def _nan_table(key):
    def tamper(s):
        s["method"][key][1, 3] = np.nan
    return tamper


def _round(value):
    def tamper(s):
        s["server_round"] = value
    return tamper


def _emptied(s):
    s["method"] = {}


STATE_ROWS = [
    # (row, method, tamper, message naming the entry and the value)
    ("fedavg 5 of 6 arrays", "fedavg", _drop_last_array, "method/current has 5 entries, expected 6"),
    ("fedavg truncated array", "fedavg", _truncate_array, r"method/current\[0\] has shape \(199, 64\), expected \(200, 64\)"),
    ("fedavg NaN array", "fedavg", _nan_array, r"method/current\[2\] contains NaN"),
    ("fedavg float16 arrays", "fedavg", _float16, r"method/current\[0\] has dtype float16, expected float32"),
    ("dfedcata NaN table", "dfedcata", _nan_table("models"), "method/models contains NaN"),
    ("doadp NaN table", "doadp", _nan_table("XHAT"), "method/XHAT contains NaN"),
    ("round -5", "fedavg", _round(-5), r"server_round = -5: must be an integer in 0\.\.2"),
    ("round 999", "fedavg", _round(999), r"server_round = 999: must be an integer in 0\.\.2"),
    ("emptied method state", "fedavg", _emptied, "method lacks 'current'"),
]


@pytest.mark.parametrize("row,method,tamper,message", STATE_ROWS, ids=[r[0] for r in STATE_ROWS])
def test_bad_checkpoint_state_is_refused_with_the_core_unchanged(row, method, tamper, message, tmp_path):
    state = load_state(save_state(tmp_path / "ck.npz", _state(method)))  # through the file format
    tamper(state)
    core = _fresh(method)
    before = core.state_dict()
    with pytest.raises(ValueError, match=message):
        core.load_state_dict(state, num_rounds=RUN["rounds"])
    after = core.state_dict()
    assert after["server_round"] == before["server_round"] == 0
    for a, b in zip(before["method"].get("current", []), after["method"].get("current", [])):
        np.testing.assert_array_equal(a, b)


def _truncated(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _empty(path):
    path.write_bytes(b"")


def _random(path):
    path.write_bytes(np.random.default_rng(0).bytes(4096))


FILE_ROWS = [("truncated file", _truncated), ("empty file", _empty), ("random bytes", _random)]


@pytest.mark.parametrize("row,spoil", FILE_ROWS, ids=[r[0] for r in FILE_ROWS])
def test_bad_checkpoint_file_error_names_the_path(row, spoil, tmp_path):
    path = save_state(tmp_path / "run-7.npz", _state("fedavg"))
    spoil(path)
    with pytest.raises(ValueError, match=f"{path} is not a readable flwr-strategies checkpoint"):
        load_state(path)


def test_interrupted_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = save_state(tmp_path / "ck.npz", _state("fedavg"))
    good = path.read_bytes()

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        save_state(path, _state("fedavg"))
    assert path.read_bytes() == good and sorted(p.name for p in tmp_path.iterdir()) == ["ck.npz"]


def test_a_valid_checkpoint_resumes_to_the_same_numbers(tmp_path):
    exp = _exp("fedavg")
    full = run_driver(get_experiment(ExperimentConfig(method="fedavg", **{**RUN, "rounds": 3})).cfg)
    state = load_state(save_state(tmp_path / "ck.npz", _state("fedavg")))
    from flwr_strategies.simulations.driver import CoreDriver, PartitionContexts

    driver = CoreDriver(_fresh("fedavg"), exp.client_fit, PartitionContexts(RUN["num_clients"]))
    driver.run(3, state=state)
    for a, b in zip(full.final_arrays, driver.global_arrays()):
        np.testing.assert_array_equal(a, b)
