"""Dataset loaders: local files, generated data, Flower Datasets, and torchvision downloads on request.

- ``digits``: scikit-learn's bundled 8x8 handwritten digits (1,797 images), the embedded default.
- ``mnist``: the standard idx files (raw or gzip) from ``data_dir``, in torchvision's
  ``MNIST/raw`` layout or flat. When only the official test split (t10k) is present, a seeded
  80/20 train/test split is carved from it and the bundle's ``notes`` say so.
- ``cifar10`` / ``cifar100``: the standard python-pickle layout (``cifar-10-batches-py``,
  ``cifar-100-python``) from ``data_dir`` through torchvision's dataset classes.
- ``synthetic``: FedProx's Synthetic(alpha, beta) heterogeneous logistic-regression data with one
  natural group per client.
- ``hf:NAME``: any image-classification dataset through Flower Datasets'
  ``flwr_datasets.FederatedDataset`` (a Hugging Face dataset id, or a local folder of parquet/arrow
  files), partitioned by Flower's own partitioners (:data:`HF_PARTITIONERS`); ``data_dir`` is the
  download cache.

``mnist``, ``cifar10`` and ``cifar100`` are read from local files unless ``download=True``
(``--download``), which fetches them with torchvision (``download=True``) into ``data_dir`` first.
"""

from __future__ import annotations

import gzip
import importlib.util
import math
import os
import pickle
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flwr_strategies.setup import SettingError

if TYPE_CHECKING:  # torch loads inside the loaders, so `list` and `--help` start without it
    import torch

    from flwr_strategies.clients.training import TensorData

DATASETS = ("digits", "mnist", "cifar10", "cifar100", "synthetic")
#: Prefix of a dataset loaded through Flower Datasets (``hf:ylecun/mnist``, ``hf:path/to/parquet-folder``).
HF_PREFIX = "hf:"
#: The datasets read from ``data_dir``, which ``--download`` fetches with torchvision; the others
#: (bundled or generated) take no files.
FILE_DATASETS = ("mnist", "cifar10", "cifar100")

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
DIGITS_MEAN, DIGITS_STD = 0.3053, 0.3760  # pixel mean/std of all 1,797 sklearn digits after /16
CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)


@dataclass
class DatasetBundle:
    """A loaded dataset: train and test splits as tensors, plus facts about it."""

    name: str
    train: TensorData
    test: TensorData
    num_classes: int
    input_shape: tuple[int, ...]
    notes: list[str] = field(default_factory=list)
    groups: np.ndarray | None = None  # natural client id of each training sample (synthetic)
    partitions: list[np.ndarray] | None = None  # each client's training rows, when the loader partitions (hf:)


class DataFilesMissing(FileNotFoundError):
    """Raised when a dataset's files are not where ``--data-dir`` points."""


class DataFileError(ValueError):
    """A dataset file that is present but unusable (truncated, corrupt, inconsistent, labels out of
    range). The message names the file and the problem."""


def _seeded_split(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    perm = np.random.default_rng(seed).permutation(n)
    n_test = int(round(n * test_fraction))
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def sklearn_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits: the 1,797 8x8 images (values 0 to 16, float64) and their labels, read
    from the file scikit-learn bundles (``sklearn/datasets/data/digits.csv.gz``, what
    ``sklearn.datasets.load_digits`` reads) without importing scikit-learn, whose import (SciPy's
    statistics among it) costs more CPU than a small client's round: each message a SuperNode runs
    is a new process that loads the data again."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the digits dataset is scikit-learn's: pip install scikit-learn")
    data = np.loadtxt(Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "digits.csv.gz",
                      delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)


