"""Agent trajectory files in, OpenAI chat messages out.

Reads the formats real agents write and returns a new list of OpenAI chat
messages that :func:`sgl_speccompact.history.messages.parse_messages` accepts:

- ``openai``: a JSON list of chat messages (OpenHands fixtures, API logs);
- ``mini_swe_agent``: ``*.traj.json``, a dict with ``messages`` (its older
  list form is plain chat and detects as ``openai``); actions live in
  assistant text, observations are ``user`` messages;
- ``swe_agent``: ``*.traj`` with a ``history`` key; function-calling runs put
  ``tool_calls`` on assistant turns and a ``tool_call_ids`` list on results,
  and sometimes reuse one call id for several calls;
- ``tau2``: tau2-bench simulation results, several trials per file, with flat
  tool calls ``{id, name, arguments (object)}`` and results keyed by ``id``.

Each conversation is converted by
:func:`sgl_speccompact.history.convert.convert_messages` (its docstring
gives the conversion rules).  The input is only read: every output dict
and list is new.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..errors import HistoryFormatError
from .convert import convert_messages

FORMATS = ("openai", "mini_swe_agent", "swe_agent", "tau2")
Source = str | os.PathLike | Mapping | list


@dataclass(frozen=True)
class TrialInfo:
    """One conversation a file holds (tau2 files hold one per trial)."""

    index: int  # position to pass as ``trial=``
    id: str  # the framework's id of the run ("" when it has none)
    task_id: str  # task the run solved ("" when unknown)
    trial: int | None  # the framework's own trial number, if any
    messages: int  # number of raw messages in the run


# ---------------------------------------------------------------- reading


def _read_json(path: Path) -> Any:
    if path.exists() and not path.is_file():  # a FIFO or device would block or never end
        raise HistoryFormatError("is not a regular file", field=str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise HistoryFormatError(f"cannot read file: {exc.strerror or exc}", field=str(path)) from exc
    except UnicodeDecodeError as exc:
        raise HistoryFormatError(f"is not UTF-8 text (byte {exc.start}): a binary file?", field=str(path)) from None
    except ValueError as exc:  # a str that cannot be a path (a NUL byte): not a file name
        raise HistoryFormatError(f"is not a usable file path: {exc}", field="source") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise HistoryFormatError("nests too deeply to be a history", field=str(path)) from None
    except json.JSONDecodeError as exc:
        raise HistoryFormatError(f"not JSON ({exc.msg} at line {exc.lineno})", field=str(path)) from exc
    except ValueError as exc:  # an integer longer than Python converts (4,300 digits)
        raise HistoryFormatError(f"has a value JSON parsing refused: {exc}", field=str(path)) from None


def _as_object(source: Source) -> tuple[Any, str]:
    """The parsed JSON of ``source`` and a label for error messages."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        return _read_json(path), str(path)
    if isinstance(source, (Mapping, list, tuple)):
        return source, "history"
    raise HistoryFormatError(
        f"expected a path, a JSON object or a list of messages, not {type(source).__name__}",
        field="source",
    )


# -------------------------------------------------------------- detection


def _looks_like_messages(items: Any) -> bool:
    return (
        isinstance(items, (list, tuple))
        and bool(items)
        and all(isinstance(m, Mapping) and "role" in m for m in items)
    )


def _is_tau2_task_list(items: Any) -> bool:
    return (
        isinstance(items, (list, tuple))
        and bool(items)
        and all(isinstance(t, Mapping) for t in items)
        and any("user_scenario" in t or "evaluation_criteria" in t for t in items)
    )


def detect_format(obj: Any, *, label: str = "history") -> str:
    """Name the trajectory format of a parsed JSON value.

    Parameters
    ----------
    obj : Any
        Parsed JSON (a list or a dict).
    label : str
        Used as the error's field (a file name, usually).

    Returns
    -------
    str
        One of :data:`FORMATS`.

    Raises
    ------
    HistoryFormatError
        For any other shape, saying what was found and what is supported.

    >>> detect_format([{"role": "user", "content": "hi"}])
    'openai'
    >>> detect_format({"history": [{"role": "user", "content": "hi"}]})
    'swe_agent'
    """
    if isinstance(obj, (list, tuple)):
        if _looks_like_messages(obj):
            return "openai"  # also mini-swe-agent's list form: the same shape
        if _is_tau2_task_list(obj):
            raise HistoryFormatError(
                "this is a tau2-bench task list (tasks.json), not a trajectory; "
                "pass a tau2 simulation results file (it has a 'simulations' key)",
                field=label,
            )
        if not obj:
            raise HistoryFormatError("is an empty list: no messages", field=label)
        raise HistoryFormatError(
            "is a list, but not of chat messages (objects with a 'role')", field=label
        )
    if isinstance(obj, Mapping):
        if isinstance(obj.get("simulations"), list):
            return "tau2"
        if isinstance(obj.get("history"), list):
            return "swe_agent"
        if isinstance(obj.get("messages"), list):
            return "mini_swe_agent"
        keys = sorted(map(str, obj))[:12]
        raise HistoryFormatError(
            f"unknown trajectory format (top-level keys {keys}); supported: a list of chat "
            "messages, {'messages': [...]}, SWE-agent {'history': [...]}, "
            "tau2-bench {'simulations': [...]}",
            field=label,
        )
    raise HistoryFormatError(
        f"unknown trajectory format: a JSON {type(obj).__name__}, expected a list or an object",
        field=label,
    )


