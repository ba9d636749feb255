"""transit_release: the plain library behind the transit-release tool.

Differential-privacy mechanisms, privacy accounting, preprocessing, utility
metrics and synthetic data. Nothing in this package imports Prefect or MLflow;
the orchestration lives in the top-level ``tasks`` and ``flows`` packages.
"""

from transit_release.runtime.telemetry import telemetry_off

telemetry_off()  # before any library that reports usage is imported, whatever the entry point (see telemetry)

__version__ = "0.1.0"
