-- stof mask: pictures of attention masks and their two-level format (DESIGN.md sections 4
-- and 5).
--
--   stof mask show MASK --seq S [--tile T] [--batch B --heads H] [-o FILE.svg]
--   stof mask list
--   stof mask --help
--
-- MASK is a Lua expression evaluated with the stof.mask constructors in scope (and S, Sq,
-- Sk bound to the sequence lengths), e.g. "longformer(32, 32)" or "causal() & sliding(64)",
-- or the bare name of a mask of the canonical suite ("bigbird"). `show` prints the text
-- tile map ('.' empty, '+' partial, '#' full) with the format's statistics, and with -o
-- writes the SVG picture of instance (0, 0). Errors print "stof mask: <cause>" and exit
-- with status 1.
local stof = require("stof")
local M = stof.mask

local USAGE = [[
usage: stof mask show MASK --seq S [--tile T] [--batch B --heads H] [-o FILE.svg]
       stof mask explain MASK --seq S [--batch B --heads H --dim D] [--kernel K] [--tile T]
       stof explain MASK --seq S ...     (the same)
       stof mask list
       stof mask --help

Draws the tile map of a mask's two-level format (empty '.', partial '+', full '#') with
its densities.

  MASK          a Lua expression over the stof.mask constructors, e.g.
                "longformer(32, 32)", "causal() & sliding(64)", "document({100, 156})",
                or a name of the canonical suite (dense, causal, sliding, causal_sliding,
                longformer, bigbird, document); S, Sq and Sk are the sequence lengths
  --seq S       the sequence length (required); --seq Sq,Sk for queries != keys
  --tile T      outer tile size, a multiple of 16 in [16, 128] (default 64)
  --batch B     batch elements (default 1)
  --heads H     heads (default 1)
  -o FILE.svg   also write the SVG picture of instance (b 0, h 0)
  --dim D       head dim, for explain (default 64)
  --kernel K    explain with a forced kernel: auto, block or row
  --gpu NAME    explain for that GPU instead of the one present (h100, h200, a100, l40s,
                rtx4090; none: no GPU)
  --mod M       explain with a score modifier: t5 (relative position bias, 32 buckets) or
                alibi; --softcap X a tanh soft cap
  -h, --help    this text

example: stof mask show "causal() & sliding(64)" --seq 512 -o causal_sliding.svg]]

local CONSTRUCTORS = {
  {"dense()", "every (i, j)"},
  {"causal()", "j <= i"},
  {"window(l, r)", "i - l <= j <= i + r"},
  {"sliding(w)", "|i - j| <= w"},
  {"causal_sliding(w)", "the last w keys: i - w < j <= i"},
  {"global(g)", "i < g or j < g"},
  {"longformer(w, g)", "sliding(w) | global(g)"},
  {"random_blocks(b, p, seed)", "block (i // b, j // b) kept with probability p"},
  {"bigbird(w, g, b, p, seed)", "longformer(w, g) | random_blocks(b, p, seed)"},
  {"document(lengths)", "i and j in the same packed sequence"},
  {"dilated(w, d)", "causal, j = i - k(d + 1) for k < w"},
  {"suite(name, S)", "a mask of the canonical suite"},
}

-- Raised for user errors: printed without a traceback.
local common = require("stof.cli.common")
local fail = common.fail

local function positive(opt, v)
  local n = math.tointeger(tonumber(v))
  if not n or n < 1 then fail("%s: expected a positive integer, got '%s'", opt, tostring(v)) end
  return n
end

-- Parses the arguments after "show".
local function parse_show(args)
  local o = {tile = 64, batch = 1, heads = 1, dim = 64}
  local k = 1
  local function value(opt, inline)
    if inline then return inline end
    k = k + 1
    if args[k] == nil then fail("%s needs a value", opt) end
    return args[k]
  end
  while k <= #args do
    local a = args[k]
    local name, inline = a:match("^(%-%-[%w-]+)=(.*)$")
    name = name or a
    if name == "-h" or name == "--help" then
      o.help = true
    elseif name == "--seq" then
      local v = value(name, inline)
      local q, s = v:match("^%s*(%d+)%s*,%s*(%d+)%s*$")
      if q then
        o.Sq, o.Sk = positive("--seq", q), positive("--seq", s)
      else
        o.Sq = positive("--seq", v)
        o.Sk = o.Sq
      end
    elseif name == "--tile" then
      o.tile = positive(name, value(name, inline))
      o.tile_given = true
    elseif name == "--batch" then
      o.batch = positive(name, value(name, inline))
    elseif name == "--heads" then
      o.heads = positive(name, value(name, inline))
    elseif name == "--dim" then
      o.dim = positive(name, value(name, inline))
    elseif name == "--kernel" then
      o.kernel = value(name, inline)
    elseif name == "--gpu" then
      o.gpu = value(name, inline)
    elseif name == "--mod" then
      o.mod = value(name, inline)
    elseif name == "--softcap" then
      o.softcap = tonumber(value(name, inline))
      if not o.softcap then fail("--softcap takes a number") end
      o.tile_given = o.tile_given
    elseif name == "-o" or name == "--output" then
      o.output = value(name, inline)
    elseif a:sub(1, 1) == "-" and a ~= "-" then
      fail("unknown option '%s' (see stof mask --help)", a)
    elseif o.expr == nil then
      o.expr = a
    else
      fail("unexpected argument '%s' (quote the MASK expression if it has spaces)", a)
    end
    k = k + 1
  end
  return o
