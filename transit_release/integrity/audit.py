"""Compliance audit: is the record intact, and how much privacy has been spent?

Records that must agree: the ledger (source of truth), the published release
directories (manifests and file hashes), the MLflow mirror of every spend, and
the anchors of the ledger's head kept outside the ledger file (each public
manifest, and MLflow after every charge and publication). With a ledger key
(kept outside the home) the keyed chain, the keyed high-water mark beside the
key, the MACs of publication intents and of MLflow anchors are checked too.
This module compares them as plain data; reading MLflow is the caller's job, so
the library stays free of MLflow. Nothing found in a tampered home makes the
audit crash: every malformed or forged record is a discrepancy.
"""

from __future__ import annotations

import json
from fractions import Fraction
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from transit_release.accounting.accountant import ADVANCED_COMPOSITION, compose
from transit_release.accounting.ledger_chain import PUBLISHED, SPEND, LedgerEntry, anchor_mac
from transit_release.accounting.ledger_schema import TRIGGERS
from transit_release.accounting.person import DEFAULT_PLD_DELTA, person_loss, person_losses
from transit_release.errors import LedgerIntegrityError, TransitReleaseError
from transit_release.files.home import RELEASES_TOOL_FILES, RENAME_PROBE_PATTERN, Home
from transit_release.files.publish import MANIFEST, sha256_file, verify_release
from transit_release.opendata.catalog import PART_PATTERN

DEFAULT_DELTA_PRIME = 1e-7
#: The key of ``loss`` that holds a person's loss per population (every other key is a unit of privacy).
PERSON = "person"


@dataclass(frozen=True)
class Discrepancy:
    record: str  # ledger | release | mlflow | anchor
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
    ledger_seqs: dict[int, tuple[str, float, float]]  # seq -> (component, ε, δ) the run mirrors
    partition: str | None = None


@dataclass
class AuditResult:
    entries: int = 0
    releases_published: list[str] = field(default_factory=list)
    charged_not_published: dict[str, int] = field(default_factory=dict)  # release id -> spends
    pending_publications: list[str] = field(default_factory=list)  # interrupted after the intent: run repair
    staging_leftovers: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)  # what dead runs left (paths relative to the home)
    in_flight: list[str] = field(default_factory=list)  # releases a live run was making while the audit read the home
    anchors_checked: dict[str, int] = field(default_factory=dict)  # where -> how many anchors matched
    card_unbounded_periods: list[str] = field(default_factory=list)  # periods of trip-level releases
    keyed: bool = False
    threat_model: list[str] = field(default_factory=list)
    discrepancies: list[Discrepancy] = field(default_factory=list)
    loss: dict = field(default_factory=dict)
    loss_counts_mirrored: dict[str, int] = field(default_factory=dict)  # release id -> spends only MLflow holds
    #: every population, declared in the budget policy or named on the ledger: name, covers (None: undeclared),
    #: declared, the first release that named it, its releases
    populations: list[dict] = field(default_factory=list)
    #: the ledger could not be opened: nothing else was checked (its one discrepancy says why)
    ledger_unreadable: bool = False

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


def check_protections(schema) -> list[Discrepancy]:
    """The ledger's schema is exactly the one this tool creates (``schema()``:
    :class:`~transit_release.accounting.ledger_schema.SchemaCheck`): every append-only trigger (:data:`TRIGGERS`) in
    place and unaltered, nothing foreign (a trigger, view, table or index this tool never creates)."""
    try:
        checked = schema()
    except Exception as exc:  # noqa: BLE001 - a ledger that cannot be read is reported by its verification
        return [Discrepancy("ledger", "triggers", f"cannot be listed ({type(exc).__name__})")]
    problems = []
    dropped = [t for t in TRIGGERS if f"trigger {t}" in checked.missing]
    older = [t for t in TRIGGERS if f"trigger {t}" in checked.older]
    for names, how in ((dropped, "dropped: entries could have been edited or deleted unseen"),
                       (older, "absent from a ledger of an older schema (a release adds them)")):
        if names:
            problems.append(Discrepancy("ledger", "triggers", f"{len(names)} of the {len(TRIGGERS)} append-only "
                                        f"triggers are missing ({', '.join(names)}): {how}"))
    other = [m for m in checked.missing if not m.startswith("trigger ")]
    if other:
        problems.append(Discrepancy("ledger", "schema", f"{', '.join(other)} missing: dropped"))
    if checked.foreign:
        problems.append(Discrepancy("ledger", "schema", f"{', '.join(checked.foreign)}: never created by this tool "
                                    "(a foreign trigger, view or table can drop or alter what a charge writes); "
                                    "restore the ledger from a backup"))
    if checked.altered:
        problems.append(Discrepancy("ledger", "schema", f"{', '.join(checked.altered)}: differ(s) from what this tool "
                                    "creates (a rewritten append-only trigger may refuse nothing); restore the ledger "
                                    "from a backup"))
    return problems


