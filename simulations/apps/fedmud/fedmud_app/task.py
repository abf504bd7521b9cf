"""fedmud_app: the models and the data (Flower Datasets), shared by the ServerApp and the ClientApp."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from flwr_datasets import FederatedDataset
from flwr_datasets.partitioner import DirichletPartitioner
from torch.utils.data import DataLoader
from torchvision.transforms import Compose, Normalize, ToTensor


class Net(nn.Module):
    """CNN-4 of the authors' code for 1x28x28 images (FMNIST): four 3x3 convolutions (32, 64, 128,
    256 channels, no bias), each followed by batch normalization, ReLU and 2x2 max pooling, and a
    linear layer without bias (390,880 parameters). FedMUD compresses the convolutions 2-4 (the authors'
    code keeps the first and the last layer dense)."""

    def __init__(self) -> None:
        super().__init__()
        layers, channels = [], 1
        for out in (32, 64, 128, 256):
            layers += [nn.Conv2d(channels, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU(),
                       nn.MaxPool2d(2)]
            channels = out
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(256, 10, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.features(x), 1))


_FDS: FederatedDataset | None = None  # one per process, as in Flower's examples
_NORMALIZE = Compose([ToTensor(), Normalize((0.2860,), (0.3530,))])  # the authors' FMNIST statistics


def _federated_dataset(run_config, num_partitions: int) -> FederatedDataset:
    """The run's dataset (a Hugging Face id, or a local folder of parquet files) split among the
    clients by Dir(beta) label skew (Sec. 5.1: beta = 0.3, non-IID-1)."""
    global _FDS
    if _FDS is None:
        partitioner = DirichletPartitioner(num_partitions=num_partitions, partition_by=run_config["label-key"],
                                           alpha=float(run_config["dirichlet-alpha"]), seed=int(run_config["seed"]))
        _FDS = FederatedDataset(dataset=str(run_config["dataset"]), partitioners={"train": partitioner})
    return _FDS


def _loader(split, run_config, batch_size: int, shuffle: bool, seed: int = 0) -> DataLoader:
    image, label = run_config["image-key"], run_config["label-key"]

    def transform(batch):
        return {"x": [_NORMALIZE(img.convert("L")) for img in batch[image]], "y": batch[label]}

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
