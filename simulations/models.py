"""The models the papers use, at their sizes.

- ``logreg``: multinomial logistic regression (DO-ADP Experiment A, FedProx Synthetic).
- ``mlp``: two hidden layers of 200 units (McMahan et al.'s 2NN); the default for ``digits``.
- ``cnn_mnist``: FedMUD's CNN-4 for 28x28 grey images: four conv3x3(bias=False)-BN-ReLU-MaxPool
  blocks 1-32-64-128-256 and FC 256->C (bias=False): 390,880 parameters for C=10.
- ``cnn_svhn``: the same for 3x32x32 inputs, FC 1024->C: 399,136 parameters.
- ``cnn_cifar``: FedMUD's CNN-10: ten conv3x3-BN-ReLU layers [32,32|64,64|128,128|256,256|512,512],
  a pool after each pair, FC 512->C: 4,719,328 parameters for C=10.
- ``lenet_cifar``: DFedCata's CIFAR-10 CNN: conv5x5 3->64, pool, conv5x5 64->64, pool,
  FC 1600->384->192->C.
- ``resnet18_gn``: torchvision's ResNet-18 with every BatchNorm replaced by GroupNorm(2 groups),
  as in DFedCata/FedLi (random init: no pretrained weights are downloaded).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from flwr_strategies.setup import SettingError

from .tasks import MODELS

DEFAULT_MODEL = {"digits": "mlp", "mnist": "cnn_mnist", "cifar10": "cnn_cifar", "cifar100": "cnn_cifar", "synthetic": "logreg"}


def default_model(dataset: str, input_shape: tuple[int, ...]) -> str:
    """The dataset's default model (:data:`DEFAULT_MODEL`); for a Flower Datasets (``hf:``) dataset,
    the default of the built-in dataset with its input shape (1x28x28: ``cnn_mnist``, 3x32x32:
    ``cnn_cifar``), else the ``mlp``."""
    if dataset in DEFAULT_MODEL:
        return DEFAULT_MODEL[dataset]
    return {(1, 28, 28): "cnn_mnist", (3, 32, 32): "cnn_cifar"}.get(tuple(input_shape), "mlp")


class FedMUDCNN(nn.Module):
    """FedMUD's plain CNN: conv3x3-BN-ReLU blocks (pool after each group) and a bias-free FC."""

    def __init__(self, in_ch: int, groups: list[list[int]], fc_in: int, num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = in_ch
        for group in groups:
            for cout in group:
                layers += [nn.Conv2d(cin, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]
                cin = cout
            layers.append(nn.MaxPool2d(2, 2))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(fc_in, num_classes, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


class LeNetCIFAR(nn.Module):
    """DFedCata's LeNet-style CIFAR CNN."""

    def __init__(self, in_ch: int = 3, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(in_ch, 64, 5), nn.ReLU(inplace=True), nn.MaxPool2d(2, 2),
                                      nn.Conv2d(64, 64, 5), nn.ReLU(inplace=True), nn.MaxPool2d(2, 2))
        self.classifier = nn.Sequential(nn.Linear(64 * 5 * 5, 384), nn.ReLU(inplace=True), nn.Linear(384, 192),
                                        nn.ReLU(inplace=True), nn.Linear(192, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


def build_model(name: str, num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """Build model ``name`` for ``num_classes`` outputs and inputs of ``input_shape`` (C, H, W) or (D,)."""
    key = name.lower()
    flat = int(math.prod(input_shape))
    if key == "logreg":
        return nn.Sequential(nn.Flatten(), nn.Linear(flat, num_classes))
    if key == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(flat, 200), nn.ReLU(inplace=True), nn.Linear(200, 200),
                             nn.ReLU(inplace=True), nn.Linear(200, num_classes))
    if key in ("cnn_mnist", "cnn_svhn", "cnn_cifar"):
        if len(input_shape) != 3:
            raise SettingError("model", name, f"a model for this data: it needs image inputs (C, H, W), the data are {input_shape}")
        c, h, w = input_shape
        groups = [[32], [64], [128], [256]] if key != "cnn_cifar" else [[32, 32], [64, 64], [128, 128], [256, 256], [512, 512]]
        side_h, side_w = h // 2 ** len(groups), w // 2 ** len(groups)  # each group ends in a 2x2 pool
        if side_h < 1 or side_w < 1:
            raise SettingError("model", name, f"a model for this data: it pools {len(groups)} times and needs larger inputs than {input_shape}")
        return FedMUDCNN(c, groups, groups[-1][-1] * side_h * side_w, num_classes)
    if key == "lenet_cifar":
        if tuple(input_shape[1:]) != (32, 32):
            raise SettingError("model", name, f"a model for this data: it needs 32x32 inputs, the data are {input_shape}")
        return LeNetCIFAR(input_shape[0], num_classes)
    if key == "resnet18_gn":
        from torchvision.models import resnet18

        model = resnet18(num_classes=num_classes, norm_layer=lambda ch: nn.GroupNorm(2, ch))
        if input_shape[0] != 3:
            model.conv1 = nn.Conv2d(input_shape[0], 64, 7, 2, 3, bias=False)
        return model
    raise KeyError(f"unknown model '{name}'; valid models: {', '.join(MODELS)}")


def num_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