def check_intents(intents, check_intent) -> list[Discrepancy]:
    """With a key: every publication intent carries a valid MAC (``check_intent`` raises otherwise)."""
    problems = []
    for intent in intents:
        try:
            check_intent(intent)
        except TransitReleaseError as exc:
            problems.append(Discrepancy("ledger", f"publication intent {intent.id}", str(exc).split(": ", 1)[-1]))
    return problems


def check_high_water(check) -> list[Discrepancy]:
    """With a key: the ledger holds the keyed high-water mark kept beside the key."""
    try:
        check()
    except TransitReleaseError as exc:
        return [Discrepancy("anchor", "keyed high-water mark", str(exc))]
    return []


def valid_entries(entries: list[LedgerEntry]) -> list[LedgerEntry]:
    """The entries the accountant can read: spends whose event is valid, and publications (an invalid spend is
    the ledger verification's discrepancy; it is left out of the loss rather than crash it)."""
    out = []
    for e in entries:
        if e.entry_type == SPEND:
            try:
                e.event()
            except (ValueError, TypeError, KeyError):
                continue
        elif e.entry_type != PUBLISHED:
            continue
        out.append(e)
    return out


def mirrored_entries(ledger_entries: list[LedgerEntry], mirrored: dict[str, list[dict]]) -> list[LedgerEntry]:
    """Spends MLflow mirrors (``ledger_spends.json`` of each release's run) for releases the ledger holds no spend
    of, as entries the accountant can count (their hash as MLflow recorded it; unreadable ones left out)."""
    on_ledger = {e.release_id for e in ledger_entries if e.entry_type == SPEND}
    out = []
    for rid, spends in sorted(mirrored.items()):
        if rid in on_ledger:
            continue
        for s in spends:
            try:
                e = LedgerEntry(int(s["seq"]), str(s.get("recorded_at") or "1970-01-01T00:00:00+00:00"), SPEND, rid,
                                json.dumps(s["event"], sort_keys=True), "", str(s.get("hash", "")))
                if e.event().release_id != rid:
                    continue
            except (KeyError, TypeError, ValueError):
                continue
            out.append(e)
    return out


def guarded(record: str, subject: str, check, *args, **kwargs):
    """``check(*args)``; an unexpected error on a malformed record becomes one discrepancy (and None)."""
    try:
        return check(*args, **kwargs), []
    except Exception as exc:  # noqa: BLE001 - a tampered home must give a discrepancy, never a traceback
        return None, [Discrepancy(record, subject, f"could not be checked: a malformed record "
                                  f"({type(exc).__name__})")]


def _release_dirs(home: Home) -> dict[str, tuple[Path, bool]]:
    """Release id → (directory, under the public ``releases/``), staging directories excluded."""
    out = {}
    for root, public in ((home.test_releases, False), (home.releases, True)):
        if root.is_dir():
            for d in sorted(root.iterdir()):
                if d.is_dir() and not d.name.startswith("."):
                    out[d.name] = (d, public)
    return out


