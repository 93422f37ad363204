# Sourced by the GPU scripts (tools/gpu/gpu-*.sh): where the machine has no Lua,
# the Debian liblua5.4 debs carried in .deps/debs are unpacked to /opt/lua
# (`apt-get download liblua5.4-0 liblua5.4-dev`), and the compiler, the
# loader and Lua are pointed there; $prefix is then CMake's arguments for it.
if [ -d .deps/debs ] && [ ! -f /usr/include/lua5.4/lua.h ] && [ ! -d /opt/lua/usr ]; then
  for f in .deps/debs/*.deb; do dpkg -x "$f" /opt/lua; done
fi
if [ -d /opt/lua/usr/lib/x86_64-linux-gnu ]; then
  L=/opt/lua/usr
  export CPATH=$L/include/lua5.4:$L/include/x86_64-linux-gnu
  export LIBRARY_PATH=$L/lib/x86_64-linux-gnu LD_LIBRARY_PATH=$L/lib/x86_64-linux-gnu
  export LUA_CPATH="$L/lib/x86_64-linux-gnu/lua/5.4/?.so;;"
  prefix="-DCMAKE_PREFIX_PATH=$L -DLUA_INCLUDE_DIR=$L/include/lua5.4 -DLUA_LIBRARY=$L/lib/x86_64-linux-gnu/liblua5.4.so"
fi
