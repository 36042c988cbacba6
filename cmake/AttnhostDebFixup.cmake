# Run by cpack after the packages are built (CPACK_POST_BUILD_SCRIPTS).
# CPack (3.25) gives a package that installs into /usr/lib/<triplet> a
# postinst and postrm that call ldconfig; Debian wants the ldconfig trigger
# instead (lintian: lacks-ldconfig-trigger, maintscript-calls-ldconfig).
# Rebuild such a package with the trigger and without the two scripts: the
# attnhost packages have no maintainer scripts at all.
find_program(DPKG_DEB dpkg-deb REQUIRED)
foreach(deb IN LISTS CPACK_PACKAGE_FILES)
  if(NOT deb MATCHES "\\.deb$")
    continue()
  endif()
  set(tmp ${deb}.fixup)
  file(REMOVE_RECURSE ${tmp})
  execute_process(COMMAND ${DPKG_DEB} -R ${deb} ${tmp} COMMAND_ERROR_IS_FATAL ANY)
  if(EXISTS ${tmp}/DEBIAN/postinst)
    file(READ ${tmp}/DEBIAN/postinst post)
    if(post MATCHES "ldconfig")
      file(REMOVE ${tmp}/DEBIAN/postinst ${tmp}/DEBIAN/postrm)
      file(WRITE ${tmp}/DEBIAN/triggers "activate-noawait ldconfig\n")
      execute_process(COMMAND ${DPKG_DEB} --root-owner-group -Zxz --build ${tmp} ${deb}
        OUTPUT_QUIET COMMAND_ERROR_IS_FATAL ANY)
    endif()
  endif()
  file(REMOVE_RECURSE ${tmp})
endforeach()
