"""Scale-out: the partition dataset, the cluster checks, and the sanitization on Dask
(a local cluster of 2 workers, and an existing scheduler) or without a cluster (workers=0)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.dataset as pads
import pyarrow.feather as feather
import pytest

from tests.conftest import WEEK, WEEK_PERIOD

from transit_release.config import load_release_config
from transit_release.errors import ClusterError, ConfigError
from transit_release.files.home import Home
from transit_release.files.partition_store import (PartitionStoreError, read_partition, remove_dataset,
                                             write_dataset)
from transit_release.preprocessing import build_location_index, encode_trips, partition_histograms

MODES = ("bus", "ferry", "lightrail", "train")


@pytest.fixture(scope="module")
def encoded(small_week):
    from transit_release.inputs.tables import read_stops, read_trips

    return encode_trips(read_trips(small_week["trips"]),
                        build_location_index(read_stops(small_week["stops"]), MODES), 15)


def test_dataset_round_trip_equals_the_in_memory_histograms(encoded, tmp_path):
    ds = write_dataset(encoded, tmp_path / "rid" / "partitions")
    in_memory = partition_histograms(encoded)
    assert [(e.mode, e.date, e.n_trips) for e in ds.partitions] == [(p.mode, p.date, p.n_trips) for p in in_memory]
    assert len(ds.partitions) == 28
    for entry, expected in zip(ds.partitions, in_memory):
        got = read_partition(ds, entry)
        for name, h in expected.histograms.items():
            np.testing.assert_array_equal(got.histograms[name].keys, h.keys)
            np.testing.assert_array_equal(got.histograms[name].counts, h.counts)
    # a standard hive-partitioned Arrow dataset: any reader sees the whole period, no identifier
    whole = pads.dataset(ds.root, format="feather", partitioning="hive").to_table()
    assert whole.num_rows == len(encoded.frame)
    assert set(whole.column_names) == {"on_bin", "off_bin", "on_loc", "off_loc", "kept", "mode", "date"}
    assert sorted(p.name for p in (tmp_path / "rid").iterdir()) == ["partitions"]  # no staging left behind


def test_rewriting_replaces_the_dataset_whole_and_removal_cleans_up(encoded, tmp_path):
    root = tmp_path / "rid" / "partitions"
    write_dataset(encoded, root)
    (root / "stale.parquet").write_bytes(b"left by a failed attempt")
    ds = write_dataset(encoded, root)
    assert not (root / "stale.parquet").exists()
    assert len(list(root.rglob("*.arrow"))) == len(ds.partitions)
    remove_dataset(root)
    assert not (tmp_path / "rid").exists()


def test_a_damaged_partition_file_is_refused_by_name(encoded, tmp_path):
    ds = write_dataset(encoded, tmp_path / "partitions")
    first, second, third = ds.partitions[:3]
    (ds.root / first.relative_path).write_bytes(b"not parquet")
    with pytest.raises(PartitionStoreError, match=f"partition {first.partition}: cannot read .*ArrowInvalid"):
        read_partition(ds, first)
    (ds.root / second.relative_path).unlink()
    with pytest.raises(PartitionStoreError, match=f"partition {second.partition}: cannot read .*FileNotFound"):
        read_partition(ds, second)
    path = ds.root / third.relative_path
    feather.write_feather(feather.read_table(path).slice(0, 10), path)
    with pytest.raises(PartitionStoreError) as info:
        read_partition(ds, third)
    assert str(info.value) == (f"partition {third.partition}: {path} does not hold the rows that were written "
                               "(a different number)")  # no true count in the message


def test_scale_out_settings_are_checked():
    from transit_release.runtime.cluster import check_workers_setting

    with pytest.raises(ConfigError, match="at least 0 \\(0: no cluster, .*; got -1\\)"):
        check_workers_setting(-1, None)
    check_workers_setting(0, None)  # no cluster: in the flow's process
    with pytest.raises(ConfigError, match="either a Dask scheduler address or a number of local workers"):
        check_workers_setting(2, "tcp://127.0.0.1:8786")
    check_workers_setting(None, None)


def test_a_forked_worker_takes_the_flows_environment_exactly(monkeypatch):
    """Workers are forked from a forkserver started earlier: a variable the flow has since removed (a test's noise
    seed) must not survive in the worker, and the flow's current values must win."""
    import os

    from flows.scale_out import _warm_up
    from transit_release.noise import TEST_SEED_ENV, NoiseSource

    flow_env = {k: v for k, v in os.environ.items() if k != TEST_SEED_ENV}
    flow_env["TRANSIT_RELEASE_PROBE"] = "flow"
    monkeypatch.setattr("prefect.context.refresh_global_settings_context", lambda: None)  # not this process's
    monkeypatch.setenv(TEST_SEED_ENV, "1")  # what the forkserver inherited
    monkeypatch.setenv("TRANSIT_RELEASE_PROBE", "forkserver")
    _warm_up(flow_env)
    assert TEST_SEED_ENV not in os.environ and os.environ["TRANSIT_RELEASE_PROBE"] == "flow"
    assert NoiseSource.from_environment().kind == "os-entropy"


