// GoogleTest entry point. MPI is initialised once because some units (reducers, the HDF5 writer) run
// on MPI_COMM_WORLD; as a single process that is a world of size 1.
#include <gtest/gtest.h>
#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
