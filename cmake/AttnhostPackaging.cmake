# Debian packages from the install components: `cpack -G DEB` in a build
# configured with -DCMAKE_INSTALL_PREFIX=/usr (scripts/package.sh does both).
#
#   libattnhost<ABI major>      the library (named after its SONAME)
#   libattnhost-dev             headers, pkg-config files, CMake package
#   attnhost                    the CLI, the plugin scanner, the INI, models, man page
#   attnhost-plugin-<folder>    one per plugins/<folder> that this build built
#                               (the list attnhost_add_plugin records)
#   python3-attnhost            the pure-Python package
#
# Every package ships /usr/share/doc/<package>/copyright and
# changelog.Debian.gz (install rules EXCLUDE_FROM_ALL: a plain
# `cmake --install` leaves them out). No maintainer scripts of our own: the
# scan cache keys on each plugin file's identity, so adding or removing a
# plugin package needs no hook.

set(ATTNHOST_DEB_MAINTAINER "attnhost developers <attnhost-dev@lists.attnhost.org>" CACHE STRING
  "Maintainer field of the Debian packages")
set(ATTNHOST_DEB_RELEASE "1" CACHE STRING "Debian revision of the packages")
set(ATTNHOST_DEB_LICENSE "Apache-2.0")
set(libpkg libattnhost${ATTNHOST_ABI_MAJOR})
set(debver "${PROJECT_VERSION}-${ATTNHOST_DEB_RELEASE}")

# Per plugin folder: summary, what the plugin dlopens (Recommends) and what
# helps it (Suggests). attnhost_add_plugin(... PACKAGE_SUMMARY/RECOMMENDS/
# SUGGESTS) overrides a row; a folder without a row gets a generic summary.
set(ATTNHOST_PKG_cpu_amx_SUMMARY "attnhost attention backend for x86-64 CPUs")
set(ATTNHOST_PKG_cpu_amx_DEVICE "x86-64 CPUs: AMX tiles, AVX-512-BF16, AVX-512, AVX2 and scalar kernels, OpenMP.")
set(ATTNHOST_PKG_cuda_flashinfer_SUMMARY "attnhost attention backend for NVIDIA GPUs (FlashInfer style)")
set(ATTNHOST_PKG_cuda_flashinfer_DEVICE "NVIDIA GPUs of compute capability 8.0 and newer: CSR page indices, load-balanced split-KV, cascade.")
set(ATTNHOST_PKG_cuda_flashinfer_RECOMMENDS "libcuda1")
set(ATTNHOST_PKG_cuda_fa3_SUMMARY "attnhost attention backend for NVIDIA Hopper GPUs (FA3 class)")
set(ATTNHOST_PKG_cuda_fa3_DEVICE "NVIDIA Hopper GPUs (sm_90): TMA, wgmma and warp-specialized kernels.")
set(ATTNHOST_PKG_cuda_fa3_RECOMMENDS "libcuda1")
set(ATTNHOST_PKG_triton_SUMMARY "attnhost attention backend with ahead-of-time Triton kernels")
set(ATTNHOST_PKG_triton_DEVICE "NVIDIA GPUs of compute capability 8.0 to 9.0 (and AMD gfx90a/gfx942 where built with HIP), Triton kernels compiled ahead of time and launched from C.")
set(ATTNHOST_PKG_triton_RECOMMENDS "libcuda1")
set(ATTNHOST_PKG_triton_SUGGESTS "libamdhip64-5 | libamdhip64-6")
set(ATTNHOST_PKG_rocm_aiter_SUMMARY "attnhost attention backend for AMD Instinct GPUs (ROCm)")
set(ATTNHOST_PKG_rocm_aiter_DEVICE "AMD Instinct GPUs through the HIP runtime.")
set(ATTNHOST_PKG_rocm_aiter_RECOMMENDS "libamdhip64-5 | libamdhip64-6")
set(ATTNHOST_PKG_xpu_SUMMARY "attnhost attention backend for Intel GPUs (Level Zero)")
set(ATTNHOST_PKG_xpu_DEVICE "Intel GPUs through the Level Zero loader.")
set(ATTNHOST_PKG_xpu_RECOMMENDS "libze1")
set(ATTNHOST_PKG_xpu_SUGGESTS "ocl-icd-libopencl1")

