"""The command line's grammar: the top-level parser and its subcommands, each group's from its own module. Builds
argparse parsers only."""

from __future__ import annotations

import argparse

from transit_release.cli import data, ledger, opal, passengers, serve

DESCRIPTION = ("Publish a transit agency's smart-card tap data as open data under differential privacy: releases "
               "of each kind, the privacy ledger and its budget, audits, recovery and schedules.")
EPILOG = ("`transit-release COMMAND --help` shows a command's options and an example. Exit codes: 0 done, 2 bad input "
          "or configuration, 3 refused by the budget, 4 audit failed, 130 interrupted, 1 a storage failure.")


WEEK = "--period-start 2016-08-08 --period-end 2016-08-14"
#: one working example per command (README and docs/ have more, with what they print); every one runs as printed,
#: in the order of tests/test_help_examples.py (the synthetic data first)
EXAMPLES = {
    "synth": "transit-release synth --out data --scale 0.01",
    "release": f"transit-release release --trips data/trips.csv --stops data/stops.csv {WEEK} --home home",
    "demo": "transit-release demo --home demo",
    "sequences": f"transit-release sequences --input metro/sequences.txt --locations metro/locations.txt {WEEK} "
                 "--epsilon 1 --home home",
    "trajectories": "transit-release trajectories --input metro/trajectories.txt --locations metro/locations.txt "
                    f"{WEEK} --epsilon 1 --home home",
    "sets": f"transit-release sets --input metro/sets.txt --locations metro/locations.txt {WEEK} --epsilon 1 "
            "--home home",
    "synth-metro": "transit-release synth-metro --out metro --passengers 20000",
    "budget": "transit-release budget --home home",
    "audit": "transit-release audit --home home --json",
    "repair": "transit-release repair --home home",
    "backup": "transit-release backup --home home --to backups/ledger-2016-08-15",
    "serve": "transit-release serve --home home",
}


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, except that the example (the epilog) is printed on one line, as it is run: a wrapped
    command copied from the terminal would not be the command."""

    def _fill_text(self, text, width, indent):
        if text.startswith("example: "):
            return indent + text
        return super()._fill_text(text, width, indent)


class _Version(argparse.Action):
    """``--version``: the package version and commit, computed only when asked for."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from transit_release.version import code_version

        print(f"transit-release {code_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """``transit-release [--verbose] COMMAND ...``, the commands in the order ``--help`` lists them."""
    p = argparse.ArgumentParser(prog="transit-release", description=DESCRIPTION, epilog=EPILOG, allow_abbrev=False)
    p.add_argument("--version", action=_Version, help="print the version (and commit) and exit")
    p.add_argument("--verbose", action="store_true",
                   help="show Prefect's logs and the traceback of any error (the exit code is the same)")
    sub = p.add_subparsers(dest="command", required=True)
    data.add_synth(sub)
    opal.add_parsers(sub)
    passengers.add_parsers(sub)
    data.add_synth_metro(sub)
    ledger.add_parsers(sub)
    serve.add_parser(sub)
    for name, command in sub.choices.items():  # each command: what it does (its help line) and an example
        command.allow_abbrev = False  # exact option names only: `--trip` is not `--trips`
        command.description = command.description or next(a.help for a in sub._choices_actions if a.dest == name)
        command.epilog = f"example: {EXAMPLES[name]}"
        command.formatter_class = _HelpFormatter
    return p


def parse(argv: list[str] | None) -> argparse.Namespace:
    """Parse ``argv``; an option the command does not know is answered with that command's usage, not the top
    level's, and before anything else is checked (a required option the user misspelt is named as unknown, not as
    missing). Option names are exact: argparse's prefix matching is off, so `--trip` is refused, not taken for
    `--trips`."""
    import sys

    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    where, unknown = unknown_options(parser, argv)
    if unknown:
        where.error(f"unrecognized arguments: {' '.join(unknown)}")
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        sub.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _looks_like_an_option(token: str) -> bool:
    """An option, not a value (a negative number such as ``-1`` or ``-0.5`` is a value)."""
    return token.startswith("-") and len(token) > 1 and not (token[1].isdigit() or token[1] == ".")


def unknown_options(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The option names in ``argv`` that the parser they are given to does not define exactly (the top level's
    before the command, the command's after it), and that parser."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    where, unknown, after_unknown = parser, [], False
    for token in argv:
        if token == "--":
            break
        if where is parser and token in sub.choices and not after_unknown:
            if unknown:
                break
            where = sub.choices[token]
            continue
        if _looks_like_an_option(token):
            after_unknown = token.split("=", 1)[0] not in where._option_string_actions
            if after_unknown:
                unknown.append(token)
        elif after_unknown:  # the unknown option's value, unrecognized with it (as argparse says)
            unknown.append(token)
    return where, unknown
