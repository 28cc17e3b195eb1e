"""Does the calibration probe see a GPU twice as slow on the wall clock? (MEASURED on this machine's CPU.)

The launcher's ``--calibrate`` times ``/generate`` calls on the wall clock and
fits the cost model's parameters (``sgl_speccompact/backends/calibration_probe.py``).
This script runs that probe against two timed SGLang-API emulators of one
model, the second at half the speed (each answer delayed by the cost model's
SIMULATED pass times, scaled by ``--time-scale``), and reports the ratio of
the two fits per decode pass, per KV token and in prefill: 2.0 is exact.

Method and conditions: the emulators run in this process, on this machine's
CPU; the probe plan and repeats are the test suite's; each speed is probed
once, one after the other.  The emulators' own CPU work adds to every answer,
about equally at both speeds, so load on the machine pulls the ratios
towards 1.  This is why the check is a report, not a gate: the test suite
checks the same probe and fit on the emulator's SIMULATED clock
(``tests/core/test_calibration.py``), which load does not touch.

Usage::

    python -m bench.calibration_speed                     # Qwen3-0.6B and Qwen3-8B, time scale 2 and 1
    python -m bench.calibration_speed --models qwen3-0.6b --out calibration-speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime

from sgl_speccompact.core.calibration import ProbeShape

# the probe plans of tests/core/test_calibration.py: prefill lengths the preset computes in compute-bound
# passes, decode at two lengths; the 8B's decode is weight-bound, the 0.6B's KV-bound
PLANS = {
    "qwen3-8b": (tuple(ProbeShape(1, c, 1, False) for c in (1024, 2048, 4096)) + tuple(
        ProbeShape(b, c, n, True) for b in (1, 8) for c in (512, 4096) for n in (8, 64)), 1.0, ("pass", "prefill")),
    "qwen3-0.6b": (tuple(ProbeShape(1, c, 1, False) for c in (2048, 4096, 8192)) + tuple(
        ProbeShape(b, c, n, True) for b in (1, 8) for c in (1024, 8192) for n in (8, 64)), 2.0, ("pass", "kv")),
}


def ratios(model: str, plan, time_scale: float, repeats: int) -> dict:
    """The slow fit over the fast one, per rate, timed on the wall clock."""
    import httpx

    from sgl_speccompact.backends.calibration_probe import calibrate
    from sgl_speccompact.emulator import EmulatedServer, ScriptedPolicy, default_tokenizer
    from sgl_speccompact.emulator.cost import CostModel

    tokenizer = default_tokenizer()[0]
    fits, took = {}, {}
    for speed in (1.0, 0.5):
        cm = CostModel.for_model(model, speed=speed, time_scale=time_scale)
        with EmulatedServer(tokenizer, policy=ScriptedPolicy(), cost_model=cm, model_path=f"Qwen/{model}") as srv:
            t0 = time.perf_counter()
            with httpx.Client(timeout=600) as client:
                fits[speed] = calibrate(client, srv.url, plan=plan, repeats=repeats, save=False)
            took[speed] = time.perf_counter() - t0
    slow, fast = fits[0.5], fits[1.0]
    return {"pass": slow.pass_s / fast.pass_s, "kv": slow.kv_s / fast.kv_s,
            "prefill": fast.flop_rate / slow.flop_rate, "probe_wall_s": took}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(PLANS), help="comma-separated: " + ", ".join(PLANS))
    p.add_argument("--repeats", type=int, default=2, help="calls per probe shape (the fastest is kept)")
    p.add_argument("--quick", action="store_true", help="one call per shape (a smoke run)")
    p.add_argument("--out", help="write the report here as JSON")
    args = p.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in PLANS]
    if unknown:
        p.error(f"unknown model {unknown[0]!r}; one of {', '.join(PLANS)}")
    print(f"MEASURED (CPU): the calibration probe's fits of a 2x slower emulated GPU, wall clock, "
          f"this machine ({os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}); 2.0 is exact")
    rows = []
    for model in models:
        plan, time_scale, rates = PLANS[model]
        got = ratios(model, plan, time_scale, 1 if args.quick else args.repeats)
        rows.append({"model": model, "time_scale": time_scale, "checked_rates": list(rates), **got})
        shown = ", ".join(f"{r} {got[r]:.2f}" for r in rates)
        print(f"  {model:11s} time scale {time_scale:g}: {shown}  (probes took "
              f"{got['probe_wall_s'][1.0]:.0f} s and {got['probe_wall_s'][0.5]:.0f} s)")
    if args.out:
        report = {"benchmark": "calibration_speed", "label": "MEASURED (CPU)",
                  "timestamp": datetime.now(UTC).isoformat(), "load_average": os.getloadavg()[0],
                  "method": __doc__.split("Method and conditions:")[1].split("Usage")[0].strip(), "rows": rows}
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
