"""Seconds per workload for a problem with one big output: what moving and judging outputs costs.

    python benchmarks/judge_transfer.py [--mb 256] [--device cpu|cuda] [--trials 2] [--checked 3]
                                        [--no-ipc | --ipc-min-mb MB] [--threads N]

Builds a throw-away problem `out = 2 x + y` (float32) whose output is `--mb` MiB, evaluates a copy
of the reference as a solution (trials, one timed block of a few calls, `--checked` sampled outputs
judged) and prints the workload's seconds and where the orchestrator waited, per request kind:
`call` (the solution's trial and its outputs), `time` (the timed block and its sampled outputs),
`judge` (the reference's run and the comparison, including the outputs sent to it), and the
transfer requests (`receive`, `release`, `fetch`) where those exist. `--no-ipc` sends every output
as bytes (on a GPU, the default moves outputs of 16 MiB and more by CUDA IPC); `--threads` sets
OMP_NUM_THREADS for the workers (steadier numbers on a small, shared machine).

`--stages` measures the bytes path of one judged output in this process instead (one torch thread):
solution -> orchestrator -> reference over socket pairs, then the comparison with the reference.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, no install needed
from solbench import api  # noqa: E402
from solbench.orchestrator import session as evaluate  # noqa: E402
from solbench.orchestrator.config import RunConfig  # noqa: E402

REFERENCE = "import torch\n\ndef run(x, y):\n    return x * 2.0 + y\n"


def write_problem(root: Path, numel: int) -> Path:
    folder = root / "big_axpy"
    folder.mkdir(parents=True)
    definition = {
        "name": "big_axpy", "description": "out = 2 x + y, big", "axes": {"n": {"type": "var"}},
        "inputs": {"x": {"shape": ["n"], "dtype": "float32"}, "y": {"shape": ["n"], "dtype": "float32"}},
        "outputs": {"out": {"shape": ["n"], "dtype": "float32"}}, "reference": REFERENCE,
    }
    (folder / "definition.json").write_text(json.dumps(definition))
    workload = {"uuid": "big", "axes": {"n": numel}, "inputs": {"x": {"type": "random"}, "y": {"type": "random"}},
                "tolerance": {"max_atol": 1e-5, "max_rtol": 1e-5}}
    (folder / "workload.jsonl").write_text(json.dumps(workload) + "\n")
    (root / "solution.py").write_text("# solbench: problem=big_axpy\n" + REFERENCE)
    return folder


def stages(mb: int, repeat: int) -> None:
    """The judge's data path for one output, in-process: two socket hops and the comparison."""
    import socket
    import threading
    from multiprocessing.connection import Connection

    import torch

    from solbench.check.correctness import compare
    from solbench.protocol import framing as wire
    from solbench.spec.workload import Tolerance

    torch.set_num_threads(1)
    output = torch.randn(mb * (1 << 20) // 4, generator=torch.Generator().manual_seed(0))
    reference = output + 1e-7
    hops = [tuple(Connection(s.detach()) for s in socket.socketpair()) for _ in range(2)]
    for _ in range(repeat):
        started = time.perf_counter()
        sender = threading.Thread(target=wire.send, args=(hops[0][0], {"outputs": [output]}))
        sender.start()
        forwarded = wire.recv(hops[0][1])  # the orchestrator
        sender.join()
        sender = threading.Thread(target=wire.send, args=(hops[1][0], forwarded))
        sender.start()
        received = wire.recv(hops[1][1])["outputs"][0]  # the reference worker
        sender.join()
        moved = time.perf_counter()
        result = compare(received, reference, Tolerance(max_atol=1e-5, max_rtol=1e-5), "float32")
        done = time.perf_counter()
        assert result.passed
        print(f"{mb} MiB: two hops {moved - started:.2f} s, compare {done - moved:.2f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256, help="output size in MiB")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--checked", type=int, default=3, help="sampled timed outputs judged")
    parser.add_argument("--repeat", type=int, default=2, help="evaluations (the first one includes start-up)")
    parser.add_argument("--no-ipc", action="store_true", help="send every output as bytes")
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS for the workers")
    parser.add_argument("--stages", action="store_true", help="time the bytes path in-process instead")
    parser.add_argument("--ipc-min-mb", type=float, default=None,
                        help="outputs of this many MiB and more go by CUDA IPC (default: RunConfig's)")
    args = parser.parse_args()
    if args.stages:
        stages(args.mb, max(args.repeat, 1))
        return 0
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)

    waited: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    original = evaluate.DeviceSession.ask

    def timed_ask(self, worker, message, timeout_s):
        started = time.perf_counter()
        try:
            return original(self, worker, message, timeout_s)
        finally:
            op = f"{'solution' if worker is self.candidate else 'reference'}:{message.OP}"
            waited[op] += time.perf_counter() - started
            counts[op] += 1

    evaluate.DeviceSession.ask = timed_ask
    extra = {"ipc_min_bytes": None} if args.no_ipc else {}
    if args.ipc_min_mb is not None and not args.no_ipc:
        extra = {"ipc_min_bytes": int(args.ipc_min_mb * (1 << 20))}
    config = RunConfig(device=args.device, trials=args.trials, warmup=1, iters=3, adaptive=False, timing_rounds=1,
                       checked_timed_outputs=args.checked, time_reference=False, timeout_s=600, **extra)
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_problem(Path(tmp), args.mb * (1 << 20) // 4)
        for run in range(args.repeat):
            waited.clear()
            counts.clear()
            started = time.perf_counter()
            traces = api.evaluate(folder, Path(tmp) / "solution.py", config=config)
            total = time.perf_counter() - started
            trace = traces[0]
            print(f"run {run}: {args.mb} MiB output on {args.device}: status {trace.status.value}, "
                  f"workload {trace.evaluation.seconds:.2f} s (whole evaluate {total:.2f} s)")
            if trace.status.value != "PASSED":
                print(trace.evaluation.log[-2000:])
            for op in sorted(waited, key=lambda k: -waited[k]):
                print(f"    {op:<22} {counts[op]:>3} requests  {waited[op]:7.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
