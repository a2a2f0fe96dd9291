"""The stored value format and the Lua scripts that check versions, then write or delete.

A document is one Redis string, `<version> <envelope>`. The read script (the reads that are no
transaction: see `RedisStorage._read`) is one `MGET`, and where it saw no string at some key,
one `EXISTS` of the same keys: more keys than strings means a hash, list, ... that `MGET`
reports as missing too, and only then does a `TYPE` per such key say which. The write script
reads a version with `GETRANGE` without copying the document. A version is `max(previous + 1,
server time in microseconds)`, so it grows with every write and a key that is deleted and
created again never gets an old version back (see docs/redis.md). The script counts in decimal
text, since Lua's numbers (doubles) would round versions above 2**53.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from .layout import INDEX

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

_KEY_OF = f"""
-- A group's index is a sorted set (all scores 0) of the escaped rests of its keys but its own;
-- the Redis key of a member is the index's name without its suffix, then the member.
local function key_of(index, member)
  return string.sub(index, 1, {-len(INDEX) - 1}) .. member
end
"""
"""Lua shared by the scripts that read a group's index (see `layout`)."""

_INDEXED = """
-- Drop up to two members whose keys are gone (expired): a member is added no more often
-- than a key is created, so the index holds about as many stale members as live ones at most.
local function prune(index)
  for _, member in ipairs(redis.call('ZRANDMEMBER', index, 2)) do
    if redis.call('EXISTS', key_of(index, member)) == 0 then redis.call('ZREM', index, member) end
  end
end
-- Index a key just written with `ttl` (ms, '0' = none): the index lives as long as the
-- longest-lived key written to it, so it never expires before one of its keys.
local function indexed(index, member, ttl)
  if member == '' then return end
  local left = redis.call('PTTL', index) -- -2: no index yet, -1: it does not expire
  if redis.call('ZADD', index, 0, member) == 1 and left ~= -2 then prune(index) end
  if ttl == '0' then
    if left >= 0 then redis.call('PERSIST', index) end
  elseif left == -2 or (left >= 0 and left < tonumber(ttl)) then
    redis.call('PEXPIRE', index, ttl)
  end
end
"""
"""Lua shared by the scripts that keep each write group's index."""

WRITE = LuaScript(
    """#!lua
-- KEYS: the Redis keys of one slot group, then their groups' indexes (KEYS[n + i] for
-- KEYS[i]). ARGV[1]: '1' all or nothing, '0' per key; then per key its precondition ('*' =
-- always, '' = must not exist, else the version it must have), its TTL in ms ('0' = none;
-- 'check' = only check the precondition, write nothing), its envelope and its index member.
-- Reply per key: the new version, 0 = precondition failed, 1 = held but not written,
-- {type} = the key holds another Redis type (nothing is written over it).
"""
    + _KEY_OF
    + _INDEXED
    + """
local n = #KEYS / 2
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
for i = 1, n do
  local key, expected = KEYS[i], ARGV[4 * i - 2]
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
  for i = 1, n do
    if type(reply[i]) == 'string' then reply[i] = 1 end
  end
  return reply
end
for i = 1, n do
  local key, ttl = KEYS[i], ARGV[4 * i - 1]
  if type(reply[i]) == 'string' and ttl ~= 'check' then
    local value = reply[i] .. ' ' .. ARGV[4 * i]
    if ttl ~= '0' then
      redis.call('SET', key, value, 'PX', ttl)
    else
      redis.call('SET', key, value) -- a plain SET also drops an earlier TTL
    end
    indexed(KEYS[n + i], ARGV[4 * i + 1], ttl)
  end
end
return reply
"""
)
"""Conditional write of one slot group; each document is one SET (value and TTL together),
and its member in its group's index."""

DELETE = LuaScript(
    """#!lua
-- KEYS: the Redis keys of one slot group, then their groups' indexes (KEYS[n + i] for
-- KEYS[i]); ARGV[2i - 1]: '*' or the version KEYS[i] must have, ARGV[2i]: its index member.
-- Reply: the positions (1-based) whose version did not match; those keys are kept.
local n = #KEYS / 2
local failed = {}
for i = 1, n do
  local key, keep = KEYS[i], false
  if ARGV[2 * i - 1] ~= '*' then
    local head = redis.pcall('GETRANGE', key, 0, 20)
    keep = type(head) ~= 'string' or string.match(head, '^(%d+) ') ~= ARGV[2 * i - 1]
  end
  if keep then
    failed[#failed + 1] = i
  else
    redis.call('UNLINK', key)
    if ARGV[2 * i] ~= '' then redis.call('ZREM', KEYS[n + i], ARGV[2 * i]) end
  end
end
return failed
"""
)
"""Conditional delete of one slot group, key by key, with their index members."""

LIST = LuaScript(
    """#!lua
-- KEYS[1]: a group's index; ARGV: the range's lower and upper bound (ZRANGEBYLEX syntax) and
-- how many members to look at. Reply: how many were looked at, the last of them, then the
-- members whose keys exist (the others, expired, leave the index).
"""
    + _KEY_OF
    + """
local index = KEYS[1]
local members = redis.call('ZRANGEBYLEX', index, ARGV[1], ARGV[2], 'LIMIT', 0, ARGV[3])
local reply = {#members, members[#members] or ''}
for _, member in ipairs(members) do
  if redis.call('EXISTS', key_of(index, member)) == 1 then
    reply[#reply + 1] = member
  else
    redis.call('ZREM', index, member)
  end
end
return reply
"""
)
"""One page of a group's index under a prefix: the keys that exist, the expired ones dropped."""
