"""Options several commands share: the home and ledger, a passenger-level release's inputs and universe, a
release's id, population, policy, quarantine limit, workload and dry run. Builds argparse parsers only: reads no file,
imports nothing heavy."""

from __future__ import annotations

import argparse


import re

#: A number as written in ASCII: Python's float() also reads full-width or other scripts' digits ('１') and '_'
#: between digits ('1_0' is 10), which a value typed by mistake should not become. nan and inf pass, to be refused
#: with the parameter's own reason.
_NUMBER = re.compile(r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|nan|inf|infinity)", re.IGNORECASE)
_INTEGER = re.compile(r"[+-]?[0-9]+")


def number(text: str) -> float:
    """A float written in ASCII digits (an argparse type): ``0.5``, ``1e-3``, ``-2``."""
    if not _NUMBER.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"expected a number in ASCII digits, e.g. 0.5 or 1e-3; got {text!r}")
    return float(text)


def integer(text: str) -> int:
    """An int written in ASCII digits (an argparse type): ``12``, ``-1``."""
    if not _INTEGER.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"expected a whole number in ASCII digits, e.g. 12; got {text!r}")
    return int(text)


def floats(text: str) -> list[float]:
    """``1,1,1,1,2,2`` as floats (an argparse type), each written in ASCII digits."""
    parts = text.split(",")
    if not all(_NUMBER.fullmatch(x.strip()) for x in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, e.g. 1,1,1,1,2,2; got {text!r}")
    return [float(x) for x in parts]


def add_home(p: argparse.ArgumentParser, ledger: bool = True) -> None:
    """``--home`` and, unless ``ledger`` is false, ``--ledger``."""
    p.add_argument("--home", default=".", help="state directory (default: current directory)")
    if ledger:
        p.add_argument("--ledger", help="privacy ledger file (default: <home>/ledger.sqlite)")


def add_record_inputs(p: argparse.ArgumentParser, record: str, records: str, input_help: str, period: str) -> None:
    """A passenger-level release's inputs: a file of records or tap data, and the public universe."""
    add_home(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", help=input_help)
    src.add_argument("--trips", help=f"tap data (CSV or Parquet, like `release`): one {record} per card over the "
                                    f"{period}; needs --stops, whose --mode stations are the universe")
    p.add_argument("--stops", help="stop table of the tap data (its station names are the public universe)")
    p.add_argument("--mode", default="train", choices=("bus", "ferry", "lightrail", "train"),
                   help=f"with --trips: the mode whose taps make the {records} (default train)")
    p.add_argument("--locations", help="the public location universe: one location id per line")


POPULATION_HELP = ("the population the release is about (default: the home's one population; name another only for "
                   "genuinely different people, e.g. another city's riders): a passenger's loss adds up over every "
                   "release of their population")


def add_release_options(p: argparse.ArgumentParser, default_id: str, queries: int = 40_000) -> None:
    """A passenger-level release's id, population, policy, quarantine limit, workload and dry run."""
    p.add_argument("--release-id", help=f"default: {default_id}")
    p.add_argument("--population", help=POPULATION_HELP)
    p.add_argument("--policy", help="budget policy YAML")
    p.add_argument("--quarantine-limit", type=number, default=0.01,
                   help="largest share of records set aside as malformed before the release is refused (default 0.01)")
    p.add_argument("--queries", type=integer, default=queries, help="count queries of the utility workload")
    p.add_argument("--dry-run", action="store_true", help="validate, print the spend and the policy's verdict, stop")
