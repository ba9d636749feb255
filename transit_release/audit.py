"""Compliance audit: is the record intact, and how much privacy has been spent?

Three records must agree: the ledger (source of truth), the published
release directories (manifests and file hashes) and the MLflow mirror. This
module compares them as plain data; reading MLflow is the caller's job, so the
library stays free of MLflow.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from transit_release.accounting.accountant import ADVANCED_COMPOSITION, compose
from transit_release.accounting.ledger import PUBLISHED, SPEND, LedgerEntry
from transit_release.errors import LedgerIntegrityError
from transit_release.publish import MANIFEST, sha256_file, verify_release

DEFAULT_DELTA_PRIME = 1e-7


@dataclass(frozen=True)
class Discrepancy:
    record: str  # ledger | release | mlflow
    subject: str
    problem: str

    def __str__(self) -> str:
        return f"{self.record}: {self.subject}: {self.problem}"


@dataclass(frozen=True)
class MirrorRun:
    """What the audit needs of one MLflow run."""

    run_id: str
    release_id: str
    parent: bool
    deleted: bool
    published_tag: str | None
    ledger_seqs: dict[int, tuple[str, float, float]]  # seq -> (marginal, ε, δ) from a partition run's params
    partition: str | None = None


@dataclass
class AuditResult:
    entries: int = 0
    releases_published: list[str] = field(default_factory=list)
    charged_not_published: dict[str, int] = field(default_factory=dict)  # release id -> spends
    staging_leftovers: list[str] = field(default_factory=list)
    discrepancies: list[Discrepancy] = field(default_factory=list)
    loss: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.discrepancies

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ok"] = self.ok
        d["discrepancies"] = [str(x) for x in self.discrepancies]
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)


def check_ledger(verify) -> list[Discrepancy]:
    """Run the ledger's own verification (``Ledger.verify``) and turn a failure into a discrepancy."""
    try:
        verify()
    except LedgerIntegrityError as exc:
        return [Discrepancy("ledger", "hash chain", str(exc))]
    return []


def check_releases(releases_dir: Path, published: dict[str, LedgerEntry]) -> tuple[list[Discrepancy], list[str]]:
    """Every published release is on disk, intact, and every release on disk is on the ledger."""
    problems: list[Discrepancy] = []
    leftovers: list[str] = []
    on_disk = {}
    if releases_dir.is_dir():
        for d in sorted(releases_dir.iterdir()):
            if d.name.startswith(".tmp-"):
                leftovers.append(d.name)
            elif d.is_dir():
                on_disk[d.name] = d
    for rid, entry in sorted(published.items()):
        d = on_disk.get(rid)
        if d is None:
            problems.append(Discrepancy("release", rid, "published on the ledger but missing from releases/"))
            continue
        manifest = d / MANIFEST
        if not manifest.is_file():
            problems.append(Discrepancy("release", rid, f"{MANIFEST} is missing"))
            continue
        if sha256_file(manifest) != entry.data()["manifest_sha256"]:
            problems.append(Discrepancy("release", rid, f"{MANIFEST} differs from the one recorded at publication"))
        for p in verify_release(d):
            problems.append(Discrepancy("release", rid, p.removeprefix(f"{rid}/").removeprefix(f"{rid}: ")))
    for rid in sorted(set(on_disk) - set(published)):
        problems.append(Discrepancy("release", rid, "in releases/ but never recorded as published on the ledger"))
    return problems, leftovers


