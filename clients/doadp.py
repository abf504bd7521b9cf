"""DO-ADP client side: torch-native pieces for your own training code, and the ready-made client.

Huo, Liu, Ding, Johansson, Shi, "Decentralized Optimization with Amplified Privacy via Efficient
Communication" (arXiv 2506.07102), Algorithm 1, one agent.

Pieces (each usable alone, in the style of ``torch.optim``):

- :func:`private_generator`: the agent's randomness for one round, from OS entropy, or from a
  client-side seed that never passes through the server;
- :class:`UniformBatchSampler`: a ``torch.utils.data`` batch sampler drawing b distinct records per
  step from the private generator (the draw the accountant certifies; a shuffled ``DataLoader``
  is not);
- :func:`per_sample_gradients`: ``(b, d)`` per-sample gradients of your ``nn.Module`` (``torch.func``);
- :class:`Privatizer`: per-sample clipping, mean, Gaussian noise, momentum;
- :class:`TopKPublicCopy`: the public copy ``xhat`` and the Top-k message of ``x - xhat`` with error
  feedback (the message is pending until the server confirms it);
- :class:`DOADPAgent`: one agent's whole round (coin, batch, privatize, step, message) and its state
  in ``context.state``; a ClientApp's train handler is five lines on it (see docs/client-pieces.md).

The ready-made :class:`DOADPClient` (a ``NumPyClient``) is :class:`DOADPAgent` on the client's
model and data (in-memory ``TensorData`` or any iterable of ``(x, y)`` batches such as a
``DataLoader``; iterables without random access are materialised once).

Privacy against a curious or malicious server (Huo et al., Sec. II: the server, like any observer of
the network, must learn nothing of an agent's noise; docs/trust.md, "Privacy (DO-ADP)", tells it whole):
the noise the server asks for is checked against the client's own :class:`ClientBudget` (never the
server's: :func:`client_budget_of`, :func:`check_gaussian_noise`, :func:`check_rounds_left`; a private
client without one refuses to train); the coin, the batch and the noise come from
:func:`private_generator`, on OS entropy or a client-side seed the server never sees
(:func:`client_seed_of`, :func:`set_client_seed`), and a round whose config carries a seed is refused;
a round without noise or clipping is refused (only the ``dmsgd`` client trains without privacy); one
:class:`StepSizeWarning` flags a step whose noise norm ``alpha * sigma * sqrt(d)`` exceeds
:data:`NOISE_NORM_BOUND`; private-model evaluation (``evaluate_private``, outside the guarantee) sends
x_i only with the node's own consent (:func:`private_eval_allowed`, :func:`allow_private_eval`).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord
from flwr.common import Scalar

from flwr_strategies.clients.base import TorchClient
from flwr_strategies.doadp.algorithm import (
    AgentState,
    DOADPParams,
    agent_round,
    index_dtype_for,
    noisy_gradient,
    reconcile,
)
from flwr_strategies.doadp.rng import agent_generator, check_client_seed, draw_batch
from flwr_strategies.doadp.sparsify import top_k
from flwr_strategies.doadp.torch_oracle import flat_parameters, load_flat_parameters, per_sample_gradients
from flwr_strategies.privacy.accountant import GaussianSteps, calibrate_sigma
from flwr_strategies.privacy.validation import check_clip, check_delta, check_epsilon, check_positive_int

__all__ = [
    "SEED_KEY",
    "BUDGET_KEYS",
    "PRIVATE_EVAL_KEY",
    "STATE_KEY",
    "NODE_SEED_HEX_DIGITS",
    "NOISE_NORM_BOUND",
    "ClientBudget",
    "StepSizeWarning",
    "private_generator",
    "set_client_seed",
    "client_seed_of",
    "set_client_budget",
    "client_budget_of",
    "check_gaussian_noise",
    "check_rounds_left",
    "allow_private_eval",
    "private_eval_allowed",
    "check_round_config",
    "UniformBatchSampler",
    "per_sample_gradients",
    "flat_parameters",
    "load_flat_parameters",
    "Privatizer",
    "TopKPublicCopy",
    "IndexedData",
    "DOADPAgent",
    "DOADPClient",
    "build_dmsgd_client",
]

STATE_KEY = "doadp"
SECRET_KEY = "doadp-secret"
#: Node config key (and ``context.state`` secret) of the client-side seed.
SEED_KEY = "doadp-client-seed"
#: Node config key of the node's consent to send its private model when the server asks.
PRIVATE_EVAL_KEY = "doadp-allow-private-eval"
CONSENT_KEY = "doadp-consent"
#: Config keys that would carry a seed from the server; a round that has one is refused.
SERVER_SEED_KEYS = (SEED_KEY, "client-seed", "client_seed")
#: A node-config seed has at least this many hex digits (128 bits), and a value of at least 2**64.
NODE_SEED_HEX_DIGITS = 32
#: Node config keys of the node's own privacy budget (:class:`ClientBudget` field -> key).
BUDGET_KEYS = {"epsilon": "doadp-epsilon", "delta": "doadp-delta", "rounds": "doadp-rounds", "clip": "doadp-clip"}
BUDGET_STATE_KEY = "doadp-budget"
#: ``context.state`` record of what the client itself counted: rounds taken part in, step-size warning given
LEDGER_KEY = "doadp-client"
#: Noise norm per step (``alpha * sigma * sqrt(d)``) above which the README's runs diverged.
NOISE_NORM_BOUND = 2.0


class StepSizeWarning(UserWarning):
    """The step size makes one step's noise norm ``alpha * sigma * sqrt(d)`` exceed :data:`NOISE_NORM_BOUND`."""


