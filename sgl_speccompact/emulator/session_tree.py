"""sglang 0.5.23's sessions in the emulator: ``/open_session``, ``/close_session`` and ``session_params``.

A session is a tree of the requests sent in it.  A ``/generate`` body with
``session_params`` continues one of them: the server rebuilds the prompt
from that request's tokens and the body's new ones, so a client sends only
what is new.  Mirrored from the installed sglang:

* ``POST|GET /open_session`` (``http_server.py``, ``tokenizer_control_mixin.py``,
  ``SessionController.open``): the body is an ``OpenSessionReqInput``
  (``capacity_of_str_len`` required, ``session_id``, ``streaming``,
  ``timeout``); the answer is the session id as a JSON string.  A missing id
  gets a fresh one; an id already open is refused (HTTP 400, ``Failed to open
  the session. Check if a session with the same id is still open.``); a
  ``streaming`` session is refused as on a server started without
  ``--enable-streaming-session`` (the default).
* ``POST|GET /close_session`` (``SessionController.close``): an empty 200;
  an unknown id is ignored.  Requests of the session still running go on.
* ``session_params`` on ``/generate`` (``Session.create_req``, the scheduler's
  ``_handle_generate_request``; non-streaming sessions): with ``rid`` the
  request continues that request's node, which must exist (``Invalid request
  session id``) and be finished (``Session request is appending to a request
  that hasn't finished.``); its prompt is the node's prompt, then the node's
  output (``output_ids[:max_new_tokens]``, left out with
  ``drop_previous_output``), cut to its first ``offset`` tokens when
  ``offset`` is set, then the request's own tokens, from which a leading
  ``bos_token_id`` is stripped.  Without ``rid`` the request starts a new
  root with its own tokens.  ``replace`` with ``rid`` aborts the node if it
  still runs and drops its children first.  An unknown session is ``Invalid
  request: session id <id> does not exist``; a prompt still empty after
  restoring is ``A session request must contain input tokens after restoring
  history.``  Each is the scheduler's abort, answered HTTP 400.  Every
  request becomes a node keyed by its rid; prompt lengths, ``max_new_tokens``
  and ``logprob_start_len`` are then resolved on the whole rebuilt prompt
  (the tokenizer manager checked only the new tokens against the context),
  and a rebuilt prompt of ``context - 6`` tokens or more is refused as the
  scheduler's ``validate_input_length`` refuses it.
* ``timeout`` (seconds): a session idle that long is closed
  (``SessionController.maybe_reap``), checked here at every session call
  against an injectable clock.

Differences: a request the emulator refuses at admission leaves no node
(sglang registers it, aborted); ``replace`` without ``rid`` clears every
node (sglang 0.5.23 deletes from the dict it iterates there, which raises
once the session has a node: not reproduced).
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from .jobs import RUNNING_ABORT, Job

SCHEDULER_INPUT_MARGIN = 6  # max_req_input_len = min(context - 1, kv - 1) - 5: refused at len >= context - 6
OPEN_FAILED = "Failed to open the session. Check if a session with the same id is still open."
STREAMING_OFF = "Streaming sessions are disabled. Please relaunch with --enable-streaming-session."


class UnknownSessionParam(Exception):
    """``session_params`` with a key ``SessionParams`` lacks: the server's unhandled ``TypeError`` (HTTP 500)."""


@dataclass
class Node:
    """One request of a session (``SessionReqNode``)."""

    job: Job  # the request: its prompt ids, output ids and finish state
    parent: "Node | None"  # the node it continued (None: a root)
    children: list["Node"] = field(default_factory=list)  # requests that continued it


@dataclass
class Session:
    """One open session (``Session``, non-streaming)."""

    id: str  # the session id
    capacity_of_str_len: int  # as opened (sglang keeps it and reads it nowhere)
    timeout: float | None  # idle seconds before the session is closed (None: never)
    last_active: float  # clock time of the last open or request
    nodes: dict[str, Node] = field(default_factory=dict)  # rid -> node


@dataclass(frozen=True)
class Restored:
    """A session request's rebuilt prompt, and how to register it once admitted."""

    input_ids: list[int]  # the whole prompt the request runs on
    session: Session  # the session it belongs to
    parent: Node | None  # the node it continues (None: a new root)
    rid: str  # its rid: its node's key

    def bind(self, job: Job) -> None:
        """Register ``job`` as this request's node."""
        node = Node(job, self.parent)
        if self.parent is not None:
            self.parent.children.append(node)
        self.session.nodes[self.rid] = node


def _clear(node: Node, nodes: dict[str, Node]) -> None:
    """``SessionReqNode.clear``: drop the node and its subtree, aborting what still runs."""
    for child in node.children:
        _clear(child, nodes)
    node.children = []
    _abort(node)
    nodes.pop(node.job.rid, None)


def _abort(node: Node) -> None:
    if node.job.finished_reason is None:
        node.job.to_finish = dict(RUNNING_ABORT)


