# The libFuzzer targets (fuzz/): a project of their own, built with clang++ as an
# ExternalProject (the main build uses gcc), and one ctest entry per target that fuzzes for
# VESCALE_FUZZ_SECONDS. Skipped with a message when clang++ or its libFuzzer runtime is missing.
option(VESCALE_BUILD_FUZZERS "Build the libFuzzer targets under fuzz/ (needs clang++ with libFuzzer)" ON)
set(VESCALE_FUZZ_SECONDS 60 CACHE STRING "How long each fuzz.* test fuzzes, in seconds")
if(NOT VESCALE_BUILD_FUZZERS)
  return()
endif()

find_program(VESCALE_CLANGXX NAMES clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14)
if(NOT VESCALE_CLANGXX)
  message(STATUS "fuzz: clang++ not found; skipping the fuzzers (fuzz.* tests). apt-get install clang")
  return()
endif()
if(NOT DEFINED CACHE{VESCALE_LIBFUZZER_WORKS})
  set(probe "${CMAKE_BINARY_DIR}/CMakeFiles/libfuzzer_probe")
  file(WRITE "${probe}/probe.cpp"
       "extern \"C\" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n")
  execute_process(COMMAND ${VESCALE_CLANGXX} -fsanitize=fuzzer,address,undefined probe.cpp -o probe
                  WORKING_DIRECTORY "${probe}" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(rc EQUAL 0)
    set(VESCALE_LIBFUZZER_WORKS ON CACHE INTERNAL "")
  else()
    set(VESCALE_LIBFUZZER_WORKS OFF CACHE INTERNAL "")
  endif()
endif()
if(NOT VESCALE_LIBFUZZER_WORKS)
  message(STATUS "fuzz: ${VESCALE_CLANGXX} cannot link -fsanitize=fuzzer (libFuzzer runtime missing, "
                 "Debian: libclang-rt-<version>-dev); skipping the fuzzers (fuzz.* tests)")
  return()
endif()
message(STATUS "fuzz: building the fuzzers with ${VESCALE_CLANGXX}")

include(ExternalProject)
set(fuzz_bin "${CMAKE_BINARY_DIR}/fuzz")
set(fuzz_args -DCMAKE_CXX_COMPILER=${VESCALE_CLANGXX} -DCMAKE_BUILD_TYPE=RelWithDebInfo)
if(CCACHE_PROGRAM)
  list(APPEND fuzz_args -DCMAKE_CXX_COMPILER_LAUNCHER=${CCACHE_PROGRAM})
endif()
set(fuzzers plan config tokenizer)
set(fuzz_exes)
foreach(f ${fuzzers})
  list(APPEND fuzz_exes "${fuzz_bin}/${f}_fuzzer")
endforeach()
ExternalProject_Add(vescale_fuzzers
  SOURCE_DIR "${PROJECT_SOURCE_DIR}/fuzz"
  BINARY_DIR "${fuzz_bin}"
  CMAKE_ARGS ${fuzz_args}
  INSTALL_COMMAND ""
  BUILD_ALWAYS ON  # its own build decides what is stale (it sees our sources, we don't track them)
  BUILD_BYPRODUCTS ${fuzz_exes})

# Seeds: fuzz/corpus/<name>/ and the shipped plans and configs.
set(seeds_plan "${PROJECT_SOURCE_DIR}/fuzz/corpus/plan,${PROJECT_SOURCE_DIR}/configs/plans")
set(seeds_config "${PROJECT_SOURCE_DIR}/fuzz/corpus/config,${PROJECT_SOURCE_DIR}/configs")
set(seeds_tokenizer "${PROJECT_SOURCE_DIR}/fuzz/corpus/tokenizer")
foreach(f ${fuzzers})
  add_test(NAME fuzz.${f}
    COMMAND ${CMAKE_COMMAND} -DFUZZER=${fuzz_bin}/${f}_fuzzer -DSECONDS=${VESCALE_FUZZ_SECONDS}
            -DCORPUS=${fuzz_bin}/corpus/${f} -DARTIFACTS=${fuzz_bin}/artifacts/${f} "-DSEEDS=${seeds_${f}}"
            -DDICT=${PROJECT_SOURCE_DIR}/fuzz/${f}.dict
            -P ${PROJECT_SOURCE_DIR}/fuzz/run_fuzzer.cmake)
  set_tests_properties(fuzz.${f} PROPERTIES LABELS fuzz TIMEOUT 300)
endforeach()
