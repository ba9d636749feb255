"""The set mechanisms measured (not a test): the defaults compared, the selection rule, the thesis's experiments.

    nice -n 10 python benchmarks/experiment_sets.py --compare [--runs 3] [--records 989818]
    nice -n 10 python benchmarks/experiment_sets.py --rule [--runs 2] [--records 300000] [--sizes 8,12,17,20]
        [--epsilons 0.25,0.5,1,2]
    python benchmarks/experiment_sets.py [--runs 5] [--passengers 850000] [--opal-scale 0.2]
                                         [--opal-modes train] [--out release_reports/experiments-sets]

``--compare``: the former default (DiffPart at the fan-out rule's f) against the new default (the mechanism
:func:`~transit_release.mechanisms.set_histogram.choose_mechanism` picks from the public universe size) on the
same data, ε = 1 (and 0.5, 2): the heavy-tailed data matching MSNBC's public statistics
(:func:`~transit_release.synth.sets.heavy_tailed_sets`, 989,818 sets over 17 items; its statistics are printed
against the thesis's Table 4.2), the former MSNBC-shaped generator (:func:`~transit_release.synth.sets.
small_universe_sets`) and the synthetic metro's 68 stations. Per row, means of ``--runs`` runs: containment-query
error for 1–3 items (the headline), the thesis's five query subsets, top-100 itemsets found and the thesis's loss,
the mechanism's time.

``--rule``: both mechanisms over universes of ``--sizes`` items (heavy-tailed data of ``--records`` sets) and
``--epsilons``: which is better where (docs/sets.md's table behind the rule).

Without either, the thesis's own DiffPart experiments:

Data: the synthetic metro's passengers (each one's distinct stations, 68 stations) and the synthetic Opal
week's cards (each card's distinct tap-on/tap-off stations over the week; train by default, ``all`` for
every mode's locations). For each:

* relative count-query error vs ε ∈ {0.5, 0.75, 1, 1.25} at f = 10, for the thesis's 5 query subsets
  (lengths uniform in [1, ⌊i·max|D|/5⌋], 10,000 queries each) and for queries of up to 3 stations;
* error vs fan-out f ∈ {4, 6, 8, 10, 12} for every ε, on the subset of lengths up to 60%·max|D|
  (C1, C2 follow the fan-out by the module's expected-phantoms rule);
* top-K frequent itemsets (K = 10, 50, 100; the exact best-first search of transit_release.utility.sets) at f = 10: true positives and the
  thesis's loss, on one run per ε.

Each point is the mean of ``--runs`` runs (the thesis: 10). Writes ``results.csv`` (every run),
``table.csv`` / ``table.md`` (means), plots and ``report.html`` into ``--out``.
"""

from __future__ import annotations

import argparse
import html
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from transit_release.mechanisms.diffpart import DiffPartBudget, fanout_for, sanitize_sets  # noqa: E402
from transit_release.mechanisms.set_histogram import (SetHistogramBudget, choose_mechanism,  # noqa: E402
                                                      sanitize_set_histogram)
from transit_release.noise import NoiseSource  # noqa: E402
from transit_release.synth.sets import (MSNBC_STATISTICS, heavy_tailed_sets, metro_sets, opal_week_sets,  # noqa: E402
                                        set_statistics, small_universe_sets)
from transit_release.utility.sets import (WeightedSets, count_query_error, itemset_utility,  # noqa: E402
                                          query_workload, release_pairs)

EPSILONS = (0.5, 0.75, 1.0, 1.25)
FANOUTS = (4, 6, 8, 10, 12)
KS = (10, 50, 100)


