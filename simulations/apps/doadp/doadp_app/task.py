"""doadp_app: the model and the data (Flower Datasets), shared by the ServerApp and the ClientApp."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from flwr_datasets import FederatedDataset
from flwr_datasets.partitioner import IidPartitioner
from torch.utils.data import DataLoader
from torchvision.transforms import Compose, Normalize, ToTensor


class Net(nn.Module):
    """A CNN with three convolutional layers for 1x28x28 images and 10 classes (Sec. VI-B names the
    layer count only). No batch normalization: DO-ADP clips per-sample gradients, and its agents
    exchange the parameters as one flat vector (the model must have no buffers)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.conv3 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc = nn.Linear(64 * 3 * 3, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.max_pool2d(F.relu(self.conv3(x)), 2)
        return self.fc(torch.flatten(x, 1))


_FDS: FederatedDataset | None = None  # one per process, as in Flower's examples
_NORMALIZE = Compose([ToTensor(), Normalize((0.1307,), (0.3081,))])


def _federated_dataset(run_config, num_partitions: int) -> FederatedDataset:
    """The run's dataset (a Hugging Face id, or a local folder of parquet files) split randomly and
    evenly among the agents (Sec. VI)."""
    global _FDS
    if _FDS is None:
        _FDS = FederatedDataset(dataset=str(run_config["dataset"]),
                                partitioners={"train": IidPartitioner(num_partitions=num_partitions)}, shuffle=True,
                                seed=int(run_config["seed"]))
    return _FDS


def _loader(split, run_config, batch_size: int) -> DataLoader:
    image, label = run_config["image-key"], run_config["label-key"]

    def transform(batch):
        return {"x": [_NORMALIZE(img.convert("L")) for img in batch[image]], "y": batch[label]}

    return DataLoader(split.with_transform(transform), batch_size=batch_size, shuffle=False)


def load_partition(partition_id: int, num_partitions: int, run_config) -> DataLoader:
    """This agent's training partition, in order (the agent draws its own minibatches)."""
    fds = _federated_dataset(run_config, num_partitions)
    return _loader(fds.load_partition(partition_id, "train"), run_config, 256)


def load_test(run_config) -> DataLoader:
    """The dataset's ``test`` split (the ServerApp's central evaluation)."""
    fds = FederatedDataset(dataset=str(run_config["dataset"]), partitioners={"train": 1})
    return _loader(fds.load_split("test"), run_config, 256)


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