def _worker_view() -> tuple[str, str | None, str]:
    import os

    from prefect.settings import get_current_settings

    from transit_release.noise import TEST_SEED_ENV

    return (str(get_current_settings().api.url), os.environ.get(TEST_SEED_ENV), os.environ["TRANSIT_RELEASE_PROBE"],
            os.environ.get("MLFLOW_DISABLE_TELEMETRY"))


def test_a_forked_worker_reads_prefects_settings_from_the_flows_environment(monkeypatch):
    """The forkserver imported Prefect, which read its settings then; a worker forked from it for this release
    must use this release's API (and environment), not the one the forkserver saw; so must a worker Dask's
    nanny starts again (after its worker died)."""
    from distributed import Client

    from flows.scale_out import ReleaseCluster, prewarm_workers
    from transit_release.noise import TEST_SEED_ENV

    monkeypatch.setenv(TEST_SEED_ENV, "1")
    monkeypatch.setenv("TRANSIT_RELEASE_PROBE", "forkserver")
    prewarm_workers()  # a no-op if this process's forkserver already runs (it then has another environment)
    monkeypatch.delenv(TEST_SEED_ENV)
    monkeypatch.setenv("TRANSIT_RELEASE_PROBE", "flow")
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    cluster = ReleaseCluster(None, 2)
    try:
        with Client(cluster.address(), set_as_default=False) as client:
            views = set(client.run(_worker_view).values())
            client.restart()  # new worker processes, forked from the forkserver again
            again = set(client.run(_worker_view).values())
    finally:
        cluster.close()
    assert views == again == {("http://127.0.0.1:9/api", None, "flow", "true")}


def test_probe_refuses_an_unreachable_scheduler_and_blind_workers(tmp_path):
    from distributed import LocalCluster

    from flows.deployments import free_port
    from transit_release.runtime.cluster import probe_scheduler

    address = f"tcp://127.0.0.1:{free_port()}"
    with pytest.raises(ClusterError, match=f"cannot reach the Dask scheduler at {address}.*nothing was spent"):
        probe_scheduler(address, tmp_path, timeout=2)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        assert probe_scheduler(cluster.scheduler_address, tmp_path) == 2
        worker = next(iter(cluster.workers.values())).address  # a worker's address given for the scheduler's
        with pytest.raises(ClusterError, match=f"cannot reach the Dask scheduler at {worker} \\(another kind of "
                                               "Dask server answers there, e.g. a worker"):
            probe_scheduler(worker, tmp_path, timeout=5)
        with pytest.raises(ClusterError, match="2 of 2 Dask workers cannot see .*a file system every worker mounts"):
            probe_scheduler(cluster.scheduler_address, tmp_path / "elsewhere")


def _spends(home: Home) -> list:
    from transit_release.accounting.ledger import Ledger
    from transit_release.accounting.ledger_chain import SPEND

    return [e.event() for e in Ledger(home.ledger).entries() if e.entry_type == SPEND]


def _mlflow_run(home: Home, release_id: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=home.mlflow_uri)
    exp = client.get_experiment_by_name("transit-release")
    (run,) = [r for r in client.search_runs([exp.experiment_id], f"tags.release_id = '{release_id}'")
              if "mlflow.parentRunId" not in r.data.tags]
    return run


def assert_published_equals_library(home: Home, rid: str, enc, cfg, seed: int) -> None:
    """The published tables equal what the plain library computes in one process from ``enc`` with ``seed``."""
    from transit_release.noise import NoiseSource
    from transit_release.preprocessing import key_space
    from transit_release.releases.opal import release_tables, sanitize_partition

    noise = NoiseSource(seed=seed)
    expected = release_tables([sanitize_partition(p, cfg, noise) for p in partition_histograms(enc)],
                              key_space(enc), enc.vocab, cfg.bin_minutes)
    for name, table in expected.items():
        published = pd.read_csv(home.release_dir(rid) / f"{name}.csv", dtype=str, keep_default_na=False)
        pd.testing.assert_frame_equal(published.astype({"count": np.int64}), table, check_dtype=False)


