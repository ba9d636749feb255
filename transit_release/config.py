"""Release configuration: the six marginals' budgets and the preprocessing knobs."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from transit_release.errors import ConfigError
from transit_release.noise import exact_fraction


@dataclass(frozen=True)
class Marginal:
    """One of the six column combinations of a partition (paper §4.1 step 6)."""

    j: int
    name: str
    tap: str  # "on" | "off"
    has_time: bool
    has_loc: bool

    @property
    def output(self) -> str:
        """Which published file the marginal lands in."""
        if self.has_time and self.has_loc:
            return "time-loc"
        return "time" if self.has_time else "location"


MARGINALS: tuple[Marginal, ...] = (
    Marginal(1, "tap_on_time", "on", True, False),
    Marginal(2, "tap_on_location", "on", False, True),
    Marginal(3, "tap_off_time", "off", True, False),
    Marginal(4, "tap_off_location", "off", False, True),
    Marginal(5, "tap_on_time_location", "on", True, True),
    Marginal(6, "tap_off_time_location", "off", True, True),
)
MARGINAL_BY_NAME = {m.name: m for m in MARGINALS}


def marginal_numbers(js: list[int]) -> str:
    """Marginals' numbers j in words: ``1–4`` for a run, ``1, 3`` otherwise."""
    return f"{js[0]}–{js[-1]}" if len(js) > 1 and js == list(range(js[0], js[-1] + 1)) else ", ".join(map(str, js))
KNOWN_MODES = ("bus", "ferry", "lightrail", "train")


@dataclass(frozen=True)
class MarginalBudget:
    epsilon: float
    delta: float


@dataclass(frozen=True)
class QualityPolicy:
    """What the validation gate tolerates (``quality:`` in the release config)."""

    quarantine_limit: float = 0.01  # largest share of quarantined rows that still allows a release
    max_trip_minutes: int = 300  # a longer trip is an "absurd duration"
    min_rows: int = 1
    max_rows: int = 200_000_000
    quarantine_retention_days: float = 30.0  # quarantined raw rows are deleted after this many days

    def __post_init__(self):
        if not (math.isfinite(self.quarantine_retention_days) and self.quarantine_retention_days > 0):
            raise ConfigError(f"quality.quarantine_retention_days must be a positive number of days. "
                              f"Found {self.quarantine_retention_days}.")
        if not 0 <= self.quarantine_limit < 1:
            raise ConfigError(f"quality.quarantine_limit must be in [0, 1). Found {self.quarantine_limit}.")
        if self.max_trip_minutes <= 0:
            raise ConfigError(f"quality.max_trip_minutes must be positive. Found {self.max_trip_minutes}.")
        if not 0 < self.min_rows <= self.max_rows:
            raise ConfigError(f"quality.min_rows and max_rows must satisfy 0 < min_rows <= max_rows. "
                              f"Found {self.min_rows}, {self.max_rows}.")


UNITS = ("trip", "card")


@dataclass(frozen=True)
class CardBounds:
    """Contribution bounds of a card-level release (public): at most ``max_trips_per_partition`` (k) trips per
    card per (mode, date) partition and at most ``max_partitions`` (P) partitions per card per release."""

    max_trips_per_partition: int
    max_partitions: int

    def __post_init__(self):
        for name in ("max_trips_per_partition", "max_partitions"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"release config: bounds.{name} must be a positive whole number. Found {v!r}.")


