"""Runs inside a hermes-agent 0.19.0 virtual environment (see tests/integrations/test_hermes_e2e.py).

``python hermes_prompt_probe.py CASES.json OUT.json``: for each case
(``messages``, ``context_length``, ``previous_summary``, ``focus``) builds
Hermes's ``ContextCompressor`` and records the prompt its summarizer call
would send, by replacing the compressor's ``call_llm`` with a recorder.
"""

import json
import sys
from types import SimpleNamespace


def main() -> None:
    from agent import context_compressor as cc

    cases, prompts = json.load(open(sys.argv[1])), []

    def record(**kwargs):
        prompts.append((kwargs["messages"][0]["content"], "max_tokens" in kwargs))
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content="## Goal\nrecorded"))])

    cc.call_llm = record
    out = []
    for case in cases:
        comp = cc.ContextCompressor("fake-model", config_context_length=case["context_length"], quiet_mode=True)
        comp._previous_summary = case.get("previous_summary")
        comp._generate_summary(case["messages"], focus_topic=case.get("focus"))
        prompt, capped = prompts[-1]
        out.append({"prompt": prompt, "sends_max_tokens": capped})
    json.dump(out, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