# ---------------------------------------------------------------------------- the client's budget
@dataclass(frozen=True)
class ClientBudget:
    """A client's own privacy budget: what it agreed to spend, whatever the server proposes.

    Parameters
    ----------
    epsilon : float
        Largest certified epsilon the client accepts over the whole run, > 0 and finite (the
        project's default run: 1.0).
    rounds : int
        Rounds the client agreed to take part in (every one a possible private step), >= 1.
    delta : float (default: 1e-5)
        delta of the guarantee, in (0, 1).
    clip : float (default: 1.0)
        Largest per-sample clip bound G the client accepts (the L2 bound of one clipped gradient),
        > 0 and finite.
    """

    epsilon: float
    rounds: int
    delta: float = 1e-5
    clip: float = 1.0

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon, upper=None)
        check_positive_int(self.rounds, "rounds")
        check_delta(self.delta, name="delta")
        check_clip(self.clip, name="clip")


def set_client_budget(state, budget: ClientBudget | None) -> None:
    """Store the node's own budget in its ``context.state`` (call it on the client side; the server
    never sees ``context.state``). None records that the node has no budget (its private clients
    then refuse to train; nothing else fills one in)."""
    if budget is None:
        state[BUDGET_STATE_KEY] = ConfigRecord({})
        return
    if not isinstance(budget, ClientBudget):
        raise TypeError(f"budget must be a ClientBudget or None, got {budget!r}")
    state[BUDGET_STATE_KEY] = ConfigRecord({"epsilon": float(budget.epsilon), "rounds": int(budget.rounds),
                                            "delta": float(budget.delta), "clip": float(budget.clip)})


def client_budget_of(state=None, node_config=None) -> ClientBudget | None:
    """The node's own budget: from ``node_config`` (``doadp-epsilon`` and ``doadp-rounds``, with
    ``doadp-delta`` and ``doadp-clip`` optional) if it has any of those keys, else the budget stored in
    ``state`` (:func:`set_client_budget`); None if neither."""
    if node_config is not None and any(k in node_config for k in BUDGET_KEYS.values()):
        missing = [BUDGET_KEYS[f] for f in ("epsilon", "rounds") if BUDGET_KEYS[f] not in node_config]
        if missing:
            raise ValueError(f"node config sets part of the DO-ADP budget but not {missing}: give "
                             f"{BUDGET_KEYS['epsilon']} and {BUDGET_KEYS['rounds']} (delta and clip are optional)")
        values = {field: node_config[key] for field, key in BUDGET_KEYS.items() if key in node_config}
        for field, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise ValueError(f"node config '{BUDGET_KEYS[field]}' must be a number, got {value!r}")
        try:
            return ClientBudget(**values)
        except (TypeError, ValueError) as err:
            raise ValueError(f"node config DO-ADP budget {values}: {err}") from None
    if state is not None and BUDGET_STATE_KEY in state and len(state[BUDGET_STATE_KEY]):
        rec = state[BUDGET_STATE_KEY]
        return ClientBudget(float(rec["epsilon"]), int(rec["rounds"]), float(rec["delta"]), float(rec["clip"]))
    return None


