"""One namespace, clean layering (issue 12, done-when 1).

- Static: no module of the algorithm core (``flwr_strategies/`` outside the client and simulation
  layers) imports ``flwr_strategies.clients`` / ``flwr_strategies.simulations`` (or the bare
  ``clients`` / ``simulations``), and ``flwr_strategies/core`` imports no Flower at all.
- Packaging: every package folder of the three trees is listed in pyproject's ``packages``.
- From the built wheel, installed into a clean venv (reusing the installed dependencies), run in a
  folder that holds its own ``clients/`` and ``simulations/`` packages (tripwires that raise when
  imported): ``import clients`` / ``import simulations`` fail there, and every registered method
  builds and runs two rounds, with ``flwr_strategies`` coming from the wheel.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "flwr_strategies"
LAYERS = ("flwr_strategies.clients", "flwr_strategies.simulations", "clients", "simulations")


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append((node.lineno, target))
            out += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
    return out


def _hits(target: str, prefixes: tuple[str, ...]) -> bool:
    return any(target == p or target.startswith(p + ".") for p in prefixes)


def test_core_imports_neither_the_client_nor_the_simulation_layer():
    offenders = []
    for path in sorted(CORE.rglob("*.py")):
        for line, target in _imports(path):
            if _hits(target, LAYERS):
                offenders.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not offenders, "algorithm core imports a higher layer:\n" + "\n".join(offenders)


def test_framework_neutral_core_has_no_flower_imports():
    offenders = []
    for path in sorted((CORE / "core").rglob("*.py")):
        for line, target in _imports(path):
            if _hits(target, ("flwr",)):
                offenders.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not offenders, "\n".join(offenders)


def test_every_package_folder_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapping = config["package-dir"]
    expected = set()
    for name, folder in mapping.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            if any((base / Path(*rel.parts[:i]) / "pyproject.toml").is_file() for i in range(1, len(rel.parts) + 1)):
                continue  # an example Flower app with its own pyproject (the user's app), not the library
            sub = ".".join(rel.parts)
            pkg = f"{name}.{sub}" if sub else name
            if not any(pkg.startswith(other + ".") or pkg == other for other in mapping if other != name and other.startswith(name + ".")):
                expected.add(pkg)
    assert expected == listed, f"missing: {sorted(expected - listed)}; stale: {sorted(listed - expected)}"


_RUN_ALL = textwrap.dedent(
    """
    import sys, json
    import flwr_strategies
    assert "site-packages" in flwr_strategies.__file__, flwr_strategies.__file__
    for name in ("clients", "simulations"):
        try:
            __import__(name)
        except ImportError as err:
            assert "tripwire" in str(err), err
        else:
            raise AssertionError(f"import {name} succeeded")
    from flwr_strategies.registry import list_methods
    from flwr_strategies.simulations.experiment import ExperimentConfig
    from flwr_strategies.simulations.runner import run_experiment
    done = {}
    for name, spec in list_methods().items():
        cfg = ExperimentConfig(method=name, rounds=2, num_clients=4, progress=False)
        result = run_experiment(cfg)
        rounds = result["rounds"] if isinstance(result, dict) else result
        done[name] = len([r for r in rounds if r["round"] > 0])
        assert done[name] == 2, (name, done[name])
    assert not [m for m in sys.modules if m in ("clients", "simulations") or m.startswith(("clients.", "simulations."))]
    print(json.dumps(done))
    """
)


@pytest.mark.slow
def test_wheel_in_clean_venv_runs_every_method(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(dist)], check=True, cwd=tmp_path, timeout=300)
    wheel = next(dist.glob("flwr_strategies-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    # reuse the installed dependencies by path only: their folder's .pth hooks (among them this
    # checkout's editable install, which would shadow the wheel) do not run in the clean venv
    venv_site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip()
    here = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    (Path(venv_site) / "reuse_installed_dependencies.pth").write_text("\n".join(sorted(here)) + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True, timeout=300)
    user = tmp_path / "userproj"
    for pkg in ("clients", "simulations"):
        (user / pkg).mkdir(parents=True)
        (user / pkg / "__init__.py").write_text(f'raise ImportError("tripwire: the user\'s own {pkg} package was imported")\n')
    (user / "run_all.py").write_text(_RUN_ALL)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([str(py), "run_all.py"], cwd=user, env=env, capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:]
    assert '"fedavg": 2' in out.stdout
