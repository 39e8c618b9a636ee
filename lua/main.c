/*
 * stof, the command-line tool: runs Lua scripts with the stof module.
 *
 *   stof run SCRIPT.lua [args...]   run a script (also: stof SCRIPT.lua [args...])
 *   stof -e CODE [-e CODE ...]      run chunks of Lua; a script and its args may follow
 *   stof - [args...]                run standard input as a script
 *   stof COMMAND [args...]          a command written in Lua: lua/stof/cli/COMMAND.lua
 *                                   (COMMAND a word that names no file; a folder such as
 *                                   the source tree's bench/ does not count)
 *   stof --help | --version
 *
 * Scripts see the global `arg` as lua.c sets it (arg[0] the script, arg[1..] its
 * arguments, arg[-1], arg[-2], ... what came before) and get the arguments as `...`.
 * require("stof") gives the same module as the loadable stof.so (preloaded here), and
 * package.path finds stof's pure-Lua modules beside the executable and in the source tree.
 * Any error prints "stof: <message>" (with a traceback for run-time errors) to stderr and
 * the exit status is 1.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lualib.h>

#include "lua_int.h"

static void usage(FILE *f) {
  fputs("usage: stof run SCRIPT.lua [args...]   run a Lua script with the stof module\n"
        "       stof SCRIPT.lua [args...]       the same\n"
        "       stof -e CODE [SCRIPT [args...]] run CODE (repeatable) before any script\n"
        "       stof - [args...]                run standard input\n"
        "       stof COMMAND [args...]          run lua/stof/cli/COMMAND.lua\n"
        "       stof --help | --version\n"
        "Commands: model (run a zoo model), tune (search its fastest plan), db (a tuning\n"
        "database), mask, explain, bench; stof COMMAND --help says more.\n"
        "Scripts read their arguments from the global table arg (arg[0] is the script)\n"
        "and load the module with require(\"stof\").\n",
        f);
}

/* ---------------------------------------------------------------- running chunks */

static int msghandler(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
      msg = lua_tostring(L, -1);
    else
      msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* Calls the function below narg arguments with a traceback handler. */
static int docall(lua_State *L, int narg) {
  int base = lua_gettop(L) - narg;
  lua_pushcfunction(L, msghandler);
  lua_insert(L, base);
  int st = lua_pcall(L, narg, 0, base);
  lua_remove(L, base);
  return st;
}

/* Prints the error message on top of the stack (if status is an error) and pops it. */
static int report(lua_State *L, int status) {
  if (status != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    fprintf(stderr, "stof: %s\n", msg ? msg : "(error object is not a string)");
    fflush(stderr);
    lua_pop(L, 1);
  }
  return status;
}

/* arg: argv[script] at 0, what precedes at negative indices, what follows at 1, 2, ... */
static void create_arg_table(lua_State *L, char **argv, int argc, int script) {
  lua_createtable(L, argc - script - 1 > 0 ? argc - script - 1 : 0, script + 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - script);
  }
  lua_setglobal(L, "arg");
}

static int run_string(lua_State *L, const char *code) {
  int st = luaL_loadbuffer(L, code, strlen(code), "=(command line)");
  if (st == LUA_OK) st = docall(L, 0);
  return report(L, st);
}

/* Runs the file (NULL: stdin) with argv[script+1..] as arguments. */
static int run_script(lua_State *L, const char *path, char **argv, int argc, int script) {
  int st = luaL_loadfile(L, path);
  if (st == LUA_OK) {
    int n = argc - script - 1;
    luaL_checkstack(L, n + 3, "too many arguments to the script");
    for (int i = script + 1; i < argc; i++) lua_pushstring(L, argv[i]);
    st = docall(L, n);
  }
  return report(L, st);
}

/* The file of the command module stof.cli.<name>, pushed, or nil. */
static void find_command(lua_State *L, const char *name) {
  for (const char *p = name; *p; p++)
    if (!(*p == '_' || *p == '-' || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9'))) {
      lua_pushnil(L);
      return;
    }
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "searchpath");
  lua_pushfstring(L, "stof.cli.%s", name);
  lua_getfield(L, -3, "path");
  if (!lua_isfunction(L, -3) || !lua_isstring(L, -1)) {
    lua_pop(L, 4);
    lua_pushnil(L);
    return;
  }
  lua_call(L, 2, 1);
  lua_remove(L, -2);
}

