"""HTTP routes of the emulator: SGLang 0.5.23's native API.

Routes and response shapes follow ``sglang/srt/entrypoints/http_server.py``:

* ``POST|PUT /generate``: a dict (single) or a list (batch); with
  ``stream`` an SSE stream of ``data: {...}`` lines (cumulative ``text``,
  batch chunks carry ``index``) ending with ``data: [DONE]``.  Validation
  errors from the tokenizer-manager stage arrive inside a stream as a
  ``data: {"error": ...}`` event, as the server sends them.
* ``POST /v1/chat/completions``: the chat template renders the messages
  and tools into prompt ids that run like a ``/generate`` request, on the
  same radix tree (:mod:`.chat`).
* ``POST /v1/decisions``: sglang's decision route, its questions scored as
  one prefill-only batch on the same engine (:mod:`.decisions`).
* ``POST /tokenize``, ``/v1/tokenize``: ``TokenizeResponse``.
* ``GET /v1/models``: a ``ModelList`` with the served model (``max_model_len``
  is the context window) and one card per loaded adapter;
  ``GET /v1/models/{model}``: its ``ModelCard``, or sglang's 404.
* ``GET /get_model_info``, ``/model_info``, ``/server_info``,
  ``/get_server_info``, ``/health``, ``/health_generate``.
* ``GET|POST /flush_cache``: plain text; HTTP 400 while requests run.
* ``POST /abort_request``: ``AbortReq`` (``rid``, ``abort_all``; sglang's own
  schema, unknown keys ignored), an empty 200; the scheduler's semantics
  (:meth:`~.scheduler.Scheduler.abort`): the aborted ``/generate`` answers 200
  with an ``abort`` finish reason; a bad body is a 400 ``ErrorResponse``.
* ``GET|POST /open_session``, ``/close_session``: sglang's sessions
  (:mod:`.session_tree`): the open one's id as a JSON string, an empty 200;
  a refusal is HTTP 400 ``{"error": {"message": ...}}``, a bad body a 400
  ``ErrorResponse``.  ``/generate`` bodies with ``session_params`` continue them.
* ``GET /v1/loads`` (``dp_rank``, ``include`` as sglang's): one rank's
  ``LoadSnapshot.to_dict`` (sglang's own class) with the running and waiting
  requests counted; the other scalars are 0 and no section is reported.

Emulator-only: ``GET /emulator/stats`` (with ``sessions``: open sessions and
their nodes) and ``POST /emulator/reset_stats``.
"""

from __future__ import annotations

import asyncio
import time
from http import HTTPStatus

import orjson
from fastapi import FastAPI, Query, Request
from fastapi.responses import Response, StreamingResponse

from . import decisions
from .chat import chat_response, generate_body, parse_chat
from .engine import Engine
from .frontend import BadRequest, Frontend, ServedModel, error_response, parse_generate
from .session_tree import UnknownSessionParam

