# Loaded by scripts/gpu-check.sh through CMAKE_PROJECT_INCLUDE: once the top-level CMakeLists
# has found its dependencies, points their imported targets at static archives, so the GPU
# check's binaries need nothing on the GPU node but glibc and the NVIDIA driver (libcuda.so.1,
# which the static CUDA runtime opens at run time). Build-time only; never installed.
set(KILN_STATIC_ZSTD "/usr/lib/x86_64-linux-gnu/libzstd.a" CACHE FILEPATH "static zstd")
set(KILN_STATIC_XXHASH "/usr/lib/x86_64-linux-gnu/libxxhash.a" CACHE FILEPATH "static xxHash")
set(KILN_STATIC_URING "/usr/lib/x86_64-linux-gnu/liburing.a" CACHE FILEPATH "static liburing")
set(KILN_STATIC_JPEG "/usr/lib/x86_64-linux-gnu/libjpeg.a" CACHE FILEPATH "static libjpeg-turbo")

function(kiln_gpu_check_static_deps)
  foreach(lib IN ITEMS "${KILN_STATIC_ZSTD}" "${KILN_STATIC_XXHASH}" "${KILN_STATIC_JPEG}")
    if(NOT EXISTS "${lib}")
      message(FATAL_ERROR
        "gpu-check: ${lib} is missing (Debian: libzstd-dev, libxxhash-dev, libjpeg62-turbo-dev)")
    endif()
  endforeach()
  # zstd's package config imports the shared library for configuration NONE (Debian).
  get_target_property(_cfgs zstd::libzstd_shared IMPORTED_CONFIGURATIONS)
  foreach(cfg IN LISTS _cfgs ITEMS "")
    if(cfg)
      set_property(TARGET zstd::libzstd_shared PROPERTY IMPORTED_LOCATION_${cfg} "${KILN_STATIC_ZSTD}")
      set_property(TARGET zstd::libzstd_shared PROPERTY IMPORTED_SONAME_${cfg})
    endif()
  endforeach()
  set_property(TARGET zstd::libzstd_shared PROPERTY IMPORTED_LOCATION "${KILN_STATIC_ZSTD}")
  set_property(TARGET xxHash::xxhash PROPERTY IMPORTED_LOCATION "${KILN_STATIC_XXHASH}")
  # libjpeg-turbo (the reader's JPEG records, reader/jpeg_sample_decoder.h): FindJPEG's imported
  # target names the shared library, per configuration when it found several.
  get_target_property(_jpeg_cfgs JPEG::JPEG IMPORTED_CONFIGURATIONS)
  foreach(cfg IN LISTS _jpeg_cfgs)
    if(cfg)
      set_property(TARGET JPEG::JPEG PROPERTY IMPORTED_LOCATION_${cfg} "${KILN_STATIC_JPEG}")
    endif()
  endforeach()
  set_property(TARGET JPEG::JPEG PROPERTY IMPORTED_LOCATION "${KILN_STATIC_JPEG}")
  # liburing (io_uring direct reads) where the build found it: pkg-config's target names the
  # shared library, which a bare GPU node does not have.
  if(TARGET PkgConfig::KILN_LIBURING)
    if(NOT EXISTS "${KILN_STATIC_URING}")
      message(FATAL_ERROR "gpu-check: ${KILN_STATIC_URING} is missing (Debian: liburing-dev)")
    endif()
    set_property(TARGET PkgConfig::KILN_LIBURING PROPERTY INTERFACE_LINK_LIBRARIES
      "${KILN_STATIC_URING}")
  endif()
  # The static CUDA runtime (dlopens libcuda.so.1 at run time).
  if(TARGET CUDA::cudart AND TARGET CUDA::cudart_static)
    get_target_property(_static CUDA::cudart_static IMPORTED_LOCATION)
    set_property(TARGET CUDA::cudart PROPERTY IMPORTED_LOCATION "${_static}")
    set_property(TARGET CUDA::cudart PROPERTY IMPORTED_SONAME)
    set_property(TARGET CUDA::cudart APPEND PROPERTY INTERFACE_LINK_LIBRARIES
      Threads::Threads ${CMAKE_DL_LIBS} rt)
  endif()
  message(STATUS "gpu-check: zstd, xxHash, libjpeg-turbo, liburing and the CUDA runtime linked statically")
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL kiln_gpu_check_static_deps)
set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
