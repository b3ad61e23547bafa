#include <reprise/reprise.hpp>

#include <algorithm>
#include <cstdio>
#include <span>
#include <vector>

// The replicated block store: each process submits its 1000 blocks of 64
// bytes, kept on 2 processes. Kill some (REPRISE_FAULTS="1@3" kills
// original rank 1 at step 3): the survivors shrink, heal the store back to
// 2 copies, take over the lost processes' blocks and load them from the
// copies left. At the end every byte of every block is checked.
int main(int argc, char** argv) {
  reprise::Environment environment(argc, argv);
  auto comm = reprise::Comm::world();
  const auto faults = reprise::inject::Schedule::from_env();
  faults.validate(comm.original_size());
  constexpr std::uint64_t kBlocks = 1000, kBlockBytes = 64;
  const auto range_of = [](reprise::OriginalRank owner) {
    const auto first = static_cast<std::uint64_t>(owner.value()) * kBlocks;
    return reprise::BlockRange{reprise::BlockId{first}, reprise::BlockId{first + kBlocks}};
  };
  const auto byte_of = [](std::uint64_t id) { return static_cast<std::byte>(id * 37 % 251); };
  std::vector<reprise::BlockRange> held{range_of(comm.original_rank())};
  std::vector<std::byte> data(kBlocks * kBlockBytes);
  for (std::uint64_t b = 0; b < kBlocks; ++b) {
    std::fill_n(data.begin() + static_cast<std::ptrdiff_t>(b * kBlockBytes), kBlockBytes,
                byte_of(held[0].begin.value + b));
  }
  reprise::Store store(comm, {.copies = 2, .block_bytes = kBlockBytes});
  store.submit(held[0], data);
  reprise::Ownership owners(comm, range_of);
  for (std::uint64_t step = 0; step < 10;) {
    faults.apply(comm.original_rank(), step, comm.is_replacement());
    if (comm.attempt([&] { comm.barrier(); })) {
      ++step;
      continue;
    }
    comm = comm.shrink();
    const auto adopted = owners.adopt_departed(comm);  // the lost processes' blocks, split evenly
    store.heal();                                      // every block back to 2 copies
    const auto old_size = data.size();
    for (const auto& range : adopted) data.resize(data.size() + range.size() * kBlockBytes);
    store.load(adopted, std::span(data).subspan(old_size));
    held.insert(held.end(), adopted.begin(), adopted.end());
  }
  bool right = true;
  std::size_t at = 0;
  for (const auto& range : held) {
    for (auto id = range.begin.value; id < range.end.value; ++id, at += kBlockBytes) {
      right = right && std::all_of(data.begin() + static_cast<std::ptrdiff_t>(at),
                                   data.begin() + static_cast<std::ptrdiff_t>(at + kBlockBytes),
                                   [&](std::byte b) { return b == byte_of(id); });
    }
  }
  const auto blocks = comm.allreduce(static_cast<std::uint64_t>(data.size() / kBlockBytes), MPI_SUM);
  right = comm.allreduce(right ? 1 : 0, MPI_MIN) == 1 && blocks == store.blocks();
  if (comm.rank() == reprise::Rank{0}) {
    std::printf("%d of %d processes hold the %llu blocks: %s\n", comm.size(), comm.original_size(),
                static_cast<unsigned long long>(blocks), right ? "CORRECT" : "WRONG");
  }
  return right ? 0 : 1;
}
