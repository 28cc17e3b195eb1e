"""SGLang's speculative decoding as a cost model (pure; SIMULATED figures only).

A server runs one of sglang 0.5.23's algorithms
(``sglang/srt/speculative/spec_info.py``) with its own server arguments
(``sglang/srt/arg_groups/fields/spec.py``).  One decode step of a batch is a
*verify step*: the target extends every request by ``num_draft_tokens``
tokens (the drafts plus the bonus position) and each request keeps
``accepted`` of them (1 to ``num_steps + 1``).  Before it the drafts are made:

=============  ==============================================================
EAGLE3         ``num_steps`` passes of a one-layer draft head, plus one
               draft-extend pass over the verified tokens
DFLASH         one pass of a block-diffusion draft model over a block of
               ``num_draft_tokens`` (``speculative_dflash_block_size``)
STANDALONE     ``num_steps`` decode passes of a small draft model (e.g.
               Qwen3-0.6B for Qwen3-8B) on the target's GPU(s), plus one
               draft-extend pass
NGRAM          a CPU lookup in the request's own context (no draft model)
=============  ==============================================================

A prefill also runs the draft model over the new tokens (EAGLE3, DFLASH,
STANDALONE: they keep their own KV of the context).

Accepted tokens per step are drawn from a chain: each of the ``num_steps``
drafts survives with probability ``alpha`` given the ones before it, so the
mean is ``(1 - alpha ** (num_steps + 1)) / (1 - alpha)``; ``alpha`` is solved
from the configured mean ``tau`` at batch 1.  Whether the mean falls with the
batch is the parameter ``tau_fall_per_doubling`` (default 0: sglang's
SpecForge benchmark of Qwen3-30B-A3B with EAGLE3, issue sgl-project/SpecForge#339,
reports the same accept length 1.86 at batch 1 and 4 with 3 steps, topk 1;
what falls with the batch is the speedup, which the verify pass's cost in
this model already produces).

What sglang refuses (``check_lora_speculative_compatibility`` in
``sglang/srt/arg_groups/lora_hook.py``): LoRA adapters with STANDALONE (and
FROZEN_KV_MTP, UNO); NGRAM, EAGLE, EAGLE3, DFLASH accept them.  DFLASH needs
``speculative_draft_model_path``.  Logprobs (``return_logprob``,
``token_ids_logprob``) are refused only by UNO (``uno_validation.py``); a
prefill-only request (``max_new_tokens=0``) never decodes, so it never
verifies; the radix cache is refused only on a disaggregated decode server
with an algorithm other than EAGLE, EAGLE3, DSPARK (``speculative_hook.py``).
"""

from __future__ import annotations

import functools

import random
from dataclasses import dataclass, replace

from .costmodel import Hardware, LoraCost, ModelCost, forward_s

ALGORITHMS = ("EAGLE3", "DFLASH", "STANDALONE", "NGRAM")
LORA_REFUSED = ("STANDALONE", "FROZEN_KV_MTP", "UNO")  # lora_hook.py check_lora_speculative_compatibility
LOGPROBS_REFUSED = ("UNO",)  # speculative/uno_validation.py
NGRAM_LOOKUP_S = 30e-6  # CPU n-gram trie lookup per request per step (est.: sglang's C++ ngram cache)

# Default arguments and batch-1 accepted tokens per verify step (tau), per algorithm (all est.):
#   EAGLE3: sglang's auto params (3 steps, topk 1, 4 draft tokens; _auto_choose_speculative_params);
#           tau 3.0 inside the 2.4-3.5 reported for Qwen3 heads at 3-step chains.
#   DFLASH: block 16 (z-lab/Qwen3-8B-DFlash-b16); tau 5.0, below the paper's best case (6.2x lossless).
#   STANDALONE: sglang's (3, 1, 4); tau 2.5 = 1 + .7 + .49 + .34 (per-token agreement 0.7 of a 0.6B drafter).
#   NGRAM: 12 draft tokens, max BFS breadth 10 (sglang defaults); tau 1.8 inside the 1.5-2.5 reported
#          for text that copies from its context.
DEFAULTS = {
    "EAGLE3": {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4, "tau": 3.0},
    "DFLASH": {"num_steps": 1, "eagle_topk": 1, "num_draft_tokens": 16, "tau": 5.0},
    "STANDALONE": {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4, "tau": 2.5},
    "NGRAM": {"num_steps": 1, "eagle_topk": 10, "num_draft_tokens": 12, "tau": 1.8},
}


