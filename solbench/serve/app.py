"""The HTTP JSON API (aiohttp): submit, poll, stream, cancel, health. Every route but none answers 401
without the service's token (where it has one); a bad request gets 400 naming its fields.

    POST /v1/submissions                    {problem, solution, workloads, options} -> 202 {id, ...}
    GET  /v1/submissions/{id}?since=N       the submission's state and its traces from the N-th on
    GET  /v1/submissions/{id}/traces        the traces as JSON lines, streamed (chunked) until it ends
    POST /v1/submissions/{id}/cancel        cancel (queued: dropped; running: its workers killed)
    GET  /v1/health                         devices, queue, the lanes' worker processes
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from aiohttp import web

from solbench import __version__
from solbench.serve.auth import authorised
from solbench.serve.requests import BadRequest, parse_submit
from solbench.serve.submissions import FINAL_STATES, Submission

if TYPE_CHECKING:  # service.py imports this module to serve it
    from solbench.serve.service import Service

MAX_BODY_BYTES = 64 << 20  # a problem sent by content with its workloads, a solution's sources
STREAM_POLL_S = 0.1
SERVICE: web.AppKey[Service] = web.AppKey("service")


def error(status: int, message: str, fields: list[str] | None = None) -> web.Response:
    return web.json_response({"error": message, "fields": fields or []}, status=status)


@web.middleware
async def checked(request: web.Request, handler):
    """The token, then the handler; a bad request or an unknown route as one JSON line, never a traceback."""
    service = request.app[SERVICE]
    if not authorised(request.headers.get("Authorization"), service.token):
        return error(401, "a valid token is required: send 'Authorization: Bearer TOKEN'")
    try:
        return await handler(request)
    except BadRequest as exc:
        return error(400, exc.message, exc.fields)
    except web.HTTPException as exc:
        if exc.status >= 400:
            return error(exc.status, exc.reason)
        raise


async def submit(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    try:
        body = await request.json()
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError, too many digits, too deep
        raise BadRequest("the body is not JSON (or nests or numbers beyond what the service reads)", ["body"]) from None
    loop = asyncio.get_running_loop()
    parsed = await loop.run_in_executor(None, parse_submit, body, service.config, service.problems_folder)
    submission = service.submit(parsed)
    return web.json_response(submission.summary(), status=202)


def found(request: web.Request) -> Submission | None:
    return request.app[SERVICE].book.get(request.match_info["id"])


async def poll(request: web.Request) -> web.Response:
    try:
        since = max(0, int(request.query.get("since", "0")))
    except ValueError:
        raise BadRequest("'since' must be a whole number", ["since"]) from None
    submission = found(request)
    if submission is None:
        stored = request.app[SERVICE].book.stored(request.match_info["id"])
        if stored is None:
            return error(404, f"no submission {request.match_info['id']!r}")
        summary, traces = stored
        return web.json_response({**summary, "traces": traces[since:]})
    traces = list(submission.traces)
    return web.json_response({**submission.summary(), "traces": traces[since:]})


async def stream(request: web.Request) -> web.StreamResponse:
    """The traces as JSON lines, each as it finishes; the response ends when the submission does."""
    submission = found(request)
    if submission is None:
        stored = request.app[SERVICE].book.stored(request.match_info["id"])
        if stored is None:
            return error(404, f"no submission {request.match_info['id']!r}")
        return web.Response(text="".join(json.dumps(t) + "\n" for t in stored[1]), content_type="application/x-ndjson")
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    sent = 0
    try:
        while True:
            final = submission.state in FINAL_STATES  # read before the traces: none finished after it is missed
            traces = list(submission.traces)
            if len(traces) > sent:
                await response.write("".join(json.dumps(t) + "\n" for t in traces[sent:]).encode())
                sent = len(traces)
            if final:
                break
            await asyncio.sleep(STREAM_POLL_S)
        await response.write_eof()
    except ConnectionResetError:  # the client went away (an interrupted `submit`): no one to send the rest to
        pass
    return response


async def cancel(request: web.Request) -> web.Response:
    submission = found(request)
    if submission is None:
        return error(404, f"no submission {request.match_info['id']!r} running or queued")
    request.app[SERVICE].book.cancel(submission)
    return web.json_response(submission.summary())


async def health(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    return web.json_response({"ok": True, "version": __version__, **service.health()})


def make_app(service: Service) -> web.Application:
    app = web.Application(middlewares=[checked], client_max_size=MAX_BODY_BYTES)
    app[SERVICE] = service
    app.router.add_post("/v1/submissions", submit)
    app.router.add_get("/v1/submissions/{id}", poll)
    app.router.add_get("/v1/submissions/{id}/traces", stream)
    app.router.add_post("/v1/submissions/{id}/cancel", cancel)
    app.router.add_get("/v1/health", health)
    return app
