# Test registration helpers.
#
#   ckpt_add_unit_test(NAME <name> SOURCES <src...> [LIBS <lib...>] [ARGS ...] [TIMEOUT s] [LABELS ...])
#     One executable run once, LABELS unit.
#
#   ckpt_add_mpi_test(NAME <name> TARGET <exe> NP <n...> [OVERSUB <n...>] [ARGS ...] [TIMEOUT s]
#                     [LABELS ...] [DEPENDS_ON <name>])
#     Registers <name>.np<N> for every rank count: mpirun -np N <exe> <args>, LABELS mpi. Each test
#     gets a private output directory, emptied by a setup fixture before it runs; the literal
#     argument @OUTDIR@ in ARGS is replaced by that directory (also exported as MPICKPT_TEST_DIR).
#     OVERSUB rank counts run with more ranks than cores (labelled mpi and oversubscribed). In the
#     sanitizer build the np1 run of a test with other rank counts is disabled (listed, not run).

set(MPICKPT_TEST_OUT ${CMAKE_BINARY_DIR}/testout)
# Fixture script: a test's output directory is removed and created empty before the test runs.
set(MPICKPT_FRESH_DIR ${CMAKE_CURRENT_LIST_DIR}/fresh_dir.cmake)
set(MPICKPT_TEST_ENV
  OMPI_ALLOW_RUN_AS_ROOT=1
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  OMPI_MCA_rmaps_base_oversubscribe=1
  # Ranks outnumber cores: yield instead of spinning, or oversubscribed jobs crawl.
  OMPI_MCA_mpi_yield_when_idle=1
  # A killed rank brings the job down at once instead of after the default grace period.
  OMPI_MCA_odls_base_sigkill_timeout=0
  # Sanitizer builds: keep MPI plugins loaded and unwind fully at malloc so that leaks inside the
  # MPI runtime are attributed to its libraries and matched by tests/lsan.supp; ours still report.
  OMPI_MCA_mca_base_component_disable_dlclose=1
  LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/lsan.supp:print_suppressions=0
  # The last option reads more from build/asan-options/<program> when ckpt_asan_fast_unwind
  # wrote one for that program (below).
  ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0:strict_string_checks=1:include_if_exists=${CMAKE_BINARY_DIR}/asan-options/%b
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  MPICKPT_SOURCE_DIR=${PROJECT_SOURCE_DIR}
  MPICKPT_BINARY_DIR=${CMAKE_BINARY_DIR})

# ckpt_asan_fast_unwind(<program>...): programs that never call MPI_Init (lib/ has no MPI, nor the
# unit tests) keep leak checking in the sanitizer build but unwind at malloc the fast way (frame
# pointers), ASan's default: the full unwind is there for the MPI runtime's leaks that
# tests/lsan.supp matches by library, which these programs do not have, and it costs much to a
# program that allocates much (mpickpt-merge-bench's 1k-rank merge: 9 s with it, 1.5 s without).
# Each gets build/asan-options/<program name>, which MPICKPT_TEST_ENV's ASAN_OPTIONS includes
# (include_if_exists, %b the program's name): every test running it, under any script, profits.
function(ckpt_asan_fast_unwind)
  if(MPICKPT_SANITIZE)
    foreach(_p IN LISTS ARGN)
      file(WRITE ${CMAKE_BINARY_DIR}/asan-options/${_p} "fast_unwind_on_malloc=1\n")
    endforeach()
  endif()
endfunction()

