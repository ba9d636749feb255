"""Contracts for the input stages: raw trips, the stop table, encoded trips."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series
from typing import Optional

from transit_release.config import KNOWN_MODES
from transit_release.inputs.text import (BLANK_CHECK, INVISIBLE_CHECK, LOOKALIKE_CHECK, UNKNOWN_MARK_CHECK,
                                         invisible_characters, name_skeleton, normalised_names)
from transit_release.preprocessing import UNKNOWN


class TripsFile(pa.DataFrameModel):
    """File-level contract: exactly these columns, each coercible to its type (values may be missing;
    missing or wrong values are row-level problems for the screen)."""

    card_id: Series[pd.Int64Dtype] = pa.Field(nullable=True)
    mode: Series[pd.StringDtype] = pa.Field(nullable=True)
    tap_on_time: Series[pa.DateTime] = pa.Field(nullable=True)
    tap_on_stop: Series[pd.Int64Dtype] = pa.Field(nullable=True)
    tap_off_time: Series[pa.DateTime] = pa.Field(nullable=True)
    tap_off_stop: Series[pd.Int64Dtype] = pa.Field(nullable=True)

    class Config:
        strict = True
        coerce = True
        ordered = False


class RawTrips(pa.DataFrameModel):
    """Clean trips (after the screen): one row = one trip of one card, the unit of privacy."""

    card_id: Series[np.int64] = pa.Field(ge=0)
    mode: Series[str] = pa.Field(isin=list(KNOWN_MODES))
    tap_on_time: Series[pa.DateTime] = pa.Field()
    tap_on_stop: Series[np.int64] = pa.Field(ge=0)
    tap_off_time: Series[pa.DateTime] = pa.Field(nullable=True)
    tap_off_stop: Series[pd.Int64Dtype] = pa.Field(nullable=True, ge=0)

    @pa.dataframe_check(error="tap-off before tap-on")
    def tap_off_not_before_tap_on(cls, df: pd.DataFrame) -> Series[bool]:
        return df["tap_off_time"].isna() | (df["tap_off_time"] >= df["tap_on_time"])

    @pa.dataframe_check(error="tap-off time and stop must be both present or both missing")
    def tap_off_complete(cls, df: pd.DataFrame) -> Series[bool]:
        return df["tap_off_time"].isna() == df["tap_off_stop"].isna()

    class Config:
        strict = True
        coerce = True


def _as_looks(name: pd.Series, looks) -> pd.Series:
    """Each name as it looks (``looks`` of the present names; a missing name stays missing, compared as unequal)."""
    given = name.dropna().astype(str)
    return pd.Series(looks(given.tolist()), index=given.index, dtype=object).reindex(name.index)


class Stops(pa.DataFrameModel):
    """The stop table: stop id → mode, name and (bus stops) postcode. A name is published as a location, so it
    must mean one thing and show what it holds (:mod:`transit_release.inputs.text`)."""

    stop_id: Series[np.int64] = pa.Field(ge=0, unique=True)
    mode: Series[str] = pa.Field(isin=list(KNOWN_MODES))
    name: Series[str] = pa.Field(nullable=True)
    postcode: Series[pd.Int64Dtype] = pa.Field(nullable=True, ge=0, le=9999)

    @pa.check("name", error=UNKNOWN_MARK_CHECK.format(mark=UNKNOWN))
    def name_not_the_unknown_mark(cls, name: Series[str]) -> Series[bool]:
        # also as it looks: a full-width '-１', or '‐1' with a hyphen (U+2010), reads as '-1'
        return _as_looks(name, normalised_names) != UNKNOWN

    @pa.check("name", error=BLANK_CHECK)
    def name_not_blank(cls, name: Series[str]) -> Series[bool]:
        return _as_looks(name, normalised_names) != ""

    @pa.check("name", error=LOOKALIKE_CHECK)
    def names_do_not_look_alike(cls, name: Series[str]) -> Series[bool]:
        given = name.dropna().astype(str)
        names = given.tolist()  # a list: iterating an Arrow-backed column costs microseconds a name
        looks = [name_skeleton(n) for n in names]
        first: dict[str, str] = {}
        twins = {look for look, n in zip(looks, names) if first.setdefault(look, n) != n}
        alone = pd.Series([look not in twins for look in looks], index=given.index, dtype=bool)
        return alone.reindex(name.index, fill_value=True)

    @pa.check("name", error=INVISIBLE_CHECK)
    def name_shows_what_it_holds(cls, name: Series[str]) -> Series[bool]:
        return ~name.astype("string").str.contains(invisible_characters(), regex=True).fillna(False).astype(bool)

    class Config:
        strict = True
        coerce = True


class PartitionMarginals(pa.DataFrameModel):
    """The histograms of all partitions in long form: only present points, positive counts."""

    partition: Series[str] = pa.Field(str_matches=r"^(bus|ferry|lightrail|train)/\d{8}$")
    marginal: Series[str] = pa.Field(isin=["tap_on_time", "tap_on_location", "tap_off_time", "tap_off_location",
                                            "tap_on_time_location", "tap_off_time_location"])
    key: Series[np.int64] = pa.Field(ge=0)
    count: Series[np.int64] = pa.Field(ge=1)

    @pa.dataframe_check(error="a key appears twice in one histogram")
    def keys_unique(cls, df: pd.DataFrame) -> Series[bool]:
        return ~df.duplicated(["partition", "marginal", "key"], keep=False)

    class Config:
        strict = True
        coerce = True


class EncodedTrips(pa.DataFrameModel):
    """Trips after preprocessing: partition index, time bins, location codes; no identifier."""

    part: Series[np.int32] = pa.Field(ge=0)
    on_bin: Series[np.int16] = pa.Field(ge=-1)
    off_bin: Series[np.int16] = pa.Field(ge=-1)
    on_loc: Series[np.int32] = pa.Field(ge=-1)
    off_loc: Series[np.int32] = pa.Field(ge=-1)
    kept: Series[bool] = pa.Field()  # survived contribution bounding (card level; always true at the trip level)

    class Config:
        strict = True
        coerce = True


_NAT = np.iinfo(np.int64).min


class PartitionTrips(pa.DataFrameModel):
    """A partition's clean trips as the streaming pass spills them (integers; times in nanoseconds, a missing
    tap-off as the int64 minimum and stop -1), after its duplicates: one row = one trip of one card."""

    row: Series[np.int64] = pa.Field(ge=0)
    card: Series[np.int64] = pa.Field(ge=0)
    on_ns: Series[np.int64] = pa.Field(gt=_NAT)
    on_stop: Series[np.int64] = pa.Field(ge=0)
    off_ns: Series[np.int64] = pa.Field()
    off_stop: Series[np.int64] = pa.Field(ge=-1)

    @pa.check("row", error="row numbers not in file order (each row once)")
    def row_in_file_order(cls, row: Series[np.int64]) -> Series[bool]:
        """Stronger than unique, and a tenth of its cost (a comparison with the previous row, not a hash table):
        the pass spills a partition's rows in file order."""
        v = row.to_numpy()
        ok = np.ones(v.size, dtype=bool)
        ok[1:] = v[1:] > v[:-1]
        return pd.Series(ok, index=row.index)

    @pa.dataframe_check(error="tap-off time and stop must be both present or both missing")
    def tap_off_complete(cls, df: pd.DataFrame) -> Series[bool]:
        return (df["off_ns"] == _NAT) == (df["off_stop"] == -1)

    @pa.dataframe_check(error="tap-off before tap-on")
    def tap_off_not_before_tap_on(cls, df: pd.DataFrame) -> Series[bool]:
        return (df["off_ns"] == _NAT) | (df["off_ns"] >= df["on_ns"])

    class Config:
        strict = True
        coerce = False


