"""The host's CPU per compaction (bench/sim/host_cpu.py) and the simulator's end-to-end that adds it.

The host files here are made up (tests/support/host_cpu.py); simulated times are SIMULATED (virtual clock).
"""

from __future__ import annotations

import json

import pytest

from bench.sim import host_cpu
from bench.sim.host_cpu import HostCpuError, HostCpuModel
from sgl_speccompact.errors import ConfigError
from sgl_speccompact.methods.registry import run_method
from tests.support.host_cpu import FIT, write_host_json
from tests.support.programs import MESSAGES
from tests.support.sim import make_sim


def test_the_fit_is_read_and_applied(tmp_path):
    model = host_cpu.load(write_host_json(tmp_path / "host-1.json"))
    assert model.fit == FIT
    assert model.seconds("speccompact", 200_000) == pytest.approx(0.25 + 0.5 * 2)
    assert model.seconds("hermes", 50_000) == pytest.approx(0.04 + 0.2 * 0.5)
    assert model.seconds("target_self", 0) == pytest.approx(0.05)


def test_a_negative_intercept_never_gives_negative_seconds(tmp_path):
    model = host_cpu.load(write_host_json(tmp_path / "h.json", {"target_self": {"fixed_s": -0.2, "per_100k_s": 0.3}}))
    assert model.seconds("target_self", 10_000) == 0.0
    assert model.seconds("target_self", 100_000) == pytest.approx(0.1)


def test_target_delta_takes_target_selfs_line_only_when_it_has_none(tmp_path):
    model = host_cpu.load(write_host_json(tmp_path / "h.json"))
    assert model.line("target_delta") == "target_self"
    assert model.seconds("target_delta", 100_000) == model.seconds("target_self", 100_000)
    own = host_cpu.load(write_host_json(tmp_path / "g.json", {**FIT, "target_delta": {"fixed_s": 1.0,
                                                                                       "per_100k_s": 0.0}}))
    assert own.line("target_delta") == "target_delta" and own.seconds("target_delta", 100_000) == 1.0
    assert own.describe()["stand_in"] == {} and model.describe()["stand_in"] == {"target_delta": "target_self"}


def test_a_method_the_fit_lacks_names_the_method_and_the_file(tmp_path):
    path = write_host_json(tmp_path / "host-2.json", {"hermes": {"fixed_s": 0.0, "per_100k_s": 0.1}})
    model = host_cpu.load(path)
    with pytest.raises(HostCpuError) as err:
        model.seconds("speccompact", 1000)
    assert "speccompact" in str(err.value) and str(path) in str(err.value)
    with pytest.raises(HostCpuError, match="target_delta"):  # its stand-in is absent too
        model.seconds("target_delta", 1000)


@pytest.mark.parametrize("text", [
    "not json", json.dumps([1, 2]), json.dumps({"conditions": {}}), json.dumps({"host_cpu_fit": {}}),
    json.dumps({"host_cpu_fit": {"hermes": {"fixed_s": 0.1}}}),
    json.dumps({"host_cpu_fit": {"hermes": {"fixed_s": "0.1", "per_100k_s": 0.2}}}),
    json.dumps({"host_cpu_fit": {"hermes": {"fixed_s": True, "per_100k_s": 0.2}}}),
    '{"host_cpu_fit": {"hermes": {"fixed_s": NaN, "per_100k_s": 0.2}}}',
])
def test_a_malformed_file_raises_the_typed_error(tmp_path, text):
    path = tmp_path / "host-x.json"
    path.write_text(text)
    with pytest.raises(HostCpuError) as err:
        host_cpu.load(path)
    assert isinstance(err.value, ConfigError) and str(path) in str(err.value)


def test_a_missing_file_or_folder_raises_the_typed_error(tmp_path):
    with pytest.raises(HostCpuError):
        host_cpu.load(tmp_path / "absent.json")
    with pytest.raises(HostCpuError, match="--host-cpu none"):
        host_cpu.newest(tmp_path)


def test_a_gpu_label_is_refused(tmp_path):
    with pytest.raises(HostCpuError, match="CPU measurement"):
        host_cpu.load(write_host_json(tmp_path / "h.json", conditions={"label": "MEASURED (GPU)"}))


def test_newest_is_the_latest_stamp(tmp_path):
    for stamp in ("20261201T000000Z", "20261209T120000Z", "20261205T000000Z"):
        write_host_json(tmp_path / f"host-{stamp}.json")
    assert host_cpu.newest(tmp_path).name == "host-20261209T120000Z.json"


def test_the_label_says_measured_on_this_cpu_never_gpu(tmp_path):
    model = host_cpu.load(write_host_json(tmp_path / "host-3.json"))
    assert "MEASURED (CPU)" in model.label and "this machine's CPU" in model.label and "host-3.json" in model.label
    assert "2 CPUs" in model.label and "not a GPU figure" in model.label


def test_the_switch(tmp_path):
    path = write_host_json(tmp_path / "h.json")
    assert host_cpu.resolve("none") is None and host_cpu.resolve(None) is None
    assert host_cpu.recorded(None) is None
    got = host_cpu.resolve(str(path))
    assert isinstance(got, HostCpuModel) and host_cpu.recorded(got)["path"] == str(path)


def _compaction(sim, host_s):
    target, drafter = sim.endpoint("target"), sim.endpoint("drafter", lora_path="drafter")
    return sim.run(lambda: run_method("target_self", MESSAGES, target=target, drafter=drafter), host_cpu_s=host_s)[1]


def test_the_simulators_end_to_end_is_device_plus_host(emulator_tokenizer_path):
    sim = make_sim(emulator_tokenizer_path)
    alone = _compaction(sim, 0.0)  # none: device time only
    assert alone["e2e_s"] == alone["e2e_device_s"] > 0 and alone["host_cpu_s"] == 0.0
    charged = _compaction(sim, 0.75)
    assert charged["e2e_device_s"] == alone["e2e_device_s"]  # the clock does not move: the host comes after it
    assert charged["host_cpu_s"] == 0.75
    assert charged["e2e_s"] == pytest.approx(alone["e2e_device_s"] + 0.75)


def test_the_breakdown_counts_the_host_as_a_part(emulator_tokenizer_path):
    from bench.harness.latency_cases import breakdown

    sim = make_sim(emulator_tokenizer_path)
    report = _compaction(sim, 0.5)
    got = breakdown(report)
    assert got["parts"]["host_cpu"] == 0.5
    assert sum(got["parts"].values()) == pytest.approx(report["e2e_s"], abs=1e-9)
