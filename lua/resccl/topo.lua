--- Topologies: the presets' numbers and where they come from, custom
--- topologies from a Lua table, and topology files.
--
-- The numbers live in src/topo.c (one row per model); this page is their
-- documentation. `resccl.topo.params("a100:2x4")` shows them. Bandwidths are
-- GB/s per direction *as SM-driven transfers see them*, latencies and alpha
-- are microseconds. Every rate of 0 means "unlimited".
--
-- Fields (topo:params(), and what topo.custom{} takes):
--   nodes, gpn          nodes, GPUs per node
--   switched            true: a node's GPUs meet on an NVSwitch, each GPU
--                       has one port (tx, rx) shared by all its peers;
--                       false: every GPU pair has its own NVLink bundle
--   gpus_per_nic        GPUs sharing one NIC
--   intra_gbps, intra_lat_us   a switch port or NVLink bundle
--   nic_gbps, nic_lat_us       a NIC, each direction (the network behind the
--                       NICs is non-blocking: the paper's two-tier Clos)
--   alpha_us            startup of one primitive call that moves data
--   tb_gbps             what one TB copies per second (SM-bound)
--   tb_reduce_gbps      what one TB reduces and forwards per second
--   intra_sat, nic_sat  TBs that saturate the link (0: bandwidth / tb_gbps)
--   intra_gamma, nic_gamma  contention penalty: with z = TBs on a link / sat
--                       > 1 the link delivers bandwidth / (1 + gamma log2 z)
--   ce_gbps             what copy-engine copies (--ce) move over a link in
--                       all, per direction (0: intra_gbps); not bound by SMs
--   ce_local_gbps       what a copy engine copies inside one GPU
--   ce_lat_us           start of one copy (one piece) on its stream
--   ce_sync_us          each of the two barriers around a call's copies
--   read_gbps           what pulls (--pull) read over a link in all, per
--                       direction (0: intra_gbps)
--   tb_read_gbps        what one TB pulls per second (copying or reducing)
--   pull_sync_us        a pulling call's start handshake (the peer's kernel
--                       runs) and end handshake (every peer block done)
-- A link carrying several kinds of traffic delivers the least of their
-- ceilings: intra_gbps for TBs' stores, ce_gbps, read_gbps.
--
-- a100:NxG — the paper's testbed (Table 2): A100-80GB, NVSwitch with 300 GB/s
--   per GPU per direction (12 NVLink3 links), 4 x 200 Gb/s RoCE NICs per node,
--   2 GPUs per NIC, two-tier Clos.
--   intra_gbps 240: SM-driven NVLink3 moves ~20 GB/s per link with 128-byte
--     payloads, 12 x 20 = 240; nccl-tests reach 230-232 (nccl.md §2.2, §4.2:
--     nccl-tests#149, #175). 300 is the line rate, not reachable by SMs.
--   nic_gbps 22.5: 200 Gb/s = 25 GB/s line rate at ~90% RoCE efficiency. The
--     paper's own peaks need at least 20.7 (HM all-gather at 155 GB/s busbw on
--     2x8 and 107 on 4x8 are both bounded by 7.5 x and 5.17 x the NIC rate).
--   tb_gbps 33, tb_reduce_gbps 17: not measured on A100. H200 measurements
--     (below) scaled by the SM clock ratio 1.41 / 1.98 GHz.
--   nic_sat 2, nic_gamma 0.3: the paper's Fig. 4 (one 400 Gb/s NIC) peaks at
--     4 TBs and loses 24% at z = 2 and 31% at z = 4; a 200 Gb/s NIC needs half
--     the TBs. 1 / (1 + 0.3 log2 z) gives -23% at z = 2 and -38% at z = 4.
--   intra_gamma 0.1: from the H200 probe below (the loss on NVLink is small
--     and not monotonic in the TB count).
--   alpha_us 1, intra_lat_us 0.7, nic_lat_us 2.5: estimates; the paper says
--     inter-node latency is at least 2.5 x intra-node (§4.3).
--   ce_gbps 265: assumed, h200's share of the line rate (392 of 450) applied
--     to A100's 300. read_gbps 220: assumed, h200's reads against its
--     stores (337 / 370) applied to 240. ce_local_gbps 900: assumed, h200's
--     2100 scaled by HBM bandwidth (A100-80GB 2.0 TB/s, H200 4.8).
--     tb_read_gbps 28: h200's 39 scaled by the SM clock ratio, as tb_gbps.
--     ce_lat_us, ce_sync_us, pull_sync_us: h200's (assumed).
-- nvswitch:G — one node of G GPUs with the a100 numbers (the default for
--   `ranks=N`).
-- ndv4:N — Azure NDv4: N nodes of 8 A100 on NVSwitch, 8 x 200 Gb/s HDR
--   InfiniBand (one NIC per GPU); otherwise the a100 numbers.
-- dgx_h100:N — N DGX H100: 8 H100 SXM on NVSwitch (NVLink4, 18 links,
--   450 GB/s line rate; SM-driven ring traffic tops out at ~370, nccl.md
--   §4.2), 8 x 400 Gb/s ConnectX-7 (one per GPU), 45 GB/s each at ~90%.
--   nic_sat 4: Fig. 4's 400 Gb/s NIC peaks at 4 TBs. TB rates as h200.
--   Copy engine and pulls as h200 (the same NVLink4 x 18), but
--   ce_local_gbps 1450: h200's scaled by HBM bandwidth (H100 3.35 TB/s).
-- h200:2 — the measured server (nccl.md §4.3, §8): two H200 joined by NV18.
--   intra_gbps 370: SM-driven stores reach 354 with 8 TBs and 370 with 132
--     (§8.1); nccl-tests' ring plateau is 365-370. The copy engine's 397 is
--     not available to kernels.
--   tb_gbps 46: one TB of remote 16-byte stores moves 44-46 GB/s (§8.1).
--   tb_reduce_gbps 24: a fused reduce-and-push TB moves 24 (96 with 4 TBs,
--     §8.4).
--   intra_sat 8: 8 TBs saturate the link (§8.1, §8.4).
--   intra_gamma 0.1: 12 TBs deliver 314-335 instead of 351 (z = 1.5, -5 to
--     -11%), 16 deliver 333-344, 32 deliver 350 (§8.4).
--   alpha_us 1: not fitted yet; tools/paper/calibrate fits it from a bench CSV.
--   ce_gbps 392: the copy engine, both directions at once (397 one way;
--     §8.1); `resccl bench` reached 389.5-390.2 from 4 GiB (docs/journal/gpu-2026-11-30.md).
--   ce_local_gbps 2100: local device-to-device copies move 4.2 TB/s read +
--     write (§8.1).
--   ce_lat_us 1.5: four copies on one stream took 6 us a call in CUDA
--     graphs (docs/journal/gpu-2026-12-01.md, "A copy-engine call's fixed
--     cost").
--   ce_sync_us 12: fitted, with ce_lat_us, to the two-rank all-gather with
--     no block launched call by call: about 26 us a call in all, 19.0 GB/s
--     at 1 MiB, 301.7 at 64 MiB, 383.4 at 1 GiB (docs/journal/gpu-2026-11-30.md,
--     "Copy engines"); the host's queueing is in it (about 15 CUDA calls).
--   read_gbps 337: reads over NVLink top out there (tools/probes/probe-pull.cu,
--     docs/journal/gpu-2026-12-01.md "Pulls"); 16 and 32 pulling blocks reach it.
--   tb_read_gbps 39: 8 pulling blocks read and reduce 311 GB/s (probe).
--   pull_sync_us 2.6: the probe's two barriers at 1 MiB (10.7 against 8.1
--     us a call).
local core = require "resccl.core"

