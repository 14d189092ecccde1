// C = A @ B^T with a CUTLASS device-level GEMM on tensor cores (the Ampere kernel, which Hopper runs):
// bfloat16 in and out, float32 accumulation; returns C.
//
// B is [N, K] row-major, which is the K x N column-major operand CUTLASS wants for B, so nothing is
// transposed. 128 x 128 x 32 block tiles, 64 x 64 warp tiles, 16 x 8 x 16 MMAs, 3 pipeline stages;
// operands need 8-element (16-byte) alignment, which K = N = 4096 and PyTorch's allocations give.

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include <cutlass/bfloat16.h>
#include <cutlass/gemm/device/gemm.h>

namespace {

using Element = cutlass::bfloat16_t;
using Gemm = cutlass::gemm::device::Gemm<
    Element, cutlass::layout::RowMajor,     // A [M, K]
    Element, cutlass::layout::ColumnMajor,  // B as K x N column-major = [N, K] row-major
    Element, cutlass::layout::RowMajor,     // C [M, N]
    float,                                  // accumulator
    cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
    cutlass::gemm::GemmShape<128, 128, 32>, cutlass::gemm::GemmShape<64, 64, 32>,
    cutlass::gemm::GemmShape<16, 8, 16>,
    cutlass::epilogue::thread::LinearCombination<Element, 8, float, float>,
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>, 3>;

}  // namespace

torch::Tensor run(torch::Tensor A, torch::Tensor B) {
  TORCH_CHECK(A.is_contiguous() && B.is_contiguous(), "A and B must be contiguous");
  TORCH_CHECK(A.scalar_type() == at::kBFloat16 && B.scalar_type() == at::kBFloat16, "bfloat16 inputs expected");
  const c10::cuda::CUDAGuard guard(A.device());
  const int m = static_cast<int>(A.size(0)), k = static_cast<int>(A.size(1)), n = static_cast<int>(B.size(0));
  torch::Tensor C = torch::empty({m, n}, A.options());
  const auto* a = reinterpret_cast<const Element*>(A.data_ptr());
  const auto* b = reinterpret_cast<const Element*>(B.data_ptr());
  auto* c = reinterpret_cast<Element*>(C.data_ptr());
  Gemm::Arguments arguments({m, n, k}, {a, k}, {b, k}, {c, n}, {c, n}, {1.0f, 0.0f});
  Gemm gemm;
  TORCH_CHECK(gemm.can_implement(arguments) == cutlass::Status::kSuccess, "CUTLASS cannot run this GEMM");
  const cutlass::Status status = gemm(arguments, nullptr, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cutlass::Status::kSuccess, "CUTLASS GEMM failed: ", cutlassGetStatusString(status));
  return C;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run, "C = A @ B^T (CUTLASS)"); }
