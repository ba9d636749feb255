"""What the reviewer and the auditor read agrees with the accountant and the policy (no Prefect).

* ``transit-release budget`` states each cap in the measure the policy enforces it in (a card cap by privacy-loss
  distributions, at the cap's δ) and the policy's own verdict on the next release of each scope;
* the audit page's cumulative-loss chart plots the figures the audit states (a card's loss after each release ends
  at the stated total; the PLD figure and the cap in its own measure beside it);
* the index links each release to its own MLflow run, never to a ledger anchor run or an audit run tagged with the
  same release id.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import date, timedelta

import pandas as pd
import pytest

from transit_release.accounting.accountant import bounded_release_losses
from transit_release.accounting.ledger import Ledger
from transit_release.accounting.ledger_chain import SPEND
from transit_release.accounting.pld import pld_epsilon, release_components, threshold_delta
from transit_release.accounting.policy import BudgetPolicy, default_policy_path, load_budget_policy
from transit_release.config import load_release_config, read_yaml
from transit_release.errors import BudgetError
from transit_release.inputs.screening import Period
from transit_release.releases import opal

START = date(2026, 1, 5)


def card_weeks(weeks: int) -> list[list]:
    """``weeks`` consecutive card-level Opal weeks at the shipped defaults (ε = 8 per card each), as planned."""
    cfg = load_release_config(None, unit="card")
    out = []
    for w in range(weeks):
        p = Period(START + timedelta(days=7 * w), START + timedelta(days=7 * w + 6))
        out.append(opal.plan_spends(p, cfg, opal.release_id_for(p.start, p.end, "card"), "f" * 64, "v1"))
    return out


def card_cap_policy(epsilon: float) -> dict:
    """The shipped policy's data with its card cap (by privacy-loss distributions) set to ``epsilon``."""
    data = read_yaml(default_policy_path(), "budget policy")
    for cap in data["policy"]["caps"]:
        if cap["name"] == "card-year":
            cap["epsilon"] = epsilon
    return data


@pytest.fixture(scope="module")
def nine_weeks(tmp_path_factory):
    """A home whose ledger holds nine card-level weeks: ε = 72 per card by basic composition, over the shipped
    card cap of 70, which the policy measures by privacy-loss distributions (about 20 there)."""
    home = tmp_path_factory.mktemp("nine-weeks")
    ledger = Ledger(home / "ledger.sqlite")
    for events in card_weeks(9):
        ledger.charge(events)  # recorded as the charges would (the policy is what the test asks about)
    return home


def cap_block(out: str, name: str) -> str:
    """The lines ``budget`` prints under cap ``name`` (up to the next cap's line)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"cap '{name}'"))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("cap '")), len(lines))
    return "\n".join(lines[start:end])


def run_budget(home, *extra: str) -> str:
    res = subprocess.run([sys.executable, "-m", "transit_release.cli", "budget", "--home", str(home), *extra],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_budget_states_the_card_cap_by_pld_and_the_policys_own_verdict(nine_weeks):
    entries = Ledger(nine_weeks / "ledger.sqlite", read_only=True).entries()
    events = [e.event() for e in entries if e.entry_type == SPEND]
    policy = load_budget_policy()
    cap = next(c for c in policy.caps if c.name == "card-year")
    assert cap.measure == "pld"
    components = release_components(events)
    expected = pld_epsilon(components, cap.delta - threshold_delta(components))  # how the policy measures it
    basic = sum(loss.epsilon for _, loss in bounded_release_losses(events))
    assert basic == 72.0 > cap.epsilon > expected

    out = run_budget(nine_weeks)
    block = cap_block(out, "card-year")
    assert "enforced by privacy-loss distributions at δ=1e-06" in block
    assert (f"every card-level release (9): used ε={expected:.4g} by privacy-loss distributions at δ=1e-06 "
            "(basic composition, for reference: ε=72") in block
    assert f"remaining ε={cap.epsilon - expected:.4g}" in block
    assert "remaining ε=0" not in block  # what basic composition would have said
    latest = card_weeks(9)[-1][0].release_id
    policy.check(entries, _next_like(entries, latest))  # the policy itself allows the next week
    assert f"next release like {latest}: the policy allows it" in block

    rows = json.loads(run_budget(nine_weeks, "--json"))
    (card,) = [r for r in rows if r["cap"] == "card-year"]
    assert card["measure"] == "pld" and card["used_epsilon"] == pytest.approx(expected)
    assert card["basic_epsilon"] == 72.0 and card["next_release"] == {"like": latest, "allowed": True, "reason": ""}


def _next_like(entries, rid: str) -> list:
    from dataclasses import replace

    return [replace(e.event(), release_id=f"{rid} (next)") for e in entries
            if e.entry_type == SPEND and e.release_id == rid]


def test_budget_gives_the_refusal_the_policy_would_give(nine_weeks):
    import yaml

    data = card_cap_policy(20.0)
    strict = BudgetPolicy.from_dict(data)
    entries = Ledger(nine_weeks / "ledger.sqlite", read_only=True).entries()
    latest = entries[-1].release_id
    with pytest.raises(BudgetError) as refused:
        strict.check(entries, _next_like(entries, latest))
    (verdict,) = [v for v in strict.next_releases(entries) if v.like == latest]
    assert not verdict.allowed and verdict.reason == str(refused.value)
    policy_file = nine_weeks / "strict.yaml"
    policy_file.write_text(yaml.safe_dump(data))
    out = run_budget(nine_weeks, "--policy", str(policy_file))
    block = cap_block(out, "card-year")
    assert f"next release like {latest}: the policy REFUSES it: {refused.value}" in block


def test_the_audit_charts_plot_what_the_audit_states(monkeypatch, tmp_path):
    """A card's loss after each card-level release is the running sum of what each release costs a card (not the
    running sum of totals), ending at the stated figure; the chart draws that line, the stated PLD figure and the
    cap labelled with its own measure. The trip unit's timeline ends at its stated worst partition."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tests.test_person_loss import trip_release
    from transit_release.integrity import audit
    from transit_release.reports import report

    ledger = Ledger(tmp_path / "ledger.sqlite")
    for events in card_weeks(3):
        ledger.charge(events)
    ledger.charge(trip_release("trip-a"))
    ledger.charge(trip_release("trip-b"))
    loss = audit.cumulative_loss(ledger.entries())
    card = loss["card"]
    points = [p["cumulative_epsilon"] for p in card["timeline"]]
    assert points == [8.0, 16.0, 24.0] and points[-1] == card["basic"]["epsilon"]
    trip = pd.DataFrame(loss["trip"]["timeline"])
    assert trip.groupby("mode")["cumulative_epsilon"].max().max() == loss["trip"]["basic"]["epsilon"] == 16.0

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    policy = load_budget_policy()
    cap = next(c for c in policy.caps if c.unit_of_privacy == "card")
    tl = pd.DataFrame(card["timeline"])
    tl["recorded_at"] = pd.to_datetime(tl["recorded_at"], format="ISO8601")
    report._cumulative_chart(tl, "card", {"name": cap.name, "epsilon": cap.epsilon, "delta": cap.delta,
                                          "measure": cap.measure}, tmp_path / "c.png", card["pld"]["epsilon"])
    ax = figures[-1].axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines[f"basic composition: ε = {card['basic']['epsilon']:.4g}"].get_ydata()) == points
    (pld_label,) = [k for k in lines if k.startswith("privacy-loss distributions")]
    assert list(lines[pld_label].get_ydata()) == [card["pld"]["epsilon"]]
    (cap_label,) = [k for k in lines if k.startswith("cap ")]
    assert "by privacy-loss distributions (δ = 1e-06)" in cap_label and set(lines[cap_label].get_ydata()) == {70.0}


