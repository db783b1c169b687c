# LibTorch the way Colab and Kaggle ship it: inside the `torch` Python package.
# GRADBOX_PYTHON names the interpreter whose torch we build against.
set(GRADBOX_PYTHON "${CMAKE_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH
    "Python interpreter with the torch package")
if(NOT EXISTS "${GRADBOX_PYTHON}")
  message(FATAL_ERROR "GRADBOX_PYTHON=${GRADBOX_PYTHON} does not exist: run scripts/setup.sh "
                      "or pass -DGRADBOX_PYTHON=/path/to/python (with torch installed)")
endif()
execute_process(
  COMMAND "${GRADBOX_PYTHON}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
  OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "${GRADBOX_PYTHON} cannot import torch.utils")
endif()
list(APPEND CMAKE_PREFIX_PATH "${_torch_prefix}")
# Without a GPU, torch's CMake probes for one by compiling a test program; name the targets
# instead (T4 7.5, A100 8.0, L4 8.9, H100/H200 9.0).
set(TORCH_CUDA_ARCH_LIST "7.5;8.0;8.9;9.0" CACHE STRING "CUDA architectures for CUDA code")
set(CMAKE_CUDA_STANDARD 17)
find_package(Torch REQUIRED)

# The pip wheel's CUDA libraries live in site-packages/nvidia/*/lib. The linker must resolve
# libtorch_cuda's dependencies there, not in the system CUDA toolkit (an older NCCL there
# lacks symbols); at run time libtorch_cuda's own RPATH finds them.
file(GLOB _nvidia_lib_dirs LIST_DIRECTORIES true "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
set(GRADBOX_TORCH_LINK_OPTIONS "")
foreach(_d ${_nvidia_lib_dirs})
  list(APPEND GRADBOX_TORCH_LINK_OPTIONS "-Wl,-rpath-link,${_d}")
endforeach()

# One interface target for everything that uses LibTorch.
add_library(gradbox_torch INTERFACE)
target_link_libraries(gradbox_torch INTERFACE ${TORCH_LIBRARIES})
target_link_options(gradbox_torch INTERFACE ${GRADBOX_TORCH_LINK_OPTIONS})
target_compile_options(gradbox_torch INTERFACE ${TORCH_CXX_FLAGS})
