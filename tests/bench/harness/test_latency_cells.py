"""The latency harness's cell loop: which runs it reuses.

Fakes stand in for the simulator and the runs, so this checks the loop's bookkeeping only.
"""

from __future__ import annotations

from argparse import Namespace
from types import SimpleNamespace

from bench.harness.latency import Cell, run_cell


class FakeWorkload:
    def __init__(self, lines, slots, p_accept, **kw):
        self.p_accept, self.acceptance = p_accept, p_accept

    def bind(self, model):
        return self


class FakeRunner:
    def __init__(self):
        self.synthetic, self.calls = {}, []

    def history_tokens(self, traj, count):
        return 8000

    def run(self, sim, case, traj, wl, tp2, tokens=None):
        self.calls.append((case["method"], wl.p_accept))
        return {"method": case["method"], "label": case["label"], "e2e_s": 1.0}


def cells(deployments):
    model = SimpleNamespace(encode=lambda text: text.split())
    sim = SimpleNamespace(servers={"target": SimpleNamespace(model=model), "drafter": SimpleNamespace(model=model)})
    args = Namespace(seeds=1, synthetic_tokens=[], seed=0, drafter_train_tokens=16384, acceptance_fall=0.1,
                     clustered=False, hermes_tokens=[1200], layouts=["classic"], scenario="cold",
                     config_dict={}, hermes_slots=False)
    traj = SimpleNamespace(name="h", path="h", messages=[{"role": "user", "content": "x"}])
    runner, done, rows = FakeRunner(), {}, []
    for dep in deployments:
        rows += run_cell(Cell("qwen3-8b:qwen3-0.6b", "eagle3", dep, 0.7), args, ["speccompact"], runner,
                         {"single": sim, "slot": sim}, [traj], [], {"target": "EAGLE3", "drafter": "none"}, done,
                         {}, lambda *a: None, FakeWorkload, None, None)
    return runner, rows


def test_one_gpu_never_reuses_a_two_gpu_speccompact_run():
    # before the fix, one-gpu after two-gpu(-equal) copied SpecCompact's two-gpu row (one run, not two)
    runner, rows = cells(["two-gpu", "two-gpu-equal", "one-gpu"])
    assert [m for m, _ in runner.calls] == ["speccompact", "speccompact"]  # two-gpu-equal reuses two-gpu
    assert [r.get("reused_from") for r in rows] == [None, "two-gpu p=0.7", None]

