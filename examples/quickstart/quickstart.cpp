#include <reprise/reprise.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  reprise::Environment environment(argc, argv);
  auto comm = reprise::Comm::world();
  // Real failures on demand: REPRISE_FAULTS="2@30" kills original rank 2 at step 30.
  const auto faults = reprise::inject::Schedule::from_env();
  faults.validate(comm.original_size());  // a fault for a rank the job lacks is an error
  long total = 0;
  for (int step = 0; step < 100;) {
    faults.apply(comm.original_rank(), static_cast<unsigned>(step), comm.is_replacement());
    long sum = 0;
    if (comm.attempt([&] { sum = comm.allreduce(1L, MPI_SUM); })) {
      total += sum;  // every survivor commits the same steps
      ++step;
    } else {
      comm = comm.shrink();  // or comm.respawn() to get back to full size
    }
  }
  if (comm.rank() == reprise::Rank{0}) {
    std::printf("%d of %d processes finished; total %ld\n", comm.size(), comm.original_size(), total);
  }
}
