# attnhost_add_plugin(<name> SOURCES ... [LIBRARIES ...])
#
# Adds a plugin: a MODULE library named <name>.so with hidden visibility
# (only attnhost_plugin_entry is exported), built into the build tree's
# plugin directory and installed into <prefix>/lib/attnhost/plugins.
function(attnhost_add_plugin name)
  cmake_parse_arguments(P "" "" "SOURCES;LIBRARIES" ${ARGN})
  add_library(${name} MODULE ${P_SOURCES})
  set_target_properties(${name} PROPERTIES
    PREFIX "" OUTPUT_NAME ${name}
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden
    LIBRARY_OUTPUT_DIRECTORY ${ATTNHOST_BUILD_PLUGIN_DIR})
  target_link_libraries(${name} PRIVATE attnhost::plugin_api ${P_LIBRARIES})
  target_link_options(${name} PRIVATE -Wl,--no-undefined)
  attnhost_warnings(${name})
  install(TARGETS ${name} LIBRARY DESTINATION ${ATTNHOST_PLUGIN_SUBDIR} COMPONENT plugins)
  set_property(GLOBAL APPEND PROPERTY ATTNHOST_PLUGIN_TARGETS ${name})
endfunction()

# attnhost_add_test_plugin(<name> <output dir> SOURCES ...)
#
# A plugin built only for tests, never installed.
function(attnhost_add_test_plugin name outdir)
  cmake_parse_arguments(P "" "" "SOURCES;LIBRARIES" ${ARGN})
  add_library(${name} MODULE ${P_SOURCES})
  set_target_properties(${name} PROPERTIES PREFIX "" OUTPUT_NAME ${name}
    LIBRARY_OUTPUT_DIRECTORY ${outdir})
  target_link_libraries(${name} PRIVATE attnhost::plugin_api ${P_LIBRARIES})
endfunction()
