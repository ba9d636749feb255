"""What a home records of its ledger outside the ledger file: the anchors every charge must find held.

* each release directory under ``releases/`` (and ``private/test-releases/``): the ledger publishes it, or
  has an intent to;
* each manifest's ``ledger_head`` (sequence number and hash);
* each MLflow anchor run (experiment ``transit-release-ledger``: the head after every charge and publication);
* each spend MLflow mirrors (``spend.<seq>`` of a release's run): entry ``seq`` is a spend of that release.

MLflow's SQLite store is read directly, read-only, with ``sqlite3`` (its ``experiments``, ``runs``, ``tags`` and
``params`` tables): a charge does this on every release, and importing MLflow would cost far more than the
queries. Deleted runs count: deleting a run hides nothing. An anchor that cannot be read (a manifest that is not
JSON, a store that is not MLflow's) is returned as a problem, which no ledger holds: a charge is refused rather
than made against records it cannot read. The keyed high-water mark beside the key is the ledger's own check
(:class:`transit_release.accounting.ledger_key.HighWaterMark`).
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

from transit_release.accounting.ledger import Ledger
from transit_release.accounting.ledger_anchors import Anchor
from transit_release.accounting.ledger_key import KEY_FILE_ENV
from transit_release.errors import LedgerIntegrityError
from transit_release.files.home import RELEASES_TOOL_FILES, RENAME_PROBE_PATTERN, Home, live_release_ids
from transit_release.opendata.catalog import PART_PATTERN

MANIFEST = "manifest.json"
ANCHOR_EXPERIMENT = "transit-release-ledger"
RELEASE_EXPERIMENT = "transit-release"


def release_anchors(home: Home) -> list[Anchor]:
    """The release directories under ``releases/`` and ``private/test-releases/`` and their manifests' heads."""
    out = []
    for root in (home.releases, home.test_releases):
        if not root.is_dir():
            continue
        for d in sorted(root.iterdir()):
            if d.name.startswith(".") or not d.is_dir():
                continue  # staging directories and files are the audit's to name, not anchors
            where = str(d.relative_to(home.root))
            out.append(Anchor(where, release_id=d.name))
            manifest = d / MANIFEST
            if not manifest.is_file():
                continue
            try:
                head = json.loads(manifest.read_text(encoding="utf-8")).get("ledger_head")
                if head is None:
                    continue  # releases made before heads were anchored
                out.append(Anchor(f"{where}/{MANIFEST}", int(head["seq"]), str(head["hash"])))
            except (OSError, ValueError, AttributeError, KeyError, TypeError):
                out.append(Anchor(f"{where}/{MANIFEST}", problem="its ledger head cannot be read"))
    return out


def mlflow_anchors(db: Path) -> list[Anchor]:
    """The heads anchored in MLflow and the spends it mirrors, read from the store ``db`` (none without one)."""
    if not db.exists():
        return []
    where = db.name
    try:
        with closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=60)) as con:
            heads = con.execute(
                "SELECT r.run_uuid, MAX(CASE WHEN t.key = 'head_seq' THEN t.value END), "
                "MAX(CASE WHEN t.key = 'head_hash' THEN t.value END), "
                "MAX(CASE WHEN t.key = 'release_id' THEN t.value END), "
                "MAX(CASE WHEN t.key = 'event' THEN t.value END), MAX(CASE WHEN t.key = 'head_mac' THEN t.value END) "
                "FROM runs r JOIN experiments e ON e.experiment_id = r.experiment_id "
                "JOIN tags t ON t.run_uuid = r.run_uuid WHERE e.name = ? GROUP BY r.run_uuid",
                (ANCHOR_EXPERIMENT,)).fetchall()
            mirrored = con.execute(
                "SELECT r.run_uuid, p.key, p.value, t.value FROM params p JOIN runs r ON r.run_uuid = p.run_uuid "
                "JOIN experiments e ON e.experiment_id = r.experiment_id "
                "LEFT JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = 'release_id' "
                "WHERE e.name = ? AND (p.key LIKE 'spend.%' OR p.key LIKE '%.ledger_seq')",
                (RELEASE_EXPERIMENT,)).fetchall()
    except sqlite3.Error as exc:
        return [Anchor(where, problem=f"the MLflow store cannot be read ({exc})")]
    out = []
    for run, seq, digest, rid, event, mac in heads:
        name = f"the MLflow anchor run {run} ({rid or '?'} at {event or '?'})"
        if seq is None and digest is None:
            continue  # not an anchor run
        try:
            out.append(Anchor(name, int(seq), str(digest), mac=mac))
        except (TypeError, ValueError):
            out.append(Anchor(name, problem="its ledger head cannot be read"))
    for run, key, value, rid in mirrored:
        name = f"the MLflow run {run} of '{rid}' ({key})"
        try:
            seq = int(key[6:]) if key.startswith("spend.") else int(value)
        except (TypeError, ValueError):
            if key.startswith("spend."):
                out.append(Anchor(name, problem="its mirrored spend cannot be read"))
            continue
        if rid is None:
            out.append(Anchor(name, problem="it mirrors a spend without naming its release"))
        else:
            out.append(Anchor(name, seq, release_id=rid))
    return out


