"""One namespace, clean layering (issue 12, done-when 1; issue 20, done-when 4).

- Static: no module of the algorithm core (``flwr_strategies/`` outside the client and simulation
  layers) imports ``flwr_strategies.clients`` / ``flwr_strategies.simulations`` (or the bare
  ``clients`` / ``simulations``); Flower is imported only in ``adapters/``, ``sampling.py`` and
  ``privacy/flower_accountant.py``, torch neither in ``adapters/`` nor in ``core/`` beyond
  ``core/local.py`` (docs/architecture.md). No file of
  the repository (tests, notebooks, the example apps) imports the bare ``clients`` /
  ``simulations`` folders or launches them with ``-m``.
- Packaging: every package folder of the three trees is listed in pyproject's ``packages``; the
  project's Flower app (``flwr run .``) ships no code, so its processes import the installed package.
- The editable install (this interpreter's, ``pip install -e .``) and the built wheel, installed
  into a clean venv (reusing the installed dependencies), expose the same modules: ``flwr_strategies``,
  ``flwr_strategies.clients``, ``flwr_strategies.simulations`` and their subpackages. In both,
  ``pkgutil.walk_packages`` over ``flwr_strategies`` lists no test, doc or notebook module and ends
  (a walk that recursed into the package never did: the probe's timeout catches it), and
  ``import flwr_strategies.tests`` fails.
- From the wheel, in a folder that holds its own ``clients/`` and ``simulations/`` packages
  (tripwires that raise when imported): ``import clients`` / ``import simulations`` fail there, and
  every registered method builds and runs two rounds, with ``flwr_strategies`` coming from the wheel.
"""

from __future__ import annotations

import ast
import importlib.metadata
import io
import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
import zipfile
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


#: Where the package may import Flower and torch (the rules of docs/architecture.md), by path
#: below flwr_strategies/: Flower in the adapters, the legacy client manager and Flower's
#: privacy-accountant interface; torch never in the adapters nor in core/ beyond the local loop.
FLOWER_HOMES = ("adapters/", "sampling.py", "privacy/flower_accountant.py")
NO_TORCH = ("adapters/", "core/")
TORCH_HOMES = ("core/local.py",)


@pytest.mark.parametrize("library,allowed,scope", [("flwr", FLOWER_HOMES, ("",)), ("torch", TORCH_HOMES, NO_TORCH)])
def test_flower_and_torch_are_imported_only_where_the_architecture_says(library, allowed, scope):
    offenders = []
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE).as_posix()
        if rel.startswith(allowed) or not rel.startswith(scope):
            continue
        offenders += [f"{rel}:{line} imports {target}" for line, target in _imports(path) if _hits(target, (library,))]
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


_TOP_LEVEL = ("clients", "simulations")
_SKIP_DIRS = {".git", "build", "dist", "__pycache__", ".ipynb_checkpoints", "runs"}


def _repository_python_files() -> list[Path]:
    return [p for p in sorted(ROOT.rglob("*.py"))
            if not _SKIP_DIRS & set(p.relative_to(ROOT).parts) and not any(x.endswith(".egg-info") for x in p.parts)]


def _notebook_sources() -> list[tuple[Path, str]]:
    out = []
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        out.append((nb, "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!")))))
    return out


