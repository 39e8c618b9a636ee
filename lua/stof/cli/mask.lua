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
local fail, eval_mask = common.fail, common.eval_mask

local function set_int(field)
  return function(o, v, name) o[field] = common.positive(name, v) end
end

local OPTIONS = {
  ["--seq"] = function(o, v) o.Sq, o.Sk = common.parse_seq(v) end,
  ["--tile"] = function(o, v, name)
    o.tile = common.positive(name, v)
    o.tile_given = true
  end,
  ["--batch"] = set_int("batch"),
  ["--heads"] = set_int("heads"),
  ["--dim"] = set_int("dim"),
  ["--kernel"] = function(o, v) o.kernel = v end,
  ["--gpu"] = function(o, v) o.gpu = v end,
  ["--mod"] = function(o, v) o.mod = v end,
  ["--softcap"] = function(o, v)
    o.softcap = tonumber(v)
    if not o.softcap then fail("--softcap takes a number") end
  end,
  ["-o"] = function(o, v) o.output = v end,
  ["--output"] = function(o, v) o.output = v end,
}

-- Parses the arguments after "show" (or "explain").
local function parse_show(args)
  return common.parse_args(args, "mask", {tile = 64, batch = 1, heads = 1, dim = 64}, OPTIONS, nil, {"expr"},
                           "quote the MASK expression if it has spaces")
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

-- run as `stof explain` (lua/stof/cli/explain.lua), errors say "stof explain: ..."
local args = {...}
local name = "mask"
if type(args[1]) == "table" then name = table.remove(args, 1).as end
common.main(name, USAGE, {show = show, explain = explain, list = list}, table.unpack(args))
