"""Names a release may publish must mean one thing and show what they hold.

A stop name becomes a published location (another mode's stops collapse to their name), so it must not be the
published files' mark for an unknown location (``-1``, :data:`transit_release.preprocessing.UNKNOWN`): a station
of that name would be counted with the taps whose location is unknown. Nor may it hold characters a spreadsheet
or a browser does not show as themselves: control characters and Unicode's invisible format characters (general
categories Cc, Cf and the line and paragraph separators Zl, Zp), among them the bidirectional overrides that make
a cell display its text in another order than its bytes, and zero-width spaces that make two names look equal.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache
from itertools import chain

INVISIBLE_CATEGORIES = ("Cc", "Cf", "Zl", "Zp")
INVISIBLE_CHECK = ("holds a control or invisible format character (Unicode Cc/Cf, e.g. a bidirectional override or "
                   "a zero-width space): a published cell would not show what it holds")


@cache
def invisible_characters() -> re.Pattern:
    """A pattern matching any character of :data:`INVISIBLE_CATEGORIES` (built once, from this Python's Unicode
    database). Such characters lie in planes 0, 1 and 14 only (the others hold ideographs and private use)."""
    ranges: list[list[int]] = []
    for c in chain(range(0x20000), range(0xE0000, 0xE1000)):
        if unicodedata.category(chr(c)) in INVISIBLE_CATEGORIES:
            if ranges and ranges[-1][1] == c - 1:
                ranges[-1][1] = c
            else:
                ranges.append([c, c])
    return re.compile("[" + "".join(re.escape(chr(a)) + ("-" + re.escape(chr(b)) if b > a else "")
                                    for a, b in ranges) + "]")


def has_invisible(text: str) -> bool:
    return invisible_characters().search(text) is not None


#: Letters that show nothing (Unicode's fillers and the blank braille pattern): a name of only these and spaces
#: would be published as a blank cell.
FILLERS = "\u115f\u1160\u3164\uffa0\u2800"
BLANK_CHECK = "is blank (only spaces or filler characters such as U+3164, which show nothing)"
UNKNOWN_MARK_CHECK = ("is or looks like '{mark}', the published files' mark for an unknown location (rename the "
                      "stop)")
LOOKALIKE_CHECK = ("looks like another stop name: they differ only by spaces (at the ends, or runs of spaces or '_' "
                   "inside, which a location id writes as one '_'), by compatibility forms (full-width letters), by "
                   "dashes, or by letters of another script that look alike (Cyrillic 'А' for Latin 'A'): two "
                   "published locations would look alike, or be counted as one")

#: Letters of other scripts that look like a Latin letter or digit (Unicode's confusables, TR39, for the Cyrillic,
#: Greek and Armenian letters that are one Latin letter's twin): folded before names are compared.
LOOKALIKE_LETTERS = {
    # Cyrillic capitals and small letters
    "А": "A", "В": "B", "Е": "E", "З": "3", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P", "С": "C", "Т": "T",
    "У": "Y", "Х": "X", "Ѕ": "S", "І": "I", "Ј": "J", "Ԛ": "Q", "Ԝ": "W", "Ү": "Y", "Ӏ": "l", "Ԍ": "G", "Ꙅ": "S",
    "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ј": "j", "ԁ": "d",
    "ԛ": "q", "ԝ": "w", "һ": "h", "ӏ": "l", "ү": "y", "ɡ": "g", "ѵ": "v", "Ѵ": "V",
    # Greek capitals and small letters
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O", "Ρ": "P",
    "Τ": "T", "Υ": "Y", "Χ": "X", "Ϲ": "C", "Ϳ": "J", "ο": "o", "α": "a", "ν": "v", "ρ": "p", "ι": "i", "υ": "u",
    "ϲ": "c", "ϳ": "j", "γ": "y",
    # Armenian small letters; Latin dotless i
    "օ": "o", "ս": "u", "հ": "h", "ո": "n", "ı": "i",
}


@cache
def _fold_table() -> dict[int, str | None]:
    """Fillers removed; every dash (Unicode's dash punctuation, Pd, and the minus signs) as '-'; look-alike letters
    of other scripts as their Latin twin."""
    table: dict[int, str | None] = {ord(c): None for c in FILLERS}
    for c in range(0x10000):
        if unicodedata.category(chr(c)) == "Pd":
            table[c] = "-"
    for c in "\u2212\u2796\u02d7\u2043":  # minus sign, heavy minus, modifier minus, hyphen bullet
        table[ord(c)] = "-"
    table.update({ord(k): v for k, v in LOOKALIKE_LETTERS.items()})
    return table


def normalised_name(text: str) -> str:
    """A name as it looks: NFKC (full-width forms as their plain letters), fillers removed, dashes as '-', letters
    of other scripts that look like a Latin letter as that letter, spaces at its ends removed."""
    return unicodedata.normalize("NFKC", text).translate(_fold_table()).strip()


_BLANKS_INSIDE = re.compile(r"[\s_]+")
#: In an ASCII name, what :func:`name_skeleton` may change besides its ends: '_', white space other than ' ', and
#: runs of spaces.
_ASCII_BLANKS = re.compile(r"[_\t\n\r\x0b\x0c\x1c-\x1f]|  ")


def name_skeleton(text: str) -> str:
    """What two names that look alike (or would be one location id) share: :func:`normalised_name`, and runs of
    white space or '_' inside as one space (:func:`transit_release.inputs.universe.stop_location_id` writes white
    space as '_': 'Town Hall' and 'Town_Hall' are one id; 'Town  Hall' looks like 'Town Hall')."""
    if text.isascii():  # the common case, fast: NFKC and the folds change no ASCII character
        text = text.strip()
        return _BLANKS_INSIDE.sub(" ", text) if _ASCII_BLANKS.search(text) else text
    return _BLANKS_INSIDE.sub(" ", normalised_name(text))


def normalised_names(names) -> list[str]:
    """:func:`normalised_name` of each of ``names`` (strings), fast for ASCII names (a stop table's many rows)."""
    return [n.strip() if n.isascii() else normalised_name(n) for n in names]
