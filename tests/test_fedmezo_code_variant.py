"""FedMeZO's ``variant="code"`` follows the official code on identical inputs (issue 21).

``official_mezo_step`` below restates, operation by operation, the MeZO step of the official FedMeZO
code (alibaba/FederatedScope, branch FedMeZO, ``federatedscope/llm/trainer/mezo_trainer.py``:
``zo_step``, ``zo_perturb_parameters`` and ``_hook_on_batch_backward``): the global torch RNG seeded
with the step's seed, ``z = torch.normal(0, 1)`` in each parameter's dtype, ``param.data = param.data
+ s * z * eps`` for s = 1, -2, 1, the projected gradient ``((L+ - L-) / (2 eps)).item()`` on the loss
tensors, and ``param.data - lr * (g z + wd param.data)`` with weight decay skipped for names containing
``bias``, ``layer_norm`` or ``layernorm`` as written. The official precision option
(``is_enable_half: True``) is ``model.half()``: the whole model in fp16.

Half precision runs on this machine's CPU (torch's CPU kernels cover every op of the LLaMA forward
in fp16), so the comparison is on CPU.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from flwr_strategies.clients.fedmezo import MeZO
from flwr_strategies.fedmezo.engine import decays
from flwr_strategies.fedmezo.zseed import derive_seed

KEY = (3, 1, 0)  # (run_seed, server_round, partition_id) of the per-step seeds


def official_mezo_step(model: nn.Module, loss_fn, seed: int, lr: float, eps: float, wd: float) -> None:
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]

    def perturb(scaling_factor):
        torch.manual_seed(seed)
        for _, param in named:
            z = torch.normal(mean=0, std=1, size=param.data.size(), device=param.data.device, dtype=param.data.dtype)
            param.data = param.data + scaling_factor * z * eps

    model.eval()
    with torch.inference_mode():
        perturb(1)
        loss1 = loss_fn().detach()
        perturb(-2)
        loss2 = loss_fn().detach()
        projected_grad = ((loss1 - loss2) / (2 * eps)).item()
        perturb(1)
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in named:
            z = torch.normal(mean=0, std=1, size=param.data.size(), device=param.data.device, dtype=param.data.dtype)
            if "bias" not in name and "layer_norm" not in name and "layernorm" not in name:
                param.data = param.data - lr * (projected_grad * z + wd * param.data)
            else:
                param.data = param.data - lr * (projected_grad * z)


def _ours(model, *, variant, wd, lr, eps, **kw):
    return MeZO(model, lr=lr, mu=eps, weight_decay=wd, seed=KEY, variant=variant, **kw)


def _max_diff(a: nn.Module, b: nn.Module) -> float:
    return max(float((p.double() - q.double()).abs().max()) for (_, p), (_, q) in
               zip(a.named_parameters(), b.named_parameters()))


# ------------------------------------------------------------------ weight-decay name match
class _WithLayerNorm(nn.Module):
    """Parameters named like a transformers model: ``dense.*`` and ``LayerNorm.*``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.dense = nn.Linear(6, 6)
        self.LayerNorm = nn.LayerNorm(6)
        with torch.no_grad():
            self.LayerNorm.weight.mul_(2.0)

    def forward(self, x):
        return self.LayerNorm(self.dense(x))


def test_decay_name_match_is_case_sensitive_only_under_the_code_variant():
    assert not decays("LayerNorm.weight") and decays("LayerNorm.weight", "code")
    for name in ("dense.bias", "model.layer_norm.weight", "h.0.layernorm.weight"):
        assert not decays(name) and not decays(name, "code")
    assert decays("dense.weight") and decays("dense.weight", "code")


def test_one_step_with_weight_decay_equals_the_official_update():
    x, y = torch.randn(5, 6, generator=torch.Generator().manual_seed(1)), torch.randn(5, 6)
    lr, eps, wd = 0.5, 1e-3, 0.1
    ref, code, paper = _WithLayerNorm(), _WithLayerNorm(), _WithLayerNorm()
    loss = lambda m: (lambda: ((m(x) - y) ** 2).mean())  # noqa: E731
    official_mezo_step(ref, loss(ref), derive_seed(*KEY, 0), lr, eps, wd)
    _ours(code, variant="code", wd=wd, lr=lr, eps=eps, z_device="param", restore_mode="regenerate").step(loss(code))
    _ours(paper, variant="paper", wd=wd, lr=lr, eps=eps, z_device="param", restore_mode="regenerate").step(loss(paper))
    # the code variant is the official update, bit for bit
    assert all(torch.equal(p, q) for p, q in zip(ref.parameters(), code.parameters()))
    # the paper variant skips the decay of LayerNorm.weight (case-insensitive), which the official code decays
    gap = (paper.LayerNorm.weight - ref.LayerNorm.weight).abs().max().item()
    assert gap == pytest.approx(lr * wd * 2.0, rel=1e-3)  # LayerNorm.weight was 2.0: lr * wd * 2.0 apart
    assert torch.allclose(paper.dense.weight, ref.dense.weight, atol=1e-6)


# ------------------------------------------------------------------ the whole model in half precision
@pytest.fixture(scope="module")
def tiny_lm():
    from flwr_strategies.simulations.lm.model import apply_lora, ensure_tiny_base, load_causal_lm

    base, tok = load_causal_lm(ensure_tiny_base(), dtype=torch.float32)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = apply_lora(base, r=8, alpha=16, dropout=0.05, targets=("q_proj", "v_proj"))
        with torch.no_grad():  # LoRA B starts at zero; give it values so every adapter moves the output
            for n, p in model.named_parameters():
                if p.requires_grad:
                    p.normal_(0, 0.05)
    ids = torch.tensor([list(tok("Write a short poem about the sea.")["input_ids"])] * 2)
    return model, ids


def _half(model: nn.Module) -> nn.Module:
    return copy.deepcopy(model).half()  # the official is_enable_half: model.half()


def _loss(model, ids):
    return lambda: model(input_ids=ids, labels=ids).loss


def test_ten_steps_of_the_whole_half_model_equal_the_official_code(tiny_lm):
    model, ids = tiny_lm
    lr, eps, steps = 2e-3, 1e-3, 10
    ref, code = _half(model), _half(model)
    assert all(p.dtype == torch.float16 for p in code.parameters())
    opt = _ours(code, variant="code", wd=0.0, lr=lr, eps=eps, z_device="param", restore_mode="regenerate")
    for k in range(steps):
        official_mezo_step(ref, _loss(ref, ids), derive_seed(*KEY, k), lr, eps, 0.0)
        opt.step(_loss(code, ids))
    assert _max_diff(ref, code) == 0.0
    moved = max(float((p.double() - q.double()).abs().max()) for p, q in zip(model.parameters(), code.parameters()))
    assert moved > 1e-3  # the adapters did move: the equality is not two untouched models

    # fp16 adapters over an fp32 base (the former "official precision" option) drift away from it
    mixed = copy.deepcopy(model)
    for n, p in mixed.named_parameters():
        if p.requires_grad:
            p.data = p.data.half()
    mixed_opt = _ours(mixed, variant="code", wd=0.0, lr=lr, eps=eps, z_device="param", restore_mode="regenerate")
    for _ in range(steps):
        mixed_opt.step(lambda: mixed(input_ids=ids, labels=ids).loss)
    drift = max(float((p.double() - q.double()).abs().max()) for (n, p), (_, q) in
                zip(ref.named_parameters(), mixed.named_parameters()) if p.requires_grad)
    assert drift > 1e-3, drift
