# flexpipe_add_library(CONCEPT SOURCES ... [DEPENDS lib ...]): the static library flexpipe_CONCEPT
# built from src/CONCEPT/.
#
# Layering is enforced by include paths, not by convention: a library sees the public headers
# (include/flexpipe/CONCEPT/) of itself and of the libraries it links, and nothing else. Each
# library's headers are exposed through a folder of its own in the build tree that holds one link,
# flexpipe/CONCEPT -> include/flexpipe/CONCEPT, so `#include "flexpipe/search/search.h"` in a library
# below the search fails to compile with "No such file or directory". Private headers stay beside
# their sources (src/CONCEPT/) and are seen by that library alone.
function(flexpipe_expose_headers target concept)
  set(view ${CMAKE_BINARY_DIR}/headers/${concept})
  if(EXISTS ${CMAKE_SOURCE_DIR}/include/flexpipe/${concept} AND NOT EXISTS ${view}/flexpipe/${concept})
    file(MAKE_DIRECTORY ${view}/flexpipe)
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/include/flexpipe/${concept} ${view}/flexpipe/${concept} SYMBOLIC)
  endif()
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "INTERFACE_LIBRARY")
    target_include_directories(${target} INTERFACE ${view})
  else()
    target_include_directories(${target} PUBLIC ${view} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  endif()
  set_property(GLOBAL APPEND PROPERTY FLEXPIPE_LIBRARIES ${target})
endfunction()

function(flexpipe_add_library concept)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPENDS" ${ARGN})
  set(target flexpipe_${concept})
  add_library(${target} STATIC ${ARG_SOURCES})
  flexpipe_expose_headers(${target} ${concept})
  target_link_libraries(${target} PUBLIC ${ARG_DEPENDS})
endfunction()
