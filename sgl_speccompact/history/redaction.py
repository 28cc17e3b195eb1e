"""Secret redaction before anything reaches a model.

Every text of a history (contents, tool arguments, the previous summary)
passes through :func:`redact` before it is rendered into a prompt.  A found
secret is replaced by ``[REDACTED:<kind>]``; the result reports how many
were replaced per kind, never the secrets.  Redaction is a pure function of
its input: the same history always renders to the same bytes, so radix
cache prefixes stay stable.

Detectors: the provider formats and named assignments of
:mod:`~.secret_patterns` (every pattern linear in its input), the tail of a
PEM key whose BEGIN line was cut off, and the regex plugins of
``detect-secrets`` whose patterns are linear.  Entropy-only detection is
not used: it would redact commit hashes and checksums, which summaries must
keep.  What the models write is redacted again on the way out
(:mod:`~sgl_speccompact.core.outputs`).

A text is scanned once for every detector at a time
(:class:`~.prefilter.Prefilter`, when hyperscan is installed); a detector
runs only on the texts where its pattern can match at all.  Without
hyperscan every detector runs on every text: the same spans, slower.
Each text's redaction is kept (its redacted form and counts, never a secret)
in a bounded cache, :data:`~.redaction_cache.REDACTION_CACHE`, so a
session's next compaction redacts only the texts of the messages it has not
seen.

>>> redact("key=sk-proj-abcdefghijklmnopqrstuvwx1234 and AKIAIOSFODNN7EXAMPLE")
('key=[REDACTED:openai_key] and [REDACTED:aws_access_key]', {'aws_access_key': 1, 'openai_key': 1})
>>> redact("commit 3f2a9c1d4e5b6a7f8e9d0c1b2a3f4e5d6c7b8a9f is fine")[1]
{}
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Callable, Iterable, Iterator

from .prefilter import Prefilter
from .redaction_cache import cached
from .secret_patterns import (CALL_OR_INDEX, CHECKED_KINDS, CODE_CHARS, NOT_A_SECRET, PROVIDER_PATTERNS,
                              QUOTED_PLACEHOLDER)

MARKER = "[REDACTED:{kind}]"

# detect-secrets plugins whose patterns are specific enough for free text (class name -> kind); the
# JWT, npm and OpenAI plugins are left out: their patterns are quadratic on some inputs, and
# secret_patterns has linear ones for the same formats
DETECT_SECRETS_PLUGINS = {
    "AWSKeyDetector": "aws_access_key",
    "AzureStorageKeyDetector": "azure_storage_key",
    "DiscordBotTokenDetector": "discord_token",
    "GitHubTokenDetector": "github_token",
    "GitLabTokenDetector": "gitlab_token",
    "MailchimpDetector": "mailchimp_key",
    "PypiTokenDetector": "pypi_token",
    "SendGridDetector": "sendgrid_key",
    "SlackDetector": "slack_token",
    "SquareOAuthDetector": "square_oauth_secret",
    "StripeDetector": "stripe_key",
    "TelegramBotTokenDetector": "telegram_token",
    "TwilioKeyDetector": "twilio_key",
}

Span = tuple[int, int]


@dataclass(frozen=True)
class Detector:
    """One way of finding one kind of secret."""

    kind: str  # what [REDACTED:<kind>] says
    name: str  # where it comes from: the pattern text, or the detector's name
    spans: Callable[[str], Iterable[Span]]  # text -> (start, end) of each secret found
    trigger: re.Pattern | None = None  # matches every text `spans` finds anything in (None: scan every text)


def _regex_spans(rx: re.Pattern, checked: bool, min_group: int = 4) -> Callable[[str], Iterable[Span]]:
    def spans(text: str) -> Iterable[Span]:
        for m in rx.finditer(text):
            start, end = _secret_span(m, min_group)
            quoted = 0 < start and end < len(text) and text[start - 1] in "\"'" and text[end] == text[start - 1]
            if end > start and not (checked and _looks_like_code(text[start:end], quoted)):
                yield start, end
    return spans


_PEM_END = re.compile(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
# a summary writes a key's lines as list items: "- MIIE...", and "- -----END ... KEY-----"
_PEM_LINE = re.compile(r"[ \t]*(?:[-*+>][ \t]+)?[A-Za-z0-9+/=]{1,128}[ \t]*\r?|[ \t]*[-*+>][ \t]*")
_PEM_WORD = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/=]{16,}[ \t]*$")


def pem_tail_spans(text: str) -> Iterator[Span]:
    """The base64 lines of a private key that end at its END line, when no BEGIN line came with them.

    Walks back line by line from each END marker, never past the previous
    one, so the work is linear in the text.  A line that is not all base64
    ends the walk; its last long base64 word still goes ("key: MIIE...").

    >>> text = "key tail: QUJDREVGR0hJSktMTU5PUFFS" + chr(10) + "QUJDREVG" + chr(10) + "-----END RSA PRIVATE KEY-----"
    >>> [text[s:e] for s, e in pem_tail_spans(text)][0][:12]
    'QUJDREVGR0hJ'
    """
    floor = 0
    for m in _PEM_END.finditer(text):
        start = m.start()
        while start > floor:
            line_start = max(text.rfind("\n", floor, start - 1) + 1, floor)
            body = text[line_start:start].rstrip("\r\n")
            if not _PEM_LINE.fullmatch(body):
                word = _PEM_WORD.search(body)
                start = line_start + word.start() if word else start
                break
            start = line_start
        yield start, m.end()
        floor = m.end()


@lru_cache(maxsize=1)
def detectors() -> tuple[Detector, ...]:
    """Every detector, ours first so specific kinds win overlaps."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    out = [Detector(kind, p, _regex_spans(rx, kind in CHECKED_KINDS), rx)
           for kind, p in PROVIDER_PATTERNS for rx in [re.compile(p)]]
    out.append(Detector("private_key", "pem_tail_spans", pem_tail_spans, _PEM_END))  # each span ends at an END line
    for cls in get_mapping_from_secret_type_to_class().values():
        kind = DETECT_SECRETS_PLUGINS.get(cls.__name__)
        if kind is not None:
            # their groups are often a prefix ("glpat"): only a long group is the secret itself
            out += [Detector(kind, rx.pattern, _regex_spans(rx, False, min_group=16), rx) for rx in cls().denylist]
    return tuple(out)


