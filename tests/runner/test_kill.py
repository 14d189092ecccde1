"""A worker killed from two threads at once (the device's thread closing its session while Ctrl-C stops
the run) ends once, with no exception in either thread."""

from __future__ import annotations

import threading
import time

from solbench.orchestrator.process import WorkerProcess


def test_two_threads_killing_one_worker_do_not_race():
    worker = WorkerProcess("cpu")
    worker.start()
    original = worker.read_alarms

    def slow_read_alarms(*args, **kwargs):  # widen the window between "channel open?" and "close it"
        time.sleep(0.3)
        return original(*args, **kwargs)

    worker.read_alarms = slow_read_alarms
    errors: list[BaseException] = []

    def kill():
        try:
            worker.kill()
        except BaseException as exc:  # noqa: BLE001 - what the test looks for
            errors.append(exc)

    threads = [threading.Thread(target=kill) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == [] and worker.proc is None and worker.alarm_sock is None


def test_a_worker_killed_between_the_liveness_check_and_the_pid_read_gives_no_error():
    """A service's health read beside a kill (a crash, a cancel): the kill lands after "is it running?" and
    before "its pid" (forced here: the check itself waits for a kill in another thread). The one read of
    `proc` gives the pid of the process that was checked; afterwards, None."""
    worker = WorkerProcess("cpu")
    worker.start()
    proc, pid = worker.proc, worker.proc.pid
    real_poll, fired = proc.poll, []

    def poll_then_killed():
        state = real_poll()
        if not fired:
            fired.append(True)
            killer = threading.Thread(target=worker.kill)
            killer.start()
            killer.join(timeout=120)
        return state

    proc.poll = poll_then_killed
    assert worker.running_pid == pid
    assert fired and worker.proc is None
    assert worker.running_pid is None and not worker.alive
