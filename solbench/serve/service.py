"""The service: its devices' lanes, the submission book, the reference's timings, its folder and token;
`serve` runs the HTTP API until SIGINT or SIGTERM, then stops the workers (finished traces are on disk)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from solbench.orchestrator.config import RunConfig
from solbench.orchestrator.lifetime import at_once
from solbench.orchestrator.process import PRIVATE_REFERENCE_CACHE_ENV
from solbench.serve.lanes import DeviceLane
from solbench.serve.reference_cache import ReferenceTimings
from solbench.serve.requests import SubmitRequest
from solbench.serve.submissions import Submission, SubmissionBook


class Service:
    """What one `solbench serve` owns: a lane per device (workers started and warm), the queue, the files."""

    def __init__(self, config: RunConfig, devices: list[str], folder: Path, token: str | None = None,
                 reuse_eager_reference: bool = True):
        self.config = config
        self.devices = list(devices)
        self.folder = Path(folder)
        self.token = token
        self.problems_folder = self.folder / "problems"
        self.book = SubmissionBook(self.folder / "submissions")
        self.timings = ReferenceTimings(self.folder / "reference_timings.jsonl")
        # Before any worker starts: references sent by content must not share compiler caches (process.worker_cache)
        os.environ[PRIVATE_REFERENCE_CACHE_ENV] = "1"
        self.lanes: list[DeviceLane] = []
        started: dict[str, DeviceLane] = {}
        failures: list[BaseException] = []

        def start(device: str) -> None:
            try:
                started[device] = DeviceLane(device, config, self.book, self.timings, reuse_eager_reference)
            except BaseException as exc:  # noqa: BLE001 - raised below, after the other lanes are closed
                failures.append(exc)

        at_once([lambda d=device: start(d) for device in self.devices])  # their workers start together
        self.lanes = [started[d] for d in self.devices if d in started]
        if failures:
            self.close()
            raise failures[0]

    def submit(self, request: SubmitRequest) -> Submission:
        submission = Submission(self.book.new_id(), request.problem, request.solution, request.config,
                                request.workloads)
        self.book.add(submission)
        return submission

    def health(self) -> dict:
        return {"devices": self.devices, "submissions": self.book.counts(),
                "lanes": {lane.device: lane.status() for lane in self.lanes},
                "reference_timings_reused": self.timings.hits}

    def close(self) -> None:
        """Stop: no more work handed out, running submissions told to stop, every lane's workers stopped."""
        self.book.close()
        at_once([lane.close for lane in self.lanes])


async def _serve_until_stopped(service: Service, host: str, port: int, received: list[int]) -> None:
    from aiohttp import web  # inner: the `serve` extra, needed only here and in app

    from solbench.serve.app import make_app
    from solbench.worker import reads  # what a worker here cannot read, said at start (issue 47)

    runner = web.AppRunner(make_app(service), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, _stop_on(signum, received, stopped))
    bound = runner.addresses[0]
    print(f"solbench serve: listening on http://{host}:{bound[1]} (devices: {', '.join(service.devices)}; "
          f"folder: {service.folder}; {reads.enforced_here()})", flush=True)
    try:
        await stopped.wait()
        # Submissions told to stop first (their workers killed, their state final), so open streams end now
        # rather than holding the server's shutdown until they time out.
        await loop.run_in_executor(None, service.book.close)
    finally:
        await runner.cleanup()


def _stop_on(signum: int, received: list[int], stopped: asyncio.Event):
    def handler() -> None:
        received.append(signum)
        stopped.set()
    return handler


def serve(service: Service, host: str, port: int) -> int:
    """Answer requests until SIGINT/SIGTERM; then stop the service. Returns the signal that stopped it, so
    the command exits 130 or 143 as any interrupted command does."""
    received: list[int] = []
    try:
        asyncio.run(_serve_until_stopped(service, host, port, received))
        return received[0] if received else signal.SIGINT
    finally:
        print("solbench serve: stopping (finished traces are kept)", file=sys.stderr, flush=True)
        service.close()
