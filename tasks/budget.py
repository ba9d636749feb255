"""Release identity and the privacy ledger: decide the id, then charge before any noise."""

from __future__ import annotations

from dataclasses import dataclass

from tasks import data_task
from transit_release import opal
from transit_release.accounting.events import StabilityHistogramEvent
from transit_release.accounting.ledger import Ledger
from transit_release.accounting.policy import BudgetPolicy, load_budget_policy
from transit_release.config import ReleaseConfig
from transit_release.home import Home
from transit_release.partition_store import StoredPartition
from transit_release.publish import already_published, check_release_id
from transit_release.screening import Period


@dataclass(frozen=True)
class ReleaseTarget:
    release_id: str
    already_published: bool


@data_task(name="resolve-release")
def resolve_release(home: Home, requested_id: str | None, period: Period, config: ReleaseConfig,
                    fingerprint: str) -> ReleaseTarget:
    """Name the release; detect an identical earlier publication before anything is written.

    Re-publishing an already published release id from the same input and
    parameters draws no noise and spends nothing; any other reuse of an id is
    refused, so no earlier release, report or record is touched.
    """
    release_id = check_release_id(requested_id or opal.release_id_for(period.start, period.end))
    wanted = {(name, b.epsilon, b.delta, fingerprint) for name, b in config.budgets.items()}
    same = lambda earlier: wanted <= {(e.component, e.epsilon, e.delta, e.input_fingerprint) for e in earlier}  # noqa: E731
    return ReleaseTarget(release_id, already_published(home.releases, Ledger(home.ledger), release_id, same))


@data_task(name="plan-spends")
def plan_spends(release_id: str, partitions: list[StoredPartition], config: ReleaseConfig, fingerprint: str,
                code_version: str) -> list[StabilityHistogramEvent]:
    """Describe every mechanism run as an event (one per partition and marginal)."""
    return opal.plan_spends(partitions, config, release_id, fingerprint, code_version)


@data_task(name="charge-budget")
def charge_budget(home: Home, events: list[StabilityHistogramEvent], policy: BudgetPolicy) -> list:
    """Check the budget policy and write every spend to the ledger, in one transaction,
    before any noise is drawn. A refusal writes nothing."""
    return Ledger(home.ledger).charge(events, check=policy.check)


@data_task(name="load-budget-policy")
def load_policy(path: str | None) -> BudgetPolicy:
    return load_budget_policy(path)
