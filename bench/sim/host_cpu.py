"""The host's CPU per compaction, from ``bench/host.py``'s fit (MEASURED (CPU), never a GPU figure).

``bench/host.py`` measures the compacting process's CPU seconds per
compaction (``time.process_time``, every thread) on this project's machine
and fits, per method, a line ``cpu_s = fixed_s + per_100k_s * tokens / 100K``
over the history's tokens (``host_cpu_fit`` in ``bench/results/host-*.json``).
The simulator adds it to a compaction's end-to-end (:meth:`Simulation.run
<bench.sim.simulator.Simulation.run>`'s ``host_cpu_s``): the client's work runs
before, between and after the device's passes in one Python process, so the
simulator charges it on the critical path, not overlapped with any pass.
That is an upper bound: part of it does overlap (one slot's thread builds a
body while another's request is in a pass), and the clock's own per-request
client cost (``CLIENT_S_PER_REQUEST`` and ``CLIENT_S_PER_TOKEN`` of
:mod:`sgl_speccompact.emulator.cost`) is part of what the fit measured too.

Which line a method takes:

* its own, when the file has one (``speccompact``, ``target_self``,
  ``hermes``, ``openclaw``);
* ``target_delta``, when the file has no line of its own, takes
  ``target_self``'s: it runs the same client code on the same shared prefix
  (``methods/target_delta.py`` calls Target-self's slot loop; without a
  previous summary it *is* Target-self).  With a previous summary its judging
  of the carried lines sends requests that line does not count: a lower bound
  there;
* SJC (``source_judge``) adds nothing: ``bench/host.py`` does not measure it;
* any other method is a :class:`HostCpuError` naming the method and the file.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from sgl_speccompact.errors import ConfigError

RESULTS = Path(__file__).resolve().parents[1] / "results"  # bench/results: the committed host-*.json
PATTERN = "host-*.json"  # bench/host.py's output name
COMMITTED = "committed"  # the switch's default: the newest committed host file
NONE = "none"  # the switch's value that leaves the host out
STAND_IN = {"target_delta": "target_self"}  # a method without a line of its own -> the line it takes (module doc)
TOKENS_PER_UNIT = 100_000  # the fit's per_100k_s is per this many history tokens


class HostCpuError(ConfigError):
    """A host CPU file is missing or malformed, or has no line for a method."""

    code = "host_cpu"


@dataclass(frozen=True)
class HostCpuModel:
    """The fitted host CPU per compaction of one ``bench/host.py`` run."""

    path: str  # the host JSON it was read from
    fit: dict  # method -> {"fixed_s", "per_100k_s"} (host_cpu_fit)
    conditions: dict  # that run's conditions (label, cpu_count, load averages, revisions)

    def line(self, method: str) -> str:
        """The fit's method whose line ``method`` takes (itself, or its stand-in); :class:`HostCpuError` if none."""
        if method in self.fit:
            return method
        if STAND_IN.get(method) in self.fit:
            return STAND_IN[method]
        raise HostCpuError(f"the host CPU file {self.path} has no line for method {method!r} "
                           f"(it has {', '.join(sorted(self.fit))})", field="host_cpu")

    def seconds(self, method: str, history_tokens: int) -> float:
        """Host CPU seconds of one compaction of ``history_tokens`` tokens with ``method`` (never below 0).

        >>> m = HostCpuModel("h.json", {"target_self": {"fixed_s": 0.05, "per_100k_s": 0.3}}, {})
        >>> m.seconds("target_self", 200_000), m.seconds("target_delta", 0)
        (0.65, 0.05)
        """
        f = self.fit[self.line(method)]
        return max(0.0, f["fixed_s"] + f["per_100k_s"] * history_tokens / TOKENS_PER_UNIT)

    @property
    def label(self) -> str:
        """What the figures say about it: measured on this machine's CPU, with that run's conditions."""
        c = self.conditions
        load = c.get("load_average_start")
        where = f"{c.get('cpu_count', '?')} CPUs" + (f", load {load[0]:.1f}" if load else "")
        return (f"host CPU {c.get('label', 'MEASURED (CPU)')} by bench/host.py on this machine's CPU ({where}; "
                f"{Path(self.path).name}), not a GPU figure")

    def describe(self) -> dict:
        """What a run's JSON records about the host CPU it added."""
        return {"path": _shown(self.path), "label": self.label, "fit": self.fit,
                "stand_in": {k: v for k, v in STAND_IN.items() if k not in self.fit}}


def newest(results: Path = RESULTS) -> Path:
    """The newest ``host-*.json`` under ``results`` (by its stamp); :class:`HostCpuError` if there is none."""
    found = sorted(results.glob(PATTERN))
    if not found:
        raise HostCpuError(f"no {PATTERN} under {results}: run `python -m bench.host` and commit it, or pass "
                           "--host-cpu none to leave the host's CPU out", field="host_cpu")
    return found[-1]


def load(path: str | Path | None = None) -> HostCpuModel:
    """The host CPU model of ``path`` (default: :func:`newest`); :class:`HostCpuError` if it is malformed."""
    path = Path(path) if path is not None else newest()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise HostCpuError(f"cannot read the host CPU file {path}: {exc}", field="host_cpu") from exc
    fit = data.get("host_cpu_fit") if isinstance(data, dict) else None
    if not isinstance(fit, dict) or not fit:
        raise HostCpuError(f"the host CPU file {path} has no host_cpu_fit", field="host_cpu")
    for method, line in fit.items():
        ok = isinstance(line, dict) and all(
            isinstance(line.get(k), (int, float)) and not isinstance(line.get(k), bool) and math.isfinite(line[k])
            for k in ("fixed_s", "per_100k_s"))
        if not ok:
            raise HostCpuError(f"the host CPU file {path}: host_cpu_fit[{method!r}] must hold finite numbers "
                               f"fixed_s and per_100k_s, not {line!r}", field="host_cpu")
    conditions = data.get("conditions") if isinstance(data.get("conditions"), dict) else {}
    if "GPU" in str(conditions.get("label", "")).upper():
        raise HostCpuError(f"the host CPU file {path} is labelled {conditions['label']!r}: a CPU measurement is "
                           "expected", field="host_cpu")
    return HostCpuModel(str(path), fit, conditions)


def resolve(choice: str | None) -> HostCpuModel | None:
    """The switch ``--host-cpu``: ``"none"`` (or None) -> no host CPU; ``"committed"`` -> :func:`newest`; a path."""
    if choice is None or choice == NONE:
        return None
    return load(None if choice == COMMITTED else choice)


def recorded(model: HostCpuModel | None) -> dict | None:
    """What a run's JSON records (None: the host's CPU left out)."""
    return None if model is None else model.describe()


def _shown(path: str) -> str:
    """``path`` relative to the repository when it is inside it (the same in every checkout)."""
    p, repo = Path(path).resolve(), RESULTS.parents[1]
    return str(p.relative_to(repo)) if p.is_relative_to(repo) else str(p)
