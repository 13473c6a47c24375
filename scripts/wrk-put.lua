-- wrk script: PUT a 100-byte value to /v1/keys/k:<n> for n in 1..1000000
-- (random keys, like redis-benchmark -r 1000000 -d 100).
--   wrk -t2 -c50 -d10s -s scripts/wrk-put.lua http://127.0.0.1:7379
-- Each thread seeds its own generator: unseeded, every thread (and every
-- run) would draw the same key sequence.
wrk.method = "PUT"
wrk.body = string.rep("x", 100)
wrk.headers["Content-Type"] = "application/octet-stream"

local threads = 0
function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end

function init(args)
  math.randomseed(os.time() * 1000 + id)
end

request = function()
  local path = "/v1/keys/k:" .. math.random(1, 1000000)
  return wrk.format(nil, path)
end
