"""Sub-section starts as drafter SFT examples (pure).

With ``sub_slot_branches`` on, a slot with sections (Progress: Done / In
Progress / Blocked) is drafted one sub-section per branch: the drafter's
turn opens with ``### In Progress`` and ends at the next heading.  A drafter
trained only on whole slots never saw a turn start there.
:func:`section_records` cuts a whole-slot example into one example per
sub-section, the completion starting at its heading, so those starts are
in the training data (``python -m sgl_speccompact.train.data --section-starts``).
"""

from __future__ import annotations

from ..schema import Slot


def split_sections(text: str, titles: tuple[str, ...]) -> list[tuple[str, str]]:
    """``(title, text from its heading to the next one)`` for each of ``titles`` found in ``text``.

    Trailing blank lines of a sub-section are dropped.

    >>> split_sections("### Done\\n- a\\n\\n### Blocked\\n- (none)", ("Done", "In Progress", "Blocked"))
    [('Done', '### Done\\n- a'), ('Blocked', '### Blocked\\n- (none)')]
    """
    heads = {f"### {t}": t for t in titles}
    out: list[tuple[str, list[str]]] = []
    for line in text.split("\n"):
        if line.strip() in heads:
            out.append((heads[line.strip()], [line.strip()]))
        elif out:
            out[-1][1].append(line)
    return [(title, "\n".join(lines).rstrip()) for title, lines in out]


def section_records(record: dict, slot: Slot) -> list[dict]:
    """One SFT record per sub-section of a whole-slot ``record`` (none for a slot without sections).

    Each has the slot's prompt, ``"section": title`` and the sub-section
    (heading first) as its completion.

    >>> from sgl_speccompact.schema import OPENCLAW_SLOTS
    >>> rec = {"slot": "progress", "prompt": [], "completion": [
    ...     {"role": "assistant", "content": "### Done\\n- a\\n\\n### In Progress\\n- [ ] b"}]}
    >>> [(r["section"], r["completion"][0]["content"]) for r in section_records(rec, OPENCLAW_SLOTS[2])]
    [('Done', '### Done\\n- a'), ('In Progress', '### In Progress\\n- [ ] b')]
    """
    if not slot.sections:
        return []
    text = record["completion"][0]["content"]
    return [{**record, "section": title, "completion": [{"role": "assistant", "content": part}]}
            for title, part in split_sections(text, slot.sections)]
