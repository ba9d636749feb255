"""Ledger integrity through the real command: a restored backup is refused before it can overspend, the newest
spends of a keyed ledger cannot be erased unseen, and a key inside the home is refused on every path before
anything starts (the library-level tamper corpus is tests/test_tamper_corpus.py)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

from tests.conftest import WEEK_FLAGS
from transit_release.accounting.ledger import Ledger
from transit_release.accounting.ledger_key import KEY_FILE_ENV
from transit_release.accounting.ledger_schema import TRIGGERS, _SCHEMA
from transit_release.cli import EXIT_AUDIT_FAILED, main

pytestmark = pytest.mark.flow


def two_release_policy(tmp_path: Path) -> Path:
    """The default policy with a cap per partition that fits two releases."""
    from transit_release.accounting.policy import default_policy_path

    policy = tmp_path / "policy.yaml"
    policy.write_text(default_policy_path().read_text().replace("      epsilon: 8.0\n      delta: 1.0e-6\n",
                                                                "      epsilon: 16.0\n      delta: 1.0e-5\n", 1)
                      .replace("allow_unbounded_person_loss: false", "allow_unbounded_person_loss: true"))
    return policy


def release(week, home: Path, rid: str, *extra: str) -> list[str]:
    return ["release", "--trips", str(week["trips"]), "--stops", str(week["stops"]), "--home", str(home),
            "--release-id", rid, "--workers", "0", "--unit", "trip", *WEEK_FLAGS, *extra]


def show(text: str) -> None:
    """The scenario's output, past pytest's capture (seen with ``-s``)."""
    sys.__stdout__.write(text)


def audit_json(home: Path, capsys) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main(["audit", "--home", str(home), "--json"])
    out = capsys.readouterr().out
    return rc, json.loads(out[out.index("{"):])


def restore(backup: Path, home: Path) -> None:
    """The documented manual restore: the backup's ledger over the home's, its -wal and -shm removed."""
    for suffix in ("-wal", "-shm"):
        Path(f"{home / 'ledger.sqlite'}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(backup / "ledger.sqlite", home / "ledger.sqlite")


def test_a_restored_backup_is_refused_before_it_overspends_and_the_audit_counts_what_it_forgot(
        prefect_harness, tiny_week, tmp_path, capsys):
    """The issue's rollback scenario: r1; a backup; r2 exhausts the cap; the backup is restored; r3 is refused
    (exit 4, one line naming the newest anchor the ledger lacks), nothing charged or published; the audit fails
    and its loss counts r2's spends, which only MLflow still holds."""
    home, saved = tmp_path / "home", tmp_path / "backup"
    policy = two_release_policy(tmp_path)
    assert main(release(tiny_week, home, "r1", "--policy", str(policy))) == 0
    assert main(["backup", "--home", str(home), "--to", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "backed up 169 ledger entries (head: entry 169)" in out
    record = json.loads((saved / "anchors.json").read_text())
    assert record["head"]["seq"] == 169 and record["anchors"]
    assert main(release(tiny_week, home, "r2", "--policy", str(policy))) == 0
    restore(saved, home)
    capsys.readouterr()
    assert main(release(tiny_week, home, "r3", "--policy", str(policy))) == EXIT_AUDIT_FAILED
    err = capsys.readouterr().err
    show(err)
    assert err.count("\n") == 1 and "transit-release: error: the ledger" in err
    assert "(head: entry 169) lacks what" in err and "entry 338" in err and "nothing was charged" in err
    assert not (home / "releases" / "r3").exists()
    assert Ledger(home / "ledger.sqlite", key=b"").head().seq == 169  # nothing charged
    rc, result = audit_json(home, capsys)
    show(json.dumps({k: result[k] for k in ("ok", "loss_counts_mirrored")}) + "\n" + "\n".join(
        result["discrepancies"][:4]) + "\n" + json.dumps(result["loss"]["trip"]["basic"]) + "\n")
    assert rc == EXIT_AUDIT_FAILED and not result["ok"]
    assert result["loss_counts_mirrored"] == {"r2": 168}
    assert result["loss"]["trip"]["basic"]["epsilon"] == 16.0  # r1 and r2, although the ledger holds r1 only
    assert any("MLflow mirrors but the ledger lacks (r2)" in t for t in result["threat_model"])
    assert "release: r2: in releases/ but never recorded as published on the ledger" in result["discrepancies"]


def test_keyed_erase_of_the_newest_spends_with_their_anchor_is_caught(prefect_harness, tiny_week, tmp_path, capsys,
                                                                     monkeypatch):
    """The issue's keyed-erase scenario: a release killed after its charge; its entries and their MACs
    deleted, sqlite_sequence reset, the triggers put back, its one MLflow anchor run hard-deleted. The audit
    fails on the keyed high-water mark and the next charge is refused, nothing charged."""
    from prefect.settings import get_current_settings

    key = tmp_path / "keys" / "ledger.key"
    key.parent.mkdir()
    key.write_bytes(os.urandom(48).hex().encode())
    key.chmod(0o600)
    monkeypatch.setenv(KEY_FILE_ENV, str(key))
    home = tmp_path / "home"
    policy = str(two_release_policy(tmp_path))
    assert main(release(tiny_week, home, "k1", "--policy", policy)) == 0
    # k2 as a run killed right after its charge and its anchor leaves it (tests/test_hardening.py kills real runs)
    from tasks.budget import charge_budget
    from transit_release.reports.tracking import anchor_ledger
    from tests.test_accounting import partition_events
    from transit_release.accounting.policy import load_budget_policy
    from transit_release.files.home import Home

    charge_budget.fn(Home.at(home), partition_events("k2", date="20160809"), load_budget_policy(policy))
    anchor_ledger(Home.at(home), "k2", "charge")
    con = sqlite3.connect(home / "ledger.sqlite")
    first = con.execute("SELECT min(seq) FROM entries WHERE release_id = 'k2'").fetchone()[0]
    for t in TRIGGERS:
        con.execute(f"DROP TRIGGER IF EXISTS {t}")
    con.execute(f"DELETE FROM entries WHERE seq >= {first}")
    con.execute(f"DELETE FROM entry_macs WHERE seq >= {first}")
    con.execute(f"UPDATE sqlite_sequence SET seq = {first - 1} WHERE name = 'entries'")
    con.commit()
    con.executescript(_SCHEMA)
    con.close()
    store = sqlite3.connect(home / "mlflow.db")
    runs = [r[0] for r in store.execute("SELECT run_uuid FROM tags WHERE key = 'release_id' AND value = 'k2'")]
    assert runs  # its one anchor run
    for table in ("params", "metrics", "latest_metrics", "tags", "runs"):
        store.executemany(f"DELETE FROM {table} WHERE run_uuid = ?", [(r,) for r in runs])
    store.commit()
    store.close()
    rc, result = audit_json(home, capsys)
    show(json.dumps({k: result[k] for k in ("ok", "discrepancies", "charged_not_published")}, indent=1) + "\n")
    assert rc == EXIT_AUDIT_FAILED and result["charged_not_published"] == {}
    assert any(d.startswith("anchor: keyed high-water mark: ") and f"entry {first + 5} is missing" in d
               for d in result["discrepancies"])
    # the next charge (the command's refusal of a restored ledger is the rollback test's)
    from transit_release.errors import LedgerRollbackError

    with pytest.raises(LedgerRollbackError, match="lacks what the keyed high-water mark") as refused:
        charge_budget.fn(Home.at(home), partition_events("k3", date="20160810"), load_budget_policy(policy))
    show(f"transit-release: error: {refused.value}\n")
    assert Ledger(home / "ledger.sqlite").head().seq == first - 1


COMMANDS = {
    "release": ["release", "--trips", "t.csv", "--stops", "s.csv", *WEEK_FLAGS],
    "demo": ["demo"],
    "sequences": ["sequences", "--input", "x", "--locations", "y", "--epsilon", "1", "--height", "3", *WEEK_FLAGS],
    "trajectories": ["trajectories", "--input", "x", "--locations", "y", "--epsilon", "1", "--height", "3",
                     "--period-start", "2016-08-08", "--period-end", "2016-08-14"],
    "sets": ["sets", "--input", "x", "--locations", "y", "--epsilon", "1", *WEEK_FLAGS],
    "budget": ["budget"], "audit": ["audit"], "repair": ["repair"], "backup": ["backup", "--to", "elsewhere"],
    "serve": ["serve"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_key_inside_the_home_is_refused_on_every_path_before_anything_starts(command, tmp_path, monkeypatch,
                                                                                capsys):
    home = tmp_path / "home"
    (home / "keys").mkdir(parents=True)
    key = home / "keys" / "ledger.key"
    key.write_bytes(b"k" * 48)
    key.chmod(0o600)
    monkeypatch.setenv(KEY_FILE_ENV, str(key))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    before = sorted(p.name for p in home.rglob("*"))
    assert main([*COMMANDS[command], "--home", str(home)]) == 2
    err = capsys.readouterr().err
    assert f"ledger key file {key} lies inside the home {home}" in err and err.count("\n") == 1
    assert sorted(p.name for p in home.rglob("*")) == before  # no .ledgers, .heads, ledger or Prefect home


def test_the_deployments_path_refuses_a_key_inside_the_home(tmp_path, monkeypatch):
    from tasks.home import prepare_home
    from transit_release.errors import ConfigError

    key = tmp_path / "home" / "ledger.key"
    key.parent.mkdir()
    key.write_bytes(b"k" * 48)
    key.chmod(0o600)
    monkeypatch.setenv(KEY_FILE_ENV, str(key))
    with pytest.raises(ConfigError, match="lies inside the home"):
        prepare_home.fn(str(tmp_path / "home"), None)
    other = tmp_path / "ledgers" / "ledger.sqlite"  # --ledger elsewhere: the key may not sit beside it either
    moved = other.parent / "ledger.key"
    other.parent.mkdir()
    shutil.copy(key, moved)
    moved.chmod(0o600)
    monkeypatch.setenv(KEY_FILE_ENV, str(moved))
    with pytest.raises(ConfigError, match="lies inside the home"):
        prepare_home.fn(str(tmp_path / "home2"), str(other))


def test_a_backup_is_refused_inside_the_home_or_over_another(tmp_path, capsys):
    from tests.test_accounting import partition_events
    from transit_release.files.home import Home

    home = Home.at(tmp_path / "home").prepare()
    Ledger(home.ledger).charge(partition_events("r1"))
    assert main(["backup", "--home", str(home.root), "--to", str(home.root / "b")]) == 2
    assert "lies inside the home" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert main(["backup", "--home", str(home.root), "--to", str(tmp_path / "full")]) == 2
    assert "is not an empty directory" in capsys.readouterr().err
    assert main(["backup", "--home", str(home.root), "--to", str(tmp_path / "b")]) == 0
    assert Ledger(tmp_path / "b" / "ledger.sqlite", key=b"", read_only=True).verify() == 6
    (home.releases / "r9").mkdir()  # a release the ledger does not know: a backup would keep the forgetting
    assert main(["backup", "--home", str(home.root), "--to", str(tmp_path / "c")]) == EXIT_AUDIT_FAILED
    assert "release 'r9' is neither published nor being published" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_a_hard_linked_ledger_is_refused_by_either_name(tmp_path, capsys):
    """atk39 #12: a symbolic link to the ledger was refused, a hard link was not; SQLite keeps -wal/-shm per name,
    so two runs reaching one ledger by two names would not see each other's writes. Refused by either name, by the
    charge and by `budget` (exit 4), until one name is left."""
    from tests.test_accounting import partition_events
    from transit_release.errors import LedgerIntegrityError
    from transit_release.files.home import Home

    home = Home.at(tmp_path / "home").prepare()
    Ledger(home.ledger).charge(partition_events("r1"))
    (tmp_path / "elsewhere").mkdir()
    other = tmp_path / "elsewhere" / "l.sqlite"
    os.link(home.ledger, other)
    for name in (home.ledger, other):
        with pytest.raises(LedgerIntegrityError) as info:
            Ledger(name).charge(partition_events("r2"))
        assert str(info.value) == (
            f"{name}: the privacy ledger file has 2 names (hard links); SQLite keeps its write-ahead log per name, "
            "so runs reaching it by two names would not see each other's writes. Remove the other names "
            f"(find / -xdev -samefile {name} lists them) and keep this one")
    assert main(["budget", "--home", str(home.root), "--ledger", str(other)]) == 4
    assert "has 2 names (hard links)" in capsys.readouterr().err
    other.unlink()
    assert {e.release_id for e in Ledger(home.ledger, read_only=True).entries()} == {"r1"}


def test_a_backup_is_refused_in_the_web_root_that_is_the_homes_releases_under_another_name(tmp_path, capsys):
    """atk39 #15: the web root served as the home's releases/ (here a symbolic link; a bind mount keeps the same
    device and inode too) has another name, so `--to <webroot>/bk` passed a check by name and put the ledger in the
    public tree. Refused (exit 2), nothing written."""
    from tests.test_accounting import partition_events
    from transit_release.files.home import Home

    web = tmp_path / "www"
    web.mkdir()
    home = Home.at(tmp_path / "home")
    home.root.mkdir()
    home.releases.symlink_to(web)
    home.prepare()
    Ledger(home.ledger).charge(partition_events("r1"))
    assert main(["backup", "--home", str(home.root), "--to", str(web / "bk")]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"--to {web / 'bk'} lies inside the home's releases/ directory ({home.releases}, reached as {web}), which "
        "may be published: a backup of the ledger is private; choose a directory outside any home")
    assert not (web / "bk").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="a read-only bind mount needs root (modes do not stop root)")
def test_budget_asks_nothing_of_a_directory_and_reads_a_read_only_backup(tmp_path, capsys):
    """atk39 #6: `budget`, `audit`, `repair` and `backup` wrote a probe file into --home (a data folder's mtime
    changed), and `budget` ("reads the ledger only") refused a read-only home as not writable. Now writability is
    asked of the system (nothing written) and not asked by `budget`; a live ledger on a read-only mount says why it
    cannot be read there (SQLite's shared-memory index) and what to read instead: a backup, which reads."""
    import subprocess

    from tests.test_accounting import partition_events
    from transit_release.files.home import Home

    data = tmp_path / "data"
    data.mkdir()
    (data / "trips.csv").write_text("x\n")
    before = data.stat().st_mtime_ns
    for command in (["budget"], ["audit"], ["repair"], ["backup", "--to", str(tmp_path / "b0")]):
        assert main([*command, "--home", str(data)]) == 2
        assert "is not a transit-release home" in capsys.readouterr().err
    assert data.stat().st_mtime_ns == before and sorted(p.name for p in data.iterdir()) == ["trips.csv"]

    home = Home.at(tmp_path / "home").prepare()
    Ledger(home.ledger).charge(partition_events("r1"))
    assert not Path(f"{home.ledger}-shm").exists()  # the last connection closed: no shared-memory index left
    for source, name in ((home.root, "live"), (tmp_path / "bk", "backup")):
        if name == "backup":
            assert main(["backup", "--home", str(home.root), "--to", str(tmp_path / "bk")]) == 0
        ro = tmp_path / f"ro-{name}"
        ro.mkdir()
        subprocess.run(["mount", "--bind", str(source), str(ro)], check=True)
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
            capsys.readouterr()
            rc = main(["budget", "--home", str(ro)])
            out, err = capsys.readouterr()
        finally:
            subprocess.run(["umount", str(ro)], check=True)
        if name == "live":
            assert rc == 1
            assert err.strip().endswith(
                "it lies on a read-only file system, which says nothing about its records; keep the file as it is. "
                "SQLite reads a ledger in write-ahead-log mode only where it can keep its shared-memory index beside "
                "it: to read it read-only, read a backup of it (`transit-release backup --to DIR`, one file) with "
                "`transit-release budget --home DIR`; to release, make the file system writable again")
        else:
            assert rc == 0 and f"Privacy budget of {ro}" in out and "bus/20160808: used ε=8" in out


def test_demo_on_a_home_that_fails_integrity_writes_no_input(tmp_path, capsys):
    """atk39 #8: `demo` on a home whose ledger fails its checks exited 4, but only after writing its synthetic
    week (about 1.3 M rows at the default scale) under private/demo-input/, which stayed. Refused first now."""
    from tests.test_accounting import partition_events
    from transit_release.files.home import Home

    home = Home.at(tmp_path / "home").prepare()
    Ledger(home.ledger).charge(partition_events("r1"))
    home.ledger.write_bytes(b"not a database" * 100)
    before = sorted(p.relative_to(home.root) for p in home.root.rglob("*"))
    assert main(["demo", "--home", str(home.root), "--scale", "0.002"]) == 4
    assert "not a readable privacy ledger" in capsys.readouterr().err
    assert sorted(p.relative_to(home.root) for p in home.root.rglob("*")) == before


def test_a_storage_failure_of_an_audit_or_a_backup_is_told_in_its_own_words(tmp_path, capsys, monkeypatch):
    """atk39 #14: on a full disk, `audit` and `backup` ended "disk I/O error; nothing was charged or published", a
    release's words; and a backup that failed while writing left a partial copy under --to."""
    import errno
    import sqlite3

    from tests.test_accounting import partition_events
    from transit_release.cli import command
    from transit_release.files.home import Home
    from transit_release.integrity import recovery

    home = Home.at(tmp_path / "home").prepare()
    Ledger(home.ledger).charge(partition_events("r1"))

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(recovery.json, "dump", full)  # the disk fills while anchors.json is written
    assert main(["backup", "--home", str(home.root), "--to", str(tmp_path / "bk")]) == 1
    assert capsys.readouterr().err.strip() == (
        "transit-release: error: [Errno 28] No space left on device; no backup was made: what was written of it "
        "under --to was removed")
    assert not (tmp_path / "bk").exists()
    monkeypatch.undo()

    def io_error(args, home):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setitem(command.COMMANDS, "audit", io_error)
    assert main(["audit", "--home", str(home.root)]) == 1
    assert capsys.readouterr().err.strip() == (
        "transit-release: error: disk I/O error; the audit did not finish: run it again once the storage is fixed "
        "(an audit charges and publishes nothing)")
