"""A simulated workload that looks like real summaries (benchmark policy).

:class:`SummaryWorkload` is an emulator policy that plays the target and the
drafter of one compaction with a fixed "true" summary drawn from a seed:

* **Slot lengths** per slot, lopsided: each slot gets one of 2, 3, 4, 6, 8,
  10 or 12 lines (a 2-line goal can sit next to a 12-line progress).  A slot
  with sub-sections (Progress: Done / In Progress / Blocked) gets its
  sub-sections under ``### <title>`` headings, a blank line between them,
  sized from the shared trajectories when ``section_sizes`` is given
  (:func:`~.sources.trajectory_section_sizes`: one Done item per action that came
  back without an error, one Blocked item per failed one, one item In
  Progress; an empty sub-section holds ``- (none)``), which often fills the
  slot's 12 lines; else 1-3 short lines per sub-section.
* **Lines** are real lines of the shared agent trajectories (their length in
  tokens is whatever the emulator's tokenizer makes of them), each used once.
* **Acceptance**: content line ``i`` of a slot is drafted correctly with
  probability ``p_accept``, either independently per line or **clustered**
  (a two-state Markov chain with the same mean, where a rejection is
  followed by another with probability ``burst``).  A correct draft is the
  true line; a wrong one is another real line, and the judge rejects
  exactly the wrong ones (unless ``mistakes`` states error rates,
  :mod:`.mistakes`).
* **Repair candidates** (``n`` > 1 drafter samples): sample ``k`` at a place
  is the true line with probability ``p_accept``, independently of the
  first draft and of the other samples, else a wrong line.
* **Who writes what**: the drafter writes the slot's lines from where its
  turn stands (correct or wrong per the draws: the true lines its turn does
  not cover yet, :func:`~.mistakes.remaining`); a repair writes the next true
  line; Target-self writes the true slot; Hermes-style writes about
  ``hermes_tokens`` tokens (default 2,000; its prompt sets no length, and
  1,200 is the conservative low end); OpenClaw-style writes the true slots.

**A summary that evolves** (a session's later compactions): a draw made
with ``previous`` (the workload of the compaction before) and ``hold``
keeps the previous true summary's shape.  Each of its content lines still
holds with probability ``hold``, independently, and stays where it was
relative to the other held lines; every line that does not hold is stale
(the judge rejects it as a carried line) and is replaced by a new line,
written after the held ones of its slot or sub-section (or with
``mistakes.held_positions="drawn"``, the held ones at drawn places among
the new ones).  A session draws
``hold`` per compaction from :func:`draw_hold`: Beta with mean ``h`` (the
swept share) and concentration :data:`HOLD_CONCENTRATION`, so the realized
held share scatters around ``h`` as real sessions do.

Layout invariance: every answer depends only on what is asked -- the slot
(named by its request), the place in the slot (the lines already written
in the open assistant turn, counted from the last ``###`` heading), the
line or candidate judged, the sample index -- never on where the history,
the slot request or the judge rubric sit in the prompt.  A judge prompt is
told apart from a repair by its last user turn: a judgement's turn quotes
the line (``<line>`` or ``<entry>`` tags) and holds no slot request.  So
every switch that changes only the layout or the request pattern
(shared prefix, short judge suffix, pipelining, line-aware stopping,
one-request judging, sub-slot branches, the agent layout) makes
the same decisions for the same drafted lines.

Every choice is a function of the seed and the prompt, so a simulated run is
reproducible.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field

from sgl_speccompact.emulator.policy import ControlledAcceptancePolicy, label_logprobs, seeded_unit
from .mistakes import Mistakes, arrange, flips, remaining, repeats, truth_kept, write_order

SLOT_LINE_CHOICES = (2, 3, 4, 6, 8, 10, 12)  # lines per slot, drawn uniformly
SECTION_LINE_CHOICES = (1, 2, 3)  # lines per sub-section, drawn uniformly
SECTION_LINE_CHARS = 48  # longest line in a sub-section (characters): a branch's budget share never binds
DEFAULT_HERMES_TOKENS = 2000  # Hermes-style summary length, tokens
_SLOT_RE = re.compile(r"(?:Generate only the|write only the) ([a-z][a-z0-9_]*) (?:slot|section)")
_LINE_RE = re.compile(r"<line>\n(.*?)\n</line>", re.S)
_THINK_RE = re.compile(r"^<think>.*?</think>\n*", re.S)
EMPTY_SECTION = "- (none)"  # a sub-section with no item (an empty marker: accepted unjudged)
HOLD_CONCENTRATION = 20.0  # Beta concentration of a compaction's held share around the swept h


def draw_hold(h: float, seed: int, k: int) -> float:
    """The held share of compaction ``k`` of session ``seed``: Beta(c h, c (1 - h)), c = HOLD_CONCENTRATION.

    >>> draw_hold(0.0, 1, 2), draw_hold(1.0, 1, 2), 0.3 < draw_hold(0.6, 1, 2) < 0.9
    (0.0, 1.0, True)
    """
    if h <= 0.0 or h >= 1.0:
        return min(max(h, 0.0), 1.0)
    rng = random.Random(f"hold-{seed}-{k}")
    return rng.betavariate(HOLD_CONCENTRATION * h, HOLD_CONCENTRATION * (1.0 - h))


def default_sections(slots: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Sub-section titles of the OpenClaw schema's slots among ``slots``.

    >>> default_sections(("goal", "progress"))
    {'progress': ('Done', 'In Progress', 'Blocked')}
    """
    from sgl_speccompact.schema import OPENCLAW_SLOTS

    return {s.name: tuple(s.sections) for s in OPENCLAW_SLOTS if s.name in slots and s.sections}


