#include <reprise/reprise.hpp>

#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

// Asynchronous incremental checkpoints of 64 MiB of protected memory, each
// process to a directory of its own. Stop the program at any step
// (incremental_basics DIR STEPS) or kill it, and start it again: it goes on
// from the newest version. Each version saves only the pages written since
// the one before, in the background, while the loop goes on writing.
int main(int argc, char** argv) {
  reprise::Environment environment(argc, argv);
  const auto comm = reprise::Comm::world();
  constexpr std::size_t kBytes = std::size_t{64} << 20U;
  auto* words = static_cast<std::uint64_t*>(reprise::protected_alloc(kBytes));
  const std::span<std::uint64_t> memory(words, kBytes / sizeof(std::uint64_t));
  const std::string directory =
      std::string(argc > 1 ? argv[1] : "incremental") + "/rank" + std::to_string(comm.original_rank().value());
  reprise::IncrementalCheckpoint checkpoint(directory);
  checkpoint.protect(std::as_writable_bytes(memory));
  if (checkpoint.version() > 0) checkpoint.restore();  // a run before left versions: go on from the newest
  std::uint64_t& step = memory[0];                     // the step count lives in protected memory too
  const std::uint64_t stop = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 100;
  const std::size_t stride = memory.size() / 64;
  while (step < stop) {
    for (std::size_t i = 1 + step % stride; i < memory.size(); i += stride) memory[i] += step;  // 64 pages
    ++step;
    if (step % 10 == 0) checkpoint.checkpoint();  // returns at once; the commit runs in the background
  }
  checkpoint.wait();
  // The words of residue r (every stride-th from 1 + r) hold the sum of the steps s with s % stride == r.
  bool right = true;
  for (std::uint64_t r = 0; r < stride; ++r) {
    std::uint64_t expected = 0;
    for (std::uint64_t s = r; s < stop; s += stride) expected += s;
    for (std::size_t i = 1 + r; i < memory.size(); i += stride) right = right && memory[i] == expected;
  }
  std::printf("process %d: version %llu, step %llu: %s\n", comm.original_rank().value(),
              static_cast<unsigned long long>(checkpoint.version()), static_cast<unsigned long long>(step),
              right ? "CORRECT" : "WRONG");
  return right ? 0 : 1;
}
