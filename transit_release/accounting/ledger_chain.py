"""The ledger's hash chain and its MAC: what an entry is, and how a reader tells an edited or forged one.

* tamper-evident: each entry stores the SHA-256 of the previous entry and of
  itself, over a canonical serialisation, so an edit behind the triggers' back
  or a removed row breaks the chain (:func:`check_chain`,
  :meth:`transit_release.accounting.ledger.Ledger.verify`);
* keyed, when the operator gives a key kept outside the home
  (``TRANSIT_RELEASE_LEDGER_KEY_FILE``, :mod:`transit_release.accounting.ledger_key`): every entry also gets an
  HMAC-SHA256 of its hash in the table ``entry_macs``, so that someone who can write the home
  but cannot read the key cannot recompute a forged chain; intents and MLflow anchors carry MACs of their own.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transit_release.accounting.events import event_from_json
from transit_release.errors import LedgerIntegrityError

GENESIS_HASH = "0" * 64
SPEND = "spend"
PUBLISHED = "published"


def entry_hash(prev_hash: str, seq: int, recorded_at: str, entry_type: str, release_id: str, payload: str) -> str:
    body = json.dumps([prev_hash, seq, recorded_at, entry_type, release_id, payload],
                      separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def entry_mac(key: bytes, entry_hash_hex: str) -> str:
    return hmac.new(key, entry_hash_hex.encode("ascii"), hashlib.sha256).hexdigest()


def intent_mac(key: bytes, intent: "PublicationIntent") -> str:
    """Intents are not chained (they come and go between a charge and its publication); with a key each is MACed,
    so that `repair` acts only on intents this tool wrote."""
    body = json.dumps(["intent", intent.id, intent.recorded_at, intent.release_id, intent.manifest_sha256,
                       intent.staging_dir, intent.final_dir], separators=(",", ":"), ensure_ascii=False)
    return hmac.new(key, body.encode("utf-8"), hashlib.sha256).hexdigest()


def anchor_mac(key: bytes, seq: int, digest: str) -> str:
    """The MAC an MLflow anchor of a keyed ledger carries (``head_mac``): only the key's holder can make one."""
    return hmac.new(key, f"anchor:{int(seq)}:{digest}".encode("ascii"), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class LedgerEntry:
    seq: int
    recorded_at: str
    entry_type: str
    release_id: str
    payload: str
    prev_hash: str
    hash: str

    def event(self):
        """The privacy event of a ``spend`` entry."""
        if self.entry_type != SPEND:
            raise ValueError(f"ledger entry {self.seq} is a {self.entry_type!r} entry, not a spend")
        return event_from_json(self.payload)

    def data(self) -> dict[str, Any]:
        return json.loads(self.payload)


@dataclass(frozen=True)
class Head:
    """The newest entry of the chain: what manifests and MLflow anchor."""

    seq: int
    hash: str

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "hash": self.hash}


@dataclass(frozen=True)
class PublicationIntent:
    id: int
    recorded_at: str
    release_id: str
    manifest_sha256: str
    staging_dir: str
    final_dir: str
    mlflow_run_id: str | None


def check_chain(entries: list[LedgerEntry], macs: dict[int, str], key: bytes | None, path: Path) -> None:
    """The hash chain, every spend's validity and (with a key) every MAC (``macs``: seq → MAC) of the ledger at
    ``path``; raises :class:`LedgerIntegrityError` on the first problem."""
    prev = GENESIS_HASH
    for expected_seq, e in enumerate(entries, start=1):
        if e.seq != expected_seq:
            raise LedgerIntegrityError(
                f"{path}: entry {expected_seq} is missing (found entry {e.seq} after entry {expected_seq - 1})")
        if e.prev_hash != prev:
            raise LedgerIntegrityError(f"{path}: entry {e.seq} does not link to entry {e.seq - 1}")
        if entry_hash(e.prev_hash, e.seq, e.recorded_at, e.entry_type, e.release_id, e.payload) != e.hash:
            raise LedgerIntegrityError(f"{path}: entry {e.seq} was modified after it was recorded")
        if e.entry_type == SPEND:
            try:
                e.event()
            except ValueError as exc:
                raise LedgerIntegrityError(f"{path}: entry {e.seq} is not a valid spend ({exc})") from None
        prev = e.hash
    if key:
        unkeyed = [e.seq for e in entries if e.seq not in macs]
        if unkeyed:
            raise LedgerIntegrityError(f"{path}: {len(unkeyed)} entr(y/ies) carry no MAC although a key is "
                                       f"configured (first: entry {unkeyed[0]})")
        for e in entries:
            if not hmac.compare_digest(macs[e.seq], entry_mac(key, e.hash)):
                raise LedgerIntegrityError(f"{path}: entry {e.seq}'s MAC does not match the key: the entry "
                                           "was forged or the chain recomputed without the key")