class Sessions:
    """The emulated server's open sessions (``SessionController``).

    Parameters
    ----------
    bos_token_id
        The tokenizer's ``bos_token_id`` (None: nothing is stripped).
    context_length
        The served context window (tokens): a rebuilt prompt is refused at
        ``context_length - 6`` tokens.
    clock
        Monotonic seconds, for the idle timeout (tests pass a fake one).
    """

    def __init__(self, bos_token_id: int | None, context_length: int,
                 clock: Callable[[], float] = time.monotonic):
        self.bos_token_id = bos_token_id
        self.max_input = context_length - SCHEDULER_INPUT_MARGIN
        self.clock = clock
        self._open: dict[str, Session] = {}
        self._lock = threading.Lock()  # HTTP handlers and the scheduler thread read the nodes

    def open(self, capacity_of_str_len: int, session_id: str | None = None, streaming: bool | None = None,
             timeout: float | None = None) -> str:
        """Open a session; its id.  Raises ``ValueError`` with the server's message when refused."""
        if streaming:
            raise ValueError(STREAMING_OFF)
        with self._lock:
            self._reap()
            sid = session_id if session_id is not None else uuid.uuid4().hex
            if sid in self._open:
                raise ValueError(OPEN_FAILED)
            self._open[sid] = Session(sid, capacity_of_str_len, timeout, self.clock())
            return sid

    def close(self, session_id: str) -> None:
        """Close a session (an unknown id is ignored, as the server logs and ignores it)."""
        with self._lock:
            self._reap()
            self._open.pop(session_id, None)

    def restore(self, params: dict, rid: str, input_ids: list[int]) -> Restored:
        """``Session.create_req``: the prompt a request with ``session_params`` runs on.

        Raises
        ------
        UnknownSessionParam
            ``params`` has a key ``SessionParams`` does not know (the server's 500).
        ValueError
            The scheduler's abort message (HTTP 400).
        """
        from sglang.srt.managers.io_struct import SessionParams

        try:
            p = SessionParams(**params)
        except TypeError as exc:
            raise UnknownSessionParam(str(exc)) from None
        with self._lock:
            self._reap()
            session = self._open.get(p.id)
            if session is None:
                raise ValueError(f"Invalid request: session id {p.id} does not exist")
            parent = self._parent(session, p)
            ids = list(input_ids)
            if parent is not None:
                if ids and self.bos_token_id is not None and ids[0] == self.bos_token_id:
                    ids = ids[1:]  # _strip_bos_token
                ids = _concat(parent.job, ids, p)
            if not ids:
                raise ValueError("A session request must contain input tokens after restoring history.")
            if len(ids) >= self.max_input:
                raise ValueError(f"Input length ({len(ids)} tokens) exceeds the maximum allowed length "
                                 f"({self.max_input} tokens). Use a shorter input or enable --allow-auto-truncate.")
            session.last_active = self.clock()
            return Restored(ids, session, parent, rid)

    def bind(self, restored: Restored, job: Job) -> None:
        """Register an admitted request's node."""
        with self._lock:
            restored.bind(job)

    def stats(self) -> dict:
        """Open sessions and the nodes they hold."""
        with self._lock:
            self._reap()
            return {"open": len(self._open), "nodes": sum(len(s.nodes) for s in self._open.values())}

    def open_ids(self) -> list[str]:
        """The ids of the sessions open now."""
        with self._lock:
            self._reap()
            return list(self._open)

    def _parent(self, session: Session, p) -> Node | None:
        if p.replace:
            if p.rid is None:
                for node in list(session.nodes.values()):
                    _clear(node, session.nodes)
                return None
            node = session.nodes.get(p.rid)
            if node is None:
                raise ValueError("Invalid request session id")
            _abort(node)
            for child in node.children:
                _clear(child, session.nodes)
            node.children = []
            return node
        if p.rid is None:
            return None
        node = session.nodes.get(p.rid)
        if node is None:
            raise ValueError("Invalid request session id")
        if node.job.finished_reason is None:
            raise ValueError("Session request is appending to a request that hasn't finished.")
        return node

    def _reap(self) -> None:
        """``maybe_reap``: close the sessions idle past their timeout (lock held)."""
        now = self.clock()
        for sid in [s.id for s in self._open.values() if s.timeout is not None and now - s.last_active > s.timeout]:
            del self._open[sid]


def _concat(last: Job, new_ids: list[int], p) -> list[int]:
    """``Session._concat_token_arrays``: the parent's prompt (and output), cut at ``offset``, then ``new_ids``."""
    mnt = last.sampling.max_new_tokens
    out_tail = last.output_ids[:mnt] if mnt is not None else list(last.output_ids)
    ids = list(last.input_ids) if p.drop_previous_output else list(last.input_ids) + out_tail
    if p.offset:
        return ids[: p.offset] + new_ids
    return ids + new_ids
