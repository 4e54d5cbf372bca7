# Installs the kiln binary, public headers and libraries with an exported CMake package, so
# training code can `find_package(kiln)` and link `kiln::reader`.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KILN_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/kiln")
set(_kiln_targets kiln_formats kiln_reader)
if(KILN_BUILD_TOOLS)
  list(APPEND _kiln_targets kiln_tools kiln)
endif()

install(TARGETS ${_kiln_targets} EXPORT kilnTargets
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})

# Public headers keep their layer folder: #include "reader/loader.h".
foreach(_layer formats reader tools)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${_layer}/
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln/${_layer}
    FILES_MATCHING PATTERN "*.h" PATTERN "*.md")
endforeach()

install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kilnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kilnConfig.cmake INSTALL_DESTINATION ${KILN_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kilnConfig.cmake ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/FindxxHash.cmake ${PROJECT_SOURCE_DIR}/cmake/FindLMDB.cmake
  DESTINATION ${KILN_INSTALL_CMAKEDIR})
