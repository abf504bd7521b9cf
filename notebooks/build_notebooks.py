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
        "from simulations.compare import run_entries\n"
        "from simulations.presets import RunEntry\n\n"
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


def write(name: str, cells: list) -> Path:
    nb = new_notebook(cells=cells, metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    })
    path = HERE / name
    nbformat.write(nb, path)
    return path


NOTEBOOKS = {"quickstart.ipynb": QUICKSTART}

if __name__ == "__main__":
    names = sys.argv[1:] or list(NOTEBOOKS)
    for n in names:
        print(write(n, NOTEBOOKS[n]))
