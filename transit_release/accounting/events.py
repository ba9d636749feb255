"""Privacy spends as immutable, serialisable events.

An event *describes* one mechanism run; it does not judge it. The accountant
(:mod:`transit_release.accounting.accountant`) interprets events, the ledger
(:mod:`transit_release.accounting.ledger`) records them. Never change what a
field means: add a new event class instead.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar


class _Serialisable:
    """Flat JSON for the ledger and MLflow; the round trip is :func:`event_from_dict`."""

    kind: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-ready mapping, ``kind`` first."""
        return {"kind": self.kind, **asdict(self)}

    def to_json(self) -> str:
        """Canonical JSON (sorted keys, no spaces): what the ledger hashes."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


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

    @property
    def partition(self) -> str:
        """The disjoint slice of the data this spend touches, e.g. ``bus/20160808``."""
        return f"{self.mode}/{self.date}"

    @property
    def component(self) -> str:
        """Which part of the release the spend paid for (the marginal)."""
        return self.marginal


@dataclass(frozen=True)
class PrefixTreeEvent(_Serialisable):
    """One noisy (hybrid-granularity) prefix tree over a data set of passenger sequences.

    Noise: discrete Laplace on every node count, scale ``h/ε`` split between the
    generalized and station sub-levels (``variant``, ``fanout``); ε-DP, with
    ``delta`` the sampler's exact total-variation slack.
    Neighbouring relation: ``add-remove-one`` passenger sequence.
    ``scope`` names the data set (e.g. ``metro/20160808-20160814``): releases of
    the same scope compose sequentially.
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

    @property
    def partition(self) -> str:
        return self.scope

    @property
    def mode(self) -> str:
        return self.scope.split("/", 1)[0]

    @property
    def component(self) -> str:
        return "prefix_tree"


EVENT_TYPES: dict[str, type] = {StabilityHistogramEvent.kind: StabilityHistogramEvent,
                                PrefixTreeEvent.kind: PrefixTreeEvent}


def event_from_dict(data: dict[str, Any]):
    """Inverse of ``to_dict``; unknown kinds or fields are an error, not ignored."""
    data = dict(data)
    kind = data.pop("kind", None)
    if kind not in EVENT_TYPES:
        raise ValueError(f"unknown privacy event kind {kind!r}; known: {sorted(EVENT_TYPES)}")
    cls = EVENT_TYPES[kind]
    names = {f.name for f in fields(cls)}
    extra = set(data) - names
    missing = names - set(data)
    if extra or missing:
        raise ValueError(f"{kind} event: unexpected fields {sorted(extra)}, missing fields {sorted(missing)}")
    return cls(**data)


def event_from_json(text: str):
    return event_from_dict(json.loads(text))
