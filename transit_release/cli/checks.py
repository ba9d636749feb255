"""What can be checked of an invocation before Prefect starts (or while its server starts): files, headers,
periods, ids, populations, policies, configurations, the public universe and what it allows, the ledger key's place,
and the budget policy's verdict on the spends (which follow from public parameters alone). Reads the input files'
headers, the public inputs (stop tables, universes, taxonomies, YAML) and the ledger (read only), and starts nothing;
a refusal is the exception it raises. One data-dependent refusal is made here too, as the flow makes it
(:func:`check_period_fit`: a declared period a small trips file does not fit), which reads that file's records
into the home's private folder (removed after) and, refusing, keeps its quarantined rows as the flow does;
otherwise it reads no record and writes nothing."""

from __future__ import annotations

from pathlib import Path

from transit_release.errors import InputDataError
from transit_release.files.home import Home, check_release_id


def check_ledger_key(home: Home) -> None:
    """Before anything starts (Prefect, a flow, a read of the ledger): a configured key lies outside the home and
    the ledger's directory and is private (:func:`~transit_release.accounting.ledger_key.check_key_place`)."""
    from transit_release.accounting.ledger_key import check_key_place

    check_key_place(home.root, home.ledger)


def check_population(args, home: Home):
    """Before anything is read or started: the budget policy (``--policy``) and the population the release names,
    which the policy must declare (:class:`~transit_release.errors.UndeclaredPopulationError`, exit 2: a
    configuration to correct, not a budget spent). Returns ``(policy, population name)``."""
    from transit_release.accounting.policy import load_budget_policy, recorded_populations

    policy = load_budget_policy(args.policy)
    return policy, policy.population(args.population, recorded_populations(home.ledger)).name


def check_home_state(home: Home, args) -> list:
    """The home's open-data settings and the ledger's integrity (every check the charge makes, read only: a refusal
    exits 4 with the audit's reason, for a dry run too); returns the ledger's entries. Cheap (YAML and SQLite, no
    pandas, pandera or privacy accounting imported), so these refusals come within a second or two."""
    from transit_release.integrity.anchors import check_ledger_whole
    from transit_release.opendata import settings

    settings.load(home.root)  # the home's open-data settings, refused here rather than after reading the input
    return check_ledger_whole(home, "it would charge nothing" if args.dry_run else "nothing was charged")


def check_budget(home: Home, args, events: list, policy, earlier_ids: tuple[str, ...] = (),
                 existing: list | None = None) -> None:
    """The home's state (:func:`check_home_state`, unless its ``existing`` entries are given), then the policy's
    verdict on ``events`` (this run's spends, planned from public parameters) against the ledger as it stands,
    before any record is read: a refusal here is the one the charge would give, seconds instead of minutes later.
    Left to the flow: a dry run's verdict (it reports it, and exits 3 if the policy refuses) and an id the ledger
    already holds (published from the same input: nothing is spent; charged: the flow's own refusal). The charge
    checks again, inside the ledger's transaction."""
    if existing is None:
        existing = check_home_state(home, args)
    if args.dry_run or not events:
        return
    if {x.release_id for x in existing} & {events[0].release_id, *earlier_ids}:
        return
    policy.check(existing, events)


def check_release_budget(args, home: Home, period, cfg, population: str, policy, existing: list | None = None) -> None:
    """An Opal release's spends (one per partition and marginal of the declared period) under the policy."""
    from transit_release.releases import opal

    rid = args.release_id or opal.release_id_for(period.start, period.end, cfg.unit_of_privacy)
    events = opal.plan_spends(period, cfg, rid, "not-read-yet", "", population)
    check_budget(home, args, events, policy, tuple(opal.earlier_release_ids(period.start, period.end)), existing)


