-- The failover controller of the harness's `tarantool` cluster. Tarantool 2.6 has no election, so
-- this process (run by the tarantool binary as a plain Lua program, on one node) does an
-- operator's job:
--
-- 1. Every TICK it asks each node for harness_role() (node.lua) over net.box.
-- 2. A node other than the leader it chose that takes writes is demoted (read-only).
-- 3. When its leader has not been reachable and writable for FAILOVER_AFTER seconds and it reaches
--    a quorum of nodes, it promotes the most advanced reachable node: the greatest LSN of the
--    former leader's rows, then the greatest sum of the vector clock. Promotion is
--    box.ctl.clear_synchro_queue() (confirm what a quorum acknowledged, roll back the rest), then
--    read_only = false.
--
-- Its state is in STATE_FILE, as JSON, for the harness to read.
--
-- Environment: NODES (name=host:port,...), LEADER (the first leader), QUORUM, FAILOVER_AFTER,
-- SYNCHRO_TIMEOUT, STATE_FILE.
local fiber = require('fiber')
local fio = require('fio')
local json = require('json')
local net = require('net.box')

local TICK = 0.5

-- The log line, with the UTC time: the tarantool binary logs bare messages before box.cfg.
local function say(fmt, ...)
    local now = fiber.time()
    io.stderr:write(string.format('%s.%03d controller: ' .. fmt .. '\n',
        os.date('!%Y-%m-%d %H:%M:%S', math.floor(now)), math.floor(now % 1 * 1000), ...))
    io.stderr:flush()
end
local nodes, by_name = {}, {}
for name, uri in string.gmatch(os.getenv('NODES'), '([^=,]+)=([^,]+)') do
    table.insert(nodes, { name = name, uri = uri })
    by_name[name] = nodes[#nodes]
end
local quorum = tonumber(os.getenv('QUORUM'))
local failover_after = tonumber(os.getenv('FAILOVER_AFTER'))
local synchro_timeout = tonumber(os.getenv('SYNCHRO_TIMEOUT'))
local state_file = os.getenv('STATE_FILE')

local state = { leader = os.getenv('LEADER'), failovers = 0, since = fiber.time() }
local last_seen = fiber.clock()
local conns = {}

local function save()
    local tmp = state_file .. '.tmp'
    local f = fio.open(tmp, { 'O_WRONLY', 'O_CREAT', 'O_TRUNC' }, tonumber('644', 8))
    f:write(json.encode(state))
    f:close()
    fio.rename(tmp, state_file)
end

local function call(node, fn, args, timeout)
    local conn = conns[node.name]
    if conn == nil or not conn:is_connected() then
        if conn ~= nil then
            pcall(conn.close, conn)
        end
        conn = net.connect(node.uri, { connect_timeout = 1, wait_connected = 1 })
        conns[node.name] = conn
    end
    local ok, result = pcall(conn.call, conn, fn, args or {}, { timeout = timeout or 1 })
    if not ok then
        return nil, tostring(result)
    end
    return result
end

local function advance(role, former_id)
    local own = role.vclock[tostring(former_id or 0)] or 0
    local sum = 0
    for _, lsn in pairs(role.vclock) do
        sum = sum + lsn
    end
    return own, sum
end

local function more_advanced(a, b, former_id)
    local a_own, a_sum = advance(a, former_id)
    local b_own, b_sum = advance(b, former_id)
    if a_own ~= b_own then
        return a_own > b_own
    end
    return a_sum > b_sum
end

local leader_id = nil
local stuck = nil -- how many nodes answered when a failover last lacked a quorum

local function tick()
    local roles, reachable = {}, 0
    for _, node in ipairs(nodes) do
        local role = call(node, 'harness_role')
        if role ~= nil then
            roles[node.name] = role
            reachable = reachable + 1
        end
    end
    local current = roles[state.leader]
    if current ~= nil and not current.ro then
        last_seen = fiber.clock()
        leader_id = current.id
    end
    for _, node in ipairs(nodes) do
        local role = roles[node.name]
        if role ~= nil and not role.ro and node.name ~= state.leader then
            say('%s takes writes but %s leads: demoting it', node.name, state.leader)
            call(node, 'harness_demote', { 'the controller chose ' .. state.leader })
        end
    end
    if fiber.clock() - last_seen < failover_after then
        return
    end
    if reachable < quorum then
        if stuck ~= reachable then -- said once per change, not every tick
            say('leader %s lost, but only %d of %d nodes answer: no failover',
                state.leader, reachable, #nodes)
        end
        stuck = reachable
        return
    end
    stuck = nil
    local best = nil
    for _, node in ipairs(nodes) do
        local role = roles[node.name]
        if role ~= nil and (best == nil or more_advanced(role, roles[best], leader_id)) then
            best = node.name
        end
    end
    if best == nil then
        return
    end
    say('leader %s lost for %.1fs; promoting %s (vclock %s)', state.leader,
        fiber.clock() - last_seen, best, json.encode(roles[best].vclock))
    for _, node in ipairs(nodes) do
        if node.name ~= best then
            call(node, 'harness_demote', { 'failover to ' .. best })
        end
    end
    local role, err = call(by_name[best], 'harness_promote', {}, 3 * synchro_timeout + 5)
    if role == nil then
        say('promoting %s failed: %s', best, err)
        return
    end
    state = { leader = best, failovers = state.failovers + 1, since = fiber.time() }
    leader_id = role.id
    last_seen = fiber.clock()
    save()
    say('%s leads', best)
end

save()
say('watching %d nodes, leader %s', #nodes, state.leader)
while true do
    local ok, err = pcall(tick)
    if not ok then
        say('%s', tostring(err))
    end
    fiber.sleep(TICK)
end
