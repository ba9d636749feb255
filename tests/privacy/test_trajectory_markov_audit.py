"""Empirical audit of the factored Markov model of trajectories (``trajectory_markov.sanitize_markov``), with
negative controls.

The claim (``releases/trajectories.py``: ``plan_spend``'s :class:`TrajectoryMarkovEvent`): ε-DP per passenger
under add/remove of one whole trajectory of the week, composed of ``ε_d = ε/10`` on the day histogram and
``ε_s = ε_t = 9ε/20`` on the station and hour-of-day n-gram models; δ the samplers' slack. Each case writes a
tiny data set D (a few passengers over 4 stations, ``h = 1``) and ``D′ = D + one passenger`` as
``station@hour`` files, reads them back against a public universe with the library's reader, builds the setup as
a release does (``releases.trajectories.trajectory_setup``) and runs the production sanitizer many times.

* Tight case (the day histogram): the number of released trajectories on each day sequence is the histogram's
  kept noisy count, so events on it bound ``ε_d`` alone: with D holding ``θ_d − 1`` Monday passengers and D′ one
  more, "at least ``θ_d + j`` Monday trajectories" has probability ratio ``e^{ε_d}``. The case claims ``ε_d``
  (the whole release's ε bounds it from above; this marginal must meet its own share).
* Whole-release case: a passenger at a station nobody else uses, events on the released trajectories, claimed ε.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import transit_release.mechanisms.ngram as ngram
import transit_release.mechanisms.trajectory_markov as tm
from tests.privacy.audit import OneStream, per_run, run_case
from tests.privacy.test_prefix_tree_audit import check
from tests.privacy.test_safepath_audit import public_universe, read, universe_from_data, write_trajectories
from transit_release.noise import NoiseSource
from transit_release.releases import trajectories as trajectory_release

pytestmark = pytest.mark.privacy

EPSILON = 20.0  # ε_d = 2: the day histogram's tight events are well resolved in CI's runs
HEIGHT = 1


def setup_of(universe, epsilon=EPSILON):
    return trajectory_release.trajectory_setup(universe, epsilon, HEIGHT, mechanism="markov")


def markov_draw(data, setup, generator):
    """``draw(n)`` → ``n`` whole runs of the production sanitizer, each ``{trajectory on names: copies}``."""
    ids = data.universe.ids

    def draw(n: int) -> list:
        return [{tuple(f"{ids[x]}@{t}" for x, t in traj): c
                 for traj, c in tm.sanitize_markov(data.trajectories, setup.budget, generator).released}
                for _ in range(n)]

    return draw


def noise(seed, case, side):
    return NoiseSource(seed=seed).stream("privacy-audit", "trajectory-markov", case, side)


def on_monday(out: dict) -> int:
    return sum(c for traj, c in out.items() if all(int(tok.rpartition("@")[2]) < 24 for tok in traj))


#: D: no Monday passenger (θ_d = ⌈ln 7/2⌉ = 1), others on Tuesday and Wednesday; D′ adds one on Monday.
DAYS = dict(passenger="S1@8", d=["S2@30"] * 5 + ["S3@60", "S2@33"])
#: D′ adds a passenger at a station nobody in D uses.
UNIQUE = dict(passenger="S4@100", d=["S1@8"] * 4 + ["S2@30"] * 3 + ["S3@60"] * 5)


def markov_case(name, spec, runs, seed, tmp, events, claimed, universe_of=None, control="", epsilon=EPSILON):
    d_path = write_trajectories(tmp / "d.txt", spec["d"])
    d2_path = write_trajectories(tmp / "d2.txt", [*spec["d"], spec["passenger"]])
    public = public_universe(tmp)
    u_d, u_d2 = (universe_of(p) for p in (d_path, d2_path)) if universe_of else (public, public)
    d, d2 = read(d_path, u_d), read(d2_path, u_d2)
    setup_d, setup_d2 = setup_of(u_d, epsilon), setup_of(u_d2, epsilon)
    delta = tm.delta_slack(setup_d.budget)  # what the release charges
    return run_case(name, "trajectory Markov", markov_draw(d, setup_d, noise(seed, name, "D")),
                    markov_draw(d2, setup_d2, noise(seed, name, "D′")), events, runs, claimed, delta, chunk=200,
                    control=control, notes=f"h={HEIGHT}, ε_d={float(setup_d.budget.day_epsilon):g}, "
                                           f"|D|={len(d.trajectories)}")


def day_case(runs, seed, tmp, control=""):
    assert setup_of(public_universe(tmp)).budget.day_threshold == 1, "the case's data were built for θ_d = 1"
    events = {f"≥ {k} Monday trajectories": per_run(lambda out, k=k: on_monday(out) >= k) for k in (1, 2, 3)}
    eps_d = EPSILON / 10
    return markov_case(f"trajectory Markov: a passenger on a day sequence at θ_d−1, ε_d={eps_d:g} (ε={EPSILON:g})",
                       DAYS, runs, seed, tmp, events, eps_d, control=control)


def station_events(station: str) -> dict:
    return {f"{station} anywhere in the release": per_run(lambda out: any(tok.startswith(f"{station}@")
                                                                          for traj in out for tok in traj)),
            f"≥ 2 trajectories at {station}": per_run(lambda out: sum(c for traj, c in out.items()
                                                                      if any(tok.startswith(f"{station}@")
                                                                             for tok in traj)) >= 2)}


@pytest.mark.slow
def test_a_passenger_on_a_day_sequence_at_the_threshold(tmp_path, audit_sizes, audit_seed, audit_report):
    check(day_case(audit_sizes.tree_control, audit_seed, tmp_path), audit_report, "PASS", power=0.6)


@pytest.mark.slow
def test_a_passenger_at_a_unique_station_with_a_public_universe(tmp_path, audit_sizes, audit_seed, audit_report):
    result = markov_case(f"trajectory Markov: a passenger at a station nobody uses, ε={EPSILON:g}", UNIQUE,
                         audit_sizes.tree_control // 2, audit_seed, tmp_path, station_events("S4"), EPSILON)
    check(result, audit_report, "PASS")


def test_control_day_histogram_noise_halved_fails(monkeypatch, tmp_path, audit_sizes, audit_seed, audit_report):
    """The day histogram's table at scale/2 (the n-gram models untouched); thresholds and the claim unchanged."""
    original = tm.discrete_laplace_table
    monkeypatch.setattr(tm, "discrete_laplace_table", lambda scale: original(scale / 2))
    result = day_case(400, audit_seed, tmp_path, control="day histogram noise at scale/2")
    check(result, audit_report, "FAIL")


