"""What a compaction returns: the summary, every line's provenance, and stats.

``CompactionResult`` is the one result type of every method (SpecCompact,
the baselines, and Source-Judged Compaction as a post-filter).  A result
always holds a complete summary: failures raise instead of returning a
partial one.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Annotated, Callable, TypeVar

from pydantic import BaseModel, Field, computed_field

SERVERS = ("target", "drafter")  # keys of CompactionStats.requests
T = TypeVar("T")


class LineOrigin(str, Enum):
    """How a summary line got into the summary."""

    DRAFTED = "drafted_accepted"  # drafter line the target judged positive
    REPAIRED = "repaired"  # target-written replacement of a rejected line
    UNJUDGED = "accepted_without_judge"  # heading, empty marker or blank line
    TARGET = "target_written"  # written by the target alone (baselines)
    CARRIED = "carried"  # previous summary's line the target judged to still hold (no drafter decode)
    LEDGER = "ledger_exact"  # exact ledger line: copied from the history (or the previous summary's ledger), no model


@dataclass(frozen=True)
class ReadsInPlaceOf:
    """Field metadata: this string stands in the place of another field of its record.

    A rejected draft took the place its repair now holds; output cleaning
    (:mod:`sgl_speccompact.core.outputs`) reads the drafts among the lines
    around them, so a secret spanning a draft and its neighbours is found.
    """

    field: str  # the field of the same record this one is read in the place of


class StopReason(str, Enum):
    """Why a slot ended; serialized as its value (``"complete"``, ...) in results, events and JSON."""

    COMPLETE = "complete"  # the writer had nothing more to write
    LINE_BUDGET = "line_budget"  # the slot holds max_lines_per_slot lines
    TOKEN_BUDGET = "token_budget"  # the next line would not fit the slot's tokens
    BLANK_BUDGET = "blank_budget"  # the next blank line would exceed max_blank_lines_per_slot
    REPAIR_TRUNCATED = "repair_truncated"  # a repair was cut off by its token limit: the slot is incomplete
    REPAIR_FAILED = "repair_failed"  # a repair failed its checks or lost its claim
    EMPTY_REPAIR = "empty_repair"  # a second blank repair in a row
    TARGET_ENDED = "target_ended"  # the target ended its answer instead of writing a line
    CANCELLED = "cancelled"  # another branch failed: the program stops
    MISSING = "missing"  # a one-shot summary lacks the section
    CUT_OFF = "cut_off"  # a one-shot summary was cut off inside the section
    OUTSIDE_SECTIONS = "outside_sections"  # a one-shot summary's text outside the schema's sections
    LEDGER_BUDGET = "ledger_budget"  # the exact ledger's entries past max_ledger_tokens became count lines

    def __str__(self) -> str:
        """The value, as every earlier release wrote a stop reason: ``str(StopReason.COMPLETE) == "complete"``."""
        return self.value

    __format__ = str.__format__  # f"{reason}" is the value too


@dataclass(frozen=True)
class Verdict:
    """The judge's verdict on one line or entry: the one verdict type, from the backend to the result.

    Made by the verdict rule (:mod:`sgl_speccompact.core.judge`) or read from
    sglang's ``/v1/decisions``; a result's lines and Source-Judged
    Compaction's entries carry it as it came.
    """

    p_pos: float  # probability of the best positive variant (possibly substituted)
    p_neg: float  # probability of the best negative variant (possibly substituted)
    score: float  # r = p_pos / (p_pos + p_neg), 0.0 when both are 0
    accepted: bool  # score >= eta, and the verdict is reliable
    reliable: bool = True  # label_mass >= min_label_mass: the verdict may act (core.judge.gate)
    substituted: tuple[str, ...] = ()  # labels filled in by the missing-label rule

    @property
    def label_mass(self) -> float:
        """p+ + p-: how much of the next-token probability the two labels carry.

        A judge that answers the question puts most of its probability on a
        label; a low mass means it meant to write something else (a wrong chat
        template, an opened thinking block, label words it does not use), and
        ``score`` is then noise (:func:`~sgl_speccompact.core.judge.gate`).

        >>> round(Verdict(0.003, 0.002, 0.6, False).label_mass, 4)
        0.005
        """
        return self.p_pos + self.p_neg


class SummaryLine(BaseModel):
    """One line of a slot, with where it came from and the verdicts it was decided on.

    ``score``, ``rejected_score`` and ``unreliable_verdict`` are read from
    the verdicts (and serialized with them).
    """

    text: str  # the line, no trailing newline
    origin: LineOrigin  # how it was produced
    verdict: Verdict | None = None  # this line's own verdict (a drafted or carried line); None: not judged
    rejected_draft: Annotated[str | None, ReadsInPlaceOf("text")] = None  # the draft line a repair replaced
    rejected_verdict: Verdict | None = None  # that draft's verdict (None: refused before any judge, or no draft)
    refused: str | None = None  # why that draft was refused before any judge: the check it failed ("evidence": the evidence check)
    unsourced: list[str] = Field(default_factory=list)  # refused by the evidence check: the strings that draft names that no source shows

    @computed_field  # type: ignore[prop-decorator]
    @property
    def score(self) -> float | None:
        """Acceptance score r of this line's own verdict (None if unjudged: a repair, a target-written line)."""
        return self.verdict.score if self.verdict is not None else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def rejected_score(self) -> float | None:
        """The rejected draft's score r (None: it failed a check, or the slot was empty)."""
        return self.rejected_verdict.score if self.rejected_verdict is not None else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def unreliable_verdict(self) -> bool:
        """A repair written because the draft's verdict had too little label mass."""
        return self.rejected_verdict is not None and not self.rejected_verdict.reliable


