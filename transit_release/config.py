"""Release configuration: the six marginals' budgets and the preprocessing knobs."""

from __future__ import annotations

import math
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

    def __post_init__(self):
        if not 0 <= self.quarantine_limit < 1:
            raise ConfigError(f"quality.quarantine_limit must be in [0, 1). Found {self.quarantine_limit}.")
        if self.max_trip_minutes <= 0:
            raise ConfigError(f"quality.max_trip_minutes must be positive. Found {self.max_trip_minutes}.")
        if not 0 < self.min_rows <= self.max_rows:
            raise ConfigError(f"quality.min_rows and max_rows must satisfy 0 < min_rows <= max_rows. "
                              f"Found {self.min_rows}, {self.max_rows}.")


@dataclass(frozen=True)
class ReleaseConfig:
    budgets: dict[str, MarginalBudget]
    bin_minutes: int = 15
    unit_of_privacy: str = "trip"
    modes: tuple[str, ...] = KNOWN_MODES
    quality: QualityPolicy = QualityPolicy()

    def __post_init__(self):
        if set(self.budgets) != set(MARGINAL_BY_NAME):
            missing = sorted(set(MARGINAL_BY_NAME) - set(self.budgets))
            extra = sorted(set(self.budgets) - set(MARGINAL_BY_NAME))
            raise ConfigError(f"release config: marginals must be exactly the six of the Opal release; "
                              f"missing {missing}, unknown {extra}")
        for name, b in self.budgets.items():
            if not (math.isfinite(b.epsilon) and b.epsilon > 0):
                raise ConfigError(f"release config: marginals.{name}.epsilon must be a positive number. Found {b.epsilon}.")
            if not (0 < b.delta < 1):
                raise ConfigError(f"release config: marginals.{name}.delta must be in (0, 1). Found {b.delta}.")
        if self.bin_minutes <= 0 or 1440 % self.bin_minutes:
            raise ConfigError(f"release config: bin_minutes must divide 1440. Found {self.bin_minutes}.")
        if self.unit_of_privacy != "trip":
            raise ConfigError(f"release config: unit_of_privacy must be 'trip'. Found {self.unit_of_privacy!r}.")
        unknown = sorted(set(self.modes) - set(KNOWN_MODES))
        if unknown or not self.modes:
            raise ConfigError(f"release config: modes must be a non-empty subset of {list(KNOWN_MODES)}. Found {unknown}.")

    @property
    def partition_epsilon(self) -> float:
        """Basic composition of the six marginals, summed exactly (``1+1+1+1+2+2 = 8``)."""
        return float(sum(exact_fraction(b.epsilon) for b in self.budgets.values()))

    @property
    def partition_delta(self) -> float:
        """``6 × 1/8,000,000 = 7.5e-7`` exactly, not ``7.499999999999999e-07``."""
        return float(sum(exact_fraction(b.delta) for b in self.budgets.values()))

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
            "quality": {"quarantine_limit": self.quality.quarantine_limit,
                        "max_trip_minutes": self.quality.max_trip_minutes,
                        "min_rows": self.quality.min_rows, "max_rows": self.quality.max_rows},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "release config") -> "ReleaseConfig":
        if not isinstance(data, dict) or not isinstance(data.get("release"), dict):
            raise ConfigError(f"{source}: expected a top-level 'release:' mapping")
        r = data["release"]
        known = {"bin_minutes", "unit_of_privacy", "modes", "marginals", "quality"}
        if set(r) - known:
            raise ConfigError(f"{source}: unknown keys {sorted(set(r) - known)}")
        try:
            budgets = {name: MarginalBudget(float(v["epsilon"]), float(v["delta"]))
                       for name, v in (r.get("marginals") or {}).items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{source}: every marginal needs numeric 'epsilon' and 'delta' ({exc})") from None
        q = r.get("quality") or {}
        if set(q) - {"quarantine_limit", "max_trip_minutes", "min_rows", "max_rows"}:
            raise ConfigError(f"{source}: unknown quality keys {sorted(set(q) - set(QualityPolicy.__dataclass_fields__))}")
        try:
            quality = QualityPolicy(**{k: (float(v) if k == "quarantine_limit" else int(v)) for k, v in q.items()})
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{source}: quality values must be numbers ({exc.__class__.__name__})") from None
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        try:
            return cls(budgets=budgets, quality=quality,
                       bin_minutes=int(r.get("bin_minutes", 15)),
                       unit_of_privacy=str(r.get("unit_of_privacy", "trip")),
                       modes=tuple(r.get("modes", KNOWN_MODES)))
        except ConfigError as exc:
            raise ConfigError(str(exc).replace("release config", source, 1)) from None


def default_file(name: str) -> Path:
    """A file shipped in ``transit_release/defaults/``."""
    return Path(str(resources.files("transit_release") / "defaults" / name))


def read_yaml(path: Path, what: str):
    """Parse a YAML file, or raise :class:`ConfigError` naming ``what`` and the file."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{what} {path}: file not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} {path}: not valid YAML ({exc.__class__.__name__})") from None


def default_config_path() -> Path:
    return default_file("opal_release.yaml")


def load_release_config(path: str | Path | None = None) -> ReleaseConfig:
    path = Path(path) if path is not None else default_config_path()
    return ReleaseConfig.from_dict(read_yaml(path, "release config"), source=f"release config {path}")
