# Installs the kiln binary, public headers and libraries with an exported CMake package, so
# training code can `find_package(kiln)` and link `kiln::reader`.