@pytest.mark.flow
def test_two_local_workers_give_the_single_process_release_and_charge_once(prefect_harness, small_week, tmp_path,
                                                                           test_seed, trip_policy):
    """The flow on a local Dask cluster of 2 workers publishes exactly what the plain library computes in one
    process with the same (test) seed: the partition dataset and the workers change nothing but where the
    work happens. Each of the 168 spends is on the ledger once. Trip level (the paper's), where the plain
    library's computation is a few lines; the card level runs through the same partition steps."""
    from flows.opal_release import opal_release
    from schemas import Stops, validate
    from transit_release.inputs.tables import read_stops, read_trips

    home = Home.at(tmp_path)
    summary = opal_release(trips=str(small_week["trips"]), stops=str(small_week["stops"]), home=str(tmp_path), **WEEK,
                           workers=2, unit="trip", policy=trip_policy)
    rid = summary["release_id"]
    assert summary["status"] == "published"

    cfg = load_release_config()
    stops = validate(Stops, read_stops(small_week["stops"]), "stops")  # as the flow reads them
    enc = encode_trips(read_trips(small_week["trips"]), build_location_index(stops, MODES), cfg.bin_minutes)
    assert_published_equals_library(home, rid, enc, cfg, test_seed)

    keys = [(e.mode, e.date, e.marginal) for e in _spends(home) if e.release_id == rid]
    assert len(keys) == len(set(keys)) == 6 * 28
    run = _mlflow_run(home, rid)
    assert run.data.params["sanitize.processes"] == "2"
    assert run.data.params["prepare.processes"] == "2"  # the partition steps (validation included) on the workers
    assert run.data.tags["sanitize.runner"] == "local-dask 2 workers"
    assert run.data.params["ledger.spends"] == "168"
    assert not home.work.exists() or not any(home.work.iterdir())  # the per-trip files are gone once published


@pytest.mark.flow
@pytest.mark.long  # the flows' own process is every other flow test's path
def test_no_cluster_gives_the_same_release_in_the_flows_process(prefect_harness, small_week, tmp_path, test_seed,
                                                                monkeypatch, trip_policy):
    """``workers=0``: no Dask cluster (and no forkserver); the partition steps run in the flow's process and
    publish exactly what the plain library (and so the cluster, above) computes with the same (test) seed."""
    import distributed

    from flows import scale_out
    from flows.opal_release import opal_release

    def refuse(*args, **kwargs):
        raise AssertionError("workers=0 started a cluster or a forkserver")

    monkeypatch.setattr(scale_out, "prewarm_workers", refuse)
    monkeypatch.setattr(distributed, "LocalCluster", refuse)
    from schemas import Stops, validate
    from transit_release.inputs.tables import read_stops, read_trips

    home = Home.at(tmp_path)
    summary = opal_release(trips=str(small_week["trips"]), stops=str(small_week["stops"]), home=str(tmp_path), **WEEK,
                           workers=0, unit="trip", policy=trip_policy)
    rid = summary["release_id"]
    cfg = load_release_config()
    stops = validate(Stops, read_stops(small_week["stops"]), "stops")
    enc = encode_trips(read_trips(small_week["trips"]), build_location_index(stops, MODES), cfg.bin_minutes)
    assert_published_equals_library(home, rid, enc, cfg, test_seed)
    run = _mlflow_run(home, rid)
    assert run.data.tags["sanitize.runner"] == "in-process"
    assert run.data.params["sanitize.processes"] == run.data.params["prepare.processes"] == "1"


@pytest.mark.flow
def test_release_on_an_existing_scheduler(prefect_harness, small_week, tmp_path):
    from distributed import LocalCluster
    from prefect.settings import PREFECT_API_URL

    from flows.opal_release import opal_release

    env = {"PREFECT_API_URL": PREFECT_API_URL.value()}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, env=env) as cluster:
        summary = opal_release(trips=str(small_week["trips"]), stops=str(small_week["stops"]), home=str(tmp_path), **WEEK,
                               dask_address=cluster.scheduler_address)
    run = _mlflow_run(Home.at(tmp_path), summary["release_id"])
    assert summary["status"] == "published"
    assert run.data.tags["sanitize.runner"] == f"dask-scheduler {cluster.scheduler_address}"
    assert run.data.params["sanitize.processes"] == "2"
    assert run.data.params["prepare.processes"] == "2"


