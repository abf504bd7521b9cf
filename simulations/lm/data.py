"""Instruction data for causal-LM federated tuning: generator, jsonl loader, prompts, splits.

Records are dicts ``{instruction, input, output, category}`` (Alpaca field names; Dolly's
``context``/``response`` are mapped on load). Prompts use the Alpaca templates of the reference
implementation; the loss covers the response and EOS only (prompt labels are -100).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence

PROMPT_INPUT = ("Below is an instruction that describes a task, paired with an input that provides further "
                "context. Write a response that appropriately completes the request.\n\n"
                "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:")
PROMPT_NO_INPUT = ("Below is an instruction that describes a task. Write a response that appropriately "
                   "completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:")

WORDS = ("apple", "river", "stone", "cloud", "tiger", "lemon", "piano", "robot",
         "ocean", "maple", "candle", "garden", "rocket", "violet", "silver", "forest")

CATEGORIES = ("reverse", "upper", "add", "subtract", "first_letter", "length", "repeat", "sort")


#: Each category's instruction and answer for a word ``w`` and two numbers ``a >= b``.
_TEMPLATES = {
    "reverse": lambda w, a, b: (f"Reverse the word {w}.", w[::-1]),
    "upper": lambda w, a, b: (f"Write the word {w} in upper case.", w.upper()),
    "add": lambda w, a, b: (f"What is {a} plus {b}?", str(a + b)),
    "subtract": lambda w, a, b: (f"What is {a} minus {b}?", str(a - b)),
    "first_letter": lambda w, a, b: (f"What is the first letter of {w}?", w[0]),
    "length": lambda w, a, b: (f"How many letters are in {w}?", str(len(w))),
    "repeat": lambda w, a, b: (f"Repeat the word {w} twice.", f"{w} {w}"),
    "sort": lambda w, a, b: (f"Sort the letters of {w}.", "".join(sorted(w))),
}


def _make(cat: str, rng: np.random.Generator) -> dict:
    w = WORDS[int(rng.integers(len(WORDS)))]
    a, b = int(rng.integers(50)), int(rng.integers(50))
    if cat not in _TEMPLATES:
        raise ValueError(f"unknown category {cat!r}")
    if cat == "subtract":
        a, b = max(a, b), min(a, b)
    ins, out = _TEMPLATES[cat](w, a, b)
    return {"instruction": ins, "input": "", "output": out, "category": cat}


def generate_instructions(n: int, seed: int = 0, categories: Sequence[str] = CATEGORIES) -> list[dict]:
    """``n`` deterministic synthetic instruction records, categories drawn uniformly."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = np.random.default_rng(seed)
    cats = list(categories)
    return [_make(cats[int(rng.integers(len(cats)))], rng) for _ in range(n)]


def _record(r: dict, fmt: str) -> dict:
    if fmt == "gsm8k":
        return {"instruction": r["question"], "input": "",
                "output": str(r["answer"]).replace("####", "The answer is"), "category": "none"}
    rec = {"instruction": r["instruction"], "input": r.get("input", r.get("context", "")) or "",
           "output": r.get("output", r.get("response", "")), "category": r.get("category", "none")}
    if fmt == "codealpaca":  # the reference's category is the programming language in ``input``
        rec["category"] = str(r.get("input", "") or "none")
    return rec


INSTRUCTION_FORMATS = ("dolly", "alpaca", "gsm8k", "codealpaca")


def load_instruction_file(path: str | Path, fmt: str = "dolly") -> list[dict]:
    """Read instruction records into the common schema (the official code's field mappings, App. E.1
    datasets): Dolly (jsonl:
    instruction, context, response, category), Alpaca (json list or jsonl: instruction, input,
    output), GSM8K (jsonl: question, answer; ``####`` becomes ``The answer is``) or CodeAlpaca
    (Alpaca fields; the category is the ``input`` field, the language)."""
    if fmt not in INSTRUCTION_FORMATS:
        raise ValueError(f"instruction format must be one of {INSTRUCTION_FORMATS}, got {fmt!r}")
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"instruction data file not found: {p}")
    text = p.read_text(encoding="utf-8")
    rows = json.loads(text) if text.lstrip().startswith("[") else [json.loads(l) for l in text.splitlines() if l.strip()]
    need = ("question", "answer") if fmt == "gsm8k" else ("instruction",)
    out = []
    for i, r in enumerate(rows):
        missing = [k for k in need if k not in r]
        if missing:
            raise ValueError(f"{p}: record {i} has no '{missing[0]}' field (reading it as {fmt})")
        out.append(_record(r, fmt))
    if not out:
        raise ValueError(f"{p}: no records")
    return out


def find_instruction_file(data_dir: str | Path) -> Path:
    """The first ``*.jsonl`` / ``*.json`` in ``data_dir`` (Dolly/Alpaca style)."""
    d = Path(data_dir)
    if d.is_file():
        return d
    cands = sorted(d.glob("*.jsonl")) + sorted(d.glob("*.json"))
    if not cands:
        raise FileNotFoundError(f"no *.jsonl / *.json instruction file in --data-dir {d}")
    return cands[0]


