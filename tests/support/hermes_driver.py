"""Runs inside a hermes-agent 0.19.0 virtual environment (see tests/integrations/test_hermes_e2e.py).

``python hermes_driver.py CONFIG.json``: with ``HERMES_HOME`` from the config,
discovers plugins with Hermes's own plugin manager, then for each phase
points the registered engine at that phase's service URL and runs a real
``AIAgent`` for two user turns against the fake LLM.  Each turn's first
reply is a tool call whose usage is over the compaction threshold, so Hermes
compacts before its next request.  With ``config["loop"]`` it instead runs
one user request that the fake LLM turns into a long ``read_file`` loop
(Hermes's real file tool, on files in ``loop["workdir"]``), with whichever
context engine the config selects, and records every ``compress`` call.
Writes what it saw as JSON to ``config["out"]``.
"""

import copy
import json
import logging
import os
import sys
from dataclasses import replace


class Records(logging.Handler):
    """Warnings logged while the driver runs (Hermes's and the plugin's)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        self.lines.append(f"{record.name}: {record.getMessage()}")


def main() -> None:
    cfg = json.load(open(sys.argv[1]))
    os.environ["HERMES_HOME"] = cfg["hermes_home"]
    records = Records()
    logging.getLogger().addHandler(records)

    from hermes_cli.plugins import discover_plugins, get_plugin_context_engine

    discover_plugins(force=True)
    proto = get_plugin_context_engine()
    out = {"registered": type(proto).__name__ if proto is not None else None,
           "engine_module": type(proto).__module__ if proto is not None else None, "phases": []}
    if proto is None:
        json.dump(out, open(cfg["out"], "w"))
        return
    from run_agent import AIAgent

    if cfg.get("loop"):
        out["loop"] = run_loop(AIAgent, cfg["llm_url"], cfg["loop"], proto)
        out["loop"]["warnings"] = list(records.lines)
        json.dump(out, open(cfg["out"], "w"), default=str)
        return
    for phase in cfg["phases"]:
        proto.settings = replace(proto.settings, url=phase["url"], timeout_s=phase["timeout_s"],
                                 method=phase.get("method", proto.settings.method))
        records.lines.clear()
        agent = AIAgent(base_url=cfg["llm_url"] + "/v1", api_key="x", provider="custom", model="fake-model",
                        quiet_mode=True, enabled_toolsets=["todo"], skip_context_files=True, skip_memory=True)
        engine = agent.context_compressor
        history = copy.deepcopy(cfg["history"])
        first = agent.run_conversation(f"PHASE {phase['name']}: carry on with the task", conversation_history=history)
        status_1 = engine.get_status()
        second = agent.run_conversation(f"PHASE {phase['name']}: one more thing",
                                        conversation_history=first.get("messages"))
        out["phases"].append({
            "name": phase["name"], "engine_type": type(engine).__name__, "engine_is_copy": engine is not proto,
            "history_sent": history, "messages_1": first.get("messages"), "messages_2": second.get("messages"),
            "status_1": status_1, "status_2": engine.get_status(), "warnings": list(records.lines),
        })
    json.dump(out, open(cfg["out"], "w"), default=str)


def run_loop(agent_cls, llm_url: str, loop: dict, proto) -> dict:
    """One user request, many tool calls; every compress() call recorded (aborted, progress, sizes)."""
    os.chdir(loop["workdir"])
    if proto is not None and loop.get("url"):
        proto.settings = replace(proto.settings, url=loop["url"], timeout_s=loop.get("timeout_s", 300))
    agent = agent_cls(base_url=llm_url + "/v1", api_key="x", provider="custom", model="fake-model", quiet_mode=True,
                      enabled_toolsets=["file"], skip_context_files=True, skip_memory=True, max_iterations=200)
    engine, calls, shown = agent.context_compressor, [], []
    compress = engine.compress

    def recorded(messages, *args, **kwargs):
        result = compress(messages, *args, **kwargs)
        calls.append({"before": len(messages), "after": len(result), "changed": result != messages,
                      "aborted": bool(getattr(engine, "_last_compress_aborted", False)),
                      "error": getattr(engine, "_last_summary_error", None),
                      "progress": bool(getattr(engine, "_last_compression_made_progress", False))})
        return result

    engine.compress = recorded
    agent._emit_warning = shown.append  # what the user would see ("Compression aborted: ...")
    result = agent.run_conversation(loop["request"])
    return {"engine_type": type(engine).__name__, "threshold_tokens": engine.threshold_tokens,
            "context_length": engine.context_length, "compress_calls": calls, "shown": shown,
            "final": (result.get("final_response") or "")[:200], "messages": result.get("messages"),
            "failed": bool(result.get("failed")), "completed": result.get("completed"),
            "status": engine.get_status()}


if __name__ == "__main__":
    main()
