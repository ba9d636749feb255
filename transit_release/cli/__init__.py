"""The ``transit-release`` command.

    transit-release synth       --out DIR [--scale F] [--seed N] [--format csv|parquet]
    transit-release release     --trips FILE --stops FILE --period-start D --period-end D [options] [--dry-run]
    transit-release demo        [--home DIR] [--scale F]
    transit-release sequences   --input FILE (--locations FILE | --taxonomy FILE) --epsilon E
                                [--mechanism prefix-tree --height H | --mechanism ngram [--lmax 20] [--nmax 5]]
                                --period-start D --period-end D [options] [--dry-run]
    transit-release trajectories --input FILE (--locations FILE | --location-taxonomy FILE) --epsilon E
                                --height H --period-start MONDAY --period-end SUNDAY [options] [--dry-run]
    transit-release sets        (--input FILE --locations FILE | --trips FILE --stops FILE [--mode M]) --epsilon E
                                [--fanout F] --period-start D --period-end D [options] [--dry-run]
    transit-release budget      [--home DIR] [--policy YAML]
    transit-release audit       [--home DIR] [--json]
    transit-release repair      [--home DIR] [--adopt-ledger-key]
    transit-release backup      --to DIR [--home DIR]
    transit-release serve       [--home DIR] [--deployments FILE] [--run-now NAME]

What can be checked without Prefect (arguments, files, headers, periods,
configuration, policy, the home) is checked first (a release's while its
temporary Prefect server starts), so a bad invocation is refused at once.
Flows run on a Prefect server on loopback that the command starts and that
dies with it (or the one ``PREFECT_API_URL`` names), with all
state under ``--home`` (default: the current directory). An expected failure
prints one line and exits 2 (bad input or configuration), 3 (budget) or 4
(audit failed, or a ledger that fails its integrity checks: nothing charged);
``--verbose`` shows Prefect's logs and tracebacks. The ledger key's place is
checked first, on every command that has a home.

The package's rooms, each saying in its docstring what it may touch: :mod:`.parser` (the grammar, one module per
command group: :mod:`.data`, :mod:`.opal`, :mod:`.passengers`, :mod:`.ledger`, :mod:`.serve`), :mod:`.options`
(options several commands share), :mod:`.checks` (what is checked before Prefect), :mod:`.server` (the Prefect API
and the loopback server's lifecycle), :mod:`.printing` (what is printed), :mod:`.aftermath` (cleaning up and
saying what is left after a refusal or interruption) and :mod:`.command` (parse, dispatch, exit code).
"""

from transit_release.cli.command import main, run
from transit_release.cli.exits import (EXIT_AUDIT_FAILED, EXIT_BUDGET, EXIT_INPUT, EXIT_INTERRUPTED,
                                       EXIT_UNEXPECTED)
# the settings Prefect and MLflow read when imported, for callers that run flows without a command
from transit_release.cli.server import prepare_environment as _prepare_environment  # noqa: F401

__all__ = ["EXIT_AUDIT_FAILED", "EXIT_BUDGET", "EXIT_INPUT", "EXIT_INTERRUPTED", "EXIT_UNEXPECTED", "main", "run"]
