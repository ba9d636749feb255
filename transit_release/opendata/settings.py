"""Who publishes the open data, under which licence, and where the files will be downloaded from.

One optional file in the home, ``<home>/open-data.yaml`` (:data:`SETTINGS_FILE`),
read by every release (the manual commands and ``serve`` alike) and by the
catalogue::

    licence:                 # default: CC BY 4.0
      name: CC-BY-4.0        # an SPDX licence id
      title: CC BY 4.0
      path: https://creativecommons.org/licenses/by/4.0/
    publisher:               # default: "Unnamed publisher"
      name: Example Transit Agency
      url: https://transit.example.org/      # optional
      email: opendata@transit.example.org    # optional
    base_url: https://data.example.org/transit/releases/   # default: none (links relative to releases/)
    keywords: [Sydney, Opal]                 # optional, added to every release's keywords
    spatial:                                 # optional: the area the releases cover (the catalogue's dct:spatial)
      uri: https://sws.geonames.org/2147714/ # an http(s) URI of the place, e.g. its GeoNames page
      name: Sydney                           # optional

The licence and the publisher are written into each release's manifest when it
is staged (``licence``, ``publication``), so a release keeps the terms it was
published under; ``base_url`` is only used by ``releases/catalog.jsonld``, which
is regenerated after every publication, so changing it needs no new release; so is ``spatial``, which only the
catalogue states. The catalogue's contact point is the publisher (its name, e-mail address and web page).
Unknown keys, wrong types and a base URL that is not http(s) are refused with
one line naming the file and the key, before anything is charged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from transit_release.config import read_yaml
from transit_release.errors import ConfigError

SETTINGS_FILE = "open-data.yaml"
DEFAULT_LICENCE = {"name": "CC-BY-4.0", "title": "CC BY 4.0", "path": "https://creativecommons.org/licenses/by/4.0/"}
DEFAULT_PUBLISHER = {"name": "Unnamed publisher"}
_KEYS = {"licence", "publisher", "base_url", "keywords", "spatial"}
_SPATIAL_KEYS = {"uri", "name"}
_LICENCE_KEYS = {"name", "title", "path"}
_PUBLISHER_KEYS = {"name", "url", "email"}


@dataclass(frozen=True)
class OpenDataSettings:
    licence: dict
    publisher: dict
    base_url: str = ""
    keywords: tuple[str, ...] = ()
    spatial: dict | None = None  # {"uri", "name"?}: the area the releases cover

    @property
    def publisher_unset(self) -> bool:
        """No publisher is configured: releases name the placeholder publisher (a release warns)."""
        return self.publisher == DEFAULT_PUBLISHER

    def manifest_view(self) -> dict:
        """What a release's manifest records of them (``publication``): the licence, the publisher, the keywords and,
        when set, the place (its name is part of the release's title: :mod:`transit_release.opendata.titles`)."""
        return {"licence": dict(self.licence), "publisher": dict(self.publisher), "keywords": list(self.keywords),
                **({"spatial": dict(self.spatial)} if self.spatial else {})}


#: The settings file is a few lines: a larger one is refused unread.
MAX_BYTES = 64 << 10
MAX_KEYWORDS = 50
MAX_TEXT = 200
#: Characters a URL may not hold as written in the catalogue's ``@id`` and the pages' links (RFC 3986 excludes them
#: unencoded): quotes, spaces, angle brackets, braces, a backslash, a caret, a backtick, a pipe.
_URL_FORBIDDEN = set('"<>{}\\^`| ')


def _http(url: str, where: str) -> str:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(f"{where}: must be an http(s) URL" + (f". Found {url!r}." if len(url) <= MAX_TEXT else ""))
    bad = sorted({c for c in url if c in _URL_FORBIDDEN or not c.isprintable()})
    if bad:
        raise ConfigError(f"{where}: holds {', '.join(repr(c) for c in bad)}, which a URL may not hold unencoded "
                          "(percent-encode them, e.g. %20 for a space)")
    return url


def _text(value, where: str) -> str:
    """A non-empty text of one line (no control characters), at most :data:`MAX_TEXT` characters."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: must be a non-empty text")
    if any(not c.isprintable() and c != " " for c in value):
        raise ConfigError(f"{where}: holds a line break or another control character; write it on one line")
    if len(value) > MAX_TEXT:
        raise ConfigError(f"{where}: {len(value)} characters; at most {MAX_TEXT}")
    return value.strip()


def _mapping(value, keys: set[str], required: set[str], where: str) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: must be a mapping with {', '.join(sorted(keys))}")
    unknown = sorted(set(value) - keys)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(keys))})")
    missing = sorted(required - set(value))
    if missing:
        raise ConfigError(f"{where}: missing {', '.join(missing)}")
    return {k: _text(value[k], f"{where}.{k}") for k in sorted(value)}


def load(home_root: str | Path) -> OpenDataSettings:
    """The home's settings (the defaults when it has no :data:`SETTINGS_FILE`); refuses a malformed file."""
    path = Path(home_root) / SETTINGS_FILE
    if not path.exists():
        return OpenDataSettings(dict(DEFAULT_LICENCE), dict(DEFAULT_PUBLISHER))
    data = read_yaml(path, "open-data settings", aliases=False, max_bytes=MAX_BYTES)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"open-data settings {path}: expected a mapping of {', '.join(sorted(_KEYS))}")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise ConfigError(f"open-data settings {path}: unknown key(s) {', '.join(unknown)} "
                          f"(known: {', '.join(sorted(_KEYS))})")
    where = f"open-data settings {path}"
    licence = _mapping(data.get("licence", DEFAULT_LICENCE), _LICENCE_KEYS, _LICENCE_KEYS, f"{where}: licence")
    _http(licence["path"], f"{where}: licence.path")
    publisher = _mapping(data.get("publisher", DEFAULT_PUBLISHER), _PUBLISHER_KEYS, {"name"}, f"{where}: publisher")
    if "url" in publisher:
        _http(publisher["url"], f"{where}: publisher.url")
    base_url = data.get("base_url") or ""
    if not isinstance(base_url, str):
        raise ConfigError(f"{where}: base_url must be a text")
    if base_url:
        base_url = _http(base_url.strip(), f"{where}: base_url").rstrip("/") + "/"
    keywords = data.get("keywords") or []
    if not isinstance(keywords, list):
        raise ConfigError(f"{where}: keywords must be a list of non-empty texts")
    if len(keywords) > MAX_KEYWORDS:
        raise ConfigError(f"{where}: {len(keywords)} keywords; at most {MAX_KEYWORDS}")
    keywords = [_text(k, f"{where}: keywords[{i}]") for i, k in enumerate(keywords)]
    spatial = None
    if data.get("spatial") is not None:
        spatial = _mapping(data["spatial"], _SPATIAL_KEYS, {"uri"}, f"{where}: spatial")
        _http(spatial["uri"], f"{where}: spatial.uri")
    return OpenDataSettings(licence, publisher, base_url, tuple(keywords), spatial)
