"""What Source-Judged Compaction deleted, and whether those entries deserved it.

From a result's SJC report (``CompactionResult.source_judge``) and the
history: how many entries were judged and deleted, how many deleted entries
held an invented identifier (:func:`~.recall.is_invented`), how many were
"next step" entries (their section title names next steps or a plan, which
have no source by nature), and how many entries with invented identifiers
SJC kept.
"""

from __future__ import annotations

import re

from sgl_speccompact.history.identifiers import Identifier, extract
from .recall import is_invented

NEXT_STEP = re.compile(r"next\s*step|pending|plan|to\s*do|todo|remaining", re.IGNORECASE)


def is_next_step(section: str) -> bool:
    """Whether a section title holds next steps.

    >>> [is_next_step(s) for s in ("Next Steps", "Pending User Asks", "Key Decisions")]
    [True, True, False]
    """
    return bool(NEXT_STEP.search(section))


def sjc_report(report: dict | None, history_ids: list[Identifier], history: str) -> dict | None:
    """Counts and deleted entries of one SJC report (None when SJC did not run).

    >>> rep = {"entries": [{"text": "- edit b.py", "section": "Next Steps", "score": 0.1, "kept": False},
    ...                    {"text": "- a.py fails", "section": "Progress", "score": 0.9, "kept": True}]}
    >>> out = sjc_report(rep, extract("a.py fails"), "a.py fails")
    >>> out["deleted"], out["deleted_with_invented"], out["deleted_next_step"], out["kept_with_invented"]
    (1, 1, 1, 0)
    """
    if not report:
        return None
    entries = report.get("entries") or []
    rows = []
    for e in entries:
        invented = [f"{i.kind}:{i.value}" for i in extract(e["text"]) if is_invented(i, history_ids, history)]
        rows.append({**e, "invented": invented, "next_step": is_next_step(e.get("section", ""))})
    deleted = [r for r in rows if not r["kept"]]
    return {
        "entries": len(rows),
        "deleted": len(deleted),
        "deleted_with_invented": sum(bool(r["invented"]) for r in deleted),
        "deleted_next_step": sum(r["next_step"] for r in deleted),
        "kept_with_invented": sum(bool(r["invented"]) for r in rows if r["kept"]),
        "deleted_entries": deleted,
    }