def check_gaussian_noise(budget: ClientBudget, sigma: float, clip: float, batch_size: int, q: int,
                         sampling: str = "uniform", method: str = "DO-ADP") -> None:
    """Refuse (``ValueError`` naming both values) a Gaussian mechanism that gives the client less
    noise than its own budget needs: a clip above ``budget.clip``, or a sigma whose certified epsilon
    (:class:`~flwr_strategies.privacy.accountant.GaussianSteps`, the accountant the server
    calibrates with) over the client's ``budget.rounds`` steps on its own ``q`` records exceeds
    ``budget.epsilon`` at ``budget.delta``. The message names the sigma the client's budget needs
    (:func:`~flwr_strategies.privacy.accountant.calibrate_sigma` at the proposed clip)."""
    sigma, clip = float(sigma), float(clip)
    if not (clip > 0 and math.isfinite(clip)):
        raise ValueError(f"{method} client refuses the round: the server's clip={clip!r} is not a positive bound")
    if clip > budget.clip:
        raise ValueError(
            f"{method} client refuses the round: the server's clip={clip:g} is larger than the client's own "
            f"clip={budget.clip:g} (a larger clip is less noise per unit of sensitivity)"
        )
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError(f"{method} client refuses the round: the server's sigma={sigma!r} is no noise")
    eps = GaussianSteps(sigma, clip, int(batch_size), int(q), str(sampling)).epsilon(budget.rounds, budget.delta)
    if eps > budget.epsilon * (1 + 1e-9):
        own = calibrate_sigma(budget.epsilon, budget.delta, budget.rounds, clip, int(batch_size), int(q), str(sampling))
        raise ValueError(
            f"{method} client refuses the round: the server's sigma={sigma:.6g} (clip={clip:g}, batch_size="
            f"{int(batch_size)}, sampling={sampling!r}) gives epsilon={eps:.4g} at delta={budget.delta:g} over the "
            f"client's {budget.rounds} rounds on its {int(q)} records, above its own epsilon={budget.epsilon:g}; "
            f"its own budget needs sigma >= {own:.6g}"
        )


def check_rounds_left(budget: ClientBudget, t: int, taken: int, method: str = "DO-ADP") -> None:
    """Refuse a round past the ones the client agreed to: iteration ``t`` (0-based, from the server)
    or the ``taken``-th round the client itself counted (``context.state``) reaching ``budget.rounds``."""
    if max(int(t), int(taken)) >= budget.rounds:
        raise ValueError(
            f"{method} client refuses the round: it agreed to {budget.rounds} rounds (its budget's noise covers "
            f"those), and this would be round {max(int(t), int(taken)) + 1} (server iteration t={int(t)}, rounds the "
            f"client took part in: {int(taken)})"
        )


# ---------------------------------------------------------------------------- randomness
def private_generator(client_seed: int | None = None, t: int = 0) -> np.random.Generator:
    """The agent's generator for round ``t``: fresh OS entropy (``client_seed=None``, the default)
    or, for reproducible simulations, a client-side seed the server never sees."""
    return agent_generator(client_seed, t)


def set_client_seed(state, seed: int | str) -> None:
    """Store a client-side seed as a per-node secret in ``context.state``: an integer >= 0 (a
    simulation whose nodes the experimenter runs) or a node-config seed string (checked as
    :func:`client_seed_of` checks it).

    Call it on the client side (the node's own ``Context``); the server never sees ``context.state``.
    """
    value = _node_seed(seed) if isinstance(seed, str) else check_client_seed(seed)
    state[SECRET_KEY] = ConfigRecord({SEED_KEY: str(value)})  # a string: 128-bit seeds exceed a record's int64


def _node_seed(value: Any) -> int:
    """A node-config seed: at least :data:`NODE_SEED_HEX_DIGITS` hex digits (128 bits), at least 2**64."""
    text = value.strip().lower() if isinstance(value, str) else ""
    digits = text[2:] if text.startswith("0x") else text
    if not (len(digits) >= NODE_SEED_HEX_DIGITS and re.fullmatch(r"[0-9a-f]+", digits)) or int(digits, 16) < 2**64:
        raise ValueError(
            f"node config '{SEED_KEY}' must be a secret of at least 128 bits, written as {NODE_SEED_HEX_DIGITS} or "
            f"more hex digits (python -c \"import secrets; print(secrets.token_hex(16))\"), got {value!r}: a smaller "
            "seed is found by trying every value, and it would expose the node's noise"
        )
    return int(digits, 16)


