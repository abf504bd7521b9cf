import gzip
import pickle
import struct

import numpy as np
import pytest
import torch

from flwr_strategies.adapters.wire import payload_bytes
from flwr_strategies.decentralized.table import ModelLayout
from flwr_strategies.simulations.datasets import DataFilesMissing, load_dataset, random_crop_flip, read_idx
from flwr_strategies.simulations.models import build_model, num_parameters


def test_digits_bundle():
    b = load_dataset("digits", seed=0)
    assert b.input_shape == (1, 8, 8) and b.num_classes == 10
    assert len(b.train) + len(b.test) == 1797
    assert abs(float(b.train.x.mean())) < 0.1


def test_mnist_from_shared_test_split(mnist_path):
    b = load_dataset("mnist", mnist_path, seed=0)
    assert len(b.train) == 8000 and len(b.test) == 2000
    assert b.train.x.shape[1:] == (1, 28, 28)
    assert "carved a seeded" in b.notes[0]
    b2 = load_dataset("mnist", mnist_path, seed=0)
    assert torch.equal(b.test.y, b2.test.y)


def _write_idx(path, arr, gz):
    code = {np.uint8: 0x08}[arr.dtype.type]
    head = bytes([0, 0, code, arr.ndim]) + b"".join(struct.pack(">I", s) for s in arr.shape)
    data = head + arr.tobytes()
    (gzip.open if gz else open)(path, "wb").write(data)


def test_mnist_official_layout_raw_files(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 30), ("t10k", 12)):
        _write_idx(raw / f"{split}-images-idx3-ubyte", rng.integers(0, 255, (n, 28, 28), dtype=np.uint8), False)
        _write_idx(raw / f"{split}-labels-idx1-ubyte", rng.integers(0, 10, n, dtype=np.uint8), False)
    b = load_dataset("mnist", tmp_path)
    assert len(b.train) == 30 and len(b.test) == 12
    assert "official split" in b.notes[0]
    assert read_idx(raw / "t10k-labels-idx1-ubyte").shape == (12,)


def test_missing_files_name_what_is_expected(tmp_path):
    with pytest.raises(DataFilesMissing, match="t10k-images-idx3-ubyte"):
        load_dataset("mnist", tmp_path)
    with pytest.raises(DataFilesMissing, match="--data-dir"):
        load_dataset("mnist", None)
    with pytest.raises(DataFilesMissing, match="data_batch_1"):
        load_dataset("cifar10", tmp_path)
    with pytest.raises(KeyError, match="valid datasets"):
        load_dataset("imagenet")


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_pickle_fixture(tmp_path, name):
    rng = np.random.default_rng(0)
    folder = tmp_path / ("cifar-10-batches-py" if name == "cifar10" else "cifar-100-python")
    folder.mkdir()
    key = "labels" if name == "cifar10" else "fine_labels"
    classes = 10 if name == "cifar10" else 100
    files = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"] if name == "cifar10" else ["train", "test"]
    for f in files:
        with open(folder / f, "wb") as fh:
            pickle.dump({"data": rng.integers(0, 255, (4, 3072), dtype=np.uint8), key: list(rng.integers(0, classes, 4))}, fh)
    meta = "batches.meta" if name == "cifar10" else "meta"
    with open(folder / meta, "wb") as fh:
        pickle.dump({"label_names" if name == "cifar10" else "fine_label_names": [str(i) for i in range(classes)]}, fh)
    b = load_dataset(name, tmp_path)
    n_train = 20 if name == "cifar10" else 4
    assert len(b.train) == n_train and len(b.test) == 4
    assert b.train.x.shape[1:] == (3, 32, 32) and b.num_classes == classes
    assert any("checksums differ" in n for n in b.notes)


def test_augmentation_is_seeded_and_shape_preserving():
    x = torch.randn(5, 3, 32, 32)
    aug = random_crop_flip()
    a = aug(x, torch.Generator().manual_seed(1))
    b = aug(x, torch.Generator().manual_seed(1))
    assert a.shape == x.shape and torch.equal(a, b) and not torch.equal(a, x)


def test_synthetic_has_natural_groups():
    b = load_dataset("synthetic", num_clients=5, synthetic_alpha=0.5, synthetic_beta=0.5)
    assert b.groups is not None and set(np.unique(b.groups)) == set(range(5))
    assert b.train.x.shape[1] == 60


@pytest.mark.parametrize(
    "name,shape,classes,params",
    [("cnn_mnist", (1, 28, 28), 10, 390_880), ("cnn_svhn", (3, 32, 32), 10, 399_136),
     ("cnn_cifar", (3, 32, 32), 10, 4_719_328), ("cnn_cifar", (3, 32, 32), 100, 4_765_408)],
)
def test_fedmud_model_parameter_counts(name, shape, classes, params):
    model = build_model(name, classes, shape)
    assert num_parameters(model) == params
    assert model(torch.zeros(2, *shape)).shape == (2, classes)


def test_other_models_forward():
    assert build_model("resnet18_gn", 10, (3, 32, 32))(torch.zeros(1, 3, 32, 32)).shape == (1, 10)
    assert build_model("lenet_cifar", 10, (3, 32, 32))(torch.zeros(1, 3, 32, 32)).shape == (1, 10)
    with pytest.raises(ValueError, match="larger inputs"):
        build_model("cnn_mnist", 10, (1, 8, 8))
    with pytest.raises(KeyError, match="valid models"):
        build_model("vgg", 10, (3, 32, 32))


def test_payload_bytes_and_flatten():
    from flwr.common import ndarrays_to_parameters

    arrays = [np.ones((3, 4), np.float32), np.zeros(7, np.float64), np.arange(5, dtype=np.int64)]
    assert payload_bytes(ndarrays_to_parameters(arrays)) == sum(a.nbytes for a in arrays)
    layout = ModelLayout.of(arrays)
    vec = layout.flatten(arrays, dtype=np.float64)
    back = layout.unflatten(vec)
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(arrays, back))
    with pytest.raises(ValueError):
        layout.unflatten(vec[:-1])


def test_top_level_exports_resolve():
    import flwr_strategies

    for name in flwr_strategies.__all__:
        assert getattr(flwr_strategies, name) is not None
