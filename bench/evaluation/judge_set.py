"""A labelled judge set: summary lines that a real history supports or contradicts.

Each :class:`JudgeCase` is one line a summarizer could write about one of the
shared trajectories (``shared/data/trajectories``, beside the clone), cut to
its first ``upto`` messages.  Supported lines state what really happened
(files, commands, errors, outcomes, the user's requests, the agent's
decisions); contradicted lines are plausible but false against that history
(a wrong file, a reversed outcome, a step that never happened), the mistakes a
weak summarizer makes.  Most come in pairs, the same fact true and falsified,
with ids ``<trajectory>-<nn>s`` and ``<trajectory>-<nn>c``.

The cases live in ``judge_set.jsonl`` beside this module, one JSON object a
line, written by hand after reading the histories.  ``evidence`` is an exact
substring of the cut history (a message's text or a tool call's arguments)
that decides the label, so each label can be checked against the data.

The cuts keep every history within 270-3,500 tokens of SmolLM2's tokenizer
(rendered by :func:`sgl_speccompact.history.messages.render_history`), so a
135M model on a CPU reads each one whole.

May import: the product.  Nothing in the product imports it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

from sgl_speccompact.errors import ConfigError, HistoryFormatError
from sgl_speccompact.history.formats import load_history
from sgl_speccompact.schema import OPENCLAW_SLOTS

SET_PATH = Path(__file__).with_name("judge_set.jsonl")  # the committed cases
SLOT_NAMES = tuple(s.name for s in OPENCLAW_SLOTS)  # the slot a case's line may belong to


@dataclass(frozen=True)
class JudgeCase:
    """One summary line and whether the history it names supports it."""

    id: str  # stable name, also the question id sent to a judge ("gh-06c": trajectory, pair, s/c)
    file: str  # trajectory file name inside shared/data/trajectories
    upto: int  # the history is the trajectory's first ``upto`` messages
    slot: str  # summary slot the line belongs to (one of SLOT_NAMES)
    line: str  # the line as a summary slot holds it ("- ...", "- [x] ...", "1. ...")
    supported: bool  # True: the history supports the line; False: the history contradicts it
    evidence: str  # exact substring of the cut history that supports the line or that it contradicts
    why: str  # how the evidence decides the label, in a few words
    trial: int = 0  # which conversation of a multi-trial file (tau2 results hold ten)


def _case(obj: object, where: str) -> JudgeCase:
    """A :class:`JudgeCase` from one parsed line, or a ConfigError naming the line."""
    names = {f.name for f in fields(JudgeCase)}
    if not isinstance(obj, dict):
        raise ConfigError("is not a JSON object", field=where)
    if set(obj) - names or {"id", "file", "upto", "slot", "line", "supported", "evidence", "why"} - set(obj):
        raise ConfigError(f"keys {sorted(obj)} are not those of a JudgeCase ({sorted(names)})", field=where)
    case = JudgeCase(**obj)
    if case.slot not in SLOT_NAMES:
        raise ConfigError(f"slot {case.slot!r} is not one of {list(SLOT_NAMES)}", field=where)
    if not isinstance(case.supported, bool) or not isinstance(case.upto, int) or case.upto < 1:
        raise ConfigError("supported must be a bool and upto a positive int", field=where)
    if not all(isinstance(getattr(case, k), str) and getattr(case, k).strip()
               for k in ("id", "file", "line", "evidence", "why")):
        raise ConfigError("id, file, line, evidence and why must be non-blank strings", field=where)
    return case


def load_judge_set(path: str | Path = SET_PATH) -> list[JudgeCase]:
    """Read the judge set.

    Parameters
    ----------
    path : str or Path
        A JSONL file of cases; the committed set by default.

    Returns
    -------
    list of JudgeCase
        In file order.

    Raises
    ------
    ConfigError
        A line that is not JSON or not a valid case, naming the file and line.
    """
    path = Path(path)
    cases = []
    for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not text.strip():
            continue
        where = f"{path.name}:{n}"
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"not JSON ({exc.msg})", field=where) from None
        cases.append(_case(obj, where))
    return cases


def trajectory_dir(start: Path | None = None) -> Path | None:
    """The shared trajectories: ``shared/data/trajectories`` in the nearest folder above this file."""
    for parent in (start or Path(__file__).resolve()).parents:
        folder = parent / "shared" / "data" / "trajectories"
        if folder.is_dir():
            return folder
    return None


def history_of(case: JudgeCase, folder: str | Path | None = None) -> list[dict]:
    """The history a case is judged against: its trajectory's first ``case.upto`` messages.

    Parameters
    ----------
    case : JudgeCase
        The case.
    folder : str or Path, optional
        Where the trajectory files are; :func:`trajectory_dir` by default.

    Returns
    -------
    list of dict
        New OpenAI chat messages, read by
        :func:`sgl_speccompact.history.formats.load_history` (each call reads
        the file again, so changing them changes nothing shared).

    Raises
    ------
    HistoryFormatError
        No trajectory folder, an unreadable file, or a trajectory shorter than ``upto``.
    """
    root = Path(folder) if folder is not None else trajectory_dir()
    if root is None:
        raise HistoryFormatError("shared/data/trajectories not found above the clone", field=case.file)
    messages = load_history(root / case.file, trial=case.trial)
    if case.upto > len(messages):
        raise HistoryFormatError(f"has {len(messages)} messages, the case cuts at {case.upto}", field=case.file)
    return messages[:case.upto]


def auc(supported: list[float], contradicted: list[float]) -> float:
    """How well a score ranks supported lines above contradicted ones (ROC AUC, ties count half).

    0.5 is chance, 1.0 a perfect judge, below 0.5 a judge that ranks backwards.

    Parameters
    ----------
    supported, contradicted : list of float
        The judge's score (p(yes), r, ...) of each supported and each contradicted line.

    Returns
    -------
    float
        The share of (supported, contradicted) pairs the score orders correctly.

    >>> auc([0.9, 0.8], [0.1, 0.8])
    0.875
    """
    if not supported or not contradicted:
        raise ValueError("AUC needs at least one score of each label")
    wins = sum((s > c) + 0.5 * (s == c) for s in supported for c in contradicted)
    return wins / (len(supported) * len(contradicted))