def check_release_args(args, trips: str, stops: str, home: Home) -> None:
    """Everything about a release invocation that needs no Prefect: files, headers, period, id, the home's state,
    the stop table and the trips' header, config, policy. Cheapest first: each refusal comes before the imports it
    does not need (pandera, the privacy accounting)."""
    from transit_release.cli import preflight
    from transit_release.inputs.stored_types import STOP_COLUMN_TYPES, TRIP_COLUMN_TYPES
    from transit_release.runtime.cluster import check_workers_setting

    policy, population = check_population(args, home)  # before any file is read
    check_workers_setting(args.workers, args.dask_address)
    preflight.readable_file(trips, "trips")
    preflight.readable_file(stops, "stops")
    preflight.check_parquet_types(trips, "trips", TRIP_COLUMN_TYPES)  # first: pyarrow alone, before pandas
    preflight.check_parquet_types(stops, "stops", STOP_COLUMN_TYPES)
    from transit_release.inputs.screening import PERIOD_REQUIRED, parse_period

    period = None
    if args.period_start is None and args.period_end is None:
        if not args.dry_run:
            raise InputDataError(PERIOD_REQUIRED)
    else:
        period = parse_period(args.period_start, args.period_end)
    if args.release_id is not None:
        check_release_id(args.release_id)
    existing = check_home_state(home, args)
    preflight.check_trip_inputs(trips, stops)
    stop_table = preflight.check_stop_table(stops)
    from transit_release.config import load_release_config, release_unit

    cfg = load_release_config(args.config, release_unit(args.config, args.unit)).with_overrides(
        epsilons=args.epsilons, delta=args.delta, quarantine_limit=args.quarantine_limit)
    if period is not None:
        check_published_before(args, trips, stops, home, period, cfg, population)
        check_release_budget(args, home, period, cfg, population, policy, existing)
        check_period_fit(args, trips, stop_table, home, period, cfg)


class AlreadyPublished(Exception):
    """The release this invocation asks for is published already, from the same input and parameters: nothing is
    to be drawn or spent, and no flow need run. ``summary`` is what the command prints."""

    def __init__(self, summary: dict):
        super().__init__(summary["release_id"])
        self.summary = summary


def check_published_before(args, trips: str, stops: str, home: Home, period, cfg, population: str) -> None:
    """Before Prefect, as the flow would after it (:func:`tasks.budget.resolve_release`): an Opal release whose id
    (or an earlier default id of the same release) this home's ledger records as published, from the same input
    files (home-keyed fingerprint) and parameters, raises :class:`AlreadyPublished` (with the flow's note when
    ``population`` is not the one it was published about); an id published or present from other input, or charged
    by a run that is no longer alive and not published, is refused
    (:class:`~transit_release.errors.ReleaseExistsError`, the flow's own message). A release a live run holds
    (:mod:`transit_release.runtime.release_lock`) is left to the flow, which waits for that run. Reads the ledger read only,
    and hashes the inputs only when the id is published."""
    if not home.ledger.exists():
        return
    from transit_release.accounting.ledger import Ledger
    from transit_release.inputs import tables as io
    from transit_release.runtime import outcome
    from transit_release.accounting.events import population_ignored
    from transit_release.files.publish import MANIFEST, resolve_release_id
    from transit_release.inputs.tables import recognising_earlier_fingerprints
    from transit_release.integrity.recovery import refuse_a_dead_runs_charge
    from transit_release.releases import opal
    from transit_release.runtime.release_lock import is_held

    rid = args.release_id or opal.release_id_for(period.start, period.end, cfg.unit_of_privacy)
    earlier = [] if args.release_id else list(opal.earlier_release_ids(period.start, period.end))
    ledger = Ledger(home.ledger, read_only=True)
    published_ids = set(ledger.published())
    if not ({rid, *earlier} & published_ids) and not home.release_dir(rid).exists():
        if not args.dry_run and not is_held(home.root, rid):  # charged by a run that is dead: refused at once
            refuse_a_dead_runs_charge(ledger, rid)
        return
    inputs = [str(Path(trips).resolve()), str(Path(stops).resolve())]
    fingerprint = io.fingerprint(*inputs, key=home.fingerprint_key())
    same = recognising_earlier_fingerprints(opal.same_release(cfg, fingerprint), fingerprint, inputs,
                                            home.fingerprint_key)
    rid, published = resolve_release_id(home, ledger, rid, same, earlier)
    if published:
        import json

        manifest = json.loads((home.release_dir(rid) / MANIFEST).read_text(encoding="utf-8"))
        summary = outcome.release_summary(home, manifest, "already published: nothing drawn or spent")
        note = population_ignored(manifest, rid, population)
        if note:
            summary = {**summary, "warnings": [*summary.get("warnings", []), note]}
        raise AlreadyPublished(summary)


