"""pandera contracts between the stages of a release.

trips file (columns and types, batch by batch) → a partition's clean trips (after the screen) → its encoded
rows (no card id) → partition marginals → release tables. Each model is ``strict`` and ``coerce``; frames
are validated lazily and failures are reported by column, check and count,
with row numbers but never values (:func:`schemas.validation.validate`).
"""

from schemas.release import LocationTable, TimeLocationTable, TimeTable, RELEASE_MODELS
from schemas.trips import (EncodedPartition, EncodedTrips, PartitionMarginals, PartitionTrips, RawTrips, Stops,
                           TripsFile, marginals_frame)
from schemas.validation import validate

__all__ = ["TripsFile", "RawTrips", "PartitionTrips", "EncodedPartition", "PartitionMarginals", "Stops", "EncodedTrips", "TimeTable", "LocationTable", "TimeLocationTable",
           "RELEASE_MODELS", "marginals_frame", "validate"]
