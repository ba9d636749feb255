"""``python -m transit_release.cli``: the ``transit-release`` command."""

from transit_release.cli.command import run

run()
