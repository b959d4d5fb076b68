-- wrk script for bench/http_bench.py.
--
--   wrk -s bench/wrk/guard.lua http://127.0.0.1:PORT -- DATAFILE
--
-- DATAFILE is a Lua file written per run by http_bench.py that returns
--   { workload = "decide" | "mixed" | "status", seed = n, threads = n,
--     agents = { {id = "...", token = "..."}, ... },
--     outcomes = { {agent = i, action = "act-n"}, ... } }  -- mixed only
--
-- Requests are spread at random over the agents, each with its own token.
-- mixed: of every 10 requests 8 are allowed actions, 1 is denied (a cost
-- above the budget: insufficient_budget, no scar) and 1 reports the outcome
-- of an action allowed before the run; each outcome is used once, split
-- between wrk threads. When they run out, an allowed action is sent instead
-- and counted as a fallback. Every request is built once, in init.

local thread_counter = 0
local threads = {}

function setup(thread)
  thread_counter = thread_counter + 1
  thread:set("tid", thread_counter)
  table.insert(threads, thread)
end

local workload
local n_agents
local decide_reqs, deny_reqs, status_reqs, outcome_reqs = {}, {}, {}, {}
local outcome_next = 1
local counter = 0
fallbacks = 0

local DECIDE_BODY = '{"tool":"web_search","input":{"query":"weather in Lisbon tomorrow","max_results":5},"cost":0.01}'
local DENY_BODY = '{"tool":"web_search","input":{"query":"weather in Lisbon tomorrow","max_results":5},"cost":999999999}'
local OUTCOME_BODY = '{"status":"success","detail":"5 results"}'

function init(args)
  local data = dofile(args[1])
  workload = data.workload
  n_agents = #data.agents
  math.randomseed(data.seed + tid * 7919)
  for i, agent in ipairs(data.agents) do
    local headers = {
      ["Authorization"] = "Bearer " .. agent.token,
      ["Content-Type"] = "application/json",
    }
    local actions = "/v1/agents/" .. agent.id .. "/actions"
    decide_reqs[i] = wrk.format("POST", actions, headers, DECIDE_BODY)
    deny_reqs[i] = wrk.format("POST", actions, headers, DENY_BODY)
    status_reqs[i] = wrk.format("GET", "/v1/agents/" .. agent.id,
      { ["Authorization"] = "Bearer " .. agent.token })
  end
  if data.outcomes then
    local mine = 0
    for k, o in ipairs(data.outcomes) do
      if (k - 1) % data.threads == tid - 1 then
        local agent = data.agents[o.agent]
        mine = mine + 1
        outcome_reqs[mine] = wrk.format("POST",
          "/v1/agents/" .. agent.id .. "/actions/" .. o.action .. "/outcome",
          { ["Authorization"] = "Bearer " .. agent.token,
            ["Content-Type"] = "application/json" },
          OUTCOME_BODY)
      end
    end
  end
end

function request()
  local i = math.random(n_agents)
  if workload == "status" then
    return status_reqs[i]
  elseif workload == "decide" then
    return decide_reqs[i]
  end
  counter = counter + 1
  local k = counter % 10
  if k == 0 then
    return deny_reqs[i]
  elseif k == 5 then
    local req = outcome_reqs[outcome_next]
    if req then
      outcome_next = outcome_next + 1
      return req
    end
    fallbacks = fallbacks + 1
  end
  return decide_reqs[i]
end

function done(summary, latency, requests)
  local fb = 0
  for _, thread in ipairs(threads) do
    fb = fb + (thread:get("fallbacks") or 0)
  end
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,'
    .. '"p50_us":%.0f,"p90_us":%.0f,"p99_us":%.0f,"max_us":%.0f,"mean_us":%.1f,'
    .. '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},'
    .. '"fallbacks":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean,
    e.connect, e.read, e.write, e.status, e.timeout, fb))
end