def client_seed_of(state=None, node_config=None) -> int | None:
    """The client-side seed from ``node_config[SEED_KEY]`` (in a deployment: a secret of at least 128
    bits written as 32 or more hex digits, ``python -c "import secrets; print(secrets.token_hex(16))"``;
    a smaller seed is refused, since it is found by trying every value) or the secret in ``state``
    (:func:`set_client_seed`; in a simulation whose nodes the experimenter runs, any integer >= 0);
    None if neither."""
    if node_config is not None and SEED_KEY in node_config:
        return _node_seed(node_config[SEED_KEY])
    if state is not None and SECRET_KEY in state:
        return check_client_seed(int(state[SECRET_KEY][SEED_KEY]))
    return None


def allow_private_eval(state, allowed: bool = True) -> None:
    """Record in ``context.state`` whether this node consents to send its private model when the
    server asks (``evaluate_private``; outside the privacy guarantee). Call it on the client side."""
    if not isinstance(allowed, bool):
        raise TypeError(f"allowed must be a bool, got {allowed!r}")
    state[CONSENT_KEY] = ConfigRecord({PRIVATE_EVAL_KEY: int(allowed)})


def private_eval_allowed(state=None, node_config=None) -> bool:
    """This node's consent to private-model evaluation: ``node_config[PRIVATE_EVAL_KEY]`` (``true``/
    ``false``, or 1/0) if set, else what :func:`allow_private_eval` recorded in ``state``; False if
    neither."""
    if node_config is not None and PRIVATE_EVAL_KEY in node_config:
        value = node_config[PRIVATE_EVAL_KEY]
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        if isinstance(value, (bool, int, np.integer)) and int(value) in (0, 1):
            return bool(value)
        raise ValueError(f"node config '{PRIVATE_EVAL_KEY}' must be true or false, got {value!r}")
    if state is not None and CONSENT_KEY in state:
        return bool(int(state[CONSENT_KEY][PRIVATE_EVAL_KEY]))
    return False


def _own_settings(state, node_config, client_seed: int | None, budget: ClientBudget | None,
                  allow_private_eval: bool | None, private: bool = True) -> tuple[int | None, ClientBudget | None,
                                                                                  bool]:
    """The node's own ``(checked client seed, budget, consent)``, in that order: each given value, else the
    node's (``node_config``, then ``state``); no budget unless ``private``."""
    seed = check_client_seed(client_seed_of(state, node_config) if client_seed is None else client_seed)
    if private and budget is None:
        budget = client_budget_of(state, node_config)
    consent = private_eval_allowed(state, node_config) if allow_private_eval is None else allow_private_eval
    return seed, budget if private else None, bool(consent)


def check_round_config(config: Mapping[str, Any], allowed_private_eval: bool) -> bool:
    """Whether to send the private model this round: only when the server asks (``report_model = 1``,
    ``evaluate_private``) *and* the node consents; otherwise the agent declines and replies with its
    message alone. A round whose config carries a seed is refused: a client never takes its seed from
    the server."""
    carried = [k for k in SERVER_SEED_KEYS if k in config]
    if carried:
        raise ValueError(
            f"the round's config carries {carried[0]!r}: a client takes its seed only from its own node "
            f"(node config '{SEED_KEY}' or context.state), never from the server; refusing the round"
        )
    return bool(int(config.get("report_model", 0))) and bool(allowed_private_eval)


class UniformBatchSampler(torch.utils.data.Sampler):
    """Batch sampler: ``num_batches`` batches of ``batch_size`` distinct indices out of ``n``, drawn
    uniformly and independently per batch from a private NumPy generator.

    Use it as ``DataLoader(dataset, batch_sampler=UniformBatchSampler(len(dataset), b, 1, rng))``.
    """

    def __init__(self, n: int, batch_size: int, num_batches: int, generator: np.random.Generator,
                 sampling: str = "uniform") -> None:
        self.n, self.batch_size, self.num_batches = int(n), int(batch_size), int(num_batches)
        self.generator, self.sampling = generator, sampling

    def __iter__(self) -> Iterator[list[int]]:
        for _ in range(self.num_batches):
            yield draw_batch(self.generator, self.n, self.batch_size, self.sampling).tolist()

    def __len__(self) -> int:
        return self.num_batches


