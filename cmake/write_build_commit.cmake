# cmake -DSOURCE_DIR=... -DOUTPUT=... -P write_build_commit.cmake: writes the commit the binary is built
# from (with "-dirty" when the tree has changes; "unknown" outside git) into OUTPUT, a C++ file, and
# touches it only when that changes, so that a build recompiles one file after a commit and none
# otherwise.
execute_process(COMMAND git -C ${SOURCE_DIR} rev-parse --short=12 HEAD
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
if(failed OR commit STREQUAL "")
  set(commit "unknown")
else()
  execute_process(COMMAND git -C ${SOURCE_DIR} status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT changes STREQUAL "")
    string(APPEND commit "-dirty")
  endif()
endif()
set(text "// Written by cmake/write_build_commit.cmake at build time.\n#include \"build_commit.h\"\n\nnamespace flexpipe::cli {\nconst char* const kBuildCommit = \"${commit}\";\n}\n")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} current)
  if(current STREQUAL text)
    return()
  endif()
endif()
file(WRITE ${OUTPUT} "${text}")
