"""Source-Judged Compaction (SJC, seed 002): a post-filter for any summary.

A compaction summary mixes facts the environment established with the
compressor's own plans and guesses, and the agent cannot tell them apart
later.  SJC splits the summary into entries, asks the target whether each
entry has a source in the environment outputs (user messages, tool calls,
tool results: :func:`~sgl_speccompact.history.messages.environment_outputs`) or in
the previous summary, and deletes the entries whose probability
r = p+/(p+ + p-) is below ``config.source_judge_threshold``.  A verdict whose
labels carry less than ``config.min_label_mass`` (p+ + p-) is unreliable: its
entry is kept, marked ``unreliable``, and counted in the report's
``kept_unjudged``.

Entries (:mod:`~sgl_speccompact.core.entries`) are list items and plain lines
under a heading; headings, blank lines and empty markers are never judged
or deleted, and order is kept.  The exact ledger's lines are not judged
either (:func:`judged_entries`): each is a copy of the history.

Before any batch is built, each entry passes the evidence check
(``config.evidence_check``, :mod:`~sgl_speccompact.core.evidence`,
:func:`entry_evidence`): an entry naming a path, id, command or other exact
string that neither the environment record, nor the previous summary, nor
the summary's own exact ledger shows is deleted without a judge request,
its report saying so (``refused``, ``unsourced``).

The seed paper judges with Jev, a non-generative decision model; here the
compaction's judge plays that role (the same :class:`~sgl_speccompact.core.judging.Judge`
as SpecCompact's verification: the target's label probabilities, or
sglang's ``/v1/decisions`` with ``config.judge="decisions"``), since the
target is already served.  The entries are judged in batches of at most
:data:`ENTRIES_PER_REQUEST`, in order: on ``SpecCompactEndpoint`` the
sources every prompt shares (system turn, environment outputs, previous
summary) are prefilled, then ONE batched request judges the batch's
entries on that radix prefix.  Each entry's report carries its
:class:`~sgl_speccompact.result.Verdict` as the judge gave it.  Two forms::

    stand-alone:   system | user[ record + previous summary | entry i + question ] | assistant -> label
    on the prefix: system | user[ compaction's shared prefix | entry i + question ] | assistant -> label
                   `------------- identical for every entry ------------'

The stand-alone form is the default for every summary: the judge sees the
environment record and the previous summary, never the agent's prose (SJC's
premise: only those are sources).  With ``source_judge_on_prefix`` on, after
a slot method (SpecCompact, Target-self) the pipeline passes the
compaction's shared prefix, which the target already holds in its radix
cache: the judgements branch from it like one more slot and the record is
not prefilled again, but the judge then sees the whole conversation, and
the question names which parts of it are sources (the agent's commentary
is excluded by instruction only).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, computed_field

from ..config import CompactConfig, make_config
from ..backends.endpoint import connect
from ..backends.contract import Backend, ProgramBackend
from ..history.messages import Turn, environment_outputs, parse_messages
from ..core.evidence import Evidence, LineSources
from ..core.judge import Verdict
from ..programs.judges import make_judge
from ..programs.questions import EntryQuestions, Sources
from ..core.entries import Entry, drop_entries, is_structure, prune_slots, split_entries  # noqa: F401 - public here too
from ..core.ledger import TITLE as LEDGER_TITLE
from ..core.judge_prompts import SOURCE_JUDGE_SYSTEM, source_judge_context
from ..core.admission import EVIDENCE
from ..result import CompactionResult, StatsRecorder

ENTRIES_PER_REQUEST = 32  # entries judged in one request at most: a long summary is judged in several


@dataclass(frozen=True)
class SharedPrefix:
    """The target prefix a slot method's branches share, as ``fork_slots`` opens it."""

    system: str | None  # our system turn, then a user turn opens; None: ``user`` opens its own turns
    user: str  # the text every branch starts with (ends inside a user turn)
    rubric: bool = False  # it states the judge rubric (short judge suffix)


def sources(turns: tuple[Turn, ...], previous_summary: str | None, cfg: CompactConfig,
            shared: SharedPrefix | None = None) -> Sources:
    """The judge prompts' common start: on ``shared`` if given, else the environment record.

    With ``short_judge_suffix`` the stand-alone record ends with the rubric,
    so each entry's question is the entry alone.
    """
    if shared is not None:
        return Sources(shared.system, shared.user, in_conversation=True, short=shared.rubric)
    short = cfg.short_judge_suffix
    context = source_judge_context(environment_outputs(turns), previous_summary, cfg.positive_label,
                                   cfg.negative_label, short=short)
    return Sources(SOURCE_JUDGE_SYSTEM, context, in_conversation=False, short=short)


