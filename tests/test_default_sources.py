"""Every default says where it comes from (issue 21, done-when 2).

Walks the registry: each setting and each method hyperparameter that ``python -m simulations
defaults METHOD`` prints carries ``paper: <section/table/equation>``, ``official code: <file>`` or
``project: <reason>``, never a bare kind or a generic label. Then checks the defaults whose value
depends on something else: DO-ADP's privacy row follows the model, FedMUD's initialisation scale
follows the decomposition, FedMeZO's precision follows its variant, the FedLi and FedMUD
participation on the default dataset is the papers' 10 clients per round, and a dataset a method
cannot use is an error.
"""

from __future__ import annotations

import re

import pytest

from flwr_strategies.registry import list_methods
from flwr_strategies.setup import SettingError
from flwr_strategies.simulations import cli
from flwr_strategies.simulations.settings import PROJECT_SOURCES, RESOLVED, ExperimentConfig

KINDS = ("paper", "official code", "project")
#: A paper source names where in the paper: a section, table, figure, equation, algorithm, appendix...
PAPER_PLACE = re.compile(r"\b(Sec\.|Section|Table|Fig\.|Eq\.|Alg\.|Algorithm|App\.|Theorem|Assumption|Prop\.)")
#: An official-code source names a file of the official repository.
CODE_FILE = re.compile(r"[\w*./-]+\.(py|sh|yaml)\b")


def _check(source: str, where: str) -> None:
    kind, sep, detail = source.partition(":")
    assert sep and kind in KINDS, f"{where}: {source!r} is not 'KIND: where' with KIND in {KINDS}"
    detail = detail.strip()
    if kind == "paper":
        assert PAPER_PLACE.search(detail), f"{where}: paper source without a section/table/equation: {source!r}"
    elif kind == "official code":
        assert CODE_FILE.search(detail), f"{where}: official-code source without a file: {source!r}"
    else:
        assert len(detail.split()) >= 4, f"{where}: project source without a reason: {source!r}"


@pytest.mark.parametrize("method", sorted(list_methods()))
def test_every_printed_default_names_its_source(method):
    cfg = ExperimentConfig(method=method).resolve()
    for name in RESOLVED:
        _check(cfg.provenance[name]["source"], f"{method} --{name}")
    assert set(cfg.provenance["params"]) == set(cfg.params)
    for key, source in cfg.provenance["params"].items():
        _check(source, f"{method} --set {key}")


def test_registry_has_the_thirty_methods_and_the_project_defaults_have_reasons():
    assert len(list_methods()) >= 30
    for name, source in PROJECT_SOURCES.items():
        _check(source, f"project default {name}")


@pytest.mark.parametrize("method", ["doadp", "fedmud", "fedmezo", "dfedcata", "fedli-lu"])
def test_defaults_command_prints_the_sources(method, capsys):
    assert cli.main(["defaults", method]) == 0
    out = capsys.readouterr().out
    cfg = ExperimentConfig(method=method).resolve()
    for key, source in cfg.provenance["params"].items():
        line = next(x for x in out.splitlines() if x.strip().startswith(key + " "))
        assert line.rstrip().endswith(source), (key, line)
    assert "method default" not in out and "unstated" not in out and " spec" not in out


def test_doadp_takes_the_papers_row_for_its_model():
    lr = ExperimentConfig(method="doadp").resolve()  # digits: logistic regression, Sec. VI-A
    assert lr.model == "logreg"
    assert (lr.params["k_frac"], lr.params["delta0"], lr.params["p"]) == (0.3, 1e-8, 0.8)
    assert lr.provenance["params"]["k_frac"].startswith("paper: Sec. VI-A")
    # the row's epsilon and batch do not fit digits: the default says why, naming the row
    for source in (lr.provenance["params"]["epsilon"], lr.provenance["batch_size"]["source"]):
        assert source.startswith("project: ") and "eps 0.01" in source and "b 1" in source
    cnn = ExperimentConfig(method="doadp", model="mlp").resolve()  # any other model: the CNN row, Table II
    assert (cnn.params["k_frac"], cnn.params["delta0"], cnn.params["epsilon"]) == (0.4, 1e-5, 1.0)
    assert "Table II" in cnn.provenance["params"]["k_frac"]
    mine = ExperimentConfig(method="doadp", params={"k_frac": "0.5"}).resolve()
    assert mine.params["k_frac"] == 0.5 and mine.provenance["params"]["k_frac"] == "user"
    assert mine.resolve() == mine  # a second resolve keeps the user's value and the model's row