@pytest.mark.flow
def test_an_unreachable_scheduler_is_refused_before_any_spend(prefect_harness, small_week, tmp_path, monkeypatch):
    from flows.deployments import free_port
    from flows.opal_release import opal_release

    monkeypatch.setattr("transit_release.runtime.cluster.CONNECT_TIMEOUT_S", 3)  # nothing listens: no need to wait 20 s
    address = f"tcp://127.0.0.1:{free_port()}"
    with pytest.raises(ClusterError, match=f"cannot reach the Dask scheduler at {address}"):
        opal_release(trips=str(small_week["trips"]), stops=str(small_week["stops"]), home=str(tmp_path), **WEEK,
                     dask_address=address)
    home = Home.at(tmp_path)
    assert _spends(home) == []
    assert not home.releases.exists() or not any(home.releases.iterdir())


def test_a_sanitizer_refuses_without_its_charges_and_mixed_noise_sources_are_refused(encoded, tmp_path):
    from transit_release.releases import opal
    from transit_release.errors import NoiseSourceMismatchError
    from transit_release.noise import NoiseSource

    cfg = load_release_config()
    ds = write_dataset(encoded, tmp_path / "partitions")
    events = opal.plan_spends(WEEK_PERIOD, cfg, "rid", "fp", "test")
    first, second = (read_partition(ds, e) for e in ds.partitions[:2])
    missing = [e for e in events if not (e.mode == first.mode and e.date == first.date and e.marginal == "tap_off_time")]
    with pytest.raises(RuntimeError, match=f"no ledger charge for {first.partition} tap_off_time"):
        opal.sanitize_and_evaluate(first, cfg, missing, ds.key_space, NoiseSource(seed=1))
    a = opal.sanitize_and_evaluate(first, cfg, events, ds.key_space, NoiseSource(seed=1))
    b = opal.sanitize_and_evaluate(second, cfg, events, ds.key_space, NoiseSource())
    assert opal.noise_kind([a]) == "test-seed" and opal.noise_kind([b]) == "os-entropy"
    with pytest.raises(NoiseSourceMismatchError, match="different noise sources \\(os-entropy, test-seed\\)"):
        opal.noise_kind([a, b])


@pytest.mark.flow
def test_card_level_streamed_on_two_workers_equals_the_in_memory_path(prefect_harness, small_week, tmp_path,
                                                                      test_seed):
    """Card level: the streamed input, bounded partition by partition on the workers and then across partitions
    in the flow, publishes exactly what the whole-frame library path (screen, bound every card at once, encode,
    sanitize) computes with the same (test) seed."""
    from flows.opal_release import opal_release
    from schemas import Stops, TripsFile, validate
    from transit_release.inputs import screening
    from transit_release.inputs.tables import read_stops, read_trips
    from transit_release.mechanisms.contribution_bounding import ContributionBounds
    from transit_release.noise import NoiseSource
    from transit_release.releases.opal import bound_card_contributions

    home = Home.at(tmp_path)
    summary = opal_release(trips=str(small_week["trips"]), stops=str(small_week["stops"]), home=str(tmp_path), **WEEK,
                           workers=2, unit="card")
    rid = summary["release_id"]
    cfg = load_release_config(unit="card")
    stops = validate(Stops, read_stops(small_week["stops"]), "stops")
    period = WEEK_PERIOD
    clean = screening.screen_trips(validate(TripsFile, read_trips(small_week["trips"]), "trips"), stops, period,
                                   cfg.quality, MODES).clean
    bounds = ContributionBounds(cfg.bounds.max_trips_per_partition, cfg.bounds.max_partitions)
    kept, counts = bound_card_contributions(clean, bounds, NoiseSource(seed=test_seed), period, MODES)
    assert counts["rows_dropped"] > 0  # the bound did something
    enc = encode_trips(clean, build_location_index(stops, MODES), cfg.bin_minutes, kept)
    assert_published_equals_library(home, rid, enc, cfg, test_seed)
    assert summary["quarantine"]["bounding"] == counts  # the internal figures agree too


def test_the_default_is_a_local_cluster_only_on_a_machine_with_spare_cores(monkeypatch):
    """Without ``--workers``: 2 local workers with at least 4 usable cores; none (in the flow's process) on fewer,
    where workers would only compete with the flow and Prefect's server for the same cores. Asked for, as asked."""
    from transit_release.runtime import cluster

    for cores, expected in ((1, 0), (2, 0), (3, 0), (4, 2), (64, 2)):
        monkeypatch.setattr(cluster, "usable_cores", lambda cores=cores: cores)
        assert cluster.local_workers(None) == expected
        assert cluster.local_workers(0) == 0 and cluster.local_workers(3) == 3
