"""mkdocs hook: name every page the nav lists that is not in docs/, before anything is built.

Without it ``mkdocs build --strict`` stops on the first of many warnings.  With it the build
fails with one message listing every missing page.  ``DOCS_SKIP_MISSING=1`` drops the missing
pages from the nav and lowers links to them to info, to check the rest of the site while
pages are still being written; CI never sets it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from mkdocs.exceptions import PluginError

log = logging.getLogger("mkdocs.hooks.nav_check")


def nav_pages(nav) -> list[str]:
    """Every ``.md`` path in a nav tree, in order.

    >>> nav_pages([{"A": "a.md"}, {"B": [{"C": "b/c.md"}, "d.md"]}])
    ['a.md', 'b/c.md', 'd.md']
    """
    out: list[str] = []
    for item in nav or []:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            out += nav_pages(value)
        elif isinstance(value, str) and value.endswith(".md"):
            out.append(value)
    return out


def _drop(nav, missing: set[str]):
    kept = []
    for item in nav:
        title, value = next(iter(item.items())) if isinstance(item, dict) else (None, item)
        if isinstance(value, list):
            value = _drop(value, missing)
            if not value:
                continue
        elif value in missing:
            continue
        kept.append({title: value} if title is not None else value)
    return kept


def on_config(config, **kwargs):
    docs = Path(config["docs_dir"])
    generated = {"reference/config.md", "reference/http-api.md", "reference/cli.md", "reference/errors.md"}
    missing = [p for p in nav_pages(config["nav"]) if not (docs / p).is_file() and p not in generated]
    if not missing:
        return config
    listing = "\n  ".join(missing)
    if os.environ.get("DOCS_SKIP_MISSING") == "1":
        log.info("DOCS_SKIP_MISSING=1: leaving out %d nav pages not written yet:\n  %s", len(missing), listing)
        config["nav"] = _drop(config["nav"], set(missing))
        config["validation"]["links"]["not_found"] = logging.INFO
        return config
    raise PluginError(f"{len(missing)} pages in mkdocs.yml's nav are not in docs/:\n  {listing}")
