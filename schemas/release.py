"""Contracts for the published tables (the real Opal release's columns)."""

from __future__ import annotations

import numpy as np
import pandera.pandas as pa
from pandera.typing import Series

from transit_release.config import KNOWN_MODES

_TIME = r"^(-1|([01]\d|2[0-3]):[0-5]\d)$"
_DATE = r"^\d{8}$"


class _Base(pa.DataFrameModel):
    mode: Series[str] = pa.Field(isin=list(KNOWN_MODES))
    date: Series[str] = pa.Field(str_matches=_DATE)
    tap: Series[str] = pa.Field(isin=["on", "off"])

    class Config:
        strict = True
        coerce = True
        ordered = True


class TimeTable(_Base):
    time: Series[str] = pa.Field(str_matches=_TIME)
    count: Series[np.int64] = pa.Field(ge=1)


class LocationTable(_Base):
    loc: Series[str] = pa.Field(str_length={"min_value": 1})
    count: Series[np.int64] = pa.Field(ge=1)


class TimeLocationTable(_Base):
    time: Series[str] = pa.Field(str_matches=_TIME)
    loc: Series[str] = pa.Field(str_length={"min_value": 1})
    count: Series[np.int64] = pa.Field(ge=1)


RELEASE_MODELS = {"time": TimeTable, "location": LocationTable, "time-loc": TimeLocationTable}
