"""Where the evaluation's questions go: an SGLang backend or an OpenAI-compatible URL.

Both clients answer ``ask(questions)`` where each question is
``(system, user)``, and return the replies in order.  Greedy decoding
(:func:`question_sampling`), one turn, no history: the model sees only what
the question holds (a summary, or a conversation and a summary for the
adequacy judge).  Clients are created by the caller and passed in.
"""

from __future__ import annotations

from typing import Any, Sequence

import sglang as sgl

from sgl_speccompact.backends.contract import Backend, ProgramBackend
from sgl_speccompact.backends.endpoint import connect
from sgl_speccompact.errors import BackendError, BackendTimeoutError, BackendUnavailableError
from sgl_speccompact.programs.states import retire
from sgl_speccompact.programs.steps import result_of

ANSWER_TOKENS = 256  # default reply budget (tokens)
MAX_PARALLEL = 16  # questions in flight at once


def question_sampling(max_tokens: int = ANSWER_TOKENS) -> dict:
    """``gen`` arguments of every evaluation question: greedy, up to ``max_tokens``."""
    return {"max_tokens": max_tokens, "temperature": 0.0}


@sgl.function
def ask_program(s, system, user, assistant_prefix, sampling):
    """One question in one chat turn; the reply is ``s["answer"]``."""
    s += sgl.system(system)
    s += sgl.user(user)
    s += sgl.assistant_begin()
    s += assistant_prefix
    s += sgl.gen("answer", **sampling)


class SglangAsker:
    """Questions as :func:`ask_program` runs on an SGLang backend (the target, or a judge server).

    Parameters
    ----------
    backend
        A backend (:class:`~sgl_speccompact.backends.contract.Backend`) or a
        plain sglang backend (``RuntimeEndpoint``), held to the contract by
        :func:`~sgl_speccompact.backends.endpoint.connect`.
    max_tokens
        Reply budget per question.
    """

    def __init__(self, backend: Backend | ProgramBackend, max_tokens: int = ANSWER_TOKENS):
        self.backend, self.max_tokens = connect(backend), max_tokens
        self.name = f"sglang {self.backend.base_url or type(backend).__name__}"

    def ask(self, questions: Sequence[tuple[str, str]]) -> list[str]:
        """Replies to ``(system, user)`` questions, in order; a failed run raises ``BackendError``."""
        if not questions:
            return []
        prefix = self.backend.assistant_prefix
        states = ask_program.run_batch(
            [{"system": sys_, "user": user, "assistant_prefix": prefix,
              "sampling": question_sampling(self.max_tokens)} for sys_, user in questions],
            backend=self.backend, num_threads=min(MAX_PARALLEL, len(questions)))
        try:
            return [result_of(state, "answer")[0] for state in states]
        finally:
            retire(states)


class OpenAIChatAsker:
    """Questions to any OpenAI-compatible ``/v1/chat/completions`` server.

    Parameters
    ----------
    url
        Base URL, e.g. ``http://judge:8000`` (``/v1`` is added when missing).
    model
        The ``model`` field of each request.
    session
        A ``requests.Session`` (headers such as an API key set by the caller).
    timeout, max_tokens
        Per-request timeout (s) and reply budget (tokens).
    """

    def __init__(self, url: str, model: str, session: Any, timeout: float = 300.0,
                 max_tokens: int = ANSWER_TOKENS):
        base = url.rstrip("/")
        self.endpoint = base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")
        self.model, self.session, self.timeout, self.max_tokens = model, session, timeout, max_tokens
        self.name = f"openai-compatible {self.endpoint} model {model}"

    def body(self, system: str, user: str) -> dict:
        """The request body of one question."""
        sampling = question_sampling(self.max_tokens)
        return {"model": self.model, "messages": [{"role": "system", "content": system},
                                                  {"role": "user", "content": user}], **sampling}

    def ask(self, questions: Sequence[tuple[str, str]]) -> list[str]:
        """Replies in order, one request per question, up to :data:`MAX_PARALLEL` at once."""
        from concurrent.futures import ThreadPoolExecutor

        if not questions:
            return []
        with ThreadPoolExecutor(min(MAX_PARALLEL, len(questions))) as pool:
            return list(pool.map(lambda q: self._one(*q), questions))

    def _one(self, system: str, user: str) -> str:
        import requests

        try:
            res = self.session.post(self.endpoint, json=self.body(system, user), timeout=self.timeout)
        except requests.Timeout as exc:
            raise BackendTimeoutError(f"{self.endpoint}: no answer in {self.timeout} s") from exc
        except requests.RequestException as exc:
            raise BackendUnavailableError(f"{self.endpoint}: {exc}") from exc
        if res.status_code != 200:
            raise BackendError(f"{self.endpoint}: HTTP {res.status_code}: {res.text[:300]}")
        try:
            return res.json()["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise BackendError(f"{self.endpoint}: not a chat completion: {res.text[:300]}") from exc
