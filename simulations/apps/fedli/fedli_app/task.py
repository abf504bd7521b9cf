"""fedli_app: the models and the data (Flower Datasets), shared by the ServerApp and the ClientApp."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from flwr_datasets import FederatedDataset
from flwr_datasets.partitioner import DirichletPartitioner
from torch.utils.data import DataLoader
from torchvision.models import resnet18
from torchvision.transforms import Compose, Normalize, ToTensor


class CNN(nn.Module):
    """A LeNet-5-style CNN for 3x32x32 images and 10 classes (the reduced-scale model)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def make_model(name: str) -> nn.Module:
    """``"resnet18-gn"``: ResNet-18 with group normalization in place of batch normalization (Sec. 7,
    after Hsieh et al. 2020; torchvision's ResNet-18, 2 groups per norm layer); ``"cnn"``: :class:`CNN`."""
    if name == "resnet18-gn":
        return resnet18(num_classes=10, norm_layer=lambda channels: nn.GroupNorm(2, channels))
    if name == "cnn":
        return CNN()
    raise ValueError(f"run config model must be 'resnet18-gn' or 'cnn', got {name!r}")


_FDS: FederatedDataset | None = None  # one per process, as in Flower's examples
_NORMALIZE = Compose([ToTensor(), Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])


def _federated_dataset(run_config, num_partitions: int) -> FederatedDataset:
    """The run's dataset (a Hugging Face id, or a local folder of parquet files) split among the
    clients by Dir(alpha) label skew (Sec. 7: alpha = 0.1)."""
    global _FDS
    if _FDS is None:
        partitioner = DirichletPartitioner(num_partitions=num_partitions, partition_by=run_config["label-key"],
                                           alpha=float(run_config["dirichlet-alpha"]), seed=int(run_config["seed"]))
        _FDS = FederatedDataset(dataset=str(run_config["dataset"]), partitioners={"train": partitioner})
    return _FDS


def _loader(split, run_config, batch_size: int, shuffle: bool, seed: int = 0) -> DataLoader:
    image, label = run_config["image-key"], run_config["label-key"]

    def transform(batch):
        return {"x": [_NORMALIZE(img.convert("RGB")) for img in batch[image]], "y": batch[label]}

    data = split.with_transform(transform)
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return DataLoader(data, batch_size=batch_size, shuffle=shuffle, generator=generator)


def load_partition(partition_id: int, num_partitions: int, run_config, seed: int) -> DataLoader:
    """This client's training partition, shuffled with ``seed``."""
    fds = _federated_dataset(run_config, num_partitions)
    return _loader(fds.load_partition(partition_id, "train"), run_config, int(run_config["batch-size"]), True, seed)


def load_test(run_config) -> DataLoader:
    """The dataset's ``test`` split (the ServerApp's central evaluation)."""
    fds = FederatedDataset(dataset=str(run_config["dataset"]), partitioners={"train": 1})
    return _loader(fds.load_split("test"), run_config, 256, False)


def evaluate(model: nn.Module, loader: DataLoader) -> tuple[float, float]:
    """(loss, accuracy) of ``model`` on ``loader``."""
    device = next(model.parameters()).device
    model.eval()
    loss, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for batch in loader:
            x, y = batch["x"].to(device), batch["y"].to(device)
            out = model(x)
            loss += F.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
            count += len(y)
    return loss / count, correct / count
