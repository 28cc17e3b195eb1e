"""One block's session on one SGLang server: the shared prefix goes upstream once.

Without a session every request of a compaction carries its whole prompt:
the history, the slot contracts, then its own few lines.  sglang 0.5.23
keeps, per session (``/open_session``), a tree of the requests sent in it.
A ``/generate`` body with ``session_params = {"id", "rid", "offset",
"drop_previous_output"}`` continues the request ``rid``: the server rebuilds
the prompt as that request's prompt cut to its first ``offset`` tokens,
followed by the body's own ``input_ids`` (``Session.create_req``).  So the
history goes upstream once, in the session's first request, and every fork,
judgement, carried batch and repair sends only its suffix.

Which node a request continues is decided here, from the prompt text alone,
so the programs need no change.  :class:`ServerSession` keeps the requests
that answered as a tree keyed by text: each node holds its prompt's text
after its parent's (its edge), its length in characters and in tokens (the
server's ``prompt_tokens``), and its last segment.  A new prompt continues
the deepest node whose text is a proper prefix of it (every prompt of a
branch starts with the one before it, every branch with the shared prefix).
The server must hold exactly the tokens of the prompt's first characters, so
the continuation point is a restart point of tokenization
(:func:`~sgl_speccompact.backends.token_ids.restarts_at`): the node's end
when it is one, else the start of the node's last segment, whose tokens are
subtracted (``offset``).  The suffix's ids come from the token-id cache, and
``drop_previous_output`` keeps the node's generated tokens out: the program
appends its own text of them.

The radix cache is untouched: a session request is an ordinary request once
its prompt is rebuilt, matched against the radix tree like any other, with
``logprob_start_len`` counted on the whole prompt; prefill-only judgements
(``max_new_tokens`` 0, ``token_ids_logprob``) run as before.

What keeps it exact, checked rather than assumed:

* the server answers ``prompt_tokens`` of the rebuilt prompt; one that
  differs from ``offset + len(suffix)`` means the server changed the prompt
  (sglang strips a leading ``bos_token_id`` from a continuation, and a
  chat template's ``<|im_start|>`` is the BOS of some tokenizers): the answer
  is dropped and the request sent whole, and suffixes starting with that id
  go whole from then on;
* a session the server no longer knows (restarted, timed out), or a
  continuation it refuses, sends the rest of the block whole;
* a prompt whose rebuilt length, with its ``max_new_tokens``, exceeds the
  context goes whole, so the refusal is the tokenizer manager's usual one.

Cost on the server: each request of a session is a node holding its prompt's
token ids (a few arrays of 8-byte ids) until the session closes, at the end
of the block: requests x prompt tokens x about 24 bytes of host memory.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from dataclasses import dataclass, field
from typing import Callable

from .token_ids import TokenIdCache, restarts_at, segments

SESSION_IDLE_S = 900.0  # the server closes a session idle this long (one a client left behind; seconds)
CAPACITY_OF_STR_LEN = 0  # OpenSessionReqInput's required field (sglang 0.5.23 keeps it and reads it nowhere)
# the server's refusals of a continuation (session_controller.py, scheduler.py): the request goes again whole
REFUSALS = ("Invalid request: session id", "Invalid request session id", "Session request is appending",
            "close was requested for session")


@dataclass(eq=False)
class Node:
    """A request of the session that answered: what a later prompt may continue."""

    rid: str | None  # its rid, named by a continuation (None: the tree's root, no request)
    edge: str  # its prompt after its parent's prompt (characters)
    end: int  # characters of its prompt
    tokens: int  # tokens of its prompt, the server's count
    tail: str  # its prompt's last segment (after its last restart point)
    children: list["Node"] = field(default_factory=list)  # requests that continued it


@dataclass(frozen=True)
class Continuation:
    """How one request (or a batch sharing it) continues the session."""

    node: Node  # the node named (the root: the request starts a tree and goes whole)
    at: int  # characters of each prompt the server already holds (a restart point; 0 for the root)
    offset: int  # tokens of those characters


class ServerSession:
    """The session one block's requests share on one server, and the tree of its requests.

    Thread-safe: the lock guards the tree only; no request is sent under it.
    """

    def __init__(self, session_id: str | None = None):
        self.id = session_id or uuid.uuid4().hex  # the session id on the server
        self.root = Node(None, "", 0, 0, "")
        self.broken = False  # the server refused a continuation: the block's other requests go whole
        self._rids = itertools.count()
        self._rid_prefix = f"speccompact-{self.id[:16]}"
        self._lock = threading.Lock()

    def rids(self, n: int) -> list[str]:
        """``n`` fresh rids; ``<prefix>.<k>.``, so none is the start of another (aborts match rid prefixes)."""
        with self._lock:
            return [f"{self._rid_prefix}.{next(self._rids)}." for _ in range(n)]

    def continuation(self, texts: list[str], tail_tokens: Callable[[str], int]) -> Continuation:
        """Where every prompt in ``texts`` continues the tree (the root when none does).

        ``tail_tokens`` counts a node's last segment, needed when the
        continuation point is the start of that segment.
        """
        with self._lock:
            path = _deepest(self.root, texts[0])
            for text in texts[1:]:  # a batch continues the deepest node every prompt starts with
                path = path[:_common(path, text)]
        for node in reversed(path[1:]):
            if all(restarts_at(t, node.end) for t in texts):
                return Continuation(node, node.end, node.tokens)
            at = node.end - len(node.tail)
            if at > 0 and all(restarts_at(t, at) for t in texts):
                return Continuation(node, at, node.tokens - tail_tokens(node.tail))
        return Continuation(self.root, 0, 0)

    def add(self, under: Continuation, texts: list[str], rids: list[str], prompt_tokens: list[int]) -> None:
        """Record the answered requests ``rids`` (prompts ``texts``) as children of ``under.node``."""
        with self._lock:
            for text, rid, tokens in zip(texts, rids, prompt_tokens):
                tail = segments(text[under.at:])[-1]
                under.node.children.append(Node(rid, text[under.node.end:], len(text), tokens, tail))


def _deepest(root: Node, text: str) -> list[Node]:
    """The path from ``root`` to the deepest node whose prompt is a proper prefix of ``text``."""
    best = [root]
    stack = [[root]]
    while stack:
        path = stack.pop()
        node = path[-1]
        if node.end > best[-1].end:
            best = path
        for child in node.children:
            if child.end < len(text) and text.startswith(child.edge, node.end):
                stack.append(path + [child])
    return best


def _common(path: list[Node], text: str) -> int:
    """How many nodes of ``path`` (from the root) are prefixes of ``text``."""
    n = 1
    for parent, node in zip(path, path[1:]):
        if not (node.end < len(text) and text.startswith(node.edge, parent.end)):
            break
        n += 1
    return n


def suffix_ids(cache: TokenIdCache, texts: list[str], at: int, tokenize) -> list[list[int]]:
    """The ids each prompt adds after its first ``at`` characters (no ids added in front)."""
    return [cache.ids(t[at:], tokenize, prefix=False) for t in texts]
