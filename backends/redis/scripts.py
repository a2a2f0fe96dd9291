"""The stored value format and the Lua scripts that check versions, then write or delete.

A document is one Redis string, `<version> <envelope>`. The read script is one `MGET`, and
where it saw no string at some key, one `EXISTS` of the same keys: more keys than strings
means a hash, list, ... that `MGET` reports as missing too, and only then does a `TYPE` per
such key say which. The write script reads a version with `GETRANGE` without copying the
document. A version is `max(previous + 1, server time in microseconds)`, so it grows with
every write and a key that is deleted and created again never gets an old version back (see
docs/redis.md). The script counts in decimal text, since Lua's numbers (doubles) would round
versions above 2**53.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

_STORED = re.compile(rb"([0-9]{1,20}) ", re.ASCII)


def stored_value(version: str, envelope: bytes) -> bytes:
    """The Redis value holding `envelope` at `version` (as the write script builds it)."""
    return version.encode() + b" " + envelope


def split_stored(value: bytes | str) -> tuple[str, bytes] | None:
    """(version, envelope) of a stored value; None if agent-state did not write it."""
    raw = value.encode() if isinstance(value, str) else value
    match = _STORED.match(raw)
    return (match.group(1).decode(), raw[match.end() :]) if match else None


@dataclass(frozen=True)
class LuaScript:
    """A script's source and the SHA1 that EVALSHA names it by."""

    source: str
    sha: str = field(init=False)
    call: tuple[str, bytes] = field(init=False)
    """`EVALSHA <sha>`, the sha as the bytes redis-py sends, so no call encodes it again (the
    command's name stays a str: redis-py looks its handling up by name)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())
        object.__setattr__(self, "call", ("EVALSHA", self.sha.encode()))


READ = LuaScript(
    """#!lua flags=no-writes
-- KEYS: the Redis keys of one slot group. Reply per key: its value, nil if there is no key,
-- or {type} for a key of another type (MGET reports those as nil too: EXISTS counts them).
local reply = {}
for first = 1, #KEYS, 1000 do -- unpack takes a bounded number of values
  local last = math.min(first + 999, #KEYS)
  local values, strings = redis.call('MGET', unpack(KEYS, first, last)), 0
  for offset, value in ipairs(values) do
    reply[first + offset - 1] = value
    if value then strings = strings + 1 end
  end
  if strings <= last - first and redis.call('EXISTS', unpack(KEYS, first, last)) > strings then
    for i = first, last do
      if not reply[i] then
        local kind = redis.call('TYPE', KEYS[i])['ok']
        if kind ~= 'none' then reply[i] = {kind} end
      end
    end
  end
end
return reply
"""
)
"""Read of one slot group in one call: an `MGET`; where it saw no string at some key, an `EXISTS`
that tells whether one holds another type; only then a `TYPE` per such key names the type."""

WRITE = LuaScript(
    """#!lua
-- KEYS: the Redis keys of one slot group. ARGV[1]: '1' all or nothing, '0' per key;
-- then per key its precondition ('*' = always, '' = must not exist, else the version it
-- must have), its TTL in ms ('0' = none; 'check' = only check the precondition, write
-- nothing) and its envelope.
-- Reply per key: the new version, 0 = precondition failed, 1 = held but not written,
-- {type} = the key holds another Redis type (nothing is written over it).
local atomic = ARGV[1] == '1'
local clock = redis.call('TIME')
-- Versions are decimal text: Lua numbers are doubles, exact only up to 2^53.
local now = clock[1] .. string.format('%06d', tonumber(clock[2]))
local function after(version) -- max(version + 1, now)
  version = string.match(version, '^0*(%d+)$')
  if #version < #now or (#version == #now and version < now) then return now end
  local head, nines = string.match(version, '^(%d-)(9*)$')
  local tail = string.rep('0', #nines)
  if head == '' then return '1' .. tail end
  return string.sub(head, 1, -2) .. string.char(string.byte(head, -1) + 1) .. tail
end
local reply, failed = {}, false
for i, key in ipairs(KEYS) do
  local expected = ARGV[3 * i - 1]
  local head = redis.pcall('GETRANGE', key, 0, 20)
  if type(head) ~= 'string' then -- WRONGTYPE: a hash, list, ... is never replaced
    reply[i] = {redis.call('TYPE', key)['ok']}
    failed = true
  else
    local version = string.match(head, '^(%d+) ')
    local exists = version ~= nil or head ~= '' or redis.call('EXISTS', key) == 1
    local holds
    if expected == '*' then holds = true
    elseif expected == '' then holds = not exists
    else holds = version == expected end
    if holds then
      reply[i] = version and after(version) or now
    else
      reply[i] = 0
      failed = true
    end
  end
end
if atomic and failed then
  for i = 1, #KEYS do
    if type(reply[i]) == 'string' then reply[i] = 1 end
  end
  return reply
end
for i, key in ipairs(KEYS) do
  local ttl = ARGV[3 * i]
  if type(reply[i]) == 'string' and ttl ~= 'check' then
    local value = reply[i] .. ' ' .. ARGV[3 * i + 1]
    if ttl ~= '0' then
      redis.call('SET', key, value, 'PX', ttl)
    else
      redis.call('SET', key, value) -- a plain SET also drops an earlier TTL
    end
  end
end
return reply
"""
)
"""Conditional write of one slot group; each document is one SET (value and TTL together)."""

DELETE = LuaScript(
    """#!lua
-- KEYS: the Redis keys of one slot group; ARGV[i]: '*' or the version KEYS[i] must have.
-- Reply: the positions (1-based) whose version did not match; those keys are kept.
local failed = {}
for i, key in ipairs(KEYS) do
  local keep = false
  if ARGV[i] ~= '*' then
    local head = redis.pcall('GETRANGE', key, 0, 20)
    keep = type(head) ~= 'string' or string.match(head, '^(%d+) ') ~= ARGV[i]
  end
  if keep then failed[#failed + 1] = i else redis.call('UNLINK', key) end
end
return failed
"""
)
"""Conditional delete of one slot group, key by key."""
