"""The amplified accountant speaks Flower's ``PrivacyAccountant`` (issue 26): every method of the Protocol,
Flower's own DP wrapper accepts it, its state round-trips, it agrees with dp_accounting's tightest value
for plain subsampled Gaussian mechanisms (Poisson and fixed-size sampling, which Flower's own accountant
refuses) to 1% and is never below, and DO-ADP composes into it per round and stops before passing
``max_epsilon``."""

import inspect
import json
import math
import warnings

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld, rdp
from flwr.serverapp import (
    GaussianPrivacyEvent,
    NeighboringRelation,
    PrivacyAccountant,
    PrivacyConfig,
    PrivacySpent,
    RdpAccountant,
    SamplingMethod,
)
from flwr.serverapp.exception import PrivacyBudgetExhausted

from flwr_strategies.doadp.config import DOADPConfig
from flwr_strategies.doadp.server import DOADPServer
from flwr_strategies.privacy import (
    AmplifiedAccountant,
    AmplifiedPrivacyConfig,
    GaussianSteps,
    doadp_event,
    privacy_config_for,
)

WOR, POISSON, NOAMP = SamplingMethod.WITHOUT_REPLACEMENT, SamplingMethod.POISSON, SamplingMethod.NO_AMPLIFICATION
R1, AR = NeighboringRelation.REPLACE_ONE, NeighboringRelation.ADD_OR_REMOVE_ONE
BELOW = 1e-5  # see tests/test_privacy_doadp_accountant.py
TIGHT = 1.01


def _cfg(sampling=WOR, relation=R1, population=1000, delta=1e-5, max_epsilon=None):
    cls = AmplifiedPrivacyConfig if (sampling, relation) == (POISSON, R1) else PrivacyConfig
    return cls(target_delta=delta, population_size=population, neighboring_relation=relation,
               sampling_method=sampling, max_epsilon=max_epsilon)


