"""The DO-ADP presets run: the paper-scale Table II preset on a generated MNIST-format fixture (one
iteration), and part A of the reduced-scale preset (all methods at equal batch and (eps, delta))."""

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from flwr_strategies.simulations.presets import PresetContext, get_preset


def _write_idx(path: Path, arr: np.ndarray) -> None:
    code = {np.uint8: 0x08}[arr.dtype.type]
    header = bytes([0, 0, code, arr.ndim]) + b"".join(struct.pack(">I", s) for s in arr.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + arr.tobytes())


@pytest.fixture()
def mnist_fixture(tmp_path):
    rng = np.random.default_rng(0)
    for split, n in (("train", 240), ("t10k", 40)):
        _write_idx(tmp_path / f"{split}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
        _write_idx(tmp_path / f"{split}-labels-idx1-ubyte.gz", rng.integers(0, 10, n, dtype=np.uint8))
    return tmp_path


def test_paper_scale_preset_runs_on_a_fixture(mnist_fixture, tmp_path):
    preset = get_preset("doadp-paper")
    out = tmp_path / "out"
    res = preset.custom(PresetContext(preset, {"data_dir": str(mnist_fixture),
                                               "params": {"T_B": 1, "b_B": 4, "eps_B": "1.0"}}, out))
    md = (out / "doadp_paper.md").read_text()
    assert res["q"] == 12 and res["T"] == 1 and res["dataset"] == "mnist"
    assert len(res["table"]) == 5  # four (p, k/d) configurations + the PLD-calibrated one
    for row in res["table"].values():
        assert 0.0 <= row["acc"][0] <= 1.0 and row["eps"] <= 1.0 + 1e-9 and row["delta"] == 1e-5
    assert "93.35" in md and "PLD, Poisson" in md  # the paper's cell beside ours


def test_paper_scale_preset_needs_data():
    preset = get_preset("doadp-paper")
    with pytest.raises(SystemExit, match="data-dir"):
        preset.custom(PresetContext(preset, {}, Path("unused")))


def test_reduced_preset_part_a(tmp_path):
    preset = get_preset("doadp")
    res = preset.custom(PresetContext(preset, {"params": {"parts": "A", "T_A": 12, "q_A": 24, "d_A": 10,
                                                          "b_A": 4}}, tmp_path))
    labels = [r["label"] for r in res["A"]]
    assert any(lb.startswith("DPDO") for lb in labels) and any(lb.startswith("DP-DDA") for lb in labels)
    assert any(lb.startswith("CPGT") for lb in labels) and any("PLD" in lb for lb in labels)
    for r in res["A"]:
        if r["eps"] is not None and np.isfinite(r["eps"]):
            assert r["eps"] <= 0.5 + 1e-9  # every certified method at the same target
    md = (tmp_path / "doadp.md").read_text()
    assert "every method at batch b=4" in md and (tmp_path / "doadp_logreg.png").exists()
