# libtorch for the runtime: the one inside PyTorch's wheel in the project's Python environment
# (scripts/setup.sh installs it; docs/architecture.md, "Building against the wheel").
#
# Reads torch from FLEXPIPE_PYTHON (the environment's interpreter, which `flexpipe capture` runs too) and
# defines flexpipe::torch, the target the runtime, its tests and benchmarks link. What the wheel's own
# TORCH_LIBRARIES would do wrong here:
# - it carries caffe2::cuda, the toolkit's driver stub libcuda.so: a binary linked with it NEEDs
#   libcuda.so.1 and does not even load on a machine without an NVIDIA driver (ours, CI's). libtorch
#   opens the driver itself, lazily, when a GPU is asked for;
# - libtorch.so is an empty shim, so torch_cpu and torch_cuda are linked --no-as-needed: a library
#   whose symbols we never name would otherwise be dropped and CUDA would never register its kernels.
# The wheel ships c10d's public headers but not the Gloo headers they include: Debian's libgloo-dev
# provides those (headers only; Gloo's code is inside libtorch_cpu). It does ship fmt's headers (below).

execute_process(
  COMMAND ${FLEXPIPE_PYTHON} -c
    "import torch; print(torch.utils.cmake_prefix_path); print(torch.__version__.split('+')[0]); print(torch.version.cuda or '')"
  OUTPUT_VARIABLE flexpipe_torch_facts ERROR_VARIABLE flexpipe_torch_error RESULT_VARIABLE flexpipe_torch_result
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT flexpipe_torch_result EQUAL 0)
  message(FATAL_ERROR
    "FlexPipe: the runtime needs PyTorch's libtorch, read from ${FLEXPIPE_PYTHON}, which failed:\n"
    "${flexpipe_torch_error}\n"
    "Run scripts/setup.sh (it makes the environment), pass -DFLEXPIPE_PYTHON=/path/to/python with "
    "torch installed, or -DFLEXPIPE_RUNTIME=OFF to build everything else without torch.")
endif()
string(REPLACE "\n" ";" flexpipe_torch_facts "${flexpipe_torch_facts}")
list(GET flexpipe_torch_facts 0 flexpipe_torch_prefix)
list(GET flexpipe_torch_facts 1 flexpipe_torch_version)
list(LENGTH flexpipe_torch_facts flexpipe_torch_fact_count)
set(flexpipe_torch_cuda "")
if(flexpipe_torch_fact_count GREATER 2)
  list(GET flexpipe_torch_facts 2 flexpipe_torch_cuda)
endif()
list(PREPEND CMAKE_PREFIX_PATH ${flexpipe_torch_prefix})

# A CUDA wheel's config enables the CUDA language: point it at the toolkit's nvcc when CUDA_HOME says
# where it is. Without a toolkit, the wheel's config cannot be read at all.
if(flexpipe_torch_cuda AND NOT CMAKE_CUDA_COMPILER)
  if(DEFINED ENV{CUDA_HOME} AND EXISTS "$ENV{CUDA_HOME}/bin/nvcc")
    set(CMAKE_CUDA_COMPILER $ENV{CUDA_HOME}/bin/nvcc)
  else()
    find_program(CMAKE_CUDA_COMPILER nvcc PATHS /usr/local/cuda/bin)
  endif()
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR
      "FlexPipe: torch ${flexpipe_torch_version} in ${FLEXPIPE_PYTHON} is built with CUDA ${flexpipe_torch_cuda}, "
      "whose CMake config needs the CUDA toolkit's nvcc (none in CUDA_HOME, PATH or /usr/local/cuda); install "
      "the toolkit, or build with -DFLEXPIPE_RUNTIME=OFF.")
  endif()
  # We compile no CUDA sources: the config's dialect (C++20, from ours) is one CMake 3.25 cannot ask of
  # nvcc, and an architecture list spares it a probe for GPUs that would find none here.
  set(CMAKE_CUDA_STANDARD 17)
  if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST} AND NOT TORCH_CUDA_ARCH_LIST)
    set(TORCH_CUDA_ARCH_LIST "9.0")
  endif()
  get_filename_component(flexpipe_cuda_root ${CMAKE_CUDA_COMPILER} DIRECTORY)
  get_filename_component(CUDA_TOOLKIT_ROOT_DIR ${flexpipe_cuda_root} DIRECTORY)
endif()