def test_control_universe_from_the_data_fails(tmp_path, audit_sizes, audit_seed, audit_report):
    """With the universe read off the data, D's universe lacks the passenger's station: it can only appear from
    D′ (at ε = 2, where a few hundred runs can refute the claim)."""
    result = markov_case("trajectory Markov: a passenger at a station nobody uses (universe from the data), ε=2",
                         UNIQUE, 600, audit_seed, tmp_path, station_events("S4"), 2.0,
                         universe_of=lambda p: universe_from_data(p, tmp_path),
                         control="universe from the data (the stations found in the file)", epsilon=2.0)
    check(result, audit_report, "FAIL")
    assert result.worst.hits_den == 0


def test_runs_are_deterministic_with_a_seed(tmp_path):
    path = write_trajectories(tmp_path / "d.txt", DAYS["d"])
    u = public_universe(tmp_path)
    d = read(path, u)
    setup = setup_of(u)
    assert setup.budget.path_spend() == EPSILON
    a = markov_draw(d, setup, noise(1, "x", "D"))(10)
    assert a == markov_draw(d, setup, noise(1, "x", "D"))(10) and any(a)
    assert np.mean([on_monday(x) for x in a]) < 1  # D has no Monday passenger


# ---- each n-gram model against its own share (#40: their noise halved went unnoticed) -------------------------------
#
# The day case above watches ε_d; a passenger at an unused station watches the whole release, where the n-gram
# models' shares are diluted by the generation. These watch each model's own noisy counts (the models the
# trajectories are drawn from, :class:`~transit_release.mechanisms.trajectory_markov.MarkovModel`): a passenger repeats, at h = 2 points, a station (or an hour
# of the day) nobody in D has. Its level-1 count moves by h, drawn at the model's level-1 budget ε_s/nmax with
# scale ℓmax/(ε_s/nmax), ℓmax = h + 1 (``NGramBudget``'s documented noise): "that count ≥ k" has probability ratio
# exactly e^{h·ε_s/(nmax·ℓmax)} for k ≥ h, the claim of the case, taken from the event the release charges (its
# ε_stations, ε_hours, max_gram and height), never from the budget objects a regression would change with the noise.

H2 = 2
#: The passenger repeats, at two points, a station (S4) and an hour of the day (3 am, on Monday and Tuesday) nobody in
#: D has: one case watches both models (their shares are equal: ε_s = ε_t = 9ε/20).
PASSENGER_REPEATING = "S4@3 S4@27"
MODELS = {"stations": (3, "epsilon_stations"), "hours": (3, "epsilon_hours")}  # (the repeated symbol, the share)


