"""Sum the records of ``sitecustomize.py``: CPU seconds per kind of process and per test file.

Usage: ``python .ci/cpu_profile/report.py CPULOG_DIR``. The pytest workers' own CPU is the tests'
in-process work; every other process is counted against the test file that started it."""

import collections
import json
import sys
from pathlib import Path

KINDS = ("flwr-clientapp", "flwr-serverapp", "flwr-simulation", "flower-superlink", "flower-supernode",
         "flower-superexec", "default_worker.py", "/bin/flwr ")


def main(folder: str) -> None:
    kinds = collections.defaultdict(lambda: [0.0, 0])
    files = collections.defaultdict(float)
    for path in Path(folder).iterdir():
        if path.suffix == ".tmp":
            continue
        rec = json.loads(path.read_text())
        argv = rec["argv"]
        kind = next((k.strip() for k in KINDS if k in argv), None)
        if kind is None:
            kind = "pytest worker" if argv.startswith("-c") or "pytest" in argv else "other python"
        kinds[kind][0] += rec["cpu"]
        kinds[kind][1] += 1
        if kind not in ("pytest worker", "other python"):
            files[rec["test"].split("::")[0] or "(no test)"] += rec["cpu"]
    print(f"{sum(v[0] for v in kinds.values()):.0f} CPU s in {sum(v[1] for v in kinds.values())} Python processes")
    print("\nCPU s  processes  s each  kind")
    for kind, (cpu, n) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
        print(f"{cpu:5.0f}  {n:9d}  {cpu / n:6.1f}  {kind}")
    print("\nCPU s of the Flower and Ray processes a test file started")
    for name, cpu in sorted(files.items(), key=lambda kv: -kv[1])[:15]:
        print(f"{cpu:5.0f}  {name}")


if __name__ == "__main__":
    main(sys.argv[1])
