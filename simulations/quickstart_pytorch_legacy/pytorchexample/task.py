"""pytorchexample: A Flower / PyTorch app (the user's model, data and training loop)."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from datasets import Dataset
from flwr_datasets.partitioner import IidPartitioner
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader


class Net(nn.Module):
    """A small CNN for 8x8 digits."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2, 2)
        self.fc1 = nn.Linear(8 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = x.flatten(1)
        return self.fc2(F.relu(self.fc1(x)))


partitioner = None  # Cache the partitioner
TEST_SIZE = 297


def _digits() -> tuple[Dataset, Dataset]:
    d = load_digits()
    images = (d.images / 16.0).astype(np.float32)[:, None]
    order = np.random.default_rng(0).permutation(len(images))
    data = Dataset.from_dict({"img": images[order].tolist(), "label": d.target[order].tolist()}).with_format("torch")
    return data.select(range(TEST_SIZE, len(images))), data.select(range(TEST_SIZE))


def load_data(partition_id: int, num_partitions: int, batch_size: int):
    """Load one IID partition of digits: 80% train, 20% test."""
    global partitioner
    if partitioner is None:
        partitioner = IidPartitioner(num_partitions=num_partitions)
        partitioner.dataset = _digits()[0]
    partition = partitioner.load_partition(partition_id)
    split = partition.train_test_split(test_size=0.2, seed=42)
    generator = torch.Generator().manual_seed(partition_id)
    trainloader = DataLoader(split["train"], batch_size=batch_size, shuffle=True, generator=generator)
    testloader = DataLoader(split["test"], batch_size=batch_size)
    return trainloader, testloader


def load_centralized_dataset():
    """Load the held-out test set."""
    return DataLoader(_digits()[1], batch_size=128)


def train(net, trainloader, epochs, lr, device):
    """Train the model on the training set."""
    net.to(device)
    criterion = torch.nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    net.train()
    running_loss = 0.0
    for _ in range(epochs):
        for batch in trainloader:
            images = batch["img"].to(device)
            labels = batch["label"].to(device)
            optimizer.zero_grad()
            loss = criterion(net(images), labels)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
    return running_loss / (epochs * len(trainloader))


def test(net, testloader, device):
    """Validate the model on the test set."""
    net.to(device)
    criterion = torch.nn.CrossEntropyLoss()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for batch in testloader:
            images = batch["img"].to(device)
            labels = batch["label"].to(device)
            outputs = net(images)
            loss += criterion(outputs, labels).item()
            correct += (torch.max(outputs.data, 1)[1] == labels).sum().item()
    return loss / len(testloader), correct / len(testloader.dataset)


def get_weights(net):
    """The model's weights as NumPy arrays."""
    return [val.cpu().numpy() for _, val in net.state_dict().items()]


def set_weights(net, parameters):
    """Load NumPy arrays into the model."""
    state_dict = {k: torch.tensor(v) for k, v in zip(net.state_dict().keys(), parameters)}
    net.load_state_dict(state_dict, strict=True)