def home_anchors(home: Home) -> list[Anchor]:
    """Every anchor the home holds outside the ledger file."""
    return release_anchors(home) + mlflow_anchors(home.mlflow_db)


def keyed_records(home: Home) -> list[str]:
    """Where the home records that its ledger was keyed when they were written: published manifests whose
    ``ledger_head`` says ``keyed``, MLflow anchor runs tagged ``keyed=true`` (what each is, newest manifest first).
    A ledger that holds no MAC where these exist had its MACs stripped (or is another ledger): it is never charged
    without the key, whose MACs would tell (:func:`check_records`)."""
    out = []
    for root in (home.releases, home.test_releases):
        for m in sorted(root.glob(f"*/{MANIFEST}"), reverse=True) if root.is_dir() else []:
            try:
                head = json.loads(m.read_text(encoding="utf-8")).get("ledger_head")
            except (OSError, ValueError, AttributeError):
                continue  # an unreadable manifest is an anchor problem of its own
            if isinstance(head, dict) and head.get("keyed") is True:
                out.append(f"{m.relative_to(home.root)}")
    if home.mlflow_db.exists():
        try:
            with closing(sqlite3.connect(f"{home.mlflow_db.resolve().as_uri()}?mode=ro", uri=True,
                                         timeout=60)) as con:
                runs = con.execute(
                    "SELECT r.run_uuid FROM runs r JOIN experiments e ON e.experiment_id = r.experiment_id "
                    "JOIN tags t ON t.run_uuid = r.run_uuid WHERE e.name = ? AND t.key = 'keyed' AND t.value = 'true' "
                    "ORDER BY r.start_time DESC", (ANCHOR_EXPERIMENT,)).fetchall()
        except sqlite3.Error:
            runs = []  # an unreadable store is an anchor problem of its own
        out += [f"the MLflow anchor run {r[0]}" for r in runs]
    return out


def check_keyed_records(home: Home, ledger: Ledger, outcome: str = "nothing was charged") -> None:
    """Refuse a ledger that holds no MAC in a home whose records say it was keyed (:func:`keyed_records`): an
    insider without the key can strip the MACs, erase the newest spends and re-chain; a run without the key would
    then charge over a cap. Raises :class:`LedgerIntegrityError` (exit 4). With a key configured, the ledger's own
    keying check names entries without a MAC."""
    if ledger.key is not None or ledger.keyed():
        return
    said = keyed_records(home)
    if said:
        more = f" and {len(said) - 1} more record(s)" if len(said) > 1 else ""
        raise LedgerIntegrityError(
            f"{said[0]}{more} say(s) this home's ledger was keyed, but {ledger.path} holds no MAC: its MACs were "
            f"stripped, or it is not this home's ledger; {outcome}. Set {KEY_FILE_ENV} to the ledger's key file and "
            "run `transit-release audit`; restore the ledger from a backup if it fails")


def _sha256(path: Path) -> str | None:
    import hashlib

    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def refuse_an_emptied_ledger(home: Home, head: int, outcome: str = "nothing was charged") -> None:
    """A new or emptied ledger must not restart the budget of a home that published."""
    if head:
        return
    earlier = sorted(p.parent.name for root in (home.releases, home.test_releases) if root.is_dir()
                     for p in root.glob(f"*/{MANIFEST}"))
    if earlier:
        raise LedgerIntegrityError(f"the ledger {home.ledger} is empty, but this home has published {len(earlier)} "
                                   f"release(s) (first: {earlier[0]}): it is not this home's ledger, or the ledger was "
                                   f"lost; restore it from a backup. {outcome[0].upper()}{outcome[1:]}")


def check_ledger_whole(home: Home, outcome: str = "it would charge nothing") -> list:
    """Every check a charge makes before it writes, read only and without Prefect or MLflow: a new or emptied ledger
    in a home that published, the home's records against the ledger (:func:`check_records`), the ledger's keying,
    chain, MACs and schema, the key's records and every anchor the home holds (:meth:`Ledger.check_before_charge`).
    Raises :class:`LedgerIntegrityError` (exit 4) or :class:`ConfigError` naming the first problem, each ending in
    ``outcome``; returns the ledger's entries. Every command that reads the ledger (a dry run, ``budget``, a release
    before Prefect starts, ``repair``) runs it, so integrity fails loud everywhere, at once."""
    from transit_release.accounting.ledger_key import check_key_records, key_from_environment

    if not (home.ledger.exists() or home.ledger.is_symlink()):  # what a charge would create: an empty ledger
        refuse_an_emptied_ledger(home, 0, outcome)
        check_key_records(key_from_environment(home.root), home.ledger, None)
        return []
    ledger = Ledger(home.ledger, read_only=True)
    refuse_an_emptied_ledger(home, ledger.head().seq, outcome)
    check_records(home, ledger, live_release_ids(home), outcome)
    return ledger.check_before_charge(lambda: home_anchors(home), outcome)


