"""Resolving ``method="auto"`` on the deployment at hand, with the acceptance observed so far.

:mod:`.auto` predicts; this module supplies what it predicts from and
records what it picked:

* the deployment (:func:`deployment_for`): GPU count and kind, the target
  and drafter models, each server's speculative decoding, whether the
  drafter shares a GPU with the target, and each server's cost-model fit
  (calibrated on the user's servers when there is one, else the shipped
  profile of the GPU, H200 by default; :attr:`AutoPicker.source` says which);
* the history's size: an estimate, :data:`CHARS_PER_TOKEN` characters of
  message text per token (:func:`estimate_tokens`), not a tokenizer count;
* the acceptance rate: :class:`AcceptanceEstimate`, a running estimate per
  (target, drafter) model pair that starts at the prior
  :data:`~.auto.DEFAULT_P_ACCEPT` (0.7) and moves by an exponential moving
  average, ``p <- (1 - w) p + w r`` with ``w`` = :data:`EMA_WEIGHT` (0.2),
  after each SpecCompact compaction whose judge saw lines (``r`` its
  ``stats.acceptance_rate``): about the last ten compactions count;
* the target's label mass: the median p+ + p- of the latest compaction's
  judge verdicts (``stats.label_mass_median``, per target model).  Below
  ``config.min_label_mass`` the target cannot judge, and ``auto`` picks no
  judging method (:func:`~.resolve.resolve_method`).

An explicit method never comes here.  Without a cost-model preset for the
target, or when only one method is allowed, the pick is made without a
prediction and the reason says why.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any

from ..core.calibration import CostFit, check_fit, model_preset
from ..history.estimate import CHARS_PER_TOKEN, chars_to_tokens
from ..history.messages import content_text
from ..core.costmodel import GPUS, Hardware
from ..core.gpus import DEFAULT_GPU, match_gpu
from ..core.specdecode import SpecDecoding, SpecRefused, make
from .auto import DEFAULT_P_ACCEPT, METHODS as PREDICTED, Deployment, choose

AUTO = "auto"  # the method name that asks for a pick
EMA_WEIGHT = 0.2  # weight of the newest compaction's acceptance rate in the running estimate


def estimate_tokens(messages: list[Any], previous_summary: str | None = None) -> int:
    """Tokens of a history, estimated as characters / :data:`~sgl_speccompact.history.estimate.CHARS_PER_TOKEN`.

    Counts message text, text parts, tool-call names and arguments; reads
    nothing else and never modifies ``messages``.

    >>> estimate_tokens([{"role": "user", "content": "x" * 400}, {"role": "tool", "content": [{"text": "y" * 40}]}])
    110
    """
    chars = len(previous_summary or "")
    for m in messages:
        if not isinstance(m, dict):
            continue
        chars += len(content_text(m.get("content")))
        for call in m.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                chars += len(str(fn.get("name") or "")) + len(str(fn.get("arguments") or ""))
    return chars_to_tokens(chars)


class AcceptanceEstimate:
    """Running acceptance rate per (target, drafter) model pair (see the module doc for the rule).

    >>> est = AcceptanceEstimate()
    >>> est.get("t|d"), est.observe("t|d", 0.2), round(est.observe("t|d", 0.2), 3)
    (0.7, 0.6, 0.52)
    """

    def __init__(self, prior: float = DEFAULT_P_ACCEPT, weight: float = EMA_WEIGHT):
        if not (0.0 <= prior <= 1.0 and 0.0 < weight <= 1.0):
            raise ValueError(f"prior must be in [0, 1] and weight in (0, 1], not {prior}, {weight}")
        self.prior = prior  # estimate before any observation
        self.weight = weight  # weight of each new observation
        self._values: dict[str, tuple[float, int]] = {}  # pair -> (estimate, observations)
        self._lock = threading.Lock()  # compactions finish on their own threads

    def get(self, pair: str) -> float:
        """The current estimate for ``pair`` (the prior before any observation)."""
        with self._lock:
            return self._values.get(pair, (self.prior, 0))[0]

    def count(self, pair: str) -> int:
        """Observations behind the estimate for ``pair``."""
        with self._lock:
            return self._values.get(pair, (self.prior, 0))[1]

    def observe(self, pair: str, rate: float) -> float:
        """Fold one compaction's acceptance rate in; returns the new estimate."""
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"acceptance rate must be in [0, 1], not {rate}")
        with self._lock:
            old, n = self._values.get(pair, (self.prior, 0))
            new = (1.0 - self.weight) * old + self.weight * rate
            self._values[pair] = (new, n + 1)
            return new

    def snapshot(self) -> dict[str, float]:
        """Every pair's estimate (the prior is not listed until a pair is observed)."""
        with self._lock:
            return {k: v for k, (v, _) in self._values.items()}


