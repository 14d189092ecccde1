"""Unit tests of the individual defences, and proofs that a defence is what stops its attack."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from solbench.check.anticheat import ProblemFiles, check_time_reply, screen_failure, timed_call_seed
from solbench.check.static_scan import scan_solution, scan_source
from solbench.protocol import messages as msg
from solbench.timing.config import TimingConfig
from tests.anticheat.suite import HERE, discover, load_case, write_problem
from tests.child_env import repo_env

REPO = Path(__file__).resolve().parents[2]

# -- what a solution's worker may claim ---------------------------------------------------------------


@pytest.mark.parametrize("op,status,expected", [
    ("call", "PASSED", "REWARD_HACK"), ("time", "SKIPPED", "REWARD_HACK"), ("load", "SKIPPED", "REWARD_HACK"),
    ("call", "INVALID_REFERENCE", "RUNTIME_ERROR"), ("time", "MISSING_DATA", "RUNTIME_ERROR"),
    ("call", "made up", "REWARD_HACK"), ("call", None, "REWARD_HACK"),
    ("call", "INCORRECT_SHAPE", "INCORRECT_SHAPE"), ("time", "REWARD_HACK", "REWARD_HACK"),
    ("load", "COMPILE_ERROR", "COMPILE_ERROR"), ("call", "COMPILE_ERROR", "REWARD_HACK"),
])
def test_screen_failure(op, status, expected):
    assert screen_failure(op, status)[0] == expected


def test_skipped_load_is_believed_only_when_the_orchestrator_agrees():
    assert screen_failure("load", "SKIPPED", skip_plausible=True) == ("SKIPPED", "")


CONFIG = TimingConfig(warmup=2, iters=5, max_iters=5, adaptive=False)


def _reply(**overrides) -> msg.Timed:
    fields = {"samples_ms": [1.0] * 5, "warmup": 3, "wall_s": 0.01, "flags": [],
              "sampled": [[i, i, 123 + i, []] for i in (1, 4, 7)]}
    fields.update(overrides)
    return msg.Timed(**fields)


def test_plausible_time_reply_passes():
    assert check_time_reply(_reply(), CONFIG, checked_outputs=3, elapsed_s=0.5) == []


@pytest.mark.parametrize("overrides,fragment", [
    ({"samples_ms": [1.0] * 4}, "timed samples"),
    ({"samples_ms": [1.0] * 4 + [float("nan")]}, "finite"),
    ({"samples_ms": [-1.0] * 5}, "non-negative"),
    ({"warmup": 0}, "warm-up"),
    ({"wall_s": 9.0}, "claims"),
    ({"samples_ms": [400.0] * 5, "wall_s": 0.4}, "add up"),
    ({"sampled": [[1, 1, 123, []]]}, "asked for"),
    ({"sampled": [[1, 1, 1, []], [99, 99, 1, []], [2, 2, 1, []]]}, "never made"),
    ({"sampled": [[1, 1, -5, []], [2, 2, 1, []], [3, 3, 1, []]]}, "no valid input set"),
    ({"sampled": [[1, 2, 5, []], [2, 2, 1, []], [3, 3, 1, []]]}, "no valid input set"),  # a set drawn later
    ({"sampled": [[1, 1, 5, []], [2, 2, 1, []], [3, 3, 1]]}, "malformed"),
    ({"flags": [{"x": 1}]}, "flags"),
])
def test_implausible_time_reply_is_refused(overrides, fragment):
    problems = check_time_reply(_reply(**overrides), CONFIG, checked_outputs=3, elapsed_s=0.5)
    assert any(fragment in p for p in problems), problems


def test_sampled_calls_never_share_an_input_set_whatever_the_worker_flags():
    """Two checked outputs judged on one input set: the choice was tampered with (every call fed the same input,
    whose answer is cached). No flag the worker sends ("timed_inputs_reused") switches this off (issue 31)."""
    repeated = _reply(sampled=[[1, 1, 55, []], [4, 1, 55, []], [6, 6, 56, []]])
    for flags in ([], ["timed_inputs_reused"], ["timed_inputs_fixed"]):
        problems = check_time_reply(_reply(sampled=repeated.sampled, flags=flags), CONFIG, checked_outputs=3,
                                    elapsed_s=0.5, fixed_seeds=[55, 56])
        assert any("same input set" in p for p in problems), (flags, problems)
    rotated = _reply(sampled=[[1, 1, None, []], [3, 3, None, []], [6, 6, None, []]])  # fixed sets: by call index
    assert any("same input set" in p for p in check_time_reply(rotated, CONFIG, checked_outputs=3, elapsed_s=0.5,
                                                                 fixed_seeds=[55, 56]))
    assert check_time_reply(_reply(sampled=[[3, 3, None, []], [5, 5, None, []], [7, 7, None, []]]), CONFIG,
                            checked_outputs=3, elapsed_s=0.5, fixed_seeds=[55, 56, 57]) == []
    two_sets = _reply(sampled=[[4, 4, None, []], [7, 7, None, []]])  # two requested sets: two outputs are all there is
    assert check_time_reply(two_sets, CONFIG, checked_outputs=3, elapsed_s=0.5, fixed_seeds=[55, 56]) == []
    assert check_time_reply(_reply(sampled=two_sets.sampled[:1]), CONFIG, checked_outputs=3, elapsed_s=0.5,
                            fixed_seeds=[55, 56]) != []


def test_rotating_the_requested_sets_is_the_orchestrators_decision():
    """A block may rotate the requested sets only where the orchestrator allows it (the reference's block found
    the inputs independent of the seed), and never mixes them with drawn sets (issue 31)."""
    rotated = _reply(sampled=[[4, 4, None, []], [7, 7, None, []]])
    assert check_time_reply(rotated, CONFIG, checked_outputs=3, elapsed_s=0.5, fixed_seeds=[55, 56]) == []
    refused = check_time_reply(rotated, CONFIG, checked_outputs=3, elapsed_s=0.5, fixed_seeds=[55, 56],
                               fixed_allowed=False)
    assert any("not allowed to rotate" in p for p in refused), refused
    mixed = _reply(sampled=[[1, 1, 9, []], [4, 4, None, []], [7, 7, None, []]])
    assert any("drawn and on requested" in p for p in check_time_reply(mixed, CONFIG, checked_outputs=3,
                                                                         elapsed_s=0.5, fixed_seeds=[55, 56]))


def test_the_blocks_last_call_is_always_checked():
    """Honest early outputs under their true labels cannot stand in for the later calls: the orchestrator counts
    the block's calls from the reply and insists on the last one (issue 31)."""
    early = _reply(sampled=[[0, 0, 5, []], [1, 1, 6, []], [2, 2, 7, []]])
    assert any("last call (7" in p for p in check_time_reply(early, CONFIG, checked_outputs=3, elapsed_s=0.5))
    assert check_time_reply(_reply(), CONFIG, checked_outputs=3, elapsed_s=0.5) == []


