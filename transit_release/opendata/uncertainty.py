"""The margins of error a release publishes beside its counts: ``uncertainty.csv`` and the data card's section.

Both are computed from the manifest alone (its noise scales, bounds and
thresholds: public parameters), with :mod:`transit_release.analysis`, so they
are the same for neighbouring inputs and cost no privacy.

One row of ``uncertainty.csv`` per noise distribution a release's counts were
drawn with (constant over the rows it names):

* Opal releases: one per marginal. The published count is the noisy count, so
  ``count ± half_width_95`` holds the true count with probability ``coverage``
  (exact, ≥ 95%).
* Station sets (DiffPart): one row. A released set's count is its leaf's noisy
  count, drawn at ε/2 or more, so the half-width at ε/2 bounds every row's
  (the interval column says "at most").
* Station sets (set histogram): one row, the noise of every set's count (scale
  1/ε); the published counts are estimated from those (rarer sets from noisy
  sums, all raked to noisy containment counts), so no interval of a published
  count is stated.
* Sequences, n-grams, trajectories (SafePath, either budget rule): one per kind
  of tree node. Their published counts are post-processed (made consistent,
  then turned into copies ending at a node), so the row states the noise each
  node's count got before that, not an interval of the published count.
* Trajectories from the factored Markov model: one row, the day-sequence
  histogram's noise; the published trajectories are drawn from noisy models
  (synthetic rows), so no interval of a published count is stated.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pandas as pd

from transit_release import analysis
from transit_release.config import marginal_numbers

UNCERTAINTY = "uncertainty.csv"
COLUMNS = ["file", "rows", "count_of", "epsilon", "noise_scale", "noise_bound", "threshold", "half_width_95",
           "coverage", "sd", "interval"]
#: Sums the data card states the half-width of (a difference of two cells is the sum of two).
OPAL_SUMS = ((2, "2 cells (or a difference)"), (7, "7 cells (a week from its days)"),
             (28, "28 cells"), (96, "96 cells (a day of 15-minute windows)"))
PUBLISHED = "published count ± half_width_95"
NODE_NOISE = "noise of each node count before consistency (published counts are post-processed: no stated coverage)"
SET_HISTOGRAM_NOISE = ("noise of each set's count before estimation (sets at or above the threshold keep theirs, "
                       "rescaled with the rest to the noisy counts of lines containing each station, pair and triple; "
                       "rarer ones are shared out from noisy sums: no stated coverage)")
MODEL_NOISE = ("noise of each day-sequence count the trajectories were drawn from (the stations and hours come from "
               "noisy n-gram models; published rows are synthetic: no stated coverage)")


def _exact(x: float) -> Fraction:
    """A manifest's float ε as the fraction it was computed as (``0.08333333333333333`` → 1/12)."""
    return Fraction(repr(float(x))).limit_denominator(10 ** 9)


def _row(file: str, rows: str, count_of: str, epsilon, scale, bound, threshold, h, coverage, sd, interval) -> dict:
    return {"file": file, "rows": rows, "count_of": count_of, "epsilon": float(epsilon), "noise_scale": str(scale),
            "noise_bound": "" if bound is None else int(bound), "threshold": int(threshold), "half_width_95": int(h),
            "coverage": round(float(coverage), 4), "sd": round(float(sd), 3), "interval": interval}


def _opal_rows(p: dict) -> list[dict]:
    rows = []
    for name, m in sorted(p["marginals"].items(), key=lambda kv: kv[1]["j"]):
        law = analysis.NoiseLaw.of(m["noise_scale"], m.get("noise_bound"))
        h, coverage, _ = analysis.half_width([law])
        tap = "on" if name.startswith("tap_on_") else "off"
        rows.append(_row(f"{m['file']}.csv", f"tap = {tap}", f"{name} (j = {m['j']})", m["epsilon"], m["noise_scale"],
                         m.get("noise_bound"), m["threshold"], h, coverage, law.sd, PUBLISHED))
    return rows


