"""Privacy spends as immutable, serialisable events.

An event *describes* one mechanism run; it does not judge it. The accountant
(:mod:`transit_release.accounting.accountant`) interprets events, the ledger
(:mod:`transit_release.accounting.ledger`) records them. Never change what a
field means: add a new event class instead.

Every event refuses, at construction, an ε or δ that is negative, not finite
or absent, a δ of 1 or more, and empty identifiers: a spend that "gives back"
budget cannot be described, let alone recorded (the ledger refuses it again
at the database level).

Every event names the **population** of people it is about
(:data:`DEFAULT_POPULATION` unless a release names another): the accountant
composes, per person, every spend of one population. Records written before
events named a population read as the default one, which is what they meant:
every release of a home was about the same people.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field, fields
from datetime import date
from typing import Any, ClassVar

from transit_release.errors import ConfigError

_PERIOD = re.compile(r"(\d{4}-\d{2}-\d{2})\.\.(\d{4}-\d{2}-\d{2})")
#: The population every release of a home is about unless it names another (the conservative reading: the same
#: people may be in every release).
DEFAULT_POPULATION = "default"
_POPULATION = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def check_population(name) -> str:
    """A population's name: lower-case letters, digits, ``.``, ``_`` or ``-``, at most 64 characters."""
    if not isinstance(name, str) or not _POPULATION.fullmatch(name):
        raise InvalidEventError(f"population must be lower-case letters, digits, '.', '_' or '-' (at most 64, "
                                f"starting with a letter or digit). Found {name!r}.")
    return name


def population_field():
    """The ``population`` field every event ends with (keyword-only, so it follows the fields of subclasses)."""
    return field(default=DEFAULT_POPULATION, kw_only=True)


class InvalidEventError(ValueError):
    """An event field holds a value no spend can have (negative, NaN or missing ε or δ, ...)."""


def population_named(name: str | None) -> str:
    """The population a release names (``--population``), or the default one; a malformed name is refused."""
    if name is None:
        return DEFAULT_POPULATION
    try:
        return check_population(name)
    except InvalidEventError as exc:
        raise ConfigError(f"--population: {exc}") from None


def population_ignored(manifest: dict, release_id: str, population: str) -> str | None:
    """The note of a run that finds its release already published about another population than its own
    ``--population``: the same release, so the population it was published about stands. None if they agree."""
    recorded = (manifest.get("privacy") or {}).get("population", DEFAULT_POPULATION)
    if recorded == population:
        return None
    return (f"--population {population} was ignored: release '{release_id}' is already published, about population "
            f"'{recorded}'")


def parse_period(text: str) -> tuple[date, date] | None:
    """``YYYY-MM-DD..YYYY-MM-DD`` as two dates (start ≤ end), or None for anything else."""
    m = _PERIOD.fullmatch(text or "")
    if not m:
        return None
    try:
        start, end = date.fromisoformat(m.group(1)), date.fromisoformat(m.group(2))
    except ValueError:
        return None
    return (start, end) if start <= end else None


def period_label(start: date, end: date) -> str:
    """How a declared period is written in events, manifests and scopes: ``2016-08-01..2016-08-31``."""
    return f"{start.isoformat()}..{end.isoformat()}"


