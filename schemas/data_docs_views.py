"""Great Expectations' page views for the Data Docs, with their Jinja templates compiled once.

GE renders every Data Docs page through a view that makes a new Jinja environment, which compiles each of GE's
templates again (about fifty per site, half of a site's build). These views are GE's own
(:class:`~great_expectations.render.view.DefaultJinjaPageView` and the index's), named in the sites' configuration
(:func:`schemas.expectations.site_config`), whose environment takes the compiled templates from a cache: in memory
for the process, and on disk beside the other things rebuilt from the installed libraries alone
(``~/.cache/transit-release``, :func:`transit_release.files.home.cache_dir`). Jinja keys each compiled template by its
name and checks it against its source's checksum and the Python version, so a cached template is always the
template GE ships; the pages are the same, byte for byte. A cache that cannot be written is skipped.

Imported by Great Expectations when it builds a site (it names the classes in its site configuration), never by
the flows themselves.
"""

from __future__ import annotations

import contextlib
import threading

from great_expectations.render.view import DefaultJinjaIndexPageView, DefaultJinjaPageView
from jinja2 import BytecodeCache, FileSystemBytecodeCache


class TemplateCache(BytecodeCache):
    """Compiled templates: in memory, and in a directory (if it can be made) for the next process."""

    def __init__(self) -> None:
        self._memory: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._disk: FileSystemBytecodeCache | None = None
        with contextlib.suppress(OSError):
            import jinja2

            from transit_release.files.home import cache_dir

            directory = cache_dir() / f"jinja2-{jinja2.__version__}-bytecode"
            directory.mkdir(parents=True, exist_ok=True)
            self._disk = FileSystemBytecodeCache(str(directory))

    def load_bytecode(self, bucket) -> None:
        with self._lock:
            data = self._memory.get(bucket.key)
        if data is not None:
            bucket.bytecode_from_string(data)
        if bucket.code is None and self._disk is not None:
            with contextlib.suppress(Exception):  # an unreadable file is compiled again
                self._disk.load_bytecode(bucket)

    def dump_bytecode(self, bucket) -> None:
        with self._lock:
            self._memory[bucket.key] = bucket.bytecode_to_string()
        if self._disk is not None:
            with contextlib.suppress(OSError):
                self._disk.dump_bytecode(bucket)


_CACHE: TemplateCache | None = None
_CACHE_LOCK = threading.Lock()


def template_cache() -> TemplateCache:
    global _CACHE
    with _CACHE_LOCK:
        if _CACHE is None:
            _CACHE = TemplateCache()
        return _CACHE


class CachedJinjaPageView(DefaultJinjaPageView):
    """GE's page view (suites and validation results), its templates from :func:`template_cache`."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.env.bytecode_cache = template_cache()


class CachedJinjaIndexPageView(DefaultJinjaIndexPageView):
    """GE's index page view, its templates from :func:`template_cache`."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.env.bytecode_cache = template_cache()
