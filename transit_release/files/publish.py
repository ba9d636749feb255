"""Publishing a release directory atomically and recoverably, with its manifest and data card.

Files are written into ``<staging root>/.tmp-<id>-<random>/`` (:func:`stage_release`;
the home's ``private/staging/``, where nobody else can read them, or the release
root itself when that is on another filesystem) and the directory is renamed into
``<root>/<id>`` as the very last step (:func:`commit_release`): an *intent* is
committed to the ledger first, then the rename, then the ledger's ``published`` entry. A crash never leaves half a
release under ``<root>/<id>``, an existing release is never overwritten, and a
crash between the steps is completed or rolled back by
:mod:`transit_release.integrity.recovery` from the intent.

Public CSV cells never start a spreadsheet formula: a text cell starting with
``=``, ``+``, ``-``, ``@``, ``|``, a tab or a carriage return — or with a
character a spreadsheet may read as one of them (the full-width ``＝＋－＠｜``
and other compatibility forms, the minus sign ``−``) — is prefixed with a single
quote (OWASP's CSV-injection guidance), except a plain number such as ``-1``; so
is a text cell that itself starts with a single quote, so that two distinct
values never publish alike (the guard is one-to-one: a CSV cell that starts
with ``'`` had exactly one ``'`` added, removing it gives the value). The guard
applies to the whole cell (an n-gram ``=Z1 A`` is ``'=Z1 A``, ``A =Z1`` stays as
it is: each decodes to its value). Parquet files and text files carry the
values unchanged: no spreadsheet runs them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from transit_release.errors import ReleaseExistsError
from transit_release.files.home import check_release_id
from transit_release.runtime.faults import crash_point

MANIFEST = "manifest.json"
DATACARD = "DATACARD.md"
_FORMULA_START = ("=", "+", "-", "@", "|", "\t", "\r", "\u2212")
_NUMBER = re.compile(r"[+-]?\d+(\.\d+)?([eE][+-]?\d+)?")
CSV_NEUTRALISATION = ("text cells that would start with =, +, -, @, |, a tab or a carriage return (or their "
                      "full-width forms), after any spaces or invisible characters, are prefixed with a single quote "
                      "(') so that no spreadsheet runs them as a formula (plain numbers such as -1 are kept as they "
                      "are), and so are cells that start with a single quote themselves: a cell that starts with ' "
                      "had exactly one added, and removing it gives the value (the Parquet files hold the values "
                      "unchanged)")

__all__ = ["MANIFEST", "DATACARD", "check_release_id", "rows_released", "neutralise_cell", "unguard_cell", "neutralise_frame", "stage_release",
           "commit_release", "open_to_the_public", "verify_release", "sha256_file", "already_published", "StagedRelease"]


_LEADING_BLANKS = re.compile(r"^[\s\u00a0\u180e\u200b-\u200f\u2028-\u202f\u205f-\u206f\u3000\ufeff]+")


def neutralise_cell(text: str) -> str:
    """``'`` + ``text`` if a spreadsheet would read ``text`` as a formula (also after leading spaces or invisible
    characters, which spreadsheets may skip) or if ``text`` starts with ``'`` itself; ``text`` otherwise. One-to-one:
    :func:`unguard_cell` gives ``text`` back."""
    if text.startswith("'"):  # the guard's own mark: one more, so the guard stays one-to-one
        return "'" + text
    bare = _LEADING_BLANKS.sub("", unicodedata.normalize("NFKC", text))  # ＝ is =, ＋ is +, ｜ is |, ...
    if (bare.startswith(_FORMULA_START) or text.startswith(_FORMULA_START)) and not _NUMBER.fullmatch(text.strip()):
        return "'" + text
    return text


def unguard_cell(text: str) -> str:
    """The value of a published CSV cell: :func:`neutralise_cell` undone (one leading ``'`` removed)."""
    return text[1:] if text.startswith("'") else text


def neutralise_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Every text column of ``df`` with :func:`neutralise_cell` applied (numbers untouched). In a column of text
    dtype each distinct value is looked at once (a table of a million rows has a few thousand: modes, taps, time
    bins, locations)."""
    out = df.copy()
    for col in out.columns:
        values = out[col]
        if not (pd.api.types.is_object_dtype(values) or pd.api.types.is_string_dtype(values)):
            continue
        if pd.api.types.is_object_dtype(values) or isinstance(values.dtype, pd.CategoricalDtype):
            # cell by cell: any object (unhashable ones too) and categories, with pandas' own result type
            out[col] = values.map(lambda v: neutralise_cell(v) if isinstance(v, str) else v)
            continue
        changed = {v: neutralise_cell(v) for v in values.dropna().unique() if isinstance(v, str)}
        changed = {v: n for v, n in changed.items() if n != v}
        if changed:
            hit = values.isin(list(changed))
            out[col] = values.where(~hit, values.map(changed))
    return out


def already_published(ledger, release_dir: Path, release_id: str, same) -> bool:
    """Is ``release_id`` already published from the same input and parameters?

    ``same(earlier_events)`` says whether the earlier spends match this run.
    Returns False for a new id; True for an identical earlier publication
    (nothing to draw or spend); raises :class:`ReleaseExistsError` otherwise,
    so no earlier release, report or record is touched.
    """
    published = release_id in ledger.published()
    exists = release_dir.exists()
    if not (published or exists):
        return False
    if published and exists and same([e.event() for e in ledger.spends(release_id)]):
        return True
    raise ReleaseExistsError(f"release '{release_id}' already exists and was made from other input or parameters; "
                             "it is never overwritten: choose another --release-id")


def resolve_release_id(home, ledger, release_id: str, same: Callable[[list], bool], earlier_ids=(),
                       earlier_same: Callable[[list], bool] | None = None) -> tuple[str, bool]:
    """The id a release goes under, and whether it is already published from the same input and parameters
    (nothing to draw or spend): ``release_id``, or one of ``earlier_ids`` (the default ids an earlier version gave
    the same release) published from the same input and parameters. Any other reuse of an id is refused
    (:func:`already_published`), so no earlier release, report or record is touched. ``earlier_same`` (default
    ``same``) judges the earlier ids' spends: a kind whose default mechanism changed recognises the former default
    mechanism's spend there."""
    release_id = check_release_id(release_id)
    earlier_same = earlier_same or same
    for old in earlier_ids:
        spends = ledger.spends(old) if old in ledger.published() else []
        if spends and home.release_dir(old).exists() and earlier_same([e.event() for e in spends]):
            return old, True
    return release_id, already_published(ledger, home.release_dir(release_id), release_id, same)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class StagedRelease:
    """A complete release in a temporary directory, not yet visible under its id."""

    staging_dir: Path
    final_dir: Path
    manifest: dict
    manifest_sha256: str


def stage_release(root: Path, release_id: str, tables: dict[str, pd.DataFrame], manifest: dict,
                  datacard: str, texts: dict[str, str] | None = None,
                  staging_root: Path | None = None,
                  describe: Callable[[Path, dict], dict[str, dict]] | None = None) -> StagedRelease:
    """Write every file of the release into ``<staging_root>/.tmp-<id>-<random>/`` (default ``root``; CSV cells
    neutralised), to be renamed into ``<root>/<id>``: ``staging_root`` must be on the same filesystem.

    Tables are written as CSV (cells guarded: :func:`neutralise_cell`) and Parquet (values unchanged); ``texts`` as
    they are. ``describe(staging_dir, manifest)``, if given,
    writes the files that describe the others (the open-data files: :func:`transit_release.opendata.describe_release`)
    from the manifest with its file list so far, and returns their entries: the manifest lists them too. Public
    files are world-readable whatever the process umask; the staging directory itself is not, until
    :func:`commit_release` publishes it.
    """
    check_release_id(release_id)
    root.mkdir(parents=True, exist_ok=True)
    final = root / release_id
    if final.exists():
        raise ReleaseExistsError(f"release '{release_id}' already exists in {root}; it is never overwritten")
    tmp = (staging_root or root) / f".tmp-{release_id}-{secrets.token_hex(4)}"
    tmp.mkdir(mode=0o700)
    try:
        files = {}
        for name, df in tables.items():
            safe = neutralise_frame(df)
            for ext in ("csv", "parquet"):
                path = tmp / f"{name}.{ext}"
                if ext == "csv":
                    safe.to_csv(path, index=False, lineterminator="\n")
                else:  # no spreadsheet runs a Parquet cell: the values as they are
                    df.to_parquet(path, index=False)
                files[path.name] = {"sha256": sha256_file(path), "rows": int(len(df)), "bytes": path.stat().st_size}
        for name, text in (texts or {}).items():
            (tmp / name).write_text(text, encoding="utf-8", newline="\n")
            rows = sum(1 for line in text.splitlines() if line and not line.startswith("#"))  # data lines only
            files[name] = {"sha256": sha256_file(tmp / name), "rows": rows, "bytes": (tmp / name).stat().st_size}
        (tmp / DATACARD).write_text(datacard, encoding="utf-8")
        files[DATACARD] = {"sha256": sha256_file(tmp / DATACARD), "bytes": (tmp / DATACARD).stat().st_size}
        if describe is not None:
            files.update(describe(tmp, {**manifest, "files": dict(sorted(files.items()))}))
        manifest = {**manifest, "files": dict(sorted(files.items()))}
        text = json.dumps(manifest, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
        (tmp / MANIFEST).write_text(text, encoding="utf-8")
        for p in tmp.iterdir():
            os.chmod(p, 0o644)
            _fsync(p)
        os.chmod(tmp, 0o700)  # world-readable only once published (commit_release)
        _fsync(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return StagedRelease(tmp, final, manifest, hashlib.sha256(text.encode("utf-8")).hexdigest())


def commit_release(staged: StagedRelease, ledger, mlflow_run_id: str | None = None) -> Path:
    """Intent on the ledger → one atomic rename → ``published`` entry on the ledger.

    A crash after the intent is completed (or rolled back) by :func:`transit_release.integrity.recovery.repair`.
    """
    if staged.final_dir.exists():
        shutil.rmtree(staged.staging_dir, ignore_errors=True)
        raise ReleaseExistsError(f"release '{staged.final_dir.name}' appeared while publishing; "
                                 "it is never overwritten")
    ledger.record_intent(staged.final_dir.name, staged.manifest_sha256, staged.staging_dir, staged.final_dir,
                         mlflow_run_id)
    crash_point("after-intent")
    os.rename(staged.staging_dir, staged.final_dir)
    open_to_the_public(staged.final_dir)
    _fsync(staged.final_dir.parent)
    crash_point("after-rename")
    ledger.record_publication(staged.final_dir.name, staged.manifest_sha256)
    crash_point("after-publication-entry")
    return staged.final_dir


def open_to_the_public(release_dir: Path) -> None:
    """A published release directory is world-readable (staged, it was not)."""
    os.chmod(release_dir, 0o755)


def verify_release(release_dir: Path) -> list[str]:
    """Problems found when re-hashing a published release (empty list: intact).

    The directory must hold exactly the manifest and the files it lists: a file
    added to a published release is a problem too.
    """
    problems = []
    manifest_path = release_dir / MANIFEST
    if not manifest_path.is_file():
        return [f"{release_dir.name}: {MANIFEST} is missing"]
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return [f"{release_dir.name}: {MANIFEST} is not readable JSON"]
    listed = manifest.get("files", {})
    for name, meta in listed.items():
        path = release_dir / name
        if not path.is_file():
            problems.append(f"{release_dir.name}/{name}: missing")
        elif sha256_file(path) != meta.get("sha256"):
            problems.append(f"{release_dir.name}/{name}: sha256 differs from the manifest")
    for extra in sorted(p.relative_to(release_dir).as_posix() for p in release_dir.rglob("*")
                        if p.name != MANIFEST and p.relative_to(release_dir).as_posix() not in listed
                        and not (p.is_dir() and any(f.startswith(p.relative_to(release_dir).as_posix() + "/")
                                                    for f in listed))):
        problems.append(f"{release_dir.name}/{extra}: not listed in the manifest")
    return problems


def rows_released(files: dict[str, dict]) -> int:
    """Rows a release publishes: its CSV and text files' rows, a table that restates a text file counted once."""
    return sum(int(meta.get("rows", 0)) for name, meta in files.items()
               if name.endswith((".csv", ".txt")) and not (name.endswith(".csv") and name[:-4] + ".txt" in files))