@dataclass
class LMData:
    """Tokenised examples: per example an id tensor and a label tensor (prompt masked to -100).

    ``batch(indices)`` collates examples into a right-padded HF-style dict (the in-memory data
    protocol of the FedMeZO clients)."""

    ids: list[torch.Tensor]
    labels: list[torch.Tensor]
    categories: list[str]
    pad_id: int = 0

    def __len__(self) -> int:
        return len(self.ids)

    def subset(self, idx: Sequence[int]) -> "LMData":
        idx = [int(i) for i in idx]
        return LMData([self.ids[i] for i in idx], [self.labels[i] for i in idx], [self.categories[i] for i in idx],
                      self.pad_id)

    def batch(self, idx: Sequence[int]) -> dict[str, torch.Tensor]:
        """Examples ``idx`` as ``{input_ids, attention_mask, labels}``, right-padded."""
        return collate(self, idx, self.pad_id)


def tokenize_records(records: Sequence[dict], tokenizer, max_len: int = 320) -> LMData:
    """BOS + prompt + response + EOS, truncated to ``max_len``; labels -100 over BOS + prompt."""
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    ids, labels, cats = [], [], []
    for r in records:
        prompt = (PROMPT_INPUT if r.get("input") else PROMPT_NO_INPUT).format(**r)
        src = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        tgt = tokenizer(str(r["output"]), add_special_tokens=False)["input_ids"] + ([eos] if eos is not None else [])
        head = ([bos] if bos is not None else []) + src
        x = (head + tgt)[:max_len]
        y = ([-100] * len(head) + tgt)[:max_len]
        ids.append(torch.tensor(x, dtype=torch.long))
        labels.append(torch.tensor(y, dtype=torch.long))
        cats.append(str(r.get("category", "none")))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return LMData(ids, labels, cats, int(pad))


def collate(data: LMData, idx: Sequence[int], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded batch ``{input_ids, attention_mask, labels}`` (an example's labels are as long as its ids)."""
    seqs = [data.ids[int(i)] for i in idx]
    pad = lambda ts, value: pad_sequence(ts, batch_first=True, padding_value=value)  # noqa: E731
    return {"input_ids": pad(seqs, pad_id), "attention_mask": pad([torch.ones_like(s) for s in seqs], 0),
            "labels": pad([data.labels[int(i)] for i in idx], -100)}


# ----------------------------------------------------------------------------- splits
def split_meta(categories: Sequence[str], num_clients: int, rng: np.random.Generator,
               legacy: bool = False) -> list[np.ndarray]:
    """One group per category, groups shuffled, merged round-robin into ``num_clients`` clients
    (Dolly-Meta). ``legacy=True`` reproduces the reference code, which keeps only the first
    ``num_clients`` shuffled categories and drops the rest."""
    cats = sorted(set(categories))
    if len(cats) < num_clients:
        raise ValueError(f"meta split needs >= {num_clients} categories, data has {len(cats)}")
    order = [cats[i] for i in rng.permutation(len(cats))]
    arr = np.asarray(categories)
    parts: list[list[int]] = [[] for _ in range(num_clients)]
    for j, c in enumerate(order[:num_clients] if legacy else order):
        parts[j % num_clients].extend(np.flatnonzero(arr == c).tolist())
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def split_lda(categories: Sequence[str], num_clients: int, alpha: float, rng: np.random.Generator,
              max_tries: int = 1000) -> list[np.ndarray]:
    """Per category, proportions ~ Dirichlet(alpha * 1_N); resampled until no client is empty."""
    if alpha <= 0:
        raise ValueError(f"Dirichlet alpha must be > 0, got {alpha}")
    arr = np.asarray(categories)
    cats = sorted(set(categories))
    for _ in range(max_tries):
        parts: list[list[int]] = [[] for _ in range(num_clients)]
        for c in cats:
            idx = rng.permutation(np.flatnonzero(arr == c))
            props = rng.dirichlet(alpha * np.ones(num_clients))
            cuts = (np.cumsum(props)[:-1] * len(idx)).astype(int)
            for k, chunk in enumerate(np.split(idx, cuts)):
                parts[k].extend(chunk.tolist())
        if all(parts):
            return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
    raise ValueError(f"could not draw an LDA split with no empty client (alpha={alpha}, n={len(arr)})")


def split_clients(categories: Sequence[str], num_clients: int, how: str, seed: int,
                  alpha: float = 0.5, meta_legacy: bool = False) -> list[np.ndarray]:
    """Dispatch to ``iid`` (uniform random, sizes differ by at most one) / ``lda`` / ``meta``."""
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    rng = np.random.default_rng(seed)
    if how == "iid":
        return [np.sort(p) for p in np.array_split(rng.permutation(len(categories)), num_clients)]
    if how in ("lda", "dirichlet"):
        return split_lda(categories, num_clients, alpha, rng)
    if how == "meta":
        return split_meta(categories, num_clients, rng, legacy=meta_legacy)
    raise ValueError(f"unknown LM split {how!r}; use iid, lda or meta")