NGRAM_COPY_TAU = 4.0  # NGRAM tokens per verify step on text copied from the prompt (est., fair_race.md)


def copy_tau(held: float | None) -> float:
    """NGRAM tokens per verify step when a share ``held`` of the output copies from the prompt (est.).

    Time per token is what adds up: a copied token takes ``1 / NGRAM_COPY_TAU``
    of a step, a fresh one ``1 / tau`` of NGRAM's default, so the mix decodes
    at the harmonic mean of the two, weighted by the copied share.  With no
    previous summary in the prompt (``held`` None or 0) nothing copies: NGRAM's
    plain tau.

    >>> copy_tau(None), copy_tau(0.0), copy_tau(1.0), round(copy_tau(0.6), 2)
    (1.8, 1.8, 4.0, 2.69)
    """
    fresh, share = DEFAULTS["NGRAM"]["tau"], held or 0.0
    if share <= 0.0 or share >= 1.0:  # all fresh, all copied: exactly the one speed
        return fresh if share <= 0.0 else NGRAM_COPY_TAU
    return 1.0 / (share / NGRAM_COPY_TAU + (1.0 - share) / fresh)


class SpecRefused(ValueError):
    """sglang would refuse this server or request with this algorithm."""


@dataclass(frozen=True)
class SpecDecoding:
    """One server's speculative decoding: sglang's arguments plus the modelled acceptance.

    ``draft`` is the cost profile of the draft network (the EAGLE3 head, the
    DFlash draft model, the STANDALONE draft model; None for NGRAM).
    """

    algorithm: str  # speculative_algorithm: EAGLE3, DFLASH, STANDALONE or NGRAM
    num_steps: int  # speculative_num_steps (chain depth; DFLASH: 1; NGRAM: drafts per branch)
    eagle_topk: int  # speculative_eagle_topk (NGRAM: max BFS breadth)
    num_draft_tokens: int  # speculative_num_draft_tokens: tokens verified per request per step
    draft_model_path: str | None  # speculative_draft_model_path (None for NGRAM)
    tau: float  # mean accepted tokens per verify step at batch 1 (incl. the bonus token)
    draft: ModelCost | None = None  # cost profile of the draft network
    tau_fall_per_doubling: float = 0.0  # fraction of (tau - 1) lost per doubling of the batch
    ngram_lookup_s: float = NGRAM_LOOKUP_S  # NGRAM's CPU lookup per request per step, s

    def __post_init__(self):
        if self.algorithm not in ALGORITHMS:
            raise SpecRefused(f"speculative_algorithm {self.algorithm!r} is not modelled; known: {ALGORITHMS}")
        if self.algorithm == "DFLASH" and not self.draft_model_path:
            raise SpecRefused("DFLASH speculative decoding requires setting --speculative-draft-model-path.")
        if not 1.0 <= self.tau <= self.depth + 1:
            raise SpecRefused(f"tau {self.tau} outside [1, num_steps + 1 = {self.depth + 1}]")

    @property
    def depth(self) -> int:
        """Longest run of drafts a step can accept (chain length)."""
        return self.num_draft_tokens - 1 if self.algorithm in ("DFLASH", "NGRAM") else self.num_steps

    def server_args(self) -> dict:
        """sglang's server arguments for this configuration (``--speculative-*``)."""
        out = {"speculative_algorithm": self.algorithm, "speculative_num_steps": self.num_steps,
               "speculative_eagle_topk": self.eagle_topk, "speculative_num_draft_tokens": self.num_draft_tokens}
        if self.algorithm == "NGRAM":
            out.pop("speculative_eagle_topk")
            out["speculative_ngram_max_bfs_breadth"] = self.eagle_topk
        if self.draft_model_path:
            out["speculative_draft_model_path"] = self.draft_model_path
        return out

    def check_lora(self) -> None:
        """Raise :class:`SpecRefused` where sglang refuses LoRA adapters with this algorithm."""
        if self.algorithm in LORA_REFUSED:
            raise SpecRefused("LoRA is only compatible with NGRAM, EAGLE, NEXTN, EAGLE3, DFLASH, or DSPARK "
                              f"speculative decoding, not {self.algorithm}.")

    def tau_at(self, batch: int) -> float:
        """Mean accepted tokens per step at ``batch`` running requests.

        >>> s = make("EAGLE3", "qwen3-8b", tau_fall_per_doubling=0.1)
        >>> s.tau_at(1), round(s.tau_at(4), 2)
        (3.0, 2.6)
        """
        import math

        fall = min(1.0, self.tau_fall_per_doubling * math.log2(max(batch, 1)))
        return 1.0 + (self.tau - 1.0) * (1.0 - fall)

    def alpha(self, batch: int = 1) -> float:
        """Per-draft survival probability whose chain mean is :meth:`tau_at` (bisection).

        >>> round(make("EAGLE3", "qwen3-8b", tau=2.5).alpha(), 3)  # 1 + a + a^2 + a^3 = 2.5
        0.691
        """
        return _survival(self.tau_at(batch), self.depth)

    def draw(self, rng: random.Random, batch: int) -> int:
        """Accepted tokens of one request in one verify step (1 .. depth + 1)."""
        a, n = self.alpha(batch), 1
        while n <= self.depth and rng.random() < a:
            n += 1
        return n

    def step_s(self, target: ModelCost, hw: Hardware, contexts: list[int], tp: int = 1,
               lora: LoraCost | None = None) -> float:
        """Modelled seconds of one verify step over requests with ``contexts`` tokens each.

        Examples
        --------
        EAGLE3 on Qwen3-8B at 16k context, batch 1: the verify extend of 4 tokens
        plus 3 head passes and one draft-extend pass of the head:

        >>> s = make("EAGLE3", "qwen3-8b")
        >>> verify = forward_s(QWEN3_8B, H200, [(16384, 4)])
        >>> heads = 3 * forward_s(s.draft, H200, [(16384, 1)]) + forward_s(s.draft, H200, [(16384, 4)])
        >>> abs(s.step_s(QWEN3_8B, H200, [16384]) - (verify + heads)) < 1e-12
        True
        """
        d = self.num_draft_tokens
        t = forward_s(target, hw, [(c, d) for c in contexts], tp, lora)
        return t + self.draft_s(hw, contexts, tp)

    def draft_s(self, hw: Hardware, contexts: list[int], tp: int = 1) -> float:
        """The drafting part of one verify step (see the module doc's table)."""
        if self.algorithm == "NGRAM":
            return self.ngram_lookup_s * len(contexts)
        m, d = self.draft, self.num_draft_tokens
        if self.algorithm == "DFLASH":
            return forward_s(m, hw, [(c, d) for c in contexts], tp)
        steps = self.num_steps * forward_s(m, hw, [(c, 1) for c in contexts], tp)
        return steps + forward_s(m, hw, [(c, d) for c in contexts], tp)  # draft extend over the verified tokens

    def prefill_extra_s(self, hw: Hardware, batch: list[tuple[int, int]], tp: int = 1) -> float:
        """The draft network's own pass over a prefill batch (0 for NGRAM)."""
        return 0.0 if self.draft is None else forward_s(self.draft, hw, batch, tp)