def test_nothing_imports_the_repository_folders_as_top_level_packages():
    """``clients/`` and ``simulations/`` are ``flwr_strategies.clients`` / ``.simulations`` once
    installed; importing them as top-level packages (possible only from the repository's root) would
    load a second copy of every module, so no file of the repository does it."""
    offenders = []
    sources = [(path, path.read_text()) for path in _repository_python_files()] + _notebook_sources()
    launch = re.compile(r"""["']-m["']\s*,\s*["'](?:clients|simulations)(?:\.|["'])""")
    for path, text in sources:
        for node in ast.walk(ast.parse(text, filename=str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names if _hits(n, _TOP_LEVEL)]
        offenders += [f"{path.relative_to(ROOT)}: launches {m.group(0)}" for m in launch.finditer(text)]
    assert len(sources) > 100
    assert not offenders, "\n".join(offenders)


def _in_example_app(path: Path) -> bool:
    """A Flower app of its own (its own pyproject.toml): the user's app, in Flower's examples' shape."""
    return any((parent / "pyproject.toml").is_file() for parent in path.parents if parent != ROOT and ROOT in parent.parents)


def test_legacy_names_come_from_flwr_compat():
    """Flower moves its legacy API under ``flwr.compat``: a name the installed Flower exports there
    (``flwr.compat.server.ServerAppComponents`` in 1.41 to 1.43) is imported from there."""
    import importlib

    moved = {}
    for sub in ("client", "common", "server", "simulation"):
        module = importlib.import_module(f"flwr.compat.{sub}")
        moved.update({(f"flwr.{sub}", name): f"flwr.compat.{sub}" for name in getattr(module, "__all__", [])})
    assert moved, "flwr.compat exports nothing: check which legacy names this Flower moved"
    offenders = []
    for path in _repository_python_files():
        if _in_example_app(path):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and not node.level:
                for alias in node.names:
                    if (node.module, alias.name) in moved:
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {alias.name} from "
                                         f"{node.module}, not {moved[(node.module, alias.name)]}")
    assert not offenders, "\n".join(offenders)


def test_installed_flower_lies_in_the_declared_range():
    """pyproject's flwr range is the tested range: the suite runs on a Flower inside it (or on
    Flower's nightly, ``flwr-nightly``, a preview of the next release that the range leaves out)."""
    import flwr
    from packaging.requirements import Requirement
    from packaging.version import Version

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    declared = next(Requirement(d) for d in deps if Requirement(d).name == "flwr")
    assert "simulation" in declared.extras
    assert declared.specifier.contains("1.41.0") and declared.specifier.contains("1.42.9")
    installed = Version(flwr.__version__)
    if installed.is_devrelease:  # flwr-nightly
        assert not declared.specifier.contains(installed, prereleases=True), installed
    else:
        assert declared.specifier.contains(installed), installed


def test_project_app_ships_no_code():
    """``flwr run .`` builds the project's app into a FAB that Flower puts first on the app
    processes' ``sys.path``: it holds the settings only, so the ServerApp and ClientApps import the
    installed ``flwr_strategies`` (all three of its trees), never a partial copy of the checkout."""
    from flwr.cli.build import build_fab_from_disk

    names = zipfile.ZipFile(io.BytesIO(build_fab_from_disk(ROOT))).namelist()
    assert "pyproject.toml" in names
    assert not [n for n in names if n.endswith(".py")], names


# What an install exposes: pkgutil.walk_packages over flwr_strategies (what documentation generators
# and plugin scanners do), then over flwr_strategies.clients / .simulations (an editable
# install maps those two from the repository's top-level folders, outside flwr_strategies' __path__).
_PROBE = textwrap.dedent(
    """
    import importlib, json, pkgutil, sys
    errors = []
    import flwr_strategies
    walked = [m.name for m in pkgutil.walk_packages(flwr_strategies.__path__, "flwr_strategies.", onerror=errors.append)]
    exposed = set(walked)
    for sub in ("flwr_strategies.clients", "flwr_strategies.simulations"):
        pkg = importlib.import_module(sub)
        exposed.add(sub)
        exposed |= {m.name for m in pkgutil.walk_packages(pkg.__path__, sub + ".", onerror=errors.append)}
    refused = []
    for name in ("flwr_strategies.tests", "flwr_strategies.docs", "flwr_strategies.notebooks", "clients", "simulations"):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            refused.append(name)
    files = {name: importlib.import_module(name).__file__
             for name in ("flwr_strategies", "flwr_strategies.clients.base", "flwr_strategies.simulations.cli")}
    print(json.dumps({"walked": walked, "exposed": sorted(exposed), "refused": refused,
                      "errors": errors, "files": files}))
    """
)
_NOT_PACKAGE = re.compile(r"(^|\.)(tests?|test_\w*|\w*_test|docs?|notebooks?|conftest)(\.|$)")


