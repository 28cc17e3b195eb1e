"""A scripted sglang ``BaseBackend`` for running the real programs on the CPU.

It plays the target or the drafter.  Every request is recorded with its kind
and text; answers come from small callables keyed on the request text, so a
test states exactly what the "model" says.
"""

from __future__ import annotations

import re
import threading

from sglang.lang.backend.base_backend import BaseBackend
from sglang.lang.chat_template import get_chat_template

from sgl_speccompact.backends.contract import BackendDefaults
from sgl_speccompact.backends.endpoint import LabelJudgement, decision
from sgl_speccompact.core.judge import verdict
from sgl_speccompact.core.judging import Judged

SLOT_RE = re.compile(r"(?:Generate only the|write only the) (\w+) (?:slot|section)")
LINE_RE = re.compile(r"<line>\n(.*)\n</line>", re.S)
ENTRY_RE = re.compile(r"<entry>\n(.*?)\n</entry>", re.S)
SECTION_RE = re.compile(r'An entry of the section "(.*?)"')


def slot_of(text: str) -> str:
    """The slot a request is about (last slot request in the text)."""
    return SLOT_RE.findall(text)[-1]


def accepted_of(text: str) -> list[str]:
    """Lines already in the slot's assistant turn (after the last assistant tag)."""
    body = text.rsplit("<|im_start|>assistant\n", 1)[-1]
    return [line for line in body.split("\n")[:-1]]


def count_tokens(texts):
    """Whitespace words plus newlines: a deterministic stand-in tokenizer."""
    return [len(t.split()) + t.count("\n") for t in texts]


def labels(p) -> tuple[float, float]:
    """``(p+, p-)`` from a scripted judge's answer: p+ alone (the rest on p-), or both."""
    return tuple(p) if isinstance(p, tuple) else (p, 1 - p)


EOS_ID = 151645  # <|im_end|>: what sglang reports as ``matched`` when the model ends


def finish_like_sglang(out: str, finish: str, stop, prompt: str) -> tuple[str, dict]:
    """Apply a ``stop="\\n"`` cut and build sglang's meta_info for the answer."""
    stops = [stop] if isinstance(stop, str) else list(stop or ())
    if "\n" in stops and "\n" in out:
        out, reason = out.split("\n", 1)[0], {"type": "stop", "matched": "\n"}
    elif finish == "length":
        reason = {"type": "length", "length": count_tokens([out])[0]}
    else:
        reason = {"type": "stop", "matched": EOS_ID}
    return out, {"prompt_tokens": count_tokens([prompt])[0], "cached_tokens": 0,
                 "completion_tokens": count_tokens([out])[0], "finish_reason": reason}


