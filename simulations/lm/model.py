"""Causal-LM loading (from a local checkpoint directory), the tiny pretrained default base model and
LoRA wrapping with peft.

The default base is a small LLaMA-architecture model (``LlamaConfig``: hidden 64, 2 layers, 4
heads, vocab 260 bytes+specials) given a short backprop pre-training on generated instruction text
(only 4 of the 8 task categories, from a different generator seed), saved with
``save_pretrained`` together with the byte-level tokenizer, cached under
``~/.cache/flwr_strategies/fedmezo`` (override with ``FLWR_STRATEGIES_CACHE``), and then loaded
through :func:`load_causal_lm` exactly like a real ``--set model_dir`` checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from .data import CATEGORIES, collate, generate_instructions, tokenize_records
from .tokenizer import BOS_ID, EOS_ID, PAD_ID, VOCAB_SIZE, build_byte_tokenizer

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")

TINY_CONFIG = dict(vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
                   pad_token_id=PAD_ID, eos_token_id=EOS_ID, bos_token_id=BOS_ID, tie_word_embeddings=False)
PRETRAIN = dict(steps=300, batch_size=8, lr=3e-3, n_examples=2000, data_seed=1234, base_seed=0, max_len=320)


def default_model_dir() -> Path:
    """Directory of the cached tiny pretrained base (built on first use, see :func:`ensure_tiny_base`):
    ``$FLWR_STRATEGIES_CACHE`` (default ``~/.cache/flwr_strategies``) ``/fedmezo/tiny-llama-KEY``, KEY a
    hash of :data:`TINY_CONFIG` and :data:`PRETRAIN`."""
    root = Path(os.environ.get("FLWR_STRATEGIES_CACHE", Path.home() / ".cache" / "flwr_strategies"))
    key = hashlib.sha256(json.dumps({"cfg": TINY_CONFIG, "pre": PRETRAIN, "v": 1}, sort_keys=True).encode()).hexdigest()
    return root / "fedmezo" / f"tiny-llama-{key[:12]}"


def build_tiny_llama(seed: int = 0) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**TINY_CONFIG))


def pretrain_tiny_base(out_dir: str | Path, *, verbose: bool = False) -> Path:
    """Backprop pre-training of the tiny base (AdamW) on 4 of the 8 generated categories; saves the
    model and tokenizer with ``save_pretrained`` into ``out_dir``."""
    p = PRETRAIN
    tok = build_byte_tokenizer()
    recs = generate_instructions(p["n_examples"], seed=p["data_seed"], categories=CATEGORIES[:4])
    data = tokenize_records(recs, tok, max_len=p["max_len"])
    with torch.random.fork_rng():
        model = build_tiny_llama(p["base_seed"])
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=p["lr"], weight_decay=0.0)
    gen = torch.Generator().manual_seed(p["base_seed"])
    t0 = time.time()
    for s in range(p["steps"]):
        idx = torch.randint(len(data), (p["batch_size"],), generator=gen)
        loss = model(**collate(data, idx, PAD_ID)).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if verbose and (s % 50 == 0 or s == p["steps"] - 1):
            print(f"pretrain step {s} loss {loss.item():.3f} ({time.time() - t0:.1f}s)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def ensure_tiny_base(verbose: bool = False) -> Path:
    """Path of the cached tiny pretrained base, pre-training it once if missing (atomic rename)."""
    d = default_model_dir()
    if (d / "config.json").exists() and any((d / f).exists() for f in WEIGHT_FILES):
        return d
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = d.parent / f".tmp-{os.getpid()}-{d.name}"
    pretrain_tiny_base(tmp, verbose=verbose)
    try:
        os.replace(tmp, d)
    except OSError:  # another process won the race
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return d


def check_model_dir(model_dir: str | Path) -> Path:
    """Raise a clear error unless ``model_dir`` holds a config, weights and a tokenizer."""
    d = Path(model_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"model folder {d} does not exist or is not a directory")
    if not (d / "config.json").is_file():
        raise FileNotFoundError(f"model folder {d} has no config.json (not a transformers checkpoint)")
    if not any((d / f).is_file() for f in WEIGHT_FILES):
        raise FileNotFoundError(f"model folder {d} has no model weights (expected one of {', '.join(WEIGHT_FILES)})")
    if not any((d / f).is_file() for f in TOKENIZER_FILES):
        raise FileNotFoundError(f"model folder {d} has no tokenizer (expected one of {', '.join(TOKENIZER_FILES)})")
    return d


def load_causal_lm(model_dir: str | Path, dtype: torch.dtype = torch.float32):
    """(model, tokenizer) from a local checkpoint directory; a ``[PAD]`` token is added if missing."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    d = check_model_dir(model_dir)
    tok = AutoTokenizer.from_pretrained(str(d), local_files_only=True, padding_side="right")
    model = AutoModelForCausalLM.from_pretrained(str(d), dtype=dtype, local_files_only=True)
    if tok.pad_token_id is None:
        tok.add_special_tokens({"pad_token": "[PAD]"})
        model.resize_token_embeddings(len(tok))
    model.config.pad_token_id = tok.pad_token_id
    return model, tok


def apply_lora(model: nn.Module, *, r: int = 8, alpha: int = 16, dropout: float = 0.05,
               targets: Sequence[str] = ("q_proj", "v_proj")) -> nn.Module:
    """Freeze the base and add peft LoRA adapters on ``targets`` (module-name suffixes)."""
    from peft import LoraConfig, get_peft_model

    targets = list(targets)
    if not targets:
        raise ValueError("LoRA targets must not be empty")
    names = [n for n, _ in model.named_modules()]
    missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]
    if missing:
        leaves = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear)})
        raise ValueError(f"LoRA targets {missing} match no module of the model; linear modules are {leaves}")
    if r < 1:
        raise ValueError(f"LoRA rank r must be >= 1, got {r}")
    cfg = LoraConfig(task_type="CAUSAL_LM", r=int(r), lora_alpha=int(alpha), lora_dropout=float(dropout),
                     target_modules=targets)
    return get_peft_model(model, cfg)