def check_releases(home: Home, published: dict[str, LedgerEntry],
                   charged_ids: set[str] | None = None,
                   known_staging: set[str] | None = None) -> tuple[list[Discrepancy], list[str], dict]:
    """Every published release is on disk, intact and exactly what its manifest lists; every release on disk is
    on the ledger; nothing under ``releases/`` was made with the test seed, and nothing is there but releases
    and :data:`~transit_release.files.home.RELEASES_TOOL_FILES`. Returns the problems, the staging leftovers and each
    published release's manifest (for the anchors).

    ``known_staging`` (a keyed home): the staging directories this tool can vouch for (named by a pending intent
    carrying the key's MAC, or held by a live run); any other ``.tmp-*`` directory is a discrepancy, not a
    leftover, since nothing shows the tool wrote it."""
    problems: list[Discrepancy] = []
    leftovers = []
    for root in (home.releases, home.test_releases, home.staging):
        for d in sorted(root.glob(".tmp-*")) if root.is_dir() else []:
            name = d.name if root != home.staging else str(d.relative_to(home.root))
            if known_staging is None or d.name in known_staging:
                leftovers.append(name)
            else:
                problems.append(Discrepancy("release", str(d.relative_to(home.root)), "unknown: no publication "
                                            "intent carrying the key's MAC and no live run names it, so nothing "
                                            "shows this tool wrote it; remove it"))
    on_disk = _release_dirs(home)
    manifests = {}
    for rid, entry in sorted(published.items()):
        if rid not in on_disk:
            problems.append(Discrepancy("release", rid, "published on the ledger but missing from releases/"))
            continue
        d, public = on_disk[rid]
        manifest = d / MANIFEST
        if not manifest.is_file():
            problems.append(Discrepancy("release", rid, f"{MANIFEST} is missing"))
            continue
        if sha256_file(manifest) != (entry.data() or {}).get("manifest_sha256"):
            problems.append(Discrepancy("release", rid, f"{MANIFEST} differs from the one recorded at publication"))
        for p in verify_release(d):
            problems.append(Discrepancy("release", rid, p.removeprefix(f"{rid}/").removeprefix(f"{rid}: ")))
        if charged_ids is not None and rid not in charged_ids:
            problems.append(Discrepancy("release", rid, "published on the ledger without a single spend: its files "
                                        "were never charged (a forged publication?); withdraw it"))
        try:
            manifests[rid] = json.loads(manifest.read_text(encoding="utf-8"))
        except ValueError:
            continue
        if not isinstance(manifests[rid], dict):
            problems.append(Discrepancy("release", rid, f"its {MANIFEST} is not a manifest"))
            manifests[rid] = {}
        elif manifests[rid].get("release_id") != rid:
            problems.append(Discrepancy("release", rid, f"its {MANIFEST} names another release"))
    for root in (home.releases, home.test_releases):
        for p in sorted(root.iterdir()) if root.is_dir() else []:
            if p.name.startswith(".tmp-") and p.is_dir():
                continue  # staging directories, listed above
            if root == home.releases and p.name in RELEASES_TOOL_FILES and p.is_file() and not p.is_symlink():
                continue  # what the tool itself writes there (the DCAT catalogue of the releases)
            if root == home.releases and RENAME_PROBE_PATTERN.fullmatch(p.name) and p.is_dir() \
                    and not p.is_symlink():
                leftovers.append(p.name)  # the staging place's rename test (Home.staging_root)
                continue
            if root == home.releases and PART_PATTERN.fullmatch(p.name) and p.is_file() and not p.is_symlink():
                leftovers.append(p.name)  # a rewrite of the catalogue a killed run left: `repair` removes it
                continue
            if p.is_symlink() or not p.is_dir() or p.name.startswith("."):
                problems.append(Discrepancy("release", str(p.relative_to(home.root)), "not a release: nothing but "
                                            "release directories belongs there; remove it"))
    for rid, (d, public) in on_disk.items():
        if rid not in published:
            problems.append(Discrepancy("release", rid, f"{NEVER_RECORDED} on the ledger"))
        if public:
            try:
                source = json.loads((d / MANIFEST).read_text(encoding="utf-8")).get("noise_source")
            except (OSError, ValueError, AttributeError):
                source = None
            if source == "test-seed":
                problems.append(Discrepancy("release", rid, "made with the test-only noise seed but placed under "
                                            "releases/: its noise can be regenerated; withdraw it"))
    return problems, leftovers, manifests


