"""Clients of FedLi-LS (Armijo-SGD), FedLi-LU (SGD that reports its loss) and SCAFFOLD.

Paper: Geetika, Uniyal, Chatterjee, "Towards Hyper-parameter-free Federated Learning" (spec 001);
SCAFFOLD: Karimireddy et al., ICML 2020. The math lives in :mod:`flwr_strategies.fedli`.
"""

from __future__ import annotations

import numpy as np
import torch
from flwr.common import ArrayRecord, Scalar

from flwr_strategies.fedli import ArmijoConfig, armijo_local_train, scaffold_client_control_update, scaffold_local_sgd

from .base import TorchClient, train_settings
from .training import batch_stream, evaluate_model, get_weights, local_sgd, set_weights, take_batch

__all__ = ["ArmijoSGDClient", "LossReportingSGDClient", "ScaffoldClient"]


def _batches(client: TorchClient, settings: dict, generator: torch.Generator):
    data = client.setup.train_data
    for idx in batch_stream(len(data), settings["batch_size"], generator, epochs=settings["epochs"], steps=settings["steps"]):
        yield take_batch(data, idx, generator)


class ArmijoSGDClient(TorchClient):
    """FedLi-LS client: local SGD whose step size comes from a stochastic Armijo line search.

    The Armijo constants (``eta_max``, ``armijo_c``, ``backtrack_factor``, ``growth_factor``,
    ``reset_option``, ``max_backtracks``, ``fallback_step``, ``grad_tol``, ``cap_at_eta_max``) are read
    from the fit config (sent by :class:`~flwr_strategies.fedli.FedLiLS`), falling back to ``params``.
    The learning rate ``lr`` of the config is ignored; weight decay and gradient clipping are never
    applied (they would break the sufficient-decrease test). Metrics: ``step_size`` (last accepted
    step), ``train_loss`` (mean minibatch loss before each step), ``n_backtracks``, ``n_fallback``, ``steps``.
    """

    def local_train(self, config: dict[str, Scalar], generator: torch.Generator) -> dict[str, Scalar]:
        cfg = ArmijoConfig.from_mapping({**self.params, **config})
        settings = train_settings(config, self.setup.train)
        n = self.num_train()
        return armijo_local_train(
            self.model, _batches(self, settings, generator), cfg, generator, batch_fraction=settings["batch_size"] / n
        )


class LossReportingSGDClient(TorchClient):
    """FedLi-LU client: plain local SGD that reports a training loss for the server's DFW step.

    ``loss_report`` (fit config, else ``params``, default ``"epoch_mean"``): the mean minibatch loss
    of the local epoch, ``"initial"`` (loss of the received model on the local training set) or
    ``"final"`` (loss of the trained local model on the local training set). ``grad_clip_norm``
    (``params``; 0 = off) clips local gradients. Metrics: ``train_loss`` (the chosen value),
    ``epoch_mean_loss``, ``steps``.
    """

    def local_train(self, config: dict[str, Scalar], generator: torch.Generator) -> dict[str, Scalar]:
        mode = str(config.get("loss_report", self.params.get("loss_report", "epoch_mean")))
        if mode not in ("epoch_mean", "initial", "final"):
            raise ValueError(f"loss_report must be epoch_mean, initial or final, got {mode!r}")
        settings = train_settings(config, self.setup.train)
        clip = float(self.params.get("grad_clip_norm", 0.0) or 0.0)
        if clip > 0:
            settings["grad_clip"] = clip
        initial = evaluate_model(self.model, self.setup.train_data)[0] if mode == "initial" else None
        stats = local_sgd(self.model, self.setup.train_data, generator=generator, **settings)
        value = {"epoch_mean": stats["train_loss"], "initial": initial}.get(mode)
        if mode == "final":
            value = evaluate_model(self.model, self.setup.train_data)[0]
        return {"train_loss": float(value), "epoch_mean_loss": float(stats["train_loss"]), "steps": int(stats["steps"])}


STATE_KEY = "scaffold_c_i"


class ScaffoldClient(TorchClient):
    """SCAFFOLD (option II) client; its control variate ``c_i`` persists in ``context.state``.

    Receives ``w_t ++ c`` (or ``w_t ++ c ++ c_i`` when the server keeps the controls; the client
    state is then not used) and replies ``w_i ++ dc_i``. Control variates are laid out like the model
    weights (``state_dict`` order); only entries that are trainable parameters are corrected, buffer
    controls stay 0. Raises ``RuntimeError`` if the runtime gives no ``context.state``.
    """

    def fit(self, parameters: list[np.ndarray], config: dict[str, Scalar]):
        keys = list(self.model.state_dict().keys())
        n_layers = len(keys)
        if len(parameters) not in (2 * n_layers, 3 * n_layers):
            raise ValueError(
                f"SCAFFOLD client expects {2 * n_layers} (weights ++ control) or {3 * n_layers} arrays "
                f"(++ own control), got {len(parameters)}"
            )
        w_t = [np.asarray(a) for a in parameters[:n_layers]]
        c_glob = [np.asarray(a) for a in parameters[n_layers : 2 * n_layers]]
        server_held = len(parameters) == 3 * n_layers
        state = self.setup.state
        if server_held:
            c_i = [np.asarray(a) for a in parameters[2 * n_layers :]]
        else:
            if state is None:
                raise RuntimeError("SCAFFOLD client needs context.state to keep its control variate across rounds")
            c_i = state[STATE_KEY].to_numpy_ndarrays() if STATE_KEY in state else [np.zeros_like(a) for a in w_t]
        set_weights(self.model, w_t)
        generator = self.generator(config)
        settings = train_settings(config, self.setup.train)
        param_names = [name for name, _ in self.model.named_parameters()]
        pos = {k: j for j, k in enumerate(keys)}
        dev = next(self.model.parameters()).device
        cg = [torch.as_tensor(c_glob[pos[nm]], device=dev) for nm in param_names]
        cl = [torch.as_tensor(c_i[pos[nm]], device=dev) for nm in param_names]
        stats = scaffold_local_sgd(
            self.model, _batches(self, settings, generator), settings["lr"], cg, cl,
            weight_decay=settings["weight_decay"], grad_clip=settings["grad_clip"],
        )
        w_i = get_weights(self.model)
        c_new, dc = scaffold_client_control_update(c_i, c_glob, w_t, w_i, int(stats["steps"]), settings["lr"])
        is_param = set(param_names)
        for j, k in enumerate(keys):
            if k not in is_param:
                c_new[j] = np.zeros_like(c_new[j])
                dc[j] = np.zeros_like(dc[j])
        if not server_held:
            state[STATE_KEY] = ArrayRecord(c_new)
        return w_i + dc, self.num_train(), {**self.base_metrics(), **stats}
