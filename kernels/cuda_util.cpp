// CUDA error checks, resource owners and device selection (see cuda_util.hpp). Nothing here launches
// kernels.
#include "cuda_util.hpp"

#include <string>
#include <vector>

#include "config/config_error.hpp"

namespace divsim::gpu {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + cublasGetStatusName(status) + " (" +
                             cublasGetStatusString(status) + ")");
}

Stream::Stream() { check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }
Stream::~Stream() { cudaStreamDestroy(stream_); }

BlasHandle::BlasHandle(cudaStream_t stream) {
  check(cublasCreate(&handle_), "cublasCreate");
  check(cublasSetStream(handle_, stream), "cublasSetStream");
}
BlasHandle::~BlasHandle() { cublasDestroy(handle_); }

namespace {

std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

}  // namespace

int visible_devices(std::string& why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaErrorInsufficientDriver) {
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    why = driver == 0 ? std::string("no NVIDIA driver found (not a GPU node?)")
                      : "the NVIDIA driver supports CUDA " + cuda_version(driver) + ", older than this build's CUDA " +
                            cuda_version(runtime);
    return 0;
  }
  if (status == cudaErrorNoDevice || (status == cudaSuccess && count == 0)) {
    why = "no CUDA device visible (check CUDA_VISIBLE_DEVICES and the job's GPU request)";
    return 0;
  }
  if (status != cudaSuccess) {
    why = std::string("no usable CUDA device (") + cudaGetErrorString(status) + ")";
    return 0;
  }
  return count;
}

void throw_if_any_failed(MPI_Comm comm, const std::string& local_error, const char* key) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int first = local_error.empty() ? size : rank;
  MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == size) return;
  std::string message = rank == first ? local_error : std::string();
  int length = static_cast<int>(message.size());
  MPI_Bcast(&length, 1, MPI_INT, first, comm);
  message.resize(static_cast<std::size_t>(length));
  MPI_Bcast(message.data(), length, MPI_CHAR, first, comm);
  throw ConfigError(key, message);
}

int select_device(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local_rank = 0;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_free(&node);

  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int host_length = 0;
  MPI_Get_processor_name(host, &host_length);
  std::string error;
  const int count = visible_devices(error);
  int device = 0;
  if (count > 0) {
    device = local_rank % count;
    const cudaError_t status = cudaSetDevice(device);
    if (status != cudaSuccess)
      error = "cudaSetDevice(" + std::to_string(device) + "): " + cudaGetErrorString(status);
  }
  if (!error.empty()) error = "process " + std::to_string(rank) + " on " + host + ": " + error;
  throw_if_any_failed(comm, error, "run.device");
  return device;
}

}  // namespace divsim::gpu
