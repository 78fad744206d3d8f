#!/usr/bin/env bash
# Installs the built tree into a temporary prefix and builds a small program
# outside the repository against it, with pkg-config and with CMake's
# find_package, against both the shared and the static library, with CUDA
# hidden from the compiler, the linker and CMake (docs/install.md).
# Checks that nothing installed asks for CUDA (the cuda backend loads the
# runtime with dlopen), that a program linked to the shared library runs
# with an rpath and without one only through LD_LIBRARY_PATH, and that the
# installed `chameleon` command runs from its prefix with neither.
set -euo pipefail
src=$1 build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install test: $*" >&2; exit 1; }
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null

# No CUDA on the way: no toolkit directory on PATH, no compiler or linker
# search paths from the environment, no CUDA_PATH for CMake to follow.
PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v -i cuda | paste -sd: -)
unset CPATH C_INCLUDE_PATH LIBRARY_PATH CUDA_PATH CUDA_HOME CUDAToolkit_ROOT LD_LIBRARY_PATH

mkdir -p "$tmp/app"
cat > "$tmp/app/main.c" <<'C'
#include <chameleon/chameleon.h>
#include <stdio.h>
#include <string.h>
/* "main cuda": opens the cuda backend and prints the outcome; it must
 * either open or fail cleanly with a message, never fail to link or start. */
static int probe_cuda(void)
{
    cham_device_config_t c = cham_device_config_default();
    c.backend = "cuda";
    cham_device_t *dev;
    cham_status_t st = cham_device_open(&c, &dev);
    if (st == CHAM_OK) {
        printf("cuda: opened\n");
        cham_device_close(dev);
        return 0;
    }
    printf("cuda: %s: %s\n", cham_status_string(st), cham_device_last_error(NULL));
    return st == CHAM_ERR_DEVICE_UNAVAILABLE && dev == NULL ? 0 : 1;
}
int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "cuda") == 0)
        return probe_cuda();
    cham_device_t *dev;
    if (cham_device_open(NULL, &dev) != CHAM_OK) {
        fprintf(stderr, "open failed: %s\n", cham_device_last_error(NULL));
        return 1;
    }
    cham_allocator_config_t c = {.kind = CHAM_MEM_DEVICE};
    cham_allocator_t *a;
    cham_stream_t *s;
    cham_block_t *b;
    if (cham_allocator_new(dev, &c, &a) != CHAM_OK || cham_stream_new(dev, "s", &s) != CHAM_OK ||
        cham_block_alloc(a, 1 << 20, s, &b) != CHAM_OK)
        return 1;
    cham_block_free(a, b);
    cham_allocator_free(a);
    cham_stream_free(s);
    cham_device_close(dev);
    printf("outside program ok with chameleon %s\n", cham_version());
    return 0;
}
C
pc=$(find "$tmp/prefix" -name chameleon.pc | head -1)
[ -n "$pc" ] || fail "no chameleon.pc installed"
export PKG_CONFIG_PATH=$(dirname "$pc")
cc=${CC:-cc}
libdir=$(pkg-config --variable=libdir chameleon)
cmakedir="$libdir/cmake/chameleon"
[ -f "$cmakedir/chameleonConfig.cmake" ] || fail "no chameleonConfig.cmake in $cmakedir"

# Nothing installed asks for CUDA: the link lines, the CMake package, the
# shared library's dependencies and the archive's undefined symbols.
for flags in "--libs" "--libs --static" "--cflags"; do
  out=$(pkg-config $flags chameleon)
  if printf '%s' "$out" | grep -qi cuda; then
    fail "pkg-config $flags chameleon mentions CUDA: $out"
  fi
