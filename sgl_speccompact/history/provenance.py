"""Where a string of the history came from, and how much it says: the exact ledger's ranking inputs (pure).

The ledger (:mod:`~.ledger_entries`) keeps what an agent did above what
tools printed, and what tools printed above boilerplate.  Three facts decide
it, none of which takes a model:

* **the source** of a message (:func:`message_sources`): the agent's own
  calls (``call``: an assistant message's tool calls and fenced commands),
  what its actions returned (``result``: a tool message, or the user message
  that answers a text action), or a prompt (``prompt``: the task, the
  simulated user, the instructions);
* **boilerplate** (:func:`noise_lines`, :func:`is_noise_value`): markup
  namespaces and DTDs, hex dumps and disassembly, system listings such as
  ``/etc/passwd`` lines and paths under the system's own folders;
* **specificity** (:func:`specificity`): how well a string singles one thing
  out (a commit hash or a booking code more than ``10 lines``), never how
  often a tool printed it;

and one more keeps a prompt's worked examples out of the session's actions:
**demonstrations** (:func:`demonstration_spans`), the delimited examples a
prompt shows (SWE-agent's ``--- DEMONSTRATION ---`` block, ``<example>``
tags), whose strings are no facts of the session at all.

Every pattern here is linear in its input: line-anchored, with classes that
cannot overlap what follows them.
"""

from __future__ import annotations

import re
from typing import Sequence

from .messages import Turn

CALL, RESULT, PROMPT = "call", "result", "prompt"  # a message's source (an entry's source: "" when unknown)
# hosts whose URLs name a markup vocabulary, not a resource an agent fetched (namespaces, DTDs, schemas)
NAMESPACE_HOSTS = frozenset((
    "www.w3.org w3.org schemas.xmlsoap.org schemas.openxmlformats.org schemas.microsoft.com purl.org "
    "xmlns.com json-schema.org ns.adobe.com www.opengis.net maven.apache.org java.sun.com xmlns.jcp.org "
    "www.springframework.org docbook.org relaxng.org www.omg.org"
).split())
SCHEMA_EXTENSIONS = (".dtd", ".xsd", ".rng", ".ent", ".mod")  # a URL or path ending so names a markup schema
# folders of the operating system itself: a path under one that only tool output showed is a listing
SYSTEM_FOLDERS = ("/etc/", "/proc/", "/sys/", "/dev/", "/bin/", "/sbin/", "/usr/bin/", "/usr/sbin/", "/usr/lib/",
                  "/usr/libexec/", "/usr/share/", "/lib/", "/lib64/", "/var/lib/", "/run/", "/boot/")
# specificity of a kind before its shape is looked at (a number with a unit says least, a digest most)
KIND_SPECIFICITY = {"hash": 0.9, "id": 0.8, "url": 0.7, "error": 0.6, "path": 0.5, "command": 0.4, "number": 0.2}

_DEMO_OPEN = re.compile(r"^[^\S\n]*-{2,}[^\S\n]*(?:BEGIN[^\S\n]+)?(?:DEMONSTRATION|EXAMPLE)S?[^\S\n]*-{2,}[^\S\n]*$"
                        r"|<(demonstration|example)s?>", re.MULTILINE | re.IGNORECASE)
_DEMO_CLOSE = re.compile(r"^[^\S\n]*-{2,}[^\S\n]*END(?:[^\S\n]+OF)?[^\S\n]+(?:THE[^\S\n]+)?(?:DEMONSTRATION|EXAMPLE)S?"
                         r"[^\S\n]*-{2,}[^\S\n]*$", re.MULTILINE | re.IGNORECASE)
_FENCE_OPEN = re.compile(r"```")
# a hex dump or disassembly line: an address, a colon and two or more groups of hex bytes (xxd, od, objdump),
# or an 8-16 digit address and a symbol (objdump's function headers); a numbered source line has no byte groups
_DUMP = re.compile(r"^[^\S\n]*(?:0x)?[0-9a-fA-F]{4,16}:(?:[^\S\n]+(?:[0-9a-fA-F]{2}){1,4}(?![\w.])){2}[^\n]*"
                   r"|^[0-9a-fA-F]{8,16}[^\S\n]+<[^\n>]*>:[^\n]*", re.MULTILINE)
# a passwd or group line: name:password:uid:gid: (then the rest of the record)
_PASSWD = re.compile(r"^[a-z_][\w.-]{0,31}:[^:\n]{0,64}:\d{1,10}:\d{0,10}:[^\n]*$", re.MULTILINE)
_MARKUP = re.compile(r"^[^\n]*(?:xmlns\b|<!DOCTYPE|schemaLocation|<\?xml)[^\n]*$", re.MULTILINE | re.IGNORECASE)
_HOST = re.compile(r"https?://([^/:?#\s]+)")


def message_sources(turns: Sequence[Turn]) -> list[str]:
    """Each turn's source: ``call`` (an assistant message), ``result`` (a tool message, or a user message
    right after an assistant message with a fenced block: a text action's observation), else ``prompt``.

    >>> from .messages import Turn
    >>> message_sources([Turn("system", "s"), Turn("user", "task"), Turn("assistant", "```\\nls\\n```"),
    ...                  Turn("user", "a.py"), Turn("assistant", "done?"), Turn("user", "yes")])
    ['prompt', 'prompt', 'call', 'result', 'call', 'prompt']
    """
    out, acted = [], False
    for turn in turns:
        if turn.role == "assistant":
            out.append(CALL)
            acted = "```" in turn.content
            continue
        out.append(RESULT if turn.role == "tool" or (turn.role == "user" and acted) else PROMPT)
        if turn.role != "tool":
            acted = False
    return out


