-- A pure-Lua submodule for test_module.lua: stof.fixture loads it on first use.
return {answer = 42}