class EntryVerdict(BaseModel):
    """One entry with what decided it: its verdict, or the stage that refused it before any judge.

    ``kept``, ``score``, ``label_mass`` and ``unreliable`` are read from the
    verdict (and serialized with it).
    """

    text: str  # the entry, verbatim
    section: str  # heading it sits under
    verdict: Verdict | None = None  # the judge's verdict on it (None: refused before any judge)
    refused: str | None = None  # why it was deleted without a judge request (a stage before the judge: "evidence")
    unsourced: list[str] = Field(default_factory=list)  # refused by the evidence check: the strings it names that no source shows

    @computed_field  # type: ignore[prop-decorator]
    @property
    def kept(self) -> bool:
        """Kept: not refused, and its score reached the threshold or its verdict was unreliable (acts on nothing)."""
        v = self.verdict
        return self.refused is None and (v is None or v.accepted or not v.reliable)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def score(self) -> float | None:
        """r = p+/(p+ + p-): the probability that the entry has a source (None: not judged)."""
        return self.verdict.score if self.verdict is not None else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def label_mass(self) -> float | None:
        """p+ + p- of the verdict (None: not judged)."""
        return self.verdict.label_mass if self.verdict is not None else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def unreliable(self) -> bool:
        """Its label mass was below config min_label_mass: kept unjudged, whatever the score."""
        return self.verdict is not None and not self.verdict.reliable


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

    @computed_field
    @property
    def kept_unjudged(self) -> int:
        """How many entries were kept because their verdict was unreliable (too little label mass)."""
        return sum(e.unreliable for e in self.entries)


def judge_entries(entries: list[Entry], src: Sources, *, target: Backend, cfg: CompactConfig,
                  has_previous: bool, recorder: StatsRecorder, record: str = "") -> list[Verdict]:
    """Judge every entry with the config's judge, :data:`ENTRIES_PER_REQUEST` at a time, in order; counts the
    requests in ``recorder`` (kind ``judge``).

    On a backend whose ``judge_batch`` judges in one request
    (``SpecCompactEndpoint``) each batch is one prefill of the shared sources
    and ONE prefill-only ``/generate`` with its prompts.  Where it declines (a
    plain ``RuntimeEndpoint``, a scripted test backend) each entry is one
    select, concurrently (two requests each on a plain ``RuntimeEndpoint``),
    after the same prefill of the shared sources (:class:`~sgl_speccompact.programs.judges.ProgramJudge`).
    """
    judge, verdicts = make_judge(target, cfg), []
    for i in range(0, len(entries), ENTRIES_PER_REQUEST):
        batch = entries[i:i + ENTRIES_PER_REQUEST]
        judged = judge.judge(EntryQuestions(batch, src, target, cfg, has_previous, record))
        recorder.request("target", "judge", judged.counts, n=judged.requests)
        verdicts.extend(judged.verdicts)
    return verdicts


# ---------------------------------------------------------------- entry points


def _turns(messages_or_turns: Any, cfg: CompactConfig) -> tuple[Turn, ...]:
    if isinstance(messages_or_turns, (list, tuple)) and messages_or_turns and all(
            isinstance(t, Turn) for t in messages_or_turns):
        return tuple(messages_or_turns)
    return parse_messages(messages_or_turns, max_messages=cfg.max_history_messages,
                          max_chars=cfg.max_history_chars)


