"""Target-generated slot data for drafter SFT (SpecCompact eq. 1).

For every history H and every slot s, the target model answers the drafter
prompt of Figure 5 (``prompts.drafter_messages``); its answer y_s is the
supervision the drafter is trained to reproduce.  T histories give 6T
examples with the OpenClaw schema.

Each record of ``train.jsonl`` / ``validation.jsonl`` is a TRL
prompt-completion example in chat form::

    {"trajectory_id": "...", "slot": "goal", "incremental": false,
     "prompt": drafter_messages(...),                      # system + user
     "completion": [{"role": "assistant", "content": y_s}]}

Incremental examples (``incremental: true``, a share of the histories set
by ``incremental_fraction``): the history is cut in two, the target first
writes every slot of the earlier part, and the example is the later part's
prompt with that summary as the previous summary (see
:mod:`~sgl_speccompact.train.incremental`), as an incremental compaction
sends it.

Requests are one ``@sgl.function`` per (history, slot), run with
``run_batch``.  The six programs of a history are submitted together and
their texts agree up to the end of the conversation (Figure 5 puts the
conversation before anything slot-specific), so the server's radix cache
prefills each history once; SGLang's scheduler holds back waiting requests
whose prefix another waiting request is about to cache.

The split is by trajectory *group*: all conversations of one file (a tau2
file holds several trials of one task) land on the same side, so no
trajectory, nor a sibling trial of it, is in both splits.

Command line (the only place a backend is created)::

    python -m sgl_speccompact.train.data HISTORY... --target-url URL --out DIR
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import sglang as sgl

from ..backends.chat_format import ChatFormat, decide
from ..errors import BackendError, ConfigError
from ..history import parse_messages, render_history
from ..core.prompts import THINK_OFF, assemble, drafter_messages
from ..programs.states import retire
from ..schema import OPENCLAW_SLOTS, Slot, validate_schema
from .incremental import cut_point, pick_incremental, split_history
from .output import SPLITS, DataSummary, Example, write_dataset  # noqa: F401 - SPLITS: public here too
from .history_files import Trajectory, load_trajectories

# A reasoning block a target may emit despite THINK_OFF; never drafter supervision.
_THINK_BLOCK = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)


# ---------------------------------------------------------------- pure helpers


def validation_keys(keys: Iterable[str], fraction: float, seed: int) -> set[str]:
    """Pick the split keys that go to validation, deterministically.

    With at least two keys and ``fraction > 0``, both splits get at least one.

    >>> sorted(validation_keys(["a", "b", "c", "d"], 0.5, 42)) == sorted(validation_keys(["d", "c", "b", "a"], 0.5, 42))
    True
    >>> validation_keys(["a"], 0.5, 0)
    set()
    """
    if not 0.0 <= fraction < 1.0:
        raise ConfigError(f"val_fraction must be in [0, 1), got {fraction}")
    order = sorted(set(keys))
    random.Random(seed).shuffle(order)
    n = round(len(order) * fraction)
    if fraction > 0 and len(order) > 1:
        n = min(max(n, 1), len(order) - 1)
    return set(order[:n])


def clean_completion(text: str, truncated: bool) -> str:
    """The slot body as supervision: no reasoning block, no cut-off last line.

    >>> clean_completion("<think>\\nhm\\n</think>\\n\\n- fix a.py\\n- half a li", truncated=True)
    '- fix a.py'
    """
    text = _THINK_BLOCK.sub("", text)
    if truncated and "\n" in text:
        text = text[: text.rfind("\n")]
    return text.strip()


def _chunks(items: Sequence, size: int) -> Iterator[Sequence]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


# ---------------------------------------------------------------- generation


@sgl.function
def target_slot(s, system: str, user: str, think_off: bool, max_tokens: int):
    """The target writes one slot for one history (Figure 5 prompt)."""
    s += sgl.system(system)
    s += sgl.user(user)
    s += sgl.assistant_begin()
    if think_off:
        s += THINK_OFF
    s += sgl.gen("completion", max_tokens=max_tokens, temperature=0)
    s += sgl.assistant_end()


def _is_truncated(meta_info: dict | None) -> bool:
    reason = (meta_info or {}).get("finish_reason")
    return isinstance(reason, dict) and reason.get("type") == "length"


def generate_dataset(
    histories: Sequence[Trajectory],
    backend,
    slots: tuple[Slot, ...] = OPENCLAW_SLOTS,
    *,
    val_fraction: float = 0.1,
    seed: int = 42,
    max_tokens: int = 512,
    think_off: bool = True,
    histories_per_batch: int = 16,
    progress: Callable[[int, int], None] | None = None,
    incremental_fraction: float = 0.25,
) -> Iterator[Example]:
    """Ask the target to write every slot of every history.

    Parameters
    ----------
    histories : sequence of Trajectory
        The conversations; each yields one example per slot.
    backend : sglang BaseBackend
        The target (``RuntimeEndpoint`` in production).
    slots : tuple of Slot
        The summary schema (default: the six OpenClaw slots).
    val_fraction : float
        Share of trajectory groups that go to validation, in [0, 1).
    seed : int
        Seed of the split.
    max_tokens : int
        Generation cap per slot (target tokens).  A completion that hits it
        loses its cut-off last line.
    think_off : bool
        Open the assistant turn with an empty ``<think>`` block (Qwen3).
    histories_per_batch : int
        Histories per ``run_batch`` call; all their slot requests are in
        flight together.
    progress : callable, optional
        Called as ``progress(histories_done, histories_total)`` after each batch.
    incremental_fraction : float
        Share of histories, in [0, 1], that also give one incremental
        example per slot (histories too short to cut give none).

    Yields
    ------
    Example
        In history order, slots in schema order; a batch's incremental
        examples after its plain ones.
    """
    slots = validate_schema(slots)
    if not 0.0 <= incremental_fraction <= 1.0:
        raise ConfigError(f"incremental_fraction must be in [0, 1], got {incremental_fraction}")
    val = validation_keys((h.split_key for h in histories), val_fraction, seed)
    chosen = pick_incremental((h.id for h in histories), incremental_fraction, seed + 1)
    run = lambda jobs: _run_slots(jobs, backend, think_off, max_tokens)
    done = 0
    for batch in _chunks(histories, max(1, histories_per_batch)):
        jobs = [(h, slot, prompt, False) for h in batch for slot, prompt in _slot_prompts(h, slots)]
        jobs += _incremental_jobs([h for h in batch if h.id in chosen], slots, run)
        for (h, slot, prompt, incremental), state in zip(jobs, run(jobs)):
            record, truncated = _record(h, slot, prompt, state, incremental)
            split = "validation" if h.split_key in val else "train"
            yield Example(split, record, truncated)
        done += len(batch)
        if progress:
            progress(done, len(histories))


def _slot_prompts(h: Trajectory, slots: tuple[Slot, ...], messages: list[dict] | None = None,
                  previous_summary: str | None = None) -> list[tuple[Slot, list[dict]]]:
    """Figure 5 prompt of every slot; the history (default ``h.messages``) is rendered once."""
    text = render_history(parse_messages(h.messages if messages is None else messages))
    return [(slot, drafter_messages(text, slots, slot, previous_summary)) for slot in slots]


def _run_slots(jobs: list[tuple], backend, think_off: bool, max_tokens: int) -> list:
    """One ``target_slot`` program per job (its prompt third), all in flight together."""
    args = [{"system": j[2][0]["content"], "user": j[2][1]["content"], "think_off": think_off,
             "max_tokens": max_tokens} for j in jobs]
    if not args:
        return []
    states = target_slot.run_batch(args, backend=backend, num_threads=len(args), progress_bar=False)
    retire(states)  # ended and held until their workers exit (programs/states.py); still readable
    return states


def _incremental_jobs(histories: list[Trajectory], slots: tuple[Slot, ...], run) -> list[tuple]:
    """The later parts' slot jobs, each with the target's summary of the earlier part."""
    cuts = [(h, split_history(h.messages, c)) for h in histories if (c := cut_point(h.messages)) is not None]
    first = [(h, slot, prompt, False) for h, (earlier, _) in cuts for slot, prompt in _slot_prompts(h, slots, earlier)]
    bodies: dict[str, dict[str, list[str]]] = {}
    for (h, slot, prompt, _), state in zip(first, run(first)):
        record, _ = _record(h, slot, prompt, state, False)
        bodies.setdefault(h.id, {})[slot.name] = record["completion"][0]["content"].split("\n")
    return [(h, slot, prompt, True) for h, (_, later) in cuts
            for slot, prompt in _slot_prompts(h, slots, later, assemble(slots, bodies[h.id]))]


def _record(h: Trajectory, slot: Slot, prompt: list[dict], state, incremental: bool) -> tuple[dict, bool]:
    """The JSONL record of one finished program, and whether it hit max_tokens."""
    if state.error() is not None:
        raise BackendError(f"target failed on {h.id} / {slot.name}: {state.error()}") from state.error()
    truncated = _is_truncated(state.get_meta_info("completion"))
    completion = clean_completion(state["completion"], truncated)
    record = {
        "trajectory_id": h.id,
        "slot": slot.name,
        "incremental": incremental,
        "prompt": prompt,
        "completion": [{"role": "assistant", "content": completion}],
    }
    return record, truncated


# ---------------------------------------------------------------- command line


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sgl_speccompact.train.data",
        description="Generate drafter SFT data: the target model writes every slot of every history.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("histories", nargs="+", help="history files or directories (*.json, *.traj)")
    p.add_argument("--target-url", required=True, help="URL of the target's SGLang server")
    p.add_argument("--out", required=True, help="output directory (train.jsonl, validation.jsonl, manifest.json)")
    p.add_argument("--val-fraction", type=float, default=0.1, help="share of trajectories for validation")
    p.add_argument("--seed", type=int, default=42, help="seed of the train/validation split")
    p.add_argument("--chat-template", default=None,
                   help="SGLang frontend chat template of the target (default: decided from the served model: "
                        "the model_type it reports, else its tokenizer; an error when undecidable)")
    think = p.add_mutually_exclusive_group()
    think.add_argument("--no-think", dest="think_off", action="store_const", const=True,
                       help="open the answer with an empty <think> block (default for Qwen3 models)")
    think.add_argument("--think", dest="think_off", action="store_const", const=False,
                       help="let the target's template decide (default for other models)")
    p.add_argument("--max-tokens", type=int, default=512, help="generation cap per slot (target tokens)")
    p.add_argument("--histories-per-batch", type=int, default=16, help="histories whose slots run concurrently")
    p.add_argument("--incremental-fraction", type=float, default=0.25,
                   help="share of histories that also give incremental examples (previous summary in the prompt)")
    p.add_argument("--api-key", default=None, help="API key of the SGLang server, if it needs one")
    return p


def target_chat_format(backend, name: str | None, think_off: bool | None) -> ChatFormat:
    """The target's chat format, decided as the compactor decides it (:mod:`~sgl_speccompact.backends.chat_format`).

    From ``name`` if given, else the ``model_type`` in the backend's
    ``model_info`` (what the server reports), else its tokenizer
    (``single_token``); never from the model path.  Sets the backend's
    template.  Raises ``ChatTemplateError`` when it cannot be decided.
    """
    from sglang.lang.chat_template import get_chat_template

    info = getattr(backend, "model_info", None) or {"model_path": str(backend.get_model_name())}
    single = getattr(backend, "single_token", None) or (lambda text: False)
    fmt = decide(info, single, name=name, disable_thinking=think_off, flag="--chat-template")
    backend.chat_template = get_chat_template(fmt.template)
    return fmt


def _print_progress(done: int, total: int, start: float) -> None:
    print(f"[data] {done}/{total} histories ({time.monotonic() - start:.1f} s)", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None, backend=None) -> DataSummary:
    """Command-line entry point; ``backend`` replaces the server (tests)."""
    args = _parser().parse_args(argv)
    if backend is None:
        from ..backends.endpoint import SpecCompactEndpoint

        backend = SpecCompactEndpoint(args.target_url, api_key=args.api_key, chat_template=args.chat_template,
                                      disable_thinking=args.think_off)
    model = str(backend.get_model_name())
    fmt = target_chat_format(backend, args.chat_template, args.think_off)
    think_off = fmt.disable_thinking
    args.chat_template = fmt.template
    histories, skipped = load_trajectories(args.histories)
    if not histories:
        raise ConfigError("no histories found in " + ", ".join(args.histories))
    print(f"[data] {len(histories)} histories x {len(OPENCLAW_SLOTS)} slots from {model}", file=sys.stderr)
    start = time.monotonic()
    examples = generate_dataset(
        histories, backend, val_fraction=args.val_fraction, seed=args.seed, max_tokens=args.max_tokens,
        think_off=think_off, histories_per_batch=args.histories_per_batch,
        progress=lambda d, t: _print_progress(d, t, start), incremental_fraction=args.incremental_fraction,
    )
    summary = write_dataset(examples, args.out)
    summary.seconds, summary.skipped = time.monotonic() - start, skipped
    _write_manifest(args, summary, histories, model, think_off)
    _print_summary(summary, args.out)
    return summary


def _write_manifest(args, summary: DataSummary, histories: list[Trajectory], model: str, think_off: bool) -> None:
    manifest = {
        "target_model": model,
        "chat_template": args.chat_template,
        "think_off": think_off,
        "max_tokens": args.max_tokens,
        "seed": args.seed,
        "val_fraction": args.val_fraction,
        "incremental_fraction": args.incremental_fraction,
        "slots": [s.name for s in OPENCLAW_SLOTS],
        "summary": asdict(summary),
        "sources": {h.id: h.source for h in histories},
    }
    Path(args.out, "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")


def _print_summary(s: DataSummary, out: str) -> None:
    print(
        f"[data] wrote {s.examples['train']} train / {s.examples['validation']} validation examples "
        f"({s.trajectories['train']} / {s.trajectories['validation']} trajectories; {s.incremental} "
        f"incremental) to {out} "
        f"in {s.seconds:.1f} s; {s.truncated} hit max-tokens, {s.empty} empty, "
        f"{len(s.skipped)} files skipped",
    )
    for line in s.skipped:
        print(f"[data] skipped {line}", file=sys.stderr)


if __name__ == "__main__":
    main()
