"""One token estimate, for sizing text where no tokenizer is asked.

The auto picker's history size, the service's session sizes, Hermes's
length target and the fallback counter of a backend without ``/tokenize``
all guess tokens the same way: :data:`CHARS_PER_TOKEN` characters a token,
rounded up.  (Chunking bounds a history by its UTF-8 bytes instead, a
deliberately different, safer first cut: :func:`~sgl_speccompact.methods.chunking.estimate`.)
"""

from __future__ import annotations

CHARS_PER_TOKEN = 4  # characters of English/code text per token (Qwen3 on agent logs; hermes-agent's rule too)


def chars_to_tokens(chars: int) -> int:
    """Tokens of a text of ``chars`` characters, estimated (rounded up).

    >>> chars_to_tokens(8), chars_to_tokens(9), chars_to_tokens(0)
    (2, 3, 0)
    """
    return -(-chars // CHARS_PER_TOKEN)
