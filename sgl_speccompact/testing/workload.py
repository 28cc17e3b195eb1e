"""A simulated workload that looks like real summaries (benchmark policy).

:class:`SummaryWorkload` is an emulator policy that plays the target and the
drafter of one compaction with a fixed "true" summary drawn from a seed:

* **Slot lengths** per slot, lopsided: each slot gets one of 2, 3, 4, 6, 8,
  10 or 12 lines (a 2-line goal can sit next to a 12-line progress).
* **Lines** are real lines of the shared agent trajectories (their length in
  tokens is whatever the emulator's tokenizer makes of them), each used once.
* **Acceptance**: line ``i`` of a slot is drafted correctly with probability
  ``p_accept``, either independently per line or **clustered** (a two-state
  Markov chain with the same mean, where a rejection is followed by another
  with probability ``burst``).  A correct draft is the true line; a wrong one
  is another real line, and the judge rejects exactly the wrong ones, so
  every design sees the same verdicts.
* **Who writes what**: the drafter writes the slot's lines from where its
  turn stands (correct or wrong per the draws); a repair writes the true
  line; Target-self writes the true slot; Hermes-style writes about
  ``hermes_tokens`` tokens (default 2,000; its prompt sets no length, and
  1,200 is the conservative low end); OpenClaw-style writes the true slots.

Every choice is a function of the seed and the prompt, so a simulated run is
reproducible.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from .policy import ControlledAcceptancePolicy, label_logprobs, last_segment

SLOT_LINE_CHOICES = (2, 3, 4, 6, 8, 10, 12)  # lines per slot, drawn uniformly
DEFAULT_HERMES_TOKENS = 2000  # Hermes-style summary length, tokens
LINE_CHARS = (24, 180)  # usable trajectory line lengths, characters
_SLOT_RE = re.compile(r"(?:Generate only the|write only the) ([a-z][a-z0-9_]*) (?:slot|section)")
_LINE_RE = re.compile(r"<line>\n(.*?)\n</line>", re.S)


def trajectory_lines(paths: list[Path]) -> list[str]:
    """Distinct content lines of the trajectories' message texts, in file order."""
    from ..formats import load_history

    out: dict[str, None] = {}
    for path in paths:
        try:
            messages = load_history(path)
        except Exception:  # noqa: BLE001 - a file that is not a trajectory adds no lines
            continue
        for m in messages:
            content = m.get("content")
            text = content if isinstance(content, str) else " ".join(
                p.get("text", "") for p in content or [] if isinstance(p, dict))
            for line in text.splitlines():
                line = " ".join(line.split()).replace("<", "(").replace(">", ")")
                if LINE_CHARS[0] <= len(line) <= LINE_CHARS[1] and any(c.isalpha() for c in line):
                    out.setdefault(line)
    return list(out)


