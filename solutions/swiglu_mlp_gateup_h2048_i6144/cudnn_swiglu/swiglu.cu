// SwiGLU MLP with its activation in cuDNN: output = (silu(gate) * up) @ down^T; returns the output.
//
// The two projections are PyTorch matmuls (bfloat16, float32 accumulation). The activation is computed in
// float32 by cuDNN: a sigmoid (cudnnActivationForward), then two element-wise products (cudnnOpTensor):
// silu(gate) * up = gate * sigmoid(gate) * up, rounded to bfloat16 before the down projection, as the
// reference does. One cuDNN handle per process, bound to PyTorch's current stream at every call.

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cudnn.h>
#include <torch/extension.h>

namespace {

void check(cudnnStatus_t status, const char* what) {
  TORCH_CHECK(status == CUDNN_STATUS_SUCCESS, what, " failed: ", cudnnGetErrorString(status));
}

cudnnHandle_t handle_for_current_stream() {
  static cudnnHandle_t handle = nullptr;
  if (handle == nullptr) check(cudnnCreate(&handle), "cudnnCreate");
  check(cudnnSetStream(handle, at::cuda::getCurrentCUDAStream()), "cudnnSetStream");
  return handle;
}

// A [rows, cols] contiguous float32 tensor as a 4-D NCHW descriptor (1 x 1 x rows x cols).
struct Descriptor {
  cudnnTensorDescriptor_t desc = nullptr;
  Descriptor(int64_t rows, int64_t cols) {
    check(cudnnCreateTensorDescriptor(&desc), "cudnnCreateTensorDescriptor");
    check(cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, static_cast<int>(rows),
                                     static_cast<int>(cols)), "cudnnSetTensor4dDescriptor");
  }
  ~Descriptor() { cudnnDestroyTensorDescriptor(desc); }
};

}  // namespace

torch::Tensor run(torch::Tensor hidden_states, torch::Tensor gate_up_weight, torch::Tensor down_weight) {
  const c10::cuda::CUDAGuard guard(hidden_states.device());
  const int64_t intermediate = down_weight.size(1);
  torch::Tensor gate_up = at::matmul(hidden_states, gate_up_weight.t());
  torch::Tensor gate = gate_up.narrow(1, 0, intermediate).to(at::kFloat).contiguous();
  torch::Tensor up = gate_up.narrow(1, intermediate, intermediate).to(at::kFloat).contiguous();
  torch::Tensor sigmoid = torch::empty_like(gate);
  torch::Tensor silu = torch::empty_like(gate);

  cudnnHandle_t handle = handle_for_current_stream();
  const Descriptor desc(gate.size(0), gate.size(1));
  const float one = 1.0f, zero = 0.0f;

  cudnnActivationDescriptor_t activation;
  check(cudnnCreateActivationDescriptor(&activation), "cudnnCreateActivationDescriptor");
  check(cudnnSetActivationDescriptor(activation, CUDNN_ACTIVATION_SIGMOID, CUDNN_NOT_PROPAGATE_NAN, 0.0),
        "cudnnSetActivationDescriptor");
  check(cudnnActivationForward(handle, activation, &one, desc.desc, gate.data_ptr(), &zero, desc.desc,
                               sigmoid.data_ptr()), "cudnnActivationForward");
  cudnnDestroyActivationDescriptor(activation);

  cudnnOpTensorDescriptor_t multiply;
  check(cudnnCreateOpTensorDescriptor(&multiply), "cudnnCreateOpTensorDescriptor");
  check(cudnnSetOpTensorDescriptor(multiply, CUDNN_OP_TENSOR_MUL, CUDNN_DATA_FLOAT, CUDNN_NOT_PROPAGATE_NAN),
        "cudnnSetOpTensorDescriptor");
  check(cudnnOpTensor(handle, multiply, &one, desc.desc, gate.data_ptr(), &one, desc.desc, sigmoid.data_ptr(),
                      &zero, desc.desc, silu.data_ptr()), "cudnnOpTensor (gate * sigmoid)");
  check(cudnnOpTensor(handle, multiply, &one, desc.desc, silu.data_ptr(), &one, desc.desc, up.data_ptr(),
                      &zero, desc.desc, sigmoid.data_ptr()), "cudnnOpTensor (silu * up)");
  cudnnDestroyOpTensorDescriptor(multiply);

  return at::matmul(sigmoid.to(hidden_states.scalar_type()), down_weight.t());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run, "SwiGLU MLP, activation in cuDNN"); }
