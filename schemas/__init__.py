"""pandera contracts between the stages of a release.

raw trips → (validated) raw trips → encoded trips (no card id) → partition
histograms → release tables. Each model is ``strict`` and ``coerce``; frames
are validated lazily and failures are reported by column, check and count,
with row numbers but never values (:func:`schemas.validation.validate`).
"""

from schemas.release import LocationTable, TimeLocationTable, TimeTable, RELEASE_MODELS
from schemas.trips import EncodedTrips, RawTrips, Stops
from schemas.validation import validate

__all__ = ["RawTrips", "Stops", "EncodedTrips", "TimeTable", "LocationTable", "TimeLocationTable",
           "RELEASE_MODELS", "validate"]
