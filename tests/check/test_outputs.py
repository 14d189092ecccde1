import collections
import typing

import pytest
import torch

from solbench.check.outputs import LazyContainer, OutputError, byte_span, normalize_outputs, structural_check
from solbench.spec.trace import Status
from tests.check.check_builders import build_definition

ONE = build_definition({"y": {"shape": ["n"], "dtype": "float32"}})
TWO = build_definition({"y": {"shape": ["n"], "dtype": "float32"}, "idx": {"shape": ["n"], "dtype": "int64"}})
SCALAR = build_definition({"loss": {"shape": None, "dtype": "float32"}})
AXES = {"n": 4}


# -- normalize_outputs --------------------------------------------------------------------------

def test_single_tensor():
    t = torch.zeros(4)
    assert normalize_outputs(t, ONE)[0] is t


def test_one_element_tuple_and_dict_for_single_output():
    t = torch.zeros(4)
    assert normalize_outputs((t,), ONE)[0] is t
    assert normalize_outputs({"y": t}, ONE)[0] is t


def test_tuple_in_order_and_count_checked():
    a, b = torch.zeros(4), torch.zeros(4, dtype=torch.int64)
    assert normalize_outputs([a, b], TWO) == [a, b]
    with pytest.raises(OutputError) as info:
        normalize_outputs((a,), TWO)
    assert "1 values" in str(info.value) and "2 outputs" in str(info.value)


def test_dict_reordered_by_name():
    a, b = torch.zeros(4), torch.zeros(4, dtype=torch.int64)
    assert normalize_outputs({"idx": b, "y": a}, TWO) == [a, b]


def test_dict_missing_or_extra_keys_are_errors():
    a, b = torch.zeros(4), torch.zeros(4, dtype=torch.int64)
    with pytest.raises(OutputError) as info:
        normalize_outputs({"y": a}, TWO)
    assert "missing ['idx']" in str(info.value)
    with pytest.raises(OutputError) as info:
        normalize_outputs({"y": a, "idx": b, "debug": a}, TWO)
    assert "debug" in str(info.value)


def test_single_tensor_for_several_outputs_is_an_error():
    with pytest.raises(OutputError):
        normalize_outputs(torch.zeros(4), TWO)


def test_python_number_only_for_scalar_outputs():
    assert normalize_outputs(1.5, SCALAR) == [1.5]
    assert normalize_outputs(torch.tensor(2.5), SCALAR) == [2.5]
    with pytest.raises(OutputError):
        normalize_outputs(1.5, ONE)
    with pytest.raises(OutputError):
        normalize_outputs("1.5", SCALAR)


@pytest.mark.parametrize("bad", [None, "text", [[1.0]], object()])
def test_anything_else_is_an_error(bad):
    with pytest.raises(OutputError):
        normalize_outputs(bad, ONE)


# -- structural_check ---------------------------------------------------------------------------

def test_plain_outputs_pass():
    assert structural_check([torch.zeros(4), torch.zeros(4, dtype=torch.int64)], TWO, AXES) == (None, "")


class Lazy(torch.Tensor):
    pass


def test_subclass_is_reward_hack():
    status, message = structural_check([torch.zeros(4).as_subclass(Lazy)], ONE, AXES)
    assert status == Status.REWARD_HACK and "Lazy" in message and "'y'" in message


def test_fake_tensor_is_reward_hack():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.zeros(4)
    status, message = structural_check([fake], ONE, AXES)
    assert status == Status.REWARD_HACK and "FakeTensor" in message


def test_meta_and_sparse_outputs_are_reward_hacks():
    assert structural_check([torch.empty(4, device="meta")], ONE, AXES)[0] == Status.REWARD_HACK
    assert structural_check([torch.zeros(4).to_sparse()], ONE, AXES)[0] == Status.REWARD_HACK


def test_shape_then_dtype():
    status, message = structural_check([torch.zeros(5)], ONE, AXES)
    assert status == Status.INCORRECT_SHAPE and "(5,)" in message and "(4,)" in message
    status, message = structural_check([torch.zeros(4, dtype=torch.float64)], ONE, AXES)
    assert status == Status.INCORRECT_DTYPE and "float64" in message
    assert structural_check([torch.zeros(5, dtype=torch.float64)], ONE, AXES)[0] == Status.INCORRECT_SHAPE


def test_wrong_output_count():
    assert structural_check([torch.zeros(4)], TWO, AXES)[0] == Status.INCORRECT_SHAPE


