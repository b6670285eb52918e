#pragma once
// CUDA plumbing of the GPU backend: error checks that throw with the failing call named, owners (RAII)
// for device memory, streams and cuBLAS handles, and the choice of this process's GPU. Host code only.
// Deliberately absent: memory pools, pinned staging buffers, several streams: an MLP's transfers are
// small and the step loop waits for every result anyway.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

namespace divsim::gpu {

// Throw std::runtime_error("<what>: <error text>") unless the call succeeded.
void check(cudaError_t status, const char* what);
void check(cublasStatus_t status, const char* what);

// `size` elements of T in device memory.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t size) : size_(size) {
    if (size > 0) check(cudaMalloc(reinterpret_cast<void**>(&data_), size * sizeof(T)), "cudaMalloc");
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);
  }

  T* data() const { return data_; }
  std::size_t size() const { return size_; }

  // Host -> device at element `offset`. The host memory may be reused as soon as this returns.
  void upload(std::span<const T> host, cudaStream_t stream, std::size_t offset = 0) {
    fits(host.size(), offset);
    check(cudaMemcpyAsync(data_ + offset, host.data(), host.size_bytes(), cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync (upload)");
  }
  // Device -> host from element `offset`; returns when the values are on the host.
  void download(std::span<T> host, cudaStream_t stream, std::size_t offset = 0) const {
    fits(host.size(), offset);
    check(cudaMemcpyAsync(host.data(), data_ + offset, host.size_bytes(), cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync (download)");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }

 private:
  void fits(std::size_t n, std::size_t offset) const {
    if (offset + n > size_) throw std::logic_error("DeviceBuffer: copy past the end of the buffer");
  }
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// A cuBLAS handle whose calls run on `stream`.
class BlasHandle {
 public:
  explicit BlasHandle(cudaStream_t stream);
  ~BlasHandle();
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

// Number of CUDA devices this process sees; 0 with `why` filled when there is none or no driver.
int visible_devices(std::string& why);

// If any process of `comm` has a non-empty `local_error`, every process throws ConfigError(key, the first
// failing process's message), so none is left waiting in a later collective. Collective.
void throw_if_any_failed(MPI_Comm comm, const std::string& local_error, const char* key);

// Makes this process's GPU current: its node-local rank modulo the devices it sees (with Slurm's
// --gpus-per-task each task sees one). Returns the device ordinal. Collective over comm; throws
// ConfigError("run.device", ...) on every process if any process has no usable GPU.
int select_device(MPI_Comm comm);

}  // namespace divsim::gpu
