"""Runs inside a hermes-agent 0.19.0 virtual environment (see test_hermes_e2e.py).

``python hermes_driver.py CONFIG.json``: with ``HERMES_HOME`` from the config,
discovers plugins with Hermes's own plugin manager, then for each phase
points the registered engine at that phase's service URL and runs a real
``AIAgent`` for two user turns against the fake LLM.  Each turn's first
reply is a tool call whose usage is over the compaction threshold, so Hermes
compacts before its next request.  Writes what it saw as JSON to
``config["out"]``.
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


if __name__ == "__main__":
    main()
