-- Why does a tuned plan of the default configuration time 0-2.5% slower than the default
-- plan in e2e.lua's turn (the eleventh session's acceptance run, same outputs, same cuBLASLt
-- algorithms)? Three plans of one model: A the default plan, B a second default plan built
-- after A (same weights), T stof.tune's plan; each pair timed in turn (run.time_in_turn) both
-- ways round, then each alone three times. If B is as slow as T, the order of building (the
-- memory each plan got) is the cause, not the search; if "first" wins whichever plan it is,
-- the turn itself is.
--   build-gpu/stof bench/plan_order.lua [MODEL [B [S [TARGET [LAYERS [BUDGET_S]]]]]]
--   build-gpu/stof bench/plan_order.lua bert-base 16 2048          (the GPU; about a minute)
local stof = require("stof")
local run = require("stof.models.run")
local name, B, S = arg[1] or "bert-base", tonumber(arg[2] or 16), tonumber(arg[3] or 2048)
local layers = arg[5] and {num_hidden_layers = tonumber(arg[5])} or nil
local r = run.prepare(name, {batch = B, seq = S, mask = "bigbird", dtype = "float16", target = arg[4],
                             overrides = layers})
local A = r.plan
local Bp = stof.plan({r.model.output}, {target = A.target})
Bp:bind(r:feed())
local function pair(x, y, nx, ny)
  local tx, ty = run.time_in_turn(x, y, 30, 5)
  print(("%s first %.4f ms, then %s %.4f ms (%+.2f%%)"):format(nx, tx, ny, ty, 100 * (ty / tx - 1)))
end
print(("%s %dx%d on %s"):format(name, B, S, A.target))
pair(A, Bp, "A", "B")
pair(Bp, A, "B", "A")
local db = os.tmpname()
local T = stof.tune({r.model.output}, {feed = r:feed(), budget = tonumber(arg[6] or 15), db = db, force = true})
os.remove(db)
print("T's configuration is the default one:", A.scheme == T.scheme)
pair(A, T, "A", "T")
pair(T, A, "T", "A")
pair(Bp, T, "B", "T")
for _, p in ipairs({{"A", A}, {"B", Bp}, {"T", T}}) do
  print(("%s alone: %.4f %.4f %.4f ms"):format(p[1], p[2]:time(30, 5), p[2]:time(30, 5), p[2]:time(30, 5)))
end