/* Whether path names something other than a folder (a script may be any such file). */
static int is_file(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode);
}

/* ---------------------------------------------------------------- main */

static void setup(lua_State *L, const char *argv0) {
  luaL_openlibs(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, stof_lua_open);
  lua_setfield(L, -2, "stof");
  lua_pop(L, 1);
  /* The executable's folder anchors package.path. */
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
  } else {
    snprintf(exe, sizeof exe, "%s", argv0);
  }
  char *slash = strrchr(exe, '/');
  if (slash) {
    *slash = 0;
    stof_lua_add_path(L, exe[0] ? exe : "/");
  } else {
    stof_lua_add_path(L, ".");
  }
}

static void print_version(void) {
  int v = stof_cuda_nvrtc_version();
  printf("stof %s (%s", STOF_VERSION, LUA_RELEASE);
  if (v > 0) printf(", NVRTC %d.%d", v / 1000, (v % 1000) / 10);
  printf(")\n");
}

/* The protected main: returns true on success. */
static int pmain(lua_State *L) {
  int argc = (int)lua_tointeger(L, 1);
  char **argv = lua_touserdata(L, 2);
  luaL_checkversion(L);
  setup(L, argc > 0 ? argv[0] : "stof");

  int i = 1, ran = 0;
  /* Options first: -e CODE (repeatable), --help, --version, -- ends them. */
  for (; i < argc && argv[i][0] == '-' && argv[i][1] != 0; i++) {
    const char *o = argv[i];
    if (strcmp(o, "--") == 0) {
      i++;
      break;
    } else if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
      usage(stdout);
      lua_pushboolean(L, 1);
      return 1;
    } else if (strcmp(o, "--version") == 0 || strcmp(o, "-v") == 0) {
      print_version();
      lua_pushboolean(L, 1);
      return 1;
    } else if (strcmp(o, "-e") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "stof: '-e' needs an argument\n");
        usage(stderr);
        lua_pushboolean(L, 0);
        return 1;
      }
      if (!ran) create_arg_table(L, argv, argc, 0);
      ran = 1;
      if (run_string(L, argv[++i]) != LUA_OK) {
        lua_pushboolean(L, 0);
        return 1;
      }
    } else {
      fprintf(stderr, "stof: unknown option '%s'\n", o);
      usage(stderr);
      lua_pushboolean(L, 0);
      return 1;
    }
  }
  if (i >= argc) {
    if (!ran) {
      usage(stderr);
      lua_pushboolean(L, 0);
      return 1;
    }
    lua_pushboolean(L, 1);
    return 1;
  }

  int script = i;
  const char *path = argv[i];
  if (strcmp(path, "run") == 0) {
    if (i + 1 >= argc) {
      fprintf(stderr, "stof: run: missing script name (stof run SCRIPT.lua [args...])\n");
      lua_pushboolean(L, 0);
      return 1;
    }
    script = i + 1;
    path = argv[script];
  } else if (strcmp(path, "-") != 0 && !strchr(path, '/') && !strchr(path, '.') && !is_file(path)) {
    /* A word that is no file (a folder of that name, such as the source tree's bench/, does
     * not count): a command in lua/stof/cli/. */
    find_command(L, path);
    if (lua_isnil(L, -1)) {
      if (access(path, F_OK) == 0) { /* a folder: run_script says so */
        lua_pop(L, 1);
      } else {
        fprintf(stderr, "stof: unknown command '%s' (and no such file); see stof --help\n", path);
        lua_pushboolean(L, 0);
        return 1;
      }
    } else {
      path = lua_tostring(L, -1); /* kept on the stack while it runs */
    }
  }
  create_arg_table(L, argv, argc, script);
  int st = run_script(L, strcmp(path, "-") == 0 ? NULL : path, argv, argc, script);
  lua_pushboolean(L, st == LUA_OK);
  return 1;
}

int main(int argc, char **argv) {
  lua_State *L = luaL_newstate();
  if (!L) {
    fprintf(stderr, "stof: cannot create the Lua state: not enough memory\n");
    return EXIT_FAILURE;
  }
  lua_pushcfunction(L, pmain);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  int st = lua_pcall(L, 2, 1, 0);
  int ok = st == LUA_OK && lua_toboolean(L, -1);
  if (st != LUA_OK) report(L, st);
  lua_close(L);
  return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}