class SlotResult(BaseModel):
    """One section of the summary."""

    name: str  # slot name from the schema
    title: str  # section heading
    lines: list[SummaryLine] = Field(default_factory=list)  # accepted lines, in order
    stop_reason: StopReason = StopReason.COMPLETE  # why the slot ended
    removed_duplicates: list[str] = Field(default_factory=list)  # lines dropped at assembly: an earlier slot has them
    removed_placeholders: list[str] = Field(default_factory=list)  # lines dropped at assembly: template text
    tokens: int = 0  # target tokens the slot's lines use


class RequestCount(BaseModel):
    """Totals for one (server, kind) pair."""

    requests: int = 0  # HTTP requests sent
    prompt_tokens: int = 0  # prompt tokens as reported by the server
    cached_tokens: int = 0  # of which served from the radix cache
    completion_tokens: int = 0  # generated tokens


class CompactionStats(BaseModel):
    """Requests, tokens, acceptance and time of one compaction."""

    requests: dict[str, dict[str, RequestCount]] = Field(default_factory=dict)  # server -> kind -> totals
    proposed_lines: int = 0  # drafted lines sent to the judge
    accepted_lines: int = 0  # of which judged positive
    repaired_lines: int = 0  # replacements written by the target
    unjudged_lines: int = 0  # non-blank lines accepted without a judge call
    carried_proposed: int = 0  # previous summary's lines the target judged (incremental compaction)
    carried_lines: int = 0  # carried lines kept in the summary
    evidence_refused: int = 0  # lines (drafted, carried, repaired) and SJC entries the evidence check refused: no judge asked (core/evidence.py)
    label_mass_min: float | None = None  # smallest p+ + p- of any judge verdict, SJC's included (None: no verdict)
    label_mass_median: float | None = None  # median p+ + p- of those verdicts (None: no verdict)
    unreliable_verdicts: int = 0  # verdicts whose label mass was below config min_label_mass (acted on as none)
    label_masses: list[float] = Field(default_factory=list, exclude=True)  # every verdict's p+ + p- (not serialized)
    wall_time_s: dict[str, float] = Field(default_factory=dict)  # phase -> seconds (summed over slots)
    total_wall_s: float = 0.0  # end-to-end wall time (s)
    host_cpu_s: float = 0.0  # CPU seconds this process spent on the compaction: its pipeline and the threads of its requests (HostCpu)
    layout: str = "classic"  # target shared-prefix layout: classic | agent (the agent's own chat rendering)
    agent_tokens: int | None = None  # agent layout: tokens of the agent's conversation in the prefix
    agent_cached_tokens: int | None = None  # of those, served from the agent's radix cache by the first request
    auto: dict | None = None  # method="auto": the pick, predicted_s per method, reason, p_accept, deployment

    @property
    def acceptance_rate(self) -> float | None:
        """Judged draft lines accepted / judged draft lines (None if none judged)."""
        return self.accepted_lines / self.proposed_lines if self.proposed_lines else None

    def totals(self, server: str) -> RequestCount:
        """All kinds of one server added up."""
        out = RequestCount()
        for c in self.requests.get(server, {}).values():
            out.requests += c.requests
            out.prompt_tokens += c.prompt_tokens
            out.cached_tokens += c.cached_tokens
            out.completion_tokens += c.completion_tokens
        return out

    def cached_ratio(self, server: str) -> float | None:
        """Cached / prompt tokens on one server (None without prompt tokens)."""
        t = self.totals(server)
        return t.cached_tokens / t.prompt_tokens if t.prompt_tokens else None


