"""The deployment ``method="auto"`` predicts on, read from a launch plan (pure; no I/O).

From the plan: the GPUs the started servers occupy (each server's
``--base-gpu-id``, ``tp_size`` and ``dp_size``), whether the drafter's GPUs
overlap the target's, the target's TP (what single-model methods run on),
each server's speculative decoding and its model; from the cost fits
(:func:`~sgl_speccompact.launch.run.cost_fits`): each server's calibrated or
profile parameters.  Servers the plan does not start (``--target-url``,
``[drafter] url``) are assumed to share one GPU, and the picker's source
says so.
"""

from __future__ import annotations

import json
from dataclasses import replace

from .plan import LaunchPlan
from .servers import ServerSpec


def gpu_ids(spec: ServerSpec) -> set[int]:
    """GPU indices a server uses: ``tp_size * dp_size`` from its ``--base-gpu-id`` (0 when not given).

    >>> gpu_ids(ServerSpec("drafter", "m", "h", 1, 0.5, tp_size=1, extra_args=("--base-gpu-id", "1")))
    {1}
    >>> sorted(gpu_ids(ServerSpec("target", "m", "h", 1, 0.5, tp_size=2)))
    [0, 1]
    """
    base, args = 0, list(spec.extra_args)
    for i, arg in enumerate(args):
        if arg.startswith("--base-gpu-id="):
            base = int(arg.split("=", 1)[1])
        elif arg == "--base-gpu-id" and i + 1 < len(args):
            base = int(args[i + 1])
    return set(range(base, base + spec.tp_size * spec.dp_size))


def auto_picker(plan: LaunchPlan, fits: dict | None = None):
    """The :class:`~sgl_speccompact.methods.autopick.AutoPicker` for ``plan`` and its servers' ``fits``."""
    from ..methods.autopick import deployment_for, spec_for

    fits = fits or {}
    targets = [s for s in plan.servers if s.role.startswith("target")]
    drafter = next((s for s in plan.servers if s.role == "drafter"), None)
    t_gpus = set().union(*(gpu_ids(s) for s in targets)) if targets else set()
    d_gpus = gpu_ids(drafter) if drafter else set()
    started = bool(targets) and (drafter is not None or plan.drafter_url is None)
    gpus = len(t_gpus | d_gpus) if started else 1
    shares = bool(t_gpus & d_gpus) if started and drafter else True

    def model(role: str, spec: ServerSpec | None) -> str | None:
        fit = fits.get(role)
        return fit.model if fit is not None else (spec.model_path if spec else None)

    def speculative(spec: ServerSpec | None, name: str | None, lora: bool):
        s = spec.speculative if spec else None
        if s is None or name is None:
            return None
        return spec_for(s.algorithm, name, lora, num_steps=s.num_steps, eagle_topk=s.eagle_topk,
                        num_draft_tokens=s.num_draft_tokens)

    t_model = model("target", targets[0] if targets else None)
    d_model = model("drafter", drafter) if plan.drafter_url else None
    gpu = plan.service.gpu or next((f.gpu for f in fits.values() if f.gpu != "unreported"), None)
    picker = deployment_for(t_model or "unknown", d_model, gpus=max(1, min(gpus, 2)), gpu=gpu,
                            drafter_shares_gpu=shares, target_tp=targets[0].tp_size if targets else 1, fits=fits)
    if picker.deployment is not None:  # the servers as launched: their TP and speculative decoding
        picker.deployment = replace(
            picker.deployment, single_model_tp=targets[0].tp_size if targets else 1,
            target_spec=speculative(targets[0] if targets else None, t_model, False),
            drafter_spec=speculative(drafter, d_model, bool(drafter and drafter.lora_path)))
    if not started:
        picker.source += "; servers not started here: one shared GPU assumed"
    return picker


DRY_RUN_TOKENS = (8_000, 32_000)  # history sizes whose pick --dry-run shows (tokens)


def format_auto(plan: LaunchPlan) -> str:
    """What ``--dry-run`` adds when the service's method is ``auto``: the deployment it predicts on,
    and its pick at the prior acceptance for a few history sizes (profiles; no calibration yet).

    Comment lines (``# ...``), so the dry run stays a script of commands and one JSON object.
    """
    from ..methods.names import METHODS
    from ..methods.autopick import describe

    picker = auto_picker(plan)
    out = [f"# method=auto predicts on: {json.dumps(describe(picker.deployment))}",
           f"# cost model: {picker.source} (a calibration or --calibrate replaces the profiles)"]
    methods = tuple(m for m in METHODS if m != "speccompact" or plan.drafter_url)
    for tokens in DRY_RUN_TOKENS:
        got = picker.predict(tokens, methods)
        times = ", ".join(f"{m} {s:.2f} s" for m, s in sorted(got["predicted_s"].items(), key=lambda kv: kv[1]))
        why = f"predicted, not measured: {times}" if times else got["reason"]
        out.append(f"# {tokens:,}-token history at prior acceptance {got['p_accept']:.2f}: {got['method']} ({why})")
    return "\n".join(out)
