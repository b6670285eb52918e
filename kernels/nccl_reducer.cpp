// dist.backend=nccl: gradients summed by NCCL, as DDP does on GPUs. A process first adds its logical
// ranks' gradients in rank order on the host (as dist.reduce=mpi does), copies the sum to its GPU, and
// ncclAllReduce(SUM) combines the processes in NCCL's order: ring or tree, chosen by NCCL from the
// topology and its version, so the last bits may differ from MPI's, as between real clusters. The sum
// comes back to the host and is divided there, as DDP's default hook divides.
// Statistics (BatchNorm sums, losses) go through MPI: their order does not matter to the experiment.
// Not here: DDP buckets and overlapping the reduction with backward (dist.reduce=ring models bucket
// order on the CPU); several GPUs per process.
#include "nccl_reducer.hpp"

#include <nccl.h>

#include <algorithm>
#include <string>
#include <vector>

#include "comm/statistics.hpp"
#include "cuda_util.hpp"

namespace divsim {
namespace {

void check_nccl(ncclResult_t status, const char* what) {
  if (status != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(status));
}

// NCCL allows one rank per GPU: processes of one node must hold different devices. Compared by PCI bus
// id, since with Slurm's per-task binding every process calls its GPU device 0.
void require_distinct_gpus(MPI_Comm comm, int device) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local = 0, local_size = 1;
  MPI_Comm_rank(node, &local);
  MPI_Comm_size(node, &local_size);
  constexpr int kBusId = 32;
  char bus[kBusId] = {};
  std::string error;
  if (const cudaError_t status = cudaDeviceGetPCIBusId(bus, kBusId, device); status != cudaSuccess)
    error = std::string("cudaDeviceGetPCIBusId: ") + cudaGetErrorString(status);
  std::vector<char> all(static_cast<std::size_t>(local_size) * kBusId);
  MPI_Allgather(bus, kBusId, MPI_CHAR, all.data(), kBusId, MPI_CHAR, node);
  MPI_Comm_free(&node);
  for (int j = 0; j < local && error.empty(); ++j)
    if (std::string(all.data() + static_cast<std::size_t>(j) * kBusId) == bus)
      error = "node-local processes " + std::to_string(j) + " and " + std::to_string(local) + " share GPU " + bus +
              "; NCCL needs one GPU per process (Slurm: --gpus-per-task=1), or use dist.backend=mpi";
  gpu::throw_if_any_failed(comm, error, "dist.backend");
}

class NcclReducer final : public Reducer {
 public:
  NcclReducer(MPI_Comm comm, const ReduceLayout& layout) : comm_(comm), layout_(layout) {
    require_distinct_gpus(comm, gpu::select_device(comm));
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    ncclUniqueId id{};
    std::string error;
    if (rank == 0)
      if (const ncclResult_t status = ncclGetUniqueId(&id); status != ncclSuccess)
        error = std::string("ncclGetUniqueId: ") + ncclGetErrorString(status);
    gpu::throw_if_any_failed(comm, error, "dist.backend");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm);
    // Streams and memory belong to the current device, so they are made only now; the communicator
    // last, so nothing after it can throw and leak it.
    stream_ = std::make_unique<gpu::Stream>();
    buffer_ = gpu::DeviceBuffer<float>(layout_.num_params);
    check_nccl(ncclCommInitRank(&nccl_, size, id, rank), "ncclCommInitRank");
  }
  ~NcclReducer() override {
    if (nccl_) ncclCommDestroy(nccl_);
  }
  NcclReducer(const NcclReducer&) = delete;
  NcclReducer& operator=(const NcclReducer&) = delete;

  void allreduce_gradients(std::span<const std::span<float>> grads, int parts, double divisor) override {
    if (parts != 1) throw std::logic_error("dist.backend=nccl reduces one gradient part per rank");
    const std::size_t n = layout_.num_params;
    const std::span<float> acc = grads[0].first(n);
    for (std::size_t k = 1; k < grads.size(); ++k)
      for (std::size_t i = 0; i < n; ++i) acc[i] += grads[k][i];
    const cudaStream_t stream = stream_->get();
    buffer_.upload(acc, stream);
    check_nccl(ncclAllReduce(buffer_.data(), buffer_.data(), n, ncclFloat, ncclSum, nccl_, stream), "ncclAllReduce");
    buffer_.download(acc, stream);
    const auto d = static_cast<float>(divisor);
    for (float& v : acc) v /= d;
    for (std::size_t k = 1; k < grads.size(); ++k) std::copy(acc.begin(), acc.end(), grads[k].begin());
  }

  void sum_statistics(std::span<const double> values, int parts, std::span<double> out) override {
    sum_statistics_allreduce(values, layout_.rank_count * parts, out, comm_);
  }

 private:
  MPI_Comm comm_;
  ReduceLayout layout_;
  ncclComm_t nccl_ = nullptr;
  std::unique_ptr<gpu::Stream> stream_;
  gpu::DeviceBuffer<float> buffer_;
};

}  // namespace

std::unique_ptr<Reducer> make_nccl_reducer(MPI_Comm comm, const ReduceLayout& layout) {
  return std::make_unique<NcclReducer>(comm, layout);
}

}  // namespace divsim