def _node_row(file: str, rows: str, count_of: str, epsilon: float, threshold, interval: str = NODE_NOISE) -> dict:
    scale = 1 / _exact(epsilon)
    h, coverage, sd = analysis.ideal_half_width(scale)
    return _row(file, rows, count_of, epsilon, scale, None, threshold, h, coverage, sd, interval)


def _tree_rows(manifest: dict) -> list[dict]:
    p = manifest["privacy"]
    mech = p.get("mechanism_id")
    if mech == "prefix-tree":
        rows = [_node_row("sequences.csv", "all rows", "station nodes of the prefix tree", p["station_epsilon"],
                          p["station_threshold"])]
        if p.get("generalized_threshold") is not None:
            rows.append(_node_row("sequences.csv", "all rows", "generalized nodes (taxonomy groups)",
                                  p["generalized_epsilon"], p["generalized_threshold"]))
        return rows
    if mech == "ngram":
        return [_row("ngrams.csv", "all rows", f"grams counted at ε = {b['epsilon_exact']}", b["epsilon"],
                     _exact(b["noise_scale"]), None, b["threshold"], *_ideal(_exact(b["noise_scale"])), NODE_NOISE)
                for b in p["node_budgets"]]
    if mech == "safepath" and p.get("budget_rule") == "joint":
        return [_node_row("trajectories.csv", "all rows", "(station, hour) pair nodes, one test per level",
                          p["level_epsilon"], p["pair_threshold"])]
    if mech == "trajectory-markov":
        return [_node_row("trajectories.csv", "all rows (drawn from the models)",
                          "day-sequence histogram cells", p["epsilon_days"], p["day_threshold"],
                          MODEL_NOISE)]
    if mech == "safepath":
        rows = []
        for which, label in (("location_taxonomy", "location"), ("time_taxonomy", "time")):
            tax = p[which]
            steps = list(zip(tax["epsilon_per_step"], tax["thresholds"]))
            for depth, (eps, threshold) in enumerate(steps, start=1):
                what = (f"{label} nodes: single {'stations' if label == 'location' else 'hours'}"
                        if depth == len(steps) else f"{label} nodes: taxonomy depth {depth}")
                rows.append(_node_row("trajectories.csv", "all rows", what, eps, threshold))
        return rows
    if mech == "set-histogram":
        return [_node_row("sets.csv", "all rows", "every possible set's count (one noisy histogram)", p["epsilon"],
                          p["head_threshold"], SET_HISTOGRAM_NOISE)]
    if mech == "diffpart":
        leaf = _exact(p["leaf_reserve_epsilon"])
        # the leaf threshold ⌈√2·C1/ε_leaf⌉ is largest at the smallest leaf budget, ε/2
        threshold = _ceil_sqrt(2 * (_exact(p["c1"]) / leaf) ** 2)
        h, coverage, sd = analysis.ideal_half_width(1 / leaf)
        return [_row("sets.csv", "all rows", "leaf counts (the released sets)", float(leaf), 1 / leaf, None,
                     threshold, h, coverage, sd,
                     "each set's noisy count ± half_width_95, at most (each leaf's noise scale is at most this one); "
                     "per count, not conditional on publication: among published rows it holds less often")]
    return []


def _ceil_sqrt(q: Fraction) -> int:
    """⌈√q⌉ exactly (as DiffPart computes its integer thresholds)."""
    c = math.ceil(q)
    return 0 if c <= 0 else math.isqrt(c - 1) + 1


def _ideal(scale: Fraction) -> tuple[int, float, float]:
    return analysis.ideal_half_width(scale)


def uncertainty_rows(manifest: dict) -> list[dict]:
    """The rows of ``uncertainty.csv`` for a release's manifest (empty for a manifest without a privacy statement
    of a known kind)."""
    p = manifest.get("privacy") or {}
    if "marginals" in p:
        return _opal_rows(p)
    return _tree_rows(manifest) if p.get("mechanism_id") else []


def uncertainty_table(manifest: dict) -> pd.DataFrame | None:
    rows = uncertainty_rows(manifest)
    if not rows:
        return None
    return pd.DataFrame(rows, columns=COLUMNS)