class Dataset:
    def __init__(self, name, sets, per_subset):
        self.name = name
        self.sets = sets
        self.pairs = release_pairs(sets)
        self.weighted = WeightedSets.of(self.pairs, sets.universe_size)
        self.max_size = int(sets.sizes.max())
        self.workload = query_workload(sets.universe_size, self.max_size, per_subset=per_subset, seed=11)
        self.short = query_workload(sets.universe_size, 3, per_subset=per_subset, seed=12, max_sizes=[3])
        self.fanout_key = f"max_q{max(1, (3 * self.max_size) // 5)}"
        # why DiffPart prunes: the share of records whose exact set is shared by fewer than 10 records
        self.rare_share = sum(c for _, c in self.pairs if c < 10) / max(1, len(sets))
        # the original's answers, once
        self.truth = {id(w): [self.weighted.count(qs) for qs in w.subsets] for w in (self.workload, self.short)}


def errors(ds: Dataset, released: WeightedSets) -> dict[str, float]:
    from transit_release.utility.sets import relative_errors

    out = {}
    for w, prefix in ((ds.workload, ""), (ds.short, "upto3.")):
        for size, qs, true in zip(w.max_sizes, w.subsets, ds.truth[id(w)]):
            out[f"{prefix}max_q{size}"] = float(relative_errors(true, released.count(qs), ds.weighted.total).mean())
    return out


def run(ds: Dataset, eps: float, fanout: int, rep: int, top_k: bool) -> dict:
    budget = DiffPartBudget.of(eps, ds.sets.universe_size, fanout)
    t = time.perf_counter()
    result = sanitize_sets(ds.sets, budget, NoiseSource().stream("experiment", ds.name, str(eps), str(fanout),
                                                                 str(rep)))
    seconds = time.perf_counter() - t
    released = WeightedSets.of(result.released, ds.sets.universe_size)
    row = {"data": ds.name, "epsilon": eps, "fanout": fanout, "run": rep, "C2": float(budget.c_split),
           "C1": float(budget.c_leaf), "seconds": round(seconds, 2), "records": ds.weighted.total,
           "released_records": released.total, **{k: v for k, v in result.stats.items()}}
    row.update(errors(ds, released))
    if top_k:
        row.update(itemset_utility(ds.pairs, result.released, ds.sets.universe_size, ks=KS))
    return row


