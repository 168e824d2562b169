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
                WORKING_DIRECTORY ${WORK_DIR}/run RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(rc)
  message(FATAL_ERROR "the consumer failed: ${rc}")
endif()
# An embedder logs as the apps do ("[rank 0] 12:34:56.789 info ..."), not in spdlog's default.
if(NOT err MATCHES "\\[rank 0\\] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]\\.[0-9][0-9][0-9] info model llama")
  message(FATAL_ERROR "the consumer's log lines are not in the apps' format")
endif()

# The installed prefix alone: vescale-train finds its shipped configs by name, their plans, the
# built-in data and the BPE vocabulary under share/vescale, and no message names this build.
foreach(name nanogpt_tiny llama_tiny_bpe)
  execute_process(COMMAND ${WORK_DIR}/prefix/bin/vescale-train --config ${name} --set train.steps=2
                          --set train.batch_size=2 --set train.seq_len=32 --set train.sample_every=0
                          --set "log.metrics_jsonl=\"\""
                  WORKING_DIRECTORY ${WORK_DIR}/run RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(rc)
    message(FATAL_ERROR "the installed vescale-train --config ${name} failed: ${rc}")
  endif()
  # (The prefix itself lies inside the build folder: look for the build's own folders.)
  foreach(path ${BUILD_DIR}/data ${BUILD_DIR}/share ${BUILD_DIR}/apps ${SOURCE_ROOT}/configs
               ${SOURCE_ROOT}/data)
    string(FIND "${out}${err}" "${path}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "the installed vescale-train names a path of the build (${path})")
    endif()
  endforeach()
  if(NOT err MATCHES "done: 2 steps")
    message(FATAL_ERROR "the installed vescale-train --config ${name} did not train")
  endif()
endforeach()
