"""fedmezo_app: the model (a causal LM with LoRA adapters) and the data (Flower Datasets), shared by
the ServerApp and the ClientApp."""

from __future__ import annotations

import torch
from flwr_datasets import FederatedDataset
from flwr_datasets.partitioner import DirichletPartitioner
from flwr_datasets.preprocessor import Divider
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

# The Alpaca prompt templates the authors' code uses (App. E.1); the loss covers the response only.
PROMPT_INPUT = ("Below is an instruction that describes a task, paired with an input that provides further "
                "context. Write a response that appropriately completes the request.\n\n"
                "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:")
PROMPT_NO_INPUT = ("Below is an instruction that describes a task. Write a response that appropriately "
                   "completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:")

_MODELS: dict[tuple, tuple] = {}  # one model per process (Ray reuses a ClientApp's process)


def device() -> torch.device:
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def load_model(run_config):
    """(peft model, tokenizer): the run's base model (a Hugging Face id or a local folder), frozen,
    with LoRA adapters on ``q_proj``/``v_proj`` (rank ``lora-r``, ``lora-alpha``, ``lora-dropout``)
    initialised from ``seed``; 16-bit on a GPU (Sec. 5.1), float32 on a CPU, adapters in float32."""
    key = tuple(run_config[k] for k in ("model", "lora-r", "lora-alpha", "lora-dropout", "seed"))
    if key not in _MODELS:
        name = str(run_config["model"])
        tokenizer = AutoTokenizer.from_pretrained(name, padding_side="right")
        dtype = torch.float16 if torch.cuda.is_available() else torch.float32
        base = AutoModelForCausalLM.from_pretrained(name, dtype=dtype)
        if tokenizer.pad_token is None:  # the authors' code adds [PAD] and resizes the embeddings
            tokenizer.add_special_tokens({"pad_token": "[PAD]"})
            base.resize_token_embeddings(len(tokenizer))
        torch.manual_seed(int(run_config["seed"]))
        model = get_peft_model(base, LoraConfig(task_type="CAUSAL_LM", r=int(run_config["lora-r"]),
                                                lora_alpha=int(run_config["lora-alpha"]),
                                                lora_dropout=float(run_config["lora-dropout"]),
                                                target_modules=["q_proj", "v_proj"]))
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.float()
        _MODELS[key] = (model.to(device()), tokenizer)
    return _MODELS[key]


class Tokenized:
    """Tokenised instruction records in memory: ``len()`` and ``batch(indices)`` (a padded dict of
    ``input_ids``, ``attention_mask`` and ``labels``, prompt labels -100), which the MeZO client
    pieces walk with a stateless, seeded cursor."""

    def __init__(self, records, tokenizer, run_config) -> None:
        keys = [run_config[k] for k in ("instruction-key", "input-key", "output-key")]
        self.pad = tokenizer.pad_token_id
        self.items = []
        for instruction, context, response in zip(*(records[k] for k in keys)):
            prompt = (PROMPT_INPUT if context else PROMPT_NO_INPUT).format(instruction=instruction, input=context)
            source = tokenizer(prompt, add_special_tokens=True)["input_ids"]
            target = tokenizer(f"{response}{tokenizer.eos_token}", add_special_tokens=False)["input_ids"]
            ids = (source + target)[: int(run_config["max-length"])]
            labels = ([-100] * len(source) + target)[: len(ids)]
            self.items.append((ids, labels))

    def __len__(self) -> int:
        return len(self.items)

    def batch(self, indices) -> dict[str, torch.Tensor]:
        rows = [self.items[int(i)] for i in indices]
        width = max(len(ids) for ids, _ in rows)
        ids = torch.full((len(rows), width), self.pad, dtype=torch.long)
        labels = torch.full((len(rows), width), -100, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, (i, lab) in enumerate(rows):
            ids[r, : len(i)], labels[r, : len(lab)], mask[r, : len(i)] = torch.tensor(i), torch.tensor(lab), 1
        return {"input_ids": ids.to(device()), "attention_mask": mask.to(device()), "labels": labels.to(device())}


_FDS: FederatedDataset | None = None


def _federated_dataset(run_config, partitioner) -> FederatedDataset:
    """The run's dataset (a Hugging Face id, or a local folder of parquet files), shuffled with
    ``seed``, its ``train`` split divided into a held-out ``test`` split of ``test-fraction`` and the
    rest (App. E.1)."""
    fraction = float(run_config["test-fraction"])
    return FederatedDataset(dataset=str(run_config["dataset"]), seed=int(run_config["seed"]),
                            preprocessor=Divider({"train": 1 - fraction, "test": fraction}, divide_split="train"),
                            partitioners={"train": partitioner})


def load_partition(partition_id: int, num_partitions: int, run_config) -> Tokenized:
    """This client's share of the training split: a Dirichlet (``dirichlet-alpha``) draw over the
    categories (the authors' code's LDA splitter, App. E.1)."""
    global _FDS
    if _FDS is None:
        _FDS = _federated_dataset(run_config, DirichletPartitioner(
            num_partitions=num_partitions, partition_by=run_config["category-key"],
            alpha=float(run_config["dirichlet-alpha"]), seed=int(run_config["seed"]), min_partition_size=1))
    return Tokenized(_FDS.load_partition(partition_id, "train"), load_model(run_config)[1], run_config)


def load_test(run_config) -> Tokenized:
    """The held-out ``test`` split (the ServerApp's central evaluation)."""
    fds = _federated_dataset(run_config, 1)
    return Tokenized(fds.load_split("test"), load_model(run_config)[1], run_config)


@torch.no_grad()
def evaluate(model, data: Tokenized, batch_size: int = 8) -> tuple[float, float]:
    """(loss, accuracy): the mean cross-entropy and the next-token accuracy over the response tokens."""
    model.eval()
    loss, correct, count = 0.0, 0, 0
    for start in range(0, len(data), batch_size):
        batch = data.batch(range(start, min(len(data), start + batch_size)))
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1].float()
        labels = batch["labels"][:, 1:]
        keep = labels != -100
        loss += torch.nn.functional.cross_entropy(logits[keep], labels[keep], reduction="sum").item()
        correct += (logits.argmax(-1)[keep] == labels[keep]).sum().item()
        count += int(keep.sum())
    return loss / count, correct / count
