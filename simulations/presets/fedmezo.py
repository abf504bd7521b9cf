"""FedMeZO presets (Ling et al., KDD 2024).

- ``fedmezo`` (reduced scale, CPU): FedMeZO vs its personalised-rate variants, fp16 adapters and
  backprop LoRA FedAvg on the project's tiny pretrained LLaMA-architecture base and generated
  instructions (3 IID clients, the method's defaults: LoRA r=128/alpha=256, H=30, batch 1,
  mu=1e-3, lr 1e-4), plus FedMeZO's learning-rate sensitivity including the paper's 1e-5
  (paper Fig. 1, Fig. 4, Fig. 5 at reduced scale).
- ``fedmezo-paper`` (paper scale, GPU): the paper's main setting (Dolly-Meta, Table 7 / Table 8
  3B column) with a local checkpoint and data file: OpenLLaMA-3B-v2 in fp16, LoRA r=128 /
  alpha=256 / dropout 0.05 on q_proj, v_proj, 3 clients, 500 rounds of 30 MeZO steps of batch 1,
  lr 1e-5, mu 1e-3, tok_len 1000, 1% test split, evaluation every 10 rounds; beside FedMeZO, the
  official code's precision and arithmetic (``variant=code``), model-diff rates and BP LoRA FedAvg::

      python -m simulations compare --preset fedmezo-paper --model /models/open_llama_3b_v2 \\
          --data-dir /data/dolly --device cuda

  Other paper settings by override: ``--dataset gsm8k --partition iid --lr 2.5e-5`` (GSM8K-IID),
  ``--dataset codealpaca --partition dirichlet --alpha 0.5 --lr 2e-5`` (CodeAlpaca-LDA,
  ``--set max_len=650``), ``--dataset alpaca --partition iid`` (Alpaca-IID).

- ``fedmezo-code``: the official code's configuration (FederatedScope branch FedMeZO,
  ``llm/baseline/frozen/dolly/dolly_mezo_meta.yaml`` and ``dolly_bpbased_meta.yaml`` with
  ``llm/trainer/mezo_trainer.py``): the whole model in half precision (``is_enable_half``), the
  official MeZO arithmetic (``variant=code``), lr 1e-5, 30 steps of batch 1, mu 1e-3, weight decay 0,
  LoRA 128/256/0.05, tok_len 1000, 1% test split, the meta split over 3 clients, evaluation every 10
  rounds; beside FedMeZO at the paper's fp32 arithmetic. On the tiny base and generated instructions
  (30 rounds, CPU); the official scale with ``--model DIR --dataset dolly --data-dir DIR --rounds 500
  --device cuda``.

All write ``summary.md`` (test loss per evaluated round for every run, final/best loss, bytes,
wall time), ``summary.json`` and ``loss.png`` into the output folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flwr_strategies.simulations.results import figure, write_png, write_text

from . import Preset, PresetContext, RunEntry, register_preset

# ----------------------------------------------------------------------------- reduced scale
BASE = {"method": "fedmezo", "dataset": "instructions", "num_clients": 3, "rounds": 30, "partition": "iid",
        "local_epochs": None, "local_steps": 30, "batch_size": 1, "fraction_fit": 1.0, "seed": 0,
        "progress": False, "params": {"eval_every": 1}}
PERSONAL = ("round-wise", "five-round", "model-diff", "random")
LR_SWEEP = (1e-5, 2e-4, 5e-4)

ENTRIES = [RunEntry("FedMeZO", "fedmezo")] + [
    RunEntry(f"FedMeZO {s}", "fedmezo", {"params": {"lr_strategy": s, "lr_alpha_rel": 0.5}}) for s in PERSONAL
] + [
    RunEntry("FedMeZO fp16 adapters", "fedmezo", {"params": {"adapter_dtype": "fp16"}}),
    RunEntry("BP LoRA FedAvg", "lora-fedavg"),
] + [RunEntry(f"FedMeZO lr={lr:g}", "fedmezo", {"lr": lr}) for lr in LR_SWEEP]

# ----------------------------------------------------------------------------- paper scale
PAPER_BASE = {"method": "fedmezo", "dataset": "dolly", "partition": "meta", "num_clients": 3, "rounds": 500,
              "lr": 1e-5, "local_epochs": None, "local_steps": 30, "batch_size": 1, "fraction_fit": 1.0,
              "weight_decay": 0.0, "seed": 0, "device": "cuda", "progress": True,
              "params": {"lora_r": 128, "lora_alpha": 256, "lora_dropout": 0.05, "lora_targets": "q_proj,v_proj",
                         "max_len": 1000, "base_dtype": "fp16", "adapter_dtype": "fp32", "test_fraction": 0.01,
                         "eval_every": 10}}
# ----------------------------------------------------------------------------- the official code's configuration
CODE_BASE = {"method": "fedmezo", "dataset": "instructions", "partition": "meta", "num_clients": 3, "rounds": 30,
             "lr": 1e-5, "local_epochs": "none", "local_steps": 30, "batch_size": 1, "fraction_fit": 1.0,
             "weight_decay": 0.0, "momentum": 0.0, "lr_decay": 1.0, "grad_clip": "none", "seed": 0, "progress": False,
             "params": {"lora_r": 128, "lora_alpha": 256, "lora_dropout": 0.05, "lora_targets": "q_proj,v_proj",
                        "max_len": 1000, "test_fraction": 0.01, "eval_every": 10, "weighting": "uniform"}}
CODE_ENTRIES = [
    RunEntry("FedMeZO (paper)", "fedmezo", {"params": {"variant": "paper"}}),
    RunEntry("FedMeZO (code)", "fedmezo", {"params": {"variant": "code", "mu": 1e-3, "lr_strategy": "frozen",
                                                      "num_perturbations": 1}}),
    RunEntry("BP LoRA FedAvg (code)", "lora-fedavg", {"params": {"variant": "code"}}),
]

PAPER_ENTRIES = [
    RunEntry("FedMeZO", "fedmezo"),
    RunEntry("FedMeZO, official code (fp16 model, its arithmetic)", "fedmezo",
             {"params": {"variant": "code", "adapter_dtype": "fp16", "z_device": "param", "restore_mode": "regenerate"}}),
    RunEntry("FedMeZO model-diff", "fedmezo", {"params": {"lr_strategy": "model-diff", "lr_alpha": 5e-6}}),
    RunEntry("BP LoRA FedAvg", "lora-fedavg"),
]


def _losses(res: dict[str, Any]) -> list[tuple[int, float]]:
    return [(r["round"], r["loss"]) for r in res["rounds"] if r.get("loss") is not None]


def run_fedmezo_preset(ctx: PresetContext) -> dict[str, Any]:
    """Run every entry of ``ctx.preset`` (same data split and seed), then write the summary."""
    from flwr_strategies.simulations.compare import entry_config, merge_config
    from flwr_strategies.simulations.runner import run_experiment

    out = Path(ctx.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if ctx.preset.name == "fedmezo-paper":
        conf = merge_config(ctx.preset.base, ctx.overrides)
        if not (conf.get("model") or conf.get("params", {}).get("model_dir")):
            raise ValueError("preset fedmezo-paper needs --model DIR: a local causal-LM checkpoint with its tokenizer "
                             "(the paper's is openlm-research/open_llama_3b_v2)")
        if not conf.get("data_dir"):
            raise ValueError(f"preset fedmezo-paper needs --data-dir with the {conf['dataset']} json/jsonl file")
    results = []
    for e in ctx.preset.entries:
        res = run_experiment(entry_config(e, ctx.preset.base, ctx.overrides, out), label=e.label)
        ls = _losses(res)
        print(f"{e.label}: test loss {ls[0][1]:.3f} -> {ls[-1][1]:.3f} ({res['timing']['wall_s']:.0f} s)", flush=True)
        results.append(res)
    md = summarize(results)
    write_text(out / "summary.md", md)
    write_text(out / "summary.json", json.dumps(
        [{"label": r["label"], "rounds": [t for t, _ in _losses(r)], "loss": [v for _, v in _losses(r)],
          "bytes_up": [x["bytes_up"] for x in r["rounds"]], "wall_s": r["timing"]["wall_s"],
          "config": r["config"], "params": r["params"]} for r in results], indent=1))
    plot(results, out / "loss.png")
    print(md)
    return {"summary": str(out / "summary.md"), "results": results}


def _is_sweep(label: str) -> bool:
    return "lr=" in label


def summarize(results: list[dict[str, Any]]) -> str:
    """Markdown: loss per evaluated round, final/best/bytes per run, and the lr sweep if any."""
    main = [r for r in results if not _is_sweep(r["label"])]
    sweep = [r for r in results if _is_sweep(r["label"]) or r["label"] == "FedMeZO"]
    rounds = [t for t, _ in _losses(main[0])]
    last = rounds[-1]
    step = 100 if last >= 200 else (5 if last >= 12 else 1)
    show = [t for t in rounds if t % step == 0 or t == last or (step == 100 and t == 10)]
    lines = ["## Test loss per round (central test split, mean per-example response cross-entropy)", "",
             "| round | " + " | ".join(r["label"] for r in main) + " |", "|---|" + "---|" * len(main)]
    for t in show:
        row = [dict(_losses(r)).get(t) for r in main]
        lines.append(f"| {t} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in row) + " |")
    lines += ["", "| run | round-0 loss | final loss | best loss | upload / round (all clients) | wall (s) |",
              "|---|---|---|---|---|---|"]
    for r in main:
        ls = [v for _, v in _losses(r)]
        up = r["rounds"][-1]["bytes_up"]
        lines.append(f"| {r['label']} | {ls[0]:.3f} | {ls[-1]:.3f} | {min(ls):.3f} | {up:,} B | "
                     f"{r['timing']['wall_s']:.0f} |")
    if len(sweep) > 1:
        lines += ["", "## FedMeZO learning-rate sensitivity (paper Fig. 5 analogue)", "",
                  "| lr | round-0 | min loss | final | max loss after round 0 |", "|---|---|---|---|---|"]
        for r in sorted(sweep, key=lambda r: r["config"]["lr"]):
            ls = [v for _, v in _losses(r)]
            lines.append(f"| {r['config']['lr']:g} | {ls[0]:.3f} | {min(ls):.3f} | {ls[-1]:.3f} | {max(ls[1:]):.3f} |")
    return "\n".join(lines) + "\n"


def plot(results: list[dict[str, Any]], path: Path) -> None:
    fig, (a, b) = figure(1, 2, figsize=(11, 4))
    for r in results:
        ax = b if _is_sweep(r["label"]) else a
        ls = _losses(r)
        ax.plot([t for t, _ in ls], [v for _, v in ls], label=r["label"])
        if r["label"] == "FedMeZO":
            b.plot([t for t, _ in ls], [v for _, v in ls], label=f"FedMeZO lr={r['config']['lr']:g}")
    for ax, t in ((a, "FedMeZO variants vs BP LoRA FedAvg"), (b, "FedMeZO lr sensitivity")):
        ax.set_xlabel("round"); ax.set_ylabel("test loss"); ax.set_title(t); ax.legend(fontsize=7)
    b.set_ylim(top=min(8.0, b.get_ylim()[1]))
    write_png(path, fig, dpi=110)


register_preset(Preset(
    name="fedmezo",
    summary="FedMeZO vs personalised rates, fp16 adapters, backprop LoRA FedAvg + lr sweep; tiny pretrained Llama, "
            "3 clients, 10 runs x 30 rounds (CPU, ~15 min shared)",
    base=BASE, entries=ENTRIES, custom=run_fedmezo_preset,
))
register_preset(Preset(
    name="fedmezo-paper",
    summary="FedMeZO paper scale (Dolly-Meta): local OpenLLaMA-3B via --model, data via --data-dir, --device cuda, "
            "500 rounds",
    base=PAPER_BASE, entries=PAPER_ENTRIES, custom=run_fedmezo_preset,
))
register_preset(Preset(
    name="fedmezo-code",
    summary="FedMeZO with the official code's configuration (whole model fp16, official MeZO arithmetic, lr 1e-5) "
            "beside the paper's fp32 arithmetic and the BP baseline; tiny base, generated instructions, 30 rounds",
    base=CODE_BASE, entries=CODE_ENTRIES, custom=run_fedmezo_preset,
))