done
if grep -il cuda "$pc" "$cmakedir"/*.cmake; then
  fail "the files above, installed for consumers, mention CUDA"
fi
if readelf -d "$libdir/libchameleon.so" | grep NEEDED | grep -i cud; then
  fail "libchameleon.so needs a CUDA library"
fi
if nm -u "$libdir/libchameleon.a" | grep -E ' U _*cu[A-Z]|U _*cuda'; then
  fail "libchameleon.a leaves CUDA symbols to the linker"
fi
if nm -D -u "$libdir/libchameleon.so" | grep -E ' U _*cu[A-Z]| U _*cuda'; then
  fail "libchameleon.so leaves CUDA symbols to the dynamic linker"
fi

# A clean "cuda" failure from each program below: the runtime named here
# does not exist, whatever this machine has.
nocuda=(env CHAM_CUDA_RUNTIME=/nonexistent/libcudart.so.13)
expect_cuda_unavailable() {
  local out
  out=$("${nocuda[@]}" "$@" cuda) || fail "$* cuda: exit status $?: $out"
  case $out in
    *"could not load the CUDA runtime named by CHAM_CUDA_RUNTIME=/nonexistent/libcudart.so.13"*) ;;
    *) fail "$* cuda: unexpected output: $out" ;;
  esac
}

# pkg-config, shared library, with an rpath: runs with no LD_LIBRARY_PATH
$cc -std=c11 -Wall -Wextra -Wpedantic -Werror "$tmp/app/main.c" -o "$tmp/app/shared" \
    $(pkg-config --cflags --libs chameleon) -Wl,-rpath,"$libdir"
"$tmp/app/shared"
expect_cuda_unavailable "$tmp/app/shared"
# ... and without one it needs LD_LIBRARY_PATH (docs/install.md): it does not
# start alone, unless this machine has a libchameleon of its own installed
$cc -std=c11 -Wall -Wextra -Wpedantic -Werror "$tmp/app/main.c" -o "$tmp/app/shared_norpath" \
    $(pkg-config --cflags --libs chameleon)
if ldconfig -p 2>/dev/null | grep -q 'libchameleon\.so'; then
  echo "install test: a libchameleon is in the system's library cache; not checking" \
       "that the program without an rpath fails to start"
elif err=$("$tmp/app/shared_norpath" 2>&1); then
  fail "a program linked without an rpath started without LD_LIBRARY_PATH: $err"
else
  case $err in
    *libchameleon.so*) ;;
    *) fail "without an rpath, expected the loader to miss libchameleon.so, got: $err" ;;
  esac
fi
LD_LIBRARY_PATH="$libdir" "$tmp/app/shared_norpath"
# pkg-config, static library: the archive plus its private dependencies
private=()
for f in $(pkg-config --static --libs chameleon); do
  [ "$f" = -lchameleon ] || private+=("$f")
done
$cc -std=c11 -Wall -Wextra -Wpedantic -Werror "$tmp/app/main.c" -o "$tmp/app/static" \
    $(pkg-config --cflags chameleon) "$libdir/libchameleon.a" "${private[@]}"
if readelf -d "$tmp/app/static" | grep NEEDED | grep -E -i 'chameleon|cud'; then
  fail "the statically linked program needs the libraries above"
fi
"$tmp/app/static"
expect_cuda_unavailable "$tmp/app/static"
# CMake find_package: both targets, with CUDA's package disabled so that a
# find_dependency(CUDAToolkit) in our config would fail the configure
cat > "$tmp/app/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(outside C)
find_package(chameleon 0.1 REQUIRED)
add_executable(app_shared main.c)
target_link_libraries(app_shared PRIVATE chameleon::chameleon)
add_executable(app_static main.c)
target_link_libraries(app_static PRIVATE chameleon::chameleon_static)
CM
cmake -S "$tmp/app" -B "$tmp/app/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" --no-warn-unused-cli \
      -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON >/dev/null
cmake --build "$tmp/app/build" >/dev/null
# CMake gives the build tree an rpath to the imported library's directory
"$tmp/app/build/app_shared"
"$tmp/app/build/app_static"
expect_cuda_unavailable "$tmp/app/build/app_shared"
expect_cuda_unavailable "$tmp/app/build/app_static"

# The installed command runs from its prefix with no LD_LIBRARY_PATH: it
# links the static library, so it needs no libchameleon.so at all.
tool="$tmp/prefix/bin/chameleon"
[ -x "$tool" ] || fail "no chameleon command installed in $tmp/prefix/bin"
if readelf -d "$tool" | grep NEEDED | grep -E -i 'chameleon|cud'; then
  fail "the installed chameleon command needs the libraries above"
fi
out=$(env -u LD_LIBRARY_PATH "$tool" version) || fail "installed chameleon version failed: $out"
case $out in
  "chameleon "*) ;;
  *) fail "installed chameleon version printed: $out" ;;
esac
# ... and without a CUDA runtime says why it cannot open a cuda device
set +e
out=$("${nocuda[@]}" "$tool" devices --backend cuda 2>&1)
status=$?
set -e
[ "$status" = 1 ] || fail "chameleon devices --backend cuda: exit status $status, want 1: $out"
case $out in
  "cuda: unavailable (device unavailable): cuda: could not load the CUDA runtime named by"*) ;;
  *) fail "chameleon devices --backend cuda printed: $out" ;;
esac
# The Python package, where the build made one, imports from the prefix
# alone (its extension links the library statically).
site=$(find "$tmp/prefix" -type d -name dist-packages | head -1)
if [ -n "$site" ]; then
  [ -d "$site/chameleon" ] || fail "no chameleon package under $site"
  out=$(cd "$tmp" && env -u LD_LIBRARY_PATH PYTHONPATH="$site" /usr/bin/python3 -c \
        'import chameleon; c = chameleon.Context("{}", "install"); print(c.stats()["stage"])') \
    || fail "the installed Python package does not import: $out"
  [ "$out" = WarmUp ] || fail "the installed Python package printed: $out"
fi
echo "install test: pkg-config and find_package builds work, nothing installed needs CUDA"
