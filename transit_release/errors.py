"""Typed errors. Messages name what and where, never a raw value or card id."""

from __future__ import annotations


class TransitReleaseError(Exception):
    """Base class of every error the tool raises on purpose.

    Once marked as leaving a task or flow that reports to a Prefect server other than the command's own
    (:func:`transit_release.runtime.disclosure.keep_private`), its text inside a Prefect run is its class and exit code
    only (what Prefect's states, logs and events then hold); elsewhere, and always through :func:`full_message`, the
    full message. The rule is the disclosure module's (:data:`redaction`, which it sets when imported: an error is
    only ever marked by that module, so an error raised where it was never imported is never redacted)."""

    def __str__(self) -> str:
        if redaction is None:  # marked in another process (pickled), read where the rule was never imported
            return f"refused: {type(self).__name__}" if getattr(self, "_kept_private", False) else super().__str__()
        return redaction.short_form(self) if redaction.redacted(self) else super().__str__()

    def __repr__(self) -> str:
        if getattr(self, "_kept_private", False) and (redaction is None or redaction.redacted(self)):
            return f"{type(self).__name__}({str(self)!r})"
        return super().__repr__()


#: Whose rule says when a refusal's text is its short form (``redacted(exc)``, ``short_form(exc)``): the module
#: :mod:`transit_release.runtime.disclosure`, which installs itself here when imported (errors import nothing).
redaction = None


def full_message(exc: BaseException) -> str:
    """A refusal's full message, wherever it is asked for (the terminal, the private run log), redacted or not."""
    if isinstance(exc, TransitReleaseError):
        return Exception.__str__(exc)
    return str(exc)


class ConfigError(TransitReleaseError):
    """A release configuration or budget policy is invalid."""


class InputDataError(TransitReleaseError):
    """An input file cannot be used (unreadable, wrong columns, wrong types...)."""


class SchemaViolationError(InputDataError):
    """A frame broke its stage's contract.

    ``summary`` maps (column, check) to the number of failing rows; the
    message lists the first offending row numbers but never the values.
    """

    def __init__(self, message: str, summary: dict[tuple[str, str], int] | None = None):
        super().__init__(message)
        self.summary = dict(summary or {})


class ReleaseExistsError(TransitReleaseError):
    """A release with this id was already published; it is never overwritten."""


class BudgetError(TransitReleaseError):
    """The budget policy refuses a spend (exit code 3)."""


class BudgetExceededError(BudgetError):
    """A release would exceed a privacy budget cap.

    Carries the request, what remains and the difference, so callers can act on
    the values rather than parse the message.
    """

    def __init__(self, scope: str, requested_epsilon: float, remaining_epsilon: float,
                 requested_delta: float | None = None, remaining_delta: float | None = None,
                 detail: str | None = None):
        self.scope = scope
        self.requested_epsilon = requested_epsilon
        self.remaining_epsilon = remaining_epsilon
        self.requested_delta = requested_delta
        self.remaining_delta = remaining_delta
        msg = (f"Cannot release '{scope}' without exceeding the budget. "
               f"Requested: ε={requested_epsilon:.3f}; remaining: ε={remaining_epsilon:.3f}")
        if requested_epsilon > remaining_epsilon:
            msg += f"; short by ε={requested_epsilon - remaining_epsilon:.3f}"
        if requested_delta is not None and remaining_delta is not None:
            msg += f". Requested: δ={requested_delta:.3g}; remaining: δ={remaining_delta:.3g}"
            if requested_delta > remaining_delta:
                msg += f"; short by δ={requested_delta - remaining_delta:.3g}"
        if detail:
            msg += f" ({detail})"
        self.detail = detail
        super().__init__(msg)


class LedgerIntegrityError(TransitReleaseError):
    """The privacy ledger's hash chain, its protections or database integrity check failed (exit code 4)."""


class LedgerRollbackError(LedgerIntegrityError):
    """The ledger lacks an anchor the home recorded (a manifest's head, an MLflow anchor or mirrored spend, a
    published directory, the keyed high-water mark): it is older than the home's records, e.g. a restored backup,
    and charging it would spend again what it forgot. Nothing is charged (exit code 4)."""


class LedgerRetiredError(LedgerIntegrityError):
    """The key's records say this ledger's history was adopted at another path (``repair --adopt-ledger-key``
    after a move): the ledger here is a copy left behind and charges nothing more, so one history never spends its
    budget twice (exit code 4)."""


class LedgerBusyError(TransitReleaseError):
    """The privacy ledger stayed locked by another process for longer than the ledger's timeout; nothing was
    written (exit code 1, as a storage failure: trying again later is the remedy, not another input)."""


class LedgerStorageError(TransitReleaseError):
    """The privacy ledger could not be read or written because of the storage under it (a full disk, an I/O error,
    a file system gone read-only or away), not because the ledger is damaged: nothing is wrong with its records and
    restoring a backup would roll spends back (exit code 1, as a storage failure)."""


class ClusterError(TransitReleaseError):
    """The Dask cluster that should sanitize the partitions cannot be used (checked before any spend)."""


class NoiseSourceMismatchError(TransitReleaseError):
    """Sanitizers reported different noise sources (the test seed is set in some environments only)."""


class UncappedSpendError(BudgetError):
    """A spend that no cap of the budget policy covers: refused, never allowed by default."""


class PopulationError(ConfigError):
    """A release's population contradicts the ledger: one charge naming several populations, or an input already
    released about another population (the same people cannot be two populations)."""


class UndeclaredPopulationError(PopulationError):
    """A release names a population the budget policy does not declare (exit code 2): refused before any input is
    read. A population is a declared set of people (``populations:`` in the policy), not a word on the command
    line."""


class PopulationOverlapError(BudgetError):
    """A release would read the records of people already released under another population: the same input (its
    content, in any order) or cards an earlier release of another population read (exit code 3, nothing charged).
    Names the earlier release, never a card id."""


class RecordsOfAnotherPeriodError(BudgetError):
    """A release of a sequence, trajectory or set file (records without dates) whose content a charged release read
    for another declared period (exit code 3, nothing charged): one file is the export of one period, and releases
    of two periods compose in parallel only if their records are not the same. Names the earlier release and its
    period, never a record."""


class UnboundedPersonLossError(BudgetError):
    """A trip-level release (or one after it) under a cap on a person's loss, which a trip-level release leaves
    unbounded, and the policy does not allow that (``allow_unbounded_person_loss``)."""


class NoiseParameterError(ConfigError, ValueError):
    """A privacy parameter (ε, or the noise scale it implies) is outside what the exact samplers can honour.

    Raised when a mechanism plans its spends, before any noise is drawn; the message names the
    parameter, the limit and what to use instead. Also a ``ValueError``, which callers that
    validate parameters already catch.
    """


class InsufficientSpaceError(ConfigError):
    """The home's filesystem lacks the free space a release needs: refused before anything is charged."""
