-- stof explain MASK --seq S [...]: which attention kernel the selector picks and why.
-- The same command as `stof mask explain` (lua/stof/cli/mask.lua), whose options it takes.
local path = assert(package.searchpath("stof.cli.mask", package.path), "stof.cli.mask not found")
return assert(loadfile(path))({as = "explain"}, "explain", ...)