def _tightest(event, delta, relation):
    """dp_accounting's smallest certified epsilon, straight from its API: the RDP accountant at every
    order of a dense grid and every integer near its best on each side of order 256 (where the bound of
    sampling without replacement changes form), and the PLD accountant on grids down to 1e-4 of the
    epsilon, where it covers the event."""
    rel = getattr(dp_accounting.NeighboringRelation, relation.name)
    out = []
    try:
        orders = sorted(set(rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
                        | {float(round(16 * 1.1**j)) for j in range(72)} | {255.0, 256.0, 257.0})
        for side in ([o for o in orders if o <= 256], [o for o in orders if o > 256]):
            acc = rdp.RdpAccountant(orders=side, neighboring_relation=rel)
            acc.compose(event)
            eps, order = acc.get_epsilon_and_optimal_order(delta)
            near = [o for o in range(max(2, round(order / 1.12)), round(order * 1.12) + 1) if (o <= 256) == (order <= 256)]
            acc = rdp.RdpAccountant(orders=[float(o) for o in near], neighboring_relation=rel)
            acc.compose(event)
            out += [eps, acc.get_epsilon(delta)]
    except dp_accounting.UnsupportedEventError:  # Poisson under replace-one: PLD only
        pass
    if not isinstance(_innermost(event), dp_accounting.SampledWithoutReplacementDpEvent):
        grid = 1e-3
        while True:
            acc = pld.PLDAccountant(neighboring_relation=rel, value_discretization_interval=grid)
            acc.compose(event)
            out.append(acc.get_epsilon(delta))
            if grid <= 1e-4 * min(out) or grid <= 1e-8:
                break
            grid = max(grid / 10, 1e-4 * min(out), 1e-8)
    return min(out)


def _innermost(event):
    while isinstance(event, dp_accounting.SelfComposedDpEvent):
        event = event.event
    return event


def _dp_event(sampling, z, b, m, T):
    gauss = dp_accounting.GaussianDpEvent(z)
    if sampling is WOR:
        one = dp_accounting.SampledWithoutReplacementDpEvent(m, b, gauss)
    elif sampling is POISSON:
        one = dp_accounting.PoissonSampledDpEvent(b / m, gauss)
    else:
        one = gauss
    return dp_accounting.SelfComposedDpEvent(one, T)


def test_every_method_of_flowers_protocol():
    acc = AmplifiedAccountant(_cfg(max_epsilon=0.5))
    # every member of Flower's Protocol exists, with Flower's parameters (names, order, defaults)
    members = [n for n in vars(PrivacyAccountant) if not n.startswith("_")]
    assert set(members) >= {"config", "num_releases", "compose", "get_epsilon", "get_delta", "get_privacy_spent",
                            "would_exceed", "state_dict", "load_state_dict"}
    for name in members:
        theirs = vars(PrivacyAccountant)[name]
        if isinstance(theirs, property):
            assert isinstance(inspect.getattr_static(acc, name), property)
            continue
        ours = inspect.signature(getattr(AmplifiedAccountant, name)).parameters
        for pname, param in inspect.signature(theirs).parameters.items():
            assert pname in ours and ours[pname].default == param.default, (name, pname)
    assert acc.config.target_delta == 1e-5 and acc.num_releases == 0 and acc.get_epsilon(1e-5) == 0.0
    event = GaussianPrivacyEvent(noise_multiplier=2.0, sample_size=10, population_size=1000)
    assert acc.get_delta(1.0) == 0.0
    assert not acc.would_exceed(event, count=100)  # nothing composed yet, nothing changed by asking
    acc.compose(event)
    acc.compose(event, count=99)
    assert acc.num_releases == 100
    eps = acc.get_epsilon(1e-5)
    assert 0 < eps < 0.5
    spent = acc.get_privacy_spent()
    assert isinstance(spent, PrivacySpent) and spent.epsilon == eps and spent.delta == 1e-5
    assert spent.num_releases == 100 and spent.optimal_order > 1
    assert "subsampled Gaussian" in spent.accounting_method and "RDP" in spent.accounting_method
    assert acc.get_privacy_spent(1e-7).epsilon > eps
    d = acc.get_delta(eps)
    assert 0 < d and acc.get_delta(2 * eps) < d < acc.get_delta(eps / 2)
    assert not acc.would_exceed(event, count=1) and acc.would_exceed(event, max_epsilon=eps)
    assert acc.would_exceed(event, count=10_000) and acc.num_releases == 100
    with pytest.raises(ValueError, match="max_epsilon"):
        AmplifiedAccountant(_cfg()).would_exceed(event)
    with pytest.raises(ValueError, match="population_size"):
        acc.compose(GaussianPrivacyEvent(2.0, 10, 999))
    with pytest.raises(ValueError, match="count"):
        acc.compose(event, count=0)
    with pytest.raises(ValueError, match="delta"):
        acc.get_epsilon(1.0)
    assert acc.num_releases == 100


@pytest.mark.parametrize("sampling, relation", [(WOR, R1), (POISSON, AR), (POISSON, R1), (NOAMP, AR)])
def test_state_dict_round_trip(sampling, relation):
    acc = AmplifiedAccountant(_cfg(sampling, relation, max_epsilon=3.0), method="DO-ADP")
    acc.compose(GaussianPrivacyEvent(1.5, 20, 1000), 30, ran={"p": 0.8, "k_frac": 0.3})
    acc.compose(GaussianPrivacyEvent(3.0, 20, 1000), 10)
    state = json.loads(json.dumps(acc.state_dict()))  # JSON-serializable
    back = AmplifiedAccountant(_cfg(sampling, relation, max_epsilon=3.0), method="DO-ADP")
    back.load_state_dict(state)
    assert back.get_epsilon(1e-5) == acc.get_epsilon(1e-5) and back.num_releases == 40
    assert back.ledger() == acc.ledger()
    other = AmplifiedAccountant(_cfg(sampling, relation, max_epsilon=2.0), method="DO-ADP")
    with pytest.raises(ValueError, match="configuration"):
        other.load_state_dict(state)
    bad = json.loads(json.dumps(state))
    bad["compositions"][1]["count"] = 0
    with pytest.raises(ValueError, match="count"):
        back.load_state_dict(bad)
    assert back.num_releases == 40  # checked whole before anything changed


SUBSAMPLED = [  # sampling, relation, noise multiplier, sample size, population, releases, delta
    (POISSON, AR, 1.1, 256, 60000, 1000, 1e-5),  # DP-SGD on MNIST
    (POISSON, AR, 0.8, 10, 100, 50, 1e-5),  # cross-device FL: 10 of 100 clients a round
    (POISSON, AR, 4.0, 1, 20000, 120000, 1e-5),
    (WOR, R1, 1.1, 256, 60000, 1000, 1e-5),
    (WOR, R1, 0.8, 10, 100, 50, 1e-6),
    (WOR, R1, 5.0, 8, 1000, 1500, 1e-5),  # the best order is 256, where the bound changes form
    (POISSON, R1, 2.0, 16, 1000, 150, 1e-5),
    (NOAMP, AR, 10.0, 10, 10, 20, 1e-5),
]


@pytest.mark.parametrize("sampling, relation, z, b, m, T, delta", SUBSAMPLED)
def test_subsampled_gaussian_agrees_with_dp_accountings_tightest(sampling, relation, z, b, m, T, delta):
    acc = AmplifiedAccountant(_cfg(sampling, relation, population=m, delta=delta))
    acc.compose(GaussianPrivacyEvent(z, b, m), count=T)
    eps = acc.get_epsilon(delta)
    ref = _tightest(_dp_event(sampling, z, b, m, T), delta, relation)
    assert ref * (1 - BELOW) <= eps <= ref * TIGHT
    if sampling is not POISSON or relation is AR:  # Flower's own accountant, where it accepts the setting
        flower = RdpAccountant(_cfg(sampling, relation, population=m, delta=delta))
        flower.compose(GaussianPrivacyEvent(z, b, m), count=T)
        assert eps <= flower.get_epsilon(delta) * (1 + 1e-12)


def test_flowers_dp_wrapper_takes_it():
    from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg

    acc = AmplifiedAccountant(_cfg(NOAMP, AR, population=10, max_epsilon=1.0))
    # Flower's wrapper type-checks the accountant's configuration (no-amplification with FedAvg): it passes,
    # and the wrapper reads it as its own
    wrapper = DifferentialPrivacyServerSideFixedClipping(FedAvg(fraction_train=1.0), noise_multiplier=5.0,
                                                         clipping_norm=1.0, num_sampled_clients=2, accountant=acc)
    acc.compose(GaussianPrivacyEvent(5.0, 2, 10), count=3)
    assert wrapper.privacy_spent() == acc.get_privacy_spent() and wrapper.privacy_spent().num_releases == 3
    # ... and where Flower's own accountant refuses amplification, this one runs it
    with pytest.raises(ValueError, match="no-amplification"):
        DifferentialPrivacyServerSideFixedClipping(FedAvg(), noise_multiplier=5.0, clipping_norm=1.0,
                                                   num_sampled_clients=2,
                                                   accountant=AmplifiedAccountant(_cfg(POISSON, AR, population=10)))


def _core(accountant=None, T=20, **cfg):
    c = DOADPConfig(**{"epsilon": 1.0, "delta": 1e-5, "p": 0.8, "k_frac": 0.3, "calibration": "accountant", **cfg})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return DOADPServer([np.zeros(50, np.float32)], num_partitions=8, num_rounds=T, dataset_size=200, batch_size=8,
                           config=c, accountant=accountant)


def _run(core, rounds):
    for r in range(1, rounds + 1):
        core.configure_train(r, list(range(core.n)))
        core.train_round(r, [], sampled=[])


@pytest.mark.parametrize("sampling", ["uniform", "poisson"])
def test_doadp_composes_what_ran_into_it(sampling):
    core = _core(sampling=sampling)
    assert isinstance(core.accountant, AmplifiedAccountant)
    assert core.accountant.config == privacy_config_for(core.mechanism(), 1e-5)
    _run(core, 12)
    spent = core.accountant.get_privacy_spent()
    assert spent.num_releases == 12 and spent.delta == 1e-5
    assert spent.epsilon == core.guarantee(12)["dp_epsilon"]  # the number DO-ADP reports
    assert spent.epsilon == pytest.approx(GaussianSteps(core.sigma, 1.0, 8, 200, sampling).epsilon(12, 1e-5), rel=1e-12)
    assert spent.accounting_method.startswith("DO-ADP: dp-accounting") and "p=0.8, k_frac=0.3" in spent.accounting_method
    (event, count, ran), = core.accountant.ledger()
    assert event == doadp_event(core.mechanism()) and count == 12
    assert ran == {"p": 0.8, "k_frac": 0.3, "clip": 1.0, "sigma": core.sigma, "batch_size": 8.0, "dataset_size": 200.0}
    # a resumed run recomposes what its checkpoint ran
    again = _core(sampling=sampling)
    again.load_state_dict(core.state_dict())
    assert again.accountant.num_releases == 12 and again.accountant.get_epsilon(1e-5) == spent.epsilon


def test_doadp_stops_before_the_round_that_would_pass_max_epsilon():
    probe = _core()
    mech = probe.mechanism()
    need = mech.epsilon(20, 1e-5)
    limit = 0.6 * need  # below what 20 rounds need
    last = max(t for t in range(1, 21) if mech.epsilon(t, 1e-5) <= limit)
    acc = AmplifiedAccountant(privacy_config_for(mech, 1e-5, max_epsilon=limit), method="DO-ADP")
    core = _core(accountant=acc)
    with pytest.raises(PrivacyBudgetExhausted, match=f"round {last + 1} would exceed max_epsilon"):
        _run(core, 20)
    assert core.server_round == last and acc.num_releases == last
    assert acc.get_epsilon(1e-5) <= limit < mech.epsilon(last + 1, 1e-5)
    # the accountant's configuration must match what runs
    with pytest.raises(ValueError, match="population_size"):
        _core(accountant=AmplifiedAccountant(privacy_config_for(GaussianSteps(1.0, 1.0, 8, 300), 1e-5)))
    # Flower's own RdpAccountant (sampling without replacement, replace-one) is accepted too
    flower = RdpAccountant(privacy_config_for(mech, 1e-5, max_epsilon=limit))
    core = _core(accountant=flower)
    with pytest.raises(PrivacyBudgetExhausted):
        _run(core, 20)
    assert flower.num_releases <= last


def test_message_api_run_stops_before_passing_max_epsilon():
    """A Message-API run of :class:`flwr_strategies.doadp.serverapp.DOADP` through Flower's ``start()`` on the
    in-process grid (20 rounds planned, the project's digits clients) with a ``max_epsilon`` below what 20
    rounds need ends with Flower's ``PrivacyBudgetExhausted`` before the round that would pass it; the
    accountant the user passed holds what ran, read as Flower's."""
    from dataclasses import asdict

    from flwr.app import ArrayRecord

    from flwr_strategies.clients.app import numpy_client_app
    from flwr_strategies.doadp.serverapp import DOADP
    from flwr_strategies.simulations.experiment import ExperimentConfig, get_experiment
    from flwr_strategies.simulations.inprocess_grid import InProcessGrid

    cfg = ExperimentConfig(method="doadp", dataset="digits", num_clients=4, rounds=20, seed=0, lr=0.05,
                           local_steps=1, batch_size=8, model="logreg", progress=False,
                           params={"eval_every": 5, "k_frac": 0.3})
    exp = get_experiment(cfg)
    init = [a.copy() for a in exp.initial_parameters]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = exp.spec.message_strategy(exp.server_setup(), dict(exp.params)).build_core(init, 4)
    mech = ref.mechanism()
    limit = 0.6 * mech.epsilon(20, 1e-5)
    last = max(t for t in range(1, 21) if mech.epsilon(t, 1e-5) <= limit)
    acc = AmplifiedAccountant(privacy_config_for(mech, ref.config.delta, max_epsilon=limit), method="DO-ADP")
    strategy = DOADP(num_rounds=20, local_dataset_size=ref.q, lr=ref.alpha, batch_size=ref.batch_size,
                     accountant=acc, **asdict(ref.config))
    models: list = []

    def client_fn(context):
        if not models:
            models.append(exp.model_fn())
        return exp.build_client(context, models[0])

    grid = InProcessGrid(numpy_client_app(client_fn), cfg.num_clients)
    with pytest.raises(PrivacyBudgetExhausted, match=f"round {last + 1} would exceed max_epsilon={limit:g}"):
        strategy.start(grid=grid, initial_arrays=ArrayRecord(init), num_rounds=20)
    assert strategy.core.mechanism() == mech and strategy.accountant is acc
    assert strategy.privacy_spent() == acc.get_privacy_spent()
    assert acc.num_releases == last < 20 and acc.get_epsilon(1e-5) <= limit
    assert strategy.core.server_round == last
