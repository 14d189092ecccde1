// C = A @ B^T with cuBLAS: bfloat16 in and out, float32 compute; destination-passing (writes C).
//
// cuBLAS is column-major. Row-major A [M, K] is column-major A^T (K x M), row-major B [N, K] is column-major
// B^T (K x N), and row-major C [M, N] is column-major C^T (N x M) = B A^T: one GEMM with B transposed.
// PyTorch's handle for the current stream is used: it carries the stream and a workspace, so the call can
// be captured in a CUDA graph.

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublas_v2.h>
#include <torch/extension.h>

void run(torch::Tensor A, torch::Tensor B, torch::Tensor C) {
  TORCH_CHECK(A.is_contiguous() && B.is_contiguous() && C.is_contiguous(), "A, B and C must be contiguous");
  TORCH_CHECK(A.scalar_type() == at::kBFloat16 && B.scalar_type() == at::kBFloat16, "bfloat16 inputs expected");
  const c10::cuda::CUDAGuard guard(A.device());
  const int m = static_cast<int>(A.size(0)), k = static_cast<int>(A.size(1)), n = static_cast<int>(B.size(0));
  const float alpha = 1.0f, beta = 0.0f;
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
  const cublasStatus_t status = cublasGemmEx(
      handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha,
      B.data_ptr(), CUDA_R_16BF, k,
      A.data_ptr(), CUDA_R_16BF, k, &beta,
      C.data_ptr(), CUDA_R_16BF, n,
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS, "cublasGemmEx failed: ", cublasGetStatusString(status));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run, "C = A @ B^T (cuBLAS)"); }