class ScriptedBackend(BackendDefaults, BaseBackend):
    """Target or drafter whose answers are functions of the request text.

    Parameters
    ----------
    draft : callable(slot, accepted_lines, text) -> (completion, finish_type)
        Drafter answer ("length" or "stop").
    judge : callable(slot, line) -> float or (float, float)
        Probability on the positive label (the rest on negative), or both
        labels' probabilities ``(p+, p-)`` (a judge whose labels carry
        little mass, like a model that meant to write something else).
    repair : callable(slot, accepted_lines) -> str or (str, finish_type)
        Target continuation.
    Every ``gen`` with ``stop="\\n"`` is cut at the first newline and
    reports ``finish_reason`` ``{"type": "stop", "matched": "\\n"}`` as
    sglang does; an answer that ends without one reports the EOS id.
    judge_prompt : callable(text) -> float or (float, float), optional
        A judge that reads the whole prompt (every verification and SJC
        judgement): probability on the positive label, or ``(p+, p-)``.
        Takes precedence over ``judge`` and ``source_judge``.
    before : callable(kind, slot), optional
        Called before answering (to block or slow a slot).
    complete : callable(text, sampling_params) -> str or (str, finish_type), optional
        Answer of every ``gen`` (recorded as kind "generate"), for the
        baselines; takes precedence over ``draft`` and ``repair``.
    source_judge : callable(entry, section) -> float or (float, float), optional
        Probability that a Source-Judged Compaction entry has a source, or
        ``(p+, p-)`` (recorded as kind "source_judge").
    """

    def __init__(self, *, draft=None, judge=None, repair=None, before=None, complete=None, source_judge=None,
                 judge_prompt=None):
        super().__init__()
        self.judge_prompt = judge_prompt
        self.chat_template = get_chat_template("qwen")
        self.draft_fn, self.judge_fn, self.repair_fn, self.before = draft, judge, repair, before
        self.complete_fn, self.source_judge_fn = complete, source_judge
        self.requests: list[tuple[str, str]] = []  # (kind, full request text)
        self.max_new_tokens: list[tuple[str, int]] = []  # (kind, max_new_tokens) of every gen
        self.lock = threading.Lock()

    def count_tokens(self, texts):
        return count_tokens(texts)

    def _record(self, kind, text):
        with self.lock:
            self.requests.append((kind, text))
        if self.before:
            self.before(kind, slot_of(text) if SLOT_RE.search(text) else None)

    def kinds(self, kind):
        return [t for k, t in self.requests if k == kind]

    def commit_lazy_operations(self, s):
        self._record("prefill", s.text_)
        s.meta_info["prefill"] = {"prompt_tokens": count_tokens([s.text_])[0], "cached_tokens": 0}

    def cache_prefix(self, prefix_str):
        self._record("cache_prefix", prefix_str)

    def generate(self, s, sampling_params):
        text = s.text_
        if sampling_params.max_new_tokens == 0:  # a prefill-only request
            self._record("prefill", text)
            return "", {"prompt_tokens": count_tokens([text])[0], "cached_tokens": 0, "completion_tokens": 0}
        if self.complete_fn is not None:
            self._record("generate", text)
            out = self.complete_fn(text, sampling_params)
            out, finish = out if isinstance(out, tuple) else (out, "stop")
        elif self.draft_fn is not None:
            self.max_new_tokens.append(("draft", sampling_params.max_new_tokens))
            self._record("draft", text)
            out, finish = self.draft_fn(slot_of(text), accepted_of(text), text)
        else:
            self._record("repair", text)
            out = self.repair_fn(slot_of(text), accepted_of(text))
            out, finish = out if isinstance(out, tuple) else (out, "stop")
        return finish_like_sglang(out, finish, sampling_params.stop, text)

    def judged(self, text) -> tuple[str, float | tuple[float, float]]:
        """``(kind, p)`` for a judge prompt: an SJC entry's ("source_judge") or a line's ("verify")."""
        if (self.source_judge_fn is not None or self.judge_prompt is not None) and ENTRY_RE.search(text):
            return "source_judge", (self.judge_prompt(text) if self.judge_prompt is not None
                                    else self.source_judge_fn(ENTRY_RE.findall(text)[-1], SECTION_RE.findall(text)[-1]))
        line = LINE_RE.findall(text)[-1]
        return "verify", (self.judge_prompt(text) if self.judge_prompt is not None else self.judge_fn(slot_of(text), line))

    def select(self, s, choices, temperature, choices_method=None):
        text = s.text_
        kind, p = self.judged(text)
        self._record(kind, text)
        assert isinstance(choices_method, LabelJudgement)
        return decision(choices, verdict(*labels(p), choices_method.eta), {"requests": 1}, choices_method.n_positive)


class BatchJudgeBackend(ScriptedBackend):
    """A scripted target that also judges prompts in batches, like ``SpecCompactEndpoint``."""

    def judge_batch(self, texts, positive, negative, eta):
        """Judge several judge prompts in one request (kind "verify_batch")."""
        with self.lock:
            self.requests.append(("verify_batch", texts))
        if self.before:
            self.before("verify_batch", slot_of(texts[0]) if SLOT_RE.search(texts[0]) else None)
        vs = [verdict(*labels(self.judged(text)[1]), eta) for text in texts]
        return Judged(tuple(vs), requests=1, prompt_tokens=sum(count_tokens(texts)))
