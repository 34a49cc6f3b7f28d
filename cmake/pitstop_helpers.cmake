# Declarative helpers so every module's CMakeLists reads the same way.
#
#   pitstop_cc_library(NAME foo SRCS a.cc b.cc DEPS absl::status ...)
#   pitstop_cc_binary(NAME pitstop-agent SRCS main.cc DEPS pitstop_agent)
#   pitstop_cc_test(NAME foo_test SRCS foo_test.cc DEPS foo [LABELS sanitize])
#
# Tests labelled "sanitize" are the ones .ci/run also runs under ASan/UBSan and
# TSan (threads, the plugin, the ingest path). Tests labelled "data" read
# ../shared/data and skip loudly when it is absent.

function(pitstop_cc_library)
  cmake_parse_arguments(P "" "NAME" "SRCS;DEPS;PUBLIC_INCLUDES" ${ARGN})
  add_library(${P_NAME} STATIC ${P_SRCS})
  target_include_directories(${P_NAME} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    ${P_PUBLIC_INCLUDES})
  target_link_libraries(${P_NAME} PUBLIC ${P_DEPS})
  pitstop_use_pch(${P_NAME} library)
endfunction()

# In the TSan build, links `target` (an executable) with the definitions of
# absl::Mutex / absl::CondVar (and gRPC's ScheduleOnDone) that tell TSan how
# Debian's Abseil and gRPC synchronise, and exports them so that libgrpc's and
# libgpr's calls reach them (src/common/tsan_grpc_sync.cc). Nothing in other
# builds.
function(pitstop_tsan_grpc_sync target)
  if(TARGET pitstop_tsan_grpc_sync)
    target_link_libraries(${target} PRIVATE pitstop_tsan_grpc_sync)
    target_link_options(${target} PRIVATE
      "LINKER:--export-dynamic-symbol=_ZN4absl7debian35Mutex*"
      "LINKER:--export-dynamic-symbol=_ZN4absl7debian37CondVar*"
      "LINKER:--export-dynamic-symbol=_ZN4grpc8internal18ServerCallbackCall*"
      "LINKER:--export-dynamic-symbol=grpc_call_start_batch"
      "LINKER:--export-dynamic-symbol=grpc_completion_queue_next"
      "LINKER:--export-dynamic-symbol=grpc_completion_queue_pluck"
      "LINKER:--export-dynamic-symbol=_Z14grpc_cq_end_op*"
      "LINKER:--export-dynamic-symbol=_ZN4grpc6Server23UnrefWithPossibleNotifyEv"
      "LINKER:--export-dynamic-symbol=_ZN4grpc6Server18UnrefAndWaitLockedEv")
  endif()
endfunction()

function(pitstop_cc_binary)
  cmake_parse_arguments(P "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${P_NAME} ${P_SRCS})
  target_include_directories(${P_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR})
  target_link_libraries(${P_NAME} PRIVATE ${P_DEPS})
  pitstop_use_pch(${P_NAME} binary)
  pitstop_tsan_grpc_sync(${P_NAME})
endfunction()

function(pitstop_cc_test)
  cmake_parse_arguments(P "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${P_NAME} ${P_SRCS})
  target_include_directories(${P_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR})
  target_link_libraries(${P_NAME} PRIVATE ${P_DEPS} GTest::gmock GTest::gtest_main)
  pitstop_test_compile_options(${P_NAME})
  pitstop_use_pch(${P_NAME} test)
  pitstop_tsan_grpc_sync(${P_NAME})
  if(NOT P_TIMEOUT)
    set(P_TIMEOUT 120)
  endif()
  if("sanitize" IN_LIST P_LABELS)
    set_property(GLOBAL APPEND PROPERTY PITSTOP_SANITIZE_TESTS ${P_NAME})
  endif()
  # One label per test (gtest_discover_tests cannot pass a list through).
  set(_label unit)
  if(P_LABELS)
    list(GET P_LABELS 0 _label)
  endif()
  gtest_discover_tests(${P_NAME}
    DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${P_TIMEOUT} LABELS ${_label})
  # gtest_discover_tests passes only the first element of a list-valued
  # property (ENVIRONMENT "A;B" sets A only), so the environment is set by
  # a file ctest includes after the discovered tests (${P_NAME}_TESTS).
  set(_env_file ${CMAKE_CURRENT_BINARY_DIR}/${P_NAME}_env.cmake)
  file(WRITE ${_env_file}
    "if(${P_NAME}_TESTS)\n"
    "  set_tests_properties(\${${P_NAME}_TESTS} PROPERTIES ENVIRONMENT \"PITSTOP_SOURCE_DIR=${PROJECT_SOURCE_DIR};PITSTOP_BINARY_DIR=${PROJECT_BINARY_DIR};TSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/tsan.supp halt_on_error=1 second_deadlock_stack=1;ASAN_OPTIONS=detect_leaks=1;UBSAN_OPTIONS=print_stacktrace=1;LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/lsan.supp\")\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${_env_file})
endfunction()
