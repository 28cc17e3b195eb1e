"""Source-Judged Compaction (SJC, seed 002): a post-filter for any summary.

A compaction summary mixes facts the environment established with the
compressor's own plans and guesses, and the agent cannot tell them apart
later.  SJC splits the summary into entries, asks the target whether each
entry has a source in the environment outputs (user messages, tool calls,
tool results: :func:`~sgl_speccompact.history.environment_outputs`) or in
the previous summary, and deletes the entries whose probability
r = p+/(p+ + p-) is below ``config.source_judge_threshold``.

Entries are list items (with their indented continuation lines and fenced
code blocks) and plain lines under a heading.  Headings, blank lines,
horizontal rules, bare labels ("Done:") and empty markers such as
``(none)`` are structure: never judged, never deleted.  Order is kept.

The seed paper judges with Jev, a non-generative decision model; here the
target's label probabilities play that role (the same exact judge as
SpecCompact's verification), since the target is already served.  All
entries of one compaction go to the target in ONE batched request whose
prompts share the system turn, the environment outputs and the previous
summary as a radix prefix::

    system | user[ sources | entry i + question ] | assistant  -> label token
             `-- identical for every entry --'
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Iterable

import sglang as sgl
from pydantic import BaseModel, Field, computed_field
from sglang.lang.backend.base_backend import BaseBackend
from sglang.lang.global_config import global_config

from .config import CompactConfig, make_config
from .endpoint import LabelJudgement, connect, token_counter
from .history import Turn, environment_outputs, parse_messages
from .judge import Judgement
from .programs import result_of
from .prompts import SOURCE_JUDGE_SYSTEM, source_judge_context, source_judge_question
from .result import CompactionResult, SlotResult, StatsRecorder

LIST_ITEM = re.compile(r"^\s*(?:[-*+\u2022]|\d+[.)])\s+")
FENCE = re.compile(r"^\s*(?:```|~~~)")
RULE = re.compile(r"^\s*(?:[-*_]\s*){3,}$")
# a line that only names what follows: "**Done**", "__Blocked:__", "In Progress:"
LABEL = re.compile(r"^(?:\*\*|__)[^*_]+(?:\*\*|__):?$|^(?:\*\*|__)?[A-Za-z][\w &/()'-]{0,60}:(?:\*\*|__)?$")
# run_batch lets this many fallback judge programs run at once
FALLBACK_THREADS = 64


@dataclass(frozen=True)
class Entry:
    """One deletable unit of a summary."""

    start: int  # index of its first line in ``summary.split("\\n")``
    end: int  # one past its last line
    text: str  # its lines joined with newlines, verbatim
    section: str  # title of the nearest heading above it ("" before any heading)


class EntryVerdict(BaseModel):
    """The judge's answer about one entry."""

    text: str  # the entry, verbatim
    section: str  # heading it sits under
    score: float  # r = p+/(p+ + p-): probability that the entry has a source
    kept: bool  # score >= threshold


class SourceJudgeReport(BaseModel):
    """Every entry of one summary with its score and verdict (JSON-able)."""

    threshold: float  # entries scoring below this were deleted
    entries: list[EntryVerdict] = Field(default_factory=list)  # in summary order
    requests: int = 0  # target requests the judging took

    @computed_field
    @property
    def deleted(self) -> int:
        """How many entries were removed."""
        return sum(not e.kept for e in self.entries)


# ---------------------------------------------------------------- splitting (pure)


def is_structure(line: str, empty_markers: Iterable[str] = ()) -> bool:
    """Whether a line is formatting that is never judged or deleted.

    >>> [is_structure(x, ["(none)"]) for x in ["## Goal", "", "- (none)", "Done:", "- fix a.py"]]
    [True, True, True, True, False]
    """
    s = line.strip()
    if not s or s.startswith("#") or RULE.match(s):
        return True
    markers = {m.lower() for m in empty_markers}
    if s.lower() in markers or LIST_ITEM.sub("", s).lower() in markers:
        return True
    return bool(LABEL.match(s))


def split_entries(summary: str, empty_markers: Iterable[str] = ()) -> list[Entry]:
    """The entries of a summary, in order.

    A list item owns the indented non-item lines after it; a fenced code
    block is one entry (with the item it follows directly, if any); each
    other content line is an entry of its own.

    >>> s = "## Goal\\n- fix a.py\\n  in /repo\\n\\n## Next Steps\\n(none)\\n1. run tests"
    >>> [(e.text, e.section) for e in split_entries(s, ["(none)"])]
    [('- fix a.py\\n  in /repo', 'Goal'), ('1. run tests', 'Next Steps')]
    """
    markers = tuple(empty_markers)
    lines = summary.split("\n")
    spans: list[list] = []  # [start, end, section]
    section, current, fence = "", None, False
    for i, line in enumerate(lines):
        if fence:
            current[1] = i + 1
            fence = not FENCE.match(line)
            continue
        if FENCE.match(line):
            if current is None:  # not directly under an entry: an entry of its own
                current = [i, i + 1, section]
                spans.append(current)
            current[1], fence = i + 1, True
            continue
        if is_structure(line, markers):
            if line.strip().startswith("#"):
                section = line.strip().lstrip("#").strip()
            current = None
            continue
        if current is not None and _continues(line, lines[i - 1]):
            current[1] = i + 1
            continue
        current = [i, i + 1, section]
        spans.append(current)
    return [Entry(a, b, "\n".join(lines[a:b]), sec) for a, b, sec in spans]


