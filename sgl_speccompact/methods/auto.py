"""``method="auto"``: the method the cost model predicts fastest for a deployment (pure, no I/O).

:func:`choose` predicts each method's end-to-end latency in closed form from
the forward-pass model (:mod:`~sgl_speccompact.core.costmodel`, :mod:`~sgl_speccompact.core.specdecode`) and the shape
of a compaction (:class:`Shape`: six slots, lines of about 21 tokens, a judge
suffix per line, a repair per rejected line), and picks the fastest.  The
prediction is only as good as the cost model and its hardware profile; the
simulated benchmark (``bench/latency.py``) checks it against the one-clock
simulator in every cell.

Per method (``H``: history tokens; ``step(b)``: one decode or verify step at
batch ``b`` and context ``H``; ``tau``: tokens per step with speculative
decoding, else 1):

* ``hermes`` / ``openclaw``: prefill ``H`` + one stream of ``hermes_tokens``
  (all slots' tokens) at batch 1, on the target with TP = GPUs when the
  deployment gives single-model methods every GPU (equal hardware);
* ``target_self``: prefill ``H``, then the slots decode together, the batch
  shrinking as shorter slots finish (the longest slot is the critical path);
* ``target_delta``: Target-self when nothing is held; else one prefill pass
  judging every slot's carried lines (a short suffix each: the criterion is
  shared), then Target-self over the new lines only;
* ``speccompact``: prefill ``H`` on target and drafter (in parallel on two
  GPUs, one after the other on one), then the longest slot: each line drafted
  by the drafter at the slots' batch (with its LoRA adapter), judged by a
  short target extend (hidden behind the next draft), and a rejected line
  (``1 - p_accept``) repaired by the target, its decode steps waiting behind
  the judge prefills other slots send meanwhile (sglang runs prefills first);
  on a shared GPU every target pass of every slot also delays the drafter.
  ``two-gpu-tp2-colocated`` (``target_tp`` 2): SpecCompact's target runs with
  TP=2 over both GPUs and the drafter's passes take turns with it (a TP=2
  pass holds both GPUs), so the target's passes are priced at TP=2 and the
  drafter is charged as on a shared GPU.

**What still holds** (``held``: the share of the previous summary's lines
the last compaction of the session kept, :func:`held_share`): SpecCompact
judges that share of each slot's lines in one batched prefill per slot
(carried lines, judged in bounded batches, :mod:`~sgl_speccompact.core.carried`) and drafts only the rest;
Target-delta judges them the same way and has the target write only the
rest; the other single-model methods still write every line, faster only
where their target runs NGRAM, which copies the held lines from the previous
summary in their prompt (:func:`~sgl_speccompact.core.specdecode.copy_tau`).

``DEFAULT_P_ACCEPT`` = 0.7: the SpecCompact paper's operating point and the
middle of the acceptance range (0.5-0.9) its evaluation sweeps; the service
replaces it with the acceptance observed per model pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..core.costmodel import GPUS, Hardware, LoraCost, ModelCost, forward_s, preset
from ..core.ledger import strip_ledger
from ..core.specdecode import SpecDecoding, copy_tau
from .names import METHODS  # what it predicts: every built-in method, in the registry's order

DEFAULT_P_ACCEPT = 0.7  # prior acceptance rate (see the module doc)
CHUNK = 8192  # sglang's chunked_prefill_size on an H200 (tokens per prefill pass)


@dataclass(frozen=True)
class Shape:
    """The shape of one compaction (defaults: the simulated workload's, ``bench/sim/workload.py``)."""

    slot_lines: tuple[int, ...] = (12, 10, 8, 6, 4, 3)  # lines per slot, longest first
    tokens_per_line: int = 24  # target tokens per summary line (fit to the simulator: real trajectory lines)
    prompt_tokens: int = 400  # system prompt, slot request and judge rubric around the history
    judge_tokens: int = 40  # per-judgement suffix: the line and its tags
    request_s: float = 6e-3  # per request: server o_req + client cost + tokenizer (est.)
    queueing: float = 1.1  # multiplier for waiting behind other slots' requests (est., simulator fit)
    repair_batch: float = 3.0  # repairs of different slots decoding together on a shared GPU (simulator fit)


@dataclass(frozen=True)
class Deployment:
    """The GPUs and servers a compaction runs on."""

    gpus: int  # GPUs the compaction may use (1 or 2)
    hardware: Hardware  # accelerator profile
    target: ModelCost  # target model profile
    drafter: ModelCost | None  # drafter model profile (None: no drafter, SpecCompact unavailable)
    target_spec: SpecDecoding | None = None  # the target server's speculative decoding
    drafter_spec: SpecDecoding | None = None  # the drafter server's speculative decoding
    drafter_shares_gpu: bool = True  # the drafter's passes take turns with the target's on one GPU
    single_model_tp: int = 1  # TP of the target for single-model methods (equal hardware: every GPU)
    drafter_lora: LoraCost | None = field(default_factory=LoraCost)  # the drafter's adapter, charged per pass
    hermes_tokens: int = 1200  # Hermes-style summary length, tokens
    drafter_hardware: Hardware | None = None  # the drafter server's own profile (its calibration); None: hardware
    target_tp: int = 1  # TP of SpecCompact's target (2: two-gpu-tp2-colocated, the drafter on the same GPUs)

    @classmethod
    def named(cls, target: str = "qwen3-8b", drafter: str | None = "qwen3-0.6b", gpus: int = 1, gpu: str = "H200",
              speculative: str | None = None, drafter_speculative: str | None = None,
              equal_hardware: bool = True, colocated_tp2: bool = False) -> "Deployment":
        """A deployment from preset names (``dataclasses.replace`` sets the other fields, e.g. ``hermes_tokens``).

        ``speculative`` is applied to every server that supports it (see
        :func:`~sgl_speccompact.core.specdecode.available`; sglang refuses LoRA
        with STANDALONE, so the drafter never gets it); ``equal_hardware``
        gives single-model methods the target on every GPU (TP);
        ``colocated_tp2`` (two GPUs only) gives SpecCompact's target TP=2 with
        the drafter on the same GPUs.

        >>> d = Deployment.named(target="qwen3-32b", gpus=2, speculative="eagle3")
        >>> d.target_spec.algorithm, d.drafter_spec, d.single_model_tp, d.drafter_shares_gpu
        ('EAGLE3', None, 2, False)
        """
        from ..core.specdecode import LORA_REFUSED, available, make

        if gpus not in (1, 2):
            raise ValueError(f"gpus must be 1 or 2, not {gpus}")
        if colocated_tp2 and gpus != 2:
            raise ValueError("colocated_tp2 needs gpus=2")
        if gpu not in GPUS:
            raise ValueError(f"unknown GPU profile {gpu!r}; known: {sorted(GPUS)}")

        def spec(algo, model, lora):
            algo = (algo or "none").upper()
            if algo == "NONE" or not available(algo, model) or (lora and algo in LORA_REFUSED):
                return None
            return make(algo, model)

        return cls(gpus=gpus, hardware=GPUS[gpu], target=preset(target),
                   drafter=preset(drafter) if drafter else None, target_spec=spec(speculative, target, False),
                   drafter_spec=spec(drafter_speculative or speculative, drafter, True) if drafter else None,
                   drafter_shares_gpu=gpus == 1 or colocated_tp2, single_model_tp=gpus if equal_hardware else 1,
                   target_tp=2 if colocated_tp2 else 1)


@dataclass(frozen=True)
class AutoChoice:
    """What :func:`choose` picked and why."""

    method: str  # the method predicted fastest
    predicted_s: dict[str, float]  # predicted end-to-end seconds per method considered
    reason: str  # one sentence for stats and logs


def prefill_s(m: ModelCost, hw: Hardware, tokens: int, tp: int = 1, spec: SpecDecoding | None = None,
              lora: LoraCost | None = None) -> float:
    """Seconds to prefill ``tokens`` uncached tokens in chunks of :data:`CHUNK`.

    >>> from ..core.costmodel import H200, QWEN3_8B
    >>> round(prefill_s(QWEN3_8B, H200, 16384), 2)
    0.57
    """
    t, done = 0.0, 0
    while done < tokens:
        n = min(CHUNK, tokens - done)
        t += forward_s(m, hw, [(done, n)], tp, lora)
        if spec is not None:
            t += spec.prefill_extra_s(hw, [(done, n)], tp)
        done += n
    return t


def decode_s(m: ModelCost, hw: Hardware, ctx: int, tokens: float, batch: int, tp: int = 1,
             spec: SpecDecoding | None = None, lora: LoraCost | None = None) -> float:
    """Seconds for ``batch`` requests at context ``ctx`` to each decode ``tokens`` tokens together."""
    if tokens <= 0 or batch <= 0:
        return 0.0
    if spec is None:
        return tokens * forward_s(m, hw, [(ctx, 1)] * batch, tp, lora)
    return tokens / spec.tau_at(batch) * spec.step_s(m, hw, [ctx] * batch, tp, lora)


def _slot_phases(shape: Shape) -> list[tuple[int, int]]:
    """``(batch, lines)`` phases of slots decoding together, shortest finishing first.

    >>> _slot_phases(Shape(slot_lines=(5, 2, 2)))
    [(3, 2), (1, 3)]
    """
    lines = sorted(shape.slot_lines)
    out, done = [], 0
    for i, n in enumerate(lines):
        if n > done:
            out.append((len(lines) - i, n - done))
            done = n
    return out


def held_share(summary: str, previous_summary: str | None) -> float | None:
    """The share of ``previous_summary``'s content lines that ``summary`` still holds (None: no previous lines).

    Headings, blanks and empty markers are not content, nor is the exact ledger (copied, never judged).

    >>> held_share("## Goal\\n- a\\n- c", "## Goal\\n- a\\n- b\\n(none)"), held_share("- a", None)
    (0.5, None)
    """
    def content(text: str) -> list[str]:
        return [x.strip() for x in text.splitlines()
                if x.strip() and not x.lstrip().startswith("#") and x.strip().lower() not in ("(none)", "- (none)")]

    before = content(strip_ledger(previous_summary) or "")
    if not before:
        return None
    now = set(content(strip_ledger(summary) or ""))
    return sum(1 for x in before if x in now) / len(before)


def carried_shape(shape: Shape, held: float) -> tuple[Shape, tuple[int, ...]]:
    """``(the shape of the new lines, carried lines per slot)`` when ``held`` of every slot still holds.

    >>> new, carried = carried_shape(Shape(slot_lines=(10, 4)), 0.6)
    >>> new.slot_lines, carried
    ((4, 2), (6, 2))
    """
    carried = tuple(int(round(n * held)) for n in shape.slot_lines)
    return replace(shape, slot_lines=tuple(n - c for n, c in zip(shape.slot_lines, carried))), carried


def predict(method: str, dep: Deployment, history_tokens: int, p_accept: float, shape: Shape = Shape(),
            held: float = 0.0) -> float:
    """Predicted end-to-end seconds of ``method`` (see the module doc); ``held``: the share that still holds."""
    hw, t, h = dep.hardware, dep.target, history_tokens + shape.prompt_tokens
    tpl = shape.tokens_per_line
    if held > 0 and method in ("hermes", "openclaw", "target_self") and dep.target_spec is not None \
            and dep.target_spec.algorithm == "NGRAM":
        dep = replace(dep, target_spec=replace(dep.target_spec, tau=copy_tau(held)))
    if held > 0 and method == "speccompact":
        shape, carried = carried_shape(shape, held)
        judged = forward_s(t, hw, [(h, shape.judge_tokens)] * max(carried), dep.target_tp) + shape.request_s
        return judged + predict(method, dep, history_tokens, p_accept, shape)
    if method == "target_delta":  # Target-self writing only the new lines, after one judge batch per slot
        if held <= 0:
            return predict("target_self", dep, history_tokens, p_accept, shape)
        shape, carried = carried_shape(shape, held)
        every = [(h, shape.judge_tokens)] * sum(carried)  # the slots' batches arrive together
        judged = forward_s(t, hw, every, dep.single_model_tp) + shape.request_s
        return judged + predict("target_self", dep, history_tokens, p_accept, shape)
    if method in ("hermes", "openclaw", "target_self"):
        tp = dep.single_model_tp
        before = prefill_s(t, hw, h, tp, dep.target_spec) + shape.request_s
        if method == "hermes":
            return before + decode_s(t, hw, h, dep.hermes_tokens, 1, tp, dep.target_spec)
        if method == "openclaw":
            return before + decode_s(t, hw, h, sum(shape.slot_lines) * tpl, 1, tp, dep.target_spec)
        gen = sum(decode_s(t, hw, h, n * tpl, b, tp, dep.target_spec) for b, n in _slot_phases(shape))
        return before + shape.request_s + gen * shape.queueing
    if method != "speccompact":
        raise ValueError(f"no prediction for method {method!r}; known: {METHODS}")
    if dep.drafter is None:
        return float("inf")
    d, lora, dhw = dep.drafter, dep.drafter_lora, dep.drafter_hardware or hw
    tp = dep.target_tp
    pre_t = prefill_s(t, hw, h, tp, dep.target_spec)
    pre_d = prefill_s(d, dhw, h, 1, dep.drafter_spec, lora)
    before = (pre_t + pre_d if dep.drafter_shares_gpu else max(pre_t, pre_d)) + 2 * shape.request_s
    q = 1.0 - p_accept
    judge = forward_s(t, hw, [(h, shape.judge_tokens)], tp)
    repair = decode_s(t, hw, h, tpl, 1, tp, dep.target_spec)
    draft = sum(decode_s(d, dhw, h, n * (tpl + 1), b, 1, dep.drafter_spec, lora)  # +1: the newline stop
                for b, n in _slot_phases(shape))
    longest = max(shape.slot_lines)
    # a repair's decode steps wait behind the judges (prefills go first) the other slots send meanwhile:
    # about one per slot per drafted line
    others = max(len(shape.slot_lines) / 2 - 1, 0)
    line_s = decode_s(d, dhw, h, tpl + 1, len(shape.slot_lines) // 2, 1, dep.drafter_spec, lora)
    repair *= 1 + others * judge / line_s
    per_line = shape.request_s * (2 + q)  # draft + judge (+ repair) requests
    crit = draft + longest * (q * (repair + judge) + per_line) + judge
    if dep.drafter_shares_gpu:  # every target pass of every slot takes a turn on the drafter's GPU
        lines = sum(shape.slot_lines)
        crit += lines * (judge + q * repair / shape.repair_batch)
    return before + crit * shape.queueing


def choose(deployment: Deployment, history_tokens: int, p_accept: float = DEFAULT_P_ACCEPT,
           methods: tuple[str, ...] = METHODS, shape: Shape = Shape(), held: float | None = None) -> AutoChoice:
    """The method predicted fastest on ``deployment`` for a history of ``history_tokens`` tokens.

    Parameters
    ----------
    deployment
        GPUs, models, speculative decoding (:meth:`Deployment.named`).
    history_tokens
        Tokens of the history to compact.
    p_accept
        Acceptance rate of drafted lines observed so far (:data:`DEFAULT_P_ACCEPT` before any).
    methods
        The methods allowed; ``speccompact`` needs a drafter.
    held
        The share of the previous summary the session's last compaction kept
        (:func:`held_share`; None: a fresh summary).

    Examples
    --------
    One GPU and a drafter that shares it: Target-self; two GPUs at 32B: SpecCompact.

    >>> choose(Deployment.named(target="qwen3-8b", gpus=1), 16000, 0.7).method
    'target_self'
    >>> choose(Deployment.named(target="qwen3-32b", gpus=2, equal_hardware=False), 16000, 0.9).method
    'speccompact'
    """
    if not 0.0 <= p_accept <= 1.0:
        raise ValueError(f"p_accept must be in [0, 1], not {p_accept}")
    if history_tokens < 0:
        raise ValueError(f"history_tokens must be >= 0, not {history_tokens}")
    allowed = [m for m in methods if m != "speccompact" or deployment.drafter is not None]
    if not allowed:
        raise ValueError(f"no method to choose from among {methods} (speccompact needs a drafter)")
    predicted = {m: predict(m, deployment, history_tokens, p_accept, shape, held or 0.0) for m in allowed}
    best = min(predicted, key=predicted.get)
    rival = min((m for m in predicted if m != best), key=predicted.get, default=None)
    spec = deployment.target_spec.algorithm if deployment.target_spec else "no"
    margin = f", {predicted[rival] / predicted[best]:.2f}x faster than {rival}" if rival else ""
    reason = (f"{best} predicted {predicted[best]:.2f} s{margin} (cost model, {deployment.hardware.name} x"
              f"{deployment.gpus}, {deployment.target.name}, {spec} speculative decoding, p_accept {p_accept:g}"
              + (f", held share {held:.2f}" if held is not None else "") + ")")
    return AutoChoice(best, predicted, reason)