def flat(parts: list[tuple[str | None, list[str]]]) -> list[str]:
    """A slot's lines as written in one turn: sub-sections under headings, a blank line between.

    >>> flat([(None, ["- a"])]), flat([("Done", ["- a"]), ("Blocked", ["- b"])])
    (['- a'], ['### Done', '- a', '', '### Blocked', '- b'])
    """
    out: list[str] = []
    for title, lines in parts:
        if title is not None:
            out += ([""] if out else []) + [f"### {title}"]
        out += lines
    return out


def written_lines(turn: str) -> list[str]:
    """The complete lines already written in an open assistant turn (its think block left out).

    >>> written_lines("<think>\\n\\n</think>\\n\\n- a\\n\\n### B\\n- par")
    ['- a', '', '### B']
    """
    body = _THINK_RE.sub("", turn)
    return body.split("\n")[:-1]


@dataclass
class SummaryWorkload:
    """The policy described in the module doc (thread-safe: read-only after construction)."""

    lines: list[str]  # pool of real lines to draw from
    slots: tuple[str, ...]  # slot names of the schema
    p_accept: float = 0.7  # mean probability that a drafted line (or a repair candidate) is correct
    clustered: bool = False  # correlated rejections (Markov chain) instead of independent ones
    burst: float = 0.6  # clustered: P(reject | previous line rejected)
    hermes_tokens: int = DEFAULT_HERMES_TOKENS  # Hermes-style summary length, tokens
    seed: int = 0  # every draw
    sections: dict[str, tuple[str, ...]] | None = None  # slot -> sub-section titles (None: the OpenClaw schema's)
    section_sizes: list[tuple[int, ...]] | None = None  # sub-section sizes to draw from (None: 1-3 short lines)
    judge: ControlledAcceptancePolicy = field(default_factory=ControlledAcceptancePolicy)  # label words, markers
    model: object = None  # EmulatedModel, for token counts (bind())
    previous: "SummaryWorkload | None" = None  # the compaction before (None: a fresh summary)
    hold: float = 0.0  # with previous: probability that each of its content lines still holds
    mistakes: Mistakes = field(default_factory=Mistakes)  # what the judge and writers get wrong (none by default)

    def __post_init__(self):
        if self.sections is None:
            self.sections = default_sections(tuple(self.slots))
        rng = random.Random(self.seed)
        pool = list(self.lines)
        rng.shuffle(pool)
        short = [ln for ln in pool if len(ln) <= SECTION_LINE_CHARS]
        if len(pool) < 2 * len(self.slots) * max(SLOT_LINE_CHOICES) or len(short) < 4 * 3 * max(SECTION_LINE_CHOICES):
            raise ValueError(f"workload needs more distinct lines than {len(pool)} ({len(short)} short)")
        used: set[str] = set()
        if self.previous is not None:  # a stale line never comes back as a new one
            used.update(ln[2:] for v in self.previous.true.values() for ln in v if ln.startswith("- "))

        def take(source: list[str]) -> str:
            while source[-1] in used:
                source.pop()
            used.add(source[-1])
            return f"- {source.pop()}"

        truth: dict[str, list[tuple[str | None, list[str]]]] = {}
        places = random.Random(f"{self.seed}-positions")  # where held lines sit (its own draws: the rest unmoved)
        self.held_lines: list[str] = []  # lines of the previous true summary that still hold
        self.previous_facts = 0  # content lines of the previous true summary (what could have held)
        for slot in self.slots:  # the true summary first: the same for every acceptance rate
            titles = self.sections.get(slot) or ()
            if self.previous is not None:
                truth[slot] = []
                for title, lines in self.previous.parts[slot]:
                    held = [ln for ln in lines if ln != EMPTY_SECTION and rng.random() < self.hold]
                    self.previous_facts += sum(1 for ln in lines if ln != EMPTY_SECTION)
                    fresh = [take(short if title else pool) for _ in range(len(lines) - len(held))]
                    truth[slot].append((title, arrange(held, fresh, self.mistakes.held_positions, places)))
                    self.held_lines += held
            elif titles and self.section_sizes:
                sizes = rng.choice(self.section_sizes)
                truth[slot] = [(t, [take(pool) for _ in range(n)] or [EMPTY_SECTION]) for t, n in zip(titles, sizes)]
            elif titles:
                truth[slot] = [(t, [take(short) for _ in range(rng.choice(SECTION_LINE_CHOICES))]) for t in titles]
            else:
                truth[slot] = [(None, [take(pool) for _ in range(rng.choice(SLOT_LINE_CHOICES))])]
        self.parts = truth  # slot -> [(sub-section title or None, its true lines)] (the next compaction's previous)
        self.spare = [ln for ln in pool if ln not in used]  # Hermes-style text (independent of the acceptance draws)
        rng = random.Random(f"{self.seed}-drafts")
        self.true: dict[str, list[str]] = {}  # slot -> its lines as written in one turn
        self.drafted: dict[str, list[str]] = {}  # the same places, as the drafter writes them
        self.wrong: set[str] = set()
        for slot in self.slots:
            content = [ln for _, lines in truth[slot] for ln in lines]
            ok = iter(self._acceptance(rng, len(content)))
            drafted = [(t, [ln if ln == EMPTY_SECTION or next(ok) else take(short if t else pool) for ln in lines])
                       for t, lines in truth[slot]]
            self.true[slot], self.drafted[slot] = flat(truth[slot]), flat(drafted)
            self.wrong.update(d for d, t in zip(self.drafted[slot], self.true[slot]) if d != t)
        self.candidate_pool = [f"- {ln}" for ln in short if ln not in used]  # wrong repair candidates
        self.wrong.update(self.candidate_pool)
        self.earlier: set[str] = set()  # lines of the session's earlier compactions that no longer hold
        self.stale: set[str] = set()  # of those, the ones an earlier true summary held (the rest were invented)
        if self.previous is not None:  # stale: the earlier summaries' lines (or accepted wrong ones) that no longer hold
            now = {ln for v in self.true.values() for ln in v}
            before = {ln for v in self.previous.true.values() for ln in v if ln.startswith("- ")}
            self.earlier = {ln for ln in before | self.previous.earlier | self.previous.wrong if ln not in now}
            self.stale = {ln for ln in before | self.previous.stale if ln not in now}
            self.wrong.update(self.earlier)
        self.carried_lines = self.earlier | set(self.held_lines)  # what a previous summary can carry into this one

    def _acceptance(self, rng: random.Random, n: int) -> list[bool]:
        if not self.clustered:
            return [rng.random() < self.p_accept for _ in range(n)]
        q = 1.0 - self.p_accept  # stationary rejection rate
        r1 = self.burst if q < 1 else 1.0
        r0 = q * (1 - r1) / (1 - q) if q < 1 else 1.0  # P(reject | accepted) keeping the mean q
        out, rejected = [], rng.random() < q
        for _ in range(n):
            out.append(not rejected)
            rejected = rng.random() < (r1 if rejected else r0)
        return out

    def bind(self, model) -> "SummaryWorkload":
        """Count tokens with ``model`` (an :class:`~sgl_speccompact.emulator.model.EmulatedModel`)."""
        self.model = model
        return self

    @property
    def acceptance(self) -> float:
        """Fraction of drafted content lines that are correct (the realized rate)."""
        drafted = [d for v in self.drafted.values() for d in v if d.strip() and not d.startswith("#")]
        return 1 - sum(d in self.wrong for d in drafted) / max(len(drafted), 1)

    def copied_share(self) -> float:
        """The share of this compaction's true content tokens that the previous true summary holds (0: none).

        What NGRAM can copy from the previous summary in a writer's prompt
        (``bench/harness/session.py`` ``copy_speed``); tokens counted with the
        bound model, else characters.
        """
        if self.previous is None:
            return 0.0
        count = (lambda t: len(self.model.encode(t))) if self.model is not None else len
        held = set(self.held_lines)
        lines = [ln for v in self.true.values() for ln in v if ln.startswith("- ") and ln != EMPTY_SECTION]
        total = sum(count(ln) for ln in lines)
        return sum(count(ln) for ln in lines if ln in held) / total if total else 0.0

    def truth_kept(self, summary: str) -> tuple[int, int, int, int]:
        """:func:`~.mistakes.truth_kept` of ``summary`` against this compaction's true summary."""
        return truth_kept([ln for v in self.true.values() for ln in v], summary)

    def holds(self, lines: list[str]) -> bool:
        """The judge's verdict on ``lines``: whether they hold, wrong at the stated rates (:mod:`.mistakes`)."""
        bad = any(line in self.wrong for line in lines)
        invented = any(line in self.wrong and line not in self.stale for line in lines)  # the evidence check's
        return bad if flips(self.mistakes, self.seed, lines, bad, invented) else not bad

    def candidate(self, slot: str, index: int, sample: int) -> str:
        """Repair candidate ``sample`` at line ``index`` of ``slot``: the true line or a wrong one."""
        key = f"{slot}\x00{index}\x00{sample}"
        if seeded_unit(self.seed, "candidate\x00" + key) < self.p_accept:
            return self.true[slot][index]
        return self.candidate_pool[int(seeded_unit(self.seed, "wrong\x00" + key) * len(self.candidate_pool))]

    # ---------------------------------------------------------------- prompt reading

    def _last_user_turn(self, prompt: str) -> str:
        return self.judge.judged_turn(prompt)

    def _slot(self, text: str) -> str | None:
        """The slot a request asks for (the last slot request in ``text`` naming a known slot)."""
        return last_slot(text, self.true)

    def judged(self, prompt: str) -> list[str] | None:
        """The lines a judge prompt quotes (``[]`` for an SJC entry), or None for any other prompt."""
        turn = self._last_user_turn(prompt)
        if self._slot(turn) is not None or ("</line>" not in turn and "</entry>" not in turn):
            return None
        return [line.strip() for line in _LINE_RE.findall(turn)]

    # ---------------------------------------------------------------- policy

    def next_token_logprobs(self, prompt: str, prompt_ids: list[int], params: dict):
        """Judges reject the lines that do not hold and accept the rest (but for the stated mistakes)."""
        found = self.judged(prompt)
        if found is None:
            return {}
        p = 0.95 if self.holds(found) else 0.05
        labels = params.get("labels")
        if labels:  # a /v1/decisions question: its own labels (yes, no), the same verdict
            return {labels[0]: math.log(0.95 * p), labels[1]: math.log(0.95 * (1 - p))}
        return label_logprobs(self.judge.positive, self.judge.negative, p)

    def generate(self, prompt: str, prompt_ids: list[int], params: dict) -> str:
        if self.judged(prompt) is not None:
            lp = self.next_token_logprobs(prompt, prompt_ids, params)
            return self.judge.positive if lp.get(self.judge.positive, -9) > -1 else self.judge.negative
        head, found, turn = prompt.rpartition(self.judge.assistant_marker)
        request = last_user(head, self.judge.turn_marker) if found else ""
        if not _SLOT_RE.search(request):
            return self._monolithic(head)
        slot = self._slot(request)
        if slot is None:  # a slot this workload has no lines for
            return ""
        written, true = written_lines(turn), self.true[slot]
        rest = remaining(true, written, self.drafted[slot])
        order = write_order(true, written, self.drafted[slot], self.carried_lines, repeats(self.mistakes, self.seed))
        stops = (params.get("sampling_params") or {}).get("stop_strs") or []
        if params.get("lora_path") is not None:  # the drafter: its lines from here on (a repeat as carried)
            if (params.get("n") or 1) > 1 and rest:  # repair candidates
                return self.candidate(slot, rest[0], int(params.get("sample") or 0)) + "\n"
            return "".join((true[i] if again else self.drafted[slot][i]) + "\n" for i, again in order)
        if "\n" in stops:  # a repair: the true line
            return true[rest[0]] + "\n" if rest else ""
        return "".join(true[i] + "\n" for i, _ in order)  # Target-self, Target-delta

    def _monolithic(self, head: str) -> str:
        """Hermes-style: ``hermes_tokens`` tokens under its headings; OpenClaw-style: the true slots."""
        titles = list(dict.fromkeys(re.findall(r"^## (.+)$", head, re.M)))
        if "Historical" not in head:  # OpenClaw-style
            return "".join(f"## {s}\n" + "".join(ln + "\n" for ln in self.true[s]) for s in self.slots)
        titles = titles or ["Summary"]
        parts, used, i = [], 0, 0
        while used < self.hermes_tokens:
            piece = (f"## {titles[(i // 4) % len(titles)]}\n" if i % 4 == 0 else "") + \
                f"- {self.spare[i % len(self.spare)]}\n"
            parts.append(piece)
            used += len(self.model.encode(piece)) if self.model is not None else len(piece) // 4
            i += 1
        text = "".join(parts)
        if self.model is not None:
            text = self.model.decode(self.model.encode(text)[: self.hermes_tokens])
        return text


