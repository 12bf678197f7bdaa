# Finds the C++ Actor Framework 0.17 as Debian packages it (no CMake config
# or pkg-config file ships with libcaf-dev). Defines caf::core and caf::io.
find_path(CAF_INCLUDE_DIR caf/all.hpp)
find_library(CAF_CORE_LIBRARY caf_core)
find_library(CAF_IO_LIBRARY caf_io)
if(CAF_INCLUDE_DIR AND EXISTS "${CAF_INCLUDE_DIR}/caf/config.hpp")
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_version_line
       REGEX "^#define CAF_VERSION [0-9]+")
  string(REGEX REPLACE ".*CAF_VERSION ([0-9]+).*" "\\1" _caf_v
         "${_caf_version_line}")
  if(_caf_v)
    math(EXPR _major "${_caf_v} / 10000")
    math(EXPR _minor "(${_caf_v} / 100) % 100")
    math(EXPR _patch "${_caf_v} % 100")
    set(CAF_VERSION "${_major}.${_minor}.${_patch}")
  endif()
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CAF
  REQUIRED_VARS CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY
  VERSION_VAR CAF_VERSION)
if(CAF_FOUND AND NOT TARGET caf::core)
  add_library(caf::core SHARED IMPORTED)
  set_target_properties(caf::core PROPERTIES
    IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}")
  add_library(caf::io SHARED IMPORTED)
  set_target_properties(caf::io PROPERTIES
    IMPORTED_LOCATION "${CAF_IO_LIBRARY}"
    INTERFACE_LINK_LIBRARIES caf::core)
endif()
