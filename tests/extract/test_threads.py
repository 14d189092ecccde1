"""How many intra-op threads a block's CPU comparison gets (`extract/threads.py`): two only for a heavy block
while the machine's other work leaves a core idle, and a comparison on two threads gives the same verdict."""

from __future__ import annotations

import subprocess
import sys
import time

import torch
from torch import nn

from solbench.extract import blocks, capture, threads
from solbench.extract.built import BuiltModel


def test_small_blocks_and_single_thread_processes_compare_on_one_thread(monkeypatch):
    monkeypatch.setattr(threads, "others_busy_cores", lambda: 0.0)
    heavy = nn.Linear(5000, 5000, device="meta")  # 25 M parameters
    small = nn.Linear(64, 64, device="meta")
    tokens = [capture.Call((torch.empty(2, 4096, 768, device="meta"),), {})]  # SAM's image tokens: 6.3 M
    assert threads.threads_for(small, []) == 1
    assert threads.threads_for(small, tokens) == (2 if torch.get_num_threads() >= 2 else 1)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # a `--jobs` process
        assert threads.threads_for(heavy, []) == 1
        torch.set_num_threads(2)
        assert threads.threads_for(heavy, []) == 2
        monkeypatch.setattr(threads, "others_busy_cores", lambda: 1.0)  # another process holds a core
        assert threads.threads_for(heavy, []) == (2 if (threads.os.cpu_count() or 1) >= 3 else 1)
        monkeypatch.setattr(threads, "others_busy_cores", lambda: None)  # cannot tell: one
        assert threads.threads_for(heavy, []) == 1
    finally:
        torch.set_num_threads(before)


def test_another_process_spinning_is_seen_as_busy():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        threads.others_busy_cores()  # starts the window
        time.sleep(1.0)
        busy = threads.others_busy_cores()
    finally:
        spinner.kill()
        spinner.wait()
    assert busy is not None and busy >= 0.3, busy


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(64, 256), nn.Linear(256, 64)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.mlp = nn.Linear(8, 64), Mlp()

    def forward(self, x):
        return self.mlp(self.embed(x))


def test_a_comparison_on_two_threads_is_bit_exact_as_on_one(monkeypatch):
    built = BuiltModel("test/threads", Model().eval().to("meta"), "module",
                       lambda axes, dtype: ((torch.randn(axes["batch"], axes["seq"], 8, dtype=dtype),), {}),
                       {"batch": (4, 2, 3), "seq": (6, 64, 96)}, {"batch": (1,), "seq": (64,)})
    monkeypatch.setattr(blocks.generic_check, "threads_for", lambda module, calls: 2)
    result = blocks.extract_blocks(built, torch.bfloat16)
    mlp = [v for v in result.validations if v.problem.startswith("mlp_")]
    assert mlp and all(v.passed and v.exact == {"float32": True, "bfloat16": True} for v in mlp), mlp
