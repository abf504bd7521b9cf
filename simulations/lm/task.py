"""The ``causal-lm`` task: federated instruction tuning of a local causal-LM checkpoint with LoRA.

- Model: ``--model PATH`` (or ``--set model_dir=PATH``) names a local transformers checkpoint with
  its tokenizer; without it the cached tiny pretrained LLaMA-architecture base is used (built on
  first use, see :mod:`simulations.lm.model`). peft LoRA (``lora_r``, ``lora_alpha``,
  ``lora_dropout``, ``lora_targets``) on ``q_proj``/``v_proj`` by default; the base is frozen in
  ``base_dtype``, the adapters are in ``adapter_dtype`` (fp32 by default; the official code runs
  the whole model in fp16: ``--set variant=code`` or both set to ``fp16``).
- Data: ``--dataset instructions`` (default; generated, 8 categories) or
  ``dolly``/``alpaca``/``gsm8k``/``codealpaca`` (a jsonl/json file in ``--data-dir``). A random
  ``test_fraction`` is held out centrally; the train part is split over clients by
  ``--partition`` ``iid`` | ``dirichlet`` (LDA over categories, ``--alpha``) | ``meta`` (whole
  categories per client, Dolly-Meta).
- Evaluation: mean per-example response-token cross-entropy on the pooled test split;
  ``accuracy`` is next-token accuracy on response tokens.

Every LM setting is checked when the task is built (before any training); an error names the
setting and the value.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from flwr_strategies.clients.fedmezo import ADAPTER_DTYPES, cast_adapters, evaluate_causal_lm
from flwr_strategies.core.validation import check_integer, check_number
from flwr_strategies.registry import get_method, resolve_params
from flwr_strategies.setup import SettingError

from ..tasks import LM_DATASETS, register_task
from .data import (LMData, find_instruction_file, generate_instructions, load_instruction_file, split_clients,
                   tokenize_records)
from .model import apply_lora, check_model_dir, ensure_tiny_base, load_causal_lm

BASE_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_MODEL_CACHE: dict[Any, Any] = {}
_BUILD_LOCK = threading.RLock()


@dataclass(frozen=True)
class LMSettings:
    """The LM workload's settings (method parameters shared by ``fedmezo`` and ``lora-fedavg``).

    Parameters
    ----------
    model_dir : str
        Local checkpoint directory ("" = the cached tiny pretrained base).
    lora_r : int
        LoRA rank, >= 1 (paper: 128).
    lora_alpha : float
        LoRA scaling numerator, > 0 (paper: 256; scale alpha/r = 2).
    lora_dropout : float
        LoRA dropout in [0, 1) (official code: 0.05; off during MeZO's forward passes).
    lora_targets : tuple[str, ...]
        Module-name suffixes that get adapters (PEFT's LLaMA default: q_proj, v_proj).
    max_len : int
        Token length limit of an example, >= 8 (official code: 1000; 320 for the byte tokenizer).
    base_dtype, adapter_dtype : str
        ``fp32``, ``fp16`` or ``bf16`` (paper: fp16 base; spec: fp32 adapters, ``fp16`` = reference).
    n_examples : int
        Generated examples (``instructions`` only), >= 2.
    test_fraction : float
        Fraction held out as the central test split, in (0, 1) (paper: 1%).
    """

    model_dir: str
    lora_r: int
    lora_alpha: float
    lora_dropout: float
    lora_targets: tuple[str, ...]
    max_len: int
    base_dtype: str
    adapter_dtype: str
    n_examples: int
    test_fraction: float

    @classmethod
    def from_params(cls, params: dict, model: str | None = None) -> "LMSettings":
        for key in ("base_dtype", "adapter_dtype"):
            if params[key] not in BASE_DTYPES:
                raise ValueError(f"{key} must be one of {tuple(BASE_DTYPES)}, got {params[key]!r}")
        targets = tuple(t.strip() for t in str(params["lora_targets"]).split(",") if t.strip())
        if not targets:
            raise ValueError(f"lora_targets must name at least one module, got {params['lora_targets']!r}")
        model_dir = str(params.get("model_dir") or model or "")
        if model_dir:
            try:
                check_model_dir(model_dir)
            except FileNotFoundError as err:  # name the setting the user gave (--set model_dir or --model)
                name = "params.model_dir" if params.get("model_dir") else "model"
                raise SettingError(name, model_dir, f"a local transformers checkpoint folder ({err})") from None
        return cls(model_dir=model_dir, lora_r=check_integer("lora_r", params["lora_r"], 1),
                   lora_alpha=check_number("lora_alpha", params["lora_alpha"], "a finite number in (0.0, inf)",
                                           lambda v: v > 0),
                   lora_dropout=check_number("lora_dropout", params["lora_dropout"], "a finite number in [0.0, 1.0)",
                                             lambda v: 0 <= v < 1),
                   lora_targets=targets, max_len=check_integer("max_len", params["max_len"], 8),
                   base_dtype=str(params["base_dtype"]), adapter_dtype=str(params["adapter_dtype"]),
                   n_examples=check_integer("n_examples", params["n_examples"], 2),
                   test_fraction=check_number("test_fraction", params["test_fraction"],
                                              "a finite number in (0.0, 1.0)", lambda v: 0 < v < 1))


class CausalLMTask:
    def __init__(self, cfg: Any) -> None:
        params = resolve_params(get_method(cfg.method), cfg.params)
        self.settings = s = LMSettings.from_params(params, cfg.model)
        self.model_dir = s.model_dir or str(ensure_tiny_base())
        self.lora = dict(r=s.lora_r, alpha=s.lora_alpha, dropout=s.lora_dropout, targets=s.lora_targets)
        self.seed = int(cfg.seed)
        self.base_dtype = BASE_DTYPES[s.base_dtype]
        self.adapter_dtype = ADAPTER_DTYPES[s.adapter_dtype]
        self.device = torch.device(cfg.device)
        tok = self._base()[1]
        data_seed = cfg.seed if cfg.data_seed is None else cfg.data_seed
        if cfg.dataset == "instructions":
            recs = generate_instructions(s.n_examples, seed=7 + int(data_seed))
        elif cfg.dataset in LM_DATASETS:
            if not cfg.data_dir:
                raise ValueError(f"--dataset {cfg.dataset} needs --data-dir with the jsonl/json file")
            recs = load_instruction_file(find_instruction_file(cfg.data_dir), fmt=cfg.dataset)
        else:
            raise KeyError(f"causal-lm task: unknown dataset '{cfg.dataset}'; valid: {', '.join(LM_DATASETS)}")
        data = tokenize_records(recs, tok, max_len=s.max_len)
        rng = np.random.default_rng(np.random.SeedSequence([int(data_seed), 31]))
        perm = rng.permutation(len(data))
        n_test = max(1, int(round(s.test_fraction * len(data))))
        if n_test >= len(data):
            raise ValueError(f"test_fraction {s.test_fraction} leaves no training data ({len(data)} examples)")
        self.test = data.subset(np.sort(perm[:n_test]))
        self.train = data.subset(np.sort(perm[n_test:]))
        how = cfg.partition or "iid"
        how = {"dirichlet": "lda", "lda": "lda", "iid": "iid", "meta": "meta"}.get(how, how)
        self.parts = split_clients(self.train.categories, cfg.num_clients, how, seed=int(data_seed), alpha=cfg.alpha)
        for i, p in enumerate(self.parts):
            if len(p) == 0:
                raise ValueError(f"client {i} received an empty training set (partition {how}, {len(self.train)} examples)")
        self.notes = [f"causal-lm: model {self.model_dir} (base {s.base_dtype}, adapters {s.adapter_dtype})",
                      f"data {cfg.dataset}: {len(self.train)} train / {len(self.test)} test, "
                      f"split {how} over {cfg.num_clients} clients",
                      f"LoRA r={s.lora_r} alpha={s.lora_alpha:g} dropout={s.lora_dropout:g} on {','.join(s.lora_targets)}"]

    def _base(self):
        key = (self.model_dir, str(self.base_dtype))
        if key not in _MODEL_CACHE:
            with _BUILD_LOCK:
                model, tok = load_causal_lm(self.model_dir, dtype=self.base_dtype)
            _MODEL_CACHE.clear()
            _MODEL_CACHE[key] = (model.state_dict(), model.config, tok)
        sd, config, tok = _MODEL_CACHE[key]
        return (sd, config), tok

    def model_fn(self) -> torch.nn.Module:
        from transformers import AutoModelForCausalLM

        (sd, config), _ = self._base()
        # transformers switches torch's process-wide default dtype while it builds a model (to the
        # config's dtype, fp16 for an fp16 checkpoint) and restores it afterwards. Clients build
        # models in worker threads, so two builds could interleave and leave fp16 as the default.
        # Build one model at a time, in fp32, and cast explicitly.
        with _BUILD_LOCK, torch.random.fork_rng():
            torch.manual_seed(self.seed)
            base = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
            base.load_state_dict(sd)
            base.to(self.base_dtype)
            model = apply_lora(base, **self.lora)
        cast_adapters(model, self.adapter_dtype)  # frozen base in base_dtype, adapters in adapter_dtype
        return model.to(self.device)

    def client_data(self, partition_id: int) -> tuple[LMData, None]:
        return self.train.subset(self.parts[partition_id]), None

    def num_examples(self) -> dict[int, int]:
        return {i: int(len(p)) for i, p in enumerate(self.parts)}

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module) -> tuple[float, dict[str, float]]:
        return evaluate_lm(model, self.test)


@torch.no_grad()
def evaluate_lm(model: torch.nn.Module, data: LMData, batch_size: int = 50) -> tuple[float, dict[str, float]]:
    """(mean per-example response loss, {"accuracy": response next-token accuracy, "test_loss"}); batches
    are padded with the pad id ``data`` was tokenized with."""
    batches = (data.batch(range(s, min(len(data), s + batch_size))) for s in range(0, len(data), batch_size))
    loss, metrics = evaluate_causal_lm(model, batches)
    metrics.pop("num_examples")
    return loss, metrics


register_task("causal-lm", CausalLMTask)
