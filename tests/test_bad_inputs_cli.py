"""Bad inputs to the runner, one table: CLI flags, method settings, data files and Flower run-config
keys. Each must fail before the first round with one line naming the flag (or file, or key) and
the value, exit status 2 and no traceback."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

from flwr_strategies.setup import SettingError
from flwr_strategies.simulations import cli
from flwr_strategies.simulations.settings import config_from_run_config


# -- data-file fixtures ------------------------------------------------------------------------------
def _idx(array: np.ndarray) -> bytes:
    codes = {np.dtype(np.uint8): 0x08, np.dtype(np.int8): 0x09, np.dtype(">f4"): 0x0D, np.dtype(">f8"): 0x0E}
    header = bytes([0, 0, codes[array.dtype], array.ndim]) + b"".join(struct.pack(">I", n) for n in array.shape)
    return header + array.tobytes()


def _mnist(folder: Path, n_images: int = 40, n_labels: int = 40, bad_label: float | None = None,
           gz: bool = True, truncate_gz: bool = False, magic: bool = True, label_dtype: str = "u1",
           image_dtype: str = "u1") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (n_images, 28, 28), dtype=np.uint8)
    if image_dtype == "i1":  # signed bytes: pixels above 127 read as negative values
        x = x.view(np.int8)
    elif image_dtype != "u1":
        x = (x / 255.0).astype(image_dtype)
    y = (np.arange(n_labels) % 10).astype(label_dtype)
    if bad_label is not None:
        y[7] = bad_label
    images, labels = _idx(x), _idx(y)
    if not magic:
        labels = b"\x08\x03" + labels[2:]
    for stem, blob in (("t10k-images-idx3-ubyte", images), ("t10k-labels-idx1-ubyte", labels)):
        if gz:
            data = gzip.compress(blob)
            if truncate_gz and stem.startswith("t10k-images"):
                data = data[: len(data) // 2]
            (folder / f"{stem}.gz").write_bytes(data)
        else:
            (folder / stem).write_bytes(blob)
    return folder


def _idx_dims(folder: Path, body: bytes | None) -> Path:
    """The labels file's header says 255 dimensions; ``body`` follows it (None: the labels)."""
    path = folder / "t10k-labels-idx1-ubyte"
    data = path.read_bytes()
    path.write_bytes(data[:3] + b"\xff" + (data[4:] if body is None else body))
    return folder


