#!/bin/sh
# On a GPU machine: NVIDIA's nccl-tests on NCCL alone, then with libresccl-nccl.so
# preloaded (resccl's default ring plans for as many ranks as GPUs): all_reduce_perf,
# all_gather_perf and reduce_scatter_perf from 1 MiB to 1 GiB (-f 2), one process per
# GPU under mpirun (-g 1), everything on loopback. Saves each table, prints the
# out-of-place and in-place busbw of both side by side and how many calls each
# library ran (the shim's RESCCL_DEBUG=INFO lines). Fails when a run fails or
# nccl-tests counts a wrong result (#wrong, its own check of every size).
#   tools/gpu/nccl-tests.sh [NCCL_TESTS_SRC] [OUTDIR]
# NCCL_TESTS_SRC is .deps/nccl-tests by default, carried with the tree (the machine has
# no internet): `git archive HEAD` of github.com/NVIDIA/nccl-tests untarred there
# (checked with 2.19.6, commit a0b82b2). Built into build-gpu/nccl-tests/mpi$MPI.
# Env: MPI=1 (0: no MPI, one process drives every GPU, -g NGPU, the communicators the
# shim has long taken), MPI_HOME (else from `mpicc --showme`), NCCL_HOME (a folder with
# include/nccl.h and lib/libnccl.so*; else CUDA_HOME's, the system's or the Python
# package nvidia-nccl's), CUDA_HOME (/usr/local/cuda), NVCC_GENCODE (sm_90),
# NGPU (every GPU), MINB, MAXB (1M, 1G), NT_ARGS (more nccl-tests arguments, e.g. -n 50),
# RESCCL_DTYPES (f32, nccl-tests' default -d float), BUILD_ONLY=1 (build nccl-tests, stop),
# MPIRUN_ARGS (MPI's transports, `--mca pml ob1 --mca btl self,vader,tcp`: shared memory
# and TCP over lo alone, whatever else the MPI build has).
# NCCL allows one rank per GPU: on one GPU that is mpirun -np 1, which no resccl plan
# fits (none has one rank), so every call stays NCCL's; it still runs, as a check.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
src=$(cd "${1:-$root/.deps/nccl-tests}" 2>/dev/null && pwd) ||
  { echo "nccl-tests.sh: no nccl-tests source at ${1:-$root/.deps/nccl-tests} (see tools/README.md)"; exit 1; }
