"""MethodSpec registrations: ``fedli-ls``, ``fedli-lu``, ``fedexp``, ``scaffold``."""

from __future__ import annotations

from typing import Any

from flwr_strategies.clients.base import TorchClient
from flwr_strategies.clients.fedli import ArmijoSGDClient, LossReportingSGDClient, ScaffoldClient

from ..baselines.centralized import flower_common_kwargs
from ..registry import MethodSpec, register_method
from ..setup import ClientSetup, ServerSetup
from .armijo import ArmijoConfig
from .dfw import DFW_PRESETS, DFWConfig
from .strategy_fedexp import FedExP
from .strategy_ls import FedLiLS
from .strategy_lu import FedLiLU
from .strategy_scaffold import Scaffold

PAPER = "Geetika, Uniyal, Chatterjee, 'Towards Hyper-parameter-free Federated Learning'"

_ARMIJO_DEFAULTS = {k: v for k, v in ArmijoConfig().__dict__.items()}
_DFW_KEYS = ("server_eta", "server_weight_decay", "server_momentum", "dfw_eps")


def _step_sync(value: str) -> Any:
    return value if value in ("unit", "max") else float(value)


def _fedli_ls(setup: ServerSetup, params: dict) -> FedLiLS:
    return FedLiLS(
        step_size_sync=_step_sync(str(params["step_size_sync"])),
        armijo=ArmijoConfig.from_mapping(params),
        weighting=str(params["weighting"]),
        on_nonfinite=str(params["on_nonfinite"]),
        **flower_common_kwargs(setup),
    )


def dfw_config_from_params(params: dict) -> DFWConfig:
    """The DFW constants: the named ``dfw_preset`` ("paper" / "authors_code"); any of the four keys
    set to a value other than the paper default overrides the preset."""
    base = DFW_PRESETS[str(params.get("dfw_preset", "paper"))] if str(params.get("dfw_preset", "paper")) in DFW_PRESETS else None
    if base is None:
        raise ValueError(f"unknown dfw_preset {params.get('dfw_preset')!r}; choose one of {sorted(DFW_PRESETS)}")
    paper = DFW_PRESETS["paper"]
    values = {k: float(params[k]) if k in params and float(params[k]) != getattr(paper, k) else getattr(base, k) for k in _DFW_KEYS}
    return DFWConfig(**values)


def _fedli_lu(setup: ServerSetup, params: dict) -> FedLiLU:
    return FedLiLU(
        dfw=dfw_config_from_params(params),
        loss_report=str(params["loss_report"]),
        weighting=str(params["weighting"]),
        on_nonfinite=str(params["on_nonfinite"]),
        **flower_common_kwargs(setup),
    )


def _fedexp(setup: ServerSetup, params: dict) -> FedExP:
    return FedExP(eps=float(params["eps"]), eval_last2_avg=bool(params["eval_last2_avg"]), **flower_common_kwargs(setup))


def _scaffold(setup: ServerSetup, params: dict) -> Scaffold:
    return Scaffold(
        num_clients=setup.num_clients,
        server_lr=float(params["server_lr"]),
        control_state=str(params["control_state"]),
        **flower_common_kwargs(setup),
    )


def _armijo_client(setup: ClientSetup, params: dict) -> ArmijoSGDClient:
    return ArmijoSGDClient(setup, params)


def _loss_client(setup: ClientSetup, params: dict) -> LossReportingSGDClient:
    return LossReportingSGDClient(setup, params)


def _plain_client(setup: ClientSetup, params: dict) -> TorchClient:
    return TorchClient(setup, params)


def _scaffold_client(setup: ClientSetup, params: dict) -> ScaffoldClient:
    return ScaffoldClient(setup, params)


register_method(
    MethodSpec(
        name="fedli-ls",
        summary="FedLi-LS: Armijo line-search SGD on clients, server step 1 (or max client step); no lr to tune",
        paper=PAPER,
        defaults={"step_size_sync": "unit", "weighting": "num_examples", "on_nonfinite": "raise", **_ARMIJO_DEFAULTS},
        build_strategy=_fedli_ls,
        build_client=_armijo_client,
    )
)
register_method(
    MethodSpec(
        name="fedli-lu",
        summary="FedLi-LU: SGD clients report loss; server makes a clipped Deep Frank-Wolfe step on the delta",
        paper=PAPER,
        defaults={
            "dfw_preset": "paper",
            **{k: getattr(DFW_PRESETS["paper"], k) for k in _DFW_KEYS},
            "loss_report": "epoch_mean",
            "grad_clip_norm": 0.0,
            "weighting": "num_examples",
            "on_nonfinite": "raise",
        },
        build_strategy=_fedli_lu,
        build_client=_loss_client,
    )
)
register_method(
    MethodSpec(
        name="fedexp",
        summary="FedExP: server extrapolation step max(1, sum||D_i||^2/(2S(||Dbar||^2+eps))) (eps=1e-3)",
        paper="Jhunjhunwala, Wang, Joshi, ICLR 2023",
        defaults={"eps": 1e-3, "eval_last2_avg": False},
        build_strategy=_fedexp,
        build_client=_plain_client,
    )
)
register_method(
    MethodSpec(
        name="scaffold",
        summary="SCAFFOLD (option II): control-variate corrected local SGD, c_i kept in context.state",
        paper="Karimireddy et al., ICML 2020",
        defaults={"server_lr": 1.0, "control_state": "client"},
        build_strategy=_scaffold,
        build_client=_scaffold_client,
    )
)
