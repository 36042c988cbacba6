# Install layout: lib/, lib/attnhost/plugins/, libexec/attnhost/ (the plugin scanner), include/attnhost/, bin/,
# etc/attnhost/attnhost.ini, pkg-config files and the CMake package.
#
# Install components (one Debian package each, cmake/AttnhostPackaging.cmake):
#   lib              libattnhost.so.<ABI major>                       libattnhost<major>
#   dev              headers, libattnhost.so, pkg-config, CMake package libattnhost-dev
#   cli              attnhost, the plugin scanner, the INI, models, man attnhost
#   plugin_<folder>  plugins/<folder>'s plugins (attnhost_add_plugin)  attnhost-plugin-<folder>
#   python           the pure-Python package (EXCLUDE_FROM_ALL: only   python3-attnhost
#                    `cmake --install --component python` and CPack install it)
include(CMakePackageConfigHelpers)

install(TARGETS attnhost_plugin_api EXPORT attnhostTargets)
install(EXPORT attnhostTargets NAMESPACE attnhost:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/attnhost
  COMPONENT dev)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/attnhostConfig.cmake.in
  ${CMAKE_BINARY_DIR}/attnhostConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/attnhost
  PATH_VARS ATTNHOST_PLUGIN_SUBDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/attnhostConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/attnhostConfig.cmake ${CMAKE_BINARY_DIR}/attnhostConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/attnhost COMPONENT dev)

foreach(pc attnhost attnhost-plugin)
  configure_file(${CMAKE_SOURCE_DIR}/cmake/${pc}.pc.in ${CMAKE_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
endforeach()

# GNUInstallDirs maps the /usr prefix's etc to /etc (CMAKE_INSTALL_FULL_SYSCONFDIR,
# where the CLI looks); any other prefix keeps <prefix>/etc, relocatable.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(ATTNHOST_ETC_DEST ${CMAKE_INSTALL_FULL_SYSCONFDIR}/attnhost)
else()
  set(ATTNHOST_ETC_DEST ${CMAKE_INSTALL_SYSCONFDIR}/attnhost)
endif()
install(FILES ${CMAKE_SOURCE_DIR}/examples/configs/attnhost.ini
  DESTINATION ${ATTNHOST_ETC_DEST} COMPONENT cli)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/examples/models DESTINATION ${CMAKE_INSTALL_DATADIR}/attnhost
  COMPONENT cli)

# The Python package (ctypes, no compilation) where Debian's python3 finds it.
set(ATTNHOST_PYTHON_DIR "lib/python3/dist-packages" CACHE STRING
  "where the python component installs the attnhost package, relative to the prefix")
install(DIRECTORY ${CMAKE_SOURCE_DIR}/python/attnhost DESTINATION ${ATTNHOST_PYTHON_DIR}
  COMPONENT python EXCLUDE_FROM_ALL
  FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
  PATTERN __pycache__ EXCLUDE PATTERN "*.pyc" EXCLUDE PATTERN "libattnhost.so*" EXCLUDE)

include(${CMAKE_SOURCE_DIR}/cmake/AttnhostPackaging.cmake)
