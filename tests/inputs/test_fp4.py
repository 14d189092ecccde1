import pytest
import torch

from solbench.inputs.fp4 import E2M1_VALUES, FP4_DTYPE, pack_codes, pack_fp4, unpack_codes, unpack_fp4


def test_codes_round_trip():
    codes = torch.randint(0, 16, (3, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    packed = pack_codes(codes)
    assert packed.dtype == FP4_DTYPE and packed.shape == (3, 4)
    assert torch.equal(unpack_codes(packed), codes)


def test_low_nibble_is_the_first_element():
    packed = torch.tensor([0x72], dtype=torch.uint8).view(FP4_DTYPE)  # low 2 -> 1.0, high 7 -> 6.0
    assert unpack_fp4(packed).tolist() == [1.0, 6.0]


def test_every_code_has_its_value():
    codes = torch.arange(16, dtype=torch.uint8)
    values = unpack_fp4(pack_codes(codes))
    assert values.tolist() == list(E2M1_VALUES)
    assert torch.isfinite(values).all()


def test_values_round_trip_through_quantisation():
    values = torch.tensor([[0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0, 0.0]])
    assert torch.equal(unpack_fp4(pack_fp4(values)), values)


def test_quantisation_rounds_to_nearest_and_clamps():
    values = torch.tensor([0.7, 2.6, 100.0, -5.5])
    assert unpack_fp4(pack_fp4(values)).tolist() == [0.5, 3.0, 6.0, -6.0]


def test_pack_rejects_odd_last_dim_and_bad_codes():
    with pytest.raises(ValueError):
        pack_codes(torch.zeros(3, dtype=torch.uint8))
    with pytest.raises(ValueError):
        pack_codes(torch.full((2,), 16, dtype=torch.uint8))
