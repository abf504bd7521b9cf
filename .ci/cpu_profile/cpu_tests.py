"""A pytest plugin for ``sitecustomize.py``'s runs (``-p cpu_tests``): the CPU time each test spends in its
pytest process, appended to ``CPULOG_DIR/tests-<pid>.jsonl``; ``report.py`` sums it per test file."""

import json
import os
import time

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, wall = time.process_time(), time.perf_counter()
    yield
    record = {"test": item.nodeid, "cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall}
    with open(os.path.join(os.environ["CPULOG_DIR"], f"tests-{os.getpid()}.jsonl"), "a") as f:
        f.write(json.dumps(record) + "\n")