def test_scalar_output_must_be_a_number():
    assert structural_check([1.0], SCALAR, {}) == (None, "")
    assert structural_check([torch.tensor(1.0)], SCALAR, {})[0] == Status.INCORRECT_SHAPE


def test_output_aliasing_an_input_is_reward_hack():
    x = torch.zeros(4)
    status, message = structural_check([x.view(4)], ONE, AXES, inputs=[x])
    assert status == Status.REWARD_HACK and "'x'" in message and "'y'" in message
    big = torch.zeros(8)
    assert structural_check([big[2:6]], ONE, AXES, inputs=[big])[0] == Status.REWARD_HACK  # a view into the input
    assert structural_check([torch.zeros(4)], ONE, AXES, inputs=[x]) == (None, "")


def test_outputs_aliasing_each_other_is_reward_hack():
    buffer = torch.zeros(4)
    status, message = structural_check([buffer, buffer.to(torch.int64)], TWO, AXES)
    assert status is None  # .to() copies
    both = build_definition({"a": {"shape": ["n"], "dtype": "float32"}, "b": {"shape": ["n"], "dtype": "float32"}})
    status, message = structural_check([buffer, buffer], both, AXES)
    assert status == Status.REWARD_HACK and "'a'" in message and "'b'" in message


def test_disjoint_slices_of_one_buffer_are_fine():
    both = build_definition({"a": {"shape": ["n"], "dtype": "float32"}, "b": {"shape": ["n"], "dtype": "float32"}})
    buffer = torch.zeros(8)
    assert structural_check([buffer[:4], buffer[4:]], both, AXES) == (None, "")
    assert structural_check([buffer[:4], buffer[3:7]], both, AXES)[0] == Status.REWARD_HACK


def test_empty_tensors_never_alias():
    both = build_definition({"a": {"shape": ["n"], "dtype": "float32"}, "b": {"shape": ["n"], "dtype": "float32"}})
    buffer = torch.zeros(0)
    assert structural_check([buffer, buffer], both, {"n": 0}) == (None, "")


def test_byte_span_of_strided_view():
    t = torch.zeros(4, 4)
    start, end = byte_span(t[:, 1])
    assert start == t.data_ptr() + 4 and end == start + (3 * 4 + 1) * 4


def test_interleaved_disjoint_views_do_not_alias_but_overlapping_ones_do():
    from solbench.check.outputs import _overlap

    u = torch.randn(2, 768, 10)
    assert not _overlap(u[:, :256], u[:, 256:512])  # channel slices: interleaved byte ranges, no shared element
    assert _overlap(u[:, :256], u[:, 100:300])
    assert _overlap(u, u[1])


# -- result containers (issue 31) ----------------------------------------------------------------

class _Named(typing.NamedTuple):
    y: torch.Tensor
    idx: torch.Tensor


def test_plain_containers_are_read_through_the_builtin_types():
    a, b = torch.zeros(4), torch.zeros(4, dtype=torch.int64)
    assert normalize_outputs(_Named(a, b), TWO) == [a, b]
    assert normalize_outputs(collections.OrderedDict(idx=b, y=a), TWO) == [a, b]
    structseq = torch.max(torch.ones(4, 3), 1)  # a torch.return_types structseq
    assert [t.shape for t in normalize_outputs(structseq, TWO)] == [(4,), (4,)]


class _LazyDict(dict):
    def __getitem__(self, key):
        return torch.ones(4)


class _LazyTuple(tuple):
    def __iter__(self):
        yield torch.ones(4)


class _ClassProperty:
    """Reading `__class__` would run code: the harness reads `type()` instead."""
    touched = False

    @property
    def __class__(self):
        _ClassProperty.touched = True
        return tuple


@pytest.mark.parametrize("result,fragment", [
    (_LazyDict(y=None), "redefines ['__getitem__']"),
    (_LazyTuple((None,)), "redefines ['__iter__']"),
    (collections.UserDict(y=torch.ones(4)), "results must be a tensor, or a tuple"),
])
def test_containers_that_compute_on_reading_are_refused_in_one_line(result, fragment):
    with pytest.raises(LazyContainer) as info:
        normalize_outputs(result, ONE)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_no_code_of_the_result_runs_while_it_is_read():
    with pytest.raises(OutputError):
        normalize_outputs(_ClassProperty(), ONE)
    assert not _ClassProperty.touched
