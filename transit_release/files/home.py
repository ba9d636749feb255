"""Where a release's state lives under one home directory (default: the current one).

Layout and who may read it::

    releases/<id>/            public files (0755 directories, 0644 files)
    release_reports/          internal reports, Data Docs, index.html (not world-readable)
    private/                  raw rows and anything derived from them (0700; files 0600)
        quarantine/<id>/      quarantined raw rows (kept for ``quality.quarantine_retention_days``)
        work/<id>-<run>/      one run's working files (its partition dataset), removed when it ends
        staging/.tmp-<id>-*/  a release being written, renamed into releases/ in one step when published
        test-releases/<id>/   releases made with the test-only noise seed (never under releases/)
        locks/<id>.lock       held by the one live run of a release (transit_release.runtime.release_lock)
        run-log.jsonl         the full outcome line of each run on a shared Prefect server (transit_release.runtime.disclosure)
    ledger.sqlite             the privacy ledger (0600)
    mlflow.db, mlartifacts/   the MLflow store (not world-readable)
    .prefect/                 Prefect's local database

Release ids name directories under ``releases/`` and ``release_reports/``, so
ids that would collide with the home's own files are reserved. A home (or a
ledger) inside a directory named ``releases`` is refused: it may be another
home's public tree, which would then publish a ledger, an MLflow store and
``private/``.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

from transit_release.errors import ConfigError

#: Top-level files the tool itself may write under ``releases/`` beside the release directories (the audit names
#: anything else there): the DCAT catalogue of the releases (:data:`transit_release.opendata.catalog.CATALOG`).
RELEASES_TOOL_FILES: frozenset[str] = frozenset({"catalog.jsonld"})
#: Top-level files the tool writes under ``release_reports/`` beside the releases' report folders: the index and
#: the audits' history (:mod:`transit_release.reports.release_index`).
REPORTS_TOOL_FILES: frozenset[str] = frozenset({"index.html", "audit_history.jsonl"})
#: Names a release id may not take: every name the tool writes under ``releases/`` and ``release_reports/`` beside
#: the releases (:data:`RELEASES_TOOL_FILES`, :data:`REPORTS_TOOL_FILES`; ``audit-<stamp>/`` and
#: ``experiments-<name>/`` by prefix), what a release folder holds, and the home's own files and folders.
RESERVED_IDS = frozenset({"releases", "release_reports", "private", "mlartifacts", "mlflow.db", "ledger.sqlite",
                          "summary.json", "audit_summary.json", "data_docs", "work", "quarantine", "test-releases",
                          "privacy-audit", "staging", "open-data.yaml", "manifest.json", "datacard.md",
                          "datapackage.json", "report.html"}) | RELEASES_TOOL_FILES | REPORTS_TOOL_FILES
RESERVED_PREFIXES = ("audit-", "experiments-", ".", "ledger.sqlite-", "mlflow.db-")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")

#: An empty directory renamed from ``private/staging/`` into ``releases/`` and removed at once, to learn whether one
#: rename publishes (:meth:`Home.staging_root`); the audit and the charge know it for the tool's.
RENAME_PROBE = ".rename-probe-"
RENAME_PROBE_PATTERN = re.compile(r"\.rename-probe-[0-9a-f]{8}")

#: Process umask of every command: nothing the tool writes is world-readable unless made so on purpose.
UMASK = 0o027


def check_release_id(release_id: str) -> str:
    """A release id is a directory name: letters, digits, '.', '_', '-'; not one of the home's own names."""
    if not isinstance(release_id, str) or not _ID.fullmatch(release_id):
        raise ConfigError(f"release id {release_id!r} is not valid: use letters, digits, '.', '_' or '-' "
                          "(1 to 100 characters, starting with a letter or digit)")
    if release_id.lower() in RESERVED_IDS or release_id.lower().startswith(RESERVED_PREFIXES):
        raise ConfigError(f"release id {release_id!r} is reserved: it would collide with the home's own files "
                          f"({', '.join(sorted(RESERVED_IDS))}, or names starting with "
                          f"{', '.join(repr(p) for p in RESERVED_PREFIXES)})")
    return release_id


