"""Data the Flower way, offline: ``--dataset hf:NAME`` through Flower Datasets' ``FederatedDataset``
(with Flower's partitioners) on parquet files the test writes, and ``--download`` through torchvision
against a local mirror of the files it fetches."""

from __future__ import annotations

import gzip
import hashlib
import io
import pickle
import struct
import tarfile

import numpy as np
import pytest

from flwr_strategies.setup import SettingError
from flwr_strategies.simulations.datasets import DataFilesMissing, load_dataset
from flwr_strategies.simulations.runner import run_experiment
from flwr_strategies.simulations.settings import ExperimentConfig


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))


def _digits_images():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (np.kron(d.images, np.ones((1, 3, 3))) * 15).astype(np.uint8), d.target  # 24x24 uint8


def _write_parquet(folder, with_test: bool = True):
    """A Hugging Face image-classification dataset as local parquet files (train and test splits)."""
    from datasets import ClassLabel, Dataset, Features, Image

    images, labels = _digits_images()
    feat = Features({"image": Image(), "label": ClassLabel(num_classes=10)})
    (folder / "data").mkdir(parents=True)
    cut = 1400 if with_test else len(labels)
    Dataset.from_dict({"image": list(images[:cut]), "label": labels[:cut].tolist()},
                      features=feat).to_parquet(str(folder / "data" / "train-00000-of-00001.parquet"))
    if with_test:
        Dataset.from_dict({"image": list(images[cut:]), "label": labels[cut:].tolist()},
                          features=feat).to_parquet(str(folder / "data" / "test-00000-of-00001.parquet"))
    return folder


def test_hf_dataset_trains_through_federated_dataset_with_a_dirichlet_partitioner(tmp_path):
    from flwr_datasets import FederatedDataset
    from flwr_datasets.partitioner import DirichletPartitioner

    data = _write_parquet(tmp_path / "digits24")
    cfg = ExperimentConfig(method="fedavg", dataset=f"hf:{data}", data_dir=str(tmp_path / "cache"), num_clients=4,
                           partition="dirichlet-class", alpha=0.5, rounds=3, seed=0, progress=False)
    res = run_experiment(cfg)
    acc = [r["accuracy"] for r in res["rounds"]]
    assert acc[-1] > acc[0] + 0.3, acc
    assert any("through Flower Datasets: 1400 train / 397 test, DirichletPartitioner" in n for n in res["data_notes"])
    # the clients hold exactly the partitions Flower's own DirichletPartitioner makes
    fds = FederatedDataset(dataset=str(data), partitioners={"train": DirichletPartitioner(
        num_partitions=4, partition_by="label", alpha=0.5, seed=0, min_partition_size=10, self_balancing=True)},
        shuffle=True, seed=0, cache_dir=str(tmp_path / "cache2"))
    expect = [np.bincount(fds.load_partition(i)["label"], minlength=10) for i in range(4)]
    from flwr_strategies.simulations.tasks import ClassificationTask

    task = ClassificationTask(cfg.resolve())
    assert np.array_equal(task.label_histograms(), np.stack(expect))
    assert task.num_examples() == {i: int(e.sum()) for i, e in enumerate(expect)}


def test_hf_dataset_without_a_test_split_holds_out_a_seeded_fifth(tmp_path):
    data = _write_parquet(tmp_path / "only_train", with_test=False)
    b = load_dataset(f"hf:{data}", str(tmp_path / "cache"), 0, num_clients=3, partition="label-count",
                     classes_per_client=4)
    assert len(b.test) == 359 and "no test split; held out 359 of the 1797 rows of 'train'" in b.notes[0]
    assert b.input_shape == (1, 24, 24) and b.num_classes == 10
    held = [sorted(np.unique(b.train.y.numpy()[p]).tolist()) for p in b.partitions]
    assert held == [[0, 1, 2, 3], [1, 2, 3, 4], [2, 3, 4, 5]]  # PathologicalPartitioner, deterministic classes
    dropped = 1797 - len(b.test) - len(b.train)  # the rows of labels 6..9: no client holds them, and the notes say so
    assert dropped > 0 and f"{dropped} of the {1797 - len(b.test)} training rows are in no client's partition" in b.notes[1]


def test_hf_dataset_refuses_the_projects_own_partitions(tmp_path):
    data = _write_parquet(tmp_path / "d")
    with pytest.raises(SettingError, match="partition.*Flower's partitioners"):
        ExperimentConfig(method="fedavg", dataset=f"hf:{data}", partition="dirichlet").validate()


