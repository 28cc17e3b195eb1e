"""Record real ``POST /v1/decisions`` exchanges as test fixtures (MEASURED (CPU), sglang 0.5.23).

Each exchange is one request body sent as is and the server's status and
response body, written to ``<name>.json`` in the fixtures folder
(``tests/fixtures/decisions``).  Two servers, both SmolLM2-135M-Instruct on
sglang's CPU engine started with the launcher's command:

* ``--server plain``: the tokenizer's own ChatML template (what
  ``launch/smollm2-135m-cpu.toml`` starts): judge-set lines, several
  questions in one request, yes/no descriptions with the prompt token ids,
  malformed bodies, a refused prompt format version, an input over the
  context length, and a reasoning kwarg the template does not know;
* ``--server reasoning``: the same model started with
  ``--chat-template tests/fixtures/decisions/think.jinja --reasoning-parser qwen3``,
  a ChatML template that opens ``<think>`` at the answer position when
  asked to (``think``): the route's reasoning checks.

Usage:
    python -m bench.decisions_fixtures --url http://127.0.0.1:30000 --server plain
    python -m bench.decisions_fixtures --url http://127.0.0.1:30001 --server reasoning
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bench.evaluation.judge_set import history_of, load_judge_set
from bench.judge_set_decisions import QUESTION
from sgl_speccompact.history.messages import parse_messages, render_history

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "decisions"
JUDGE_IDS = ("gh-05s", "gh-05c", "gh-07s", "gh-07c", "gh-09s", "gh-09c")  # three pairs from one history
SHORT = "[user]\nPlease rename config.yaml to settings.yaml.\n\n[assistant]\n[tool call bash id=c1]\n" \
        '{"cmd": "mv config.yaml settings.yaml"}\n\n[tool result bash id=c1]\nmv: cannot stat \'config.yaml\': ' \
        "No such file or directory"  # a tiny rendered history for the small exchanges


def _yes_no(qid: str, question: str, **extra) -> dict:
    return {"id": qid, "type": "yes_no", "question": question, **extra}


def judge_body() -> dict:
    """Six judge-set lines about one history, one request."""
    by_id = {c.id: c for c in load_judge_set()}
    cases = [by_id[i] for i in JUDGE_IDS]
    return {"input": render_history(parse_messages(history_of(cases[0]))),
            "questions": [_yes_no(c.id, QUESTION.format(line=c.line)) for c in cases]}


def plain_exchanges() -> dict[str, dict]:
    """The plain server's requests, by fixture name."""
    renamed = _yes_no("renamed", QUESTION.format(line="- [x] Renamed config.yaml to settings.yaml."))
    failed = _yes_no("failed", QUESTION.format(line="- The mv command failed: config.yaml does not exist."))
    return {
        "judge_lines": judge_body(),
        "yes_no_descriptions": {
            "input": SHORT, "return_prompt_token_ids": True, "prompt_format_version": 1,
            "questions": [_yes_no("renamed", renamed["question"], yes="the file was renamed",
                                  no="the rename did not happen"), failed]},
        "malformed_no_questions": {"input": SHORT, "questions": []},
        "malformed_repeated_id": {"input": SHORT, "questions": [renamed, {**failed, "id": "renamed"}]},
        "malformed_unknown_field": {"input": SHORT, "questions": [{**renamed, "labels": ["true", "false"]}]},
        "malformed_blank_input": {"input": "  ", "questions": [renamed]},
        "malformed_type": {"input": SHORT, "questions": [{**renamed, "type": "true_false"}]},
        "prompt_format_version_2": {"input": SHORT, "prompt_format_version": 2, "questions": [renamed]},
        "input_over_context": {"input": "a " * 8300, "questions": [renamed]},
        "enable_thinking_unknown_to_template": {"input": SHORT, "chat_template_kwargs": {"enable_thinking": True},
                                                "questions": [renamed, failed]},
    }


def reasoning_exchanges() -> dict[str, dict]:
    """The reasoning server's requests (think.jinja, --reasoning-parser qwen3), by fixture name."""
    q = [_yes_no("failed", QUESTION.format(line="- The mv command failed: config.yaml does not exist."))]
    return {
        "reasoning_default": {"input": SHORT, "questions": q, "return_prompt_token_ids": True},
        "reasoning_block_open": {"input": SHORT, "chat_template_kwargs": {"think": True}, "questions": q},
        "reasoning_toggle_on": {"input": SHORT, "chat_template_kwargs": {"enable_thinking": True}, "questions": q},
    }


def record(url: str, server: str, post, folder: Path = FIXTURES) -> list[Path]:
    """Send each exchange of ``server`` once and write its fixture."""
    bodies = plain_exchanges() if server == "plain" else reasoning_exchanges()
    written = []
    for name, body in bodies.items():
        res = post(url.rstrip("/") + "/v1/decisions", json=body)
        fixture = {"server": server, "route": "POST /v1/decisions", "request": body, "status": res.status_code,
                   "response": res.json(), "recorded_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        path = folder / f"{name}.json"
        path.write_text(json.dumps(fixture, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{name}: {res.status_code} {json.dumps(res.json())[:160]}", flush=True)
        written.append(path)
    return written


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="the running server")
    p.add_argument("--server", choices=("plain", "reasoning"), required=True, help="which server --url is")
    p.add_argument("--out", default=str(FIXTURES))
    args = p.parse_args(argv)
    import httpx

    Path(args.out).mkdir(parents=True, exist_ok=True)
    record(args.url, args.server, httpx.Client(timeout=600).post, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
