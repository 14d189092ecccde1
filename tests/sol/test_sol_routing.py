"""Data-dependent expert loops traced under the balanced-routing rule (solbench.sol.routing);
every expected value is computed by hand in the test."""

from __future__ import annotations

import pytest

from solbench.sol.analyser import analyse
from solbench.sol.hardware import load_spec
from solbench.sol.reject import min_possible_time_ms

MOE = (
    "import torch\n"
    "def run(x, router, w1, w2):\n"
    "    probs = torch.softmax((x @ router.T).float(), dim=-1)\n"
    "    weights, ids = torch.topk(probs, 2, dim=-1)\n"
    "    out = torch.zeros_like(x)\n"
    "    for e in torch.unique(ids).tolist():\n"
    "        tok, slot = torch.where(ids == e)\n"
    "        h = torch.relu(x[tok] @ w1[e].T)\n"
    "        y = (h @ w2[e].T) * weights[tok, slot, None].to(x.dtype)\n"
    "        out.index_add_(0, tok, y)\n"
    "    return out\n"
)
H, INTER = 16, 32


def _moe(definition_of, tokens: int, experts: int):
    return definition_of(
        {"x": (["T", "H"], "float32"), "router": (["E", "H"], "float32"), "w1": (["E", "I", "H"], "float32"),
         "w2": (["E", "H", "I"], "float32")},
        {"out": (["T", "H"], "float32")}, MOE, {"T": tokens, "E": experts, "H": H, "I": INTER})


def test_prefill_routes_every_expert_an_even_share(definition_of):
    """16 tokens x top-2 = 32 selections over 4 experts: all 4 run, 8 rows each."""
    cost = analyse(_moe(definition_of, tokens=16, experts=4), {})
    assert cost.method == "meta-approx"
    router = 2 * 16 * H * 4  # 2,048
    per_row = 2 * INTER * H + 2 * H * INTER  # up and down projection of one routed row: 2,048
    assert cost.flops_matmul == {"float32": router + 32 * per_row}  # 67,584
    # every expert's weights are read once; x once (routing reads it whole; gathers are within it)
    assert cost.bytes_by_tensor == {"x": 16 * H * 4, "router": 4 * H * 4, "w1": 4 * INTER * H * 4,
                                    "w2": 4 * H * INTER * 4, "out": 16 * H * 4}
    assert any("balanced routing" in note for note in cost.notes)


def test_decode_touches_only_as_many_experts_as_selections(definition_of):
    """1 token x top-2 over 8 experts: 2 experts run, one row each; 6 experts' weights stay unread."""
    cost = analyse(_moe(definition_of, tokens=1, experts=8), {})
    assert cost.flops_matmul == {"float32": 2 * 1 * H * 8 + 2 * 2048}  # 4,352
    assert cost.bytes_by_tensor == {"x": 64, "router": 512, "w1": 2 * INTER * H * 4, "w2": 2 * H * INTER * 4,
                                    "out": 64}
    assert cost.bytes_min == 8832


def test_uneven_share_is_rounded_up_and_never_rejected(definition_of):
    """10 tokens x 2 = 20 selections over 8 experts: 8 experts of ceil(20 / 8) = 3 rows each."""
    cost = analyse(_moe(definition_of, tokens=10, experts=8), {})
    assert cost.flops_matmul["float32"] == pytest.approx(2 * 10 * H * 8 + 8 * 3 * 2048)
    assert cost.flops_matmul_provable == 0  # approximate captures never feed the rejection bound
    assert min_possible_time_ms(cost, load_spec("H100_SXM")) == 0


ONE_HOT = (
    "import torch\n"
    "import torch.nn.functional as F\n"
    "def run(x, router, w1, w2):\n"
    "    probs = torch.softmax((x @ router.T).float(), dim=-1)\n"
    "    weights, ids = torch.topk(probs, 2, dim=-1)\n"
    "    out = torch.zeros_like(x)\n"
    "    mask = F.one_hot(ids, num_classes=router.shape[0]).permute(2, 1, 0)\n"
    "    for e in range(router.shape[0]):\n"
    "        if {guard}:\n"
    "            slot, tok = torch.where(mask[e])\n"
    "            h = torch.relu(x[tok] @ w1[e].T)\n"
    "            out.index_add_(0, tok, (h @ w2[e].T) * weights[tok, slot, None])\n"
    "    return out\n"
)


@pytest.mark.parametrize("guard", ["mask[e].sum() > 0", "True"])
@pytest.mark.parametrize("tokens, experts", [(16, 4), (3, 8)])
def test_one_hot_mask_routes_each_selection_once(definition_of, guard, tokens, experts):
    """one_hot(top-2 ids) over E experts: tokens*2 rows in total, spread evenly; a guard on the
    mask's sum runs exactly the experts that receive rows (decode: 6 of 8, prefill: all 4)."""
    d = definition_of(
        {"x": (["T", "H"], "float32"), "router": (["E", "H"], "float32"), "w1": (["E", "I", "H"], "float32"),
         "w2": (["E", "H", "I"], "float32")},
        {"out": (["T", "H"], "float32")}, ONE_HOT.format(guard=guard),
        {"T": tokens, "E": experts, "H": H, "I": INTER}, name=f"onehot{tokens}{guard[:4]}")
    cost = analyse(d, {})
    router = 2 * tokens * H * experts
    per_row = 2 * INTER * H + 2 * H * INTER
    assert cost.flops_matmul == {"float32": router + tokens * 2 * per_row}
    touched = min(experts, tokens * 2)
    if guard != "True":  # experts without rows are skipped: their weights are not read
        assert cost.bytes_by_tensor["w1"] == touched * INTER * H * 4
    assert any("one_hot" in note and "balanced routing" in note for note in cost.notes)
