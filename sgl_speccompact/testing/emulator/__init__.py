"""The SGLang-API emulator: SGLang 0.5.23's native HTTP API on a CPU, with a scripted model.

``server``/``api``/``engine`` serve HTTP, ``scheduler``/``jobs``/``steps``/
``response`` batch and finish requests as sglang does, ``radix`` is the radix
tree over real token ids, ``tokenizer``/``qwen3`` the tokenizers, ``model``/
``policy``/``evaluator`` the scripted "model", ``chat``/``frontend`` the chat
and generate front ends, ``cost`` the SIMULATED H200 cost model.

May import: the product (never the reverse).  Must not import:
``testing.sim``, which builds on this package.
"""
