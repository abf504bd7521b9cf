"""FedLi-LS's stochastic Armijo line search as a ``torch.optim.Optimizer`` (the client piece).

Paper: Geetika, Uniyal, Chatterjee, "Towards Hyper-parameter-free Federated Learning" (Alg. 3 + 4),
which runs the stochastic line search of Vaswani et al. 2019 ("Painless Stochastic Gradient", the
``sls`` package) on every client. Drop it into your own training loop::

    opt = ArmijoSGD(model.parameters(), batch_fraction=batch_size / len(train_set))
    for x, y in loader:                                   # any batch format: the closure computes the loss
        opt.step(lambda: criterion(model(x), y))          # returns the loss (backward() inside works too)
    metrics = opt.summary()                               # {"step_size": ..., "train_loss": ...}

As in ``sls.Sls``, the closure only computes the loss: the optimizer calls ``backward()`` once and
then re-evaluates the closure (without gradients) at each trial point. A closure in torch's
convention (``opt.zero_grad(); loss = criterion(model(x), y); loss.backward(); return loss``, as for
``torch.optim.LBFGS``) works too: its gradient is the step's, and the trial points are evaluated
with gradients enabled (one backward per trial, so the loss-only closure is cheaper). Every evaluation of one step
runs under the same RNG seed, so dropout draws the same mask on every trial (as ``sls`` reseeds each step); the seed
comes from ``generator`` (seeded runs are bit-reproducible) instead of ``sls``'s wall clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..core.validation import check_range
from .armijo import ArmijoConfig, ArmijoStepResult, armijo_step

__all__ = ["ArmijoSGD"]


class ArmijoSGD(torch.optim.Optimizer):
    """SGD whose step size comes from a stochastic Armijo backtracking line search.

    One :meth:`step` on a minibatch ``B``: ``loss0 = f_B(w)``, ``g = grad f_B(w)``; the first trial step
    size is ``reset(eta, k)`` (paper Alg. 4); while ``f_B(w - eta g) > loss0 - c eta ||g||^2`` the step
    size is multiplied by ``backtrack_factor``; the accepted ``w - eta g`` is kept. Norms run over all
    parameters of all groups together.

    Parameters
    ----------
    params : iterable of torch.Tensor (or parameter groups)
        The parameters to train (typically ``model.parameters()``); frozen ones are skipped.
    config : ArmijoConfig | None (default: None, i.e. ``ArmijoConfig()``, the paper's constants)
        Line-search constants (``eta_max`` 1.0, ``armijo_c`` 0.1, ``backtrack_factor`` 0.9,
        ``growth_factor`` 2.0, ``reset_option`` 2, ``growth_rule`` "paper", ``cap_at_eta_max`` True...).
        ``ArmijoConfig.code()`` gives the official code's ``sls`` settings.
    batch_fraction : float (default: 1.0)
        ``b / n_i``: minibatch size over the local training-set size (1 / batches per epoch), the
        growth exponent of reset option 2 with ``growth_rule="paper"``. Must be finite and > 0.
    generator : torch.Generator | None (default: None)
        Draws the per-step seed of the closure's RNG. None draws it from torch's global generator
        (seed it with ``torch.manual_seed`` for reproducible runs).
    **overrides
        Any :class:`ArmijoConfig` field, replacing ``config``'s value (e.g. ``armijo_c=0.2``).

    Notes
    -----
    The step size restarts at ``eta_max`` at the first step of a local run (a new optimizer, or after
    :meth:`reset`): FedLi keeps no client state across rounds. No weight decay, momentum or gradient
    clipping: they would break the sufficient-decrease test.
    """

    #: How :func:`~flwr_strategies.core.local.train_steps` steps this optimizer: ``step(closure)`` with a
    #: closure that returns the minibatch loss (no ``backward()``).
    closure = "loss"

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        config: ArmijoConfig | None = None,
        *,
        batch_fraction: float = 1.0,
        generator: torch.Generator | None = None,
        **overrides: Any,
    ) -> None:
        config = config if config is not None else ArmijoConfig()
        if not isinstance(config, ArmijoConfig):
            raise TypeError(f"config must be an ArmijoConfig, got {type(config).__name__}")
        if overrides:
            unknown = set(overrides) - {f.name for f in dataclasses.fields(ArmijoConfig)}
            if unknown:
                raise TypeError(f"ArmijoSGD got unknown settings {sorted(unknown)}")
            config = dataclasses.replace(config, **overrides)
        self.batch_fraction = check_range("batch_fraction", batch_fraction, 0.0, low_open=True)  # b / n_i
        super().__init__(params, {})
        self.config = config
        self.generator = generator
        self.last_result: ArmijoStepResult | None = None
        self.reset()

    def reset(self) -> None:
        """Start a new local run: the next step is step 1 (step size back to ``eta_max``)."""
        self.step_size = float(self.config.eta_max)
        self.steps = 0
        self.losses: list[float] = []
        self.n_backtracks = 0
        self.n_fallback = 0

    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"] if p.requires_grad]

    def step(self, closure: Callable[[], torch.Tensor]) -> float:  # type: ignore[override]
        """One line-search step; ``closure()`` returns the minibatch loss, either without calling
        ``backward()`` (``sls``'s convention, the cheaper) or after calling it (torch's, as for
        ``torch.optim.LBFGS``: told apart by whether the first evaluation left gradients).

        Returns the loss before the step. Raises ``FloatingPointError`` (parameters unchanged) when
        the loss or the gradient is not finite.
        """
        if closure is None or not callable(closure):
            raise ValueError("ArmijoSGD.step needs a closure returning the minibatch loss: opt.step(lambda: loss_fn(model(x), y))")
        params = self._params()
        if not params:
            raise ValueError("ArmijoSGD has no trainable parameters")
        seed = int(torch.randint(0, 2**62, (1,), generator=self.generator).item())
        devices = sorted({p.device.index or 0 for p in params if p.device.type == "cuda"})

        calls_backward: list[bool] = []  # set at the first evaluation (armijo_step's, with grads cleared)

        def deterministic() -> torch.Tensor:
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(seed)
                if not calls_backward:  # the gradient evaluation
                    loss = closure()
                    calls_backward.append(any(p.grad is not None for p in params))
                    # torch's convention: the gradient is in p.grad already, and the closure freed the
                    # graph; armijo_step's backward() then runs on a detached leaf and leaves p.grad alone
                    return loss.detach().requires_grad_() if calls_backward[0] else loss
                if not calls_backward[0]:
                    return closure()
                with torch.enable_grad():  # a trial point: the closure's backward() needs a graph
                    loss = closure()
                for p in params:
                    p.grad = None
                return loss.detach()

        k = self.steps + 1
        res = armijo_step(params, deterministic, self.step_size, k, self.config, self.batch_fraction)
        self.steps = k
        self.step_size = res.step_size
        self.losses.append(res.loss)
        self.n_backtracks += res.backtracks
        self.n_fallback += int(res.fallback)
        self.last_result = res
        return res.loss

    def summary(self) -> dict[str, float | int]:
        """This local run's report: ``step_size`` (of the last step; FedLi-LS's extra scalar),
        ``train_loss`` (mean minibatch loss before each step), ``n_backtracks``, ``n_fallback``, ``steps``."""
        return {
            "step_size": float(self.step_size),
            "train_loss": float(sum(self.losses) / len(self.losses)) if self.losses else 0.0,
            "n_backtracks": int(self.n_backtracks),
            "n_fallback": int(self.n_fallback),
            "steps": int(self.steps),
        }

    def state_dict(self) -> dict[str, Any]:
        out = super().state_dict()
        out["line_search"] = {"step_size": self.step_size, "steps": self.steps, "losses": list(self.losses),
                              "n_backtracks": self.n_backtracks, "n_fallback": self.n_fallback}
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        ls = state_dict.pop("line_search", None)
        super().load_state_dict(state_dict)
        if ls is not None:
            self.step_size = float(ls["step_size"])
            self.steps = int(ls["steps"])
            self.losses = [float(v) for v in ls["losses"]]
            self.n_backtracks = int(ls["n_backtracks"])
            self.n_fallback = int(ls["n_fallback"])