@dataclass(frozen=True)
class Home:
    root: Path
    ledger_path: Path | None = None
    #: the paths as given (absolute, links not resolved): a home reached through another home's linked
    #: ``releases/`` is inside a public tree although its resolved path does not say so
    given: tuple[Path, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def at(cls, root: str | Path | None = None, ledger: str | Path | None = None) -> "Home":
        given = (Path(root or ".").absolute(),) + ((Path(ledger).absolute(),) if ledger else ())
        return cls(Path(root or ".").resolve(), Path(ledger).resolve() if ledger else None, given)

    @property
    def releases(self) -> Path:
        """Public files: ``releases/<release-id>/``."""
        return self.root / "releases"

    @property
    def test_releases(self) -> Path:
        """Releases made with the test-only seed: private, never under ``releases/``."""
        return self.private / "test-releases"

    def release_root(self, noise_kind: str) -> Path:
        """Where a release with this noise source is published."""
        return self.releases if noise_kind == "os-entropy" else self.test_releases

    def release_dir(self, release_id: str) -> Path:
        """The published directory of a release, wherever it is (``releases/`` or, for tests, private)."""
        public = self.releases / release_id
        test = self.test_releases / release_id
        return test if test.exists() and not public.exists() else public

    @property
    def reports(self) -> Path:
        """Internal reports: ``release_reports/<release-id>/``."""
        return self.root / "release_reports"

    @property
    def private(self) -> Path:
        """Anything holding raw rows (quarantine files, working files, demo input)."""
        return self.root / "private"

    @property
    def quarantine(self) -> Path:
        return self.private / "quarantine"

    @property
    def staging(self) -> Path:
        """Where releases are written before their rename into place: inside ``private/`` (0700), so nobody but
        the tool reads a release before it is published."""
        return self.private / "staging"

    def staging_root(self, release_root: Path) -> Path:
        """Where a release published under ``release_root`` is staged: :attr:`staging` when one rename moves a
        directory from there into ``release_root`` (tried with a real, empty directory: a bind mount of the same
        filesystem, such as a web root, has the same device number and still refuses the rename), else
        ``release_root`` itself (the staging directory is then not readable by others until it is renamed into
        place)."""
        self.staging.mkdir(mode=0o700, exist_ok=True)
        release_root.mkdir(parents=True, exist_ok=True)
        name = f"{RENAME_PROBE}{secrets.token_hex(4)}"
        probe, moved = self.staging / name, release_root / name
        probe.mkdir(mode=0o700)
        try:
            os.rename(probe, moved)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            return release_root
        finally:
            for p in (probe, moved):
                try:
                    p.rmdir()
                except FileNotFoundError:
                    pass
        return self.staging

    @property
    def work(self) -> Path:
        return self.private / "work"

    @property
    def ledger(self) -> Path:
        """The privacy ledger (``--ledger`` overrides ``<home>/ledger.sqlite``)."""
        return self.ledger_path or self.root / "ledger.sqlite"

    @property
    def fingerprint_key_file(self) -> Path:
        return self.private / "fingerprint.key"

    def fingerprint_key(self) -> bytes:
        """This home's secret keying the input fingerprints on the ledger (created once, 0600, never published).

        The ledger's head hash is published (manifest, data card) and chains every spend's payload, so a
        payload field that is a plain hash of the input files would let anyone holding candidate inputs test
        them against the published head: a noise-free membership test. Keyed by this secret, the fingerprint
        still says "same files" within the home (a re-run of a release) and nothing outside it.
        """
        path = self.fingerprint_key_file
        if not path.exists():  # written aside, then linked: a concurrent run sees no key or the whole key
            tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(secrets.token_bytes(32))
                    fh.flush()
                    os.fsync(fh.fileno())
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    pass  # another run made it first: use theirs
            finally:
                tmp.unlink(missing_ok=True)
        key = path.read_bytes()
        if len(key) != 32:
            raise ConfigError(f"{path}: not a fingerprint key (32 bytes expected); restore it from a backup")
        return key

    @property
    def mlflow_db(self) -> Path:
        return self.root / "mlflow.db"

    @property
    def mlflow_uri(self) -> str:
        return f"sqlite:///{self.mlflow_db}"

    @property
    def mlflow_artifacts(self) -> Path:
        return self.root / "mlartifacts"

    @property
    def prefect_home(self) -> Path:
        return self.root / ".prefect"

    def mlflow_ui_command(self) -> str:
        """The command that opens MLflow's UI on this home's store, as printed: it runs without an activated venv
        (this interpreter's ``-m mlflow``)."""
        import shlex
        import sys

        return (f"{shlex.quote(sys.executable)} -m mlflow ui --backend-store-uri {self.mlflow_uri} "
                f"--default-artifact-root {self.mlflow_artifacts.as_uri()}")

    def check_usable(self, write: bool = True) -> "Home":
        """Refuse at once, creating nothing, a home that is a file or (``write``: a command that writes there) cannot
        be written, or that lies in a ``releases/`` directory (one clear line). Writability is asked of the system
        (``access(2)``: permissions and a read-only mount), never tried: nothing is written, a directory's mtime stays
        as it was; ``write=False`` (``budget``, which reads the ledger only) asks nothing of it."""
        given = dict(zip(("--home", "--ledger"), self.given))
        for what, path in (("--home", self.root), ("--ledger", self.ledger_path),
                           ("--home", given.get("--home")), ("--ledger", given.get("--ledger"))):
            public = public_tree(path)
            if public is not None:
                raise ConfigError(f"{what} {path} is inside a releases/ directory ({public}): that may be another "
                                  "home's public tree, where a ledger, an MLflow store and private/ would be "
                                  "published; choose a place outside any releases/ directory")
        if self.root.exists() and not self.root.is_dir():
            raise ConfigError(f"--home {self.root} is a file, not a directory")
        existing = self.root
        while not existing.exists():
            existing = existing.parent
        if not existing.is_dir():
            raise ConfigError(f"--home {self.root}: {existing} is a file, not a directory")
        if write and not os.access(existing, os.W_OK | os.X_OK, effective_ids=os.access in os.supports_effective_ids):
            reason = "a read-only file system" if _read_only_mount(existing) else "permission denied"
            raise ConfigError(f"--home {self.root} is not writable ({reason})")
        return self

    def is_home(self) -> bool:
        """Does ``root`` hold a home, i.e. anything a release leaves: the ledger (``--ledger``'s file, or
        ``ledger.sqlite``), ``releases/``, ``release_reports/``, ``private/`` or the MLflow store? An empty or missing
        directory is not one yet: a first release makes it one."""
        if self.ledger.is_file():
            return True
        return self.root.is_dir() and any(p.exists() for p in (self.root / "ledger.sqlite", self.releases,
                                                                self.reports, self.private, self.mlflow_db))

    def check_is_home(self, what: str) -> "Home":
        """Refuse (exit 2, creating nothing) a command that reads a home's records pointed at a directory that holds
        none: ``audit`` would say PASSED of nothing, ``budget`` "nothing spent" of a typo."""
        if not self.is_home():
            state = "does not exist" if not self.root.exists() else \
                "is empty" if self.root.is_dir() and not any(self.root.iterdir()) else "holds no release records"
            raise ConfigError(f"--home {self.root} is not a transit-release home: it {state} (no ledger.sqlite, "
                              f"releases/, release_reports/, private/ or mlflow.db); nothing to {what}. Give the "
                              "directory a release was made in (--home), or --ledger FILE")
        return self

    def prepare(self) -> "Home":
        """Create the home's folders with their modes (after :meth:`check_usable`).

        ``private/`` is 0700 (raw rows), the reports and the stores are not world-readable, and
        ``releases/`` is world-readable.
        """
        self.check_usable()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--home {self.root}: cannot be created ({exc.strerror})") from None
        for path, mode in ((self.private, 0o700), (self.reports, 0o750), (self.releases, 0o755)):
            path.mkdir(exist_ok=True)
            if stat.S_IMODE(path.stat().st_mode) != mode:
                os.chmod(path, mode)
        self.fingerprint_key()
        return self


def _read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def public_tree(path: Path | None) -> Path | None:
    """The directory named ``releases`` that ``path`` lies in (itself or an ancestor), if any: a public tree."""
    return next((p for p in (path, *path.parents) if p.name == "releases"), None) if path else None


#: The user's cache of things rebuilt from the installed libraries alone, never from data (empty MLflow stores,
#: one per MLflow/SQLAlchemy/Alembic version; the Prefect home of the Dask workers' forkserver); default
#: ``$XDG_CACHE_HOME/transit-release`` (``~/.cache/transit-release``).
CACHE_ENV = "TRANSIT_RELEASE_CACHE"


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "transit-release"


#: The lock file of a run's working directory under ``private/work/`` (held by
#: :func:`transit_release.integrity.recovery.work_dir` while the run lives).
LOCK = ".lock"


def _locked(path: Path) -> bool:
    """Does a live run hold ``path``'s lock?"""
    lock = path / LOCK
    if not lock.exists():
        return False
    with open(lock, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False


def live_release_ids(home: Home) -> set[str]:
    """Release ids some live run is working on."""
    if not home.work.is_dir():
        return set()
    return {p.name.rsplit("-", 1)[0] for p in home.work.iterdir() if p.is_dir() and _locked(p)}
