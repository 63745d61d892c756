# Shared by examples/ and bench/: links a program with the static dlock
# library, hiredis and threads, whatever name the top-level build gives the
# library target, so the two directories do not need to change with it.
find_package(Threads REQUIRED)
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND AND NOT DLOCK_LINK_HIREDIS_LIBRARIES)
  pkg_check_modules(DLOCK_LINK_HIREDIS QUIET hiredis)
endif()
if(NOT DLOCK_LINK_HIREDIS_LIBRARIES)
  find_library(DLOCK_LINK_HIREDIS_LIBRARIES hiredis REQUIRED)
endif()

function(dlock_link_program target)
  if(TARGET dlock_static)
    set(lib dlock_static)
  elseif(TARGET dlock)
    set(lib dlock)
  else()
    message(FATAL_ERROR "no dlock library target (dlock_static or dlock)")
  endif()
  set_target_properties(${target} PROPERTIES C_STANDARD 11
                        C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
  target_include_directories(${target} PRIVATE
                             ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/../include
                             ${DLOCK_LINK_HIREDIS_INCLUDE_DIRS})
  target_link_libraries(${target} PRIVATE ${lib}
                        ${DLOCK_LINK_HIREDIS_LIBRARIES} Threads::Threads)
  if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra -Werror
                           -Wstrict-prototypes -Wwrite-strings)
  endif()
endfunction()