def load_digits_bundle(seed: int = 0, test_fraction: float = 0.2) -> DatasetBundle:
    """scikit-learn's digits (:func:`sklearn_digits`), pixel values scaled to [0, 1], seeded
    train/test split."""
    import torch

    from flwr_strategies.clients.training import TensorData

    images, target = sklearn_digits()
    x = (torch.tensor(images, dtype=torch.float32).unsqueeze(1) / 16.0 - DIGITS_MEAN) / DIGITS_STD
    y = torch.tensor(target, dtype=torch.long)
    tr, te = _seeded_split(len(y), test_fraction, seed)
    return DatasetBundle(
        "digits",
        TensorData(x[tr], y[tr]),
        TensorData(x[te], y[te]),
        10,
        (1, 8, 8),
        [f"sklearn digits: {len(tr)} train / {len(te)} test (seeded {1 - test_fraction:.0%}/{test_fraction:.0%} split, seed {seed})"],
    )


# -- MNIST -----------------------------------------------------------------------------------
_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: Path) -> np.ndarray:
    """Read an idx file (optionally gzip-compressed) into an array.

    A file that cannot be read (truncated or corrupt gzip, bad magic number, size not matching its
    header) raises :class:`DataFileError` naming the file.
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (EOFError, OSError, zlib.error) as err:  # gzip.BadGzipFile is an OSError
        raise DataFileError(f"{path}: cannot be read ({type(err).__name__}: {err}); the file is truncated or corrupt") from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise DataFileError(f"{path} is not an idx file (bad magic number)")
    ndim, dtype = data[3], np.dtype(_IDX_DTYPES[data[2]])
    read = f"magic number {data[:4].hex()}: {dtype} values in {ndim} dimensions"
    if len(data) < 4 + 4 * ndim:
        raise DataFileError(f"{path}: its idx header ({read}) needs {4 + 4 * ndim} bytes, the file has "
                            f"{len(data)}; the file is truncated or corrupt")
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    body = len(data) - (4 + 4 * ndim)
    count = math.prod(shape)
    if body != count * dtype.itemsize:
        sizes = str(shape) if ndim <= 4 else f"({', '.join(map(str, shape[:4]))}, ... {ndim - 4} more)"
        values = str(count) if count < 10**18 else f"about 10^{len(str(count)) - 1}"
        raise DataFileError(f"{path}: its idx header ({read}) gives the sizes {sizes}, {values} values, but the file holds "
                            f"{body // dtype.itemsize} after the header; the file is truncated or corrupt")
    return np.frombuffer(data, dtype=dtype, offset=4 + 4 * ndim).reshape(shape)


def check_labels(path: Path, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """``labels`` as int64 after checking they are integers in ``0..num_classes-1``; raises
    :class:`DataFileError` naming ``path`` and the first bad value (a float label is never
    truncated, a NaN never becomes a huge negative integer)."""
    if labels.dtype.kind not in "iu":
        kind = labels.dtype.name
        if labels.dtype.kind == "f" and labels.size:  # name the first label that is not a whole number
            flat = labels.reshape(-1)
            bad = np.flatnonzero(~np.isfinite(flat) | (flat != np.round(flat)))
            i = int(bad[0]) if bad.size else 0
            raise DataFileError(f"{path}: labels must be integers, the file holds {kind} values (label {float(flat[i])} "
                                f"at index {i})")
        raise DataFileError(f"{path}: labels must be integers, the file holds {kind} values")
    bad = np.flatnonzero((labels < 0) | (labels >= num_classes))
    if bad.size:
        raise DataFileError(f"{path}: label {int(labels[bad[0]])} at index {int(bad[0])} is outside 0..{num_classes - 1} "
                            f"({bad.size} bad labels)")
    return labels.astype(np.int64)


def check_pixels(path: Path, images: np.ndarray) -> np.ndarray:
    """``images`` after checking they are unsigned bytes (0..255, what the MNIST and CIFAR files
    hold); raises :class:`DataFileError` naming ``path``, the dtype and, for signed data, the most
    negative pixel (never cast)."""
    if images.dtype != np.uint8:
        detail = ""
        if images.dtype.kind in "if" and images.size and float(np.nanmin(images)) < 0:
            detail = f", with negative pixels down to {np.nanmin(images).item()}"
        raise DataFileError(f"{path}: images must be unsigned bytes (pixels 0..255), the file holds "
                            f"{images.dtype.name} values{detail}")
    return images


def read_mnist_pair(images_path: Path, labels_path: Path, num_classes: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """MNIST images (N, 28, 28) and labels (N,) from two idx files, checked against each other:
    at least one image, same count, images 28x28 unsigned bytes, labels integers in
    ``0..num_classes-1``. Raises :class:`DataFileError` naming the file and the value."""
    x = read_idx(images_path)
    y = read_idx(labels_path)
    if x.ndim != 3 or x.shape[1:] != (28, 28):
        raise DataFileError(f"{images_path}: expected images of shape (N, 28, 28), got {x.shape}")
    if len(x) == 0:
        raise DataFileError(f"{images_path} holds no images (its header says 0)")
    check_pixels(images_path, x)
    if y.ndim != 1:
        raise DataFileError(f"{labels_path}: expected a label vector (N,), got shape {y.shape}")
    if len(y) != len(x):
        raise DataFileError(f"{labels_path} holds {len(y)} labels but {images_path} holds {len(x)} images; "
                            "they must match one to one")
    return x, check_labels(labels_path, y, num_classes)


def _find(data_dir: Path, stem: str) -> Path | None:
    for sub in ("", "MNIST/raw", "raw", "mnist"):
        for suffix in ("", ".gz"):
            p = data_dir / sub / f"{stem}{suffix}"
            if p.exists():
                return p
    return None


def load_mnist_bundle(data_dir: str | os.PathLike | None, seed: int = 0, test_fraction: float = 0.2) -> DatasetBundle:
    """MNIST from idx files; carves a seeded train/test split when only t10k is present."""
    import torch

    from flwr_strategies.clients.training import TensorData

    if data_dir is None:
        raise DataFilesMissing(
            "dataset 'mnist' needs --data-dir pointing to the idx files "
            "(t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz], optionally train-*); add --download to "
            "fetch them there with torchvision"
        )
    root = Path(data_dir)
    train_images, train_labels, test_images, test_labels = (_find(root, k) for k in (
        "train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"))
    norm = lambda a: (torch.tensor(a, dtype=torch.float32).unsqueeze(1) / 255.0 - MNIST_MEAN) / MNIST_STD  # noqa: E731
    if test_images is None or test_labels is None:
        raise DataFilesMissing(
            f"MNIST idx files not found under --data-dir {root}: expected t10k-images-idx3-ubyte[.gz] and "
            "t10k-labels-idx1-ubyte[.gz] (and optionally train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz]) "
            f"directly in it or in MNIST/raw/; `--data-dir {root} --download` fetches them there with torchvision"
        )
    if (train_images is None) != (train_labels is None):
        have, missing = ((train_images, "train-labels-idx1-ubyte") if train_labels is None
                         else (train_labels, "train-images-idx3-ubyte"))
        raise DataFilesMissing(f"{have} found but {missing}[.gz] is missing under --data-dir {root}; "
                               "give both training files or neither")
    xt, yt = read_mnist_pair(test_images, test_labels)
    if train_images and train_labels:
        xtr, ytr = read_mnist_pair(train_images, train_labels)
        note = f"MNIST official split: {len(ytr)} train / {len(yt)} test"
    else:
        tr, te = _seeded_split(len(yt), test_fraction, seed)
        note = (f"MNIST: only the official test split (t10k, {len(yt)} images) was found in {root}; "
                f"carved a seeded {1 - test_fraction:.0%}/{test_fraction:.0%} train/test split from it "
                f"({len(tr)} train / {len(te)} test, seed {seed})")
        (xtr, ytr), (xt, yt) = (xt[tr], yt[tr]), (xt[te], yt[te])
    return DatasetBundle("mnist", TensorData(norm(xtr), torch.tensor(ytr)), TensorData(norm(xt), torch.tensor(yt)), 10,
                         (1, 28, 28), [note])


# -- CIFAR -----------------------------------------------------------------------------------
def random_crop_flip(padding: int = 4):
    """Batched CIFAR augmentation: random crop from a zero-padded image and horizontal flip (p=0.5).

    Uses the caller's generator only, so augmented batches are reproducible.
    """
    import torch


    def augment(xb: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        n, _, h, w = xb.shape
        flip = torch.rand(n, generator=gen) < 0.5
        dx = torch.randint(0, 2 * padding + 1, (n,), generator=gen)
        dy = torch.randint(0, 2 * padding + 1, (n,), generator=gen)
        padded = torch.nn.functional.pad(xb, (padding,) * 4)
        rows = (dy.view(n, 1) + torch.arange(h).view(1, h)).to(xb.device)
        cols = (dx.view(n, 1) + torch.arange(w).view(1, w)).to(xb.device)
        out = padded[torch.arange(n, device=xb.device).view(n, 1, 1, 1), torch.arange(xb.shape[1], device=xb.device).view(1, -1, 1, 1), rows.view(n, 1, h, 1), cols.view(n, 1, 1, w)]
        return torch.where(flip.to(xb.device).view(n, 1, 1, 1), out.flip(3), out)

    return augment


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles only plain containers and NumPy arrays (what the CIFAR pickles hold): a file
    that asks for any other class is rejected instead of run."""

    _ALLOWED = {"_reconstruct", "ndarray", "dtype", "scalar", "_frombuffer"}

    def find_class(self, module: str, name: str):
        if (module.split(".")[0] == "numpy" and name in self._ALLOWED) or (module, name) == ("_codecs", "encode"):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"unexpected object {module}.{name} in a CIFAR pickle")