# ---------------------------------------------------------------------------- pieces
class Privatizer:
    """Per-sample clip -> sum / b -> ``+ N(0, sigma^2 I_d)`` -> momentum ``m <- g + noise + beta m``.

    Parameters
    ----------
    sigma : float
        Noise std per coordinate (> 0).
    clip : float
        G: coordinate clip at G/sqrt(d) (``clip_mode="coordinate"``) or L2 clip at G.
    beta : float (default: 0.15)
        Momentum factor in [0, 1).
    batch_size : int (default: 1)
        b, the divisor of the clipped sum.
    clip_mode : str (default: "coordinate")
    generator : np.random.Generator | None
        The agent's private generator (default: OS entropy).
    """

    def __init__(self, sigma: float, clip: float, beta: float = 0.15, batch_size: int = 1,
                 clip_mode: str = "coordinate", generator: np.random.Generator | None = None) -> None:
        self.params = DOADPParams(beta=beta, sigma=float(sigma), clip=float(clip), clip_mode=clip_mode,
                                  batch_size=int(batch_size))
        if not self.params.private:
            raise ValueError(f"Privatizer needs sigma > 0 and a clip bound, got sigma={sigma!r}, clip={clip!r}")
        self.generator = generator if generator is not None else private_generator()
        self.momentum: torch.Tensor | None = None

    def __call__(self, per_sample_grads: torch.Tensor | np.ndarray) -> torch.Tensor:
        """Returns the new momentum (float64, length d) from ``(b, d)`` per-sample gradients."""
        grads = np.asarray(per_sample_grads.detach().cpu() if torch.is_tensor(per_sample_grads) else per_sample_grads,
                           dtype=np.float64)
        d = grads.shape[-1]
        g, noise = noisy_gradient(grads, self.params, self.generator, d)
        m_old = np.zeros(d) if self.momentum is None else self.momentum.numpy()
        self.momentum = torch.from_numpy(g + noise + self.params.beta * m_old)
        return self.momentum


