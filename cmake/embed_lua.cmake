# Writes the C file that embeds the library's Lua scripts.
#
#   cmake -DOUT=<file.c> -DFILES=<a.lua;b.lua> [-DPIECES=<dir>] -P embed_lua.cmake
#
# Pieces of Lua that several scripts share are written once, as files of
# PIECES (src/lua/lib), and a script takes one with a line of its own
#
#   --@include NAME
#
# (spaces may come before it), which is replaced, newline and all, by the
# text of PIECES/NAME.lua; a piece may itself include others. Only the
# scripts that name a piece carry it, inlined where they name it: nothing
# is put before every script, since each function a script defines costs
# every call of it a closure (about 28 ns, measured with a 1e6-iteration
# EVAL loop), which pieces of plain statements do not. What Redis runs, and
# what the SHA1 and length below are of, is the script with its pieces in.
# A line starting "--@include" that does not name a piece that exists, or
# has no newline after it, stops the build, and so do more than 64 includes
# in one script (a piece that includes itself). bench/driver.py
# (lua_script) expands them the same way.
#
# For src/lua/NAME.lua it defines
#
#   const dlock__script dlock__script_NAME = {"NAME", body, len, "sha1", sharded};
#
# A script that publishes (redis.call('publish', ...)) also gets a variant
# that publishes with SPUBLISH instead, dlock__script_NAME_sharded, which
# 'sharded' points to (NULL for the others): a Redis 7 cluster delivers
# unlock messages on sharded pub/sub there, as Redisson does.
#
# The body is written as an array of '\xNN' character constants (with a
# terminating NUL that 'len' does not count) rather than a string literal, so
# no character of a script ever needs escaping. Plain 0xNN integers would not
# do: bytes above 0x7f overflow a signed char, and -Woverflow (on by default)
# would reject UTF-8 in a comment. The SHA1 is that of the exact file bytes,
# the digest Redis computes for SCRIPT LOAD, so EVALSHA works without a load.
# Characters of NAME that cannot appear in a C identifier become '_'.
#
# It also defines dlock__scripts_all, every script in file-name order and
# then NULL, for code that handles them all (tests, loading at connect):
#
#   extern const dlock__script *const dlock__scripts_all[];

# The policies of the project's version (CMakeLists.txt), which a script
# run with -P does not get otherwise: while(TRUE) needs CMP0012.
cmake_minimum_required(VERSION 3.25)

if(NOT OUT)
  message(FATAL_ERROR "embed_lua.cmake: OUT is not set")
endif()

set(text "/* Generated from the scripts in src/lua by cmake/embed_lua.cmake; do not edit. */\n")
string(APPEND text "#include \"scripts.h\"\n")

# Sets 'out_var' to 'text' with every include line replaced by its piece.
# The first include line is found and replaced until none is left, so that
# the includes of a piece are expanded in their turn. Positions are in
# bytes, as string(FIND), string(SUBSTRING) and string(LENGTH) count them.
function(expand_includes out_var text where)
  set(n 0)
  while(TRUE)
    string(REGEX MATCH "(^|\n)[ ]*--@include[^\n]*" line "${text}")
    if(line STREQUAL "")
      break()
    endif()
    string(FIND "${text}" "${line}" at)
    if(line MATCHES "^\n")
      string(SUBSTRING "${line}" 1 -1 line)
      math(EXPR at "${at} + 1")
    endif()
    if(NOT line MATCHES "^[ ]*--@include ([a-z0-9_]+)[ ]*$")
      message(FATAL_ERROR "${where}: not an include of a piece: '${line}'")
    endif()
    set(piece "${PIECES}/${CMAKE_MATCH_1}.lua")
    if(NOT PIECES OR NOT EXISTS "${piece}")
      message(FATAL_ERROR "${where}: no piece ${piece} for '${line}'")
    endif()
    math(EXPR n "${n} + 1")
    if(n GREATER 64)
      message(FATAL_ERROR "${where}: more than 64 includes; does a piece include itself?")
    endif()
    string(LENGTH "${line}" len)
    math(EXPR after "${at} + ${len}")
    string(SUBSTRING "${text}" ${after} 1 newline)
    if(NOT newline STREQUAL "\n")
      message(FATAL_ERROR "${where}: no newline after '${line}'")
    endif()
    math(EXPR after "${after} + 1")
    string(SUBSTRING "${text}" 0 ${at} head)
    string(SUBSTRING "${text}" ${after} -1 tail)
    file(READ "${piece}" part)
    set(text "${head}${part}${tail}")
  endwhile()
  set(${out_var} "${text}" PARENT_SCOPE)
