"""The exit codes of the ``transit-release`` command. Touches nothing."""

EXIT_UNEXPECTED = 1
EXIT_INPUT = 2
EXIT_BUDGET = 3
EXIT_AUDIT_FAILED = 4
EXIT_INTERRUPTED = 130
