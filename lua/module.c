/*
 * The loadable module stof.so: `require("stof")` from any Lua 5.4 interpreter whose
 * package.cpath finds this file. It opens the same module as the stof executable, and adds
 * the lua/ folders beside the build (and in the source tree) to package.path so that
 * stof's pure-Lua modules (stof.models.*, ...) are found too.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <string.h>

#include "lua_int.h"

LUAMOD_API int luaopen_stof(lua_State *L);

LUAMOD_API int luaopen_stof(lua_State *L) {
  Dl_info info;
  char dir[PATH_MAX];
  const char *anchor = NULL;
  if (dladdr((void *)luaopen_stof, &info) && info.dli_fname) {
    size_t n = strlen(info.dli_fname);
    if (n < sizeof dir) {
      memcpy(dir, info.dli_fname, n + 1);
      char *slash = strrchr(dir, '/');
      if (slash) {
        *slash = 0;
        anchor = dir;
      } else {
        anchor = ".";
      }
    }
  }
  stof_lua_add_path(L, anchor);
  return stof_lua_open(L);
}
