# An out-of-tree tenant builds against an installed Nexus with find_package(nexus), as
# examples/out_of_tree shows users and the Debian package ships it: catches a version the
# package does not satisfy (the example once asked for 0.2 of a 0.1.0 package, found only by
# installing the .deb) or a dependency the CMake package config forgets. Installs with DESTDIR
# into SCRATCH, so nothing is written outside the build tree. The example is built with the
# build's own compile and link flags: a sanitizer build's library needs its runtime linked in.
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE "${SCRATCH}")
execute_process(COMMAND ${CMAKE_COMMAND} -E env DESTDIR=${SCRATCH}/root ${CMAKE_COMMAND} --install ${BINARY}
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install ${BINARY} failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE}/examples/out_of_tree -B ${SCRATCH}/build -G Ninja
                        -DCMAKE_PREFIX_PATH=${SCRATCH}/root${PREFIX} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
                        "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${LINK_FLAGS}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "configuring examples/out_of_tree against the install failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${SCRATCH}/build RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "building examples/out_of_tree against the install failed:\n${out}\n${err}")
endif()
if(NOT EXISTS ${SCRATCH}/build/hello_tenant)
  message(FATAL_ERROR "no hello_tenant was built")
endif()
file(REMOVE_RECURSE "${SCRATCH}")