# ---- the data card's section ------------------------------------------------------------------------------


def _opal_section(manifest: dict) -> str:
    p = manifest["privacy"]
    rows = _opal_rows(p)
    lines = "\n".join(f"| {r['count_of'].split('(j = ')[1][:-1]} | `{r['file']}` | {r['rows']} | {r['noise_scale']} | "
                      f"{r['noise_bound'] if r['noise_bound'] != '' else '—'} | ± {r['half_width_95']} | "
                      f"{100 * r['coverage']:.1f}% | {r['sd']:g} |" for r in rows)
    distinct: dict[tuple, list[int]] = {}
    for name, m in sorted(p["marginals"].items(), key=lambda kv: kv[1]["j"]):
        distinct.setdefault((m["noise_scale"], m.get("noise_bound"), m["threshold"]), []).append(m["j"])
    sums, effects = [], []
    for (scale, bound, threshold), js in distinct.items():
        law = analysis.NoiseLaw.of(scale, bound)
        h, _, _ = analysis.half_width([law])
        cells = " | ".join(f"± {analysis.half_width([law] * k)[0]}" for k, _ in OPAL_SUMS)
        sums.append(f"| {marginal_numbers(js)} | ± {h} | {cells} |")
        points = [(threshold - h, "T − h"), (threshold - h // 2, "T − h/2"), (threshold, "T"),
                  (threshold + h, "T + h")]
        points = [(c, label) for c, label in points if c >= 1]
        if bound is not None:
            points.append((threshold + int(bound), "T + A"))
        for c, label in points:
            e = analysis.near_threshold(law, threshold, c, h)
            effects.append(f"| {marginal_numbers(js)} | {label} = {c} | {100 * e.published:.1f}% | "
                           f"+{e.mean_error:.1f} | {100 * e.coverage:.1f}% |")
    sum_head = " | ".join(label for _, label in OPAL_SUMS)
    card_level = any(m.get("noise_bound") is not None for m in p["marginals"].values())
    dropped = ("At this release's card level the noise never exceeds A.\n"
               "So a cell left out had a true count below T + A, and a cell of true count T + A or more is always "
               "published.\nA sum over published cells can miss up to T + A − 1 per cell left out." if card_level else
               "A cell's true count can be far above T and still be left out (rarely: see the table of the "
               "threshold's effects above).")
    return f"""
## Margins of error

Every published count is its true count plus integer noise from a public distribution: the noise
scale and, at the card level, the bound A below.
Its margin of error therefore follows from that distribution alone, not from the data.
With probability at least 95%, the true count lies within **± h** of the published one.
The coverage column gives the exact probability: the noise is integer-valued, so it is a little above 95%.
`uncertainty.csv` holds this table, one row per marginal.

| j | file | rows | noise scale | noise bound A | ± h (95%) | coverage | standard deviation |
| --- | --- | --- | --- | --- | --- | --- | --- |
{lines}

**Combining counts.** Each published cell got its own noise.
So the error of a sum grows like the square root of the number of cells, not in proportion.
The 95% half-width of a sum of published cells of one marginal, computed exactly from the noise
distribution, is:

| j | one cell | {sum_head} |
| --- | --- | {' | '.join('---' for _ in OPAL_SUMS)} |
{chr(10).join(sums)}

A difference of two counts has the half-width of a sum of two.
Cells of different files (e.g. `time.csv` and `location.csv`) got independent noise too.
A sum of published cells estimates the total of those cells only: cells left out by the threshold are not in it.
{dropped}

**Near the threshold T.** Only noisy counts that reach T are published.
So a published count near T is biased upward: its cell may have a true count below T that got lucky noise.
The interval ± h then holds the truth less often.
It never holds it for a true count below T − h, whose noise had to exceed h to be published.
Exactly, for this release's parameters:

| j | true count | P(published) | mean published − true, when published | ± h holds the truth, when published |
| --- | --- | --- | --- | --- |
{chr(10).join(effects)}

Read a published count below about T + h as "at most this many, likely fewer".
Far above T the threshold changes nothing.

For a sum of another number of cells, `uncertainty.csv` and `manifest.json` state each marginal's noise
scale and bound: the sum's exact distribution, and so its margin, follows from them.
"""


def _tree_section(manifest: dict) -> str:
    rows = _tree_rows(manifest)
    if not rows:
        return ""
    table = "\n".join(f"| `{r['file']}` | {r['count_of']} | {r['epsilon']:.4g} | {r['noise_scale']} | "
                      f"{r['threshold']} | ± {r['half_width_95']} |" for r in rows)
    if manifest["privacy"].get("mechanism_id") == "diffpart":
        from transit_release.mechanisms.diffpart import expected_phantom_leaves

        p = manifest["privacy"]
        phantoms = expected_phantom_leaves(p["fanout"], _exact(p["c1"]), _exact(p["epsilon"]))
        how = (f"Each set's count is the noisy count of its group, drawn with noise at scale at most "
               f"{rows[0]['noise_scale']}: for any one set, the noisy count lies within **± "
               f"{rows[0]['half_width_95']}** of the true number of passengers with that set with probability at "
               f"least 95% (a sum of k counts: about √k times that). This is a statement about each count, "
               f"published or not, **not about the published rows**: a set is published only when its noisy count "
               f"reached the threshold, which favours noise that pushed it up, so among published rows the interval "
               f"holds less often (94.6% of them in 20 runs on the synthetic metro at ε = 0.5), and counts near the "
               f"threshold are biased upward. Sets rarer than the threshold are missing. Some published rows are sets **nobody "
               f"had**: each group of sets split at the taxonomy's last level tests its {2 ** p['fanout'] - 1} "
               f"possible subsets, and on average at most **{phantoms:.3g}** of those nobody had are published per "
               f"such group (from the fan-out {p['fanout']}, C1 = {p['c1']:g} and ε = {p['epsilon']:g}; each with a "
               f"count of at least the threshold {rows[0]['threshold']}).")
    elif manifest["privacy"].get("mechanism_id") == "set-histogram":
        how = (f"Every possible set's count got noise at scale {rows[0]['noise_scale']} (within **± "
               f"{rows[0]['half_width_95']}** with probability 95%). The published counts are estimated from those "
               "noisy counts: a set at or above the threshold keeps its own, rescaled with the rest so that the "
               "numbers of lines containing each station, pair and triple of stations agree with their noisy "
               "counts; rarer sets are shared out from noisy sums over similar sets. So a published count of a "
               "frequent set is within about ± h of the truth, a rare set's is an estimate with no stated "
               "coverage, and sums over many sets (lines containing a station, a pair, a triple) are the reliable "
               "figures.")
    elif manifest["privacy"].get("mechanism_id") == "trajectory-markov":
        how = ("The published trajectories are synthetic: their number per sequence of days is the noisy day "
               "histogram above (cells below the threshold dropped), and their stations and hours are drawn from "
               "noisy n-gram models of the stations and of the hours of the day. No published row is a count of "
               "real passengers with a margin of error; aggregate patterns (frequent stations, hours, pairs) are "
               "what the release preserves.")
    else:
        how = ("The published counts are post-processed (made consistent along the tree, then turned into the "
               "copies that end at a node), so they carry these noises combined: the table says how noisy the "
               "tree's counts were, and is not an interval with a stated coverage for a published count. Counts "
               "well above the thresholds are the reliable ones.")
    return f"""
## Margins of error

Each count the mechanism drew got integer noise from a public distribution
(discrete Laplace at the scale below; computed from the manifest alone). With
probability 95% one such noise is within ± h (`uncertainty.csv` holds this table):

| file | counts | ε | noise scale | threshold | ± h (95%) |
| --- | --- | --- | --- | --- | --- |
{table}

{how}
"""


def card_section(manifest: dict) -> str:
    """The data card's "Margins of error" section for this release, with its numbers (empty if none apply)."""
    p = manifest.get("privacy") or {}
    if "marginals" in p:
        return _opal_section(manifest)
    return _tree_section(manifest) if p.get("mechanism_id") else ""
