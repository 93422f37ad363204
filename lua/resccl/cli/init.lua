--- The resccl command line: main parses the arguments (resccl.cli.args) and
--- runs one command, each in its module of resccl.cli.
local resccl = require "resccl"
local args = require "resccl.cli.args"

local M = {}

-- The module of each command.
local COMMANDS = {
  compile = "compile", verify = "compile", run = "run", sim = "sim", import = "import", export = "export",
  bench = "bench",
}

function M.help()
  io.write(args.usage())
  return 0
end

-- The command, its arguments checked first; returns the exit code.
local function command(argv)
  local cmd = argv[1]
  if cmd == nil then io.stderr:write(args.usage()) return 2 end
  if cmd == "--version" or cmd == "version" then
    print("resccl " .. resccl.version)
    return 0
  end
  if cmd == "help" or cmd == "--help" or cmd == "-h" then return M.help() end
  if not (COMMANDS[cmd] or cmd == "repl") then return args.usage_error(("unknown command '%s'"):format(cmd)) end
  for i = 2, #argv do
    if argv[i] == "--help" or argv[i] == "-h" then
      io.write(cmd == "repl" and args.usage() or args.usage_for(cmd))
      return 0
    end
  end
  if cmd == "repl" then return args.usage_error("'repl' takes no arguments") end -- main.c runs a bare `resccl repl`
  local ok, o = pcall(args.parse, argv)
  if not ok then return args.usage_error(o) end
  local limits_ok, err = pcall(resccl.limits) -- RESCCL_BUDGET, RESCCL_MEMORY: blamed here, not on the script
  if not limits_ok then return args.usage_error(err) end
  if not o.file then return args.usage_error(("'%s' needs a FILE"):format(cmd)) end
  if cmd == "export" and not o.msccl_xml then return args.usage_error("export needs --msccl-xml OUT.xml") end
  if cmd == "sim" and o.channels and not o.baseline then
    return args.usage_error("--channels is the baseline's (with --baseline); channels=K runs ours on K channels")
  end
  local clash = args.overwrites(o)
  if clash then
    io.stderr:write("resccl: ", clash, "\n")
    return 2
  end
  o.argv0 = argv[0]
  return require("resccl.cli." .. COMMANDS[cmd])[cmd](o)
end

--- Entry point from main.c: argv[1..] are the arguments and argv[0] how resccl
--- was run (bench looks for resccl-bench beside it); returns the exit code.
--- With --json a failure also prints {"error": {"code": N, "message": M}} on
--- standard output, so that a tool reading it gets something.
function M.main(argv)
  local json = false
  for i = 2, #argv do json = json or argv[i] == "--json" end
  if not json then return command(argv) end
  args.last_usage = nil
  local ok, code = pcall(command, argv)
  local msg = not ok and tostring(code) or code == 2 and args.last_usage
  if not ok then
    code = msg:find "not enough memory" and 4 or 1
    io.stderr:write("resccl: ", msg, "\n")
  end
  if msg then io.write(require("cjson").encode { error = { code = code, message = msg } }, "\n") end
  return code
end

return M
