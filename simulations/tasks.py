"""Workloads ("tasks") an experiment can run: what the model is, what each client holds, how the
global model is scored. ``classification`` (images, tabular) is built in; other tasks (FedMeZO's
causal language modelling) register themselves with :func:`register_task`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .datasets import DATASETS, load_dataset
from .partition import PARTITIONS, make_partition

if TYPE_CHECKING:
    import torch

    from flwr_strategies.clients.training import TensorData

#: The classification task's models (:func:`~flwr_strategies.simulations.models.build_model`).
MODELS = ("logreg", "mlp", "cnn_mnist", "cnn_svhn", "cnn_cifar", "lenet_cifar", "resnet18_gn")
#: The ``causal-lm`` task's datasets (:mod:`flwr_strategies.simulations.lm.task`).
LM_DATASETS = ("instructions", "dolly", "alpaca", "gsm8k", "codealpaca")
#: The names each task accepts (``datasets``, ``partitions``, ``models``; absent: free-form, such as a
#: checkpoint path for ``--model``), known without importing the task's module (torch), so the settings
#: check, ``list``, ``defaults`` and ``--help`` start without it.
TASK_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "classification": {"datasets": DATASETS, "partitions": PARTITIONS, "models": MODELS},
    "causal-lm": {"datasets": LM_DATASETS},
}


class Task(Protocol):
    """What the runner needs from a workload."""

    notes: list[str]

    def model_fn(self) -> torch.nn.Module: ...
    def client_data(self, partition_id: int) -> tuple[Any, Any]: ...
    def num_examples(self) -> dict[int, int]: ...
    def evaluate(self, model: torch.nn.Module) -> tuple[float, dict[str, float]]: ...


_TASKS: dict[str, Callable[[Any], Task]] = {}
_TASK_MODULES: tuple[str, ...] = ("flwr_strategies.simulations.lm.task",)


def register_task(name: str, build: Callable[[Any], Task]) -> None:
    """Register a task builder ``build(cfg) -> Task`` under ``name``."""
    _TASKS[name] = build


def task_choices(name: str) -> dict[str, tuple[str, ...]]:
    """The names task ``name`` accepts: ``datasets``, ``partitions`` and ``models`` (empty when
    the task takes free-form values) from :data:`TASK_NAMES`, without importing the task."""
    if name not in TASK_NAMES:
        raise KeyError(f"unknown task '{name}'; valid tasks: {', '.join(sorted(TASK_NAMES))}")
    return {key: TASK_NAMES[name].get(key, ()) for key in ("datasets", "partitions", "models")}


def build_task(name: str, cfg: Any) -> Task:
    """Build task ``name`` for experiment config ``cfg`` (the registering modules imported first)."""
    for module in _TASK_MODULES:
        importlib.import_module(module)
    if name not in _TASKS:
        raise KeyError(f"unknown task '{name}'; valid tasks: {', '.join(sorted(_TASKS))}")
    return _TASKS[name](cfg)


class ClassificationTask:
    """Image/tabular classification: a :class:`DatasetBundle` split over clients by a partitioner."""

    def __init__(self, cfg: Any) -> None:
        import torch

        from .models import default_model

        data_seed = cfg.seed if cfg.data_seed is None else cfg.data_seed
        self.bundle = load_dataset(cfg.dataset, cfg.data_dir, data_seed, num_clients=cfg.num_clients,
                                   synthetic_alpha=cfg.synthetic_alpha, synthetic_beta=cfg.synthetic_beta,
                                   synthetic_mean_samples=getattr(cfg, "synthetic_mean_samples", 4.0),
                                   partition=cfg.partition, alpha=cfg.alpha, classes_per_client=cfg.classes_per_client,
                                   download=getattr(cfg, "download", False))
        kind = cfg.partition or ("natural" if self.bundle.groups is not None else "iid")
        self.parts = self.bundle.partitions  # set when the loader partitioned (Flower Datasets' partitioners)
        if self.parts is None:
            self.parts = make_partition(kind, self.bundle.train.y.cpu().numpy(), cfg.num_clients, data_seed,
                                        alpha=cfg.alpha, classes_per_client=cfg.classes_per_client,
                                        groups=self.bundle.groups)
        self.model_name = cfg.model or default_model(self.bundle.name, self.bundle.input_shape)
        self.device = torch.device(cfg.device)
        self.test = self.bundle.test.to(self.device)
        self.train = self.bundle.train.to(self.device)
        self.notes = list(self.bundle.notes) + [f"partition: {kind} over {cfg.num_clients} clients"]

    def model_fn(self) -> torch.nn.Module:
        from .models import build_model

        return build_model(self.model_name, self.bundle.num_classes, self.bundle.input_shape).to(self.device)

    def client_data(self, partition_id: int) -> tuple[TensorData, None]:
        return self.train.subset(self.parts[partition_id]), None

    def num_examples(self) -> dict[int, int]:
        return {i: int(len(p)) for i, p in enumerate(self.parts)}

    def label_histograms(self) -> np.ndarray:
        """Per-client class counts (clients x classes)."""
        labels = self.bundle.train.y.cpu().numpy()
        return np.stack([np.bincount(labels[p], minlength=self.bundle.num_classes) for p in self.parts])

    def evaluate(self, model: torch.nn.Module) -> tuple[float, dict[str, float]]:
        from flwr_strategies.clients.training import evaluate_model

        loss, acc = evaluate_model(model, self.test)
        return float(loss), {"accuracy": float(acc)}


register_task("classification", ClassificationTask)
