"""What every data card says about one passenger: where a person of the release's population stood at publication.

The figures are the manifest's ``privacy.person_at_publication``
(:func:`transit_release.accounting.person.person_loss` of every spend on the
ledger up to the head the release anchors, read once at staging: what
``transit-release audit`` states for the ledger up to that entry, and checks);
this module only puts them in words, every bound rounded up.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal, localcontext


def rounded_up(x: float, digits: int) -> str:
    """``x`` to ``digits`` significant digits, rounded up: a bound printed "at most" is never below the computed one
    (and (ε, δ) rounded up is implied by (ε, δ))."""
    with localcontext() as ctx:
        ctx.prec, ctx.rounding = digits, ROUND_CEILING
        return f"{float(+Decimal(repr(float(x)))):.{digits}g}"


def _pair(loss: dict) -> str:
    return f"ε = {rounded_up(loss['epsilon'], 4)}, δ = {rounded_up(loss['delta'], 3)}"


def _row(kind: str, share: dict) -> str:
    n, basic = len(share["releases"]), share["basic"]
    if basic is None:
        return f"| {kind} | {n} | unbounded (bounds a trip, not a passenger) | — |"
    return f"| {kind} | {n} | {rounded_up(basic['epsilon'], 4)} | {rounded_up(basic['delta'], 3)} |"


def policy_text(p: dict) -> str:
    """The budget policy's word on a passenger at publication (the person caps, and whether trip-level releases may
    leave a passenger's loss unbounded)."""
    policy = p.get("budget_policy")
    if not policy:
        return ""
    caps = "; ".join(policy["person_caps"]) or "no cap on a passenger's loss"
    allowed = "yes" if policy["allow_unbounded_person_loss"] else "no"
    return (f"Budget policy at publication: {caps}. Trip-level releases may leave a passenger's loss unbounded: "
            f"{allowed}.\n")


def person_text(p: dict) -> str:
    """The data card's section on a passenger's loss (empty before staging)."""
    person = p.get("person_at_publication")
    if not person:
        return ""
    population = person["population"]
    basic, pld = person["basic"], person["pld"]
    rows = "\n".join(_row(kind, share) for kind, share in person["per_kind"].items())
    table = f"| kind of release | releases | ε (basic) | δ (basic) |\n| --- | --- | --- | --- |\n{rows}\n"
    composed = (f"**{_pair(basic)}** by basic composition"
                + (f" and **{_pair(pld)}** by privacy-loss distributions" if pld else ""))
    head = person.get("ledger_entries")
    intro = (f"Counting every release about population `{population}` on the privacy ledger"
             + (f" up to entry {head}, the head this release anchors" if head is not None else "")
             + f" ({person['releases']} release(s), this one included, of every kind and period: a passenger who "
             "travelled in several periods is in all of their releases)")
    others = person.get("other_populations") or []
    assumption = (f"This assumes, as the agency declares, that the people of population `{population}` are in no "
                  f"release of its other population(s) ({', '.join(f'`{o}`' for o in others)}).\n\n" if others else "")
    assumption += ("A passenger here is one card (a passenger's record is one card's): someone who uses m cards "
                   "counts as m passengers and can lose up to m times as much.\n\n")
    if person["bounded"]:
        return (f"\n## Where a passenger stands\n\n{intro}, one passenger's privacy loss was at most {composed}.\n\n"
                f"{assumption}{table}\n{policy_text(p)}")
    trips = ", ".join(f"`{u['release_id']}` ({u['period']})" for u in person["unbounded_by"])
    others_n = person["releases"] - len(person["unbounded_by"])
    rest = (f"For a passenger with no trip in those periods, the other {others_n} release(s) add up to at most "
            f"{composed}." if others_n else "No other release bounds a passenger's loss either.")
    return (f"\n## Where a passenger stands: unbounded\n\n{intro}, **a passenger's privacy loss has no bound**: "
            f"the trip-level release(s) {trips} protect one trip, not a passenger, so each of a passenger's trips "
            f"in those periods costs that release's ε and the loss grows with their number of trips. {rest}\n\n"
            f"{assumption}{table}\n{policy_text(p)}")


def unit_text(p: dict, unit_words: str) -> str:
    """The release's own unit of privacy at publication (one line; empty before staging): ``unit_words`` names
    it, e.g. "one card", "one passenger's record of this period"."""
    c = p.get("cumulative_at_publication")
    if not c:
        return ""
    return (f"For its own unit of privacy ({unit_words}), every release of that unit recorded so far (this one "
            f"included) adds up to {_pair(c)} by basic composition ({c['releases']} release(s)).\n")
