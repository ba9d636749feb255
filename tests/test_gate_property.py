"""Property: random corruptions of a valid file never reach a published table.

The pipeline is the flow's own tasks, called through ``task.fn`` in the flow's
order (no Prefect server needed), from reading the file to the validated
release tables. A run either stops with a typed error, or publishes tables in
which no corrupted value appears.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from transit_release.errors import TransitReleaseError
from transit_release.files.home import Home
from transit_release.noise import NoiseSource

COLUMNS = ["card_id", "mode", "tap_on_time", "tap_on_stop", "tap_off_time", "tap_off_stop"]
POISON = {
    "card_id": ["-424242", "abc424242", "4.5", "", "NaN"],
    "mode": ["zzmode424242", "", "BUS", "bus "],
    "tap_on_time": ["2031-03-03 10:00:00", "2016-08-09 25:61:00", "2016-08-09T10:00:00Z", "", "yesterday"],
    "tap_on_stop": ["987654321", "-5", "", "stop424242", "1e9"],
    "tap_off_time": ["2031-03-03 11:00:00", "2016-08-01 00:00:00", "garbage424242", ""],
    "tap_off_stop": ["987654321", "-6", "x424242"],
}
MARKERS = ("424242", "2031-03-03", "20310303", "zzmode", "987654321")


#: Two days of the synthetic week: 8 partitions (each costs a fixed ~0.2 s of pandera and Great Expectations
#: whatever its size), enough for every corruption to land in a partition or out of the period.
DAYS = ("2016-08-08", "2016-08-09")


@pytest.fixture(scope="module")
def clean_input(tmp_path_factory):
    from transit_release.synth.opal_week import write_synthetic_week

    paths = write_synthetic_week(tmp_path_factory.mktemp("prop"), scale=0.0005, seed=9, show_progress=False)
    trips = pd.read_csv(paths["trips"], dtype=str, keep_default_na=False)
    on, off = trips["tap_on_time"].str[:10], trips["tap_off_time"].str[:10]
    trips = trips[on.isin(DAYS) & (off.isin(DAYS) | (off == ""))].reset_index(drop=True)
    trips.to_csv(paths["trips"], index=False)
    return paths, trips


def release_tables_of(trips_path, stops_path, home: Home):
    """The flow's steps up to the validated release tables (nothing written but the quarantine's fragments):
    the streaming pass in small batches, each partition's step, the gate, the sanitizers."""
    from tasks.config import load_config
    from tasks.ingest import ingest_stops
    from tasks.opal import assemble_tables
    from tasks.preprocess import location_index
    from tasks.stream import commit_partitions, declared_period, pair_shards, prepare_partition, stream_trips
    from tasks.validate import validate_release_tables, validate_stops
    from schemas import PartitionMarginals, marginals_frame, validate
    from transit_release.files import partition_store
    from transit_release.inputs import screening, streaming
    from transit_release.integrity.recovery import WorkDir
    from transit_release.releases import opal

    cfg = load_config.fn(None, None, None)
    stops = validate_stops.fn(ingest_stops.fn(str(stops_path)), str(stops_path))
    period = declared_period.fn(str(trips_path), *DAYS)
    work = WorkDir(home.work / "gate", "gate")
    work.pairs.mkdir(parents=True, exist_ok=True)
    old = streaming.BATCH_BYTES
    streaming.BATCH_BYTES = 1 << 16  # several batches even for this small file
    try:
        streamed = stream_trips.fn(work, str(trips_path), stops, period, cfg)
    finally:
        streaming.BATCH_BYTES = old
    work.path.mkdir(parents=True, exist_ok=True)
    index = location_index.fn(stops, cfg, work)
    staging = partition_store.staging_for(work.partitions)
    partitions = opal.partitions_of(period, cfg)
    prepared = [prepare_partition.fn(work, str(staging), m, d, cfg, index, pair_shards(period)) for m, d in partitions]
    repeats = {d.strftime("%Y%m%d"): 0 for d in period.days}
    for p in prepared:
        repeats[p.date] += p.duplicates
    screening.check_gate(streamed.tally.figures(np.array(list(repeats.values()))), cfg.quality)
    dataset = commit_partitions.fn(work, str(staging), prepared, index, cfg)
    events = opal.plan_spends(period, cfg, "gate", "fp", "test")
    outcomes = []
    for entry in dataset.partitions:
        ph = partition_store.read_partition(dataset, entry)
        validate(PartitionMarginals, marginals_frame([ph]), entry.partition)
        outcomes.append(opal.sanitize_and_evaluate(ph, cfg, events, dataset.key_space, NoiseSource(seed=1)))
    return validate_release_tables.fn(assemble_tables.fn(outcomes, dataset))


corruption = st.lists(
    st.tuples(st.integers(0, 26_000), st.sampled_from(COLUMNS), st.integers(0, 4)), min_size=1, max_size=6)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=corruption)
def test_corruptions_never_reach_a_published_table(clean_input, tmp_path, changes):
    paths, base = clean_input
    df = base.copy()
    for row, col, k in changes:
        options = POISON[col]
        df.loc[row % len(df), col] = options[k % len(options)]
    f = tmp_path / "trips.csv"
    df.to_csv(f, index=False)
    try:
        tables = release_tables_of(f, paths["stops"], Home.at(tmp_path))
    except TransitReleaseError as exc:
        event(f"refused: {type(exc).__name__}")
        return  # refused: nothing would be published
    event("published")
    for name, table in tables.items():
        text = table.to_csv(index=False)
        for marker in MARKERS:
            assert marker not in text, (name, marker)
        assert set(table["mode"]) <= {"bus", "ferry", "lightrail", "train"}
        assert set(table["date"]) <= {d.replace("-", "") for d in DAYS}
