"""How a run runs, Prefect-free: child processes and the Dask cluster's checks, warm-up imports, progress and
what the custodian's terminal alone is told, the outcome line and what of it a Prefect server may see,
one live run per release (locks), fault injection for the crash tests, and no usage telemetry."""