def test_the_orchestrator_derives_every_checked_seed_itself():
    """The seed a sampled call is judged on comes from the orchestrator's block key, the call that drew the set and
    that draw's nonce; relabelling an output to another call's set changes the seed (issue 31)."""
    from solbench.check.anticheat import input_sets_reused, timed_call_seed
    from solbench.inputs.seeds import call_seed

    key = 987654321
    assert timed_call_seed([4, 4, 77, []], key, [55, 56]) == call_seed(key, 4, 77)
    assert timed_call_seed([4, 2, 77, []], key, [55, 56]) == call_seed(key, 2, 77) != call_seed(key, 4, 77)
    assert timed_call_seed([4, 4, 77, []], key + 1, [55, 56]) != call_seed(key, 4, 77)
    assert timed_call_seed([5, 0, None, []], key, [55, 56]) == 56  # rotated fixed sets: the index decides
    assert input_sets_reused([[4, 2, 77, []]]) and not input_sets_reused([[4, 4, 77, []], [5, 0, None, []]])


def test_probe_calls_extend_the_calls_sampled_outputs_may_come_from():
    last = _reply(sampled=[[1, 1, 1, []], [4, 4, 2, []], [9, 9, 3, []]], probe_calls=2)  # 3 warm-up + 5 timed + 2 probe calls
    assert check_time_reply(last, CONFIG, checked_outputs=3, elapsed_s=0.5) == []
    assert any("never made" in p for p in check_time_reply(_reply(sampled=last.sampled), CONFIG, checked_outputs=3,
                                                            elapsed_s=0.5))
    assert any("probe calls" in p for p in check_time_reply(_reply(probe_calls=99), CONFIG, checked_outputs=3,
                                                             elapsed_s=0.5))


