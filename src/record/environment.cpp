#include "record/environment.hpp"

#include <hdf5.h>

#include <Eigen/Core>
#include <boost/version.hpp>
#include <cstdlib>
#include <set>
#include <sstream>
#include <vector>

#include "comm/collectives.hpp"
#include "divsim_version.hpp"
#include "model/gemm_backend.hpp"

namespace divsim {

RootAttributes environment_attributes(MPI_Comm comm) {
  RootAttributes a;
  a.divsim_version = kVersion;
  a.git_sha = kGitSha;

  int procs = 1;
  MPI_Comm_size(comm, &procs);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  std::vector<char> all(static_cast<std::size_t>(procs) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm);
  std::set<std::string> hosts;
  for (int p = 0; p < procs; ++p) hosts.insert(all.data() + static_cast<std::size_t>(p) * MPI_MAX_PROCESSOR_NAME);

  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  MPI_Get_library_version(mpi, &len);
  std::string mpi_first_line(mpi);
  mpi_first_line = mpi_first_line.substr(0, mpi_first_line.find('\n'));
  unsigned h5maj = 0, h5min = 0, h5rel = 0;
  H5get_libversion(&h5maj, &h5min, &h5rel);

  // Process 0's node and choice, so that every process writes the same attributes.
  const NodeShare share = waiting_share();
  int shared[3] = {share.processes, share.cpus, current_waiting() == Waiting::yield ? 1 : 0};
  MPI_Bcast(shared, 3, MPI_INT, 0, comm);

  std::ostringstream env;
  env << "mpi=" << mpi_first_line << "\n"
      << "mpi_processes=" << procs << "\n"
      << "node=" << shared[0] << " processes on " << shared[1] << " cpus, waits " << (shared[2] ? "yield" : "sleep") << "\n"
      << "hdf5=" << h5maj << '.' << h5min << '.' << h5rel << "\n"
      << "eigen=" << EIGEN_WORLD_VERSION << '.' << EIGEN_MAJOR_VERSION << '.' << EIGEN_MINOR_VERSION << "\n"
      << "eigen_simd=" << Eigen::SimdInstructionSetsInUse() << "\n"
      << "gemm=" << gemm_backend() << "\n"
      << "boost=" << BOOST_LIB_VERSION << "\n"
      << "compiler=" << kCompiler << "\n"
      << "cuda=none\n"
      << "hosts=";
  for (auto it = hosts.begin(); it != hosts.end(); ++it) env << (it == hosts.begin() ? "" : ",") << *it;
  a.env = env.str();

  // A batch job's Slurm identity (process 0's view, so every process writes the same attributes).
  const std::pair<const char*, const char*> slurm[] = {
      {"SLURM_JOB_ID", "slurm_job_id"}, {"SLURM_ARRAY_JOB_ID", "slurm_array_job_id"},
      {"SLURM_ARRAY_TASK_ID", "slurm_array_task_id"}, {"SLURM_JOB_NODELIST", "slurm_nodes"},
      {"SLURM_JOB_NAME", "slurm_job_name"}};
  int process = 0;
  MPI_Comm_rank(comm, &process);
  for (const auto& [variable, attribute] : slurm) {
    const char* v = process == 0 ? std::getenv(variable) : nullptr;
    std::string value = v ? v : "";
    int length = static_cast<int>(value.size());
    MPI_Bcast(&length, 1, MPI_INT, 0, comm);
    value.resize(static_cast<std::size_t>(length));
    MPI_Bcast(value.data(), length, MPI_CHAR, 0, comm);
    if (!value.empty()) a.extra[attribute] = value;
  }
  return a;
}

}  // namespace divsim
