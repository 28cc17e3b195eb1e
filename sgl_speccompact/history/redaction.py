"""Secret redaction before anything reaches a model.

Every text of a history (contents, tool arguments, the previous summary)
passes through :func:`redact` before it is rendered into a prompt.  A found
secret is replaced by ``[REDACTED:<kind>]``; the result reports how many
were replaced per kind, never the secrets.  Redaction is a pure function of
its input: the same history always renders to the same bytes, so radix
cache prefixes stay stable.

Detectors: the regex plugins of ``detect-secrets`` (AWS, Azure, GitHub,
GitLab, Slack, Stripe, SendGrid, Twilio, JWT, npm, PyPI, ...) plus patterns
it lacks: current OpenAI/Anthropic key formats, Google and Hugging Face
keys, whole PEM private-key blocks, bearer tokens, password/secret
assignments and passwords in connection strings.  Entropy-only detection is
not used: it would redact commit hashes and checksums, which summaries must
keep.

>>> redact("key=sk-proj-abcdefghijklmnopqrstuvwx1234 and AKIAIOSFODNN7EXAMPLE")
('key=[REDACTED:openai_key] and [REDACTED:aws_access_key]', {'aws_access_key': 1, 'openai_key': 1})
>>> redact("commit 3f2a9c1d4e5b6a7f8e9d0c1b2a3f4e5d6c7b8a9f is fine")[1]
{}
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from typing import Iterable

MARKER = "[REDACTED:{kind}]"

# detect-secrets plugins whose patterns are specific enough for free text (class name -> kind)
DETECT_SECRETS_PLUGINS = {
    "AWSKeyDetector": "aws_access_key",
    "AzureStorageKeyDetector": "azure_storage_key",
    "DiscordBotTokenDetector": "discord_token",
    "GitHubTokenDetector": "github_token",
    "GitLabTokenDetector": "gitlab_token",
    "JwtTokenDetector": "jwt",
    "MailchimpDetector": "mailchimp_key",
    "NpmDetector": "npm_token",
    "OpenAIDetector": "openai_key",
    "PypiTokenDetector": "pypi_token",
    "SendGridDetector": "sendgrid_key",
    "SlackDetector": "slack_token",
    "SquareOAuthDetector": "square_oauth_secret",
    "StripeDetector": "stripe_key",
    "TelegramBotTokenDetector": "telegram_token",
    "TwilioKeyDetector": "twilio_key",
}

_VALUE = r"""["']?([^\s"'`,;)}\]]{4,})"""
# (kind, pattern); a pattern with a group redacts only its last non-empty group
EXTRA_PATTERNS = (
    ("private_key", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
                    r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)"),
    ("anthropic_key", r"\bsk-ant-[A-Za-z0-9_-]{20,}"),
    ("openai_key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    ("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}"),
    ("huggingface_token", r"\bhf_[A-Za-z0-9]{30,}"),
    ("aws_secret_key", r"(?i)aws_?secret_?(?:access_?)?key[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+=]{40})"),
    ("aws_secret_key", r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}[\s\S]{0,100}?(?<![A-Za-z0-9/+=])"
                       r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"),  # the secret next to its key id
    ("bearer_token", r"(?i)\bbearer\s+([A-Za-z0-9._~+/=-]{16,})"),
    ("basic_auth", r"(?i)\bauthorization[\"']?\s*[:=]\s*[\"']?basic\s+([A-Za-z0-9+/=]{8,})"),
    ("connection_string", r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@\"']+:([^\s@/\"']+)@"),
    ("password", r"(?i)(?<![A-Za-z0-9])(?:password|passwd|pwd|passphrase|secret|client_secret|api[_-]?key"
                 r"|access[_-]?token|auth[_-]?token|private[_-]?token)[\"']?\s*[:=]\s*" + _VALUE),
)
# assignment values that are code or placeholders, not secrets
_NOT_A_SECRET = re.compile(r"^(?:os\.|getenv|process\.env|env\[|\$|\{|<|%|None$|null$|true$|false$|\*+$|x+$"
                           r"|\[REDACTED:)", re.IGNORECASE)


@lru_cache(maxsize=1)
def detectors() -> tuple[tuple[str, re.Pattern], ...]:
    """Every (kind, compiled pattern), ours first so specific kinds win overlaps."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    out = [(kind, re.compile(p)) for kind, p in EXTRA_PATTERNS]
    for cls in get_mapping_from_secret_type_to_class().values():
        kind = DETECT_SECRETS_PLUGINS.get(cls.__name__)
        if kind is not None:
            out += [(kind, rx) for rx in cls().denylist]
    return tuple(out)


def _secret_span(m: re.Match) -> tuple[int, int] | None:
    for g in range(m.re.groups, 0, -1):
        if m.group(g) and len(m.group(g)) >= 4:
            return m.span(g)
    return m.span()  # groups too short to be the secret (e.g. a "ghp" prefix): the whole match


def find_secrets(text: str) -> list[tuple[int, int, str]]:
    """Non-overlapping ``(start, end, kind)`` spans of secrets in ``text``, in order."""
    spans = []
    for order, (kind, rx) in enumerate(detectors()):
        for m in rx.finditer(text):
            span = _secret_span(m)
            if span is None or span[1] <= span[0]:
                continue
            if kind == "password" and _NOT_A_SECRET.match(text[span[0]:span[1]]):
                continue
            spans.append((span[0], -span[1], order, kind))
    out, end = [], 0
    for start, neg_end, _, kind in sorted(spans):
        if start >= end:
            out.append((start, -neg_end, kind))
            end = -neg_end
    return out


def redact(text: str) -> tuple[str, dict[str, int]]:
    """``text`` with every secret replaced by ``[REDACTED:<kind>]``, and the count per kind."""
    if not text:
        return text, {}
    spans = find_secrets(text)
    if not spans:
        return text, {}
    parts, pos = [], 0
    for start, end, kind in spans:
        parts += [text[pos:start], MARKER.format(kind=kind)]
        pos = end
    parts.append(text[pos:])
    return "".join(parts), dict(sorted(Counter(kind for _, _, kind in spans).items()))


def add_counts(total: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    """Per-kind sum of two count dicts (sorted by kind)."""
    merged = Counter(total)
    merged.update(more)
    return dict(sorted(merged.items()))


def redact_all(texts: Iterable[str]) -> tuple[list[str], dict[str, int]]:
    """:func:`redact` over several texts, with the summed counts."""
    out, total = [], {}
    for t in texts:
        red, counts = redact(t)
        out.append(red)
        total = add_counts(total, counts)
    return out, total


def redact_turns(turns: Iterable) -> tuple[tuple, dict[str, int]]:
    """Parsed turns with every content, tool name and argument redacted, and the counts.

    >>> from .messages import Turn
    >>> redact_turns((Turn("tool", "token=ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789", tool_call_id="c"),))[1]
    {'github_token': 1}
    """
    from dataclasses import replace

    out, total = [], {}
    for t in turns:
        content, counts = redact(t.content)
        total = add_counts(total, counts)
        calls = []
        for c in t.tool_calls:
            args, counts = redact(c.arguments)
            total = add_counts(total, counts)
            calls.append(replace(c, arguments=args))
        out.append(replace(t, content=content, tool_calls=tuple(calls)))
    return tuple(out), total


def redact_messages(messages: list) -> list:
    """Copies of OpenAI messages with string contents, text parts and tool arguments redacted.

    Messages without a secret are the caller's own objects, so a layout
    built from them keeps the agent's bytes; the input is never changed.
    """
    out = []
    for m in messages:
        if not isinstance(m, dict):
            out.append(m)
            continue
        new = dict(m)
        content = m.get("content")
        if isinstance(content, str):
            new["content"] = redact(content)[0]
        elif isinstance(content, list):
            new["content"] = [{**p, "text": redact(p["text"])[0]} if isinstance(p, dict) and isinstance(
                p.get("text"), str) else p for p in content]
        if isinstance(m.get("tool_calls"), list):
            new["tool_calls"] = [_redact_call(c) for c in m["tool_calls"]]
        out.append(new if new != m else m)
    return out


def _redact_call(call):
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
        return call
    return {**call, "function": {**fn, "arguments": redact(fn["arguments"])[0]}}
