"""``python -m sgl_speccompact {compact,launch,serve,wait} ...``."""

from __future__ import annotations

import sys

USAGE = """usage: python -m sgl_speccompact <command> [args]

commands:
  compact FILE   compact one trajectory file on running SGLang servers
  launch         start target + drafter SGLang servers and the compaction service
  serve          run the compaction service against running servers (--target-url ...)
  wait           return once the service answers /health (after `launch ... &`)

Run a command with -h for its flags."""


def main(argv: list[str] | None = None) -> int:
    """Dispatch to the subcommand; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "compact":
        from .cli import main as compact_main

        return compact_main(rest)
    if cmd == "wait":
        from .service.ready import main as wait_main

        return wait_main(rest)
    if cmd in ("launch", "serve"):
        from .launch import main as launch_main

        return launch_main(rest, serve_only=cmd == "serve")
    print(f"unknown command {cmd!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    code = main()
    if sys.argv[1:2] in (["launch"], ["serve"]):  # the service has stopped: leave without the teardown
        from .launch.run import exit_process

        exit_process(code)
    sys.exit(code)
