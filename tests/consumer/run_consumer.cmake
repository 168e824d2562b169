# ctest driver: install vescale into a prefix, move the prefix elsewhere (the install must be
# relocatable: no path of this build in its CMake files), build the consumer against the moved
# prefix, and run it on 2 ranks with the installed vescale-run.
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/staging
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "install failed: ${rc}")
endif()
file(RENAME ${WORK_DIR}/staging ${WORK_DIR}/prefix)
get_filename_component(torch_site "${Torch_DIR}/../../.." ABSOLUTE)
file(GLOB exported ${WORK_DIR}/prefix/lib/cmake/vescale/*.cmake)
foreach(f ${exported})
  file(READ ${f} text)
  foreach(path ${BUILD_DIR} ${SOURCE_ROOT} ${torch_site} ${WORK_DIR}/staging)
    string(FIND "${text}" "${path}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "${f} names a path of this machine (${path}): the install is not relocatable")
    endif()
  endforeach()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -G Ninja
                -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DTorch_DIR=${Torch_DIR}
                -DCMAKE_BUILD_TYPE=Release
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer failed: ${rc}")
endif()
file(MAKE_DIRECTORY ${WORK_DIR}/run)
execute_process(COMMAND ${WORK_DIR}/prefix/bin/vescale-run --nproc-per-node 2 --
                        ${WORK_DIR}/build/consumer
                WORKING_DIRECTORY ${WORK_DIR}/run RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the consumer failed: ${rc}")
endif()
