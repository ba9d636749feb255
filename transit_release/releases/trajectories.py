"""The trajectory release as plain functions: setup and budget, spend, sanitize, evaluate, public outputs.

Two mechanisms (:data:`MECHANISMS`), one kind, one privacy spend per release,
charged before any noise is drawn:

* ``safepath``: the noisy (location, time) prefix tree
  (:mod:`transit_release.mechanisms.safepath`) with the paper's budget split
  over two taxonomies (``--budget paper``, a :class:`SafePathEvent`) or one
  test of the (station, hour) pair per level (``--budget joint``, a
  :class:`SafePathJointEvent`);
* ``markov``: the factored Markov model (days, stations, hours of the day;
  :mod:`transit_release.mechanisms.trajectory_markov`, a
  :class:`TrajectoryMarkovPartsEvent`), whose trajectories are drawn from three
  noisy n-gram and histogram releases.

Everything public — taxonomies, budget splits, thresholds, guards and size
refusals — is computed from the public universe (its size and, from a
taxonomy file, its groups and lines), the 168 hours of the week and the
parameters, never from the trajectories.

Period rule. A trajectory's times are hours of the week (0–167 from Monday
00:00, local wall-clock time), so a release covers exactly one calendar week,
Monday to Sunday, declared by the publisher (:func:`check_period`): the hour
universe is then exactly the period's hours, and each passenger's record is
their taps of that week. A month would need hours of the month (a 744-hour
universe and taxonomy: another budget split) or would fold four weeks onto one
hour-of-week axis, where a passenger's hours go back at each Monday and the
record stops meaning "one passenger's trajectory". Hence weekly releases (and a
weekly deployment); weeks are disjoint periods, so they compose in parallel.

Utility figures compare with the raw trajectories and are internal.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import pandas as pd

from transit_release.accounting.events import (DEFAULT_POPULATION, SafePathEvent, SafePathJointEvent,
                                               TrajectoryMarkovPartsEvent, markov_sensitivity, period_label)
from transit_release.errors import InputDataError
from transit_release.inputs.universe import LocationUniverse
from transit_release.mechanisms import safepath, trajectory_markov
from transit_release.mechanisms.safepath import (HOURS_PER_WEEK, Hierarchy, JointBudget, SafePathBudget, Thresholds,
                                                 Trajectories, check_joint_size, check_tree_size, delta_slack,
                                                 expand_release, joint_delta_slack, thresholds_for)
from transit_release.files.publish import CSV_NEUTRALISATION
from transit_release.mechanisms.trajectory_markov import MarkovBudget
from transit_release.noise import NoiseSource
from transit_release.opendata.titles import card_heading
from transit_release.releases.sequences import cumulative_text
from transit_release.utility import trajectories as utility

KIND = "trajectories"
UNIT = "passenger-trajectory"
NEIGHBOURING = "add-remove-one"
MECHANISMS = ("safepath", "markov")
#: the recommended mechanism (docs/trajectories.md): what a release without --mechanism (and without SafePath's own
#: parameters) uses; SafePath was the former default
DEFAULT_MECHANISM = "markov"
#: the longest released trajectory (taps) when --height is not given: the height the docs measured both at
DEFAULT_HEIGHT = 6
#: SafePath's budget rules: the paper's split over two taxonomies, or one test of the pair per level
BUDGET_RULES = safepath.BUDGET_RULES
DEFAULT_BUDGET = "paper"
#: The paper's taxonomies when none is given: 2 children per node, height 6 (its experiments' default).
DEFAULT_FANOUT = 2
DEFAULT_TAXONOMY_HEIGHT = 6
TIME_RULE = "monotone"  # children of a node at hour t are at hours ≥ t (the readers quarantine decreasing hours)
RELEASE_FORM = "terminating"  # each node releases the trajectories that end there
HOUR_UNIVERSE = {"hours": HOURS_PER_WEEK, "first": "Monday 00:00 of the period (local time)", "bin": "1 hour"}
TOP_K = (100, 200, 300)
#: the frequent queries the report and the headline figures follow: the top-k points and ordered pairs
FREQUENT_K = 100


@dataclass(frozen=True)
class SafePathSetup:
    """Everything public about one SafePath release, fixed before the data is read."""

    budget: SafePathBudget
    locations: Hierarchy
    hours: Hierarchy
    thresholds: Thresholds
    location_taxonomy: str  # "taxonomy file (groups)", "taxonomy file (groups, lines)" or "fan-out F"
    location_fanout: int | None
    time_fanout: int
    mechanism = "safepath"
    budget_rule = "paper"

    @property
    def rule(self) -> str:
        return self.thresholds.rule


@dataclass(frozen=True)
class JointSetup:
    """A SafePath release with the joint budget rule (no taxonomies), fixed before the data is read."""

    budget: JointBudget
    mechanism = "safepath"
    budget_rule = "joint"

    @property
    def rule(self) -> str:
        return "joint"


@dataclass(frozen=True)
class MarkovSetup:
    """A factored Markov release, fixed before the data is read."""

    budget: MarkovBudget
    mechanism = "markov"
    budget_rule = ""

    @property
    def rule(self) -> str:
        return ""


Setup = SafePathSetup | JointSetup | MarkovSetup


def check_period(period) -> None:
    """A trajectory release covers one week, Monday to Sunday (hours of the week: module docstring)."""
    if period.start.weekday() != 0 or period.end != period.start + timedelta(days=6):
        raise InputDataError(
            f"a trajectory release covers one calendar week, Monday to Sunday (its times are hours of the week, "
            f"0–167 from Monday 00:00); the declared period {period_label(period.start, period.end)} is not one: "
            "declare --period-start on a Monday and --period-end on the Sunday after it")


def safepath_setup(universe: LocationUniverse, epsilon: float, height: int, *, location_fanout: int | None = None,
                   location_taxonomy_height: int | None = None, time_fanout: int | None = None,
                   time_taxonomy_height: int | None = None, rule: str = safepath.DEFAULT_RULE) -> SafePathSetup:
    """Taxonomies, budget, thresholds and size check from public inputs only; refuses before any data is read.

    The ε_ng guard (``H(H+1) < |U|``), the samplers' scale range and the tree-size estimate are
    refused here with an :class:`InputDataError` naming the universe and both taxonomy heights.
    """
    if rule not in safepath.THRESHOLD_RULES:
        raise InputDataError(f"the threshold rule must be one of {', '.join(safepath.THRESHOLD_RULES)}. "
                             f"Found {rule!r}.")
    levels = universe.taxonomy_levels
    loc_height = len(levels) if levels else (DEFAULT_TAXONOMY_HEIGHT if location_taxonomy_height is None
                                             else location_taxonomy_height)
    time_fanout = DEFAULT_FANOUT if time_fanout is None else time_fanout
    time_height = DEFAULT_TAXONOMY_HEIGHT if time_taxonomy_height is None else time_taxonomy_height
    where = (f"SafePath over {universe.source} ({len(universe)} locations, location taxonomy of height "
             f"{loc_height}) and the {HOURS_PER_WEEK} hours of the week (time taxonomy of height {time_height})")
    locations, loc_source = location_hierarchy(universe, location_fanout, location_taxonomy_height)
    try:
        hours = Hierarchy.from_fanout(HOURS_PER_WEEK, time_fanout, time_height, "time")
        budget = SafePathBudget.of(epsilon, height, len(universe), locations.height, hours.height, HOURS_PER_WEEK)
        thresholds = thresholds_for(budget, rule, locations, hours)
        check_tree_size(budget, thresholds)
    except ValueError as exc:  # TaxonomyBudgetError, NoiseParameterError, TreeTooLargeError, a bad fan-out
        raise InputDataError(f"{where}: {exc}") from None
    return SafePathSetup(budget, locations, hours, thresholds, loc_source,
                         None if levels else (DEFAULT_FANOUT if location_fanout is None else location_fanout),
                         time_fanout)


#: SafePath's own parameters: given without --mechanism, they keep SafePath (the former default)
SAFEPATH_FLAGS = ("--budget", "--location-fanout", "--location-taxonomy-height", "--time-fanout",
                  "--time-taxonomy-height", "--thresholds")


def resolve_mechanism(mechanism: str | None, budget: str | None = None, location_fanout: int | None = None,
                      location_taxonomy_height: int | None = None, time_fanout: int | None = None,
                      time_taxonomy_height: int | None = None, rule: str | None = None) -> str:
    """The mechanism of a release: ``mechanism`` if given; else SafePath when one of its own parameters
    (:data:`SAFEPATH_FLAGS`) is given — a command or deployment written for SafePath, the former default, keeps
    its mechanism and its release id —; else :data:`DEFAULT_MECHANISM`."""
    if mechanism is not None:
        return mechanism
    own = (budget, location_fanout, location_taxonomy_height, time_fanout, time_taxonomy_height, rule)
    return "safepath" if any(v is not None for v in own) else DEFAULT_MECHANISM


def former_default_setup(universe: LocationUniverse, epsilon: float, height: int | None) -> SafePathSetup | None:
    """The setup the former default (SafePath, the paper's budget, default taxonomies and thresholds) had for a
    command with neither ``--mechanism`` nor SafePath's flags; None where that default could not run (its refusal
    then was the command's)."""
    try:
        return safepath_setup(universe, epsilon, DEFAULT_HEIGHT if height is None else height)
    except InputDataError:
        return None


def earlier_release_ids(period, former: SafePathSetup | None) -> tuple[str, ...]:
    """The id the former default gave this release (published from the same input and parameters, it is this
    release, already published)."""
    return (default_release_id(period, "safepath"),) if former is not None else ()


def trajectory_setup(universe: LocationUniverse, epsilon: float, height: int | None = None, *,
                     mechanism: str | None = None, budget: str | None = None, location_fanout: int | None = None,
                     location_taxonomy_height: int | None = None, time_fanout: int | None = None,
                     time_taxonomy_height: int | None = None, rule: str | None = None,
                     max_gram: int | None = None) -> Setup:
    """The public setup of ``mechanism`` (:func:`resolve_mechanism` when None; SafePath's ``budget`` rule, default
    the paper's) from public inputs only; refuses, before any data is read, a flag the mechanism does not take, an
    impossible ε and a tree or model too large. ``height`` None: :data:`DEFAULT_HEIGHT`."""
    mechanism = resolve_mechanism(mechanism, budget, location_fanout, location_taxonomy_height, time_fanout,
                                  time_taxonomy_height, rule)
    height = DEFAULT_HEIGHT if height is None else height
    if mechanism == "markov" and budget is not None:
        raise InputDataError("--budget (SafePath's budget rule) goes with --mechanism safepath, not with markov")
    budget = DEFAULT_BUDGET if budget is None else budget
    if mechanism not in MECHANISMS:
        raise InputDataError(f"the trajectory mechanism must be one of {', '.join(MECHANISMS)}. Found {mechanism!r}.")
    taxonomy_flags = {"--location-fanout": location_fanout, "--location-taxonomy-height": location_taxonomy_height,
                      "--time-fanout": time_fanout, "--time-taxonomy-height": time_taxonomy_height,
                      "--thresholds": rule}
    given = [flag for flag, value in taxonomy_flags.items() if value is not None]
    if mechanism == "markov" or budget == "joint":
        if given:
            what = "the markov mechanism" if mechanism == "markov" else "SafePath's joint budget"
            raise InputDataError(f"{', '.join(given)} go(es) with SafePath's paper budget (taxonomies), not with {what}")
    if mechanism == "safepath" and max_gram is not None:
        raise InputDataError("--nmax goes with --mechanism markov")
    if mechanism == "safepath" and budget not in BUDGET_RULES:
        raise InputDataError(f"the budget rule must be one of {', '.join(BUDGET_RULES)}. Found {budget!r}.")
    if mechanism == "safepath" and budget == "paper":
        return safepath_setup(universe, epsilon, height, location_fanout=location_fanout,
                              location_taxonomy_height=location_taxonomy_height, time_fanout=time_fanout,
                              time_taxonomy_height=time_taxonomy_height, rule=rule or safepath.DEFAULT_RULE)
    where = f"{'SafePath (joint budget)' if mechanism == 'safepath' else 'the trajectory Markov model'} over " \
            f"{universe.source} ({len(universe)} locations) and the {HOURS_PER_WEEK} hours of the week"
    try:
        if mechanism == "safepath":
            joint = JointBudget.of(epsilon, height, len(universe), HOURS_PER_WEEK)
            check_joint_size(joint)
            return JointSetup(joint)
        return MarkovSetup(MarkovBudget.of(epsilon, height, len(universe),
                                           trajectory_markov.DEFAULT_MAX_GRAM if max_gram is None else max_gram))
    except ValueError as exc:  # NoiseParameterError, TreeTooLargeError, MarkovParameterError
        raise InputDataError(f"{where}: {exc}") from None


def location_hierarchy(universe: LocationUniverse, fanout: int | None, height: int | None) -> tuple[Hierarchy, str]:
    """The location taxonomy: the universe's own levels (a taxonomy file) or a fan-out tree over its sorted ids."""
    levels = universe.taxonomy_levels
    if levels and fanout is not None:
        raise InputDataError("give the location taxonomy once: a taxonomy file (--location-taxonomy) or "
                             "--location-fanout F, not both")
    if levels:
        if height is not None:
            raise InputDataError("the location taxonomy file fixes its own height (groups, and lines above them); "
                                 "--location-taxonomy-height goes with --location-fanout only")
        names = "groups, lines" if universe.lines is not None else "groups"
        return Hierarchy.from_labels(levels, "location", len(universe)), f"taxonomy file ({names})"
    fanout = DEFAULT_FANOUT if fanout is None else fanout
    height = DEFAULT_TAXONOMY_HEIGHT if height is None else height
    try:
        return Hierarchy.from_fanout(len(universe), fanout, height, "location"), f"fan-out {fanout}"
    except ValueError as exc:
        raise InputDataError(f"location taxonomy of {universe.source}: {exc}") from None


def plan_spend(release_id: str, period, setup: Setup, fingerprint: str, code_version: str,
               population: str = DEFAULT_POPULATION):
    """The one event of a trajectory release, about ``population``; ``delta`` is the samplers' exact TV slack."""
    common = dict(release_id=release_id, period_start=period.start.isoformat(), period_end=period.end.isoformat(),
                  sensitivity=1, unit_of_privacy=UNIT, neighbouring=NEIGHBOURING, input_fingerprint=fingerprint,
                  code_version=code_version, population=population)
    if isinstance(setup, JointSetup):
        b = setup.budget
        return SafePathJointEvent(epsilon=float(b.epsilon), delta=joint_delta_slack(b), height=b.height,
                                  locations=b.n_locations, hours=b.n_hours, level_epsilon=float(b.level_epsilon),
                                  threshold=b.threshold, time_rule=TIME_RULE, release_form=RELEASE_FORM, **common)
    if isinstance(setup, MarkovSetup):
        b = setup.budget
        return TrajectoryMarkovPartsEvent(
            epsilon=float(b.epsilon), delta=trajectory_markov.delta_slack(b), height=b.height, max_gram=b.max_gram,
            locations=b.n_locations, epsilon_days=float(b.day_epsilon), epsilon_stations=float(b.station_epsilon),
            epsilon_hours=float(b.hour_epsilon), **{**common, "sensitivity": markov_sensitivity(b.height)})
    b = setup.budget
    return SafePathEvent(release_id=release_id, period_start=period.start.isoformat(),
                         period_end=period.end.isoformat(), epsilon=float(b.epsilon), delta=delta_slack(b),
                         height=b.height, locations=b.location.size, hours=b.time.size,
                         location_taxonomy_height=b.location.taxonomy_height,
                         time_taxonomy_height=b.time.taxonomy_height, thresholds=setup.rule, time_rule=TIME_RULE,
                         release_form=RELEASE_FORM, sensitivity=1, unit_of_privacy=UNIT, neighbouring=NEIGHBOURING,
                         input_fingerprint=fingerprint, code_version=code_version, population=population)


def default_release_id(period, mechanism: str = DEFAULT_MECHANISM) -> str:
    return f"trajectories-{mechanism}-{period.start:%Y%m%d}-{period.end:%Y%m%d}"


def sanitize(trajs: Trajectories, setup: Setup, noise: NoiseSource, release_id: str) -> tuple[int, list]:
    """``(size, release)``: the size of the noisy tree or models (nodes; internal) and the released
    ``(trajectory, copies)``, sorted by trajectory."""
    generator = noise.stream(KIND, release_id)
    if isinstance(setup, MarkovSetup):
        out = trajectory_markov.sanitize_markov(trajs, setup.budget, generator)
        return out.stats["station_grams"] + out.stats["hour_grams"], out.released
    if isinstance(setup, JointSetup):
        tree, release = safepath.sanitize_joint(trajs, setup.budget, generator, monotone=TIME_RULE == "monotone",
                                                release=RELEASE_FORM)
        return tree.n_nodes, release
    tree, release = safepath.sanitize_trajectories(trajs, setup.budget, setup.locations, setup.hours, generator,
                                                   rule=setup.rule, monotone=TIME_RULE == "monotone",
                                                   release=RELEASE_FORM)
    return tree.n_nodes, release


def query_length(height: int) -> int:
    """The longest count query: ``h/3`` pairs, as in the paper's Figure 5 (at least 1)."""
    return max(1, height // 3)


def evaluate(trajs: Trajectories, release: list, height: int, n_queries: int, top_k: tuple[int, ...] = TOP_K,
             n_nodes: int | None = None, figures: dict | None = None, frequent_k: int = FREQUENT_K) -> dict:
    """Internal utility figures, with the metric names every release kind shares.

    Against the trajectories as the release can hold them (cut at ``height``):
    ``points.top{k}.relative_error`` and ``ordered_pairs.top{k}.relative_error`` (mean relative error of the
    counts of the ``k`` most frequent points and ordered pairs of points), ``lengths.total_variation``
    (between the length distributions) and ``records.share_released`` (share of the trajectories whose exact
    trajectory is released). ``figures``, if given, receives the arrays the report plots.

    * ``count_query.relative_error.max_q{k}``: the paper's workload (pairs uniform over
      locations × hours, hours sorted), mean relative error of the queries of at most ``k`` pairs,
      ``k = 1 .. h/3``; ``nonempty_query.relative_error.max_q{k}``: the same over random
      sub-trajectories of the raw data (most uniform queries of two pairs or more are empty);
    * ``patterns.top{k}.{tp,fp,fd}``: the top-k frequent sequential (station, hour) patterns of
      size > 1, against the trajectories cut at ``height`` (a release of height ``h`` holds no later
      point, so the raw data's patterns of later taps would count against every mechanism alike);
      ``pairs.top{k}.{tp,fp}``: the top-k (station, hour) pairs, against the raw trajectories.
    """
    out = {"trajectories.input": float(len(trajs)),
           "trajectories.released": float(sum(c for _, c in release)),
           "trajectories.distinct_released": float(len(release))}
    if n_nodes is not None:
        out["tree.nodes"] = float(n_nodes)
    cut = trajs.truncated(height)
    released_index = utility.release_index(release, trajs.n_locations, trajs.n_hours)
    if frequent_k and len(trajs):
        frequent = utility.frequent_queries(cut, released_index, frequent_k)
        for name in ("points", "ordered_pairs"):
            true, got = frequent[f"{name}.true"], frequent[f"{name}.released"]
            if true.size:
                out[f"{name}.top{frequent_k}.relative_error"] = float(
                    utility.relative_errors(true, got, len(trajs)).mean())
        if figures is not None:
            figures.update({f"top_{k}": v.tolist() for k, v in frequent.items()})
    true_len = utility.length_shares(cut.lengths, height=height)
    got_len = utility.length_shares(np.array([len(t) for t, _ in release], dtype=np.int64),
                                    np.array([c for _, c in release], dtype=float), height) if release else \
        np.zeros(height + 1)
    out["lengths.total_variation"] = utility.total_variation(true_len, got_len)
    out["records.share_released"] = utility.share_released(cut, release)
    if figures is not None:
        figures.update({"lengths.true": true_len.tolist(), "lengths.released": got_len.tolist()})
    if n_queries:
        released = released_index
        original = utility.TrajectoryIndex(trajs)
        q = query_length(height)
        for name, workload in (("count_query", utility.uniform_workload(trajs.n_locations, trajs.n_hours, q,
                                                                        n_queries, seed=0)),
                               ("nonempty_query", utility.nonempty_workload(trajs, q, n_queries, seed=0))):
            errors = {k: utility.relative_errors(original.counts(qs), released.counts(qs), len(trajs))
                      for k, qs in workload.by_length.items()}
            for k in range(1, q + 1):
                upto = [e for length, e in errors.items() if length <= k]
                if upto:
                    out[f"{name}.relative_error.max_q{k}"] = float(np.concatenate(upto).mean())
    if top_k:
        expanded = expand_release(release, trajs.n_locations, trajs.n_hours)
        out.update({k: float(v) for k, v in utility.trajectory_pattern_utility(cut, expanded, tuple(top_k)).items()})
        out.update({k: float(v) for k, v in utility.top_pair_utility(trajs, release, tuple(top_k)).items()})
    return out


def trajectory_header(release_id: str, setup: Setup) -> str:
    """The first line of ``trajectories.txt``: what its lines are. A Markov release's lines are synthetic, drawn from
    its noisy models; a SafePath release's are the noisy tree's trajectories, one line per released copy."""
    if isinstance(setup, MarkovSetup):
        return (f"{release_id}: synthetic trajectories (station@hour of the week), one per line, drawn from noisy "
                "models of the days, stations and hours of the day: no line is a real passenger's")
    return f"{release_id}: one passenger trajectory per line (station@hour of the week)"


def trajectory_text(release: list, universe: LocationUniverse, header: str) -> str:
    from transit_release.inputs.trajectories import format_trajectories

    return format_trajectories(release, universe.ids, header=header)


def trajectory_table(release: list, universe: LocationUniverse) -> pd.DataFrame:
    """``trajectory,count``: each distinct released trajectory once (``station@hour`` tokens), sorted."""
    counts: Counter = Counter()
    for traj, copies in release:
        if copies > 0:
            counts[" ".join(f"{universe.ids[loc]}@{hour}" for loc, hour in traj)] += int(copies)
    rows = sorted(counts.items())
    return pd.DataFrame({"trajectory": [r[0] for r in rows], "count": [r[1] for r in rows]}).astype(
        {"trajectory": str, "count": "int64"})


def _taxonomy(setup: SafePathSetup, which: str) -> dict:
    sub = setup.budget.location if which == "location" else setup.budget.time
    tax = setup.locations if which == "location" else setup.hours
    return {"source": setup.location_taxonomy if which == "location" else f"fan-out {setup.time_fanout}",
            "height": sub.taxonomy_height,
            "fanout": setup.location_fanout if which == "location" else setup.time_fanout,
            "nodes_per_depth": [tax.n_nodes(d) for d in range(1, tax.height + 1)],
            "epsilon_per_step": [float(e) for e in sub.per_step],
            "thresholds": list(setup.thresholds.location if which == "location" else setup.thresholds.time)}


_COMPOSITION = ("one spend per release; releases of disjoint declared periods (weeks) compose in parallel, "
                "releases whose periods overlap add up on their common days")


def _mechanism_privacy(setup: Setup) -> dict:
    """The manifest's description of the mechanism and its public parameters."""
    b = setup.budget
    if isinstance(setup, MarkovSetup):
        return {"mechanism": "factored Markov model: a noisy histogram of the day sequences and variable-length "
                             "n-gram models (Chen, Ács & Castelluccia, CCS 2012) of the stations and of the hours of "
                             "the day, trajectories drawn from them",
                "mechanism_id": "trajectory-markov", "height": b.height, "max_gram": b.max_gram,
                "epsilon_days": float(b.day_epsilon), "epsilon_stations": float(b.station_epsilon),
                "epsilon_hours": float(b.hour_epsilon), "day_cells": b.day_cells, "day_threshold": b.day_threshold,
                "time_rule": TIME_RULE}
    safepath_name = "SafePath noisy location-time prefix tree (Al-Hussaeni, Fung et al., Computer Networks 2018)"
    if isinstance(setup, JointSetup):
        return {"mechanism": f"{safepath_name}, one test of the (station, hour) pair per level",
                "mechanism_id": "safepath", "budget_rule": "joint", "height": b.height,
                "level_epsilon": float(b.level_epsilon), "candidates_per_node": b.candidates,
                "pair_threshold": b.threshold, "threshold_rule": "joint", "time_rule": TIME_RULE,
                "release_form": RELEASE_FORM}
    return {"mechanism": safepath_name, "mechanism_id": "safepath", "budget_rule": "paper", "height": b.height,
            "level_epsilon": float(b.level_epsilon), "sublevel_epsilon": float(b.sublevel_epsilon),
            "location_taxonomy": _taxonomy(setup, "location"), "time_taxonomy": _taxonomy(setup, "time"),
            "threshold_rule": setup.rule, "time_rule": TIME_RULE, "release_form": RELEASE_FORM}


def build_manifest(release_id: str, period, universe: LocationUniverse, setup: Setup, event,
                   noise_kind: str, code_version: str, created_at: str) -> dict:
    """Everything public about the release except files, ledger head and cumulative loss (added at staging)."""
    return {
        "release_id": release_id,
        "kind": KIND,
        "created_at": created_at,
        "product": "passenger trajectories: (station, hour of the week) sequences, one line per trajectory",
        "period": {"start": period.start.isoformat(), "end": period.end.isoformat()},
        "period_rule": "one calendar week, Monday to Sunday; hours of the week 0–167 from Monday 00:00 (local time)",
        "scope": event.scope,
        "universe": universe.describe(),
        "hour_universe": dict(HOUR_UNIVERSE),
        "privacy": {
            "unit_of_privacy": UNIT,
            "neighbouring_relation": "add or remove one passenger's whole trajectory of the week",
            "epsilon": float(setup.budget.epsilon),
            "delta": event.delta,
            **_mechanism_privacy(setup),
            "composition": _COMPOSITION,
        },
        "noise_source": noise_kind,
        "code_version": code_version,
        "licence": "CC BY 4.0",
    }


_RULES = {"paper": "the paper's rule: 2√2/ε_ℓ for single stations and hours, 4√2/ε_ℓ for groups of them, ε_ℓ "
                   "being the budget of a level",
          "node": "each test's own budget: ln(candidates)/ε of the test"}


def _how_made(p: dict) -> str:
    """The data card's "How they were made" section for the release's mechanism."""
    if p["mechanism_id"] == "trajectory-markov":
        return f"""## How they were made
Each trajectory was split into its stations, its hours of the day and its days. Three noisy
summaries were released: how many passengers travelled on each sequence of days (every possible
sequence counted, with integer noise; rare ones dropped), and models of which station and which
hour of the day follow which, in the variable-length n-gram form (noisy counts of runs of up to
{p['max_gram']} consecutive symbols). The published trajectories were then drawn from these
summaries: as many per sequence of days as its noisy count, their stations and hours from the
models ({p['mechanism']}).

- Trajectories are at most {p['height']} taps long: longer ones are cut.
- Hours never go back within a trajectory.
- **Every line is drawn from the models, not copied from a passenger.** Frequent patterns
  (a station at an hour, two stations one after the other, the same station at the same hour on
  several days) come out at about their true frequency; which station goes with which hour is
  kept only as far as the position in the trajectory carries it.
"""
    if p.get("budget_rule") == "joint":
        tests = (f"at each level every possible next (station, hour) pair of a trajectory was counted once "
                 f"with integer noise and kept when its noisy count reached {p['pair_threshold']}")
    else:
        lt, tt = p["location_taxonomy"], p["time_taxonomy"]
        tests = (f"at each level first the station, then the hour of the next tap. Candidates were tested through "
                 f"two public taxonomies (stations: {lt['source']}, height {lt['height']}; hours: blocks of "
                 f"consecutive hours, {tt['source']}, height {tt['height']}), each count with integer noise, and "
                 f"kept when the noisy count reached its threshold "
                 f"({_RULES.get(p['threshold_rule'], p['threshold_rule'])})")
    return f"""## How they were made
A tree of all trajectories (height {p['height']}) was built level by level: {tests}. Counts were
then made consistent (a trajectory counts at least as many passengers as its continuations), and
each node released as many copies of its trajectory as journeys end there ({p['mechanism']}).

- Trajectories are at most {p['height']} taps long: longer ones are cut.
- Hours never go back within a trajectory (a passenger's taps of one week are in time order).
- Rare trajectories are missing; frequent ones have noisy counts.
- Every line is a shape of the noisy tree, not a record of one person; a few lines may be
  trajectories nobody made (every station and hour had a chance to appear).
"""


def render_datacard(manifest: dict) -> str:
    p = manifest["privacy"]
    period = manifest["period"]
    u = manifest["universe"]
    head = manifest.get("ledger_head", {})
    return f"""{card_heading(manifest)}

The trajectories of the week of {period['start']} (Monday) to {period['end']} (Sunday):
for each passenger, the stations they tapped at and the hour of each tap, in time order,
released under differential privacy. Times are hours of the week, so each release covers
exactly one calendar week, Monday to Sunday; other weeks are other releases.

## Files
- `trajectories.txt`: one trajectory per line, `station@hour` tokens separated by spaces,
  e.g. `12@7 40@17`; the hour is the hour of the week, 0 to 167 counted from Monday 00:00
  local time (7 is Monday 07:00–07:59, 31 is Tuesday 07:00–07:59). Lines starting with `#`
  are comments.
- `trajectories.csv` (and `trajectories.parquet`): `trajectory,count`, each distinct released
  trajectory once with the number of lines it has in `trajectories.txt`. In the CSV, {CSV_NEUTRALISATION}.

The possible stations are the public list of {u['locations']} locations given as input
({u['source']}; SHA-256 `{u['sha256'][:16]}…`), never the stations found in the data; the
possible hours are the 168 hours of the week.

{_how_made(p)}
## Privacy guarantee
{p['epsilon']:g}-differential privacy for one **passenger's whole trajectory over the week**
({p['neighbouring_relation']}; δ = {p['delta']:.2g} covers the exactly computed deviation of the
integer noise sampler). Composition: {p['composition']}.
{cumulative_text(p)}
Noise source: {manifest['noise_source']}. Code version: {manifest['code_version']}.
Ledger head at publication: entry {head.get('seq', '—')}, `{head.get('hash', '—')}`.
"""


def tracking(manifest: dict, metrics: dict, quarantine: dict) -> dict:
    p = manifest["privacy"]
    params = {"epsilon": p["epsilon"], "height": p["height"], "time_rule": p["time_rule"],
              "universe.locations": manifest["universe"]["locations"], "universe.sha256": manifest["universe"]["sha256"],
              "universe.hours": manifest["hour_universe"]["hours"]}
    if p["mechanism_id"] == "trajectory-markov":
        params.update({k: p[k] for k in ("max_gram", "epsilon_days", "epsilon_stations", "epsilon_hours",
                                         "day_threshold")})
    elif p.get("budget_rule") == "joint":
        params.update({"budget_rule": "joint", "threshold_rule": "joint", "pair_threshold": p["pair_threshold"],
                       "level_epsilon": p["level_epsilon"], "release_form": p["release_form"]})
    else:
        lt, tt = p["location_taxonomy"], p["time_taxonomy"]
        params.update({"budget_rule": "paper", "threshold_rule": p["threshold_rule"],
                       "location_taxonomy": lt["source"], "location_taxonomy_height": lt["height"],
                       "location_fanout": lt["fanout"], "time_taxonomy_height": tt["height"],
                       "time_fanout": tt["fanout"], "location_thresholds": "/".join(map(str, lt["thresholds"])),
                       "time_thresholds": "/".join(map(str, tt["thresholds"])), "release_form": p["release_form"]})
    m = {**metrics, **{f"input.quarantined.{k}": v for k, v in quarantine.items()}}
    mechanism = "markov" if p["mechanism_id"] == "trajectory-markov" else "safepath"
    return {"kind": KIND, "mechanism": mechanism, "tags": {"scope": manifest["scope"]}, "params": params,
            "metrics": m, "artifacts": {}}
