"""Standard (epsilon, delta) accounting of the mechanism a DO-ADP-style agent actually runs.

Every private step of an agent releases, up to post-processing, the Gaussian mechanism

    g_t = (1/b) * sum_{j in B_t} clip(grad l(x_t; z_j)) + N(0, sigma^2 I_d)

where each clipped per-sample gradient has L2 norm at most ``clip`` (coordinate clipping at
``G/sqrt(d)`` gives L2 norm <= G), ``B_t`` is drawn from the agent's ``q`` local records, and
everything the agent sends (momentum, model, Top-k difference to the public copy) is a function of
these noisy gradients and of public values. Adjacency is *replace-one* (the paper's; the dataset
size q is public). Two sampling schemes are supported, each with the accountant of Google's
``dp_accounting`` that covers it exactly:

* ``sampling="uniform"`` (the paper's: b distinct records drawn uniformly, b = 1 in the paper):
  ``SampledWithoutReplacementDpEvent(q, b, GaussianDpEvent(z))`` under the RDP accountant with
  ``REPLACE_ONE``, ``z = sigma / (2 clip / b)`` (the replace-one L2 sensitivity of the mean);
* ``sampling="poisson"`` (each record in the batch independently with probability b/q; the sum
  is divided by b): ``PoissonSampledDpEvent(b/q, GaussianDpEvent(z))`` under the PLD accountant
  with ``REPLACE_ONE``, ``z = sigma * b / clip`` (dp_accounting's replace-one convention shifts the
  two records by ``+-clip``).

T private steps compose (``SelfComposedDpEvent``). What is *not* credited, because no standard
accountant certifies it for this mechanism:

* the activation probability p: an inactive agent sends nothing, so an observer of the messages
  sees who was active; Poisson amplification needs the selection to stay hidden (Huo et al.'s
  Theorem 1 credits p^2);
* Top-k sparsification: with error feedback every noisy coordinate is eventually sent and the
  chosen indices depend on private data, so the released information is the full noisy gradient
  (Theorem 1 credits k/d).

Both accountants are run so that the epsilon is within 1% of the smallest one that accountant certifies
for the event (against a dense order grid and finer discretizations, on the paper's settings, small ones
and 30 settings drawn at random: ``tests/test_privacy_doadp_accountant.py``). Every value is dp_accounting's own
bound, never below what it certifies:

* RDP: the bound of every order is valid, so a set of orders only decides how tight the epsilon is.
  Small epsilons have their best order far above dp_accounting's default orders (up to 1,024): at the
  paper's logistic-regression setting (Sec. V-A: q = 20,000, one record per step, T = 120,000, Theorem
  1's noise for epsilon 0.01) the best order is about 760 and the certified epsilon at delta 1e-5 is
  0.0082, where orders up to 128 give 0.0446. dp_accounting's bound for sampling without replacement
  changes form above order 256 (Theorem 27 of Wang, Balle and Kasiviswanathan up to 256, a looser closed
  form above, which keeps a noise-independent term: at that setting it certifies about 0.008 whatever
  the noise, where Poisson sampling under the PLD accountant certifies 0.00056 for the same noise), and
  each side has its own optimum, often at 256 itself (0.0264 at order 256, 10.7 at 257 for sigma 21.15,
  b = 8, q = 1,000, T = 1,500; a search that jumped from 128 to 362 reported 0.0294). So each side is
  searched on its own (:func:`_rdp_epsilon`).
* PLD: the pessimistic PLD rounds every privacy-loss value up to its grid, which inflates a small
  epsilon by far more than its own size (0.0275 instead of 0.00056 at the setting above with a grid
  of 1e-3). The grid is refined until it is at most :data:`PLD_RELATIVE_GRID` times the epsilon.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import groupby
from operator import itemgetter

from ..core.validation import check_choice
from .validation import check_clip, check_delta, check_epsilon, check_positive_int

__all__ = [
    "SAMPLINGS",
    "RDP_ORDERS",
    "GaussianSteps",
    "accountant_for",
    "certified_epsilon",
    "composed_certified_epsilon",
    "calibrate_sigma",
]

SAMPLINGS = ("uniform", "poisson")
#: Coarsest PLD grid (dp_accounting's default is 1e-4); :data:`PLD_RELATIVE_GRID` refines it for small epsilons.
PLD_DISCRETIZATION = 1e-3
#: The PLD grid is refined until it is at most this fraction of the epsilon it gives (a grid of 2e-5 at
#: epsilon 0.1, 1e-7 at epsilon 5e-4), so pessimistic rounding costs at most about 0.5%.
PLD_RELATIVE_GRID = 2e-4
#: Finest PLD grid used (below it dp_accounting's truncation error, not the grid, dominates).
PLD_MIN_DISCRETIZATION = 1e-8
#: :func:`calibrate_sigma` never goes below this noise multiplier (the PLD of a Gaussian with less noise
#: needs gigabytes); a target that would allow less noise gets this much (still certified).
MIN_NOISE_MULTIPLIER = 0.25
#: First RDP orders tried: fractional below 12 (the best orders of large epsilons), integers above, then a
#: geometric grid of ratio 2^(1/4) up to 4,096 that holds 256, where dp_accounting's bound changes form
#: (:data:`RDP_EXACT_MAX_ORDER`, see the module doc).
RDP_ORDERS = (1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56,
              64, 76, 90, 108, 128, 152, 181, 215, 256, 304, 362, 431, 512, 609, 724, 861, 1024, 1218, 1448,
              1722, 2048, 2435, 2896, 3444, 4096)
#: Largest order of dp_accounting's exact bound for sampling without replacement (its ``max_alpha``).
RDP_EXACT_MAX_ORDER = 256
#: Largest RDP order the search extends to (epsilons far below 1e-4 at small deltas).
RDP_MAX_ORDER = 2**20
_ORDER_RATIO = 2**0.25
_REFINE_POINTS = 7
#: Refinement stops at this order spacing below order 16 (fractional orders) and at integers above.
_FRACTIONAL_STEP = 0.01


def accountant_for(sampling: str) -> str:
    """The dp_accounting accountant that covers ``sampling`` under replace-one adjacency:
    ``"rdp"`` for ``"uniform"`` (sampling without replacement), ``"pld"`` for ``"poisson"``."""
    return "rdp" if check_choice("sampling", sampling, SAMPLINGS) == "uniform" else "pld"


@dataclass(frozen=True)
class GaussianSteps:
    """One agent's private step: a subsampled Gaussian mechanism on a clipped mean gradient.

    Parameters
    ----------
    sigma : float
        Noise standard deviation per coordinate, added to the mean of the batch (> 0, finite).
    clip : float
        L2 bound of one clipped per-sample gradient (> 0). Coordinate clipping at G/sqrt(d) and
        L2 clipping at G both give ``clip = G``.
    batch_size : int
        b: records per step (uniform) or the expected batch size and divisor (poisson), >= 1.
    dataset_size : int
        q: the agent's local records, >= b.
    sampling : str
        ``"uniform"`` (default, the paper's uniform draw without replacement) or ``"poisson"``.
    """

    sigma: float
    clip: float
    batch_size: int
    dataset_size: int
    sampling: str = "uniform"

    def __post_init__(self) -> None:
        check_clip(self.sigma, name="sigma")
        check_clip(self.clip, name="clip")
        b = check_positive_int(self.batch_size, "batch_size")
        q = check_positive_int(self.dataset_size, "dataset_size")
        accountant_for(self.sampling)
        if b > q:
            raise ValueError(
                f"batch_size={b} exceeds the local dataset size q={q}: the sampling rate b/q must be <= 1"
            )

    @property
    def accountant(self) -> str:
        """``"rdp"`` or ``"pld"`` (see :func:`accountant_for`)."""
        return accountant_for(self.sampling)

    @property
    def noise_multiplier(self) -> float:
        """Noise std over the sensitivity unit of the accountant's event (see the module doc)."""
        b = int(self.batch_size)
        if self.sampling == "uniform":
            return float(self.sigma) * b / (2.0 * float(self.clip))
        return float(self.sigma) * b / float(self.clip)

    def event(self, steps: int):
        """The ``dp_accounting`` event of ``steps`` compositions of this step."""
        steps = check_positive_int(steps, "steps")
        return _composed_event([(self.noise_multiplier, self.batch_size, self.dataset_size, steps)], self.sampling)

    def epsilon(self, steps: int, delta: float) -> float:
        """Certified epsilon after ``steps`` private steps at ``delta``."""
        return certified_epsilon(self, steps, delta)


def _composed_event(parts, sampling: str | None):
    """dp_accounting's event of ``n`` compositions of each Gaussian step ``(noise_multiplier, b, q, n)`` of
    ``parts``, a batch of b of q records drawn by ``sampling``: ``"uniform"`` (without replacement),
    ``"poisson"`` or None (every record, no amplification)."""
    import dp_accounting

    def one(z, b, q):
        gauss = dp_accounting.GaussianDpEvent(float(z))
        if sampling == "uniform":
            return dp_accounting.SampledWithoutReplacementDpEvent(int(q), int(b), gauss)
        if sampling == "poisson":
            return dp_accounting.PoissonSampledDpEvent(int(b) / int(q), gauss)
        return gauss

    events = [dp_accounting.SelfComposedDpEvent(one(z, b, q), n) for z, b, q, n in parts]
    return events[0] if len(events) == 1 else dp_accounting.ComposedDpEvent(events)


def _tightest(event, delta: float, accountant: str, relation=None) -> tuple[float, float | None]:
    """(epsilon, RDP order or None) of ``event`` at ``delta``: :func:`_rdp_epsilon` or :func:`_pld_epsilon`."""
    if accountant == "rdp":
        return _rdp_epsilon(event, delta, relation)
    return _pld_epsilon(event, delta, relation), None


def _rdp_at(event, delta: float, orders, relation=None) -> tuple[float, float]:
    """(epsilon, best order) of dp_accounting's RDP accountant over ``orders`` (replace-one by default).

    The same numbers as composing ``event`` into ``rdp.RdpAccountant(orders)``: the RDP of each elementary
    event at each order is dp_accounting's (:func:`_step_rdp`, computed once per event and order, since the
    bound of sampling without replacement costs O(order^2) up to order 256), summed over the composition as
    the accountant does, and turned into epsilon by its ``compute_epsilon``.
    """
    from dp_accounting import NeighboringRelation
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    rel = relation or NeighboringRelation.REPLACE_ONE
    leaves = _leaves(event, 1)
    vec = [sum(n * _step_rdp(leaf, float(o), rel) for leaf, n in leaves) for o in orders]
    eps, order = compute_epsilon([float(o) for o in orders], vec, delta)
    return float(eps), float(order)


def _leaves(event, count: int) -> list:
    """``[(elementary event, times composed)]`` of a composition of dp_accounting events."""
    import dp_accounting

    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return _leaves(event.event, count * int(event.count))
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return [leaf for e in event.events for leaf in _leaves(e, count)]
    return [(event, count)]


@lru_cache(maxsize=1 << 16)
def _step_rdp(event, order: float, relation) -> float:
    """dp_accounting's RDP of one elementary ``event`` at ``order``."""
    from dp_accounting import rdp

    acc = rdp.RdpAccountant(orders=[order], neighboring_relation=relation)
    acc.compose(event)
    return float(acc.rdp[0])


def _rdp_epsilon(event, delta: float, relation=None) -> tuple[float, float]:
    """(epsilon, order): the smallest epsilon of the RDP accountant over an order set searched around its
    optimum, and the order that gives it.

    Every order gives a valid bound, so the minimum over all orders tried is certified: it is the
    accountant's epsilon on the union of the orders. dp_accounting's bound for sampling without
    replacement changes form above :data:`RDP_EXACT_MAX_ORDER`, and each side has its own optimum (the
    looser form can still win, e.g. near order 540 with a cliff at 600), so each side is searched on its
    own: the orders of :data:`RDP_ORDERS` on that side (the upper side extended geometrically while its
    best order is the largest one), then the interval between the best order's neighbours is cut into
    :data:`_REFINE_POINTS` + 1 pieces around the best point, repeatedly, down to integer orders (0.01 below
    order 16).
    """
    low = [float(o) for o in RDP_ORDERS if o <= RDP_EXACT_MAX_ORDER]
    high = [float(o) for o in RDP_ORDERS if o > RDP_EXACT_MAX_ORDER]
    best, opt = _rdp_at(event, delta, low, relation)
    best, opt = _refine_order(event, delta, relation, low, best, opt, 1.0, float(RDP_EXACT_MAX_ORDER))
    up, up_opt = _rdp_at(event, delta, high, relation)
    top = high[-1]
    while up_opt >= high[-1] and top < RDP_MAX_ORDER:  # the best order is the largest tried: go higher
        new = []
        while len(new) < 4 and top < RDP_MAX_ORDER:
            top = min(float(round(top * _ORDER_RATIO)), float(RDP_MAX_ORDER))
            new.append(top)
        eps, order = _rdp_at(event, delta, new, relation)
        high.extend(new)
        if not eps < up:
            break
        up, up_opt = eps, order
    up, up_opt = _refine_order(event, delta, relation, high, up, up_opt, RDP_EXACT_MAX_ORDER + 1.0,
                               up_opt * _ORDER_RATIO)
    return (best, opt) if best <= up else (up, up_opt)


def _refine_order(event, delta, relation, orders, best, opt, lo_bound, hi_bound) -> tuple[float, float]:
    """Refine the best order ``opt`` of ``orders`` (epsilon ``best``) between its neighbours, within
    [``lo_bound``, ``hi_bound``]."""
    orders = sorted(orders)
    i = orders.index(opt)
    lo = orders[i - 1] if i > 0 else lo_bound
    hi = orders[i + 1] if i + 1 < len(orders) else hi_bound
    tried = set(orders)
    while True:
        n = _REFINE_POINTS + 1
        if hi <= 16:  # fractional orders matter here
            fine = [lo + (hi - lo) * j / n for j in range(1, n)]
            step = _FRACTIONAL_STEP
        else:  # integer orders (dp_accounting interpolates between integers above 1 anyway)
            fine = [float(round(lo + (hi - lo) * j / n)) for j in range(1, n)]
            step = 1.0
        fine = sorted({o for o in fine if o > 1.0} - tried)
        if not fine:
            return best, opt
        tried.update(fine)
        eps, order = _rdp_at(event, delta, fine, relation)
        if eps < best:
            best, opt = eps, order
        if hi - lo <= 2 * step:
            return best, opt
        grid = sorted(o for o in tried | {lo, hi} if lo <= o <= hi)
        j = grid.index(opt)
        lo, hi = grid[max(j - 1, 0)], grid[min(j + 1, len(grid) - 1)]


def _pld_at(event, delta: float, grid: float, relation=None) -> float:
    from dp_accounting import NeighboringRelation, pld

    acc = pld.PLDAccountant(neighboring_relation=relation or NeighboringRelation.REPLACE_ONE,
                            value_discretization_interval=grid)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def _pld_epsilon(event, delta: float, relation=None) -> float:
    """Pessimistic PLD epsilon on a grid refined to :data:`PLD_RELATIVE_GRID` times the epsilon
    (replace-one by default)."""
    grid = PLD_DISCRETIZATION
    best = _pld_at(event, delta, grid, relation)
    while True:
        wanted = max(best * PLD_RELATIVE_GRID, PLD_MIN_DISCRETIZATION)
        if grid <= 2.0 * wanted:
            return best
        grid = wanted
        best = min(best, _pld_at(event, delta, grid, relation))


def certified_epsilon(mechanism: GaussianSteps, steps: int, delta: float) -> float:
    """Epsilon that dp_accounting certifies for ``steps`` compositions of ``mechanism`` at ``delta``.

    ``steps = 0`` gives 0 (nothing released). Uses the accountant of the mechanism's sampling
    scheme (RDP for uniform, PLD for Poisson), replace-one adjacency.
    """
    return composed_certified_epsilon([(mechanism, steps)], delta)


@lru_cache(maxsize=4096)
def _certified(mechanism: GaussianSteps, steps: int, delta: float) -> float:
    return _tightest(mechanism.event(steps), delta, mechanism.accountant)[0]


def composed_certified_epsilon(parts: Sequence[tuple[GaussianSteps, int]], delta: float) -> float:
    """Epsilon that dp_accounting certifies at ``delta`` for ``steps`` compositions of each mechanism of
    ``parts`` (``[(mechanism, steps), ...]``, e.g. the rounds run before and after a change of noise or
    of record count), with the same tightness as :func:`certified_epsilon` (which it equals for one
    mechanism). Every mechanism must use the same accountant (same sampling scheme).
    """
    delta = check_delta(delta, name="delta")
    ran = []
    for mech, steps in parts:
        if not isinstance(mech, GaussianSteps):
            raise TypeError(f"parts must hold (GaussianSteps, steps) pairs, got {type(mech).__name__}")
        if int(steps):
            ran.append((mech, check_positive_int(steps, "steps")))
    merged = [(mech, sum(n for _, n in run)) for mech, run in groupby(ran, key=itemgetter(0))]
    if not merged:
        return 0.0
    if len(merged) == 1:
        return _certified(merged[0][0], merged[0][1], float(delta))
    kinds = {m.accountant for m, _ in merged}
    if len(kinds) != 1:
        raise ValueError(f"cannot compose mechanisms of different accountants {sorted(kinds)} (sampling schemes "
                         f"{sorted({m.sampling for m, _ in merged})})")
    event = _composed_event([(m.noise_multiplier, m.batch_size, m.dataset_size, n) for m, n in merged],
                           merged[0][0].sampling)
    return _tightest(event, float(delta), kinds.pop())[0]


def calibrate_sigma(
    epsilon: float,
    delta: float,
    steps: int,
    clip: float,
    batch_size: int,
    dataset_size: int,
    sampling: str = "uniform",
    rel_tol: float = 1e-4,
) -> float:
    """Smallest noise std (to ``rel_tol``) for which :func:`certified_epsilon` <= ``epsilon`` at ``delta``.

    Parameters
    ----------
    epsilon : float
        Target epsilon (> 0, finite).
    delta : float
        Target delta in (0, 1).
    steps : int
        Number of private steps to cover (>= 1): the number of rounds in which the agent may be
        active (no credit for the activation probability, see the module doc).
    clip, batch_size, dataset_size, sampling
        As :class:`GaussianSteps`.
    rel_tol : float
        Relative precision of the search (the returned sigma is always on the certified side): a
        bracket, then regula falsi on log(epsilon) against log(sigma) (Illinois rule), about half the
        accountant evaluations of bisection. The noise multiplier never goes below
        :data:`MIN_NOISE_MULTIPLIER`.

    Returns
    -------
    float
        sigma with ``certified_epsilon(GaussianSteps(sigma, ...), steps, delta) <= epsilon``.
    """
    eps = check_epsilon(epsilon, upper=None)  # finite
    delta = check_delta(delta, name="delta")
    steps = check_positive_int(steps, "steps")

    unit = GaussianSteps(1.0, clip, batch_size, dataset_size, sampling).noise_multiplier  # z per unit sigma

    def eps_at(z: float) -> float:
        return certified_epsilon(GaussianSteps(z / unit, clip, batch_size, dataset_size, sampling), steps, delta)

    hi = 1.0
    e_hi = eps_at(hi)
    while e_hi > eps:
        hi *= 4.0
        if hi > 1e6:
            raise ValueError(f"no noise multiplier up to 1e6 reaches epsilon={eps} at delta={delta} over {steps} steps")
        e_hi = eps_at(hi)
    lo = hi / 4.0
    e_lo = eps_at(lo)
    while e_lo <= eps:
        if lo <= MIN_NOISE_MULTIPLIER:  # the accountants' cost explodes below; more noise is still certified
            return float(lo / unit)
        hi, e_hi = lo, e_lo
        lo = max(hi / 4.0, MIN_NOISE_MULTIPLIER)
        e_lo = eps_at(lo)
    # [lo, hi] brackets the smallest certified multiplier: eps_at(lo) > eps >= eps_at(hi). Find it by
    # regula falsi on log(epsilon / target) against log(z) with the Illinois rule (the retained end's value
    # is halved when the same end moves twice), which keeps both ends moving; bisection if a value is not
    # finite.
    x_lo, x_hi = math.log(lo), math.log(hi)
    f_lo = math.log(e_lo / eps) if math.isfinite(e_lo) else math.inf
    f_hi = math.log(e_hi / eps) if e_hi > 0 else -math.inf
    margin = 0.25 * math.log1p(rel_tol)
    moved = 0
    while (hi - lo) > rel_tol * hi:
        if math.isfinite(f_lo) and math.isfinite(f_hi) and f_lo > f_hi:
            x = (x_lo * f_hi - x_hi * f_lo) / (f_hi - f_lo)
        else:
            x = 0.5 * (x_lo + x_hi)
        x = min(max(x, x_lo + margin), x_hi - margin)
        e = eps_at(math.exp(x))
        if e <= eps:
            x_hi, hi, f_hi = x, math.exp(x), (math.log(e / eps) if e > 0 else -math.inf)
            if moved == -1:
                f_lo *= 0.5
            moved = -1
        else:
            x_lo, lo, f_lo = x, math.exp(x), (math.log(e / eps) if math.isfinite(e) else math.inf)
            if moved == 1:
                f_hi *= 0.5
            moved = 1
    return float(hi / unit)