def another_homes_ledger(home: Home, ledger: Ledger) -> Path | None:
    """The other home's ``releases/`` whose publications ``ledger`` records, if every release it published lies
    there and none in ``home`` (two homes given the same ``--ledger``); None otherwise (a moved home keeps its
    releases: its intents' old paths no longer exist)."""
    ours = {home.releases.resolve(), home.test_releases.resolve()}
    published = set(ledger.published())
    where = {Path(i.final_dir) for i in ledger.intents() if i.release_id in published}
    if not where or any((home.release_dir(rid) / MANIFEST).is_file() for rid in published):
        return None
    if all(p.is_absolute() and p.parent.resolve() not in ours and (p / MANIFEST).is_file() for p in where):
        return sorted(where)[-1].parent
    return None


def check_records(home: Home, ledger: Ledger, live_release_ids: set[str], outcome: str = "nothing was charged") -> None:
    """The other direction, before a charge: every release the ledger publishes was charged (has spends), is on
    disk with the manifest it recorded and (with an MLflow store) anchored there; nothing under ``releases/`` is
    foreign (anything but a
    release directory, :data:`RELEASES_TOOL_FILES` and, for a keyed ledger, staging directories of live runs, of
    releases charged and not yet published, or of publication intents carrying the key's MAC). Raises
    :class:`LedgerIntegrityError` naming the first problem: a home whose records disagree with its ledger is not
    charged until what `transit-release audit` names is resolved."""
    check_keyed_records(home, ledger, outcome)
    problems = []
    published = ledger.published()
    anchored = {None}
    if published and home.mlflow_db.exists():
        try:
            with closing(sqlite3.connect(f"{home.mlflow_db.resolve().as_uri()}?mode=ro", uri=True, timeout=60)) as con:
                anchored = {r[0] for r in con.execute(
                    "SELECT t.value FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid JOIN experiments e ON "
                    "e.experiment_id = r.experiment_id WHERE e.name = ? AND t.key = 'release_id'",
                    (ANCHOR_EXPERIMENT,))}
        except sqlite3.Error as exc:
            problems.append(f"the MLflow store cannot be read ({exc})")
    charged_ids = ledger.charged_release_ids()
    for rid, entry in sorted(published.items()):
        d = home.release_dir(rid)
        if rid not in charged_ids:
            problems.append(f"release '{rid}' is published on the ledger without a single spend: its files were never "
                            "charged")
        try:
            recorded = entry.data().get("manifest_sha256")
        except (ValueError, AttributeError):
            recorded = None
        if _sha256(d / MANIFEST) != recorded:
            problems.append(f"release '{rid}' is published on the ledger, but {d.relative_to(home.root)}/{MANIFEST} "
                            "is missing or differs from the one recorded")
        elif None not in anchored and rid not in anchored:
            problems.append(f"release '{rid}' is published on the ledger, but no MLflow anchor run names it")
    keyed = ledger.key is not None and ledger.keyed()
    vouched = set()
    # a release charged and not yet published may be staging now (its run holds no lock in every kind)
    in_flight = (charged_ids - set(published)) | live_release_ids if keyed else set()
    if keyed:
        for i in ledger.intents():
            try:
                ledger.check_intent(i)
            except LedgerIntegrityError:
                problems.append(f"publication intent {i.id} carries no valid MAC: it was not written with the key")
                continue
            if i.release_id not in published:
                vouched.add(Path(i.staging_dir).name)
    if home.releases.is_dir():
        for p in sorted(home.releases.iterdir()):
            if p.is_dir() and not p.is_symlink() and not p.name.startswith("."):
                continue  # release directories: anchors
            if p.name.startswith(".tmp-") and p.is_dir() and not p.is_symlink():
                if not keyed or p.name in vouched or p.name[5:].rsplit("-", 1)[0] in in_flight:
                    continue
            elif (p.name in RELEASES_TOOL_FILES or PART_PATTERN.fullmatch(p.name)) and p.is_file() \
                    and not p.is_symlink():
                continue  # the catalogue, or a rewrite of it a killed run left (public; `repair` removes it)
            elif RENAME_PROBE_PATTERN.fullmatch(p.name) and p.is_dir() and not p.is_symlink():
                continue  # an empty directory a run renames here and removes at once (Home.staging_root)
            problems.append(f"releases/{p.name} is not something this tool wrote there")
    other = another_homes_ledger(home, ledger) if problems else None
    if other is not None:
        raise LedgerIntegrityError(f"the ledger {ledger.path} records the publications of another home (under "
                                   f"{other}), none of this home {home.root}: a ledger serves one home, whose anchors "
                                   f"it must hold; {outcome}. Give this home its own ledger (--ledger, or none: "
                                   "<home>/ledger.sqlite)")
    if problems:
        more = f" ({len(problems)} problems)" if len(problems) > 1 else ""
        raise LedgerIntegrityError(f"this home's records disagree with its ledger: {problems[0]}{more}; {outcome}. "
                                   "Run `transit-release audit` and resolve what it names first")