@dataclass
class SummaryWorkload:
    """The policy described in the module doc (thread-safe: read-only after construction)."""

    lines: list[str]  # pool of real lines to draw from
    slots: tuple[str, ...]  # slot names of the schema
    p_accept: float = 0.7  # mean probability that a drafted line is correct
    clustered: bool = False  # correlated rejections (Markov chain) instead of independent ones
    burst: float = 0.6  # clustered: P(reject | previous line rejected)
    hermes_tokens: int = DEFAULT_HERMES_TOKENS  # Hermes-style summary length, tokens
    seed: int = 0  # every draw
    judge: ControlledAcceptancePolicy = field(default_factory=ControlledAcceptancePolicy)  # prompt parsing
    model: object = None  # EmulatedModel, for token counts (bind())

    def __post_init__(self):
        rng = random.Random(self.seed)
        pool = list(self.lines)
        rng.shuffle(pool)
        if len(pool) < 2 * len(self.slots) * max(SLOT_LINE_CHOICES):
            raise ValueError(f"workload needs more distinct lines than {len(pool)}")
        self.true: dict[str, list[str]] = {}
        self.drafted: dict[str, list[str]] = {}
        self.wrong: set[str] = set()
        for slot in self.slots:  # the true summary first: the same for every acceptance rate
            self.true[slot] = [f"- {pool.pop()}" for _ in range(rng.choice(SLOT_LINE_CHOICES))]
        self.spare = list(pool)  # lines for Hermes-style text (independent of the acceptance draws)
        rng = random.Random(f"{self.seed}-drafts")
        for slot in self.slots:
            n = len(self.true[slot])
            ok = self._acceptance(rng, n)
            self.drafted[slot] = [t if good else f"- {pool.pop()}" for t, good in zip(self.true[slot], ok)]
            self.wrong.update(d for d, good in zip(self.drafted[slot], ok) if not good)

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
        """Count tokens with ``model`` (an :class:`~.model.EmulatedModel`)."""
        self.model = model
        return self

    @property
    def acceptance(self) -> float:
        """Fraction of drafted lines that are correct (the realized rate)."""
        total = sum(len(v) for v in self.drafted.values())
        return 1 - sum(d in self.wrong for v in self.drafted.values() for d in v) / max(total, 1)

    # ---------------------------------------------------------------- policy

    def next_token_logprobs(self, prompt: str, prompt_ids: list[int], params: dict):
        """Judges reject exactly the wrong drafts; everything else is supported."""
        if not self.judge.is_judge_prompt(prompt):
            return {}
        turn = self.judge.judged_turn(prompt)
        found = _LINE_RE.findall(turn)
        bad = any(line.strip() in self.wrong for line in found) if found else False
        return label_logprobs(self.judge.positive, self.judge.negative, 0.05 if bad else 0.95)

    def generate(self, prompt: str, prompt_ids: list[int], params: dict) -> str:
        if self.judge.is_judge_prompt(prompt):
            lp = self.next_token_logprobs(prompt, prompt_ids, params)
            return self.judge.positive if lp.get(self.judge.positive, -9) > -1 else self.judge.negative
        head, found, turn = prompt.rpartition(self.judge.assistant_marker)
        slots = _SLOT_RE.findall(head.rpartition("<|im_start|>user")[2]) if found else []
        if not slots:
            return self._monolithic(head)
        slot = slots[-1]
        if slot not in self.true:
            return ""
        done = len([ln for ln in turn.splitlines() if ln.strip() and not ln.startswith("<")])
        stops = (params.get("sampling_params") or {}).get("stop_strs") or []
        if params.get("lora_path") is not None:  # the drafter: its lines from here on
            return "".join(line + "\n" for line in self.drafted[slot][done:])
        if "\n" in stops:  # a repair: the true line
            return self.true[slot][done] + "\n" if done < len(self.true[slot]) else ""
        return "".join(line + "\n" for line in self.true[slot][done:])  # Target-self

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


def synthetic_history(lines: list[str], tokens: int, count, seed: int = 0) -> list[dict]:
    """An agent history of about ``tokens`` tokens (``count(text) -> tokens``) from real lines.

    Alternating user / assistant / tool turns of 6-20 trajectory lines each.
    """
    rng = random.Random(seed)
    roles = ("user", "assistant", "tool")
    messages, total, i = [{"role": "system", "content": "You are a coding agent."}], 0, 0
    while total < tokens:
        body = "\n".join(rng.choice(lines) for _ in range(rng.randint(6, 20)))
        role = roles[i % 3]
        msg = {"role": role, "content": body}
        if role == "assistant":
            msg["tool_calls"] = [{"id": f"call_{i}", "type": "function",
                                  "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}]
        if role == "tool":
            msg["tool_call_id"] = f"call_{i - 1}"
        messages.append(msg)
        total += count(body)
        i += 1
    if messages[-1]["role"] == "assistant":
        messages.append({"role": "tool", "tool_call_id": f"call_{i - 1}", "content": "done"})
    return messages
