"""What the commands print: plain lines that never wrap a command or cut a column. Writes to standard output
only (a dry run's refusal is said again on stderr); reads nothing but the dictionaries and values it is given (and
imports the formatting helpers it needs)."""

from __future__ import annotations

import json
import sys

from transit_release.files.home import Home


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


def summary_exit(summary: dict) -> int:
    """A release command's exit code from its summary: 0, or a dry run's refusal (3 the budget policy, 4 the ledger's
    integrity, 2 its configuration), said again in one line on stderr as a refusal is."""
    if "spends" not in summary or summary.get("allowed", True):
        return 0
    print(f"transit-release: error: {summary['reason']}", file=sys.stderr)
    return int(summary.get("exit") or 3)


def print_expectation(e) -> None:
    """Before the charge, what the release can be expected to publish (an
    :class:`~transit_release.releases.opal_expectation.Expectation`): the public rules, then the internal figures
    of the true counts, labelled as such. Written with ``sys.stdout.write`` (:mod:`transit_release.runtime.custodian`:
    never through ``print``, which Prefect's ``log_prints`` would send to its API)."""
    import sys

    from transit_release.config import marginal_numbers

    groups: dict[tuple, list] = {}
    for r in e.rules:
        groups.setdefault((r.threshold, r.noise_bound, r.half_width, r.at_threshold), []).append(r)
    bounded = all(r.noise_bound is not None for r in e.rules)
    lines = [f"What {e.release_id} can be expected to publish (before the charge):",
             "  a cell (one mode and day's taps at one time, location or both) is published only if its noisy count "
             "reaches its threshold T",
             "  the noise never exceeds A either way: a true count of T + A or more is always published, one below "
             "T − A never" if bounded else
             "  the noise is unbounded: a cell below T may be published, one above T left out, rarely far from T"]
    for (threshold, bound, h, at_t), rules in groups.items():
        files = ", ".join(dict.fromkeys(r.file for r in rules))
        lines.append(f"  {files} (j = {marginal_numbers([r.j for r in rules])}): T = {threshold}"
                     + (f", A = {bound}" if bound is not None else "")
                     + f"; a true count of T is published {100 * at_t:.0f}% of the time; margin of error ± {h} (95%)")
    if e.cells is not None:
        lines.append("  internal figures, from the true counts (this terminal only: never published, logged or "
                     "recorded):")
        for c in e.cells:
            certain = f" ({c.certain:,} at or over T + A)" if c.certain is not None else ""
            lines.append(f"    {c.file}: {c.at_threshold:,} of {c.cells:,} cells at or over T{certain}; "
                         f"about {c.expected:,.0f} rows expected")
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


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
        from transit_release.reports.passenger_report import headline

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
    if result.get("ledger_unreadable"):
        print("Privacy audit FAILED: the privacy ledger could not be opened; nothing else was checked")
    else:
        print(f"Privacy audit {'PASSED' if result['ok'] else 'FAILED'}: {result['entries']} ledger entries, "
              f"{len(result['releases_published'])} published release(s)")
    for d in result["discrepancies"]:
        print(f"  discrepancy: {d}")
    for rid in result.get("in_flight", []):
        print(f"  in flight: {rid} (a live run was making it while the audit read the home; the next audit checks "
              "it in full)")
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
    from transit_release.integrity.audit import PERSON, unit_losses

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


def _used(s) -> str:
    """What a scope has used under its cap, in the measure the cap is enforced in."""
    if s.measure == "pld":
        basic = (f" (basic composition, for reference: ε={s.basic.epsilon:g}, δ={s.basic.delta:.3g})"
                 if s.basic is not None else "")
        return (f"used ε={s.used.epsilon:.4g} by privacy-loss distributions at δ={s.cap.delta:g}{basic}; "
                f"remaining ε={s.remaining.epsilon:.4g}")
    return (f"used ε={s.used.epsilon:g}, δ={s.used.delta:.3g}; remaining ε={s.remaining.epsilon:g}, "
            f"δ={s.remaining.delta:.3g}")


