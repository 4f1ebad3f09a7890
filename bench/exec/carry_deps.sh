#!/usr/bin/env bash
# The GPU machines (Ubuntu 24.04, no network) lack liburing (the executor's NVMe offload) and may lack zlib's
# headers (checkpoint checksums). This copies this machine's liburing-dev (Debian 12, liburing 2.3) and zlib1g-dev
# (headers and static libraries, position-independent code) into bench/deps/ (git-ignored), liburing with a
# relocatable pkg-config file; carry that folder with the device call (carry=["bench/deps"]); the device scripts
# put liburing on PKG_CONFIG_PATH and point CMake's FindZLIB at bench/deps/zlib when the system has no zlib.h.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=bench/deps/liburing
rm -rf "$DEST"
mkdir -p "$DEST/lib/pkgconfig" "$DEST/include"
cp -r /usr/include/liburing /usr/include/liburing.h "$DEST/include/"
cp /usr/lib/x86_64-linux-gnu/liburing.a "$DEST/lib/"
cat > "$DEST/lib/pkgconfig/liburing.pc" <<'PC'
prefix=${pcfiledir}/../..
libdir=${prefix}/lib
includedir=${prefix}/include

Name: liburing
Version: 2.3
Description: io_uring library (Debian 12's liburing-dev, static, carried to the GPU machines)
Libs: -L${libdir} -luring
Cflags: -I${includedir}
PC
mkdir -p bench/deps/zlib/include bench/deps/zlib/lib
cp /usr/include/zlib.h /usr/include/zconf.h bench/deps/zlib/include/
cp /usr/lib/x86_64-linux-gnu/libz.a bench/deps/zlib/lib/
echo "bench/deps: $(du -sh bench/deps | cut -f1)"
# libaio (Debian's libaio-dev and libaio1: header, shared and static library) for DeepSpeed's async_io op, which
# bench/deepspeed/device_param_nvme.sh builds on the GPU machine (its NVMe offload); taken from this machine's
# packages, or their .debs fetched with apt-get download when they are not installed.
DEST=bench/deps/libaio
rm -rf "$DEST"
mkdir -p "$DEST/include" "$DEST/lib"
if [ -f /usr/include/libaio.h ]; then
  cp /usr/include/libaio.h "$DEST/include/"
  cp -L /usr/lib/x86_64-linux-gnu/libaio.so* /usr/lib/x86_64-linux-gnu/libaio.a "$DEST/lib/"
else
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download libaio-dev libaio1 > /dev/null 2>&1) || { echo "libaio: apt-get download failed"; exit 1; }
  for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/x"; done
  cp "$tmp/x/usr/include/libaio.h" "$DEST/include/"
  cp -L "$tmp"/x/usr/lib/x86_64-linux-gnu/libaio.so* "$tmp/x/usr/lib/x86_64-linux-gnu/libaio.a" "$DEST/lib/"
  rm -rf "$tmp"
fi
echo "bench/deps with libaio: $(du -sh bench/deps | cut -f1)"
