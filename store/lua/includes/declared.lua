-- includes/declared.lua: the per-job and per-model keys a script may touch,
-- all passed in KEYS by the caller (store/keys.py spells them; no Lua
-- builds a key name). On Redis Cluster a key outside KEYS would fail
-- halfway through a script while its slot migrates, or read nil for a key
-- already moved; declared keys make Redis answer MOVED/TRYAGAIN before the
-- script runs.
--
-- After a script's own KEYS (and before its trailing ones: the operation
-- key stays last), the caller appends, in this order:
--   5 keys per declared job id:  job hash, payload, result, children, held
--   4 keys per declared model:   its ready queues, priority 1, 2, 3, and its
--                                model's fair-share hash. A "model" here is a
--                                queue class (store/policy.py queue_class):
--                                "<model>" (any pool) or "<model>@<pool>"
--   raw keys:                    keys named by records (a job's idem_ref)
-- and ARGV ends with the declared job ids, then the declared models, then
-- four counts: the KEYS index of the first job group, n_ids, n_models, n_raw.
-- ARGC is the number of the script's own ARGV (before that tail).
--
-- Using an undeclared job or model is a bug, a hard error(). A script that
-- meets an id it could not know beforehand (a queue head, a parent, held
-- children, due ids, a job's model) asks for it with need_*() while it
-- reads, and before its first write returns keys_needed():
--   {RC.KEYS_NEEDED, {job id, ...}, {model, ...}, {raw key, ...}}
-- having written nothing; the caller declares them and calls again.

local ARGC
local D_JOB = {}      -- job id -> KEYS index of its job hash
local D_MODEL = {}    -- queue class -> KEYS index of its priority-1 ready queue
local D_KEY = {}      -- every key name in KEYS
do
  local n = #ARGV
  local key_at = tonumber(ARGV[n - 3])
  local n_ids, n_models = tonumber(ARGV[n - 2]), tonumber(ARGV[n - 1])
  ARGC = n - 4 - n_ids - n_models
  for i = 1, n_ids do
    D_JOB[ARGV[ARGC + i]] = key_at + (i - 1) * 5
  end
  local model_at = key_at + n_ids * 5
  for i = 1, n_models do
    D_MODEL[ARGV[ARGC + n_ids + i]] = model_at + (i - 1) * 4
  end
  for _, name in ipairs(KEYS) do
    D_KEY[name] = true
  end
end

-- The KEYS index of `name` in a declared group (D_JOB or D_MODEL); an
-- undeclared name is a bug in the caller's plan, so it fails the script.
local function declared_index(group, what, name)
  local i = group[name]
  if not i then
    error('undeclared ' .. what .. ' ' .. tostring(name) .. ' was not declared in KEYS')
  end
  return i
end

local function job_index(id) return declared_index(D_JOB, 'job', id) end

local function jk(id) return KEYS[job_index(id)] end
local function payload_key(id) return KEYS[job_index(id) + 1] end
local function result_key(id) return KEYS[job_index(id) + 2] end
local function children_key(id) return KEYS[job_index(id) + 3] end
local function held_key(id) return KEYS[job_index(id) + 4] end

local function class_index(class) return declared_index(D_MODEL, 'model', class) end

-- The ready queue of a queue class ("<model>" or "<model>@<pool>") and priority.
local function queue_key(class, priority)
  return KEYS[class_index(class) + tonumber(priority) - 1]
end

-- The fair-share hash of a queue class's model (shared by all its pools).
local function fair_key(class)
  return KEYS[class_index(class) + 3]
end

-- A key named by a record (idem_ref): usable only if it is in KEYS.
local function declared_key(name)
  if not D_KEY[name] then
    error('undeclared key ' .. tostring(name) .. ' was not declared in KEYS')
  end
  return name
end

local NEED_IDS, NEED_MODELS, NEED_RAW = {}, {}, {}
local NEEDED_ID, NEEDED_MODEL, NEEDED_RAW = {}, {}, {}

-- Asks for `name` in `list` once (`asked`: the names it holds).
local function ask(list, asked, name)
  if not asked[name] then
    asked[name] = true
    list[#list + 1] = name
  end
end

-- True if job `id` is declared; otherwise asks for it.
local function need_job(id)
  if D_JOB[id] then
    return true
  end
  ask(NEED_IDS, NEEDED_ID, id)
  return false
end

-- Asks for a queue class's keys unless declared ('' or nil: none needed).
local function need_model(model)
  if model and model ~= '' and not D_MODEL[model] then
    ask(NEED_MODELS, NEEDED_MODEL, model)
  end
end

-- Asks for a raw key unless declared ('' or nil: none needed).
local function need_key(name)
  if name and name ~= '' and not D_KEY[name] then
    ask(NEED_RAW, NEEDED_RAW, name)
  end
end

local function needs_count()
  return #NEED_IDS + #NEED_MODELS + #NEED_RAW
end

-- {ids, models, raw keys} asked for so far.
local function needs()
  return {NEED_IDS, NEED_MODELS, NEED_RAW}
end

-- The reply asking for more keys, or nil when every key needed is declared.
local function keys_needed()
  if needs_count() == 0 then
    return nil
  end
  return {RC.KEYS_NEEDED, NEED_IDS, NEED_MODELS, NEED_RAW}
end
