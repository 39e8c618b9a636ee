-- The canonical mask suite (DESIGN.md section 4) at S = 1024: for each mask, the text tile
-- map of its two-level format ('.' empty, '+' partial, '#' full 64 x 64 tiles) with its
-- densities, and an SVG picture written into a folder.
--
--   stof run examples/mask_gallery.lua [DIR [S [TILE]]]    (DIR: default a new temp folder)
local stof = require("stof")
local M = stof.mask

local dir, S, T = arg[1], tonumber(arg[2]) or 1024, tonumber(arg[3]) or 64

local function sh_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
if not dir then
  dir = os.tmpname() -- a fresh name: the file it creates makes way for the folder
  os.remove(dir)
end
assert(os.execute("mkdir -p " .. sh_quote(dir)), "cannot create the folder " .. dir)

print(("canonical suite at S = %d, tile %d; SVGs in %s"):format(S, T, dir))
for _, name in ipairs(M.suite_names()) do
  local m = M.suite(name, S)
  local f = m:format(S, {tile = T})
  local st = f.stats
  assert(st.full + st.partial + st.empty == st.tiles)
  print()
  print(("== %s: density %.4f"):format(name, st.density))
  print(f) -- the stats, then the map
  local path = ("%s/%s.svg"):format(dir, name)
  f:svg(path)
  print("wrote " .. path)
end