@lru_cache(maxsize=1)
def prefilter() -> Prefilter:
    """One scan per text for every detector's trigger (compiled on first use, once per process)."""
    return Prefilter([d.trigger for d in detectors()])


def _looks_like_code(value: str, quoted: bool = False) -> bool:
    """An assigned value that is a reference, call or placeholder rather than a literal secret.

    A quoted value is a literal whatever punctuation it holds, unless it is a
    whole placeholder; a bare one is code when it references, calls or indexes.

    >>> _looks_like_code("env('KEY')"), _looks_like_code("h5(k^+8#p"), _looks_like_code("x(1)+@9!", quoted=True)
    (True, False, False)
    """
    if quoted:
        return bool(QUOTED_PLACEHOLDER.match(value))
    return bool(NOT_A_SECRET.match(value)) or bool(CALL_OR_INDEX.match(value)) or value[:1] in CODE_CHARS


def _secret_span(m: re.Match, min_group: int = 4) -> Span:
    for g in range(m.re.groups, 0, -1):
        if m.group(g) and len(m.group(g)) >= min_group:
            return m.span(g)
    return m.span()  # groups too short to be the secret (e.g. a "glpat" prefix): the whole match


def find_secrets(text: str) -> list[tuple[int, int, str]]:
    """Non-overlapping ``(start, end, kind)`` spans of secrets in ``text``, in order.

    Overlaps go to the earliest start, then the longest span, then the first detector.  Only the
    detectors whose trigger the prefilter finds in ``text`` run (every one without hyperscan).
    """
    spans, dets = [], detectors()
    for order in sorted(prefilter().hits(text)):
        det = dets[order]
        for start, end in det.spans(text):
            spans.append((start, -end, order, det.kind))
    out, end = [], 0
    for start, neg_end, _, kind in sorted(spans):
        if start >= end:
            out.append((start, -neg_end, kind))
            end = -neg_end
    return out