def check_mirror(spends: list[LedgerEntry], published: dict[str, LedgerEntry],
                 runs: list[MirrorRun]) -> list[Discrepancy]:
    """Every ledger spend of a published release is mirrored in MLflow, and back."""
    problems: list[Discrepancy] = []
    by_release: dict[str, dict[int, tuple[str, float, float]]] = {}
    for e in spends:
        ev = e.event()
        by_release.setdefault(e.release_id, {})[e.seq] = (ev.component, ev.epsilon, ev.delta)
    runs_by_release: dict[str, list[MirrorRun]] = {}
    for r in runs:
        runs_by_release.setdefault(r.release_id, []).append(r)
        if r.deleted:
            problems.append(Discrepancy("mlflow", r.release_id, f"run {r.run_id} was deleted"))
        if r.release_id not in by_release:
            problems.append(Discrepancy("mlflow", r.release_id,
                                        f"run {r.run_id} records spends of a release the ledger does not know"))
    for rid, ledger_seqs in sorted(by_release.items()):
        live = [r for r in runs_by_release.get(rid, []) if not r.deleted]
        parents = [r for r in live if r.parent]
        if rid not in published:
            for r in parents:
                if r.published_tag == "true":
                    problems.append(Discrepancy("mlflow", rid, f"run {r.run_id} says published; the ledger does not"))
            continue
        if not parents:
            problems.append(Discrepancy("mlflow", rid, "published release has no MLflow run"))
            continue
        if all(r.published_tag != "true" for r in parents):
            problems.append(Discrepancy("mlflow", rid, "MLflow run is not tagged published"))
        mirrored: dict[int, tuple[str, float, float]] = {}
        for r in live:
            mirrored.update(r.ledger_seqs)
        missing = sorted(set(ledger_seqs) - set(mirrored))
        extra = sorted(set(mirrored) - set(ledger_seqs))
        if missing:
            problems.append(Discrepancy("mlflow", rid, f"ledger spends {_ranges(missing)} are not in MLflow"))
        if extra:
            problems.append(Discrepancy("mlflow", rid, f"MLflow spends {_ranges(extra)} are not on the ledger"))
        for seq in sorted(set(ledger_seqs) & set(mirrored)):
            if mirrored[seq] != ledger_seqs[seq]:
                problems.append(Discrepancy("mlflow", rid, f"spend {seq} differs between MLflow and the ledger"))
    return problems


def _ranges(seqs: list[int]) -> str:
    out, start, prev = [], None, None
    for s in seqs + [None]:
        if start is None:
            start = prev = s
        elif s is not None and s == prev + 1:
            prev = s
        else:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = s
    return ", ".join(out)


def cumulative_loss(entries: list[LedgerEntry], delta_prime: float = DEFAULT_DELTA_PRIME) -> dict:
    """All-time loss per unit of privacy: overall, per mode, per partition, per marginal, over time."""
    spends = [e for e in entries if e.entry_type == SPEND]
    events = [(e, e.event()) for e in spends]
    out = {}
    for (unit, relation), report in compose(ev for _, ev in events).items():
        adv = report.advanced_per_partition(delta_prime)
        marginal: dict[str, dict[str, float]] = {}
        timeline = []
        running: dict[str, float] = {}
        for e, ev in events:
            if (ev.unit_of_privacy, ev.neighbouring) != (unit, relation):
                continue
            cell = marginal.setdefault(ev.partition, {})
            cell[ev.component] = cell.get(ev.component, 0.0) + ev.epsilon
            running[ev.partition] = running.get(ev.partition, 0.0) + ev.epsilon
            timeline.append({"recorded_at": e.recorded_at, "mode": ev.mode, "partition": ev.partition,
                             "cumulative_epsilon": running[ev.partition]})
        out[unit] = {
            "neighbouring": relation,
            "basic": {"epsilon": report.overall.epsilon, "delta": report.overall.delta},
            "advanced": {"epsilon": report.advanced_overall(delta_prime).epsilon,
                         "delta": report.advanced_overall(delta_prime).delta,
                         "delta_prime": delta_prime, "theorem": ADVANCED_COMPOSITION},
            "per_mode": {m: {"epsilon": x.epsilon, "delta": x.delta} for m, x in report.per_mode().items()},
            "per_partition": {p: {"epsilon": x.epsilon, "delta": x.delta, "spends": len(report.spends[p]),
                                  "advanced_epsilon": adv[p].epsilon, "advanced_delta": adv[p].delta}
                              for p, x in report.per_partition.items()},
            "per_partition_marginal": marginal,
            "timeline": timeline,
        }
    return out


def summarise(entries: list[LedgerEntry]) -> tuple[list[str], dict[str, int], list[LedgerEntry], dict[str, LedgerEntry]]:
    spends = [e for e in entries if e.entry_type == SPEND]
    published = {e.release_id: e for e in entries if e.entry_type == PUBLISHED}
    charged: dict[str, int] = {}
    for e in spends:
        if e.release_id not in published:
            charged[e.release_id] = charged.get(e.release_id, 0) + 1
    return sorted(published), charged, spends, published
