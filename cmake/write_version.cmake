# Run at build time (cmake -P): writes OUTPUT, a header defining FATHOM_GIT_DESCRIBE, and rewrites it only when the
# text changes, so an unchanged commit relinks nothing. The text: VERSION_OVERRIDE when given (-DFATHOM_VERSION=...
# at configure time, e.g. for a source tarball), else `git describe --always --dirty` of SOURCE_DIR when SOURCE_DIR
# is the top of its own checkout (not a folder inside some other repository), else "unknown".
set(describe "unknown")
if(NOT "${VERSION_OVERRIDE}" STREQUAL "")
  set(describe "${VERSION_OVERRIDE}")
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --show-toplevel
                  OUTPUT_VARIABLE toplevel OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE status ERROR_QUIET)
  if(status EQUAL 0)
    file(REAL_PATH "${toplevel}" toplevel)
    file(REAL_PATH "${SOURCE_DIR}" source_dir)
    if(toplevel STREQUAL source_dir)
      # --no-optional-locks: the index refresh behind --dirty must not take .git/index.lock under a running commit.
      execute_process(COMMAND git --no-optional-locks -C "${SOURCE_DIR}" describe --always --dirty --abbrev=12
                      OUTPUT_VARIABLE output OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE status ERROR_QUIET)
      if(status EQUAL 0 AND NOT output STREQUAL "")
        set(describe "${output}")
      endif()
    endif()
  endif()
endif()
set(text "#pragma once\n#define FATHOM_GIT_DESCRIBE \"${describe}\"\n")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" previous)
endif()
if(NOT "${previous}" STREQUAL "${text}")
  file(WRITE "${OUTPUT}" "${text}")
endif()
