# GPU tests (-DDIVSIM_CUDA=ON only): the GPU twins of the layers and the loss against the CPU reference,
# the device Philox against numerics/philox, the GPU engine against the CPU engine, the NCCL reducer.
# Label `gpu`. Where no GPU is visible, each test that needs one reports SKIPPED with the reason.
if(NOT DIVSIM_CUDA)
  return()
endif()
file(GLOB DIVSIM_GPU_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.cpp)
# layer_bench runs a CPU layer style alone: the reference the GPU twins are compared with.
add_executable(divsim_gpu_tests ${DIVSIM_GPU_TEST_SOURCES} ${CMAKE_CURRENT_LIST_DIR}/../unit/layer_bench.cpp)
target_include_directories(divsim_gpu_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../unit)
target_link_libraries(divsim_gpu_tests PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,divsim_core>" GTest::gtest)
gtest_discover_tests(divsim_gpu_tests PROPERTIES LABELS gpu DISCOVERY_TIMEOUT 60)
