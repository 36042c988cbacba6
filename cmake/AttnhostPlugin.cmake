# attnhost_add_plugin(<name> SOURCES ... [LIBRARIES ...]
#                     [PACKAGE_SUMMARY text] [PACKAGE_RECOMMENDS deps] [PACKAGE_SUGGESTS deps])
#
# Adds a plugin: a MODULE library named <name>.so with hidden visibility
# (only attnhost_plugin_entry is exported), built into the build tree's
# plugin directory and installed into <prefix>/lib/attnhost/plugins.
#
# Packaging: every plugin of one folder plugins/<folder> goes into the
# install component plugin_<folder>, which cmake/AttnhostPackaging.cmake turns
# into the Debian package attnhost-plugin-<folder> (underscores as dashes).
# The folders are recorded in the global property ATTNHOST_PLUGIN_FOLDERS; the
# PACKAGE_* arguments override that file's table of summaries and of what a
# plugin dlopens (a Recommends/Suggests, never a Depends: the plugin loads
# and says "unavailable" without it).
function(attnhost_add_plugin name)
  cmake_parse_arguments(P "" "PACKAGE_SUMMARY" "SOURCES;LIBRARIES;PACKAGE_RECOMMENDS;PACKAGE_SUGGESTS"
    ${ARGN})
  add_library(${name} MODULE ${P_SOURCES})
  set_target_properties(${name} PROPERTIES
    PREFIX "" OUTPUT_NAME ${name}
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden
    LIBRARY_OUTPUT_DIRECTORY ${ATTNHOST_BUILD_PLUGIN_DIR})
  target_link_libraries(${name} PRIVATE attnhost::plugin_api ${P_LIBRARIES})
  target_link_options(${name} PRIVATE ${ATTNHOST_LINK_NO_UNDEFINED})
  attnhost_warnings(${name})
  get_filename_component(folder ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  # 0644: a plugin is dlopen()ed, never executed (Debian policy for shared objects)
  install(TARGETS ${name} LIBRARY DESTINATION ${ATTNHOST_PLUGIN_SUBDIR} COMPONENT plugin_${folder}
    PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  set_property(GLOBAL APPEND PROPERTY ATTNHOST_PLUGIN_TARGETS ${name})
  get_property(folders GLOBAL PROPERTY ATTNHOST_PLUGIN_FOLDERS)
  if(NOT folder IN_LIST folders)
    set_property(GLOBAL APPEND PROPERTY ATTNHOST_PLUGIN_FOLDERS ${folder})
  endif()
  set_property(GLOBAL APPEND PROPERTY ATTNHOST_PLUGIN_${folder}_TARGETS ${name})
  foreach(k SUMMARY RECOMMENDS SUGGESTS)
    if(DEFINED P_PACKAGE_${k})
      set_property(GLOBAL PROPERTY ATTNHOST_PLUGIN_${folder}_${k} "${P_PACKAGE_${k}}")
    endif()
  endforeach()
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
