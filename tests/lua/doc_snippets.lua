-- Runs the stand-alone Lua examples of the documentation: every ```lua block (indented ones
-- inside list items too) whose first line requires stof (`local stof = require("stof")`,
-- `local M = require("stof").mask`; the others continue an earlier block, need a GPU, or
-- show a fragment), each as its own chunk named FILE:LINE, so that a failure points at the
-- doc.
--
--   stof run tests/lua/doc_snippets.lua README.md docs/*.md
local files = {...}
assert(#files > 0, "usage: stof run tests/lua/doc_snippets.lua FILE.md ...")
local run, skipped = 0, 0
for _, path in ipairs(files) do
  local f = assert(io.open(path, "r"))
  local lines, block, first, indent = {}, nil, nil, ""
  local n = 0
  for line in f:lines() do
    n = n + 1
    if block then
      if line:match("^%s*```%s*$") then
        if block[1] and block[1]:find('require("stof")', 1, true) then
          local chunk, err = load(table.concat(block, "\n"), "@" .. path .. ":" .. first)
          assert(chunk, err)
          print(("== %s:%d"):format(path, first))
          local ok, msg = pcall(chunk)
          if not ok then error(("%s:%d: the example fails: %s"):format(path, first, tostring(msg)), 0) end
          run = run + 1
        else
          skipped = skipped + 1
        end
        block = nil
      else
        -- a block inside a list item is indented: its lines without the fence's indent
        block[#block + 1] = line:sub(1, #indent) == indent and line:sub(#indent + 1) or line
      end
    elseif line:match("^%s*```lua%s*$") then
      block, first, indent = {}, n + 1, line:match("^(%s*)")
    end
  end
  f:close()
  assert(not block, path .. ": a ```lua block is not closed")
end
print(("doc snippets: %d run, %d continuations or fragments not run"):format(run, skipped))
assert(run > 0, "no stand-alone example found")