class _FieldChecks:
    """The field validation of every event, written once; each refusal reads ``<kind> event: <what is wrong>``.

    :meth:`_check_fields` runs at every event's construction (ε and δ, the declared types of text and integer
    fields, the identifiers that must not be empty, the population); an event class adds its own conditions with
    :meth:`_check_period`, :meth:`_require` and :meth:`_invalid`."""

    kind: ClassVar[str]
    #: the identifiers no event may leave empty
    _NON_EMPTY: ClassVar[tuple[str, ...]] = ("release_id", "unit_of_privacy", "neighbouring")

    def _invalid(self, what: str) -> InvalidEventError:
        """The error of this event's ``what``."""
        return InvalidEventError(f"{self.kind} event: {what}")

    def _require(self, condition: bool, what: str) -> None:
        """Refuse the event unless ``condition``."""
        if not condition:
            raise self._invalid(what)

    def _check_fields(self) -> None:
        for name in ("epsilon", "delta"):
            value = getattr(self, name, None)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise self._invalid(f"{name} must be a number. Found {type(value).__name__}.")
            self._require(math.isfinite(value) and value >= 0,
                          f"{name} must be finite and non-negative. Found {value!r}.")
        self._require(self.delta < 1, f"delta must be below 1. Found {self.delta!r}.")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "str" and not isinstance(value, str):
                raise self._invalid(f"{f.name} must be text. Found {type(value).__name__}.")
            if f.type == "int" and (isinstance(value, bool) or not isinstance(value, int)):
                raise self._invalid(f"{f.name} must be an integer. Found {value!r}.")
        for name in self._NON_EMPTY:
            self._require(bool(getattr(self, name)), f"{name} must not be empty")
        try:
            check_population(self.population)
        except InvalidEventError as exc:
            raise self._invalid(str(exc)) from None

    def _check_period(self, say_found: bool = True) -> None:
        """``period_start..period_end`` are ISO dates in order (``say_found``: the refusal quotes them)."""
        found = f". Found {self.period_start!r}..{self.period_end!r}." if say_found else ""
        self._require(parse_period(f"{self.period_start}..{self.period_end}") is not None,
                      f"period_start..period_end must be ISO dates in order{found}")


class _Serialisable(_FieldChecks):
    """Flat JSON for the ledger and MLflow; the round trip is :func:`event_from_dict`. Fields are checked at
    construction (:class:`_FieldChecks`)."""

    def __post_init__(self) -> None:
        self._check_fields()

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-ready mapping, ``kind`` first."""
        return {"kind": self.kind, **asdict(self)}

    def to_json(self) -> str:
        """Canonical JSON (sorted keys, no spaces, NaN refused): what the ledger hashes."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)


