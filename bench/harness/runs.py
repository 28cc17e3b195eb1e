"""What the benchmark scripts share: trajectories, servers, per-server numbers, JSON reports.

``bench/radix_cache.py``, ``bench/latency.py``, ``bench/retention.py`` and the
other scripts in ``bench/`` stay thin: they parse flags, call these, and print.
Nothing here is a measurement by itself.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TRAJECTORY_DIR = REPO.parent / "shared" / "data" / "trajectories"  # the shared public trajectories, beside the clone
RESULTS_DIR = REPO / "bench" / "results"
EMULATED_MODELS = {"target": "Qwen/Qwen3-8B", "drafter": "Qwen/Qwen3-0.6B"}  # model paths the emulators report
EMULATOR_LORA = "drafter"  # the adapter name the emulated drafter loads when none is given
FIELDS = ("requests", "prompt_tokens", "cached_tokens", "completion_tokens")  # cross-checked against the emulator


def log(msg: str, tag: str = "bench") -> None:
    """Progress line on stderr."""
    print(f"[{tag}] {msg}", file=sys.stderr, flush=True)


@dataclass
class Trajectory:
    """One conversation to compact."""

    path: str  # file it came from
    name: str  # short label for the table
    trial: int  # conversation index inside the file (tau2)
    messages: list  # OpenAI chat messages


def short_name(path: Path, width: int = 30) -> str:
    """The file name after its last ``__`` (the shared files embed owner/repo/path)."""
    name = path.name.rsplit("__", 1)[-1]
    return name if len(name) <= width else name[: width - 3] + "..."


def load_trajectories(paths: list[str] | None, trial: int, max_messages: int | None,
                      default_dir: Path = TRAJECTORY_DIR) -> tuple[list, list]:
    """Trajectories to run (``paths``, else every file in ``default_dir``), and ``(path, reason)`` for files that are not one."""
    from sgl_speccompact.errors import SpecCompactError
    from sgl_speccompact.history.formats import load_history

    if paths:
        files = [Path(p) for p in paths]
    else:
        if not default_dir.is_dir():
            raise SystemExit(f"no trajectories: {default_dir} is absent; pass --trajectories PATHS")
        files = sorted(p for p in default_dir.iterdir() if p.suffix in (".json", ".traj"))
    out, skipped = [], []
    for f in files:
        try:
            messages = load_history(f, trial=trial if _multi_trial(f) else 0)
        except SpecCompactError as exc:
            if paths:  # the user named it: a bad file is an error
                raise SystemExit(f"{f}: {exc}") from None
            skipped.append((str(f), str(exc)))
            log(f"skip {f.name}: {exc}")
            continue
        if max_messages:
            messages = messages[:max_messages]
        out.append(Trajectory(str(f), short_name(f), trial if _multi_trial(f) else 0, messages))
    return out, skipped


def _multi_trial(path: Path) -> bool:
    from sgl_speccompact.history.formats import list_trials

    try:
        return len(list_trials(path)) > 1
    except Exception:  # noqa: BLE001 - an unreadable file is not multi-trial; loading it reports why
        return False


@functools.cache
def loaded_tokenizer(path: str):
    """The tokenizer in ``path``, loaded once per process (it takes seconds; runs in one process share it)."""
    from sgl_speccompact.emulator.server import load_tokenizer

    return load_tokenizer(path)


def with_layout(messages: list, layout: str | None = None, chat_template=None):
    """``messages`` as a runner takes them: with a layout (``runner_kwargs``), a ``MethodRequest``.

    >>> with_layout([]) == [], with_layout([], "agent", "/tok").layout.chat_template
    (True, '/tok')
    """
    if layout is None and chat_template is None:
        return messages
    from sgl_speccompact.methods.request import AgentLayout, MethodRequest

    return MethodRequest(messages, layout=AgentLayout(layout, chat_template=chat_template))


def resolve_methods():
    """``(available methods, runner, where the runner comes from)``."""
    from sgl_speccompact.methods.registry import METHODS, run_method

    return tuple(METHODS), run_method, "sgl_speccompact.methods.registry.run_method"


class Server:
    """One SGLang (or emulated) server, reached over HTTP."""

    def __init__(self, role: str, url: str, api_key: str | None, timeout: float):
        import requests

        self.role, self.url, self.timeout = role, url.rstrip("/"), timeout
        self.http = requests.Session()
        if api_key:
            self.http.headers["Authorization"] = f"Bearer {api_key}"
        self.info = self._get("/server_info")
        self.emulated = bool(self.info.get("emulated"))

    def _get(self, path: str) -> dict:
        res = self.http.get(self.url + path, timeout=self.timeout)
        res.raise_for_status()
        return res.json()

    def flush(self) -> None:
        """``/flush_cache``; waits up to 30 s for running requests to end."""
        res = self.http.post(self.url + "/flush_cache", params={"timeout": 30}, timeout=self.timeout + 30)
        if res.status_code != 200:
            raise RuntimeError(f"{self.url}/flush_cache: HTTP {res.status_code}: {res.text.strip()}")

    def emulator_stats(self) -> dict | None:
        """Server-side counters (``/emulator/stats``); None on a real SGLang server."""
        return self._get("/emulator/stats") if self.emulated else None

    def describe(self) -> dict:
        keys = ("model_path", "version", "emulated", "emulator_policy", "simulated_cost_model",
                "emulator_radix_capacity_tokens", "max_prefill_tokens", "page_size", "disable_radix_cache")
        return {"url": self.url, **{k: self.info.get(k) for k in keys if k in self.info}}


def server_numbers(stats, server: str) -> dict:
    """Prompt/cached/computed tokens, requests by kind and hit ratio of one server."""
    t = stats.totals(server)
    kinds = {k: c.model_dump() for k, c in sorted(stats.requests.get(server, {}).items())}
    prefix = kinds.get("prefill", {})
    follow = t.requests - prefix.get("requests", 0)
    computed = t.prompt_tokens - t.cached_tokens
    prefix_computed = prefix.get("prompt_tokens", 0) - prefix.get("cached_tokens", 0)
    return {
        "requests": t.requests,
        "requests_by_kind": kinds,
        "prompt_tokens": t.prompt_tokens,
        "cached_tokens": t.cached_tokens,
        "computed_tokens": computed,
        "completion_tokens": t.completion_tokens,
        "cache_hit_ratio": t.cached_tokens / t.prompt_tokens if t.prompt_tokens else None,
        # uncached tokens per request after the shared-prefix prefill (the per-slot suffixes)
        "mean_uncached_suffix_tokens": (computed - prefix_computed) / follow if prefix and follow else None,
    }


FIELDS = ("requests", "prompt_tokens", "cached_tokens", "completion_tokens")


def crosscheck(numbers: dict, before: dict | None, after: dict | None) -> dict | None:
    """Client totals against the emulator's counters (the difference ``after - before``)."""
    if before is None or after is None:
        return None
    server = {k: after["total"][k] - before["total"][k] for k in FIELDS}
    client = {k: numbers[k] for k in FIELDS}
    return {"ok": server == client, "client": client, "server": server}


def write_json(report: dict, path: str | Path) -> Path:
    """Write the report as JSON to ``path``, atomically (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


