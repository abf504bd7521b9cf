"""The causal-LM path: tokenizer, cached tiny pretrained base loaded like a real checkpoint, LoRA,
model-level directional derivative (T8), frozen base (T12), NaN guard on a real batch (T14),
data splits (T17) and bad-input errors."""

import hashlib
import json
import shutil

import numpy as np
import pytest
import torch

from flwr_strategies.fedmezo import MeZOEngine
from flwr_strategies.fedmezo.local import mezo_local_train
from flwr_strategies.simulations.lm.data import (CATEGORIES, collate, generate_instructions, load_instruction_file,
                                 split_clients, tokenize_records)
from flwr_strategies.simulations.lm.model import apply_lora, ensure_tiny_base, load_causal_lm
from flwr_strategies.simulations.lm.task import evaluate_lm
from flwr_strategies.simulations.lm.tokenizer import build_byte_tokenizer


@pytest.fixture(scope="module")
def base_dir():
    return ensure_tiny_base()


def _lora(base_dir, seed=0):
    torch.manual_seed(seed)
    model, tok = load_causal_lm(base_dir)
    return apply_lora(model, r=8, alpha=16), tok


def test_byte_tokenizer_roundtrip(tmp_path):
    tok = build_byte_tokenizer()
    s = "Héllo\n### Response: 42"
    ids = tok(s, add_special_tokens=False)["input_ids"]
    assert ids == list(s.encode("utf-8"))
    assert tok.decode(ids) == s
    assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id) == (256, 257, 258)


def test_tiny_base_is_pretrained_and_loads_like_a_checkpoint(base_dir):
    model, tok = load_causal_lm(base_dir)
    assert model.config.model_type == "llama"
    assert sum(p.numel() for p in model.parameters()) == 115_520
    test = tokenize_records(generate_instructions(40, seed=99), tok)
    loss, _ = evaluate_lm(model, test)  # mean per-example response loss
    # a random byte model sits near ln(260) = 5.56; the pretrained base is far below
    assert loss < 0.8 * np.log(260)
    peft_model = apply_lora(model)
    names = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert len(names) == 8 and all("lora_" in n and ("q_proj" in n or "v_proj" in n) for n in names)
    assert sum(p.numel() for p in peft_model.parameters() if p.requires_grad) == 4096


def test_model_dir_errors(tmp_path, base_dir):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_causal_lm(tmp_path / "nope")
    d = tmp_path / "noweights"
    shutil.copytree(base_dir, d)
    for f in d.glob("*.safetensors"):
        f.unlink()
    with pytest.raises(FileNotFoundError, match="no model weights"):
        load_causal_lm(d)
    d2 = tmp_path / "notok"
    shutil.copytree(base_dir, d2)
    (d2 / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError, match="no tokenizer"):
        load_causal_lm(d2)


def test_lora_targets_matching_nothing(base_dir):
    model, _ = load_causal_lm(base_dir)
    with pytest.raises(ValueError, match=r"LoRA targets \['query_key_value'\] match no module"):
        apply_lora(model, targets=("query_key_value",))


def test_directional_derivative_matches_autograd(base_dir):
    model, tok = _lora(base_dir)
    model = model.double()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.02)
    data = tokenize_records(generate_instructions(4, seed=5), tok)
    batch = collate(data, [0, 1], tok.pad_token_id)
    model.eval()
    eng = MeZOEngine(model, mu=1e-3)
    params = eng.tensors
    loss = model(**batch).loss
    grads = torch.autograd.grad(loss, params)
    from flwr_strategies.fedmezo import z_like
    zs = z_like(params, 77)
    ref = float(sum((z * gr).sum() for z, gr in zip(zs, grads)))
    res = eng.step(lambda: model(**batch).loss, lr=1e-9, seed=77)
    assert abs(res.g - ref) <= 1e-2 * abs(ref)


def _digest(model, lora):
    h = hashlib.sha256()
    for n, p in model.named_parameters():
        if ("lora_" in n) == lora:
            h.update(n.encode()); h.update(p.detach().numpy().tobytes())
    return h.hexdigest()


def test_frozen_base_and_nan_guard(base_dir):
    m1, tok = _lora(base_dir, seed=0)
    m2, _ = _lora(base_dir, seed=1)
    assert _digest(m1, False) == _digest(m2, False)
    data = tokenize_records(generate_instructions(12, seed=6), tok)
    lora0 = _digest(m1, True)
    eng = MeZOEngine(m1, mu=1e-3)
    out = mezo_local_train(eng, lambda idx: m1(**collate(data, idx, tok.pad_token_id)).loss, len(data),
                           lr=1e-3, steps=3, batch_size=1, run_seed=0, server_round=1, partition_id=0)
    assert np.isfinite(out["train_loss"]) and out["n_skipped"] == 0
    assert _digest(m1, False) == _digest(m2, False)
    assert _digest(m1, True) != lora0
    # all-masked labels -> NaN loss -> skipped, parameters bit-identical
    before = [p.detach().clone() for p in eng.tensors]
    short = tokenize_records(generate_instructions(2, seed=6), tok, max_len=20)
    assert all((l == -100).all() for l in short.labels)
    res = eng.step(lambda: m1(**collate(short, [0], tok.pad_token_id)).loss, lr=1e-3, seed=3)
    assert res.skipped and eng.n_skipped == 1
    assert all(torch.equal(a, b) for a, b in zip(before, eng.tensors))


def test_splits():
    recs = generate_instructions(400, seed=0)
    cats = [r["category"] for r in recs]
    iid = split_clients(cats, 3, "iid", seed=1)
    sizes = [len(p) for p in iid]
    assert max(sizes) - min(sizes) <= 1 and sorted(np.concatenate(iid).tolist()) == list(range(400))
    meta = split_clients(cats, 3, "meta", seed=1)
    owner = {}
    for k, p in enumerate(meta):
        for i in p:
            assert owner.setdefault(cats[i], k) == k
    assert set(owner) == set(CATEGORIES)
    assert sorted(np.concatenate(meta).tolist()) == list(range(400))
    legacy = split_clients(cats, 3, "meta", seed=1, meta_legacy=True)
    assert len({cats[i] for p in legacy for i in p}) == 3
    lda = split_clients(cats, 3, "lda", seed=1, alpha=0.5)
    assert all(len(p) > 0 for p in lda)
    assert sorted(np.concatenate(lda).tolist()) == list(range(400))
    with pytest.raises(ValueError, match="unknown LM split"):
        split_clients(cats, 3, "bogus", seed=0)


def test_dolly_and_alpaca_loaders(tmp_path):
    dolly = tmp_path / "dolly.jsonl"
    dolly.write_text("\n".join(json.dumps({"instruction": f"q{i}", "context": "c" if i % 2 else "",
                                           "response": f"a{i}", "category": "open_qa"}) for i in range(3)))
    recs = load_instruction_file(dolly)
    assert recs[1] == {"instruction": "q1", "input": "c", "output": "a1", "category": "open_qa"}
    alp = tmp_path / "alpaca.json"
    alp.write_text(json.dumps([{"instruction": "x", "input": "", "output": "y"}]))
    assert load_instruction_file(alp)[0]["category"] == "none"
    with pytest.raises(FileNotFoundError):
        load_instruction_file(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "no instruction"}))
    with pytest.raises(ValueError, match="instruction"):
        load_instruction_file(bad)