def _verdict(v) -> str:
    return "the policy allows it" if v.allowed else f"the policy REFUSES it: {v.reason}"


def print_budget(home: Home, policy, entries: list, as_json: bool) -> None:
    """Spent and remaining under each cap of ``policy`` over the ledger's ``entries``, each in the measure the cap is
    enforced in, and the policy's own verdict on the next release of each scope (one like the latest there)."""
    status = policy.status(entries)
    verdicts = {v.like: v for v in policy.next_releases(entries, status=status)}
    if as_json:  # one row per cap and scope spent in; a cap with nothing spent: one row, scope null
        rows = []
        for cap in policy.caps:
            mine = [s for s in status if s.cap == cap]
            about = {"cap": cap.name, "unit_of_privacy": cap.unit_of_privacy, "per": cap.per, "period": cap.period,
                     "measure": cap.measure, **({"modes": list(cap.modes)} if cap.modes else {})}
            rows += [{**about, "scope": s.scope, "used_epsilon": s.used.epsilon, "used_delta": s.used.delta,
                      "remaining_epsilon": s.remaining.epsilon, "remaining_delta": s.remaining.delta,
                      **({"basic_epsilon": s.basic.epsilon, "basic_delta": s.basic.delta}
                         if s.measure == "pld" and s.basic is not None else {}),
                      **({"note": s.note} if s.note else {}),
                      **({"next_release": {"like": s.releases[-1], "allowed": verdicts[s.releases[-1]].allowed,
                                           "reason": verdicts[s.releases[-1]].reason}}
                         if s.releases and s.releases[-1] in verdicts else {})} for s in mine] or [
                {**about, "scope": None, "used_epsilon": 0.0, "used_delta": 0.0, "remaining_epsilon": cap.epsilon,
                 "remaining_delta": cap.delta}]
        print(json.dumps(rows, indent=1))
        return
    print(f"Privacy budget of {home.root} ({len(entries)} ledger entries)")
    for cap in policy.caps:
        mine = [s for s in status if s.cap == cap]
        where = f", modes {', '.join(cap.modes)}" if cap.modes else ""
        measure = (f", enforced by privacy-loss distributions at δ={cap.delta:g}" if cap.measure == "pld" else "")
        print(f"cap '{cap.name}': {cap.unit_of_privacy}, ε ≤ {cap.epsilon:g}, δ ≤ {cap.delta:g} per {cap.per}{where}, "
              f"{'all time' if cap.period == 'all-time' else 'this calendar year'}{measure}")
        if not mine:
            print("  nothing spent: the whole cap remains")
            continue
        if len(mine) > 1:  # one scope: its own line below says it all
            worst = max(mine, key=lambda s: (s.used.epsilon_exact, s.scope))
            print(f"  most spent: {worst.scope}: {_used(worst)}")
        modes: dict[str, list] = {}
        for s in mine:
            modes.setdefault(s.scope.split("/", 1)[0] if "/" in s.scope else "", []).append(s)
        for mode, rows in sorted(modes.items()):
            if mode and len(mine) > 1:
                w = max(rows, key=lambda s: s.used.epsilon_exact)
                print(f"  mode {mode}: {len(rows)} partition(s), most spent ε={w.used.epsilon:g} "
                      f"(remaining ε={w.remaining.epsilon:g})")
        for s in sorted(mine, key=lambda s: s.scope):
            print(f"  {s.scope}: {_used(s)}" + (f" ({s.note})" if s.note else ""))
        likes = list(dict.fromkeys(s.releases[-1] for s in mine if s.releases))
        for rid in likes:
            if rid in verdicts:
                n = sum(1 for s in mine if s.releases and s.releases[-1] == rid)
                here = f" (the latest in {n} of these scopes)" if len(mine) > 1 else ""
                print(f"  next release like {rid}{here}: {_verdict(verdicts[rid])}")
