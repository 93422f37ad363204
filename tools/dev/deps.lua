#!/usr/bin/env lua5.4
--[[
deps.lua — which source files call which, from their object files, and the
circles among them. A circle means two files that cannot be read, tested or
replaced apart; docs/design.md says why src/ has none.

  lua5.4 tools/dev/deps.lua [--edges] GROUP=OBJ;OBJ;... [GROUP=...]

Each GROUP (a library: core, bindings, runtime) is read on its own: a file
depends on the file of the same group that defines a symbol it uses. With
--edges every file -> file edge is printed with the symbols behind it.
Exit status 1 when a group has a circle.
]]

local function nm(obj)
  local defs, uses = {}, {}
  local p = assert(io.popen("nm -- '" .. obj:gsub("'", "'\\''") .. "' 2>/dev/null"))
  for line in p:lines() do
    local kind, sym = line:match "^%x*%s+(%a)%s+(%S+)$"
    if kind == "U" then uses[#uses + 1] = sym
    elseif kind and kind:match "[TDBR]" then defs[#defs + 1] = sym end
  end
  p:close()
  return defs, uses
end

-- build/CMakeFiles/x.dir/src/verify.c.o -> src/verify.c
local function source_of(obj)
  return obj:match "%.dir/(.+)%.o$" or obj
end

-- Tarjan's strongly connected components, in a stable order.
local function circles(nodes, out)
  local index, low, stack, on, n, found = {}, {}, {}, {}, 0, {}
  local function visit(v)
    n = n + 1
    index[v], low[v] = n, n
    stack[#stack + 1], on[v] = v, true
    for _, w in ipairs(out[v]) do
      if not index[w] then
        visit(w)
        low[v] = math.min(low[v], low[w])
      elseif on[w] then
        low[v] = math.min(low[v], index[w])
      end
    end
    if low[v] == index[v] then
      local c = {}
      repeat
        local w = table.remove(stack)
        on[w] = nil
        c[#c + 1] = w
      until w == v
      if #c > 1 then table.sort(c); found[#found + 1] = c end
    end
  end
  for _, v in ipairs(nodes) do if not index[v] then visit(v) end end
  return found
end

local function group(name, objs, edges)
  local owner, files, uses = {}, {}, {}
  for obj in objs:gmatch "[^;]+" do
    local f = source_of(obj)
    local d, u = nm(obj)
    files[#files + 1], uses[f] = f, u
    for _, s in ipairs(d) do owner[s] = owner[s] or f end
  end
  table.sort(files)
  local out, why = {}, {}
  for _, f in ipairs(files) do
    local to = {}
    for _, s in ipairs(uses[f]) do
      local g = owner[s]
      if g and g ~= f then
        if not to[g] then to[g] = {}; out[f] = out[f] or {}; table.insert(out[f], g) end
        table.insert(to[g], s)
      end
    end
    out[f] = out[f] or {}
    table.sort(out[f])
    why[f] = to
  end
  if edges then
    for _, f in ipairs(files) do
      for _, g in ipairs(out[f]) do
        table.sort(why[f][g])
        print(("%s: %s -> %s (%s)"):format(name, f, g, table.concat(why[f][g], " ")))
      end
    end
  end
  local found = circles(files, out)
  for _, c in ipairs(found) do
    print(("%s: circle: %s"):format(name, table.concat(c, " ")))
    for _, f in ipairs(c) do
      for _, g in ipairs(c) do
        if why[f][g] then print(("  %s -> %s (%s)"):format(f, g, table.concat(why[f][g], " "))) end
      end
    end
  end
  return #found
end

local edges, bad, seen = false, 0, 0
for _, a in ipairs(arg) do
  if a == "--edges" then edges = true
  else
    local name, objs = a:match "^([%w_]+)=(.*)$"
    if not name then
      io.stderr:write("deps.lua: ", a, ": GROUP=OBJ;OBJ;... expected\n")
      os.exit(2)
    end
    bad, seen = bad + group(name, objs, edges), seen + 1
  end
end
if seen == 0 then
  io.stderr:write "usage: deps.lua [--edges] GROUP=OBJ;OBJ;... [GROUP=...]\n"
  os.exit(2)
end
os.exit(bad == 0 and 0 or 1)
