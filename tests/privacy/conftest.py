"""The privacy audit's options, sizes and figures table.

``pytest tests/privacy`` runs the CI sizes (fixed noise seed, deterministic,
≤ 2 minutes); ``pytest tests/privacy --long`` runs ≥ 10⁷ draws a side for the
vectorised (SBH) cases and many more whole runs for the prefix tree and the n-gram sanitizer, and
writes the figures table to ``release_reports/privacy-audit/`` (markdown and
JSON). ``--long`` is an option of this directory's conftest: pass it with
``tests/privacy`` (or a file in it) on the command line.

Family-wise α is 0.001 per case (``audit.FAMILY_ALPHA``): on a fresh seed a
correct mechanism fails a case with probability at most 0.001, the ~25 cases
together at most 2.5%; CI uses a fixed seed, so it is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.privacy.audit import AuditReport

_REPORT = pytest.StashKey[AuditReport]()
DEFAULT_SEED = 20250611


def pytest_addoption(parser):
    group = parser.getgroup("privacy audit")
    group.addoption("--long", action="store_true", default=False,
                    help="privacy audit: ≥ 10⁷ draws a side for the SBH, many more prefix-tree runs; "
                         "writes release_reports/privacy-audit/")
    group.addoption("--audit-seed", default=str(DEFAULT_SEED),
                    help="privacy audit: integer noise seed, or 'os' for fresh OS entropy (default %(default)s)")


def pytest_configure(config):
    config.addinivalue_line("markers", "privacy: empirical privacy audit of a mechanism (tests/privacy)")


@dataclass(frozen=True)
class AuditSizes:
    """Runs per side for each kind of case."""

    long: bool
    sbh: int  # vectorised: one stability_histogram call per chunk of runs
    tree: int  # whole prefix-tree runs, tight cases (the passenger's path at the threshold)
    tree_unique: int  # whole prefix-tree runs, the unique-station cases (not tight: low power anyway in CI)
    sbh_control: int  # negative controls (must FAIL; kept small)
    tree_control: int
    ngram: int  # whole n-gram sanitizer runs, the tight case
    ngram_control: int
    streamed_seeds: int  # card level: test seeds the streamed input path (and its bounding) runs with, per side
    share: int  # whole runs of the cases that watch one share of a mechanism's ε on its own (#40)


CI_SIZES = AuditSizes(long=False, sbh=1_000_000, tree=3_000, tree_unique=1_500, sbh_control=100_000,
                      tree_control=1_500, ngram=3_000, ngram_control=2_000, streamed_seeds=4, share=1_000)
LONG_SIZES = AuditSizes(long=True, sbh=10_000_000, tree=100_000, tree_unique=100_000, sbh_control=1_000_000,
                        tree_control=10_000, ngram=100_000, ngram_control=10_000, streamed_seeds=20, share=30_000)


def _long(config) -> bool:
    return bool(config.getoption("--long", default=False))


@pytest.fixture(scope="session")
def audit_sizes(pytestconfig) -> AuditSizes:
    return LONG_SIZES if _long(pytestconfig) else CI_SIZES


@pytest.fixture(scope="session")
def audit_seed(pytestconfig) -> int | None:
    """The noise seed of every case (``None``: OS entropy)."""
    raw = pytestconfig.getoption("--audit-seed", default=str(DEFAULT_SEED))
    return None if raw == "os" else int(raw)


@pytest.fixture(scope="session")
def audit_report(pytestconfig, audit_seed) -> AuditReport:
    """Collects every case's result; printed at the end, written under release_reports/ with ``--long``."""
    if _REPORT not in pytestconfig.stash:
        pytestconfig.stash[_REPORT] = AuditReport("long" if _long(pytestconfig) else "ci",
                                                  "os-entropy" if audit_seed is None else str(audit_seed))
    return pytestconfig.stash[_REPORT]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    report = config.stash.get(_REPORT, None)
    if report is None or not report.results:
        return
    terminalreporter.section("privacy audit figures")
    terminalreporter.write(report.markdown())
    if _long(config):
        for path in report.write(config.rootpath / "release_reports" / "privacy-audit"):
            terminalreporter.write_line(f"written: {path}")
