-- One Tarantool 2.6 instance of the harness's `tarantool` cluster (seed 002's qsync): a full mesh,
-- synchronous data spaces, and the server-side functions the harness's clients call. Each workload
-- operation is one function, so it runs as one transaction without a yield between its reads and
-- its writes; only the commit waits, for the quorum.
--
-- Settings come from the environment, set by clusters/tarantool_qsync.py:
--   NODE_NAME, PEERS (host:port,...), QUORUM, SYNCHRO_TIMEOUT, LEADER (the node that bootstraps
--   the cluster and leads first), DATA_DIR, LOG_FILE, LEASE (seconds a writable node keeps
--   serving without hearing a quorum of peers).
local fiber = require('fiber')
local fio = require('fio')
local log = require('log')

local name = os.getenv('NODE_NAME')
local peers = {}
for peer in string.gmatch(os.getenv('PEERS'), '[^,]+') do
    table.insert(peers, peer)
end
local quorum = tonumber(os.getenv('QUORUM'))
local data_dir = os.getenv('DATA_DIR')
local lease = tonumber(os.getenv('LEASE'))
-- A node that has data restarts read-only: only the controller makes a node writable.
local first_start = #fio.glob(fio.pathjoin(data_dir, '*.snap')) == 0

fio.mktree(data_dir)
box.cfg({
    listen = '0.0.0.0:3301',
    work_dir = data_dir,
    log = os.getenv('LOG_FILE'),
    replication = peers,
    replication_synchro_quorum = quorum,
    replication_synchro_timeout = tonumber(os.getenv('SYNCHRO_TIMEOUT')),
    replication_timeout = 0.5,
    -- at bootstrap every peer must join; afterwards a restart does not wait for any
    replication_connect_quorum = first_start and #peers or 0,
    replication_connect_timeout = first_start and 60 or 3,
    replication_sync_timeout = 5,
    read_only = not (first_start and name == os.getenv('LEADER')),
    wal_mode = 'write',
})

box.once('harness-schema', function()
    box.schema.user.grant('guest', 'super')
    local spaces = {
        set_elements = { { name = 'element', type = 'integer' } },
        bank_accounts = { { name = 'id', type = 'integer' }, { name = 'balance', type = 'integer' } },
        append_lists = { { name = 'k', type = 'integer' }, { name = 'vals', type = 'array' } },
    }
    for space_name, format in pairs(spaces) do
        local space = box.schema.space.create(space_name, { is_sync = true, format = format })
        space:create_index('primary', { parts = { 1, 'integer' } })
    end
end)

local function array(t)
    return setmetatable(t, { __serialize = 'array' })
end

-- What the controller and the harness's clients ask a node: who it is, whether it takes writes,
-- and how far its log goes.
function harness_role()
    local connected = 0
    for _, peer in pairs(box.info.replication) do
        local up, down = peer.upstream, peer.downstream
        if peer.id ~= box.info.id and (up and up.status == 'follow' or down and down.status == 'follow') then
            connected = connected + 1
        end
    end
    local vclock = {}
    for id, lsn in pairs(box.info.vclock) do
        vclock[tostring(id)] = lsn
    end
    return {
        name = name,
        id = box.info.id,
        ro = box.info.ro,
        status = box.info.status,
        vclock = vclock,
        peers_connected = connected,
    }
end

-- The controller's failover step on the chosen node: settle the former leader's unfinished
-- synchronous transactions (confirm those a quorum acknowledged, roll back the rest), then take
-- writes.
function harness_promote()
    box.ctl.clear_synchro_queue()
    box.cfg({ read_only = false })
    log.info('harness: promoted to leader')
    return harness_role()
end

function harness_demote(reason)
    if not box.info.ro then
        box.cfg({ read_only = true })
        log.info('harness: demoted: %s', reason or 'by the controller')
    end
    return harness_role()
end

-- A leader that hears fewer than a quorum of peers for `lease` seconds stops taking writes: the
-- controller will have promoted someone else on the other side by then.
fiber.create(function()
    fiber.name('harness-lease')
    local alone_since = nil
    while true do
        fiber.sleep(0.25)
        local ok, role = pcall(harness_role)
        if ok and not role.ro and role.peers_connected + 1 < quorum then
            alone_since = alone_since or fiber.clock()
            if fiber.clock() - alone_since >= lease then
                pcall(harness_demote, 'lease expired: fewer than a quorum of peers connected')
                alone_since = nil
            end
        else
            alone_since = nil
        end
    end
end)

-- set (its space is part of the schema)
function set_setup()
end

function set_add(element)
    box.space.set_elements:insert({ element })
    return element
end

function set_read()
    local out = {}
    for _, t in box.space.set_elements:pairs() do
        table.insert(out, t[1])
    end
    return array(out)
end

-- bank: the initial balances spread as workloads/bank.py spreads them
function bank_setup(params)
    if box.space.bank_accounts:len() > 0 then
        return
    end
    local accounts, total = params.accounts, params.total
    box.begin()
    for i, account in ipairs(accounts) do
        local balance = math.floor(total / #accounts)
        if i == 1 then
            balance = balance + total - balance * #accounts
        end
        box.space.bank_accounts:insert({ account, balance })
    end
    box.commit()
end

function bank_read()
    local out = {}
    for _, t in box.space.bank_accounts:pairs() do
        out[tostring(t[1])] = t[2]
    end
    return out
end

-- returns nil and a reason when the transfer is refused (a definite failure)
function bank_transfer(transfer)
    local src, dst, amount = transfer['from'], transfer['to'], transfer['amount']
    box.begin()
    local row = box.space.bank_accounts:get(src)
    if row == nil or row[2] < amount then
        box.rollback()
        return nil, 'insufficient funds in account ' .. src
    end
    box.space.bank_accounts:update(src, { { '-', 2, amount } })
    box.space.bank_accounts:update(dst, { { '+', 2, amount } })
    box.commit()
    return transfer
end

function append_setup()
end

-- append: a transaction of [f, key, value] micro-operations, f 'r' or 'append'
function append_txn(mops)
    local done = {}
    box.begin()
    for i, mop in ipairs(mops) do
        local f, k, v = mop[1], mop[2], mop[3]
        local row = box.space.append_lists:get(k)
        local vals = {}
        for _, x in ipairs(row and row[2] or {}) do
            table.insert(vals, x)
        end
        if f == 'r' then
            done[i] = array({ 'r', k, array(vals) })
        else
            table.insert(vals, v)
            box.space.append_lists:replace({ k, vals })
            done[i] = array({ 'append', k, v })
        end
    end
    box.commit()
    return array(done)
end

log.info('harness: %s up (%s)', name, box.info.ro and 'read-only' or 'writable')
