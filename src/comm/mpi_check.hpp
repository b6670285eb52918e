#pragma once
// MPI error codes -> exceptions (the communicators use MPI_ERRORS_RETURN so a failure can be reported
// with context before the job is aborted at main()).
#include <mpi.h>

#include <stdexcept>
#include <string>

namespace divsim {

inline void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw std::runtime_error(std::string(what) + " failed: " + std::string(msg, static_cast<std::size_t>(len)));
}

}  // namespace divsim
