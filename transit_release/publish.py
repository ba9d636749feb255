"""Publishing a release directory atomically, with its manifest and data card.

Files are written into ``releases/.tmp-<id>-<random>/`` (:func:`stage_release`)
and the directory is renamed into place as the very last step
(:func:`commit_release`), so a crash never leaves half a release under
``releases/<id>``; an existing release is never overwritten.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from transit_release.errors import ConfigError, ReleaseExistsError

RELEASE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
MANIFEST = "manifest.json"
DATACARD = "DATACARD.md"


def check_release_id(release_id: str) -> str:
    if not RELEASE_ID.match(release_id or ""):
        raise ConfigError(f"release id {release_id!r} is not valid: use letters, digits, '.', '_' or '-' "
                          "(at most 100 characters, starting with a letter or digit)")
    return release_id


def already_published(releases_dir: Path, ledger, release_id: str, same) -> bool:
    """Is ``release_id`` already published from the same input and parameters?

    ``same(earlier_events)`` says whether the earlier spends match this run.
    Returns False for a new id; True for an identical earlier publication
    (nothing to draw or spend); raises :class:`ReleaseExistsError` otherwise,
    so no earlier release, report or record is touched.
    """
    published = release_id in ledger.published()
    exists = (releases_dir / release_id).exists()
    if not (published or exists):
        return False
    if published and exists and same([e.event() for e in ledger.spends(release_id)]):
        return True
    raise ReleaseExistsError(f"release '{release_id}' already exists and was made from other input or parameters; "
                             "it is never overwritten: choose another --release-id")


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


def stage_release(releases_dir: Path, release_id: str, tables: dict[str, pd.DataFrame], manifest: dict,
                  datacard: str, texts: dict[str, str] | None = None) -> StagedRelease:
    """Write every file of the release into ``releases/.tmp-<id>-<random>/``."""
    check_release_id(release_id)
    releases_dir.mkdir(parents=True, exist_ok=True)
    final = releases_dir / release_id
    if final.exists():
        raise ReleaseExistsError(f"release '{release_id}' already exists in {releases_dir}; it is never overwritten")
    for stale in releases_dir.glob(f".tmp-{release_id}-*"):
        shutil.rmtree(stale, ignore_errors=True)  # left by a crashed run; never visible as a release
    tmp = releases_dir / f".tmp-{release_id}-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        files = {}
        for name, df in tables.items():
            for ext in ("csv", "parquet"):
                path = tmp / f"{name}.{ext}"
                if ext == "csv":
                    df.to_csv(path, index=False, lineterminator="\n")
                else:
                    df.to_parquet(path, index=False)
                files[path.name] = {"sha256": sha256_file(path), "rows": int(len(df)), "bytes": path.stat().st_size}
        for name, text in (texts or {}).items():
            (tmp / name).write_text(text, encoding="utf-8", newline="\n")
            files[name] = {"sha256": sha256_file(tmp / name), "rows": text.count("\n"),
                           "bytes": (tmp / name).stat().st_size}
        (tmp / DATACARD).write_text(datacard, encoding="utf-8")
        files[DATACARD] = {"sha256": sha256_file(tmp / DATACARD), "bytes": (tmp / DATACARD).stat().st_size}
        manifest = {**manifest, "files": dict(sorted(files.items()))}
        text = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
        (tmp / MANIFEST).write_text(text, encoding="utf-8")
        for p in tmp.iterdir():
            _fsync(p)
        _fsync(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return StagedRelease(tmp, final, manifest, hashlib.sha256(text.encode("utf-8")).hexdigest())


def commit_release(staged: StagedRelease) -> Path:
    """Make the staged release visible under its id with one atomic rename."""
    if staged.final_dir.exists():
        shutil.rmtree(staged.staging_dir, ignore_errors=True)
        raise ReleaseExistsError(f"release '{staged.final_dir.name}' appeared while publishing; "
                                 "it is never overwritten")
    os.rename(staged.staging_dir, staged.final_dir)
    _fsync(staged.final_dir.parent)
    return staged.final_dir


def verify_release(release_dir: Path) -> list[str]:
    """Problems found when re-hashing a published release (empty list: intact)."""
    problems = []
    manifest_path = release_dir / MANIFEST
    if not manifest_path.is_file():
        return [f"{release_dir.name}: {MANIFEST} is missing"]
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    for name, meta in manifest.get("files", {}).items():
        path = release_dir / name
        if not path.is_file():
            problems.append(f"{release_dir.name}/{name}: missing")
        elif sha256_file(path) != meta["sha256"]:
            problems.append(f"{release_dir.name}/{name}: sha256 differs from the manifest")
    return problems


def render_datacard(manifest: dict) -> str:
    """The public data card: what the files are and what the privacy guarantee means."""
    p = manifest["privacy"]
    rows = "\n".join(
        f"| {m['j']} | `{name}` | `{m['file']}.csv` | {m['epsilon']:g} | {m['delta']:.3g} | {m['noise_scale']} | {m['threshold']} |"
        for name, m in p["marginals"].items())
    period = manifest["period"]
    return f"""# {manifest['release_id']}: differentially private tap counts

Public-transport tap-on/tap-off counts for {period['start']} to {period['end']},
per mode ({', '.join(manifest['modes'])}) and day, released under differential privacy.

## Files
| file | columns | one row is |
| --- | --- | --- |
| `time.csv` | `mode,date,tap,time,count` | taps in a {manifest['parameters']['bin_minutes']}-minute window (`time` = window start, `-1` = unknown) |
| `location.csv` | `mode,date,tap,loc,count` | taps at a location (bus: postcode; other modes: stop, station or wharf name; `-1` = unknown, e.g. a missing tap-off) |
| `time-loc.csv` | `mode,date,tap,time,loc,count` | taps at a location in a time window |

Each CSV has a Parquet twin with the same rows. `tap` is `on` or `off`. Rows are
sorted by mode, date, tap, time and location. `manifest.json` lists every file's
SHA-256.

## How the counts were made
For each (mode, date) and each of six column combinations, every combination
present in the data got integer noise from the discrete Laplace distribution and
was published only if its noisy count reached a threshold (the stability-based
histogram of Asghar, Tyler & Kaafar, 2018). Consequences for users:

- **Missing rows are small, not zero.** A combination absent from a file had a
  true count below about its threshold (see below) or did not occur at all.
- **Counts are noisy.** The noise has mean 0 and standard deviation of about
  `1.4 × scale` taps; add rows up to reduce relative error.
- **Files disagree slightly.** Each file got its own noise, so totals over
  `time.csv` and `location.csv` differ.
- **No invented combinations.** Every published (time, location) occurred in the data.

| j | marginal | file | ε | δ | noise scale | threshold |
| --- | --- | --- | --- | --- | --- | --- |
{rows}

## Privacy guarantee
The release is ({p['epsilon']:g}, {p['delta']:.3g})-differentially private for one
**{p['unit_of_privacy']}** (neighbouring data sets: {p['neighbouring_relation']};
equivalently ({p['add_remove_epsilon']:g}, {p['add_remove_delta']:.3g}) when one trip is added or removed).
Composition: {p['composition']}. A passenger making several trips is protected per
trip, not as a whole.

Noise source: {manifest['noise_source']}. Code version: {manifest['code_version']}.
Produced by transit-release; licence of the data: {manifest.get('licence', 'CC BY 4.0')}.
"""