def source_judge(summary: str, messages_or_turns: Any, *, target: Backend | ProgramBackend | str,
                 config: CompactConfig | dict | None = None, previous_summary: str | None = None,
                 recorder: StatsRecorder | None = None,
                 shared_prefix: SharedPrefix | None = None) -> tuple[str, SourceJudgeReport]:
    """Delete the summary entries that have no source.

    Parameters
    ----------
    summary : str
        Any structured summary (ours or a baseline's).
    messages_or_turns : list of dict or tuple of Turn
        The history the summary was made from (OpenAI chat messages, or
        turns from :func:`~sgl_speccompact.history.messages.parse_messages`).
    target : sglang backend or str
        The judge: a ``SpecCompactEndpoint`` (one batched request), any
        sglang backend (one select per entry), or a base URL.
    config : CompactConfig or dict, optional
        ``source_judge_threshold`` and the label words.
    previous_summary : str, optional
        Summary of earlier turns; counts as a source.
    recorder : StatsRecorder, optional
        Receives the judge requests (kind ``judge``).
    shared_prefix : SharedPrefix, optional
        The shared target prefix of the slot-parallel compaction that wrote
        ``summary`` (it must hold the same history and previous summary):
        the judgements branch from it instead of prefilling the record.

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
    entries = judged_entries(summary, cfg)
    found = entry_evidence(summary, entries, turns, previous_summary, cfg)
    asked = [e for e, f in zip(entries, found) if f.passed]  # the others are deleted unjudged
    src = sources(turns, previous_summary, cfg, shared_prefix)
    record = (source_judge_context(environment_outputs(turns), previous_summary) if cfg.judge == "decisions"
              else "")
    verdicts = iter(judge_entries(asked, src, target=target, cfg=cfg, has_previous=bool(previous_summary),
                                  recorder=recorder, record=record))
    decided = [EntryVerdict(text=e.text, section=e.section, verdict=next(verdicts)) if f.passed else
               EntryVerdict(text=e.text, section=e.section, refused=EVIDENCE, unsourced=list(f.missing))
               for e, f in zip(entries, found)]
    recorder.verdicts([d.verdict for d in decided if d.verdict is not None])
    if len(asked) < len(entries):
        recorder.evidence_refused(len(entries) - len(asked))
    after = sum(c.requests for c in recorder.stats.requests.get("target", {}).values())
    report = SourceJudgeReport(threshold=cfg.source_judge_threshold, requests=after - before, entries=decided)
    return drop_entries(summary, entries, [e.kept for e in report.entries]), report


def entry_evidence(summary: str, entries: list[Entry], turns: tuple[Turn, ...], previous_summary: str | None,
                   cfg: CompactConfig) -> list[Evidence]:
    """Each entry's evidence: the strings it names that no source of SJC's shows (all pass with
    ``evidence_check`` off).

    The sources are what SJC's judge reads, the environment record and the
    previous summary, and the summary's own exact ledger (copies of the
    history and of the previous summary's ledger, which no model wrote).

    >>> from ..history.messages import Turn
    >>> summary = "## Goal\\n- fix a.py\\n- fix b.py\\n\\n## Exact Ledger\\n- m1 read `b.py`"
    >>> entries = judged_entries(summary, CompactConfig())
    >>> [f.missing for f in entry_evidence(summary, entries, (Turn("user", "fix a.py"),), None, CompactConfig())]
    [(), ()]
    >>> [f.missing for f in entry_evidence(summary, entries, (Turn("user", "hi"),), None, CompactConfig())]
    [('a.py',), ()]
    """
    if not cfg.evidence_check or not entries:
        return [Evidence() for _ in entries]
    ledger = [e.text for e in split_entries(summary, cfg.empty_markers) if e.section == LEDGER_TITLE]
    lines = LineSources(environment_outputs(turns), previous_summary or "", "\n".join(ledger))
    return [lines.check(e.text) for e in entries]


def judged_entries(summary: str, cfg: CompactConfig) -> list[Entry]:
    """The entries of ``summary`` SJC judges: every one but the exact ledger's, which are copies of
    the history (or of the previous summary's ledger) by construction, so a verdict could only lose one.

    >>> [e.text for e in judged_entries("## Goal\\n- a\\n\\n## Exact Ledger\\n- m1 ran `ls`\\n", CompactConfig())]
    ['- a']
    """
    return [e for e in split_entries(summary, cfg.empty_markers) if e.section != LEDGER_TITLE]


def check_labels(target: Backend, cfg: CompactConfig) -> None:
    """Resolve the judge labels now, so a bad label fails before any generation (the program judge's:
    the decision route uses its own labels)."""
    if cfg.judge == "program":
        target.label_tokens(cfg.positive_label, cfg.negative_label)


def source_judge_result(result: CompactionResult, messages_or_turns: Any, *, target: Backend | ProgramBackend | str,
                        config: CompactConfig | dict | None = None, previous_summary: str | None = None,
                        shared_prefix: SharedPrefix | None = None) -> CompactionResult:
    """Apply SJC to a finished compaction (``shared_prefix``: see :func:`source_judge`).

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
                                    previous_summary=previous_summary, recorder=recorder,
                                    shared_prefix=shared_prefix)
    count = target.count_tokens
    if report.deleted:
        entries = judged_entries(out.summary, cfg)
        gone = {i for e, v in zip(entries, report.entries) if not v.kept for i in range(e.start, e.end)}
        out.slots = prune_slots(out.slots, out.summary.split("\n"), gone, count)
        out.summary_tokens = count([filtered])[0]
    out.summary = filtered
    out.source_judge = report.model_dump(mode="json")
    elapsed = time.perf_counter() - t0
    recorder.time("source_judge", elapsed)
    out.stats.total_wall_s += elapsed
    return out