class TopKPublicCopy:
    """The agent's public copy ``xhat`` and its Top-k message with error feedback (CHOCO-style).

    ``message(x)`` returns ``(indices, values)`` of ``TopK_k(x - xhat)`` (values rounded to
    ``msg_dtype``) without changing anything; ``apply(indices, values)`` adds them to ``xhat``.
    """

    def __init__(self, d: int, k: int, init: torch.Tensor | np.ndarray | None = None, msg_dtype: str = "float32"):
        if not 1 <= int(k) <= int(d):
            raise ValueError(f"k must lie in [1, d] = [1, {d}], got k={k!r}")
        self.k, self.msg_dtype = int(k), msg_dtype
        self.xhat = torch.zeros(int(d), dtype=torch.float64) if init is None else torch.as_tensor(
            np.asarray(init, dtype=np.float64)).clone()

    def message(self, x: torch.Tensor | np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        x = np.asarray(x.detach().cpu() if torch.is_tensor(x) else x, dtype=np.float64)
        idx, val = top_k(x - self.xhat.numpy(), self.k)
        val = val.astype(self.msg_dtype).astype(np.float64)
        return torch.from_numpy(idx), torch.from_numpy(val)

    def apply(self, indices: torch.Tensor, values: torch.Tensor) -> None:
        self.xhat[indices.long()] += values.double()


class IndexedData:
    """Random access to a client's records, for the agent's own batch draw.

    Accepts :class:`~flwr_strategies.clients.training.TensorData` (or anything with tensors ``x``
    and ``y``), a ``DataLoader`` (its ``dataset`` is indexed), a ``torch.utils.data.Dataset`` of
    ``(x, y)`` pairs, or any other iterable of ``(x, y)`` batches, e.g. a list (materialised once).
    Records that are dicts (a Hugging Face dataset: ``{"img": ..., "label": ...}``) are read
    through ``keys`` = (input key, label key).
    """

    def __init__(self, data: Any, keys: tuple[str, str] | None = None) -> None:
        self._x = self._y = None
        self._dataset = None
        self.keys = keys
        if hasattr(data, "x") and hasattr(data, "y") and torch.is_tensor(getattr(data, "x")):
            self._x, self._y = data.x, data.y
        elif hasattr(data, "dataset") and hasattr(data.dataset, "__getitem__") and hasattr(data.dataset, "__len__"):
            self._dataset = data.dataset
        elif isinstance(data, torch.utils.data.Dataset) and hasattr(data, "__len__"):
            self._dataset = data
        elif isinstance(data, Iterable):  # a list of batches, a generator, any iterable of (x, y) batches
            batches = [(torch.as_tensor(xb), torch.as_tensor(yb)) for xb, yb in data]
            if not batches:
                raise ValueError("the client's training data is empty")
            self._x, self._y = (torch.cat(list(t)) for t in zip(*batches))
        else:
            raise TypeError(f"unsupported training data {type(data).__name__}: pass tensors, a Dataset or a DataLoader")

    def __len__(self) -> int:
        return int(self._y.shape[0]) if self._y is not None else len(self._dataset)

    def batch(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        if self._x is not None:
            ii = torch.as_tensor(np.asarray(idx), dtype=torch.long, device=self._x.device)
            return self._x[ii], self._y[ii]
        items = [self._pair(self._dataset[int(i)]) for i in idx]
        return torch.stack([torch.as_tensor(a) for a, _ in items]), torch.as_tensor([int(b) for _, b in items])

    def _pair(self, item: Any) -> tuple[Any, Any]:
        if isinstance(item, Mapping):
            if self.keys is None:
                raise TypeError(f"the dataset's records are dicts with keys {sorted(item)}: pass "
                                "IndexedData(data, keys=(input_key, label_key))")
            return item[self.keys[0]], item[self.keys[1]]
        return item


class _NodeAgent:
    """What :class:`DOADPAgent` and the baselines' agents (:mod:`flwr_strategies.clients.doadp_baselines`)
    share: the node's own settings for the round, the batch gradients on the user's model, and the commit
    into ``context.state`` once the reply exists."""

    #: where the agent's variables persist in ``context.state``
    key = STATE_KEY
    #: the method's name in refusals
    label = "DO-ADP"

    def _node_settings(self, config: dict[str, Scalar], state, node_config: Mapping[str, Any] | None,
                       client_seed: int | None, budget: ClientBudget | None, allow_private_eval: bool | None,
                       private: bool = True) -> None:
        """The node's own settings (:func:`_own_settings`); a private agent without a budget, or past its
        rounds, refuses the round; the reply carries the private model as :func:`check_round_config` says."""
        self.client_seed, self.budget, consent = _own_settings(state, node_config, client_seed, budget,
                                                               allow_private_eval, private)
        self.report = check_round_config(config, consent)
        self.t = int(config["t"])
        rec = state[LEDGER_KEY] if state is not None and LEDGER_KEY in state else {"rounds": 0, "warned": 0}
        self.ledger = {"rounds": int(rec["rounds"]), "warned": int(rec["warned"])}
        if private:
            if self.budget is None:
                raise ValueError(
                    f"{self.label} client has no privacy budget of its own, so it cannot check the noise the server "
                    f"asks for: give it budget=ClientBudget(epsilon=..., rounds=...) in Python, the node config keys "
                    f"{BUDGET_KEYS['epsilon']} and {BUDGET_KEYS['rounds']} (optional {BUDGET_KEYS['delta']}, "
                    f"{BUDGET_KEYS['clip']}) of its SuperNode, or set_client_budget(context.state, ...)"
                )
            check_rounds_left(self.budget, self.t, self.ledger["rounds"], self.label)
        self.next_state = None

    def _grad_fn(self, model: torch.nn.Module, data: IndexedData, loss_fn: Callable,
                 losses: list[float] | None = None) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """``grad_fn(x, idx)``: the ``(b, d)`` per-sample gradients at ``x`` of the records ``idx`` (each
        batch's loss at ``x`` appended to ``losses`` when given)."""

        def grad_fn(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
            xb, yb = data.batch(idx)
            dev = next(model.parameters()).device
            xb, yb = xb.to(dev), yb.to(dev)
            with torch.no_grad():
                load_flat_parameters(model, x)
                if losses is not None:
                    losses.append(float(loss_fn(model(xb), yb)))
            return per_sample_gradients(model, loss_fn, xb, yb)

        return grad_fn

    def save(self, state) -> None:
        """Commit the agent's next state into ``context.state`` (call once the reply exists), with the
        count of rounds this client took part in (checked against its budget's rounds)."""
        if self.next_state is None:
            raise RuntimeError("call train() before save()")
        if state is not None:
            nxt = self.next_state
            state[self.key] = ArrayRecord(nxt.to_arrays() if isinstance(nxt, AgentState) else
                                          [np.asarray(a) for a in nxt])
            state[LEDGER_KEY] = ConfigRecord({**self.ledger, "rounds": self.ledger["rounds"] + 1})


class DOADPAgent(_NodeAgent):
    """One DO-ADP agent's round on your own model and data.

    Build it from what the server sent (``arrays``: the consensus term, and x0 while the agent has no
    state; ``config``: the ``doadp_*`` keys) and the node's state, call :meth:`train`, save::

        agent = DOADPAgent(arrays, config, context.state, node_config=context.node_config)
        reply_arrays, metrics = agent.train(model, trainset, loss_fn)
        agent.save(context.state)          # commit only once the reply exists

    Parameters
    ----------
    arrays : list[np.ndarray]
        ``[cons]`` or ``[cons, x0]``.
    config : dict
        The round's config (``t``, ``doadp_*``, ``doadp_accepted``, ``report_model``).
    state : RecordDict | None
        ``context.state`` (the agent's x, m, xhat persist under ``"doadp"``).
    node_config : Mapping | None (default: None)
        ``context.node_config``: its ``doadp-client-seed``, ``doadp-allow-private-eval`` and budget
        keys (``doadp-epsilon``, ``doadp-rounds``, ``doadp-delta``, ``doadp-clip``) are the node's
        own settings (they win over ``state``).
    client_seed : int | None (default: None)
        Client-side seed (any integer >= 0: for simulations whose nodes you run). None:
        ``node_config``'s ``doadp-client-seed`` (at least 128 bits) or the per-node secret in
        ``state`` (:func:`set_client_seed`) if there is one, else OS entropy.
    budget : ClientBudget | None (default: None)
        The client's own privacy budget; the round is refused when the server's sigma or clip gives
        less noise than it needs (:func:`check_gaussian_noise`) or the round is past its rounds.
        None: ``node_config``'s budget keys or the budget in ``state`` (:func:`client_budget_of`); a
        private agent without any refuses to train.
    require_private : bool (default: True)
        Refuse rounds without noise or clipping (False only for the non-private D-mSGD, which needs
        no budget).
    allow_private_eval : bool | None (default: None)
        Consent to send the private model when the server asks (``report_model = 1``). None: the
        node's consent (:func:`private_eval_allowed` of ``state`` and ``node_config``). Without
        consent the agent declines (its reply carries its message only).
    """

    def __init__(self, arrays: list[np.ndarray], config: dict[str, Scalar], state=None, *,
                 node_config: Mapping[str, Any] | None = None, client_seed: int | None = None,
                 budget: ClientBudget | None = None, require_private: bool = True,
                 allow_private_eval: bool | None = None) -> None:
        clip = float(config["doadp_clip"])
        self.params = DOADPParams(
            alpha=float(config["doadp_alpha"]), beta=float(config["doadp_beta"]), p=float(config["doadp_p"]),
            k=int(config["doadp_k"]), sigma=float(config["doadp_sigma"]), clip=None if clip < 0 else clip,
            clip_mode=str(config["doadp_clip_mode"]), batch_size=int(config["doadp_batch_size"]),
            sampling=str(config["doadp_sampling"]), msg_dtype=str(config["doadp_msg_dtype"]),
        )
        private = bool(int(config.get("doadp_private", 1)))
        if require_private and not (private and self.params.private):
            raise ValueError(
                f"DO-ADP client refuses a non-private round (sigma={self.params.sigma}, clip={self.params.clip}); "
                "only the dmsgd client trains without privacy"
            )
        if not require_private and private:
            raise ValueError("this is a D-mSGD (non-private) client; the server runs a private method")
        self._node_settings(config, state, node_config, client_seed, budget, allow_private_eval, require_private)
        self.cons = np.asarray(arrays[0], dtype=np.float64).reshape(-1)
        if state is not None and STATE_KEY in state:
            current = AgentState.from_arrays(state[STATE_KEY].to_numpy_ndarrays())
        elif len(arrays) >= 2:
            current = AgentState.initial(arrays[1], str(config.get("doadp_public_copy", "zero")))
        else:
            raise ValueError("DO-ADP agent has no state and the server sent no x0 (state lost between rounds?)")
        if current.x.shape != self.cons.shape:
            raise ValueError(f"consensus term has length {self.cons.size}, the agent's model has {current.x.size}")
        self.state = reconcile(current, int(config.get("doadp_accepted", current.sent)))
        self.result = None

    def train(self, model: torch.nn.Module, data: Any, loss_fn: Callable = torch.nn.functional.cross_entropy
              ) -> tuple[list[np.ndarray], dict[str, Scalar]]:
        """Run the round; returns the reply arrays (``[indices, values]``, empty when inactive, plus
        the private model in evaluation rounds of ``evaluate_private``) and metrics."""
        if len(list(model.buffers())):
            raise ValueError("DO-ADP needs a model without buffers (its flat vector is the parameters only)")
        d = sum(p.numel() for p in model.parameters())
        if d != self.state.x.size:
            raise ValueError(f"the model has {d} parameters, the server's model has {self.state.x.size}")
        data = data if isinstance(data, IndexedData) else IndexedData(data)
        if self.budget is not None:
            check_gaussian_noise(self.budget, self.params.sigma, self.params.clip, self.params.batch_size, len(data),
                                 self.params.sampling)
            self._check_step_size(d)
        losses: list[float] = []
        rng = private_generator(self.client_seed, self.t)
        self.next_state, self.result = agent_round(self.state, self.cons, self.params, rng,
                                                   self._grad_fn(model, data, loss_fn, losses), len(data))
        index_dtype = index_dtype_for(self.state.x.size)
        if self.result.active:
            arrays = [self.result.indices.astype(index_dtype), self.result.values.astype(self.params.msg_dtype)]
        else:  # inactive: two empty arrays of the message's dtypes, and doadp_active = 0 says so
            arrays = [np.empty(0, dtype=index_dtype), np.empty(0, dtype=self.params.msg_dtype)]
        if self.report:
            arrays.append(self.next_state.x.copy())
        metrics: dict[str, Scalar] = {"doadp_active": int(self.result.active)}
        if losses:
            metrics["train_loss"] = float(np.mean(losses))
        return arrays, metrics

    def _check_step_size(self, d: int) -> None:
        """Warn once per node (:class:`StepSizeWarning`) when a step's noise norm exceeds the bound."""
        alpha, sigma = self.params.alpha, self.params.sigma
        norm = alpha * sigma * math.sqrt(d)
        if norm > NOISE_NORM_BOUND and not self.ledger["warned"]:
            warnings.warn(
                f"DO-ADP step size lr={alpha:g} with sigma={sigma:.4g} on d={d} parameters adds noise of norm "
                f"lr * sigma * sqrt(d) = {norm:.3g} per step, above {NOISE_NORM_BOUND:g} (steps above it diverged); "
                f"choose lr below {NOISE_NORM_BOUND:g} / (sigma sqrt(d)) = {NOISE_NORM_BOUND / (sigma * math.sqrt(d)):.3g}",
                StepSizeWarning, stacklevel=3)
            self.ledger["warned"] = 1


class DOADPClient(TorchClient):
    """The ready-made DO-ADP agent (legacy ``NumPyClient``; the Message API runs it through
    :func:`flwr_strategies.clients.app.numpy_client_app`).

    Parameters
    ----------
    setup : ClientSetup
        Model (no buffers), training data (``TensorData`` or an iterable of ``(x, y)`` batches), and
        ``state`` (= ``context.state``, where the agent's x, m, xhat persist).
    params : dict | None
        Method hyperparameters (unused: everything comes from the server's config each round).
    client_seed, budget, require_private, allow_private_eval
        As :class:`DOADPAgent` (defaults None, None, True, None); a None is read once, when the client
        is built, from ``setup.node_config`` and ``setup.state``.
    loss_fn : callable (default: cross entropy)
    """

    #: the agent this client runs each round (the baselines' clients run theirs)
    agent: type = DOADPAgent

    def __init__(self, setup, params: dict[str, Any] | None = None, *, client_seed: int | None = None,
                 budget: ClientBudget | None = None, require_private: bool = True,
                 loss_fn: Callable = torch.nn.functional.cross_entropy,
                 allow_private_eval: bool | None = None) -> None:
        super().__init__(setup, params)
        #: the agent's keyword arguments besides the node's privacy settings
        self.agent_options: dict[str, Any] = {"require_private": require_private}
        self.loss_fn = loss_fn
        self.client_seed, self.budget, self.allow_private_eval = _own_settings(
            setup.state, getattr(setup, "node_config", None), client_seed, budget, allow_private_eval)
        self._data: IndexedData | None = None

    def num_train(self) -> int:
        return len(self.data)

    @property
    def data(self) -> IndexedData:
        if self._data is None:
            self._data = IndexedData(self.setup.train_data)
        return self._data

    def fit(self, parameters: list[np.ndarray], config: dict[str, Scalar]):
        agent = self.agent(parameters, config, self.setup.state, client_seed=self.client_seed, budget=self.budget,
                           allow_private_eval=self.allow_private_eval, **self.agent_options)
        arrays, metrics = agent.train(self.model, self.data, self.loss_fn)
        agent.save(self.setup.state)
        return arrays, self.num_train(), {**self.base_metrics(), **metrics}


def build_dmsgd_client(setup, params: dict[str, Any]) -> DOADPClient:
    """Registry factory of the non-private D-mSGD client."""
    return DOADPClient(setup, params, require_private=False)
