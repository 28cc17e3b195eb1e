"""An agent's session replayed on a target, so its tokens sit in the target's radix cache.

An agent on an SGLang deployment sends its whole conversation to
``/v1/chat/completions`` before every assistant turn.  Replaying those
requests (every assistant turn of a recorded history as one chat
completion of the messages before it) leaves the target's radix cache as
the agent left it: the scenario "agent session, then compaction" of the
radix and latency benchmarks.  One new token per request keeps the replay
cheap; only the prompts matter for the cache.

The transport is passed in: ``post(path, body) -> dict`` is an HTTP post to
an emulator or SGLang server, or a simulated endpoint's ``_request`` (the
simulator serves the chat route on its one clock).
"""

from __future__ import annotations

from typing import Callable

CHAT_PATH = "/v1/chat/completions"


def session_bodies(messages: list[dict], model: str = "default") -> list[dict]:
    """The chat bodies of the agent's session: one per assistant turn, the messages before it.

    >>> msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
    ...         {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]
    >>> [len(b["messages"]) for b in session_bodies(msgs)]
    [1, 3]
    """
    turns = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and i > 0]
    return [{"model": model, "messages": messages[:i], "max_tokens": 1, "temperature": 0} for i in turns]


def replay_session(post: Callable[[str, dict], dict], messages: list[dict]) -> dict:
    """Send the agent's session one request after another; its token counts.

    Returns
    -------
    dict
        ``turns`` (requests sent), ``prompt_tokens`` and ``cached_tokens``
        summed over them (the servers' ``usage``).
    """
    out = {"turns": 0, "prompt_tokens": 0, "cached_tokens": 0}
    for body in session_bodies(messages):
        usage = post(CHAT_PATH, body).get("usage") or {}
        out["turns"] += 1
        out["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
        out["cached_tokens"] += int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return out


def http_post(url: str, api_key: str | None = None, timeout: float = 300.0) -> Callable[[str, dict], dict]:
    """``post(path, body)`` over HTTP to ``url``; a non-200 answer raises ``RuntimeError``."""
    import requests

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def post(path: str, body: dict) -> dict:
        r = requests.post(url.rstrip("/") + path, headers=headers, json=body, timeout=timeout)
        if r.status_code != 200:
            raise RuntimeError(f"{path} ({len(body.get('messages', []))} messages): HTTP {r.status_code}: "
                               f"{r.text[:200]}")
        return r.json()

    return post