ORJSON_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY  # SGLang's json_response options
FLUSH_OK = (
    "Cache flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)


def json_response(content, status: int = 200) -> Response:
    """``SGLangORJSONResponse``."""
    return Response(orjson.dumps(content, option=ORJSON_OPTS), status, media_type="application/json")


def create_app(engine: Engine, frontend: Frontend, served: ServedModel, info: dict) -> FastAPI:
    """Build the FastAPI app.

    Parameters
    ----------
    engine, frontend
        Scheduler and admission.
    served
        Model identity for ``/model_info``.
    info
        Extra ``/server_info`` fields (configuration, cost model).
    """
    app = FastAPI(title="SGLang API emulator")
    started = time.time()

    @app.api_route("/generate", methods=["POST", "PUT"])
    async def generate(request: Request):
        try:
            body = orjson.loads(await request.body())
            obj = parse_generate(body)
        except orjson.JSONDecodeError as exc:
            return json_response(error_response(f"JSON decode error: {exc}"), 400)
        except BadRequest as exc:
            return json_response(exc.body, 400)
        try:
            return await _serve(engine, frontend, obj)
        except UnknownSessionParam:  # an unhandled TypeError in the server: starlette's plain 500
            return Response("Internal Server Error", 500, media_type="text/plain")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        try:
            body = orjson.loads(await request.body())
            req = parse_chat(body)
            obj = parse_generate(generate_body(req, body, frontend.model.tokenizer))
        except orjson.JSONDecodeError as exc:
            return json_response(error_response(f"JSON decode error: {exc}"), 400)
        except BadRequest as exc:
            return json_response(exc.body, 400)
        res = await _serve(engine, frontend, obj)
        if res.status_code != 200:
            return res
        return json_response(chat_response(orjson.loads(res.body), req.model or served.served_model_name))

    @app.post("/v1/decisions")
    async def v1_decisions(request: Request):
        try:
            req = decisions.parse(orjson.loads(await request.body()), frontend.model.tokenizer)
            encoded = decisions.encode(req, frontend.model.tokenizer, served.context_length)
            obj = parse_generate(decisions.scoring_body(encoded))
        except orjson.JSONDecodeError as exc:
            return json_response(error_response(f"JSON decode error: {exc}"), 400)
        except BadRequest as exc:
            return json_response(exc.body, 400)
        def tell_labels(jobs):  # the policy answers in the question's own labels
            for job, (_, label_ids, _) in zip(jobs, encoded):
                job.labels = tuple(label_ids)

        results = await _run(engine, frontend, obj, tell_labels)
        if not isinstance(results, list):
            return results
        return json_response(decisions.response(req, encoded, results))

    @app.post("/tokenize")
    @app.post("/v1/tokenize")
    async def tokenize(request: Request):
        return _tokenize(frontend, served, request, await request.body())

    @app.get("/v1/models")
    async def models():
        return json_response(_model_list(served))

    @app.get("/v1/models/{model:path}")
    async def model_card(model: str):
        if model != served.served_model_name:
            return json_response({"error": {"message": f"The model '{model}' does not exist",
                                            "type": "invalid_request_error", "param": "model",
                                            "code": "model_not_found"}}, 404)
        return json_response(_model_list(served)["data"][0])

    @app.get("/get_model_info")
    @app.get("/model_info")
    async def model_info():
        return json_response(_model_info(served))

    @app.get("/get_server_info")
    @app.get("/server_info")
    async def server_info():
        return json_response({
            **info,
            "startup_time": started,
            "internal_states": [{"emulated": True, **engine.stats()}],
            "version": _sglang_version(),
            "frontend": "python",
        })

    @app.get("/health")
    @app.get("/health_generate")
    async def health():
        return Response(status_code=200)

    @app.api_route("/flush_cache", methods=["GET", "POST"])
    async def flush_cache(timeout: float = Query(0.0, ge=0.0)):
        deadline = time.monotonic() + timeout
        while timeout > 0 and not engine.idle() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # the scheduler's deferred flush
        ok = engine.flush()
        message = FLUSH_OK if ok else "Flush cache failed.\n"
        return Response(content=message, status_code=200 if ok else HTTPStatus.BAD_REQUEST)

    @app.post("/abort_request")
    async def abort_request(request: Request):
        from pydantic import TypeAdapter, ValidationError
        from sglang.srt.managers.io_struct import AbortReq

        try:
            obj = TypeAdapter(AbortReq).validate_python(orjson.loads(await request.body()))
        except (orjson.JSONDecodeError, ValidationError) as exc:  # the server's 422 -> 400 ErrorResponse
            return json_response(error_response(str(exc)), 400)
        engine.abort(obj.rid or "", obj.abort_all)
        return Response(status_code=200)

    @app.api_route("/open_session", methods=["GET", "POST"])
    async def open_session(request: Request):
        from sglang.srt.managers.io_struct import OpenSessionReqInput

        obj = _validated(OpenSessionReqInput, await request.body())
        if isinstance(obj, Response):
            return obj
        try:
            sid = frontend.sessions.open(obj.capacity_of_str_len, obj.session_id, obj.streaming, obj.timeout)
        except ValueError as exc:  # _create_error_response
            return json_response({"error": {"message": str(exc)}}, 400)
        return json_response(sid)

    @app.api_route("/close_session", methods=["GET", "POST"])
    async def close_session(request: Request):
        from sglang.srt.managers.io_struct import CloseSessionReqInput

        obj = _validated(CloseSessionReqInput, await request.body())
        if isinstance(obj, Response):
            return obj
        frontend.sessions.close(obj.session_id)
        return Response(status_code=200)

    @app.get("/v1/loads")
    async def loads(dp_rank: int | None = None, include: str | None = None):
        return _loads(engine, dp_rank, include)

    @app.get("/emulator/stats")
    async def stats():
        return json_response({**engine.stats(), "sessions": frontend.sessions.stats()})

    @app.post("/emulator/reset_stats")
    async def reset_stats():
        engine.reset_stats()
        return json_response({"success": True})

    return app


def _validated(cls, raw: bytes):
    """``raw`` parsed as sglang's request class ``cls`` (FastAPI's ``Body()``), or the server's 400."""
    from pydantic import TypeAdapter, ValidationError

    try:
        return TypeAdapter(cls).validate_python(orjson.loads(raw))
    except (orjson.JSONDecodeError, ValidationError) as exc:  # the server's 422 -> 400 ErrorResponse
        return json_response(error_response(str(exc)), 400)


async def _serve(engine: Engine, frontend: Frontend, obj):
    """Admit ``obj``, run its jobs, answer like ``serve_generate_request``."""
    if obj.stream:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        try:
            jobs, single = frontend.jobs(obj, lambda i: lambda out, done: loop.call_soon_threadsafe(
                queue.put_nowait, (i, out, done)))
        except ValueError as exc:
            return _sse([_stream_error(exc)])
        engine.submit(jobs)
        return _sse(_stream(queue, len(jobs), single))
    results = await _run(engine, frontend, obj)
    if not isinstance(results, list):
        return results
    return json_response(results[0] if obj.is_single else results)


async def _run(engine: Engine, frontend: Frontend, obj, prepare=None):
    """Admit ``obj``, run its jobs to the end (``prepare(jobs)`` first); their outputs in order, or the
    error response."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    def sink(index: int):
        return lambda out, done: loop.call_soon_threadsafe(queue.put_nowait, (index, out, done))

    try:
        jobs, _ = frontend.jobs(obj, sink)
    except ValueError as exc:
        return json_response({"error": {"message": str(exc)}}, 400)
    if prepare is not None:
        prepare(jobs)
    engine.submit(jobs)
    results: list = [None] * len(jobs)
    for _ in jobs:
        while True:
            index, out, done = await queue.get()
            if done:
                results[index] = out
                break
    abort = _abort(results)
    return abort if abort is not None else results


def _abort(results: list) -> Response | None:
    """``_handle_abort_finish_reason`` for a non-streaming request."""
    for out in results:
        reason = out["meta_info"]["finish_reason"] or {}
        code = reason.get("status_code")
        if reason.get("type") == "abort" and code is not None and 400 <= code < 600:
            if code == 400:
                return json_response({"error": {"message": reason["message"]}}, 400)
            return json_response(error_response(reason["message"], code, str(code)), code)
    return None


async def _stream(queue: asyncio.Queue, n_jobs: int, single: bool):
    """SSE chunks until every job has finished."""
    finished = 0
    while finished < n_jobs:
        index, out, done = await queue.get()
        finished += done
        if not single:
            out = {**out, "index": index}
        yield out


def _stream_error(exc: Exception) -> dict:
    return {"error": {"message": str(exc), "type": "invalid_request_error",
                      "code": getattr(exc, "status_code", 400), "retryable": False}}


def _sse(chunks) -> StreamingResponse:
    async def body():
        if hasattr(chunks, "__aiter__"):
            async for chunk in chunks:
                yield b"data: " + orjson.dumps(chunk, option=ORJSON_OPTS) + b"\n\n"
        else:
            for chunk in chunks:
                yield b"data: " + orjson.dumps(chunk, option=ORJSON_OPTS) + b"\n\n"
        yield b"data: [DONE]\n\n"

    return StreamingResponse(body(), media_type="text/event-stream")


def _loads(engine: Engine, dp_rank: int | None, include: str | None) -> Response:
    """``GET /v1/loads`` as ``sglang/srt/entrypoints/v1_loads.py`` answers it (JSON format), one DP rank."""
    from datetime import datetime, timezone

    from sglang.srt.managers.load_snapshot import LoadSnapshot

    wanted = {s.strip() for s in include.split(",")} if include else None
    snapshot = LoadSnapshot(timestamp=time.time(), dp_rank=0, **engine.loads())
    try:
        loads = [snapshot.to_dict(wanted)] if dp_rank in (None, 0) else []
    except ValueError as exc:  # an unknown section: HTTPException(400, detail)
        return json_response({"detail": str(exc)}, 400)
    # accelerator: sglang's device name, None on a CPU server (no device here either)
    return json_response({"timestamp": datetime.now(timezone.utc).isoformat(), "version": _sglang_version(),
                          "accelerator": None, "num_accelerators": 1, "loads": loads})


def _tokenize(frontend: Frontend, served: ServedModel, request: Request, raw: bytes) -> Response:
    """``OpenAIServingTokenize`` for ``prompt`` (str or list of str)."""
    from sglang.srt.entrypoints.openai.protocol import TokenizeRequest, TokenizeResponse

    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        msg = "Unsupported Media Type: Only 'application/json' is allowed"
        return json_response(error_response(msg), 400)
    try:
        req = TokenizeRequest.model_validate(orjson.loads(raw))
    except ValueError as exc:  # bad JSON (orjson.JSONDecodeError) or a bad field (pydantic.ValidationError)
        return json_response(error_response(str(exc)), 400)
    model, tok = frontend.model, frontend.model.tokenizer
    if isinstance(req.prompt, str):
        tokens = model.encode(req.prompt, add_special_tokens=req.add_special_tokens)
        count = len(tokens)
    elif isinstance(req.prompt, list):
        tokens = [model.encode(p, add_special_tokens=req.add_special_tokens) for p in req.prompt]
        count = [len(t) for t in tokens]
    else:
        msg = f"Invalid prompt type: {type(req.prompt)}. Expected str or List[str]."
        return json_response(error_response(msg, 400, "BadRequestError"), 400)
    max_len = getattr(tok, "model_max_length", served.context_length)
    if not isinstance(max_len, int) or not -(2**63) <= max_len < 2**64:
        max_len = served.context_length
    out = TokenizeResponse(tokens=tokens, count=count, max_model_len=max_len)
    return json_response(out.model_dump())


def _model_list(served: ServedModel) -> dict:
    """``available_models``: the base model's card, then each adapter's (``root`` is its name here)."""
    from sglang.srt.entrypoints.openai.protocol import ModelCard, ModelList

    name = served.served_model_name
    cards = [ModelCard(id=name, root=name, max_model_len=served.context_length)]
    cards += [ModelCard(id=a, root=a, parent=name, max_model_len=None) for a in served.lora_paths or ()]
    return ModelList(data=cards).model_dump()


def _model_info(served: ServedModel) -> dict:
    return {
        "model_path": served.model_path,
        "served_model_name": served.served_model_name,
        "tokenizer_path": served.tokenizer_path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "load_format": "auto",
        "reasoning_parser": None,
        "tool_call_parser": None,
        "disaggregation_mode": "null",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "emulated": True,
    }


def _sglang_version() -> str:
    from sglang.version import __version__

    return __version__