# Draft-network cost profiles (est. from the architectures; weights in bf16, KV of their own layers):
#   EAGLE3 head: one decoder layer (attention on 2x hidden input) + fc 3h->h + a 32k-token draft lm_head.
#   DFlash draft: five decoder layers of the target's width + the target's lm_head (16 positions per block).
EAGLE3_8B = ModelCost("AngelSlim/Qwen3-8B_eagle3", 0.75e9, 0.24e9, 1, 4096, 4.1e3, a=0.25e-3, hidden=4096)
EAGLE3_32B = ModelCost("AngelSlim/Qwen3-32B_eagle3", 1.46e9, 0.57e9, 1, 8192, 4.1e3, a=0.25e-3, hidden=5120)
DFLASH_8B = ModelCost("z-lab/Qwen3-8B-DFlash-b16", 3.2e9, 0.97e9, 5, 4096, 20.5e3, a=0.5e-3, hidden=4096)
DFLASH_32B = ModelCost("hypothetical/Qwen3-32B-DFlash-b16", 6.3e9, 2.4e9, 5, 8192, 20.5e3, a=0.5e-3, hidden=5120)
DRAFTS = {("EAGLE3", "qwen3-8b"): EAGLE3_8B, ("EAGLE3", "qwen3-32b"): EAGLE3_32B,
          ("DFLASH", "qwen3-8b"): DFLASH_8B, ("DFLASH", "qwen3-32b"): DFLASH_32B}
