"""Prefect flows: each only sequences tasks."""

from transit_release.runtime.telemetry import telemetry_off

telemetry_off()  # before Prefect sees a flow defined (its client reports that unless told not to)
