"""Memory and cost of one local step: forward-only vs MeZO step vs backprop step (same batch).

``python -m simulations bench memory [--model-dir DIR | --hidden H --layers L] [--batch-size B]
[--device cpu|cuda] [--steps H] [--out results.json]``

- CUDA: ``torch.cuda.max_memory_allocated`` during the step, minus the allocation before it
  (model + batch resident), and the absolute peak.
- CPU: peak resident set size (``ru_maxrss``) of a fresh subprocess per mode, and that peak minus
  the RSS once model and batch are loaded (so model, batch and library overhead are excluded). This is an OS RSS figure,
  not an allocator count; it includes allocator caching/fragmentation.

Wall time is the mean over ``--repeat`` steps after one warm-up. Upload bytes per client and
round: the LoRA tensors (fp32 here; the paper sends fp16) vs the seed-and-scalar extension
(16 bytes per MeZO step).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

import torch

from . import options, rss_kib, run_child, write_out

MODES = ("forward", "mezo", "backprop")


def _build(args):
    from flwr_strategies.clients.fedmezo import cast_adapters
    from flwr_strategies.simulations.lm.data import collate, generate_instructions, tokenize_records
    from flwr_strategies.simulations.lm.model import apply_lora, build_byte_tokenizer, ensure_tiny_base, load_causal_lm

    if args.hidden:
        from transformers import LlamaConfig, LlamaForCausalLM

        from flwr_strategies.simulations.lm.model import TINY_CONFIG

        cfg = dict(TINY_CONFIG, hidden_size=args.hidden, intermediate_size=int(args.hidden * 8 / 3) // 64 * 64 or 4 * args.hidden,
                   num_hidden_layers=args.layers, num_attention_heads=max(1, args.hidden // 64),
                   num_key_value_heads=max(1, args.hidden // 64), max_position_embeddings=2048)
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(**cfg))
        tok = build_byte_tokenizer()
        name = f"random Llama hidden={args.hidden} layers={args.layers}"
    else:
        d = args.model_dir or str(ensure_tiny_base())
        model, tok = load_causal_lm(d)
        name = d
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    model = model.to(device=args.device, dtype=dtype)
    model = apply_lora(model, r=args.lora_r, alpha=2 * args.lora_r)
    cast_adapters(model, args.adapter_dtype)  # fp32 by default; fp16 = the official code's precision
    recs = generate_instructions(args.batch_size, seed=11)
    data = tokenize_records(recs, tok, max_len=args.max_len)
    batch = {k: v.to(args.device) for k, v in collate(data, range(args.batch_size), int(tok.pad_token_id)).items()}
    n_total = sum(p.numel() for p in model.parameters())
    n_lora = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return model, batch, name, n_total, n_lora


def _one_step(mode, model, batch, engine, k):
    from flwr_strategies.fedmezo.zseed import derive_seed

    if mode == "forward":
        with torch.no_grad():
            model.eval()
            float(model(**batch).loss)
    elif mode == "mezo":
        engine.step(lambda: model(**batch).loss, lr=1e-6, seed=derive_seed(0, 1, 0, k))
    else:
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        loss = model(**batch).loss
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.add_(g, alpha=-1e-6)
        del grads, loss


def measure(args, mode: str) -> dict:
    from flwr_strategies.fedmezo import MeZOEngine

    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    model, batch, name, n_total, n_lora = _build(args)
    engine = MeZOEngine(model, mu=1e-3)
    cuda = args.device.startswith("cuda")
    # baseline: model + batch resident, before any step (the peak then covers warm-up and timed steps)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = rss_kib() * 1024
    _one_step(mode, model, batch, engine, 0)  # warm-up (kernels, allocator)
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for k in range(args.repeat):
        _one_step(mode, model, batch, engine, k + 1)
    if cuda:
        torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / args.repeat
    peak = torch.cuda.max_memory_allocated() if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"mode": mode, "peak_bytes": int(peak), "before_bytes": int(base), "extra_bytes": int(max(0, peak - base)),
            "wall_s": wall, "model": name, "params": n_total, "lora_params": n_lora,
            "tokens": int(batch["input_ids"].numel()), "device": args.device,
            "figure": "torch.cuda.max_memory_allocated" if cuda else "process peak RSS (ru_maxrss)"}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m simulations bench memory", description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", help="local causal-LM checkpoint (default: the cached tiny pretrained base)")
    p.add_argument("--hidden", type=int, default=0, help="instead: a random Llama of this hidden size (memory only)")
    options(p, layers=4)
    p.add_argument("--dtype", default="fp32", choices=("fp32", "fp16", "bf16"), help="base model dtype")
    p.add_argument("--lora-r", type=int, default=128, help="LoRA rank (alpha = 2r; paper: 128 / 256)")
    p.add_argument("--adapter-dtype", default="fp32", choices=("fp32", "fp16", "bf16"), help="LoRA adapter dtype")
    options(p, batch_size=8, max_len=320, device="cuda" if torch.cuda.is_available() else "cpu", repeat=5)
    p.add_argument("--steps", type=int, default=30, help="H, MeZO steps per round (for the upload bytes)")
    p.add_argument("--out", help="write the results as JSON")
    p.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    return p


def main(argv: list[str]) -> int:
    """Run the benchmark, print its table and write ``--out``."""
    args = _parser().parse_args(argv)
    if args.mode:  # child process of the CPU measurement
        print(json.dumps(measure(args, args.mode)))
        return 0
    rows = []
    for mode in MODES:
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
            rows.append(measure(args, mode))
        else:
            rows.append(run_child(["memory", *argv, "--mode", mode], f"the {mode} measurement",
                                  env={**os.environ, "PYTHONWARNINGS": "ignore"}))
    r0 = rows[0]
    mib = lambda b: b / 2**20
    print(f"model: {r0['model']} ({r0['params']:,} params, {r0['lora_params']:,} LoRA), batch {args.batch_size} "
          f"({r0['tokens']} token slots), device {r0['device']}; memory figure: {r0['figure']}\n")
    print("| step | peak (MiB) | extra over model+batch resident (MiB) | wall / step (ms) |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {mib(r['peak_bytes']):.1f} | {mib(r['extra_bytes']):.2f} | {1e3 * r['wall_s']:.1f} |")
    f, z, b = rows
    ratio_peak = z["peak_bytes"] / f["peak_bytes"]
    ratio_extra = z["extra_bytes"] / max(1, f["extra_bytes"])
    print(f"\nMeZO/forward peak ratio: {ratio_peak:.3f}; backprop/forward: {b['peak_bytes'] / f['peak_bytes']:.3f}")
    print(f"MeZO/forward extra-memory ratio: {ratio_extra:.3f}; backprop/forward: {b['extra_bytes'] / max(1, f['extra_bytes']):.3f}")
    lora_up = r0["lora_params"] * (2 if args.adapter_dtype != "fp32" else 4)
    seed_up = args.steps * 16
    print(f"\nupload per client per round: LoRA {args.adapter_dtype} {lora_up:,} B (fp16: {r0['lora_params'] * 2:,} B); "
          f"seed-and-scalar (H={args.steps}) {seed_up:,} B; ratio {lora_up / seed_up:.0f}x")
    res = {"rows": rows, "mezo_forward_peak_ratio": ratio_peak, "mezo_forward_extra_ratio": ratio_extra,
           "lora_upload_bytes": lora_up, "seed_upload_bytes": seed_up}
    write_out(args.out, res)
    return 0
