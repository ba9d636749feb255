"""What the commands print: plain lines that never wrap a command or cut a column. Writes to standard output
only; reads nothing but the dictionaries and values it is given (and imports the formatting helpers it needs)."""

from __future__ import annotations

import json

from transit_release.home import Home


def input_line(quarantine: dict) -> str:
    """A dry run's input figures in words: ``27,312 rows read; 3 set aside (0.01%): 2 unknown_stop, 1 …``."""
    q = dict(quarantine)
    if "rows" not in q:  # a passenger kind's counts: quarantined records by reason
        counts = sorted((reason, n) for reason, n in q.items() if isinstance(n, int) and n)
        return ("set aside: " + ", ".join(f"{n:,} {reason}" for reason, n in counts)) if counts else "none set aside"
    out = f"{q['rows']:,} rows read; "
    if not q.get("quarantined"):
        return out + "none set aside"
    reasons = ", ".join(f"{n:,} {reason}" for reason, n in sorted(q.get("by_reason", {}).items()))
    return out + f"{q['quarantined']:,} set aside ({100 * q.get('quarantined_share', 0):.2f}%): {reasons}"


def print_summary(summary: dict) -> None:
    """A release's summary (published, already published, or a dry run's spends and verdict)."""
    if "spends" in summary:  # a dry run
        print(f"Release {summary['release_id']}: {summary['status']}")
        print(f"  period: {summary['period']}" + ("" if summary["period_declared"] else
                                                 "  (suggested by the tap-on dates: declare it to publish)"))
        if summary.get("quarantine"):
            print(f"  input: {input_line(summary['quarantine'])}")
        print(f"  spends: {summary['events']} event(s)")
        for s in summary["spends"]:
            print(f"    {s['unit_of_privacy']} {s['scope']}: ε={s['epsilon']:g}, δ={s['delta']:.3g}")
        print("  budget policy: " + ("allows it" if summary["allowed"] else f"REFUSES it: {summary['reason']}"))
        return
    print(f"Release {summary['release_id']}: {summary['status']}")
    for warning in summary.get("warnings", []):
        print(f"  warning: {warning}")
    print(f"  period: {summary['period']}")
    print(f"  privacy: (ε={summary['epsilon']:g}, δ={summary['delta']:.3g})-DP per {summary['unit_of_privacy']} "
          f"({summary['neighbouring']})")
    person = summary.get("person")
    if person:
        from transit_release.releases.loss_statement import rounded_up

        pld = (f"; PLD ε={rounded_up(person['pld']['epsilon'], 4)} at δ={rounded_up(person['pld']['delta'], 3)}"
               if person["pld"] else "")
        figures = (f"ε={rounded_up(person['basic']['epsilon'], 4)}, δ={rounded_up(person['basic']['delta'], 3)}"
                   f"{pld}")
        print(f"  a passenger of population '{person['population']}' at publication: "
              + (figures if person["bounded"] else
                 "UNBOUNDED (trip-level release(s) " + ", ".join(u["release_id"] for u in person["unbounded_by"])
                 + f"); with no trip in their periods: {figures}") + f" over {person['releases']} release(s)")
    if summary.get("cumulative"):
        c = summary["cumulative"]
        print(f"  per {summary['unit_of_privacy']} at publication: ε={c['epsilon']:g}, δ={c['delta']:.3g} over "
              f"{c['releases']} release(s)")
    bounding = (summary.get("quarantine") or {}).get("bounding")
    if bounding:
        print(f"  contribution bounding: {bounding['rows_kept']:,} of {bounding['rows_in']:,} trips kept "
              f"(internal figure)")
    for f, n in summary["rows"].items():
        print(f"  {f}: {n:,} rows")
    if summary.get("thresholds"):
        print("  thresholds: " + ", ".join(f"{k}={v}" for k, v in summary["thresholds"].items()))
    if summary.get("metrics"):
        from transit_release.passenger_report import headline

        for label, value in headline(summary.get("kind", ""), summary["metrics"], summary["epsilon"]):
            # figures computed from the true records are for the custodian: never published
            internal = label.endswith(" in") or label.startswith(("passengers whose", "error of"))
            print(f"  {label}: {value}" + (" (internal figure)" if internal and value != "not measured" else ""))
    print(f"  release: {summary['release_dir']}")
    if summary.get("noise_source") == "test-seed":
        print("  (made with the test-only noise seed: kept under private/test-releases/, never published)")
    print(f"  report: {summary['report']}")
    if summary.get("mlflow_run_id"):
        print(f"  MLflow run: {summary['mlflow_run_id']}")
    print("Open the MLflow UI on it:")
    print(f"  {summary['mlflow_ui']}")