# The wheel's config prints its progress and warnings that do not apply to us (no kineto library, the
# CUDA architectures of sources we do not have): only our one line below says what was found.
set(flexpipe_log_level ${CMAKE_MESSAGE_LOG_LEVEL})
set(CMAKE_MESSAGE_LOG_LEVEL ERROR)
find_package(Torch REQUIRED)
set(CMAKE_MESSAGE_LOG_LEVEL ${flexpipe_log_level})

find_path(FLEXPIPE_GLOO_INCLUDE_DIR gloo/transport/device.h)
if(NOT FLEXPIPE_GLOO_INCLUDE_DIR)
  message(FATAL_ERROR "FlexPipe: c10d's ProcessGroupGloo.hpp includes Gloo's headers, which the wheel lacks: "
                      "install Debian's libgloo-dev (scripts/setup.sh does)")
endif()

add_library(flexpipe_torch INTERFACE)
add_library(flexpipe::torch ALIAS flexpipe_torch)
target_include_directories(flexpipe_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS} ${FLEXPIPE_GLOO_INCLUDE_DIR})
get_target_property(flexpipe_torch_definitions torch_cpu INTERFACE_COMPILE_DEFINITIONS)
set(flexpipe_torch_libraries torch_cpu)
set(flexpipe_torch_devices "")
if(TARGET torch_cuda)
  list(APPEND flexpipe_torch_libraries torch_cuda)
  get_target_property(flexpipe_torch_cuda_definitions torch_cuda INTERFACE_COMPILE_DEFINITIONS)
  list(APPEND flexpipe_torch_definitions ${flexpipe_torch_cuda_definitions})
  target_compile_definitions(flexpipe_torch INTERFACE FLEXPIPE_TORCH_CUDA=1)
  set(FLEXPIPE_TORCH_CUDA ON)
else()
  set(FLEXPIPE_TORCH_CUDA OFF)
endif()
# The wheel ships fmt's headers (12.x, which c10's headers include) ahead of Debian's (9.x) on the
# include path, but not fmt's library: what includes torch uses fmt header-only, consistently in every
# file that sees torch's headers (fmt's versioned namespaces keep it apart from the libfmt.so.9 the
# torch-free libraries call).
target_compile_definitions(flexpipe_torch INTERFACE ${flexpipe_torch_definitions} FMT_HEADER_ONLY)
# The libraries themselves, not their imported targets, whose interfaces bring the driver stub, the
# toolkit's cudart (the wheel carries its own, found through torch_cuda's RPATH), protobuf and MKL.
list(APPEND flexpipe_torch_libraries c10)
if(FLEXPIPE_TORCH_CUDA)
  list(APPEND flexpipe_torch_libraries c10_cuda)
endif()
foreach(library ${flexpipe_torch_libraries})
  target_link_libraries(flexpipe_torch INTERFACE "-Wl,--no-as-needed,$<TARGET_FILE:${library}>,--as-needed")
endforeach()
get_target_property(flexpipe_torch_cpu_file torch_cpu IMPORTED_LOCATION_RELEASE)
get_filename_component(flexpipe_torch_library_dir ${flexpipe_torch_cpu_file} DIRECTORY)
target_link_options(flexpipe_torch INTERFACE "-Wl,-rpath,${flexpipe_torch_library_dir}")

set(flexpipe_backends "")
foreach(backend GLOO NCCL MPI UCC XCCL)
  if("USE_C10D_${backend}" IN_LIST flexpipe_torch_definitions)
    list(APPEND flexpipe_backends ${backend})
  endif()
endforeach()
list(JOIN flexpipe_backends ", " flexpipe_backends_text)
if(NOT flexpipe_backends_text)
  set(flexpipe_backends_text "none")
endif()
set(flexpipe_cuda_text "no CUDA")
if(FLEXPIPE_TORCH_CUDA)
  set(flexpipe_cuda_text "CUDA ${flexpipe_torch_cuda}")
endif()
set(FLEXPIPE_TORCH_VERSION ${flexpipe_torch_version})
set(FLEXPIPE_TORCH_CUDA_VERSION ${flexpipe_torch_cuda})
set(FLEXPIPE_C10D_BACKENDS ${flexpipe_backends})
message(STATUS "FlexPipe: libtorch ${flexpipe_torch_version}, ${flexpipe_cuda_text}, c10d backends: "
               "${flexpipe_backends_text} (from ${FLEXPIPE_PYTHON})")
