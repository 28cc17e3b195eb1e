"""Server-Sent Events of one compaction: its progress events, then its result or one error event.

A stream ends cleanly in every case: after ``result`` and ``[DONE]``; after
one ``error`` event when the compaction fails; after an ``error`` event with
``service_stopping`` (status 503) when the service stops, before
sse-starlette's grace period cuts it.  When the client leaves, the
compaction is cancelled and sends no further upstream request.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Awaitable, Callable

import anyio
from sse_starlette.sse import EventSourceResponse

from ..errors import SpecCompactError, http_status

SSE_PING_S = 15  # keep-alive comment interval on event streams (seconds)
# once shutdown starts, how long an event stream may take to send its service_stopping event and end
# before sse-starlette cuts it; below launch.run.SHUTDOWN_GRACE_S, uvicorn's own drain limit (seconds)
SSE_STOP_GRACE_S = 2.0


def error_body(err: SpecCompactError) -> dict:
    """``{"error": {...}}`` for a typed error."""
    return {"error": err.to_dict()}


def error_status(err: SpecCompactError) -> int:
    """HTTP status of a typed error."""
    return http_status(err)


def sse_event(data: dict, kind: str | None = None) -> dict:
    """One SSE event (encoded by sse-starlette with the response's separator).

    >>> sse_event({"type": "line", "text": "- a"})
    {'event': 'line', 'data': '{"type": "line", "text": "- a"}'}
    """
    return {"event": kind or str(data.get("type", "event")), "data": json.dumps(data, ensure_ascii=False)}


def stream_response(start: Callable[[Any, Callable[[dict], None]], Any], scrub: Callable[[dict], dict],
                    resolve: Callable[[], Awaitable[tuple]]) -> EventSourceResponse:
    """The event stream of the compaction ``start(request, on_event)`` starts.

    ``resolve()`` runs first, inside the stream (keep-alive pings go out
    while it waits for a prepare): it gives the request to run, the
    ahead-of-time session entry added to the result (or None) and a stored
    result covering every message (sent at once) or None; a typed error it
    raises becomes the stream's ``error`` event.  ``scrub`` removes upstream
    details from an error body.
    """
    stopping = anyio.Event()  # set by sse-starlette when the server begins to stop
    return EventSourceResponse(events(start, scrub, stopping, resolve), ping=SSE_PING_S, sep="\n",
                               headers={"Cache-Control": "no-cache"}, shutdown_event=stopping,
                               shutdown_grace_period=SSE_STOP_GRACE_S)


async def events(start, scrub, stopping: anyio.Event, resolve):
    """The events of :func:`stream_response`, as an async generator."""
    try:
        req, info, ready = await resolve()
    except SpecCompactError as err:
        yield sse_event({**scrub(error_body(err)), "status": error_status(err)}, "error")
        return
    if ready is not None:  # a stored result covers every message
        yield sse_event({**ready.to_json_dict(), "session": info}, "result")
        yield {"data": "[DONE]"}
        return
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    def on_event(event: dict) -> None:  # called from the runner's worker threads
        loop.call_soon_threadsafe(queue.put_nowait, dict(event))

    task = start(req, on_event)
    stop = asyncio.ensure_future(stopping.wait())
    done = asyncio.ensure_future(task.wait(None))
    getter = None
    try:
        while True:
            getter = asyncio.ensure_future(queue.get())
            waiting = {getter, done} if stop.done() else {getter, done, stop}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if stop.done():  # the service is stopping: `done` answers service_stopping within a poll
                task.scope.cancel("shutdown")
            if getter.done():
                yield sse_event(getter.result())
                continue
            getter.cancel()
            if not done.done():
                continue
            while not queue.empty():  # events sent before the result
                yield sse_event(queue.get_nowait())
            try:
                result = done.result()
            except SpecCompactError as err:
                yield sse_event({**scrub(error_body(err)), "status": error_status(err)}, "error")
                return
            out = result.to_json_dict()
            yield sse_event(out if info is None else {**out, "session": info}, "result")
            yield {"data": "[DONE]"}
            return
    finally:
        # nobody reads these any more: cancelled, so a left client's cancel is not an error never retrieved
        for waiter in (stop, done, getter):
            if waiter is not None:
                waiter.cancel()
        task.scope.cancel("cancelled")  # the client left (or the stream ended): stop the work, abort its requests