local M = {}

--- The presets' spellings, "a100:NxG, nvswitch:G, ... or ndv4:N" (src/topo.c).
---@return string
function M.presets() return core.topo_presets end

--- The numbers of a preset or of a Topo.
---@param t string|userdata
---@return table
function M.params(t)
  if type(t) == "string" then
    local ok, topo = pcall(core.topo, t) -- its error names no place in this file
    if not ok then error(topo, 0) end
    t = topo
  end
  if type(t) ~= "userdata" then error(("a preset name or a topology expected, got %s"):format(type(t)), 2) end
  return t:params()
end

--- A topology from a table: start from `base` (a preset name) when given,
--- then override any field. Errors name the bad field or the unreachable pair.
---@param def table
---@return userdata topo
function M.custom(def)
  if type(def) ~= "table" then error("topology: a table expected, got " .. type(def), 2) end
  local t = {}
  if def.base then
    local ok, p = pcall(M.params, def.base)
    if not ok then error("topology: base: " .. tostring(p), 2) end
    t = p
  end
  for k, v in pairs(def) do
    if k ~= "base" then t[k] = v end
  end
  t.model = nil
  t.name = def.name or (def.base and def.base .. "+custom") or "custom"
  local ok, topo = pcall(core.topo_custom, t)
  if not ok then error(topo, 2) end
  return topo
end

--- Load a topology file: a Lua script that returns a table for M.custom,
--- run as algorithm scripts are (resccl.run_file).
---@param path string
---@return userdata topo
function M.load(path)
  local ret = require("resccl").run_file(path)
  if type(ret) ~= "table" then error(path .. ": a topology file must return a table", 0) end
  -- its fields, copied raw (no metamethod of the script's runs outside its budget)
  local def = {}
  for k, v in next, ret do
    if type(k) ~= "string" or (type(v) ~= "number" and type(v) ~= "string" and type(v) ~= "boolean") then
      error(("%s: field %s: a name and a number, string or boolean expected"):format(path,
        type(k) == "string" and k or "of a " .. type(k) .. " key"), 0)
    end
    def[k] = v
  end
  def.name = def.name or path
  local ok2, topo = pcall(M.custom, def)
  if not ok2 then error(path .. ": " .. tostring(topo):gsub("^[^:]*:%d+: ", ""), 0) end
  return topo
end

return M
