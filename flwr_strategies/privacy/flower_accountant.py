"""The amplified accountant as a Flower ``PrivacyAccountant`` (``flwr.serverapp``, flwr 1.41 and 1.42).

Flower's own :class:`flwr.serverapp.RdpAccountant` composes Gaussian releases with dp_accounting's RDP
accountant at its default orders, and Flower's DP wrappers only accept ``sampling_method="no-amplification"``.
:class:`AmplifiedAccountant` speaks the same Protocol (``config``, ``num_releases``, ``compose``,
``get_epsilon``, ``get_delta``, ``get_privacy_spent``, ``would_exceed``, ``state_dict``,
``load_state_dict``) and credits the amplification of the sampling that runs, with the tightest value
dp_accounting certifies for it (:mod:`flwr_strategies.privacy.accountant`):

* ``sampling_method="without-replacement"``, ``neighboring_relation="replace-one"``: b of m records drawn
  uniformly (``SampledWithoutReplacementDpEvent``, RDP searched on a dense grid of orders);
* ``"poisson"`` with ``"add-or-remove-one"`` (Flower's) or, through :class:`AmplifiedPrivacyConfig`,
  ``"replace-one"`` (DO-ADP's: the dataset size is public): ``PoissonSampledDpEvent`` under the PLD
  accountant on a grid refined to the epsilon;
* ``"no-amplification"``: the plain Gaussian mechanism (PLD).

Every value is dp_accounting's own bound, never below what it certifies, and within 1% of its
tightest (``tests/test_privacy_flower_accountant.py``). DO-ADP (Huo et al., Algorithm 1) composes one
event per round with what ran (:func:`doadp_event`: noise multiplier of the clipped, subsampled
step; batch b of the agent's q records) and records beside it the activation probability p and the
Top-k fraction k/d; those two are *not* credited (activation is visible, and with error feedback every
noisy coordinate is eventually sent; see :mod:`flwr_strategies.privacy.accountant`), and
:class:`~flwr.serverapp.PrivacySpent` names the method and says so. :func:`check_budget` stops a run
with Flower's :class:`~flwr.serverapp.exception.PrivacyBudgetExhausted` before a release would pass
``max_epsilon``.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from typing import Any

from flwr.serverapp import GaussianPrivacyEvent, NeighboringRelation, PrivacyConfig, PrivacySpent, SamplingMethod
from flwr.serverapp.exception import PrivacyBudgetExhausted

from ..core.validation import check_range
from .accountant import (
    PLD_DISCRETIZATION,
    PLD_MIN_DISCRETIZATION,
    PLD_RELATIVE_GRID,
    RDP_ORDERS,
    GaussianSteps,
    _composed_event,
    _pld_at,
    _rdp_at,
    _tightest,
)
from .validation import check_delta, check_positive_int

__all__ = ["AmplifiedAccountant", "AmplifiedPrivacyConfig", "check_budget", "doadp_event", "privacy_config_for"]

_STATE_SCHEMA_VERSION = 1
_BACKEND = "flwr-strategies-amplified"


@dataclass(frozen=True)
class AmplifiedPrivacyConfig(PrivacyConfig):
    """Flower's :class:`~flwr.serverapp.PrivacyConfig`, also accepting Poisson sampling under replace-one
    adjacency (DO-ADP's ``sampling="poisson"``: the record count is public), which dp_accounting's PLD
    accountant covers and Flower's configuration refuses. Every other field is checked by Flower."""

    def __post_init__(self) -> None:
        if (self.sampling_method, self.neighboring_relation) == (SamplingMethod.POISSON,
                                                                 NeighboringRelation.REPLACE_ONE):
            PrivacyConfig(self.target_delta, self.population_size, NeighboringRelation.ADD_OR_REMOVE_ONE,
                          SamplingMethod.POISSON, self.max_epsilon)  # Flower's checks of the other fields
            return
        super().__post_init__()


def privacy_config_for(mechanism: GaussianSteps, delta: float, max_epsilon: float | None = None) -> PrivacyConfig:
    """The configuration that accounts ``mechanism`` (one agent's private step): replace-one adjacency,
    the mechanism's sampling, its record count as the population, ``delta`` as the target."""
    sampling = SamplingMethod.WITHOUT_REPLACEMENT if mechanism.sampling == "uniform" else SamplingMethod.POISSON
    cls = PrivacyConfig if sampling is SamplingMethod.WITHOUT_REPLACEMENT else AmplifiedPrivacyConfig
    return cls(target_delta=float(delta), population_size=int(mechanism.dataset_size),
               neighboring_relation=NeighboringRelation.REPLACE_ONE, sampling_method=sampling,
               max_epsilon=None if max_epsilon is None else float(max_epsilon))


def doadp_event(mechanism: GaussianSteps) -> GaussianPrivacyEvent:
    """Flower's event for one private step of ``mechanism``: its noise multiplier (noise std over the
    replace-one sensitivity of the clipped batch mean), batch size b, record count q."""
    return GaussianPrivacyEvent(noise_multiplier=float(mechanism.noise_multiplier),
                                sample_size=int(mechanism.batch_size), population_size=int(mechanism.dataset_size))


class AmplifiedAccountant:
    """Cumulative (epsilon, delta) of sampled Gaussian releases, tight with dp_accounting; satisfies
    Flower's :class:`~flwr.serverapp.PrivacyAccountant` Protocol.

    Parameters
    ----------
    config : PrivacyConfig
        Flower's configuration (or :class:`AmplifiedPrivacyConfig`): ``target_delta`` (the delta of
        :meth:`get_privacy_spent`), ``population_size`` (records every event samples from: an agent's
        q for DO-ADP), ``neighboring_relation``, ``sampling_method`` and the optional ``max_epsilon``
        of :meth:`would_exceed`.
    method : str (default: ``"subsampled Gaussian"``)
        Name of the mechanism, reported in ``PrivacySpent.accounting_method`` (``"DO-ADP"`` for DO-ADP).
    """

    def __init__(self, config: PrivacyConfig, method: str = "subsampled Gaussian") -> None:
        if not isinstance(config, PrivacyConfig):
            raise TypeError(f"config must be a flwr.serverapp.PrivacyConfig, got {type(config).__name__}")
        if not isinstance(method, str) or not method:
            raise ValueError(f"method must be a non-empty string, got method={method!r}")
        self._config = config
        self.method = method
        self._compositions: list[tuple[GaussianPrivacyEvent, int, dict[str, float]]] = []

    # ------------------------------------------------------------------ Protocol
    @property
    def config(self) -> PrivacyConfig:
        """The privacy configuration."""
        return self._config

    @property
    def num_releases(self) -> int:
        """Number of composed private releases."""
        return sum(count for _, count, _ in self._compositions)

    @property
    def backend(self) -> str:
        """``"rdp"`` (sampling without replacement: dp_accounting has no PLD for it) or ``"pld"``."""
        return "rdp" if self._config.sampling_method is SamplingMethod.WITHOUT_REPLACEMENT else "pld"

    def compose(self, event: GaussianPrivacyEvent, count: int = 1, ran: dict[str, float] | None = None) -> None:
        """Compose ``count`` identical releases ``event``. ``ran`` (optional): what the method ran beside
        the event (DO-ADP: ``p``, ``k_frac``, ``clip``, ``sigma``, ``batch_size``, ``dataset_size``),
        kept in the ledger and named in :meth:`get_privacy_spent`; it changes no number."""
        self._check_event(event)
        check_positive_int(count, "count")
        note = {str(k): float(v) for k, v in (ran or {}).items()}
        if self._compositions and self._compositions[-1][0] == event and self._compositions[-1][2] == note:
            last = self._compositions[-1]
            self._compositions[-1] = (event, last[1] + int(count), note)
        else:
            self._compositions.append((event, int(count), note))

    def get_epsilon(self, delta: float) -> float:
        """Cumulative epsilon at ``delta`` (0 before any release)."""
        check_delta(delta, name="delta")
        return self._epsilon(self._pairs(), float(delta))[0]

    def get_delta(self, epsilon: float) -> float:
        """Cumulative delta at ``epsilon`` (dp_accounting's, on the orders of :data:`RDP_ORDERS` or a PLD
        grid of at most :data:`PLD_RELATIVE_GRID` times ``epsilon``)."""
        check_range("epsilon", epsilon, 0)
        pairs = self._pairs()
        if not pairs:
            return 0.0
        from dp_accounting import pld, rdp

        event = self._event(pairs)
        if self.backend == "rdp":
            acc = rdp.RdpAccountant(orders=[float(o) for o in RDP_ORDERS], neighboring_relation=self._relation())
        else:
            grid = min(PLD_DISCRETIZATION, max(float(epsilon) * PLD_RELATIVE_GRID, PLD_MIN_DISCRETIZATION))
            acc = pld.PLDAccountant(neighboring_relation=self._relation(), value_discretization_interval=grid)
        acc.compose(event)
        return float(acc.get_delta(float(epsilon)))

    def get_privacy_spent(self, delta: float | None = None) -> PrivacySpent:
        """Cumulative (epsilon, delta) at ``delta`` (default: ``config.target_delta``), the number of
        releases, the accounting method (the mechanism, dp_accounting's accountant, the sampling, the
        adjacency, and what ran without credit) and, for RDP, the order that gives the epsilon."""
        delta = self._config.target_delta if delta is None else delta
        check_delta(delta, name="delta")
        eps, order = self._epsilon(self._pairs(), float(delta))
        return PrivacySpent(epsilon=eps, delta=float(delta), num_releases=self.num_releases,
                            accounting_method=self.accounting_method, optimal_order=order)

    def would_exceed(self, event: GaussianPrivacyEvent, max_epsilon: float | None = None, count: int = 1) -> bool:
        """Whether composing ``count`` releases ``event`` would take the epsilon at ``config.target_delta``
        above ``max_epsilon`` (default: ``config.max_epsilon``). Changes nothing."""
        self._check_event(event)
        check_positive_int(count, "count")
        limit = self._config.max_epsilon if max_epsilon is None else max_epsilon
        if limit is None:
            raise ValueError("max_epsilon must be supplied either in PrivacyConfig or to would_exceed().")
        check_range("max_epsilon", limit, 0, low_open=True)
        pairs = self._pairs() + [(event, int(count))]
        if self._upper_bound(pairs, self._config.target_delta) <= float(limit):  # cheap, and never below
            return False
        eps = self._epsilon(pairs, self._config.target_delta)[0]
        return bool(eps > float(limit))

    def state_dict(self) -> dict[str, object]:
        """JSON-serializable state: the configuration and the ledger of composed events."""
        c = self._config
        return {
            "schema_version": _STATE_SCHEMA_VERSION,
            "backend": _BACKEND,
            "method": self.method,
            "config": {"target_delta": c.target_delta, "population_size": c.population_size,
                       "neighboring_relation": c.neighboring_relation.value,
                       "sampling_method": c.sampling_method.value, "max_epsilon": c.max_epsilon},
            "compositions": [
                {"event": {"noise_multiplier": e.noise_multiplier, "sample_size": e.sample_size,
                           "population_size": e.population_size}, "count": n, "ran": dict(note)}
                for e, n, note in self._compositions
            ],
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore a :meth:`state_dict` of an accountant with the same configuration and method; the
        state is checked whole before anything changes."""
        if not isinstance(state, dict):
            raise ValueError(f"accountant state must be a dict, got {type(state).__name__}")
        if state.get("schema_version") != _STATE_SCHEMA_VERSION or state.get("backend") != _BACKEND:
            raise ValueError(f"accountant state has schema_version={state.get('schema_version')!r}, "
                             f"backend={state.get('backend')!r}; expected {_STATE_SCHEMA_VERSION}, {_BACKEND!r}")
        if state.get("method") != self.method:
            raise ValueError(f"accountant state accounts method={state.get('method')!r}, this one {self.method!r}")
        mine = self.state_dict()["config"]
        if state.get("config") != mine:
            raise ValueError(f"accountant state's configuration {state.get('config')!r} does not match {mine!r}")
        raw = state.get("compositions")
        if not isinstance(raw, list):
            raise ValueError("accountant state's compositions must be a list")
        restored = []
        try:
            for item in raw:
                e = item["event"]
                event = GaussianPrivacyEvent(noise_multiplier=float(e["noise_multiplier"]),
                                             sample_size=e["sample_size"], population_size=e["population_size"])
                self._check_event(event)
                check_positive_int(item["count"], "count")
                restored.append((event, int(item["count"]), {str(k): float(v) for k, v in item["ran"].items()}))
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"accountant state holds an invalid composition: {err!r}") from err
        self._compositions = restored

    # ------------------------------------------------------------------ details
    @property
    def accounting_method(self) -> str:
        """What the epsilon is: the mechanism, dp_accounting's accountant, sampling, adjacency, and what ran
        without credit."""
        c = self._config
        text = (f"{self.method}: dp-accounting {self.backend.upper()} ({c.sampling_method.value} sampling, "
                f"{c.neighboring_relation.value})")
        ran = self._compositions[-1][2] if self._compositions else {}
        extra = [f"{k}={ran[k]:g}" for k in ("p", "k_frac") if k in ran]
        if extra:
            text += f"; ran with {', '.join(extra)}, not credited"
        return text

    def ledger(self) -> list[tuple[GaussianPrivacyEvent, int, dict[str, float]]]:
        """The composed events in order: ``(event, count, ran)``."""
        return [(e, n, dict(note)) for e, n, note in self._compositions]

    def _relation(self):
        from dp_accounting import NeighboringRelation as Rel

        return getattr(Rel, self._config.neighboring_relation.name)

    def _check_event(self, event: GaussianPrivacyEvent) -> None:
        if not isinstance(event, GaussianPrivacyEvent):
            raise TypeError(f"event must be a flwr.serverapp.GaussianPrivacyEvent, got {type(event).__name__}")
        if event.population_size != self._config.population_size:
            raise ValueError(f"event population_size={event.population_size} does not match the configuration's "
                             f"population_size={self._config.population_size}")

    def _pairs(self) -> list[tuple[GaussianPrivacyEvent, int]]:
        return [(e, n) for e, n, _ in self._compositions]

    def _event(self, pairs):
        sampling = {SamplingMethod.WITHOUT_REPLACEMENT: "uniform",
                    SamplingMethod.POISSON: "poisson"}.get(self._config.sampling_method)
        return _composed_event([(e.noise_multiplier, e.sample_size, e.population_size, n) for e, n in pairs], sampling)

    def _upper_bound(self, pairs, delta: float) -> float:
        """An epsilon at least :meth:`_epsilon`'s, fast: RDP on :data:`RDP_ORDERS` alone (no refinement), or
        the PLD on its coarsest grid."""
        if not pairs:
            return 0.0
        if self.backend == "rdp":
            return _rdp_at(self._event(pairs), delta, RDP_ORDERS, self._relation())[0]
        return _pld_at(self._event(pairs), delta, PLD_DISCRETIZATION, self._relation())

    def _epsilon(self, pairs, delta: float) -> tuple[float, float | None]:
        merged = [(e, sum(n for _, n in run)) for e, run in groupby(pairs, key=itemgetter(0))]
        if not merged:
            return 0.0, None
        return _tightest(self._event(merged), delta, self.backend, self._relation())


def check_budget(accountant: Any, event: GaussianPrivacyEvent, what: str, count: int = 1) -> None:
    """Raise Flower's ``PrivacyBudgetExhausted`` when composing ``count`` releases ``event`` would take
    ``accountant`` (any Flower ``PrivacyAccountant``) past its ``config.max_epsilon``; ``what`` names the
    release (e.g. "DOADPServer round 12"). Nothing happens without a ``max_epsilon``."""
    limit = accountant.config.max_epsilon
    if limit is None or not accountant.would_exceed(event, count=count):
        return
    spent = accountant.get_privacy_spent()
    raise PrivacyBudgetExhausted(
        f"{what} would exceed max_epsilon={limit:g} at delta={spent.delta:g}: the privacy spent after "
        f"{spent.num_releases} releases is epsilon={spent.epsilon:.6g} ({spent.accounting_method}); the run "
        "stops before releasing it"
    )
