"""Sum the records of ``sitecustomize.py``: CPU seconds per kind of process and per test file.

Usage: ``python .ci/cpu_profile/report.py CPULOG_DIR``. The pytest workers' own CPU is the tests'
in-process work (per test file too where the run loaded ``-p cpu_tests``); every other process is
counted against the test file that started it. A process records once a second, so one that lives
less than a second is missed and the last second of each is not counted."""

import collections
import json
import sys
from pathlib import Path

KINDS = ("flwr-clientapp", "flwr-serverapp", "flwr-simulation", "flower-superlink", "flower-supernode",
         "flower-superexec", "default_worker.py", "/bin/flwr ")


def main(folder: str) -> None:
    kinds = collections.defaultdict(lambda: [0.0, 0])
    files = collections.defaultdict(float)
    in_process = collections.defaultdict(float)
    for path in Path(folder).iterdir():
        if path.name.startswith("tests-"):
            for line in path.read_text().splitlines():
                rec = json.loads(line)
                in_process[rec["test"].split("::")[0]] += rec["cpu"]
            continue
        if not path.name.isdigit():
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
    if in_process:
        print(f"\nCPU s of the tests in their pytest process (-p cpu_tests): {sum(in_process.values()):.0f}")
        for name, cpu in sorted(in_process.items(), key=lambda kv: -kv[1])[:15]:
            print(f"{cpu:5.0f}  {name}")


if __name__ == "__main__":
    main(sys.argv[1])
