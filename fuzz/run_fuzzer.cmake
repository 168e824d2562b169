# Runs one fuzzer for a fixed time, starting from the seed folders that exist now (shipped
# plans may come and go) plus a working corpus in the build folder. ctest's fuzz.* entries
# call it:
#   cmake -DFUZZER=<exe> -DSECONDS=60 -DCORPUS=<dir> -DARTIFACTS=<dir> -DSEEDS=<dir>,<dir> [-DDICT=<file>] -P run_fuzzer.cmake
file(MAKE_DIRECTORY "${CORPUS}" "${ARTIFACTS}")
set(dirs "${CORPUS}")
string(REPLACE "," ";" seeds "${SEEDS}")
foreach(d IN LISTS seeds)
  if(IS_DIRECTORY "${d}")
    list(APPEND dirs "${d}")
  endif()
endforeach()
set(dict)
if(DICT)
  set(dict "-dict=${DICT}")
endif()
# -timeout: one input taking 10 s counts as a hang; -rss_limit_mb: 2 GB as a memory blow-up.
execute_process(COMMAND "${FUZZER}" -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=2048
                        -print_final_stats=1 "-artifact_prefix=${ARTIFACTS}/" ${dict} ${dirs}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${FUZZER} failed (${rc}): the input that broke it is in ${ARTIFACTS}/; "
                      "replay it with `${FUZZER} <file>` (docs/BUILD.md, Fuzzing)")
endif()
