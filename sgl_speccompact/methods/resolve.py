"""One method resolver for the CLI, :func:`~.registry.run_method` and the HTTP service.

``resolve_method(name, request, offer, deployment)`` returns the method to run and,
for ``auto``, the pick behind it (``stats.auto``).  An explicit name is
returned as it is (the pipeline refuses it with its own typed error if it
cannot serve the request).  ``auto`` picks only among the methods that
accept the request, decided by the registry's own per-method flags
(:func:`~.pipeline.refusal`):

* a method that ``needs_drafter`` is left out without a drafter;
* a method with ``fixed_sections`` (Hermes) is left out with a custom schema;
* a method whose output reserve (:attr:`~.pipeline.Method.new_tokens`)
  leaves no room for a block of history in the target's context is left out;
* a method that ``judges`` (SpecCompact) is left out once the target's
  observed label mass is below ``config.min_label_mass``
  (:meth:`~.autopick.AutoPicker.low_label_mass`), unless nothing else is
  offered; the pick's ``label_mass`` and ``reason`` say so.

So ``auto`` never picks a method that then refuses the request.  The share
of the previous summary a session's last compaction kept (``held``) counts
only for a request that can carry lines (:func:`carries_lines`): one with a
previous summary and ``carry_previous_lines`` on.  It
predicts for the models the servers report
(:func:`served_picker`: ``/get_model_info``'s ``model_path``), not a
default model name.
"""

from __future__ import annotations


from . import baselines, speccompact  # noqa: F401 - importing them registers the methods auto picks from
from ..errors import ConfigError
from ..options import DEFAULT_DRAFTER_MODEL, DEFAULT_TARGET_MODEL
from .auto import Deployment
from ..backends.contract import Backend
from .autopick import AUTO, AcceptanceEstimate, AutoPicker, default_picker, deployment_for
from .chunking import MIN_BLOCK_TOKENS
from .pipeline import REGISTRY, refusal
from .request import MethodRequest, Offer


def accepting(request: MethodRequest, offer: Offer) -> tuple[str, ...]:
    """The registered methods of ``offer`` that can serve ``request``, in the offered order.

    >>> from ..config import CompactConfig
    >>> from ..schema import OPENCLAW_SLOTS
    >>> from . import baselines, speccompact  # noqa: F401 - registers the methods
    >>> offer = Offer(CompactConfig(), offered=("speccompact", "hermes", "openclaw"))
    >>> accepting(MethodRequest([], schema=OPENCLAW_SLOTS), offer)
    ('openclaw',)
    >>> small = CompactConfig(target_context_tokens=4096)
    >>> accepting(MethodRequest([]), Offer(small, has_drafter=True, offered=("hermes", "speccompact")))
    ('speccompact',)
    """
    cfg = offer.config
    out = []
    for name in offer.offered or tuple(REGISTRY):
        method = REGISTRY.get(name)
        if method is None or name == AUTO:
            continue
        if refusal(method, has_drafter=offer.has_drafter, schema_given=request.schema is not None):
            continue
        if offer.context_tokens and method.new_tokens is not None and \
                method.new_tokens(cfg) + cfg.max_summary_tokens + MIN_BLOCK_TOKENS > offer.context_tokens:
            continue  # its output reserve leaves no block of history room in the target's context
        out.append(name)
    return tuple(out)


def carries_lines(request: MethodRequest, offer: Offer) -> bool:
    """Whether ``request`` can carry lines of a previous summary: it has one, and the config carries them.

    >>> from ..config import CompactConfig
    >>> carries_lines(MethodRequest([], "## Goal\\n- a"), Offer(CompactConfig())), carries_lines(MethodRequest([]), Offer(CompactConfig()))
    (True, False)
    """
    return bool(request.previous_summary) and offer.config.carry_previous_lines