def test_a_probe_that_makes_its_confirming_round_sends_a_plausible_reply():
    """Tails that accuse in the first round get a second round (worker.probe): the most calls the probe can
    make must pass the reply's screening, or an honest call with one noisy round would be REWARD_HACK as
    an "implausible" reply (seen on an H100: a reference, Quant/023, with 11 probe calls against a limit of 8)."""
    from solbench.check.anticheat import MAX_PROBE_CALLS
    from solbench.worker.probe import EscapedWorkProbe
    from tests.anticheat.test_probe_tail_rule import drive

    most = drive(EscapedWorkProbe(use_cupti=False), [0.5] * 20)
    assert most == MAX_PROBE_CALLS
    last = _reply(sampled=[[1, 1, 1, []], [4, 4, 2, []], [3 + 5 + most - 1, 3 + 5 + most - 1, 3, []]], probe_calls=most)
    assert check_time_reply(last, CONFIG, checked_outputs=3, elapsed_s=0.5) == []
    assert check_time_reply(_reply(probe_calls=most + 1), CONFIG, checked_outputs=3, elapsed_s=0.5) != []


def test_fewer_sampled_outputs_only_when_the_orchestrator_allows_it():
    one = _reply(sampled=[[7, 7, 123, []]])
    assert check_time_reply(one, CONFIG, checked_outputs=3, required_outputs=1, elapsed_s=0.5) == []
    assert check_time_reply(one, CONFIG, checked_outputs=3, required_outputs=3, elapsed_s=0.5) != []
    none = _reply(sampled=[])
    assert any("asked for" in p for p in
               check_time_reply(none, CONFIG, checked_outputs=3, required_outputs=1, elapsed_s=0.5))


def test_outputs_over_a_gib_may_be_kept_fewer(tmp_path):
    from solbench.orchestrator import sizes as evaluate
    from solbench.spec.problem import load_problem

    problem = load_problem(write_problem(tmp_path))
    workload = problem.workloads[0]
    assert evaluate.required_checks(problem, workload, 3) == 3
    small = evaluate.declared_set_bytes(problem, workload, "outputs")
    assert small > 0
    original = evaluate.ALWAYS_KEPT_OUTPUT_BYTES
    try:
        evaluate.ALWAYS_KEPT_OUTPUT_BYTES = small
        assert evaluate.required_checks(problem, workload, 3) == 1
    finally:
        evaluate.ALWAYS_KEPT_OUTPUT_BYTES = original


def test_problem_files_fingerprint(tmp_path):
    folder = write_problem(tmp_path)
    files = ProblemFiles(folder)
    assert files.changes() == []
    (folder / "workload.jsonl").write_text("{}\n")
    (folder / "extra.txt").write_text("x")
    assert files.changes() == ["extra.txt", "workload.jsonl"]


# -- static scan ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("snippet,fragment", [
    ("import gc\n", "imports gc"),
    ("import sys\nf = sys._getframe(1).f_back.f_locals\n", "f_back"),
    ("import os\nos.dup2(3, 4)\n", "os.dup2"),
    ("import sys\nm = sys.modules['__main__']\n", "sys.modules['__main__']"),
    ("import torch\nclass L(torch.Tensor):\n    pass\n", "tensor subclass"),
    ("def f():\n    pass\nf.__code__ = (lambda: 0).__code__\n", "assigns .__code__"),
    ("print('PASSED')\n", "trace status"),
    ("open('/proc/self/fd')\n", "/proc"),
    ("import torch\ns = torch.cuda.Stream()\n", "side streams"),
    ("from solbench.timing import timer\n", "imports the harness"),
])
def test_static_scan_flags(snippet, fragment):
    findings = scan_source("k.py", snippet)
    assert any(fragment in f for f in findings), findings


