"""The command line's grammar: the top-level parser and its subcommands, each group's from its own module. Builds
argparse parsers only."""

from __future__ import annotations

import argparse

from transit_release.cli import data, ledger, opal, passengers, serve

DESCRIPTION = "The ``transit-release`` command."


def build_parser() -> argparse.ArgumentParser:
    """``transit-release [--verbose] COMMAND ...``, the commands in the order ``--help`` lists them."""
    p = argparse.ArgumentParser(prog="transit-release", description=DESCRIPTION)
    p.add_argument("--verbose", action="store_true", help="show Prefect's logs and the traceback of any error")
    sub = p.add_subparsers(dest="command", required=True)
    data.add_synth(sub)
    opal.add_parsers(sub)
    passengers.add_parsers(sub)
    data.add_synth_metro(sub)
    ledger.add_parsers(sub)
    serve.add_parser(sub)
    return p