def as_picker(deployment: Deployment | AutoPicker | None, has_drafter: bool) -> AutoPicker:
    """The picker ``auto`` uses: the one given, one around a bare deployment, or the default."""
    if isinstance(deployment, AutoPicker):
        return deployment
    if deployment is None:
        return default_picker(has_drafter)
    pair = f"{deployment.target.name}|{deployment.drafter.name if deployment.drafter else 'none'}"
    return AutoPicker(deployment, f"deployment given by the caller ({deployment.hardware.name})", pair,
                      AcceptanceEstimate())


def resolve_method(name: str, request: MethodRequest, offer: Offer,
                   deployment: Deployment | AutoPicker | None = None,
                   held: float | None = None) -> tuple[str, dict | None]:
    """The method to run for ``name`` and, for ``auto``, its pick (``stats.auto``; None otherwise).

    The one place ``auto`` is resolved: the CLI, :func:`~.registry.run_method` and the service
    call it.  ``offer``: the methods the caller serves, what it has to serve them and the
    compaction's effective config (the CLI's with its ``--set`` overrides, the service's with the
    body's); ``held``: the share of the previous summary the session's last compaction kept (the
    pick predicts with it when the request :func:`carries_lines`; otherwise nothing can be held).

    Raises
    ------
    ConfigError
        ``auto`` and no offered method accepts the request.
    """
    if name != AUTO:
        return name, None
    allowed = accepting(request, offer)
    if not allowed:
        raise ConfigError(f"auto has no method that accepts this request among "
                          f"{list(offer.offered or REGISTRY)}", field="method")
    picker = as_picker(deployment, offer.has_drafter)
    if not carries_lines(request, offer):
        held = None
    min_mass = offer.config.min_label_mass
    low = picker.low_label_mass(min_mass)
    judging = tuple(m for m in allowed if REGISTRY[m].judges)
    if low is not None and len(judging) < len(allowed):
        allowed = tuple(m for m in allowed if m not in judging)
    choice = picker.pick(request.messages, allowed, request.previous_summary, held=held)
    if low is not None:
        left_out = f"left out {list(judging)}" if judging and not set(judging) & set(allowed) \
            else "nothing else to pick"
        choice = {**choice, "label_mass": low, "reason": f"{choice['reason']}; the target's label mass {low:.3g} is "
                  f"below min_label_mass {min_mass:g}, it cannot judge: {left_out}"}
    return choice["method"], choice


def served_model(backend: Backend | None) -> str | None:
    """The model a connected SGLang backend serves (``/get_model_info``'s ``model_path``), if it says.

    >>> class B: model_info = {"model_path": "Qwen/Qwen3-32B"}
    >>> class Bare: model_info = {}
    >>> served_model(B()), served_model(Bare()), served_model(None)
    ('Qwen/Qwen3-32B', None, None)
    """
    path = backend.model_info.get("model_path") if backend is not None else None
    return path if isinstance(path, str) and path else None


def served_picker(target: Backend | None, drafter: Backend | None, *, fallback_target: str = DEFAULT_TARGET_MODEL,
                  fallback_drafter: str = DEFAULT_DRAFTER_MODEL, prefer_served: bool = True,
                  **deployment) -> AutoPicker:
    """An :class:`AutoPicker` for the models the servers report (the fallbacks where they do not;
    ``prefer_served=False``: the fallbacks, named by the user, win).

    ``deployment``: :func:`~.autopick.deployment_for`'s keywords (``gpus``, ``gpu``, ...).

    >>> class B: model_info = {"model_path": "Qwen/Qwen3-32B"}
    >>> served_picker(B(), None).pair, served_picker(B(), None, fallback_target="x", prefer_served=False).pair
    ('Qwen/Qwen3-32B|none', 'x|none')
    """
    def pick(backend, fallback):
        return (served_model(backend) if prefer_served else None) or fallback
    d = pick(drafter, fallback_drafter) if drafter is not None else None
    return deployment_for(pick(target, fallback_target), d, **deployment)
