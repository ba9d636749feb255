"""Reports a planner can read: metric words, natural order, the five headline figures, the report's plots."""

from __future__ import annotations

from transit_release.reports import passenger_report as pr


def test_numbers_inside_keys_sort_by_value():
    keys = ["count_query.relative_error.max_q10", "count_query.relative_error.max_q5",
            "count_query.relative_error.max_q12", "patterns.top100.tp", "patterns.top20.tp"]
    assert sorted(keys, key=pr.natural_key) == ["count_query.relative_error.max_q5",
                                                "count_query.relative_error.max_q10",
                                                "count_query.relative_error.max_q12", "patterns.top20.tp",
                                                "patterns.top100.tp"]


def test_every_metric_of_every_kind_has_words_and_a_sentence():
    keys = {"trajectories": ["trajectories.input", "trajectories.released", "trajectories.distinct_released",
                             "tree.nodes", "records.share_released", "points.top100.relative_error",
                             "ordered_pairs.top100.relative_error", "lengths.total_variation",
                             "count_query.relative_error.max_q2", "nonempty_query.relative_error.max_q2",
                             "patterns.top100.tp", "patterns.top100.fp", "patterns.top100.fd", "pairs.top100.tp",
                             "pairs.top100.fp"],
            "sequences": ["sequences.input", "sequences.released", "prefixes.released", "grams.top100.relative_error",
                          "gram_query.relative_error.max_q4", "grams.top20.tp", "grams.top20.loss"],
            "sets": ["sets.input", "sets.released", "sets.distinct_released", "itemsets.top100.relative_error",
                     "sizes.total_variation", "itemsets.top10.tp", "itemsets.top10.loss",
                     "itemsets.top10.loss_share"]}
    for kind, names in keys.items():
        for key in names:
            words, sentence = pr.describe(key, kind)
            assert words != key and sentence.endswith(".") and "_" not in words, (kind, key)
    assert pr.describe("count_query.relative_error.max_q1", "sets")[0] == "count queries of up to 1 station: error"
    assert pr.describe("count_query.relative_error.max_q12", "trajectories")[0] == \
        "count queries of up to 12 points: error"
    assert pr.describe("something.new", "sets") == ("something.new", "")


def test_two_figures_never_share_a_name():
    """The finding: five rows of the ngram report all read "frequent runs of stations: count loss"."""
    for kind, prefix in (("sequences", "grams"), ("sets", "itemsets")):
        keys = [f"{prefix}.top{k}.{what}" for k in (20, 40, 100) for what in ("tp", "loss", "relative_error")]
        if kind == "sets":
            keys += [f"itemsets.top{k}.loss_share" for k in (20, 40)]
        names = [pr.describe(key, kind)[0] for key in keys]
        assert len(set(names)) == len(names), names
    assert pr.describe("grams.top40.loss", "sequences")[0] == "frequent runs of stations: count loss (top 40)"


def test_five_headline_figures_in_plain_words():
    metrics = {"trajectories.input": 300000.0, "trajectories.released": 299914.0, "records.share_released": 0.2823,
               "points.top100.relative_error": 0.0803, "ordered_pairs.top100.relative_error": 0.1969}
    lines = pr.headline("trajectories", metrics, 1.0)
    assert lines == [("trajectories in", "300,000"), ("trajectories released", "299,914"),
                     ("passengers whose exact trajectory is released", "28.2%"),
                     ("error of the 100 most frequent queries",
                      "points 8.0%, ordered pairs 19.7% (mean relative error)"),
                     ("privacy", "ε = 1 per passenger's trajectory over the period")]
    assert pr.headline("sets", {}, 2.0)[3] == ("error of the 100 most frequent queries", "not measured")


def test_the_report_names_every_figure_in_words_and_draws_the_plots(tmp_path):
    manifest = {"release_id": "sets-x", "kind": "sets", "product": "station sets",
                "period": {"start": "2026-01-01", "end": "2026-01-31"}, "universe": {"locations": 68},
                "files": {"sets.csv": {"rows": 3}},
                "privacy": {"epsilon": 1.0, "delta": 1e-14, "unit_of_privacy": "passenger-set",
                            "neighbouring_relation": "add or remove one", "mechanism": "DiffPart"}}
    metrics = {"count_query.relative_error.max_q10": 0.2, "count_query.relative_error.max_q5": 0.1,
               "sets.input": 10.0, "sets.released": 9.0, "itemsets.top100.relative_error": 0.05}
    figures = {"top_patterns.true": [10, 8, 5], "top_patterns.released": [9, 8, 6], "lengths.true": [0, 0.5, 0.5],
               "lengths.released": [0, 0.6, 0.4]}
    page = pr.write_report(tmp_path, manifest, metrics, {}, None, figures).read_text()
    assert "count_query" not in page and "In five figures" in page
    assert page.index("up to 5 stations") < page.index("up to 10 stations")
    for image in ("released_vs_true.png", "lengths.png", "error_by_query_size.png"):
        assert (tmp_path / image).exists() and image in page


def test_the_terminal_marks_the_figures_computed_from_the_true_records_internal(capsys):
    """#40: "trajectories in: 300,000" is a true input size: the terminal says it is an internal figure (it is never
    in releases/), as it says of the true-record error and share; the released count and ε are the release's."""
    from transit_release.cli.printing import print_summary

    metrics = {"trajectories.input": 300000.0, "trajectories.released": 299914.0, "records.share_released": 0.2823}
    print_summary({"release_id": "t", "status": "published", "period": "x", "epsilon": 1.0, "delta": 1e-12,
                   "unit_of_privacy": "passenger-trajectory", "neighbouring": "add or remove one", "rows": {},
                   "kind": "trajectories", "metrics": metrics, "release_dir": "r", "report": "p", "mlflow_ui": "m"})
    out = capsys.readouterr().out
    assert "  trajectories in: 300,000 (internal figure)\n" in out
    assert "  passengers whose exact trajectory is released: 28.2% (internal figure)\n" in out
    assert "  trajectories released: 299,914\n" in out
    assert "  error of the 100 most frequent queries: not measured\n" in out