def demonstration_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each delimited demonstration in a prompt: from a ``--- DEMONSTRATION ---`` (or
    ``EXAMPLE``) line to its ``--- END OF DEMONSTRATION ---`` line, or from an ``<example>`` (or
    ``<demonstration>``) tag to its closing tag; an opening never closed runs to the end of the text.

    >>> t = "Do X.\\n--- DEMONSTRATION ---\\n$ rm -rf build\\n--- END OF DEMONSTRATION ---\\nNow go."
    >>> [t[a:b].split("\\n")[1] for a, b in demonstration_spans(t)]
    ['$ rm -rf build']
    >>> demonstration_spans("no examples here")
    []
    """
    if "emonstration" not in text and "xample" not in text and "EMONSTRATION" not in text and "XAMPLE" not in text:
        return []
    spans, pos, lower = [], 0, None
    while (m := _DEMO_OPEN.search(text, pos)) is not None:
        if m.group(1):  # a tag: its own closing tag ends it
            lower = text.lower() if lower is None else lower
            close = lower.find(f"</{m.group(0)[1:].lower()}", m.end())
            end = len(text) if close < 0 else close + len(m.group(0)) + 1
        else:
            c = _DEMO_CLOSE.search(text, m.end())
            end = len(text) if c is None else c.end()
        spans.append((m.start(), end))
        pos = max(end, m.end())
    return spans


def without_spans(text: str, spans: list[tuple[int, int]]) -> list[str]:
    """The pieces of ``text`` outside ``spans`` (sorted, not overlapping), each verbatim.

    >>> without_spans("abcdef", [(1, 2), (4, 5)])
    ['a', 'cd', 'f']
    """
    out, pos = [], 0
    for a, b in spans:
        out.append(text[pos:a])
        pos = b
    out.append(text[pos:])
    return [p for p in out if p]


def noise_lines(text: str) -> list[str]:
    """The boilerplate lines of a tool's output: hex dump and disassembly lines, passwd and group
    records, markup namespace and DTD declarations (each line as written).

    >>> noise_lines("ok\\n00000010: 6865 6c6c 6f0a  hello.\\nroot:x:0:0:root:/root:/bin/bash\\n"
    ...             '<html xmlns="http://www.w3.org/1999/xhtml">\\nsrc/a.py:3: E501')
    ['00000010: 6865 6c6c 6f0a  hello.', 'root:x:0:0:root:/root:/bin/bash', '<html xmlns="http://www.w3.org/1999/xhtml">']
    """
    found: list[tuple[int, str]] = []
    if ":" in text:
        found += [(m.start(), m.group(0)) for m in _DUMP.finditer(text)]
        found += [(m.start(), m.group(0)) for m in _PASSWD.finditer(text)]
    if "xmlns" in text or "DOCTYPE" in text or "chemaLocation" in text or "<?xml" in text:
        found += [(m.start(), m.group(0)) for m in _MARKUP.finditer(text)]
    return [line for _, line in sorted(found)]


def noise_only(written: str, text: str, noise: list[str]) -> bool:
    """Whether ``written`` occurs in ``text`` only inside its ``noise`` lines (:func:`noise_lines`).

    >>> noise_only("a1b2c3d4", "00000010: a1b2c3d4 ff\\nbuild a1b2c3d4", ["00000010: a1b2c3d4 ff"])
    False
    """
    if not noise or not any(written in line for line in noise):
        return False
    return text.count(written) == sum(line.count(written) for line in noise)


def is_noise_value(kind: str, value: str) -> bool:
    """Whether an identifier is boilerplate by its value alone: a markup namespace, DTD or schema URL, or
    a path under the operating system's own folders.

    >>> [is_noise_value(k, v) for k, v in (("url", "http://www.w3.org/TR/xhtml1/DTD/xhtml1-strict.dtd"),
    ...  ("url", "https://github.com/o/r/pull/3"), ("path", "/etc/passwd"), ("path", "/repo/etc/a.py"))]
    [True, False, True, False]
    """
    if kind == "url":
        host = _HOST.match(value)
        return bool(host) and host.group(1).lower() in NAMESPACE_HOSTS or value.lower().endswith(SCHEMA_EXTENSIONS)
    if kind == "path":
        return value.startswith(SYSTEM_FOLDERS) or value.lower().endswith(SCHEMA_EXTENSIONS)
    return False


def specificity(kind: str, value: str) -> float:
    """How well a string singles one thing out, in [0, 2): its kind's base (:data:`KIND_SPECIFICITY`) plus
    its shape: length, digits among letters, path depth and a line number.  Repetition plays no part.

    >>> [round(specificity(k, v), 2) for k, v in (("hash", "9fceb02"), ("id", "HAT136"),
    ...  ("path", "src/marshmallow/fields.py"), ("path", "setup.py"), ("number", "10 lines"))]
    [1.07, 0.96, 0.85, 0.58, 0.38]
    """
    base = KIND_SPECIFICITY.get(kind, 0.3)
    length = min(len(value), 40) / 100
    mixed = 0.1 if any(c.isdigit() for c in value) and any(c.isalpha() for c in value) else 0.0
    depth = min(value.count("/"), 4) * 0.05 if kind in ("path", "url") else 0.0
    line = 0.1 if kind == "path" and re.search(r":\d+$", value) else 0.0
    return base + length + mixed + depth + line
