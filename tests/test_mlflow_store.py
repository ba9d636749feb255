"""A new home's MLflow store is copied from an empty store made once by the installed MLflow (its schema
migrations take seconds): the copy must be the store MLflow makes itself."""

from __future__ import annotations

import sqlite3

from transit_release.reports.tracking import mlflow_client, store_template
from transit_release.files.home import CACHE_ENV
from transit_release.files.home import Home


def _schema(db) -> set:
    """Every table and index with its definition; a definition's lines compared as a set, since MLflow's own
    migrations order a table's constraints differently from one process to the next."""
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
        return {(t, n, tbl, frozenset(line.strip().rstrip(",") for line in (sql or "").splitlines()))
                for t, n, tbl, sql in rows}


def _rows(db, table: str, drop: tuple[str, ...] = ()) -> list:
    with sqlite3.connect(db) as c:
        cur = c.execute(f"SELECT * FROM {table}")
        keep = [i for i, d in enumerate(cur.description) if d[0] not in drop]
        return sorted(tuple(r[i] for i in keep) for r in cur.fetchall())


def test_a_new_store_from_the_template_is_the_store_mlflow_makes(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # MLflow puts its default experiment's artifacts under the working directory
    theirs = tmp_path / "theirs.db"
    MlflowClient(tracking_uri=f"sqlite:///{theirs}").search_experiments(max_results=1)
    ours = Home.at(tmp_path / "ours")
    client = mlflow_client(ours)

    assert _schema(ours.mlflow_db) == _schema(theirs)
    assert _rows(ours.mlflow_db, "alembic_version") == _rows(theirs, "alembic_version")
    times = ("creation_time", "last_update_time")
    assert _rows(ours.mlflow_db, "experiments", times) == _rows(theirs, "experiments", times)
    assert [e.name for e in client.search_experiments()] == ["Default"]
    # the template holds no experiment, and a second home reuses it as it is
    template = store_template()
    assert _rows(template, "experiments") == []
    before = template.stat().st_mtime_ns
    second = Home.at(tmp_path / "second")
    second.root.mkdir()
    (second.root / ".mlflow.db.0123abcd.tmp").write_bytes(b"half a copy")  # a run killed while copying
    exp = mlflow_client(second).create_experiment("x", artifact_location=(tmp_path / "a").as_uri())
    run = mlflow_client(second).create_run(exp)
    mlflow_client(second).log_param(run.info.run_id, "k", "v")
    assert template.stat().st_mtime_ns == before
    assert not list((tmp_path / "cache").glob(".*.tmp")) and not list(second.root.glob(".*.tmp"))