def test_the_index_links_each_release_to_its_own_run(tmp_path):
    """Runs tagged with a release id live in three experiments: the release's own (named by the id), the ledger's
    anchors (made after it) and the audits'. A failed publication's run of the same id (not tagged published)
    comes first. The index links the published release run, as MLflow's own search finds it."""
    from transit_release.reports.tracking import ANCHOR_EXPERIMENT, ANCHOR_ROLE, AUDIT_EXPERIMENT, EXPERIMENT, ROLE_TAG, mlflow_client
    from transit_release.files.home import Home
    from transit_release.reports.release_index import mlflow_runs, release_runs

    home = Home(tmp_path)
    client = mlflow_client(home)
    exps = {name: client.create_experiment(name) for name in (EXPERIMENT, ANCHOR_EXPERIMENT, AUDIT_EXPERIMENT)}
    rid = "opal-card-20260105-20260111"
    failed = client.create_run(exps[EXPERIMENT], run_name=rid, tags={"release_id": rid, "published": "false"})
    own = client.create_run(exps[EXPERIMENT], run_name=rid, tags={"release_id": rid, "published": "false"})
    client.create_run(exps[EXPERIMENT], run_name=f"{rid}/bus/20260105",
                      tags={"release_id": rid, "mlflow.parentRunId": own.info.run_id})
    client.set_tag(own.info.run_id, "published", "true")
    for event in ("charge", "publication"):
        client.create_run(exps[ANCHOR_EXPERIMENT], run_name=f"{rid} {event}", tags={"release_id": rid})
    client.create_run(exps[AUDIT_EXPERIMENT], run_name="audit-x", tags={"release_id": rid})
    (found,) = client.search_runs([exps[EXPERIMENT]], filter_string=f"tags.published = 'true' and "
                                                                    f"attributes.run_name = '{rid}'")
    assert found.info.run_id == own.info.run_id != failed.info.run_id
    assert release_runs(home.mlflow_db) == {rid: (exps[EXPERIMENT], own.info.run_id)}
    links = mlflow_runs(home.mlflow_db)
    assert links[rid].endswith(f"/#/experiments/{exps[EXPERIMENT]}/runs/{own.info.run_id}")
    assert links[""].endswith(f"/#/experiments/{exps[EXPERIMENT]}/runs")
    # a run of the releases' experiment that says it has another role is never the release's own run, newer and
    # tagged published though it is
    client.create_run(exps[EXPERIMENT], run_name=rid,
                      tags={"release_id": rid, "published": "true", ROLE_TAG: ANCHOR_ROLE})
    assert release_runs(home.mlflow_db) == {rid: (exps[EXPERIMENT], own.info.run_id)}
    assert len(release_runs(home.mlflow_db, None)) == 1 and release_runs(home.mlflow_db, None)[rid][1] != own.info.run_id