def in_flight_ids(live: set[str], snapshot_head: tuple[int, str], current: list[LedgerEntry],
                  current_intents: set[str], snapshot_intents: set[str]) -> set[str]:
    """The releases a live run was making while the audit read the home: those whose run holds its working
    directory's lock (``live``), and those the ledger recorded (entries, publication intents) after the audit's
    snapshot (``current``: the ledger read again afterwards, trusted only if it still holds the snapshot's head
    ``snapshot_head``: a ledger replaced meanwhile makes nothing in flight)."""
    seq, digest = snapshot_head
    if seq and not any(e.seq == seq and e.hash == digest for e in current):
        return set(live)
    return set(live) | {e.release_id for e in current if e.seq > seq} | (current_intents - snapshot_intents)


#: What a live run's publication shows before the ledger's snapshot says it is published (its MLflow run is tagged
#: published after the ``published`` entry).
_NOT_YET_TAGGED = "MLflow run is not tagged published"
#: A release directory the ledger does not publish.
NEVER_RECORDED = "in releases/ but never recorded as published"


def set_aside_in_flight(problems: list[Discrepancy], in_flight: set[str], published: set[str],
                        live: set[str], intended: set[str] | None = None) -> tuple[list[Discrepancy], list[str]]:
    """The discrepancies about releases in flight (:func:`in_flight_ids`) that are not yet published in the audit's
    snapshot are not findings: the home's records of a release being made run ahead of the snapshot (a directory
    renamed before its ``published`` entry, its MLflow runs, its report folder). So is a published release's run not
    yet tagged published while its run lives. They are set aside, never recorded as a failure; the next audit checks
    the release in full. A published release's other discrepancies always stand (a process holding a lock cannot hide
    them). Neither does a lock vouch for a release directory: a run renames its directory into ``releases/`` only
    after its publication intent is on the ledger, so a directory with no intent (``intended``: the release ids of
    the intents in the snapshot or in the ledger read again, and of what it recorded after the snapshot) is no
    live run's, and every discrepancy about it stands whoever holds a lock named after it. Returns the other
    discrepancies and the releases in flight."""
    unvouched = set() if intended is None else {
        p.subject for p in problems if p.record == "release" and p.problem.startswith(NEVER_RECORDED)
        and p.subject not in intended}
    kept, aside = [], set()
    for p in problems:
        if p.record in ("release", "anchor", "mlflow") and p.subject in in_flight and p.subject not in unvouched and (
                p.subject not in published or (p.subject in live and p.problem.startswith(_NOT_YET_TAGGED))):
            aside.add(p.subject)
        else:
            kept.append(p)
    return kept, sorted(aside | (in_flight - published - unvouched))