def _continues(line: str, previous: str) -> bool:
    """An indented non-item line, or a quote line after a quote line, extends the entry above."""
    if line[:1].isspace() and not LIST_ITEM.match(line):
        return True
    return line.lstrip().startswith(">") and previous.lstrip().startswith(">")


def drop_entries(summary: str, entries: list[Entry], keep: list[bool]) -> str:
    """``summary`` without the entries whose ``keep`` is False (everything else untouched).

    >>> s = "## Goal\\n- a\\n- b\\n"
    >>> drop_entries(s, split_entries(s), [True, False])
    '## Goal\\n- a\\n'
    """
    gone = {i for e, k in zip(entries, keep) if not k for i in range(e.start, e.end)}
    return "\n".join(line for i, line in enumerate(summary.split("\n")) if i not in gone)


# ---------------------------------------------------------------- programs


def judge_turn(s, context: str, question: str, assistant_prefix: str) -> None:
    """System turn, then sources + question as one user turn, then the opened answer."""
    s += sgl.system(SOURCE_JUDGE_SYSTEM)
    s += sgl.user_begin()
    s += context  # shared by every entry: keep it first
    s += question
    s += sgl.user_end()
    s += sgl.assistant_begin()
    s += assistant_prefix


@sgl.function
def source_judge_prompt(s, context, question, assistant_prefix):
    """The judge prompt up to the label token; text only, sends no request."""
    judge_turn(s, context, question, assistant_prefix)


@sgl.function
def source_judge_entry(s, context, question, assistant_prefix, positive, negative, eta):
    """One entry's judgement as a select (the fallback for backends without ``judge_batch``)."""
    judge_turn(s, context, question, assistant_prefix)
    s += sgl.select("verdict", choices=[positive, negative], choices_method=LabelJudgement(eta))


def judge_entries(entries: list[Entry], context: str, *, target: Any, cfg: CompactConfig,
                  has_previous: bool, recorder: StatsRecorder) -> list[Judgement]:
    """Judge every entry; counts the requests in ``recorder`` (kind ``judge``).

    On a backend with ``judge_batch`` (``SpecCompactEndpoint``) this is ONE
    prefill-only ``/generate`` with all prompts.  Any other sglang backend
    (a plain ``RuntimeEndpoint``, a scripted test backend) runs
    :func:`source_judge_entry` for each entry with ``run_batch``: one select
    per entry, concurrently (two requests each on a plain ``RuntimeEndpoint``),
    after sglang's batch precache of the shared sources (one more request).
    """
    if not entries:
        return []
    prefix = getattr(target, "assistant_prefix", "")
    pos, neg, eta = cfg.positive_label, cfg.negative_label, cfg.source_judge_threshold
    questions = [source_judge_question(e.text, e.section, pos, neg, has_previous) for e in entries]
    if hasattr(target, "judge_batch"):
        texts = [source_judge_prompt.run(context=context, question=q, assistant_prefix=prefix,
                                         backend=target).text() for q in questions]
        judgements, meta = target.judge_batch(texts, pos, neg, eta)
        recorder.request("target", "judge", meta, n=int(meta.get("requests", 1)))
        return judgements
    program = source_judge_entry.bind(context=context, assistant_prefix=prefix, positive=pos,
                                      negative=neg, eta=eta)
    if _precaches(target, len(questions)):
        recorder.request("target", "judge", None)
    states = program.run_batch([{"question": q} for q in questions], backend=target,
                               num_threads=min(FALLBACK_THREADS, len(questions)))
    out = []
    for state in states:
        _, meta = result_of(state, "verdict")
        recorder.request("target", "judge", meta, n=int(meta.get("requests", 1)))
        out.append(Judgement(**meta["judgement"]))
    return out


def _precaches(backend: Any, n: int) -> bool:
    # sglang's run_batch traces the program and sends its constant prefix
    # (here: system turn and sources) once before the batch, via cache_prefix
    return (n > 1 and global_config.enable_precache_with_tracing
            and type(backend).cache_prefix is not BaseBackend.cache_prefix)


# ---------------------------------------------------------------- entry points


def _turns(messages_or_turns: Any, cfg: CompactConfig) -> tuple[Turn, ...]:
    if isinstance(messages_or_turns, (list, tuple)) and messages_or_turns and all(
            isinstance(t, Turn) for t in messages_or_turns):
        return tuple(messages_or_turns)
    return parse_messages(messages_or_turns, max_messages=cfg.max_history_messages,
                          max_chars=cfg.max_history_chars)


