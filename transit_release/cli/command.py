"""The command's run: parse, then dispatch to the command's group, then turn what happened into one line and an exit
code (2 bad input or configuration, 3 budget, 4 audit failed or a ledger failing its checks, 130 interrupted, 1 a
storage failure), cleaning up after a refusal (:mod:`~transit_release.cli.aftermath`). Sets the process umask; the
rest it leaves to the modules it calls."""

from __future__ import annotations

import os
import sys
import traceback
from contextlib import nullcontext

from transit_release.cli import aftermath, checks, data, ledger, opal, passengers, serve
from transit_release.cli.exits import EXIT_INTERRUPTED, EXIT_UNEXPECTED
from transit_release.cli.parser import parse
from transit_release.cli.server import prepare_environment
from transit_release.errors import TransitReleaseError
from transit_release.files.home import UMASK, Home
from transit_release.runtime.outcome import exit_code

#: the commands that run on a home, by name
COMMANDS = {"backup": ledger.backup, "budget": ledger.budget, "repair": ledger.repair, "serve": serve.serve,
            "release": lambda args, home: opal.release(args, args.trips, args.stops, home),
            "sequences": passengers.sequences, "trajectories": passengers.trajectories, "sets": passengers.sets,
            "audit": ledger.audit, "demo": opal.demo}


def dispatch(args, home: Home) -> int:
    """The settings Prefect and MLflow read, the ledger key's place, then the command."""
    prepare_environment(home, args.verbose)
    checks.check_ledger_key(home)
    return COMMANDS[args.command](args, home)


#: What a command that stopped short (a storage failure, Ctrl-C) did not do, when the ledger recorded nothing of it:
#: a release's words would be odd for an audit or a backup
NOT_DONE = {
    "audit": "the audit did not finish: run it again once the storage is fixed (an audit charges and publishes "
             "nothing)",
    "backup": "no backup was made: what was written of it under --to was removed",
    "budget": "no figures are shown (budget writes nothing)",
    "repair": "the repair did not finish: run it again once the storage is fixed (it redoes only what is left)",
}


def nothing_done(command: str) -> str:
    """The words for a command that stopped short before the ledger recorded anything of it."""
    return NOT_DONE.get(command, "nothing was charged or published")


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` (default: the process's arguments); its exit code."""
    args = parse(argv)
    os.umask(UMASK)
    state = ""  # what a run that stopped left (charged, published, interrupted publication)
    try:
        if args.command == "synth":
            return data.synth(args)
        if args.command == "synth-metro":
            return data.synth_metro(args)
        # created only when a flow runs; `budget` reads the ledger only: a read-only home (an auditor's) will do
        home = Home.at(args.home, getattr(args, "ledger", None)).check_usable(write=args.command != "budget")
        before = aftermath.entries(home)
        new_home = before is None or not home.is_home()  # a dry run there leaves no home behind (a typo in --home)
        head, results = aftermath.ledger_head(home), aftermath.prefect_results(home)
        try:
            # serve: Prefect's own handling of Ctrl-C
            with aftermath.interruptible() if args.command != "serve" else nullcontext():
                rc = dispatch(args, home)
            if getattr(args, "dry_run", False) and new_home:
                aftermath.remove_what_a_refusal_created(home, before)
            return rc
        except BaseException as exc:
            if not isinstance(exc, (TransitReleaseError, KeyboardInterrupt)) and aftermath.storage_failure(exc) is None:
                raise  # a bug: its traceback
            with aftermath.uninterruptible():  # a second Ctrl-C does not leave the clean-up half done
                aftermath.remove_failure_records(home, results)
                aftermath.remove_what_a_refusal_created(home, before)
                state = aftermath.state_since(home, head)
            raise
    except TransitReleaseError as exc:
        if args.verbose:  # the traceback too; the line and the exit code as without --verbose
            traceback.print_exc(file=sys.stderr)
        print(f"transit-release: error: {exc}{_what_would_fit(args.command, exc)}" + (f" ({state})" if state else ""),
              file=sys.stderr)
        return exit_code(exc)
    except KeyboardInterrupt:
        print("transit-release: interrupted: " + (state or nothing_done(args.command)), file=sys.stderr)
        return EXIT_INTERRUPTED
    except BaseException as exc:
        failure = aftermath.storage_failure(exc)
        if failure is None:
            raise
        if args.verbose:
            traceback.print_exc(file=sys.stderr)
        print(f"transit-release: error: {failure}; " + (state or nothing_done(args.command)), file=sys.stderr)
        return EXIT_UNEXPECTED


#: the flags that set what a command asks of the budget
BUDGET_FLAGS = {"release": "--epsilons (their sum is a partition's ε) or --delta (each marginal's δ; 6 per partition)",
                "demo": "--epsilons (their sum is a partition's ε) or --delta (each marginal's δ; 6 per partition)",
                "sequences": "--epsilon (δ follows from ε and the mechanism's parameters)",
                "trajectories": "--epsilon (δ follows from ε and the mechanism's parameters)",
                "sets": "--epsilon (δ follows from ε and the mechanism's parameters)"}


def _what_would_fit(command: str, exc: Exception) -> str:
    """For a cap's refusal: what the release could ask instead, and with which flag."""
    from transit_release.errors import BudgetExceededError

    if not isinstance(exc, BudgetExceededError) or command not in BUDGET_FLAGS:
        return ""
    fits = []
    if exc.requested_epsilon > exc.remaining_epsilon:
        fits.append(f"ε ≤ {exc.remaining_epsilon:.3f}")
    if exc.requested_delta is not None and exc.remaining_delta is not None \
            and exc.requested_delta > exc.remaining_delta:
        fits.append(f"δ ≤ {exc.remaining_delta:.3g}")
    if not fits:
        return ""
    if exc.remaining_epsilon <= 0 or (exc.remaining_delta is not None and exc.remaining_delta <= 0):
        return ". Nothing remains of this cap in its window: release another period, or later"
    return f". It would fit asking {' and '.join(fits)} of '{exc.scope}': set {BUDGET_FLAGS[command]}"


def run() -> None:
    """The ``transit-release`` command: :func:`main`, then a quick exit.

    Once the command has returned — its output printed, its files closed and committed — the interpreter's exit
    steps run in its order (non-daemon threads joined and Prefect's event and log queues drained, then the exit
    handlers: MLflow's, logging's) and the process ends without the
    interpreter's own teardown, which frees the modules of Prefect, MLflow, Great Expectations and pandas one
    object at a time: about 2 s after every release, for nothing. A command that raises ends the usual way."""
    import atexit
    import threading

    import gc

    from transit_release.runtime import collector

    collector.SHORT_LIVED = True  # one command, then the process ends: see collector.settle
    gc.set_threshold(*collector.THRESHOLDS)  # its imports alone cost a sixth more CPU with the default collection
    code = main()
    threading._shutdown()  # as the interpreter's exit: joins non-daemon threads, drains Prefect's event queues
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