def check_anchors(check_anchor, manifests: dict[str, dict], mlflow_anchors: list[dict],
                  ledger_keyed: bool = True, expect_anchored: Iterable[str] = (),
                  key: bytes | None = None) -> tuple[list[Discrepancy], dict[str, int]]:
    """Every ledger head recorded outside the ledger still matches it (``check_anchor(seq, hash)``), and a ledger
    that an anchor says was keyed still is (stripping every MAC and re-chaining would otherwise pass for a ledger
    that never had a key). Every release in ``expect_anchored`` (the published ones, when MLflow is there) must
    have at least one anchor run: each was anchored after its charge, before any noise was drawn. With ``key``,
    an MLflow anchor carrying a MAC that does not match is named (not written by this tool)."""
    problems = [Discrepancy("mlflow", "store", a["problem"]) for a in mlflow_anchors if "problem" in a]
    mlflow_anchors = [a for a in mlflow_anchors if "problem" not in a]
    anchored = {a["release_id"] for a in mlflow_anchors}
    for rid in sorted(set(expect_anchored) - anchored):
        problems.append(Discrepancy("anchor", rid, "published, but no ledger head was anchored in MLflow for it "
                                    "(its anchor runs were removed from the store?)"))
    if not ledger_keyed:
        for where, anchor in keyed_anchors(manifests, mlflow_anchors):
            problems.append(Discrepancy("anchor", where, f"{anchor} says the ledger was keyed, but it holds no MAC: "
                                        "it was rewritten without the key; restore it from a backup"))
    matched = {"manifests": 0, "mlflow": 0}
    for rid, m in sorted(manifests.items()):
        head = m.get("ledger_head")
        if not head:
            continue  # releases made before heads were anchored
        try:
            err = check_anchor(int(head["seq"]), str(head["hash"]))
        except (KeyError, TypeError, ValueError):
            err = "it cannot be read"
        if err:
            problems.append(Discrepancy("anchor", rid, f"the ledger head in its public manifest does not match: {err}"))
        else:
            matched["manifests"] += 1
    for a in mlflow_anchors:
        err = check_anchor(a["seq"], a["hash"])
        if err:
            problems.append(Discrepancy("anchor", a["release_id"] or a["run_id"],
                                        f"the ledger head anchored in MLflow at {a['event']} does not match: {err}"))
        elif key and a.get("mac") and a["mac"] != anchor_mac(key, a["seq"], a["hash"]):
            problems.append(Discrepancy("anchor", a["release_id"] or a["run_id"],
                                        f"the ledger head anchored in MLflow at {a['event']} carries a MAC that does "
                                        "not match the key: it was not written by this tool"))
        else:
            matched["mlflow"] += 1
    return problems, matched


#: What the audit recomputes of each manifest's statement about a passenger (its PLD figure is a function of the
#: same spends, and the manifest's own bytes are checked against the ledger's publication entry).
_PERSON_CLAIMS = ("population", "releases", "bounded", "unbounded_by", "basic", "per_kind", "other_populations",
                  "ledger_entries")


def check_person_statements(entries: list[LedgerEntry], manifests: dict[str, dict]) -> list[Discrepancy]:
    """Every published manifest's ``privacy.person_at_publication`` is what the ledger up to the head it anchors
    says of one passenger of its population (a release charged in between staging and publication is not in it:
    the statement names the entry it counts up to)."""
    problems = []
    for rid, m in sorted(manifests.items()):
        claim = (m.get("privacy") or {}).get("person_at_publication")
        head = (m.get("ledger_head") or {}).get("seq")
        if not claim or not isinstance(head, int):
            continue  # releases made before the person was stated
        upto = [e.event() for e in entries[:head] if e.entry_type == SPEND]
        then = {**person_loss(upto, claim.get("population", ""), with_pld=False).to_dict(), "ledger_entries": head}
        wrong = [k for k in _PERSON_CLAIMS if claim.get(k) != then[k]]
        if wrong:
            problems.append(Discrepancy("release", rid, "its manifest's statement about a passenger differs from what "
                                        f"the ledger up to entry {head} says ({', '.join(wrong)})"))
    return problems


def keyed_anchors(manifests: dict[str, dict], mlflow_anchors: list[dict]) -> list[tuple[str, str]]:
    """The anchors (published manifests, MLflow) recorded while the ledger was keyed: (release id, which anchor)."""
    out = [(rid, "its public manifest's ledger head") for rid, m in sorted(manifests.items())
           if isinstance(m.get("ledger_head"), dict) and m["ledger_head"].get("keyed")]
    out += [(a["release_id"] or a["run_id"], f"the ledger head anchored in MLflow at {a['event']}")
            for a in mlflow_anchors if a.get("keyed")]
    return out


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
            problems.append(Discrepancy("mlflow", rid, "MLflow run is not tagged published "
                                        "(run `transit-release repair`)"))
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


