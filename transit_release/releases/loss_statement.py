"""What every data card says about one passenger: where a person of the release's population stood at publication.

The figures are the manifest's ``privacy.person_at_publication``
(:func:`transit_release.accounting.person.person_loss` of every spend on the
ledger at staging, the one ``transit-release audit`` states for the same
ledger); this module only puts them in words.
"""

from __future__ import annotations


def _g(x: float) -> str:
    return f"{x:.4g}"


def _row(kind: str, share: dict) -> str:
    n, basic = len(share["releases"]), share["basic"]
    if basic is None:
        return f"| {kind} | {n} | unbounded (bounds a trip, not a passenger) | — |"
    return f"| {kind} | {n} | {_g(basic['epsilon'])} | {basic['delta']:.3g} |"


def person_text(p: dict) -> str:
    """The data card's section on a passenger's loss (empty before staging)."""
    person = p.get("person_at_publication")
    if not person:
        return ""
    population = person["population"]
    basic, pld = person["basic"], person["pld"]
    rows = "\n".join(_row(kind, share) for kind, share in person["per_kind"].items())
    table = f"| kind of release | releases | ε (basic) | δ (basic) |\n| --- | --- | --- | --- |\n{rows}\n"
    composed = (f"**ε = {_g(basic['epsilon'])}, δ = {basic['delta']:.3g}** by basic composition"
                + (f" and **ε = {_g(pld['epsilon'])}** at δ = {pld['delta']:.3g} by privacy-loss distributions"
                   if pld else ""))
    intro = (f"Counting every release about population `{population}` on the privacy ledger at publication "
             f"({person['releases']} release(s), this one included, of every kind and period: a passenger who "
             "travelled in several periods is in all of their releases)")
    if person["bounded"]:
        return (f"\n## Where a passenger stands\n\n{intro}, one passenger's privacy loss was at most {composed}.\n\n"
                f"{table}")
    trips = ", ".join(f"`{u['release_id']}` ({u['period']})" for u in person["unbounded_by"])
    others = person["releases"] - len(person["unbounded_by"])
    rest = (f"For a passenger with no trip in those periods, the other {others} release(s) add up to at most "
            f"{composed}." if others else "No other release bounds a passenger's loss either.")
    return (f"\n## Where a passenger stands: unbounded\n\n{intro}, **a passenger's privacy loss has no bound**: "
            f"the trip-level release(s) {trips} protect one trip, not a passenger, so each of a passenger's trips "
            f"in those periods costs that release's ε and the loss grows with their number of trips. {rest}\n\n"
            f"{table}")


def unit_text(p: dict, unit_words: str) -> str:
    """The release's own unit of privacy at publication (one line; empty before staging): ``unit_words`` names
    it, e.g. "one card", "one passenger's record of this period"."""
    c = p.get("cumulative_at_publication")
    if not c:
        return ""
    return (f"For its own unit of privacy ({unit_words}), every release of that unit recorded so far (this one "
            f"included) adds up to ε = {c['epsilon']:g}, δ = {c['delta']:.3g} by basic composition "
            f"({c['releases']} release(s)).\n")
