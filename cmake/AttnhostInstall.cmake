# Install layout: lib/, lib/attnhost/plugins/, libexec/attnhost/ (the plugin scanner), include/attnhost/, bin/,
# etc/attnhost/attnhost.ini, pkg-config files and the CMake package.
include(CMakePackageConfigHelpers)

install(TARGETS attnhost_plugin_api EXPORT attnhostTargets)
install(EXPORT attnhostTargets NAMESPACE attnhost:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/attnhost)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/attnhostConfig.cmake.in
  ${CMAKE_BINARY_DIR}/attnhostConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/attnhost
  PATH_VARS ATTNHOST_PLUGIN_SUBDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/attnhostConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/attnhostConfig.cmake ${CMAKE_BINARY_DIR}/attnhostConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/attnhost)

foreach(pc attnhost attnhost-plugin)
  configure_file(${CMAKE_SOURCE_DIR}/cmake/${pc}.pc.in ${CMAKE_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()

install(FILES ${CMAKE_SOURCE_DIR}/examples/configs/attnhost.ini
  DESTINATION ${CMAKE_INSTALL_SYSCONFDIR}/attnhost)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/examples/models DESTINATION ${CMAKE_INSTALL_DATADIR}/attnhost)