def source_judge(summary: str, messages_or_turns: Any, *, target: Any,
                 config: CompactConfig | dict | None = None, previous_summary: str | None = None,
                 recorder: StatsRecorder | None = None) -> tuple[str, SourceJudgeReport]:
    """Delete the summary entries that have no source.

    Parameters
    ----------
    summary : str
        Any structured summary (ours or a baseline's).
    messages_or_turns : list of dict or tuple of Turn
        The history the summary was made from (OpenAI chat messages, or
        turns from :func:`~sgl_speccompact.history.parse_messages`).
    target : sglang backend or str
        The judge: a ``SpecCompactEndpoint`` (one batched request), any
        sglang backend (one select per entry), or a base URL.
    config : CompactConfig or dict, optional
        ``source_judge_threshold`` and the label words.
    previous_summary : str, optional
        Summary of earlier turns; counts as a source.
    recorder : StatsRecorder, optional
        Receives the judge requests (kind ``judge``).

    Returns
    -------
    filtered : str
        ``summary`` without the deleted entries, order and structure kept.
    report : SourceJudgeReport
        Every entry with its score and verdict.

    Raises
    ------
    InvalidHistoryError, ConfigError, LabelTokenError, BackendError
    """
    cfg = make_config(config)
    turns = _turns(messages_or_turns, cfg)
    target = connect(target)
    recorder = recorder if recorder is not None else StatsRecorder()
    before = sum(c.requests for c in recorder.stats.requests.get("target", {}).values())
    entries = split_entries(summary, cfg.empty_markers)
    context = source_judge_context(environment_outputs(turns), previous_summary)
    judgements = judge_entries(entries, context, target=target, cfg=cfg, has_previous=bool(previous_summary),
                               recorder=recorder)
    keep = [j.accepted for j in judgements]
    after = sum(c.requests for c in recorder.stats.requests.get("target", {}).values())
    report = SourceJudgeReport(
        threshold=cfg.source_judge_threshold, requests=after - before,
        entries=[EntryVerdict(text=e.text, section=e.section, score=j.score, kept=j.accepted)
                 for e, j in zip(entries, judgements)],
    )
    return drop_entries(summary, entries, keep), report


def check_labels(target: Any, cfg: CompactConfig) -> None:
    """Resolve the judge labels now, so a bad label fails before any generation."""
    if hasattr(target, "label_tokens"):
        target.label_tokens(cfg.positive_label, cfg.negative_label)


def source_judge_result(result: CompactionResult, messages_or_turns: Any, *, target: Any,
                        config: CompactConfig | dict | None = None,
                        previous_summary: str | None = None) -> CompactionResult:
    """Apply SJC to a finished compaction.

    Returns a copy whose ``summary`` is the filtered one, whose ``slots``
    no longer hold the deleted lines, whose ``source_judge`` is the report
    (as a dict), and whose stats include the judge request(s) and the
    ``source_judge`` wall time.
    """
    t0 = time.perf_counter()
    cfg = make_config(config)
    target = connect(target)
    out = result.model_copy(deep=True)
    recorder = StatsRecorder(stats=out.stats)
    filtered, report = source_judge(out.summary, messages_or_turns, target=target, config=cfg,
                                    previous_summary=previous_summary, recorder=recorder)
    count = token_counter(target)
    if report.deleted:
        entries = split_entries(out.summary, cfg.empty_markers)
        gone = {i for e, v in zip(entries, report.entries) if not v.kept for i in range(e.start, e.end)}
        out.slots = prune_slots(out.slots, out.summary.split("\n"), gone, count)
        out.summary_tokens = count([filtered])[0]
    out.summary = filtered
    out.source_judge = report.model_dump(mode="json")
    elapsed = time.perf_counter() - t0
    recorder.time("source_judge", elapsed)
    out.stats.total_wall_s += elapsed
    return out


def prune_slots(slots: list[SlotResult], lines: list[str], gone: set[int], count) -> list[SlotResult]:
    """Remove from ``slots`` the summary lines whose index is in ``gone``.

    Summary lines are matched to slot lines in order under each ``## Title``
    heading (lines before any heading: the ``Preamble`` or ``Summary``
    slot); slots that lost lines get their token count redone.
    """
    by_title = {s.title: s for s in slots}
    drop: dict[str, set[int]] = {}
    # text before any heading is the section a monolithic summary reports as Preamble / Summary
    current, pos = by_title.get("Preamble") or by_title.get("Summary"), 0
    for i, line in enumerate(lines):
        if line.startswith("## ") and line[3:].strip() in by_title:
            current, pos = by_title[line[3:].strip()], 0
            continue
        if current is None:
            continue
        j = next((k for k in range(pos, len(current.lines)) if current.lines[k].text == line), None)
        if j is None:
            continue
        pos = j + 1
        if i in gone:
            drop.setdefault(current.name, set()).add(j)
    out = []
    for s in slots:
        if s.name in drop:
            kept = [line for k, line in enumerate(s.lines) if k not in drop[s.name]]
            tokens = sum(count([line.text + "\n" for line in kept])) if kept else 0
            s = s.model_copy(update={"lines": kept, "tokens": tokens})
        out.append(s)
    return out