def read_cifar_pickle(path: Path, label_keys: tuple[str, ...], num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 3, 32, 32) uint8 and labels (N,) int64 of one CIFAR python-pickle batch file.

    Raises :class:`DataFileError` naming the file when it cannot be unpickled (truncated, corrupt,
    not a CIFAR batch), when its arrays have the wrong size, count or dtype (images must be uint8,
    labels integers: nothing is cast), or a label is out of range.
    """
    try:
        with open(path, "rb") as fh:
            entry = _ArrayUnpickler(fh, encoding="latin1").load()
    except Exception as err:  # noqa: BLE001 - a corrupt pickle can raise almost anything
        raise DataFileError(f"{path}: not a readable CIFAR python pickle ({type(err).__name__}: {err})") from None
    if isinstance(entry, dict):
        entry = {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in entry.items()}
    key = next((k for k in label_keys if isinstance(entry, dict) and k in entry), None)
    if not isinstance(entry, dict) or "data" not in entry or key is None:
        found = sorted(map(str, entry)) if isinstance(entry, dict) else type(entry).__name__
        raise DataFileError(f"{path}: expected a dict with 'data' and '{label_keys[0]}', found {found}")
    try:
        data = np.asarray(entry["data"])
        labels = np.asarray(entry[key]).reshape(-1)
    except (TypeError, ValueError) as err:
        raise DataFileError(f"{path}: 'data' or '{key}' is not numeric ({err})") from None
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise DataFileError(f"{path}: 'data' must have shape (N, 3072) (3x32x32 images), got {data.shape}")
    if len(data) == 0:
        raise DataFileError(f"{path} holds no images")
    check_pixels(path, data)
    if len(labels) != len(data):
        raise DataFileError(f"{path}: {len(labels)} labels for {len(data)} images; they must match one to one")
    return data.reshape(-1, 3, 32, 32), check_labels(path, labels, num_classes)


def load_cifar_bundle(name: str, data_dir: str | os.PathLike | None, augment: bool = True) -> DatasetBundle:
    """CIFAR-10/100 from the python-pickle layout (``cifar-10-batches-py``, ``cifar-100-python``),
    read file by file and checked (no download; torchvision's file lists and MD5 sums)."""
    import torch

    from flwr_strategies.clients.training import TensorData

    from torchvision.datasets import CIFAR10, CIFAR100
    from torchvision.datasets.utils import check_integrity

    cls, folder, mean, std, classes = {"cifar10": (CIFAR10, "cifar-10-batches-py", CIFAR10_MEAN, CIFAR10_STD, 10),
                                       "cifar100": (CIFAR100, "cifar-100-python", CIFAR100_MEAN, CIFAR100_STD, 100)}[name]
    expected = [f"{folder}/{n}" for n, _ in cls.train_list + cls.test_list] + [f"{folder}/{cls.meta['filename']}"]
    if data_dir is None or not all((Path(data_dir) / e).exists() for e in expected):
        where = data_dir if data_dir is not None else "DIR"
        raise DataFilesMissing(
            f"dataset '{name}' needs --data-dir holding the python-pickle layout: {', '.join(expected)}; "
            f"`--data-dir {where} --download` fetches them there with torchvision"
        )
    root = Path(data_dir) / folder
    label_keys = ("labels",) if name == "cifar10" else ("fine_labels", "labels")
    m, s = torch.tensor(mean).view(1, 3, 1, 1), torch.tensor(std).view(1, 3, 1, 1)

    def read(files: list) -> tuple[torch.Tensor, torch.Tensor]:
        """The files' images (scaled to [0, 1], standardised per channel) and labels."""
        parts = [read_cifar_pickle(root / n, label_keys, classes) for n, _ in files]
        x = torch.from_numpy(np.concatenate([x for x, _ in parts])).float()
        return (x / 255.0 - m) / s, torch.from_numpy(np.concatenate([y for _, y in parts]))

    xtr, ytr = read(cls.train_list)
    xte, yte = read(cls.test_list)
    notes = []
    if not all(check_integrity(str(root / n), md5) for n, md5 in cls.train_list + cls.test_list):
        notes.append(f"{name}: files present but their checksums differ from the official release (a local copy)")
    notes.append(f"{name}: {len(ytr)} train / {len(yte)} test from {data_dir}")
    return DatasetBundle(name, TensorData(xtr, ytr, random_crop_flip() if augment else None), TensorData(xte, yte),
                         classes, (3, 32, 32), notes)


# -- Synthetic(alpha, beta) ------------------------------------------------------------------
def load_synthetic_bundle(num_clients: int, alpha: float = 1.0, beta: float = 1.0, seed: int = 0, dim: int = 60,
                          num_classes: int = 10, test_fraction: float = 0.2,
                          mean_samples: float = 4.0) -> DatasetBundle:
    """FedProx's Synthetic(alpha, beta) (Li et al., MLSys 2020, Sec. 5.1).

    Client k: u_k ~ N(0, alpha), W_k, b_k ~ N(u_k, 1); B_k ~ N(0, beta), v_k ~ N(B_k, 1);
    x ~ N(v_k, Sigma) with Sigma_jj = j^-1.2; y = argmax softmax(W_k x + b_k). Client sizes follow
    a log-normal power law (at least 10 train samples each). ``groups`` holds each training
    sample's client, used by the ``natural`` partition.
    """
    import torch

    from flwr_strategies.clients.training import TensorData

    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    rng = np.random.default_rng(seed)
    sizes = np.maximum(rng.lognormal(mean_samples, 2.0, num_clients).astype(int) + 50, 60)
    sigma = np.array([(j + 1) ** -1.2 for j in range(dim)])
    xs_tr, ys_tr, g_tr, xs_te, ys_te = [], [], [], [], []
    for k in range(num_clients):
        u = rng.normal(0, np.sqrt(alpha))
        big_b = rng.normal(0, np.sqrt(beta))
        w = rng.normal(u, 1, (num_classes, dim))
        b = rng.normal(u, 1, num_classes)
        v = rng.normal(big_b, 1, dim)
        x = rng.normal(v, np.sqrt(sigma), (sizes[k], dim))
        y = np.argmax(x @ w.T + b, axis=1)
        n_test = max(1, int(round(sizes[k] * test_fraction)))
        xs_te.append(x[:n_test]); ys_te.append(y[:n_test])
        xs_tr.append(x[n_test:]); ys_tr.append(y[n_test:]); g_tr.append(np.full(sizes[k] - n_test, k))
    f = lambda a: torch.tensor(np.concatenate(a), dtype=torch.float32)  # noqa: E731
    l = lambda a: torch.tensor(np.concatenate(a), dtype=torch.long)  # noqa: E731
    return DatasetBundle(
        "synthetic",
        TensorData(f(xs_tr), l(ys_tr)),
        TensorData(f(xs_te), l(ys_te)),
        num_classes,
        (dim,),
        [f"Synthetic({alpha}, {beta}): {num_clients} clients, {int(sizes.sum())} samples, seed {seed}"],
        groups=np.concatenate(g_tr),
    )


def download_dataset(name: str, data_dir: str | os.PathLike | None) -> Path:
    """Fetch ``mnist``, ``cifar10`` or ``cifar100`` into ``data_dir`` with torchvision
    (``download=True``: its mirrors, its MD5 checks; a copy already there is kept), in the layout
    the loaders read (``MNIST/raw``, ``cifar-10-batches-py``, ``cifar-100-python``)."""
    from torchvision import datasets as tv

    key = name.lower()
    if key not in FILE_DATASETS:
        raise SettingError("download", True, f"used only with a dataset torchvision fetches "
                                             f"({', '.join(FILE_DATASETS)}); '{name}' is not one")
    if data_dir is None:
        raise SettingError("data_dir", None, "the folder to download into (--download fetches the files there)")
    root = Path(data_dir)
    root.mkdir(parents=True, exist_ok=True)
    cls = {"mnist": tv.MNIST, "cifar10": tv.CIFAR10, "cifar100": tv.CIFAR100}[key]
    for train in (True, False):
        cls(str(root), train=train, download=True)
    return root


# -- Flower Datasets ---------------------------------------------------------------------------
#: The project's partition names and the Flower Datasets partitioner each maps to for ``hf:`` datasets.
HF_PARTITIONERS = {"iid": "IidPartitioner",
                   "dirichlet-class": "DirichletPartitioner (self_balancing, the same family as the project's)",
                   "pathological": "PathologicalPartitioner (class_assignment_mode='random')",
                   "label-count": "PathologicalPartitioner (class_assignment_mode='deterministic')"}


def hf_partitioner(kind: str, num_clients: int, label: str, *, alpha: float, classes_per_client: int, seed: int,
                   num_rows: int):
    """The Flower Datasets partitioner for the project's partition ``kind`` (:data:`HF_PARTITIONERS`)."""
    from flwr_datasets.partitioner import DirichletPartitioner, IidPartitioner, PathologicalPartitioner

    if kind == "iid":
        return IidPartitioner(num_partitions=num_clients)
    if kind == "dirichlet-class":
        return DirichletPartitioner(num_partitions=num_clients, partition_by=label, alpha=alpha, seed=seed,
                                    min_partition_size=min(10, num_rows // num_clients), self_balancing=True)
    if kind in ("pathological", "label-count"):
        mode = "random" if kind == "pathological" else "deterministic"
        return PathologicalPartitioner(num_partitions=num_clients, partition_by=label,
                                       num_classes_per_partition=classes_per_client, class_assignment_mode=mode,
                                       seed=seed)
    raise SettingError("partition", kind, f"one of {', '.join(HF_PARTITIONERS)} for a Flower Datasets (hf:) dataset "
                                          "(Flower's partitioners; 'dirichlet' and 'natural' are the project's own)")


def _hf_columns(features: Any, name: str) -> tuple[str, str, int | None]:
    """The image column, the label column and the number of classes (when the label is a ClassLabel)."""
    from datasets import ClassLabel, Image

    images = [k for k, f in features.items() if isinstance(f, Image)] or [k for k in ("image", "img") if k in features]
    labels = [k for k, f in features.items() if isinstance(f, ClassLabel)] or [k for k in ("label", "labels")
                                                                                 if k in features]
    if not images or not labels:
        raise DataFileError(f"dataset '{HF_PREFIX}{name}': expected an image column and a label column (a ClassLabel, "
                            f"or columns named image/img and label); it has {sorted(features)}")
    label = labels[0]
    classes = features[label].num_classes if isinstance(features[label], ClassLabel) else None
    return images[0], label, classes


def _hf_arrays(ds: Any, image: str, label: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Images as ``(n, C, H, W)`` uint8 and labels as int64."""
    rows = ds.with_format("numpy", columns=[image, label])
    x = np.asarray(rows[image])
    y = np.asarray(rows[label])
    if x.dtype == object or x.ndim not in (3, 4):
        raise DataFileError(f"dataset '{HF_PREFIX}{name}': the images of column '{image}' do not share one shape "
                            f"(got an array of {x.dtype} {x.shape}); use a dataset of equal-sized images")
    x = x[:, None] if x.ndim == 3 else np.moveaxis(x, -1, 1)
    return x, y


def load_hf_bundle(name: str, num_clients: int, partition: str, seed: int = 0, *, alpha: float = 0.5,
                   classes_per_client: int = 2, cache_dir: str | os.PathLike | None = None,
                   test_fraction: float = 0.2) -> DatasetBundle:
    """An image-classification dataset through Flower Datasets' ``FederatedDataset``.

    ``name`` is what ``datasets.load_dataset`` takes: a Hugging Face dataset id (``ylecun/mnist``,
    ``uoft-cs/cifar10``) or a local folder of parquet/arrow files with ``train`` (and ``test``) splits.
    The training split is partitioned by Flower's partitioner for ``partition``
    (:data:`HF_PARTITIONERS`); client ``i``'s rows are ``partitions[i]``. Without a ``test`` split, a
    seeded ``test_fraction`` of the training split is held out (Flower Datasets' ``Divider``) and the
    notes say so. Pixels are scaled to [0, 1] and standardised per channel with the training data's
    mean and standard deviation.
    """
    import torch

    from flwr_strategies.clients.training import TensorData

    from datasets import get_dataset_split_names
    from flwr_datasets import FederatedDataset
    from flwr_datasets.preprocessor import Divider

    kwargs: dict[str, Any] = {"cache_dir": str(cache_dir)} if cache_dir is not None else {}
    splits = list(get_dataset_split_names(name, **kwargs))
    if "train" not in splits:
        raise DataFileError(f"dataset '{HF_PREFIX}{name}' has no 'train' split (its splits: {splits})")
    notes = []
    preprocessor = None
    if "test" not in splits:
        rows = FederatedDataset(dataset=name, partitioners={"train": 1}, **kwargs).load_split("train").num_rows
        held = int(round(rows * test_fraction))
        preprocessor = Divider(divide_config={"train": rows - held, "test": held}, divide_split="train")
        notes.append(f"{HF_PREFIX}{name}: no test split; held out {held} of the {rows} rows of 'train' (Flower "
                     f"Datasets' Divider after a seeded shuffle, seed {seed})")

    def federated(partitioner: Any) -> Any:
        return FederatedDataset(dataset=name, preprocessor=preprocessor, partitioners={"train": partitioner},
                                shuffle=True, seed=seed, **kwargs)

    probe = federated(num_clients)
    test_split = probe.load_split("test")
    image, label, classes = _hf_columns(test_split.features, name)
    num_rows = probe.load_split("train").num_rows
    fds = federated(hf_partitioner(partition, num_clients, label, alpha=alpha, classes_per_client=classes_per_client,
                                   seed=seed, num_rows=num_rows))
    xs, ys = zip(*(_hf_arrays(fds.load_partition(i, "train"), image, label, name) for i in range(num_clients)))
    xtr, ytr = np.concatenate(xs), np.concatenate(ys)
    parts = np.split(np.arange(len(ytr)), np.cumsum([len(y) for y in ys])[:-1])  # client i's rows, in client order
    if len(ytr) < num_rows:
        notes.append(f"{HF_PREFIX}{name}: {num_rows - len(ytr)} of the {num_rows} training rows are in no client's "
                     f"partition ({HF_PARTITIONERS[partition]} assigns them to none)")
    xte, yte = _hf_arrays(test_split, image, label, name)
    num_classes = int(classes if classes is not None else np.max(np.concatenate([ytr, yte])) + 1)
    ytr = check_labels(Path(f"{HF_PREFIX}{name}:train"), ytr, num_classes)
    yte = check_labels(Path(f"{HF_PREFIX}{name}:test"), yte, num_classes)
    scale = 255.0 if xtr.dtype == np.uint8 else 1.0
    train = torch.tensor(xtr, dtype=torch.float32) / scale
    test = torch.tensor(xte, dtype=torch.float32) / scale
    mean = train.mean(dim=(0, 2, 3), keepdim=True)
    std = train.std(dim=(0, 2, 3), keepdim=True).clamp_min(1e-8)
    notes.append(f"{HF_PREFIX}{name} through Flower Datasets: {len(ytr)} train / {len(yte)} test, "
                 f"{HF_PARTITIONERS[partition]} over {num_clients} clients (seed {seed})")
    return DatasetBundle(f"{HF_PREFIX}{name}", TensorData((train - mean) / std, torch.tensor(ytr)),
                         TensorData((test - mean) / std, torch.tensor(yte)), num_classes,
                         tuple(int(d) for d in xtr.shape[1:]), notes, partitions=parts)


def load_dataset(name: str, data_dir: str | os.PathLike | None = None, seed: int = 0, *, num_clients: int = 10,
                 synthetic_alpha: float = 1.0, synthetic_beta: float = 1.0, synthetic_mean_samples: float = 4.0,
                 partition: str | None = None, alpha: float = 0.5, classes_per_client: int = 2,
                 download: bool = False) -> DatasetBundle:
    """Load dataset ``name``; an unknown name raises ``KeyError`` listing the valid ones.

    ``synthetic_mean_samples`` is the log-normal mean of Synthetic's client sizes (4.0: about 400
    samples per client on average; lower values give the 60-sample floor, for many-client runs).
    ``download`` fetches ``mnist``/``cifar10``/``cifar100`` into ``data_dir`` first (:func:`download_dataset`).
    An ``hf:`` dataset is partitioned here (``partition``, ``alpha``, ``classes_per_client``;
    :func:`load_hf_bundle`), the others by the caller. A ``data_dir`` given for a dataset that reads
    no files (``digits``, ``synthetic``) raises :class:`~flwr_strategies.setup.SettingError` instead
    of being ignored."""
    key = name.lower()
    if data_dir is not None and key in DATASETS and key not in FILE_DATASETS:
        raise SettingError("data_dir", str(data_dir), f"unset for dataset {name!r}, which reads no files (a data "
                                                      f"folder is for {', '.join(FILE_DATASETS)} and {HF_PREFIX} datasets)")
    if download:
        download_dataset(key, data_dir)
    if name.startswith(HF_PREFIX):
        return load_hf_bundle(name[len(HF_PREFIX):], num_clients, partition or "iid", seed, alpha=alpha,
                              classes_per_client=classes_per_client, cache_dir=data_dir)
    if key == "digits":
        return load_digits_bundle(seed)
    if key == "mnist":
        return load_mnist_bundle(data_dir, seed)
    if key in ("cifar10", "cifar100"):
        return load_cifar_bundle(key, data_dir)
    if key == "synthetic":
        return load_synthetic_bundle(num_clients, synthetic_alpha, synthetic_beta, seed, mean_samples=synthetic_mean_samples)
    raise KeyError(f"unknown dataset '{name}'; valid datasets: {', '.join(DATASETS)}, or {HF_PREFIX}NAME (Flower Datasets)")
