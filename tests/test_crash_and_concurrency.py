"""Four releases at once against a cap that fits two (kills at every step: tests/test_hardening.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import WEEK_FLAGS

from transit_release.accounting.ledger import Ledger

pytestmark = pytest.mark.flow


@pytest.fixture(scope="module")
def api_env(prefect_harness):
    """Environment for subprocesses that use the session's Prefect test server."""
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    return {**os.environ, "PREFECT_API_URL": str(url), "PREFECT_LOGGING_LEVEL": "WARNING",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


def release_cmd(week, home: Path, rid: str, *extra: str) -> list[str]:
    """A release command without a Dask cluster: four run at once on the test machine's two cores (the cluster
    itself is tests/test_scale_out.py's)."""
    return [sys.executable, "-m", "transit_release.cli", "release", "--trips", str(week["trips"]),
            "--stops", str(week["stops"]), "--home", str(home), "--release-id", rid, "--workers", "0",
            *WEEK_FLAGS, *extra]


def test_four_releases_at_once_against_a_cap_that_fits_two(api_env, tiny_week, tmp_path):
    home = tmp_path / "home"
    policy = tmp_path / "policy.yaml"
    from transit_release.accounting.policy import default_policy_path

    policy.write_text(default_policy_path().read_text().replace("      epsilon: 8.0\n      delta: 1.0e-6\n",
                                                                "      epsilon: 16.0\n      delta: 1.0e-5\n", 1)
                      .replace("allow_unbounded_person_loss: false", "allow_unbounded_person_loss: true"))
    # trip level: the cap per partition is the one raced for
    # a fresh home: the four processes also race to create the MLflow store
    # stderr to files, not pipes: waiting on one process while another fills an unread pipe would hang them
    logs = [tmp_path / f"r{i}.err" for i in range(4)]
    handles = [log.open("w") for log in logs]
    procs = [subprocess.Popen(release_cmd(tiny_week, home, f"r{i}", "--policy", str(policy), "--unit", "trip"),
                              env=api_env,
                              stdout=subprocess.DEVNULL, stderr=h) for i, h in enumerate(handles)]
    for h in handles:
        h.close()
    outcomes = [(p.wait(timeout=600), log.read_text()) for p, log in zip(procs, logs)]
    codes = sorted(c for c, _ in outcomes)
    assert codes == [0, 0, 3, 3], [e[-2000:] for _, e in outcomes]
    for code, err in outcomes:
        if code == 3:
            assert "transit-release: error: Cannot release 'bus/20160808' without exceeding the budget. " \
                   "Requested: ε=8.000; remaining: ε=0.000; short by ε=8.000" in err
    ledger = Ledger(home / "ledger.sqlite")
    assert ledger.verify() == 2 * 168 + 2
    assert len(ledger.published()) == 2
    assert sorted(p.name for p in (home / "releases").iterdir() if p.name != "catalog.jsonld") == \
        sorted(ledger.published())
    catalog = (home / "releases" / "catalog.jsonld").read_text()  # both publications listed, whichever wrote last
    assert all(f'"{rid}/"' in catalog for rid in ledger.published())