out=${2:-${OUT:-/tmp/nccl-tests}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$root" || exit 1
mpi=${MPI:-1}
cuda=${CUDA_HOME:-/usr/local/cuda}
nt=build-gpu/nccl-tests
mkdir -p "$nt"
nt=$(cd "$nt" && pwd)

# NCCL's header and library from one place, linked into $nt/nccl-home as nccl-tests'
# Makefile wants them ($NCCL_HOME/include, $NCCL_HOME/lib); the library's folder also
# goes first in LD_LIBRARY_PATH, so that the tests and the shim load that NCCL.
nccl_pair() { # INCLUDE_DIR LIB_DIR: both hold NCCL
  [ -f "$1/nccl.h" ] && ls "$2"/libnccl.so* >/dev/null 2>&1 && inc=$1 lib=$2
}
inc='' lib=''
if [ -n "${NCCL_HOME:-}" ]; then
  nccl_pair "$NCCL_HOME/include" "$NCCL_HOME/lib" || nccl_pair "$NCCL_HOME/include" "$NCCL_HOME/lib64"
else
  for d in "$cuda/lib64" "$cuda/lib" "$cuda/targets/x86_64-linux/lib"; do
    [ -z "$inc" ] && nccl_pair "$cuda/include" "$d"
  done
  [ -z "$inc" ] && nccl_pair /usr/include /usr/lib/x86_64-linux-gnu
  if [ -z "$inc" ] && py=$(python3 -c 'import nvidia.nccl, sys; sys.stdout.write(list(nvidia.nccl.__path__)[0])' 2>/dev/null); then
    nccl_pair "$py/include" "$py/lib"
  fi
fi
[ -n "$inc" ] || { echo "nccl-tests.sh: no NCCL (nccl.h and libnccl.so) found; set NCCL_HOME"; exit 1; }
so=$(ls "$lib"/libnccl.so.2* "$lib"/libnccl.so 2>/dev/null | head -1)
rm -rf "$nt/nccl-home"
mkdir -p "$nt/nccl-home/lib"
ln -s "$inc" "$nt/nccl-home/include"
ln -s "$so" "$nt/nccl-home/lib/libnccl.so" # where only libnccl.so.2 is (no -dev package)
ln -s "$so" "$nt/nccl-home/lib/libnccl.so.2"
export LD_LIBRARY_PATH="$lib:$cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "NCCL: $inc/nccl.h ($(sed -n 's/^#define NCCL_VERSION_CODE //p' "$inc/nccl.h")), $so"

# MPI: mpicc names its folders; linked into $nt/mpi-home likewise.
mpi_home=
if [ "$mpi" = 1 ]; then
  command -v mpirun >/dev/null || { echo "nccl-tests.sh: no mpirun (MPI=0 runs without MPI)"; exit 1; }
  if [ -n "${MPI_HOME:-}" ]; then
    mpi_home=$MPI_HOME
  else
    minc='' mlib=''
    for d in $(mpicc --showme:incdirs 2>/dev/null); do [ -z "$minc" ] && [ -f "$d/mpi.h" ] && minc=$d; done
    for d in $(mpicc --showme:libdirs 2>/dev/null); do [ -z "$mlib" ] && ls "$d"/libmpi.so* >/dev/null 2>&1 && mlib=$d; done
    [ -n "$minc" ] && [ -n "$mlib" ] || {
      echo "nccl-tests.sh: mpicc names no mpi.h and libmpi.so; set MPI_HOME"
      exit 1
    }
    mpi_home=$nt/mpi-home
    rm -rf "$mpi_home"
    mkdir -p "$mpi_home"
    ln -s "$minc" "$mpi_home/include"
    ln -s "$mlib" "$mpi_home/lib"
  fi
  echo "MPI: $mpi_home ($(mpirun --version 2>&1 | head -1))"
fi

# nccl-tests, out of its source tree (which may be read-only), one build per MPI setting
make -C "$src" MPI="$mpi" ${mpi_home:+MPI_HOME="$mpi_home"} CUDA_HOME="$cuda" NCCL_HOME="$nt/nccl-home" \
  NVCC_GENCODE="${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}" BUILDDIR="$nt/mpi$mpi" -j "$(nproc)" \
  >"$out/nccl-tests-build.log" 2>&1 || { tail -30 "$out/nccl-tests-build.log"; echo "nccl-tests.sh: nccl-tests did not build"; exit 1; }
echo "nccl-tests $(sed -n 's/^#define NCCL_TESTS_VERSION "\(.*\)"/\1/p' "$src/src/common.h"): built in $nt/mpi$mpi"
[ "${BUILD_ONLY:-0}" = 1 ] && exit 0

# resccl and the shim, as tools/gpu/gpu-check.sh builds them
. tools/gpu/lua-env.sh
# shellcheck disable=SC2086 # prefix: several CMake arguments
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 ${prefix:-} >"$out/build.log" 2>&1 &&
  cmake --build build-gpu -j "$(nproc)" >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
shim=$root/build-gpu/libresccl-nccl.so
[ -f "$shim" ] || { echo "nccl-tests.sh: build-gpu/libresccl-nccl.so was not built (no CUDA, or nccl.h before 2.14)"; exit 1; }

ngpu=${NGPU:-$(nvidia-smi -L | grep -c GPU)}
[ "$ngpu" -ge 1 ] || { echo "nccl-tests.sh: no GPU"; exit 1; }
if [ "$ngpu" = 1 ]; then
  echo "one GPU: NCCL allows one rank per GPU, so one process; no resccl plan has one rank,"
  echo "so every call stays NCCL's; run as a check of the recipe"
fi
export RESCCL_SOCKET_IFNAME=lo RESCCL_DEBUG=INFO RESCCL_CACHE="$out/cache"
export RESCCL_DTYPES="${RESCCL_DTYPES:-f32}"
export NCCL_NVLS_ENABLE=0 NCCL_SOCKET_IFNAME=lo
unset LD_PRELOAD

# launch PRELOAD(0|1) PROGRAM ARGS...: one process per GPU under mpirun, or one for all
launch() {
  pre=$1
  shift
  if [ "$mpi" = 1 ]; then
    if [ "$pre" = 1 ]; then set -- -x LD_PRELOAD="$shim" "$@"; fi
    # shellcheck disable=SC2086 # MPIRUN_ARGS: several arguments
    mpirun -np "$ngpu" --allow-run-as-root --bind-to none --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
      ${MPIRUN_ARGS:---mca pml ob1 --mca btl self,vader,tcp} -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE \
      -x NCCL_SOCKET_IFNAME -x RESCCL_SOCKET_IFNAME -x RESCCL_DEBUG -x RESCCL_CACHE \
      -x RESCCL_DTYPES "$@" -g 1
  elif [ "$pre" = 1 ]; then
    LD_PRELOAD=$shim "$@" -g "$ngpu"
  else
    "$@" -g "$ngpu"
  fi
}
fail=0
for t in all_reduce all_gather reduce_scatter; do
  for lib in nccl resccl; do
    f=$out/$t-$lib.txt
    pre=$([ $lib = resccl ] && echo 1 || echo 0)
    # shellcheck disable=SC2086 # NT_ARGS: several arguments
    launch "$pre" "$nt/mpi$mpi/${t}_perf" -b "${MINB:-1M}" -e "${MAXB:-1G}" -f 2 ${NT_ARGS:-} >"$f" 2>&1
    rc=$?
    # data rows: size count type redop root, then time algbw busbw #wrong out of place and in place
    rows=$(grep -cE '^ +[0-9]+ +[0-9]+ ' "$f")
    wrong=$(awk '/^ +[0-9]+ +[0-9]+ / && NF >= 13 && (($9 != "N/A" && $9 + 0 != 0) || ($13 != "N/A" && $13 + 0 != 0))' "$f" | wc -l)
    if [ $rc != 0 ] || [ "$rows" = 0 ] || [ "$wrong" != 0 ] || grep -q 'Out of bounds values : [1-9]' "$f"; then
      echo "$t on $lib: FAILED (exit $rc, $rows sizes, $wrong with #wrong), see $f"
      tail -15 "$f"
      fail=1
    fi
  done
  echo "== $t on $ngpu GPU(s), $([ "$mpi" = 1 ] && echo "a process each" || echo "one process"): busbw GB/s"
  printf '%12s %11s %11s %7s %11s %11s %7s\n' bytes nccl-oop resccl-oop ratio nccl-ip resccl-ip ratio
  awk '/^ +[0-9]+ +[0-9]+ / && NF >= 13 { print $1, $8, $12 }' "$out/$t-nccl.txt" >"$out/$t-nccl.busbw"
  awk '/^ +[0-9]+ +[0-9]+ / && NF >= 13 { print $1, $8, $12 }' "$out/$t-resccl.txt" >"$out/$t-resccl.busbw"
  awk 'NR == FNR { o[$1] = $2; i[$1] = $3; next }
       { r1 = (o[$1] > 0) ? sprintf("%.2f", $2 / o[$1]) : "-"; r2 = (i[$1] > 0) ? sprintf("%.2f", $3 / i[$1]) : "-"
         printf "%12s %11s %11s %7s %11s %11s %7s\n", $1, o[$1], $2, r1, i[$1], $3, r2 }' \
    "$out/$t-nccl.busbw" "$out/$t-resccl.busbw"
  # the shim's count of calls per library, every rank's line summed
  grep -h 'resccl-nccl: rank [0-9]*: [0-9]* calls to resccl' "$out/$t-resccl.txt" |
    awk -v t="$t" '{ r += $4; n += $(NF - 2); k++ }
      END { if (k) printf "%s: %d calls to resccl, %d to NCCL (%d ranks)\n", t, r, n, k;
            else printf "%s: no count from the shim (not preloaded, or its communicators not taken)\n", t }'
  grep -h 'resccl-nccl: .*\(not used\|NCCL runs every call\)' "$out/$t-resccl.txt" | sort -u | head -3
done
echo "nccl-tests.sh: $([ $fail = 0 ] && echo "every size checked correct (#wrong 0)" || echo FAILURES), logs in $out"
exit $fail