def redact(text: str) -> tuple[str, dict[str, int]]:
    """``text`` with every secret replaced by ``[REDACTED:<kind>]``, and the count per kind.

    A text redacted before (byte for byte) comes from
    :data:`~.redaction_cache.REDACTION_CACHE` without a scan.
    """
    if not text:
        return text, {}
    return cached(b"redact", text, _redact)


def _redact(text: str) -> tuple[str, dict[str, int]]:
    spans = find_secrets(text)
    if not spans:
        return text, {}
    parts, pos = [], 0
    for start, end, kind in spans:
        parts += [text[pos:start], MARKER.format(kind=kind)]
        pos = end
    parts.append(text[pos:])
    return "".join(parts), dict(sorted(Counter(kind for _, _, kind in spans).items()))


def redact_lines(lines: list[str], counted: list[bool] | None = None) -> tuple[list[str], dict[str, int]]:
    """``lines`` redacted as one text (joined by newlines), each line kept in its place, and the counts.

    A secret that spans lines (a PEM block, a netrc entry) matches only in
    the joined text; every line it touches gets the marker in place of its
    part, so no line is merged or dropped.  ``counted`` (one flag per line):
    count only the secrets that touch a flagged line.

    >>> redact_lines(["key:", "-----BEGIN PRIVATE KEY-----", "QUJDREVGR0hJSktMTU5P", "-----END PRIVATE KEY-----", "ok"])
    (['key:', '[REDACTED:private_key]', '[REDACTED:private_key]', '[REDACTED:private_key]', 'ok'], {'private_key': 1})
    """
    spans = find_secrets("\n".join(lines)) if lines else []
    if not spans:
        return list(lines), {}
    out, touched, first, start = [], set(), 0, 0
    for i, line in enumerate(lines):
        end = start + len(line)
        while first < len(spans) and spans[first][1] <= start:
            first += 1
        parts, pos, j = [], start, first
        while j < len(spans) and spans[j][0] < end:
            a, b, kind = spans[j]
            if b > start:
                parts += [line[pos - start:max(a, start) - start], MARKER.format(kind=kind)]
                pos = min(b, end)
                if counted is None or counted[i]:
                    touched.add(j)
            j += 1
        out.append("".join(parts) + line[pos - start:] if parts else line)
        start = end + 1
    return out, dict(sorted(Counter(spans[j][2] for j in touched).items()))