@dataclass(frozen=True)
class ReleaseConfig:
    """A release's public parameters. ``unit_of_privacy`` is ``trip`` (the paper's: replace one trip, no bound on a
    card's trips) or ``card`` (add or remove one card's trips, bounded by ``bounds`` before the card id is dropped)."""

    budgets: dict[str, MarginalBudget]
    bin_minutes: int = 15
    unit_of_privacy: str = "trip"
    modes: tuple[str, ...] = KNOWN_MODES
    quality: QualityPolicy = QualityPolicy()
    bounds: CardBounds | None = None

    def __post_init__(self):
        if set(self.budgets) != set(MARGINAL_BY_NAME):
            missing = sorted(set(MARGINAL_BY_NAME) - set(self.budgets))
            extra = sorted(set(self.budgets) - set(MARGINAL_BY_NAME))
            raise ConfigError(f"release config: marginals must be exactly the six of the Opal release; "
                              f"missing {missing}, unknown {extra}")
        if self.unit_of_privacy not in UNITS:
            raise ConfigError(f"release config: unit_of_privacy must be one of {list(UNITS)}. "
                              f"Found {self.unit_of_privacy!r}.")
        if (self.unit_of_privacy == "card") != (self.bounds is not None):
            raise ConfigError("release config: a card-level release needs 'bounds:' (max_trips_per_partition, "
                              "max_partitions); a trip-level release has none")
        for name, b in self.budgets.items():
            if not (math.isfinite(b.epsilon) and b.epsilon > 0):
                raise ConfigError(f"release config: marginals.{name}.epsilon must be a positive number. Found {b.epsilon}.")
            if not (0 < b.delta < 1):
                raise ConfigError(f"release config: marginals.{name}.delta must be in (0, 1). Found {b.delta}.")
            try:  # the noise scale and threshold must be ones the exact samplers can honour: refused here, not later
                self.sbh_budget(name).threshold
            except ValueError as exc:
                raise ConfigError(f"release config: marginals.{name}: {exc}") from None
        if self.bin_minutes <= 0 or 1440 % self.bin_minutes:
            raise ConfigError(f"release config: bin_minutes must divide 1440. Found {self.bin_minutes}.")
        unknown = sorted(set(self.modes) - set(KNOWN_MODES))
        if unknown or not self.modes:
            raise ConfigError(f"release config: modes must be a non-empty subset of {list(KNOWN_MODES)}. Found {unknown}.")

    def sbh_budget(self, marginal: str):
        """The stability histogram of one marginal for this unit.

        Trip level: the paper's SBH, the card level's special case ``k = 1`` under replace-one (sensitivity
        (2, 2, 1): scale 2/ε, the paper's thresholds 34 and 18, so results compare with the Opal files).
        Card level: the SBH with truncated noise (:class:`TruncatedCardLevelBudget`): the same scale ``k/ε_j``
        and the same per-card ``(ε_j, δ_j)``, a lower threshold (405 against 464 at ε_j = 0.1, k = 2), so more
        cells are released at the same loss."""
        from transit_release.mechanisms.stability_histogram import CardLevelBudget, TruncatedCardLevelBudget

        b = self.budgets[marginal]
        if self.unit_of_privacy == "card":
            return TruncatedCardLevelBudget(b.epsilon, b.delta, self.bounds.max_trips_per_partition,
                                            "add-remove-one")
        return CardLevelBudget(b.epsilon, b.delta, 1, "replace-one")

    @property
    def neighbouring(self) -> str:
        return "add-remove-one" if self.unit_of_privacy == "card" else "replace-one"

    @property
    def partition_epsilon(self) -> float:
        """Basic composition of the six marginals, summed exactly (``1+1+1+1+2+2 = 8``)."""
        return float(sum(exact_fraction(b.epsilon) for b in self.budgets.values()))

    @property
    def partition_delta(self) -> float:
        """``6 × 1/8,000,000 = 7.5e-7`` exactly, not ``7.499999999999999e-07``."""
        return float(sum(exact_fraction(b.delta) for b in self.budgets.values()))

    @property
    def release_epsilon(self) -> float:
        """What one release can cost a unit by basic composition: a trip is in one partition; a card in at most
        ``P`` of them."""
        return self.partition_epsilon * (self.bounds.max_partitions if self.bounds else 1)

    @property
    def release_delta(self) -> float:
        return float(sum(exact_fraction(b.delta) for b in self.budgets.values())
                     * (self.bounds.max_partitions if self.bounds else 1))

    def with_overrides(self, epsilons: list[float] | None = None, delta: float | None = None,
                       quarantine_limit: float | None = None) -> "ReleaseConfig":
        """Flags override the file: ``epsilons`` in marginal order j = 1..6, one δ for all."""
        budgets = dict(self.budgets)
        if epsilons is not None:
            if len(epsilons) != len(MARGINALS):
                raise ConfigError(f"--epsilons needs {len(MARGINALS)} values (j = 1..6). Found {len(epsilons)}.")
            budgets = {m.name: MarginalBudget(float(e), budgets[m.name].delta) for m, e in zip(MARGINALS, epsilons)}
        if delta is not None:
            budgets = {k: MarginalBudget(b.epsilon, float(delta)) for k, b in budgets.items()}
        quality = self.quality if quarantine_limit is None else replace(self.quality, quarantine_limit=quarantine_limit)
        return replace(self, budgets=budgets, quality=quality)

    def to_dict(self) -> dict[str, Any]:
        return {
            "bin_minutes": self.bin_minutes,
            "unit_of_privacy": self.unit_of_privacy,
            "modes": list(self.modes),
            "marginals": {m.name: {"epsilon": self.budgets[m.name].epsilon, "delta": self.budgets[m.name].delta}
                          for m in MARGINALS},
            **({"bounds": {"max_trips_per_partition": self.bounds.max_trips_per_partition,
                           "max_partitions": self.bounds.max_partitions}} if self.bounds else {}),
            "quality": {"quarantine_limit": self.quality.quarantine_limit,
                        "max_trip_minutes": self.quality.max_trip_minutes,
                        "min_rows": self.quality.min_rows, "max_rows": self.quality.max_rows,
                        "quarantine_retention_days": self.quality.quarantine_retention_days},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "release config") -> "ReleaseConfig":
        if not isinstance(data, dict) or not isinstance(data.get("release"), dict):
            raise ConfigError(f"{source}: expected a top-level 'release:' mapping")
        r = data["release"]
        known = {"bin_minutes", "unit_of_privacy", "modes", "marginals", "quality", "bounds"}
        if set(r) - known:
            raise ConfigError(f"{source}: unknown keys {sorted(set(r) - known)}")
        marginals = r.get("marginals") or {}
        if not isinstance(marginals, dict):
            raise ConfigError(f"{source}: 'marginals:' must be a mapping of marginal → {{epsilon, delta}}")
        budgets = {}
        for name, v in marginals.items():
            if not isinstance(v, dict) or set(v) != {"epsilon", "delta"}:
                raise ConfigError(f"{source}: marginals.{name} must hold exactly 'epsilon' and 'delta'")
            budgets[name] = MarginalBudget(_number(v["epsilon"], f"marginals.{name}.epsilon", source),
                                           _number(v["delta"], f"marginals.{name}.delta", source))
        q = r.get("quality") or {}
        if not isinstance(q, dict) or set(q) - set(QualityPolicy.__dataclass_fields__):
            raise ConfigError(f"{source}: 'quality:' must be a mapping of "
                              f"{sorted(QualityPolicy.__dataclass_fields__)}")
        values = {}
        for k, v in q.items():
            if k in ("max_trip_minutes", "min_rows", "max_rows"):
                values[k] = _whole(v, f"quality.{k}", source)
            else:
                values[k] = _number(v, f"quality.{k}", source)
        try:
            quality = QualityPolicy(**values)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        bins = _whole(r.get("bin_minutes", 15), "bin_minutes", source, "a whole number of minutes")
        modes = r.get("modes", list(KNOWN_MODES))
        if not isinstance(modes, list) or not all(isinstance(m, str) for m in modes):
            raise ConfigError(f"{source}: 'modes:' must be a list of modes")
        if len(set(modes)) != len(modes):
            raise ConfigError(f"{source}: 'modes:' lists a mode twice. Found {modes}.")
        unit = r.get("unit_of_privacy", "trip")
        if not isinstance(unit, str):
            raise ConfigError(f"{source}: unit_of_privacy must be text")
        bounds = None
        if "bounds" in r:
            raw = r["bounds"]
            if not isinstance(raw, dict) or set(raw) != {"max_trips_per_partition", "max_partitions"}:
                raise ConfigError(f"{source}: 'bounds:' must hold exactly max_trips_per_partition and max_partitions")
            bounds = CardBounds(**{k: _whole(v, f"bounds.{k}", source) for k, v in raw.items()})
        try:
            return cls(budgets=budgets, quality=quality, bin_minutes=int(bins), unit_of_privacy=unit,
                       modes=tuple(modes), bounds=bounds)
        except ConfigError as exc:
            raise ConfigError(str(exc).replace("release config", source, 1)) from None