class CompactionResult(BaseModel):
    """A complete compaction: summary text, slots and stats."""

    method: str  # speccompact | hermes | openclaw | target_self | target_delta
    ran_as: str | None = None  # the method that wrote the summary when not `method`: target_delta with no previous summary is target_self
    summary: str  # the assembled summary
    summary_tokens: int = 0  # its length in target tokens
    slots: list[SlotResult] = Field(default_factory=list)  # per-section detail (slot methods)
    stats: CompactionStats = Field(default_factory=CompactionStats)  # cost of producing it
    source_judge: dict | None = None  # SJC report when the post-filter ran
    redactions: dict[str, int] = Field(default_factory=dict)  # secrets replaced per kind; "output:<kind>": in returned text
    truncated: bool = False  # an incomplete summary: cut by its cap, sections missing, or a repair cut off
    chunks: int = 1  # blocks the history was compacted in, each on the last one's summary (chunking.py)
    pruning: dict | None = None  # tool-output pruning (prune_tool_outputs): messages_pruned, chars_saved, tokens_saved
    ledger: LedgerReport | None = None  # the exact ledger (config ledger): entries shown, read set, counted per kind

    def to_json_dict(self) -> dict:
        """JSON-ready dict including the derived acceptance rate and cache ratio."""
        d = self.model_dump(mode="json")
        d["stats"]["acceptance_rate"] = self.stats.acceptance_rate
        d["stats"]["target_cached_ratio"] = self.stats.cached_ratio("target")
        return d


def note_masses(stats: CompactionStats, masses: list[float], unreliable: int) -> None:
    """Add verdicts' label masses to ``stats`` and update their minimum and median.

    >>> st = CompactionStats(); note_masses(st, [0.9, 0.002, 0.95], 1)
    >>> st.label_mass_min, st.label_mass_median, st.unreliable_verdicts
    (0.002, 0.9, 1)
    """
    stats.label_masses.extend(masses)
    stats.unreliable_verdicts += unreliable
    if stats.label_masses:
        stats.label_mass_min = min(stats.label_masses)
        stats.label_mass_median = statistics.median(stats.label_masses)


