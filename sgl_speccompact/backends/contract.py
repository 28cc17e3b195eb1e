"""The backend contract: what a backend offers the programs and the methods.

Two protocols, one on the other:

* :class:`ProgramBackend` is the part of sglang's frontend ``BaseBackend``
  that the ``@sgl.function`` programs run on (``generate``, ``select``, the
  prefill of a fork, the cache hint, the chat template).
* :class:`Backend` adds what SpecCompact asks of a backend directly: the
  assistant prefix, what the server says of itself, token counts, the
  judge's label words, one-request judging, sglang's decision route, and the
  request-scoped views the service makes of a backend.

Every member is offered by every backend: where a capability means nothing
for a backend it is a no-op (a view that returns the backend itself, a
context window of ``None``), and where a backend cannot do a thing in one
request it declines by returning ``None`` (``judge_batch``, ``decide``),
so the caller takes its own way round or reports what it needs.  Nothing
probes a backend for a member.

:class:`SpecCompactEndpoint` conforms in full.  :class:`BackendDefaults`
gives a backend without a server of its own (a scripted test model) the
no-ops, and :func:`~sgl_speccompact.backends.endpoint.connect` holds a plain
sglang backend (``RuntimeEndpoint``) to the contract in a
:class:`PlainBackend`.  ``tests/backends/test_contract.py`` checks that each
conforms.
"""

from __future__ import annotations

from contextlib import contextmanager
from types import MappingProxyType
from typing import ContextManager, Iterator, Mapping, Protocol, runtime_checkable

import requests
from sglang.lang.backend.runtime_endpoint import RuntimeEndpoint

from ..core.judge import LabelTokens
from ..core.judging import Judged
from ..errors import BackendUnavailableError
from ..result import HostCpu
from .http import approx_token_count, http_error


@runtime_checkable
class ProgramBackend(Protocol):
    """The part of sglang's frontend backend (``BaseBackend``) the programs run on."""

    chat_template: object  # sglang ChatTemplate: role markers the program's turns are wrapped in

    def get_chat_template(self):
        """The chat template programs wrap their turns in (``chat_template``)."""

    def commit_lazy_operations(self, s) -> None:
        """Prefill the state's text so far (a fork's shared prefix); may record its counts in ``s.meta_info``."""

    def cache_prefix(self, prefix_str: str) -> None:
        """Hint that ``prefix_str`` opens many coming prompts (``run_batch``'s precache); may send nothing."""

    def generate(self, s, sampling_params) -> tuple[str, dict]:
        """Generate a continuation of the state's text; the text and sglang's ``meta_info``."""

    def select(self, s, choices, temperature, choices_method=None):
        """Choose among ``choices`` after the state's text; a ``ChoicesDecision`` (judging: ``LabelJudgement``)."""


@runtime_checkable
class Backend(ProgramBackend, Protocol):
    """A backend SpecCompact's methods run on: the program surface and SpecCompact's extras."""

    assistant_prefix: str  # text that opens every assistant turn (an empty think block; "" for none)
    model_info: Mapping  # the server's /get_model_info answer (empty when there is no server)
    base_url: str | None  # the server's URL (None when there is no server): one per server, e.g. a yield gate

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Length of each text in this backend's tokens (an estimate where it has no tokenizer)."""

    def context_length(self) -> int | None:
        """The served context window in tokens; None when unknown (then nothing is chunked)."""

    def label_tokens(self, positive: str, negative: str) -> LabelTokens | None:
        """The judge's label words as single tokens (raises ``LabelTokenError`` when one has none).

        None when the backend has no tokenizer to check them against.
        """

    def judge_batch(self, texts: list[str], positive: str, negative: str, eta: float) -> Judged | None:
        """Judge every full prompt in ``texts`` in ONE request (each ends where the label is generated).

        None when the backend cannot: the caller then judges each prompt with
        a program's ``select``.
        """

    def decide(self, body: dict) -> dict | None:
        """sglang's ``POST /v1/decisions`` with ``body``: the server's answer; None when the backend cannot."""

    def with_token_ids(self, on: bool) -> "Backend":
        """A view sending prompts as token ids (``on``) or text; itself when it sends text only."""

    def with_routing_key(self, key: str | None) -> "Backend":
        """A view whose requests carry the router's routing key; itself when there is no router."""

    def with_priority(self, priority: int | None) -> "Backend":
        """A view whose requests carry a scheduling priority; itself where priority means nothing."""

    def with_yield(self, gate) -> "Backend":
        """A view whose requests wait at ``gate`` while the server runs foreground work; itself where none."""

    def with_cancel(self, scope) -> "Backend":
        """A view that raises ``scope``'s error before each request once cancelled; itself where it cannot."""

    def prefix_session(self, on: bool = True, cpu: HostCpu | None = None) -> ContextManager["Backend"]:
        """A view for one block of a compaction: with ``on`` its requests share one server session (each
        prompt sent once, closed on exit), and its request threads count their CPU in ``cpu``; itself
        where neither means anything."""