def threat_model(keyed: bool, key_configured: bool, anchors: dict[str, int],
                 mirrored_only: dict[str, int] | None = None,
                 allow_unbounded_person_loss: bool = False, recorded_keyed: bool = False) -> list[str]:
    """What this audit can and cannot vouch for, given how the home is set up (docs/threat-model.md).
    ``recorded_keyed``: the key's records beside the key name this ledger as one it has MACed."""
    out = ["The audit detects edits and deletions behind the ledger's triggers (hash chain), dropped, rewritten or "
           "foreign triggers (the ledger's exact schema), spends that give budget back (database trigger and event "
           "checks), changed or added files in published releases, spends missing from the MLflow mirror, and a "
           "ledger older than any anchor the home holds."]
    if keyed and key_configured:
        out.append("The ledger is keyed (HMAC with a key outside the home) and its high-water mark is kept beside the "
                   "key: someone who can write the home but not the key's directory cannot forge, alter, re-chain or "
                   "delete entries, even the newest with every anchor of them, without this audit failing and the "
                   "next charge being refused. They can still destroy the home, or its ledger, outright; keep "
                   "backups (`transit-release backup`).")
    elif keyed:
        out.append("The ledger is keyed but no key was given to this audit (TRANSIT_RELEASE_LEDGER_KEY_FILE): the "
                   "MACs were not checked.")
    elif key_configured and recorded_keyed:
        out.append("The key's records beside the key name this ledger as one it has MACed, but it holds no MAC: it "
                   "was emptied, replaced or deleted (see the discrepancies); the audit cannot vouch for it.")
    elif key_configured:
        out.append("A ledger key is configured (kept outside the home) but the ledger holds no MAC: a new ledger's "
                   "first charge MACs it and starts its high-water mark beside the key; a ledger with history is keyed "
                   "only by `transit-release repair --adopt-ledger-key` once its audit passes.")
    else:
        out.append("The ledger is not keyed: someone with write access to the home alone could rebuild the whole "
                   "ledger with a consistent hash chain and matching MLflow anchors (both live in the home). What would "
                   "still expose it is every copy of a published manifest held outside the home (its ledger head must "
                   "match) and an MLflow store kept elsewhere. Configure a ledger key kept outside the home "
                   "(TRANSIT_RELEASE_LEDGER_KEY_FILE) to close this.")
    out.append(f"Anchors checked: {anchors.get('manifests', 0)} in public manifests, {anchors.get('mlflow', 0)} in "
               "MLflow.")
    if mirrored_only:
        out.append(f"The loss figures count {sum(mirrored_only.values())} spend(s) of {len(mirrored_only)} release(s) "
                   f"that MLflow mirrors but the ledger lacks ({', '.join(sorted(mirrored_only))}): their noise may "
                   "have been drawn, so they are spent whatever the ledger says.")
    if allow_unbounded_person_loss:
        out.append("The budget policy allows trip-level releases to leave a passenger's loss unbounded "
                   "(allow_unbounded_person_loss: true): a passenger's loss is stated as unbounded wherever one is "
                   "counted.")
    return out


def _pld(unit: str, report, events: list, pld_delta: float) -> dict | None:
    """The privacy-loss-distribution figure of a unit whose spends are discrete Laplace histograms (trip: its worst
    partition; card: every release, each at its P most expensive partitions); None for other units."""
    from transit_release.accounting.accountant import scope_of
    from transit_release.accounting.pld import cumulative_loss as pld_loss, release_components

    if unit == "trip":
        worst = max(report.per_cell, key=lambda c: (report.per_cell[c].epsilon_exact, c))
        mine = [e for e in events if scope_of(e).cells and worst in scope_of(e).cells]
    elif unit == "card":
        mine = events
    else:
        return None
    try:
        loss = pld_loss(release_components(mine), pld_delta)
    except ValueError:
        return None
    return {"epsilon": loss.pld_epsilon, "delta": loss.pld_total_delta, "pld_delta": pld_delta,
            "threshold_delta": loss.threshold_delta, "edge_delta": loss.edge_delta, "mechanisms": loss.mechanisms,
            "method": "privacy-loss distributions of the discrete Laplace parts (Google's dp_accounting, built "
                      "from the sampled integer noise, truncated where the release truncated it, its edges as "
                      "infinite loss, read at δ' plus the edges), the thresholds' δ added beside"}