def _cifar(folder: Path, corrupt: str | None = None) -> Path:
    base = folder / "cifar-10-batches-py"
    base.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        entry = {"data": rng.integers(0, 255, (4, 3072), dtype=np.uint8), "labels": [int(v) for v in rng.integers(0, 10, 4)]}
        if name == "data_batch_3" and corrupt == "label":
            entry["labels"][2] = 10
        if name == "data_batch_3" and corrupt == "float_label":
            entry["labels"][2] = 2.5
        if name == "data_batch_3" and corrupt == "shape":
            entry["data"] = entry["data"][:, :1000]
        blob = pickle.dumps(entry)
        if name == "data_batch_3" and corrupt == "garbage":
            blob = b"\x00not a pickle at all" * 10
        if name == "data_batch_3" and corrupt == "truncated":
            blob = blob[: len(blob) // 3]
        if name == "data_batch_3" and corrupt == "code":
            blob = pickle.dumps({"data": _Evil(), "labels": [0]})
        (base / name).write_bytes(blob)
    (base / "batches.meta").write_bytes(pickle.dumps({"label_names": [str(i) for i in range(10)]}))
    return folder


class _Evil:
    """A pickle payload that would run a function when loaded (must be refused)."""

    def __reduce__(self):
        return (print, ("this must not run",))


# -- the table -----------------------------------------------------------------------------------
# (id, CLI arguments after "run --method M --rounds 2 --quiet", strings the error line must contain)
# "{tmp}" is replaced by a per-test folder; data rows prepare it with the named fixture.
CLI_ROWS = [
    ("weight-decay-nan", ["--weight-decay", "nan"], ["--weight-decay", "nan"]),
    ("weight-decay-negative", ["--weight-decay", "-0.1"], ["--weight-decay", "-0.1"]),
    ("lr-inf", ["--lr", "inf"], ["--lr", "inf"]),
    ("lr-zero", ["--lr", "0"], ["--lr", "0"]),
    ("lr-not-a-number", ["--lr", "fast"], ["--lr", "fast"]),
    ("momentum-one", ["--momentum", "1.0"], ["--momentum", "1.0"]),
    ("momentum-nan", ["--momentum", "nan"], ["--momentum", "nan"]),
    ("lr-decay-zero", ["--lr-decay", "0"], ["--lr-decay", "0"]),
    ("lr-decay-above-one", ["--lr-decay", "1.5"], ["--lr-decay", "1.5"]),
    ("grad-clip-negative", ["--grad-clip", "-1"], ["--grad-clip", "-1"]),
    ("grad-clip-inf", ["--grad-clip", "inf"], ["--grad-clip", "inf"]),
    ("batch-size-zero", ["--batch-size", "0"], ["--batch-size", "0"]),
    ("local-epochs-zero", ["--local-epochs", "0"], ["--local-epochs", "0"]),
    ("local-steps-negative", ["--local-steps", "-3"], ["--local-steps", "-3"]),
    ("local-epochs-fraction", ["--local-epochs", "1.5"], ["--local-epochs", "1.5"]),
    ("num-clients-zero", ["--num-clients", "0"], ["--num-clients", "0"]),
    ("rounds-zero", ["--rounds", "0"], ["--rounds", "0"]),
    ("fraction-fit-above-one", ["--fraction-fit", "1.5"], ["--fraction-fit", "1.5"]),
    ("fraction-fit-zero", ["--fraction-fit", "0"], ["--fraction-fit", "0"]),
    ("alpha-zero", ["--alpha", "0"], ["--alpha", "0"]),
    ("classes-per-client-zero", ["--classes-per-client", "0"], ["--classes-per-client", "0"]),
    ("seed-negative", ["--seed", "-1"], ["--seed", "-1"]),
    ("fail-partition-out-of-range", ["--fail", "1:99"], ["--fail", "1:99", "0..9"]),
    ("fail-round-beyond-rounds", ["--fail", "5:1"], ["--fail", "5:1", "1..2"]),
    ("fail-round-zero", ["--fail", "0:1"], ["--fail", "0:1"]),
    ("fail-malformed", ["--fail", "two"], ["--fail", "two"]),
    ("fail-negative-partition", ["--fail", "*:-1"], ["--fail", "*:-1"]),
    ("set-unknown-key", ["--set", "mu=0.1"], ["mu", "proximal_mu"]),
    ("set-not-a-number", ["--set", "proximal_mu=abc"], ["--set", "proximal_mu=abc"]),
    ("set-without-equals", ["--set", "proximal_mu"], ["--set", "proximal_mu"]),
    ("set-negative-mu", ["--set", "proximal_mu=-1"], ["proximal_mu", "-1"]),
    ("set-nan-mu", ["--set", "proximal_mu=nan"], ["proximal_mu", "nan"]),
    ("dataset-unknown", ["--dataset", "imagenet"], ["--dataset", "imagenet"]),
    ("partition-unknown", ["--partition", "random"], ["--partition", "random"]),
    ("model-unknown", ["--model", "vgg"], ["--model", "vgg"]),
    ("backend-unknown", ["--backend", "spark"], ["--backend", "spark"]),
    ("device-unknown", ["--device", "tpu"], ["--device", "tpu"]),
    ("client-threads-zero", ["--client-threads", "0"], ["--client-threads", "0"]),
    ("client-cpus-zero", ["--client-cpus", "0"], ["--client-cpus", "0"]),
    ("data-dir-missing", ["--data-dir", "{tmp}/nowhere"], ["--data-dir", "nowhere"]),
    ("out-is-a-file", ["--out", "{tmp}/a_file"], ["--out", "a_file"]),
    ("out-below-a-file", ["--out", "{tmp}/a_file/sub"], ["--out", "a_file"]),
    ("method-unknown", ["--method", "fedsgd"], ["fedsgd", "valid methods"]),
    ("model-wrong-for-data", ["--model", "lenet_cifar"], ["--model", "lenet_cifar", "32x32"]),
    ("more-clients-than-samples", ["--num-clients", "5000"], ["--num-clients", "5000", "more clients than samples"]),
    ("natural-partition-on-digits", ["--partition", "natural"], ["--partition", "natural"]),
    # data files
    ("mnist-labels-shorter", ["--dataset", "mnist", "--data-dir", "{tmp}/mnist_short"], ["t10k-labels-idx1-ubyte.gz", "30 labels", "40 images"]),
    ("mnist-truncated-gz", ["--dataset", "mnist", "--data-dir", "{tmp}/mnist_trunc"], ["t10k-images-idx3-ubyte.gz", "truncated or corrupt"]),
    ("mnist-label-12", ["--dataset", "mnist", "--data-dir", "{tmp}/mnist_label12"], ["t10k-labels-idx1-ubyte", "label 12"]),
    ("mnist-bad-magic", ["--dataset", "mnist", "--data-dir", "{tmp}/mnist_magic"], ["t10k-labels-idx1-ubyte", "not an idx file"]),
    ("mnist-missing", ["--dataset", "mnist", "--data-dir", "{tmp}/mnist_none"], ["t10k-images-idx3-ubyte", "mnist_none"]),
    ("mnist-float-label-2.5", ["--dataset", "mnist", "--data-dir", "{tmp}/mnist_float_label"],
     ["t10k-labels-idx1-ubyte", "labels must be integers", "float32", "label 2.5 at index 7"]),
    ("mnist-nan-label", ["--dataset", "mnist", "--data-dir", "{tmp}/mnist_nan_label"],
     ["t10k-labels-idx1-ubyte", "labels must be integers", "float64", "label nan at index 7"]),
    ("mnist-int8-images", ["--dataset", "mnist", "--data-dir", "{tmp}/mnist_int8"],
     ["t10k-images-idx3-ubyte", "unsigned bytes", "int8", "negative pixels down to -128"]),
    ("mnist-float32-images", ["--dataset", "mnist", "--data-dir", "{tmp}/mnist_float_images"],
     ["t10k-images-idx3-ubyte", "unsigned bytes", "float32"]),
    ("mnist-empty-idx", ["--dataset", "mnist", "--data-dir", "{tmp}/mnist_empty"],
     ["t10k-images-idx3-ubyte", "holds no images"]),
    # issue 29: the idx error said neither what the header read nor how much the file holds
    ("mnist-idx-255-dimensions", ["--dataset", "mnist", "--data-dir", "{tmp}/mnist_dims"],
     ["t10k-labels-idx1-ubyte", "magic number 000008ff: uint8 values in 255 dimensions", "... 251 more)",
      "about 10^", "but the file holds 3076 after the header"]),
    ("mnist-idx-header-cut", ["--dataset", "mnist", "--data-dir", "{tmp}/mnist_dims_cut"],
     ["t10k-labels-idx1-ubyte", "magic number 000008ff: uint8 values in 255 dimensions", "needs 1024 bytes, the file has 48"]),
    # issue 29: a data folder given for a dataset that reads none was ignored
    ("data-dir-for-digits", ["--dataset", "digits", "--data-dir", "{tmp}"],
     ["--data-dir", "must be unset for dataset 'digits', which reads no files (a data folder is for mnist, cifar10, cifar100 and hf: datasets)"]),
    ("data-dir-for-synthetic", ["--dataset", "synthetic", "--data-dir", "{tmp}"],
     ["--data-dir", "must be unset for dataset 'synthetic'"]),
    ("cifar-float-label-2.5", ["--dataset", "cifar10", "--data-dir", "{tmp}/cifar_float_label"],
     ["data_batch_3", "labels must be integers", "label 2.5 at index 2"]),
    ("cifar-garbage-pickle", ["--dataset", "cifar10", "--data-dir", "{tmp}/cifar_garbage"], ["data_batch_3", "not a readable CIFAR"]),
    ("cifar-truncated-pickle", ["--dataset", "cifar10", "--data-dir", "{tmp}/cifar_truncated"], ["data_batch_3", "not a readable CIFAR"]),
    ("cifar-label-10", ["--dataset", "cifar10", "--data-dir", "{tmp}/cifar_label"], ["data_batch_3", "label 10"]),
    ("cifar-wrong-shape", ["--dataset", "cifar10", "--data-dir", "{tmp}/cifar_shape"], ["data_batch_3", "(4, 1000)"]),
    ("cifar-pickle-with-code", ["--dataset", "cifar10", "--data-dir", "{tmp}/cifar_code"], ["data_batch_3", "builtins.print"]),
]

FIXTURES = {
    "mnist_short": lambda d: _mnist(d, n_labels=30),
    "mnist_trunc": lambda d: _mnist(d, truncate_gz=True),
    "mnist_label12": lambda d: _mnist(d, bad_label=12, gz=False),
    "mnist_magic": lambda d: _mnist(d, magic=False),
    "mnist_none": lambda d: d.mkdir(),
    "mnist_float_label": lambda d: _mnist(d, bad_label=2.5, label_dtype=">f4"),
    "mnist_nan_label": lambda d: _mnist(d, bad_label=float("nan"), label_dtype=">f8", gz=False),
    "mnist_int8": lambda d: _mnist(d, image_dtype="i1"),
    "mnist_float_images": lambda d: _mnist(d, image_dtype=">f4"),
    "mnist_empty": lambda d: _mnist(d, n_images=0, n_labels=0),
    "mnist_dims": lambda d: _idx_dims(_mnist(d, gz=False), np.random.default_rng(0).bytes(4096)),
    "mnist_dims_cut": lambda d: _idx_dims(_mnist(d, gz=False), None),
    "cifar_float_label": lambda d: _cifar(d, "float_label"),
    "cifar_garbage": lambda d: _cifar(d, "garbage"),
    "cifar_truncated": lambda d: _cifar(d, "truncated"),
    "cifar_label": lambda d: _cifar(d, "label"),
    "cifar_shape": lambda d: _cifar(d, "shape"),
    "cifar_code": lambda d: _cifar(d, "code"),
}


def _run_cli(args: list[str], capsys) -> tuple[int, str]:
    try:
        code = cli.main(args)
    except SystemExit as stop:  # argparse rejects a malformed value itself (exit 2, names the flag)
        code = stop.code
    captured = capsys.readouterr()
    return code, captured.err + captured.out


@pytest.mark.parametrize("row", CLI_ROWS, ids=[r[0] for r in CLI_ROWS])
def test_bad_cli_input_fails_before_training_naming_flag_and_value(row, tmp_path, capsys, monkeypatch):
    name, extra, expected = row
    (tmp_path / "a_file").write_text("not a folder")
    for arg in extra:
        folder = arg.replace("{tmp}/", "") if arg.startswith("{tmp}/") else None
        if folder in FIXTURES:
            FIXTURES[folder](tmp_path / folder)
    extra = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    started = []
    import flwr_strategies.simulations.runner as runner

    monkeypatch.setattr(runner, "run_backend", lambda *a, **k: started.append(1) or pytest.fail("training started"))
    method = "fedprox"
    if "--method" in extra:
        i = extra.index("--method")
        method = extra[i + 1]
        extra = extra[:i] + extra[i + 2:]
    code, err = _run_cli(["run", "--method", method, "--rounds", "2", "--quiet", *extra], capsys)
    assert code == 2, err
    assert not started
    assert "Traceback" not in err
    for text in expected:
        assert text in err, f"{name}: {text!r} not in {err!r}"


# -- Flower run config ---------------------------------------------------------------------------
RUN_CONFIG_ROWS = [
    ("lr-text", {"lr": "fast"}, ["lr", "fast"]),
    ("rounds-zero", {"num-server-rounds": 0}, ["num-server-rounds", "0"]),
    ("unknown-key", {"learning-rate": 0.1}, ["learning-rate"]),
    ("weight-decay-nan", {"weight-decay": float("nan")}, ["weight-decay", "nan"]),
    ("set-without-equals", {"set": "proximal_mu"}, ["set", "proximal_mu"]),
    ("fail-out-of-range", {"fail": "1:99"}, ["fail", "1:99"]),
    ("local-epochs-fraction", {"local-epochs": 1.5}, ["local-epochs", "1.5"]),
]


@pytest.mark.parametrize("row", RUN_CONFIG_ROWS, ids=[r[0] for r in RUN_CONFIG_ROWS])
def test_bad_run_config_names_key_and_value(row):
    name, values, expected = row
    with pytest.raises((SettingError, KeyError)) as info:
        config_from_run_config({"method": "fedprox", **values})
    text = str(info.value)
    for part in expected:
        assert part in text, f"{name}: {part!r} not in {text!r}"


def test_table_sizes():
    assert len(CLI_ROWS) + len(RUN_CONFIG_ROWS) >= 25
