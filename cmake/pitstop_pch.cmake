# Precompiled headers (build time, issue #30; docs/contributing.md "Build
# and tests").
#
# Every heavy translation unit of pitstop parses the same library headers:
# the standard library, Abseil, Protobuf's runtime, gRPC's C++ API, the
# code generated from proto/pitstop/v1 and, in tests, GoogleTest and
# GoogleMock. Three host targets compile them once per tree and every
# library (pitstop_cc_library), executable (pitstop_cc_binary) and test
# (pitstop_cc_test) reuses the result (REUSE_FROM): one host for static
# libraries (-fPIC), one for executables (-fPIE) and one for tests (-fPIE,
# and -O0 in the default build, see below). A target whose flags differ
# from its host's (fuzzing instrumentation) or that meets a compiler quirk
# sets DISABLE_PRECOMPILE_HEADERS.
#
# pitstop's own headers are never precompiled: a change to one rebuilds
# what includes it, not the world. The generated protobuf headers are: they
# are ~60,000 of the ~310,000 lines of a unit that includes the controller's
# API. The price: a change to a .proto rebuilds every library and test.
# ccache is told that the precompiled file's __DATE__/__TIME__, the macros
# defined before it and its fresh timestamps are harmless (sloppiness, set
# in CMakeLists.txt where ccache becomes the launcher); with that, a second
# clone's build takes the precompiled files and every object from the cache.
#
# A header listed here is visible in every translation unit of the targets,
# so a file that forgot an include still compiles here; clang-tidy
# (tools/check-style.sh) reads the commands without the precompiled headers
# and finds it.

# PITSTOP_PCH (the switch) is declared in CMakeLists.txt, before ccache.

set(PITSTOP_PCH_HEADERS
  <algorithm> <atomic> <chrono> <cstdint> <cstdio> <cstdlib> <cstring>
  <deque> <filesystem> <fstream> <functional> <iostream> <map> <memory>
  <mutex> <optional> <set> <sstream> <string> <thread> <unordered_map>
  <utility> <variant> <vector>
  <absl/container/flat_hash_map.h> <absl/container/flat_hash_set.h>
  <absl/status/status.h> <absl/status/statusor.h>
  <absl/strings/match.h> <absl/strings/numbers.h> <absl/strings/str_cat.h>
  <absl/strings/str_format.h> <absl/strings/str_join.h>
  <absl/strings/str_split.h> <absl/strings/string_view.h>
  <absl/synchronization/mutex.h> <absl/time/clock.h> <absl/time/time.h>
  <google/protobuf/message.h>
  <google/protobuf/generated_message_reflection.h>
  <google/protobuf/repeated_field.h> <google/protobuf/extension_set.h>
  <grpcpp/grpcpp.h>
  <pitstop/v1/common.grpc.pb.h> <pitstop/v1/telemetry.grpc.pb.h>
  <pitstop/v1/agent.grpc.pb.h> <pitstop/v1/trainer.grpc.pb.h>
  <pitstop/v1/controller.grpc.pb.h>)
set(PITSTOP_PCH_TEST_HEADERS <gtest/gtest.h> <gmock/gmock.h>)

# What the hosts need to find those headers (include directories and
# definitions travel with the imported targets).
set(_pitstop_pch_deps absl::status absl::statusor absl::strings
    absl::str_format absl::synchronization absl::time absl::flat_hash_map
    absl::flat_hash_set protobuf::libprotobuf gRPC::grpc++ Threads::Threads)

# Test translation units at -O0 in the default (RelWithDebInfo) build: they
# drive code compiled with -O2 in the libraries, and spend ~25% less CPU
# compiling. The sanitizer trees keep their own levels.
function(pitstop_test_compile_options target)
  if(PITSTOP_PCH AND PITSTOP_SANITIZE STREQUAL ""
     AND CMAKE_BUILD_TYPE MATCHES "^(RelWithDebInfo|Release)$")
    target_compile_options(${target} PRIVATE -O0)
  endif()
endfunction()

# The generated headers' folder (proto/CMakeLists.txt) and the target
# that writes them.
function(pitstop_pch_host target)
  target_link_libraries(${target} PRIVATE ${_pitstop_pch_deps})
  target_include_directories(${target} PRIVATE ${PROJECT_BINARY_DIR}/proto/gen)
  add_dependencies(${target} pitstop_proto_headers)
endfunction()

if(PITSTOP_PCH)
  add_library(pitstop_pch_library STATIC ${PROJECT_SOURCE_DIR}/cmake/pch/pch_host.cc)
  pitstop_pch_host(pitstop_pch_library)
  target_precompile_headers(pitstop_pch_library PRIVATE ${PITSTOP_PCH_HEADERS})
  add_executable(pitstop_pch_binary ${PROJECT_SOURCE_DIR}/cmake/pch/pch_main.cc)
  pitstop_pch_host(pitstop_pch_binary)
  target_precompile_headers(pitstop_pch_binary PRIVATE ${PITSTOP_PCH_HEADERS})
  if(PITSTOP_BUILD_TESTS)
    add_executable(pitstop_pch_test ${PROJECT_SOURCE_DIR}/cmake/pch/pch_host.cc)
    pitstop_pch_host(pitstop_pch_test)
    target_link_libraries(pitstop_pch_test PRIVATE GTest::gmock GTest::gtest_main)
    target_precompile_headers(pitstop_pch_test PRIVATE
                              ${PITSTOP_PCH_HEADERS} ${PITSTOP_PCH_TEST_HEADERS})
    pitstop_test_compile_options(pitstop_pch_test)
  endif()
endif()

# Makes `target` reuse the precompiled headers of its kind ("library",
# "binary" or "test"). gcc uses them only where the macros they saw are defined alike:
# the hosts compile with -pthread (Abseil's and gRPC's headers test
# _REENTRANT), so every user does too (-Winvalid-pch with -Werror makes a
# mismatch an error, not a silent slow build).
function(pitstop_use_pch target kind)
  if(PITSTOP_PCH)
    target_precompile_headers(${target} REUSE_FROM pitstop_pch_${kind})
    target_compile_options(${target} PRIVATE -pthread)
    # gcc 12 loses the system-header exemption of its optimiser's warnings
    # for code read from a precompiled header: its known false positives
    # on std::string copies (GCC PR 105651 and kin, -Warray-bounds and
    # -Wstringop-overread/-overflow reported at libstdc++'s char_traits.h)
    # then fail -O2 files that copy strings or use protobuf maps. Bounds
    # stay checked by clang's warnings and at run time by the ASan+UBSan
    # stage.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      target_compile_options(${target} PRIVATE -Wno-array-bounds
        -Wno-stringop-overread -Wno-stringop-overflow)
    endif()
  endif()
endfunction()
