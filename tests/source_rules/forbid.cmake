# cmake -DSOURCE_DIR=<repo> -DDIRS=<dir;...> -DREGEX=<regex> -DWHY=<text> -P forbid.cmake
#
# Fails when a line of a file under DIRS (relative to SOURCE_DIR, searched
# recursively; Markdown files are documentation and skipped) matches REGEX,
# matched against the line in lower case. Each hit is printed as
# file:line: text, then WHY. The project's source rules are CTests of this
# script (tests/source_rules/CMakeLists.txt).
foreach(v SOURCE_DIR DIRS REGEX WHY)
  if(NOT ${v})
    message(FATAL_ERROR "usage: cmake -DSOURCE_DIR=<repository root> -DDIRS=<dirs> -DREGEX=<regex> "
                        "-DWHY=<text> -P ${CMAKE_CURRENT_LIST_FILE}")
  endif()
endforeach()
set(files "")
foreach(d IN LISTS DIRS)
  file(GLOB_RECURSE found RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/${d}/*)
  list(APPEND files ${found})
endforeach()
list(FILTER files EXCLUDE REGEX "\\.md$")
if(NOT files)
  message(FATAL_ERROR "no files under ${DIRS}")
endif()
set(hits "")
foreach(f IN LISTS files)
  file(STRINGS ${SOURCE_DIR}/${f} lines)
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    string(TOLOWER "${line}" low)
    if(low MATCHES "${REGEX}")
      string(APPEND hits "  ${f}:${n}: ${line}\n")
    endif()
  endforeach()
endforeach()
list(LENGTH files nfiles)
if(hits)
  message(FATAL_ERROR "${hits}${WHY}")
endif()
message(STATUS "${nfiles} files under ${DIRS}: none matches ${REGEX}")
