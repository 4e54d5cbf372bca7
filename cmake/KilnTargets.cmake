# Helpers that give every kiln target the same warnings and sanitizer flags, per target.

function(kiln_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor>)
  # KILN_WERROR (default OFF): warnings fail the build, for CI.
  if(KILN_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()

function(kiln_set_sanitizers target)
  if(KILN_SANITIZE)
    string(REPLACE ";" "," _san "${KILN_SANITIZE}")
    target_compile_options(${target} PRIVATE -fsanitize=${_san} -fno-omit-frame-pointer)
    # PUBLIC: a program linking a sanitized static library needs the sanitizer runtime too,
    # even when it does not call kiln_set_sanitizers itself (samples, bench, test helpers).
    target_link_options(${target} PUBLIC -fsanitize=${_san})
  endif()
endfunction()

# kiln_add_library(NAME SOURCES ...): a static library whose headers are included as
# "layer/file.h" from the project root.
function(kiln_add_library name)
  add_library(${name} STATIC ${ARGN})
  target_include_directories(${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:include/kiln>)
  # C++17 for the library and everything that links it (instead of a global CMAKE_CXX_STANDARD).
  target_compile_features(${name} PUBLIC cxx_std_17)
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  kiln_set_warnings(${name})
  kiln_set_sanitizers(${name})
endfunction()
