"""From what a method wrote to a checked summary.

Two shapes reach this module: slot results (SpecCompact, Target-self),
assembled in schema order, and one generated text (Hermes-style,
OpenClaw-style), whose ``## `` sections are reported as slots.  Either
way the summary is checked against ``max_summary_tokens`` here and only
here; an over-budget or cut-off summary raises
:class:`~sgl_speccompact.errors.SummaryBudgetError`, never returns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Callable

from ..config import CompactConfig
from ..errors import BackendError, SummaryBudgetError
from ..core.entries import is_structure
from ..core.ledger import TITLE, LedgerSection
from ..core.ledger_budget import MAX_REFITS, count_lines, fit, merge
from ..core.read_set import lines as read_set_lines, read_set
from ..result import LedgerEntry, LedgerReport
from ..core.lines import drop_blank_ends, is_placeholder, norm_line, placeholder_texts
from ..core.prompts import INCOMPLETE, assemble
from ..result import LineOrigin, SlotResult, StopReason, SummaryLine
from ..schema import Slot

Counter = Callable[[list[str]], list[int]]  # texts -> length in target tokens
LEDGER_SLOT = "ledger"  # the slot name of the exact ledger's section
CUT_SHORT = frozenset({"repair_truncated"})  # stop reasons of a slot whose next line was cut off: incomplete
# stop reasons of a section that is not all there (a slot cut short, a one-shot's last section cut off by
# its cap, a section of its fixed format it never wrote): a result holding one is ``truncated``
INCOMPLETE_STOPS = CUT_SHORT | {"cut_off", "missing"}


@dataclass(frozen=True)
class OneShot:
    """A whole summary written by one target generation."""

    text: str  # the generated text, as returned
    meta: dict = field(default_factory=dict)  # its meta_info (finish_reason, completion_tokens)
    names: dict[str, str] | None = None  # section title -> slot name; other titles are slugged
    max_tokens: int | None = None  # the generation cap it ran under (None: cfg.monolithic_max_tokens)
    budget: int | None = None  # its summary token budget (None: cfg.max_summary_tokens)
    placeholders: frozenset[str] = frozenset()  # its format's bracketed stand-ins: lines holding one are removed


@dataclass(frozen=True)
class Assembled:
    """A summary within budget and the slots it is reported as."""

    summary: str  # the full summary, ending in a newline
    tokens: int  # its length in target tokens
    slots: list[SlotResult]  # one per section, in summary order
    truncated: bool = False  # cut off by the generation cap (only with cfg.report_cut_off)
    budget: int = 0  # the summary token budget it was checked against (the ledger takes the room left)


def from_slots(slots: tuple[Slot, ...], results: list[SlotResult], cfg: CompactConfig,
               count: Counter) -> Assembled:
    """Assemble slot results in schema order and enforce the summary budget.

    A placeholder line, or a line already in an earlier slot, is removed
    (:func:`drop_unfit`).  A slot cut short (:data:`CUT_SHORT`) makes the
    summary ``truncated``; left empty, it reads ``(incomplete)``, never ``(none)``.
    """
    results = drop_unfit(results, cfg.empty_markers, placeholder_texts(tuple(s.body_format for s in slots)), count)
    bodies = {r.name: [line.text for line in r.lines] or ([INCOMPLETE] if r.stop_reason in CUT_SHORT else [])
              for r in results}
    summary = assemble(slots, bodies)
    tokens = count([summary])[0]
    if tokens > cfg.max_summary_tokens:
        raise SummaryBudgetError(tokens, cfg.max_summary_tokens)
    return Assembled(summary, tokens, results, truncated=any(r.stop_reason in CUT_SHORT for r in results),
                     budget=cfg.max_summary_tokens)


def drop_unfit(results: list[SlotResult], markers: tuple[str, ...], placeholders: frozenset[str],
               count: Counter) -> list[SlotResult]:
    """Copies of ``results`` (in summary order) without the content lines that are no content of theirs.

    A line holding one of the schema's ``placeholders`` is template text
    (listed in its slot's ``removed_placeholders``).  A fact belongs to one
    section: the first slot keeps it, a later copy is removed (listed in its
    slot's ``removed_duplicates``).  Headings, blank lines and empty markers
    are structure and may repeat.

    >>> line = lambda t: SummaryLine(text=t, origin=LineOrigin.TARGET)
    >>> a = SlotResult(name="goal", title="Goal", lines=[line("- a.py"), line("1. [First step]")])
    >>> b = SlotResult(name="next", title="Next", tokens=5, lines=[line("-  A.py"), line("(none)")])
    >>> out = drop_unfit([a, b], ("(none)",), frozenset({"first step"}), lambda ts: [2 for _ in ts])
    >>> out[0].removed_placeholders, [x.text for x in out[1].lines], out[1].removed_duplicates, out[1].tokens
    (['1. [First step]'], ['(none)'], ['-  A.py'], 3)
    """
    seen: set[str] = set()
    out = []
    for result in results:
        result = result.model_copy(deep=True)
        kept = []
        for line in result.lines:
            if is_structure(line.text, markers):
                kept.append(line)
                continue
            removed = (result.removed_placeholders if is_placeholder(line.text, placeholders)
                       else result.removed_duplicates if norm_line(line.text) in seen else None)
            if removed is None:
                kept.append(line)
                seen.add(norm_line(line.text))
                continue
            removed.append(line.text)
            result.tokens -= count([line.text + "\n"])[0]
        for blank in drop_blank_ends(kept):  # a removed line may leave a blank line at an end
            result.tokens -= count([blank.text + "\n"])[0]
        result.lines = kept
        out.append(result)
    return out


def from_text(written: OneShot, cfg: CompactConfig, count: Counter) -> Assembled:
    """Check a one-shot summary against the budgets and split it into sections.

    A generation cut off by its cap is incomplete: it raises like an
    over-budget summary, or with ``cfg.report_cut_off`` comes back marked
    ``truncated`` (benchmarks report it instead of failing).  An empty one
    is a backend error.  One that lacks sections of its fixed format
    (``written.names``) is incomplete too: it comes back ``truncated``, each
    missing section reported as a slot with ``stop_reason="missing"``.  Lines
    holding a stand-in of its format (``written.placeholders``) are removed
    (each section's ``removed_placeholders``).
    """
    cut = (written.meta.get("finish_reason") or {}).get("type") == "length"
    if cut and not cfg.report_cut_off:
        used = int(written.meta.get("completion_tokens") or 0) or count([written.text])[0]
        raise SummaryBudgetError(used, written.max_tokens or cfg.monolithic_max_tokens)
    stand_ins = {name: [ln for ln in body if is_placeholder(ln, written.placeholders)]
                 for name, _, body in sections(written.text, written.names)}
    summary = "\n".join(ln for ln in written.text.split("\n") if not is_placeholder(ln, written.placeholders)).strip()
    if not summary:
        raise BackendError("the target returned an empty summary")
    summary += "\n"
    tokens = count([summary])[0]
    budget = written.budget or cfg.max_summary_tokens
    if tokens > budget and not cut:
        raise SummaryBudgetError(tokens, budget)
    parts = sections(summary, written.names)
    missing = [(name, title) for title, name in (written.names or {}).items()
               if title not in {t for _, t, _ in parts}]
    sizes = count(["".join(line + "\n" for line in body) for _, _, body in parts])
    slots = [SlotResult(name=name, title=title, stop_reason=stop, tokens=n,
                        removed_placeholders=stand_ins.get(name, []),
                        lines=[SummaryLine(text=line, origin=LineOrigin.TARGET) for line in body])
             for (name, title, body), n, stop in zip(parts, sizes, stop_reasons(parts, written.names, cut))]
    slots += [SlotResult(name=name, title=title, stop_reason="missing") for name, title in missing]
    return Assembled(summary, tokens, slots, truncated=cut or bool(missing), budget=budget)


def stop_reasons(parts: list[tuple[str, str, list[str]]], names: dict[str, str] | None, cut: bool) -> list[str]:
    """Each section's stop reason: ``complete``; the last one of a cut-off text ``cut_off``; with a
    fixed format (``names``), text outside its sections ``outside_sections``.

    >>> stop_reasons([("summary", "Summary", ["- a"])], {"Goal": "goal"}, cut=True)
    ['cut_off']
    >>> stop_reasons([("preamble", "Preamble", ["hi"]), ("goal", "Goal", ["- a"])], {"Goal": "goal"}, cut=False)
    ['outside_sections', 'complete']
    """
    out = []
    for i, (_, title, _) in enumerate(parts):
        if cut and i == len(parts) - 1:
            out.append("cut_off")
        elif names and title not in names and title in ("Summary", "Preamble"):
            out.append("outside_sections")
        else:
            out.append("complete")
    return out


def section_events(slots: list[SlotResult], written: bool = True) -> list[dict]:
    """The progress events of finished sections: each one's lines, then its ``slot_written`` (unless not
    ``written``: the exact ledger is no slot of the schema, so progress does not count it).

    >>> s = SlotResult(name="goal", title="Goal", stop_reason="complete",
    ...                lines=[SummaryLine(text="- a", origin=LineOrigin.TARGET)])
    >>> [e["type"] for e in section_events([s])]
    ['line', 'slot_written']
    """
    events = []
    for slot in slots:
        content = [line for line in slot.lines if line.text.strip()]
        events += [{"type": "line", "slot": slot.name, "text": line.text, "origin": line.origin.value,
                    "score": line.score} for line in content]
        if written:
            events.append({"type": "slot_written", "slot": slot.name, "stop_reason": slot.stop_reason,
                           "lines": len(content)})
    return events


# ---------------------------------------------------------------- the exact ledger


def with_ledger(done: Assembled, entries: list[LedgerEntry], carried: LedgerSection, cfg: CompactConfig,
                count: Counter) -> tuple[Assembled, LedgerReport]:
    """``done`` with the exact ledger appended, and the result's ledger report.

    The ledger takes the room the sections left of the summary budget, up to
    ``cfg.max_ledger_tokens``: the sections are never cut for it, and the
    whole summary stays within ``done.budget`` (checked on the joined text;
    the room shrinks by any excess and the section is fitted again).
    ``entries`` are this history's (:func:`~sgl_speccompact.history.ledger_entries.ledger_entries`),
    ``carried`` the previous summary's section; the section's lines are a
    slot of their own (origin ``ledger_exact``), after every other.  The
    report's read set is every file's (:func:`~sgl_speccompact.core.read_set.read_set`),
    whatever the section had room to show.
    """
    merged = merge(carried.entries, entries)
    files = read_set(merged, carried.read_set)
    room = min(cfg.max_ledger_tokens, done.budget - done.tokens)
    report = LedgerReport(read_set=files, budget=max(room, 0), found=len(entries), merged=len(merged))
    for _ in range(MAX_REFITS):
        fitted = fit(merged, carried, room, count, read_set_lines(files))
        if not fitted.lines:
            break
        summary = done.summary + "\n" + fitted.text
        tokens = count([summary])[0]
        if tokens > done.budget:
            room -= tokens - done.budget
            continue
        slot = SlotResult(name=LEDGER_SLOT, title=TITLE, tokens=fitted.tokens,
                          stop_reason=StopReason.LEDGER_BUDGET if fitted.counted else StopReason.COMPLETE,
                          lines=[SummaryLine(text=line, origin=LineOrigin.LEDGER) for line in fitted.lines[1:]])
        report = report.model_copy(update={"entries": list(fitted.shown), "carried": sum(e.carried for e in fitted.shown),
                                           "counted": fitted.counted, "tokens": fitted.tokens, "budget": room})
        return replace(done, summary=summary, tokens=tokens, slots=[*done.slots, slot]), report
    # no room: everything is only counted, and not shown
    return done, report.model_copy(update={"counted": count_lines(merged, carried)[1]})


# ---------------------------------------------------------------- sections of a text (pure)


def slug(title: str) -> str:
    """A slot-style name for a section title.

    >>> slug("Constraints & Preferences")
    'constraints_preferences'
    """
    return re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_") or "section"


def sections(summary: str, names: dict[str, str] | None = None) -> list[tuple[str, str, list[str]]]:
    """``(name, title, body lines)`` of each ``## `` section of a summary, in order.

    ``names`` maps known titles to slot names; other titles are slugged.
    Text before the first heading is a section titled ``Preamble``; a
    summary without headings is one section titled ``Summary``.

    >>> sections("## Goal\\n- a\\n\\n## Next Steps\\n1. b\\n", {"Goal": "goal"})
    [('goal', 'Goal', ['- a']), ('next_steps', 'Next Steps', ['1. b'])]
    """
    names = names or {}
    parts: list[tuple[str | None, list[str]]] = [(None, [])]
    for line in summary.split("\n"):
        if line.startswith("## "):
            parts.append((line[3:].strip(), []))
        else:
            parts[-1][1].append(line)
    out = []
    for title, body in parts:
        body = trim(body)
        if title is None:
            if not body:
                continue
            title = "Summary" if len(parts) == 1 else "Preamble"
        out.append((names.get(title, slug(title)), title, body))
    return out


def trim(lines: list[str]) -> list[str]:
    """Without leading and trailing blank lines.

    >>> trim(["", "- a", "", "- b", " "])
    ['- a', '', '- b']
    """
    keep = [i for i, line in enumerate(lines) if line.strip()]
    return lines[keep[0]:keep[-1] + 1] if keep else []