def release_models(data, setup, generator):
    """One run of the trajectory release's own ``sanitize`` (releases/trajectories.py: what the task calls), and the
    noisy models the Markov mechanism drew for it (observed, not changed: the call goes through unaltered)."""
    seen = []
    original = tm.sanitize_markov

    def observed(*args, **kwargs):
        out = original(*args, **kwargs)
        seen.append(out.models)
        return out

    tm.sanitize_markov = observed
    try:
        trajectory_release.sanitize(data.trajectories, setup, OneStream(generator), "privacy-audit")
    finally:
        tm.sanitize_markov = original
    (models,) = seen
    return models


def share_claims(setup) -> dict[str, float]:
    """Each model's level-1 share the event charges, for a count the passenger moves by ``H2``."""
    from datetime import date

    from transit_release.inputs.screening import Period

    event = trajectory_release.plan_spend("audit", Period(date(2026, 1, 5), date(2026, 1, 11)), setup, "f", "0")
    return {model: getattr(event, share) / event.max_gram * H2 / (event.height + 1)
            for model, (_, share) in MODELS.items()}


def repeat_case(runs: int, seed, tmp, control=""):
    d_lines = UNIQUE["d"]
    d_path = write_trajectories(tmp / "d.txt", d_lines)
    d2_path = write_trajectories(tmp / "d2.txt", [*d_lines, PASSENGER_REPEATING])
    public = public_universe(tmp)
    d, d2 = read(d_path, public), read(d2_path, public)
    setup = trajectory_release.trajectory_setup(public, EPSILON, H2, mechanism="markov")
    claims = share_claims(setup)
    assert len(set(claims.values())) == 1, "one case claims one ε: the two shares must be equal"
    claimed = claims["stations"]
    name = "trajectory Markov: a passenger repeating an unusual station and hour, against each model's share"

    def draw_of(data, side):
        gen = noise(seed, name, side)

        def draw(n: int) -> np.ndarray:
            out = []
            for _ in range(n):
                models = release_models(data, setup, gen)
                out.append([int(getattr(models, tree).levels[0].noisy[symbol])
                            for tree, (symbol, _) in MODELS.items()])
            return np.asarray(out, dtype=np.int64).reshape(n, len(MODELS))
        return draw

    events = {f"{tree}: its level-1 count ≥ {k}": (lambda batch, i=i, k=k: batch[:, i] >= k)
              for i, tree in enumerate(MODELS) for k in (1, 2, 3, 4)}
    return run_case(f"{name}, ε={EPSILON:g} (share {claimed:g})", "trajectory Markov", draw_of(d, "D"),
                    draw_of(d2, "D′"), events, runs, claimed, tm.delta_slack(setup.budget), chunk=250,
                    control=control, notes=f"h={H2}, nmax={setup.budget.max_gram}, passenger {PASSENGER_REPEATING}")


@pytest.mark.slow
def test_a_passenger_repeating_an_unusual_station_and_hour_against_each_models_share(tmp_path, audit_sizes,
                                                                                    audit_seed, audit_report):
    check(repeat_case(audit_sizes.share, audit_seed, tmp_path), audit_report, "PASS", power=0.6)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_control_one_ngram_models_noise_halved_fails(model, monkeypatch, tmp_path, audit_sizes, audit_seed,
                                                     audit_report):
    """One model's n-gram budget at 2ε (its noise halved; the other model and the day histogram untouched); the
    claim unchanged."""
    which = {"stations": "station_budget", "hours": "hour_budget"}[model]
    original = getattr(tm.MarkovBudget, which)

    def doubled(self):
        b = original(self)
        return ngram.NGramBudget.of(2 * b.epsilon, b.max_length, b.max_gram, b.n_locations)

    monkeypatch.setattr(tm.MarkovBudget, which, doubled)
    check(repeat_case(200, audit_seed, tmp_path, control=f"the {model} model's noise halved"), audit_report, "FAIL")


def test_the_release_draws_the_models_through_the_mechanism(tmp_path):
    """What the cases observe is what the release draws: ``releases.trajectories.sanitize`` calls
    ``trajectory_markov.sanitize_markov`` with the setup's budget, once."""
    d = read(write_trajectories(tmp_path / "d.txt", UNIQUE["d"]), public_universe(tmp_path))
    setup = trajectory_release.trajectory_setup(d.universe, EPSILON, H2, mechanism="markov")
    a = release_models(d, setup, noise(3, "x", "D"))
    b = tm.sanitize_markov(d.trajectories, setup.budget, noise(3, "x", "D")).models
    assert np.array_equal(a.day_counts, b.day_counts)
    assert np.array_equal(a.stations.levels[0].noisy, b.stations.levels[0].noisy)
    assert share_claims(setup) == {"stations": pytest.approx(2.0), "hours": pytest.approx(2.0)}