def print_audit(result: dict) -> None:
    """The audit's verdict, what it found and the cumulative privacy loss."""
    print(f"Privacy audit {'PASSED' if result['ok'] else 'FAILED'}: {result['entries']} ledger entries, "
          f"{len(result['releases_published'])} published release(s)")
    for d in result["discrepancies"]:
        print(f"  discrepancy: {d}")
    for rid, n in result["charged_not_published"].items():
        print(f"  charged, not published: {rid} ({n} spends, counted)")
    for rid in result.get("pending_publications", []):
        print(f"  interrupted publication: {rid} (run `transit-release repair`)")
    for x in result.get("staging_leftovers", []) + result.get("leftovers", []):
        print(f"  left behind by a run that stopped: {x}")
    if result.get("leftovers") or result.get("staging_leftovers"):
        print("  remove them with: transit-release repair --home <home>")
    for t in result.get("threat_model", []):
        print(f"  note: {t}")
    if result.get("card_unbounded_periods"):
        print("  per card: unbounded over " + ", ".join(result["card_unbounded_periods"]) + " (trip-level releases put "
              "no bound on a card's trips)")
    from transit_release.audit import PERSON, unit_losses

    if result.get("populations"):
        print("Populations (declared in the budget policy, or named on the ledger):")
        for p in result["populations"]:
            first = f"first named by {p['first_release']}" if p["first_release"] else "no release yet"
            about = p["covers"] if p["declared"] else "NOT DECLARED in the budget policy"
            print(f"  {p['name']}: {about}; {first}, {p['releases']} release(s)")
    for population, person in result["loss"].get(PERSON, {}).items():
        print(f"Cumulative privacy loss of one passenger of population '{population}' ({person['releases']} "
              "release(s), every kind; a passenger is one card: someone who uses m cards can lose up to m times "
              "as much):")
        for u in person["unbounded_by"]:
            print(f"  UNBOUNDED: trip-level release {u['release_id']} covers {u['period']} (it bounds a trip, not a "
                  "passenger)")
        where = "  for a passenger with no trip in those periods: " if person["unbounded_by"] else "  "
        line = f"{where}basic composition: ε={person['basic']['epsilon']:.4g}, δ={person['basic']['delta']:.3g}"
        if person["pld"]:
            line += f"; PLD: ε={person['pld']['epsilon']:.4g} at δ={person['pld']['delta']:.3g}"
        print(line)
        for kind, share in person["per_kind"].items():
            basic = share["basic"]
            print(f"  {kind}: {len(share['releases'])} release(s), "
                  + ("unbounded" if basic is None else f"ε={basic['epsilon']:.4g}, δ={basic['delta']:.3g}"))
    for unit, loss in unit_losses(result["loss"]).items():
        print(f"Cumulative privacy loss per {unit} ({loss['neighbouring']}):")
        line = f"  basic composition: ε={loss['basic']['epsilon']:g}, δ={loss['basic']['delta']:.3g}"
        if loss.get("pld"):
            line += f"; PLD: ε={loss['pld']['epsilon']:.4g} at δ={loss['pld']['delta']:.3g}"
        if loss.get("advanced"):
            line += f"; advanced composition: ε={loss['advanced']['epsilon']:.4g}, δ={loss['advanced']['delta']:.3g}"
        print(line)
        year = loss.get("year_projection")
        if year:
            print(f"  {year['releases']} weekly releases like {year['like_release']} would cost a card: basic "
                  f"ε={year['basic']['epsilon']:g} (δ={year['basic']['delta']:.3g}); PLD ε={year['pld']['epsilon']:.4g} "
                  f"at δ={year['pld']['delta']:.3g}")
        for mode, x in loss["per_mode"].items():
            print(f"  mode {mode}: ε={x['epsilon']:g}, δ={x['delta']:.3g}")
        for part, x in loss["per_partition"].items():
            print(f"  {part}: ε={x['epsilon']:g}, δ={x['delta']:.3g}, {x['spends']} spend(s)")
    print(f"report: {result['report']}")


def print_budget(home: Home, policy, entries: list, as_json: bool) -> None:
    """Spent and remaining under each cap of ``policy`` over the ledger's ``entries``."""
    status = policy.status(entries)
    if as_json:  # one row per cap and scope spent in; a cap with nothing spent: one row, scope null
        rows = []
        for cap in policy.caps:
            mine = [s for s in status if s.cap == cap]
            about = {"cap": cap.name, "unit_of_privacy": cap.unit_of_privacy, "per": cap.per, "period": cap.period,
                     **({"modes": list(cap.modes)} if cap.modes else {})}
            rows += [{**about, "scope": s.scope, "used_epsilon": s.used.epsilon, "used_delta": s.used.delta,
                      "remaining_epsilon": s.remaining.epsilon, "remaining_delta": s.remaining.delta,
                      **({"note": s.note} if s.note else {})} for s in mine] or [
                {**about, "scope": None, "used_epsilon": 0.0, "used_delta": 0.0, "remaining_epsilon": cap.epsilon,
                 "remaining_delta": cap.delta}]
        print(json.dumps(rows, indent=1))
        return
    print(f"Privacy budget of {home.root} ({len(entries)} ledger entries)")
    for cap in policy.caps:
        mine = [s for s in status if s.cap == cap]
        where = f", modes {', '.join(cap.modes)}" if cap.modes else ""
        print(f"cap '{cap.name}': {cap.unit_of_privacy}, ε ≤ {cap.epsilon:g}, δ ≤ {cap.delta:g} per {cap.per}{where}, "
              f"{'all time' if cap.period == 'all-time' else 'this calendar year'}")
        if not mine:
            print("  nothing spent: the whole cap remains")
            continue
        worst = max(mine, key=lambda s: (s.used.epsilon_exact, s.scope))
        print(f"  most spent: {worst.scope}: used ε={worst.used.epsilon:g}, δ={worst.used.delta:.3g}; remaining "
              f"ε={worst.remaining.epsilon:g}, δ={worst.remaining.delta:.3g}")
        modes: dict[str, list] = {}
        for s in mine:
            modes.setdefault(s.scope.split("/", 1)[0] if "/" in s.scope else "", []).append(s)
        for mode, rows in sorted(modes.items()):
            if mode:
                w = max(rows, key=lambda s: s.used.epsilon_exact)
                print(f"  mode {mode}: {len(rows)} partition(s), most spent ε={w.used.epsilon:g} "
                      f"(remaining ε={w.remaining.epsilon:g})")
        for s in sorted(mine, key=lambda s: s.scope):
            print(f"  {s.scope}: used ε={s.used.epsilon:g}, δ={s.used.delta:.3g}; remaining ε={s.remaining.epsilon:g}, "
                  f"δ={s.remaining.delta:.3g}" + (f" ({s.note})" if s.note else ""))