def test_static_scan_is_quiet_on_plain_kernels():
    for case in discover("legit"):
        if case.name in ("inplace_destination", "lookup_table", "multi_file", "torch_compile"):
            from solbench.spec.problem import load_problem

            problem = load_problem(write_problem(Path(os.environ.get("TMPDIR", "/tmp")) / "ac_quiet"))
            assert scan_solution(load_case(case, problem.definition)) == [], case.name


def test_scan_flags_shipped_problem_files():
    data = json.loads((HERE / "hostile" / "stray_problem_files.json").read_text())
    data.pop("x-expect")
    from solbench.spec.solution import Solution

    assert any("problem file" in f for f in scan_solution(Solution.from_dict(data)))


# -- the worker's in-process guards ------------------------------------------------------------------------

def test_integrity_checker_sees_rebinding_and_code_swaps():
    import solbench.timing.timer as timer
    from solbench.worker import guard as worker_guard

    check = worker_guard.make_checker(worker_guard.take_snapshot({"probe": {"k": len}}))
    assert check() == []
    saved_clock, saved_code = timer._perf_counter_ns, timer.integrity_violations.__code__
    try:
        timer._perf_counter_ns = lambda: 0
        timer.integrity_violations.__code__ = (lambda: []).__code__
        changed = check()
    finally:
        timer._perf_counter_ns = saved_clock
        timer.integrity_violations.__code__ = saved_code
    assert "solbench.timing.timer._perf_counter_ns" in changed
    assert "solbench.timing.timer.integrity_violations.__code__" in changed
    assert check() == []


HOOK_SCRIPT = textwrap.dedent('''
    import gc, os, sys
    from solbench.worker import guard as worker_guard
    import solbench.timing.timer as timer
    state = worker_guard.GuardState()
    state.protect([sys.argv[2]])
    worker_guard.install_audit_hook(int(sys.argv[1]), state)
    state.phase = "call"
    os.environ["HARMLESS_VAR"] = "1"
    os.environ["SOLBENCH_WORKER_DEVICE"] = "meta"
    gc.get_referrers(timer)
    timer.integrity_violations.__code__ = (lambda: []).__code__
    def own():  # the solution's own function, in a module named like a solution's: its own to rewrite (a JIT does)
        return 1
    own.__module__ = "solbench_solution_k"
    own.__code__ = (lambda: 2).__code__
    open(os.path.join(sys.argv[2], "definition.json"), "w").close()
    open(os.path.join(sys.argv[2], "notes.txt"), "r").close() if False else None
    state.phase = "timing"
    os.system("true")
    print("warnings:", state.take_warnings())
''')


def test_audit_hook_alarms_on_a_separate_channel(tmp_path):
    parent, child = socket.socketpair()
    env = repo_env(REPO)
    proc = subprocess.run([sys.executable, "-c", HOOK_SCRIPT, str(child.fileno()), str(tmp_path)], env=env,
                          pass_fds=(child.fileno(),), capture_output=True, text=True, timeout=120)
    child.close()
    assert proc.returncode == 0, proc.stderr
    parent.settimeout(5)
    data = b""
    while chunk := parent.recv(65536):
        data += chunk
    alarms = data.decode()
    for fragment in ("SOLBENCH_WORKER_DEVICE", "gc.get_referrers", "replaced __code__ of solbench.timing.captured",
                     "definition.json", "os.system: started child processes while being timed"):
        assert fragment in alarms, alarms
    assert "HARMLESS_VAR" not in alarms and "HARMLESS_VAR" in proc.stdout  # a warning, not an alarm
    assert "solbench_solution_k" not in alarms  # "solbench" guards the package, not names that start alike


