"""Baselines the papers compare against that Flower already ships (wired to our clients)."""
