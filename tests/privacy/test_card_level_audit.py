"""Empirical audit of the card-level Opal release as it runs: the streamed input path, contribution bounding, the
truncated-noise SBH.

The claim (``TruncatedCardStabilityHistogramEvent``): after bounding (at most k trips per card per (mode, date)
partition, at most P partitions per card), one card changes each marginal of each partition by at most
(L0, L1, L∞) = (k, k, k), each marginal of a partition is (ε_j, δ_j)-DP for add/remove one card, and a card is in
at most P partitions, so one marginal over the whole release is (P·ε_j, P·δ_j)-DP.

Every case runs the code a card-level release runs, on a tiny trips file D and D′ = D plus one unusual card: the
streamed input path of ``flows/opal_release.py`` through its tasks' functions (:func:`tasks.stream.stream_trips`:
file contract, screen, spill by partition; :func:`tasks.stream._prepare`: duplicates, pandera contracts, the
per-partition bound k, encoding; :func:`tasks.stream.bound_partitions_per_card`: the cap P over the saved
(card, partition) pairs; :func:`tasks.stream.commit_partitions`), the histograms as the sanitizing task reads them
(:func:`transit_release.files.partition_store.read_partition_histograms`, which applies the dropped pairs), and the
sanitizer the release calls for the marginal's budget (:func:`transit_release.releases.opal.sanitizer_for`), which
:func:`test_the_audit_draws_what_the_sanitizing_task_draws` ties to the task's own per-partition call. Only the
partitions' Great Expectations suite is left out (a data check that changes nothing the mechanism computes, and
about 6 s of import).

The bounding is random (keyed priorities from the noise source), so the input path runs once for each of several
test seeds (``AuditSizes.streamed_seeds``) and each seed's histograms get an equal share of the runs. The cases
are built so that this is exact: all of the card's trips in a partition fall on one key of the watched marginal
(whichever k are kept, the same histogram), every partition of D is the same, and the events are symmetric in the
partitions (functions of the sorted vector of the watched key's released counts); so every seed's histograms give
the events the same probabilities, and the runs are independent draws of the mechanism, bounding included.
:func:`test_the_streamed_bounding_keeps_k_trips_in_p_partitions_for_every_seed` checks the histograms exactly.

Negative controls: the cap P skipped, the cap k skipped, the noise drawn without its bound, the card threshold
lowered — each through the production code (a monkeypatch of the function or property it uses) — must FAIL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
from datetime import date, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import transit_release.inputs.streaming as streaming
import transit_release.mechanisms.contribution_bounding as contribution_bounding
import transit_release.mechanisms.stability_histogram as sbh
from tasks.ingest import ingest_stops
from tasks.preprocess import location_index
from tasks.stream import _prepare, bound_partitions_per_card, commit_partitions, pair_shards, stream_trips
from tasks.validate import validate_stops
from transit_release.config import CardBounds, load_release_config
from transit_release.files import partition_store
from transit_release.inputs.screening import Period, check_gate
from transit_release.integrity.recovery import WorkDir
from transit_release.mechanisms.contribution_bounding import ContributionBounds
from transit_release.noise import TEST_SEED_ENV, DiscreteLaplaceTable, NoiseSource
from transit_release.releases import opal
from tests.privacy.audit import check, run_case

pytestmark = pytest.mark.privacy

NOT_RELEASED = -1
MARGINAL = "tap_on_time"
K, P = 2, 1  # the cases' bounds (public parameters of the release)
HEAVY_TRIPS = 5  # the added card's trips in each of its partitions, all in one 15-minute bin
BASE = 60  # riders per day at 08:00 in D
SHARED_DAYS = 3  # the card rides on P + 2 days
#: the per-marginal budgets of each case: the shared key at ε_j = 1 (tight, measurable); the key a card holds alone
#: at ε_j = 0.1 (the defaults' ε_j), where drawing the noise without its bound A is a violation (the release
#: probability P(Z ≥ A + 1) is about 9 δ_j), at a stressed δ_j so that it is measurable
SHARED = dict(epsilon=1.0, delta=1e-3)
ALONE = dict(epsilon=0.1, delta=1e-3)


# ---- the input files --------------------------------------------------------------------------------------------

STOPS = pd.DataFrame({"stop_id": list(range(100, 106)) + list(range(200, 201 + HEAVY_TRIPS)), "mode": "train",
                      "name": [f"Station {i}" for i in range(7 + HEAVY_TRIPS)], "postcode": ""})


def trip_rows(card: int, on: datetime, stop: int) -> dict:
    return {"card_id": card, "mode": "train", "tap_on_time": on.isoformat(sep=" "), "tap_on_stop": stop,
            "tap_off_time": (on + timedelta(minutes=20)).isoformat(sep=" "), "tap_off_stop": stop + 1}


def base_trips(period: Period) -> list[dict]:
    """D: on every day, ``BASE`` riders (one trip each) at 08:00."""
    return [trip_rows(1000 + 100 * d + i, datetime.combine(day, datetime.min.time()) + timedelta(hours=8),
                      100 + i % 5) for d, day in enumerate(period.days) for i in range(BASE)]


def heavy_card(days: list[date], hour: int) -> list[dict]:
    """One card with ``HEAVY_TRIPS`` trips on each of ``days``, all in the 15 minutes from ``hour``:00, told apart
    by their stops (so the bound has a choice to make, and every choice lands on the same key)."""
    return [trip_rows(7, datetime.combine(day, datetime.min.time()) + timedelta(hours=hour, minutes=3 * m), 200 + m)
            for day in days for m in range(HEAVY_TRIPS)]


def card_config(epsilon: float, delta: float):
    cfg = load_release_config(unit="card").with_overrides(epsilons=[epsilon] * 6, delta=delta)
    return dataclasses.replace(cfg, modes=("train",), bounds=CardBounds(K, P))


# ---- the streamed input path, as the flow runs it ---------------------------------------------------------------

@contextlib.contextmanager
def noise_seed(seed: int | None):
    """The tasks draw from ``NoiseSource.from_environment()``: the test seed variable, or OS entropy."""
    old = os.environ.get(TEST_SEED_ENV)
    os.environ[TEST_SEED_ENV] = "" if seed is None else str(seed)
    try:
        yield
    finally:
        if old is None:
            del os.environ[TEST_SEED_ENV]
        else:
            os.environ[TEST_SEED_ENV] = old


def streamed_dataset(folder: Path, trips: list[dict], period: Period, cfg, seed: int | None):
    """The partition dataset of a card-level release of ``trips``, through its input tasks as
    ``flows/opal_release.py`` runs them (stream, gate, prepare each partition, cap P, commit)."""
    folder.mkdir(parents=True)
    stops_path, trips_path = folder / "stops.csv", folder / "trips.csv"
    STOPS.to_csv(stops_path, index=False)
    pd.DataFrame(trips).to_csv(trips_path, index=False)
    work = WorkDir(folder / "work", "card-audit")
    work.path.mkdir()
    with noise_seed(seed):
        stops = validate_stops.fn(ingest_stops.fn(str(stops_path)), str(stops_path))
        index = location_index.fn(stops, cfg, work)
        streamed = stream_trips.fn(work, str(trips_path), stops, period, cfg)
        check_gate(streamed.tally.figures(), cfg.quality)  # the inputs are clean: nothing refused, nothing dropped
        staging = str(partition_store.staging_for(work.partitions))
        prepared = [_prepare(work, staging, m, d, cfg, index, pair_shards(period))
                    for m, d in opal.partitions_of(period, cfg)]
        bound_partitions_per_card.fn(work, staging, period, cfg, prepared)
        return commit_partitions.fn(work, staging, prepared, index, cfg)


def streamed_histograms(folder: Path, trips: list[dict], period: Period, cfg, seed: int | None) -> dict:
    """``(mode, date) → PartitionHistograms`` of every partition of the period, as the sanitizing task reads them
    from :func:`streamed_dataset` (the dropped pairs applied)."""
    dataset = streamed_dataset(folder, trips, period, cfg, seed)
    return {(m, d): partition_store.read_partition_histograms(dataset, m, d)
            for m, d in opal.partitions_of(period, cfg)}


def seeds_of(seed: int | None, n: int) -> list[int | None]:
    """The test seeds the input path runs with (OS entropy each time when the audit's seed is)."""
    return [None] * n if seed is None else [seed * 1000 + i for i in range(n)]


def watched_key(histograms: dict) -> int:
    """The one key of the watched marginal that D holds (the same in every partition)."""
    keys = {int(k) for ph in histograms.values() for k in ph.histograms[MARGINAL].keys}
    assert len(keys) == 1, keys
    return keys.pop()


# ---- runs: the release's sanitizer on each seed's histograms ----------------------------------------------------

def draw_of(per_seed: list[dict], key: int, cfg, generator: np.random.Generator):
    """``draw(n)`` → ``(n, partitions)`` released counts at ``key`` (−1: not released), each row sorted in
    descending order; successive calls take the seeds' histograms in turn (the case's chunk is runs / seeds)."""
    budget = cfg.sbh_budget(MARGINAL)
    calls = itertools.count()

    def draw(n: int) -> np.ndarray:
        histograms = per_seed[next(calls) % len(per_seed)]
        out = np.full((n, len(histograms)), NOT_RELEASED, dtype=np.int64)
        for col, part in enumerate(sorted(histograms)):
            h = histograms[part].histograms[MARGINAL]
            where = np.flatnonzero(h.keys == key)
            if h.keys.size == 0 or where.size == 0:
                continue
            res = opal.sanitizer_for(budget)(np.tile(h.counts, n), budget, generator)
            run, pos = np.divmod(res.kept, h.keys.size)
            hit = pos == where[0]
            out[run[hit], col] = res.counts[hit]
        return -np.sort(-out, axis=1)
    return draw


def audit_streamed(name: str, spec: dict, period: Period, d2_trips: list[dict], alone: bool, events: dict,
                   runs: int, seeds: int, seed: int | None, tmp: Path, control: str = ""):
    """Both sides through the input path once per test seed, then ``runs`` runs of the sanitizer a side."""
    cfg = card_config(**spec)
    per_seed = {"D": [], "D′": []}
    for i, s in enumerate(seeds_of(seed, seeds)):
        per_seed["D"].append(streamed_histograms(tmp / f"d-{i}", base_trips(period), period, cfg, s))
        per_seed["D′"].append(streamed_histograms(tmp / f"d2-{i}", base_trips(period) + d2_trips, period, cfg, s))
    key = added_key(per_seed) if alone else watched_key(per_seed["D"][0])
    budget = cfg.sbh_budget(MARGINAL)
    g = NoiseSource(seed=seed)
    result = run_case(name, "card-level release (streamed input, bounding, truncated SBH)",
                      draw_of(per_seed["D"], key, cfg, g.stream("card-level", name, "D")),
                      draw_of(per_seed["D′"], key, cfg, g.stream("card-level", name, "D′")), events, runs,
                      P * budget.epsilon, P * budget.delta, chunk=runs // seeds, control=control,
                      notes=f"k={K}, P={P}, A={budget.noise_bound}, T={budget.threshold}, {len(period.days)} days, "
                            f"{seeds} bounding seeds")
    return result, per_seed


def added_key(per_seed: dict) -> int:
    """The one key of the watched marginal that only D′ holds (the card's, alone)."""
    d = {int(k) for ph in per_seed["D"][0].values() for k in ph.histograms[MARGINAL].keys}
    d2 = {int(k) for ph in per_seed["D′"][0].values() for k in ph.histograms[MARGINAL].keys}
    (key,) = d2 - d
    return key


# ---- a heavy card on more days than P: the caps k and P -------------------------------------------------------

SHARED_PERIOD = Period(date(2016, 8, 8), date(2016, 8, 8) + timedelta(days=SHARED_DAYS - 1))


def shared_events() -> dict:
    """Symmetric in the days: "at least j days released ≥ x" around BASE (the card adds k to P days)."""
    ev = {}
    for j in range(1, SHARED_DAYS + 1):
        for x in range(BASE - 2, BASE + 2 * K + 3):
            ev[f"≥ {j} day(s) released ≥ {x}"] = lambda v, j=j, x=x: v[:, j - 1] >= x
    return ev


def shared_case(name: str, runs: int, seeds: int, seed: int | None, tmp: Path, control: str = ""):
    return audit_streamed(name, SHARED, SHARED_PERIOD, heavy_card(SHARED_PERIOD.days, 8), False, shared_events(),
                          runs, seeds, seed, tmp, control)[0]


def test_a_heavy_card_on_more_days_than_p_is_bounded_to_its_claim(audit_sizes, audit_seed, audit_report, tmp_path):
    result = shared_case(f"card-level streamed: a card with {HEAVY_TRIPS} trips a day on {SHARED_DAYS} days added "
                         f"(k = {K}, P = {P})", audit_sizes.sbh, audit_sizes.streamed_seeds, audit_seed, tmp_path)
    check(result, audit_report, "PASS", power=0.8)


def test_control_the_partitions_cap_skipped_fails(monkeypatch, audit_sizes, audit_seed, audit_report, tmp_path):
    """The streamed cap P (``streaming.bound_partitions_per_card`` → ``_choose_partitions``) keeps every pair."""
    original = contribution_bounding._choose_partitions
    monkeypatch.setattr(contribution_bounding, "_choose_partitions",
                        lambda card, part, cap, noise: original(card, part, 10**9, noise))
    result = shared_case("card-level streamed: the same, cap P skipped", audit_sizes.sbh_control,
                         audit_sizes.streamed_seeds, audit_seed, tmp_path, control="partitions-per-card cap skipped")
    check(result, audit_report, "FAIL")


def test_control_the_trips_cap_skipped_fails(monkeypatch, audit_sizes, audit_seed, audit_report, tmp_path):
    """The per-partition bound k (``streaming.bound_rows``, called by the partition step) keeps every trip."""
    original = streaming.bound_rows
    monkeypatch.setattr(streaming, "bound_rows", lambda rows, k, noise, label: original(rows, 10**9, noise, label))
    result = shared_case("card-level streamed: the same, cap k skipped", audit_sizes.sbh_control,
                         audit_sizes.streamed_seeds, audit_seed, tmp_path, control="trips-per-partition cap skipped")
    check(result, audit_report, "FAIL")


# ---- a card alone at a key: the truncated noise and the card threshold ------------------------------------------

ALONE_PERIOD = Period(date(2016, 8, 8), date(2016, 8, 8))


def alone_events(threshold: int, lowered: int) -> dict:
    ev = {"released": lambda v: v[:, 0] != NOT_RELEASED}
    for x in range(threshold - lowered - 1, threshold + 3):
        ev[f"released ≥ {x}"] = lambda v, x=x: v[:, 0] >= x
    return ev


def alone_case(name: str, runs: int, seeds: int, seed: int | None, tmp: Path, lowered: int = 0, control: str = ""):
    """D′ = D plus a card whose trips are the only ones at 03:00: the key is absent from D (never released) and
    holds the card's k kept trips in D′, which the truncated noise never lifts to the threshold A + k + 1."""
    threshold = card_config(**ALONE).sbh_budget(MARGINAL).threshold  # before a control patches the property
    return audit_streamed(name, ALONE, ALONE_PERIOD, heavy_card(ALONE_PERIOD.days, 3), True,
                          alone_events(threshold, lowered), runs, seeds, seed, tmp, control)


def test_a_card_alone_at_a_key_is_never_released(audit_sizes, audit_seed, audit_report, tmp_path):
    result, per_seed = alone_case("card-level streamed: a card's k trips alone at a key, present vs absent",
                                  audit_sizes.sbh, audit_sizes.streamed_seeds, audit_seed, tmp_path)
    check(result, audit_report, "PASS")
    # the exact claim behind it: c + Z ≤ k + A < A + k + 1, so the key is never released, whatever the runs
    released = next(b for b in result.bounds if b.event == "released" and b.direction == "D′ vs D")
    assert released.hits_num == 0, result.describe()
    key = added_key(per_seed)
    for histograms in per_seed["D′"]:
        (ph,) = histograms.values()
        assert int(ph.histograms[MARGINAL].counts[ph.histograms[MARGINAL].keys == key][0]) == K


def test_control_the_noise_drawn_beyond_its_bound_fails(monkeypatch, audit_sizes, audit_seed, audit_report, tmp_path):
    """The truncated sampler ignores its bound A (untruncated noise) while the threshold stays A + k + 1."""
    monkeypatch.setattr(DiscreteLaplaceTable, "sample_within", lambda self, generator, bound, size:
                        self.sample(generator, size))
    result, _ = alone_case("card-level streamed: the same, noise not truncated", audit_sizes.sbh_control,
                           audit_sizes.streamed_seeds, audit_seed, tmp_path, control="noise drawn beyond its bound A")
    check(result, audit_report, "FAIL")


def test_control_the_card_threshold_lowered_fails(monkeypatch, audit_sizes, audit_seed, audit_report, tmp_path):
    lowered = 4
    original = sbh.TruncatedCardLevelBudget.threshold
    monkeypatch.setattr(sbh.TruncatedCardLevelBudget, "threshold", property(lambda b: original.fget(b) - lowered))
    result, _ = alone_case(f"card-level streamed: the same, card threshold lowered by {lowered}",
                           audit_sizes.sbh_control, audit_sizes.streamed_seeds, audit_seed, tmp_path, lowered=lowered,
                           control=f"card threshold lowered by {lowered}")
    check(result, audit_report, "FAIL")


# ---- exact checks of the path the cases run ---------------------------------------------------------------------

def test_the_streamed_bounding_keeps_k_trips_in_p_partitions_for_every_seed(tmp_path):
    """D′ − D, partition by partition: the card adds exactly k trips to exactly P of its days, at the watched key,
    for every seed (so the cases' symmetric events see the same histograms whatever the bounding chose)."""
    cfg = card_config(**SHARED)
    d = streamed_histograms(tmp_path / "d", base_trips(SHARED_PERIOD), SHARED_PERIOD, cfg, 1)
    key = watched_key(d)
    chosen = set()
    for s in range(6):
        d2 = streamed_histograms(tmp_path / f"d2-{s}", base_trips(SHARED_PERIOD) + heavy_card(SHARED_PERIOD.days, 8),
                                 SHARED_PERIOD, cfg, s)
        added = {}
        for part, ph in d2.items():
            h, h0 = ph.histograms[MARGINAL], d[part].histograms[MARGINAL]
            assert list(h.keys) == list(h0.keys) == [key]
            added[part] = int(h.counts[0] - h0.counts[0])
        assert sorted(added.values(), reverse=True) == [K] * P + [0] * (SHARED_DAYS - P), added
        chosen.add(tuple(sorted(p for p, a in added.items() if a)))
    assert len(chosen) > 1  # the kept partition is a random choice, not always the same day


def test_the_audit_draws_what_the_sanitizing_task_draws(tmp_path):
    """One partition through ``tasks.sanitize._sanitize_one`` (its contract, the charge check, the sanitizer) and
    through the cases' vectorised draw, with the same noise stream: the same released histogram."""
    from tasks.sanitize import _sanitize_one

    cfg = card_config(**SHARED)
    dataset = streamed_dataset(tmp_path / "d2", base_trips(SHARED_PERIOD) + heavy_card(SHARED_PERIOD.days, 8),
                               SHARED_PERIOD, cfg, 3)
    charged = opal.plan_spends(SHARED_PERIOD, cfg, "card-audit", "fingerprint", "0")
    for mode, day in opal.partitions_of(SHARED_PERIOD, cfg):
        ph = partition_store.read_partition_histograms(dataset, mode, day)
        outcome = _sanitize_one(dataset, charged, mode, day, cfg, NoiseSource(seed=9))
        released = outcome.sanitized.released[MARGINAL]
        draw = draw_of([{(mode, day): ph}], int(ph.histograms[MARGINAL].keys[0]), cfg,
                       NoiseSource(seed=9).stream(mode, day, MARGINAL))
        value = int(draw(1)[0, 0])
        assert (released.counts.tolist() or [NOT_RELEASED]) == [value]


def test_the_in_memory_bounding_keeps_k_per_partition_and_p_partitions_whatever_the_row_order():
    """The in-memory reference of the bounding (what the streamed path is tested equal to in tests/test_streaming.py):
    the card's rows ≤ k per partition, ≤ P partitions, and the same kept rows for shuffled input (test seed)."""
    bounds = ContributionBounds(2, 3)
    rows = [trip_rows(7, datetime(2016, 8, 8 + d, h), 100 + h) for d in range(6) for h in range(5)]
    trips = pd.DataFrame(rows + base_trips(Period(date(2016, 8, 8), date(2016, 8, 8))))
    for c in ("tap_on_time", "tap_off_time"):
        trips[c] = pd.to_datetime(trips[c])
    trips["tap_off_stop"] = trips["tap_off_stop"].astype("Int64")
    kept, counts = opal.bound_card_contributions(trips, bounds, NoiseSource(seed=5))
    card = trips.loc[kept & (trips["card_id"] == 7).to_numpy()]
    per_day = card["tap_on_time"].dt.date.value_counts()
    assert per_day.max() == 2 and per_day.size == 3 and counts["cards_truncated"] == 1
    shuffled = trips.sample(frac=1, random_state=3)
    kept2, _ = opal.bound_card_contributions(shuffled, bounds, NoiseSource(seed=5))
    a = trips.loc[kept].sort_values(["card_id", "tap_on_time", "tap_on_stop"]).reset_index(drop=True)
    b = shuffled.loc[kept2].sort_values(["card_id", "tap_on_time", "tap_on_stop"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)