def test_fedmud_init_scale_is_a_number_that_follows_the_decomposition():
    assert ExperimentConfig(method="fedmud").resolve().params["init_scale"] == 5.0  # BKD: the released uni_5.0
    assert ExperimentConfig(method="fedmud_aad").resolve().params["init_scale"] == 1.0
    mat = ExperimentConfig(method="fedmud", params={"decomp": "mat"}).resolve()
    assert mat.params["init_scale"] == 1.0 and mat.provenance["params"]["init_scale"].startswith("project: ")
    assert ExperimentConfig(method="fedmud", params={"decomp": "mat", "init_scale": "0.3"}).resolve().params[
        "init_scale"] == 0.3
    assert ExperimentConfig(method="fedlmt").resolve().params["init_scale"] == 0.5
    weighting = ExperimentConfig(method="fedmud").resolve().provenance["params"]["weighting"]
    assert "Eq. 4 is uniform" in weighting and "train/client.py" in weighting


def test_dfedcata_weights_say_how_they_differ_from_the_official_code():
    source = ExperimentConfig(method="dfedcata").resolve().provenance["params"]["weights"]
    assert "Metropolis-Hastings" in source and "official code averages uniformly" in source


@pytest.mark.parametrize("method", ["fedli-ls", "fedli-lu", "fedexp", "scaffold", "fedmud", "fedmud_mat", "fedlmt",
                                    "fedpara", "fedhm"])
def test_participation_is_the_papers_ten_clients_per_round(method):
    digits = ExperimentConfig(method=method).resolve()
    assert round(digits.num_clients * digits.fraction_fit) == 10
    for name in ("num_clients", "fraction_fit"):
        assert "reduced setting" in digits.provenance[name]["source"]
    paper = ExperimentConfig(method=method, dataset="mnist").resolve()
    assert (paper.num_clients, paper.fraction_fit) == (100, 0.1)
    source = paper.provenance["fraction_fit"]["source"]  # names the paper: a baseline runs the host paper's setting
    assert source.startswith("paper: ") and "Sec." in source


def test_fedmezo_code_variant_is_the_official_precision_and_arithmetic():
    code = ExperimentConfig(method="fedmezo", params={"variant": "code"}).resolve()
    p = code.params
    assert (p["base_dtype"], p["adapter_dtype"], p["z_device"], p["restore_mode"]) == ("fp16", "fp16", "param",
                                                                                     "regenerate")
    assert "is_enable_half" in code.provenance["params"]["base_dtype"]
    paper = ExperimentConfig(method="fedmezo").resolve().params
    assert (paper["base_dtype"], paper["adapter_dtype"], paper["z_device"], paper["restore_mode"]) == (
        "fp32", "fp32", "cpu", "snapshot")


@pytest.mark.parametrize("method", ["fedmezo", "lora-fedavg"])
def test_a_dataset_the_method_cannot_use_is_an_error(method):
    cfg = ExperimentConfig(method=method).validate()
    assert cfg.dataset == "instructions" and cfg.provenance["dataset"]["source"].startswith("project: ")
    with pytest.raises(SettingError, match="dataset must be one of instructions.*got 'digits'"):
        ExperimentConfig(method=method, dataset="digits").validate()
    with pytest.raises(SettingError, match="dataset must be one of.*got 'instructions'"):
        ExperimentConfig(method="fedavg", dataset="instructions").validate()
