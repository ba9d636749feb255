"""One passenger, one loss: what every release of a population costs one person.

A unit of privacy (trip, card, passenger sequence, trajectory or set over a
period) says how one release bounds one person's contribution; the person is
the same in all of them. The accountant's per-unit figures answer "what does
one trip / one card / one period's record lose"; this module answers the
auditor's question, "how much has one passenger lost across everything
published about their population?".

**Who is composed.** Every release names a population (the events'
``population``: :data:`~transit_release.accounting.events.DEFAULT_POPULATION`
unless the release named another). Nothing about a population is inferred from
the data, so every release of a population can touch every one of its people,
and a person's loss composes *every* release of it sequentially: across kinds,
and across periods too (a passenger who travels in two disjoint weeks is in
both weeks' releases; the per-unit accounting's parallel composition over
disjoint periods protects one period's record, not the person).

**What one release costs a person** (its *share*):

* a card-level Opal release: what it costs a card, its ``P`` most expensive
  (mode, day) partitions, each partition's six marginals in sequence (a card
  is a person and keeps at most ``P`` partitions of a release);
* a sequence, trajectory or set release: its ε (ε-DP for one passenger's whole
  record of the period; its δ is the samplers' exact slack);
* a trip-level Opal release: nothing bounds how many trips one passenger has in
  a partition, so it bounds no person's loss: each of a passenger's trips
  costs the release's ε, and the person's loss is **unbounded** for as long as
  it is counted. A passenger with no trips in its period is not touched by it.
  Any kind of spend not known to bound a person (:data:`BOUNDS_A_PERSON`) is
  read the same way: the accountant fails closed.

**Composition.** Basic composition (ε and δ add up; Dwork & Roth, Theorem
3.16) over the shares of the releases that bound a person, and privacy-loss
distributions with Google's ``dp_accounting``
(:mod:`transit_release.accounting.pld`): the card releases' discrete Laplace
parts exactly as for a card, each pure-ε release as the PLD that dominates
every (ε, δ)-DP mechanism (``from_privacy_parameters``), all composed in one
PLD; thresholds' δ of older untruncated card releases are added beside. Where
a trip-level release exists the person's loss is stated as unbounded, with the
composed loss of the other releases beside it: that figure holds for every
passenger who had no trip in the trip-level releases' periods.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date

from transit_release.accounting.accountant import PrivacyLoss, bounded_release_losses, total
from transit_release.accounting.events import DEFAULT_POPULATION, period_label

#: The δ' at which the PLD figure is stated (on data cards, manifests and in the audit); the mechanisms' own δ
#: (thresholds, truncated noises' edges, pure-ε releases' slack) is added to it.
DEFAULT_PLD_DELTA = 1e-7

#: What each recorded kind of spend is, in plain words (the per-kind breakdown of data cards and the audit).
KIND_NAMES = {
    "stability_histogram": "trip-level Opal tap counts",
    "card_stability_histogram": "card-level Opal tap counts",
    "truncated_card_stability_histogram": "card-level Opal tap counts",
    "prefix_tree": "passenger sequences (prefix tree)",
    "ngram": "passenger sequences (n-grams)",
    "safepath": "passenger trajectories (SafePath)",
    "safepath_joint": "passenger trajectories (SafePath, joint budget)",
    "trajectory_markov": "passenger trajectories (Markov model)",
    "trajectory_markov_parts": "passenger trajectories (Markov model)",
    "diffpart": "passenger station sets (DiffPart)",
    "set_histogram": "passenger station sets (set histogram)",
}


#: The kinds of spend that bound one person's contribution (and their unit); any other spend leaves a person's loss
#: unbounded until it is added here with its composition.
BOUNDS_A_PERSON = {
    "card_stability_histogram": "card", "truncated_card_stability_histogram": "card",
    "prefix_tree": "passenger-sequence", "ngram": "passenger-sequence", "safepath": "passenger-trajectory",
    "safepath_joint": "passenger-trajectory", "trajectory_markov": "passenger-trajectory",
    "trajectory_markov_parts": "passenger-trajectory", "diffpart": "passenger-set", "set_histogram": "passenger-set",
}


def bounds_a_person(event) -> bool:
    """Does this spend bound one person's contribution? Only the kinds of :data:`BOUNDS_A_PERSON`, with their unit."""
    return BOUNDS_A_PERSON.get(event.kind) == event.unit_of_privacy