@dataclass
class AutoPicker:
    """What ``method="auto"`` picks from: one deployment, the acceptance observed on it."""

    deployment: Deployment | None  # cost-model deployment (None: no preset for the target model)
    source: str  # where its numbers come from, e.g. "target: calibrated; drafter: profile:H200"
    pair: str = "unknown|none"  # "target-model|drafter-model": the key of the acceptance estimate
    acceptance: AcceptanceEstimate = field(default_factory=AcceptanceEstimate)  # per model pair
    # the target's median label mass (p+ + p-) in the latest compaction with verdicts, per target model
    label_mass: AcceptanceEstimate = field(default_factory=lambda: AcceptanceEstimate(prior=1.0, weight=1.0))

    def pick(self, messages: list[Any], methods: tuple[str, ...], previous_summary: str | None = None,
             held: float | None = None) -> dict:
        """The method to run for this history, with the prediction behind it (``stats.auto``).

        ``methods`` are those allowed here (``speccompact`` only with a drafter);
        ``held`` is the share of the previous summary the session's last
        compaction kept (:func:`~.auto.held_share`; None: not known).

        Raises
        ------
        ValueError
            No method allowed.
        """
        return self.predict(estimate_tokens(messages, previous_summary), methods,
                            tokens_source=f"estimate: characters / {CHARS_PER_TOKEN}", held=held)

    def predict(self, tokens: int, methods: tuple[str, ...], tokens_source: str = "given",
                held: float | None = None) -> dict:
        """:meth:`pick` for a history of ``tokens`` tokens (``launch --dry-run`` shows a few sizes)."""
        allowed = tuple(m for m in methods if m != AUTO)
        if not allowed:
            raise ValueError("no method to pick from")
        p, seen = self.acceptance.get(self.pair), self.acceptance.count(self.pair)
        info = {"requested": AUTO, "history_tokens": tokens,
                "history_tokens_source": tokens_source, "p_accept": round(p, 4),
                "p_accept_source": f"observed over {seen} compactions" if seen else "prior", "pair": self.pair,
                "cost_model": self.source, "deployment": describe(self.deployment),
                **({"held_share": round(held, 4)} if held is not None else {})}
        predictable = tuple(m for m in allowed if m in PREDICTED)
        if self.deployment is None or not predictable:
            first = next((m for m in ("speccompact", "target_self") if m in allowed), allowed[0])
            why = "no cost-model preset for the target" if self.deployment is None else "no predictable method"
            return {**info, "method": first, "predicted_s": {}, "reason": f"{first}: {why}, not predicted"}
        dep = self.deployment if "speccompact" in predictable else replace(self.deployment, drafter=None)
        got = choose(dep, tokens, p, methods=predictable, held=held)
        return {**info, "method": got.method, "predicted_s": {k: round(v, 4) for k, v in got.predicted_s.items()},
                "reason": f"{got.reason}; {self.source}"}

    def observe(self, method: str, acceptance_rate: float | None, label_mass: float | None = None) -> float | None:
        """Update the estimates from a finished compaction; the new acceptance estimate or None.

        ``acceptance_rate`` counts after SpecCompact only; ``label_mass`` (the
        compaction's median p+ + p-, SJC's verdicts included) after any method
        that judged.
        """
        if label_mass is not None:
            self.label_mass.observe(self.target, min(1.0, max(0.0, label_mass)))
        if method != "speccompact" or acceptance_rate is None:
            return None
        return self.acceptance.observe(self.pair, acceptance_rate)

    @property
    def target(self) -> str:
        """The target model of :attr:`pair`: the key of the label-mass estimate."""
        return self.pair.split("|", 1)[0]

    def low_label_mass(self, min_label_mass: float) -> float | None:
        """The observed label mass if it is below ``min_label_mass`` (the target cannot judge), else None.

        >>> p = AutoPicker(None, "x", "t|d")
        >>> p.low_label_mass(0.1), p.observe("hermes", None, 0.004), p.low_label_mass(0.1)
        (None, None, 0.004)
        """
        if not self.label_mass.count(self.target):
            return None
        mass = self.label_mass.get(self.target)
        return mass if mass < min_label_mass else None


def describe(dep: Deployment | None) -> dict | None:
    """The deployment's facts that the pick depends on, JSON-ready."""
    if dep is None:
        return None
    return {"gpus": dep.gpus, "gpu": dep.hardware.name, "target": dep.target.name,
            "drafter": dep.drafter.name if dep.drafter else None,
            "drafter_gpu": dep.drafter_hardware.name if dep.drafter_hardware else None,
            "target_speculative": dep.target_spec.algorithm if dep.target_spec else None,
            "drafter_speculative": dep.drafter_spec.algorithm if dep.drafter_spec else None,
            "drafter_shares_gpu": dep.drafter_shares_gpu, "single_model_tp": dep.single_model_tp,
            "target_tp": dep.target_tp}