def check_period_fit(args, trips: str, stop_table, home: Home, period, cfg) -> None:
    """A declared period the trips do not fit (a data-dependent refusal: ``outside-period``, ``empty-day``) refused
    before Prefect, as the flow's first gate would refuse it (the same message and exit code, the quarantined rows
    kept the same way), when that is cheap: a CSV file of one batch (the flow's early gate decides those before
    any partition) whose tap-on dates, read alone, say that the period may not fit. Anything else — a file that
    fits, a larger or Parquet file, a dry run, a problem of the file's contract — is left to the flow, which
    checks everything again; nothing here decides what is published."""
    import shutil
    import uuid
    from functools import partial

    from transit_release.accounting.ledger import Ledger
    from transit_release.inputs import screening, streaming
    from transit_release.releases import opal

    if args.dry_run or not streaming.period_may_not_fit(trips, period, cfg.quality.quarantine_limit):
        return
    rid = args.release_id or opal.release_id_for(period.start, period.end, cfg.unit_of_privacy)
    ids = {rid, *([] if args.release_id else opal.earlier_release_ids(period.start, period.end))}
    if any(home.release_dir(i).exists() for i in ids) or (
            home.ledger.exists() and ids & {x.release_id for x in Ledger(home.ledger, read_only=True).entries()}):
        return  # an id the home knows: the flow resolves it first
    from schemas import TripsFile
    from schemas.validation import check

    home.prepare()  # what the flow's refusal leaves too: private/ (the quarantine) and the fingerprint key
    scratch = home.private / f"period-check-{uuid.uuid4().hex}"
    try:
        try:
            streamed = streaming.stream_trips(trips, stop_table, period, cfg.quality, cfg.modes, scratch / "spill",
                                              scratch / "quarantine", partial(check, TripsFile))
        except InputDataError:
            return  # the file's contract: the flow's own refusal, with its own records
        if not streamed.tally.complete:
            return
        figures = streamed.tally.figures()
        try:
            screening.check_gate(figures, cfg.quality)
            return
        except InputDataError as exc:
            refused = exc
        where = streaming.gather_quarantine(home, rid, scratch / "quarantine") if figures.quarantined_rows else None
        raise streaming.refused_file(refused, trips, where) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def check_passenger_release_args(args, home: Home | None = None) -> tuple:
    """What every passenger-level kind checks first, without Prefect: the policy and the population it must
    declare (before anything is read), the declared period, the id; returns ``(period, population, policy)``."""
    from transit_release.inputs.screening import parse_period

    policy, population = check_population(args, home or Home.at(args.home, getattr(args, "ledger", None)))
    period = parse_period(args.period_start, args.period_end)
    if args.release_id is not None:
        check_release_id(args.release_id)
    return period, population, policy


def validated_stops(args):
    """(stop table, its name in messages) of a release built from taps, after the trips and stops files' checks."""
    from transit_release.cli import preflight

    preflight.check_trip_inputs(args.trips, args.stops)
    return preflight.check_stop_table(args.stops), f"stops file {Path(args.stops).name}"


def stop_table_universe(args):
    """The universe of a release from tap data: the stop table's stations of ``--mode`` (files checked first)."""
    from transit_release.inputs.universe import from_stop_table

    stops, name = validated_stops(args)
    return from_stop_table(stops, args.mode, name)


def check_passenger_budget(args, home: Home, declared: tuple, plan, default_id, earlier_ids=None) -> None:
    """A passenger-level release's one spend under the policy: ``declared`` is what
    :func:`check_passenger_release_args` returned, ``plan(release_id, period, population)`` makes the spend,
    ``default_id(period)`` names the release when ``--release-id`` is not given and ``earlier_ids(period)`` the ids
    a former default gave it (published from the same input, the flow finds it already published)."""
    period, population, policy = declared
    rid = args.release_id or default_id(period)
    earlier = () if args.release_id or earlier_ids is None else tuple(earlier_ids(period))
    check_budget(home, args, [plan(rid, period, population)], policy, earlier)


def check_sequence_args(args, home: Home | None = None) -> None:
    """A ``sequences`` invocation: the universe (a locations or taxonomy file, or the stop table's stations), then
    the mechanism's flags, an impossible ε or a tree too large."""
    from transit_release.cli import preflight
    from transit_release.inputs.universe import load_universe
    from transit_release.releases.sequences import budget_for

    declared = check_passenger_release_args(args, home)
    if args.trips:
        if not args.stops or args.locations or args.taxonomy:
            raise InputDataError("with --trips give --stops (its stations are the universe), not --locations or "
                                 "--taxonomy")
        universe = stop_table_universe(args)
    else:
        preflight.readable_file(args.input, "sequence")
        universe = load_universe(args.locations, args.taxonomy)
    budget, _ = budget_for(args.mechanism, universe, args.epsilon, args.height, args.variant, args.fanout, args.lmax,
                           args.nmax)
    if home is not None:
        from transit_release.releases import sequences

        check_passenger_budget(args, home, declared, lambda rid, period, pop: sequences.plan_spend(
            rid, period, budget, "not-read-yet", "", pop), lambda period: sequences.default_release_id(
            sequences.resolve_mechanism(args.mechanism, args.height, args.variant, args.fanout), period))