# --------------------------------------------------------------------------- torchvision downloads
@pytest.fixture
def mirror(tmp_path):
    """A local HTTP mirror (loopback only) serving a folder the test fills: torchvision downloads
    over HTTP(S) as it does from its real mirrors."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    folder = tmp_path / "mirror"
    folder.mkdir()

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield folder, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _idx(array: np.ndarray) -> bytes:
    head = bytes([0, 0, 0x08, array.ndim]) + b"".join(struct.pack(">I", n) for n in array.shape)
    return gzip.compress(head + array.astype(np.uint8).tobytes())


def _mnist_mirror(mirror, monkeypatch):
    """MNIST's four files (small) on the local mirror, and torchvision's MNIST pointed at it."""
    from torchvision.datasets import MNIST

    folder, url = mirror
    rng = np.random.default_rng(0)
    resources = []
    for name, n in (("train-images-idx3-ubyte.gz", 300), ("train-labels-idx1-ubyte.gz", 300),
                    ("t10k-images-idx3-ubyte.gz", 100), ("t10k-labels-idx1-ubyte.gz", 100)):
        array = rng.integers(0, 255, (n, 28, 28)) if "images" in name else rng.integers(0, 10, n)
        data = _idx(array)
        (folder / name).write_bytes(data)
        resources.append((name, hashlib.md5(data).hexdigest()))
    monkeypatch.setattr(MNIST, "mirrors", [url])
    monkeypatch.setattr(MNIST, "resources", resources)


def test_download_fetches_mnist_with_torchvision_into_data_dir(tmp_path, monkeypatch, mirror):
    _mnist_mirror(mirror, monkeypatch)
    target = tmp_path / "data"
    with pytest.raises(DataFilesMissing, match="--download"):
        load_dataset("mnist", str(target))
    b = load_dataset("mnist", str(target), download=True)
    raw = target / "MNIST" / "raw"
    assert sorted(p.name for p in raw.glob("*.gz")) == sorted(n for n, _ in __import__("torchvision").datasets.MNIST.resources)
    assert len(b.train) == 300 and len(b.test) == 100  # the official train split, not a carved one
    assert not any("carved" in n for n in b.notes)


def _cifar_mirror(mirror, monkeypatch):
    """A CIFAR-10 release (small batches) as a .tar.gz on the local mirror, and torchvision's CIFAR10
    pointed at it."""
    from torchvision.datasets import CIFAR10

    folder, url = mirror
    rng = np.random.default_rng(1)
    files = {}
    for name, _ in CIFAR10.train_list + CIFAR10.test_list:
        files[name] = pickle.dumps({"data": rng.integers(0, 255, (20, 3072)).astype(np.uint8),
                                    "labels": rng.integers(0, 10, 20).tolist()})
    files["batches.meta"] = pickle.dumps({"label_names": [f"c{i}" for i in range(10)]})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (folder / CIFAR10.filename).write_bytes(buf.getvalue())
    md5 = {n: hashlib.md5(d).hexdigest() for n, d in files.items()}
    monkeypatch.setattr(CIFAR10, "url", url + CIFAR10.filename)
    monkeypatch.setattr(CIFAR10, "tgz_md5", hashlib.md5(buf.getvalue()).hexdigest())
    monkeypatch.setattr(CIFAR10, "train_list", [[n, md5[n]] for n, _ in CIFAR10.train_list])
    monkeypatch.setattr(CIFAR10, "test_list", [[n, md5[n]] for n, _ in CIFAR10.test_list])
    monkeypatch.setattr(CIFAR10, "meta", {**CIFAR10.meta, "md5": md5["batches.meta"]})


def test_a_preset_with_download_fetches_cifar10_in_the_layout_torchvision_expects(tmp_path, monkeypatch, mirror):
    from flwr_strategies.simulations.compare import run_preset
    from flwr_strategies.simulations.presets import get_preset

    _cifar_mirror(mirror, monkeypatch)
    target = tmp_path / "cifar"
    results = run_preset(get_preset("dfedcata-paper"), {"data_dir": str(target), "download": True, "num_clients": 4,
                                                        "rounds": 1, "local_steps": 1, "batch_size": 8, "progress": False},
                         tmp_path / "runs")
    assert sorted(p.name for p in (target / "cifar-10-batches-py").iterdir()) == sorted(
        ["batches.meta", "data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch"])
    assert results and all(r["summary"]["failures"] == 0 for r in results)


def test_download_is_refused_where_torchvision_has_no_such_dataset(tmp_path):
    with pytest.raises(SettingError, match="download"):
        ExperimentConfig(method="fedavg", dataset="digits", download=True, data_dir=str(tmp_path)).validate()
    with pytest.raises(SettingError, match="data_dir"):
        ExperimentConfig(method="fedavg", dataset="mnist", download=True).validate()
