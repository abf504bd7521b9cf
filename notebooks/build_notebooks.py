"""Write the notebooks in this folder from the cell sources below (``python notebooks/build_notebooks.py``).

Outputs are not stored: ``tests/test_notebooks.py`` executes the notebooks.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

QUICKSTART = [
    new_markdown_cell(
        "# Quickstart: compare two strategies on `digits`\n\n"
        "Runs FedAvg and FedProx on the same Dirichlet(0.5) split of scikit-learn's `digits` (5 clients, "
        "8 rounds, in-process Flower server, CPU; about a minute on 2 cores) through the project's Python API, "
        "then plots accuracy per round and per uploaded byte. The same comparison from the shell:\n\n"
        "```bash\npython -m simulations preset quickstart\n```"
    ),
    new_code_cell(
        "import os\n"
        "os.environ.setdefault('FLWR_TELEMETRY_ENABLED', '0')\n"
        "os.environ.setdefault('OMP_NUM_THREADS', '1')\n"
        "import tempfile\n"
        "from pathlib import Path\n\n"
        "import matplotlib\n"
        "import matplotlib.pyplot as plt\n\n"
        "from flwr_strategies.registry import list_methods\n"
        "from flwr_strategies.simulations.compare import run_entries\n"
        "from flwr_strategies.simulations.presets import RunEntry\n\n"
        "print(', '.join(sorted(list_methods())))"
    ),
    new_markdown_cell(
        "Each `RunEntry(label, method, overrides)` is one run; `base` holds the settings they share "
        "(any `ExperimentConfig` field). Method hyperparameters go in `params`."
    ),
    new_code_cell(
        "base = dict(dataset='digits', num_clients=5, rounds=8, partition='dirichlet', alpha=0.5,\n"
        "            lr=0.05, local_epochs=1, batch_size=32, seed=0, progress=False)\n"
        "entries = [\n"
        "    RunEntry('FedAvg', 'fedavg'),\n"
        "    RunEntry('FedProx mu=0.01', 'fedprox', {'params': {'proximal_mu': 0.01}}),\n"
        "]\n"
        "out_dir = Path(tempfile.mkdtemp(prefix='quickstart-'))\n"
        "results = run_entries(entries, base, {}, out_dir, target=0.85, title='quickstart (notebook)')"
    ),
    new_code_cell(
        "fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.5))\n"
        "for r in results:\n"
        "    rounds = [x for x in r['rounds'] if x['accuracy'] is not None]\n"
        "    ax1.plot([x['round'] for x in rounds], [x['accuracy'] for x in rounds], marker='o', label=r['label'])\n"
        "    up, total = [], 0\n"
        "    for x in rounds:\n"
        "        total += x['bytes_up']\n"
        "        up.append(total / 1e6)\n"
        "    ax2.plot(up, [x['accuracy'] for x in rounds], marker='o', label=r['label'])\n"
        "ax1.set(xlabel='round', ylabel='test accuracy', title='accuracy per round')\n"
        "ax2.set(xlabel='MB uploaded (cumulative)', ylabel='test accuracy', title='accuracy per byte')\n"
        "ax1.legend(); ax2.legend(); fig.tight_layout(); plt.show()"
    ),
    new_code_cell(
        "for r in results:\n"
        "    s = r['summary']\n"
        "    print(f\"{r['label']:>16}: final {s['final_accuracy']:.4f}  best {s['best_accuracy']:.4f}\")\n"
        "    assert s['final_accuracy'] > 0.5, 'the run did not learn'\n"
        "print((out_dir / 'summary.md').read_text())"
    ),
]

DECENTRALIZED = [
    new_markdown_cell(
        "# Decentralized FL: topologies, spectral gaps, DFedCata vs DFedAvg\n\n"
        "In decentralized FL there is no server model: each client keeps its own model and averages with its "
        "graph neighbours through a mixing matrix W. How fast the network agrees depends on W's spectral gap "
        "`1 - psi`, where `psi` is W's second-largest eigenvalue modulus (gap 1: one step of averaging reaches "
        "consensus; gap near 0: slow). The project emulates the peers inside a Flower strategy "
        "(`flwr_strategies.decentralized`), so the same code runs in simulation and on real SuperNodes."
    ),
    new_code_cell(
        "import os\n"
        "os.environ.setdefault('FLWR_TELEMETRY_ENABLED', '0')\n"
        "os.environ.setdefault('OMP_NUM_THREADS', '1')\n"
        "import tempfile\n"
        "from pathlib import Path\n\n"
        "import matplotlib.pyplot as plt\n"
        "import networkx as nx\n\n"
        "from flwr_strategies.decentralized import Topology, is_connected, mixing_matrix, spectral_gap\n"
        "from flwr_strategies.simulations.compare import run_entries\n"
        "from flwr_strategies.simulations.presets import RunEntry"
    ),
    new_markdown_cell(
        "## Topologies on 16 clients\n\n"
        "`Topology(name, m, seed).graph(t)` is round t's 0/1 adjacency (scipy csr); `mixing_matrix(adj)` builds "
        "W (`\"auto\"`: uniform weights on regular graphs, Metropolis-Hastings otherwise). `random` is the DFedCata "
        "paper's default: every round each node picks 9 others, so the graph changes every round."
    ),
    new_code_cell(
        "m = 16\n"
        "names = ['ring', 'grid', 'exponential_sym', 'watts_strogatz', 'random', 'full']\n"
        "fig, axes = plt.subplots(2, 3, figsize=(12, 8))\n"
        "gaps = {}\n"
        "for ax, name in zip(axes.flat, names):\n"
        "    params = {'k': 4} if name == 'watts_strogatz' else {}\n"
        "    adj = Topology(name, m, seed=0, **params).graph(0)\n"
        "    assert is_connected(adj)\n"
        "    W = mixing_matrix(adj)\n"
        "    gaps[name] = spectral_gap(W)\n"
        "    g = nx.from_scipy_sparse_array(adj)\n"
        "    nx.draw_circular(g, ax=ax, node_size=60, width=0.6)\n"
        "    ax.set_title(f'{name}: degree {adj.sum() / m:.1f}, gap {gaps[name]:.3f}')\n"
        "fig.tight_layout(); plt.show()\n"
        "for name, gap in sorted(gaps.items(), key=lambda kv: kv[1]):\n"
        "    print(f'{name:>16}: spectral gap {gap:.4f}')\n"
        "assert gaps['ring'] < gaps['exponential_sym'] < gaps['full'] and abs(gaps['full'] - 1) < 1e-9"
    ),
    new_markdown_cell(
        "## Spectral gap vs number of clients\n\n"
        "The ring's gap shrinks like 1/m^2, so averaging over a ring slows down quadratically as the network "
        "grows; the exponential graph keeps a gap that shrinks only slowly with m."
    ),
    new_code_cell(
        "sizes = [4, 8, 16, 32, 64]\n"
        "fig, ax = plt.subplots(figsize=(5, 3.5))\n"
        "for name in ['ring', 'grid', 'exponential_sym', 'random']:\n"
        "    ax.plot(sizes, [spectral_gap(mixing_matrix(Topology(name, n, seed=0).graph(0))) for n in sizes],\n"
        "            marker='o', label=name)\n"
        "ax.set(xscale='log', yscale='log', xlabel='clients m', ylabel='spectral gap 1 - psi')\n"
        "ax.legend(); fig.tight_layout(); plt.show()"
    ),
    new_markdown_cell(
        "## DFedCata vs DFedAvg on `digits`\n\n"
        "10 clients on a ring, Dirichlet(0.3) split, MLP, 8 rounds, same seed and partition for both. "
        "DFedAvg: local SGD then gossip. DFedCata (arXiv:2410.07272): Moreau-envelope local steps "
        "(`lam`) plus Nesterov extrapolation between rounds (`beta`). `accuracy` is the network-average model's "
        "test accuracy; `consensus_distance` is mean_i ||x_i - x_bar||^2."
    ),
    new_code_cell(
        "base = dict(dataset='digits', num_clients=10, rounds=8, partition='dirichlet', alpha=0.3, model='mlp',\n"
        "            lr=0.1, local_epochs=1, batch_size=32, seed=0, progress=False)\n"
        "graph = {'topology': 'ring'}\n"
        "entries = [\n"
        "    RunEntry('DFedAvg', 'dfedavg', {'params': dict(graph)}),\n"
        "    RunEntry('DFedCata', 'dfedcata', {'params': dict(graph, beta=0.9, lam=0.05)}),\n"
        "]\n"
        "out_dir = Path(tempfile.mkdtemp(prefix='decentralized-'))\n"
        "results = run_entries(entries, base, {}, out_dir, title='DFedCata vs DFedAvg, ring, digits (notebook)')"
    ),
    new_code_cell(
        "fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.5))\n"
        "for r in results:\n"
        "    rounds = [x for x in r['rounds'] if x['round'] > 0]\n"
        "    ax1.plot([x['round'] for x in rounds], [x['accuracy'] for x in rounds], marker='o', label=r['label'])\n"
        "    ax2.plot([x['round'] for x in rounds], [x['fit_consensus_distance'] for x in rounds], marker='o', label=r['label'])\n"
        "ax1.set(xlabel='round', ylabel='test accuracy (average model)')\n"
        "ax2.set(xlabel='round', ylabel='consensus distance', yscale='log')\n"
        "ax1.legend(); ax2.legend(); fig.tight_layout(); plt.show()\n"
        "for r in results:\n"
        "    s = r['summary']\n"
        "    print(f\"{r['label']:>9}: final {s['final_accuracy']:.4f}  best {s['best_accuracy']:.4f}\")\n"
        "    assert s['final_accuracy'] > 0.5, 'the run did not learn'"
    ),
]


def write(name: str, cells: list) -> Path:
    nb = new_notebook(cells=cells, metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    })
    path = HERE / name
    nbformat.write(nb, path)
    return path


NOTEBOOKS = {"quickstart.ipynb": QUICKSTART, "decentralized.ipynb": DECENTRALIZED}

if __name__ == "__main__":
    names = sys.argv[1:] or list(NOTEBOOKS)
    for n in names:
        print(write(n, NOTEBOOKS[n]))
