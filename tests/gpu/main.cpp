// GoogleTest entry point of the GPU tests. MPI is initialised because the engine and the NCCL reducer
// are collective (here over a world of one process).
#include <gtest/gtest.h>
#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