def check_trajectory_args(args, home: Home | None = None) -> None:
    """A ``trajectories`` invocation: the week, the universe, then a configuration the public universe cannot carry
    (flags, the ε_ng guard, scales, sizes)."""
    from transit_release.cli import preflight
    from transit_release.inputs.universe import load_universe, read_taxonomy_file, with_taxonomy
    from transit_release.releases.trajectories import check_period, trajectory_setup

    declared = check_passenger_release_args(args, home)
    check_period(declared[0])
    if args.trips:
        if not args.stops or args.locations:
            raise InputDataError("with --trips give --stops (its stations are the universe), not --locations")
        universe = stop_table_universe(args)
        if args.location_taxonomy:
            universe = with_taxonomy(universe, read_taxonomy_file(args.location_taxonomy))
    else:
        preflight.readable_file(args.input, "trajectory")
        universe = load_universe(args.locations, args.location_taxonomy, "--location-taxonomy")
    setup = trajectory_setup(universe, args.epsilon, args.height, mechanism=args.mechanism, budget=args.budget,
                             location_fanout=args.location_fanout,
                             location_taxonomy_height=args.location_taxonomy_height, time_fanout=args.time_fanout,
                             time_taxonomy_height=args.time_taxonomy_height, rule=args.thresholds,
                             max_gram=args.nmax)
    if home is not None:
        from transit_release.releases import trajectories

        resolved = trajectories.resolve_mechanism(args.mechanism, args.budget, args.location_fanout,
                                                  args.location_taxonomy_height, args.time_fanout,
                                                  args.time_taxonomy_height, args.thresholds)
        former = trajectories.former_default_setup(universe, args.epsilon, args.height) if (
            args.mechanism is None and resolved == trajectories.DEFAULT_MECHANISM) else None
        check_passenger_budget(args, home, declared, lambda rid, period, pop: trajectories.plan_spend(
            rid, period, setup, "not-read-yet", "", pop), lambda period: trajectories.default_release_id(
            period, resolved), lambda period: trajectories.earlier_release_ids(period, former))


def check_set_args(args, home: Home | None = None) -> None:
    """A ``sets`` invocation: the universe (a locations file, or the stop table's locations), then a bad ε or an
    exploding partitioning."""
    from transit_release.cli import preflight
    from transit_release.inputs.universe import from_stop_locations, read_locations_file
    from transit_release.releases.sets import set_setup

    declared = check_passenger_release_args(args, home)
    if args.trips:
        if not args.stops or args.locations:
            raise InputDataError("with --trips give --stops (its locations are the universe), not --locations")
        stops, name = validated_stops(args)
        universe = from_stop_locations(stops, (args.mode,) if args.mode else None, name)
    else:
        if args.stops or args.mode:
            raise InputDataError("--stops and --mode go with --trips; with --input give --locations")
        preflight.readable_file(args.input, "set")
        if args.locations is None:
            raise InputDataError("give the public location universe: --locations FILE (one location id per line); "
                                 "the universe is never read off the data")
        universe = read_locations_file(args.locations)
    setup = set_setup(universe, args.epsilon, args.mechanism, args.fanout)
    if home is not None:
        from transit_release.releases import sets

        check_passenger_budget(args, home, declared, lambda rid, period, pop: sets.plan_spend(
            rid, period, setup.budget, "not-read-yet", "", pop),
            lambda period: sets.default_release_id(period, setup.mechanism),
            lambda period: sets.earlier_release_ids(period, setup))


def warn_if_publisher_unset(home: Home) -> None:
    """A release names its publisher on its landing page and in the catalogue: say so when ``open-data.yaml`` does
    not name one (the release goes on under "Unnamed publisher"; a malformed file is refused later, as before)."""
    import sys

    from transit_release.errors import ConfigError
    from transit_release.opendata import settings

    try:
        unset = settings.load(home.root).publisher_unset
    except ConfigError:
        return
    if unset:
        print(f"transit-release: warning: no publisher is set in {home.root / settings.SETTINGS_FILE}: the release's "
              "landing page, data package and the catalogue will name \"Unnamed publisher\" (set publisher: name: "
              "... there before publishing for real)", file=sys.stderr)
