"""Where the suite's CPU goes: with ``CPULOG_DIR`` set and this folder on ``PYTHONPATH``, every Python
process of a test run (pytest workers, ``flwr`` CLI, SuperLink, SuperNodes, ``flwr-clientapp``,
``flwr-serverapp``, Ray workers) writes its own CPU time, command line and the test that started it
to ``CPULOG_DIR/<pid>`` once a second, so a process that is killed keeps its last record.
``python .ci/cpu_profile/report.py CPULOG_DIR`` sums them (see docs/development.md)."""

import json
import os
import resource
import sys
import threading
import time

_DIR = os.environ.get("CPULOG_DIR")


def _record() -> None:
    path = os.path.join(_DIR, str(os.getpid()))
    argv = " ".join(sys.argv)[:300]
    while True:
        time.sleep(1.0)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        try:
            with open(path + ".tmp", "w") as f:
                json.dump({"argv": argv, "cpu": usage.ru_utime + usage.ru_stime,
                           "test": os.environ.get("PYTEST_CURRENT_TEST", "")}, f)
            os.replace(path + ".tmp", path)
        except OSError:
            pass


if _DIR:
    threading.Thread(target=_record, daemon=True).start()
