"""Bad checkpoints are refused before anything changes, naming the entry and the value (or the file).

Before issue 18 each row here was accepted or failed without saying what: a FedAvg state with 5 of
its 6 arrays, a truncated array, NaN or float16 arrays, NaN tables of DFedCata and DO-ADP, a round
of -5 or 999; truncated, empty or random files raised ``BadZipFile``/``EOFError`` without the path,
and an emptied state a bare ``KeyError 'current'``. Every row checks that the core is unchanged
after the refusal, and a last test that a valid checkpoint still resumes to the same numbers.

Issue 29's crafted files (a 4 MiB file declaring 4 GiB, a header declaring 2**40 values, metadata
nested 50,000 deep, round 999 of a 2-round run, negative DO-ADP step counts) made the loader
allocate 4 GiB, raise ``MemoryError`` or ``RecursionError``, or load silently; each is now refused
naming the file, with the peak memory of the load (traced in a fresh interpreter) below twice the
file's size.
"""

from __future__ import annotations

import copy
import io
import json
import os
import re
import subprocess
import sys
import zipfile

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


# -- crafted files (issue 29): bounded before allocating, every error naming the file -------------
PAD = 2**20  # float32 values of a real 4 MiB array in every crafted file


def _entries(path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def _write_zip(path, entries: dict[str, bytes]):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for name, data in entries.items():
            with zf.open(name, "w", force_zip64=True) as fh:
                fh.write(data)
    return path


def _npy(shape, descr, data: bytes) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_2_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue() + data


def _padded(path):
    """A valid 4 MiB checkpoint: a state with a real 2**20-value float32 array."""
    return save_state(path, {"core": "X", "server_round": 0, "pad": np.ones(PAD, dtype=np.float32)})


def _declares_4gib(path):
    """4 MiB of data under a header declaring 2**30 float32 values (4 GiB)."""
    entries = _entries(_padded(path))
    entries["a0.npy"] = _npy((2**30,), "<f4", np.ones(PAD, dtype=np.float32).tobytes())
    return _write_zip(path, entries)


def _unused_4gib(path):
    """A valid checkpoint plus an entry it never uses that declares 4 GiB."""
    entries = _entries(_padded(path))
    entries["a9.npy"] = _npy((2**30,), "<f4", np.ones(PAD, dtype=np.float32).tobytes())
    return _write_zip(path, entries)


def _declares_2_40(path):
    """A header declaring 2**40 float64 values over 8 bytes of data."""
    entries = _entries(_padded(path))
    entries["a1.npy"] = _npy((2**40,), "<f8", b"\0" * 8)
    return _write_zip(path, entries)


def _deep_meta(path):
    """Metadata nested 50,000 lists deep (json raised RecursionError)."""
    entries = _entries(_padded(path))
    meta = '{"pad": {"__array__": "a0"}, "x": ' + '{"__list__": [' * 50_000 + "1" + "]}" * 50_000 + "}"
    buf = io.BytesIO()
    np.save(buf, np.array(meta), allow_pickle=False)
    entries["__meta__.npy"] = buf.getvalue()
    return _write_zip(path, entries)


def _core_checkpoint(method, tamper):
    def craft(path):
        state = _state(method)
        tamper(state)
        state["method"]["pad"] = np.ones(PAD, dtype=np.float32)  # a core keeps entries it does not know
        return save_state(path, state)
    return craft


def _negative_active_steps(s):
    s["method"]["active_steps"][2] = -1_000_000


def _negative_ledger_steps(s):
    s["method"]["accountant"]["segments"] = [{**s["method"]["accountant"]["current"], "rounds": 1,
                                              "steps": [-5, 3, 3, 3]}]


CRAFTED = [
    # (row, craft, method whose fresh core loads it (None: load_state alone), message after the path)
    ("4 MiB declaring 4 GiB", _declares_4gib, None,
     r"entry 'a0.npy' declares shape \(1073741824,\) of float32 \(4294967296 bytes\) but holds 4194304 bytes"),
    ("unused entry declaring 4 GiB", _unused_4gib, None, r"entry 'a9.npy' declares shape \(1073741824,\)"),
    ("header declaring 2^40 values", _declares_2_40, None,
     r"entry 'a1.npy' declares shape \(1099511627776,\) of float64 \(8796093022208 bytes\) but holds 8 bytes"),
    ("metadata nested 50,000 deep", _deep_meta, None, "its metadata nests deeper than 64 levels"),
    ("round 999 of a 2-round run", _core_checkpoint("fedavg", _round(999)), "fedavg",
     r"server_round = 999: must be an integer in 0\.\.2"),
    ("negative DO-ADP active_steps", _core_checkpoint("doadp", _negative_active_steps), "doadp",
     r"method/active_steps holds -1000000 at \(2,\): a count cannot be negative"),
    ("negative DO-ADP ledger steps", _core_checkpoint("doadp", _negative_ledger_steps), "doadp",
     r"method/accountant/segments\[0\]/steps\[0\] = -5: a count cannot be negative"),
]

_MEASURE = """
import json, sys, tracemalloc
from flwr_strategies.core.state import load_state
from flwr_strategies.simulations.experiment import ExperimentConfig, get_experiment
out = []
for path, method, rounds in json.loads(sys.argv[1]):
    core = None
    if method is not None:
        exp = get_experiment(ExperimentConfig(method=method, **json.loads(sys.argv[2])))
        core = exp.spec.build_core(exp.server_setup(), dict(exp.params))
    tracemalloc.start()
    try:
        load_state(path) if core is None else core.load_checkpoint(path, num_rounds=rounds)
        error = None
    except Exception as err:
        error = f"{type(err).__name__}: {err}"
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    out.append({"error": error, "peak": peak})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    """Each crafted file (and a valid 4 MiB one, last), loaded in a fresh interpreter: the error and
    the peak memory traced during the load."""
    folder = tmp_path_factory.mktemp("crafted")
    rows = [(str(craft(folder / f"ck{i}.npz")), method, RUN["rounds"]) for i, (_, craft, method, _) in enumerate(CRAFTED)]
    rows.append((str(_padded(folder / "valid.npz")), None, None))
    proc = subprocess.run([sys.executable, "-c", _MEASURE, json.dumps(rows), json.dumps(RUN)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [(path, os.path.getsize(path), res) for (path, _, _), res in zip(rows, json.loads(proc.stdout.splitlines()[-1]))]


@pytest.mark.parametrize("i", range(len(CRAFTED)), ids=[r[0] for r in CRAFTED])
def test_crafted_checkpoint_is_refused_naming_the_file_within_twice_its_size(crafted, i):
    path, size, res = crafted[i]
    assert size > 4 * 2**20 - 1  # every crafted file holds a real 4 MiB array
    assert res["error"] is not None and res["error"].startswith(f"ValueError: {path}"), res["error"]
    assert re.search(CRAFTED[i][3], res["error"]), res["error"]
    assert res["peak"] < 2 * size, f"peak {res['peak']} bytes for a {size}-byte file"


def test_the_memory_measurement_sees_the_arrays_a_load_allocates(crafted):
    """A valid 4 MiB checkpoint loads, and the traced peak counts its array: the bound above can fail."""
    path, size, res = crafted[-1]
    assert res["error"] is None
    assert 4 * PAD <= res["peak"] < 2 * size


def test_a_checkpoint_over_the_limit_is_refused(tmp_path):
    path = _padded(tmp_path / "ck.npz")
    with pytest.raises(ValueError, match=f"{path} .*declare 419[0-9]{{4}} bytes in all, more than the limit of 2000000"):
        load_state(path, max_bytes=2_000_000)
    assert load_state(path)["pad"].shape == (PAD,)


def test_a_compressed_or_doubly_referenced_checkpoint_is_refused(tmp_path):
    path = tmp_path / "ck.npz"
    np.savez_compressed(path, a0=np.ones(4), __meta__=np.array(json.dumps({"x": {"__array__": "a0"}})))
    with pytest.raises(ValueError, match=f"{path} .*entry 'a0.npy' is compressed"):
        load_state(path)
    np.savez(path, a0=np.ones(4), __meta__=np.array(json.dumps({"__list__": [{"__array__": "a0"}] * 3})))
    with pytest.raises(ValueError, match=r"refers to the array entries \['a0'\] more than once"):
        load_state(path)


def test_a_state_too_deep_to_load_is_not_saved(tmp_path):
    deep: list = [1.0]
    for _ in range(40):  # 80 JSON levels
        deep = [deep]
    with pytest.raises(ValueError, match="state for .*ck.npz nests deeper than 64 levels"):
        save_state(tmp_path / "ck.npz", {"x": deep})
    assert not (tmp_path / "ck.npz").exists()