def add_counts(total: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    """Per-kind sum of two count dicts (sorted by kind)."""
    merged = Counter(total)
    merged.update(more)
    return dict(sorted(merged.items()))


# a JSON string literal, its closing quote optional (group 1): a quote that opens one no literal closes
# (escaped quotes all the way, ``\"\"\"...``) is read to the line's end once, not once per quote
_JSON_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*("?)')


def redact_arguments(arguments: str) -> tuple[str, dict[str, int]]:
    r"""Tool-call arguments as sent (a JSON text) with every secret replaced, and the counts.

    Every JSON string in the text that holds an escape sequence is decoded,
    redacted and written back escaped: encoded, a quoted value reads
    ``\"...\"``, a tab ``\t`` and a line break ``\n``, so a secret there
    matches no pattern (``SECRET_KEY = \"...\"``, an AWS key between tabs, a
    private key's lines).  Then the whole text is redacted, as :func:`redact`
    does, for what spans strings (a key and its value).  Strings without a
    secret keep their bytes.

    >>> redact_arguments('{"command": "export SECRET_KEY=\\"r8(v+3w!=y^t[q)k@e\\""}')
    ('{"command": "export SECRET_KEY=\\"[REDACTED:password]\\""}', {'password': 1})
    """
    return cached(b"arguments", arguments, _redact_arguments) if arguments else (arguments, {})


def _redact_arguments(arguments: str) -> tuple[str, dict[str, int]]:
    parts, pos, counts = [], 0, {}
    for m in _JSON_STRING.finditer(arguments) if "\\" in arguments else ():
        if not m.group(1) or "\\" not in m.group(0):
            continue
        try:
            decoded = json.loads(m.group(0))
        except ValueError:
            continue
        shown, found = redact(decoded)
        if found:
            parts += [arguments[pos:m.start()], json.dumps(shown, ensure_ascii=False)]
            pos, counts = m.end(), add_counts(counts, found)
    text, more = redact("".join(parts) + arguments[pos:] if parts else arguments)
    return text, add_counts(counts, more)


def redact_turns(turns: Iterable) -> tuple[tuple, dict[str, int]]:
    """Parsed turns with every content, name, call id and argument redacted, and the counts.

    A call id and the tool result naming it redact to the same text, so they
    still pair up.  A turn without a secret is returned as it is.

    >>> from .messages import Turn
    >>> redact_turns((Turn("tool", "token=ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789", tool_call_id="c"),))[1]
    {'github_token': 1}
    """
    out, total = [], {}
    for t in turns:
        found: dict[str, int] = {}

        def red(text, how=redact):
            nonlocal found
            if not text:
                return text
            text, counts = how(text)
            if counts:
                found = add_counts(found, counts)
            return text

        calls = tuple(replace(c, id=red(c.id), name=red(c.name), arguments=red(c.arguments, redact_arguments))
                      for c in t.tool_calls)
        content, tool_call_id, name = red(t.content), red(t.tool_call_id), red(t.name)
        if found:
            out.append(replace(t, content=content, tool_calls=calls, tool_call_id=tool_call_id, name=name))
            total = add_counts(total, found)
        else:
            out.append(t)  # nothing replaced: every field is the caller's own
    return tuple(out), total


def redact_json(value: Any) -> tuple[Any, dict[str, int]]:
    """A copy of JSON-like data (the ``tools`` schema) with every string redacted, and the counts.

    >>> redact_json([{"description": "uses sk-proj-abcdefghijklmnopqrstuvwx1234", "n": 1}])
    ([{'description': 'uses [REDACTED:openai_key]', 'n': 1}], {'openai_key': 1})
    """
    total: dict[str, int] = {}

    def walk(v):
        nonlocal total
        if isinstance(v, str):
            v, counts = redact(v)
            total = add_counts(total, counts)
            return v
        if isinstance(v, dict):
            return {walk(k) if isinstance(k, str) else k: walk(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(x) for x in v]
        return v

    out = walk(value)
    return (out if total else value), total


def redact_messages(messages: list) -> list:
    """Copies of OpenAI messages with string contents, text parts, names, call ids and tool calls redacted.

    Tool-call arguments are redacted whether sent as a JSON string or as a
    JSON object (every string inside it, keys too, at any depth).

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
        for key in ("name", "tool_call_id"):
            if isinstance(m.get(key), str):
                new[key] = redact(m[key])[0]
        if isinstance(m.get("tool_calls"), list):
            new["tool_calls"] = [_redact_call(c) for c in m["tool_calls"]]
        out.append(new if new != m else m)
    return out


def _redact_call(call):
    if not isinstance(call, dict):
        return call
    new = {**call, "id": redact(call["id"])[0]} if isinstance(call.get("id"), str) else dict(call)
    fn = call.get("function")
    if isinstance(fn, dict):
        # arguments sent as a JSON object (any depth) are redacted string by string and stay an object
        new["function"] = {k: ((redact_arguments if k == "arguments" else redact)(v)[0] if isinstance(v, str)
                               else redact_json(v)[0] if k == "arguments" else v)
                           if k in ("name", "arguments") else v for k, v in fn.items()}
    return new if new != call else call
