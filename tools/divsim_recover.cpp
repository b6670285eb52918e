// divsim-recover: the recovery command as a program of its own (the same as `divsim recover`, see
// src/record/recover_command.hpp).
#include <mpi.h>

#include "record/recover_command.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int code = divsim::recover_command("divsim-recover", argc, argv);
  MPI_Finalize();
  return code;
}