@dataclass
class StatsRecorder:
    """Thread-safe accumulator the slot streams report into."""

    stats: CompactionStats = field(default_factory=CompactionStats)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def request(self, server: str, kind: str, meta: dict | None, n: int = 1) -> None:
        """Count ``n`` requests of one kind, adding token counts from ``meta``."""
        meta = meta or {}
        with self._lock:
            c = self.stats.requests.setdefault(server, {}).setdefault(kind, RequestCount())
            c.requests += n
            c.prompt_tokens += int(meta.get("prompt_tokens") or 0)
            c.cached_tokens += int(meta.get("cached_tokens") or 0)
            c.completion_tokens += int(meta.get("completion_tokens") or 0)

    def judged(self, accepted: bool) -> None:
        """Count one judge verdict on a drafted line."""
        with self._lock:
            self.stats.proposed_lines += 1
            self.stats.accepted_lines += bool(accepted)

    def line(self, origin: LineOrigin, text: str = "-") -> None:
        """Count one line that entered the summary without a verdict of its own on a drafted line.

        Blank lines are formatting, not unjudged content.
        """
        with self._lock:
            self.stats.repaired_lines += origin is LineOrigin.REPAIRED
            self.stats.carried_lines += origin is LineOrigin.CARRIED
            self.stats.unjudged_lines += origin is LineOrigin.UNJUDGED and bool(text.strip())

    def carried(self, n: int) -> None:
        """Count ``n`` lines carried from the previous summary that the target judged."""
        with self._lock:
            self.stats.carried_proposed += n

    def evidence_refused(self, n: int = 1) -> None:
        """Count ``n`` lines or SJC entries the evidence check refused before any judge."""
        with self._lock:
            self.stats.evidence_refused += n

    def verdicts(self, verdicts) -> None:
        """Count verdicts' label masses and how many were unreliable."""
        verdicts = list(verdicts)
        if verdicts:
            with self._lock:
                note_masses(self.stats, [v.label_mass for v in verdicts], sum(not v.reliable for v in verdicts))

    def agent_reuse(self, layout: str, agent_tokens: int | None) -> None:
        """Record the layout and how much of the agent's conversation the prefix prefill found cached."""
        with self._lock:
            self.stats.layout = layout
            if agent_tokens is None:
                return
            prefill = self.stats.requests.get("target", {}).get("prefill")
            self.stats.agent_tokens = agent_tokens
            if prefill is not None and prefill.requests:
                self.stats.agent_cached_tokens = min(prefill.cached_tokens, agent_tokens)

    def read(self, fn: "Callable[[CompactionStats], T]") -> "T":
        """``fn(stats)`` while no slot thread records (a consistent reading mid-compaction)."""
        with self._lock:
            return fn(self.stats)

    def time(self, phase: str, seconds: float) -> None:
        """Add wall time to a phase."""
        with self._lock:
            self.stats.wall_time_s[phase] = self.stats.wall_time_s.get(phase, 0.0) + seconds


# ---------------------------------------------------------------- the exact ledger's records
# The vocabulary of the exact ledger (docs/concepts/ledger.md), shared by every layer: the history
# extracts LedgerEntry values (history/ledger_entries.py), the core writes, reads back, ranks and fits
# them (core/ledger.py, core/ledger_budget.py) and derives the read set (core/read_set.py), and every
# result carries a LedgerReport (CompactionResult.ledger) that clients read as data.

FILE_KINDS = ("read", "wrote", "edited", "deleted", "touched")  # what a tool did to a file
CHANGES = frozenset({"wrote", "edited", "deleted"})  # file kinds that are side effects
IDENTIFIER_KINDS = ("url", "path", "hash", "id", "number", "command")  # identifier kinds listed as they are
EXAMPLE = "example"  # a command a prompt shows: not one the session ran
ACTIONS = ("ran", "did", "called")  # a command run, an action that changes the world, any other tool call
ACTION_KINDS = frozenset(FILE_KINDS + ACTIONS)  # what the agent did itself, with its outcome
KINDS = FILE_KINDS + ACTIONS + ("error",) + IDENTIFIER_KINDS + (EXAMPLE,)  # every entry kind, the vocabulary