# ------------------------------------------------------------- trials


def _simulations(obj: Mapping, label: str) -> list:
    sims = obj["simulations"]
    if not sims:
        raise HistoryFormatError("has no simulations", field=f"{label}.simulations")
    return sims


def list_trials(source: Source) -> list[TrialInfo]:
    """The conversations in ``source``: one per tau2 trial, else exactly one.

    Parameters
    ----------
    source : path, dict or list
        As for :func:`load_history`.

    Returns
    -------
    list of TrialInfo
        ``index`` is what :func:`load_history` takes as ``trial=``.
    """
    obj, label = _as_object(source)
    fmt = detect_format(obj, label=label)
    if fmt != "tau2":
        msgs, _ = _raw_messages(obj, fmt, 0, label)
        return [TrialInfo(0, "", "", None, len(msgs))]
    out = []
    for i, sim in enumerate(_simulations(obj, label)):
        sim = sim if isinstance(sim, Mapping) else {}
        trial = sim.get("trial")
        out.append(TrialInfo(
            index=i,
            id=str(sim.get("id", "")),
            task_id=str(sim.get("task_id", "")),
            trial=trial if isinstance(trial, int) else None,
            messages=len(sim.get("messages") or []),
        ))
    return out


def _raw_messages(obj: Any, fmt: str, trial: int, label: str) -> tuple[list, str]:
    """The raw message list of one conversation and its field name for errors."""
    if fmt == "tau2":
        sims = _simulations(obj, label)
        if not isinstance(trial, int) or not 0 <= trial < len(sims):
            raise HistoryFormatError(
                f"trial {trial!r} out of range: the file has {len(sims)} trials (0..{len(sims) - 1})",
                field=f"{label}.simulations",
            )
        sim = sims[trial]
        if not isinstance(sim, Mapping) or not isinstance(sim.get("messages"), list):
            raise HistoryFormatError("a simulation needs a 'messages' list", field=f"{label}.simulations[{trial}]")
        return sim["messages"], f"{label}.simulations[{trial}].messages"
    if trial != 0:
        raise HistoryFormatError(f"a {fmt} file holds one conversation; trial must be 0", field="trial")
    if fmt == "swe_agent":
        return obj["history"], f"{label}.history"
    if isinstance(obj, Mapping):
        return obj["messages"], f"{label}.messages"
    return list(obj), label


def load_history(source: Source, *, trial: int = 0, format: str | None = None) -> list[dict]:
    """Read a trajectory and return OpenAI chat messages.

    Parameters
    ----------
    source : str, os.PathLike, dict or list
        A file path, its parsed JSON, or a list of messages.
    trial : int
        Which conversation of a multi-trial file (tau2) to return, by position;
        see :func:`list_trials`.  Must be 0 for single-conversation formats.
    format : str, optional
        Skip detection and read as this format (one of :data:`FORMATS`).

    Returns
    -------
    list of dict
        New messages that pass :func:`sgl_speccompact.history.messages.parse_messages`.

    Raises
    ------
    HistoryFormatError
        Unreadable file, unknown shape, bad trial index or malformed message,
        naming the file or field.

    >>> load_history({"history": [{"role": "user", "content": "hi", "agent": "main"}]})
    [{'role': 'user', 'content': 'hi'}]
    """
    obj, label = _as_object(source)
    fmt = format or detect_format(obj, label=label)
    if fmt not in FORMATS:
        raise HistoryFormatError(f"unknown format {fmt!r}; known: {list(FORMATS)}", field="format")
    try:
        raw, where = _raw_messages(obj, fmt, trial, label)
    except (KeyError, TypeError) as exc:  # a forced ``format`` that does not fit
        raise HistoryFormatError(f"is not a {fmt} trajectory", field=label) from exc
    return convert_messages(raw, label=where)


def trajectory_id(path_or_obj: Source, *, trial: int | None = None) -> str:
    """A stable id for a trajectory: a hash of its JSON content.

    A file and its parsed JSON get the same id, wherever the file lives.

    Parameters
    ----------
    path_or_obj : path, dict or list
        The trajectory.
    trial : int, optional
        Appended as ``-t<trial>`` to tell the trials of one file apart.

    Returns
    -------
    str
        ``traj-`` followed by 16 hex digits of a SHA-256.

    >>> trajectory_id([{"role": "user", "content": "hi"}])
    'traj-4e79873118cd9be7'
    """
    obj, _ = _as_object(path_or_obj)
    canon = json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    digest = hashlib.sha256(canon.encode("utf-8")).hexdigest()[:16]
    return f"traj-{digest}" + (f"-t{trial}" if trial is not None else "")
