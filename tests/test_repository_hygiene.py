"""The repository carries no path of the machine it was written on: every printed command and page
works in any clone (``--data-dir $MNIST_DIR``, never a developer's own folder)."""

import re
import subprocess

from conftest import ROOT

#: Home and work folders of developer machines and CI runners (split so this file does not match itself).
MACHINE_PATH = re.compile("(?<![\\w.$])/(" + "|".join(["wo" + "rk", "ro" + "ot", "ho" + "me", "Us" + "ers"]) + ")/[\\w.-]")


def test_no_machine_paths_in_tracked_files():
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    hits = []
    for name in filter(None, files):
        path = ROOT / name.decode()
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:  # binary (images, archives)
            continue
        for number, line in enumerate(data.decode(errors="replace").splitlines(), 1):
            if MACHINE_PATH.search(line):
                hits.append(f"{name.decode()}:{number}: {line.strip()[:120]}")
    assert not hits, "machine paths in the repository:\n" + "\n".join(hits)


def test_the_pattern_finds_a_machine_path():
    assert MACHINE_PATH.search("--data-dir /" + "work/shared/data/mnist")
    assert MACHINE_PATH.search('"data_dir": "/' + 'home/me/mnist"')
    assert not MACHINE_PATH.search("--data-dir $MNIST_DIR") and not MACHINE_PATH.search("https://x.org/home/a")


def test_mnist_tests_pass_without_the_official_files(tmp_path):
    """A clone with nothing beside it: the MNIST tests run on the stand-in and pass (the empty variable
    hides ``../shared`` as a bare clone lacks it)."""
    import os
    import sys

    env = {**os.environ, "FLWR_STRATEGIES_MNIST_DIR": ""}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "tests/test_foundation_data_models.py", "tests/test_fedmud_flower.py"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "MNIST tests run on a stand-in" in res.stdout
