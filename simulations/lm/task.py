"""The ``causal-lm`` task: federated instruction tuning of a local causal-LM checkpoint with LoRA.

- Model: ``--model PATH`` (or ``--set model_dir=PATH``) names a local transformers checkpoint with
  its tokenizer; without it the cached tiny pretrained LLaMA-architecture base is used (built on
  first use, see :mod:`simulations.lm.model`). peft LoRA (``lora_r``, ``lora_alpha``,
  ``lora_dropout``, ``lora_targets``) on ``q_proj``/``v_proj`` by default; the base is frozen.
- Data: ``--dataset instructions`` (default; generated, 8 categories) or ``dolly``/``alpaca``
  (a jsonl/json file in ``--data-dir``). A random ``test_fraction`` is held out centrally; the
  train part is split over clients by ``--partition`` ``iid`` | ``dirichlet`` (LDA over categories,
  ``--alpha``) | ``meta`` (whole categories per client, Dolly-Meta).
- Evaluation: mean per-example response-token cross-entropy on the pooled test split;
  ``accuracy`` is next-token accuracy on response tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from flwr_strategies.registry import get_method, resolve_params

from .data import (LMData, collate, find_instruction_file, generate_instructions, load_instruction_file,
                   split_clients, tokenize_records)
from .model import apply_lora, ensure_tiny_base, load_causal_lm

LM_DATASETS = ("instructions", "dolly", "alpaca")
_MODEL_CACHE: dict[str, Any] = {}


def lm_param(params: dict, key: str, default: Any) -> Any:
    return params.get(key, default)


class CausalLMTask:
    datasets = LM_DATASETS

    def __init__(self, cfg: Any) -> None:
        params = resolve_params(get_method(cfg.method), cfg.params)
        model_dir = params.get("model_dir") or cfg.model or ""
        self.model_dir = str(model_dir) if model_dir else str(ensure_tiny_base())
        self.lora = dict(r=int(params.get("lora_r", 8)), alpha=int(params.get("lora_alpha", 16)),
                         dropout=float(params.get("lora_dropout", 0.05)),
                         targets=tuple(t.strip() for t in str(params.get("lora_targets", "q_proj,v_proj")).split(",") if t.strip()))
        self.seed = int(cfg.seed)
        dt = str(params.get("base_dtype", "fp32"))
        dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
        if dt not in dtypes:
            raise ValueError(f"base_dtype must be one of {sorted(dtypes)}, got {dt!r}")
        self.base_dtype = dtypes[dt]
        self.device = torch.device(cfg.device)
        base, tok = self._base()
        self.tokenizer = tok
        self.pad_id = int(tok.pad_token_id)
        data_seed = cfg.seed if cfg.data_seed is None else cfg.data_seed
        max_len = int(params.get("max_len", 320))
        if cfg.dataset in (None, "", "instructions", "digits"):
            recs = generate_instructions(int(params.get("n_examples", 1200)), seed=7 + int(data_seed))
            name = "instructions"
        elif cfg.dataset in ("dolly", "alpaca"):
            if not cfg.data_dir:
                raise ValueError(f"--dataset {cfg.dataset} needs --data-dir with the jsonl/json file")
            recs = load_instruction_file(find_instruction_file(cfg.data_dir))
            name = cfg.dataset
        else:
            raise KeyError(f"causal-lm task: unknown dataset '{cfg.dataset}'; valid: {', '.join(LM_DATASETS)}")
        data = tokenize_records(recs, tok, max_len=max_len)
        rng = np.random.default_rng(np.random.SeedSequence([int(data_seed), 31]))
        perm = rng.permutation(len(data))
        n_test = max(1, int(round(float(params.get("test_fraction", 1 / 12)) * len(data))))
        self.test = data.subset(np.sort(perm[:n_test]))
        self.train = data.subset(np.sort(perm[n_test:]))
        how = cfg.partition or "iid"
        how = {"dirichlet": "lda", "lda": "lda", "iid": "iid", "meta": "meta"}.get(how, how)
        self.parts = split_clients(self.train.categories, cfg.num_clients, how, seed=int(data_seed), alpha=cfg.alpha)
        for i, p in enumerate(self.parts):
            if len(p) == 0:
                raise ValueError(f"client {i} received an empty training set (partition {how}, {len(self.train)} examples)")
        self.notes = [f"causal-lm: model {self.model_dir}", f"data {name}: {len(self.train)} train / {len(self.test)} test, "
                      f"split {how} over {cfg.num_clients} clients", f"LoRA r={self.lora['r']} alpha={self.lora['alpha']} on {','.join(self.lora['targets'])}"]

    def _base(self):
        key = self.model_dir
        if key not in _MODEL_CACHE:
            model, tok = load_causal_lm(self.model_dir)
            _MODEL_CACHE.clear()
            _MODEL_CACHE[key] = (model.state_dict(), model.config, tok)
        sd, config, tok = _MODEL_CACHE[key]
        return (sd, config), tok

    def model_fn(self) -> torch.nn.Module:
        from transformers import AutoModelForCausalLM

        (sd, config), _ = self._base()
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)
            base = AutoModelForCausalLM.from_config(config)
            base.load_state_dict(sd)
            model = apply_lora(base.to(self.base_dtype), r=self.lora["r"], alpha=self.lora["alpha"],
                               dropout=self.lora["dropout"], targets=self.lora["targets"])
        for p in model.parameters():  # frozen base in base_dtype, LoRA adapters in fp32 (spec 1.3 rule 8)
            if p.requires_grad:
                p.data = p.data.float()
        return model.to(self.device)

    def client_data(self, partition_id: int) -> tuple[LMData, None]:
        return self.train.subset(self.parts[partition_id]), None

    def num_examples(self) -> dict[int, int]:
        return {i: int(len(p)) for i, p in enumerate(self.parts)}

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module) -> tuple[float, dict[str, float]]:
        return evaluate_lm(model, self.test, self.pad_id)


@torch.no_grad()
def evaluate_lm(model: torch.nn.Module, data: LMData, pad_id: int, batch_size: int = 50) -> tuple[float, dict[str, float]]:
    """(mean per-example response loss, {"accuracy": response next-token accuracy, "test_loss"})."""
    was = model.training
    model.eval()
    dev = next(model.parameters()).device
    losses, correct, total = [], 0, 0
    for s in range(0, len(data), batch_size):
        b = collate(data, range(s, min(len(data), s + batch_size)), pad_id)
        b = {k: v.to(dev) for k, v in b.items()}
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits.float()
        lab = b["labels"][:, 1:]
        lg = logits[:, :-1]
        ce = torch.nn.functional.cross_entropy(lg.transpose(1, 2), lab, ignore_index=-100, reduction="none")
        mask = lab != -100
        cnt = mask.sum(1).clamp(min=1)
        losses.append((ce.sum(1) / cnt).cpu())
        correct += int(((lg.argmax(-1) == lab) & mask).sum())
        total += int(mask.sum())
    model.train(was)
    loss = float(torch.cat(losses).mean()) if losses else float("nan")
    return loss, {"accuracy": correct / max(1, total), "test_loss": loss}


def _register() -> None:
    from flwr_strategies.simulations.tasks import register_task

    register_task("causal-lm", CausalLMTask)


_register()