@dataclass(frozen=True)
class Unbounding:
    """A trip-level release: it leaves the loss of a person who travelled in ``period`` unbounded."""

    release_id: str
    period: str

    def to_dict(self) -> dict:
        return {"release_id": self.release_id, "period": self.period}


@dataclass(frozen=True)
class KindShare:
    """The releases of one kind and what they add up to by basic composition (trip level: ``None``)."""

    kind: str
    releases: tuple[str, ...]
    basic: PrivacyLoss | None

    def to_dict(self) -> dict:
        return {"releases": list(self.releases),
                "basic": None if self.basic is None else {"epsilon": self.basic.epsilon, "delta": self.basic.delta}}


@dataclass(frozen=True)
class Shares:
    """A population's releases decomposed for composition: the card releases' discrete Laplace components, the
    pure-ε releases' (ε, δ), the basic share of each bounded release, and the trip-level releases."""

    components: tuple
    pure: tuple[tuple[float, float], ...]
    bounded: tuple[tuple[str, str, PrivacyLoss], ...]  # (release id, kind, share) in ledger order
    unbounded: tuple[Unbounding, ...]

    @property
    def basic(self) -> PrivacyLoss:
        return total(loss for _, _, loss in self.bounded)

    def per_kind(self) -> tuple[KindShare, ...]:
        kinds: dict[str, list[str]] = defaultdict(list)
        losses: dict[str, list[PrivacyLoss]] = defaultdict(list)
        for rid, kind, loss in self.bounded:
            kinds[kind].append(rid)
            losses[kind].append(loss)
        out = [KindShare(k, tuple(kinds[k]), total(losses[k])) for k in sorted(kinds)]
        if self.unbounded:
            out.append(KindShare(KIND_NAMES["stability_histogram"], tuple(u.release_id for u in self.unbounded), None))
        return tuple(out)


def shares(events: Iterable) -> Shares:
    """What each release among ``events`` (spends of one population) costs one person of it."""
    from transit_release.accounting.pld import release_components

    events = list(events)
    card = [e for e in events if bounds_a_person(e) and hasattr(e, "max_partitions")]
    unbounding = [e for e in events if not bounds_a_person(e)]
    pure = [e for e in events if bounds_a_person(e) and not hasattr(e, "max_partitions")]
    card_losses = dict(bounded_release_losses(card))
    order: list[str] = []
    for e in events:
        if e.release_id not in order:
            order.append(e.release_id)
    kind_of = {e.release_id: KIND_NAMES.get(e.kind, e.kind) for e in events}
    pure_by_release: dict[str, list] = defaultdict(list)
    for e in pure:
        pure_by_release[e.release_id].append(e)
    bounded = []
    for rid in order:
        if rid in card_losses:
            bounded.append((rid, kind_of[rid], card_losses[rid]))
        elif rid in pure_by_release:
            bounded.append((rid, kind_of[rid], total(PrivacyLoss.of(e.epsilon, e.delta) for e in pure_by_release[rid])))
    days: dict[str, list[date]] = defaultdict(list)
    for e in unbounding:
        days[e.release_id] += _days(e)
    unbounded = tuple(Unbounding(rid, period_label(min(ds), max(ds)) if ds else "every period")
                      for rid, ds in days.items())
    return Shares(tuple(release_components(card)), tuple((float(e.epsilon), float(e.delta)) for e in pure),
                  tuple(bounded), unbounded)


def _days(event) -> list[date]:
    """The first and last day a spend covers (a trip-level partition's day, or a declared period); none known: []."""
    if isinstance(getattr(event, "date", None), str) and len(event.date) == 8:
        d = event.date
        return [date(int(d[:4]), int(d[4:6]), int(d[6:]))]
    period = getattr(event, "period", None)
    return list(period) if period else []


