"""``fedmezo``: FedMeZO vs its personalised-rate variants vs backprop LoRA FedAvg on the tiny
pretrained LLaMA-architecture base and generated instructions (3 IID clients), plus the
learning-rate sensitivity of FedMeZO (paper Fig. 1, Fig. 4, Fig. 5 at reduced scale).

Writes ``summary.md`` (test loss per round for every run, final/best loss, bytes, wall time, the
lr sweep) and ``loss.png`` into the output folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import Preset, PresetContext, RunEntry, register_preset

BASE = {"dataset": "instructions", "num_clients": 3, "rounds": 40, "partition": "iid", "lr": 7e-4,
        "local_epochs": None, "local_steps": 30, "batch_size": 1, "seed": 0, "progress": False}
PERSONAL = ("round-wise", "five-round", "model-diff", "random")
LR_SWEEP = (3.5e-4, 1.4e-3, 2.8e-3)

ENTRIES = [RunEntry("FedMeZO", "fedmezo")] + [
    RunEntry(f"FedMeZO {s}", "fedmezo", {"params": {"lr_strategy": s, "lr_alpha_rel": 0.5}}) for s in PERSONAL
] + [RunEntry("BP LoRA FedAvg", "lora-fedavg")] + [
    RunEntry(f"FedMeZO lr={lr:g}", "fedmezo", {"lr": lr}) for lr in LR_SWEEP
]


def _run(label: str, conf: dict[str, Any], out: Path) -> dict[str, Any]:
    from flwr_strategies.simulations.experiment import ExperimentConfig
    from flwr_strategies.simulations.runner import run_experiment

    conf = dict(conf)
    conf["out"] = str(out / label.replace(" ", "_").replace("=", ""))
    res = run_experiment(ExperimentConfig.from_dict(conf), label=label)
    print(f"{label}: test loss {res['rounds'][0]['loss']:.3f} -> {res['rounds'][-1]['loss']:.3f} "
          f"({res['timing']['wall_s']:.0f} s)", flush=True)
    return res


def run_fedmezo_preset(ctx: PresetContext) -> dict[str, Any]:
    from flwr_strategies.simulations.compare import merge_config

    out = Path(ctx.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for e in ctx.preset.entries:
        conf = merge_config(ctx.preset.base, {"method": e.method, "backend": ctx.backend}, e.overrides, ctx.overrides)
        results.append(_run(e.label, conf, out))
    md = summarize(results)
    (out / "summary.md").write_text(md)
    (out / "summary.json").write_text(json.dumps(
        [{"label": r["label"], "loss": [x["loss"] for x in r["rounds"]], "bytes_up": [x["bytes_up"] for x in r["rounds"]],
          "wall_s": r["timing"]["wall_s"]} for r in results], indent=1))
    plot(results, out / "loss.png")
    print(md)
    return {"summary": str(out / "summary.md")}


def summarize(results: list[dict[str, Any]]) -> str:
    main = [r for r in results if "lr=" not in r["label"]]
    sweep = [r for r in results if "lr=" in r["label"] or r["label"] == "FedMeZO"]
    personal = [r for r in main if r["label"].startswith("FedMeZO ")]
    best = min(personal, key=lambda r: r["rounds"][-1]["loss"]) if personal else None
    lines = ["## Test loss per round (central test split, mean per-example response cross-entropy)", ""]
    rounds = [x["round"] for x in main[0]["rounds"]]
    show = [t for t in rounds if t % 5 == 0 or t == rounds[-1]]
    lines.append("| round | " + " | ".join(r["label"] for r in main) + " |")
    lines.append("|---|" + "---|" * len(main))
    for t in show:
        lines.append(f"| {t} | " + " | ".join(f"{r['rounds'][t]['loss']:.3f}" for r in main) + " |")
    lines += ["", "| run | round-0 loss | final loss | best loss | upload / round | wall (s) |", "|---|---|---|---|---|---|"]
    for r in main:
        ls = [x["loss"] for x in r["rounds"]]
        up = r["rounds"][-1]["bytes_up"]
        lines.append(f"| {r['label']} | {ls[0]:.3f} | {ls[-1]:.3f} | {min(ls):.3f} | {up:,} B | {r['timing']['wall_s']:.0f} |")
    if best is not None:
        lines += ["", f"Best personalised rule (lowest final loss): **{best['label']}**."]
    lines += ["", "## FedMeZO learning-rate sensitivity (paper Fig. 5 analogue)", "",
              "| lr | round-0 | min loss | final | max loss after round 0 |", "|---|---|---|---|---|"]
    for r in sorted(sweep, key=lambda r: r["config"]["lr"]):
        ls = [x["loss"] for x in r["rounds"]]
        lines.append(f"| {r['config']['lr']:g} | {ls[0]:.3f} | {min(ls):.3f} | {ls[-1]:.3f} | {max(ls[1:]):.3f} |")
    return "\n".join(lines) + "\n"


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for r in results:
        ax = b if "lr=" in r["label"] else a
        ax.plot([x["round"] for x in r["rounds"]], [x["loss"] for x in r["rounds"]], label=r["label"])
        if r["label"] == "FedMeZO":
            b.plot([x["round"] for x in r["rounds"]], [x["loss"] for x in r["rounds"]], label=f"FedMeZO lr={r['config']['lr']:g}")
    for ax, t in ((a, "FedMeZO vs personalised vs BP"), (b, "FedMeZO lr sensitivity")):
        ax.set_xlabel("round"); ax.set_ylabel("test loss"); ax.set_title(t); ax.legend(fontsize=7)
    b.set_ylim(top=min(8.0, b.get_ylim()[1]))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


register_preset(Preset(
    name="fedmezo",
    summary="FedMeZO vs personalised rates vs backprop LoRA FedAvg + lr sweep, tiny pretrained Llama, 3 clients, 9 runs x 40 rounds (~7 min free CPU, 14 min shared)",
    base=BASE, entries=ENTRIES, custom=run_fedmezo_preset,
))
