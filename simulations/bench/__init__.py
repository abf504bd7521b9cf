"""Benchmarks: ``python -m simulations bench NAME [args]`` runs ``simulations.bench.NAME.main(args)``."""