@dataclass(frozen=True)
class PersonLoss:
    """Where one person of ``population`` stands: every release of it, composed.

    ``basic`` and ``pld`` compose the releases that bound a person; with any trip-level release
    (``unbounded_by``) the person's loss is unbounded and those figures hold for a passenger with no trip in the
    trip-level releases' periods.
    """

    population: str
    releases: tuple[str, ...]
    unbounded_by: tuple[Unbounding, ...]
    basic: PrivacyLoss
    pld_epsilon: float | None
    pld_delta: float | None
    per_kind: tuple[KindShare, ...]
    other_populations: tuple[str, ...] = ()  # declared by the custodian to be other people: not composed here

    @property
    def bounded(self) -> bool:
        return not self.unbounded_by

    def to_dict(self) -> dict:
        return {"population": self.population, "releases": len(self.releases), "bounded": self.bounded,
                "unbounded_by": [u.to_dict() for u in self.unbounded_by],
                "basic": {"epsilon": self.basic.epsilon, "delta": self.basic.delta},
                "pld": (None if self.pld_epsilon is None else {"epsilon": self.pld_epsilon, "delta": self.pld_delta}),
                "per_kind": {k.kind: k.to_dict() for k in self.per_kind},
                "other_populations": list(self.other_populations)}


def person_loss(events: Iterable, population: str = DEFAULT_POPULATION,
                pld_delta: float = DEFAULT_PLD_DELTA, with_pld: bool = True) -> PersonLoss:
    """Where one person of ``population`` stands after every spend among ``events`` of that population (the other
    populations among ``events`` are named, not composed); ``with_pld=False`` leaves the PLD figure out (None)."""
    from transit_release.accounting.pld import cumulative_loss

    events = list(events)
    mine = [e for e in events if e.population == population]
    s = shares(mine)
    pld_eps = pld_total = None
    if with_pld and (s.components or s.pure):
        loss = cumulative_loss(list(s.components), pld_delta, pure=list(s.pure))
        pld_eps, pld_total = loss.pld_epsilon, loss.pld_total_delta
    releases = tuple(dict.fromkeys(e.release_id for e in mine))
    others = tuple(sorted({e.population for e in events} - {population}))
    return PersonLoss(population, releases, s.unbounded, s.basic, pld_eps, pld_total, s.per_kind(), others)


def check_populations(recorded: Iterable, requested: list) -> None:
    """Refuse what would make one person two populations: a charge naming several (a configuration error), or an
    input already released about another population (:func:`refuse_same_input_files`). A population is declared in
    the budget policy; the records' own overlap with another population's (order-independent content, card ids) is
    refused by :func:`transit_release.accounting.claims.refuse_overlap`."""
    from transit_release.errors import PopulationError

    names = sorted({e.population for e in requested})
    if len(names) > 1:
        raise PopulationError(f"one release is about one population; its spends name {names}")
    if requested:
        refuse_same_input_files(recorded, requested)


def refuse_same_input_files(recorded: Iterable, requested: list) -> None:
    """Refuse a release whose input files (their joined keyed fingerprint, byte for byte) an earlier release of
    another population was made from: what the ledger itself records, and all it records of releases charged
    before per-input claims (:mod:`transit_release.accounting.claims`) were kept. Data-dependent (registered:
    ``population-overlap``)."""
    from transit_release.errors import PopulationOverlapError
    from transit_release.inputs.refusals import refusal

    population = requested[0].population
    inputs = {e.input_fingerprint for e in requested}
    clash = sorted({(e.population, e.release_id) for e in recorded
                    if e.population != population and e.input_fingerprint in inputs})
    if clash:
        other, rid = clash[0]
        raise refusal("population-overlap", PopulationOverlapError(
            f"release '{requested[0].release_id}' names population '{population}', but release '{rid}' was made "
            f"from the same input files about population '{other}': the same passengers cannot be two populations; "
            f"use --population {other}" + (" (or leave --population out)" if other == DEFAULT_POPULATION else "")
            + "; nothing was charged"))


def person_losses(events: Iterable, pld_delta: float = DEFAULT_PLD_DELTA) -> dict[str, PersonLoss]:
    """:func:`person_loss` of every population among ``events``, by name."""
    events = list(events)
    return {p: person_loss(events, p, pld_delta) for p in sorted({e.population for e in events})}


def epsilon_at(s: Shares, delta: float) -> float:
    """The PLD figure of ``s``'s bounded releases at a total ``delta`` (the older thresholds' δ is taken out of it
    first: it is added beside the PLD); ``inf`` when those thresholds alone use ``delta`` up."""
    from transit_release.accounting.pld import pld_epsilon, threshold_delta

    if not s.components and not s.pure:
        return 0.0
    spare = delta - threshold_delta(s.components)
    if spare <= 0:
        return float("inf")
    return pld_epsilon(list(s.components), spare, pure=list(s.pure))