endfunction()

get_filename_component(outdir "${OUT}" DIRECTORY)

set(table "")
foreach(src IN LISTS FILES)
  get_filename_component(name "${src}" NAME_WE)
  string(MAKE_C_IDENTIFIER "${name}" ident)
  # The script as Redis gets it, written out so that its bytes are hashed
  # and embedded exactly.
  file(READ "${src}" body)
  expand_includes(body "${body}" "${src}")
  set(path "${outdir}/lua/${name}.lua")
  file(WRITE "${path}" "${body}")
  file(SHA1 "${path}" sha)
  string(TOLOWER "${sha}" sha)
  file(SIZE "${path}" len)
  file(READ "${path}" hex HEX)
  string(TOLOWER "${hex}" hex)
  # Ten bytes per line keep the generated file under 80 columns. CMake's
  # regex has no {n} repetition, hence string(REPEAT).
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${hex}")
  string(REPEAT "'\\\\x[0-9a-f][0-9a-f]'," 10 line_re)
  string(REGEX REPLACE "(${line_re})" "\\1\n    " bytes "${bytes}")
  set(sharded_ref "NULL")
  string(FIND "${body}" "redis.call('publish'" at)
  if(NOT at EQUAL -1)
    string(REPLACE "redis.call('publish'" "redis.call('spublish'" sbody "${body}")
    set(spath "${outdir}/lua/${name}_sharded.lua")
    file(WRITE "${spath}" "${sbody}")
    file(SHA1 "${spath}" ssha)
    string(TOLOWER "${ssha}" ssha)
    file(SIZE "${spath}" slen)
    file(READ "${spath}" shex HEX)
    string(TOLOWER "${shex}" shex)
    string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," sbytes "${shex}")
    string(REPEAT "'\\\\x[0-9a-f][0-9a-f]'," 10 sline_re)
    string(REGEX REPLACE "(${sline_re})" "\\1\n    " sbytes "${sbytes}")
    string(APPEND text "\n/* src/lua/${name}.lua publishing with SPUBLISH, ${slen} bytes */\n")
    string(APPEND text "static const char dlock__body_${ident}_sharded[] = {\n    ${sbytes}'\\x00'};\n")
    string(APPEND text "const dlock__script dlock__script_${ident}_sharded = {\n")
    string(APPEND text "    \"${name}\", dlock__body_${ident}_sharded, ${slen},\n")
    string(APPEND text "    \"${ssha}\", NULL};\n")
    set(sharded_ref "&dlock__script_${ident}_sharded")
  endif()
  string(APPEND text "\n/* src/lua/${name}.lua, ${len} bytes */\n")
  string(APPEND text "static const char dlock__body_${ident}[] = {\n    ${bytes}'\\x00'};\n")
  string(APPEND text "const dlock__script dlock__script_${ident} = {\n")
  string(APPEND text "    \"${name}\", dlock__body_${ident}, ${len},\n")
  string(APPEND text "    \"${sha}\", ${sharded_ref}};\n")
  string(APPEND table "    &dlock__script_${ident},\n")
endforeach()

string(APPEND text "\nextern const dlock__script *const dlock__scripts_all[];\n")
string(APPEND text "const dlock__script *const dlock__scripts_all[] = {\n${table}    NULL};\n")

file(WRITE "${OUT}" "${text}")
