--[[
  The tenants with jobs in a partition's index:status (read only), for an
  admin's walk over every tenant: a skip-scan, one seek per tenant.

  Input:
    KEYS[1]  index:status (members "<tenant>|...", includes/index.lua)

  Output:
    {tenant, ...}  in the members' order

  Cost: O(tenants x log N).
  Transitions: none (read only).
]]
local tenants = {}
local from = '-'
while true do
  local got = redis.call('ZRANGEBYLEX', KEYS[1], from, '+', 'LIMIT', 0, 1)
  if #got == 0 then
    return tenants
  end
  local tenant = string.match(got[1], '^([^|]*)|')
  tenants[#tenants + 1] = tenant
  -- past every member of this tenant: '~' is above every status and kind code
  from = '(' .. tenant .. '|~'
end