def plot_epsilon(df: pd.DataFrame, ds: Dataset, out: Path) -> str:
    sub = df[(df["data"] == ds.name) & (df["fanout"] == 10)]
    cols = [f"max_q{s}" for s in ds.workload.max_sizes] + ["upto3.max_q3"]
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for c in cols:
        g = sub.groupby("epsilon")[c].mean()
        ax.plot(g.index, g.values, marker="o", label=c.replace("max_q", "|Q| ≤ ").replace("upto3.", "(extra) "))
    ax.axhline(0.1, color="k", lw=0.6, ls=":")
    ax.set_xlabel("ε")
    ax.set_ylabel("average relative error")
    ax.set_title(f"{ds.name}: error vs ε (f = 10)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    name = f"error_vs_epsilon_{ds.name}.png"
    fig.savefig(out / name, dpi=80)
    plt.close(fig)
    return name


def plot_fanout(df: pd.DataFrame, ds: Dataset, out: Path) -> str:
    sub = df[df["data"] == ds.name]
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for eps, g in sub.groupby("epsilon"):
        m = g.groupby("fanout")[ds.fanout_key].mean()
        ax.plot(m.index, m.values, marker="o", label=f"ε = {eps:g}")
    ax.set_xlabel("fan-out f")
    ax.set_ylabel("average relative error")
    ax.set_title(f"{ds.name}: error vs fan-out (|Q| ≤ 60%·max|D| = {ds.fanout_key[5:]})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    name = f"error_vs_fanout_{ds.name}.png"
    fig.savefig(out / name, dpi=80)
    plt.close(fig)
    return name


def plot_top_k(df: pd.DataFrame, out: Path) -> str:
    sub = df.dropna(subset=[f"top{KS[0]}.tp"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, g in sub.groupby("data"):
        g = g.groupby("epsilon").mean(numeric_only=True)
        for k in KS:
            axes[0].plot(g.index, g[f"top{k}.loss"], marker="o", label=f"{name}, K = {k}")
            axes[1].plot(g.index, g[f"top{k}.tp"] / k, marker="o", label=f"{name}, K = {k}")
    axes[0].set_ylabel("utility loss (thesis)")
    axes[1].set_ylabel("TP / K")
    for ax in axes:
        ax.set_xlabel("ε")
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "top_k.png", dpi=80)
    plt.close(fig)
    return "top_k.png"


# ---- the defaults compared, and the selection rule ------------------------------------------------------------

class Scored:
    """A data set and what every mechanism's release is scored against: containment queries of 1–3 items
    (10,000, the headline), the thesis's five subsets (``per_subset`` each) and the true top-100 itemsets."""

    def __init__(self, name: str, sets, per_subset: int = 10_000, top: bool = True):
        self.name, self.sets = name, sets
        self.pairs = release_pairs(sets)
        self.weighted = WeightedSets.of(self.pairs, sets.universe_size)
        self.short = query_workload(sets.universe_size, 3, per_subset=10_000, seed=12, max_sizes=[3])
        self.thesis = query_workload(sets.universe_size, int(sets.sizes.max()), per_subset=per_subset, seed=11)
        from transit_release.utility.sets import top_k_itemsets
        self.top = top_k_itemsets(self.pairs, sets.universe_size, 100) if top else None

    def score(self, released: list) -> dict:
        from transit_release.utility.sets import top_k_itemsets
        got = WeightedSets.of(released, self.sets.universe_size)
        out = {"error_q3": count_query_error(self.weighted, got, self.short)["max_q3"]}
        out.update({f"thesis_{k}": v for k, v in count_query_error(self.weighted, got, self.thesis).items()})
        if self.top is not None:
            found = top_k_itemsets(released, self.sets.universe_size, 100)
            out["top100_found"] = len(set(self.top) & set(found))
            out["top100_loss"] = float(np.mean([abs(v - found.get(k, 0)) / v for k, v in self.top.items()]))
        return out


def release_with(mechanism: str, sets, eps: float, seed: int, fanout: int | None = None) -> tuple[list, float]:
    """One release by ``mechanism`` (``diffpart`` at ``fanout``, default the fan-out rule's) and its seconds."""
    gen = NoiseSource().stream("experiment", mechanism, str(eps), str(seed))
    t = time.perf_counter()
    if mechanism == "diffpart":
        f = fanout or fanout_for(sets.universe_size)
        released = sanitize_sets(sets, DiffPartBudget.of(eps, sets.universe_size, f), gen).released
    else:
        released = sanitize_set_histogram(sets, SetHistogramBudget.of(eps, sets.universe_size), gen).released
    return released, time.perf_counter() - t


def compare_defaults(args) -> None:
    """Former default (DiffPart, fan-out rule) against the new default (the rule's mechanism), same data."""
    import os

    heavy, visits = heavy_tailed_sets(args.records, with_visits=True)
    stats = set_statistics(heavy)
    print("heavy-tailed data against the thesis's MSNBC statistics (Table 4.2; visits: Table 6.9 / UCI):")
    print(f"  |D| {stats['records']:,} (MSNBC {MSNBC_STATISTICS['records']:,}); |I| {stats['items']} "
          f"({MSNBC_STATISTICS['items']}); max set size {stats['max_set_size']} ({MSNBC_STATISTICS['max_set_size']}); "
          f"average set size {stats['avg_set_size']:.3f} ({MSNBC_STATISTICS['avg_set_size']}); visits: average "
          f"{visits.mean():.2f} ({MSNBC_STATISTICS['avg_visits']}), longest {int(visits.max()):,} "
          f"({MSNBC_STATISTICS['max_visits']:,})")
    counts = np.array([c for _, c in release_pairs(heavy)])
    print(f"  distinct sets {counts.size:,}; records in a set shared by < 12 / < 50 records: "
          f"{counts[counts < 12].sum() / len(heavy):.1%} / {counts[counts < 50].sum() / len(heavy):.1%}", flush=True)
    data = [Scored("heavy-tailed (MSNBC statistics)", heavy), Scored("former MSNBC-shaped", small_universe_sets()),
            Scored("synthetic metro, 68 stations", metro_sets(200_000, seed=0)[0])]
    rows = []
    for ds in data:
        for eps in (1.0, 0.5, 2.0) if ds is data[0] else (1.0,):
            new = choose_mechanism(ds.sets.universe_size, eps)
            for label, mech in (("former default: diffpart, f = " + str(fanout_for(ds.sets.universe_size)),
                                 "diffpart"), (f"new default: {new}", new)):
                runs = []
                for rep in range(args.runs):
                    released, secs = release_with(mech, ds.sets, eps, rep)
                    runs.append({**ds.score(released), "seconds": secs})
                mean = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
                rows.append({"data": ds.name, "mechanism": label, "epsilon": eps, **mean})
                print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in rows[-1].items()},
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
    df = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out / "compare.csv", index=False)
    cols = ["data", "mechanism", "epsilon", "error_q3", "top100_found", "top100_loss"] + \
        [c for c in df.columns if c.startswith("thesis_")] + ["seconds"]
    print(f"\n== former default vs new default (means of {args.runs} runs) ==")
    print(df[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"))


def rule_grid(args) -> None:
    """Both mechanisms over universe sizes and ε: where is each better (the rule's table)."""
    rows = []
    for size in [int(x) for x in args.sizes.split(",")]:
        ds = Scored(f"heavy-tailed {args.records:,} × {size}", heavy_tailed_sets(args.records, size, seed=size),
                    per_subset=2_000)
        for eps in [float(x) for x in args.epsilons.split(",")]:
            for mech in ("diffpart", "set-histogram"):
                runs = []
                for rep in range(args.runs):
                    released, secs = release_with(mech, ds.sets, eps, rep)
                    runs.append({**ds.score(released), "seconds": secs})
                mean = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
                rows.append({"items": size, "epsilon": eps, "mechanism": mech,
                             "rule": mech == choose_mechanism(size, eps), **mean})
                print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in rows[-1].items()}, flush=True)
                args.out.mkdir(parents=True, exist_ok=True)
                pd.DataFrame(rows).to_csv(args.out / "rule.csv", index=False)
    df = pd.DataFrame(rows)
    for value in ("error_q3", "top100_found", "seconds"):
        print(f"\n== {value} (means of {args.runs} runs) ==")
        print(df.pivot_table(index=["items", "epsilon"], columns="mechanism", values=value).to_string(
            float_format=lambda x: f"{x:.3f}"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--compare", action="store_true", help="former default vs new default (see the docstring)")
    ap.add_argument("--rule", action="store_true", help="both mechanisms over universe sizes and ε")
    ap.add_argument("--records", type=int, default=None, help="--compare: 989818; --rule: 300000")
    ap.add_argument("--sizes", default="8,12,17,20")
    ap.add_argument("--epsilons", default="0.25,0.5,1,2")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--passengers", type=int, default=850_000)
    ap.add_argument("--opal-scale", type=float, default=0.2)
    ap.add_argument("--opal-modes", default="train", help="comma-separated modes, or 'all'")
    ap.add_argument("--queries", type=int, default=10_000, help="queries per subset")
    ap.add_argument("--out", type=Path, default=Path("release_reports/experiments-sets"))
    ap.add_argument("--replot", action="store_true", help="reuse --out/results.csv: tables, plots, report only")
    args = ap.parse_args()
    if args.compare or args.rule:
        args.runs = args.runs if "--runs" in sys.argv else (3 if args.compare else 2)
        args.records = args.records or (MSNBC_STATISTICS["records"] if args.compare else 300_000)
        compare_defaults(args) if args.compare else rule_grid(args)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    metro, _ = metro_sets(args.passengers, seed=0)
    modes = None if args.opal_modes == "all" else tuple(args.opal_modes.split(","))
    opal = opal_week_sets(args.opal_scale, seed=0, modes=modes)
    datasets = [Dataset("metro", metro, args.queries), Dataset("opal_week", opal.sets, args.queries)]
    rows = []
    for ds in datasets:
        print(f"{ds.name}: {len(ds.sets):,} sets over {ds.sets.universe_size} items, avg "
              f"{ds.sets.sizes.mean():.2f}, max {ds.max_size}, {len(ds.pairs):,} distinct", flush=True)
        for eps in EPSILONS if not args.replot else ():
            for f in FANOUTS:
                for rep in range(args.runs if f == 10 else max(1, args.runs // 2)):
                    rows.append(run(ds, eps, f, rep, top_k=(f == 10 and rep == 0)))
                    print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in rows[-1].items()
                           if not k.startswith("top") or k.endswith((".tp", ".loss"))}, flush=True)
    if args.replot:
        df = pd.read_csv(args.out / "results.csv")
    else:
        df = pd.DataFrame(rows)
        df.to_csv(args.out / "results.csv", index=False)
    keys = ["data", "fanout", "epsilon"]
    table = df.groupby(keys).mean(numeric_only=True).drop(columns=["run"]).reset_index()
    table.to_csv(args.out / "table.csv", index=False)
    err_cols = [c for c in table.columns if "max_q" in c]
    top_cols = [c for c in table.columns if c.startswith("top") and c.endswith((".tp", ".loss"))]
    main_table = table[table["fanout"] == 10][keys + ["C2", "C1", "seconds", "released_records", "records"]
                                              + err_cols + top_cols]
    try:
        md = main_table.to_markdown(index=False, floatfmt=".4g")
    except ImportError:  # pandas needs the optional 'tabulate' for Markdown
        md = main_table.to_string(index=False)
    (args.out / "table.md").write_text(md + "\n", encoding="utf-8")
    plots = []
    for ds in datasets:
        plots += [plot_epsilon(df, ds, args.out), plot_fanout(df, ds, args.out)]
    plots.append(plot_top_k(df, args.out))
    descr = "".join(f"<li>{ds.name}: {len(ds.sets):,} sets over {ds.sets.universe_size} items, average size "
                    f"{ds.sets.sizes.mean():.2f}, largest {ds.max_size}, {len(ds.pairs):,} distinct sets; "
                    f"{ds.rare_share:.1%} of the records hold a set shared by fewer than 10 records; "
                    f"query subsets {ds.workload.max_sizes}</li>" for ds in datasets)
    fmt = {"float_format": lambda x: f"{x:.4g}", "index": False}
    (args.out / "report.html").write_text(f"""<!doctype html><meta charset="utf-8">
<title>DiffPart experiments</title><h1>DiffPart (thesis ch. 4) on synthetic set data</h1>
<ul>{descr}</ul>
<p>{args.runs} runs per point at f = 10 ({max(1, args.runs // 2)} at other fan-outs); {args.queries:,} queries per
subset; relative error with sanity bound 0.1%·|D|. C1, C2 from the expected phantoms per split (data-independent).
This script run took {time.perf_counter() - t0:.0f} s.</p>
<p>DiffPart keeps a partition only if its noisy size passes a threshold, so records whose set is rare are
dropped (the error is mostly an undercount) and phantom partitions add a few sets that do not occur. The synthetic
Opal week has no card-level regularity (its cards are drawn afresh every day and tap-on/tap-off locations are
paired at random), so nearly every card's set is unique and almost nothing passes: read its rows as what DiffPart
does with unstructured data, not as a forecast for real cards.</p>
{''.join(f'<img src="{p}">' for p in plots)}
<h2>Means at f = 10</h2>{main_table.to_html(**fmt)}
<h2>All fan-outs</h2>{table.to_html(**fmt)}
<p>{html.escape(__doc__.strip().splitlines()[0])}</p>""", encoding="utf-8")
    print(main_table.to_string())
    print(f"report: {args.out / 'report.html'}")


if __name__ == "__main__":
    main()