#: Weekly releases a calendar year can hold: the audit projects a card's loss over that many at the latest
#: card-level release's parameters (what a year of this schedule would cost).
YEAR_OF_WEEKLY_RELEASES = 52


def year_projection(card_events: list, pld_delta: float, releases: int = YEAR_OF_WEEKLY_RELEASES) -> dict | None:
    """A card's loss over ``releases`` releases like the latest card-level one (its recorded spends: ε_j, δ_j, k,
    P, the noise), by basic composition and by PLD at ``pld_delta``; None without a card-level release."""
    from transit_release.accounting.pld import DLapComponent, cumulative_loss as pld_loss, release_components

    if not card_events:
        return None
    latest = card_events[-1].release_id
    mine = [e for e in card_events if e.release_id == latest]
    try:
        one = release_components(mine)
    except ValueError:
        return None
    loss = pld_loss([DLapComponent(c.scale, c.sensitivity, c.count * releases, c.threshold_delta, c.noise_bound)
                     for c in one], pld_delta)
    e = mine[0]
    return {"releases": releases, "like_release": latest,
            "parameters": {"max_trips_per_partition": e.max_trips_per_partition, "max_partitions": e.max_partitions,
                           "epsilons": sorted({ev.epsilon for ev in mine}),
                           "noise": "truncated" if getattr(e, "noise_bound", None) is not None else "untruncated"},
            "basic": {"epsilon": loss.basic_epsilon, "delta": loss.basic_delta},
            "pld": {"epsilon": loss.pld_epsilon, "delta": loss.pld_total_delta}}


def unit_losses(loss: dict) -> dict:
    """The per-unit figures of an audit's ``loss`` (everything but the person's)."""
    return {unit: x for unit, x in loss.items() if unit != PERSON}


def _cell_timeline(spends: list) -> list[dict]:
    """One point per spend (in ledger order): the loss of the worst cell of the spend's mode so far, by basic
    composition, as the accountant composes it (spends add up within a cell, the worst cell is the unit's loss;
    a spend without a calendar scope adds to every cell). The last point of the worst mode is the unit's stated
    basic figure."""
    from transit_release.accounting.accountant import PrivacyLoss, scope_of

    cells: dict[str, Fraction] = {}
    worst: dict[str, Fraction] = {}  # mode -> its worst cell so far (cells only grow)
    everywhere = Fraction(0)
    out = []
    for e, ev in spends:
        scope = scope_of(ev)
        eps = PrivacyLoss.of(ev.epsilon, ev.delta).epsilon_exact
        mode = scope.mode or ev.unit_of_privacy
        if scope.cells is None:
            everywhere += eps
        else:
            for c in scope.cells:
                cells[c] = cells.get(c, Fraction(0)) + eps
                worst[mode] = max(worst.get(mode, Fraction(0)), cells[c])
        out.append({"recorded_at": e.recorded_at, "mode": mode, "partition": ev.partition,
                    "cumulative_epsilon": float(worst.get(mode, Fraction(0)) + everywhere)})
    return out


def _card_timeline(spends: list) -> list[dict]:
    """One point per card-level release (at its first spend): a card's loss over every release so far, by basic
    composition (each release costs a card its ``P`` most expensive partitions: the accountant's
    :func:`~transit_release.accounting.accountant.bounded_release_losses`). The last point is the audit's stated
    basic figure; the PLD figure is stated for the whole (composing each prefix again would cost about a second
    per release)."""
    from transit_release.accounting.accountant import bounded_release_losses

    first: dict[str, str] = {}
    for e, ev in spends:
        first.setdefault(ev.release_id, e.recorded_at)
    out, running = [], Fraction(0)
    for rid, loss in bounded_release_losses([ev for _, ev in spends]):
        running += loss.epsilon_exact
        out.append({"recorded_at": first[rid], "mode": "all modes", "partition": rid, "release_id": rid,
                    "cumulative_epsilon": float(running)})
    return out