PROGRAM_MEMBERS = ("chat_template", "get_chat_template", "commit_lazy_operations", "cache_prefix", "generate",
                   "select")  # what ProgramBackend declares
BACKEND_MEMBERS = PROGRAM_MEMBERS + (
    "assistant_prefix", "model_info", "base_url", "count_tokens", "context_length", "label_tokens",
    "judge_batch", "decide", "with_token_ids", "with_routing_key", "with_priority", "with_yield",
    "with_cancel", "prefix_session")  # what Backend declares


class BackendDefaults:
    """The contract's no-ops, for a backend with no server of its own (mixed into a ``BaseBackend``)."""

    assistant_prefix = ""  # no think block
    base_url: str | None = None  # no server
    model_info: Mapping = MappingProxyType({})  # nothing reported: there is no server

    def count_tokens(self, texts: list[str]) -> list[int]:
        """An estimate from the characters (:func:`~sgl_speccompact.backends.http.approx_token_count`)."""
        return approx_token_count(texts)

    def context_length(self) -> int | None:
        """Unknown."""
        return None

    def label_tokens(self, positive: str, negative: str) -> LabelTokens | None:
        """Nothing to check the labels against."""
        return None

    def judge_batch(self, texts: list[str], positive: str, negative: str, eta: float) -> Judged | None:
        """Declined: judged one prompt at a time."""
        return None

    def decide(self, body: dict) -> dict | None:
        """Declined: no decision route."""
        return None

    def with_token_ids(self, on: bool) -> "BackendDefaults":
        return self

    def with_routing_key(self, key: str | None) -> "BackendDefaults":
        return self

    def with_priority(self, priority: int | None) -> "BackendDefaults":
        return self

    def with_yield(self, gate) -> "BackendDefaults":
        return self

    def with_cancel(self, scope) -> "BackendDefaults":
        return self

    @contextmanager
    def prefix_session(self, on: bool = True, cpu: HostCpu | None = None) -> Iterator["BackendDefaults"]:
        """Itself: no server session, and its work is counted on the pipeline's thread."""
        yield self


class PlainBackend(BackendDefaults):
    """A plain sglang backend (``RuntimeEndpoint``, any ``BaseBackend``) held to the contract.

    Programs given this backend run on ``endpoint`` itself (sglang's
    ``run_program`` runs on a backend's ``endpoint``, as for its own
    ``Runtime``); the extras are the no-ops, except that a
    ``RuntimeEndpoint`` counts tokens with its server's ``/tokenize`` and
    reports its ``model_info`` and ``base_url``.
    """

    def __init__(self, endpoint: ProgramBackend):
        self.endpoint = endpoint  # the sglang backend the programs run on

    @property
    def chat_template(self):
        return self.endpoint.chat_template

    @property
    def model_info(self) -> Mapping:
        info = self.endpoint.model_info if isinstance(self.endpoint, RuntimeEndpoint) else None
        return info if isinstance(info, dict) else MappingProxyType({})

    @property
    def base_url(self) -> str | None:
        return self.endpoint.base_url if isinstance(self.endpoint, RuntimeEndpoint) else None

    def get_chat_template(self):
        return self.endpoint.get_chat_template()

    def commit_lazy_operations(self, s) -> None:
        self.endpoint.commit_lazy_operations(s)

    def cache_prefix(self, prefix_str: str) -> None:
        self.endpoint.cache_prefix(prefix_str)

    def generate(self, s, sampling_params) -> tuple[str, dict]:
        return self.endpoint.generate(s, sampling_params)

    def select(self, s, choices, temperature, choices_method=None):
        return self.endpoint.select(s, choices, temperature, choices_method)

    def count_tokens(self, texts: list[str]) -> list[int]:
        """The server's ``/tokenize`` counts for a ``RuntimeEndpoint``; else an estimate."""
        if not texts or not isinstance(self.endpoint, RuntimeEndpoint):
            return approx_token_count(texts)
        return [int(c) for c in self._post("/tokenize", {"prompt": list(texts), "add_special_tokens": False})["count"]]

    def decide(self, body: dict) -> dict | None:
        """A ``RuntimeEndpoint``'s ``POST /v1/decisions``; None for any other backend."""
        return self._post("/v1/decisions", body) if isinstance(self.endpoint, RuntimeEndpoint) else None

    def _post(self, path: str, body: dict) -> dict:
        url = self.endpoint.base_url.rstrip("/") + path
        key = self.endpoint.api_key
        try:
            res = requests.post(url, json=body, headers={"Authorization": f"Bearer {key}"} if key else {},
                                timeout=60)
        except requests.RequestException as exc:
            raise BackendUnavailableError(f"{url}: {exc}") from exc
        if res.status_code != 200:
            raise http_error(url, res.status_code, res.text)
        return res.json()


def runs_on(backend: Backend) -> ProgramBackend:
    """The sglang backend a program given ``backend`` runs on (a :class:`PlainBackend`'s ``endpoint``)."""
    return backend.endpoint if isinstance(backend, PlainBackend) else backend