def last_slot(text: str, known) -> str | None:
    """The slot named by the last slot request in ``text`` whose slot is in ``known`` (None: none).

    Read from the end: a slot request sits near the end of a prompt, after
    the history.  Two requests cannot overlap (a slot name holds no space),
    so the requests found backwards are the ones ``_SLOT_RE.findall`` finds.

    >>> last_slot("Generate only the goal slot. x write only the other slot", {"goal"})
    'goal'
    """
    end = len(text)
    while (at := text.rfind("only the ", 0, end)) >= 0:
        for lead in ("Generate ", "write "):
            start = at - len(lead)
            if start >= 0 and text.startswith(lead, start):
                m = _SLOT_RE.match(text, start)
                if m is not None and m.group(1) in known:
                    return m.group(1)
        end = at + len("only the") - 1  # the next look ends before this one's "only the"
    return None


def last_user(text: str, marker: str) -> str:
    """The text after the last ``marker`` (the whole text without one)."""
    _, found, tail = text.rpartition(marker)
    return tail if found else text


DECISION = {"drafted_accepted": "accepted", "repaired": "replaced", "accepted_without_judge": "unjudged",
            "target_written": "written", "carried": "carried"}  # origin -> decision


def decisions(result) -> dict[str, list[tuple[str, str]]]:
    """What a slot method decided, per slot: ``(line, accepted | replaced | unjudged | written | carried)``."""
    return {s.name: [(ln.text, DECISION.get(ln.origin.value, ln.origin.value)) for ln in s.lines]
            for s in result.slots}


def decisions_digest(result) -> str:
    """A short hash of :func:`decisions` (equal digests: the same decisions)."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(decisions(result), sort_keys=True).encode()).hexdigest()[:12]
