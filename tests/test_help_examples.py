"""Every command's ``--help`` example runs as printed.

The example is the last line of each command's help (``example: transit-release …``, from
:data:`transit_release.cli.parser.EXAMPLES`). They are run as printed, in one temporary directory, in an order
where each one's inputs exist (the synthetic data first), with the session's Prefect server; each must exit 0.
``serve`` runs schedules until stopped (``tests/test_deployments.py`` runs the deployments on a real server's
scheduler), so its example is only parsed; every other example runs in every run of the suite, the Opal release
and the demo (a synthetic week at scale 0.01 and 0.1: about 6 s each) included.
"""

from __future__ import annotations

import json
import shlex
import time

import pytest

from transit_release.cli import main
from transit_release.cli.parser import build_parser

#: the order the examples run in: the synthetic data first, then the releases, then what reads the home
ORDER = ("synth", "synth-metro", "sequences", "trajectories", "sets", "release", "demo", "budget", "audit",
         "repair", "backup", "serve")
#: examples parsed only
PARSED_ONLY = {"serve": "runs the schedules until stopped: tests/test_deployments.py"}


def printed_examples() -> dict[str, str]:
    """Each command's example as ``--help`` prints it."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    out = {}
    for name, command in sub.choices.items():
        help_text = command.format_help()
        line = next(x for x in help_text.splitlines() if x.startswith("example: "))
        out[name] = line.removeprefix("example: ")
    return out


def test_every_command_prints_one_example_and_the_order_covers_them_all():
    examples = printed_examples()
    assert set(examples) == set(ORDER)
    for name, example in examples.items():
        assert example.startswith(f"transit-release {name}"), example
        assert "..." not in example and "<" not in example, example  # runnable as printed: no placeholder


@pytest.mark.flow
def test_every_help_example_runs_as_printed(prefect_harness, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    examples = printed_examples()
    ran, seconds = [], {}
    for name in ORDER:
        argv = shlex.split(examples[name])[1:]
        if name in PARSED_ONLY:
            build_parser().parse_args(argv)
            continue
        start = time.monotonic()
        code = main(argv)
        seconds[name] = round(time.monotonic() - start, 1)
        out = capsys.readouterr()
        assert code == 0, f"`{examples[name]}` exited {code}\n{out.out[-2000:]}\n{out.err[-2000:]}"
        ran.append(name)
        if name == "sequences":  # the shortest command gets the recommended mechanism, without --height
            assert "Release sequences-ngram-20160808-20160814: published" in out.out
        elif name == "trajectories":
            assert "Release trajectories-markov-20160808-20160814: published" in out.out
        elif name == "sets":  # 68 stations: the rule picks DiffPart
            assert "Release sets-diffpart-20160808-20160814: published" in out.out
        elif name == "audit":
            assert json.loads(out.out[out.out.index("{"):])["ok"]
    assert set(ran) == set(ORDER) - set(PARSED_ONLY)
    assert (tmp_path / "backups" / "ledger-2016-08-15").is_dir()
    print("seconds per example:", seconds)
