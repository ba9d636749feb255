"""pandera contracts between the stages of a release.

trips file (columns and types, batch by batch) → a partition's clean trips (after the screen) → its encoded
rows (no card id) → partition marginals → release tables. Each model is ``strict`` and ``coerce``; frames
are validated lazily and failures are reported by column, check and count,
with row numbers but never values (:func:`schemas.validation.validate`).
"""

import sys
import types

if "pandera.typing.dask" not in sys.modules:
    # The contracts validate pandas frames only. pandera imports dask.dataframe the first time it builds a schema
    # when dask is installed (to know Dask's frame types): 1 to 2 s of a refusal that should come at once (#39). It
    # is told dask is not there, for its typing only; the Dask task runner and workers are unaffected.
    _no_dask = types.ModuleType("pandera.typing.dask", "pandera's Dask types, not used by these contracts")
    _no_dask.DASK_INSTALLED = False
    sys.modules["pandera.typing.dask"] = _no_dask

from schemas.release import LocationTable, TimeLocationTable, TimeTable, RELEASE_MODELS
from schemas.trips import (EncodedPartition, EncodedTrips, PartitionMarginals, PartitionTrips, RawTrips, Stops,
                           TripsFile, marginals_frame)
from schemas.validation import validate

__all__ = ["TripsFile", "RawTrips", "PartitionTrips", "EncodedPartition", "PartitionMarginals", "Stops", "EncodedTrips", "TimeTable", "LocationTable", "TimeLocationTable",
           "RELEASE_MODELS", "marginals_frame", "validate"]
