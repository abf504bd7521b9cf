"""The paper's CNNs (spec 004, Section 6.2) for the FedMUD tests, defined locally so the tests do
not depend on the foundation's model zoo (which is compared against them separately)."""

from torch import nn


def cnn4(in_channels: int, fc_in: int, num_classes: int = 10) -> nn.Sequential:
    layers, c = [], in_channels
    for co in (32, 64, 128, 256):
        layers += [nn.Conv2d(c, co, 3, 1, 1, bias=False), nn.BatchNorm2d(co), nn.ReLU(), nn.MaxPool2d(2)]
        c = co
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(fc_in, num_classes, bias=False))


def cnn10(num_classes: int) -> nn.Sequential:
    layers, c = [], 3
    for co in (32, 64, 128, 256, 512):
        for _ in range(2):
            layers += [nn.Conv2d(c, co, 3, 1, 1, bias=False), nn.BatchNorm2d(co), nn.ReLU()]
            c = co
        layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(512, num_classes, bias=False))


PAPER_MODELS = {
    "fmnist": lambda: cnn4(1, 256),
    "svhn": lambda: cnn4(3, 1024),
    "cifar10": lambda: cnn10(10),
    "cifar100": lambda: cnn10(100),
}


def tiny_net(bias: bool = True) -> nn.Sequential:
    """First conv, two compressible layers (a conv and a linear) and a last linear."""
    return nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1, bias=bias), nn.BatchNorm2d(4), nn.ReLU(),
        nn.Conv2d(4, 6, 3, padding=1, bias=bias), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
        nn.Linear(24, 12, bias=bias), nn.ReLU(), nn.Linear(12, 3, bias=bias),
    )
