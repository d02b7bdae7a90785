# Run at build time (cmake -P): writes OUTPUT, a header defining FATHOM_GIT_DESCRIBE (`git describe --always --dirty`
# of SOURCE_DIR, "unknown" outside a git checkout), and rewrites it only when the text changes, so an unchanged
# commit relinks nothing.
execute_process(COMMAND git -C "${SOURCE_DIR}" describe --always --dirty --abbrev=12
                OUTPUT_VARIABLE describe OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE status ERROR_QUIET)
if(NOT status EQUAL 0 OR describe STREQUAL "")
  set(describe "unknown")
endif()
set(text "#pragma once\n#define FATHOM_GIT_DESCRIBE \"${describe}\"\n")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" previous)
endif()
if(NOT "${previous}" STREQUAL "${text}")
  file(WRITE "${OUTPUT}" "${text}")
endif()