def cumulative_loss(entries: list[LedgerEntry], delta_prime: float = DEFAULT_DELTA_PRIME,
                    pld_delta: float = DEFAULT_PLD_DELTA) -> dict:
    """All-time loss: first ``person``, one passenger of each population across every kind of release
    (:func:`transit_release.accounting.person.person_losses`: basic and PLD, unbounded where trip-level releases
    are counted), then per unit of privacy: overall (basic; PLD where the unit's spends allow it; advanced
    composition only where tighter than basic), per mode, per partition or period, per component, over time.

    A larger ε beside a valid smaller one would only mislead a reader, so a bound worse than basic composition is
    not reported."""
    spends = [e for e in entries if e.entry_type == SPEND]
    events = [(e, e.event()) for e in spends]
    out = {PERSON: {p: {**x.to_dict(), "ledger_entries": len(entries)}
                    for p, x in person_losses((ev for _, ev in events), pld_delta).items()}}
    for (unit, relation), report in compose(ev for _, ev in events).items():
        adv_all = report.advanced_overall(delta_prime)
        basic = report.overall
        adv = report.advanced_per_partition(delta_prime)
        per_scope = report.per_partition
        component: dict[str, dict[str, float]] = {}
        mine = []
        for e, ev in events:
            if (ev.unit_of_privacy, ev.neighbouring) != (unit, relation):
                continue
            mine.append((e, ev))
            cell = component.setdefault(ev.partition, {})
            cell[ev.component] = cell.get(ev.component, 0.0) + ev.epsilon
        timeline = _card_timeline(mine) if unit == "card" else _cell_timeline(mine)
        mine = [ev for _, ev in mine]
        pld = _pld(unit, report, mine, pld_delta)
        out[unit] = {
            "neighbouring": relation,
            "basic": {"epsilon": basic.epsilon, "delta": basic.delta},
            "pld": pld if pld and pld["epsilon"] <= basic.epsilon else None,
            "advanced": ({"epsilon": adv_all.epsilon, "delta": adv_all.delta, "delta_prime": delta_prime,
                          "theorem": ADVANCED_COMPOSITION} if adv_all.epsilon < basic.epsilon else None),
            "per_mode": {m: {"epsilon": x.epsilon, "delta": x.delta} for m, x in report.per_mode().items()},
            "per_partition": {p: {"epsilon": x.epsilon, "delta": x.delta, "spends": len(report.spends_in(p)),
                                  **({"advanced_epsilon": adv[p].epsilon, "advanced_delta": adv[p].delta}
                                     if adv[p].epsilon < x.epsilon else {})}
                              for p, x in per_scope.items()},
            "per_partition_marginal": component,
            "timeline": timeline,
        }
        if unit == "card":
            out[unit]["year_projection"] = year_projection(mine, pld_delta)
    return out


def card_unbounded_periods(entries: list[LedgerEntry]) -> list[str]:
    """The periods of trip-level releases: they put no bound on a card's trips, so a card's loss over those periods
    is unbounded (the audit says so rather than inventing a number)."""
    days: dict[str, list[str]] = {}
    for e in entries:
        if e.entry_type == SPEND:
            ev = e.event()
            if ev.unit_of_privacy == "trip":
                days.setdefault(ev.release_id, []).append(ev.date)
    out = set()
    for ds in days.values():
        a, b = min(ds), max(ds)
        out.add(f"{a[:4]}-{a[4:6]}-{a[6:]}..{b[:4]}-{b[4:6]}-{b[6:]}")
    return sorted(out)


def summarise(entries: list[LedgerEntry]) -> tuple[list[str], dict[str, int], list[LedgerEntry], dict[str, LedgerEntry]]:
    spends = [e for e in entries if e.entry_type == SPEND]
    published = {e.release_id: e for e in entries if e.entry_type == PUBLISHED}
    charged: dict[str, int] = {}
    for e in spends:
        if e.release_id not in published:
            charged[e.release_id] = charged.get(e.release_id, 0) + 1
    return sorted(published), charged, spends, published
