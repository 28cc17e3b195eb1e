"""Three ``torch.ops.sgl_kernel`` ops for SGLang's CPU engine, in plain PyTorch.

SGLang 0.5.23's CPU engine calls these ops; the CUDA builds of its kernel
library on PyPI do not register them, and ``sgl_kernel`` falls back to
``import common_ops``.  Each is written from its contract, as its Python
callers and the GPU kernel they replace use it:

``assign_req_to_token_pool_cpu``
    For request ``i``: ``req_to_token[req_pool_indices[i], start[i]:end[i]]``
    takes the next ``end[i] - start[i]`` entries of ``out_cache_loc``
    (the requests' new slots, concatenated in batch order).
``assign_extend_cache_locs_cpu``
    The reverse gather: those entries of ``req_to_token`` are written,
    concatenated in batch order, into ``out_cache_loc``.
``copy_all_layer_kv_cache_cpu``
    ``data_ptrs[b]`` is the base address of buffer ``b`` and ``strides[b]``
    its row size in bytes; every row ``src_loc[j]`` is copied to
    ``tgt_loc[j]``, reading all rows before writing any (in-place safe).

Only this module's import registers them (a ``torch.library`` fragment of
the ``sgl_kernel`` namespace); nothing of SGLang is changed.
"""

from __future__ import annotations

import ctypes

import torch

_LIB = torch.library.Library("sgl_kernel", "FRAGMENT")  # held for the process: dropping it unregisters


def _segments(start: torch.Tensor, end: torch.Tensor):
    """``(batch index, start, end, offset into the concatenated slots)`` per request.

    >>> list(_segments(torch.tensor([0, 5]), torch.tensor([2, 8])))
    [(0, 0, 2, 0), (1, 5, 8, 2)]
    """
    offset = 0
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist())):
        yield i, s, e, offset
        offset += e - s


def assign_req_to_token_pool(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                             start_offset: torch.Tensor, end_offset: torch.Tensor,
                             out_cache_loc: torch.Tensor, pool_len: int) -> None:
    """Scatter new cache slots into each request's row of the token pool.

    >>> pool = torch.zeros(2, 4, dtype=torch.int32)
    >>> assign_req_to_token_pool(torch.tensor([1, 0]), pool, torch.tensor([1, 0]),
    ...                          torch.tensor([3, 1]), torch.tensor([7, 8, 9]), 4)
    >>> pool.tolist()
    [[9, 0, 0, 0], [0, 7, 8, 0]]
    """
    rows = req_pool_indices.tolist()
    for i, s, e, off in _segments(start_offset, end_offset):
        if e > s:
            req_to_token[rows[i], s:e] = out_cache_loc[off:off + e - s].to(req_to_token.dtype)


def assign_extend_cache_locs(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                             start_offset: torch.Tensor, end_offset: torch.Tensor,
                             out_cache_loc: torch.Tensor, pool_len: int) -> None:
    """Gather each request's slots from the token pool, concatenated in batch order.

    >>> pool = torch.tensor([[9, 0, 0, 0], [0, 7, 8, 0]])
    >>> out = torch.zeros(3, dtype=torch.int64)
    >>> assign_extend_cache_locs(torch.tensor([1, 0]), pool, torch.tensor([1, 0]),
    ...                          torch.tensor([3, 1]), out, 4)
    >>> out.tolist()
    [7, 8, 9]
    """
    rows = req_pool_indices.tolist()
    for i, s, e, off in _segments(start_offset, end_offset):
        if e > s:
            out_cache_loc[off:off + e - s] = req_to_token[rows[i], s:e].to(out_cache_loc.dtype)


def copy_all_layer_kv_cache(data_ptrs: torch.Tensor, strides: torch.Tensor,
                            tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> None:
    """Copy rows ``src_loc`` to ``tgt_loc`` in every buffer named by address.

    >>> buf = torch.arange(6, dtype=torch.int16).reshape(3, 2)
    >>> copy_all_layer_kv_cache(torch.tensor([buf.data_ptr()]), torch.tensor([4]),
    ...                         torch.tensor([2, 0]), torch.tensor([0, 2]))
    >>> buf.tolist()
    [[4, 5], [2, 3], [0, 1]]
    """
    tgt, src = tgt_loc.tolist(), src_loc.tolist()
    for base, stride in zip(data_ptrs.tolist(), strides.tolist()):
        rows = [ctypes.string_at(base + r * stride, stride) for r in src]
        for r, data in zip(tgt, rows):
            ctypes.memmove(base + r * stride, data, stride)


_SCHEMAS = {
    "assign_req_to_token_pool_cpu": (
        "(Tensor req_pool_indices, Tensor(a!) req_to_token, Tensor start_offset, Tensor end_offset, "
        "Tensor out_cache_loc, int pool_len) -> ()", assign_req_to_token_pool),
    "assign_extend_cache_locs_cpu": (
        "(Tensor req_pool_indices, Tensor req_to_token, Tensor start_offset, Tensor end_offset, "
        "Tensor(a!) out_cache_loc, int pool_len) -> ()", assign_extend_cache_locs),
    "copy_all_layer_kv_cache_cpu": (
        "(Tensor data_ptrs, Tensor strides, Tensor tgt_loc, Tensor src_loc) -> ()", copy_all_layer_kv_cache),
}


def _register() -> None:
    for name, (schema, fn) in _SCHEMAS.items():
        if hasattr(torch.ops.sgl_kernel, name):  # a kernel build that has it wins
            continue
        _LIB.define(name + schema)
        _LIB.impl(name, fn, "CPU")


_register()