def _probe(python: Path | str, cwd: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # a walk that recursed into the package itself (the old __path__ addition) never ended: fail in 2 minutes
    out = subprocess.run([str(python), "-c", _PROBE], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _check_exposure(found: dict) -> None:
    assert not found["errors"], found["errors"]
    assert not [n for n in found["exposed"] if _NOT_PACKAGE.search(n)], found["exposed"]
    assert sorted(found["refused"]) == sorted(["flwr_strategies.tests", "flwr_strategies.docs",
                                               "flwr_strategies.notebooks", "clients", "simulations"])
    assert {n.split(".")[0] for n in found["exposed"]} == {"flwr_strategies"}
    assert {"flwr_strategies.clients.base", "flwr_strategies.simulations.bench",
            "flwr_strategies.adapters"} <= set(found["exposed"])


def test_editable_install_exposes_the_package_only(tmp_path):
    """This interpreter's install (the README's ``pip install -e .``), from a folder outside the checkout."""
    found = _probe(sys.executable, tmp_path)
    _check_exposure(found)
    assert found["files"] == {"flwr_strategies": str(CORE / "__init__.py"),
                              "flwr_strategies.clients.base": str(ROOT / "clients" / "base.py"),
                              "flwr_strategies.simulations.cli": str(ROOT / "simulations" / "cli.py")}
    assert set(found["walked"]) < set(found["exposed"])  # clients/ and simulations/ lie outside flwr_strategies/


def _can_build_here() -> bool:
    """Whether this environment's setuptools meets pyproject's build requirement (else pip builds in
    an isolated environment, fetching setuptools from the package index)."""
    try:
        major = int(importlib.metadata.version("setuptools").split(".")[0])
    except importlib.metadata.PackageNotFoundError:
        return False
    return major >= 68


@pytest.fixture(scope="module")
def wheel_python(tmp_path_factory) -> Path:
    """The python of a clean venv with the built wheel installed, reusing this environment's
    installed dependencies by path (nothing is downloaded again)."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    dist = tmp_path / "dist"
    isolation = ["--no-build-isolation"] if _can_build_here() else []
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", *isolation, "-q", "-w", str(dist)],
                   check=True, cwd=tmp_path, timeout=300)
    wheel = next(dist.glob("flwr_strategies-*.whl"))
    venv = tmp_path / "venv"
    # no pip of its own (ensurepip costs about 28 s on two loaded cores): this interpreter's pip installs into it
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    # reuse the installed dependencies by path only: their folder's .pth hooks (among them this
    # checkout's editable install, which would shadow the wheel) do not run in the clean venv
    venv_site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip()
    # (every folder this interpreter imports from, except the checkout: a venv made with
    # --system-site-packages has its dependencies in the base interpreter's site-packages, another
    # may add folders with .pth lines)
    here = [p for p in sys.path if p and Path(p).is_dir() and not Path(p).resolve().is_relative_to(ROOT)]
    (Path(venv_site) / "reuse_installed_dependencies.pth").write_text("\n".join(here) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, timeout=300)
    return py


@pytest.mark.slow
def test_wheel_exposes_the_same_modules_as_the_editable_install(wheel_python, tmp_path):
    wheel = _probe(wheel_python, tmp_path)
    _check_exposure(wheel)
    assert "site-packages" in wheel["files"]["flwr_strategies"], wheel["files"]
    assert set(wheel["walked"]) == set(wheel["exposed"])  # one tree: the walk reaches every subpackage
    editable = _probe(sys.executable, tmp_path)
    assert wheel["exposed"] == editable["exposed"]


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
def test_wheel_in_clean_venv_runs_every_method(wheel_python, tmp_path):
    py = wheel_python
    user = tmp_path / "userproj"
    for pkg in ("clients", "simulations"):
        (user / pkg).mkdir(parents=True)
        (user / pkg / "__init__.py").write_text(f'raise ImportError("tripwire: the user\'s own {pkg} package was imported")\n')
    (user / "run_all.py").write_text(_RUN_ALL)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([str(py), "run_all.py"], cwd=user, env=env, capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:]
    assert '"fedavg": 2' in out.stdout
