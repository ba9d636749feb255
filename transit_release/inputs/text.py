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
LOOKALIKE_CHECK = ("differs from another stop name only by spaces at its ends or by compatibility forms (e.g. "
                   "full-width letters): two published locations would look alike")


def normalised_name(text: str) -> str:
    """A name as it looks: NFKC (full-width forms as their plain letters), fillers removed, spaces at its ends
    removed."""
    return unicodedata.normalize("NFKC", text).translate({ord(c): None for c in FILLERS}).strip()