def spec_for(algorithm: str | None, model: str, lora: bool = False, **settings) -> SpecDecoding | None:
    """The cost model's speculative decoding for a server (None: off, or not modelled for ``model``).

    ``settings``: sglang's ``num_steps``, ``eagle_topk``, ``num_draft_tokens``
    where given (None: sglang's defaults).

    >>> spec_for("EAGLE3", "Qwen/Qwen3-8B").algorithm, spec_for("EAGLE3", "Qwen/Qwen3-0.6B")
    ('EAGLE3', None)
    """
    if not algorithm or algorithm.upper() == "NONE":
        return None
    given = {k: v for k, v in settings.items() if v is not None}
    try:
        spec = make(algorithm, model.rstrip("/").split("/")[-1].lower(), **given)
        if lora:
            spec.check_lora()
        return spec
    except (SpecRefused, TypeError):
        return None


def deployment_for(target_model: str, drafter_model: str | None, *, gpus: int = 1, gpu: str | None = None,
                   drafter_shares_gpu: bool = True, target_tp: int = 1,
                   fits: dict[str, CostFit] | None = None, acceptance: AcceptanceEstimate | None = None) -> AutoPicker:
    """An :class:`AutoPicker` for served models on ``gpus`` GPUs of kind ``gpu``.

    ``target_tp`` 2 with ``drafter_shares_gpu``: the target served with TP=2
    over both GPUs and the drafter on them (``two-gpu-tp2-colocated``).
    ``fits`` (role -> :class:`CostFit`) gives each server's calibrated or
    profile parameters; a role without one uses the shipped profile of
    ``gpu`` (H200 when unknown).  The servers run without speculative
    decoding and single-model methods at TP 1 (``dataclasses.replace`` on
    the picker's ``deployment`` sets either).

    >>> p = deployment_for("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B", gpu="A100")
    >>> p.deployment.hardware.name, p.source, p.pair
    ('A100', 'target: profile:A100; drafter: profile:A100', 'Qwen/Qwen3-8B|Qwen/Qwen3-0.6B')
    """
    fits = fits or {}
    key = match_gpu(gpu) or DEFAULT_GPU
    why = f"unknown GPU {gpu!r}" if gpu else "no GPU given"
    note = "" if match_gpu(gpu) else f" ({why}: {DEFAULT_GPU} assumed)"
    pair = f"{target_model}|{drafter_model or 'none'}"
    acceptance = acceptance or AcceptanceEstimate()

    def profile(role: str, model: str) -> tuple[Any, Hardware, str]:
        preset = model_preset(model)
        fit = fits.get(role)
        refused = ""
        if fit is not None:
            try:  # bounds were checked where the fit was made or read; numbers that break arithmetic, here
                check_fit(fit, preset, bounds=False)
            except ValueError as exc:
                fit, refused = None, f" (cost fit refused: {exc})"
        if fit is None:
            return preset, GPUS[key], f"profile:{key}{note}{refused}"
        m, hw = fit.profiles(preset, GPUS[key])
        return m, hw, fit.source + (f" ({fit.note})" if fit.note else "")

    try:
        target, hw, t_src = profile("target", target_model)
    except ValueError as exc:
        return AutoPicker(None, f"no cost model: {exc}", pair, acceptance)
    sources, drafter, d_hw = [f"target: {t_src}"], None, None
    if drafter_model:
        try:
            drafter, d_hw, d_src = profile("drafter", drafter_model)
            sources.append(f"drafter: {d_src}")
        except ValueError:
            sources.append(f"drafter: no preset for {drafter_model!r}, speccompact not predicted")
    dep = Deployment(gpus=gpus, hardware=hw, target=target, drafter=drafter, drafter_shares_gpu=drafter_shares_gpu,
                     drafter_hardware=d_hw if d_hw != hw else None, target_tp=target_tp)
    return AutoPicker(dep, "; ".join(sources), pair, acceptance)


def default_picker(has_drafter: bool = True) -> AutoPicker:
    """The documented default: Qwen3-8B target, Qwen3-0.6B drafter, one shared H200, no speculative decoding.

    >>> default_picker().source
    'target: profile:H200 (no GPU given: H200 assumed); drafter: profile:H200 (no GPU given: H200 assumed)'
    """
    return deployment_for("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B" if has_drafter else None)
