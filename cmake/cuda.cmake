# The CUDA backend plugin, libkerasc_cuda.so, in the build directory root
# (next to the kerasc executable), built whenever nvcc and cuDNN are found.
# It does not link libkerasc: it includes kerasc's internal headers for the
# struct layouts only and exports a single symbol, kc_backend_cuda_iface.
include(CheckLanguage)
get_filename_component(KC_CUDA_TREE "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

# nvcc on PATH, or in /usr/local/cuda/bin (CUDACXX is what check_language
# and enable_language read).
if(NOT CMAKE_CUDA_COMPILER AND "$ENV{CUDACXX}" STREQUAL "")
  find_program(KC_NVCC nvcc HINTS /usr/local/cuda/bin)
  if(KC_NVCC)
    set(ENV{CUDACXX} "${KC_NVCC}")
  endif()
endif()
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "kerasc: nvcc not found, the CUDA backend plugin is not built")
  return()
endif()

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  # Ampere and Hopper (H100/H200) natively; compute_90 PTX for newer GPUs.
  set(CMAKE_CUDA_ARCHITECTURES "80-real;90")
endif()
enable_language(CUDA)
find_package(CUDAToolkit)
if(NOT CUDAToolkit_FOUND)
  message(STATUS "kerasc: CUDA toolkit libraries not found, the CUDA backend plugin is not built")
  return()
endif()

get_filename_component(KC_CUDA_ROOT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
find_path(KC_CUDNN_INCLUDE_DIR cudnn.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} ${KC_CUDA_ROOT}/include /usr/local/cuda/include)
find_library(KC_CUDNN_LIBRARY cudnn
  HINTS ${CUDAToolkit_LIBRARY_DIR} ${KC_CUDA_ROOT}/lib ${KC_CUDA_ROOT}/lib64
        /usr/local/cuda/lib64 /usr/local/cuda/lib)
if(NOT KC_CUDNN_INCLUDE_DIR OR NOT KC_CUDNN_LIBRARY OR NOT TARGET CUDA::cublas)
  message(STATUS "kerasc: cuDNN or cuBLAS not found, the CUDA backend plugin is not built")
  return()
endif()

file(GLOB KC_CUDA_SOURCES CONFIGURE_DEPENDS
  ${KC_CUDA_TREE}/src/backend/cuda/*.c ${KC_CUDA_TREE}/src/backend/cuda/*.cu)
add_library(kerasc_cuda MODULE ${KC_CUDA_SOURCES})
set_target_properties(kerasc_cuda PROPERTIES
  OUTPUT_NAME kerasc_cuda
  PREFIX "lib"
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}
  C_VISIBILITY_PRESET hidden
  CUDA_VISIBILITY_PRESET hidden
  CUDA_STANDARD 17
  CUDA_STANDARD_REQUIRED ON
  CUDA_RUNTIME_LIBRARY Shared
  CUDA_SEPARABLE_COMPILATION OFF
  POSITION_INDEPENDENT_CODE ON)

# The directory's compile options (-Wall -Wextra -Werror ..., sanitizers)
# are gcc flags: keep them for the C sources and hand nvcc its own.
get_property(KC_DIR_COMPILE_OPTIONS DIRECTORY PROPERTY COMPILE_OPTIONS)
set(KC_CUDA_C_OPTIONS "")
foreach(opt ${KC_DIR_COMPILE_OPTIONS})
  list(APPEND KC_CUDA_C_OPTIONS "$<$<COMPILE_LANGUAGE:C>:${opt}>")
endforeach()
set_property(TARGET kerasc_cuda PROPERTY COMPILE_OPTIONS ${KC_CUDA_C_OPTIONS})
target_compile_options(kerasc_cuda PRIVATE
  "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror>"
  "$<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>")

target_include_directories(kerasc_cuda PRIVATE
  ${KC_CUDA_TREE}/src ${KC_CUDA_TREE}/include ${KC_CUDNN_INCLUDE_DIR})
# graph/graph.h includes <cjson/cJSON.h>: its headers, not the library.
if(TARGET PkgConfig::CJSON)
  get_target_property(KC_CUDA_CJSON_INC PkgConfig::CJSON INTERFACE_INCLUDE_DIRECTORIES)
  if(KC_CUDA_CJSON_INC)
    target_include_directories(kerasc_cuda PRIVATE ${KC_CUDA_CJSON_INC})
  endif()
endif()
target_link_libraries(kerasc_cuda PRIVATE ${KC_CUDNN_LIBRARY} CUDA::cublas CUDA::cudart)
# Find cuDNN / cuBLAS / cudart where they were found at build time even
# when they are not in the loader's cache.
get_filename_component(KC_CUDNN_LIBRARY_DIR "${KC_CUDNN_LIBRARY}" DIRECTORY)
set_target_properties(kerasc_cuda PROPERTIES
  BUILD_RPATH "${KC_CUDNN_LIBRARY_DIR};${CUDAToolkit_LIBRARY_DIR}"
  INSTALL_RPATH "${KC_CUDNN_LIBRARY_DIR};${CUDAToolkit_LIBRARY_DIR}")
# No undefined symbols may be left for libkerasc to resolve.
# Never unmapped by dlclose: the CUDA runtime it pulls in keeps exit-time
# handlers that must outlive a host's dlclose.
target_link_options(kerasc_cuda PRIVATE "LINKER:--no-undefined" "LINKER:-z,nodelete")

message(STATUS "kerasc: CUDA backend plugin enabled (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
               "architectures ${CMAKE_CUDA_ARCHITECTURES}, cuDNN ${KC_CUDNN_LIBRARY})")

# tools/bench/cudnn_layouts: ResNet50's convolution shapes timed on cuDNN
# in NHWC and NCHW and on cuBLAS (the measurements behind the plugin's
# layout and algorithm rules); carried to GPU machines by gpu-bundle.sh.
add_executable(cudnn_layouts ${KC_CUDA_TREE}/tools/bench/cudnn_layouts.c)
target_include_directories(cudnn_layouts PRIVATE ${KC_CUDNN_INCLUDE_DIR})
target_link_libraries(cudnn_layouts PRIVATE ${KC_CUDNN_LIBRARY} CUDA::cublas CUDA::cudart)
set_target_properties(cudnn_layouts PROPERTIES
  BUILD_RPATH "${KC_CUDNN_LIBRARY_DIR};${CUDAToolkit_LIBRARY_DIR}")
