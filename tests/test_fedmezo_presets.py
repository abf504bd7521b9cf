"""The paper-scale FedMeZO preset runs end to end on a tiny generated local checkpoint and a
Dolly-format data file (what ``--model`` / ``--data-dir`` point to at paper scale), so it cannot rot."""

import json
import shutil

import numpy as np
import pytest
import torch

from flwr_strategies.simulations.compare import run_preset
from flwr_strategies.simulations.lm.data import generate_instructions
from flwr_strategies.simulations.lm.model import ensure_tiny_base
from flwr_strategies.simulations.presets import get_preset


@pytest.fixture(scope="module")
def local_checkpoint(tmp_path_factory):
    d = tmp_path_factory.mktemp("open_llama_tiny")
    shutil.copytree(ensure_tiny_base(), d, dirs_exist_ok=True)
    data = tmp_path_factory.mktemp("dolly")
    rows = [{"instruction": r["instruction"], "context": "", "response": r["output"], "category": r["category"]}
            for r in generate_instructions(200, seed=5)]
    (data / "databricks-dolly-15k.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return d, data


def test_paper_preset_runs_on_a_tiny_local_checkpoint(local_checkpoint, tmp_path):
    model_dir, data_dir = local_checkpoint
    preset = get_preset("fedmezo-paper")
    overrides = {"model": str(model_dir), "data_dir": str(data_dir), "device": "cpu", "rounds": 1, "local_steps": 2,
                 "progress": False}
    out = run_preset(preset, overrides, tmp_path)
    results = out["results"]
    assert [r["label"] for r in results] == [e.label for e in preset.entries]
    for r in results:
        c, p = r["config"], r["params"]
        # the paper's setting, on the fixture: lr 1e-5, 3 clients (Dolly-Meta), LoRA 128/256, fp16 base, 1% test
        assert (c["lr"], c["num_clients"], c["partition"], c["batch_size"], c["dataset"]) == (1e-5, 3, "meta", 1, "dolly")
        assert (p["lora_r"], p["lora_alpha"], p["base_dtype"], p["max_len"], p["test_fraction"]) == (128, 256, "fp16", 1000, 0.01)
        assert r["summary"]["failures"] == 0 and not r["failure_log"]
        losses = [x["loss"] for x in r["rounds"] if x.get("loss") is not None]
        assert len(losses) == 2 and all(np.isfinite(losses))
    assert results[1]["params"]["adapter_dtype"] == "fp16" and results[3]["method"] == "lora-fedavg"
    assert (tmp_path / "summary.md").read_text().startswith("## Test loss per round")
    # building fp16 models in client threads must not leave fp16 as torch's process-wide default
    assert torch.get_default_dtype() == torch.float32


def test_paper_preset_needs_a_checkpoint_and_data(tmp_path):
    with pytest.raises(ValueError, match="needs --model DIR"):
        run_preset(get_preset("fedmezo-paper"), {"device": "cpu"}, tmp_path)
    with pytest.raises(ValueError, match="needs --data-dir"):
        run_preset(get_preset("fedmezo-paper"), {"device": "cpu", "model": "/x"}, tmp_path)
