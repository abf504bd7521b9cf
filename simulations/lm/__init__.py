"""Causal-LM workloads for FedMeZO: an offline byte-level tokenizer, a tiny pretrained LLaMA-
architecture base model, instruction data (generated or Dolly/Alpaca jsonl) and its splits."""