def _number(value, name: str, source: str) -> float:
    """A finite number from YAML: one type per value, as the budget policy reads its own (a quoted number, ``true``,
    NaN and infinities are refused, naming the key, with the policy's message for the same mistake; ``1e-7`` is a
    number, see :class:`_StrictLoader`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{source}: '{name}' must be a number. Found {type(value).__name__}.")
    if not math.isfinite(value):
        raise ConfigError(f"{source}: '{name}' must be finite. Found {value}.")
    return float(value)


def _whole(value, name: str, source: str, what: str = "a whole number") -> int:
    """A whole number from YAML, written as one (``15``, not ``15.0`` or ``"15"``)."""
    _number(value, name, source)
    if not isinstance(value, int):
        raise ConfigError(f"{source}: '{name}' must be {what}. Found {type(value).__name__}.")
    return value


def default_file(name: str) -> Path:
    """A file shipped in ``transit_release/defaults/``."""
    return Path(str(resources.files("transit_release") / "defaults" / name))


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, stricter where a budget file must not be misread: a key given twice is an error
    (not "the last one wins"), and ``1e-6`` is a number as in YAML 1.2 (PyYAML's YAML 1.1 reads it as text)."""


def _mapping_without_repeats(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise _RepeatedKey(f"'{key}' is given twice (lines {seen[key] + 1} and {key_node.start_mark.line + 1})")
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


class _RepeatedKey(ValueError):
    pass


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_repeats)
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