@dataclass(frozen=True)
class LedgerEntry:
    """One fact of the ledger: a kind and the exact strings that show it."""

    index: int  # the message it came from: its index in the compaction's messages
    kind: str  # one of KINDS
    value: str  # the exact string (a path, a command line, a tool name, an identifier): one line
    via: str = ""  # the tool call that touched a file (its name)
    args: str = ""  # a ``did`` or ``called`` call's arguments, as sent (cut at a space)
    at: str = ""  # an error's location as written (``/r/a.py", line 3``); the file an editor command edited
    exit: str = ""  # the exit status its result shows, as written ("" when none)
    error: str = ""  # the error its result shows (a name, or the result's first line)
    done: bool = False  # a side effect that did not fail: not to be repeated
    cut: bool = False  # ``value`` or ``args`` was cut at MAX_VALUE_CHARS
    refs: int = field(default=1, compare=False)  # messages that named it (superseding adds them up)
    carried: bool = field(default=False, compare=False)  # read back from the previous summary's ledger
    source: str = field(default="", compare=False)  # call | result | prompt (history/provenance.py); "" read back
    noise: bool = field(default=False, compare=False)  # boilerplate: a namespace, a dump or listing line
    hit: bool = field(default=False, compare=False)  # an error named by a result that shows a failure

    @property
    def failed(self) -> bool:
        """Its result shows a failure: a non-zero exit status, or an error."""
        return self.exit not in ("", "0") or bool(self.error)

    @property
    def key(self) -> tuple:
        """What a later entry with the same key supersedes: a file's reads or changes, the same command
        run again, the same action, error or identifier named again."""
        if self.kind in FILE_KINDS:
            return ("file", self.kind in CHANGES, self.value)
        if self.kind in ("did", "called"):
            return (self.kind, self.value, self.args)
        if self.kind == "error":
            return ("error", self.value, self.at)
        return (self.kind, self.value)

    def strings(self) -> tuple[str, ...]:
        """The exact strings it shows (each one a substring of its message)."""
        return tuple(s for s in (self.value, self.via, self.args, self.at, self.exit, self.error) if s)


class ReadFile(BaseModel):
    """One file of the read set: when the agent last read it, and whether it changed after."""

    path: str  # the file as the history wrote it (its last read's form, else its first change's)
    last_read: int | None = None  # the message of its last read (None: changed, never read)
    changed_after: bool = False  # changed after that read (an edit, a write, a command that writes it)
    changed_at: int | None = None  # the message of its last change after the read (None: unchanged since)


class LedgerReport(BaseModel):
    """The exact ledger of one compaction, as data (``CompactionResult.ledger``)."""

    entries: list[LedgerEntry] = Field(default_factory=list)  # the entries the section shows, in its order
    read_set: list[ReadFile] = Field(default_factory=list)  # every file read or changed, oldest first
    counted: dict[str, int] = Field(default_factory=dict)  # kind -> entries the budget left out (count lines)
    carried: int = 0  # of the entries shown, those read back from the previous summary's ledger
    found: int = 0  # entries this history yielded
    merged: int = 0  # entries after merging them with the previous ledger's
    tokens: int = 0  # the section's length in target tokens (0: no section)
    budget: int = 0  # the room it had: min(max_ledger_tokens, what the sections left of the summary budget)


CompactionResult.model_rebuild()  # its ledger field names LedgerReport, defined above


class HostCpu:
    """CPU seconds of the threads of this process that worked on one compaction (``time.thread_time``).

    The pipeline's threads count from :meth:`begin` (they may have run other
    work before); every other thread that sends one of the compaction's
    requests calls :meth:`touch` around each request and counts its whole
    life up to its last touch: those threads (sglang's program threads, the
    branches', a drafter's) are made by the compaction and serve no other.
    So the count holds the pipeline's own work (parsing, redaction,
    rendering, the ledger, assembly), the programs' work and every request's
    client side (bodies, token ids, encoding, the answer); a request thread's
    work after its last request is left out.  The emulators and SGLang
    servers run in processes of their own and never count.

    >>> cpu = HostCpu(); cpu.begin(); sum(range(10**5)) > 0; cpu.touch(); cpu.seconds >= 0
    True
    True
    """

    def __init__(self):
        self._spans: dict[threading.Thread, list[float]] = {}  # thread -> [CPU it counts from, CPU at last touch]
        self._lock = threading.Lock()

    def begin(self) -> None:
        """Count the calling thread's CPU from now (a pipeline thread; again: no effect)."""
        now, thread = time.thread_time(), threading.current_thread()
        with self._lock:
            self._spans.setdefault(thread, [now, now])

    def touch(self) -> None:
        """Count the calling thread's CPU up to now (from its start, unless :meth:`begin` came first)."""
        now, thread = time.thread_time(), threading.current_thread()
        with self._lock:
            span = self._spans.get(thread)
            if span is None:
                self._spans[thread] = [0.0, now]
            else:
                span[1] = max(span[1], now)

    @property
    def seconds(self) -> float:
        """The CPU seconds counted so far, over every thread."""
        with self._lock:
            return sum(last - first for first, last in self._spans.values())
