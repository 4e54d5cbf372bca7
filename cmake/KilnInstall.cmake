# Installs the kiln binary, public headers and libraries with an exported CMake package, so
# training code can `find_package(kiln)` and link `kiln::reader`.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KILN_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/kiln")
# Two export sets, so that find_package(kiln COMPONENTS reader) needs no OpenCV: kiln::formats
# and kiln::reader in kilnTargets, kiln::tools and the kiln binary in kilnToolsTargets.
install(TARGETS kiln_formats kiln_reader EXPORT kilnTargets
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(KILN_BUILD_TOOLS)
  install(TARGETS kiln_tools_base kiln_tools kiln EXPORT kilnToolsTargets
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  # The image plugin that `kiln pack` and `kiln show` open (tools/imaging/imaging_plugin.h): found from
  # BINDIR/kiln as BINDIR/../LIBDIR/kiln/kiln_imaging.so.
  install(TARGETS kiln_imaging LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/kiln)
  install(FILES ${KILN_BASH_COMPLETION} DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)
  install(EXPORT kilnToolsTargets NAMESPACE kiln:: DESTINATION ${KILN_INSTALL_CMAKEDIR})
endif()

# Public headers keep their layer folder: #include "reader/loader.h".
foreach(_layer formats reader tools)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${_layer}/
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln/${_layer}
    FILES_MATCHING PATTERN "*.h" PATTERN "*.md"
    # Internal headers (verifier parts, backend wrappers that include lmdb.h or hdf5.h, hash
    # dispatch) stay out: no public header includes them.
    PATTERN "verifier_checks.h" EXCLUDE
    PATTERN "*_verifier.h" EXCLUDE
    PATTERN "lmdb_env.h" EXCLUDE
    PATTERN "hdf5_file.h" EXCLUDE
    PATTERN "xxh3.h" EXCLUDE)
endforeach()

install(FILES ${PROJECT_BINARY_DIR}/generated/formats/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln/formats)

install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kilnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kilnConfig.cmake INSTALL_DESTINATION ${KILN_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kilnConfig.cmake ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/FindxxHash.cmake ${PROJECT_SOURCE_DIR}/cmake/FindLMDB.cmake
  DESTINATION ${KILN_INSTALL_CMAKEDIR})
