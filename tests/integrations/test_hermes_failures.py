"""The held Hermes session when the service fails: real hermes-agent 0.19.0, a scripted model, a 100,000 window.

One user request turns into a 40-file ``read_file`` loop (test_hermes_e2e.py's
``ToolLoop``), against a model that refuses any prompt over the window as a
real server does.  The compaction service is down, killed mid-compaction (the
connection drops with no answer), slow (3 s timeout, answers after 6 s) or
refuses the key (401).  With ``compression.abort_on_summary_failure`` at its
default the plugin hands off locally, as Hermes's own compressor would, so
no request goes over the window and no turn fails.
"""

import json
from pathlib import Path

import pytest

from tests.support.hermes_fakes import FakeLLM, ServiceProxy
from tests.support.hermes import (DRIVER, FILES, WINDOW, ToolLoop, closed_port, hermes_home, hermes_run, prompt_tokens,
                                  tool_pairs_ok, write_modules)

pytestmark = [pytest.mark.slow, pytest.mark.e2e]  # installs hermes-agent from the package index


class RefusingLoop(ToolLoop):
    """The tool loop's model, refusing (400, context length exceeded) every prompt over the window."""

    def __init__(self):
        super().__init__()
        self.refused = 0

    def __call__(self, body: dict) -> tuple[dict, int]:
        if body.get("tools") and prompt_tokens(body) > WINDOW:
            self.refused += 1
            return {"error": f"This model's maximum context length is {WINDOW} tokens; your request has "
                             f"{prompt_tokens(body)} tokens (context length exceeded)"}, 0
        return super().__call__(body)


def failing_loop(python, site, tmp: Path, mode: str) -> dict:
    """Run the loop with the service failing as ``mode`` says; what Hermes, the model and the service saw."""
    home = hermes_home(tmp, directory_plugin=False, context=WINDOW)
    write_modules(tmp / "work")
    model = RefusingLoop()
    with FakeLLM(model) as llm, ServiceProxy("http://127.0.0.1:9", slow_s=6.0) as proxy:
        proxy.mode = {"down": "forward", "killed": "kill", "slow": "slow", "wrong_key": "auth401"}[mode]
        url = closed_port() if mode == "down" else proxy.url
        cfg = {"hermes_home": str(home), "llm_url": llm.url, "out": str(tmp / "out.json"),
               "loop": {"workdir": str(tmp / "work"), "url": url, "timeout_s": 3,
                        "request": f"Read every module under src/ one by one (mod_00.py to mod_{FILES - 1}.py)."}}
        (tmp / "cfg.json").write_text(json.dumps(cfg))
        res = hermes_run(python, site, home, str(DRIVER), str(tmp / "cfg.json"), timeout=900)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
        report = json.loads((tmp / "out.json").read_text())["loop"]
        report["prompts"] = [prompt_tokens(b) for b in llm.requests if b.get("tools")]
        report["refused"], report["service_bodies"] = model.refused, list(proxy.bodies)
    return report


@pytest.mark.parametrize("mode", ["down", "killed", "slow", "wrong_key"])
def test_a_failing_service_never_lets_the_prompt_over_the_window(hermes_env, tmp_path, mode):
    python, site = hermes_env
    run = failing_loop(python, site, tmp_path, mode)
    over = [t for t in run["prompts"] if t > WINDOW]
    failed_turns = int(run["failed"]) + int("Done" not in run["final"])
    assert (len(over), run["refused"], failed_turns) == (0, 0, 0), (run["prompts"], run["final"], run["shown"])
    handed = [c for c in run["compress_calls"] if c["progress"]]
    assert handed and not [c for c in run["compress_calls"] if c["aborted"]]  # hand-offs, never "aborted"
    assert run["status"]["speccompact"]["last_compaction"].get("fallback") is True
    if mode != "down":  # the cooldown held back all but the first request (and its prepare)
        assert 1 <= len([b for b in run["service_bodies"] if b.get("mode") != "prepare"]) <= 2
    assert tool_pairs_ok(run["messages"]) and len(run["prompts"]) == FILES + 1