function(ckpt_add_unit_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;ARGS;LABELS;INCLUDES" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 60)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  ckpt_asan_fast_unwind(${T_NAME})
  target_compile_options(${T_NAME} PRIVATE ${MPICKPT_WARNINGS})
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/lib ${PROJECT_SOURCE_DIR}/tests
                             ${T_INCLUDES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS})
  set_target_properties(${T_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  set(_dir ${MPICKPT_TEST_OUT}/${T_NAME})
  string(REPLACE "@OUTDIR@" "${_dir}" _args "${T_ARGS}")
  add_test(NAME ${T_NAME} COMMAND ${T_NAME} ${_args})
  add_test(NAME ${T_NAME}.clean COMMAND ${CMAKE_COMMAND} -DDIR=${_dir} -P ${MPICKPT_FRESH_DIR})
  set_tests_properties(${T_NAME}.clean PROPERTIES FIXTURES_SETUP ${T_NAME}.fx LABELS "unit;fixture")
  set_tests_properties(${T_NAME} PROPERTIES
    LABELS "unit;${T_LABELS}" TIMEOUT ${T_TIMEOUT} FIXTURES_REQUIRED ${T_NAME}.fx
    ENVIRONMENT "${MPICKPT_TEST_ENV};MPICKPT_TEST_DIR=${_dir}")
endfunction()

function(ckpt_add_mpi_test)
  cmake_parse_arguments(T "" "NAME;TARGET;TIMEOUT;DEPENDS_ON" "NP;OVERSUB;ARGS;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  foreach(np IN LISTS T_NP T_OVERSUB)
    set(_name ${T_NAME}.np${np})
    set(_dir ${MPICKPT_TEST_OUT}/${_name})
    string(REPLACE "@OUTDIR@" "${_dir}" _args "${T_ARGS}")
    string(REPLACE "@NP@" "${np}" _args "${_args}")
    add_test(NAME ${_name}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${MPIEXEC_PREFLAGS}
              $<TARGET_FILE:${T_TARGET}> ${MPIEXEC_POSTFLAGS} ${_args})
    set(_labels mpi ${T_LABELS})
    if(np IN_LIST T_OVERSUB)
      list(APPEND _labels oversubscribed)
    endif()
    set(_procs ${np})
    if(_procs GREATER 2)
      set(_procs 2)
    endif()
    if(T_DEPENDS_ON)
      # A restart test reads what its writer left: share the writer's directory, no cleaning.
      set(_dir ${MPICKPT_TEST_OUT}/${T_DEPENDS_ON}.np${np})
      string(REPLACE "@OUTDIR@" "${_dir}" _args "${T_ARGS}")
      set_tests_properties(${_name} PROPERTIES DEPENDS ${T_DEPENDS_ON}.np${np}
        FIXTURES_REQUIRED ${T_DEPENDS_ON}.np${np}.fx)
    else()
      add_test(NAME ${_name}.clean COMMAND ${CMAKE_COMMAND} -DDIR=${_dir} -P ${MPICKPT_FRESH_DIR})
      set_tests_properties(${_name}.clean PROPERTIES FIXTURES_SETUP ${_name}.fx LABELS fixture)
      set_tests_properties(${_name} PROPERTIES FIXTURES_REQUIRED ${_name}.fx)
    endif()
    set_tests_properties(${_name} PROPERTIES
      LABELS "${_labels}" TIMEOUT ${T_TIMEOUT} PROCESSORS ${_procs}
      ENVIRONMENT "${MPICKPT_TEST_ENV};MPICKPT_TEST_DIR=${_dir}")
    # The sanitizer build leaves out the 1-rank run of a test that also runs on more ranks: under
    # ASan each costs ~2 s, mostly MPI_Init with the full unwinding tests/lsan.supp needs, and
    # the default build runs it. Registered and DISABLED, so ctest lists what it did not run.
    list(LENGTH T_NP _ncounts)
    list(LENGTH T_OVERSUB _noversub)
    if(MPICKPT_SANITIZE AND np EQUAL 1 AND (_ncounts GREATER 1 OR _noversub GREATER 0))
      set_tests_properties(${_name} PROPERTIES DISABLED TRUE)
    endif()
    # Likewise its oversubscribed runs (more than 4 ranks on the 2 cores: 5-25 s each under ASan,
    # a fifth of the sanitizer build's time) when it also runs on 2 to 4 ranks there.
    set(_small FALSE)
    foreach(_n IN LISTS T_NP T_OVERSUB)
      if(_n GREATER 1 AND _n LESS 5)
        set(_small TRUE)
      endif()
    endforeach()
    if(MPICKPT_SANITIZE AND np GREATER 4 AND _small)
      set_tests_properties(${_name} PROPERTIES DISABLED TRUE)
    endif()
    # Leaks are looked for in the 2- or 3-rank run of a test (the chief's and the other ranks'
    # paths); its runs on more ranks are checked for memory errors only: LeakSanitizer's check
    # at the exit of each rank, matching the MPI runtime's hundreds of process-lifetime blocks
    # against tests/lsan.supp, costs seconds per run on 2 cores (docs/building.md). A test with
    # no 2- or 3-rank run keeps leak checking at every count.
    set(_leak_small FALSE)
    foreach(_n IN LISTS T_NP)
      if(_n EQUAL 2 OR _n EQUAL 3)
        set(_leak_small TRUE)
      endif()
    endforeach()
    if(MPICKPT_SANITIZE AND np GREATER 3 AND _leak_small)
      set(_env "${MPICKPT_TEST_ENV}")
      list(FILTER _env EXCLUDE REGEX "^ASAN_OPTIONS=")
      list(APPEND _env "ASAN_OPTIONS=detect_leaks=0:strict_string_checks=1")
      set_tests_properties(${_name} PROPERTIES ENVIRONMENT "${_env};MPICKPT_TEST_DIR=${_dir}")
    endif()
  endforeach()
endfunction()

# ckpt_sanitizer_skip(<test>...): registered tests the sanitizer build lists but does not run
# (DISABLED), where another rank count or layout of the same test runs there and the default build
# runs them all: the suite's time is spent on the sanitizer build's 2-core tests one at a time.
function(ckpt_sanitizer_skip)
  if(MPICKPT_SANITIZE)
    set_tests_properties(${ARGN} PROPERTIES DISABLED TRUE)
  endif()
endfunction()

# Builds an MPI test program (linked with the library's static mpickpt_internal, so that it may
# call internal functions, and the test model of tests/mpi/model.h, mpickpt_testmodel in
# tests/CMakeLists.txt) under build/tests.
function(ckpt_add_mpi_program NAME)
  add_executable(${NAME} ${ARGN})
  target_compile_options(${NAME} PRIVATE ${MPICKPT_WARNINGS})
  target_include_directories(${NAME} PRIVATE ${PROJECT_SOURCE_DIR}/lib ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(${NAME} PRIVATE mpickpt_testmodel mpickpt_internal HDF5::HDF5)
  set_target_properties(${NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
endfunction()

# ckpt_add_python_test(NAME <name> SCRIPT <file.py> [NP <n...>] [ARGS ...] [TIMEOUT s] [LABELS ...]
#                      [DEPENDS_ON <test>] [ENVIRONMENT ...])
#   The Python package's tests: `mpirun -np N /usr/bin/python3 SCRIPT ARGS` for every N (NP 0 or no
#   NP: the interpreter alone, no mpirun), PYTHONPATH=build/python, LABELS python (and mpi), a
#   private output directory emptied first (@OUTDIR@ in ARGS, MPICKPT_TEST_DIR). Exit code 77 is a
#   skip. DEPENDS_ON names a test (with its .npN) that writes what this one reads: it runs first
#   (a fixture: `ctest -R` of the reader runs the writer too) and @WRITERDIR@ in ARGS is its
#   output directory. ENVIRONMENT adds variables. In the sanitizer build
#   the interpreter, which is not instrumented, runs with the compiler's libasan preloaded so that
#   the instrumented extension and libraries load; leak checking is off there (CPython, NumPy and
#   PyTorch keep memory at exit, and every stack runs through the interpreter, so no suppression
#   could tell mpickpt's own leaks apart): ASan still catches invalid accesses. Without leak
#   checking the full unwind at every malloc (fast_unwind_on_malloc=0, there for the suppressions)
#   buys nothing and costs much: `import torch` alone takes 18 s with it and 1.5 s without.
function(ckpt_add_python_test)
  cmake_parse_arguments(T "" "NAME;SCRIPT;TIMEOUT;DEPENDS_ON" "NP;ARGS;LABELS;ENVIRONMENT"
                        ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 180)
  endif()
  # No __pycache__ written next to the tests' helper modules in the source tree.
  set(_env "${MPICKPT_TEST_ENV};PYTHONPATH=${MPICKPT_PYTHON_DIR};PYTHONDONTWRITEBYTECODE=1")
  list(APPEND _env ${T_ENVIRONMENT})
  if(MPICKPT_SANITIZE)
    execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
                    OUTPUT_VARIABLE _asan OUTPUT_STRIP_TRAILING_WHITESPACE)
    list(FILTER _env EXCLUDE REGEX "^ASAN_OPTIONS=")
    list(APPEND _env "LD_PRELOAD=${_asan}"
         "ASAN_OPTIONS=detect_leaks=0:strict_string_checks=1")
  endif()
  set(_nps ${T_NP})
  if(NOT _nps)
    set(_nps 0)
  endif()
  # The sanitizer build runs one rank count of each (2 when listed, else the first): what it
  # checks is the instrumented extension and libraries, which the other counts run the same way;
  # the default build runs them all. A writer another test DEPENDS_ON runs anyway (below).
  set(_asan_np "")
  if(MPICKPT_SANITIZE)
    list(GET _nps 0 _asan_np)
    if(2 IN_LIST _nps)
      set(_asan_np 2)
    endif()
    if(T_DEPENDS_ON)
      set_tests_properties(${T_DEPENDS_ON} PROPERTIES DISABLED FALSE)
    endif()
  endif()
  foreach(np IN LISTS _nps)
    if(np EQUAL 0)
      set(_name ${T_NAME})
    else()
      set(_name ${T_NAME}.np${np})
    endif()
    set(_dir ${MPICKPT_TEST_OUT}/${_name})
    string(REPLACE "@OUTDIR@" "${_dir}" _args "${T_ARGS}")
    string(REPLACE "@NP@" "${np}" _args "${_args}")
    string(REPLACE "@WRITERDIR@" "${MPICKPT_TEST_OUT}/${T_DEPENDS_ON}" _args "${_args}")
    if(np EQUAL 0)
      add_test(NAME ${_name} COMMAND ${MPICKPT_PYTHON_EXE} ${T_SCRIPT} ${_args})
      set(_labels python ${T_LABELS})
      set(_procs 1)
    else()
      add_test(NAME ${_name}
        COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${MPIEXEC_PREFLAGS}
                ${MPICKPT_PYTHON_EXE} ${MPIEXEC_POSTFLAGS} ${T_SCRIPT} ${_args})
      set(_labels python mpi ${T_LABELS})
      set(_procs ${np})
      if(_procs GREATER 2)
        set(_procs 2)
      endif()
    endif()
    add_test(NAME ${_name}.clean COMMAND ${CMAKE_COMMAND} -DDIR=${_dir} -P ${MPICKPT_FRESH_DIR})
    set_tests_properties(${_name}.clean PROPERTIES FIXTURES_SETUP ${_name}.fx LABELS fixture)
    set(_fixtures ${_name}.fx)
    if(T_DEPENDS_ON)
      list(APPEND _fixtures ${T_DEPENDS_ON}.out)
      set_tests_properties(${_name} PROPERTIES DEPENDS ${T_DEPENDS_ON})
      # the writer is the setup of its readers' fixture (it keeps its own clean fixture)
      get_property(_setup TEST ${T_DEPENDS_ON} PROPERTY FIXTURES_SETUP)
      if(NOT "${T_DEPENDS_ON}.out" IN_LIST _setup)
        set_property(TEST ${T_DEPENDS_ON} APPEND PROPERTY FIXTURES_SETUP ${T_DEPENDS_ON}.out)
      endif()
    endif()
    set_tests_properties(${_name} PROPERTIES FIXTURES_REQUIRED "${_fixtures}"
      LABELS "${_labels}" TIMEOUT ${T_TIMEOUT} PROCESSORS ${_procs} SKIP_RETURN_CODE 77
      ENVIRONMENT "${_env};MPICKPT_TEST_DIR=${_dir}")
    if(MPICKPT_SANITIZE AND NOT np EQUAL _asan_np)
      set_tests_properties(${_name} PROPERTIES DISABLED TRUE)
    endif()
  endforeach()
endfunction()

# Test T mounts a small tmpfs of its own at ${MPICKPT_TEST_OUT}/T/SUB/mnt (a full disk on demand):
# unmounted before it (after its .clean empties the directory) and after it, even when a rank
# died with it mounted. SKIP_77: the test exits 77 (skipped) where it cannot mount.
function(ckpt_tmpfs_fixture T SUB)
  set(_mnt "${MPICKPT_TEST_OUT}/${T}/${SUB}/mnt")
  set(_umount "umount '${_mnt}' 2>/dev/null || umount -l '${_mnt}' 2>/dev/null; true")
  add_test(NAME ${T}.umount_pre COMMAND sh -c "${_umount}")
  add_test(NAME ${T}.umount COMMAND sh -c "${_umount}")
  set_tests_properties(${T}.umount_pre PROPERTIES FIXTURES_SETUP ${T}.fx LABELS fixture)
  set_tests_properties(${T}.umount PROPERTIES FIXTURES_CLEANUP ${T}.fx LABELS fixture)
  set_tests_properties(${T}.clean PROPERTIES DEPENDS ${T}.umount_pre)
  if("SKIP_77" IN_LIST ARGN)
    set_tests_properties(${T} PROPERTIES SKIP_RETURN_CODE 77)
  endif()
endfunction()
