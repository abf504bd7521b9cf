"""FedMUD's wire protocol without Flower: replicas stay bit-identical, only the payload (plus a
catch-up for clients that missed merges) is sent, and the effective model is unchanged by resets."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedmud_testmodels import tiny_net
from flwr_strategies.core.messages import Reply
from flwr_strategies.fedmud import FedMUDConfig, FedMUDServer
from flwr_strategies.fedmud.config import METHOD_CONFIGS as METHOD_OPTIONS
from flwr_strategies.fedmud.protocol import MUDClientCore

MUDOptions = FedMUDConfig


def _server(options, seed, num_partitions=4):
    torch.manual_seed(0)
    net = tiny_net()
    init = [v.numpy().copy() for v in net.state_dict().values()]
    return FedMUDServer(init, model=net, config=options, num_partitions=num_partitions, seed=seed), init


def _data(pid, n=24):
    g = torch.Generator().manual_seed(100 + pid)
    x = torch.randn(n, 2, 5, 5, generator=g)
    y = (x[:, 0].mean(dim=(1, 2)) > 0).long() + (x[:, 1].mean(dim=(1, 2)) > 0).long()
    return x, y


def _train(model, pid, rnd, steps=3, lr=0.05):
    x, y = _data(pid)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    g = torch.Generator().manual_seed(rnd * 1000 + pid)
    for _ in range(steps):
        idx = torch.randperm(len(y), generator=g)[:8]
        opt.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()


def _run(options, rounds, sample, num_clients=4, steps=3, check=None):
    server, _ = _server(options, 5, num_clients)
    states = {}
    sent = []
    for t in range(1, rounds + 1):
        replies = []
        for ins in server.configure_train(t, sample(t)):
            pid, arrays, cfg = ins.partition_id, ins.arrays, ins.config
            sent.append((t, pid, sum(a.nbytes for a in arrays), cfg))
            client = MUDClientCore.from_message_config(tiny_net(), cfg)
            stored = client.receive(arrays, cfg, states.get(pid))
            if check is not None:
                check(t, pid, server, client)
            if stored is not None:
                states[pid] = stored
            _train(client.dm.model, pid, t, steps)
            replies.append(Reply(pid, client.payload(), len(_data(pid)[1])))
        server.train_round(t, replies, sampled=sample(t), on_bad_reply="raise")
    return server, sent


def _check_replica(t, pid, server, client):
    for name, _ in server.dm.decompositions():
        assert torch.equal(server.dm.base(name), client.dm.base(name)), (t, pid, name)
    s_state, c_state = server.dm.model.state_dict(), client.dm.model.state_dict()
    for k in s_state:
        assert torch.equal(s_state[k], c_state[k]), (t, pid, k)


@pytest.mark.parametrize("method", ["fedmud_bkd_aad", "fedmud_mat", "fedmud_f"])
@pytest.mark.parametrize("s", [1, 2])
def test_replicas_identical_with_partial_participation(method, s):
    opts = METHOD_OPTIONS[method].with_overrides({"target_ratio": 0.5, "reset_interval": s})
    rng = np.random.default_rng(0)
    samples = {t: sorted(rng.choice(4, size=2, replace=False).tolist()) for t in range(1, 8)}
    server, sent = _run(opts, 7, lambda t: samples[t], check=_check_replica)
    assert server.merges == len([t for t in range(2, 8) if (t - 1) % s == 0])
    assert any(cfg["fedmud_catchup_seeds"] or cfg["fedmud_full_base"] for _, _, _, cfg in sent)


def test_full_participation_sends_only_payload():
    opts = METHOD_OPTIONS["fedmud_bkd_aad"].with_overrides({"target_ratio": 0.5})
    server, sent = _run(opts, 4, lambda t: [0, 1, 2, 3], check=_check_replica)
    payload_bytes = sum(a.nbytes for a in server.dm.get_payload())
    assert {b for _, _, b, _ in sent} == {payload_bytes}
    bn = 8  # running mean + var of the one BatchNorm2d(4)
    assert payload_bytes == 4 * (server.plan.p_payload + bn)


def test_reset_keeps_global_model():
    """The model a client starts training from equals the server's global model after the
    previous round, push or not (effective weights unchanged by merge + reset)."""
    opts = METHOD_OPTIONS["fedmud_bkd_aad"].with_overrides({"target_ratio": 0.5, "reset_interval": 2})
    server, _ = _server(opts, 1, 3)
    previous = server.global_arrays()
    stored = {}
    for t in range(1, 6):
        replies = []
        for ins in server.configure_train(t, [0, 1, 2]):
            pid = ins.partition_id
            client = MUDClientCore.from_message_config(tiny_net(), ins.config)
            stored[pid] = client.receive(ins.arrays, ins.config, stored.get(pid))
            eff = client.dm.effective_state_dict()
            for k, v in zip(eff, previous):
                assert np.array_equal(eff[k].numpy(), v), (t, k)
            _train(client.dm.model, pid, t)
            replies.append(Reply(pid, client.payload(), 10))
        server.train_round(t, replies, sampled=[0, 1, 2])
        previous = server.global_arrays()


def test_initial_global_model_is_seeded_base_plus_dense():
    opts = METHOD_OPTIONS["fedmud_bkd_aad"].with_overrides({"target_ratio": 0.5})
    server, init = _server(opts, 2)
    w = server.global_arrays()
    keys = list(tiny_net().state_dict())
    compressed = {lp.name + ".weight" for lp in server.plan.layers}
    for k, a, b in zip(keys, w, init):
        if k in compressed:
            assert a.std() == pytest.approx(0.01, rel=0.3)  # spec 4.3 Normal(0, 0.01)
        else:
            assert np.array_equal(a, b), k


def test_zero_base_methods_need_no_state():
    for method in ("fedlmt", "fedpara"):
        opts = METHOD_OPTIONS[method].with_overrides({"target_ratio": 0.5})
        server, sent = _run(opts, 3, lambda t: [0, 1], check=_check_replica)
        assert server.merge_log == [] and server.merges == 0
        for name, _ in server.dm.decompositions():
            assert torch.count_nonzero(server.dm.base(name)) == 0


def test_fedhm_aggregates_recovered_products():
    opts = METHOD_OPTIONS["fedhm"].with_overrides({"target_ratio": 0.5})
    server, _ = _server(opts, 3)
    keys = server.dm.payload_keys()
    results = []
    for ins, n in zip(server.configure_train(1, [0, 1]), (10, 30)):
        client = MUDClientCore.from_message_config(tiny_net(), ins.config)
        client.receive(ins.arrays, ins.config, None)
        _train(client.dm.model, ins.partition_id, 1)
        results.append((client.payload(), n))
    server.train_round(1, [Reply(p, a, n) for p, (a, n) in enumerate(results)], sampled=[0, 1])
    for name, deco in server.dm.decompositions():
        idx = [i for i, k in enumerate(keys) if k.startswith(name + ".parametrizations.")]
        want = sum(w * (r[0][idx[0]].astype(np.float64) @ r[0][idx[1]]) for w, r in zip((0.25, 0.75), results))
        assert np.allclose(server.full[name].reshape(want.shape), want, atol=1e-6)
    # next round: factors are the truncated SVD of the full weights
    server.configure_train(2, [0, 1])
    for name, deco in server.dm.decompositions():
        u, v = deco.left.detach().numpy(), deco.right.detach().numpy()
        full = server.full[name].reshape(deco.plan.m, deco.plan.n).astype(np.float64)
        s = np.linalg.svd(full, compute_uv=False)
        r = deco.plan.rank
        assert np.linalg.norm(full - u @ v) == pytest.approx(np.sqrt((s[r:] ** 2).sum()), rel=1e-3, abs=1e-6)


def test_options_validation():
    with pytest.raises(ValueError, match="target_ratio must be in"):
        MUDOptions(target_ratio=0)
    with pytest.raises(ValueError, match="reset_interval must be an integer >= 1"):
        MUDOptions(reset_interval=0)
    with pytest.raises(ValueError, match="base_std must be a finite number > 0"):
        MUDOptions(base_std=float("inf"))
    with pytest.raises(ValueError, match="init_scale must be"):
        MUDOptions(init_scale=-1)
    with pytest.raises(ValueError, match="weighting must be"):
        MUDOptions(weighting="x")


def test_merge_log_is_bounded_and_far_behind_clients_get_the_base():
    """Issue 15: the server keeps one integer per client and at most `log_capacity` merges (a longer
    catch-up would be larger than W_base itself); a client far behind receives W_base instead."""
    opts = METHOD_OPTIONS["fedmud_bkd_aad"].with_overrides({"target_ratio": 0.5})
    server, sent = _run(opts, 9, lambda t: [0, 1] if t in (1, 9) else [0], check=_check_replica)
    assert 1 <= len(server.merge_log) <= server.log_capacity
    assert server.confirmed == {0: server.merges, 1: server.merges}
    assert all(isinstance(v, int) for v in server.confirmed.values())
    last = {pid: cfg for t, pid, _, cfg in sent if t == 9}
    assert last[1]["fedmud_full_base"] and not last[0]["fedmud_full_base"]


def test_a_client_whose_reply_was_lost_skips_merges_it_already_holds():
    """Client 1 applies round 2's push but its reply is dropped: the server still thinks it is one merge
    behind and sends that merge again; the client skips it and stays bit-identical."""
    opts = METHOD_OPTIONS["fedmud_bkd_aad"].with_overrides({"target_ratio": 0.5, "reset_interval": 1})
    server, _ = _server(opts, 4, 2)
    states = {}
    for t in range(1, 5):
        replies = []
        for ins in server.configure_train(t, [0, 1]):
            if t == 3 and ins.partition_id == 1:  # the catch-up path, not a full base
                assert ins.config["fedmud_catchup_seeds"] and ins.config["fedmud_sync_from"] == 0
            client = MUDClientCore.from_message_config(tiny_net(), ins.config)
            states[ins.partition_id] = client.receive(ins.arrays, ins.config, states.get(ins.partition_id))
            _check_replica(t, ins.partition_id, server, client)
            _train(client.dm.model, ins.partition_id, t)
            if not (t == 2 and ins.partition_id == 1):  # lost after the client applied round 2's push
                replies.append(Reply(ins.partition_id, client.payload(), 10))
        server.train_round(t, replies, sampled=[0, 1])
    assert states[1][1] == server.merges == 3