# --- /usr/share/doc/<package>: copyright and changelog.Debian.gz -------------
set(debdoc ${CMAKE_BINARY_DIR}/debian)
string(TIMESTAMP year "%Y" UTC)

# An extended-description paragraph: words wrapped at 78 columns (CPack
# indents each line by one space and turns empty lines into " .").
function(attnhost_deb_wrap text out)
  string(REGEX REPLACE "[ \n]+" ";" words "${text}")
  set(result "")
  set(line "")
  foreach(w IN LISTS words)
    string(LENGTH "${line} ${w}" l)
    if(line AND l GREATER 78)
      string(APPEND result "${line}\n")
      set(line "${w}")
    elseif(line)
      string(APPEND line " ${w}")
    else()
      set(line "${w}")
    endif()
  endforeach()
  set(${out} "${result}${line}" PARENT_SCOPE)
endfunction()
function(attnhost_deb_docs component package)
  set(d ${debdoc}/${package})
  file(WRITE ${d}/copyright
"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: attnhost

Files: *
Copyright: ${year} the attnhost authors
License: ${ATTNHOST_DEB_LICENSE}
 On Debian systems, the full text of the Apache License, Version 2.0 can be
 found in the file `/usr/share/common-licenses/Apache-2.0'.")
  string(TIMESTAMP now "%a, %d %b %Y %H:%M:%S +0000" UTC) # honours SOURCE_DATE_EPOCH
  file(WRITE ${d}/changelog.Debian
"${package} (${debver}) unstable; urgency=medium

  * Built from the attnhost source tree with CPack (scripts/package.sh).

 -- ${ATTNHOST_DEB_MAINTAINER}  ${now}")
  execute_process(COMMAND gzip -9nf ${d}/changelog.Debian RESULT_VARIABLE rc)
  install(FILES ${d}/copyright ${d}/changelog.Debian.gz
    DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${package} COMPONENT ${component} EXCLUDE_FROM_ALL
    PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
endfunction()

# --- the packages ------------------------------------------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_PACKAGE_NAME attnhost)
set(CPACK_PACKAGE_VENDOR attnhost)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${ATTNHOST_DEB_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/packages)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${ATTNHOST_DEB_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_RELEASE ${ATTNHOST_DEB_RELEASE})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# the build's own library, for dpkg-shlibdeps to read (it is in no installed package)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR}/lib)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)
set(CPACK_POST_BUILD_SCRIPTS ${CMAKE_SOURCE_DIR}/cmake/AttnhostDebFixup.cmake)

set(common_desc "attnhost is the attention-backend layer of an LLM inference engine: it
discovers attention-backend plugins at run time, scans each in a separate
process, checks every layer of a model against a priority list, binds the
best backend per layer and phase, and drives planning and attention
through one stable C ABI.")

# lib
set(CPACK_DEBIAN_LIB_PACKAGE_NAME ${libpkg})
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
# shlibs: "libattnhost 2 libattnhost2 (>= <version>)", so what links the
# library depends on this version or newer (global: only libattnhost has a SONAME)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_LIB_PACKAGE_RECOMMENDS "attnhost (= ${debver})")
set(CPACK_COMPONENT_LIB_DESCRIPTION "attention-backend plugin host for LLM inference (library)
${common_desc}

This package holds the shared library libattnhost.so.${ATTNHOST_ABI_MAJOR}, which serves
plugin ABI ${ATTNHOST_ABI_MAJOR}.x. Its plugin scanner (a fresh process per plugin
scan) is in the attnhost package.")
attnhost_deb_docs(lib ${libpkg})

# dev
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libattnhost-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${libpkg} (= ${debver}), libdlpack-dev")
set(CPACK_DEBIAN_DEV_PACKAGE_SUGGESTS "pkgconf, cmake")
set(CPACK_COMPONENT_DEV_DESCRIPTION "attention-backend plugin host for LLM inference (development files)
${common_desc}

This package holds the host API and plugin ABI headers, the pkg-config
files attnhost.pc (engines) and attnhost-plugin.pc (plugins) and the CMake
package (find_package(attnhost)), for engines and out-of-tree plugins.")
attnhost_deb_docs(dev libattnhost-dev)

# cli
set(CPACK_DEBIAN_CLI_PACKAGE_NAME attnhost)
set(CPACK_DEBIAN_CLI_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_CLI_PACKAGE_DEPENDS "${libpkg} (= ${debver})")
set(CPACK_DEBIAN_CLI_PACKAGE_RECOMMENDS "attnhost-plugin-cpu-amx | attnhost-plugin")
file(WRITE ${debdoc}/cli-control/conffiles "/etc/attnhost/attnhost.ini\n")
set(CPACK_DEBIAN_CLI_PACKAGE_CONTROL_EXTRA ${debdoc}/cli-control/conffiles)
set(CPACK_COMPONENT_CLI_DESCRIPTION "attention-backend plugin host for LLM inference (tool)
${common_desc}

This package holds the attnhost command (list, explain, bind, check, bench,
config, run, doctor), the plugin scanner, the default configuration
/etc/attnhost/attnhost.ini and example model descriptions. Plugins come in
their own packages, attnhost-plugin-*: attnhost doctor names those that fit
the machine.")
attnhost_deb_docs(cli attnhost)

# python
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-attnhost)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SHLIBDEPS OFF)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3:any, ${libpkg} (>= ${PROJECT_VERSION})")
set(CPACK_DEBIAN_PYTHON_PACKAGE_SUGGESTS "python3-numpy")
set(CPACK_COMPONENT_PYTHON_DESCRIPTION "attention-backend plugin host for LLM inference (Python 3)
${common_desc}

This package holds the Python binding (ctypes, no compiled code) that
Python engines use: hosts, models, selections, bindings and paged KV
caches over DLPack tensors.")
attnhost_deb_docs(python python3-attnhost)

# one package per plugin folder
set(comps lib dev cli python)
get_property(plugin_folders GLOBAL PROPERTY ATTNHOST_PLUGIN_FOLDERS)
foreach(folder IN LISTS plugin_folders)
  string(REPLACE "_" "-" dash ${folder})
  string(TOUPPER "plugin_${folder}" C)
  set(pkg attnhost-plugin-${dash})
  list(APPEND comps plugin_${folder})
  foreach(k SUMMARY RECOMMENDS SUGGESTS)
    get_property(v GLOBAL PROPERTY ATTNHOST_PLUGIN_${folder}_${k})
    if(v)
      set(ATTNHOST_PKG_${folder}_${k} "${v}")
    endif()
  endforeach()
  if(NOT ATTNHOST_PKG_${folder}_SUMMARY)
    set(ATTNHOST_PKG_${folder}_SUMMARY "attnhost attention backend ${folder}")
  endif()
  get_property(targets GLOBAL PROPERTY ATTNHOST_PLUGIN_${folder}_TARGETS)
  list(JOIN targets ", " target_list)
  set(CPACK_DEBIAN_${C}_PACKAGE_NAME ${pkg})
  set(CPACK_DEBIAN_${C}_PACKAGE_SECTION libs)
  set(CPACK_DEBIAN_${C}_PACKAGE_DEPENDS "${libpkg} (>= ${PROJECT_VERSION})")
  set(CPACK_DEBIAN_${C}_PACKAGE_PROVIDES attnhost-plugin)
  set(CPACK_DEBIAN_${C}_PACKAGE_ENHANCES attnhost)
  if(ATTNHOST_PKG_${folder}_RECOMMENDS)
    set(CPACK_DEBIAN_${C}_PACKAGE_RECOMMENDS "${ATTNHOST_PKG_${folder}_RECOMMENDS}")
  endif()
  if(ATTNHOST_PKG_${folder}_SUGGESTS)
    set(CPACK_DEBIAN_${C}_PACKAGE_SUGGESTS "${ATTNHOST_PKG_${folder}_SUGGESTS}")
  endif()
  attnhost_deb_wrap("This package holds the plugin ${target_list}, installed into
    ${CMAKE_INSTALL_FULL_LIBDIR}/attnhost/plugins, where the host finds it at its next start." para)
  if(ATTNHOST_PKG_${folder}_DEVICE)
    attnhost_deb_wrap("Device: ${ATTNHOST_PKG_${folder}_DEVICE}" device)
    string(APPEND para "\n\n${device}")
  endif()
  set(CPACK_COMPONENT_${C}_DESCRIPTION "${ATTNHOST_PKG_${folder}_SUMMARY}
${common_desc}

${para}")
  attnhost_deb_docs(plugin_${folder} ${pkg})
endforeach()
set(CPACK_COMPONENTS_ALL ${comps})
set(ATTNHOST_DEB_PACKAGES ${comps} CACHE INTERNAL "")

include(CPack)