end

-- The mask that the expression denotes.
local function eval_mask(expr, Sq, Sk)
  local name = expr:match("^%s*([%a_][%w_]*)%s*$")
  if name then
    for _, s in ipairs(M.suite_names()) do
      if s == name then
        local ok, m = pcall(M.suite, name, Sq)
        if not ok then fail("%s", tostring(m)) end
        return m
      end
    end
  end
  local env = setmetatable({S = Sq, Sq = Sq, Sk = Sk, stof = stof}, {__index = function(_, k)
    return M[k] or math[k] or _G[k]
  end})
  local chunk, err = load("return " .. expr, "=MASK", "t", env)
  if not chunk then fail("bad MASK expression \"%s\": %s", expr, err) end
  local ok, m = pcall(chunk)
  if not ok then fail("bad MASK expression \"%s\": %s", expr, tostring(m)) end
  if getmetatable(m) ~= getmetatable(M.dense()) then
    local what = type(m) == "function" and "a function (call it, as in causal())"
      or (type(m) .. (m ~= nil and (" " .. tostring(m)) or ""))
    fail("MASK \"%s\" gives %s, not a mask", expr, what)
  end
  return m
end

local function show(args)
  local o = parse_show(args)
  if o.help then
    print(USAGE)
    return
  end
  if not o.expr then fail("missing MASK (see stof mask --help)") end
  if not o.Sq then fail("missing --seq S (the sequence length)") end
  local m = eval_mask(o.expr, o.Sq, o.Sk)
  local ok, f = pcall(m.format, m, {o.Sq, o.Sk}, {tile = o.tile, batch = o.batch, heads = o.heads})
  if not ok then fail("%s", tostring(f)) end
  print(tostring(f))
  -- Instance (0, 0) is in the map above; up to 3 more of the distinct ones.
  for n = 1, math.min(f.nmask, 4) - 1 do
    print(f:map(n // f.mask_h, n % f.mask_h))
  end
  if f.nmask > 4 then
    print(("(%d more distinct instances: MaskFormat:map(b, h) in Lua draws them)")
      :format(f.nmask - 4))
  end
  local st = f.stats
  print(("density %.4f (%d of %d elements), non-empty 16x16 tiles %.4f, "
         .. "tiles %d full / %d partial / %d empty of %d")
    :format(st.density, st.nvalid, st.nmask * o.Sq * o.Sk, st.frac16, st.full, st.partial,
            st.empty, st.tiles))
  if o.output then
    local okw, err = pcall(f.svg, f, o.output, 0, 0)
    if not okw then fail("%s", tostring(err)) end
    print("wrote " .. o.output)
  end
end

-- Which attention kernel the selector picks for the mask, and why (stof.explain).
local function explain(args)
  local o = parse_show(args)
  if o.help then
    print(USAGE)
    return
  end
  if not o.expr then fail("missing MASK (see stof mask --help)") end
  if not o.Sq then fail("missing --seq S (the sequence length)") end
  local m = eval_mask(o.expr, o.Sq, o.Sk)
  local ok, text = pcall(stof.explain, m, {Sq = o.Sq, Sk = o.Sk, B = o.batch, H = o.heads, D = o.dim},
                         {kernel = o.kernel, tile = o.tile_given and o.tile or nil, gpu = o.gpu, mod = o.mod,
                          softcap = o.softcap})
  if not ok then fail("%s", tostring(text)) end
  print(text)
end

local function list()
  print("constructors (combine with |, &, -):")
  for _, c in ipairs(CONSTRUCTORS) do print(("  %-26s %s"):format(c[1], c[2])) end
  print("canonical suite: " .. table.concat(M.suite_names(), ", "))
end

common.main("mask", USAGE, {show = show, explain = explain, list = list}, ...)