class _PeriodScoped(_Serialisable):
    """An event over one declared calendar period (``period_start``..``period_end``, ISO dates)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_period()

    @property
    def period(self) -> tuple[date, date]:
        return parse_period(f"{self.period_start}..{self.period_end}")

    @property
    def partition(self) -> str:
        return f"{self.period_start}..{self.period_end}"

    @property
    def scope(self) -> str:
        return self.partition

    @property
    def mode(self) -> str:
        return ""


@dataclass(frozen=True)
class StabilityHistogramEvent(_Serialisable):
    """One stability-based histogram over one (partition, marginal).

    Noise: discrete Laplace at scale ``2/ε`` on each present point's count,
    released when the noisy count is at least ``threshold``.
    Neighbouring relation: ``replace-one`` row (one trip) — the histogram is
    (ε, δ)-DP under it, and (ε/2, δ/2)-DP under add/remove-one.
    Sensitivity: one row changes each point's count by at most ``sensitivity``.
    """

    kind: ClassVar[str] = "stability_histogram"

    release_id: str
    mode: str
    date: str
    marginal: str
    epsilon: float
    delta: float
    threshold: int
    noise_scale: str
    sensitivity: int
    unit_of_privacy: str
    neighbouring: str
    input_fingerprint: str
    code_version: str
    population: str = population_field()

    @property
    def partition(self) -> str:
        """The disjoint slice of the data this spend touches, e.g. ``bus/20160808``."""
        return f"{self.mode}/{self.date}"

    @property
    def component(self) -> str:
        """Which part of the release the spend paid for (the marginal)."""
        return self.marginal


@dataclass(frozen=True)
class CardStabilityHistogramEvent(_Serialisable):
    """One card-level stability-based histogram over one (partition, marginal) of a card-level Opal release.

    Before the card id was dropped, every card kept at most ``max_trips_per_partition`` (k) trips per
    (mode, date) partition and at most ``max_partitions`` (P) partitions in the release
    (``period_start``..``period_end``). One card then changes this histogram by ``(l0, l1, l∞) = (k, k, k)``.
    Noise: discrete Laplace at scale ``sensitivity/ε`` (``sensitivity`` = l1 = k) on each present point's
    count, released when the noisy count is at least ``threshold`` (bad event ≤ δ over the ≤ k keys only one
    side has). Neighbouring relation: ``add-remove-one`` card. The accountant composes the ≤ P partitions one
    card can touch in a release (the P most expensive) and every release of the card unit sequentially.
    """

    kind: ClassVar[str] = "card_stability_histogram"

    release_id: str
    mode: str
    date: str
    marginal: str
    epsilon: float
    delta: float
    threshold: int
    noise_scale: str
    sensitivity: int
    max_trips_per_partition: int
    max_partitions: int
    period_start: str
    period_end: str
    unit_of_privacy: str
    neighbouring: str
    input_fingerprint: str
    code_version: str
    population: str = population_field()

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(self.max_trips_per_partition >= 1 and self.max_partitions >= 1,
                      "the contribution bounds must be positive")
        self._check_period(say_found=False)

    @property
    def partition(self) -> str:
        return f"{self.mode}/{self.date}"

    @property
    def component(self) -> str:
        return self.marginal

    @property
    def release_period(self) -> str:
        return f"{self.period_start}..{self.period_end}"


@dataclass(frozen=True)
class PrefixTreeEvent(_Serialisable):
    """One noisy (hybrid-granularity) prefix tree over a data set of passenger sequences.

    Noise: discrete Laplace on every node count, scale ``h/ε`` split between the
    generalized and station sub-levels (``variant``, ``fanout``); ε-DP, with
    ``delta`` the samplers' exact total-variation slack.
    Neighbouring relation: ``add-remove-one`` passenger sequence.
    ``scope`` names the data set. Releases since the public-period rule write the
    declared calendar period the sequences cover, ``YYYY-MM-DD..YYYY-MM-DD``; the
    accountant composes releases of disjoint periods in parallel and everything
    else (overlapping periods, and free-text scopes of older records) sequentially.
    """

    kind: ClassVar[str] = "prefix_tree"

    release_id: str
    scope: str
    epsilon: float
    delta: float
    height: int
    variant: str
    fanout: str
    sensitivity: int
    unit_of_privacy: str
    neighbouring: str
    input_fingerprint: str
    code_version: str
    population: str = population_field()

    @property
    def partition(self) -> str:
        return self.scope

    @property
    def period(self) -> tuple[date, date] | None:
        return parse_period(self.scope)

    @property
    def mode(self) -> str:
        return ""

    @property
    def component(self) -> str:
        return "prefix_tree"


@dataclass(frozen=True)
class SafePathEvent(_PeriodScoped):
    """One SafePath (location, time) prefix tree over the passenger trajectories of a declared period.

    Noise: integer discrete Laplace at scale ``1/ε_node`` (sensitivity 1) on every tested count; the
    budget ``ε`` splits into ``height`` levels of two sub-levels (location, then hour), each along the
    public taxonomies of heights ``location_taxonomy_height`` and ``time_taxonomy_height`` over
    ``locations`` locations and ``hours`` hours (Al-Hussaeni et al. 2018, §4.1); ε-DP, with ``delta``
    the samplers' exact total-variation slack. ``thresholds`` names the public threshold rule
    (``paper``/``node``), ``time_rule`` the public order of hours (``monotone``: children only at
    hours ≥ the parent's), ``release_form`` how the tree becomes trajectories (``terminating``/``literal``).
    Neighbouring relation: ``add-remove-one`` passenger trajectory over the period
    ``period_start``..``period_end`` (releases of disjoint periods compose in parallel).
    """

    kind: ClassVar[str] = "safepath"

    release_id: str
    period_start: str
    period_end: str
    epsilon: float
    delta: float
    height: int
    locations: int
    hours: int
    location_taxonomy_height: int
    time_taxonomy_height: int
    thresholds: str
    time_rule: str
    release_form: str
    sensitivity: int
    unit_of_privacy: str
    neighbouring: str
    input_fingerprint: str
    code_version: str
    population: str = population_field()

    @property
    def component(self) -> str:
        return "safepath"


@dataclass(frozen=True)
class TruncatedCardStabilityHistogramEvent(CardStabilityHistogramEvent):
    """One card-level stability-based histogram with *truncated* discrete Laplace noise over one
    (partition, marginal) of a card-level Opal release
    (:func:`~transit_release.mechanisms.stability_histogram.truncated_card_level_stability_histogram`).

    Everything as :class:`CardStabilityHistogramEvent` (bounds ``k`` and ``P``, the period, sensitivity ``l1``,
    scale ``sensitivity/ε``) except the noise: every draw lies in ``[−noise_bound, noise_bound]`` (the sampled
    table conditioned on ``|Z| ≤ A``) and the threshold is ``A + k + 1``, so a key the card holds alone is never
    released (no bad event); ``delta`` bounds the probability mass of the noise's top ``l1`` values, where one
    side has an output the other cannot have, plus the sampler's slack. The accountant composes it as the
    untruncated event for basic composition; the PLD (:mod:`transit_release.accounting.pld`) is built from the
    truncated noise itself, its edge as infinite loss.
    """

    kind: ClassVar[str] = "truncated_card_stability_histogram"

    noise_bound: int

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(self.noise_bound >= self.sensitivity, f"noise_bound must be at least the sensitivity "
                                                            f"{self.sensitivity}. Found {self.noise_bound}.")
        wanted = self.noise_bound + self.max_trips_per_partition + 1
        self._require(self.threshold == wanted, f"the threshold must be noise_bound + k + 1 = {wanted}. "
                                                f"Found {self.threshold}.")


EVENT_TYPES: dict[str, type] = {StabilityHistogramEvent.kind: StabilityHistogramEvent,
                                CardStabilityHistogramEvent.kind: CardStabilityHistogramEvent,
                                TruncatedCardStabilityHistogramEvent.kind: TruncatedCardStabilityHistogramEvent,
                                PrefixTreeEvent.kind: PrefixTreeEvent, SafePathEvent.kind: SafePathEvent}


def register(cls: type) -> type:
    """Add an event class to the vocabulary the ledger can read back (one kind, one class)."""
    if cls.kind in EVENT_TYPES and EVENT_TYPES[cls.kind] is not cls:
        raise ValueError(f"event kind {cls.kind!r} is already taken by {EVENT_TYPES[cls.kind].__name__}")
    EVENT_TYPES[cls.kind] = cls
    return cls


@dataclass(frozen=True)
class NGramEvent(_PeriodScoped):
    """One variable-length n-gram sanitization (Chen, Ács & Castelluccia, CCS 2012) of a period's sequences.

    Noise: discrete Laplace at scale ``max_length/ε′`` on the count of every child of every expanded
    gram of the exploration tree (up to ``max_gram`` locations, ``n_locations`` + 1 children each, the
    end marker included), ``ε′`` the adaptive node budget; every root-to-leaf path spends at most
    ``epsilon``, so the release is ε-DP, with ``delta`` the samplers' exact total-variation slack
    (``max_length·max_gram·(1 + e^ε)·η``). Sequences are cut to ``max_length`` locations;
    ``sensitivity`` is the L1 sensitivity of one level's counts (``max_length``: a record has at most
    that many occurrences at any level).
    Neighbouring relation: ``add-remove-one`` passenger sequence over the declared period
    ``period_start``..``period_end`` (releases of disjoint periods compose in parallel).
    """

    kind: ClassVar[str] = "ngram"

    release_id: str
    period_start: str
    period_end: str
    epsilon: float
    delta: float
    max_length: int
    max_gram: int
    n_locations: int
    sensitivity: int
    unit_of_privacy: str
    neighbouring: str
    input_fingerprint: str
    code_version: str
    population: str = population_field()

    @property
    def component(self) -> str:
        return "ngram"


register(NGramEvent)


@register
@dataclass(frozen=True)
class DiffPartEvent(_PeriodScoped):
    """One DiffPart run (probabilistic top-down partitioning) over the passengers' station sets of a period.

    Noise: discrete Laplace on every tested sub-partition's size and every leaf count, at budgets split
    adaptively along each record's chain of splits so that every chain spends exactly ``epsilon``
    (``fanout``, the taxonomy of ``universe_size`` items, thresholds ``√2·C2·h/α`` and ``√2·C1/ε_leaf``);
    ε-DP, with ``delta`` the samplers' exact total-variation slack.
    Neighbouring relation: ``add-remove-one`` passenger set (one passenger's whole set of stations over
    ``period_start``..``period_end``); the accountant composes disjoint periods in parallel.
    """

    kind: ClassVar[str] = "diffpart"

    release_id: str
    period_start: str
    period_end: str
    epsilon: float
    delta: float
    fanout: int
    c_leaf: float  # C1
    c_split: float  # C2
    universe_size: int
    sensitivity: int
    unit_of_privacy: str
    neighbouring: str
    input_fingerprint: str
    code_version: str
    population: str = population_field()

    @property
    def component(self) -> str:
        return "diffpart"


@register
@dataclass(frozen=True)
class SafePathJointEvent(_PeriodScoped):
    """One SafePath tree over the passenger trajectories of a declared period, with the *joint* budget rule
    (:func:`~transit_release.mechanisms.safepath.build_joint_tree`): no taxonomies; at each of the ``height``
    levels every candidate (location, hour) pair of a node (``locations × hours`` of them) gets one noisy count,
    integer discrete Laplace at scale ``1/level_epsilon`` (sensitivity 1), kept when at least ``threshold``.
    ``level_epsilon = min(epsilon/height, 16)``, so every root-to-leaf path spends at most ``epsilon``: ε-DP,
    with ``delta`` the samplers' exact total-variation slack. ``time_rule`` and ``release_form`` as in
    :class:`SafePathEvent`. Neighbouring relation: ``add-remove-one`` passenger trajectory over the period
    ``period_start``..``period_end``.
    """

    kind: ClassVar[str] = "safepath_joint"

    release_id: str
    period_start: str
    period_end: str
    epsilon: float
    delta: float
    height: int
    locations: int
    hours: int
    level_epsilon: float
    threshold: int
    time_rule: str
    release_form: str
    sensitivity: int
    unit_of_privacy: str
    neighbouring: str
    input_fingerprint: str
    code_version: str
    population: str = population_field()

    @property
    def component(self) -> str:
        return "safepath"


@register
@dataclass(frozen=True)
class TrajectoryMarkovEvent(_PeriodScoped):
    """One factored Markov release of the passenger trajectories of a declared period
    (:mod:`transit_release.mechanisms.trajectory_markov`): three releases in sequence, ``epsilon_days`` on a
    histogram of the day sequences (every non-decreasing sequence of 1..``height`` days a cell, sensitivity 1,
    discrete Laplace at scale ``1/epsilon_days``), and the variable-length n-gram sanitizer
    (:class:`NGramEvent`'s noise) at ``epsilon_stations`` over the station sequences and at ``epsilon_hours``
    over the hours of the day, each with a length marker (``max_length = height + 1``, grams of at most
    ``max_gram`` symbols, ``locations`` stations). ``epsilon`` is their sum (sequential composition); ε-DP
    with ``delta`` the samplers' exact total-variation slack. Neighbouring relation: ``add-remove-one``
    passenger trajectory over the period ``period_start``..``period_end``.
    """

    kind: ClassVar[str] = "trajectory_markov"

    release_id: str
    period_start: str
    period_end: str
    epsilon: float
    delta: float
    height: int
    max_gram: int
    locations: int
    epsilon_days: float
    epsilon_stations: float
    epsilon_hours: float
    sensitivity: int
    unit_of_privacy: str
    neighbouring: str
    input_fingerprint: str
    code_version: str
    population: str = population_field()

    @property
    def component(self) -> str:
        return "trajectory_markov"


@register
@dataclass(frozen=True)
class SetHistogramEvent(_PeriodScoped):
    """One set histogram over the passengers' station sets of a declared period
    (:mod:`transit_release.mechanisms.set_histogram`): every non-empty subset of the public universe of
    ``universe_size`` items is a cell (``cells = 2^universe_size − 1``); one passenger's set is one cell
    (``sensitivity`` 1), and every cell's count gets discrete Laplace noise at scale ``1/epsilon``. The published
    sets are post-processed from the noisy counts (cells at or above ``head_threshold`` keep theirs; the rest is
    shared out from noisy sums and raked to the noisy containment counts of up to ``rake_order`` items). ε-DP,
    with ``delta`` the sampler's exact total-variation slack. Neighbouring relation: ``add-remove-one`` passenger
    set over ``period_start``..``period_end``; the accountant composes disjoint periods in parallel.
    """

    kind: ClassVar[str] = "set_histogram"

    release_id: str
    period_start: str
    period_end: str
    epsilon: float
    delta: float
    universe_size: int
    cells: int
    head_threshold: int
    rake_order: int
    sensitivity: int
    unit_of_privacy: str
    neighbouring: str
    input_fingerprint: str
    code_version: str
    population: str = population_field()

    @property
    def component(self) -> str:
        return "set_histogram"


@register
@dataclass(frozen=True)
class TrajectoryMarkovPartsEvent(TrajectoryMarkovEvent):
    """:class:`TrajectoryMarkovEvent` with each part's sensitivity named, what releases record since #40 (that event's
    ``sensitivity`` held 1, the day histogram's alone, though the n-gram parts are not of sensitivity 1).

    ``sensitivity`` reads ``days 1; stations <ℓmax>; hours <ℓmax>`` (:func:`markov_sensitivity`): the day histogram's
    L1 sensitivity (one passenger is one cell), and each n-gram model's L1 sensitivity of one level's counts,
    ``ℓmax = height + 1`` (a sequence, its length marker included, has at most that many occurrences at a level;
    the noise scale ``ℓmax/ε′`` of :class:`NGramEvent`). Everything else as :class:`TrajectoryMarkovEvent`; the
    accountant reads both alike.
    """

    kind: ClassVar[str] = "trajectory_markov_parts"

    sensitivity: str

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(self.sensitivity == markov_sensitivity(self.height),
                      f"sensitivity must name each part's: {markov_sensitivity(self.height)!r}. "
                      f"Found {self.sensitivity!r}.")


def markov_sensitivity(height: int) -> str:
    """The per-part sensitivities of a Markov trajectory release of ``height`` points (days, stations, hours)."""
    return f"days 1; stations {height + 1}; hours {height + 1}"


#: The kinds of spend of a Markov trajectory release (the older event, and the one naming each part's sensitivity).
MARKOV_KINDS = (TrajectoryMarkovEvent.kind, TrajectoryMarkovPartsEvent.kind)


def event_from_dict(data: dict[str, Any]):
    """Inverse of ``to_dict``; unknown kinds or fields are an error, not ignored. A record without ``population``
    (written before events named one) is about the default population."""
    data = dict(data)
    kind = data.pop("kind", None)
    if kind not in EVENT_TYPES:
        raise ValueError(f"unknown privacy event kind {kind!r}; known: {sorted(EVENT_TYPES)}")
    cls = EVENT_TYPES[kind]
    names = {f.name for f in fields(cls)}
    extra = set(data) - names
    missing = names - set(data) - {"population"}
    if extra or missing:
        raise ValueError(f"{kind} event: unexpected fields {sorted(extra)}, missing fields {sorted(missing)}")
    return cls(**data)


def event_from_json(text: str):
    return event_from_dict(json.loads(text))
