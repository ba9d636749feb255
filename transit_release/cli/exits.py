"""The exit codes of the ``transit-release`` command (kept with the runs' outcomes, :mod:`transit_release.runtime.outcome`).
Touches nothing."""

from transit_release.runtime.outcome import (EXIT_AUDIT_FAILED, EXIT_BUDGET, EXIT_INPUT, EXIT_INTERRUPTED,  # noqa: F401
                                     EXIT_UNEXPECTED)