class EncodedPartition(pa.DataFrameModel):
    """One stored partition's rows: time bins, location codes, the bound's flag (and, streamed at the card
    level, the row's pair index); no identifier."""

    on_bin: Series[np.int16] = pa.Field(ge=-1)
    off_bin: Series[np.int16] = pa.Field(ge=-1)
    on_loc: Series[np.int32] = pa.Field(ge=-1)
    off_loc: Series[np.int32] = pa.Field(ge=-1)
    kept: Series[bool] = pa.Field()
    pair: Optional[Series[np.int32]] = pa.Field(ge=0)

    class Config:
        strict = True
        coerce = False


def marginals_frame(partitions: list) -> pd.DataFrame:
    """Partitions' histograms as one long frame (partition, marginal, key, count) for :class:`PartitionMarginals`."""
    hists = [(p.partition, name, h) for p in partitions for name, h in p.histograms.items()]
    return pd.DataFrame({
        "partition": np.concatenate([np.full(h.keys.size, part, dtype=object) for part, _, h in hists]
                                    or [np.zeros(0, object)]),
        "marginal": np.concatenate([np.full(h.keys.size, name, dtype=object) for _, name, h in hists]
                                   or [np.zeros(0, object)]),
        "key": np.concatenate([h.keys for _, _, h in hists] or [np.zeros(0, np.int64)]),
        "count": np.concatenate([h.counts for _, _, h in hists] or [np.zeros(0, np.int64)]),
    })
