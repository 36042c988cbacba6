# The plugins' test and benchmark drivers' shared helpers (ath.h): a static
# library over the core's static one, whose host services, configuration
# and key parsers, hardware facts and oracle it reuses. Included by each
# plugin that uses it (plugins are configured before tests/): the first
# include defines the target.
include_guard(GLOBAL)
find_package(Threads REQUIRED) # large random fills run on several threads
add_library(attnhost_test_helpers STATIC
  ${CMAKE_CURRENT_LIST_DIR}/ath_host.c
  ${CMAKE_CURRENT_LIST_DIR}/ath_rand.c
  ${CMAKE_CURRENT_LIST_DIR}/ath_ragged.c
  ${CMAKE_CURRENT_LIST_DIR}/ath_work.c)
target_include_directories(attnhost_test_helpers PUBLIC
  ${CMAKE_CURRENT_LIST_DIR} ${CMAKE_CURRENT_LIST_DIR}/../unit)
target_link_libraries(attnhost_test_helpers PUBLIC attnhost_static Threads::Threads m ${CMAKE_DL_LIBS})
target_compile_definitions(attnhost_test_helpers PRIVATE _GNU_SOURCE)
attnhost_warnings(attnhost_test_helpers)

if(ATTNHOST_BUILD_TESTS)
  # The threaded random fill against one thread's (no GPU needed).
  add_executable(ath_fill_test ${CMAKE_CURRENT_LIST_DIR}/test_ath_fill.c)
  target_link_libraries(ath_fill_test PRIVATE attnhost_test_helpers)
  target_compile_definitions(ath_fill_test PRIVATE _GNU_SOURCE)
  attnhost_warnings(ath_fill_test)
  add_test(NAME test_helpers_fill COMMAND ath_fill_test)
  set_tests_properties(test_helpers_fill PROPERTIES LABELS unit)
endif()