HYPOTHETICAL = {("DFLASH", "qwen3-32b"): "no DFlash drafter is published for Qwen3-32B; scaled from the 8B one"}


def available(algorithm: str, target: str) -> bool:
    """Whether a draft network for ``algorithm`` on the ``target`` preset is modelled.

    Qwen3-0.6B has no published EAGLE3 head or DFlash drafter, and STANDALONE
    needs a smaller model than itself, so only NGRAM applies to it.

    >>> available("EAGLE3", "qwen3-0.6b"), available("NGRAM", "qwen3-0.6b"), available("STANDALONE", "qwen3-8b")
    (False, True, True)
    """
    algorithm, target = algorithm.upper(), target.split("/")[-1].lower()
    if algorithm == "NGRAM":
        return True
    if algorithm == "STANDALONE":
        return target != "qwen3-0.6b"
    return (algorithm, target) in DRAFTS


@functools.lru_cache(maxsize=4096)
def _survival(want: float, k: int) -> float:
    """The ``a`` with ``1 + a + ... + a^k == want`` in [0, 1], by 60 bisection steps (a pure function: memoised).

    >>> round(_survival(2.5, 3), 3)
    0.691
    """
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        mean = sum(mid ** i for i in range(k + 1))
        lo, hi = (mid, hi) if mean < want else (lo, mid)
    return (lo + hi) / 2


def make(algorithm: str, target: str, **overrides) -> SpecDecoding:
    """sglang's defaults for ``algorithm`` on the ``target`` preset (``overrides``: any field).

    >>> make("dflash", "qwen3-8b").server_args()["speculative_num_draft_tokens"]
    16
    """
    from .costmodel import QWEN3_0_6B

    algorithm, key = algorithm.upper(), target.split("/")[-1].lower()
    if not available(algorithm, key):
        raise SpecRefused(f"no {algorithm} draft network is modelled for {target}")
    draft = QWEN3_0_6B if algorithm == "STANDALONE" else DRAFTS.get((algorithm, key))
    base = dict(DEFAULTS[algorithm], algorithm=algorithm, draft=draft,
                draft_model_path=draft.name if draft is not None else None)
    return replace(SpecDecoding(**base), **overrides) if overrides else SpecDecoding(**base)


from .costmodel import H200, QWEN3_8B  # noqa: E402, F401 - names the doctests above use
