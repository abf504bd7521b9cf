"""pytorchexample: A Flower / PyTorch app."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from datasets import load_dataset
from flwr_datasets import FederatedDataset
from flwr_datasets.partitioner import IidPartitioner
from torch.utils.data import DataLoader
from torchvision.transforms import Compose, Normalize, ToTensor


class Net(nn.Module):
    """Model (simple CNN adapted from 'PyTorch: A 60 Minute Blitz')"""

    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(-1, 16 * 5 * 5)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


fds = None  # Cache FederatedDataset

pytorch_transforms = Compose([ToTensor(), Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])


def apply_transforms(batch):
    """Apply transforms to the partition from FederatedDataset."""
    batch["img"] = [pytorch_transforms(img) for img in batch["img"]]
    return batch


digits = None  # Cache the local data (scikit-learn's digits)


def load_data(partition_id: int, num_partitions: int, batch_size: int):
    """Load an IID partition of scikit-learn's bundled digits (local, no download) as 3x32x32 images."""
    import numpy as np
    from sklearn.datasets import load_digits

    class Digits(torch.utils.data.Dataset):
        def __init__(self, x, y):
            self.x, self.y = x, y

        def __len__(self):
            return len(self.y)

        def __getitem__(self, i):
            return {"img": self.x[i], "label": self.y[i]}

    global digits
    if digits is None:  # load once per process, as the example caches its FederatedDataset
        data = load_digits()
        images = np.kron(data.images / 16.0, np.ones((4, 4))).astype(np.float32)  # 8x8 -> 32x32
        digits = torch.from_numpy((images[:, None].repeat(3, axis=1) - 0.5) / 0.5), torch.from_numpy(data.target).long()
    x, y = digits
    order = np.random.default_rng(0).permutation(len(y))
    test, pool = order[:297], order[297:]
    if partition_id < 0:
        return DataLoader(Digits(x[test], y[test]), batch_size=batch_size)
    part = np.array_split(pool, num_partitions)[partition_id]
    split = int(0.8 * len(part))
    train, val = part[:split], part[split:]
    trainloader = DataLoader(Digits(x[train], y[train]), batch_size=batch_size, shuffle=True,
                             generator=torch.Generator().manual_seed(partition_id))
    return trainloader, DataLoader(Digits(x[val], y[val]), batch_size=batch_size)


def load_centralized_dataset():
    """Load the held-out digits (297 images) and return dataloader."""
    return load_data(-1, 1, 128)


def train(net, trainloader, epochs, lr, device):
    """Train the model on the training set."""
    net.to(device)  # move model to GPU if available
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
    avg_trainloss = running_loss / (epochs * len(trainloader))
    return avg_trainloss


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
    accuracy = correct / len(testloader.dataset)
    loss = loss / len(testloader)
    return loss, accuracy