class _NoAliasLoader(_StrictLoader):
    """:class:`_StrictLoader` that refuses YAML aliases (``*name``): a file of a few lines whose aliases nest
    expands into billions of values (an "anchor bomb") that every reader of it would walk."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _RepeatedKey(f"line {event.start_mark.line + 1}: a YAML alias (*{event.anchor}); write the values "
                               "out, aliases are not accepted in this file")
        return super().compose_node(parent, index)


def read_yaml(path: Path, what: str, aliases: bool = True, max_bytes: int | None = None):
    """Parse a YAML file, or raise :class:`ConfigError` naming ``what`` and the file. ``aliases=False`` refuses YAML
    aliases; ``max_bytes`` a larger file."""
    try:
        if max_bytes is not None and path.stat().st_size > max_bytes:
            raise ConfigError(f"{what} {path}: {path.stat().st_size:,} bytes; at most {max_bytes:,} are read")
        return yaml.load(path.read_text(encoding="utf-8"),  # noqa: S506 (a SafeLoader)
                         Loader=_StrictLoader if aliases else _NoAliasLoader)
    except _RepeatedKey as exc:
        raise ConfigError(f"{what} {path}: {exc}") from None
    except FileNotFoundError:
        raise ConfigError(f"{what} {path}: file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {path}: is a directory, not a file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {path}: the text is not valid UTF-8 (save the file as UTF-8)") from None
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot be read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} {path}: not valid YAML ({exc.__class__.__name__})") from None


#: The unit of privacy of an Opal release when neither ``--unit`` nor ``--config`` names one: the card, so that a
#: passenger's loss is bounded (a trip-level release is one flag away, to compare with the published Opal files).
DEFAULT_RELEASE_UNIT = "card"


def release_unit(config_path: str | Path | None, unit: str | None) -> str | None:
    """The unit an Opal release asks :func:`load_release_config` for: ``unit`` if given, else the config file's own
    (None), else :data:`DEFAULT_RELEASE_UNIT`."""
    return unit or (None if config_path is not None else DEFAULT_RELEASE_UNIT)


def default_config_path(unit: str = "trip") -> Path:
    """The built-in defaults: the paper's (trip) or the card level's (chosen in ``benchmarks/experiment_card_level.py``)."""
    if unit not in UNITS:
        raise ConfigError(f"--unit must be one of {list(UNITS)}. Found {unit!r}.")
    return default_file("opal_release.yaml" if unit == "trip" else "opal_release_card.yaml")


def load_release_config(path: str | Path | None = None, unit: str | None = None) -> ReleaseConfig:
    """The file at ``path`` (or the built-in defaults of ``unit``); ``unit`` must match the file's if both are given."""
    path = Path(path) if path is not None else default_config_path(unit or "trip")
    config = ReleaseConfig.from_dict(read_yaml(path, "release config"), source=f"release config {path}")
    if unit is not None and config.unit_of_privacy != unit:
        raise ConfigError(f"release config {path} is for unit '{config.unit_of_privacy}', not '{unit}' (--unit)")
    return config