JAM_SCRIPT = textwrap.dedent('''
    import fcntl, os, sys
    from solbench.worker import guard as worker_guard
    fd = int(sys.argv[1])
    state = worker_guard.GuardState()
    worker_guard.install_audit_hook(fd, state)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)  # blocking: no help
    try:
        while True:
            os.write(fd, b"x" * 4096) if sys.argv[2] == "fill" else os.close(fd)
            fd = fd if sys.argv[2] == "fill" else os.open(os.devnull, os.O_WRONLY)  # a file where the socket was
            if sys.argv[2] != "fill":
                break
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
    except BlockingIOError:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    state.phase = "timing"
    os.environ["SOLBENCH_WORKER_DEVICE"] = "meta"  # an alarm that cannot be delivered
    print("the alarm was swallowed")
''')


@pytest.mark.parametrize("how", ["fill", "replace"])
def test_an_alarm_that_cannot_be_delivered_ends_the_process(how):
    from solbench.protocol.messages import ALARM_LOST_EXIT

    parent, child = socket.socketpair()
    env = repo_env(REPO)
    proc = subprocess.run([sys.executable, "-c", JAM_SCRIPT, str(child.fileno()), how], env=env,
                          pass_fds=(child.fileno(),), capture_output=True, text=True, timeout=120)
    child.close()
    parent.close()
    assert proc.returncode == ALARM_LOST_EXIT, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert "swallowed" not in proc.stdout


# -- proof that fresh timed inputs are what stops value caching --------------------------------------------

def _time_in_process(tmp_path, monkeypatch, rotate: bool):
    """Load cache_by_value.py into an in-process worker state, time it, and judge its sampled outputs."""
    from solbench.orchestrator.config import RunConfig
    from solbench.spec.problem import load_problem
    from solbench.worker import calls as worker
    from solbench.worker import timed_block as worker_timing
    from solbench.worker.inputs_cache import make_call_inputs
    from solbench.worker.state import WorkerState
    from solbench.worker.timed_block import handle_time

    problem = load_problem(write_problem(tmp_path / "p"))
    case = next(c for c in discover("hostile") if c.name == "cache_by_value")
    solution = load_case(case, problem.definition)
    if rotate:  # the defence switched off: the harness believes new seeds do not change the inputs
        monkeypatch.setattr(worker_timing, "changed_tensors", lambda before, after: [])
    monkeypatch.setattr(worker_timing, "background_activity", lambda state: None)  # pytest's own children are not ours
    state = WorkerState("cpu")
    monkeypatch.setattr(sys, "path", list(sys.path))
    worker.handle_load(state, msg.Load(definition=problem.definition, solution=solution,
                                       work_dir=str(tmp_path / "w")))
    wdata = problem.workloads[0]
    for seed in (11, 12):
        worker.handle_call(state, msg.Call(workload=wdata, seed=seed))
    config = RunConfig(device="cpu", warmup=1, iters=24, adaptive=False)
    reply = handle_time(state, msg.Time(workload=wdata, seeds=[21, 22], config=config.timing_config("cpu"),
                                        checked_outputs=8))
    wrong = 0
    for entry in reply.sampled:
        seed, outputs = timed_call_seed(entry, 0, [21, 22]), entry[3]
        _, _, (x, y) = make_call_inputs(state, wdata, seed)
        wrong += not bool((outputs[0] - (x * 2.0 + y)).abs().max() <= 1e-5)
    return wrong, len(reply.sampled)


def test_fresh_timed_inputs_are_what_stops_value_caching(tmp_path, monkeypatch):
    wrong, sampled = _time_in_process(tmp_path / "on", monkeypatch, rotate=False)
    assert sampled >= 8 and wrong > 0  # defended: replayed answers are wrong and verified
    monkeypatch.undo()
    wrong, sampled = _time_in_process(tmp_path / "off", monkeypatch, rotate=True)
    assert sampled == 2 and wrong == 0  # rotating two fixed sets (one kept output each): the cache wins


def test_harness_native_calls_are_not_reported_as_the_solution_s():
    from solbench.worker import guard as worker_guard

    state = worker_guard.GuardState()
    state.phase = "call"
    hook = worker_guard._make_hook(None, state.cell)  # called directly: nothing is installed here
    with state.harness_native():
        hook("ctypes.call_function", (0, ()))
    assert state.take_warnings() == []
    hook("ctypes.call_function", (0, ()))  # the same event outside the section is the solution's
    assert state.take_warnings() == ["ctypes.call_function"]
