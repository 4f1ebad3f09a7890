// Files that exist whole or not at all (checkpoints): written to PATH.tmp, fsync'd, renamed over PATH, with the
// CRC-32 (zlib) of what was written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zeroplan {

// One piece of a file's contents, in order.
using FilePart = std::pair<const void*, std::size_t>;

// Chunk size of write_file_atomically: large enough that a system call and a CRC restart cost nothing, small
// enough that the threads stay busy to the end of a rank's file.
inline constexpr std::size_t kAtomicWriteChunkBytes = std::size_t{64} << 20;

// Writes the concatenation of `parts` to `path` atomically and returns its CRC-32. The contents are cut into
// chunks of `chunk_bytes` that `threads` threads checksum and pwrite at their offsets, each chunk's write-back
// started at once (sync_file_range), then one fsync, close and rename. Throws std::runtime_error naming the call,
// the path, errno's text and the source position when a system call fails; the temporary file is then removed.
std::uint32_t write_file_atomically(const std::string& path, const std::vector<FilePart>& parts,
                                    std::size_t chunk_bytes = kAtomicWriteChunkBytes, int threads = 0);

// fsync of a directory, so that a rename in it is durable.
void fsync_directory(const std::string& dir);

}  // namespace zeroplan
