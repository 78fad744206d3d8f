#!/usr/bin/env bash
# Installs the built tree into a temporary prefix and builds a small program
# outside the repository against it, once with pkg-config and once with
# CMake's find_package, against both the shared and the static library.
set -euo pipefail
src=$1 build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null

mkdir -p "$tmp/app"
cat > "$tmp/app/main.c" <<'C'
#include <chameleon/chameleon.h>
#include <stdio.h>
int main(void)
{
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
[ -n "$pc" ] || { echo "install test: no chameleon.pc installed" >&2; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
cc=${CC:-cc}
libdir=$(pkg-config --variable=libdir chameleon)
# pkg-config, shared library
$cc -std=c11 -Wall -Wextra -Wpedantic -Werror "$tmp/app/main.c" -o "$tmp/app/shared" \
    $(pkg-config --cflags --libs chameleon)
LD_LIBRARY_PATH="$libdir" "$tmp/app/shared"
# pkg-config, static library: the archive plus its private dependencies
private=()
for f in $(pkg-config --static --libs chameleon); do
  [ "$f" = -lchameleon ] || private+=("$f")
done
$cc -std=c11 -Wall -Wextra -Wpedantic -Werror "$tmp/app/main.c" -o "$tmp/app/static" \
    $(pkg-config --cflags chameleon) "$libdir/libchameleon.a" "${private[@]}"
"$tmp/app/static"
# CMake find_package
cat > "$tmp/app/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(outside C)
find_package(chameleon 0.1 REQUIRED)
add_executable(app_shared main.c)
target_link_libraries(app_shared PRIVATE chameleon::chameleon)
add_executable(app_static main.c)
target_link_libraries(app_static PRIVATE chameleon::chameleon_static)
CM
cmake -S "$tmp/app" -B "$tmp/app/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/app/build" >/dev/null
"$tmp/app/build/app_shared"
"$tmp/app/build/app_static"
echo "install test: pkg-config and find_package builds work"
