"""Issue 28: a real deployment (SuperLink with its database, two SuperNodes) whose ServerApp
process is SIGKILLed after round 1; a new ``flwr run ... resume=true`` ends bit-identical to the
uninterrupted run, for the families the SuperLink-restart test in ``test_resume_deployment.py`` does
not cover. In a file of its own so that ``--dist loadfile`` runs it beside that one."""

from __future__ import annotations

import numpy as np
import pytest
from test_resume_deployment import (  # noqa: F401  (deployment: the module-scoped fixture, one per module)
    LEARNS,
    RUN_CONFIGS,
    check_learns,
    deployment,
    final,
    interrupted_then_resumed,
    straight_final,
)

pytestmark = pytest.mark.slow
#: methods whose clients keep state between rounds (on the SuperNodes, in their client-state-dir)
STATEFUL = {"scaffold", "fedmud"}


@pytest.mark.parametrize("method", ["scaffold", "fedli-ls", "fedmud", "fedmezo"])
def test_serverapp_killed_resumes_bit_for_bit_with_client_state(deployment, method, tmp_path):
    """The ServerApp process is SIGKILLed after round 1 and a new ``flwr run`` resumes: the families
    whose resume the SuperLink-restart test of test_resume_deployment.py does not cover (SCAFFOLD's and FedMUD's clients
    keep state on their SuperNodes; FedLi-LS's server keeps its step, FedMeZO's its seeds)."""
    before = set(deployment.workdir.glob("node-*/*/partition-*/round-*.npz"))
    done, resumed = interrupted_then_resumed(deployment, method, tmp_path / "run", deployment.kill_serverapp)
    reference = straight_final(RUN_CONFIGS[method], tmp_path / "straight", tmp_path / "nodes")
    got = final(tmp_path / "run")
    assert len(got) == len(reference)
    assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(reference, got)), method
    if method in LEARNS:
        check_learns(method, tmp_path / "straight", resumed)
    kept = set(deployment.workdir.glob("node-*/*/partition-*/round-*.npz")) - before
    assert bool(kept) == (method in STATEFUL), (method, sorted(p.name for p in kept))
