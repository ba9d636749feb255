"""What the ledger must hold: the anchors recorded outside it.

Never older than the home's records: :meth:`transit_release.accounting.ledger.Ledger.charge` refuses to write a spend
unless the ledger holds every anchor the caller names (``anchors``: the heads in published manifests and in MLflow, the
spends MLflow mirrors, the directories under ``releases/``). An :class:`Anchor` is one such record,
:func:`unmet_anchors` the ones a ledger's entries lack, :func:`rollback_message` the one line that says so and how to
reconcile (the keyed high-water mark beside the key is one more anchor: :mod:`transit_release.accounting.ledger_key`).
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from transit_release.accounting.ledger_chain import GENESIS_HASH, PUBLISHED, SPEND, LedgerEntry, anchor_mac

#: Where docs say how to reconcile a ledger older than the home's records.
RECONCILE_DOC = "docs/threat-model.md#ledger-integrity"


@dataclass(frozen=True)
class Anchor:
    """Something recorded outside the ledger that the ledger must hold.

    With ``seq`` and ``hash``: a head (a manifest's, an MLflow anchor's): entry ``seq`` with that hash. With ``seq``
    and ``release_id`` only: a spend MLflow mirrors: entry ``seq`` is a spend of that release. With ``release_id``
    only: a directory under ``releases/``: the release is published or has a publication intent. ``problem``: an
    anchor that could not be read, never held.
    """

    where: str
    seq: int | None = None
    hash: str | None = None
    release_id: str | None = None
    mac: str | None = None
    problem: str | None = None


FORGED_ANCHOR = "its MAC does not match the key (not written by this tool)"


def unmet_anchors(entries: Sequence["LedgerEntry"], intent_release_ids: set[str], anchors: Sequence[Anchor],
                  key: bytes | None = None) -> list[tuple[Anchor, str]]:
    """The anchors ``entries`` do not hold, each with what is wrong (no value of any entry), newest first."""
    by_seq = {e.seq: e for e in entries}
    published = {e.release_id for e in entries if e.entry_type == PUBLISHED}
    out = []
    for a in anchors:
        if a.problem is not None:
            out.append((a, a.problem))
        elif a.seq is not None and a.hash is not None:
            e = by_seq.get(a.seq)
            if a.seq == 0:
                if a.hash != GENESIS_HASH:
                    out.append((a, "it anchors an empty ledger with a non-genesis hash"))
            elif e is None:
                out.append((a, f"entry {a.seq} is missing"))
            elif e.hash != a.hash:
                out.append((a, f"entry {a.seq} has another hash"))
            elif key and a.mac is not None and not hmac.compare_digest(a.mac, anchor_mac(key, a.seq, a.hash)):
                out.append((a, FORGED_ANCHOR))
        elif a.seq is not None:
            e = by_seq.get(a.seq)
            if e is None:
                out.append((a, f"spend {a.seq} of '{a.release_id}' is missing"))
            elif e.entry_type != SPEND or e.release_id != a.release_id:
                out.append((a, f"entry {a.seq} is not a spend of '{a.release_id}'"))
        elif a.release_id is not None and a.release_id not in published and a.release_id not in intent_release_ids:
            out.append((a, f"release '{a.release_id}' is neither published nor being published on the ledger"))
    return sorted(out, key=lambda x: -1 if x[0].seq is None else x[0].seq, reverse=True)


def rollback_message(path: Path, unmet: list[tuple[Anchor, str]], head: int,
                     outcome: str = "nothing was charged") -> str:
    """One line: the newest anchor the ledger lacks, what follows, and how to reconcile."""
    anchor, reason = unmet[0]
    more = f" ({len(unmet)} anchors unmet)" if len(unmet) > 1 else ""
    if reason.startswith(FORGED_ANCHOR):
        return (f"{anchor.where} carries a MAC that does not match the ledger key: it was not written by this tool"
                f"{more}; {outcome}. Run `transit-release audit` and see {RECONCILE_DOC}")
    return (f"the ledger {path} (head: entry {head}) lacks what {anchor.where} records: {reason}{more}. It is older "
            f"than this home's records (a restored backup?) and would spend again what it forgot; {outcome}. Restore "
            f"the newest backup (one that holds it), or reconcile as {RECONCILE_DOC} says; `transit-release audit` "
            "counts the spends MLflow mirrors that the ledger lacks")
